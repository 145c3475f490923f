//! Queued tools: the layer settles the confirmation in the request and turns the claimed nonce
//! into a grant; the worker runs the grant later, after the same live re-check.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::faulty::{Faults, Faulty};
use crate::common::queued::*;
use crate::common::*;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{Grant, GrantError, GrantState, GrantStore, MemoryGrantStore, RunError};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfigError, ToolPolicy};
use serde_json::json;

#[tokio::test]
async fn an_accepted_call_becomes_one_grant_of_what_was_approved() {
    let (f, _, grants) = queued();
    let id = approved(&f).await;
    let confirmed = f.seen.last().confirmed.unwrap();
    let grant = grants.get(id).await.unwrap().expect("the grant is stored");
    assert_eq!(grant.state, GrantState::Granted);
    assert_eq!(grant.subject, "alice");
    assert_eq!(grant.tool, "notes_delete");
    assert_eq!(grant.audience, "https://notes.example/mcp");
    assert_eq!(grant.chosen.as_deref(), Some("note-7"));
    assert_eq!(grant.version, Some(f.notes.version("note-7")));
    assert_eq!(grant.arguments["note_id"], "note-7");
    assert_eq!(grant.arguments["title"], "Groceries");
    assert_eq!(grant.nonce, confirmed.nonce);
    assert_eq!(grant.expires_at, now() + Duration::from_secs(120));
    // The confirmation is spent: a replay neither forwards nor issues a second grant.
    let state = f.alice(&delete_call(json!(3), "Groceries")).await.state();
    f.accept(&state, json!(4), "note-7").await;
    let second = f.seen.last().confirmed.unwrap().grant.unwrap();
    assert_ne!(second, id, "a new confirmation, a new grant");
    let replay = accepted(&state, json!(5), "note-7");
    let refused = f.alice(&replay).await;
    assert_eq!(refused.error()["data"]["reason"], "invalid_request_state");
    assert_eq!(f.seen.count(), 2);
}

#[tokio::test]
async fn the_worker_runs_a_grant_once_and_a_retried_job_never_again() {
    let (f, worker, _) = queued();
    let id = approved(&f).await;
    let runs = AtomicUsize::new(0);
    let delete = |grant: Grant| {
        let notes = f.notes.clone();
        let runs = &runs;
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let chosen = grant.chosen.unwrap_or_default();
            notes.0.lock().unwrap().remove(&chosen);
            Ok::<_, std::io::Error>(chosen)
        }
    };
    assert_eq!(worker.run(id, delete).await.unwrap(), "note-7");
    for _ in 0..3 {
        assert!(matches!(
            worker.run(id, delete).await,
            Err(RunError::Grant(GrantError::Ended(GrantState::Consumed)))
        ));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_record_edited_between_approval_and_execution_is_refused() {
    let (f, worker, grants) = queued();
    let id = approved(&f).await;
    f.notes.edit("note-7");
    let ran = AtomicUsize::new(0);
    let result = worker
        .run(id, |_| async {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(matches!(
        result,
        Err(RunError::Grant(GrantError::Refused(_)))
    ));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(
        grants.get(id).await.unwrap().unwrap().state,
        GrantState::Failed
    );
}

#[tokio::test]
async fn a_record_moved_out_of_reach_is_refused_at_execution() {
    let (f, worker, _) = queued();
    let id = approved(&f).await;
    f.notes.move_to("note-7", TEAM);
    assert!(matches!(
        worker.begin(id).await,
        Err(GrantError::Refused(_))
    ));
}

#[tokio::test]
async fn a_grant_not_begun_within_its_ttl_expires_and_never_runs() {
    let (f, worker, grants) = queued();
    let id = approved(&f).await;
    f.clock.advance(Duration::from_secs(120));
    assert!(matches!(
        worker.begin(id).await,
        Err(GrantError::Ended(GrantState::Expired))
    ));
    assert_eq!(
        grants.get(id).await.unwrap().unwrap().state,
        GrantState::Expired
    );
}

#[tokio::test]
async fn a_refusal_at_approval_withdraws_its_grant() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let counting = Faulty::recording(MemoryGrantStore::new());
    let (issued, inner) = (Arc::clone(&counting.issued), Arc::clone(&counting.inner));
    let f = Fixture::new(
        queued_layer(&notes, &clock, &store, counting),
        notes,
        clock,
        store,
    );
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    f.notes.edit("note-7");
    let revoked = f.accept(&state, json!(2), "note-7").await;
    assert_eq!(revoked.result()["isError"], true);
    assert!(
        revoked.result()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("nothing was changed")
    );
    assert_eq!(f.seen.count(), 0);
    // The grant stored before the claim was withdrawn, and its id never left the layer.
    let ids = issued.lock().unwrap().clone();
    assert_eq!(ids.len(), 1);
    let state = inner.get(ids[0]).await.unwrap().map(|g| g.state);
    assert_eq!(
        state,
        Some(GrantState::Revoked),
        "no grant for a worker to run"
    );
}

#[tokio::test]
async fn a_grant_store_down_at_approval_refuses_and_leaves_the_confirmation_unspent() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = queued_layer(
        &notes,
        &clock,
        &store,
        Faulty::new(
            MemoryGrantStore::new(),
            Faults {
                down: true,
                ..Faults::default()
            },
        ),
    );
    let f = Fixture::new(layer, notes, clock, store);
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    let refused = f.accept(&state, json!(2), "note-7").await;
    let unavailable = refused.error();
    assert_eq!(
        unavailable["data"]["reason"], "replay_store_unavailable",
        "{unavailable}"
    );
    assert_eq!(unavailable["data"]["retryable"], true);
    assert_eq!(f.seen.count(), 0, "nothing is forwarded without a grant");
    // Nothing was claimed: the same answer is refused the same way (not as a replay), and
    // would go through once the grant store answers.
    let again = f.accept(&state, json!(3), "note-7").await;
    assert_eq!(again.error()["data"]["reason"], "replay_store_unavailable");
    assert_eq!(f.seen.count(), 0);
}

#[test]
fn queued_tools_are_checked_when_the_layer_is_built() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::new();
    let build = |policy: ToolPolicy, grants: bool, ttl: u64| {
        let mut builder = builder(&clock, &store)
            .tool("notes_delete", policy)
            .grant_ttl(Duration::from_secs(ttl));
        if grants {
            builder = builder.grant_store(MemoryGrantStore::new());
        }
        builder.try_build().map(drop)
    };
    assert_eq!(
        build(delete_policy(&notes).queued(), false, 60),
        Err(ConfigError::MissingGrantStore)
    );
    assert!(matches!(
        build(ToolPolicy::confirm_only().queued(), true, 60),
        Err(ConfigError::InvalidPolicy(reason)) if reason.contains("revalidate")
    ));
    assert!(matches!(
        build(delete_policy(&notes).queued().claimed_by_handler(), true, 60),
        Err(ConfigError::InvalidPolicy(reason)) if reason.contains("claimed_by_handler")
    ));
    assert_eq!(
        build(delete_policy(&notes).queued(), true, 0),
        Err(ConfigError::InvalidGrantTtl)
    );
    assert_eq!(
        build(delete_policy(&notes).queued(), true, 8 * 24 * 3600),
        Err(ConfigError::InvalidGrantTtl)
    );
    assert_eq!(build(delete_policy(&notes).queued(), true, 60), Ok(()));
    // Without a grant store there is no worker handle.
    let layer = builder(&clock, &store)
        .tool("notes_delete", delete_policy(&notes))
        .build();
    assert!(layer.grants().is_none());
}
