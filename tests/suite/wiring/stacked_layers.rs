//! Issue 34, mistake 11 (the third opaque error): two `ConfirmLayer`s stacked on one route, each
//! with its own key, asked forever: the inner one asked again after the outer one's answer, and
//! the outer one could not verify the inner one's state. The inner layer now refuses a call the
//! outer one already settled, with its own reason, and the log says how to fix the wiring.
//!
//! (The other two: authentication placed inside the layer, and `approved_by(any_of = [])`, are
//! compile errors that name the fix: `compile-tests/tests/ui/auth_inside_the_layer.rs`
//! and `compile-tests/tests/ui/approved_by_no_one.rs`.)

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm::body::RequestBody;
use mcp_confirm::{ConfirmLayer, KeyRing};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

use crate::common::*;

fn layer(seed: u8, notes: &Notes) -> ConfirmLayer {
    ConfirmLayer::builder(KeyRing::single("k1", secret(seed)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", delete_policy(notes))
        .build()
}

#[tokio::test]
async fn a_call_the_outer_layer_confirmed_is_refused_by_the_inner_one_not_asked_again() {
    let notes = Notes::seeded();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let handler = tower::service_fn(
        move |_: http::Request<RequestBody<RequestBody<Full<Bytes>>>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}")))) }
        },
    );
    // As written: the platform team's layer outside, the service's own inside.
    let svc = layer(1, &notes).layer(layer(2, &notes).layer(handler));
    let ask = |body: Value| {
        let svc = svc.clone();
        async move {
            let response = svc.oneshot(post(&body, Some("alice"))).await.unwrap();
            let bytes: Bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    let first = ask(delete_call(json!(1), "Groceries")).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = ask(accepted(&state, json!(2), "note-7")).await;
    assert_eq!(
        answer["error"]["data"]["reason"], "stacked_layers",
        "{answer}"
    );
    assert!(answer["result"].is_null(), "not asked again: {answer}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing ran");
}
