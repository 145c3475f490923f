//! Checkpoints leave the machine: a [`Witness`] keeps the newest checkpoint of a log somewhere its
//! writer's storage does not reach, and accepts a newer one only with a proof that it extends
//! the one it holds (as a C2SP `tlog-witness` does). A writer with witnesses submits every
//! checkpoint it signs, and on start refuses to write a log that does not extend what a witness
//! holds: rolling the whole log directory (or table) back to an earlier state, or replacing it
//! with a fork, is then a stop, not a new signature. The offline verifier says "sound" only
//! relative to a checkpoint it was given or read from a witness.
//!
//! [`DirWitness`] is a witness in a directory the log's writer can write to but an attacker on
//! the log's storage cannot (another mount, another machine's share, a bucket mounted
//! write-only); others (an HTTP witness, a second database) implement the trait.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::LogError;
use super::checkpoint::{SignedCheckpoint, VerifierKey};
use super::merkle::{Frontier, Hash, verify_consistency};

/// Why a witness did not take a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// It holds a checkpoint of `size` records, not the one the proof starts from.
    #[error("the witness holds a checkpoint of {size} records")]
    Conflict {
        /// The size it holds.
        size: u64,
    },
    /// It refused: the proof does not show the new checkpoint extends the one it holds (a
    /// fork, or a rolled-back log), or the checkpoint is not signed by the log's key.
    #[error("the witness refused the checkpoint: {0}")]
    Refused(String),
    /// It could not be reached or did not answer.
    #[error("the witness is unavailable: {0}")]
    Unavailable(String),
}

/// A place outside the log's storage that keeps its newest checkpoint.
pub trait Witness: fmt::Debug + Send + Sync + 'static {
    /// The newest checkpoint of the log `origin` it holds (the signed note's text), if any.
    ///
    /// # Errors
    /// [`WitnessError::Unavailable`] if it cannot be read.
    fn latest(&self, origin: &str) -> Result<Option<String>, WitnessError>;

    /// Offers `checkpoint`, with `proof` that it extends the checkpoint of `old` records the
    /// witness holds (`old` 0 and no proof when it holds none).
    ///
    /// # Errors
    /// [`WitnessError::Conflict`] if it holds another size than `old`;
    /// [`WitnessError::Refused`] if the proof or the signature does not hold.
    fn add(
        &self,
        old: u64,
        proof: &[Hash],
        checkpoint: &SignedCheckpoint,
    ) -> Result<(), WitnessError>;
}

/// A witness in a directory: one file per log holding its newest checkpoint, replaced only by a
/// checkpoint signed by the log's key and proved consistent with it. Several writers (the
/// instances of a PostgreSQL log) may share it: a lock file orders them.
#[derive(Debug, Clone)]
pub struct DirWitness {
    dir: PathBuf,
    verifier: VerifierKey,
}

impl DirWitness {
    /// A witness in `dir` (created if needed) for the log that `verifier` verifies.
    ///
    /// # Errors
    /// [`LogError::Io`] if `dir` cannot be created.
    pub fn new(dir: impl Into<PathBuf>, verifier: VerifierKey) -> Result<Self, LogError> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self { dir, verifier })
    }

    /// The file that holds `origin`'s newest checkpoint.
    pub fn path(&self, origin: &str) -> PathBuf {
        checkpoint_file(&self.dir, origin)
    }

    fn read(&self, origin: &str) -> Result<Option<SignedCheckpoint>, WitnessError> {
        let Some(text) = read_text(&self.path(origin))? else {
            return Ok(None);
        };
        self.verifier
            .open(&text)
            .map(Some)
            .map_err(|e| WitnessError::Unavailable(format!("its checkpoint does not verify: {e}")))
    }
}

/// `<dir>/<origin, with anything but A-Z a-z 0-9 . _ - as _>.checkpoint`.
pub fn checkpoint_file(dir: &Path, origin: &str) -> PathBuf {
    let name: String = origin
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{name}.checkpoint"))
}

fn read_text(path: &Path) -> Result<Option<String>, WitnessError> {
    let unavailable = |e: std::io::Error| WitnessError::Unavailable(e.to_string());
    let mut text = String::new();
    match File::open(path) {
        Ok(file) => {
            file.take(super::checkpoint::MAX_NOTE_BYTES as u64 + 1)
                .read_to_string(&mut text)
                .map_err(unavailable)?;
            Ok(Some(text))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

impl Witness for DirWitness {
    fn latest(&self, origin: &str) -> Result<Option<String>, WitnessError> {
        read_text(&self.path(origin))
    }

    fn add(
        &self,
        old: u64,
        proof: &[Hash],
        checkpoint: &SignedCheckpoint,
    ) -> Result<(), WitnessError> {
        let unavailable = |e: std::io::Error| WitnessError::Unavailable(e.to_string());
        let new = self
            .verifier
            .open(&checkpoint.text)
            .map_err(|e| WitnessError::Refused(e.to_string()))?;
        let origin = &new.checkpoint.origin;
        let path = self.path(origin);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.with_extension("lock"))
            .map_err(unavailable)?;
        lock.lock().map_err(unavailable)?;
        let held = self.read(origin)?;
        let held_size = held.as_ref().map_or(0, |h| h.checkpoint.size);
        if held_size != old {
            return Err(WitnessError::Conflict { size: held_size });
        }
        if let Some(held) = &held {
            let extends = verify_consistency(
                held.checkpoint.size,
                new.checkpoint.size,
                &held.checkpoint.root,
                &new.checkpoint.root,
                proof,
            );
            if !extends {
                return Err(WitnessError::Refused(format!(
                    "the checkpoint of {} records does not extend the one of {} it holds",
                    new.checkpoint.size, held.checkpoint.size
                )));
            }
            if held.checkpoint.size == new.checkpoint.size {
                return Ok(());
            }
        }
        let temporary = path.with_extension("tmp");
        {
            let mut file = File::create(&temporary).map_err(unavailable)?;
            file.write_all(checkpoint.text.as_bytes())
                .map_err(unavailable)?;
            file.sync_all().map_err(unavailable)?;
        }
        fs::rename(&temporary, &path).map_err(unavailable)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(unavailable)?;
        Ok(())
    }
}

/// The most leaves kept in memory for proofs to a witness that is behind; past it, that
/// witness is brought up to date by the next start of the writer (which reads the log anyway).
const MAX_PENDING_LEAVES: usize = 1 << 20;

/// A writer's witnesses and what it needs to prove its checkpoints to them: the tree at the
/// smallest size a witness holds, and the leaves since.
#[derive(Debug, Default)]
pub(crate) struct Witnessing {
    witnesses: Vec<Arc<dyn Witness>>,
    /// The size each witness holds, as last heard.
    held: Vec<u64>,
    /// The tree up to `target` (or all of it while no witness needs older proofs)…
    base: Frontier,
    /// …and the leaves after it.
    pending: Vec<Hash>,
    /// Where `base` stops growing: the smallest size a witness holds (0: none holds any).
    target: u64,
    /// Leaves were dropped: proofs to a witness behind `base` wait for the next start.
    overflowed: bool,
    /// What checks the checkpoints witnesses hold.
    verifier: Option<VerifierKey>,
}

impl Witnessing {
    /// Reads what each witness holds of `origin`, checked with `verifier`: the checkpoints the
    /// log must extend. A witness that cannot be read is skipped with a warning (the checkpoints
    /// it misses are proved to it later).
    ///
    /// # Errors
    /// [`LogError::Damaged`] if a witness holds a checkpoint of this log that the key did not
    /// sign.
    pub(crate) fn start(
        witnesses: Vec<Arc<dyn Witness>>,
        origin: &str,
        verifier: &VerifierKey,
    ) -> Result<(Self, Vec<SignedCheckpoint>), LogError> {
        let mut held = Vec::with_capacity(witnesses.len());
        let mut must_extend = Vec::new();
        for witness in &witnesses {
            match witness.latest(origin) {
                Ok(None) => held.push(0),
                Ok(Some(text)) => {
                    let signed = verifier.open(&text).map_err(|e| {
                        LogError::Damaged(format!(
                            "the witness {witness:?} holds a checkpoint of this log that does not verify: {e}"
                        ))
                    })?;
                    held.push(signed.checkpoint.size);
                    must_extend.push(signed);
                }
                Err(e) => {
                    tracing::warn!(target: mcp_confirm::audit::TARGET, witness = ?witness, error = %e,
                        "a witness of the decision log cannot be read: not checked at start");
                    held.push(u64::MAX);
                }
            }
        }
        let mut this = Self {
            witnesses,
            held,
            verifier: Some(verifier.clone()),
            ..Self::default()
        };
        this.retarget();
        Ok((this, must_extend))
    }

    fn retarget(&mut self) {
        self.target = self
            .held
            .iter()
            .copied()
            .filter(|&s| s > 0 && s != u64::MAX)
            .min()
            .unwrap_or(0);
    }

    /// One more leaf of the log, in order.
    pub(crate) fn observe(&mut self, leaf: Hash) {
        if self.witnesses.is_empty() {
            return;
        }
        if self.pending.is_empty() && (self.target == 0 || self.base.size() < self.target) {
            self.base.push(leaf);
        } else if self.pending.len() < MAX_PENDING_LEAVES {
            self.pending.push(leaf);
        } else {
            self.overflowed = true;
            self.pending.clear();
            self.target = 0;
            self.base = Frontier::new();
        }
    }

    /// The tree of `size` leaves and the leaves after it, if kept.
    fn split_at(&self, size: u64) -> Option<(Frontier, &[Hash])> {
        if self.overflowed || size < self.base.size() {
            return None;
        }
        let skip = usize::try_from(size - self.base.size()).ok()?;
        let mut tree = self.base.clone();
        for leaf in self.pending.get(..skip)? {
            tree.push(*leaf);
        }
        Some((tree, &self.pending[skip..]))
    }

    /// Offers `signed` (a checkpoint of every leaf observed) to every witness.
    ///
    /// # Errors
    /// [`LogError::Damaged`] if a witness refuses it or holds more than this log: the log does
    /// not extend what left the machine, and nothing more is signed.
    pub(crate) fn submit(&mut self, signed: &SignedCheckpoint) -> Result<(), LogError> {
        for i in 0..self.witnesses.len() {
            let mut tries = 0;
            loop {
                tries += 1;
                let witness = &self.witnesses[i];
                let old = self.held[i];
                if old == u64::MAX {
                    // Unknown: ask, then prove.
                    let verifier = self.verifier.as_ref();
                    match witness.latest(&signed.checkpoint.origin) {
                        Ok(None) => self.held[i] = 0,
                        Ok(Some(text)) => match verifier.map(|v| v.open(&text)) {
                            Some(Ok(held)) => {
                                // What it holds must be this log's tree at that size.
                                let ours =
                                    self.split_at(held.checkpoint.size).map(|(t, _)| t.root());
                                if ours.is_some_and(|root| root != held.checkpoint.root) {
                                    return Err(LogError::Damaged(format!(
                                        "the witness {witness:?} holds a checkpoint of {} records this log does not extend",
                                        held.checkpoint.size
                                    )));
                                }
                                self.held[i] = held.checkpoint.size;
                            }
                            _ => break,
                        },
                        Err(_) => break,
                    }
                    if tries < 3 {
                        continue;
                    }
                    break;
                }
                if old == signed.checkpoint.size {
                    break;
                }
                if old > signed.checkpoint.size {
                    return Err(LogError::Damaged(format!(
                        "the witness {witness:?} holds a checkpoint of {old} records and this log has {}: rolled back",
                        signed.checkpoint.size
                    )));
                }
                let proof = if old == 0 {
                    Vec::new()
                } else {
                    match self.split_at(old) {
                        Some((tree, newer)) => tree.consistency_proof_to(newer).unwrap_or_default(),
                        None => {
                            tracing::warn!(target: mcp_confirm::audit::TARGET, witness = ?witness,
                                "a witness of the decision log is too far behind to prove to now; it is brought up to date at the next start");
                            break;
                        }
                    }
                };
                match witness.add(old, &proof, signed) {
                    Ok(()) => {
                        self.held[i] = signed.checkpoint.size;
                        break;
                    }
                    Err(WitnessError::Conflict { size }) if tries < 3 => self.held[i] = size,
                    Err(WitnessError::Refused(why)) => {
                        return Err(LogError::Damaged(format!(
                            "the witness {witness:?} refused checkpoint {}: {why}",
                            signed.checkpoint.size
                        )));
                    }
                    Err(e) => {
                        tracing::warn!(target: mcp_confirm::audit::TARGET, witness = ?witness, error = %e,
                            "a checkpoint of the decision log did not reach a witness; the next one will");
                        break;
                    }
                }
            }
        }
        self.compact();
        Ok(())
    }

    /// Moves into `base` the leaves every witness has.
    fn compact(&mut self) {
        self.retarget();
        if self.target == 0 {
            // No witness holds anything yet: proofs start from nothing, no leaves are needed.
            for leaf in self.pending.drain(..) {
                self.base.push(leaf);
            }
            return;
        }
        let Ok(keep_from) = usize::try_from(self.target.saturating_sub(self.base.size())) else {
            return;
        };
        let keep_from = keep_from.min(self.pending.len());
        for leaf in self.pending.drain(..keep_from) {
            self.base.push(leaf);
        }
    }
}
