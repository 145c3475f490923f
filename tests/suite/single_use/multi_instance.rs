//! Two notes-server processes, no shared memory, one shared replay store (Redis, then Postgres):
//! 64 concurrent retries of one accepted confirmation, split across both, delete exactly one note
//! and get 63 clean refusals. Twenty rounds per backend.
//!
//! Backends are found like the store suite finds them (`REDIS_URL`, `POSTGRES_URL`); an unreachable
//! one is reported and skipped unless `MCP_CONFIRM_REQUIRE_BACKENDS=1`.

use std::sync::Arc;

use crate::notes_http::{Instance, TempDir, accept, answering, result_text};
use serde_json::{Value, json};

const RETRIES: usize = 64;
const ROUNDS: usize = 20;
const KEY: &str = "6e24993cf5096d1a6104a5b7d1078e2bf13c83b12635441a799f9c155b04ca56";

struct Cluster {
    urls: [String; 2],
    data: std::path::PathBuf,
    // Dropped in this order: the instances, then their directory.
    _instances: [Instance; 2],
    _dir: TempDir,
}

async fn start_cluster(store_url: &str) -> Cluster {
    let dir = TempDir::new("mcp-confirm-multi");
    let data = dir.path().join("data");
    let args = [
        "--key",
        KEY,
        "--audience",
        "https://notes-cluster.example/mcp",
        "--replay-store",
        store_url,
    ];
    // The first instance seeds the data directory; the second opens it. Each writes its own
    // decision log (one log directory has one writer: a second refuses to start on it).
    let with_log = |name: &str| {
        let log = dir.path().join(name).display().to_string();
        let mut own: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        own.extend(["--audit-dir".to_owned(), log]);
        own
    };
    let (args_a, args_b) = (with_log("decisions-a"), with_log("decisions-b"));
    let a = Instance::start(
        &data,
        &args_a.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let b = Instance::start(
        &data,
        &args_b.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    Cluster {
        urls: [a.url.clone(), b.url.clone()],
        data,
        _instances: [a, b],
        _dir: dir,
    }
}

fn workspace(data: &std::path::Path) -> String {
    format!("file://{}/personal", data.canonicalize().unwrap().display())
}

fn call(id: Value, ws: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}},
        "name":"notes_delete","arguments":{"workspaceUri":ws,"title":"Groceries"}}})
}

async fn run_rounds(backend: &str, store_url: &str) {
    let cluster = start_cluster(store_url).await;
    let http = reqwest::Client::new();
    let ws = workspace(&cluster.data);
    let note = cluster.data.join("personal/note-7.md");
    for round in 0..ROUNDS {
        std::fs::write(
            &note,
            "Groceries\nApples, coffee, oat milk for the office.\n",
        )
        .unwrap();
        let first = crate::notes_http::post_delete(
            &http,
            &cluster.urls[round % 2],
            &call(json!(format!("{round}-first")), &ws),
        )
        .await;
        let state = first["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("{first}"))
            .to_owned();
        let barrier = Arc::new(tokio::sync::Barrier::new(RETRIES));
        let tasks: Vec<_> = (0..RETRIES)
            .map(|i| {
                let retry = answering(
                    call(json!(format!("{round}-{i}")), &ws),
                    &state,
                    accept("note-7"),
                );
                let (http, url, barrier) =
                    (http.clone(), cluster.urls[i % 2].clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    crate::notes_http::post_delete(&http, &url, &retry).await
                })
            })
            .collect();
        let (mut deleted, mut refused) = (0, 0);
        for task in tasks {
            let answer = task.await.unwrap();
            if result_text(&answer).starts_with("Deleted note-7") {
                deleted += 1;
            } else if answer["error"]["data"]["reason"] == "invalid_request_state" {
                refused += 1;
            } else {
                panic!("{backend} round {round}: unexpected answer {answer}");
            }
        }
        assert_eq!(
            (deleted, refused),
            (1, RETRIES - 1),
            "{backend} round {round}"
        );
        assert!(!note.exists());
        assert!(
            cluster.data.join("personal/note-3.md").exists()
                && cluster.data.join("personal/note-14.md").exists()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_redis_store_run_a_confirmation_once() {
    if let Some(url) = crate::backends::redis("two-instance test").await {
        run_rounds("redis", &url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_postgres_store_run_a_confirmation_once() {
    if let Some(url) = crate::backends::postgres("two-instance test").await {
        run_rounds("postgres", &url).await;
    }
}
