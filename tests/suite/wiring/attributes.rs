//! Confirmations declared by attribute on rmcp `#[tool]` methods: `#[confirm_router]` collects
//! them, the layer enforces them in front of rmcp's own `#[tool_router]` server.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm::rmcp::Confirmation;
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal,
    Revalidation, confirm_router,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ProtocolVersion, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::{ServiceBuilder, ServiceExt};

/// id → (title, version)
type Notes = Arc<Mutex<BTreeMap<String, (String, String)>>>;

#[derive(Clone)]
struct NotesServer {
    notes: Notes,
    tool_router: ToolRouter<Self>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    title: String,
    /// Written in by the layer; travels in `Mcp-Param-Note-Id` too (rmcp checks they agree).
    #[serde(default)]
    #[schemars(extend("x-mcp-header" = "Note-Id"))]
    note_id: Option<String>,
}

fn confirmed(parts: &http::request::Parts) -> Option<&Confirmed> {
    parts.extensions.get::<Confirmed>()
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl NotesServer {
    fn new(notes: Notes) -> Self {
        Self {
            notes,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "List the notes.", annotations(read_only_hint = true))]
    async fn notes_list(&self) -> String {
        let notes = self.notes.lock().unwrap();
        notes.keys().cloned().collect::<Vec<_>>().join(",")
    }

    #[tool(
        description = "Delete one note, chosen by title.",
        annotations(destructive_hint = true)
    )]
    #[confirm(
        pick_one = Self::matching_notes,
        revalidate = Self::still_same,
        message = "Choose one matching note and confirm deletion.",
        input_key = "delete_choice",
        choice_field = "note_id",
        select_into = "note_id"
    )]
    async fn notes_delete(
        &self,
        confirmation: Confirmation,
        Parameters(args): Parameters<DeleteArgs>,
    ) -> Result<String, rmcp::ErrorData> {
        // The typed confirmation: the chosen id and the version the user saw, no `http`, no
        // tool name repeated. The layer also wrote the id into `note_id` (select_into).
        let (id, version) = confirmation.chosen_with_version()?;
        assert_eq!(args.note_id.as_deref(), Some(id));
        assert_eq!(confirmation.tool(), "notes_delete");
        let mut notes = self.notes.lock().unwrap();
        match notes.get(id) {
            Some((_, live)) if Some(live.as_str()) == version => {
                notes.remove(id);
                Ok(format!("Deleted {id} ({})", args.title))
            }
            _ => Ok("Refused: changed".to_owned()),
        }
    }

    /// A tool added later: the attribute alone makes it confirmed.
    #[tool(name = "notes_purge", description = "Delete every note.")]
    #[confirm(message = "Delete every note?")]
    async fn purge(
        &self,
        rmcp::handler::server::common::Extension(parts): rmcp::handler::server::common::Extension<
            http::request::Parts,
        >,
    ) -> String {
        match confirmed(&parts) {
            Some(c) if c.covers("notes_purge", None) => {
                self.notes.lock().unwrap().clear();
                "Purged".to_owned()
            }
            _ => "Refused: not confirmed".to_owned(),
        }
    }

    /// Resolver and revalidation hook as plain functions rather than methods.
    #[tool(description = "Pin one note.", annotations(destructive_hint = false))]
    #[confirm(pick_one = pinnable, revalidate = always_fine, select_into = "note_id")]
    async fn notes_pin(
        &self,
        Parameters(args): Parameters<DeleteArgs>,
        rmcp::handler::server::common::Extension(parts): rmcp::handler::server::common::Extension<
            http::request::Parts,
        >,
    ) -> String {
        let id = args.note_id.unwrap_or_default();
        match confirmed(&parts) {
            Some(c) if c.covers("notes_pin", Some(&id)) => format!("Pinned {id}"),
            _ => "Refused: not confirmed".to_owned(),
        }
    }

    /// Destructive by the spec's default (no annotations), and no `#[confirm]`.
    #[tool(description = "Archive every note.")]
    async fn notes_archive(
        &self,
        rmcp::handler::server::common::Extension(parts): rmcp::handler::server::common::Extension<
            http::request::Parts,
        >,
    ) -> String {
        match confirmed(&parts) {
            Some(c) if c.covers("notes_archive", None) => "Archived".to_owned(),
            _ => "Archived without confirmation".to_owned(),
        }
    }

    /// Not destructive by its own annotation.
    #[tool(description = "Touch a note.", annotations(destructive_hint = false))]
    async fn notes_touch(&self) -> String {
        "Touched".to_owned()
    }

    /// Destructive, but exempted by the deployment (say, the host asks its own question).
    #[tool(description = "Drop the cache.", annotations(destructive_hint = true))]
    async fn notes_drop_cache(&self) -> String {
        "Dropped".to_owned()
    }

    async fn matching_notes(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let title = lookup.arguments["title"].as_str().unwrap_or_default();
        let notes = self
            .notes
            .lock()
            .map_err(|_| PolicyError::new("poisoned"))?;
        Ok(notes
            .iter()
            .filter(|(_, (t, _))| t == title)
            .map(|(id, (t, v))| Candidate::labelled(id, format!("{id}: {t}")).with_version(v))
            .collect())
    }

    async fn still_same(&self, check: Revalidation) -> Result<(), Refusal> {
        let notes = self.notes.lock().map_err(|_| Refusal::new("poisoned"))?;
        let id = check.chosen.unwrap_or_default();
        match notes.get(&id) {
            Some((_, version)) if Some(version) == check.seen_version.as_ref() => Ok(()),
            _ => Err(Refusal::new("the note changed")),
        }
    }
}

async fn pinnable(lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
    let title = lookup.arguments["title"].as_str().unwrap_or_default();
    Ok(vec![
        Candidate::labelled("pin-1", format!("{title} (first)")).with_version("p1"),
        Candidate::labelled("pin-2", format!("{title} (second)")).with_version("p2"),
    ])
}

async fn always_fine(check: Revalidation) -> Result<(), Refusal> {
    match check.seen_version.as_deref() {
        Some("p1" | "p2") => Ok(()),
        _ => Err(Refusal::new("unexpected version")),
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for NotesServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

fn seeded() -> Notes {
    Arc::new(Mutex::new(BTreeMap::from([
        (
            "note-3".to_owned(),
            ("Groceries".to_owned(), "v3".to_owned()),
        ),
        (
            "note-7".to_owned(),
            ("Groceries".to_owned(), "v7".to_owned()),
        ),
        ("note-9".to_owned(), ("Taxes".to_owned(), "v9".to_owned())),
    ])))
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}})
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
           "params":{"_meta":meta(),"name":tool,"arguments":arguments}})
}

fn post(body: &Value) -> http::Request<Full<Bytes>> {
    post_with(body, &[])
}

fn post_with(body: &Value, extra: &[(&str, &str)]) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or_default());
    if let Some(name) = body["params"]["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let mut request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    request.extensions_mut().insert(Principal::new("alice"));
    request
}

async fn answer<S, B>(svc: &S, body: &Value) -> Value
where
    S: tower::Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    answer_request(svc, post(body)).await
}

async fn answer_request<S, B>(svc: &S, request: http::Request<Full<Bytes>>) -> Value
where
    S: tower::Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = svc.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .next_back()
        .map(str::trim)
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

type Service = mcp_confirm::Confirm<StreamableHttpService<NotesServer, LocalSessionManager>>;

/// A builder with the tests' key and audience, and nothing else.
fn builder() -> mcp_confirm::ConfirmLayerBuilder {
    ConfirmLayer::builder(KeyRing::single("k1", crate::common::secret(7)).unwrap())
        .audience("https://notes.example/mcp")
}

/// A layer configured only from the server's attributes: its policies and tool definitions.
fn declared(server: &NotesServer) -> mcp_confirm::ConfirmLayerBuilder {
    builder().declarations(server.confirm_declarations())
}

/// [`declared`], with the two destructive tools that have no `#[confirm]` exempt (the layer
/// does not build until each destructive tool is confirmed or exempt).
fn layer(server: &NotesServer) -> mcp_confirm::ConfirmLayerBuilder {
    declared(server)
        .exempt("notes_archive")
        .exempt("notes_drop_cache")
}

/// rmcp's stateless server behind `confirm`, answering in JSON or, with `json` false, in SSE.
fn behind(confirm: ConfirmLayer, server: NotesServer, json: bool) -> Service {
    let rmcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_sse_keep_alive(None)
            .with_json_response(json),
    );
    ServiceBuilder::new().layer(confirm).service(rmcp)
}

/// rmcp's server behind the layer `configure` builds from the defaults of [`layer`].
fn service_with(
    server: NotesServer,
    configure: impl FnOnce(mcp_confirm::ConfirmLayerBuilder) -> mcp_confirm::ConfirmLayerBuilder,
) -> Service {
    behind(configure(layer(&server)).build(), server, true)
}

/// rmcp's server behind the layer `configure` builds from [`declared`] (nothing exempt).
fn service_declared(
    server: NotesServer,
    configure: impl FnOnce(mcp_confirm::ConfirmLayerBuilder) -> mcp_confirm::ConfirmLayerBuilder,
) -> Service {
    behind(configure(declared(&server)).build(), server, true)
}

/// The retry of `tool` with `arguments` under id `id`, answering the form of `first` with
/// `responses`.
fn retry(first: &Value, id: u64, tool: &str, arguments: Value, responses: Value) -> Value {
    let state = first["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("no requestState in {first}"));
    let mut retry = call(id, tool, arguments);
    retry["params"]["requestState"] = json!(state);
    retry["params"]["inputResponses"] = responses;
    retry
}

/// Accepting the `delete_choice` form with `note_id`.
fn choose(note_id: &str) -> Value {
    json!({"delete_choice":{"action":"accept","content":{"note_id":note_id,"confirm":true}}})
}

fn service(server: NotesServer) -> Service {
    service_with(server, |builder| builder)
}

/// Accepts the single form of `first` (confirm-only) on a retry of `tool` with id `id`.
async fn accept_confirm_only(svc: &Service, first: &Value, tool: &str, id: u64) -> Value {
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let key = first["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let responses = json!({key: {"action":"accept","content":{"confirm":true}}});
    answer(svc, &retry(first, id, tool, json!({}), responses)).await
}

#[test]
fn confirm_router_collects_each_confirmed_tool_by_its_tool_name() {
    let server = NotesServer::new(seeded());
    let names: Vec<String> = server
        .confirm_policies()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    // `#[tool(name = …)]` wins over the method name; unconfirmed tools are absent.
    assert_eq!(names, ["notes_delete", "notes_purge", "notes_pin"]);
}

#[tokio::test]
async fn a_pick_one_tool_declared_by_attribute_is_confirmed_end_to_end() {
    let notes = seeded();
    let svc = service(NotesServer::new(Arc::clone(&notes)));

    let first = answer(&svc, &call(1, "notes_delete", json!({"title":"Groceries"}))).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let form = &first["result"]["inputRequests"]["delete_choice"]["params"];
    assert_eq!(
        form["message"],
        "Choose one matching note and confirm deletion."
    );
    let ids: Vec<&str> = form["requestedSchema"]["properties"]["note_id"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["const"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["note-3", "note-7"]);

    let groceries = || json!({"title":"Groceries"});
    let accept_7 = retry(&first, 2, "notes_delete", groceries(), choose("note-7"));
    let done = answer(&svc, &accept_7).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted note-7 (Groceries)",
        "{done}"
    );
    let left: Vec<String> = notes.lock().unwrap().keys().cloned().collect();
    assert_eq!(left, ["note-3", "note-9"]);

    // The attribute's revalidation hook runs: an edited note is not deleted by an old approval.
    let again = answer(&svc, &call(3, "notes_delete", json!({"title":"Groceries"}))).await;
    notes.lock().unwrap().get_mut("note-3").unwrap().1 = "v3-edited".to_owned();
    let accept_3 = retry(&again, 4, "notes_delete", groceries(), choose("note-3"));
    let revoked = answer(&svc, &accept_3).await;
    assert_eq!(
        revoked["result"]["_meta"]["io.github.mcp-confirm/outcome"], "revoked",
        "{revoked}"
    );
    assert!(notes.lock().unwrap().contains_key("note-3"));
}

#[tokio::test]
async fn a_tool_added_with_the_attribute_alone_is_confirmed() {
    let notes = seeded();
    let svc = service(NotesServer::new(Arc::clone(&notes)));
    let first = answer(&svc, &call(1, "notes_purge", json!({}))).await;
    assert_eq!(
        notes.lock().unwrap().len(),
        3,
        "nothing ran before the answer"
    );
    let done = accept_confirm_only(&svc, &first, "notes_purge", 2).await;
    assert_eq!(done["result"]["content"][0]["text"], "Purged", "{done}");
    assert!(notes.lock().unwrap().is_empty());

    // An unconfirmed tool of the same server passes straight through.
    let listed = answer(&svc, &call(3, "notes_list", json!({}))).await;
    assert_eq!(listed["result"]["content"][0]["text"], "", "{listed}");
}

#[tokio::test]
async fn confirm_destructive_confirms_what_the_annotations_say_is_destructive() {
    let svc = service_declared(NotesServer::new(seeded()), |b| {
        b.confirm_destructive().exempt("notes_drop_cache")
    });
    // No annotations, no attribute: destructive by default, so confirmed.
    let first = answer(&svc, &call(1, "notes_archive", json!({}))).await;
    let done = accept_confirm_only(&svc, &first, "notes_archive", 2).await;
    assert_eq!(done["result"]["content"][0]["text"], "Archived", "{done}");
    // Read-only, or `destructiveHint: false`: never.
    let listed = answer(&svc, &call(3, "notes_list", json!({}))).await;
    assert_eq!(
        listed["result"]["content"][0]["text"],
        "note-3,note-7,note-9"
    );
    let touched = answer(&svc, &call(4, "notes_touch", json!({}))).await;
    assert_eq!(touched["result"]["content"][0]["text"], "Touched");
    // Exempt: passes through.
    let dropped = answer(&svc, &call(5, "notes_drop_cache", json!({}))).await;
    assert_eq!(dropped["result"]["content"][0]["text"], "Dropped");
    // The attribute's richer policy still wins over the default confirm-only one.
    let delete = answer(&svc, &call(6, "notes_delete", json!({"title":"Groceries"}))).await;
    assert!(
        delete["result"]["inputRequests"]["delete_choice"].is_object(),
        "{delete}"
    );

    // Exempt instead, the same tool runs unconfirmed: the test above is not vacuous.
    let plain = service(NotesServer::new(seeded()));
    let archived = answer(&plain, &call(1, "notes_archive", json!({}))).await;
    assert_eq!(
        archived["result"]["content"][0]["text"],
        "Archived without confirmation"
    );
}

#[test]
fn confirm_destructive_and_exempt_are_checked_when_the_layer_is_built() {
    let server = NotesServer::new(seeded());
    let bare = builder;
    let err = bare().confirm_destructive().try_build().unwrap_err();
    assert_eq!(err, mcp_confirm::ConfigError::MissingToolList);
    let err = layer(&server).exempt("notes_nope").try_build().unwrap_err();
    assert!(
        matches!(err, mcp_confirm::ConfigError::InvalidToolList(_)),
        "{err}"
    );
    let err = layer(&server)
        .confirm_destructive()
        .exempt("notes_delete")
        .try_build()
        .unwrap_err();
    assert!(
        matches!(err, mcp_confirm::ConfigError::InvalidPolicy(_)),
        "{err}"
    );
    let err = bare()
        .tool_list(json!({"tools": "nope"}))
        .try_build()
        .unwrap_err();
    assert!(
        matches!(err, mcp_confirm::ConfigError::InvalidToolList(_)),
        "{err}"
    );
}

#[tokio::test]
async fn the_param_header_follows_the_tools_x_mcp_header_schema() {
    // With the tool list, the rewritten `note_id` also travels in `Mcp-Param-Note-Id`, which
    // rmcp checks against the body.
    let notes = seeded();
    let svc = service(NotesServer::new(Arc::clone(&notes)));
    let done = delete_groceries(&svc, "note-3").await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted note-3 (Groceries)",
        "{done}"
    );

    // Without it (and without select_header) rmcp refuses the rewritten call: -32020.
    let bare = {
        let server = NotesServer::new(seeded());
        let confirm = builder()
            .tools(server.confirm_policies())
            .without_tool_list_unchecked()
            .build();
        behind(confirm, server, true)
    };
    let refused = delete_groceries(&bare, "note-3").await;
    assert_eq!(refused["error"]["code"], -32020, "{refused}");

    // A select_header that contradicts the schema is a configuration error.
    let server = NotesServer::new(seeded());
    let mut policies = server.confirm_policies();
    policies[0].1 = policies[0].1.clone().select_header("Other");
    let err = builder()
        .tools(policies)
        .tool_list(NotesServer::tool_router().list_all())
        .exempt("notes_archive")
        .exempt("notes_drop_cache")
        .try_build()
        .unwrap_err();
    assert!(
        matches!(err, mcp_confirm::ConfigError::InvalidPolicy(_)),
        "{err}"
    );
}

#[tokio::test]
async fn the_layers_own_results_carry_the_server_info() {
    let info = json!({"name":"notes","version":"1.2.3"});
    let svc = service_with(NotesServer::new(seeded()), |b| b.server_info(info.clone()));
    let first = answer(&svc, &call(1, "notes_delete", json!({"title":"Groceries"}))).await;
    assert_eq!(
        first["result"]["_meta"]["io.modelcontextprotocol/serverInfo"], info,
        "{first}"
    );
    let none = answer(&svc, &call(2, "notes_delete", json!({"title":"Nothing"}))).await;
    assert_eq!(
        none["result"]["_meta"]["io.modelcontextprotocol/serverInfo"], info,
        "{none}"
    );
    assert_eq!(
        none["result"]["_meta"]["io.github.mcp-confirm/outcome"],
        "no_candidates"
    );
    // Without it, no serverInfo is invented.
    let svc = service(NotesServer::new(seeded()));
    let first = answer(&svc, &call(1, "notes_delete", json!({"title":"Groceries"}))).await;
    assert!(first["result"].get("_meta").is_none(), "{first}");
    // A malformed info is refused at build time.
    let err = layer(&NotesServer::new(seeded()))
        .server_info(json!({"name":"notes"}))
        .try_build()
        .unwrap_err();
    assert_eq!(err, mcp_confirm::ConfigError::InvalidServerInfo);
}

/// Deletes `id` among the "Groceries" notes through both rounds; the final answer.
async fn delete_groceries(svc: &Service, id: &str) -> Value {
    let first = answer(svc, &call(1, "notes_delete", json!({"title":"Groceries"}))).await;
    let groceries = json!({"title":"Groceries"});
    answer(
        svc,
        &retry(&first, 2, "notes_delete", groceries, choose(id)),
    )
    .await
}

/// The same server with rmcp answering in SSE rather than JSON.
fn sse_service(server: NotesServer) -> Service {
    behind(layer(&server).build(), server, false)
}

fn list_request() -> Value {
    json!({"jsonrpc":"2.0","id":"l","method":"tools/list","params":{"_meta":meta()}})
}

/// The `_meta` mark of each listed tool, by name.
fn marks(listed: &Value) -> BTreeMap<String, Value> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| {
            let mark = t["_meta"]["io.github.mcp-confirm/confirmation"].clone();
            (t["name"].as_str().unwrap().to_owned(), mark)
        })
        .collect()
}

#[tokio::test]
async fn tools_list_marks_the_tools_the_layer_confirms_in_json_and_sse() {
    for svc in [
        service(NotesServer::new(seeded())),
        sse_service(NotesServer::new(seeded())),
    ] {
        let listed = answer(&svc, &list_request()).await;
        let marks = marks(&listed);
        assert_eq!(
            marks["notes_delete"],
            json!({"kind":"pick_one"}),
            "{listed}"
        );
        assert_eq!(marks["notes_purge"], json!({"kind":"confirm"}));
        for unconfirmed in [
            "notes_list",
            "notes_archive",
            "notes_touch",
            "notes_drop_cache",
        ] {
            assert_eq!(marks[unconfirmed], Value::Null, "{unconfirmed}: {listed}");
        }
        // Everything else is the server's own answer.
        let delete = listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "notes_delete")
            .unwrap();
        assert_eq!(delete["annotations"]["destructiveHint"], true);
        assert_eq!(
            delete["inputSchema"]["properties"]["note_id"]["x-mcp-header"],
            "Note-Id"
        );
    }
    // With confirm_destructive, the tools it confirms are marked too.
    let svc = service_declared(NotesServer::new(seeded()), |b| {
        b.confirm_destructive().exempt("notes_drop_cache")
    });
    let marks = marks(&answer(&svc, &list_request()).await);
    assert_eq!(marks["notes_archive"], json!({"kind":"confirm"}));
    assert_eq!(marks["notes_drop_cache"], Value::Null);
}

#[tokio::test]
async fn the_message_service_marks_tools_list_answers_too() {
    use mcp_confirm::{JsonRpcMessage, JsonRpcReply};
    let server = NotesServer::new(seeded());
    let list = json!({"jsonrpc":"2.0","id":1,"result":{"tools":
        NotesServer::tool_router().list_all()}});
    let inner = tower::service_fn(move |_msg: JsonRpcMessage| {
        let list = list.clone();
        async move { Ok::<_, std::convert::Infallible>(JsonRpcReply::message(list.to_string())) }
    });
    let svc = ServiceBuilder::new()
        .layer(layer(&server).build())
        .service(inner);
    let request = JsonRpcMessage::new(list_request().to_string());
    let reply = svc.oneshot(request).await.unwrap();
    let listed: Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    assert_eq!(marks(&listed)["notes_delete"], json!({"kind":"pick_one"}));
    assert_eq!(marks(&listed)["notes_list"], Value::Null);
}

#[tokio::test]
async fn a_clients_own_param_header_cannot_redirect_the_rewritten_argument() {
    // The client sends `Mcp-Param-Note-Id: note-3` (and `note_id: note-3` in the body) but the
    // user chose note-7: the layer writes the choice into both, so note-7 alone is deleted.
    let notes = seeded();
    let svc = service(NotesServer::new(Arc::clone(&notes)));
    let first = answer(&svc, &call(1, "notes_delete", json!({"title":"Groceries"}))).await;
    let sneaky = json!({"title":"Groceries","note_id":"note-3"});
    let accept_7 = retry(&first, 2, "notes_delete", sneaky, choose("note-7"));
    let done = answer_request(
        &svc,
        post_with(&accept_7, &[("mcp-param-note-id", "note-3")]),
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted note-7 (Groceries)",
        "{done}"
    );
    let left: Vec<String> = notes.lock().unwrap().keys().cloned().collect();
    assert_eq!(left, ["note-3", "note-9"]);
}

#[tokio::test]
async fn tools_list_answers_malformed_pass_through_untouched_and_too_large_do_not_pass() {
    use http_body_util::Full;
    let server = NotesServer::new(seeded());
    // One that is not JSON, and one that lists a confirmed tool but whose `_meta` is not an
    // object: each comes back byte for byte. An answer over `max_listing_bytes` does not come
    // back at all: a JSON-RPC error for the request does. (Under a larger cap it would be
    // marked; see `tools_list_marks_the_tools_the_layer_confirms_in_json_and_sse`.)
    let big = json!({"jsonrpc":"2.0","id":"l","result":{"tools":[
        {"name":"notes_delete","description": "x".repeat(2048)}]}})
    .to_string();
    let odd =
        r#"{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"notes_delete","_meta":[1]}]}}"#;
    for (body, cap, untouched) in [
        (big.as_str(), 1024, false),
        ("not json at all", 1 << 20, true),
        (odd, 1 << 20, true),
    ] {
        let sent = body.to_owned();
        let body = body.to_owned();
        let inner = tower::service_fn(
            move |_req: http::Request<mcp_confirm::body::RequestBody<Full<Bytes>>>| {
                let body = body.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .header("content-type", "application/json")
                            .header("content-length", body.len())
                            .body(Full::new(Bytes::from(body)))
                            .unwrap(),
                    )
                }
            },
        );
        let svc = ServiceBuilder::new()
            .layer(layer(&server).max_listing_bytes(cap).build())
            .service(inner);
        let response = svc.oneshot(post(&list_request())).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let got = String::from_utf8(bytes.to_vec()).unwrap();
        if untouched {
            assert_eq!(got, sent);
        } else {
            let got: Value = serde_json::from_str(&got).unwrap();
            assert_eq!(got["id"], "l", "{got}");
            assert_eq!(
                got["error"]["data"]["reason"], "listing_unreadable",
                "{got}"
            );
        }
    }
}

#[tokio::test]
async fn resolvers_and_hooks_may_be_plain_functions() {
    let svc = service(NotesServer::new(seeded()));
    let first = answer(&svc, &call(1, "notes_pin", json!({"title":"Groceries"}))).await;
    let key = first["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("{first}"))
        .keys()
        .next()
        .unwrap()
        .clone();
    let schema = &first["result"]["inputRequests"][&key]["params"]["requestedSchema"];
    let field = schema["properties"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, p)| p.get("oneOf").is_some())
        .map(|(name, _)| name.clone())
        .unwrap();
    let titles: Vec<&str> = schema["properties"][&field]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Groceries (first)", "Groceries (second)"]);
    let responses = json!({key: {"action":"accept","content":{field: "pin-2", "confirm": true}}});
    let accept = retry(
        &first,
        2,
        "notes_pin",
        json!({"title":"Groceries"}),
        responses,
    );
    let done = answer(&svc, &accept).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Pinned pin-2",
        "{done}"
    );
}

/// A response body yielding each chunk as its own frame, as a streaming server would.
struct Chunks(std::vec::IntoIter<&'static str>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.0.next();
        std::task::Poll::Ready(
            next.map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes())))),
        )
    }
}

/// The layer (from `server`'s attributes and tool list) in front of an inner service that answers
/// `tools/list` with `chunks` as a `content_type` body; the body that comes out.
async fn listed_through_layer(
    server: &NotesServer,
    content_type: &'static str,
    chunks: Vec<&'static str>,
) -> String {
    let inner = tower::service_fn(
        move |_req: http::Request<mcp_confirm::body::RequestBody<Full<Bytes>>>| {
            let chunks = chunks.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", content_type)
                        .body(Chunks(chunks.into_iter()))
                        .unwrap(),
                )
            }
        },
    );
    let svc = ServiceBuilder::new()
        .layer(layer(server).build())
        .service(inner);
    let response = svc.oneshot(post(&list_request())).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn sse_answers_with_crlf_lines_and_split_events_keep_their_framing() {
    let server = NotesServer::new(seeded());
    // CRLF line ends (as sse-starlette writes them), a priming event, and the answer split
    // across reads in the middle of its blank line.
    let out = listed_through_layer(
        &server,
        "text/event-stream",
        vec![
            "id: 0\r\nretry: 3000\r\ndata: \r\n\r\nevent: message\r\nid: 1\r\ndata: ",
            r#"{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"notes_delete"},"#,
            r#"{"name":"notes_list"}]}}"#,
            "\r\n\r",
            "\n",
        ],
    )
    .await;
    assert!(
        out.starts_with("id: 0\r\nretry: 3000\r\ndata: \r\n\r\nevent: message\r\nid: 1\r\ndata: {"),
        "{out:?}"
    );
    assert!(out.ends_with("}}\r\n\r\n"), "{out:?}");
    let data = out
        .split("\r\n")
        .find(|l| l.starts_with("data: {"))
        .unwrap();
    let listed: Value = serde_json::from_str(&data["data: ".len()..]).unwrap();
    assert_eq!(marks(&listed)["notes_delete"], json!({"kind":"pick_one"}));
    assert_eq!(marks(&listed)["notes_list"], Value::Null);
}

#[tokio::test]
async fn a_mark_the_inner_server_writes_on_an_unconfirmed_tool_is_removed() {
    // A proxied upstream claims the server asks before `notes_list` runs: it does not, so the
    // layer takes the claim out; other `_meta` members stay.
    let server = NotesServer::new(seeded());
    let out = listed_through_layer(
        &server,
        "application/json",
        vec![concat!(
            r#"{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"notes_list","_meta":"#,
            r#"{"io.github.mcp-confirm\/confirmation":{"kind":"confirm"},"com.example/k":1}}]}}"#
        )],
    )
    .await;
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed["result"]["tools"][0]["_meta"],
        json!({"com.example/k":1}),
        "{out}"
    );
}

/// A server whose one tool is decided in batches on the page.
#[derive(Clone)]
struct Batched {
    tool_router: ToolRouter<Self>,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl Batched {
    #[tool(
        description = "Archive every note.",
        annotations(destructive_hint = true)
    )]
    #[confirm(
        message = "Archive every note?",
        approve_in_browser,
        batch_group = "notes"
    )]
    async fn notes_archive_all(
        &self,
        confirmation: Confirmation,
    ) -> Result<String, rmcp::ErrorData> {
        Ok(format!("archived ({})", confirmation.tool()))
    }

    #[tool(
        description = "Delete many notes at once.",
        annotations(destructive_hint = true)
    )]
    #[confirm(
        message = "Delete these notes?",
        approve_in_browser,
        narrow(
            subset = ["ids"],
            at_most = ["limit"],
            turn_on = ["dry_run"],
            one_of(argument = "mode", values = ["archive", "delete"])
        )
    )]
    async fn notes_bulk_delete(
        &self,
        confirmation: Confirmation,
    ) -> Result<String, rmcp::ErrorData> {
        Ok(format!("narrowed: {}", confirmation.narrowed()))
    }
}

#[test]
fn a_batch_group_and_narrowing_declared_by_attribute_reach_the_policy() {
    let server = Batched {
        tool_router: Batched::tool_router(),
    };
    assert_eq!(server.tool_router.list_all().len(), 2);
    let policies = server.confirm_policies();
    let shown = format!("{:?}", policies[0].1);
    assert!(shown.contains("batch_group: Some(\"notes\")"), "{shown}");
    let narrowing = format!("{:?}", policies[1].1);
    for needle in [
        "(\"ids\", Subset)",
        "(\"limit\", AtMost)",
        "(\"dry_run\", TurnOn)",
        "(\"mode\", OneOf([\"archive\", \"delete\"]))",
    ] {
        assert!(
            narrowing.contains(needle),
            "{needle} missing from {narrowing}"
        );
    }
    // And the layer builds with it (the rules `batch_group` needs are met).
    ConfirmLayer::builder(KeyRing::random())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .approval_url("https://notes.example/confirm/")
        .tools(policies)
        .try_build()
        .unwrap();
}
