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
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, JsonRpcMessage, JsonRpcReply, KeyRing, Principal};
use serde_json::{Value, json};
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

/// The two requests measured: a retry with a forged state, and a first call never answered.
#[derive(Debug, Clone, Copy)]
enum Call {
    Forged,
    First,
}

/// Runs each call 200 times (one-time allocations such as tracing callsites and runtime
/// internals happen then), then 5,000 times each; returns the bytes each batch left alive.
async fn left_alive<Fut: Future<Output = ()>>(run: impl Fn(Call, usize) -> Fut) -> [isize; 2] {
    run(Call::Forged, 200).await;
    run(Call::First, 200).await;
    let before = live();
    run(Call::Forged, 5_000).await;
    let after_forged = live();
    run(Call::First, 5_000).await;
    [after_forged - before, live() - after_forged]
}

#[test]
fn forged_states_and_unanswered_challenges_leave_nothing_behind() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // 5,000 forms for one principal: far past the default challenge rate limit.
        let f = fixture_with(|b| b.without_challenge_rate_limit());
        let state = challenge(&f).await;
        let forged_retry = accepted(&forged(&state), json!(2), "note-7");
        let first_call = delete_call(json!(1), "Groceries");
        let left = left_alive(|call, n| {
            let (svc, forged_retry, first_call) = (&f.svc, &forged_retry, &first_call);
            async move {
                for _ in 0..n {
                    match call {
                        Call::Forged => assert_frozen_state_error(
                            &send(svc, post(forged_retry, Some("alice"))).await,
                        ),
                        Call::First => {
                            let answer = send(svc, post(first_call, Some("alice"))).await;
                            assert_eq!(answer.result()["resultType"], "input_required");
                        }
                    }
                }
            }
        })
        .await;
        assert_eq!(
            left,
            [0, 0],
            "bytes left alive by 5,000 forged retries and by 5,000 unanswered challenges"
        );
        assert_eq!(f.seen.count(), 0, "nothing reached the inner service");
        assert!(f.store.is_empty(), "no nonce was recorded");

        // The same through the message face (`Service<JsonRpcMessage>`).
        let store = MemoryReplayStore::new();
        let inner_calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&inner_calls);
        let svc = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .without_challenge_rate_limit()
            .replay_store(store.clone())
            .tool("notes_delete", delete_policy(&Notes::seeded()))
            .build()
            .layer(tower::service_fn(move |_msg: JsonRpcMessage| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(JsonRpcReply::none()) }
            }));
        let ask = |body: &Value| {
            let message =
                JsonRpcMessage::new(body.to_string()).with_extension(Principal::new("alice"));
            let svc = svc.clone();
            async move {
                let reply = svc.oneshot(message).await.unwrap();
                serde_json::from_slice::<Value>(&reply.body.expect("a reply")).unwrap()
            }
        };
        let state = ask(&first_call).await["result"]["requestState"]
            .as_str()
            .unwrap()
            .to_owned();
        let forged_retry = accepted(&forged(&state), json!(2), "note-7");
        let left = left_alive(|call, n| {
            let (ask, forged_retry, first_call) = (&ask, &forged_retry, &first_call);
            async move {
                for _ in 0..n {
                    match call {
                        Call::Forged => assert_eq!(
                            ask(forged_retry).await["error"]["data"]["reason"],
                            "invalid_request_state"
                        ),
                        Call::First => assert_eq!(
                            ask(first_call).await["result"]["resultType"],
                            "input_required"
                        ),
                    }
                }
            }
        })
        .await;
        assert_eq!(left, [0, 0], "messages: bytes left alive");
        assert_eq!(inner_calls.load(Ordering::SeqCst), 0);
        assert!(store.is_empty());
    });
}
