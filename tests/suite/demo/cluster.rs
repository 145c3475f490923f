//! The demo server as a deployment: one or several instances over one data directory and one
//! grant store, an rmcp client per principal, and the tasks it runs. Shared by the attacks that
//! need a real server (sign-in, approvals across instances, the tasks).

use mcp_confirm_demo::{app, notes};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use mcp_confirm::KeyRing;
use mcp_confirm::grant::{GrantStore, MemoryGrantStore};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

// =============================================================================================
// Fixtures: the demo server, one or several instances of one deployment.
// =============================================================================================

/// A directory removed on drop.
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One instance of the demo deployment on 127.0.0.1.
pub(crate) struct Instance {
    pub(crate) base: String,
    pub(crate) store: Arc<notes::NotesStore>,
}

impl Instance {
    pub(crate) fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    pub(crate) fn workspace(&self, name: &str) -> String {
        self.store.workspace_uri(name)
    }

    pub(crate) fn notes_in(&self, workspace: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.store.root_path().join(workspace))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    pub(crate) fn note_path(&self, workspace: &str, id: &str) -> std::path::PathBuf {
        self.store
            .root_path()
            .join(workspace)
            .join(format!("{id}.md"))
    }
}

/// A fresh notes directory (removed on drop) and its store.
pub(crate) fn notes_store() -> (TempDir, Arc<notes::NotesStore>) {
    let dir = std::env::temp_dir().join(format!(
        "mcp-confirm-attack19-{}",
        mcp_confirm::store::Nonce::random().to_hex()
    ));
    let store = Arc::new(notes::NotesStore::open(&dir.join("data")).unwrap());
    (TempDir(dir), store)
}

/// Serves one instance of the deployment over `store` and `grants` (its own replay store and
/// rmcp task manager, as a second process would have).
pub(crate) async fn instance(
    store: &Arc<notes::NotesStore>,
    grants: Arc<dyn GrantStore>,
) -> Instance {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = app::Options {
        keys: KeyRing::single("k1", secret(0x19)).unwrap(),
        audience: "https://notes-attack-19.example/mcp".into(),
        replay_store: None,
        grant_store: grants,
        public_url: format!("http://{addr}"),
        challenge_rate: app::ChallengeRate::Default,
        without_confirmation: false,
        audit_log: None,
        notifier: None,
    };
    let router = app::app(Arc::clone(store), options);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Instance {
        base: format!("http://{addr}"),
        store: Arc::clone(store),
    }
}

#[derive(Clone)]
pub(crate) struct Handler {
    pub(crate) capabilities: ClientCapabilities,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("attack-19", "1.0.0"),
        )
    }
}

pub(crate) type Client = RunningService<RoleClient, Handler>;

/// A client of `instance` as `token` that answers forms and follows tasks.
pub(crate) async fn task_client(instance: &Instance, token: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(instance.url()).auth_header(token),
    );
    let capabilities = serde_json::from_value(json!({
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }))
    .unwrap();
    Handler { capabilities }
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect")
}

pub(crate) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

pub(crate) fn purge_call(instance: &Instance) -> CallToolRequestParams {
    CallToolRequestParams::new("notes_purge").with_arguments(object(
        json!({"workspaceUri": instance.workspace("personal"), "title": "Groceries"}),
    ))
}

/// Alice (or whoever `client` is) confirms purging "Groceries": the task id.
pub(crate) async fn purged_task(client: &Client, instance: &Instance) -> String {
    let first = match client.call_tool_once(purge_call(instance)).await {
        Ok(CallToolResponse::InputRequired(result)) => serde_json::to_value(result).unwrap(),
        other => panic!("expected input_required, got {other:?}"),
    };
    let state = first["requestState"].as_str().unwrap().to_owned();
    let responses = serde_json::from_value(
        json!({"purge_choice": {"action": "accept", "content": {"set": "all", "confirm": true}}}),
    )
    .unwrap();
    let call = purge_call(instance)
        .with_request_state(state)
        .with_input_responses(responses);
    match client.call_tool_once(call).await {
        Ok(CallToolResponse::Task(created)) => {
            let created = serde_json::to_value(created).unwrap();
            created["taskId"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

/// `tasks/get` as JSON, or the JSON-RPC error (code, message).
pub(crate) async fn get_task(client: &Client, id: &str) -> Result<Value, (i32, String)> {
    match client
        .get_task(rmcp::model::GetTaskParams::new(id.to_owned()))
        .await
    {
        Ok(task) => Ok(serde_json::to_value(task).unwrap()),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.message.to_string())),
        Err(e) => panic!("transport error {e}"),
    }
}

/// `tasks/cancel`: `Ok` or the JSON-RPC error (code, message).
pub(crate) async fn cancel_task(client: &Client, id: &str) -> Result<(), (i32, String)> {
    match client
        .cancel_task(rmcp::model::CancelTaskParams::new(id.to_owned()))
        .await
    {
        Ok(()) => Ok(()),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.message.to_string())),
        Err(e) => panic!("transport error {e}"),
    }
}

/// Polls `tasks/get` until the task is no longer working.
pub(crate) async fn settled(client: &Client, id: &str) -> Value {
    for _ in 0..200 {
        let task = get_task(client, id).await.expect("tasks/get");
        if task["status"] != "working" {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never settled");
}

pub(crate) const ALL_PERSONAL: [&str; 5] = [
    "note-1.md",
    "note-14.md",
    "note-2.md",
    "note-3.md",
    "note-7.md",
];

/// A grant store that forwards to a memory store.
pub(crate) fn shared_grants() -> Arc<dyn GrantStore> {
    Arc::new(MemoryGrantStore::new())
}
