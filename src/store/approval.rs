//! The approval record: what the page shows, the one decision it records, and the store trait
//! that keeps it where every instance finds it. It lives with the stores, which keep it; its
//! public home is [`crate::approval`].

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::StoreError;
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

    /// Records `decision` by `principal` on approval `id`, atomically and once, by
    /// [`Approval::decide`].
    fn decide(
        &self,
        id: ApprovalId,
        principal: PrincipalKey,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>>;
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
        principal: PrincipalKey,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>> {
        (**self).decide(id, principal, decision)
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
    },
    /// Declined.
    Declined,
}

/// What [`ApprovalStore::decide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decided {
    /// The decision is recorded.
    Recorded,
    /// A decision was recorded before; this one changed nothing.
    AlreadyDecided,
    /// The approval belongs to another principal; nothing changed.
    NotYours,
    /// No such approval, or it expired.
    Unknown,
    /// The approval names no such choice; nothing changed.
    InvalidChoice,
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
    /// The decision, once made.
    pub decision: Option<Decision>,
}

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
            .field("decided", &self.decision.is_some())
            .finish_non_exhaustive()
    }
}

impl Approval {
    /// Records `decision` by `principal` at `now`, once; the pure rule every store applies.
    pub fn decide(
        &mut self,
        principal: PrincipalKey,
        decision: Decision,
        now: SystemTime,
    ) -> Decided {
        if now >= self.expires_at {
            return Decided::Unknown;
        }
        if principal != self.principal {
            return Decided::NotYours;
        }
        if self.decision.is_some() {
            return Decided::AlreadyDecided;
        }
        if let Decision::Approved { chosen, standing } = &decision {
            let offered = if self.choices.is_empty() {
                chosen.is_empty()
            } else {
                self.choices.iter().any(|c| &c.id == chosen)
            };
            if !offered || (*standing && self.standing.is_none()) {
                return Decided::InvalidChoice;
            }
        }
        self.decision = Some(decision);
        Decided::Recorded
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
            message: self.message.clone(),
            choices: self.choices.clone(),
            typed: self.typed,
            standing: self.standing.clone(),
            expires_at_ms: self
                .expires_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            decision: self.decision.clone(),
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
            message: s.message,
            choices: s.choices,
            typed: s.typed,
            standing: s.standing,
            expires_at: UNIX_EPOCH + std::time::Duration::from_millis(s.expires_at_ms),
            decision: s.decision,
        })
    }
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
    message: String,
    choices: Vec<ApprovalChoice>,
    typed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    standing: Option<String>,
    expires_at_ms: u64,
    decision: Option<Decision>,
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
            message: "Delete it?".into(),
            choices: vec![
                ApprovalChoice::new("note-3", "Groceries (note-3)", Some("g1".into())),
                ApprovalChoice::new("note-7", "Groceries (note-7)", Some("g4".into())),
            ],
            typed: true,
            standing: None,
            expires_at: now + Duration::from_secs(300),
            decision: None,
        }
    }

    #[test]
    fn one_decision_by_its_principal_for_an_offered_choice_before_expiry() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let alice = PrincipalKey::from_bytes([1; 16]);
        let bob = PrincipalKey::from_bytes([2; 16]);
        let approve = |id: &str| Decision::Approved {
            chosen: id.into(),
            standing: false,
        };
        let mut a = approval(now);
        assert_eq!(a.decide(bob, approve("note-7"), now), Decided::NotYours);
        assert_eq!(
            a.decide(alice, approve("note-9"), now),
            Decided::InvalidChoice
        );
        assert_eq!(a.decide(alice, approve(""), now), Decided::InvalidChoice);
        assert_eq!(a.decision, None);
        assert_eq!(a.decide(alice, approve("note-7"), now), Decided::Recorded);
        assert_eq!(
            a.decide(alice, Decision::Declined, now),
            Decided::AlreadyDecided
        );
        assert_eq!(a.decision, Some(approve("note-7")));
        let mut late = approval(now);
        assert_eq!(
            late.decide(alice, Decision::Declined, late.expires_at),
            Decided::Unknown
        );
        let mut confirm_only = approval(now);
        confirm_only.choices.clear();
        assert_eq!(
            confirm_only.decide(alice, approve("x"), now),
            Decided::InvalidChoice
        );
        assert_eq!(
            confirm_only.decide(alice, approve(""), now),
            Decided::Recorded
        );
        // The standing approval only where the page offered it.
        let standing = Decision::Approved {
            chosen: "note-7".into(),
            standing: true,
        };
        let mut not_offered = approval(now);
        assert_eq!(
            not_offered.decide(alice, standing.clone(), now),
            Decided::InvalidChoice
        );
        let mut offered = approval(now);
        offered.standing = Some("Also allow notes_delete on personal".into());
        assert_eq!(offered.decide(alice, standing, now), Decided::Recorded);
    }

    #[test]
    fn records_round_trip_and_anything_else_is_refused() {
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let mut a = approval(now);
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        a.decision = Some(Decision::Declined);
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        a.decision = Some(Decision::Approved {
            standing: false,
            chosen: "note-3".into(),
        });
        assert_eq!(Approval::decode(&a.encode()), Some(a.clone()));
        assert_eq!(
            Approval::decode(&a.encode().replace("}", ",\"x\":1}")),
            None
        );
        assert_eq!(Approval::decode("[]"), None);
        assert_eq!(ApprovalId::from_hex(&a.id.to_hex()), Some(a.id));
        assert_eq!(ApprovalId::from_hex(&a.id.to_hex().to_uppercase()), None);
        assert_eq!(ApprovalId::from_hex("00"), None);
    }
}
