//! The shared test suite every [`ReplayStore`] backend must pass.
//!
//! Run it from a test module with [`replay_store_conformance!`](crate::replay_store_conformance):
//!
//! ```ignore
//! mod memory {
//!     use mcp_confirm::store::MemoryReplayStore;
//!     mcp_confirm::replay_store_conformance!(
//!         MemoryReplayStore::new(),
//!         budgeted = |budget| MemoryReplayStore::new().principal_budget(budget)
//!     );
//! }
//! ```
//!
//! The first expression builds a store on its defaults; `budgeted` builds one whose per-principal
//! budget is `budget` (a `usize`). Both are evaluated afresh inside each async test, so they may
//! `.await`. The tests need
//! tokio's `macros` and `rt-multi-thread` features. Each test uses random nonces, so a shared backend
//! (one Redis database, one Postgres table) can run the suite concurrently with other tests.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::approval::{
    Approval, ApprovalChoice, ApprovalId, ApprovalStore, Decided, Decider, Decision,
    MAX_PENDING_APPROVALS,
};
use super::batch::{BatchDecision, SetDigest};
use super::passkey::{MAX_PASSKEYS_PER_SUBJECT, PasskeyStore, Registered, RegisteredPasskey};
use super::standing::{
    MAX_STANDING_PER_PRINCIPAL, MAX_STANDING_SCOPE_BYTES, Standing, StandingId, StandingKey,
    StandingStore, Use,
};
use super::{Claim, ClaimRequest, Nonce, Owner, PrincipalKey, ReplayStore, StoreError};
use crate::approvers::Approvers;

fn soon() -> SystemTime {
    SystemTime::now() + Duration::from_secs(60)
}

/// A principal of its own for each test, so tests sharing a backend never share a budget.
fn principal() -> PrincipalKey {
    PrincipalKey::from_bytes(*Nonce::random().as_bytes())
}

/// A claim of `nonce` by `owner` for `principal`, kept for a minute.
fn ask(nonce: Nonce, owner: Owner, principal: PrincipalKey) -> ClaimRequest {
    ClaimRequest::new(nonce, owner, principal, soon())
}

/// `claimants` tasks, released together, each claiming what `claim` makes (made in the task, once
/// released); their answers in task order.
async fn claim_together<S: ReplayStore>(
    store: &Arc<S>,
    claimants: usize,
    claim: impl Fn() -> ClaimRequest + Copy + Send + 'static,
) -> Vec<Result<Claim, StoreError>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(claimants));
    let tasks: Vec<_> = (0..claimants)
        .map(|_| {
            let store = Arc::clone(store);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&claim()).await
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(claimants);
    for task in tasks {
        answers.push(task.await.expect("claimant panicked"));
    }
    answers
}

/// A fresh nonce is claimed exactly once; a second claim sees it InFlight.
pub async fn claim_is_granted_once<S: ReplayStore>(store: &S) {
    let p = principal();
    let nonce = Nonce::random();
    let first = ask(nonce, Owner::random(), p);
    assert_eq!(store.claim(&first).await.ok(), Some(Claim::Claimed));
    let second = ask(nonce, Owner::random(), p);
    assert_eq!(store.claim(&second).await.ok(), Some(Claim::InFlight));
    // The same owner asking again is still refused: a claim is not re-entrant.
    let again = ask(Nonce::random(), Owner::random(), p);
    assert_eq!(store.claim(&again).await.ok(), Some(Claim::Claimed));
    assert_eq!(store.claim(&again).await.ok(), Some(Claim::InFlight));
}

/// Completing by the owner makes the nonce Consumed for good; completing twice fails.
pub async fn completed_claims_stay_consumed<S: ReplayStore>(store: &S) {
    let p = principal();
    let claim = ask(Nonce::random(), Owner::random(), p);
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    assert_eq!(store.complete(&claim).await.ok(), Some(true));
    let other = ask(claim.nonce, Owner::random(), p);
    assert_eq!(store.claim(&other).await.ok(), Some(Claim::Consumed));
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Consumed));
    assert_eq!(store.complete(&claim).await.ok(), Some(false));
}

/// Only the owner can complete a claim; an unknown nonce cannot be completed at all.
pub async fn only_the_owner_completes<S: ReplayStore>(store: &S) {
    let p = principal();
    let claim = ask(Nonce::random(), Owner::random(), p);
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    let stranger = ask(claim.nonce, Owner::random(), p);
    assert_eq!(store.complete(&stranger).await.ok(), Some(false));
    assert_eq!(store.claim(&stranger).await.ok(), Some(Claim::InFlight));
    let unknown = ask(Nonce::random(), claim.owner, p);
    assert_eq!(store.complete(&unknown).await.ok(), Some(false));
    assert_eq!(store.complete(&claim).await.ok(), Some(true));
}

/// Entries are forgotten after their expiry, and not before.
pub async fn entries_expire<S: ReplayStore>(store: &S) {
    let p = principal();
    let nonce = Nonce::random();
    let expires_at = SystemTime::now() + Duration::from_millis(1_000);
    let claim = ClaimRequest::new(nonce, Owner::random(), p, expires_at);
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    let again = ClaimRequest::new(nonce, Owner::random(), p, expires_at);
    assert_eq!(store.claim(&again).await.ok(), Some(Claim::InFlight));
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(store.is_used(nonce, p).await.ok(), Some(false));
    let later = ask(nonce, Owner::random(), p);
    assert_eq!(store.claim(&later).await.ok(), Some(Claim::Claimed));
}

/// Different nonces never interfere.
pub async fn nonces_are_independent<S: ReplayStore>(store: &S) {
    let p = principal();
    let owner = Owner::random();
    let a = ask(Nonce::random(), owner, p);
    let b = ask(Nonce::random(), owner, p);
    assert_eq!(store.claim(&a).await.ok(), Some(Claim::Claimed));
    assert_eq!(store.complete(&a).await.ok(), Some(true));
    assert_eq!(store.claim(&b).await.ok(), Some(Claim::Claimed));
}

/// 64 concurrent claimants of one nonce: exactly one wins, the rest see it taken; 100 rounds.
pub async fn one_winner_among_concurrent_claimants<S: ReplayStore>(store: Arc<S>) {
    const CLAIMANTS: usize = 64;
    const ROUNDS: usize = 100;
    for round in 0..ROUNDS {
        let (nonce, p) = (Nonce::random(), principal());
        let mut won = 0;
        for answer in
            claim_together(&store, CLAIMANTS, move || ask(nonce, Owner::random(), p)).await
        {
            match answer {
                Ok(Claim::Claimed) => won += 1,
                Ok(Claim::InFlight) => {}
                other => panic!("round {round}: unexpected answer {other:?}"),
            }
        }
        assert_eq!(won, 1, "round {round}: {won} claimants won");
    }
}

/// `is_used` sees claimed and consumed nonces, and nothing else; it changes nothing.
pub async fn used_nonces_are_reported<S: ReplayStore>(store: &S) {
    let p = principal();
    let claim = ask(Nonce::random(), Owner::random(), p);
    assert_eq!(store.is_used(claim.nonce, p).await.ok(), Some(false));
    // Asking twice claims nothing.
    assert_eq!(store.is_used(claim.nonce, p).await.ok(), Some(false));
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    assert_eq!(store.is_used(claim.nonce, p).await.ok(), Some(true));
    assert_eq!(store.complete(&claim).await.ok(), Some(true));
    assert_eq!(store.is_used(claim.nonce, p).await.ok(), Some(true));
    assert_eq!(store.is_used(Nonce::random(), p).await.ok(), Some(false));
}

/// With a budget of 3, a principal's fourth live entry is refused with a retry-after, nothing is
/// recorded for it, replays of its own entries still answer as replays, and other principals are
/// unaffected.
pub async fn principal_budget_is_enforced<S: ReplayStore>(store: &S) {
    let bob = principal();
    let mut held = Vec::new();
    for _ in 0..3 {
        let claim = ask(Nonce::random(), Owner::random(), bob);
        assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
        held.push(claim);
    }
    let refused = Nonce::random();
    let over = ask(refused, Owner::random(), bob);
    match store.claim(&over).await {
        Err(StoreError::OverBudget { retry_after }) => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= Duration::from_secs(61),
                "retry_after {retry_after:?}"
            );
        }
        other => panic!("expected OverBudget, got {other:?}"),
    }
    assert_eq!(store.is_used(refused, bob).await.ok(), Some(false));
    // Completing does not free the budget: a consumed entry must stay until it expires.
    let first = held[0];
    assert_eq!(store.complete(&first).await.ok(), Some(true));
    assert!(matches!(
        store.claim(&over).await,
        Err(StoreError::OverBudget { .. })
    ));
    let replay = ask(first.nonce, Owner::random(), bob);
    assert_eq!(store.claim(&replay).await.ok(), Some(Claim::Consumed));
    let replay = ask(held[1].nonce, Owner::random(), bob);
    assert_eq!(store.claim(&replay).await.ok(), Some(Claim::InFlight));
    let alice = ask(Nonce::random(), Owner::random(), principal());
    assert_eq!(store.claim(&alice).await.ok(), Some(Claim::Claimed));
}

/// With a budget of 2, the budget comes back when the principal's entries expire.
pub async fn budget_returns_when_entries_expire<S: ReplayStore>(store: &S) {
    let bob = principal();
    let short = SystemTime::now() + Duration::from_millis(1_000);
    for _ in 0..2 {
        let claim = ClaimRequest::new(Nonce::random(), Owner::random(), bob, short);
        assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
    }
    let claim = ask(Nonce::random(), Owner::random(), bob);
    assert!(matches!(
        store.claim(&claim).await,
        Err(StoreError::OverBudget { .. })
    ));
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(store.claim(&claim).await.ok(), Some(Claim::Claimed));
}

/// With a budget of 5, 64 concurrent claims of distinct nonces by one principal: exactly 5 are
/// granted, the others refused as over budget; 20 rounds.
pub async fn concurrent_claims_never_exceed_the_budget<S: ReplayStore>(store: Arc<S>) {
    const CLAIMANTS: usize = 64;
    for round in 0..20 {
        let bob = principal();
        let (mut won, mut over) = (0, 0);
        let claims = move || ask(Nonce::random(), Owner::random(), bob);
        for answer in claim_together(&store, CLAIMANTS, claims).await {
            match answer {
                Ok(Claim::Claimed) => won += 1,
                Err(StoreError::OverBudget { .. }) => over += 1,
                other => panic!("round {round}: unexpected answer {other:?}"),
            }
        }
        assert_eq!((won, over), (5, CLAIMANTS - 5), "round {round}");
    }
}

/// A browser approval for `principal`, expiring `ttl` from now, offering note-3 and note-7.
pub fn approval(principal: PrincipalKey, ttl: Duration) -> Approval {
    Approval {
        id: ApprovalId::from_bytes(*Nonce::random().as_bytes()),
        audience: "notes.example".into(),
        nonce: Nonce::random(),
        principal,
        subject: "alice".into(),
        tool: "notes_delete".into(),
        arguments: Some([7; 32]),
        message: "Delete one note?".into(),
        choices: vec![
            ApprovalChoice::new("note-3", "Groceries (note-3)", Some("g1".into())),
            ApprovalChoice::new("note-7", "Groceries (note-7)", Some("g4".into())),
        ],
        typed: false,
        standing: Some(
            "Also allow notes_delete on workspace personal for the next 10 minutes".into(),
        ),
        // Whole milliseconds: what every store keeps.
        expires_at: whole_ms(SystemTime::now() + ttl),
        approvers: Approvers::caller(),
        endorsements: Vec::new(),
        created_at: whole_ms(SystemTime::now()),
        decision: None,
        batch_group: None,
        batch: None,
        shown_arguments: None,
    }
}

/// A batchable approval of `principal` in `audience`, made now, expiring in a minute.
fn member(principal: PrincipalKey, audience: &str) -> Approval {
    let nonce = Nonce::random();
    let mut a = approval(principal, Duration::from_secs(60));
    a.id = ApprovalId::for_nonce(&nonce);
    a.nonce = nonce;
    a.audience = audience.into();
    a.standing = None;
    a.batch_group = Some("notes".into());
    a.shown_arguments = Some(r#"{"title":"Groceries"}"#.into());
    a
}

/// A batch decision of `members` by the caller, approving note-3 of each where `approve`.
fn batch_of(members: &[&Approval], approve: &[bool], all_or_nothing: bool) -> BatchDecision {
    BatchDecision {
        set: SetDigest::of(members.iter().copied()),
        audience: members[0].audience.clone(),
        principal: members[0].principal,
        decider: "alice".into(),
        roles: Vec::new(),
        caller: true,
        members: members
            .iter()
            .zip(approve)
            .map(|(a, yes)| {
                let decision = if *yes {
                    Decision::Approved {
                        chosen: "note-3".into(),
                        standing: false,
                        narrowed: None,
                    }
                } else {
                    Decision::Declined
                };
                (a.id, decision)
            })
            .collect(),
        all_or_nothing,
        decided_at: whole_ms(SystemTime::now()),
        expires_at: members[0].expires_at,
    }
}

/// A principal's undecided, unexpired approvals of one audience are listed oldest first, and
/// nothing of another principal or audience, nor anything decided.
pub async fn siblings_are_one_principals_undecided_approvals<S: ApprovalStore>(store: &S) {
    let (alice, bob) = (principal(), principal());
    let mut mine = Vec::new();
    for i in 0..3u64 {
        let mut a = member(alice, "notes.example");
        a.created_at = whole_ms(SystemTime::now() - Duration::from_secs(30 - i));
        store.propose(&a).await.expect("propose");
        mine.push(a);
    }
    store
        .propose(&member(alice, "other.example"))
        .await
        .expect("propose");
    store
        .propose(&member(bob, "notes.example"))
        .await
        .expect("propose");
    assert_eq!(
        store
            .decide(mine[1].id, caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Recorded
    );
    let found = store.siblings("notes.example", &alice).await.unwrap();
    let ids: Vec<ApprovalId> = found.iter().map(|a| a.id).collect();
    assert_eq!(ids, [mine[0].id, mine[2].id]);
    assert_eq!(found[0], mine[0], "read back whole");
    assert!(
        store
            .siblings("notes.example", &principal())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A batch decision is kept once per set: a second one of the same set changes nothing; applying
/// it decides and marks each member, again changes nothing, and a member decided otherwise is
/// reported, not overwritten.
pub async fn batch_decisions_are_kept_once_and_applied_to_each_member<S: ApprovalStore>(store: &S) {
    let alice = principal();
    let members: Vec<Approval> = (0..3).map(|_| member(alice, "notes.example")).collect();
    for a in &members {
        store.propose(a).await.expect("propose");
    }
    let refs: Vec<&Approval> = members.iter().collect();
    let batch = batch_of(&refs, &[true, false, true], false);
    assert_eq!(store.batch(batch.set).await.unwrap(), None);
    assert!(store.record_batch(&batch).await.unwrap(), "kept");
    let second = batch_of(&refs, &[false, false, false], true);
    assert!(
        !store.record_batch(&second).await.unwrap(),
        "a set is decided once"
    );
    assert_eq!(store.batch(batch.set).await.unwrap(), Some(batch.clone()));
    // A member decided on its own page first keeps that decision.
    assert_eq!(
        store
            .decide(members[2].id, caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Recorded
    );
    let applied = crate::store::batch::apply(store, &batch).await.unwrap();
    assert_eq!(applied.decided, [members[0].id, members[1].id]);
    assert_eq!(applied.missed, [(members[2].id, Decided::AlreadyDecided)]);
    let first = store.approval(members[0].id).await.unwrap().unwrap();
    assert_eq!(
        first.decision,
        Some(Decision::Approved {
            chosen: "note-3".into(),
            standing: false,
            narrowed: None
        })
    );
    assert_eq!(first.batch, Some(batch.mark()));
    let second = store.approval(members[1].id).await.unwrap().unwrap();
    assert_eq!(second.decision, Some(Decision::Declined));
    assert_eq!(second.batch, Some(batch.mark()));
    assert_eq!(
        store.approval(members[2].id).await.unwrap().unwrap().batch,
        None
    );
    let again = crate::store::batch::apply(store, &batch).await.unwrap();
    assert!(again.decided.is_empty());
    assert_eq!(again.already, [members[0].id, members[1].id]);
    // All or nothing: a member decided otherwise stops every member.
    let whole = batch_of(&refs[..2], &[true, true], true);
    assert!(
        !crate::store::batch::all_approved(store, &whole)
            .await
            .unwrap()
    );
}

/// Of many deciders racing to keep a decision of one set, exactly one is kept.
pub async fn one_batch_decision_among_racers<S: ApprovalStore>(store: Arc<S>) {
    let alice = principal();
    let members: Vec<Approval> = (0..2).map(|_| member(alice, "notes.example")).collect();
    for a in &members {
        store.propose(a).await.expect("propose");
    }
    let mut racers = Vec::new();
    for i in 0..8 {
        let (store, members) = (store.clone(), members.clone());
        racers.push(tokio::spawn(async move {
            let refs: Vec<&Approval> = members.iter().collect();
            let batch = batch_of(&refs, &[i % 2 == 0, true], false);
            store.record_batch(&batch).await.expect("record")
        }));
    }
    let mut kept = 0;
    for racer in racers {
        kept += usize::from(racer.await.expect("join"));
    }
    assert_eq!(kept, 1);
}

fn whole_ms(at: SystemTime) -> SystemTime {
    SystemTime::UNIX_EPOCH
        + Duration::from_millis(
            at.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
}

/// The caller of [`approval`] (subject `alice`), as the page would name them.
fn caller() -> Decider {
    Decider::new("alice", Vec::<String>::new(), true)
}

/// Someone other than the caller.
fn approver(subject: &str) -> Decider {
    Decider::new(subject, ["notes-admin"], false)
}

/// An approval is stored once, read back whole, decided once by its principal only, for an
/// offered choice, and an expired one is gone.
pub async fn approvals_are_decided_once<S: ApprovalStore>(store: &S) {
    let alice = principal();
    let a = approval(alice, Duration::from_secs(60));
    store.propose(&a).await.expect("propose");
    assert!(store.propose(&a).await.is_err(), "an id is proposed once");
    assert_eq!(store.approval(a.id).await.unwrap(), Some(a.clone()));
    let approve = |id: &str| Decision::Approved {
        chosen: id.into(),
        standing: id == "note-7",
        narrowed: None,
    };
    assert_eq!(
        store
            .decide(a.id, approver("bob"), approve("note-7"))
            .await
            .unwrap(),
        Decided::NotYours
    );
    assert_eq!(
        store
            .decide(a.id, caller(), approve("note-9"))
            .await
            .unwrap(),
        Decided::InvalidChoice
    );
    assert_eq!(store.approval(a.id).await.unwrap().unwrap().decision, None);
    assert_eq!(
        store
            .decide(a.id, caller(), approve("note-7"))
            .await
            .unwrap(),
        Decided::Recorded
    );
    assert_eq!(
        store
            .decide(a.id, caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::AlreadyDecided
    );
    assert_eq!(
        store.approval(a.id).await.unwrap().unwrap().decision,
        Some(approve("note-7"))
    );
    let unknown = ApprovalId::from_bytes(*Nonce::random().as_bytes());
    assert_eq!(store.approval(unknown).await.unwrap(), None);
    assert_eq!(
        store
            .decide(unknown, caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Unknown
    );
    let mut gone = approval(alice, Duration::from_millis(300));
    store.propose(&gone).await.expect("propose");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.approval(gone.id).await.unwrap(), None, "expired");
    gone.decision = None;
    assert_eq!(
        store
            .decide(gone.id, caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Unknown
    );
}

/// One principal holds at most [`MAX_PENDING_APPROVALS`]
/// unexpired approvals; over it, `propose` answers `OverBudget`, and others are unaffected.
pub async fn approvals_are_capped_per_principal<S: ApprovalStore>(store: &S) {
    let alice = principal();
    for _ in 0..MAX_PENDING_APPROVALS {
        store
            .propose(&approval(alice, Duration::from_secs(60)))
            .await
            .expect("within the cap");
    }
    let over = store
        .propose(&approval(alice, Duration::from_secs(60)))
        .await;
    assert!(
        matches!(over, Err(StoreError::OverBudget { retry_after }) if retry_after <= Duration::from_secs(60)),
        "{over:?}"
    );
    store
        .propose(&approval(principal(), Duration::from_secs(60)))
        .await
        .expect("another principal is not charged");
}

/// Of 16 concurrent decisions on one approval, exactly one is recorded.
pub async fn one_decision_among_concurrent_deciders<S: ApprovalStore>(store: Arc<S>) {
    let alice = principal();
    let a = approval(alice, Duration::from_secs(60));
    store.propose(&a).await.expect("propose");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let decision = if i % 2 == 0 {
                    Decision::Declined
                } else {
                    Decision::Approved {
                        chosen: "note-3".into(),
                        standing: false,
                        narrowed: None,
                    }
                };
                store
                    .decide(a.id, caller(), decision)
                    .await
                    .expect("decide")
            })
        })
        .collect();
    let mut recorded = 0;
    for task in tasks {
        if task.await.expect("task") == Decided::Recorded {
            recorded += 1;
        }
    }
    assert_eq!(recorded, 1);
}

/// Under four eyes for two, the caller is refused, each approver counts once, the second
/// approves the first one's choice, and a decline by an approver is final; what was endorsed is
/// read back whole.
pub async fn approvers_decide_as_their_rule_says<S: ApprovalStore>(store: &S) {
    let mut a = approval(principal(), Duration::from_secs(60));
    a.standing = None;
    a.approvers = Approvers::role("notes-admin").except_caller().required(2);
    store.propose(&a).await.expect("propose");
    let approve = |id: &str| Decision::Approved {
        chosen: id.into(),
        standing: false,
        narrowed: None,
    };
    let decide = |who: Decider, what: Decision| store.decide(a.id, who, what);
    assert_eq!(
        decide(caller(), approve("note-7")).await.unwrap(),
        Decided::OwnRequest
    );
    let outsider = Decider::new("eve", ["reader"], false);
    assert_eq!(
        decide(outsider, approve("note-7")).await.unwrap(),
        Decided::NotYours
    );
    assert_eq!(
        decide(approver("bob"), approve("note-7")).await.unwrap(),
        Decided::Counted {
            approvals: 1,
            required: 2
        }
    );
    assert_eq!(
        decide(approver("bob"), approve("note-7")).await.unwrap(),
        Decided::AlreadyApproved
    );
    assert_eq!(
        decide(approver("carol"), approve("note-3")).await.unwrap(),
        Decided::InvalidChoice
    );
    let read = store.approval(a.id).await.unwrap().expect("kept");
    assert_eq!(read.decision, None);
    assert_eq!(read.endorsements.len(), 1);
    assert_eq!(read.endorsements[0].subject, "bob");
    assert_eq!(read.approvers, a.approvers);
    assert_eq!(
        decide(approver("carol"), approve("note-7")).await.unwrap(),
        Decided::Recorded
    );
    let read = store.approval(a.id).await.unwrap().expect("kept");
    assert_eq!(read.decision, Some(approve("note-7")));
    let who: Vec<&str> = read
        .endorsements
        .iter()
        .map(|e| e.subject.as_str())
        .collect();
    assert_eq!(who, ["bob", "carol"]);

    let mut vetoed = approval(principal(), Duration::from_secs(60));
    vetoed.approvers = Approvers::anyone_but_caller().required(2);
    store.propose(&vetoed).await.expect("propose");
    assert!(matches!(
        store
            .decide(vetoed.id, approver("bob"), approve("note-3"))
            .await
            .unwrap(),
        Decided::Counted { .. }
    ));
    assert_eq!(
        store
            .decide(vetoed.id, approver("dave"), Decision::Declined)
            .await
            .unwrap(),
        Decided::Recorded
    );
    assert_eq!(
        store
            .decide(vetoed.id, approver("carol"), approve("note-3"))
            .await
            .unwrap(),
        Decided::AlreadyDecided
    );
    let read = store.approval(vetoed.id).await.unwrap().expect("kept");
    assert_eq!(read.decision, Some(Decision::Declined));
}

/// Eight distinct approvers racing on a two-approval rule: exactly two are counted (one
/// `Counted`, one final `Recorded`), in the record as in the answers; the rest change nothing.
pub async fn racing_approvers_are_counted_exactly<S: ApprovalStore>(store: Arc<S>) {
    let mut a = approval(principal(), Duration::from_secs(60));
    a.approvers = Approvers::anyone_but_caller().required(2);
    store.propose(&a).await.expect("propose");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let decision = Decision::Approved {
                    chosen: "note-7".into(),
                    standing: false,
                    narrowed: None,
                };
                store
                    .decide(a.id, approver(&format!("approver-{i}")), decision)
                    .await
                    .expect("decide")
            })
        })
        .collect();
    let (mut counted, mut recorded) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Decided::Counted { .. } => counted += 1,
            Decided::Recorded => recorded += 1,
            Decided::AlreadyDecided => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((counted, recorded), (1, 1));
    let read = store.approval(a.id).await.unwrap().expect("kept");
    assert_eq!(read.endorsements.len(), 2);
    assert_ne!(read.endorsements[0].subject, read.endorsements[1].subject);
    assert!(read.decision.is_some());
}

/// A store that counts its pending approvals (the gauge) counts this audience's undecided,
/// unexpired ones exactly; one that cannot says `None`.
///
/// # Panics
/// If the store miscounts or fails.
pub async fn pending_approvals_are_counted_per_audience<S: ApprovalStore>(store: &S) {
    // A fresh audience: a shared store holds earlier runs' approvals.
    let audience = format!("pending-{}.example", Nonce::random().to_hex());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut a = approval(principal(), Duration::from_secs(60));
        a.audience.clone_from(&audience);
        a.standing = None;
        store.propose(&a).await.expect("propose");
        ids.push(a.id);
    }
    let count = store.pending(&audience).await.expect("pending");
    if count.is_none() {
        return;
    }
    assert_eq!(count, Some(3));
    assert_eq!(
        store
            .decide(ids[0], caller(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Recorded
    );
    assert_eq!(store.pending(&audience).await.expect("pending"), Some(2));
    assert_eq!(
        store.pending("nobody.example").await.expect("pending"),
        Some(0)
    );
}

/// An approver's inbox: the undecided, unexpired approvals of one audience filed under any of
/// their routes, newest first; another audience's, a decided one and one for others are not in it.
pub async fn inbox_lists_what_waits_for_an_approver<S: ApprovalStore>(store: &S) {
    // Fresh routes for this run (a shared store holds earlier runs' approvals).
    let role = format!("role-{}", Nonce::random().to_hex());
    let bob = || Decider::new("bob", [role.clone()], false);
    let mut made = Vec::new();
    for (i, rule) in [
        Approvers::role(role.clone()),
        Approvers::role(role.clone()).except_caller(),
        Approvers::role("someone-else"),
        Approvers::role(role.clone()),
    ]
    .into_iter()
    .enumerate()
    {
        let mut a = approval(principal(), Duration::from_secs(60));
        a.standing = None;
        a.approvers = rule;
        a.created_at =
            whole_ms(SystemTime::now() + Duration::from_secs(u64::try_from(i).unwrap_or(0)));
        if i == 3 {
            a.audience = "other.example".into();
        }
        store.propose(&a).await.expect("propose");
        made.push(a);
    }
    let mut decided = approval(principal(), Duration::from_secs(60));
    decided.approvers = Approvers::role(role.clone());
    decided.created_at = whole_ms(SystemTime::now() + Duration::from_secs(9));
    store.propose(&decided).await.expect("propose");
    let routes = crate::approvers::routes_of("bob", [role.as_str()].into_iter());
    assert_eq!(
        store
            .decide(decided.id, bob(), Decision::Declined)
            .await
            .unwrap(),
        Decided::Recorded
    );
    let inbox = store
        .inbox("notes.example", &routes, 50)
        .await
        .expect("inbox");
    let ids: Vec<ApprovalId> = inbox.iter().map(|a| a.id).collect();
    assert_eq!(
        ids,
        [made[1].id, made[0].id],
        "newest first, this audience, undecided"
    );
    assert_eq!(inbox[0], made[1]);
    let one = store
        .inbox("notes.example", &routes, 1)
        .await
        .expect("inbox");
    assert_eq!(one.len(), 1);
    let other = store
        .inbox("other.example", &routes, 50)
        .await
        .expect("inbox");
    assert_eq!(other.iter().map(|a| a.id).collect::<Vec<_>>(), [made[3].id]);
    let nobody = crate::approvers::routes_of("nobody", std::iter::empty());
    let theirs = store
        .inbox("notes.example", &nobody, 50)
        .await
        .expect("inbox");
    assert!(theirs.iter().all(|a| !made.iter().any(|m| m.id == a.id)));
}

fn passkey(id: &str, created_ms: u64) -> RegisteredPasskey {
    RegisteredPasskey::new(
        id,
        format!("key {id}"),
        SystemTime::UNIX_EPOCH + Duration::from_millis(created_ms),
        format!("{{\"cred\":\"{id}\",\"counter\":0}}"),
    )
}

/// A subject's passkeys are listed oldest first, updated and removed by id; an id is
/// registered once across every subject; a subject holds at most
/// [`MAX_PASSKEYS_PER_SUBJECT`]; and another subject sees none of them.
pub async fn passkeys_are_kept_per_subject_with_unique_ids<S: PasskeyStore>(store: &S) {
    let run = Nonce::random().to_hex();
    let (alice, bob) = (format!("alice-{run}"), format!("bob-{run}"));
    let id = |n: usize| format!("cred-{run}-{n}");
    assert_eq!(store.passkeys(&alice).await.unwrap(), vec![]);
    assert_eq!(
        store.register(&alice, &passkey(&id(2), 2)).await.unwrap(),
        Registered::Added
    );
    assert_eq!(
        store.register(&alice, &passkey(&id(1), 1)).await.unwrap(),
        Registered::Added
    );
    // The same credential id again, for alice or for bob: refused.
    assert_eq!(
        store.register(&alice, &passkey(&id(1), 5)).await.unwrap(),
        Registered::Exists
    );
    assert_eq!(
        store.register(&bob, &passkey(&id(1), 5)).await.unwrap(),
        Registered::Exists
    );
    let held = store.passkeys(&alice).await.unwrap();
    assert_eq!(
        held.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
        [id(1), id(2)],
        "oldest first"
    );
    assert_eq!(held[0], passkey(&id(1), 1), "read back whole");
    assert!(store.passkeys(&bob).await.unwrap().is_empty());
    let mut moved = passkey(&id(1), 1);
    moved.credential = "{\"counter\":7}".into();
    assert!(store.update(&alice, &moved).await.unwrap());
    assert!(!store.update(&bob, &moved).await.unwrap(), "not bob's");
    assert_eq!(
        store.passkeys(&alice).await.unwrap()[0].credential,
        moved.credential
    );
    assert!(!store.remove(&bob, &id(1)).await.unwrap(), "not bob's");
    assert!(store.remove(&alice, &id(1)).await.unwrap());
    assert!(!store.remove(&alice, &id(1)).await.unwrap());
    assert!(!store.update(&alice, &moved).await.unwrap(), "removed");
    // A removed id may be registered again (by its owner, re-enrolling).
    assert_eq!(
        store.register(&alice, &passkey(&id(1), 9)).await.unwrap(),
        Registered::Added
    );
    for n in 3..=MAX_PASSKEYS_PER_SUBJECT {
        assert_eq!(
            store
                .register(&alice, &passkey(&id(n), 10 + n as u64))
                .await
                .unwrap(),
            Registered::Added
        );
    }
    assert_eq!(
        store.register(&alice, &passkey(&id(99), 99)).await.unwrap(),
        Registered::Full
    );
    assert_eq!(
        store.register(&bob, &passkey(&id(99), 99)).await.unwrap(),
        Registered::Added,
        "another subject is not charged, and a refused id stays free"
    );
    let mut huge = passkey(&id(100), 1);
    huge.credential = "x".repeat(super::passkey::MAX_CREDENTIAL_BYTES + 1);
    assert!(store.register(&bob, &huge).await.is_err());
}

/// Sixteen registrations of one credential id race, for different subjects: one is added.
pub async fn one_registration_of_an_id_among_racers<S: PasskeyStore>(store: Arc<S>) {
    let run = Nonce::random().to_hex();
    let id = format!("raced-{run}");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (store, id, run) = (Arc::clone(&store), id.clone(), run.clone());
            tokio::spawn(async move {
                store
                    .register(&format!("subject-{run}-{i}"), &passkey(&id, 1))
                    .await
                    .expect("register")
            })
        })
        .collect();
    let mut added = 0;
    for task in tasks {
        if task.await.expect("task") == Registered::Added {
            added += 1;
        }
    }
    assert_eq!(added, 1);
}

/// A standing approval for `principal` on `scope`, for `uses` calls, expiring `ttl` from now (in
/// whole milliseconds, what every store keeps).
pub fn standing(principal: PrincipalKey, scope: &str, uses: u32, ttl: Duration) -> Standing {
    let millis = |at: SystemTime| {
        SystemTime::UNIX_EPOCH
            + Duration::from_millis(
                at.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            )
    };
    let now = SystemTime::now();
    Standing::new(
        "notes.example",
        principal,
        "alice",
        "notes_delete",
        scope,
        millis(now),
        millis(now + ttl),
        uses,
    )
}

/// A store that counts its live standing approvals (the gauge) counts this audience's
/// unexpired, unrevoked ones with uses left, exactly; one that cannot says `None`.
///
/// # Panics
/// If the store miscounts or fails.
pub async fn live_standing_approvals_are_counted_per_audience<S: StandingStore>(store: &S) {
    let audience = format!("live-{}.example", Nonce::random().to_hex());
    let made: Vec<Standing> = ["a", "b", "c"]
        .iter()
        .map(|scope| {
            let mut s = standing(principal(), scope, 1, Duration::from_secs(60));
            s.audience.clone_from(&audience);
            s
        })
        .collect();
    for s in &made {
        store.grant(s).await.expect("grant");
    }
    let count = store.live(&audience).await.expect("live");
    if count.is_none() {
        return;
    }
    assert_eq!(count, Some(3));
    // One used up, one revoked: one is left in force.
    assert!(matches!(
        store
            .use_one(made[0].key(), made[0].id, Nonce::random())
            .await
            .unwrap(),
        Use::Used { left: 0 }
    ));
    assert_eq!(
        store
            .revoke(made[1].principal, Some(made[1].id))
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.live(&audience).await.expect("live"), Some(1));
}

/// A standing approval is found by its key only, covers exactly its uses, and granting again
/// under the same key replaces it.
pub async fn standing_uses_are_counted_exactly<S: StandingStore>(store: &S) {
    let alice = principal();
    let s = standing(alice, "personal", 2, Duration::from_secs(60));
    store.grant(&s).await.expect("grant");
    assert_eq!(store.find(s.key()).await.unwrap(), Some(s.clone()));
    let elsewhere = StandingKey::new("notes.example", alice, "notes_delete", "team");
    assert_eq!(store.find(elsewhere).await.unwrap(), None);
    assert_eq!(
        store
            .use_one(s.key(), StandingId::random(), Nonce::random())
            .await
            .unwrap(),
        Use::Unknown,
        "another id under the key spends nothing"
    );
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Used { left: 1 }
    );
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Used { left: 0 }
    );
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Exhausted
    );
    let exhausted = store.find(s.key()).await.unwrap();
    assert_eq!(
        exhausted.map(|f| (f.id, f.used, f.revoked)),
        Some((s.id, 2, false)),
        "found until it expires, with every use spent"
    );
    let again = standing(alice, "personal", 5, Duration::from_secs(60));
    store.grant(&again).await.expect("grant again");
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Unknown,
        "replaced"
    );
    assert_eq!(
        store
            .use_one(again.key(), again.id, Nonce::random())
            .await
            .unwrap(),
        Use::Used { left: 4 }
    );
}

/// Revoking one, then all, ends them on the next use; an expired one is gone.
pub async fn standing_approvals_are_revoked_and_expire<S: StandingStore>(store: &S) {
    let alice = principal();
    let a = standing(alice, "personal", 5, Duration::from_secs(60));
    let b = standing(alice, "team", 5, Duration::from_secs(60));
    let bobs = standing(principal(), "personal", 5, Duration::from_secs(60));
    for s in [&a, &b, &bobs] {
        store.grant(s).await.expect("grant");
    }
    let listed: Vec<StandingId> = store
        .list(alice)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&a.id) && listed.contains(&b.id));
    assert_eq!(store.revoke(alice, Some(a.id)).await.unwrap(), 1);
    assert_eq!(
        store.revoke(alice, Some(bobs.id)).await.unwrap(),
        0,
        "not hers"
    );
    assert_eq!(
        store.use_one(a.key(), a.id, Nonce::random()).await.unwrap(),
        Use::Revoked
    );
    let revoked = store.find(a.key()).await.unwrap();
    assert_eq!(
        revoked.map(|f| (f.id, f.revoked)),
        Some((a.id, true)),
        "found until it expires, revoked"
    );
    assert_eq!(store.revoke(alice, None).await.unwrap(), 1);
    assert_eq!(
        store.use_one(b.key(), b.id, Nonce::random()).await.unwrap(),
        Use::Revoked
    );
    assert!(store.list(alice).await.unwrap().is_empty());
    assert_eq!(
        store
            .use_one(bobs.key(), bobs.id, Nonce::random())
            .await
            .unwrap(),
        Use::Used { left: 4 },
        "another principal's is untouched"
    );
    let short = standing(alice, "archive", 5, Duration::from_millis(300));
    store.grant(&short).await.expect("grant");
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(store.find(short.key()).await.unwrap(), None);
    assert!(matches!(
        store
            .use_one(short.key(), short.id, Nonce::random())
            .await
            .unwrap(),
        Use::Expired | Use::Unknown
    ));
}

/// One principal holds at most [`MAX_STANDING_PER_PRINCIPAL`] live standing approvals; another
/// principal is unaffected.
pub async fn standing_approvals_are_capped_per_principal<S: StandingStore>(store: &S) {
    let alice = principal();
    for i in 0..MAX_STANDING_PER_PRINCIPAL {
        store
            .grant(&standing(
                alice,
                &format!("scope-{i}"),
                1,
                Duration::from_secs(60),
            ))
            .await
            .expect("within the cap");
    }
    let over = store
        .grant(&standing(alice, "one-more", 1, Duration::from_secs(60)))
        .await;
    assert!(
        matches!(over, Err(StoreError::OverBudget { .. })),
        "{over:?}"
    );
    // Replacing one she holds is not one more.
    store
        .grant(&standing(alice, "scope-0", 3, Duration::from_secs(60)))
        .await
        .expect("a replacement");
    store
        .grant(&standing(
            principal(),
            "personal",
            1,
            Duration::from_secs(60),
        ))
        .await
        .expect("another principal");
    // Only live ones count: revoking one, then spending the last use of another, makes room.
    let held = store.list(alice).await.unwrap();
    assert_eq!(held.len(), MAX_STANDING_PER_PRINCIPAL);
    assert_eq!(store.revoke(alice, Some(held[0].id)).await.unwrap(), 1);
    store
        .grant(&standing(alice, "after-revoke", 1, Duration::from_secs(60)))
        .await
        .expect("a revoked one does not count");
    let single = held
        .iter()
        .skip(1)
        .find(|s| s.uses == 1)
        .expect("one with a single use");
    assert_eq!(
        store
            .use_one(single.key(), single.id, Nonce::random())
            .await
            .unwrap(),
        Use::Used { left: 0 }
    );
    store
        .grant(&standing(alice, "after-spend", 1, Duration::from_secs(60)))
        .await
        .expect("one with every use spent does not count");
    let over = store
        .grant(&standing(alice, "full-again", 1, Duration::from_secs(60)))
        .await;
    assert!(
        matches!(over, Err(StoreError::OverBudget { .. })),
        "{over:?}"
    );
}

/// A scope longer than [`MAX_STANDING_SCOPE_BYTES`] is not kept.
pub async fn an_oversize_scope_is_not_kept<S: StandingStore>(store: &S) {
    let alice = principal();
    let at_most = standing(
        alice,
        &"s".repeat(MAX_STANDING_SCOPE_BYTES),
        1,
        Duration::from_secs(60),
    );
    store.grant(&at_most).await.expect("at the bound");
    let over = standing(
        alice,
        &"s".repeat(MAX_STANDING_SCOPE_BYTES + 1),
        1,
        Duration::from_secs(60),
    );
    assert!(store.grant(&over).await.is_err());
    assert_eq!(store.find(over.key()).await.unwrap(), None);
    assert_eq!(store.list(alice).await.unwrap().len(), 1);
}

/// Of 16 concurrent uses of a standing approval for 3, exactly 3 are spent.
pub async fn concurrent_uses_never_exceed_the_count<S: StandingStore>(store: Arc<S>) {
    let s = standing(principal(), "personal", 3, Duration::from_secs(60));
    store.grant(&s).await.expect("grant");
    let racers: Vec<_> = (0..16)
        .map(|_| {
            let store = Arc::clone(&store);
            let (key, id) = (s.key(), s.id);
            tokio::spawn(async move { store.use_one(key, id, Nonce::random()).await.expect("use") })
        })
        .collect();
    let mut used = 0;
    for racer in racers {
        match racer.await.expect("join") {
            Use::Used { .. } => used += 1,
            Use::Exhausted => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(used, 3);
}

/// A use is given back only by the ticket that spent it, once, and only to the approval it was
/// spent of: the next call finds it again.
pub async fn a_use_given_back_is_the_one_its_ticket_spent<S: StandingStore>(store: &S) {
    let s = standing(principal(), "personal", 2, Duration::from_secs(60));
    store.grant(&s).await.expect("grant");
    let (first, second) = (Nonce::random(), Nonce::random());
    assert_eq!(
        store.use_one(s.key(), s.id, first).await.unwrap(),
        Use::Used { left: 1 }
    );
    assert_eq!(
        store.use_one(s.key(), s.id, second).await.unwrap(),
        Use::Used { left: 0 }
    );
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Exhausted
    );
    assert!(
        !store
            .give_back(s.key(), s.id, Nonce::random())
            .await
            .unwrap(),
        "a ticket that spent nothing gives nothing back"
    );
    assert!(
        !store
            .give_back(s.key(), StandingId::random(), first)
            .await
            .unwrap(),
        "nor under another id"
    );
    let used = |f: Option<Standing>| f.map(|f| f.used);
    assert_eq!(used(store.find(s.key()).await.unwrap()), Some(2));
    assert!(store.give_back(s.key(), s.id, first).await.unwrap());
    assert_eq!(used(store.find(s.key()).await.unwrap()), Some(1));
    assert!(
        !store.give_back(s.key(), s.id, first).await.unwrap(),
        "a use comes back once"
    );
    assert_eq!(used(store.find(s.key()).await.unwrap()), Some(1));
    // The use given back is there for the next call, and no more.
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Used { left: 0 }
    );
    assert_eq!(
        store.use_one(s.key(), s.id, Nonce::random()).await.unwrap(),
        Use::Exhausted
    );
    // Granted again under the key: the old approval's tickets give nothing back to the new one.
    let again = standing(s.principal, "personal", 3, Duration::from_secs(60));
    store.grant(&again).await.expect("grant again");
    assert!(!store.give_back(s.key(), s.id, second).await.unwrap());
    assert!(
        !store
            .give_back(again.key(), again.id, second)
            .await
            .unwrap()
    );
    assert_eq!(used(store.find(again.key()).await.unwrap()), Some(0));
    // Revoked meanwhile: the use still comes back (the listing shows what ran), and the
    // approval still covers nothing.
    let ticket = Nonce::random();
    assert_eq!(
        store.use_one(again.key(), again.id, ticket).await.unwrap(),
        Use::Used { left: 2 }
    );
    assert_eq!(
        store.revoke(again.principal, Some(again.id)).await.unwrap(),
        1
    );
    assert!(
        store
            .give_back(again.key(), again.id, ticket)
            .await
            .unwrap()
    );
    assert_eq!(used(store.find(again.key()).await.unwrap()), Some(0));
    assert_eq!(
        store
            .use_one(again.key(), again.id, Nonce::random())
            .await
            .unwrap(),
        Use::Revoked
    );
}

/// 24 racing calls on a standing approval for 5: each reserves a use, and every odd one is
/// refused and gives its use back, twice at once. Exactly the even ones that got a use keep it,
/// no more than 5 are ever held, and the uses given back are there for later calls.
pub async fn racing_uses_and_give_backs_keep_the_count<S: StandingStore>(store: Arc<S>) {
    const USES: u32 = 5;
    let s = standing(principal(), "personal", USES, Duration::from_secs(60));
    store.grant(&s).await.expect("grant");
    let barrier = Arc::new(tokio::sync::Barrier::new(24));
    let racers: Vec<_> = (0..24)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            let (key, id) = (s.key(), s.id);
            tokio::spawn(async move {
                barrier.wait().await;
                let ticket = Nonce::random();
                let used = store.use_one(key, id, ticket).await.expect("use");
                if !matches!(used, Use::Used { .. }) {
                    return (used, 0);
                }
                if i % 2 == 0 {
                    return (used, 0);
                }
                let twice = [0, 1].map(|_| {
                    let store = Arc::clone(&store);
                    tokio::spawn(async move { store.give_back(key, id, ticket).await })
                });
                let mut back = 0;
                for give in twice {
                    back += u32::from(give.await.expect("join").expect("give back"));
                }
                (used, back)
            })
        })
        .collect();
    let (mut kept, mut given) = (0, 0);
    for (i, racer) in racers.into_iter().enumerate() {
        match racer.await.expect("join") {
            (Use::Used { .. }, back) if i % 2 == 0 => {
                assert_eq!(back, 0);
                kept += 1;
            }
            (Use::Used { .. }, back) => {
                assert_eq!(back, 1, "racer {i}: its use came back exactly once");
                given += 1;
            }
            (Use::Exhausted, _) => {}
            (other, _) => panic!("unexpected {other:?}"),
        }
    }
    assert!(kept <= USES, "{kept} kept of {USES}");
    assert!(kept + given >= 1);
    let found = store.find(s.key()).await.unwrap().expect("found");
    assert_eq!(found.used, kept, "only the kept uses are spent");
    let mut later = 0;
    while let Use::Used { .. } = store.use_one(s.key(), s.id, Nonce::random()).await.unwrap() {
        later += 1;
    }
    assert_eq!(kept + later, USES, "every use given back is there again");
}

/// Generates one `#[tokio::test]` per conformance check.
///
/// `replay_store_conformance!(make(), budgeted = |budget| make_with(budget))`: `make()` builds a
/// store on its defaults, `make_with(budget)` one whose per-principal budget is `budget`.
///
/// `replay_store_conformance!(optional make(), budgeted = |budget| make_with(budget))` takes
/// expressions of type `Option<store>` instead: `None` skips every test (print why from `make`),
/// for backends that may be absent.
#[macro_export]
macro_rules! replay_store_conformance {
    (optional $make:expr, budgeted = |$budget:ident| $budgeted:expr) => {
        $crate::replay_store_conformance!(@tests $make, |$budget| $budgeted);
    };
    ($make:expr, budgeted = |$budget:ident| $budgeted:expr) => {
        $crate::replay_store_conformance!(
            @tests ::core::option::Option::Some($make),
            |$budget| ::core::option::Option::Some($budgeted)
        );
    };
    (@tests $make:expr, |$budget:ident| $budgeted:expr) => {
        $crate::replay_store_conformance!(@each store = $make;
            #[tokio::test]
            conformance_claim_is_granted_once = claim_is_granted_once(&store),
            #[tokio::test]
            conformance_completed_claims_stay_consumed = completed_claims_stay_consumed(&store),
            #[tokio::test]
            conformance_only_the_owner_completes = only_the_owner_completes(&store),
            #[tokio::test]
            conformance_entries_expire = entries_expire(&store),
            #[tokio::test]
            conformance_nonces_are_independent = nonces_are_independent(&store),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_one_winner_among_concurrent_claimants =
                one_winner_among_concurrent_claimants(::std::sync::Arc::new(store)),
            #[tokio::test]
            conformance_used_nonces_are_reported = used_nonces_are_reported(&store),
        );
        $crate::replay_store_conformance!(@each store = $budgeted, budget $budget;
            #[tokio::test]
            conformance_principal_budget_is_enforced = principal_budget_is_enforced(&store), 3,
            #[tokio::test]
            conformance_budget_returns_when_entries_expire =
                budget_returns_when_entries_expire(&store), 2,
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_concurrent_claims_never_exceed_the_budget =
                concurrent_claims_never_exceed_the_budget(::std::sync::Arc::new(store)), 5,
        );
    };
    // One test a check: `$store` is made by `$make` (skipping the test on `None`), then checked.
    (@each $store:ident = $make:expr;
        $(#[$attr:meta] $test:ident = $check:ident($arg:expr)),+ $(,)?
    ) => {
        $(
            #[$attr]
            async fn $test() {
                let Some($store) = $make else { return };
                $crate::store::conformance::$check($arg).await;
            }
        )+
    };
    // The same with `$budget` set to the test's budget (a `usize`) before `$make` runs.
    (@each $store:ident = $make:expr, budget $budget:ident;
        $(#[$attr:meta] $test:ident = $check:ident($arg:expr), $n:literal),+ $(,)?
    ) => {
        $(
            #[$attr]
            async fn $test() {
                let $budget: usize = $n;
                let Some($store) = $make else { return };
                $crate::store::conformance::$check($arg).await;
            }
        )+
    };
}

/// Generates one `#[tokio::test]` per approval-store check:
/// `approval_store_conformance!(make())`, or `approval_store_conformance!(optional make())` with
/// `make()` of type `Option<store>` (`None` skips every test), as for
/// [`replay_store_conformance!`](crate::replay_store_conformance).
#[macro_export]
macro_rules! approval_store_conformance {
    (optional $make:expr) => {
        $crate::replay_store_conformance!(@each store = $make;
            #[tokio::test]
            conformance_approvals_are_decided_once = approvals_are_decided_once(&store),
            #[tokio::test]
            conformance_approvals_are_capped_per_principal =
                approvals_are_capped_per_principal(&store),
            #[tokio::test]
            conformance_approvers_decide_as_their_rule_says =
                approvers_decide_as_their_rule_says(&store),
            #[tokio::test]
            conformance_pending_approvals_are_counted_per_audience =
                pending_approvals_are_counted_per_audience(&store),
            #[tokio::test]
            conformance_inbox_lists_what_waits_for_an_approver =
                inbox_lists_what_waits_for_an_approver(&store),
            #[tokio::test]
            conformance_siblings_are_one_principals_undecided_approvals =
                siblings_are_one_principals_undecided_approvals(&store),
            #[tokio::test]
            conformance_batch_decisions_are_kept_once_and_applied_to_each_member =
                batch_decisions_are_kept_once_and_applied_to_each_member(&store),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_one_batch_decision_among_racers =
                one_batch_decision_among_racers(::std::sync::Arc::new(store)),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_one_decision_among_concurrent_deciders =
                one_decision_among_concurrent_deciders(::std::sync::Arc::new(store)),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_racing_approvers_are_counted_exactly =
                racing_approvers_are_counted_exactly(::std::sync::Arc::new(store)),
        );
    };
    ($make:expr) => {
        $crate::approval_store_conformance!(optional ::core::option::Option::Some($make));
    };
}

/// Generates one `#[tokio::test]` per passkey-store check, as the other macros do.
#[macro_export]
macro_rules! passkey_store_conformance {
    (optional $make:expr) => {
        $crate::replay_store_conformance!(@each store = $make;
            #[tokio::test]
            conformance_passkeys_are_kept_per_subject_with_unique_ids =
                passkeys_are_kept_per_subject_with_unique_ids(&store),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_one_registration_of_an_id_among_racers =
                one_registration_of_an_id_among_racers(::std::sync::Arc::new(store)),
        );
    };
    ($make:expr) => {
        $crate::passkey_store_conformance!(optional ::core::option::Option::Some($make));
    };
}

/// Generates one `#[tokio::test]` per standing-store check:
/// `standing_store_conformance!(make())`, or `standing_store_conformance!(optional make())` with
/// `make()` of type `Option<store>` (`None` skips every test), as for
/// [`replay_store_conformance!`](crate::replay_store_conformance).
#[macro_export]
macro_rules! standing_store_conformance {
    (optional $make:expr) => {
        $crate::replay_store_conformance!(@each store = $make;
            #[tokio::test]
            conformance_live_standing_approvals_are_counted_per_audience =
                live_standing_approvals_are_counted_per_audience(&store),
            #[tokio::test]
            conformance_standing_uses_are_counted_exactly =
                standing_uses_are_counted_exactly(&store),
            #[tokio::test]
            conformance_standing_approvals_are_revoked_and_expire =
                standing_approvals_are_revoked_and_expire(&store),
            #[tokio::test]
            conformance_standing_approvals_are_capped_per_principal =
                standing_approvals_are_capped_per_principal(&store),
            #[tokio::test]
            conformance_an_oversize_scope_is_not_kept =
                an_oversize_scope_is_not_kept(&store),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_concurrent_uses_never_exceed_the_count =
                concurrent_uses_never_exceed_the_count(::std::sync::Arc::new(store)),
            #[tokio::test]
            conformance_a_use_given_back_is_the_one_its_ticket_spent =
                a_use_given_back_is_the_one_its_ticket_spent(&store),
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            conformance_racing_uses_and_give_backs_keep_the_count =
                racing_uses_and_give_backs_keep_the_count(::std::sync::Arc::new(store)),
        );
    };
    ($make:expr) => {
        $crate::standing_store_conformance!(optional ::core::option::Option::Some($make));
    };
}
