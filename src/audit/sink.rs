//! What the layer hands a decision log: one [`LogEntry`] per decision, through the
//! [`DecisionLog`] trait. The log itself (the Merkle tree, signed checkpoints, the file and
//! PostgreSQL sinks, the verifier) is the `mcp-confirm-log` crate; the core knows only this
//! seam, so its default build pulls no signing or storage code.

use std::future::Future;
use std::pin::Pin;

/// What the layer does with a destructive call while the log cannot take its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenDown {
    /// Refuse it (the default): nothing destructive runs without its record.
    #[default]
    FailClosed,
    /// Let it run, and say so in `tracing` at error level.
    FailOpen,
}

/// The log could not take a record: it is down, its queue is full, or the write failed. The
/// record is not in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the decision log is not accepting records")]
pub struct LogDown;

/// A write that resolves once its record is durable.
pub type DurableWrite = Pin<Box<dyn Future<Output = Result<(), LogDown>> + Send + 'static>>;

/// One decision as the layer reports it to a log: digests and short prefixes, never argument
/// values. Its `event` names come from the same typed event the `tracing` output is written
/// from, so the log and the operators' events share one vocabulary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogEntry {
    /// What happened: `challenged`, `accepted`, `declined`, `cancelled`, `refused`,
    /// `replay_blocked`, `grant_begun`, `standing_granted`, `approval_approved`, …
    pub event: &'static str,
    /// Unix time in milliseconds, as the layer's clock read it.
    pub at_ms: u64,
    /// The deployment (the layer's audience).
    pub audience: String,
    /// The tool.
    pub tool: Option<String>,
    /// The principal's keyed digest (hex).
    pub principal: Option<String>,
    /// The principal's subject (a log may leave it out).
    pub subject: Option<String>,
    /// The argument digest of the call (hex).
    pub arguments: Option<String>,
    /// The chosen record's id; on a batch's own record (`batch_decided`), how many of its
    /// members it approved, as `approved/members`.
    pub chosen: Option<String>,
    /// The chosen record's version the user saw.
    pub version: Option<String>,
    /// A digest of what the user was shown (hex).
    pub shown: Option<String>,
    /// The first bytes of the confirmation's nonce (hex).
    pub nonce: Option<String>,
    /// The first bytes of the grant's id (hex).
    pub grant: Option<String>,
    /// The first bytes of a standing approval's id (hex).
    pub standing: Option<String>,
    /// A refusal's class (its wire reason or code), or how a standing approval ended.
    pub class: Option<String>,
    /// A refusal's real reason (never on the wire).
    pub reason: Option<String>,
    /// Where an approver narrowed the call before approving it: the digest of the arguments as
    /// asked (hex); `arguments` is then the digest of the narrowed ones that ran.
    pub original: Option<String>,
    /// The set a batch decision covered (its digest, hex): on the batch's own record and on
    /// each member's decision.
    pub batch: Option<String>,
    /// The revision of the policy the decision was made under
    /// ([`ConfirmLayerBuilder::policy_revision`](crate::ConfirmLayerBuilder::policy_revision)).
    pub policy: Option<String>,
}

impl LogEntry {
    /// An entry of `event` at `at`; the rest is filled in by the event.
    pub(crate) fn new(event: &'static str, at: std::time::SystemTime) -> Self {
        Self {
            event,
            at_ms: at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ..Self::default()
        }
    }
}

/// Where decisions are kept as evidence. `mcp-confirm-log`'s `AuditLog` is one; give it to
/// [`ConfirmLayerBuilder::audit_log`](crate::ConfirmLayerBuilder::audit_log) and to
/// [`Grants::audit_log`](crate::grant::Grants::audit_log).
///
/// A decision that lets a call run is written with [`append_durable`](Self::append_durable)
/// and the call waits for it; everything else is [`append`](Self::append)ed and never waits.
pub trait DecisionLog: Send + Sync + 'static {
    /// What destructive calls get while the log cannot take their record.
    fn when_down(&self) -> WhenDown;

    /// Whether the log takes records now: asked before a confirmation is spent, so that a log
    /// that is down costs no one a confirmation.
    fn is_healthy(&self) -> bool;

    /// Queues `entry`; never waits.
    ///
    /// # Errors
    /// [`LogDown`] if the log is down or its queue full: the entry is not kept.
    fn append(&self, entry: LogEntry) -> Result<(), LogDown>;

    /// Queues `entry` and answers a future that resolves once it is written and synced.
    ///
    /// # Errors
    /// [`LogDown`] at once if the log is down or its queue full, or if it wrote the entry on
    /// the caller's thread and the write failed; from the future if a write made later fails.
    fn append_durable(&self, entry: LogEntry) -> Result<DurableWrite, LogDown>;
}
