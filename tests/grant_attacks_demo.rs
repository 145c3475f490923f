//! Attacks on the notes demo's queued purge (`notes_purge`, rmcp `TaskManager`), end to end over
//! real HTTP with the rmcp client, as in `tests/notes_e2e.rs`.
//!
//! Each test names the promise it attacks and shows that it holds.

#[path = "../examples/notes_server/app.rs"]
#[allow(dead_code)]
mod app;
#[path = "../examples/notes_server/notes.rs"]
#[allow(dead_code)]
mod notes;
#[path = "../examples/notes_server/queue.rs"]
#[allow(dead_code)]
mod queue;
#[path = "../examples/notes_server/signin.rs"]
mod signin;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_confirm::KeyRing;
use mcp_confirm::grant::{
    Begin, Finish, Grant, GrantId, GrantState, GrantStore, Lease, MemoryGrantStore, Revoke,
};
use mcp_confirm::store::{BoxFuture, StoreError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A memory grant store whose `begin` answers late (a slow network round trip, a paused
/// worker) once it has started an attempt: the window in which a `tasks/cancel` lands after the
/// grant was begun and before the purge acts. It remembers the last grant begun.
#[derive(Debug)]
struct SlowAfterBegin {
    inner: MemoryGrantStore,
    delay: Duration,
    began: Arc<Notify>,
    last: Mutex<Option<GrantId>>,
}

impl GrantStore for SlowAfterBegin {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.issue(grant)
    }
    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, StoreError>> {
        Box::pin(async move {
            let begun = self.inner.begin(id, lease).await;
            if let Ok(Begin::Started(_)) = begun {
                *self.last.lock().unwrap() = Some(id);
                self.began.notify_one();
                tokio::time::sleep(self.delay).await;
            }
            begun
        })
    }
    fn finish(&self, lease: Lease, outcome: Finish) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.inner.finish(lease, outcome)
    }
    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, StoreError>> {
        self.inner.revoke(id)
    }
    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.inner.confirm(lease)
    }
    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, StoreError>> {
        self.inner.get(id)
    }
}

struct Server {
    url: String,
    dir: PathBuf,
    store: Arc<notes::NotesStore>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    async fn start(grant_store: Arc<dyn GrantStore>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mcp-confirm-attack-{}",
            mcp_confirm::store::Nonce::random().to_hex()
        ));
        let store = Arc::new(notes::NotesStore::open(&dir.join("data")).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = app::Options {
            keys: KeyRing::single("k1", [0x5a; 32]).unwrap(),
            audience: "notes-attack".into(),
            replay_store: None,
            grant_store,
            public_url: format!("http://{addr}"),
            challenge_rate: app::ChallengeRate::Default,
            without_confirmation: false,
        };
        let router = app::app(Arc::clone(&store), options);
        let url = format!("http://{addr}/mcp");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, dir, store }
    }

    fn notes_in(&self, workspace: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.store.root_path().join(workspace))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
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
            Implementation::new("attack-client", "1.0.0"),
        )
    }
}

type Client = RunningService<RoleClient, TestClient>;

/// A client that shows forms and follows tasks.
async fn task_client(server: &Server, token: &str) -> Client {
    let capabilities = json!({
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    });
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()).auth_header(token),
    );
    TestClient {
        capabilities: serde_json::from_value(capabilities).unwrap(),
    }
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("connect")
}

fn purge_call(server: &Server) -> CallToolRequestParams {
    let args =
        json!({"workspaceUri": server.store.workspace_uri("personal"), "title": "Groceries"});
    let Value::Object(map) = args else {
        unreachable!()
    };
    CallToolRequestParams::new("notes_purge").with_arguments(JsonObject::from_iter(map))
}

/// Alice asks to purge "Groceries", accepts the form, and gets a task: its id.
async fn purge_task(client: &Client, server: &Server) -> String {
    let first = match client.call_tool_once(purge_call(server)).await {
        Ok(CallToolResponse::InputRequired(r)) => serde_json::to_value(r).unwrap(),
        other => panic!("expected input_required, got {other:?}"),
    };
    let state = first["requestState"].as_str().unwrap().to_owned();
    let responses = serde_json::from_value(
        json!({"purge_choice": {"action": "accept", "content": {"set": "all", "confirm": true}}}),
    )
    .unwrap();
    let retry = purge_call(server)
        .with_request_state(state)
        .with_input_responses(responses);
    match client.call_tool_once(retry).await {
        Ok(CallToolResponse::Task(created)) => {
            let created = serde_json::to_value(created).unwrap();
            created["taskId"].as_str().unwrap().to_owned()
        }
        Ok(other) => panic!("expected a task, got {other:?}"),
        Err(ServiceError::McpError(e)) => panic!("refused: {e:?}"),
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never settled");
}

/// Alice's `tasks/cancel` lands after the task's `begin` and before the purge acts (here: the
/// grant store's answer to `begin` is slow). The grant is revoked while its attempt re-checks,
/// so the attempt's last check before acting fails: nothing is deleted. (Before the fix, the
/// three notes were deleted and the task reported "Deleted 3 notes".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_demo_cancel_after_begin_stops_the_purge() {
    let began = Arc::new(Notify::new());
    let grants = Arc::new(SlowAfterBegin {
        inner: MemoryGrantStore::new(),
        delay: Duration::from_millis(800),
        began: Arc::clone(&began),
        last: Mutex::new(None),
    });
    let server = Server::start(Arc::clone(&grants) as Arc<dyn GrantStore>).await;
    let alice = task_client(&server, "alice-token").await;
    let before = server.notes_in("personal");
    assert_eq!(before.len(), 5);
    let task = purge_task(&alice, &server).await;
    // The task begins its grant after the queue delay; nothing is deleted yet.
    tokio::time::timeout(Duration::from_secs(5), began.notified())
        .await
        .expect("the task begins its grant");
    assert_eq!(server.notes_in("personal"), before, "nothing deleted yet");
    alice
        .cancel_task(rmcp::model::CancelTaskParams::new(task.clone()))
        .await
        .expect("tasks/cancel is acknowledged");
    let done = settled(&alice, &task).await;
    let id = grants.last.lock().unwrap().expect("a grant was begun");
    let state = grants.inner.get(id).await.unwrap().unwrap().state;
    assert!(
        matches!(state, GrantState::Revoking { .. } | GrantState::Revoked),
        "{state:?}"
    );
    assert_eq!(
        server.notes_in("personal"),
        before,
        "tasks/cancel was acknowledged and the grant revoked, yet the purge ran: task {done}"
    );
}
