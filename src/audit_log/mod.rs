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
//! - [`file`](mod@file): the log in a directory, crash recovery that never rewrites a signed prefix;
//! - `postgres` (feature `postgres`): the log in one table shared by several instances, one
//!   sequence, checkpoints signed by the instance holding an advisory lock;
//! - [`verify`](mod@verify): checking a log offline and naming each fault;
//! - [`AuditLog`]: the handle a layer appends through: a bounded queue and a writer thread, so
//!   writing never blocks a decision; what a layer does while the log is down is its
//!   [`WhenDown`] policy.

pub mod checkpoint;
pub mod file;
pub mod merkle;
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
    /// What a checkpoint signed was changed, removed or reordered, or a checkpoint does not
    /// verify: the log is not written again (that would sign a fork). Verify it offline to see
    /// what changed.
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
