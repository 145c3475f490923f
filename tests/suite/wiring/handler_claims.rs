//! Issue 34, mistake 2: `claimed_by_handler` copied from the PostgreSQL example onto a server
//! whose handler never claims (and a memory store): one accepted retry ran the handler three
//! times. The layer now refuses to build a `claimed_by_handler` tool on a store its handler
//! cannot claim in, refuses a used state before it reaches the handler, and, once a call is
//! over, burns a nonce the handler left unclaimed.

use std::time::Duration;

use mcp_confirm::ConfigError;
use mcp_confirm::store::{MemoryReplayStore, PostgresStore, ReplayStore};
use serde_json::json;

use crate::common::*;

#[test]
fn on_a_store_no_handler_can_claim_in_the_layer_does_not_build() {
    let notes = Notes::seeded();
    // As copied from examples/notes_postgres.rs, with the default memory store.
    let built = mcp_confirm::ConfirmLayer::builder(mcp_confirm::KeyRing::random())
        .audience("https://notes.example/mcp")
        .tool_list(json!([{"name": "notes_delete", "inputSchema": {"type": "object"}}]))
        .tool("notes_delete", delete_policy(&notes).claimed_by_handler())
        .try_build();
    match built {
        Err(ConfigError::InvalidPolicy(reason)) => {
            assert!(reason.contains("consume_in"), "{reason}");
            assert!(reason.contains("notes_delete"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The handler never claims: whatever the store, the accepted answer runs it once, and its
/// replays (one after another, then three at once) are refused.
async fn a_handler_that_never_claims_runs_once(store: impl ReplayStore + Clone) {
    let notes = Notes::seeded();
    let f = fixture_with(|b| {
        b.tool("notes_delete", delete_policy(&notes).claimed_by_handler())
            .replay_store(store)
    });
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    assert_ran(&f.accept(&state, json!(2), "note-7").await);
    assert!(!f.seen.last().confirmed.unwrap().claimed);
    // Right after the call: refused, whether the layer's check has finished or not.
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    let (a, b, c) = tokio::join!(
        f.accept(&state, json!(4), "note-7"),
        f.accept(&state, json!(5), "note-7"),
        f.accept(&state, json!(6), "note-7"),
    );
    for replay in [a, b, c] {
        assert_frozen_state_error(&replay);
    }
    assert_eq!(f.seen.count(), 1, "the handler ran once");
}

#[tokio::test]
async fn a_handler_that_never_claims_runs_once_on_a_store_that_claims_in_handlers() {
    a_handler_that_never_claims_runs_once(ClaimsInHandler(MemoryReplayStore::new())).await;
}

#[tokio::test]
async fn a_handler_that_never_claims_runs_once_on_postgres() {
    let Some(url) = crate::backends::postgres("claimed_by_handler, never claimed").await else {
        return;
    };
    let store = PostgresStore::connect(&url)
        .unwrap()
        .table("handler_claims_wiring")
        .unwrap()
        .timeout(Duration::from_secs(5));
    store.migrate().await.unwrap();
    a_handler_that_never_claims_runs_once(store).await;
}
