//! One decision over several approvals: the set an approver was shown, the record of what they
//! decided about it, and how that record is applied to each member.
//!
//! MCP has no batch id and 2026-07-28 no session, so a batch is formed where decisions are made:
//! on the approval page, over approvals of one principal that wait together. What is atomic is
//! the decision, never the execution: each member's call still runs (or not) on its own retry,
//! claiming only its own nonce.
//!
//! The decision is one record, [`BatchDecision`], created once per set in the approval store
//! ([`ApprovalStore::record_batch`]): a second decision of the same set, from another tab or
//! another instance, finds it and changes nothing (the page answers 409). The record is then
//! applied to each member's approval ([`apply`]), which marks it with the set ([`BatchMark`]). A
//! crash between the two leaves the record as the authority: applying it again (the page does
//! on a resubmission, a member's retry does for its siblings) finishes the job and never decides
//! anything the record does not say.

use std::time::Duration;

use super::StoreError;
use super::approval::{Approval, ApprovalId, ApprovalStore, Decided};
pub use super::approval::{BatchDecision, BatchMark, SetDigest};

/// The most approvals one batch decides: every approval one principal may have pending.
pub const MAX_BATCH: usize = super::approval::MAX_PENDING_APPROVALS;

/// Whether `other` may be decided in one batch with `anchor`: the same deployment, principal,
/// group and approver rule, created within `window` of it, both undecided, none typed, the rule
/// one decision by one approver without a passkey (anything more is decided approval by
/// approval).
pub fn batchable(anchor: &Approval, other: &Approval, window: Duration) -> bool {
    let apart = match anchor.created_at.duration_since(other.created_at) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    let single = |a: &Approval| {
        a.batch_group.is_some()
            && a.decision.is_none()
            && a.batch.is_none()
            && a.endorsements.is_empty()
            && !a.typed
            && a.approvers.required_approvals() == 1
            && !a.approvers.needs_passkey()
    };
    single(anchor)
        && single(other)
        && apart <= window
        && anchor.audience == other.audience
        && anchor.principal == other.principal
        && anchor.batch_group == other.batch_group
        && anchor.approvers == other.approvers
}

/// What applying a batch decision did to each member.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied {
    /// Members this application decided now.
    pub decided: Vec<ApprovalId>,
    /// Members the decision already marked (an earlier application).
    pub already: Vec<ApprovalId>,
    /// Members decided otherwise, gone, or refused: the decision did not reach them.
    pub missed: Vec<(ApprovalId, Decided)>,
}

/// Applies `batch` to each member's approval, in the order shown: each is decided as the record
/// says and marked with the set, by the store's one atomic [`decide`](ApprovalStore::decide).
/// Idempotent: a member already marked with this set is left as it is, so a crash between the
/// record and its members is healed by applying again.
///
/// # Errors
/// [`StoreError`] when the store cannot be reached; members decided before stay decided, and a
/// later application finishes the rest.
pub async fn apply(
    store: &dyn ApprovalStore,
    batch: &BatchDecision,
) -> Result<Applied, StoreError> {
    let (mark, decider) = (batch.mark(), batch.decider());
    let mut applied = Applied {
        decided: Vec::new(),
        already: Vec::new(),
        missed: Vec::new(),
    };
    for (id, decision) in &batch.members {
        match store
            .decide(
                *id,
                decider.clone().in_batch(mark.clone()),
                decision.clone(),
            )
            .await?
        {
            Decided::Recorded => applied.decided.push(*id),
            Decided::AlreadyDecided => {
                let same = store
                    .approval(*id)
                    .await?
                    .is_some_and(|a| a.batch.as_ref() == Some(&mark));
                if same {
                    applied.already.push(*id);
                } else {
                    applied.missed.push((*id, Decided::AlreadyDecided));
                }
            }
            other => applied.missed.push((*id, other)),
        }
    }
    Ok(applied)
}

/// Whether a member of an all-or-nothing set may run: `batch` approves every member, and every
/// member's approval carries it. Members the record has not reached yet are decided by it first
/// (a crash between the record and its members); a member declined, decided otherwise or gone
/// makes it `false` for every member.
///
/// # Errors
/// [`StoreError`] when the store cannot be reached.
pub async fn all_approved(
    store: &dyn ApprovalStore,
    batch: &BatchDecision,
) -> Result<bool, StoreError> {
    if batch.approved() != batch.members.len() {
        return Ok(false);
    }
    let applied = apply(store, batch).await?;
    Ok(applied.missed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvers::Approvers;
    use crate::kernel::{Nonce, PrincipalKey};
    use crate::store::approval::{ApprovalChoice, Decision};
    use std::time::{SystemTime, UNIX_EPOCH};

    fn approval(now: SystemTime, tool: &str) -> Approval {
        let nonce = Nonce::random();
        Approval {
            id: ApprovalId::for_nonce(&nonce),
            audience: "notes.example".into(),
            nonce,
            principal: PrincipalKey::from_bytes([1; 16]),
            subject: "alice".into(),
            tool: tool.into(),
            arguments: Some([9; 32]),
            message: "Delete it?".into(),
            choices: vec![ApprovalChoice::new("note-3", "Groceries", None)],
            typed: false,
            standing: None,
            expires_at: now + Duration::from_secs(300),
            approvers: Approvers::caller(),
            endorsements: Vec::new(),
            created_at: now,
            decision: None,
            batch_group: Some("notes".into()),
            batch: None,
            shown_arguments: None,
        }
    }

    #[test]
    fn the_set_digest_is_over_members_whatever_their_order() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (a, b) = (approval(now, "notes_delete"), approval(now, "notes_delete"));
        assert_eq!(SetDigest::of([&a, &b]), SetDigest::of([&b, &a]));
        assert_ne!(SetDigest::of([&a, &b]), SetDigest::of([&a]));
        let mut changed = b.clone();
        changed.arguments = Some([8; 32]);
        assert_ne!(SetDigest::of([&a, &b]), SetDigest::of([&a, &changed]));
        let set = SetDigest::of([&a]);
        assert_eq!(SetDigest::from_hex(&set.to_hex()), Some(set));
    }

    #[test]
    fn only_single_decisions_of_one_principal_group_and_window_are_batched() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let window = Duration::from_secs(120);
        let a = approval(now, "notes_delete");
        let b = approval(now + Duration::from_secs(60), "notes_archive");
        assert!(batchable(&a, &b, window));
        assert!(batchable(&b, &a, window));
        let late = approval(now + Duration::from_secs(121), "notes_delete");
        assert!(!batchable(&a, &late, window));
        let mut other = b.clone();
        other.principal = PrincipalKey::from_bytes([2; 16]);
        assert!(!batchable(&a, &other, window));
        let mut ungrouped = b.clone();
        ungrouped.batch_group = None;
        assert!(!batchable(&a, &ungrouped, window));
        let mut group = b.clone();
        group.batch_group = Some("files".into());
        assert!(!batchable(&a, &group, window));
        let mut typed = b.clone();
        typed.typed = true;
        assert!(!batchable(&a, &typed, window));
        let mut four_eyes = b.clone();
        four_eyes.approvers = Approvers::anyone_but_caller();
        assert!(!batchable(&a, &four_eyes, window));
        let mut two = a.clone();
        two.approvers = Approvers::caller().with_passkey();
        let mut two_b = b.clone();
        two_b.approvers = two.approvers.clone();
        assert!(!batchable(&two, &two_b, window));
        let mut decided = b.clone();
        decided.decision = Some(Decision::Declined);
        assert!(!batchable(&a, &decided, window));
        let mut audience = b;
        audience.audience = "other".into();
        assert!(!batchable(&a, &audience, window));
    }

    #[test]
    fn decisions_round_trip_and_anything_else_is_refused() {
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let (a, b) = (approval(now, "notes_delete"), approval(now, "notes_delete"));
        let batch = BatchDecision {
            set: SetDigest::of([&a, &b]),
            audience: "notes.example".into(),
            principal: a.principal,
            decider: "alice".into(),
            roles: vec!["staff".into()],
            caller: true,
            members: vec![
                (
                    a.id,
                    Decision::Approved {
                        chosen: "note-3".into(),
                        standing: false,
                        narrowed: None,
                    },
                ),
                (b.id, Decision::Declined),
            ],
            all_or_nothing: false,
            decided_at: now,
            expires_at: a.expires_at,
        };
        assert_eq!(BatchDecision::decode(&batch.encode()), Some(batch.clone()));
        assert_eq!(batch.approved(), 1);
        assert_eq!(batch.mark().members, 2);
        assert_eq!(
            BatchDecision::decode(&batch.encode().replace('}', ",\"x\":1}")),
            None
        );
    }
}
