//! Checking a decision log offline, with nothing but its directory and the public key: every
//! record reads back canonically and in sequence, every checkpoint is signed by the trusted key
//! and matches the root of the records it counts, and every checkpoint seen elsewhere (kept by
//! an auditor, published, sent by a witness) is consistent with the log. What does not hold is
//! named, one [`Finding`] per fault.

use std::fmt;
use std::path::Path;

use super::LogError;
use super::checkpoint::{Checkpoint, CheckpointError, SignedCheckpoint, VerifierKey};
use super::file::{RECORDS, checkpoint_texts};
use super::merkle::{self, Hash, leaf_hash};
use super::record::Record;

/// One fault a verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// Line `line` (from 0) is not a record as the log writes one: edited in place, or garbage.
    Unreadable {
        /// Its line number.
        line: u64,
    },
    /// Line `line` holds record `seq`: records were deleted, inserted or reordered.
    OutOfSequence {
        /// Its line number.
        line: u64,
        /// The sequence number it carries.
        seq: u64,
    },
    /// A checkpoint counts more records than the log holds: its tail was cut.
    Truncated {
        /// The checkpoint's number (0 for one given from elsewhere).
        checkpoint: u64,
        /// How many it signed.
        signed: u64,
        /// How many are there.
        present: u64,
    },
    /// A checkpoint's root is not the root of the records it counts: a record it covers was
    /// changed, or the checkpoint belongs to another tree (a fork).
    RootMismatch {
        /// The checkpoint's number (0 for one given from elsewhere).
        checkpoint: u64,
        /// Its size.
        size: u64,
    },
    /// A checkpoint in the log that the trusted key did not sign (forged with another key,
    /// edited, or malformed).
    BadCheckpoint {
        /// Its number.
        checkpoint: u64,
        /// Why.
        error: CheckpointError,
    },
    /// Two checkpoints of one size with different roots, both signed by the trusted key: the
    /// log was forked (or rewritten after one was published).
    Fork {
        /// The size.
        size: u64,
    },
    /// The log's newest checkpoint is older than one seen elsewhere: an old checkpoint is being
    /// replayed, or the log was rolled back.
    Rollback {
        /// The largest size seen elsewhere.
        seen: u64,
        /// The log's newest checkpoint's size.
        latest: u64,
    },
    /// The last line has no newline: an append was cut short (a crash). Not signed, so not an
    /// edit; the writer moves it aside when it reopens the log.
    TornTail {
        /// Its line number.
        line: u64,
    },
    /// Records `from..to` are covered by no checkpoint: the writer has not signed them yet (it
    /// signs every few seconds and on shutdown), or someone else appended them. Nothing vouches
    /// for them; the writer refuses to sign records it did not write.
    Unsigned {
        /// The first.
        from: u64,
        /// One past the last.
        to: u64,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { line } => {
                write!(
                    f,
                    "line {line}: not a record as the log writes one (edited?)"
                )
            }
            Self::OutOfSequence { line, seq } => write!(
                f,
                "line {line} holds record {seq}: records deleted, inserted or reordered"
            ),
            Self::Truncated {
                checkpoint,
                signed,
                present,
            } => write!(
                f,
                "checkpoint {checkpoint} signed {signed} records, the log holds {present}: truncated"
            ),
            Self::RootMismatch { checkpoint, size } => write!(
                f,
                "checkpoint {checkpoint}: the first {size} records do not hash to its root (a record was changed, or a fork)"
            ),
            Self::BadCheckpoint { checkpoint, error } => {
                write!(f, "checkpoint {checkpoint}: {error}")
            }
            Self::Fork { size } => write!(
                f,
                "two checkpoints of {size} records with different roots, both signed: a fork"
            ),
            Self::Rollback { seen, latest } => write!(
                f,
                "a checkpoint of {seen} records was seen, the log's newest has {latest}: rolled back or an old checkpoint replayed"
            ),
            Self::TornTail { line } => {
                write!(f, "line {line} was cut short by a crash (unsigned)")
            }
            Self::Unsigned { from, to } => write!(
                f,
                "records {from}..{to} are covered by no checkpoint: not yet signed, or not the writer's"
            ),
        }
    }
}

/// What a verification read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The records, in order (those that read back).
    pub records: Vec<Record>,
    /// Their leaf hashes.
    pub leaves: Vec<Hash>,
    /// The log's checkpoints that verified, in order.
    pub checkpoints: Vec<SignedCheckpoint>,
    /// Every fault found; none for a sound log.
    pub findings: Vec<Finding>,
    /// The largest checkpoint given from elsewhere (kept by an auditor, read from a witness)
    /// that verified and that the log extends: what "sound" is relative to. `None`: the log
    /// was checked only against itself, and a rollback of the whole log (or its replacement by
    /// another signed with the same key) cannot be ruled out.
    pub anchored: Option<u64>,
}

impl Verified {
    /// Whether nothing is wrong in the log as far as it and the checkpoints given can tell (a
    /// torn or unsigned tail is no fault; it is not vouched for either). See
    /// [`anchored`](Self::anchored) for what this is relative to.
    pub fn is_sound(&self) -> bool {
        self.findings
            .iter()
            .all(|f| matches!(f, Finding::TornTail { .. } | Finding::Unsigned { .. }))
    }

    /// The newest checkpoint.
    pub fn latest(&self) -> Option<&Checkpoint> {
        self.checkpoints.last().map(|s| &s.checkpoint)
    }

    /// The root of the first `size` records, if there are that many.
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        let size = usize::try_from(size).ok()?;
        (size <= self.leaves.len()).then(|| merkle::root(&self.leaves[..size]))
    }
}

/// Verifies the log in `dir` with `key`, and every checkpoint text in `seen` against it.
///
/// # Errors
/// [`LogError::Io`] if the directory cannot be read at all; faults of the log itself are
/// [`Verified::findings`].
pub fn verify(dir: &Path, key: &VerifierKey, seen: &[String]) -> Result<Verified, LogError> {
    let bytes = std::fs::read(dir.join(RECORDS)).or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(Vec::new()),
        _ => Err(e),
    })?;
    let mut findings = Vec::new();
    let mut records = Vec::new();
    let mut leaves = Vec::new();
    let mut rest = bytes.as_slice();
    let mut line_no = 0u64;
    while !rest.is_empty() {
        let (line, next, torn) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => (&rest[..end], &rest[end + 1..], false),
            None => (rest, &[][..], true),
        };
        rest = next;
        if torn {
            findings.push(Finding::TornTail { line: line_no });
            break;
        }
        match std::str::from_utf8(line).ok().and_then(Record::from_line) {
            Some(record) => {
                if record.seq != line_no {
                    findings.push(Finding::OutOfSequence {
                        line: line_no,
                        seq: record.seq,
                    });
                }
                leaves.push(leaf_hash(line));
                records.push(record);
            }
            None => {
                findings.push(Finding::Unreadable { line: line_no });
                // Its bytes still count as a leaf: the roots then show what it changed.
                leaves.push(leaf_hash(line));
                records.push(Record::new("unreadable"));
            }
        }
        line_no += 1;
    }
    let mut verified = Verified {
        records,
        leaves,
        checkpoints: Vec::new(),
        findings: Vec::new(),
        anchored: None,
    };
    let mut by_size: std::collections::BTreeMap<u64, Hash> = std::collections::BTreeMap::new();
    let texts = match checkpoint_texts(dir) {
        Ok(texts) => texts,
        Err(LogError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    for (number, text) in texts {
        match key.open(&text) {
            Ok(signed) => {
                check_against(
                    &verified,
                    &mut findings,
                    number,
                    &signed.checkpoint,
                    &mut by_size,
                );
                verified.checkpoints.push(signed);
            }
            Err(error) => findings.push(Finding::BadCheckpoint {
                checkpoint: number,
                error,
            }),
        }
    }
    let latest = verified.latest().map_or(0, |c| c.size);
    let mut largest_seen = None;
    for text in seen {
        match key.open(text) {
            Ok(signed) => {
                check_against(
                    &verified,
                    &mut findings,
                    0,
                    &signed.checkpoint,
                    &mut by_size,
                );
                largest_seen = largest_seen.max(Some(signed.checkpoint.size));
            }
            Err(error) => findings.push(Finding::BadCheckpoint {
                checkpoint: 0,
                error,
            }),
        }
    }
    if let Some(seen) = largest_seen
        && seen > latest
    {
        findings.push(Finding::Rollback { seen, latest });
    }
    let present = verified.leaves.len() as u64;
    if present > latest {
        findings.push(Finding::Unsigned {
            from: latest,
            to: present,
        });
    }
    findings.dedup();
    verified.findings = findings;
    verified.anchored = largest_seen.filter(|_| verified.is_sound());
    Ok(verified)
}

/// Checks one signed checkpoint against the records, and against the others of its size.
fn check_against(
    verified: &Verified,
    findings: &mut Vec<Finding>,
    number: u64,
    checkpoint: &Checkpoint,
    by_size: &mut std::collections::BTreeMap<u64, Hash>,
) {
    if let Some(root) = by_size.get(&checkpoint.size) {
        if *root != checkpoint.root {
            findings.push(Finding::Fork {
                size: checkpoint.size,
            });
            return;
        }
    } else {
        by_size.insert(checkpoint.size, checkpoint.root);
    }
    match verified.root_at(checkpoint.size) {
        None => findings.push(Finding::Truncated {
            checkpoint: number,
            signed: checkpoint.size,
            present: verified.leaves.len() as u64,
        }),
        Some(root) if root != checkpoint.root => findings.push(Finding::RootMismatch {
            checkpoint: number,
            size: checkpoint.size,
        }),
        Some(_) => {}
    }
}
