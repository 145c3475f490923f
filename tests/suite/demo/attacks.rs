//! The notes server on its defaults, attacked the way issue 9 found it broken: a `notes_server`
//! process over real HTTP, the note files checked on disk.
//!
//! 1. A record replaced or edited after the form was shown is not deleted by the old approval.
//! 2. A state from before a restart is not carried out again (memory store: refused, "ask again";
//!    Redis and Postgres: carried out once, across restarts).
//! 3. One principal's flood does not lock the others out (per-principal budget, challenge rate).
//!
//! Plus the server's own hardening: concurrent creates never collide, a stalled body or header is
//! dropped within its timeout.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::notes_http::{
    Instance, TempDir, accept, answering, assert_revoked, offered_ids, post, result_text, tool_call,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "21a5e0288c67e46adc83ab09a47dea7aa82300e286bb8659789b1f5f86b3c4d8";
const AUDIENCE: &str = "https://notes-attacks.example/mcp";

/// One data directory and the server currently running on it.
struct Demo {
    _dir: TempDir,
    data: PathBuf,
    http: reqwest::Client,
    next_id: std::sync::atomic::AtomicU64,
}

impl Demo {
    fn new() -> Self {
        let dir = TempDir::new("mcp-confirm-attacks");
        let data = dir.path().join("data");
        Self {
            _dir: dir,
            data,
            http: reqwest::Client::new(),
            next_id: 1.into(),
        }
    }

    async fn start(&self, args: &[&str]) -> Instance {
        Instance::start(&self.data, args).await
    }

    fn workspace(&self, name: &str) -> String {
        format!(
            "file://{}/{name}",
            self.data.canonicalize().unwrap().display()
        )
    }

    fn note(&self, workspace: &str, id: &str) -> PathBuf {
        self.data.join(workspace).join(format!("{id}.md"))
    }

    fn id(&self) -> Value {
        json!(
            self.next_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    }

    fn delete_call(&self, workspace: &str, title: &str) -> Value {
        tool_call(
            self.id(),
            "notes_delete",
            json!({"workspaceUri": self.workspace(workspace), "title": title}),
        )
    }

    async fn send(&self, server: &Instance, token: &str, body: &Value) -> Value {
        post(&self.http, &server.url, token, body).await.2
    }

    /// The first round; returns the state and the ids offered.
    async fn challenge(
        &self,
        server: &Instance,
        token: &str,
        workspace: &str,
        title: &str,
    ) -> (String, Vec<String>) {
        let first = self
            .send(server, token, &self.delete_call(workspace, title))
            .await;
        let result = &first["result"];
        assert_eq!(result["resultType"], "input_required", "{first}");
        (
            result["requestState"].as_str().unwrap().to_owned(),
            offered_ids(result),
        )
    }

    /// Alice's first round about "Groceries" in `personal`; returns the state and the ids offered.
    async fn alices_form(&self, server: &Instance) -> (String, Vec<String>) {
        self.challenge(server, "alice-token", "personal", "Groceries")
            .await
    }

    /// The retry answering `state` by accepting `id`, as alice in `personal` about "Groceries".
    fn accept_body(&self, state: &str, id: &str) -> Value {
        answering(self.delete_call("personal", "Groceries"), state, accept(id))
    }

    /// Alice sends the retry answering `state` by accepting `id`.
    async fn alice_accepts(&self, server: &Instance, state: &str, id: &str) -> Value {
        self.send(server, "alice-token", &self.accept_body(state, id))
            .await
    }

    async fn create(&self, server: &Instance, token: &str, workspace: &str, title: &str) -> Value {
        let call = tool_call(
            self.id(),
            "notes_create",
            json!({"workspaceUri": self.workspace(workspace), "title": title,
                   "body": "Party: crisps, lemonade, 40 paper cups."}),
        );
        self.send(server, token, &call).await
    }
}

fn error_reason(answer: &Value) -> (i64, &str) {
    (
        answer["error"]["code"].as_i64().unwrap_or_default(),
        answer["error"]["data"]["reason"]
            .as_str()
            .unwrap_or_default(),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// 1. What the user approved is what gets deleted, or nothing.

#[tokio::test]
async fn a_record_replaced_after_the_form_is_not_deleted_by_the_old_approval() {
    let demo = Demo::new();
    let server = demo.start(&[]).await;
    // Alice's form lists note-14, "Groceries: Party: crisps…".
    let (old_form, ids) = demo.alices_form(&server).await;
    assert!(ids.contains(&"note-14".to_owned()), "{ids:?}");
    // Before she answers, note-14 is deleted by another confirmed flow...
    let (other, _) = demo.alices_form(&server).await;
    let done = demo.alice_accepts(&server, &other, "note-14").await;
    assert!(result_text(&done).starts_with("Deleted note-14"), "{done}");
    // ...and a new "Groceries" note with the same words is made: it never gets the old id.
    let created = demo
        .create(&server, "alice-token", "personal", "Groceries")
        .await;
    let new_id = result_text(&created)
        .strip_prefix("Created ")
        .and_then(|t| t.strip_suffix('.'))
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    assert_ne!(new_id, "note-14");
    // Someone (a sync tool, another editor) puts a different note-14.md back on disk.
    let note_14 = demo.note("personal", "note-14");
    let replacement = "Groceries\nNot the list alice saw: the one for the wedding.\n";
    std::fs::write(&note_14, replacement).unwrap();
    // The old approval deletes neither.
    let answer = demo.alice_accepts(&server, &old_form, "note-14").await;
    assert_revoked(&answer);
    assert_eq!(read(&note_14), replacement);
    assert!(demo.note("personal", &new_id).exists());
}

#[tokio::test]
async fn a_record_edited_after_the_form_is_not_deleted_and_an_unchanged_one_is() {
    let demo = Demo::new();
    let server = demo.start(&[]).await;
    let (state, _) = demo.alices_form(&server).await;
    // note-7's body is edited on disk between the form and the answer; the title stays.
    let note_7 = demo.note("personal", "note-7");
    let edited = "Groceries\nApples, coffee, oat milk for the office. AND the passport renewal.\n";
    std::fs::write(&note_7, edited).unwrap();
    let answer = demo.alice_accepts(&server, &state, "note-7").await;
    assert_revoked(&answer);
    assert_eq!(read(&note_7), edited);
    // A note left as it was shown is deleted as before.
    let (state, _) = demo.alices_form(&server).await;
    let done = demo.alice_accepts(&server, &state, "note-3").await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(result_text(&done).starts_with("Deleted note-3"), "{done}");
    assert!(!demo.note("personal", "note-3").exists());
    assert!(note_7.exists() && demo.note("personal", "note-14").exists());
}

// ---------------------------------------------------------------------------------------------
// 2. Restarts.

#[tokio::test]
async fn the_memory_store_refuses_states_from_before_a_restart() {
    let demo = Demo::new();
    let args = ["--key", KEY, "--audience", AUDIENCE];
    let server = demo.start(&args).await;
    // Accepted and carried out once.
    let (state, _) = demo.alices_form(&server).await;
    let retry = demo.accept_body(&state, "note-3");
    let done = demo.send(&server, "alice-token", &retry).await;
    assert!(result_text(&done).starts_with("Deleted note-3"), "{done}");
    // Issued before the restart, first answered after it.
    let (unanswered, _) = demo.alices_form(&server).await;
    let first_run = server.output();
    drop(server);
    let server = demo.start(&args).await;
    // The same note is back (same bytes, same version): only the state decides now.
    let note_3 = demo.note("personal", "note-3");
    std::fs::write(&note_3, "Groceries\nMilk, eggs, rye bread.\n").unwrap();
    // The exact same retry body is refused: ask again.
    let again = demo.send(&server, "alice-token", &retry).await;
    assert_eq!(
        error_reason(&again),
        (-32602, "request_state_restarted"),
        "{again}"
    );
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ask again"),
        "{again}"
    );
    assert!(note_3.exists());
    let late = demo.alice_accepts(&server, &unanswered, "note-7").await;
    assert_eq!(
        error_reason(&late),
        (-32602, "request_state_restarted"),
        "{late}"
    );
    assert!(demo.note("personal", "note-7").exists());
    // Asking again works.
    let (fresh, _) = demo.alices_form(&server).await;
    let done = demo.alice_accepts(&server, &fresh, "note-7").await;
    assert!(result_text(&done).starts_with("Deleted note-7"), "{done}");
    // And the operator was told why.
    assert!(
        first_run.contains(
            "the memory replay store cannot promise single use across restarts, so states \
             issued before a restart are refused (\"ask again\"); use --replay-store redis://… \
             or postgres://… for that."
        ),
        "{first_run}"
    );
}

/// With a shared store, a state issued before a restart is carried out after it, and only once.
async fn a_state_survives_restarts_once(store_url: &str) {
    let demo = Demo::new();
    let args = [
        "--key",
        KEY,
        "--audience",
        AUDIENCE,
        "--replay-store",
        store_url,
    ];
    let server = demo.start(&args).await;
    let (state, _) = demo.alices_form(&server).await;
    let retry = demo.accept_body(&state, "note-7");
    assert!(!server.output().contains("cannot promise single use"));
    drop(server);
    let server = demo.start(&args).await;
    let done = demo.send(&server, "alice-token", &retry).await;
    assert!(result_text(&done).starts_with("Deleted note-7"), "{done}");
    let note_7 = demo.note("personal", "note-7");
    assert!(!note_7.exists());
    drop(server);
    let server = demo.start(&args).await;
    std::fs::write(
        &note_7,
        "Groceries\nApples, coffee, oat milk for the office.\n",
    )
    .unwrap();
    let again = demo.send(&server, "alice-token", &retry).await;
    assert_eq!(
        error_reason(&again),
        (-32602, "invalid_request_state"),
        "{again}"
    );
    assert!(note_7.exists());
}

#[tokio::test]
async fn a_redis_store_carries_a_state_across_restarts_once() {
    if let Some(url) = crate::backends::redis("restart test").await {
        a_state_survives_restarts_once(&url).await;
    }
}

#[tokio::test]
async fn a_postgres_store_carries_a_state_across_restarts_once() {
    if let Some(url) = crate::backends::postgres("restart test").await {
        a_state_survives_restarts_once(&url).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Floods.

#[tokio::test]
async fn one_principals_flood_spends_only_its_own_budget() {
    let demo = Demo::new();
    // 300 entries at most, so 3 per principal; forms unlimited, so the store is what is tested.
    let server = demo
        .start(&["--replay-store", "memory:300", "--challenge-rate", "off"])
        .await;
    let mut outcomes = Vec::new();
    for _ in 0..300 {
        let (state, _) = demo
            .challenge(&server, "bob-token", "team", "Sprint plan")
            .await;
        let decline = answering(
            demo.delete_call("team", "Sprint plan"),
            &state,
            json!({"action":"decline"}),
        );
        let (status, headers, answer) = post(&demo.http, &server.url, "bob-token", &decline).await;
        if answer["result"]["resultType"] == "complete" && answer["result"]["isError"] == false {
            outcomes.push("declined");
            continue;
        }
        assert_eq!(
            (status, error_reason(&answer)),
            (429, (-31003, "principal_budget_spent")),
            "{answer}"
        );
        let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry_after >= 1, "{retry_after}");
        assert!(answer["error"]["data"]["retryAfter"].as_u64().unwrap() >= 1);
        outcomes.push("over budget");
    }
    assert_eq!(outcomes[..3], ["declined"; 3]);
    assert!(
        outcomes[3..].iter().all(|o| *o == "over budget"),
        "{outcomes:?}"
    );
    assert!(demo.note("team", "note-5").exists());
    // Alice is unaffected.
    let (state, _) = demo.alices_form(&server).await;
    let done = demo.alice_accepts(&server, &state, "note-7").await;
    assert!(result_text(&done).starts_with("Deleted note-7"), "{done}");
    assert!(!demo.note("personal", "note-7").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_challenges_are_rate_limited_per_principal() {
    let demo = Arc::new(Demo::new());
    let server = Arc::new(demo.start(&[]).await);
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let (demo, server) = (Arc::clone(&demo), Arc::clone(&server));
            tokio::spawn(async move {
                let call = demo.delete_call("team", "Sprint plan");
                post(&demo.http, &server.url, "bob-token", &call).await
            })
        })
        .collect();
    let (mut forms, mut limited) = (0, 0);
    for task in tasks {
        let (status, headers, answer) = task.await.unwrap();
        if answer["result"]["resultType"] == "input_required" {
            forms += 1;
            continue;
        }
        assert_eq!(
            (status, error_reason(&answer)),
            (429, (-31003, "challenge_rate_limited")),
            "{answer}"
        );
        assert!(headers.contains_key("retry-after"), "{headers:?}");
        limited += 1;
    }
    assert!(
        limited > 0 && forms >= 30,
        "forms {forms}, limited {limited}"
    );
    // Alice still gets her form.
    let (_, ids) = demo.alices_form(&server).await;
    assert_eq!(ids, ["note-3", "note-7", "note-14"]);
}

// ---------------------------------------------------------------------------------------------
// The server itself.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_on_the_file_store_never_collide() {
    let demo = Arc::new(Demo::new());
    let server = Arc::new(demo.start(&[]).await);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (demo, server) = (Arc::clone(&demo), Arc::clone(&server));
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..25 {
                    answers.push(demo.create(&server, "alice-token", "team", "Load").await);
                }
                answers
            })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut failures = Vec::new();
    for task in tasks {
        for answer in task.await.unwrap() {
            match result_text(&answer).strip_prefix("Created ") {
                Some(id) if answer["result"]["isError"] == false => {
                    ids.insert(id.trim_end_matches('.').to_owned());
                }
                _ => failures.push(answer),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(ids.len(), 200);
    for id in &ids {
        assert!(demo.note("team", id).exists(), "{id}");
    }
    assert_eq!(
        std::fs::read_dir(demo.data.join("team")).unwrap().count(),
        202
    );
}

/// Sends `head` (and nothing after it) on a fresh connection; returns how long until the server
/// answered or closed, and what it sent.
async fn stall(addr: &str, head: &[u8]) -> (Duration, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    let started = Instant::now();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "neither answered nor closed in 10 s; got {:?}",
        String::from_utf8_lossy(&received)
    );
    (
        started.elapsed(),
        String::from_utf8_lossy(&received).into_owned(),
    )
}

#[tokio::test]
async fn a_stalled_body_or_header_is_dropped_within_its_timeout() {
    let demo = Demo::new();
    let server = demo
        .start(&["--body-timeout-ms", "500", "--header-timeout-ms", "500"])
        .await;
    let body_start = br#"{"jsonrpc""#;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nAuthorization: Bearer alice-token\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: notes_delete\r\n\
         Content-Length: 1000\r\n\r\n{}",
        server.addr,
        String::from_utf8_lossy(body_start)
    );
    let (waited, answer) = stall(&server.addr, head.as_bytes()).await;
    assert!(waited < Duration::from_secs(5), "{waited:?}: {answer}");
    // Headers that never end are dropped too.
    let (waited, answer) = stall(
        &server.addr,
        format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", server.addr).as_bytes(),
    )
    .await;
    assert!(waited < Duration::from_secs(5), "{waited:?}: {answer}");
    // And the server keeps serving.
    let list = tool_call(
        json!(1),
        "notes_list",
        json!({"workspaceUri": demo.workspace("team")}),
    );
    let listed = demo.send(&server, "alice-token", &list).await;
    assert_eq!(
        result_text(&listed),
        "note-5: Sprint plan\nnote-8: Retro notes"
    );
}

/// A body that trickles in (a byte every 100 ms: never a pause long enough for the body timeout)
/// is still cut off by the whole-request deadline, long before it is complete.
#[tokio::test]
async fn a_trickling_body_is_cut_off_by_the_request_deadline() {
    let demo = Demo::new();
    let server = demo
        .start(&["--body-timeout-ms", "500", "--request-timeout-ms", "1500"])
        .await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nAuthorization: Bearer alice-token\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: notes_delete\r\n\
         Content-Length: 1000\r\n\r\n",
        server.addr
    );
    let stream = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(head.as_bytes()).await.unwrap();
    let trickle = tokio::spawn(async move {
        let mut sent = 0;
        while sent < 1000 {
            if writer.write_all(b" ").await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    });
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                received.extend_from_slice(&buf[..n]);
                if received.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    let answer = String::from_utf8_lossy(&received).into_owned();
    // 408 comes only from the request deadline, and only before the body is complete.
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(!trickle.is_finished(), "the whole body arrived first");
    trickle.abort();
}
