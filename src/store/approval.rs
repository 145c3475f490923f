//! The approval record: what the page shows, the one decision it records, and the store trait
//! that keeps it where every instance finds it. It lives with the stores, which keep it; its
//! public home is [`crate::approval`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::approvers::Approvers;
use crate::kernel::{BoxFuture, Nonce, PrincipalKey, hex, unhex};

/// Where browser approvals wait for their one decision, shared by every instance (the page and
/// the retry may reach different ones). Every store of this crate is one; a layer with a
/// [browser-approved](crate::ToolPolicy::approve_in_browser) tool is refused at build time
/// without one ([`approval_store`](crate::ConfirmLayerBuilder::approval_store)).
///
/// Implementations keep each approval until its expiry, cap each principal's unexpired ones at
/// [`MAX_PENDING_APPROVALS`], and record a decision atomically and once, by
/// [`Approval::decide`]. Prove an implementation with `approval_store_conformance!` (feature
/// `test-support`).
pub trait ApprovalStore: fmt::Debug + Send + Sync + 'static {
    /// Stores a browser approval awaiting its decision, until its expiry. An id that exists is an
    /// error; a principal with [`MAX_PENDING_APPROVALS`] unexpired approvals gets
    /// [`StoreError::OverBudget`].
    fn propose(&self, approval: &Approval) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The approval `id` with its decision, if any; `None` once it expired or if it never existed.
    fn approval(&self, id: ApprovalId) -> BoxFuture<'_, Result<Option<Approval>, StoreError>>;

    /// Records `decision` by `decider` on approval `id`, atomically, by [`Approval::decide`]:
    /// two deciders racing are both applied, one after the other, never one over the other.
    fn decide(
        &self,
        id: ApprovalId,
        decider: Decider,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>>;

    /// The undecided, unexpired approvals of `audience` filed under any of `routes` (an
    /// approver's inbox (`InboxPage`)), newest first, at most `limit`. Whether
    /// the approver may decide each is for the caller to check ([`Approvers::admits`]).
    fn inbox<'a>(
        &'a self,
        audience: &'a str,
        routes: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>>;

    /// How many approvals of `audience` wait for a decision (undecided, unexpired): the
    /// pending approvals gauge. `None` (the default) when the store cannot count them; the
    /// Redis store cannot without an index of its own, and says so.
    fn pending<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let _ = audience;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// The undecided, unexpired approvals of `principal` in `audience`, oldest first: what the
    /// approval page may offer to decide together (a batch, [`crate::approval::batch`]). The
    /// default finds none, so a store without it never batches.
    fn siblings<'a>(
        &'a self,
        audience: &'a str,
        principal: &'a PrincipalKey,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        let _ = (audience, principal);
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Keeps `batch` until its expiry, once per set: `Ok(false)`, and nothing changes, when a
    /// decision of this set is kept already. Atomic: of two deciders racing, one is kept.
    fn record_batch<'a>(
        &'a self,
        batch: &'a BatchDecision,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let _ = batch;
        Box::pin(std::future::ready(Err(StoreError::Backend(
            "this approval store keeps no batch decisions".into(),
        ))))
    }

    /// The decision of set `set`, if one is kept and unexpired.
    fn batch(&self, set: SetDigest) -> BoxFuture<'_, Result<Option<BatchDecision>, StoreError>> {
        let _ = set;
        Box::pin(std::future::ready(Ok(None)))
    }
}

impl<S: ApprovalStore + ?Sized> ApprovalStore for Arc<S> {
    fn propose(&self, approval: &Approval) -> BoxFuture<'_, Result<(), StoreError>> {
        (**self).propose(approval)
    }

    fn approval(&self, id: ApprovalId) -> BoxFuture<'_, Result<Option<Approval>, StoreError>> {
        (**self).approval(id)
    }

    fn decide(
        &self,
        id: ApprovalId,
        decider: Decider,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>> {
        (**self).decide(id, decider, decision)
    }

    fn inbox<'a>(
        &'a self,
        audience: &'a str,
        routes: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        (**self).inbox(audience, routes, limit)
    }

    fn pending<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        (**self).pending(audience)
    }

    fn siblings<'a>(
        &'a self,
        audience: &'a str,
        principal: &'a PrincipalKey,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        (**self).siblings(audience, principal)
    }

    fn record_batch<'a>(
        &'a self,
        batch: &'a BatchDecision,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).record_batch(batch)
    }

    fn batch(&self, set: SetDigest) -> BoxFuture<'_, Result<Option<BatchDecision>, StoreError>> {
        (**self).batch(set)
    }
}

/// The opaque id of an approval, and the last segment of its page's URL: 128 bits of a digest of
/// the confirmation's nonce, so nothing about the request can be read from it and every instance
/// finds the same record from the state alone. It is not a secret (the client is sent the URL);
/// the page admits only the signed-in principal the approval was made for.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApprovalId([u8; 16]);

impl ApprovalId {
    /// The id of the approval of the confirmation with `nonce`: a digest, so any instance finds
    /// it from the state alone, and nothing about the request can be read from it.
    pub fn for_nonce(nonce: &Nonce) -> Self {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm/approval-id/v1\0");
        hash.update(nonce.as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&hash.finalize()[..16]);
        Self(bytes)
    }

    /// An id with the given bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Lower-case hex: the URL segment and the store key.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Reads 32 lower-case hex digits; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        unhex(text).map(Self)
    }
}

impl fmt::Debug for ApprovalId {
    /// The first four bytes only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApprovalId({}…)", hex(&self.0[..4]))
    }
}

/// One record the person may approve, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalChoice {
    /// The record's id (what the tool receives).
    pub id: String,
    /// How it is shown.
    pub label: String,
    /// The version the page shows, and the one the approval binds.
    pub version: Option<String>,
}

impl ApprovalChoice {
    /// A choice.
    pub fn new(id: impl Into<String>, label: impl Into<String>, version: Option<String>) -> Self {
        Self {
            id: id.into(),
            label: label.into(),
            version,
        }
    }
}

/// What the person decided on the page.
///
/// `Decision::approved("note-7")` approves a record as asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// Approved, for this choice (the record's id; empty for a confirm-only tool).
    Approved {
        /// The chosen record's id.
        chosen: String,
        /// Also the standing approval the page offered ([`Approval::standing`]).
        #[serde(default)]
        standing: bool,
        /// The approver's narrowing of the call: a JSON object of the arguments changed
        /// ([`crate::narrow`]); `None`: the call as asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        narrowed: Option<String>,
    },
    /// Declined.
    Declined,
}

impl Decision {
    /// Approved, for `chosen` (empty for a confirm-only tool), only this time, as asked.
    pub fn approved(chosen: impl Into<String>) -> Self {
        Self::Approved {
            chosen: chosen.into(),
            standing: false,
            narrowed: None,
        }
    }
}

/// What [`ApprovalStore::decide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decided {
    /// The decision is recorded, and it is final: declined, or the last approval required.
    Recorded,
    /// This approval is recorded; `approvals` of the `required` are in, so it waits for more.
    Counted {
        /// Approvals recorded so far, this one included.
        approvals: u8,
        /// Approvals the rule requires.
        required: u8,
    },
    /// A decision was recorded before; this one changed nothing.
    AlreadyDecided,
    /// This approver already approved (in this or another session); nothing changed.
    AlreadyApproved,
    /// The rule does not admit this principal; nothing changed.
    NotYours,
    /// The caller, under a rule that excludes them (four eyes); nothing changed.
    OwnRequest,
    /// The rule requires a passkey and none verified this decision; nothing changed.
    PasskeyRequired,
    /// No such approval, or it expired.
    Unknown,
    /// The approval names no such choice (or not the one earlier approvers chose); nothing
    /// changed.
    InvalidChoice,
}

/// Who decides, as the page established it: the principal signed in to the page, whether they
/// are the caller, and the passkey that verified the decision, if one did.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decider {
    /// The decider's subject: approvals are counted per subject.
    pub subject: String,
    /// The roles the authenticator supplied.
    pub roles: Vec<String>,
    /// Whether the decider is the principal the confirmation is bound to (under any key of the
    /// ring): the page compares keyed digests, the store cannot.
    pub caller: bool,
    /// The id of the passkey whose assertion, bound to this approval, verified the decision.
    pub passkey: Option<String>,
    /// The batch this decision is part of, recorded on the approval with it.
    pub batch: Option<BatchMark>,
}

impl Decider {
    /// A decider who is (`caller`) or is not the caller, with the given subject and roles.
    pub fn new<R: Into<String>>(
        subject: impl Into<String>,
        roles: impl IntoIterator<Item = R>,
        caller: bool,
    ) -> Self {
        Self {
            subject: subject.into(),
            roles: roles.into_iter().map(Into::into).collect(),
            caller,
            passkey: None,
            batch: None,
        }
    }

    /// The same decider, deciding as part of the batch `mark` names.
    #[must_use]
    pub fn in_batch(mut self, mark: BatchMark) -> Self {
        self.batch = Some(mark);
        self
    }

    /// The same decider, verified by passkey `credential`.
    #[must_use]
    pub fn with_passkey(mut self, credential: impl Into<String>) -> Self {
        self.passkey = Some(credential.into());
        self
    }
}

impl fmt::Debug for Decider {
    /// No subject or roles: who decided goes to the decision log, not to debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decider")
            .field("caller", &self.caller)
            .field("passkey", &self.passkey.is_some())
            .finish_non_exhaustive()
    }
}

/// One approver's approval, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Endorsement {
    /// Who approved.
    pub subject: String,
    /// What they approved (the first approver's choice; the others approve the same).
    pub chosen: String,
    /// The narrowing they approved (the first approver's; the others approve the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrowed: Option<String>,
    /// Whether the approver was the caller.
    #[serde(default)]
    pub caller: bool,
    /// The passkey that verified it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passkey: Option<String>,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// How many unexpired approvals one principal may hold at once, in every store: enough for any
/// person, too few for one principal to fill a store for everyone. The memory store allows no
/// more than its per-principal budget either (1 % of its capacity by default), as for nonces.
pub const MAX_PENDING_APPROVALS: usize = 20;

/// An approval waiting for (or holding) the decision of the person it was made for.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Approval {
    /// Its id.
    pub id: ApprovalId,
    /// The deployment that asked (the layer's audience): only that deployment's page shows or
    /// decides it, and only its retry reads it, even where deployments share a store and a key.
    pub audience: String,
    /// The nonce of the confirmation it belongs to.
    pub nonce: Nonce,
    /// Who may decide: the keyed digest of the principal the confirmation is bound to.
    pub principal: PrincipalKey,
    /// The same principal's subject, shown on the page.
    pub subject: String,
    /// The tool that will run.
    pub tool: String,
    /// The digest of the call's arguments, as the state binds it: what a passkey assertion
    /// binds besides the approval and the chosen version. `None` in records made before.
    pub arguments: Option<[u8; 32]>,
    /// What the tool will do, in the policy's words.
    pub message: String,
    /// What may be approved: one of these (none for a confirm-only tool).
    pub choices: Vec<ApprovalChoice>,
    /// Whether approving requires typing the chosen record's id.
    pub typed: bool,
    /// The standing approval the page may offer besides "only this time", in words (the
    /// policy's [`standing`](crate::ToolPolicy::standing) and the call's scope); `None`: only
    /// this time.
    pub standing: Option<String>,
    /// When the confirmation expires; the approval with it.
    pub expires_at: SystemTime,
    /// Who may decide, and how many must approve.
    pub approvers: Approvers,
    /// The approvals recorded so far, in order.
    pub endorsements: Vec<Endorsement>,
    /// When the approval was proposed (the inbox shows the newest first).
    pub created_at: SystemTime,
    /// The decision, once final: declined by anyone the rule admits, or approved by as many as
    /// it requires.
    pub decision: Option<Decision>,
    /// The group of tools this call may be decided with, in one batch (the policy's
    /// [`batch_group`](crate::ToolPolicy::batch_group)); `None`: only on its own.
    pub batch_group: Option<String>,
    /// The batch whose decision decided it, if one did.
    pub batch: Option<BatchMark>,
    /// The call's arguments as the approver is shown them (compact JSON, at most
    /// [`MAX_SHOWN_ARGUMENTS`] bytes); `None` when larger, or in records made before.
    pub shown_arguments: Option<String>,
}

/// The most bytes of a call's arguments an approval keeps to show; larger ones are shown by
/// their digest only.
pub const MAX_SHOWN_ARGUMENTS: usize = 2048;

impl fmt::Debug for Approval {
    /// No subject, message or labels: who asked and about what stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approval")
            .field("id", &self.id)
            .field("nonce", &self.nonce)
            .field("tool", &self.tool)
            .field("choices", &self.choices.len())
            .field("typed", &self.typed)
            .field("expires_at", &self.expires_at)
            .field("approvers", &self.approvers)
            .field("endorsements", &self.endorsements.len())
            .field("decided", &self.decision.is_some())
            .finish_non_exhaustive()
    }
}

impl Approval {
    /// Records `decision` by `decider` at `now`; the pure rule every store applies, atomically.
    ///
    /// Only a decider the [rule](Approvers) admits, before expiry and before a final decision.
    /// A decline is final. An approval counts once per subject, needs a passkey where the rule
    /// says so, names an offered choice (the first approver's, for the later ones) and is final
    /// when it is the last one required.
    pub fn decide(&mut self, decider: Decider, decision: Decision, now: SystemTime) -> Decided {
        if now >= self.expires_at {
            return Decided::Unknown;
        }
        let admitted = self.approvers.admits(
            &decider.subject,
            decider.roles.iter().map(String::as_str),
            decider.caller,
        );
        if !admitted {
            return if decider.caller && !self.approvers.admits_caller() {
                Decided::OwnRequest
            } else {
                Decided::NotYours
            };
        }
        if self.decision.is_some() {
            return Decided::AlreadyDecided;
        }
        let Decision::Approved {
            chosen,
            standing,
            narrowed,
        } = decision
        else {
            self.decision = Some(Decision::Declined);
            self.batch = decider.batch;
            return Decided::Recorded;
        };
        if self
            .endorsements
            .iter()
            .any(|e| e.subject == decider.subject)
        {
            return Decided::AlreadyApproved;
        }
        if self.approvers.needs_passkey() && decider.passkey.is_none() {
            return Decided::PasskeyRequired;
        }
        let offered = if self.choices.is_empty() {
            chosen.is_empty()
        } else {
            self.choices.iter().any(|c| c.id == chosen)
        };
        // A standing approval lets later calls run unasked: only the caller's own to give, and
        // never with a narrowing, which is this call's alone.
        let standing_ok = !standing
            || (self.standing.is_some() && self.approvers.is_caller_only() && narrowed.is_none());
        let same_as_first = self
            .endorsements
            .first()
            .is_none_or(|e| e.chosen == chosen && e.narrowed == narrowed);
        if !offered || !standing_ok || !same_as_first {
            return Decided::InvalidChoice;
        }
        self.endorsements.push(Endorsement {
            subject: decider.subject,
            chosen: chosen.clone(),
            narrowed: narrowed.clone(),
            caller: decider.caller,
            passkey: decider.passkey,
            at_ms: unix_ms(now),
        });
        let (approvals, required) = (
            u8::try_from(self.endorsements.len()).unwrap_or(u8::MAX),
            self.approvers.required_approvals(),
        );
        if approvals < required {
            return Decided::Counted {
                approvals,
                required,
            };
        }
        self.decision = Some(Decision::Approved {
            chosen,
            standing,
            narrowed,
        });
        self.batch = decider.batch;
        Decided::Recorded
    }

    /// The inbox routes this approval is filed under (opaque digests of the named approvers,
    /// the role, or everyone): a store indexes the approval under each, for
    /// [`ApprovalStore::inbox`].
    pub fn routes(&self) -> Vec<String> {
        self.approvers.routes(&self.subject)
    }

    /// The approval as one JSON text, for the stores that keep it as a value.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn encode(&self) -> String {
        let stored = Stored {
            id: self.id.to_hex(),
            audience: self.audience.clone(),
            nonce: self.nonce.to_hex(),
            principal: self.principal.to_hex(),
            subject: self.subject.clone(),
            tool: self.tool.clone(),
            arguments: self.arguments.map(|a| hex(&a)),
            message: self.message.clone(),
            choices: self.choices.clone(),
            typed: self.typed,
            standing: self.standing.clone(),
            expires_at_ms: unix_ms(self.expires_at),
            approvers: self.approvers.clone(),
            endorsements: self.endorsements.clone(),
            created_at_ms: unix_ms(self.created_at),
            decision: self.decision.clone(),
            batch_group: self.batch_group.clone(),
            batch: self.batch.clone(),
            shown_arguments: self.shown_arguments.clone(),
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// An approval [`encode`](Self::encode) wrote; `None` for anything else.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let s: Stored = serde_json::from_str(text).ok()?;
        Some(Self {
            id: ApprovalId::from_hex(&s.id)?,
            audience: s.audience,
            nonce: Nonce::from_bytes(unhex(&s.nonce)?),
            principal: PrincipalKey::from_bytes(unhex(&s.principal)?),
            subject: s.subject,
            tool: s.tool,
            arguments: match s.arguments {
                Some(text) => Some(unhex(&text)?),
                None => None,
            },
            message: s.message,
            choices: s.choices,
            typed: s.typed,
            standing: s.standing,
            expires_at: UNIX_EPOCH + std::time::Duration::from_millis(s.expires_at_ms),
            approvers: s.approvers,
            endorsements: s.endorsements,
            created_at: UNIX_EPOCH + std::time::Duration::from_millis(s.created_at_ms),
            decision: s.decision,
            batch_group: s.batch_group,
            batch: s.batch,
            shown_arguments: s.shown_arguments,
        })
    }
}

/// Milliseconds since the Unix epoch (0 before it, saturating after `u64`).
fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    id: String,
    audience: String,
    nonce: String,
    principal: String,
    subject: String,
    tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
    message: String,
    choices: Vec<ApprovalChoice>,
    typed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    standing: Option<String>,
    expires_at_ms: u64,
    // Records written before approvers: the caller decides, nothing endorsed, created unknown.
    #[serde(default)]
    approvers: Approvers,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    endorsements: Vec<Endorsement>,
    #[serde(default)]
    created_at_ms: u64,
    decision: Option<Decision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<BatchMark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shown_arguments: Option<String>,
}

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
        let stored = StoredBatch {
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
        let s: StoredBatch = serde_json::from_str(text).ok()?;
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
struct StoredBatch {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    pub(crate) fn approval(now: SystemTime) -> Approval {
        Approval {
            id: ApprovalId::from_bytes(*Nonce::random().as_bytes()),
            audience: "notes.example".into(),
            nonce: Nonce::random(),
            principal: PrincipalKey::from_bytes([1; 16]),
            subject: "alice".into(),
            tool: "notes_delete".into(),
            arguments: Some([9; 32]),
            message: "Delete it?".into(),
            choices: vec![
                ApprovalChoice::new("note-3", "Groceries (note-3)", Some("g1".into())),
                ApprovalChoice::new("note-7", "Groceries (note-7)", Some("g4".into())),
            ],
            typed: true,
            standing: None,
            expires_at: now + Duration::from_secs(300),
            approvers: Approvers::caller(),
            endorsements: Vec::new(),
            created_at: now,
            decision: None,
            batch_group: None,
            batch: None,
            shown_arguments: None,
        }
    }

    fn approve(id: &str) -> Decision {
        Decision::Approved {
            chosen: id.into(),
            standing: false,
            narrowed: None,
        }
    }

    fn alice() -> Decider {
        Decider::new("alice", ["staff"], true)
    }

    fn other(subject: &str) -> Decider {
        Decider::new(subject, ["staff"], false)
    }

    #[test]
    fn one_decision_by_its_principal_for_an_offered_choice_before_expiry() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = approval(now);
        assert_eq!(
            a.decide(other("bob"), approve("note-7"), now),
            Decided::NotYours
        );
        assert_eq!(
            a.decide(alice(), approve("note-9"), now),
            Decided::InvalidChoice
        );
        assert_eq!(a.decide(alice(), approve(""), now), Decided::InvalidChoice);
        assert_eq!(a.decision, None);
        assert_eq!(a.decide(alice(), approve("note-7"), now), Decided::Recorded);
        assert_eq!(
            a.decide(alice(), Decision::Declined, now),
            Decided::AlreadyDecided
        );
        assert_eq!(a.decision, Some(approve("note-7")));
        let mut late = approval(now);
        assert_eq!(
            late.decide(alice(), Decision::Declined, late.expires_at),
            Decided::Unknown
        );
        let mut confirm_only = approval(now);
        confirm_only.choices.clear();
        assert_eq!(
            confirm_only.decide(alice(), approve("x"), now),
            Decided::InvalidChoice
        );
        assert_eq!(
            confirm_only.decide(alice(), approve(""), now),
            Decided::Recorded
        );
        // The standing approval only where the page offered it.
        let standing = Decision::Approved {
            chosen: "note-7".into(),
            standing: true,
            narrowed: None,
        };
        let mut not_offered = approval(now);
        assert_eq!(
            not_offered.decide(alice(), standing.clone(), now),
            Decided::InvalidChoice
        );
        let mut offered = approval(now);
        offered.standing = Some("Also allow notes_delete on personal".into());
        assert_eq!(
            offered.decide(alice(), standing.clone(), now),
            Decided::Recorded
        );
        // ... and never by someone else, for the caller's later calls.
        let mut by_another = approval(now);
        by_another.standing = offered.standing.clone();
        by_another.approvers = Approvers::any_of(["bob"]);
        assert_eq!(
            by_another.decide(other("bob"), standing, now),
            Decided::InvalidChoice
        );
    }

    #[test]
    fn four_eyes_refuses_the_caller_in_any_session_and_counts_each_subject_once() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = approval(now);
        a.approvers = Approvers::anyone_but_caller().required(2);
        // The caller, however they come (another session is the same subject and digest).
        assert_eq!(
            a.decide(alice(), approve("note-7"), now),
            Decided::OwnRequest
        );
        assert_eq!(
            a.decide(alice(), Decision::Declined, now),
            Decided::OwnRequest
        );
        assert_eq!(
            a.decide(other("bob"), approve("note-7"), now),
            Decided::Counted {
                approvals: 1,
                required: 2
            }
        );
        assert_eq!(a.decision, None);
        // Bob again (a second tab, a second session): counted once.
        assert_eq!(
            a.decide(other("bob"), approve("note-7"), now),
            Decided::AlreadyApproved
        );
        // The second approver approves the first one's choice, or nothing.
        assert_eq!(
            a.decide(other("carol"), approve("note-3"), now),
            Decided::InvalidChoice
        );
        assert_eq!(
            a.decide(other("carol"), approve("note-7"), now),
            Decided::Recorded
        );
        assert_eq!(a.decision, Some(approve("note-7")));
        let who: Vec<&str> = a.endorsements.iter().map(|e| e.subject.as_str()).collect();
        assert_eq!(who, ["bob", "carol"]);
        assert_eq!(
            a.decide(other("dave"), Decision::Declined, now),
            Decided::AlreadyDecided
        );
    }

    #[test]
    fn a_decline_by_any_approver_is_final_and_roles_and_passkeys_are_checked() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = approval(now);
        a.approvers = Approvers::role("admin").required(2).with_passkey();
        let admin = |s: &str| Decider::new(s, ["admin"], false);
        assert_eq!(
            a.decide(other("bob"), approve("note-7"), now),
            Decided::NotYours
        );
        assert_eq!(
            a.decide(admin("bob"), approve("note-7"), now),
            Decided::PasskeyRequired
        );
        assert_eq!(
            a.decide(admin("bob").with_passkey("cred-1"), approve("note-7"), now),
            Decided::Counted {
                approvals: 1,
                required: 2
            }
        );
        assert_eq!(a.endorsements[0].passkey.as_deref(), Some("cred-1"));
        assert_eq!(
            a.decide(admin("carol"), Decision::Declined, now),
            Decided::Recorded
        );
        assert_eq!(a.decision, Some(Decision::Declined));
    }

    #[test]
    fn records_round_trip_and_anything_else_is_refused() {
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let mut a = approval(now);
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        a.decision = Some(Decision::Declined);
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        a.decision = None;
        a.approvers = Approvers::any_of(["bob", "carol"])
            .required(2)
            .with_passkey();
        assert!(matches!(
            a.decide(other("bob").with_passkey("c"), approve("note-3"), now),
            Decided::Counted { .. }
        ));
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        assert_eq!(
            Approval::decode(&a.encode().replace("}", ",\"x\":1}")),
            None
        );
        assert_eq!(Approval::decode("[]"), None);
        assert_eq!(ApprovalId::from_hex(&a.id.to_hex()), Some(a.id));
        assert_eq!(ApprovalId::from_hex(&a.id.to_hex().to_uppercase()), None);
        assert_eq!(ApprovalId::from_hex("00"), None);
        // A record written before approvers reads as the caller's, undecided.
        let mut old: serde_json::Value =
            serde_json::from_str(&approval(now).encode()).unwrap_or_default();
        if let Some(o) = old.as_object_mut() {
            o.remove("approvers");
            o.remove("created_at_ms");
        }
        let read = Approval::decode(&old.to_string()).map(|a| a.approvers);
        assert_eq!(read, Some(Approvers::caller()));
    }
}
