//! Issue 34, mistake 10: `.local_principal("me")` on the HTTP layer with no authentication in
//! front (the `-31001` row of the README pointed to it). Unauthenticated callers confirmed and
//! ran destructive calls. The option is now `unauthenticated_local_principal`, and it applies
//! to the message service (stdio) only: an HTTP request without a principal is refused.

use mcp_confirm::{JsonRpcMessage, JsonRpcReply, Principal};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

use crate::common::*;

#[tokio::test]
async fn an_http_request_without_a_principal_is_refused_whatever_the_local_principal() {
    let f = fixture_with(|b| b.unauthenticated_local_principal(Principal::new("alice")));
    let first = send(&f.svc, post(&delete_call(json!(1), "Groceries"), None)).await;
    assert_eq!(first.error()["code"], -31001, "{:?}", first.json());
    assert_eq!(first.error()["data"]["reason"], "unauthenticated");
    // A state alice was given cannot be answered anonymously either.
    let state = f.alice(&delete_call(json!(2), "Groceries")).await.state();
    let anonymous = send(&f.svc, post(&accepted(&state, json!(3), "note-7"), None)).await;
    assert_eq!(anonymous.error()["code"], -31001);
    assert_eq!(f.seen.count(), 0, "nothing ran");
    // The refusal's message points to authentication, never to the opt-out.
    let message = first.error()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!message.contains("local"), "{message}");
}

#[tokio::test]
async fn over_stdio_messages_the_local_principal_still_applies() {
    let notes = Notes::seeded();
    let layer =
        mcp_confirm::ConfirmLayer::builder(mcp_confirm::KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .unauthenticated_local_principal(Principal::new("alice"))
            .tool("notes_delete", delete_policy(&notes))
            .build();
    let svc = layer.layer(tower::service_fn(|_: JsonRpcMessage| async {
        Ok::<_, std::convert::Infallible>(JsonRpcReply::none())
    }));
    let reply = svc
        .oneshot(JsonRpcMessage::new(
            delete_call(json!(1), "Groceries").to_string(),
        ))
        .await
        .unwrap();
    let first: Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
}
