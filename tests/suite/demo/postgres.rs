//! The transactional mode: notes in Postgres, the handler claiming the confirmation and deleting in
//! one transaction (examples/notes_postgres.rs), over real HTTP.

#[path = "../../../examples/notes_postgres.rs"]
#[allow(dead_code)]
mod pg;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::notes_http::{accept, answering, assert_revoked, outcome, result_text};
use mcp_confirm::KeyRing;
use serde_json::{Value, json};

struct Server {
    url: String,
    db: pg::Db,
    suffix: String,
}

impl Server {
    async fn start() -> Option<Self> {
        let url = crate::backends::postgres_url();
        let suffix = mcp_confirm::store::Nonce::random().to_hex()[..12].to_owned();
        let db = match pg::Db::open(
            &url,
            &format!("notes_{suffix}"),
            &format!("nonces_{suffix}"),
        )
        .await
        {
            Ok(db) => db,
            Err(e) => {
                return crate::backends::unavailable("transactional notes test", "Postgres", e);
            }
        };
        let router = pg::app(
            db.clone(),
            KeyRing::single("k1", crate::common::secret(9)).unwrap(),
            "https://notes-pg-test.example/mcp",
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Some(Self { url, db, suffix })
    }

    async fn scalar(&self, sql: &str) -> i64 {
        let client = self.db.pool.get().await.unwrap();
        client.query_one(sql, &[]).await.unwrap().get(0)
    }

    async fn notes(&self, id: &str) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM notes_{} WHERE workspace = 'personal' AND id = '{id}'",
            self.suffix
        ))
        .await
    }

    async fn used_nonces(&self) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM nonces_{} WHERE state = 'consumed'",
            self.suffix
        ))
        .await
    }

    async fn post(&self, body: &Value) -> Value {
        crate::notes_http::post_delete(&reqwest::Client::new(), &self.url, body).await
    }

    /// Drops this test's tables (on success; a failed test leaves them for inspection).
    async fn cleanup(&self) {
        let client = self.db.pool.get().await.unwrap();
        let sql = format!("DROP TABLE notes_{0}; DROP TABLE nonces_{0};", self.suffix);
        client.batch_execute(&sql).await.unwrap();
    }

    async fn challenge(&self) -> String {
        let first = self.post(&call(json!(1))).await;
        first["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("{first}"))
            .to_owned()
    }

    /// The retry with `id` answering `state` with `response`.
    async fn answer(&self, id: Value, state: &str, response: Value) -> Value {
        self.post(&answering(call(id), state, response)).await
    }
}

fn call(id: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}},
        "name":"notes_delete","arguments":{"workspace":"personal","title":"Groceries"}}})
}

/// The answer says `id` was deleted from `personal`.
fn assert_deleted(answer: &Value, id: &str) {
    assert_eq!(
        result_text(answer),
        format!("Deleted {id} from personal."),
        "{answer}"
    );
}

#[tokio::test]
async fn claim_and_delete_commit_together() {
    let Some(server) = Server::start().await else {
        return;
    };
    let state = server.challenge().await;
    let done = server.answer(json!(2), &state, accept("note-7")).await;
    assert_deleted(&done, "note-7");
    assert_eq!(server.notes("note-7").await, 0);
    assert_eq!(server.used_nonces().await, 1);
    // Replaying the same confirmation deletes nothing more.
    let again = server.answer(json!(3), &state, accept("note-3")).await;
    assert_ne!(
        result_text(&again),
        "Deleted note-3 from personal.",
        "{again}"
    );
    assert_eq!(server.notes("note-3").await, 1);
}

#[tokio::test]
async fn a_failure_before_commit_leaves_nothing_claimed_and_nothing_deleted() {
    let Some(server) = Server::start().await else {
        return;
    };
    let state = server.challenge().await;
    server.db.fail_after_claim.store(true, Ordering::SeqCst);
    let failed = server.answer(json!(2), &state, accept("note-7")).await;
    assert!(failed.get("error").is_some(), "{failed}");
    assert_eq!(server.notes("note-7").await, 1);
    assert_eq!(server.used_nonces().await, 0);
    // The claim rolled back with the delete: the same confirmation can still be carried out.
    server.db.fail_after_claim.store(false, Ordering::SeqCst);
    let done = server.answer(json!(3), &state, accept("note-7")).await;
    assert_deleted(&done, "note-7");
    assert_eq!(server.used_nonces().await, 1);
    server.cleanup().await;
}

#[tokio::test]
async fn a_declined_confirmation_cannot_be_carried_out_later() {
    let Some(server) = Server::start().await else {
        return;
    };
    let state = server.challenge().await;
    let declined = server
        .answer(json!(2), &state, json!({"action":"decline"}))
        .await;
    assert_eq!(declined["result"]["isError"], false, "{declined}");
    assert_eq!(server.used_nonces().await, 1);
    // Refused by the layer before the handler runs (the handler would refuse it too).
    let later = server.answer(json!(3), &state, accept("note-7")).await;
    assert_eq!(
        later["error"]["data"]["reason"], "invalid_request_state",
        "{later}"
    );
    assert_eq!(server.notes("note-7").await, 1);
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_delete_once() {
    let Some(server) = Server::start().await else {
        return;
    };
    let server = Arc::new(server);
    for round in 0..5 {
        let client = server.db.pool.get().await.unwrap();
        let sql = format!(
            "INSERT INTO notes_{} VALUES ('personal', 'note-7', 'Groceries', 'again') ON CONFLICT DO NOTHING",
            server.suffix
        );
        client.execute(&sql, &[]).await.unwrap();
        let state = server.challenge().await;
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (server, state, barrier) = (server.clone(), state.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    server
                        .answer(json!(format!("{round}-{i}")), &state, accept("note-7"))
                        .await
                })
            })
            .collect();
        let mut deleted = 0;
        for task in tasks {
            if result_text(&task.await.unwrap()).starts_with("Deleted") {
                deleted += 1;
            }
        }
        assert_eq!(deleted, 1, "round {round}");
        assert_eq!(server.notes("note-7").await, 0);
        assert_eq!(server.used_nonces().await, round + 1);
    }
    server.cleanup().await;
}

#[tokio::test]
async fn an_edited_or_recreated_note_is_not_deleted_by_the_old_approval() {
    let Some(server) = Server::start().await else {
        return;
    };
    let table = format!("notes_{}", server.suffix);
    let exec = |sql: String| {
        let pool = server.db.pool.clone();
        async move {
            let client = pool.get().await.unwrap();
            client.batch_execute(&sql).await.unwrap();
        }
    };
    // Edited between the form and the answer: an edit takes a new version.
    let state = server.challenge().await;
    exec(format!(
        "UPDATE {table} SET body = body || ' And the passport.', version = DEFAULT \
         WHERE workspace = 'personal' AND id = 'note-7'"
    ))
    .await;
    let answer = server.answer(json!(2), &state, accept("note-7")).await;
    assert_revoked(&answer);
    assert_eq!(server.notes("note-7").await, 1);
    // Deleted and re-created with the same id and words: a new row, a new version.
    let state = server.challenge().await;
    exec(format!(
        "DELETE FROM {table} WHERE workspace = 'personal' AND id = 'note-14'; \
         INSERT INTO {table} (workspace, id, title, body) \
         VALUES ('personal', 'note-14', 'Groceries', 'Party: crisps, lemonade, 40 paper cups.')"
    ))
    .await;
    let answer = server.answer(json!(3), &state, accept("note-14")).await;
    assert_eq!(outcome(&answer), "revoked", "{answer}");
    assert_eq!(server.notes("note-14").await, 1);
    // Unchanged: deleted as before.
    let state = server.challenge().await;
    let done = server.answer(json!(4), &state, accept("note-3")).await;
    assert_deleted(&done, "note-3");
    assert_eq!(server.notes("note-3").await, 0);
    server.cleanup().await;
}
