//! Issue 34, mistake 5: a scope function that answers `Some("")` (an `unwrap_or_default()` on a
//! misspelt argument). A blank scope covers nothing: the form offers no standing approval, and a
//! "standing" answer grants none, so the next call is asked again.

use std::time::Duration;

use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use serde_json::{Value, json};

use crate::common::*;

fn call(id: Value, title: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": PERSONAL, "title": title}}})
}

#[tokio::test]
async fn a_blank_standing_scope_offers_and_grants_nothing() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    // The argument is `workspaceUri`; the scope function reads a misspelt key.
    let policy =
        delete_policy(&notes).standing(Duration::from_secs(600), 20, |l: &mcp_confirm::Lookup| {
            Some(
                l.arguments["workspace_uri"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        });
    let layer = base_builder(&notes, &clock, &store)
        .standing_store(store.clone())
        .tool("notes_delete", policy)
        .build();
    let f = Fixture::new(layer, notes, clock, store);
    let first = f.alice(&call(json!(1), "Groceries")).await;
    assert_asks(&first);
    let schema = &first.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"];
    assert!(
        schema["properties"].get("remember").is_none(),
        "a standing approval over a blank scope was offered: {schema}"
    );
    // Answering "standing" anyway grants nothing: the next call is asked again.
    let answer = json!({"delete_choice":{"action":"accept","content":{
        "note_id": "note-7", "confirm": true, "remember": "standing"}}});
    let _ = f
        .alice(&retry(
            call(json!(1), "Groceries"),
            json!(2),
            &first.state(),
            answer,
        ))
        .await;
    let next = f.alice(&call(json!(3), "Taxes")).await;
    assert_asks(&next);
    assert!(f.seen.count() <= 1, "at most the confirmed call ran");
}
