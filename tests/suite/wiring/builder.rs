//! Safe by construction: the wiring mistakes a hurried user makes with an rmcp server — forgetting
//! the layer, forgetting to hand it the declared policies, a typo in a value — either do not
//! build, or refuse at run time with nothing changed and nothing spent. Plus what the fixes give:
//! the typed `Confirmation`, forms that say what they confirm, conditional confirmation.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm::rmcp::Confirmation;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::testing::TestClient;
use mcp_confirm::{
    Candidate, ConfigError, ConfirmLayer, ConfirmLayerBuilder, KeyRing, Lookup, PolicyError,
    Principal, Refusal, Revalidation, ToolPolicy, WaiverReason, confirm_router,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ProtocolVersion, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceBuilder;

/// path → version
type Files = Arc<Mutex<BTreeMap<String, String>>>;

#[derive(Clone)]
struct FilesServer {
    files: Files,
    tool_router: ToolRouter<Self>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// Files whose name contains this (read by the resolver from the raw arguments).
    #[allow(dead_code)]
    pattern: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct WipeArgs {
    /// Under which directory.
    #[allow(dead_code)]
    dir: String,
    #[allow(dead_code)]
    recursive: bool,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct TrimArgs {
    /// How many of the oldest files to delete.
    count: i64,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl FilesServer {
    fn new(files: Files) -> Self {
        Self {
            files,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "List the files.", annotations(read_only_hint = true))]
    async fn files_list(&self) -> String {
        let files = self.files.lock().unwrap();
        files.keys().cloned().collect::<Vec<_>>().join(",")
    }

    /// The user picks one matching file; the handler reads the choice from its `Confirmation`.
    #[tool(description = "Delete one file.", annotations(destructive_hint = true))]
    #[confirm(
        pick_one = Self::matching_files,
        revalidate = Self::still_the_same,
        message = "Choose the file to delete."
    )]
    async fn files_delete(
        &self,
        confirmation: Confirmation,
        Parameters(_args): Parameters<DeleteArgs>,
    ) -> Result<String, ErrorData> {
        let (path, version) = confirmation.chosen_with_version()?;
        let mut files = self.files.lock().unwrap();
        match files.get(path) {
            Some(live) if Some(live.as_str()) == version => {
                files.remove(path);
                Ok(format!("Deleted {path}"))
            }
            _ => Ok("Refused: the file changed".to_owned()),
        }
    }

    /// Marked destructive by its annotations only, and written like a careless handler: it does
    /// not look at any confirmation itself.
    #[tool(
        description = "Wipe every file.",
        annotations(title = "Wipe files", destructive_hint = true)
    )]
    async fn files_wipe(&self, Parameters(_args): Parameters<WipeArgs>) -> String {
        self.files.lock().unwrap().clear();
        "Wiped".to_owned()
    }

    /// Confirmed only when it deletes more than three files.
    #[tool(
        description = "Delete the oldest files.",
        annotations(destructive_hint = true)
    )]
    #[confirm(when = Self::more_than_three, message = "Delete these files?")]
    async fn files_trim(
        &self,
        confirmation: Confirmation,
        Parameters(args): Parameters<TrimArgs>,
    ) -> String {
        let mut files = self.files.lock().unwrap();
        let oldest: Vec<String> = files.keys().take(args.count as usize).cloned().collect();
        for path in &oldest {
            files.remove(path);
        }
        let how = match confirmation.waived() {
            Some(WaiverReason::ConditionFalse) => "without asking",
            _ => "confirmed",
        };
        format!("Trimmed {} ({how})", oldest.len())
    }

    async fn matching_files(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let pattern = lookup.arguments["pattern"].as_str().unwrap_or_default();
        let files = self
            .files
            .lock()
            .map_err(|_| PolicyError::new("poisoned"))?;
        Ok(files
            .iter()
            .filter(|(path, _)| path.contains(pattern))
            .map(|(path, version)| Candidate::labelled(path, path).with_version(version))
            .collect())
    }

    async fn still_the_same(&self, check: Revalidation) -> Result<(), Refusal> {
        let files = self.files.lock().map_err(|_| Refusal::new("poisoned"))?;
        match files.get(check.chosen.as_deref().unwrap_or_default()) {
            Some(live) if Some(live) == check.seen_version.as_ref() => Ok(()),
            _ => Err(Refusal::new("the file changed")),
        }
    }

    async fn more_than_three(&self, lookup: Lookup) -> Result<bool, PolicyError> {
        match lookup.arguments["count"].as_i64() {
            Some(count) if count >= 0 => Ok(count > 3),
            _ => Err(PolicyError::new("count must be a non-negative integer")),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FilesServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

/// The same tools, with a typo in `select_into`: `chosen_paht` for the `chosen_path` argument.
#[derive(Clone)]
struct TypoServer {
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct TypoArgs {
    #[allow(dead_code)]
    pattern: String,
    #[serde(default)]
    #[allow(dead_code)]
    chosen_path: Option<String>,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl TypoServer {
    #[tool(description = "Delete one file.", annotations(destructive_hint = true))]
    #[confirm(pick_one = Self::matching, select_into = "chosen_paht")]
    async fn files_delete(&self, Parameters(_args): Parameters<TypoArgs>) -> String {
        "Deleted".to_owned()
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(vec![Candidate::new("a.txt").with_version("v1")])
    }
}

fn seeded() -> Files {
    Arc::new(Mutex::new(BTreeMap::from([
        ("a.txt".to_owned(), "v1".to_owned()),
        ("b.txt".to_owned(), "v1".to_owned()),
        ("notes/b.txt".to_owned(), "v1".to_owned()),
        ("c.log".to_owned(), "v1".to_owned()),
        ("d.log".to_owned(), "v1".to_owned()),
    ])))
}

fn everything() -> Vec<String> {
    seeded().lock().unwrap().keys().cloned().collect()
}

fn left(files: &Files) -> Vec<String> {
    files.lock().unwrap().keys().cloned().collect()
}

type Rmcp = StreamableHttpService<FilesServer, LocalSessionManager>;

fn rmcp(server: FilesServer) -> Rmcp {
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_sse_keep_alive(None)
            .with_json_response(true),
    )
}

fn builder(store: &MemoryReplayStore) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(KeyRing::single("k1", crate::common::secret(7)).unwrap())
        .audience("https://files.example/mcp")
        .replay_store(store.clone())
}

fn alice() -> Principal {
    Principal::new("alice")
}

/// The layer the README shows: the declarations in one call, every other destructive tool
/// confirmed with the generic form.
fn wired(files: &Files, store: &MemoryReplayStore) -> mcp_confirm::Confirm<Rmcp> {
    let server = FilesServer::new(Arc::clone(files));
    let layer = builder(store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .build();
    ServiceBuilder::new().layer(layer).service(rmcp(server))
}

fn refused_without_confirmation(round: &mcp_confirm::testing::Round) {
    assert_eq!(round.error_code(), Some(-32603), "{:?}", round.message);
    assert_eq!(
        round.message["error"]["data"]["reason"], "confirmation_missing",
        "{:?}",
        round.message
    );
}

#[tokio::test]
async fn forgetting_the_layer_runs_no_confirmed_or_destructive_tool() {
    // Finding 2: the server mounted without the layer (or a route around it). Empty client
    // capabilities, as in the report.
    let files = seeded();
    let mut client = TestClient::new(rmcp(FilesServer::new(Arc::clone(&files))))
        .principal(alice())
        .capabilities(json!({}));
    let wipe = client
        .call("files_wipe", json!({"dir": "/", "recursive": true}))
        .await;
    refused_without_confirmation(&wipe);
    let delete = client.call("files_delete", json!({"pattern": "b"})).await;
    refused_without_confirmation(&delete);
    let trim = client.call("files_trim", json!({"count": 1})).await;
    refused_without_confirmation(&trim);
    assert_eq!(left(&files), everything());
    // Read-only tools are not guarded.
    let listed = client.call("files_list", json!({})).await;
    assert_eq!(listed.text(), Some("a.txt,b.txt,c.log,d.log,notes/b.txt"));
}

#[test]
fn forgetting_the_declarations_does_not_build() {
    // Finding 1: whatever is forgotten, the layer names what is missing.
    let server = FilesServer::new(seeded());
    let store = MemoryReplayStore::new();
    let list = || FilesServer::tool_router().list_all();
    // Nothing at all: no tool list, no way to check anything.
    let err = builder(&store).try_build().unwrap_err();
    assert_eq!(err, ConfigError::MissingToolList);
    // The policies without the definitions.
    let err = builder(&store)
        .tools(server.confirm_policies())
        .try_build()
        .unwrap_err();
    assert_eq!(err, ConfigError::MissingToolList);
    // The definitions (and confirm_destructive) without the policies: the marks give it away,
    // instead of a silent downgrade to the generic yes/no form.
    let err = builder(&store)
        .tool_list(list())
        .confirm_destructive()
        .try_build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::DeclaredWithoutPolicy("files_delete".into())
    );
    assert!(err.to_string().contains(".declarations("), "{err}");
    // The declarations, with an annotation-only destructive tool nobody confirms or exempts.
    let err = builder(&store)
        .declarations(server.confirm_declarations())
        .try_build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::UnconfirmedDestructiveTool("files_wipe".into())
    );
    // A policy of another kind than the one declared.
    let err = builder(&store)
        .tool_list(list())
        .tool("files_delete", ToolPolicy::confirm_only())
        .tool("files_trim", ToolPolicy::confirm_only())
        .exempt("files_wipe")
        .try_build()
        .unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidPolicy(why) if why.contains("files_delete") && why.contains("pick_one")),
        "{err}"
    );
    // A policy under a misspelt name.
    let err = builder(&store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .tool("files_delte", ToolPolicy::confirm_only())
        .try_build()
        .unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidToolList(why) if why.contains("files_delte")),
        "{err}"
    );
    // Exempting a tool declared with #[confirm] contradicts the declaration.
    let err = builder(&store)
        .declarations(server.confirm_declarations())
        .exempt("files_delete")
        .exempt("files_wipe")
        .try_build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidPolicy(_)), "{err}");
    // Done right, it builds: in one call, or with the definitions again from the router.
    builder(&store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .try_build()
        .unwrap();
    builder(&store)
        .declarations(server.confirm_declarations())
        .tool_list(list())
        .exempt("files_wipe")
        .try_build()
        .unwrap();
}

/// A browser-approved tool on a replay store given without an approval store does not build
/// (before the split it built, and every such call then failed at run time); `.store()` gives
/// one store for both, and with no store at all the default memory store keeps both.
#[test]
fn a_browser_approved_tool_needs_an_approval_store() {
    let browser = || {
        ConfirmLayer::builder(KeyRing::random())
            .without_tool_list_unchecked()
            .audience("https://files.example/mcp")
            .approval_url("http://files.example/confirm/")
            .tool(
                "files_wipe",
                ToolPolicy::confirm_only().approve_in_browser(),
            )
    };
    let err = browser()
        .replay_store(MemoryReplayStore::new())
        .try_build()
        .unwrap_err();
    assert_eq!(err, ConfigError::MissingApprovalStore);
    assert!(err.to_string().contains("approval_store"), "{err}");
    browser()
        .store(MemoryReplayStore::new())
        .try_build()
        .unwrap();
    browser()
        .replay_store(MemoryReplayStore::new())
        .approval_store(MemoryReplayStore::new())
        .try_build()
        .unwrap();
    browser().try_build().unwrap();
    // A form-only layer needs none.
    ConfirmLayer::builder(KeyRing::random())
        .without_tool_list_unchecked()
        .audience("https://files.example/mcp")
        .replay_store(MemoryReplayStore::new())
        .tool("files_wipe", ToolPolicy::confirm_only())
        .try_build()
        .unwrap();
}

#[tokio::test]
async fn opting_out_of_the_tool_list_and_forgetting_the_policies_spends_nothing() {
    // The explicit opt-out, and nothing else: the calls pass the layer, the guards refuse them,
    // no nonce is spent; once the layer has seen the server's tool list, it refuses them itself.
    let files = seeded();
    let store = MemoryReplayStore::new();
    let server = FilesServer::new(Arc::clone(&files));
    let layer = builder(&store).without_tool_list_unchecked().build();
    let svc = ServiceBuilder::new().layer(layer).service(rmcp(server));
    let mut client = TestClient::new(svc.clone()).principal(alice());
    let delete = client.call("files_delete", json!({"pattern": "b"})).await;
    refused_without_confirmation(&delete);
    let wipe = client
        .call("files_wipe", json!({"dir": "/", "recursive": true}))
        .await;
    refused_without_confirmation(&wipe);
    assert_eq!(left(&files), everything());
    assert_eq!(store.len(), 0, "no confirmation was spent");

    let listed = list_tools(&svc).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .all(|t| t["_meta"].get(mcp_confirm::META_DECLARED).is_none()),
        "the declaration marks are the layer's business: {listed}"
    );
    for (tool, arguments) in [
        ("files_delete", json!({"pattern": "b"})),
        ("files_wipe", json!({"dir": "/", "recursive": true})),
        ("files_trim", json!({"count": 1})),
    ] {
        let refused = client.call(tool, arguments).await;
        assert_eq!(
            refused.error_code(),
            Some(-32603),
            "{tool}: {:?}",
            refused.message
        );
        assert_eq!(
            refused.message["error"]["data"]["reason"], "confirmation_not_configured",
            "{tool}"
        );
    }
    let listed = client.call("files_list", json!({})).await;
    assert!(listed.text().is_some(), "{:?}", listed.message);
    assert_eq!(left(&files), everything());
    assert_eq!(store.len(), 0);
}

async fn list_tools(svc: &mcp_confirm::Confirm<Rmcp>) -> Value {
    use tower::ServiceExt;
    let body = json!({"jsonrpc":"2.0","id":"l","method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}}}});
    let mut request = http::Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    request.extensions_mut().insert(alice());
    let response = svc.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_typo_in_select_into_fails_the_build_before_anyone_confirms() {
    // Finding 3: the argument the chosen id would be written into does not exist.
    let store = MemoryReplayStore::new();
    let server = TypoServer {
        tool_router: TypoServer::tool_router(),
    };
    let err = builder(&store)
        .declarations(server.confirm_declarations())
        .try_build()
        .unwrap_err();
    let ConfigError::InvalidPolicy(why) = &err else {
        panic!("{err}");
    };
    assert!(why.contains("files_delete"), "{why}");
    assert!(why.contains("chosen_paht"), "{why}");
    assert!(
        why.contains("chosen_path"),
        "the schema's arguments are listed: {why}"
    );
}

#[tokio::test]
async fn the_handler_reads_the_confirmation_typed_and_each_answer_is_safe() {
    // Finding 4: the chosen id and version reach the handler through `Confirmation`.
    let files = seeded();
    let store = MemoryReplayStore::new();
    let mut client = TestClient::new(wired(&files, &store)).principal(alice());

    let first = client.call("files_delete", json!({"pattern": "b"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    assert_eq!(first.message(), Some("Choose the file to delete."));
    assert_eq!(first.choices(), ["b.txt", "notes/b.txt"]);
    let declined = client.decline(&first).await;
    assert_eq!(declined.outcome(), Some("declined"));
    let replay = client.accept(&first, Some("b.txt")).await;
    assert_eq!(
        replay.error_code(),
        Some(-32602),
        "a declined state is spent"
    );

    let first = client.call("files_delete", json!({"pattern": "b"})).await;
    let cancelled = client.cancel(&first).await;
    assert_eq!(cancelled.outcome(), Some("cancelled"));
    assert_eq!(left(&files), everything());

    let done = client.accept(&first, Some("notes/b.txt")).await;
    assert_eq!(
        done.text(),
        Some("Deleted notes/b.txt"),
        "{:?}",
        done.message
    );
    assert_eq!(left(&files), ["a.txt", "b.txt", "c.log", "d.log"]);
    let replay = client.accept(&first, Some("b.txt")).await;
    assert_eq!(
        replay.error_code(),
        Some(-32602),
        "one confirmation, one delete"
    );
    assert_eq!(left(&files), ["a.txt", "b.txt", "c.log", "d.log"]);
}

/// A middleware between the layer and the server that rewrites the call's arguments.
fn tampering(
    files: &Files,
    layer: ConfirmLayer,
    rewrite: fn(&mut Value),
) -> impl tower::Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<impl http_body::Body<Data = Bytes, Error = impl std::fmt::Debug>>,
    Error = impl std::fmt::Debug,
> + Clone {
    use tower::ServiceExt;
    let inner = rmcp(FilesServer::new(Arc::clone(files)));
    let tamper = tower::service_fn(
        move |request: http::Request<mcp_confirm::body::RequestBody<Full<Bytes>>>| {
            let inner = inner.clone();
            async move {
                let (mut parts, body) = request.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let mut message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if message["method"] == "tools/call" {
                    rewrite(&mut message["params"]["arguments"]);
                }
                let bytes = Bytes::from(message.to_string());
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, bytes.len().into());
                inner
                    .oneshot(http::Request::from_parts(parts, Full::new(bytes)))
                    .await
            }
        },
    );
    ServiceBuilder::new().layer(layer).service(tamper)
}

#[tokio::test]
async fn a_confirmation_or_a_waiver_covers_exactly_the_call_it_came_with() {
    // Something after the layer changes the arguments: the guard sees a call the layer did not
    // confirm (or waive), and refuses it.
    let files = seeded();
    let store = MemoryReplayStore::new();
    let server = FilesServer::new(Arc::clone(&files));
    let layer = builder(&store)
        .declarations(server.confirm_declarations())
        .exempt("files_wipe")
        .build();
    let svc = tampering(&files, layer, |arguments| {
        if let Some(count) = arguments.get_mut("count") {
            *count = json!(2);
        }
        if let Some(dir) = arguments.get_mut("dir") {
            *dir = json!("/etc");
        }
        if let Some(pattern) = arguments.get_mut("pattern") {
            *pattern = json!(".log");
        }
    });
    let mut client = TestClient::new(svc).principal(alice());
    // Waived (exempt), then rewritten.
    let wipe = client
        .call("files_wipe", json!({"dir": "/tmp", "recursive": true}))
        .await;
    refused_without_confirmation(&wipe);
    // Waived (the condition is false for count 1), then rewritten to another count.
    let trim = client.call("files_trim", json!({"count": 1})).await;
    refused_without_confirmation(&trim);
    // Confirmed, then rewritten.
    let first = client.call("files_delete", json!({"pattern": "b"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let done = client.accept(&first, Some("b.txt")).await;
    refused_without_confirmation(&done);
    assert_eq!(left(&files), everything());
}

#[tokio::test]
async fn exempt_tools_run_without_a_form_behind_the_layer_only() {
    let files = seeded();
    let store = MemoryReplayStore::new();
    let server = FilesServer::new(Arc::clone(&files));
    let layer = builder(&store)
        .declarations(server.confirm_declarations())
        .exempt("files_wipe")
        .build();
    let svc = ServiceBuilder::new().layer(layer).service(rmcp(server));
    let mut client = TestClient::new(svc).principal(alice());
    let wiped = client
        .call("files_wipe", json!({"dir": "/", "recursive": true}))
        .await;
    assert_eq!(wiped.text(), Some("Wiped"), "{:?}", wiped.message);
    assert!(left(&files).is_empty());
}

#[tokio::test]
async fn forms_for_tools_confirmed_by_their_annotations_say_what_they_confirm() {
    // Finding 5: the generic form names the tool (its title) and shows the call's arguments,
    // cleaned and bounded like labels.
    let files = seeded();
    let store = MemoryReplayStore::new();
    let mut client = TestClient::new(wired(&files, &store)).principal(alice());
    let first = client
        .call(
            "files_wipe",
            json!({"dir": "/srv/\u{202E}gol.exe", "recursive": true}),
        )
        .await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let message = first.message().unwrap();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(
        lines,
        [
            "Allow Wipe files to run? It may change or delete data.",
            "dir: \"/srv/gol.exe\"",
            "recursive: true"
        ],
        "{message}"
    );
    let schema = &first.form().unwrap()["requestedSchema"];
    assert_eq!(
        schema["properties"]["confirm"]["title"],
        "Yes, run Wipe files"
    );
    let done = client.accept(&first, None).await;
    assert_eq!(done.text(), Some("Wiped"), "{:?}", done.message);

    // The text is the user's to set, without writing a policy.
    let server = FilesServer::new(seeded());
    let layer = builder(&store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .destructive_message("files_wipe", "Wipe every file under this directory?")
        .build();
    let mut client = TestClient::new(ServiceBuilder::new().layer(layer).service(rmcp(server)))
        .principal(alice());
    let first = client
        .call("files_wipe", json!({"dir": "/srv", "recursive": false}))
        .await;
    assert_eq!(
        first.message(),
        Some("Wipe every file under this directory?\ndir: \"/srv\"\nrecursive: false")
    );
    // ... only for a tool confirm_destructive confirms.
    let err = builder(&store)
        .declarations(FilesServer::new(seeded()).confirm_declarations())
        .confirm_destructive()
        .destructive_message("files_delete", "Really?")
        .try_build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidPolicy(_)), "{err}");
}

#[tokio::test]
async fn a_condition_decides_which_calls_need_a_confirmation() {
    let files = seeded();
    let store = MemoryReplayStore::new();
    let mut client = TestClient::new(wired(&files, &store)).principal(alice());
    // False: runs at once, and the handler can tell it was not asked.
    let small = client.call("files_trim", json!({"count": 1})).await;
    assert_eq!(
        small.text(),
        Some("Trimmed 1 (without asking)"),
        "{:?}",
        small.message
    );
    assert_eq!(left(&files).len(), 4);
    assert_eq!(store.len(), 0);
    // True: the usual form, and nothing runs before the answer.
    let big = client.call("files_trim", json!({"count": 10})).await;
    assert!(big.is_input_required(), "{:?}", big.message);
    assert_eq!(left(&files).len(), 4);
    let declined = client.decline(&big).await;
    assert_eq!(declined.outcome(), Some("declined"));
    assert_eq!(left(&files).len(), 4);
    let big = client.call("files_trim", json!({"count": 10})).await;
    let done = client.accept(&big, None).await;
    assert_eq!(
        done.text(),
        Some("Trimmed 4 (confirmed)"),
        "{:?}",
        done.message
    );
    // An error in the condition: refused, nothing run.
    let files = seeded();
    let mut client = TestClient::new(wired(&files, &store)).principal(alice());
    let bad = client.call("files_trim", json!({"count": -1})).await;
    assert_eq!(bad.error_code(), Some(-32603), "{:?}", bad.message);
    assert_eq!(left(&files), everything());
}
