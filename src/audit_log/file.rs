//! The decision log in a directory: `records.jsonl` (one record a line, append-only) and
//! `checkpoints/` (one signed checkpoint a file, numbered in the order they were signed).
//!
//! Opening it recovers from a crash, and never rewrites what a checkpoint signed:
//! - every record up to the last checkpoint's size must read back exactly, in order, and hash to
//!   its root; otherwise the log is [`Damaged`](LogError::Damaged) and is not written again
//!   (signing on top of a changed prefix would be a fork);
//! - after that, the first line that is torn (a crash mid-append) or does not read back ends the
//!   log: it and what follows move to `records.jsonl.cut-<n>`, never deleted, and appending
//!   resumes from the last good record.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use super::LogError;
use super::checkpoint::{LogKey, SignedCheckpoint};
use super::merkle::{Frontier, leaf_hash};
use super::record::Record;

/// When the records reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fsync {
    /// After every batch of appended records, before anything is signed (the default): a
    /// power loss can cost the last unsigned records, never a signed one.
    #[default]
    EveryBatch,
    /// Only before a checkpoint is signed: fewer syncs, more unsigned records at risk.
    BeforeCheckpoint,
    /// Never (tests, or a file system that is not the record of truth).
    Never,
}

/// The records file's name.
pub const RECORDS: &str = "records.jsonl";
/// The checkpoints folder's name.
pub const CHECKPOINTS: &str = "checkpoints";
/// The file a writer holds locked while the log is open.
pub const LOCK: &str = "lock";

/// An open decision log directory, ready to append.
#[derive(Debug)]
pub struct FileLog {
    /// Held (locked) while the log is open.
    _lock: File,
    dir: PathBuf,
    records: File,
    frontier: Frontier,
    key: LogKey,
    fsync: Fsync,
    /// The last signed checkpoint, and its number in `checkpoints/`.
    signed: Option<(u64, SignedCheckpoint)>,
    /// Records appended and not yet synced.
    unsynced: bool,
}

impl FileLog {
    /// Opens (creating it if needed) the log in `dir`, signed by `key`, recovering from a crash.
    ///
    /// # Errors
    /// [`LogError::Damaged`] if a signed record was changed, removed or reordered, or a
    /// checkpoint does not verify with `key`; [`LogError::Locked`] if another writer has it
    /// open; [`LogError::Io`] if the directory cannot be read or written.
    pub fn open(dir: impl AsRef<Path>, key: LogKey, fsync: Fsync) -> Result<Self, LogError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        // One writer per directory: two would interleave their records and sign two trees.
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(LogError::Locked),
            Err(fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        let (records, frontier, signed) = load(&dir, &key)?;
        Ok(Self {
            _lock: lock,
            dir,
            records,
            frontier,
            key,
            fsync,
            signed,
            unsynced: false,
        })
    }

    /// Reads the directory again as [`open`](Self::open) does, after a failed write (the disk
    /// was full): what reached the file is kept, a torn tail is moved aside.
    ///
    /// # Errors
    /// As [`open`](Self::open); the log stays unusable until a recovery succeeds.
    pub fn recover(&mut self) -> Result<(), LogError> {
        let (records, frontier, signed) = load(&self.dir, &self.key)?;
        self.records = records;
        self.frontier = frontier;
        self.signed = signed;
        self.unsynced = false;
        Ok(())
    }

    /// How many records the log holds.
    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The last signed checkpoint, if any.
    pub fn last_checkpoint(&self) -> Option<&SignedCheckpoint> {
        self.signed.as_ref().map(|(_, s)| s)
    }

    /// Appends `records` in one write, numbering them from [`size`](Self::size) (their `seq`
    /// is set here); syncs per the [`Fsync`] policy. Answers the first record's number.
    ///
    /// # Errors
    /// [`LogError::Io`] (a full disk, a removed directory): the log is then not to be written
    /// again until reopened, which recovers what reached the file.
    pub fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        let first = self.frontier.size();
        let mut lines = String::new();
        let mut leaves = Vec::with_capacity(records.len());
        for (i, record) in records.iter_mut().enumerate() {
            record.seq = first + i as u64;
            let line = record.to_line();
            leaves.push(leaf_hash(line.as_bytes()));
            lines.push_str(&line);
            lines.push('\n');
        }
        self.records.write_all(lines.as_bytes())?;
        self.unsynced = true;
        if self.fsync == Fsync::EveryBatch {
            self.sync()?;
        }
        for leaf in leaves {
            self.frontier.push(leaf);
        }
        Ok(first)
    }

    fn sync(&mut self) -> Result<(), LogError> {
        if self.unsynced && self.fsync != Fsync::Never {
            self.records.sync_data()?;
        }
        self.unsynced = false;
        Ok(())
    }

    /// Signs a checkpoint of every record appended so far, after they reached the disk; none if
    /// nothing was appended since the last one.
    ///
    /// # Errors
    /// [`LogError::Io`] if the records cannot be synced or the checkpoint written.
    pub fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        let size = self.frontier.size();
        if self.signed.as_ref().map(|(_, s)| s.checkpoint.size) == Some(size) {
            return Ok(None);
        }
        self.sync()?;
        let signed = self.key.sign(size, &self.frontier.root());
        let number = self.signed.as_ref().map_or(1, |(n, _)| n + 1);
        // Written whole under a temporary name, then renamed: a crash leaves no torn checkpoint.
        let final_path = checkpoint_path(&self.dir, number);
        let temporary = final_path.with_extension("tmp");
        {
            let mut file = File::create(&temporary)?;
            file.write_all(signed.text.as_bytes())?;
            if self.fsync != Fsync::Never {
                file.sync_all()?;
            }
        }
        fs::rename(&temporary, &final_path)?;
        if self.fsync != Fsync::Never {
            File::open(self.dir.join(CHECKPOINTS))?.sync_all()?;
        }
        self.signed = Some((number, signed.clone()));
        Ok(Some(signed))
    }
}

/// What a log directory holds, recovered: the records file ready to append, the tree's
/// frontier, and the last signed checkpoint.
type Loaded = (File, Frontier, Option<(u64, SignedCheckpoint)>);

/// Reads and recovers the log in `dir` (see the module's rules).
fn load(dir: &Path, key: &LogKey) -> Result<Loaded, LogError> {
    fs::create_dir_all(dir.join(CHECKPOINTS))?;
    let signed = last_checkpoint(dir, key)?;
    let path = dir.join(RECORDS);
    let mut bytes = Vec::new();
    match File::open(&path) {
        Ok(mut file) => {
            file.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let signed_size = signed.as_ref().map_or(0, |(_, s)| s.checkpoint.size);
    let mut frontier = Frontier::new();
    let mut good = 0usize;
    let mut rest = bytes.as_slice();
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let line = &rest[..end];
        let record = std::str::from_utf8(line).ok().and_then(Record::from_line);
        match record {
            Some(record) if record.seq == frontier.size() => {
                frontier.push(leaf_hash(line));
                good += end + 1;
                rest = &rest[end + 1..];
                if let Some((_, s)) = &signed
                    && frontier.size() == s.checkpoint.size
                    && frontier.root() != s.checkpoint.root
                {
                    return Err(LogError::Damaged(format!(
                        "the first {} records do not hash to the signed root",
                        s.checkpoint.size
                    )));
                }
            }
            _ => break,
        }
    }
    if frontier.size() < signed_size {
        return Err(LogError::Damaged(format!(
            "record {} is missing, changed or out of order, and a checkpoint signed {} records",
            frontier.size(),
            signed_size
        )));
    }
    if good < bytes.len() {
        // A torn or unreadable tail after the signed prefix: kept aside, then cut.
        let cut = cut_path(dir);
        fs::write(&cut, &bytes[good..])?;
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(good as u64)?;
        file.sync_all()?;
        tracing::warn!(target: crate::audit::TARGET, decision = "log_recovered",
                kept = frontier.size(), cut = %cut.display(),
                "the decision log's unsigned tail did not read back; it was moved aside");
    }
    let records = OpenOptions::new().create(true).append(true).open(&path)?;
    Ok((records, frontier, signed))
}

/// `checkpoints/<number, 20 digits>`.
pub fn checkpoint_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(CHECKPOINTS).join(format!("{number:020}"))
}

/// The checkpoints in `dir`, in the order they were signed: (number, text).
pub fn checkpoint_texts(dir: &Path) -> Result<Vec<(u64, String)>, LogError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir.join(CHECKPOINTS))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            // Temporary files of an interrupted write, and anything else: not checkpoints.
            continue;
        };
        let mut text = String::new();
        File::open(entry.path())?
            .take(super::checkpoint::MAX_NOTE_BYTES as u64 + 1)
            .read_to_string(&mut text)
            .map_err(|_| LogError::Damaged(format!("checkpoint {number} is not text")))?;
        found.push((number, text));
    }
    found.sort_by_key(|(n, _)| *n);
    Ok(found)
}

/// The last checkpoint, verified with `key`.
fn last_checkpoint(dir: &Path, key: &LogKey) -> Result<Option<(u64, SignedCheckpoint)>, LogError> {
    let verifier = key.verifier();
    let Some((number, text)) = checkpoint_texts(dir)?.pop() else {
        return Ok(None);
    };
    let signed = verifier
        .open(&text)
        .map_err(|e| LogError::Damaged(format!("checkpoint {number}: {e}")))?;
    Ok(Some((number, signed)))
}

fn cut_path(dir: &Path) -> PathBuf {
    (1u32..)
        .map(|n| dir.join(format!("{RECORDS}.cut-{n}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| dir.join(format!("{RECORDS}.cut")))
}
