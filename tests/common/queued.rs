//! A fixture whose `notes_delete` is queued: the layer turns accepted confirmations into grants.

use std::sync::Arc;
use std::time::Duration;

use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantId, GrantStore, Grants, MemoryGrantStore};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, ConfirmLayerBuilder, KeyRing};
use serde_json::json;

use super::{Fixture, KEY, Notes, delete_call, delete_policy, now};

/// A layer whose `notes_delete` is queued, over `grants`.
pub fn queued_layer(
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
    grants: impl GrantStore,
) -> ConfirmLayer {
    builder(clock, store)
        .tool("notes_delete", delete_policy(notes).queued())
        .grant_store(grants)
        .grant_ttl(Duration::from_secs(120))
        .build()
}

pub fn builder(clock: &ManualClock, store: &MemoryReplayStore) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
}

/// The fixture with a queued `notes_delete`, its worker handle and the grant store.
pub fn queued() -> (Fixture, Grants, Arc<MemoryGrantStore>) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let grants = Arc::new(MemoryGrantStore::with_clock(10_000, clock.clone()));
    let layer = queued_layer(&notes, &clock, &store, Arc::clone(&grants));
    let worker = layer.grants().expect("a grant store is configured");
    (Fixture::new(layer, notes, clock, store), worker, grants)
}

/// Alice confirms deleting note-7; the grant id the forwarded call carries.
pub async fn approved(f: &Fixture) -> GrantId {
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    let done = f.accept(&state, json!(2), "note-7").await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{:?}",
        done.json()
    );
    let confirmed = f.seen.last().confirmed.expect("Confirmed");
    confirmed
        .grant
        .expect("a queued tool's call carries its grant")
}
