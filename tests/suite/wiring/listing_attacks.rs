//! Attacks on tool lists, listings and policy shapes (the adversarial pass on #19).
//!
//! Tests named `holds_` held when written; the others failed then, and their doc comment says
//! **Was broken**, what broke and how it was fixed.

use crate::common::*;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, KeyRing, Lookup, PolicyError};
use serde_json::json;

// =============================================================================================
// Tool lists, listings, policy shapes.
// =============================================================================================

/// `when` with `select_into` is refused when the layer is built (not only by the macros): a
/// hurried developer adding a condition to a pick-one policy gets an error, not a layer that
/// forwards the client's own value in the argument the handler trusts.
#[test]
fn holds_when_with_select_into_is_a_build_error() {
    let notes = Notes::seeded();
    let policy = delete_policy(&notes).when(|_: Lookup| async { Ok::<_, PolicyError>(false) });
    let built = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", policy)
        .try_build();
    let error = built.expect_err("a build error");
    assert!(error.to_string().contains("select_into"), "{error}");
}

/// A layer built with the server's tool list refuses a call to a name in no list — also when the
/// name differs from a listed one only by case, a trailing space, or a Unicode look-alike — and
/// the inner server never sees it.
#[tokio::test]
async fn holds_names_in_no_list_are_refused_however_they_are_spelt() {
    let seen = Recorder::default();
    let store = MemoryReplayStore::with_capacity(1_000);
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .audience("https://notes.example/mcp")
        .tool_list(json!([
            {"name": "notes_list", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
            {"name": "notes_wipe", "inputSchema": {"type": "object"}}
        ]))
        .replay_store(store)
        .confirm_destructive()
        .build();
    let svc = tower::Layer::layer(&layer, recording_inner(&seen));
    for name in [
        "Notes_list",
        "notes_list ",
        "notes_lіst", // Cyrillic i
        "notes_list\u{200B}",
        "notes_wipe2",
        "",
    ] {
        let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "_meta": meta(), "name": name, "arguments": {}}});
        let answer = send(&svc, post(&call, Some("alice"))).await;
        let json = answer.json();
        assert!(
            json.get("error").is_some(),
            "{name:?} was not refused: {json}"
        );
        assert_eq!(seen.count(), 0, "{name:?} reached the server");
    }
    let listed = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name": "notes_list", "arguments": {}}});
    send(&svc, post(&listed, Some("alice"))).await;
    assert_eq!(seen.count(), 1, "the listed read-only tool goes through");
}
