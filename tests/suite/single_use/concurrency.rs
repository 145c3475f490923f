//! "Two server objects, one state": separately built services over one shared replay store run a
//! confirmed call exactly once, however many retries race.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, KeyRing};
use serde_json::json;
use tower::Layer;

const RETRIES: usize = 48;
const ROUNDS: usize = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_across_two_instances_run_the_call_once() {
    let store = MemoryReplayStore::new();
    let notes = Notes::seeded();
    // Two instances: separate layers, separate inner services, the same key, audience and store.
    let build = || {
        ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .replay_store(store.clone())
            .tool("notes_delete", delete_policy(&notes))
            .build()
    };
    let (seen_a, seen_b) = (Recorder::default(), Recorder::default());
    let a = build().layer(recording_inner(&seen_a));
    let b = build().layer(recording_inner(&seen_b));
    let mut total = 0;
    for round in 0..ROUNDS {
        let first = send(
            &a,
            post(&delete_call(json!(round), "Groceries"), Some("alice")),
        )
        .await;
        let state = first.state();
        let barrier = Arc::new(tokio::sync::Barrier::new(RETRIES));
        let ok = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..RETRIES)
            .map(|i| {
                let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
                let call = retry(
                    delete_call(json!(round), "Groceries"),
                    json!(format!("{round}-{i}")),
                    &state,
                    accept("note-7"),
                );
                let (barrier, ok) = (barrier.clone(), ok.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let answer = send(&svc, post(&call, Some("alice"))).await;
                    if answer.json().get("result").is_some() {
                        ok.fetch_add(1, Ordering::SeqCst);
                    } else {
                        assert_eq!(answer.error()["data"]["reason"], "invalid_request_state");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(ok.load(Ordering::SeqCst), 1, "round {round}");
        total += 1;
        assert_eq!(
            seen_a.count() + seen_b.count(),
            total,
            "round {round}: inner calls"
        );
    }
}
