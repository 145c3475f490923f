//! Attacks on the "safe by construction" wiring for rmcp servers: the `Confirmation` guard
//! `#[confirm_router]` puts in front of every confirmed or destructive handler, the declarations
//! the builder checks, and the run-time quarantine of listed tools the layer cannot confirm.
//!
//! Each test is an attack (or a hurried user's mistake). The ones that hold are regression
//! tests. Those that say "was broken" failed when they were written: their comment says what broke
//! and how it was fixed.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use mcp_confirm::body::RequestBody;
use mcp_confirm::rmcp::{Confirmation, Declarations};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::testing::TestClient;
use mcp_confirm::{
    Candidate, ConfigError, ConfirmLayer, ConfirmLayerBuilder, Confirmed, JsonRpcMessage,
    JsonRpcReply, KeyRing, Lookup, META_CLIENT_CAPABILITIES, META_DECLARED, META_PROTOCOL_VERSION,
    PROTOCOL_VERSION, PolicyError, Principal, ToolPolicy, Waived, confirm_router,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, JsonObject, MetaObject, ProtocolVersion, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};

/// What the handlers did, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn done(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

// ---------------------------------------------------------------------------------------------
// The servers under attack.
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize, schemars::JsonSchema)]
struct ScaleArgs {
    ratio: f64,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct DirArgs {
    dir: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CountArgs {
    count: i64,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ProxyArgs {
    /// The tool to run.
    tool: String,
    /// Its arguments.
    #[serde(default)]
    arguments: Option<JsonObject>,
}

/// A `meta` that already carries the declaration mark (with a kind that is a lie), next to a key
/// of the server's own.
fn tagged_meta() -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert("com.example/keep".to_owned(), json!(1));
    meta.insert(META_DECLARED.to_owned(), json!({"kind": "pick_one"}));
    MetaObject(meta)
}

/// Every kind of tool `#[confirm_router]` guards; `#[confirm_router]` below `#[tool_router]`.
#[derive(Clone)]
struct Vault {
    log: Log,
    tool_router: ToolRouter<Self>,
}

#[tool_router(router = tool_router)]
#[confirm_router]
impl Vault {
    fn new(log: &Log) -> Self {
        Self {
            log: Arc::clone(log),
            tool_router: Self::tool_router(),
        }
    }

    fn record(&self, what: String) {
        self.log.lock().unwrap().push(what);
    }

    #[tool(description = "List.", annotations(read_only_hint = true))]
    async fn vault_list(&self) -> String {
        "listed".to_owned()
    }

    /// No annotations at all: destructive by the spec's defaults. No arguments.
    #[tool(description = "Purge everything.")]
    async fn vault_purge(&self) -> String {
        self.record("purge".to_owned());
        "purged".to_owned()
    }

    #[tool(description = "Scale.", annotations(destructive_hint = true))]
    async fn vault_scale(&self, Parameters(args): Parameters<ScaleArgs>) -> String {
        self.record(format!("scale {:?}", args.ratio));
        "scaled".to_owned()
    }

    /// Renamed: the tool is `vault_nuke`, the method `nuke_impl`.
    #[tool(
        name = "vault_nuke",
        description = "Nuke a directory.",
        annotations(destructive_hint = true)
    )]
    #[confirm(message = "Nuke it?")]
    async fn nuke_impl(&self, Parameters(args): Parameters<DirArgs>) -> String {
        self.record(format!("nuke {}", args.dir));
        "nuked".to_owned()
    }

    /// Reads its `Confirmation` after `Parameters` took the arguments.
    #[tool(description = "Erase.", annotations(destructive_hint = true))]
    #[confirm]
    async fn vault_erase(
        &self,
        Parameters(args): Parameters<DirArgs>,
        confirmation: Confirmation,
    ) -> String {
        self.record(format!("erase {} for {}", args.dir, confirmation.tool()));
        "erased".to_owned()
    }

    /// Confirmed only above three.
    #[tool(description = "Trim.", annotations(destructive_hint = true))]
    #[confirm(when = Self::more_than_three)]
    async fn vault_trim(&self, Parameters(args): Parameters<CountArgs>) -> String {
        self.record(format!("trim {}", args.count));
        "trimmed".to_owned()
    }

    /// Runs another of this server's tools through the router, in the same request context (a
    /// "workflow" tool).
    #[tool(
        description = "Run another tool.",
        annotations(destructive_hint = true)
    )]
    async fn vault_proxy(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<ProxyArgs>,
    ) -> Result<String, ErrorData> {
        let mut params = CallToolRequestParams::new(args.tool);
        if let Some(arguments) = args.arguments {
            params = params.with_arguments(arguments);
        }
        self.tool_router
            .call(ToolCallContext::new(self, params, context))
            .await?;
        Ok("proxied".to_owned())
    }

    /// A destructive tool whose `meta` already carries a (false) declaration mark.
    #[tool(
        description = "Tagged.",
        annotations(destructive_hint = true),
        meta = tagged_meta()
    )]
    async fn vault_tagged(&self) -> String {
        self.record("tagged".to_owned());
        "tagged".to_owned()
    }

    async fn more_than_three(&self, lookup: Lookup) -> Result<bool, PolicyError> {
        match lookup.arguments["count"].as_i64() {
            Some(count) if count >= 0 => Ok(count > 3),
            _ => Err(PolicyError::new("count must be a non-negative integer")),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Vault {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

/// A server written with rmcp's `#[tool_router]` only: no `#[confirm_router]`.
#[derive(Clone)]
struct Plain {
    log: Log,
    tool_router: ToolRouter<Self>,
}

#[tool_router(router = tool_router)]
impl Plain {
    #[tool(description = "List.", annotations(read_only_hint = true))]
    async fn plain_list(&self) -> String {
        "listed".to_owned()
    }

    #[tool(
        description = "Drop a directory.",
        annotations(destructive_hint = true)
    )]
    async fn plain_drop(&self, Parameters(args): Parameters<DirArgs>) -> String {
        self.log.lock().unwrap().push(format!("drop {}", args.dir));
        "dropped".to_owned()
    }

    /// Checks its confirmation by hand, but after `Parameters`, against the docs' advice.
    #[tool(
        description = "Erase a directory.",
        annotations(destructive_hint = true)
    )]
    async fn plain_erase(
        &self,
        Parameters(args): Parameters<DirArgs>,
        _confirmation: Confirmation,
    ) -> String {
        self.log.lock().unwrap().push(format!("erase {}", args.dir));
        "erased".to_owned()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Plain {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

/// Tools from two impls, combined as rmcp allows; `#[confirm_router]` on the first one only.
#[derive(Clone)]
struct Split {
    log: Log,
    tool_router: ToolRouter<Self>,
}

#[confirm_router]
#[tool_router(router = confirmed_router)]
impl Split {
    fn new(log: &Log) -> Self {
        Self {
            log: Arc::clone(log),
            tool_router: Self::confirmed_router() + Self::extra_router(),
        }
    }

    #[tool(
        description = "Delete a directory.",
        annotations(destructive_hint = true)
    )]
    #[confirm]
    async fn split_delete(&self, Parameters(args): Parameters<DirArgs>) -> String {
        self.log
            .lock()
            .unwrap()
            .push(format!("delete {}", args.dir));
        "deleted".to_owned()
    }
}

#[tool_router(router = extra_router)]
impl Split {
    #[tool(
        description = "Drop a directory.",
        annotations(destructive_hint = true)
    )]
    async fn split_drop(&self, Parameters(args): Parameters<DirArgs>) -> String {
        self.log.lock().unwrap().push(format!("drop {}", args.dir));
        "dropped".to_owned()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Split {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

/// note id → (owner, title)
type NoteMap = Arc<Mutex<BTreeMap<String, (String, String)>>>;

#[derive(Deserialize, schemars::JsonSchema)]
struct NoteArgs {
    /// Notes whose title contains this (read by the resolver from the raw arguments).
    #[allow(dead_code)]
    title: String,
    /// The note the user picked: written in by the layer (`select_into`).
    #[serde(default)]
    note_id: Option<String>,
}

/// A pick-one tool whose resolver offers the caller's own notes only, written into `note_id`,
/// The attack below needs a `when` on it: the attribute refuses that at compile time
/// (`compile-tests/tests/ui/when_with_select_into.rs`), so the attack builds the same policy in code.
#[derive(Clone)]
struct Notes {
    notes: NoteMap,
    tool_router: ToolRouter<Self>,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl Notes {
    #[tool(
        description = "Delete one of your notes.",
        annotations(destructive_hint = true)
    )]
    #[confirm(pick_one = Self::mine, select_into = "note_id")]
    async fn notes_delete(&self, Parameters(args): Parameters<NoteArgs>) -> String {
        match args.note_id {
            Some(id) => {
                self.notes.lock().unwrap().remove(&id);
                format!("Deleted {id}")
            }
            None => "Nothing to delete".to_owned(),
        }
    }

    async fn mine(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let title = lookup.arguments["title"].as_str().unwrap_or_default();
        let notes = self.notes.lock().unwrap();
        Ok(notes
            .iter()
            .filter(|(_, (owner, t))| owner == lookup.principal.subject() && t.contains(title))
            .map(|(id, (_, t))| Candidate::labelled(id, t).with_version("v1"))
            .collect())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

/// A read-only tool whose hand-written `meta` forges a `#[confirm]` declaration mark.
fn forged_meta() -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert(META_DECLARED.to_owned(), json!({"kind": "confirm"}));
    MetaObject(meta)
}

#[derive(Clone)]
struct Forged;

#[confirm_router]
#[tool_router(router = tool_router)]
impl Forged {
    #[tool(
        description = "Peek.",
        annotations(read_only_hint = true),
        meta = forged_meta()
    )]
    async fn forged_peek(&self) -> String {
        "peeked".to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Wiring helpers.
// ---------------------------------------------------------------------------------------------

pub(super) fn rmcp_service<S: ServerHandler + Clone + Send + Sync + 'static>(
    server: S,
) -> StreamableHttpService<S, LocalSessionManager> {
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
    ConfirmLayer::builder(KeyRing::single("k1", crate::common::secret(9)).unwrap())
        .audience("https://guard-attacks.example/mcp")
        .replay_store(store.clone())
}

fn alice() -> Principal {
    Principal::new("alice")
}

type VaultHttp = StreamableHttpService<Vault, LocalSessionManager>;

/// The Vault behind a layer built from its declarations and `configure`.
fn vault_behind(
    log: &Log,
    configure: impl FnOnce(ConfirmLayerBuilder) -> ConfirmLayerBuilder,
) -> mcp_confirm::Confirm<VaultHttp> {
    let server = Vault::new(log);
    let store = MemoryReplayStore::new();
    let layer = configure(builder(&store).declarations(server.confirm_declarations())).build();
    ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(server))
}

fn reason(message: &Value) -> &str {
    message["error"]["data"]["reason"].as_str().unwrap_or("")
}

fn assert_refused(message: &Value, why: &str) {
    assert_eq!(message["error"]["code"], -32603, "{message}");
    assert_eq!(reason(message), why, "{message}");
}

/// `params._meta` as a 2026-07-28 client with form elicitation sends it.
fn call_meta() -> String {
    json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
    })
    .to_string()
}

/// A fresh JSON-RPC id per message: a retry must not reuse its first round's id.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);

/// A `tools/call` body with the name and arguments written as raw JSON text (`None`: no
/// `arguments` member), and `extra` raw members appended to `params`.
fn call_body(name: &str, arguments: Option<&str>, extra: &str) -> String {
    let arguments = arguments.map_or(String::new(), |a| format!(r#","arguments":{a}"#));
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"_meta":{},"name":{name}{arguments}{extra}}}}}"#,
        NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        call_meta()
    )
}

fn list_body() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{{"_meta":{}}}}}"#,
        call_meta()
    )
}

/// An HTTP POST of `body` with the headers a client sends (`Mcp-Method` and `Mcp-Name` as the
/// body says, when it reads as one message), and alice as the principal.
fn http_request(body: &str, mcp_name: Option<&str>) -> http::Request<Full<Bytes>> {
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let mut request = http::Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION);
    if let Some(method) = parsed["method"].as_str() {
        request = request.header("mcp-method", method);
    }
    let name = mcp_name.or_else(|| parsed["params"]["name"].as_str());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let mut request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    request.extensions_mut().insert(alice());
    request
}

/// The JSON-RPC message of a body: JSON, or the last `data:` of an SSE stream.
fn message_of(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let json = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|data| !data.is_empty())
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or(Value::String(text.into_owned()))
}

/// POSTs `body` and returns the raw text of the answer.
async fn post_raw<S, B>(svc: &S, body: &str, mcp_name: Option<&str>) -> String
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body,
    B::Error: std::fmt::Debug,
{
    let response = svc
        .clone()
        .oneshot(http_request(body, mcp_name))
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn post<S, B>(svc: &S, body: &str) -> Value
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body,
    B::Error: std::fmt::Debug,
{
    message_of(post_raw(svc, body, None).await.as_bytes())
}

/// The members a retry adds to `params` to accept `first`'s confirm-only form.
fn accept_members(first: &Value) -> String {
    let result = &first["result"];
    let state = result["requestState"].as_str().expect("a request state");
    let (key, request) = result["inputRequests"]
        .as_object()
        .and_then(|requests| requests.iter().next())
        .expect("an input request");
    let field = request["params"]["requestedSchema"]["properties"]
        .as_object()
        .and_then(|properties| {
            properties
                .iter()
                .find(|(_, p)| p["type"] == "boolean")
                .map(|(name, _)| name.clone())
        })
        .expect("a confirm field");
    format!(
        r#","requestState":{},"inputResponses":{}"#,
        json!(state),
        json!({ key: {"action": "accept", "content": { field: true }} })
    )
}

fn is_input_required(message: &Value) -> bool {
    message["result"]["resultType"] == "input_required"
}

// ---------------------------------------------------------------------------------------------
// A fake inner server, to put any `tools/list` answer in front of the layer.
// ---------------------------------------------------------------------------------------------

/// A response body sent as the given frames.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// An unguarded server: answers `tools/list` with `listing` (content type, frames) and every
/// `tools/call` with "ran <name>", recording the call and the verdict that came with it.
#[derive(Clone, Default)]
struct Fake {
    listing: Arc<Mutex<(String, Vec<Bytes>)>>,
    calls: Log,
}

impl Fake {
    fn listing(content_type: &str, frames: &[&str]) -> Self {
        let fake = Self::default();
        *fake.listing.lock().unwrap() = (
            content_type.to_owned(),
            frames
                .iter()
                .map(|f| Bytes::from(f.as_bytes().to_vec()))
                .collect(),
        );
        fake
    }

    fn service(
        &self,
    ) -> impl Service<
        http::Request<RequestBody<Full<Bytes>>>,
        Response = http::Response<Chunks>,
        Error = Infallible,
    > + Clone {
        let fake = self.clone();
        tower::service_fn(move |request: http::Request<RequestBody<Full<Bytes>>>| {
            let fake = fake.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if message["method"] == "tools/list" {
                    let (content_type, frames) = fake.listing.lock().unwrap().clone();
                    let response = http::Response::builder()
                        .header("content-type", content_type)
                        .body(Chunks(frames.into()))
                        .unwrap();
                    return Ok::<_, Infallible>(response);
                }
                let name = message["params"]["name"].as_str().unwrap_or_default();
                let verdict = if parts.extensions.get::<Confirmed>().is_some() {
                    "confirmed"
                } else if parts.extensions.get::<Waived>().is_some() {
                    "waived"
                } else {
                    "none"
                };
                fake.calls.lock().unwrap().push(format!("{name}:{verdict}"));
                let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "content": [{"type": "text", "text": format!("ran {name}")}]}});
                let response = http::Response::builder()
                    .header("content-type", "application/json")
                    .body(Chunks(VecDeque::from([Bytes::from(answer.to_string())])))
                    .unwrap();
                Ok(response)
            }
        })
    }
}

/// A layer with no tool list (the explicit opt-out) in front of `fake`, with `configure`.
fn fake_behind(
    fake: &Fake,
    configure: impl FnOnce(ConfirmLayerBuilder) -> ConfirmLayerBuilder,
) -> impl Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<impl Body<Data = Bytes, Error = impl std::fmt::Debug>>,
    Error = impl std::fmt::Debug,
> + Clone {
    let store = MemoryReplayStore::new();
    let layer = configure(builder(&store).without_tool_list_unchecked()).build();
    ServiceBuilder::new().layer(layer).service(fake.service())
}

const DROP_ARGS: &str = r#"{"dir":"/"}"#;

// ---------------------------------------------------------------------------------------------
// Promise 1: the guard accepts exactly the call the layer let through.
// ---------------------------------------------------------------------------------------------

/// HOLDS. `"arguments"` absent, `null` or `{}` digest alike in the layer and in the guard: a
/// waiver or a confirmation given for one spelling is accepted for it, without false refusals,
/// on the exempt path (the body is forwarded as sent) and the confirmed path (the layer rewrites
/// it), and never for another call.
#[tokio::test]
async fn arguments_absent_null_or_empty_are_one_call_for_waivers_and_confirmations() {
    let spellings = [None, Some("null"), Some("{}")];
    // Exempt: the body is forwarded as sent, with a waiver.
    let exempt_log = log();
    let exempt = vault_behind(&exempt_log, |b| {
        b.confirm_destructive().exempt("vault_purge")
    });
    for arguments in spellings {
        let answer = post(&exempt, &call_body(r#""vault_purge""#, arguments, "")).await;
        assert_eq!(
            answer["result"]["content"][0]["text"], "purged",
            "{arguments:?}: {answer}"
        );
    }
    assert_eq!(done(&exempt_log), ["purge", "purge", "purge"]);
    // Confirmed: the layer writes `arguments` back into the body it forwards.
    let confirmed_log = log();
    let confirmed = vault_behind(&confirmed_log, |b| b.confirm_destructive());
    for arguments in spellings {
        let body = call_body(r#""vault_purge""#, arguments, "");
        let first = post(&confirmed, &body).await;
        if arguments == Some("null") {
            // The layer's protocol gate (`engine::check_protocol`) refuses a `null` on a
            // confirmed tool before any form: fail closed, nothing spent. (rmcp and the exempt
            // path take `null` as no arguments; see the report.)
            assert_eq!(first["error"]["code"], -32602, "{first}");
            assert_eq!(first["error"]["data"]["reason"], "invalid_arguments");
            continue;
        }
        assert!(is_input_required(&first), "{arguments:?}: {first}");
        let retry = call_body(r#""vault_purge""#, arguments, &accept_members(&first));
        let answer = post(&confirmed, &retry).await;
        assert_eq!(
            answer["result"]["content"][0]["text"], "purged",
            "{arguments:?}: {answer}"
        );
    }
    assert_eq!(done(&confirmed_log), ["purge", "purge"]);
}

/// HOLDS. A tool name written with `\u` escapes is the same tool to the layer's scanner, to the
/// verdict it binds and to rmcp's dispatch: confirmed like the plain spelling (no false refusal)
/// and never run around the form.
#[tokio::test]
async fn escaped_tool_names_are_confirmed_like_plain_ones() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive().exempt("vault_tagged"));
    let name = r#""vault\u005fnuke""#;
    let first = post(&svc, &call_body(name, Some(DROP_ARGS), "")).await;
    assert!(is_input_required(&first), "{first}");
    assert!(done(&log).is_empty());
    let retry = call_body(name, Some(DROP_ARGS), &accept_members(&first));
    let answer = post(&svc, &retry).await;
    assert_eq!(answer["result"]["content"][0]["text"], "nuked", "{answer}");
    // An exempt tool under an escaped name carries its waiver to the handler.
    let answer = post(&svc, &call_body(r#""vault\u005ftagged""#, None, "")).await;
    assert_eq!(answer["result"]["content"][0]["text"], "tagged", "{answer}");
    // The method's name is not a tool name: the rename holds.
    let answer = post(&svc, &call_body(r#""nuke_impl""#, Some(DROP_ARGS), "")).await;
    assert!(answer.get("error").is_some(), "{answer}");
    assert_eq!(done(&log), ["nuke /", "tagged"]);
}

/// HOLDS. Duplicate keys (at the name, in the arguments), batches mixing an exempt and a
/// confirmed call, and an `Mcp-Name` header naming a harmless tool: nothing reaches a handler.
#[tokio::test]
async fn duplicate_keys_batches_and_lying_headers_run_nothing() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive().exempt("vault_tagged"));
    for body in [
        call_body(r#""vault_list","name":"vault_purge""#, None, ""),
        call_body(r#""vault_tagged","name":"vault_purge""#, None, ""),
        call_body(r#""vault_nuke""#, Some(r#"{"dir":"/tmp","dir":"/"}"#), ""),
        format!(
            "[{},{}]",
            call_body(r#""vault_tagged""#, None, ""),
            call_body(r#""vault_purge""#, None, "")
        ),
    ] {
        let answer = post(&svc, &body).await;
        assert_eq!(answer["error"]["code"], -32600, "{body}: {answer}");
    }
    let lying = post_raw(
        &svc,
        &call_body(r#""vault_purge""#, None, ""),
        Some("vault_list"),
    )
    .await;
    let lying = message_of(lying.as_bytes());
    assert_eq!(lying["error"]["code"], -32020, "{lying}");
    assert!(done(&log).is_empty(), "{:?}", done(&log));
}

/// HOLDS. On the exempt path the body is forwarded as sent, so every spelling of a number
/// (`1`, `1.0`, `1e0`, `10e-1`, a float serde_json does not read back exactly) is digested the
/// same by the layer and by rmcp: no false refusal.
#[tokio::test]
async fn number_spellings_of_an_exempt_call_reach_the_handler() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive().exempt("vault_scale"));
    for ratio in ["1", "1.0", "1e0", "10e-1", "-0", "1.0715660391465826e-75"] {
        let arguments = format!(r#"{{"ratio":{ratio}}}"#);
        let answer = post(&svc, &call_body(r#""vault_scale""#, Some(&arguments), "")).await;
        assert_eq!(
            answer["result"]["content"][0]["text"], "scaled",
            "{ratio}: {answer}"
        );
    }
    assert_eq!(done(&log).len(), 6);
}

/// HOLDS (was broken: a false refusal after the user confirmed, with the confirmation spent).
/// The layer forwards re-serialized arguments; without serde_json's `float_roundtrip`,
/// `1.0715660391465826e-75` read back as another float in the handler, whose guard then saw other
/// arguments than the user confirmed. The crate now turns `float_roundtrip` on (features unify,
/// so rmcp parses the same way).
#[tokio::test]
async fn a_confirmed_float_argument_survives_the_rewrite() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive());
    let mut client = TestClient::new(svc).principal(alice());
    let first = client
        .call("vault_scale", json!({"ratio": 1.0715660391465826e-75_f64}))
        .await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let done_round = client.accept(&first, None).await;
    assert_eq!(
        done_round.text(),
        Some("scaled"),
        "the user confirmed this call: {:?}",
        done_round.message
    );
    assert_eq!(done(&log).len(), 1);
}

/// HOLDS (was broken: a waiver for one tool ran another). `vault_proxy` is exempt; its handler
/// dispatches to `vault_purge` through the router in the same request context, whose guard
/// reused the cached verdict without looking at the tool name. The cached verdict now covers only
/// the tool (and, while they are there, the arguments) it was given for.
#[tokio::test]
async fn a_waiver_does_not_cover_a_tool_the_handler_dispatches_to() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive().exempt("vault_proxy"));
    let mut client = TestClient::new(svc).principal(alice());
    // Called directly, vault_purge asks.
    let direct = client.call("vault_purge", json!({})).await;
    assert!(direct.is_input_required(), "{:?}", direct.message);
    // Called through the exempt proxy, it must still not run unconfirmed.
    let proxied = client
        .call("vault_proxy", json!({"tool": "vault_purge"}))
        .await;
    assert!(
        done(&log).is_empty(),
        "vault_purge ran on vault_proxy's waiver: {:?} / {:?}",
        done(&log),
        proxied.message
    );
}

/// HOLDS. Something between the layer and rmcp turns an exempt call into a call of another tool
/// (same arguments): the waiver names the first tool, the guard refuses the second.
#[tokio::test]
async fn a_waiver_rewritten_onto_another_tool_is_refused() {
    let log = log();
    let server = Vault::new(&log);
    let store = MemoryReplayStore::new();
    let layer = builder(&store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .exempt("vault_tagged")
        .build();
    let inner = rmcp_service(server);
    let renaming = tower::service_fn(move |request: http::Request<RequestBody<Full<Bytes>>>| {
        let inner = inner.clone();
        async move {
            let (mut parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&bytes).replace("vault_tagged", "vault_purge");
            parts
                .headers
                .insert("mcp-name", "vault_purge".parse().unwrap());
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, text.len().into());
            inner
                .oneshot(http::Request::from_parts(
                    parts,
                    Full::new(Bytes::from(text)),
                ))
                .await
        }
    });
    let svc = ServiceBuilder::new().layer(layer).service(renaming);
    let mut client = TestClient::new(svc).principal(alice());
    let round = client.call("vault_tagged", json!({})).await;
    assert_refused(&round.message, "confirmation_missing");
    assert!(done(&log).is_empty());
}

/// HOLDS. Under `#[confirm_router]`, a handler that reads its `Confirmation` after `Parameters`
/// still gets it: the hidden guard ran first and cached it.
#[tokio::test]
async fn a_confirmation_read_after_parameters_works_under_confirm_router() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive());
    let mut client = TestClient::new(svc).principal(alice());
    let first = client.call("vault_erase", json!({"dir": "/srv"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let round = client.accept(&first, None).await;
    assert_eq!(round.text(), Some("erased"), "{:?}", round.message);
    assert_eq!(done(&log), ["erase /srv for vault_erase"]);
}

/// HOLDS (fails closed). Without `#[confirm_router]`, a hand-written `Confirmation` placed after
/// `Parameters` sees no arguments (they were taken) and refuses the confirmed call: nothing runs.
/// The user did confirm and the state is spent, so this is a false refusal the types could
/// prevent (see the report: a lint or a compile error for this order).
#[tokio::test]
async fn a_hand_written_confirmation_after_parameters_fails_closed() {
    let log = log();
    let server = Plain {
        log: Arc::clone(&log),
        tool_router: Plain::tool_router(),
    };
    let store = MemoryReplayStore::new();
    let layer = builder(&store)
        .tool_list(Plain::tool_router().list_all())
        .confirm_destructive()
        .build();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(server));
    let mut client = TestClient::new(svc).principal(alice());
    let first = client.call("plain_erase", json!({"dir": "/srv"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let round = client.accept(&first, None).await;
    assert_refused(&round.message, "confirmation_missing");
    let replay = client.accept(&first, None).await;
    assert_eq!(replay.error_code(), Some(-32602), "the state is spent");
    assert!(done(&log).is_empty());
}

/// HOLDS. The confirmation flows through the JSON-RPC message adapter when the transport hands
/// the message's extensions to the HTTP request rmcp reads; a transport that drops them leaves
/// every guarded handler refusing. A batch is refused by the adapter too.
#[tokio::test]
async fn the_message_adapter_carries_verdicts_and_fails_closed_without_them() {
    fn bridge(
        inner: VaultHttp,
        keep_extensions: bool,
    ) -> impl Service<
        JsonRpcMessage,
        Response = JsonRpcReply,
        Error = Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        tower::service_fn(move |message: JsonRpcMessage| {
            let inner = inner.clone();
            async move {
                let body = String::from_utf8_lossy(&message.body).into_owned();
                let mut request = http_request(&body, None);
                if keep_extensions {
                    *request.extensions_mut() = message.extensions;
                }
                let response = inner.oneshot(request).await.unwrap();
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                Ok(JsonRpcReply::message(message_of(&bytes).to_string()))
            }
        })
    }
    async fn send<S>(svc: &S, body: String) -> Value
    where
        S: Service<JsonRpcMessage, Response = JsonRpcReply> + Clone,
        S::Error: std::fmt::Debug,
    {
        let reply = svc
            .clone()
            .oneshot(JsonRpcMessage::new(body).with_extension(alice()))
            .await
            .unwrap();
        serde_json::from_slice(&reply.body.unwrap_or_default()).unwrap_or(Value::Null)
    }

    for keep in [true, false] {
        let log = log();
        let server = Vault::new(&log);
        let store = MemoryReplayStore::new();
        let layer = builder(&store)
            .declarations(server.confirm_declarations())
            .confirm_destructive()
            .exempt("vault_tagged")
            .build();
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(bridge(rmcp_service(server), keep));
        let exempt = send(&svc, call_body(r#""vault_tagged""#, None, "")).await;
        let first = send(&svc, call_body(r#""vault_nuke""#, Some(DROP_ARGS), "")).await;
        assert!(is_input_required(&first), "{first}");
        let retry = call_body(r#""vault_nuke""#, Some(DROP_ARGS), &accept_members(&first));
        let confirmed = send(&svc, retry).await;
        if keep {
            assert_eq!(exempt["result"]["content"][0]["text"], "tagged", "{exempt}");
            assert_eq!(
                confirmed["result"]["content"][0]["text"], "nuked",
                "{confirmed}"
            );
            assert_eq!(done(&log), ["tagged", "nuke /"]);
        } else {
            assert_refused(&exempt, "confirmation_missing");
            assert_refused(&confirmed, "confirmation_missing");
            assert!(done(&log).is_empty());
        }
        let batch = format!(
            "[{},{}]",
            call_body(r#""vault_tagged""#, None, ""),
            call_body(r#""vault_purge""#, None, "")
        );
        let batch = send(&svc, batch).await;
        assert_eq!(batch["error"]["code"], -32600, "{batch}");
        assert!(done(&log).len() <= 2);
    }
}

// ---------------------------------------------------------------------------------------------
// `when` conditions and retries.
// ---------------------------------------------------------------------------------------------

/// HOLDS. A condition is evaluated on first calls only, and a retry is bound to its state: a
/// state won for `count: 10` does not run `count: 1`, or the other way round; a first call
/// carrying a made-up (or `null`) `requestState` is refused instead of being waived; a first
/// call carrying `inputResponses` but no state is waived for exactly its own arguments.
#[tokio::test]
async fn conditions_cannot_be_switched_by_a_retry() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive());
    let big = post(
        &svc,
        &call_body(r#""vault_trim""#, Some(r#"{"count":10}"#), ""),
    )
    .await;
    assert!(is_input_required(&big), "{big}");
    let switched = call_body(
        r#""vault_trim""#,
        Some(r#"{"count":1}"#),
        &accept_members(&big),
    );
    let answer = post(&svc, &switched).await;
    assert!(answer.get("error").is_some(), "{answer}");
    for state in [
        r#","requestState":"mcpc1.made-up""#,
        r#","requestState":null"#,
    ] {
        let answer = post(
            &svc,
            &call_body(r#""vault_trim""#, Some(r#"{"count":1}"#), state),
        )
        .await;
        assert!(answer.get("error").is_some(), "{state}: {answer}");
    }
    assert!(done(&log).is_empty(), "{:?}", done(&log));
    let unasked = call_body(
        r#""vault_trim""#,
        Some(r#"{"count":2}"#),
        r#","inputResponses":{"confirm":{"action":"accept","content":{"confirm":true}}}"#,
    );
    let answer = post(&svc, &unasked).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "trimmed",
        "{answer}"
    );
    assert_eq!(done(&log), ["trim 2"]);
}

/// HOLDS (was broken: the client picked the record a pick-one policy lets the user pick).
///
/// `notes_delete` is `pick_one` with `select_into = "note_id"`: its resolver offers the caller's
/// own notes only, and the handler trusts `note_id` because the layer writes it in. With a
/// `when` condition that is false, the call went through unasked with the client's own `note_id`,
/// bound into a valid `Waived`: Alice deleted Bob's note. Now `when` with `select_into` is a
/// rule of `PolicyShape`: the attribute does not compile, the builder refuses the policy.
#[tokio::test]
async fn a_false_condition_does_not_let_the_client_pick_the_record() {
    let notes: NoteMap = Arc::new(Mutex::new(BTreeMap::from([
        (
            "alice-1".to_owned(),
            ("alice".to_owned(), "Groceries".to_owned()),
        ),
        (
            "bob-1".to_owned(),
            ("bob".to_owned(), "Bob's diary".to_owned()),
        ),
    ])));
    let server = Notes {
        notes: Arc::clone(&notes),
        tool_router: Notes::tool_router(),
    };
    let resolver = {
        let server = server.clone();
        move |lookup: Lookup| {
            let server = server.clone();
            async move { server.mine(lookup).await }
        }
    };
    let never = |_: Lookup| async { Ok::<_, PolicyError>(false) };
    let declarations = Declarations::new(
        vec![(
            "notes_delete".to_owned(),
            ToolPolicy::pick_one(resolver)
                .select_into("note_id")
                .when(never),
        )],
        Notes::tool_router().list_all(),
    );
    drop(server);
    let store = MemoryReplayStore::new();
    let built = builder(&store).declarations(declarations).try_build();
    let Err(error) = built else {
        panic!("a pick-one policy with `when` and `select_into` was built");
    };
    let error = error.to_string();
    assert!(
        error.contains("notes_delete")
            && error.contains("`when`")
            && error.contains("`select_into`"),
        "{error}"
    );
    assert!(notes.lock().unwrap().contains_key("bob-1"));
}

// ---------------------------------------------------------------------------------------------
// Promise 2: `#[confirm_router]`'s guards and marks.
// ---------------------------------------------------------------------------------------------

/// HOLDS. `#[tool(name = "…")]`: the policy, the guard and the mark follow the tool's name, not
/// the method's; without the layer the renamed handler refuses.
#[tokio::test]
async fn renamed_tools_are_guarded_under_their_tool_name() {
    let log = log();
    let declared = Vault::new(&log).confirm_declarations();
    assert!(
        declared.confirmed_tools().any(|name| name == "vault_nuke"),
        "{:?}",
        declared.confirmed_tools().collect::<Vec<_>>()
    );
    let mut client = TestClient::new(rmcp_service(Vault::new(&log))).principal(alice());
    let round = client.call("vault_nuke", json!({"dir": "/"})).await;
    assert_refused(&round.message, "confirmation_missing");
    // Without the layer every destructive tool refuses, including those without #[confirm].
    for (tool, arguments) in [
        ("vault_purge", json!({})),
        ("vault_scale", json!({"ratio": 2.0})),
        ("vault_tagged", json!({})),
        ("vault_proxy", json!({"tool": "vault_list"})),
    ] {
        let round = client.call(tool, arguments).await;
        assert_refused(&round.message, "confirmation_missing");
    }
    assert!(done(&log).is_empty());
}

/// HOLDS. A `meta` that already carries the mark cannot choose the kind: on a destructive tool
/// the attribute overwrites it (here a false `pick_one` becomes `destructive`, so
/// `confirm_destructive` covers it and the server's own keys stay); on a read-only tool a forged
/// `#[confirm]` mark fails the build instead of being ignored.
#[tokio::test]
async fn a_meta_that_already_carries_the_mark_cannot_forge_the_kind() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive());
    let listed = message_of(post_raw(&svc, &list_body(), None).await.as_bytes());
    let tagged = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "vault_tagged")
        .cloned()
        .unwrap();
    assert_eq!(tagged["_meta"]["com.example/keep"], 1, "{tagged}");
    assert!(tagged["_meta"].get(META_DECLARED).is_none(), "{tagged}");
    let declared = Vault::new(&log).confirm_declarations();
    assert!(
        !declared
            .confirmed_tools()
            .any(|name| name == "vault_tagged")
    );

    let store = MemoryReplayStore::new();
    let err = builder(&store)
        .declarations(Forged.confirm_declarations())
        .try_build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::DeclaredWithoutPolicy("forged_peek".into())
    );
}

/// HOLDS, as documented. An impl with `#[tool_router]` and no `#[confirm_router]`: the layer
/// still refuses to build unless every destructive tool is confirmed or exempt, and confirms
/// them when told to; but the handlers have no guard, so a route around the layer runs them.
#[tokio::test]
async fn without_confirm_router_only_the_layer_stands_guard() {
    let log = log();
    let plain = || Plain {
        log: Arc::clone(&log),
        tool_router: Plain::tool_router(),
    };
    let store = MemoryReplayStore::new();
    let err = builder(&store)
        .tool_list(Plain::tool_router().list_all())
        .try_build()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::UnconfirmedDestructiveTool(_)),
        "{err}"
    );
    let layer = builder(&store)
        .tool_list(Plain::tool_router().list_all())
        .confirm_destructive()
        .build();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(plain()));
    let mut client = TestClient::new(svc).principal(alice());
    let first = client.call("plain_drop", json!({"dir": "/"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    assert!(done(&log).is_empty());
    // Around the layer: nothing in the handler stops it (the cost of leaving the attribute out).
    let mut around = TestClient::new(rmcp_service(plain())).principal(alice());
    let ran = around.call("plain_drop", json!({"dir": "/"})).await;
    assert_eq!(ran.text(), Some("dropped"), "{:?}", ran.message);
}

/// HOLDS (was broken: a destructive tool ran unconfirmed behind a layer that built without
/// error). A second impl with plain `#[tool_router]` is missing from `confirm_declarations()`, so
/// `split_drop` was in no list and went through. With a tool list, the layer now refuses a call
/// of any name in no list (`tool_not_listed`).
#[tokio::test]
async fn a_second_impl_without_confirm_router_is_not_left_unconfirmed() {
    let log = log();
    let server = Split::new(&log);
    let store = MemoryReplayStore::new();
    let layer = builder(&store)
        .declarations(server.confirm_declarations())
        .confirm_destructive()
        .build();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(server));
    let mut client = TestClient::new(svc).principal(alice());
    let first = client.call("split_delete", json!({"dir": "/"})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    let dropped = client.call("split_drop", json!({"dir": "/"})).await;
    assert!(
        done(&log).is_empty(),
        "split_drop ran unconfirmed: {:?}",
        dropped.message
    );
}

/// HOLDS. The mitigation for the split impl: give the combined router's list as well, and the
/// unguarded destructive tool of the second impl fails the build by name (issue 34: before,
/// `.confirm_destructive()` made it build, and the handler stayed unguarded).
#[test]
fn the_combined_router_list_catches_the_second_impl() {
    let log = log();
    let server = Split::new(&log);
    let store = MemoryReplayStore::new();
    let err = builder(&store)
        .declarations(server.confirm_declarations())
        .tool_list(server.tool_router.list_all())
        .try_build()
        .unwrap_err();
    assert_eq!(err, ConfigError::UnguardedTool("split_drop".into()));
    assert!(err.to_string().contains("#[confirm_router]"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Promise 4: the run-time quarantine of listed tools.
// ---------------------------------------------------------------------------------------------

/// HOLDS. A listing that hides a tool does not unguard it: the hidden `vault_purge` is still
/// refused by its handler, and the listed, declared `vault_nuke` by the layer.
#[tokio::test]
async fn a_listing_that_hides_a_tool_does_not_unguard_it() {
    let log = log();
    let inner = rmcp_service(Vault::new(&log));
    let hiding = tower::service_fn(move |request: http::Request<RequestBody<Full<Bytes>>>| {
        let inner = inner.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let listing = String::from_utf8_lossy(&bytes).contains("tools/list");
            let response = inner
                .oneshot(http::Request::from_parts(parts, Full::new(bytes)))
                .await
                .unwrap();
            let (mut parts, body) = response.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let mut message = message_of(&bytes);
            if listing && let Some(tools) = message["result"]["tools"].as_array_mut() {
                tools.retain(|t| t["name"] != "vault_purge");
            }
            let text = message.to_string();
            parts.headers.remove(http::header::CONTENT_LENGTH);
            parts
                .headers
                .insert("content-type", "application/json".parse().unwrap());
            Ok::<_, Infallible>(http::Response::from_parts(
                parts,
                Full::new(Bytes::from(text)),
            ))
        }
    });
    let store = MemoryReplayStore::new();
    let layer = builder(&store).without_tool_list_unchecked().build();
    let svc = ServiceBuilder::new().layer(layer).service(hiding);
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(!listed.contains("vault_purge"), "{listed}");
    let mut client = TestClient::new(svc).principal(alice());
    let purge = client.call("vault_purge", json!({})).await;
    assert_refused(&purge.message, "confirmation_missing");
    let nuke = client.call("vault_nuke", json!({"dir": "/"})).await;
    assert_refused(&nuke.message, "confirmation_not_configured");
    assert!(done(&log).is_empty());
}

/// HOLDS. A flood of destructive names past the bound: the layer refuses every tool it has no
/// policy for from then on, read-only ones included (fail closed, as documented), and none of
/// those calls reaches the server.
#[tokio::test]
async fn a_flood_of_listed_names_refuses_everything_unknown() {
    let mut tools: Vec<Value> = (0..1100)
        .map(|i| json!({"name": format!("t{i:04}")}))
        .collect();
    tools.push(json!({"name": "reader", "annotations": {"readOnlyHint": true}}));
    let listing = json!({"jsonrpc": "2.0", "id": "l", "result": {"tools": tools}}).to_string();
    let fake = Fake::listing("application/json", &[&listing]);
    let svc = fake_behind(&fake, |b| b);
    let mut client = TestClient::new(svc.clone()).principal(alice());
    let before = client.call("reader", json!({})).await;
    assert_eq!(before.text(), Some("ran reader"), "{:?}", before.message);
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.contains("t1099"));
    for tool in ["t0000", "t1023", "t1099", "reader", "never_listed"] {
        let round = client.call(tool, json!({})).await;
        assert_refused(&round.message, "confirmation_not_configured");
    }
    assert_eq!(done(&fake.calls), ["reader:none"]);
}

/// An SSE `tools/list` answer with a priming event, `line_end` line endings, and the JSON split
/// over two `data:` lines and three frames; `fake_drop` carries a declaration mark.
fn sse_listing(line_end: &str) -> Vec<String> {
    let e = line_end;
    vec![
        format!("id: 0{e}retry: 1000{e}data:{e}{e}event: message{e}"),
        format!(
            "data: {{\"jsonrpc\":\"2.0\",\"id\":\"l\",\"result\":{{\"tools\":[{{\"name\":\"fake_drop\",\"_meta\":{{\"{META_DECLARED}\":{{\"kind\":\"destructive\"}}}}}},"
        ),
        format!(
            "{e}data: {{\"name\":\"fake_read\",\"annotations\":{{\"readOnlyHint\":true}}}}]}}}}{e}{e}"
        ),
    ]
}

/// HOLDS. SSE framing (CRLF, a priming event, a message split over `data:` lines and frames)
/// does not hide a listed tool from the quarantine, nor leak the declaration mark.
#[tokio::test]
async fn sse_listings_split_across_frames_engage_the_quarantine() {
    let frames = sse_listing("\r\n");
    let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
    let fake = Fake::listing("text/event-stream", &frames);
    let svc = fake_behind(&fake, |b| b);
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.contains("fake_read"), "{listed}");
    assert!(!listed.contains(META_DECLARED), "{listed}");
    let mut client = TestClient::new(svc).principal(alice());
    let drop = client.call("fake_drop", json!({"dir": "/"})).await;
    assert_refused(&drop.message, "confirmation_not_configured");
    let read = client.call("fake_read", json!({})).await;
    assert_eq!(read.text(), Some("ran fake_read"), "{:?}", read.message);
    assert_eq!(done(&fake.calls), ["fake_read:none"]);
}

/// HOLDS (was broken: `message::listing::event_end` only looked for LF, so a `tools/list` answer
/// framed with lone CRs, which the SSE spec allows, went out unread and `fake_drop` ran). Lines
/// may now end in LF, CRLF or CR.
#[tokio::test]
async fn cr_framed_sse_listings_engage_the_quarantine() {
    let frames = sse_listing("\r");
    let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
    let fake = Fake::listing("text/event-stream", &frames);
    let svc = fake_behind(&fake, |b| b);
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.contains("fake_read"), "{listed}");
    let mut client = TestClient::new(svc).principal(alice());
    let drop = client.call("fake_drop", json!({"dir": "/"})).await;
    assert_refused(&drop.message, "confirmation_not_configured");
    assert!(done(&fake.calls).is_empty(), "{:?}", done(&fake.calls));
}

/// A JSON listing of `fake_drop` (destructive, declared) padded past `bytes`.
fn padded_listing(bytes: usize) -> String {
    json!({"jsonrpc": "2.0", "id": "l", "result": {"tools": [
        {"name": "fake_drop", "description": "x".repeat(bytes),
         "_meta": {META_DECLARED: {"kind": "destructive"}}},
        {"name": "fake_read", "annotations": {"readOnlyHint": true}},
    ]}})
    .to_string()
}

/// HOLDS (was broken: the run-time net silently switched off). `body::Marked` held a `tools/list`
/// answer only up to `max_body_bytes`, the cap on *request* bodies a user lowers to protect the
/// server; past it the answer went out unread and the destructive `fake_drop` ran unconfirmed.
/// Listings now have their own cap (`max_listing_bytes`), and past it the layer fails closed
/// (`a_listing_too_large_to_read_is_replaced_and_closes_the_quarantine`).
#[tokio::test]
async fn an_oversize_listing_still_engages_the_quarantine() {
    let listing = padded_listing(2048);
    let fake = Fake::listing("application/json", &[&listing]);
    let svc = fake_behind(&fake, |b| b.max_body_bytes(1024));
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.len() > 1024 && listed.contains("fake_read"));
    let mut client = TestClient::new(svc).principal(alice());
    let drop = client.call("fake_drop", json!({"dir": "/"})).await;
    assert_refused(&drop.message, "confirmation_not_configured");
    assert!(done(&fake.calls).is_empty(), "{:?}", done(&fake.calls));
}

/// HOLDS (was broken: a listing larger than `max_body_bytes` went out unread, with the
/// `#[confirm_router]` declaration marks in). Listings have their own, larger cap.
#[tokio::test]
async fn an_oversize_listing_never_shows_the_declaration_marks() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive().max_body_bytes(1024));
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.len() > 1024, "the listing must outgrow the cap");
    assert!(!listed.contains(META_DECLARED), "{listed}");
}

/// HOLDS. A listing past `max_listing_bytes` (JSON, or one SSE event) is not sent on unread: the
/// client gets a JSON-RPC error for its `tools/list` instead (no declaration marks, no tools), and
/// the layer, which could not see what the server listed, refuses every tool it has no policy or
/// exemption for from then on, read-only ones included.
#[tokio::test]
async fn a_listing_too_large_to_read_is_replaced_and_closes_the_quarantine() {
    let listing = padded_listing(4096);
    let sse = format!("event: message\ndata: {listing}\n\n");
    for (content_type, body) in [
        ("application/json", listing.as_str()),
        ("text/event-stream", sse.as_str()),
    ] {
        let fake = Fake::listing(content_type, &[&body[..1000], &body[1000..]]);
        let svc = fake_behind(&fake, |b| b.max_listing_bytes(2048));
        let mut client = TestClient::new(svc.clone()).principal(alice());
        let before = client.call("fake_read", json!({})).await;
        assert_eq!(before.text(), Some("ran fake_read"), "{:?}", before.message);
        let listed = post_raw(&svc, &list_body(), None).await;
        assert!(
            listed.contains("listing_unreadable"),
            "{content_type}: {listed}"
        );
        assert!(
            !listed.contains(META_DECLARED) && !listed.contains("fake_read"),
            "{listed}"
        );
        let message = message_of(listed.as_bytes());
        assert_eq!(message["id"], "l", "{message}");
        for tool in ["fake_drop", "fake_read"] {
            let round = client.call(tool, json!({})).await;
            assert_refused(&round.message, "confirmation_not_configured");
        }
        assert_eq!(done(&fake.calls), ["fake_read:none"], "{content_type}");
    }
}

/// HOLDS. A successful `tools/list` answer in a media type the layer does not read goes on as it
/// is, but the layer no longer trusts what it knows of the listed tools.
#[tokio::test]
async fn a_listing_in_an_unknown_media_type_closes_the_quarantine() {
    let listing = padded_listing(16);
    let fake = Fake::listing("application/x-custom", &[&listing]);
    let svc = fake_behind(&fake, |b| b);
    let mut client = TestClient::new(svc.clone()).principal(alice());
    let listed = post_raw(&svc, &list_body(), None).await;
    assert!(listed.contains("fake_read"), "{listed}");
    let round = client.call("fake_read", json!({})).await;
    assert_refused(&round.message, "confirmation_not_configured");
    assert!(done(&fake.calls).is_empty(), "{:?}", done(&fake.calls));
}

/// HOLDS. With a tool list, a call of a name in no list is refused before it reaches the server:
/// the layer cannot tell whether an unknown tool is destructive.
#[tokio::test]
async fn a_tool_missing_from_the_list_is_refused_by_name() {
    let log = log();
    let svc = vault_behind(&log, |b| b.confirm_destructive());
    let mut client = TestClient::new(svc).principal(alice());
    let round = client.call("vault_unknown", json!({})).await;
    assert_refused(&round.message, "tool_not_listed");
    assert!(done(&log).is_empty());
}
