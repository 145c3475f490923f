//! What every decision reports: one `tracing` event under [`TARGET`] for operators, and, with a
//! [`DecisionLog`], one entry as evidence. Both are written from one typed event, so they share
//! one vocabulary (`challenged`, `accepted`, `refused`, `grant_begun`, `approval_approved`, …).
//!
//! Subscribe to the `mcp_confirm::audit` target to see every decision: events carry the tool,
//! the principal's subject, the first bytes of the nonce (to correlate rounds) and the specific
//! reason of a refusal, which the wire never shows. They never carry keys, tokens, argument
//! values or the form's content.
//!
//! The tamper-evident log (Merkle tree, signed checkpoints, file and PostgreSQL sinks, the
//! offline verifier) is the `mcp-confirm-log` crate, which implements [`DecisionLog`].

pub(crate) mod event;
mod sink;
mod write;

pub use event::TARGET;
pub use sink::{DecisionLog, DurableWrite, LogDown, LogEntry, WhenDown};
pub(crate) use write::{ready, report, report_decisive};
