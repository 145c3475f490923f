//! What the layer keeps after answering on its own: nothing.
//!
//! A counting allocator tracks the bytes alive in this process. After a warm-up, thousands of
//! forged retries and thousands of first calls (challenges without retries) must leave exactly as
//! many bytes alive as before: a forged state allocates nothing that outlives its request, and the
//! challenge path keeps no server state. One test per binary, so nothing else allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use common::*;
use mcp_confirm::{
    ConfirmLayer, JsonRpcMessage, JsonRpcReply, KeyRing, MemoryReplayStore, Principal,
};
use serde_json::json;
use tower::{Layer, ServiceExt};

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments and only adds a count.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE_BYTES.load(Ordering::SeqCst)
}

/// `state` with one character inside its tag changed: still canonical base64, so it is the MAC
/// check that refuses it.
fn forged(state: &str) -> String {
    let at = state.len() - 10;
    let flipped = if &state[at..=at] == "A" { "B" } else { "A" };
    format!("{}{flipped}{}", &state[..at], &state[at + 1..])
}

#[test]
fn forged_states_and_unanswered_challenges_leave_nothing_behind() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let f = fixture();
        let state = challenge(&f).await;
        let forged_retry = accepted(&forged(&state), json!(2), "note-7");
        let first_call = delete_call(json!(1), "Groceries");

        let forge = |n: usize| {
            let (svc, body) = (&f.svc, &forged_retry);
            async move {
                for _ in 0..n {
                    let answer = send(svc, post(body, Some("alice"))).await;
                    assert_frozen_state_error(&answer);
                }
            }
        };
        let ask = |n: usize| {
            let (svc, body) = (&f.svc, &first_call);
            async move {
                for _ in 0..n {
                    let answer = send(svc, post(body, Some("alice"))).await;
                    assert_eq!(answer.result()["resultType"], "input_required");
                }
            }
        };

        // Warm-up: one-time allocations (tracing callsites, runtime internals) happen here.
        forge(200).await;
        ask(200).await;

        let before = live();
        forge(5_000).await;
        let after_forged = live();
        ask(5_000).await;
        let after_challenges = live();

        assert_eq!(
            after_forged - before,
            0,
            "5,000 forged retries left {} bytes alive",
            after_forged - before
        );
        assert_eq!(
            after_challenges - after_forged,
            0,
            "5,000 unanswered challenges left {} bytes alive",
            after_challenges - after_forged
        );
        assert_eq!(f.seen.count(), 0, "nothing reached the inner service");
        assert!(f.store.is_empty(), "no nonce was recorded");

        // The same through the message face (`Service<JsonRpcMessage>`).
        let store = MemoryReplayStore::new();
        let inner_calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&inner_calls);
        let svc = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .audience("notes.example")
            .replay_store(store.clone())
            .tool("notes_delete", delete_policy(&Notes::seeded()))
            .build()
            .layer(tower::service_fn(move |_msg: JsonRpcMessage| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(JsonRpcReply::none()) }
            }));
        let message = |body: &serde_json::Value| {
            JsonRpcMessage::new(body.to_string()).with_extension(Principal::new("alice"))
        };
        let reply = svc.clone().oneshot(message(&first_call)).await.unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
        let state = reply["result"]["requestState"].as_str().unwrap().to_owned();
        let forged_retry = accepted(&forged(&state), json!(2), "note-7");
        let send = |body: &serde_json::Value, n: usize| {
            let (svc, msg) = (svc.clone(), message(body));
            async move {
                for _ in 0..n {
                    let reply = svc.clone().oneshot(msg.clone()).await.unwrap();
                    assert!(reply.body.is_some());
                }
            }
        };
        send(&forged_retry, 200).await;
        send(&first_call, 200).await;
        let before = live();
        send(&forged_retry, 5_000).await;
        let after_forged = live();
        send(&first_call, 5_000).await;
        let after_challenges = live();
        assert_eq!(
            after_forged - before,
            0,
            "messages: forged retries left bytes alive"
        );
        assert_eq!(
            after_challenges - after_forged,
            0,
            "messages: unanswered challenges left bytes alive"
        );
        assert_eq!(inner_calls.load(Ordering::SeqCst), 0);
        assert!(store.is_empty());
    });
}
