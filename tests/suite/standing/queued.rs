//! Queued tools under a standing approval: a covered call issues its grant without a form, the
//! grant names the standing approval, and revoking the approval stops its grants that have not
//! begun (work already begun is left to finish).

use std::sync::Arc;
use std::time::Duration;

use super::{accept_remembering, call, workspace};
use crate::common::queued::builder;
use crate::common::*;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantError, GrantId, GrantState, GrantStore, Grants, MemoryGrantStore};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{Principal, StandingApprovals};
use serde_json::json;

/// A layer whose queued `notes_delete` offers a standing approval of `uses` calls.
struct Queued {
    f: Fixture,
    worker: Grants,
    grants: Arc<MemoryGrantStore>,
    approvals: StandingApprovals,
}

fn queued_standing(uses: u32) -> Queued {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let grants = Arc::new(MemoryGrantStore::with_clock(10_000, clock.clone()));
    let policy = delete_policy(&notes)
        .queued()
        .standing(Duration::from_secs(600), uses, workspace);
    let layer = builder(&clock, &store)
        .tool("notes_delete", policy)
        .standing_store(store.clone())
        .grant_store(Arc::clone(&grants))
        .grant_ttl(Duration::from_secs(120))
        .build();
    let worker = layer.grants().expect("a grant store is configured");
    let approvals = layer.standing_approvals().expect("a standing store");
    Queued {
        f: Fixture::new(layer, notes, clock, store),
        worker,
        grants,
        approvals,
    }
}

/// Alice confirms one Groceries note with the standing option: the confirmed call's own grant.
async fn grant_standing(q: &Queued) -> GrantId {
    let first = q.f.alice(&call(json!(1), PERSONAL, "Groceries")).await;
    assert_asks(&first);
    let answer =
        q.f.alice(&retry(
            call(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            accept_remembering("note-7", json!("standing")),
        ))
        .await;
    assert_ran(&answer);
    let confirmed = q.f.seen.last().confirmed.expect("Confirmed");
    assert_eq!(confirmed.standing, None, "confirmed by the form");
    confirmed.grant.expect("a queued call carries its grant")
}

/// A call covered by the standing approval: it runs with no form and carries a grant.
async fn covered(q: &Queued, id: i64) -> GrantId {
    let answer = q.f.alice(&call(json!(id), PERSONAL, "Taxes")).await;
    assert_ran(&answer);
    let confirmed = q.f.seen.last().confirmed.expect("Confirmed");
    assert!(
        confirmed.standing.is_some(),
        "covered by the standing approval"
    );
    confirmed
        .grant
        .expect("a queued call under a standing approval carries a grant")
}

#[tokio::test]
async fn a_covered_call_of_a_queued_tool_issues_a_grant_bound_to_the_standing_approval() {
    let q = queued_standing(3);
    let own = grant_standing(&q).await;
    let grant = covered(&q, 10).await;
    let confirmed = q.f.seen.last().confirmed.unwrap();
    let stored = q.grants.get(grant).await.unwrap().expect("stored");
    let listed = q.approvals.list(&Principal::new("alice")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(stored.standing.map(|s| s.id), Some(listed[0].id));
    assert_eq!(Some(listed[0].id), confirmed.standing);
    assert_eq!(stored.chosen.as_deref(), Some("note-20"));
    assert_eq!(stored.version, Some(q.f.notes.version("note-20")));
    assert!(confirmed.is_for("notes_delete", Some(&stored.arguments)));
    assert_eq!(stored.state, GrantState::Granted);
    // The confirmed call's own grant is its confirmation's, not the standing approval's.
    assert_eq!(q.grants.get(own).await.unwrap().unwrap().standing, None);
    // The worker runs it like any grant.
    let attempt = q.worker.begin(grant).await.expect("begins");
    assert_eq!(attempt.grant().chosen.as_deref(), Some("note-20"));
    attempt.consumed().await.unwrap();
}

#[tokio::test]
async fn revoking_the_standing_approval_stops_its_grants_not_yet_begun() {
    let (events, _guard) = crate::common::audit_events::Events::record();
    let q = queued_standing(5);
    let own = grant_standing(&q).await;
    let begun = covered(&q, 10).await;
    let waiting = covered(&q, 11).await;
    let attempt = q.worker.begin(begun).await.expect("the first begins");
    let alice = Principal::new("alice");
    assert_eq!(q.approvals.revoke(&alice, None).await.unwrap(), 1);
    // Not yet begun: stopped for good, as revoked.
    assert!(matches!(
        q.worker.begin(waiting).await,
        Err(GrantError::Ended(GrantState::Revoked))
    ));
    assert_eq!(
        q.grants.get(waiting).await.unwrap().unwrap().state,
        GrantState::Revoked
    );
    assert!(matches!(
        q.worker.begin(waiting).await,
        Err(GrantError::Ended(GrantState::Revoked))
    ));
    // Begun before the revocation: it finishes.
    attempt
        .consumed()
        .await
        .expect("work begun is not interrupted");
    // The confirmed call's own grant does not depend on the standing approval.
    q.worker
        .begin(own)
        .await
        .expect("the form's grant begins")
        .consumed()
        .await
        .unwrap();
    // And the next call is asked again.
    assert_asks(&q.f.alice(&call(json!(12), PERSONAL, "Taxes")).await);
    assert!(!events.with("decision", "grant_revoked").is_empty());
}

#[tokio::test]
async fn a_grant_whose_standing_approval_ended_otherwise_still_begins() {
    // Every use spent: the grants issued under it were issued while it was live.
    let q = queued_standing(1);
    grant_standing(&q).await;
    let grant = covered(&q, 10).await;
    assert_asks(&q.f.alice(&call(json!(11), PERSONAL, "Taxes")).await);
    q.worker
        .begin(grant)
        .await
        .expect("exhausted is not revoked")
        .consumed()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_grant_under_a_standing_approval_that_is_gone_never_begins() {
    let q = queued_standing(5);
    grant_standing(&q).await;
    let grant = covered(&q, 10).await;
    // The approval's record is gone (it expired and the store forgot it); the grant itself
    // still has time left.
    q.f.clock.advance(Duration::from_secs(60));
    let gone = Grants::new(Arc::clone(&q.grants))
        .audience("https://notes.example/mcp")
        .clock(q.f.clock.clone())
        .standing_store(MemoryReplayStore::with_clock(100, q.f.clock.clone()))
        .revalidate("notes_delete", |_: mcp_confirm::Revalidation| async {
            Ok::<_, mcp_confirm::Refusal>(())
        });
    assert!(matches!(
        gone.begin(grant).await,
        Err(GrantError::Ended(GrantState::Revoked))
    ));
}

#[tokio::test]
async fn a_worker_without_the_standing_store_leaves_such_a_grant_to_one_that_has_it() {
    let q = queued_standing(5);
    grant_standing(&q).await;
    let grant = covered(&q, 10).await;
    let blind = Grants::new(Arc::clone(&q.grants))
        .audience("https://notes.example/mcp")
        .revalidate("notes_delete", |_: mcp_confirm::Revalidation| async {
            Ok::<_, mcp_confirm::Refusal>(())
        });
    assert!(matches!(
        blind.begin(grant).await,
        Err(GrantError::Refused(_))
    ));
    assert_eq!(
        q.grants.get(grant).await.unwrap().unwrap().state,
        GrantState::Granted,
        "left as it was"
    );
    q.worker
        .begin(grant)
        .await
        .expect("the layer's worker has the store")
        .consumed()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_grant_store_that_refuses_spends_no_use() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    // Room for the form's grant only.
    let grants = Arc::new(MemoryGrantStore::with_clock(1, clock.clone()));
    let layer = builder(&clock, &store)
        .tool(
            "notes_delete",
            delete_policy(&notes)
                .queued()
                .standing(Duration::from_secs(600), 2, workspace),
        )
        .standing_store(store.clone())
        .grant_store(Arc::clone(&grants))
        .build();
    let approvals = layer.standing_approvals().unwrap();
    let q = Queued {
        f: Fixture::new(layer.clone(), notes, clock, store),
        worker: layer.grants().unwrap(),
        grants,
        approvals,
    };
    grant_standing(&q).await;
    let ran = q.f.seen.count();
    let refused = q.f.alice(&call(json!(10), PERSONAL, "Taxes")).await;
    assert!(refused.json().get("error").is_some(), "{}", refused.json());
    assert_eq!(q.f.seen.count(), ran, "nothing ran");
    let listed = q.approvals.list(&Principal::new("alice")).await.unwrap();
    assert_eq!(listed[0].used, 0, "no use spent");
    let _ = &q.worker;
}
