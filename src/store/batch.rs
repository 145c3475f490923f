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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::approval::{Approval, ApprovalId, ApprovalStore, Decided, Decider, Decision};
use crate::kernel::{PrincipalKey, hex, unhex};

/// The most approvals one batch decides: every approval one principal may have pending.
pub const MAX_BATCH: usize = super::approval::MAX_PENDING_APPROVALS;

/// The digest of a set of approvals as the approver was shown it: over every member's nonce and
/// argument digest, in a fixed order. It names the set in the decision record, the log and each
/// member's mark, so a decision can never be applied to a set other than the one shown.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetDigest([u8; 32]);

impl SetDigest {
    /// The digest of `members` (order does not matter).
    pub fn of<'a>(members: impl IntoIterator<Item = &'a Approval>) -> Self {
        use sha2::{Digest, Sha256};
        let mut parts: Vec<([u8; 16], [u8; 32])> = members
            .into_iter()
            .map(|a| (*a.nonce.as_bytes(), a.arguments.unwrap_or([0; 32])))
            .collect();
        parts.sort_unstable();
        parts.dedup();
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm/approval-set/v1\0");
        hash.update((parts.len() as u64).to_be_bytes());
        for (nonce, arguments) in &parts {
            hash.update(nonce);
            hash.update(arguments);
        }
        Self(hash.finalize().into())
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Reads 64 lower-case hex digits; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        unhex(text).map(Self)
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for SetDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SetDigest({}…)", hex(&self.0[..4]))
    }
}

/// What a member's approval records of the batch that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchMark {
    /// The set, as [`SetDigest::to_hex`] writes it.
    pub set: String,
    /// How many members the set has.
    pub members: u8,
    /// Whether no member may run unless every member was approved by this decision.
    pub all_or_nothing: bool,
}

/// One approver's decision over a set of approvals: the record created once per set.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchDecision {
    /// The set decided.
    pub set: SetDigest,
    /// The deployment whose approvals they are.
    pub audience: String,
    /// The principal whose calls they are.
    pub principal: PrincipalKey,
    /// Who decided (a subject, as on the approvals).
    pub decider: String,
    /// The roles the authenticator gave the decider, as the rule read them.
    pub roles: Vec<String>,
    /// Whether the decider is the caller.
    pub caller: bool,
    /// Each member and what was decided about it, in the order shown.
    pub members: Vec<(ApprovalId, Decision)>,
    /// Whether no member may run unless every member was approved.
    pub all_or_nothing: bool,
    /// When it was decided.
    pub decided_at: SystemTime,
    /// When the last member expires; the record with it.
    pub expires_at: SystemTime,
}

impl std::fmt::Debug for BatchDecision {
    /// No decider: who decided goes to the decision log, not to debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchDecision")
            .field("set", &self.set)
            .field("members", &self.members.len())
            .field("all_or_nothing", &self.all_or_nothing)
            .finish_non_exhaustive()
    }
}

impl BatchDecision {
    /// `decider`'s decision over `members` (each approval, and what is decided about it), as
    /// shown: the set is their digest; it is kept until the last of them expires.
    pub fn new(
        members: &[(&Approval, Decision)],
        decider: &Decider,
        all_or_nothing: bool,
        decided_at: SystemTime,
    ) -> Self {
        let first = members.first().map(|(a, _)| *a);
        Self {
            set: SetDigest::of(members.iter().map(|(a, _)| *a)),
            audience: first.map(|a| a.audience.clone()).unwrap_or_default(),
            principal: first.map_or(PrincipalKey::from_bytes([0; 16]), |a| a.principal),
            decider: decider.subject.clone(),
            roles: decider.roles.clone(),
            caller: decider.caller,
            members: members.iter().map(|(a, d)| (a.id, d.clone())).collect(),
            all_or_nothing,
            decided_at,
            expires_at: members
                .iter()
                .map(|(a, _)| a.expires_at)
                .max()
                .unwrap_or(UNIX_EPOCH),
        }
    }

    /// The mark each member records.
    pub fn mark(&self) -> BatchMark {
        BatchMark {
            set: self.set.to_hex(),
            members: u8::try_from(self.members.len()).unwrap_or(u8::MAX),
            all_or_nothing: self.all_or_nothing,
        }
    }

    /// The decider, as each member's store decision admits them.
    pub fn decider(&self) -> Decider {
        Decider::new(&self.decider, &self.roles, self.caller)
    }

    /// How many members it approves.
    pub fn approved(&self) -> usize {
        self.members
            .iter()
            .filter(|(_, d)| matches!(d, Decision::Approved { .. }))
            .count()
    }

    /// The decision as one JSON text, for the stores that keep it as a value.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn encode(&self) -> String {
        let stored = Stored {
            set: self.set.to_hex(),
            audience: self.audience.clone(),
            principal: self.principal.to_hex(),
            decider: self.decider.clone(),
            roles: self.roles.clone(),
            caller: self.caller,
            members: self
                .members
                .iter()
                .map(|(id, d)| (id.to_hex(), d.clone()))
                .collect(),
            all_or_nothing: self.all_or_nothing,
            decided_at_ms: unix_ms(self.decided_at),
            expires_at_ms: unix_ms(self.expires_at),
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// A decision [`encode`](Self::encode) wrote; `None` for anything else.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let s: Stored = serde_json::from_str(text).ok()?;
        let members = s
            .members
            .into_iter()
            .map(|(id, d)| Some((ApprovalId::from_hex(&id)?, d)))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            set: SetDigest::from_hex(&s.set)?,
            audience: s.audience,
            principal: PrincipalKey::from_bytes(unhex(&s.principal)?),
            decider: s.decider,
            roles: s.roles,
            caller: s.caller,
            members,
            all_or_nothing: s.all_or_nothing,
            decided_at: UNIX_EPOCH + Duration::from_millis(s.decided_at_ms),
            expires_at: UNIX_EPOCH + Duration::from_millis(s.expires_at_ms),
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    set: String,
    audience: String,
    principal: String,
    decider: String,
    roles: Vec<String>,
    caller: bool,
    members: Vec<(String, Decision)>,
    all_or_nothing: bool,
    decided_at_ms: u64,
    expires_at_ms: u64,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
    use crate::kernel::Nonce;
    use crate::store::approval::ApprovalChoice;

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
