//! Issue 34, mistake 9: one key and one audience on staging and production, as the README's
//! snippets used to write them (`[7; 32]`, `"notes.example"`). A confirmation given on staging
//! then ran on production. Keys that do not look random and audiences that are not the
//! endpoint's URL now stop the build, with a message that names the fix.

use mcp_confirm::{ConfigError, ConfirmLayer, KeyError, KeyRing, ToolPolicy};
use serde_json::json;

use crate::common::*;

fn tools() -> serde_json::Value {
    json!([{"name": "notes_delete", "inputSchema": {"type": "object"}}])
}

#[test]
fn the_readme_key_a_zero_key_and_a_password_are_refused() {
    for weak in [
        KeyRing::single("k1", [7; 32]),
        KeyRing::single("k1", [0; 32]),
        KeyRing::single("k1", b"passwordpasswordpasswordpassword"),
        // A hex key passed as text instead of decoded.
        KeyRing::single("k1", b"3f9a2c3f9a2c3f9a2c3f9a2c3f9a2c3f9a2c3f9a2c3f9a2c"),
        KeyRing::single_hex("k1", &"07".repeat(32)),
    ] {
        let error = weak.unwrap_err();
        assert_eq!(error, KeyError::WeakSecret("k1".into()));
        assert!(error.to_string().contains("random"), "{error}");
    }
}

#[test]
fn an_audience_that_is_not_the_endpoints_url_does_not_build() {
    for audience in [
        "notes.example",
        "notes",
        "staging",
        "notes.example/mcp",
        "ftp://notes.example/mcp",
        "https:///mcp",
        "https://notes.example/mcp?env=prod",
    ] {
        let built = ConfirmLayer::builder(KeyRing::random())
            .audience(audience)
            .tool_list(tools())
            .tool("notes_delete", ToolPolicy::confirm_only())
            .try_build();
        match built {
            Err(ConfigError::InvalidAudience(given)) => assert_eq!(given, audience),
            other => panic!("{audience:?}: {other:?}"),
        }
    }
    let error = ConfigError::InvalidAudience("notes.example".into()).to_string();
    assert!(error.contains("https://"), "{error}");
}

/// Staging and production each with their own URL: a state issued on staging is refused on
/// production even under one key (the key check cannot tell a shared random key).
#[tokio::test]
async fn a_confirmation_given_on_staging_does_not_run_on_production() {
    let keys = KeyRing::single("k1", KEY).unwrap();
    let staging = fixture_from(keys.clone(), 1_000, |b| {
        b.audience("https://staging.notes.example/mcp")
    });
    let production = fixture_from(keys, 1_000, |b| b.audience("https://notes.example/mcp"));
    let state = staging
        .alice(&delete_call(json!(1), "Groceries"))
        .await
        .state();
    let answer = production.accept(&state, json!(2), "note-7").await;
    assert_eq!(
        answer.error()["data"]["reason"],
        "invalid_request_state",
        "{:?}",
        answer.json()
    );
    assert_eq!(production.seen.count(), 0, "nothing ran on production");
}
