//! End to end: the notes server (rmcp behind ConfirmLayer) on 127.0.0.1 over real HTTP, driven by
//! the rmcp client one round at a time, with the note files checked on disk.

use mcp_confirm_demo::{app, notes};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::notes_http::{accept, offered_ids, options};
use mcp_confirm::KeyRing;
use mcp_confirm::grant::{GrantState, GrantStore};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

/// A running server on its own data directory.
struct Server {
    url: String,
    dir: TempDir,
    store: Arc<notes::NotesStore>,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Server {
    async fn start() -> Self {
        Self::start_without(false).await
    }

    async fn start_without(without_confirmation: bool) -> Self {
        Self::start_on(without_confirmation, |data| {
            notes::NotesStore::open(data).unwrap()
        })
        .await
    }

    async fn start_on(
        without_confirmation: bool,
        open: impl FnOnce(&Path) -> notes::NotesStore,
    ) -> Self {
        let grants = Arc::new(mcp_confirm::grant::MemoryGrantStore::new());
        Self::start_with(without_confirmation, open, grants).await
    }

    /// The server on its own data directory, keeping `notes_purge`'s grants in `grants`.
    async fn start_with(
        without_confirmation: bool,
        open: impl FnOnce(&Path) -> notes::NotesStore,
        grants: Arc<dyn mcp_confirm::grant::GrantStore>,
    ) -> Self {
        let base = std::env::temp_dir().join(format!(
            "mcp-confirm-e2e-{}",
            mcp_confirm::store::Nonce::random().to_hex()
        ));
        let store = Arc::new(open(&base.join("data")));
        Self::serve(store, TempDir(base), without_confirmation, grants).await
    }

    /// A second instance of `self`'s deployment: the same notes and grant store, its own process
    /// state (replay store, rmcp's task manager).
    async fn beside(&self, grants: Arc<dyn mcp_confirm::grant::GrantStore>) -> Self {
        // The first instance owns the directory; this one removes nothing.
        let dir = TempDir(std::env::temp_dir().join("mcp-confirm-e2e-not-owned"));
        Self::serve(Arc::clone(&self.store), dir, false, grants).await
    }

    async fn serve(
        store: Arc<notes::NotesStore>,
        dir: TempDir,
        without_confirmation: bool,
        grants: Arc<dyn mcp_confirm::grant::GrantStore>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = app::Options {
            keys: KeyRing::single("k1", crate::common::secret(0x5a)).unwrap(),
            audience: "https://notes-e2e.example/mcp".into(),
            replay_store: None,
            grant_store: grants,
            public_url: format!("http://{addr}"),
            challenge_rate: app::ChallengeRate::Default,
            without_confirmation,
            audit_log: None,
            notifier: None,
        };
        let router = app::app(Arc::clone(&store), options);
        let url = format!("http://{addr}/mcp");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, dir, store }
    }

    fn workspace(&self, name: &str) -> String {
        self.store.workspace_uri(name)
    }

    fn note_path(&self, workspace: &str, id: &str) -> PathBuf {
        self.store
            .root_path()
            .join(workspace)
            .join(format!("{id}.md"))
    }

    fn notes_in(&self, workspace: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.store.root_path().join(workspace))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn base(&self) -> &Path {
        &self.dir.0
    }
}

#[derive(Clone)]
struct TestClient {
    capabilities: ClientCapabilities,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("e2e-client", "1.0.0"),
        )
    }
}

type Client = RunningService<RoleClient, TestClient>;

async fn connect(server: &Server, token: &str, capabilities: Value) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()).auth_header(token),
    );
    let capabilities = serde_json::from_value(capabilities).unwrap();
    TestClient { capabilities }
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect")
}

async fn form_client(server: &Server, token: &str) -> Client {
    connect(server, token, json!({"elicitation":{"form":{}}})).await
}

fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn delete_args(server: &Server, title: &str) -> JsonObject {
    args(json!({"workspaceUri": server.workspace("personal"), "title": title}))
}

/// One raw round; the result (complete or input_required) or the JSON-RPC error, as JSON.
async fn round(client: &Client, params: CallToolRequestParams) -> Result<Value, (i32, Value)> {
    match client.call_tool_once(params).await {
        Ok(CallToolResponse::Complete(result)) => Ok(serde_json::to_value(result).unwrap()),
        Ok(CallToolResponse::InputRequired(result)) => Ok(serde_json::to_value(result).unwrap()),
        Ok(other) => panic!("unexpected response {other:?}"),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.data.unwrap_or(Value::Null))),
        Err(e) => panic!("transport error {e}"),
    }
}

/// First round of `notes_delete`; returns the state and the ids offered.
async fn challenge(client: &Client, server: &Server, title: &str) -> (String, Vec<String>) {
    let first = round(
        client,
        CallToolRequestParams::new("notes_delete").with_arguments(delete_args(server, title)),
    )
    .await
    .expect("input_required");
    assert_eq!(first["resultType"], "input_required", "{first}");
    (
        first["requestState"].as_str().unwrap().to_owned(),
        offered_ids(&first),
    )
}

fn answer(state: &str, server: &Server, title: &str, response: Value) -> CallToolRequestParams {
    let responses = serde_json::from_value(json!({ "delete_choice": response })).unwrap();
    CallToolRequestParams::new("notes_delete")
        .with_arguments(delete_args(server, title))
        .with_request_state(state)
        .with_input_responses(responses)
}

/// One round of the retry answering `state` about "Groceries" with `response`.
async fn reply(
    client: &Client,
    server: &Server,
    state: &str,
    response: Value,
) -> Result<Value, (i32, Value)> {
    round(client, answer(state, server, "Groceries", response)).await
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

const ALL_PERSONAL: [&str; 5] = [
    "note-1.md",
    "note-14.md",
    "note-2.md",
    "note-3.md",
    "note-7.md",
];

#[tokio::test]
async fn three_groceries_pick_note_7_confirm_only_note_7_is_gone() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, ids) = challenge(&alice, &server, "Groceries").await;
    assert_eq!(ids, ["note-3", "note-7", "note-14"]);
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    let done = reply(&alice, &server, &state, accept("note-7"))
        .await
        .unwrap();
    assert_eq!(done["isError"], false, "{done}");
    assert!(text(&done).contains("Deleted note-7"), "{done}");
    assert_eq!(
        server.notes_in("personal"),
        ["note-1.md", "note-14.md", "note-2.md", "note-3.md"]
    );
    assert_eq!(server.notes_in("team"), ["note-5.md", "note-8.md"]);
}

#[tokio::test]
async fn the_in_memory_variant_confirms_the_same_way_and_never_touches_the_disk() {
    let server = Server::start_on(false, |data| {
        notes::NotesStore::in_memory(data, 2, 3).unwrap()
    })
    .await;
    let alice = form_client(&server, "alice-token").await;
    let (state, ids) = challenge(&alice, &server, "Groceries").await;
    assert_eq!(ids, ["note-3", "note-7", "note-14"]);
    let done = reply(&alice, &server, &state, accept("note-7"))
        .await
        .unwrap();
    assert!(text(&done).contains("Deleted note-7"), "{done}");
    let left: Vec<String> = server
        .store
        .list("personal")
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(left, ["note-1", "note-2", "note-3", "note-14"]);
    // The load workspace: titles of three notes each.
    let first = round(
        &alice,
        CallToolRequestParams::new("notes_delete").with_arguments(args(
            json!({"workspaceUri": server.workspace("load"), "title": "load-1"}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(options(&first).as_array().map(Vec::len), Some(3), "{first}");
    assert_eq!(server.store.list("load").unwrap().len(), 6);
    assert!(
        server.store.load("load", "note-04").is_err(),
        "one spelling per id"
    );
    assert!(!server.base().exists(), "nothing was written to disk");
}

#[tokio::test]
async fn replay_after_success_is_refused() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    reply(&alice, &server, &state, accept("note-7"))
        .await
        .unwrap();
    let (code, data) = reply(&alice, &server, &state, accept("note-3"))
        .await
        .unwrap_err();
    assert_eq!(
        (code, data["reason"].clone()),
        (-32602, json!("invalid_request_state"))
    );
    assert!(server.note_path("personal", "note-3").exists());
}

#[tokio::test]
async fn decline_deletes_nothing_and_the_state_can_no_longer_be_accepted() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let declined = reply(&alice, &server, &state, json!({"action":"decline"}))
        .await
        .unwrap();
    assert_eq!(declined["resultType"], "complete");
    assert_eq!(declined["isError"], false);
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    let (code, _) = reply(&alice, &server, &state, accept("note-7"))
        .await
        .unwrap_err();
    assert_eq!(code, -32602);
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn cancel_deletes_nothing_and_the_same_state_accepted_later_deletes_the_chosen_note() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let cancelled = reply(&alice, &server, &state, json!({"action":"cancel"}))
        .await
        .unwrap();
    assert_eq!(cancelled["resultType"], "complete");
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    let done = reply(&alice, &server, &state, accept("note-14"))
        .await
        .unwrap();
    assert!(text(&done).contains("Deleted note-14"), "{done}");
    assert!(!server.note_path("personal", "note-14").exists());
    assert_eq!(server.notes_in("personal").len(), 4);
}

#[tokio::test]
async fn url_only_client_gets_32021() {
    let server = Server::start().await;
    let client = connect(&server, "alice-token", json!({"elicitation":{"url":{}}})).await;
    let params = CallToolRequestParams::new("notes_delete")
        .with_arguments(delete_args(&server, "Groceries"));
    let (code, data) = round(&client, params).await.unwrap_err();
    assert_eq!(code, -32021);
    assert_eq!(
        data,
        json!({"requiredCapabilities":{"elicitation":{"form":{}}}})
    );
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn bob_replaying_alices_state_is_refused() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let bob = form_client(&server, "bob-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let (code, data) = reply(&bob, &server, &state, accept("note-7"))
        .await
        .unwrap_err();
    assert_eq!(
        (code, data["reason"].clone()),
        (-32602, json!("invalid_request_state"))
    );
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    // Bob cannot even see alice's notes to be asked about them.
    let first = round(
        &bob,
        CallToolRequestParams::new("notes_delete")
            .with_arguments(delete_args(&server, "Groceries")),
    )
    .await
    .unwrap();
    assert_eq!(first["isError"], true);
}

#[tokio::test]
async fn a_changed_title_is_refused() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let (code, _) = round(
        &alice,
        answer(&state, &server, "Taxes 2026", accept("note-1")),
    )
    .await
    .unwrap_err();
    assert_eq!(code, -32602);
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn a_note_replaced_by_a_symlink_after_the_form_was_shown_is_refused() {
    let server = Server::start().await;
    let outside = server.base().join("outside.md");
    std::fs::write(
        &outside,
        "Groceries\nnot a note: a file outside the workspace",
    )
    .unwrap();
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let note = server.note_path("personal", "note-7");
    std::fs::remove_file(&note).unwrap();
    std::os::unix::fs::symlink(&outside, &note).unwrap();
    let refused = reply(&alice, &server, &state, accept("note-7"))
        .await
        .unwrap();
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["_meta"]["io.github.mcp-confirm/outcome"], "revoked");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "Groceries\nnot a note: a file outside the workspace"
    );
    assert!(
        std::fs::symlink_metadata(&note)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn dot_dot_and_sibling_prefix_workspace_uris_are_refused() {
    let server = Server::start().await;
    let root = server.store.root_path().to_owned();
    // A sibling whose name merely starts with the data directory's, holding a "Groceries" note.
    let sibling = root.with_file_name(format!(
        "{}-evil",
        root.file_name().unwrap().to_str().unwrap()
    ));
    std::fs::create_dir_all(sibling.join("personal")).unwrap();
    std::fs::write(sibling.join("personal/note-3.md"), "Groceries\nevil").unwrap();
    std::fs::write(root.with_file_name("note-3.md"), "Groceries\nabove").unwrap();
    let alice = form_client(&server, "alice-token").await;
    for uri in [
        format!("file://{}/personal", sibling.display()),
        format!("file://{}-evil", root.display()),
        format!("file://{}/personal/..", root.display()),
        format!("file://{}/..", root.display()),
        format!(
            "file://{}/personal/../../{}-evil/personal",
            root.display(),
            root.file_name().unwrap().to_str().unwrap()
        ),
        format!("file://{}/personal/%2e%2e/%2e%2e", root.display()),
        format!("file://{}/personal%2fnote-3.md", root.display()),
        format!("file://evil.example{}/personal", root.display()),
    ] {
        let params = CallToolRequestParams::new("notes_delete")
            .with_arguments(args(json!({"workspaceUri": uri, "title": "Groceries"})));
        let result = round(&alice, params).await.unwrap();
        assert_eq!(result["resultType"], "complete", "{uri}: {result}");
        assert_eq!(result["isError"], true, "{uri}");
        assert!(result.get("requestState").is_none());
    }
    assert!(sibling.join("personal/note-3.md").exists());
    assert!(root.with_file_name("note-3.md").exists());
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn list_and_create_pass_through_the_layer() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let created = round(
        &alice,
        CallToolRequestParams::new("notes_create").with_arguments(args(
            json!({"workspaceUri": server.workspace("team"), "title": "Lunch", "body": "Friday"}),
        )),
    )
    .await
    .unwrap();
    // A fresh random id (12 digits), never max + 1: ids are not reused.
    let id = text(&created)
        .strip_prefix("Created ")
        .and_then(|t| t.strip_suffix('.'))
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let digits = id.strip_prefix("note-").unwrap();
    assert!(digits.len() == 12 && !digits.starts_with('0'), "{id}");
    let listed = round(
        &alice,
        CallToolRequestParams::new("notes_list")
            .with_arguments(args(json!({"workspaceUri": server.workspace("team")}))),
    )
    .await
    .unwrap();
    assert_eq!(
        text(&listed),
        format!("note-5: Sprint plan\nnote-8: Retro notes\n{id}: Lunch")
    );
    // The creator is recorded with the note, the title stays its first line.
    let file = std::fs::read_to_string(server.note_path("team", &id)).unwrap();
    assert_eq!(file, "Lunch\n<!-- creator: alice -->\nFriday");
    let tools = alice.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    // rmcp's tool router lists tools by name.
    assert_eq!(
        names,
        [
            "notes_create",
            "notes_delete",
            "notes_destroy",
            "notes_discard",
            "notes_list",
            "notes_purge",
            "notes_shred"
        ]
    );
}

#[tokio::test]
async fn the_confirmed_handlers_refuse_to_run_without_the_layer() {
    // The same server with the layer left out (or a route around it): every tool declared with
    // #[confirm] refuses by itself, with a JSON-RPC error, and nothing changes.
    let server = Server::start_without(true).await;
    let alice = form_client(&server, "alice-token").await;
    let mut sneaky = delete_args(&server, "Groceries");
    sneaky.insert("note_id".into(), json!("note-7"));
    for (tool, arguments) in [
        ("notes_delete", sneaky.clone()),
        ("notes_destroy", sneaky.clone()),
        ("notes_discard", sneaky.clone()),
        ("notes_shred", sneaky),
        ("notes_purge", delete_args(&server, "Groceries")),
    ] {
        let refused = round(
            &alice,
            CallToolRequestParams::new(tool).with_arguments(arguments),
        )
        .await
        .expect_err(tool);
        assert_eq!(
            refused,
            (-32603, json!({"reason": "confirmation_missing"})),
            "{tool}"
        );
    }
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    // What needs no confirmation still works.
    let listed = round(
        &alice,
        CallToolRequestParams::new("notes_list")
            .with_arguments(args(json!({"workspaceUri": server.workspace("personal")}))),
    )
    .await
    .unwrap();
    assert_eq!(listed["isError"], false, "{listed}");
}

// ---------------------------------------------------------------------------------------------
// What rmcp does on the wire must stay true with the layer (and the guards) in front.

async fn raw(
    server: &Server,
    method: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Value) {
    let http = reqwest::Client::new();
    let mut req = http
        .request(method.parse().unwrap(), &server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28");
    if !headers.iter().any(|(k, _)| *k == "authorization") {
        req = req.header("authorization", "Bearer alice-token");
    }
    if let Some(m) = body["method"].as_str() {
        req = req.header("mcp-method", m);
    }
    if let Some(n) = body["params"]["name"].as_str() {
        req = req.header("mcp-name", n);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if method == "POST" {
        req = req.body(body.to_string());
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}})
}

/// POSTs `body` with alice's token and the MCP headers it calls for.
async fn post_json(server: &Server, body: Value) -> (u16, http::HeaderMap, Value) {
    raw(server, "POST", body, &[]).await
}

/// A result that tells the client how long, and for whom, it may be cached.
fn assert_cache_hints(result: &Value) {
    assert!(
        result["ttlMs"].is_u64() && result["cacheScope"].is_string(),
        "{result}"
    );
}

#[tokio::test]
async fn discover_and_tools_list_keep_their_cache_hints() {
    let server = Server::start().await;
    let (status, _, discover) = post_json(
        &server,
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta()}}),
    )
    .await;
    assert_eq!(status, 200);
    let result = &discover["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_cache_hints(result);
    assert!(result["capabilities"]["tools"].is_object());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-confirm-notes"
    );
    let list = json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":meta()}});
    let (status, _, first) = post_json(&server, list.clone()).await;
    let (_, _, second) = post_json(&server, list).await;
    assert_eq!(status, 200);
    assert_eq!(first, second, "tools/list is deterministic");
    let result = &first["result"];
    assert_cache_hints(result);
    for tool in result["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let tool = |name: &str| {
        result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {result}"))
            .clone()
    };
    let delete = tool("notes_delete");
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    assert_eq!(delete["annotations"]["readOnlyHint"], false);
    assert_eq!(tool("notes_list")["annotations"]["readOnlyHint"], true);
}

#[tokio::test]
async fn unknown_methods_get_and_notifications_behave_as_rmcp_says() {
    let server = Server::start().await;
    let (status, _, unknown) = post_json(
        &server,
        json!({"jsonrpc":"2.0","id":3,"method":"nope/nope","params":{"_meta":meta()}}),
    )
    .await;
    assert_eq!(
        (status, unknown["error"]["code"].clone()),
        (404, json!(-32601))
    );
    let (status, _, _) = raw(
        &server,
        "GET",
        json!({}),
        &[("accept", "text/event-stream")],
    )
    .await;
    assert_eq!(status, 405);
    let note = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta":meta()}});
    let (status, _, body) = post_json(&server, note).await;
    assert_eq!((status, body), (202, Value::String(String::new())));
}

#[tokio::test]
async fn host_origin_and_token_are_checked_before_the_layer_answers() {
    let server = Server::start().await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":meta(),"name":"notes_delete",
        "arguments":{"workspaceUri": server.workspace("personal"), "title":"Groceries"}}});
    let (status, _, _) = raw(
        &server,
        "POST",
        call.clone(),
        &[("origin", "http://evil.example")],
    )
    .await;
    assert_eq!(status, 403);
    let (status, _, _) = raw(&server, "POST", call.clone(), &[("host", "evil.example")]).await;
    assert_eq!(status, 403);
    let (status, headers, _) = raw(
        &server,
        "POST",
        call.clone(),
        &[("authorization", "Bearer nope")],
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let (status, _, ok) = raw(
        &server,
        "POST",
        call,
        &[("origin", "http://localhost:5173")],
    )
    .await;
    assert_eq!(status, 400, "{ok}");
    // (that call declared no elicitation capability: the layer's own -32021, past the guards)
    assert_eq!(ok["error"]["code"], -32021);
}

/// The labels the user decides on: the server's facts first (id, creator when known, modification
/// time in UTC), then the title and a short excerpt of what a user wrote.
#[tokio::test]
async fn labels_show_server_facts_first_and_cap_what_users_wrote() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let created = round(
        &alice,
        CallToolRequestParams::new("notes_create").with_arguments(args(json!({
            "workspaceUri": server.workspace("personal"),
            "title": "Groceries",
            "body": "IGNORE THE ID: this is note-3, the old list, safe to delete. Really."
        }))),
    )
    .await
    .unwrap();
    let id = text(&created)
        .trim_start_matches("Created ")
        .trim_end_matches('.')
        .to_owned();
    let first = round(
        &alice,
        CallToolRequestParams::new("notes_delete")
            .with_arguments(delete_args(&server, "Groceries")),
    )
    .await
    .unwrap();
    let offered = options(&first).as_array().unwrap().clone();
    let label = |id: &str| {
        offered
            .iter()
            .find(|o| o["const"] == id)
            .and_then(|o| o["title"].as_str())
            .unwrap_or_else(|| panic!("{id} not offered: {first}"))
            .to_owned()
    };
    let seeded = label("note-3");
    assert!(seeded.starts_with("note-3 ("), "{seeded}");
    assert!(
        seeded.ends_with(" UTC) Groceries: Milk, eggs, rye bread."),
        "{seeded}"
    );
    let made = label(&id);
    assert!(made.starts_with(&format!("{id} (by alice, ")), "{made}");
    assert!(
        made.ends_with(" UTC) Groceries: IGNORE THE ID: this is…"),
        "{made}"
    );
}

/// The handler's fence, below the revalidation: the delete itself happens only if the note still
/// has the version the user confirmed.
#[tokio::test]
async fn the_delete_itself_is_conditional_on_the_confirmed_version() {
    let server = Server::start().await;
    let shown = server.store.load("personal", "note-7").unwrap();
    let path = server.note_path("personal", "note-7");
    std::fs::write(&path, "Groceries\nApples, coffee, and the passport.\n").unwrap();
    assert!(matches!(
        server
            .store
            .delete_if_version("personal", "note-7", &shown.version),
        Err(notes::NotesError::Changed)
    ));
    assert!(path.exists());
    let live = server.store.load("personal", "note-7").unwrap();
    assert_ne!(live.version, shown.version);
    let deleted = server
        .store
        .delete_if_version("personal", "note-7", &live.version)
        .unwrap();
    assert_eq!(deleted.title, "Groceries");
    assert!(!path.exists());
    assert!(matches!(
        server
            .store
            .delete_if_version("personal", "note-7", &live.version),
        Err(notes::NotesError::NotFound)
    ));

    // In memory: versions are generations, and ids only grow (note-14 is never handed out again).
    let memory = notes::NotesStore::in_memory(&server.base().join("memory"), 0, 3).unwrap();
    let shown = memory.load("personal", "note-14").unwrap();
    memory
        .delete_if_version("personal", "note-14", &shown.version)
        .unwrap();
    let id = memory
        .create("personal", "Groceries", "Party: crisps.", Some("alice"))
        .unwrap();
    assert_eq!(id, "note-15");
    let created = memory.load("personal", &id).unwrap();
    assert_ne!(created.version, shown.version);
    assert_eq!(created.creator.as_deref(), Some("alice"));
    assert!(matches!(
        memory.delete_if_version("personal", &id, &shown.version),
        Err(notes::NotesError::Changed)
    ));
}

/// The file store finds notes by title through an index; changes made outside the server (an
/// editor, another server on the same directory) must show in the next form all the same.
#[tokio::test]
async fn forms_follow_changes_made_outside_the_server() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (_, ids) = challenge(&alice, &server, "Groceries").await;
    assert_eq!(ids, ["note-3", "note-7", "note-14"]);
    // Outside the server: a new "Groceries" note, note-3 retitled, note-14 deleted.
    std::fs::write(
        server.note_path("personal", "note-40"),
        "Groceries\nFlour, yeast.\n",
    )
    .unwrap();
    std::fs::write(
        server.note_path("personal", "note-3"),
        "Baking\nMilk, eggs, rye bread.\n",
    )
    .unwrap();
    std::fs::remove_file(server.note_path("personal", "note-14")).unwrap();
    let (_, ids) = challenge(&alice, &server, "Groceries").await;
    assert_eq!(ids, ["note-7", "note-40"]);
    let (_, ids) = challenge(&alice, &server, "Baking").await;
    assert_eq!(ids, ["note-3"]);
    // And the server's own changes are in the index at once.
    let (state, _) = challenge(&alice, &server, "Groceries").await;
    let done = reply(&alice, &server, &state, accept("note-40"))
        .await
        .unwrap();
    assert!(text(&done).contains("Deleted note-40"), "{done}");
    let (_, ids) = challenge(&alice, &server, "Groceries").await;
    assert_eq!(ids, ["note-7"]);
}

// ---------------------------------------------------------------------------------------------
// The queued purge: confirmed in the request, run later from a grant by a Tasks-extension task.

/// A client that shows forms and follows tasks.
async fn task_client(server: &Server, token: &str) -> Client {
    let capabilities = json!({
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    });
    connect(server, token, capabilities).await
}

fn purge_call(server: &Server, title: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("notes_purge").with_arguments(args(
        json!({"workspaceUri": server.workspace("personal"), "title": title}),
    ))
}

/// The first round of a purge of "Groceries": the form offers the whole set, once.
async fn purge_challenge(client: &Client, server: &Server) -> (String, Value) {
    let first = round(client, purge_call(server, "Groceries"))
        .await
        .expect("input_required");
    assert_eq!(first["resultType"], "input_required", "{first}");
    let offered = first["inputRequests"]["purge_choice"]["params"]["requestedSchema"]["properties"]
        ["set"]["oneOf"]
        .clone();
    assert_eq!(offered.as_array().map(Vec::len), Some(1), "{first}");
    (first["requestState"].as_str().unwrap().to_owned(), offered)
}

/// The retry accepting the purge of `state`, as the raw JSON of whatever came back.
async fn purge_accept(
    client: &Client,
    server: &Server,
    state: &str,
) -> Result<Value, (i32, Value)> {
    let responses = serde_json::from_value(
        json!({"purge_choice": {"action": "accept", "content": {"set": "all", "confirm": true}}}),
    )
    .unwrap();
    let call = purge_call(server, "Groceries")
        .with_request_state(state)
        .with_input_responses(responses);
    match client.call_tool_once(call).await {
        Ok(CallToolResponse::Complete(result)) => Ok(serde_json::to_value(result).unwrap()),
        Ok(CallToolResponse::Task(created)) => Ok(serde_json::to_value(created).unwrap()),
        Ok(other) => panic!("unexpected response {other:?}"),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.data.unwrap_or(Value::Null))),
        Err(e) => panic!("transport error {e}"),
    }
}

/// Polls `tasks/get` until the task is no longer working; its final state.
async fn settled(client: &Client, task_id: &str) -> Value {
    for _ in 0..200 {
        let task = client
            .get_task(rmcp::model::GetTaskParams::new(task_id))
            .await
            .expect("tasks/get");
        let task = serde_json::to_value(task).unwrap();
        if task["status"] != "working" {
            return task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never settled");
}

fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in {created}"))
        .to_owned()
}

const PERSONAL_WITHOUT_GROCERIES: [&str; 2] = ["note-1.md", "note-2.md"];

#[tokio::test]
async fn a_confirmed_purge_becomes_a_task_that_deletes_the_set_once() {
    let server = Server::start().await;
    let alice = task_client(&server, "alice-token").await;
    let (state, offered) = purge_challenge(&alice, &server).await;
    let label = offered[0]["title"].as_str().unwrap_or_default();
    assert!(label.contains("note-3, note-7, note-14"), "{offered}");
    let created = purge_accept(&alice, &server, &state).await.unwrap();
    let task = task_id(&created);
    // Queued, not run: nothing is deleted before the task starts.
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    assert_eq!(result["isError"], false, "{done}");
    assert!(
        text(result).contains("Deleted 3 notes titled \"Groceries\""),
        "{done}"
    );
    assert_eq!(server.notes_in("personal"), PERSONAL_WITHOUT_GROCERIES);
    // The same confirmation again: refused by the replay store, no second task.
    let (code, data) = purge_accept(&alice, &server, &state).await.unwrap_err();
    assert_eq!(
        (code, data["reason"].clone()),
        (-32602, json!("invalid_request_state"))
    );
}

#[tokio::test]
async fn a_note_edited_between_approval_and_execution_stops_the_purge() {
    let server = Server::start().await;
    let alice = task_client(&server, "alice-token").await;
    let (state, _) = purge_challenge(&alice, &server).await;
    let created = purge_accept(&alice, &server, &state).await.unwrap();
    let task = task_id(&created);
    // Within the queue delay: note-14 gets a new body, so the set is no longer the one approved.
    let path = server.note_path("personal", "note-14");
    let edited = std::fs::read_to_string(&path).unwrap() + "\nand coffee";
    std::fs::write(&path, edited).unwrap();
    let done = settled(&alice, &task).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(text(&done["result"]).contains("changed"), "{done}");
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn cancelling_the_task_revokes_the_grant_and_only_its_owner_may() {
    let server = Server::start().await;
    let alice = task_client(&server, "alice-token").await;
    let bob = task_client(&server, "bob-token").await;
    let (state, _) = purge_challenge(&alice, &server).await;
    let created = purge_accept(&alice, &server, &state).await.unwrap();
    let task = task_id(&created);
    // Bob can neither see nor cancel alice's task: to him it does not exist.
    for denied in [
        bob.get_task(rmcp::model::GetTaskParams::new(task.clone()))
            .await
            .map(drop),
        bob.cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
            .await,
    ] {
        match denied {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{e:?}"),
            other => panic!("bob's tasks call answered {other:?}"),
        }
    }
    alice
        .cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
        .await
        .expect("tasks/cancel");
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    // Past the queue delay nothing ran, and the grant is revoked, not merely unstarted.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL);
}

/// Two instances sharing the grant store: the task runs on the first, rmcp's task manager on the
/// second has never heard of it. `tasks/get` and `tasks/cancel` work there too, for the task's
/// owner only, and a cancel there revokes the grant, so the purge never runs.
#[tokio::test]
async fn a_task_is_cancelled_from_another_instance_and_never_runs() {
    let grants: Arc<dyn mcp_confirm::grant::GrantStore> =
        Arc::new(mcp_confirm::grant::MemoryGrantStore::new());
    let first = Server::start_with(
        false,
        |data| notes::NotesStore::open(data).unwrap(),
        Arc::clone(&grants),
    )
    .await;
    let second = first.beside(grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let bob_there = task_client(&second, "bob-token").await;
    let (state, _) = purge_challenge(&alice, &first).await;
    let created = purge_accept(&alice, &first, &state).await.unwrap();
    let task = task_id(&created);
    for denied in [
        bob_there
            .get_task(rmcp::model::GetTaskParams::new(task.clone()))
            .await
            .map(drop),
        bob_there
            .cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
            .await,
    ] {
        match denied {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{e:?}"),
            other => panic!("bob's tasks call answered {other:?}"),
        }
    }
    let seen = alice_there
        .get_task(rmcp::model::GetTaskParams::new(task.clone()))
        .await
        .expect("tasks/get on the other instance");
    let seen = serde_json::to_value(seen).unwrap();
    assert_eq!(
        (&seen["taskId"], &seen["status"]),
        (&json!(task), &json!("working")),
        "{seen}"
    );
    alice_there
        .cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
        .await
        .expect("tasks/cancel on the other instance");
    let there = settled(&alice_there, &task).await;
    assert_eq!(there["status"], "cancelled", "{there}");
    // On the instance that holds the task, the purge finds its grant revoked.
    let here = settled(&alice, &task).await;
    assert_eq!(here["result"]["isError"], true, "{here}");
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
}

#[tokio::test]
async fn a_client_without_tasks_waits_for_the_same_grant_in_the_request() {
    let server = Server::start().await;
    let alice = form_client(&server, "alice-token").await;
    let (state, _) = purge_challenge(&alice, &server).await;
    let done = purge_accept(&alice, &server, &state).await.unwrap();
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(text(&done).contains("Deleted 3 notes"), "{done}");
    assert_eq!(server.notes_in("personal"), PERSONAL_WITHOUT_GROCERIES);
}

/// A `tasks/cancel` that lands after the task began its grant and before the purge acts: the
/// grant is revoked while its attempt re-checks, the attempt's last check before acting fails,
/// and nothing is deleted. (Found by an attack on the first version: the notes were deleted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_after_the_task_began_its_grant_stops_the_purge() {
    // Its `begin` answers 800 ms late once it started an attempt: the window in which a
    // `tasks/cancel` lands after the grant was begun and before the purge acts.
    let grants = Arc::new(crate::common::faulty::Faulty::new(
        mcp_confirm::grant::MemoryGrantStore::new(),
        crate::common::faulty::Faults {
            slow_after_begin: Some(std::time::Duration::from_millis(800)),
            ..Default::default()
        },
    ));
    let server = Server::start_with(
        false,
        |data| notes::NotesStore::open(data).unwrap(),
        Arc::clone(&grants) as Arc<dyn mcp_confirm::grant::GrantStore>,
    )
    .await;
    let alice = task_client(&server, "alice-token").await;
    let (state, _) = purge_challenge(&alice, &server).await;
    let task = task_id(&purge_accept(&alice, &server, &state).await.unwrap());
    tokio::time::timeout(std::time::Duration::from_secs(5), grants.began.notified())
        .await
        .expect("the task begins its grant");
    assert_eq!(
        server.notes_in("personal"),
        ALL_PERSONAL,
        "nothing deleted yet"
    );
    alice
        .cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
        .await
        .expect("tasks/cancel is acknowledged");
    let done = settled(&alice, &task).await;
    let id = grants
        .last_begun
        .lock()
        .unwrap()
        .expect("a grant was begun");
    let state = grants.inner.get(id).await.unwrap().unwrap().state;
    assert!(
        matches!(state, GrantState::Revoking { .. } | GrantState::Revoked),
        "{state:?}"
    );
    assert_eq!(server.notes_in("personal"), ALL_PERSONAL, "task {done}");
}
