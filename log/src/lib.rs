//! `mcp-confirm-log`: the tamper-evident decision log of
//! [`mcp-confirm`](https://docs.rs/mcp-confirm). Give an [`AuditLog`] to
//! `ConfirmLayerBuilder::audit_log` (and to `Grants::audit_log`): the layer reports each
//! decision through the core's `mcp_confirm::audit::DecisionLog` seam, and this crate keeps it.
//!
//! A tamper-evident record of every decision: an append-only log whose records are the leaves of
//! a Merkle tree (RFC 9162 hashing), with signed checkpoints (C2SP `tlog-checkpoint` in a
//! `signed-note`, Ed25519) every N records or T seconds and on shutdown, inclusion and
//! consistency proofs, and an offline verifier.
//!
//! `tracing` events (`mcp_confirm::audit`) are for operators; this log is evidence. After an
//! incident it answers "who approved deleting note-7, what were they shown, and has anyone edited
//! the record since?": the record names the principal (digest, and subject unless the deployment
//! keeps digests only), the tool, the argument digest, the chosen id and version, and a digest of
//! what was shown; a checkpoint signed before the edit no longer matches.
//!
//! - [`record`]: one record and its one canonical line;
//! - [`merkle`]: leaf and node hashing, the writer's frontier, proofs and their verification;
//! - [`checkpoint`]: the signing key, the verifier key, signed checkpoints;
//! - [`view`]: the writer's keyed tag on every record and its own view of the tree, so that it
//!   never signs what it did not write;
//! - [`witness`]: places outside the log's storage that keep its newest checkpoint and take a
//!   newer one only with a proof that it extends theirs;
//! - [`file`](mod@file): the log in a directory, crash recovery that never signs what its writer
//!   did not write;
//! - `postgres` (feature `postgres`): the log in one table shared by several instances, one
//!   sequence, checkpoints signed by the instance holding an advisory lock;
//! - [`verify`](mod@verify): checking a log offline and naming each fault;
//! - [`AuditLog`]: the handle a layer appends through: a bounded queue and a writer thread (the
//!   file sink is written on the caller's thread when it is free); a decision that lets a call
//!   run waits for its record to be written ([`AuditLog::append_durable`]); what a layer does
//!   while the log is down is its [`WhenDown`] policy.

#![deny(missing_docs, unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod checkpoint;
pub mod file;
pub mod merkle;
#[cfg(feature = "metrics")]
pub mod metrics;
mod open;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod record;
pub mod verify;
pub mod view;
pub mod witness;
mod writer;

pub use checkpoint::{Checkpoint, CheckpointError, LogKey, SignedCheckpoint, VerifierKey};
pub use file::{FileLog, FileOptions, Fsync};
#[cfg(feature = "postgres")]
pub use postgres::PostgresLog;
pub use record::Record;
pub use verify::{Finding, Verified, verify};
pub use view::View;
pub use witness::{DirWitness, Witness, WitnessError};
pub use writer::{AuditLog, Durable, LogOptions, LogSink, WhenDown};

/// Why the log could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The file system refused (a full disk, permissions, a removed directory).
    #[error("decision log I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The log holds what its writer did not write (a record without its tag, a changed
    /// record), lacks what it wrote or signed (fewer records than its view, a missing newest
    /// checkpoint, a view that is gone), or does not extend what a witness holds: the log is
    /// not written again (that would sign someone else's history). `mcp-confirm-audit inspect`
    /// lists every difference.
    #[error("the decision log is damaged: {0}")]
    Damaged(String),
    /// Another writer (another process, or another handle in this one) has the directory open.
    #[error("another writer has the decision log open")]
    Locked,
    /// The database refused or did not answer (a `PostgresLog`).
    #[error("decision log database: {0}")]
    Backend(String),
    /// The writer is stopped or its queue is full.
    #[error("the decision log is not accepting records")]
    Unavailable,
}
