//! What the layer keeps after answering on its own: nothing.
//!
//! A counting allocator tracks the bytes alive in this process. After a warm-up, thousands of
//! forged retries and thousands of first calls (challenges without retries) must leave exactly as
//! many bytes alive as before: a forged state allocates nothing that outlives its request, and the
//! challenge path keeps no server state. One test per binary, so nothing else allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use common::*;
use serde_json::json;

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

#[test]
fn forged_states_and_unanswered_challenges_leave_nothing_behind() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let f = fixture();
        let state = challenge(&f).await;
        let forged = {
            let mut chars: Vec<char> = state.chars().collect();
            let last = chars.len() - 1;
            chars[last] = if chars[last] == 'A' { 'B' } else { 'A' };
            chars.into_iter().collect::<String>()
        };
        let forged_retry = accepted(&forged, json!(2), "note-7");
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
    });
}
