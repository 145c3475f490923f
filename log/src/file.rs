//! The decision log in a directory: `records.jsonl` (one record a line, append-only) and
//! `checkpoints/` (one signed checkpoint a file, numbered in the order they were signed).
//!
//! Beside them, the signer's [`View`] (`signer-view` by default; better on other storage): what
//! the writer last wrote and signed, tagged with its key.
//!
//! Opening it recovers from a crash and never signs what its writer did not write. It is
//! [`Damaged`](LogError::Damaged) (a stop: nothing more is written or signed until an operator
//! has looked, with `mcp-confirm-audit inspect`) when:
//! - a record does not read back exactly, in order, or does not carry its writer's tag (every
//!   record written since tags exist carries one; an untagged record is accepted only where a
//!   checkpoint signed it): a record appended or edited by someone without the key;
//! - the records do not hash to a checkpoint's root, or to the view's;
//! - the log holds fewer records than the view says were written, or the view's newest
//!   checkpoint is missing (deleted to make an edit signable);
//! - the view is missing while the log is not empty, or was not written by the key;
//! - a witness holds a checkpoint this log does not extend (see [`witness`](super::witness)).
//!
//! Only a torn last line (a crash mid-append: no newline) is cut, to `records.jsonl.cut-<n>`,
//! never deleted: no one waited on it (a durable append is answered after the write).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use std::sync::{Arc, Condvar, Mutex};

use super::LogError;
use super::checkpoint::{LogKey, SignedCheckpoint};
use super::merkle::{Frontier, Hash, leaf_hash};
use super::open::regular;
use super::record::{MAX_RECORD_BYTES, Record};
use super::view::{View, ViewFile, root_mismatches};
use super::witness::{Witness, Witnessing};

/// When the records reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fsync {
    /// Every write is synced soon after it (within about 10 ms), by a thread of its own (the
    /// default): a decision waits for its record to be written (it then survives the process),
    /// not for the sync. A power loss can cost the last few milliseconds of records, never a
    /// signed one (a checkpoint syncs first).
    #[default]
    EveryBatch,
    /// Every write is synced before anyone waiting on it is answered: a power loss costs no
    /// record a decision waited on, and each decision waits a sync's latency.
    BeforeAnswer,
    /// Only before a checkpoint is signed: fewer syncs, more unsigned records at risk.
    BeforeCheckpoint,
    /// Never (tests, or a file system that is not the record of truth).
    Never,
}

/// The records file's name.
pub const RECORDS: &str = "records.jsonl";
/// The checkpoints folder's name.
pub const CHECKPOINTS: &str = "checkpoints";
/// The file earlier versions held locked while the log was open (the directory itself is
/// locked now).
pub const LOCK: &str = "lock";
/// The signer's view's default name, in the log's directory.
pub const VIEW: &str = "signer-view";

/// How a [`FileLog`] is opened beyond its directory and key.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct FileOptions {
    /// When records reach the disk.
    pub fsync: Fsync,
    /// Where the signer's view lives (default: `signer-view` in the log's directory). Put it on
    /// storage the log's other readers cannot write, and an attacker on the log's directory can
    /// no longer roll back the two together.
    pub view: Option<PathBuf>,
    /// Where checkpoints go beyond this machine; the log must extend what each holds.
    pub witnesses: Vec<Arc<dyn Witness>>,
}

impl FileOptions {
    /// These options with `fsync`.
    #[must_use]
    pub fn fsync(mut self, fsync: Fsync) -> Self {
        self.fsync = fsync;
        self
    }

    /// These options with the view at `path`.
    #[must_use]
    pub fn view(mut self, path: impl Into<PathBuf>) -> Self {
        self.view = Some(path.into());
        self
    }

    /// These options with one more witness.
    #[must_use]
    pub fn witness(mut self, witness: impl Witness) -> Self {
        self.witnesses.push(Arc::new(witness));
        self
    }
}

/// An open decision log directory, ready to append.
#[derive(Debug)]
pub struct FileLog {
    /// Held (locked) while the log is open.
    _lock: File,
    dir: PathBuf,
    view_path: PathBuf,
    view_file: Arc<Mutex<ViewFile>>,
    records: File,
    /// The records file's device and inode: a file renamed over it while the log runs is
    /// someone else's.
    identity: (u64, u64),
    /// Syncs what is written, on a thread of its own ([`Fsync::EveryBatch`]).
    syncer: Option<Syncer>,
    /// The records file's length after the last write that succeeded: what a failed write is
    /// cut back to.
    written: u64,
    frontier: Frontier,
    key: LogKey,
    fsync: Fsync,
    /// The last signed checkpoint, and its number in `checkpoints/`.
    signed: Option<(u64, SignedCheckpoint)>,
    /// Records appended and not yet synced.
    unsynced: bool,
    /// After a failure: the next write is synced before it is answered, whatever the policy
    /// (the log is up again only once a write and its sync succeeded).
    recovering: bool,
    /// A witness refused what this log signed: it stays down until an operator has looked.
    damaged: Option<String>,
    witnessing: Witnessing,
}

impl FileLog {
    /// Opens (creating it if needed) the log in `dir`, signed by `key`, recovering from a crash
    /// (the view in `dir`, no witness).
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with).
    pub fn open(dir: impl AsRef<Path>, key: LogKey, fsync: Fsync) -> Result<Self, LogError> {
        Self::open_with(dir, key, FileOptions::default().fsync(fsync))
    }

    /// Opens (creating it if needed) the log in `dir`, signed by `key`, recovering from a crash,
    /// and checks it against its view and its witnesses (see the module's rules).
    ///
    /// # Errors
    /// [`LogError::Damaged`] if the log holds what its writer did not write, or lacks what it
    /// wrote or signed; [`LogError::Locked`] if another writer has it open; [`LogError::Io`] if
    /// the directory cannot be read or written.
    pub fn open_with(
        dir: impl AsRef<Path>,
        key: LogKey,
        options: FileOptions,
    ) -> Result<Self, LogError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        // One writer per directory: two would interleave their records and sign two trees.
        // The directory itself is locked (a lock file could be deleted under a writer).
        let lock = File::open(&dir)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(LogError::Locked),
            Err(fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        let view_path = options.view.clone().unwrap_or_else(|| dir.join(VIEW));
        let (mut witnessing, must_extend) =
            Witnessing::start(options.witnesses, key.name(), &key.verifier())?;
        let scan = scan(&dir, &view_path, &key, &must_extend, Some(&mut witnessing))?;
        if let Some(problem) = scan.problems.first() {
            return Err(LogError::Damaged(format!(
                "{problem} (run `mcp-confirm-audit inspect --dir {} --key '{}' --secret-file \
                 <the file holding this log's signing seed>` to see everything that differs; \
                 the log is not written again)",
                dir.display(),
                key.verifier()
            )));
        }
        let Scan {
            frontier,
            signed,
            good,
            bytes,
            ..
        } = scan;
        let path = dir.join(RECORDS);
        if good < bytes {
            // A torn last line (a crash mid-append): no one waited on it. Kept aside, then cut.
            let cut = cut_path(&dir);
            let mut torn = Vec::new();
            let mut file = regular(&path)?;
            io::Seek::seek(&mut file, io::SeekFrom::Start(good))?;
            file.take(MAX_RECORD_BYTES as u64 + 1)
                .read_to_end(&mut torn)?;
            fs::write(&cut, &torn)?;
            let file = OpenOptions::new().write(true).open(&path)?;
            file.set_len(good)?;
            file.sync_all()?;
            tracing::warn!(target: mcp_confirm::audit::TARGET, decision = "log_recovered",
                kept = frontier.size(), cut = %cut.display(),
                "the decision log's last line was cut short by a crash; it was moved aside");
        }
        let records = OpenOptions::new().create(true).append(true).open(&path)?;
        let identity = identity(&records.metadata()?);
        let view_file = Arc::new(Mutex::new(ViewFile::open(
            &view_path,
            key.name(),
            key.tags(),
        )?));
        let syncer = match options.fsync {
            Fsync::EveryBatch => Some(Syncer::start(
                records.try_clone()?,
                Arc::clone(&view_file),
                key.name().to_owned(),
                key.tags().clone(),
                (path.clone(), identity),
            )?),
            _ => None,
        };
        let mut log = Self {
            _lock: lock,
            dir,
            view_path,
            view_file,
            identity,
            syncer,
            records,
            written: good,
            frontier,
            key,
            fsync: options.fsync,
            signed,
            unsynced: false,
            recovering: false,
            damaged: None,
            witnessing,
        };
        // From here the records read are the writer's own: the view says so, on the disk.
        log.write_view(true)?;
        Ok(log)
    }

    /// After a failed write: cuts the records file back to what the last successful write left
    /// (a write the disk refused may have left half a line), and reopens it. What was written
    /// before stays; nothing is moved aside, and the log is up again only once a write succeeds.
    ///
    /// # Errors
    /// [`LogError::Io`] while the file cannot be cut or reopened.
    pub fn recover(&mut self) -> Result<(), LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        let path = self.dir.join(RECORDS);
        let file = OpenOptions::new().write(true).open(&path)?;
        if file.metadata()?.len() != self.written {
            file.set_len(self.written)?;
        }
        let records = OpenOptions::new().append(true).open(&path)?;
        if identity(&records.metadata()?) != self.identity {
            return Err(self.damage("the records file was replaced while the log ran"));
        }
        self.records = records;
        self.unsynced = false;
        self.recovering = true;
        Ok(())
    }

    /// Marks the log damaged (it stays down) and answers the error.
    fn damage(&mut self, why: &str) -> LogError {
        tracing::error!(target: mcp_confirm::audit::TARGET, decision = "log_damaged", error = why,
            "the decision log was changed by someone other than its writer");
        self.damaged = Some(why.to_owned());
        LogError::Damaged(why.to_owned())
    }

    /// The records file at its path must still be the one this log writes.
    fn check_identity(&mut self) -> Result<(), LogError> {
        if !still_at(&self.dir.join(RECORDS), self.identity) {
            return Err(self.damage(REPLACED));
        }
        Ok(())
    }

    /// Whether an append is only a write into the page cache, short enough for a caller's
    /// thread: not when every write is synced before it is answered, nor while recovering (the
    /// next write is then synced first).
    pub(crate) fn appends_inline(&self) -> bool {
        self.fsync != Fsync::BeforeAnswer && !self.recovering && self.damaged.is_none()
    }

    /// How many records the log holds.
    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The last signed checkpoint, if any.
    pub fn last_checkpoint(&self) -> Option<&SignedCheckpoint> {
        self.signed.as_ref().map(|(_, s)| s)
    }

    /// Where the signer's view is kept.
    pub fn view_path(&self) -> &Path {
        &self.view_path
    }

    fn view(&self) -> View {
        let (checkpoint, checkpoint_size) = self.signed_at();
        View {
            size: self.frontier.size(),
            root: self.frontier.root(),
            checkpoint,
            checkpoint_size,
        }
    }

    /// The newest signed checkpoint's number and size (0 and 0 for none).
    fn signed_at(&self) -> (u64, u64) {
        self.signed
            .as_ref()
            .map_or((0, 0), |(n, s)| (*n, s.checkpoint.size))
    }

    /// Records the tree in the view: a `checkpoint`'s in both slots, synced unless the policy
    /// is never to.
    fn write_view(&mut self, checkpoint: bool) -> Result<(), LogError> {
        let view = self.view();
        self.view_file
            .lock()
            .map_err(|_| LogError::Io(std::io::Error::other("the view's lock was poisoned")))?
            .write(
                &view,
                self.key.name(),
                self.key.tags(),
                checkpoint,
                checkpoint && self.fsync != Fsync::Never,
            )
    }

    /// Appends `records` in one write, numbering and tagging them from [`size`](Self::size)
    /// (their `seq` and `tag` are set here); syncs per the [`Fsync`] policy. Answers the first
    /// record's number.
    ///
    /// # Errors
    /// [`LogError::Io`] (a full disk, a removed directory): call [`recover`](Self::recover)
    /// before writing again.
    pub fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        match &self.syncer {
            // Checked by the syncer at every sync (within about 10 ms of a write), and before
            // every checkpoint: a path lookup per write was a tenth of the log's cost.
            Some(syncer) => {
                if let Err(failed) = syncer.check() {
                    return Err(match failed {
                        SyncFailed::Io(why) => LogError::Io(std::io::Error::other(format!(
                            "syncing the decision log failed: {why}"
                        ))),
                        SyncFailed::Replaced => self.damage(REPLACED),
                    });
                }
            }
            None => self.check_identity()?,
        }
        let first = self.frontier.size();
        let mut lines = String::new();
        let mut leaves = Vec::with_capacity(records.len());
        for (i, record) in records.iter_mut().enumerate() {
            record.seq = first + i as u64;
            let line = self.key.tags().tag(self.key.name(), record);
            leaves.push(leaf_hash(line.as_bytes()));
            lines.push_str(&line);
            lines.push('\n');
        }
        self.records.write_all(lines.as_bytes())?;
        self.unsynced = true;
        if self.fsync == Fsync::BeforeAnswer || self.recovering {
            self.records.sync_data()?;
            self.unsynced = false;
            self.recovering = false;
        }
        self.written += lines.len() as u64;
        for leaf in leaves {
            self.frontier.push(leaf);
            self.witnessing.observe(leaf);
        }
        match (&self.syncer, self.fsync) {
            // Synced by the syncer, which then records it in the view.
            (Some(syncer), _) => syncer.dirty(&self.frontier, self.signed_at()),
            (None, Fsync::BeforeAnswer) => {
                if let Err(e) = self.write_view(false) {
                    // The records are on the disk and the view may say so; it need not: an
                    // older view is a lower bound the next start still checks (and a
                    // checkpoint writes it again, or fails).
                    tracing::debug!(target: mcp_confirm::audit::TARGET, error = %e,
                        "the signer's view was not updated after a write");
                }
            }
            _ => {}
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
}

impl Drop for FileLog {
    fn drop(&mut self) {
        if let Some(syncer) = self.syncer.take() {
            syncer.stop();
        }
    }
}

/// Why a log whose records file is no longer at its path is damaged.
const REPLACED: &str = "the records file was replaced, moved or removed while the log ran";

/// What the syncer found since the last look.
#[derive(Debug)]
enum SyncFailed {
    /// A sync failed: what was written may not be on the disk.
    Io(String),
    /// The records file at the path is not the one written (renamed over, moved or removed).
    Replaced,
}

/// How often the syncer syncs at most ([`Fsync::EveryBatch`]).
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// What the writer and its syncer share.
#[derive(Default)]
struct SyncState {
    /// Written and not yet synced: the tree to record in the view once it is (its root is
    /// computed then, once per sync, not per write).
    pending: Option<Unsynced>,
    /// The last sync failed, or the records file was replaced: the log is to go down.
    failed: Option<SyncFailed>,
    stop: bool,
}

/// The tree as a write left it, and the newest checkpoint then.
struct Unsynced {
    frontier: Frontier,
    signed_at: (u64, u64),
}

impl Unsynced {
    fn view(&self) -> View {
        View {
            size: self.frontier.size(),
            root: self.frontier.root(),
            checkpoint: self.signed_at.0,
            checkpoint_size: self.signed_at.1,
        }
    }
}

/// The thread that syncs the records file after each write ([`Fsync::EveryBatch`]), then
/// records the synced size in the view.
#[derive(Debug)]
struct Syncer {
    state: Arc<(Mutex<SyncState>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SyncState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncState")
            .field("pending", &self.pending.is_some())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Syncer {
    fn start(
        records: File,
        view: Arc<Mutex<ViewFile>>,
        origin: String,
        tags: super::view::TagKey,
        (path, written_to): (PathBuf, (u64, u64)),
    ) -> Result<Self, LogError> {
        let state = Arc::new((Mutex::new(SyncState::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("mcp-confirm-log-sync".into())
            .spawn(move || {
                let (lock, wake) = &*shared;
                let mut last_sync: Option<std::time::Instant> = None;
                loop {
                    // At most one sync per `SYNC_EVERY`: syncs are what a busy log costs (each is
                    // a round trip to the device), and no decision waits on them.
                    if let Some(at) = last_sync {
                        let since = at.elapsed();
                        if since < SYNC_EVERY {
                            std::thread::sleep(SYNC_EVERY - since);
                        }
                    }
                    let pending = {
                        let Ok(mut state) = lock.lock() else { return };
                        while state.pending.is_none() && !state.stop {
                            state = match wake.wait(state) {
                                Ok(state) => state,
                                Err(_) => return,
                            };
                        }
                        match state.pending.take() {
                            Some(pending) => pending,
                            None => return,
                        }
                    };
                    last_sync = Some(std::time::Instant::now());
                    let synced = records.sync_data();
                    // Synced first: what was written is the writer's own, wherever the file is.
                    if !still_at(&path, written_to) {
                        // Not recorded in the view: the next append or checkpoint stops.
                        if let Ok(mut state) = lock.lock() {
                            state.failed = Some(SyncFailed::Replaced);
                        }
                        continue;
                    }
                    match synced {
                        Ok(()) => {
                            if let Ok(mut file) = view.lock() {
                                let _ = file.write(&pending.view(), &origin, &tags, false, false);
                            }
                        }
                        Err(e) => {
                            if let Ok(mut state) = lock.lock() {
                                state.failed = Some(SyncFailed::Io(e.to_string()));
                            }
                        }
                    }
                }
            })?;
        Ok(Self {
            state,
            thread: Some(thread),
        })
    }

    /// Errs if a sync failed or the records file was replaced since the last call.
    fn check(&self) -> Result<(), SyncFailed> {
        match self.state.0.lock() {
            Ok(mut state) => state.failed.take().map_or(Ok(()), Err),
            Err(_) => Err(SyncFailed::Io("the syncer stopped".into())),
        }
    }

    /// Something was written; once synced, the view may say `view`. Only the first write since
    /// the last sync wakes the syncer (a wake-up is a system call; a busy log writes thousands
    /// of times between two syncs).
    fn dirty(&self, frontier: &Frontier, signed_at: (u64, u64)) {
        let first = match self.state.0.lock() {
            Ok(mut state) => match &mut state.pending {
                Some(pending) => {
                    pending.frontier.clone_from(frontier);
                    pending.signed_at = signed_at;
                    false
                }
                None => {
                    state.pending = Some(Unsynced {
                        frontier: frontier.clone(),
                        signed_at,
                    });
                    true
                }
            },
            Err(_) => true,
        };
        if first {
            self.state.1.notify_one();
        }
    }

    fn stop(mut self) {
        if let Ok(mut state) = self.state.0.lock() {
            state.stop = true;
        }
        self.state.1.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl FileLog {
    /// Signs a checkpoint of every record appended so far, after they reached the disk, records
    /// it in the view and offers it to the witnesses; none if nothing was appended since the
    /// last one.
    ///
    /// # Errors
    /// [`LogError::Io`] if the records cannot be synced or the checkpoint written;
    /// [`LogError::Damaged`] if a witness refuses it or holds more.
    pub fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        self.check_identity()?;
        let size = self.frontier.size();
        if self.signed.as_ref().map(|(_, s)| s.checkpoint.size) == Some(size) {
            return Ok(None);
        }
        self.sync()?;
        let Some(number) = self
            .signed
            .as_ref()
            .map_or(Some(1), |(n, _)| n.checked_add(1))
        else {
            return Err(self.damage("the checkpoints are numbered to the end of the range"));
        };
        let signed = self.key.sign(size, &self.frontier.root());
        // Written whole under a temporary name, then linked to its number: a crash leaves no
        // torn checkpoint, and an existing file of that number (someone else's) is never
        // replaced.
        let final_path = checkpoint_path(&self.dir, number);
        let temporary = final_path.with_extension("tmp");
        {
            let mut file = File::create(&temporary)?;
            file.write_all(signed.text.as_bytes())?;
            if self.fsync != Fsync::Never {
                file.sync_all()?;
            }
        }
        let linked = fs::hard_link(&temporary, &final_path);
        let _ = fs::remove_file(&temporary);
        if let Err(e) = linked {
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Err(self.damage(&format!(
                    "checkpoint {number} exists and this writer did not sign it"
                )));
            }
            return Err(e.into());
        }
        if self.fsync != Fsync::Never {
            File::open(self.dir.join(CHECKPOINTS))?.sync_all()?;
        }
        self.signed = Some((number, signed.clone()));
        self.write_view(true)?;
        if let Err(e) = self.witnessing.submit(&signed) {
            if let LogError::Damaged(why) = &e {
                return Err(self.damage(why));
            }
            return Err(e);
        }
        Ok(Some(signed))
    }
}

/// What reading a log directory found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The tree of the records that read back.
    pub(crate) frontier: Frontier,
    /// The newest checkpoint that verified, and its number.
    pub(crate) signed: Option<(u64, SignedCheckpoint)>,
    /// Bytes of whole lines read; `bytes` in all.
    pub(crate) good: u64,
    pub(crate) bytes: u64,
    /// The view as read.
    pub(crate) view: Option<View>,
    /// Whether any record carries a tag.
    pub(crate) tagged: bool,
    /// Every way the directory differs from what its writer wrote, in the order found.
    pub(crate) problems: Vec<String>,
}

/// Reads the log in `dir` and compares it to its view, its checkpoints and `must_extend` (what
/// witnesses hold), feeding every leaf to `witnessing`. Nothing is changed; memory stays bounded
/// by the longest line kept (a longer one is read past, not kept).
pub(crate) fn scan(
    dir: &Path,
    view_path: &Path,
    key: &LogKey,
    must_extend: &[SignedCheckpoint],
    mut witnessing: Option<&mut Witnessing>,
) -> Result<Scan, LogError> {
    fs::create_dir_all(dir.join(CHECKPOINTS))?;
    let mut problems = Vec::new();
    let signed = match last_checkpoint(dir, key) {
        Ok(signed) => signed,
        Err(LogError::Damaged(why)) => {
            problems.push(why);
            None
        }
        Err(e) => return Err(e),
    };
    let view = match View::read(view_path, key.name(), key.tags()) {
        Ok(view) => view,
        Err(LogError::Damaged(why)) => {
            problems.push(why);
            None
        }
        Err(e) => return Err(e),
    };
    let signed_size = signed.as_ref().map_or(0, |(_, s)| s.checkpoint.size);
    // The roots the tree must have at these sizes: the newest checkpoint's, the view's, and
    // each witness's.
    let mut expected: Vec<(u64, Hash, String)> = Vec::new();
    if let Some((n, s)) = &signed {
        expected.push((
            s.checkpoint.size,
            s.checkpoint.root,
            format!("checkpoint {n}"),
        ));
    }
    if let Some(v) = &view {
        expected.push((v.size, v.root, "the signer's view".into()));
    }
    for s in must_extend {
        expected.push((
            s.checkpoint.size,
            s.checkpoint.root,
            "a witness's checkpoint".into(),
        ));
    }
    let mut frontier = Frontier::new();
    problems.extend(root_mismatches(&expected, &frontier));
    let path = dir.join(RECORDS);
    let mut good = 0u64;
    let mut bytes = 0u64;
    let mut reader = match regular(&path) {
        Ok(file) => Some(io::BufReader::new(file)),
        Err(LogError::Io(e)) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut line = Vec::with_capacity(1024);
    let mut tagged = false;
    while let Some(reader) = reader.as_mut() {
        let (read, whole) = read_line(reader, &mut line)?;
        if read == 0 {
            break;
        }
        bytes += read;
        if !whole {
            // The last line has no newline: torn by a crash, or written by someone else. Not a
            // record either way; the writer moves it aside.
            break;
        }
        let seq = frontier.size();
        let record = std::str::from_utf8(&line).ok().and_then(Record::from_line);
        match record {
            Some(record) if record.seq == seq => {
                if record.tag.is_some() {
                    tagged = true;
                    if !key.tags().verifies(key.name(), &record) {
                        problems.push(format!(
                            "record {seq} does not carry its writer's tag: it was written or changed by someone without the log's key"
                        ));
                    }
                } else if seq >= signed_size {
                    problems.push(format!(
                        "record {seq} carries no tag and no checkpoint signed it: it was not written by this log's writer"
                    ));
                }
            }
            Some(record) => {
                problems.push(format!(
                    "line {seq} holds record {}: records were removed, inserted or reordered",
                    record.seq
                ));
            }
            None => problems.push(format!(
                "line {seq} is not a record as the log writes one (edited?)"
            )),
        }
        let leaf = leaf_hash(&line);
        frontier.push(leaf);
        if let Some(w) = witnessing.as_deref_mut() {
            w.observe(leaf);
        }
        good += read;
        problems.extend(root_mismatches(&expected, &frontier));
    }
    let size = frontier.size();
    if size < signed_size {
        problems.push(format!(
            "the log holds {size} records and a checkpoint signed {signed_size}: records were removed"
        ));
    }
    for s in must_extend {
        if size < s.checkpoint.size {
            problems.push(format!(
                "the log holds {size} records and a witness holds a checkpoint of {}: the log was rolled back",
                s.checkpoint.size
            ));
        }
    }
    let newest = signed.as_ref().map_or(0, |(n, _)| *n);
    match &view {
        Some(v) => {
            if size < v.size {
                problems.push(format!(
                    "the log holds {size} records and its writer wrote {}: records were removed",
                    v.size
                ));
            }
            if newest < v.checkpoint {
                problems.push(format!(
                    "checkpoint {} that the writer signed is missing (the newest present is {newest})",
                    v.checkpoint
                ));
            } else if newest == v.checkpoint && signed_size != v.checkpoint_size {
                problems.push(format!(
                    "checkpoint {newest} is not the one the writer signed"
                ));
            } else if newest > v.checkpoint.saturating_add(1)
                || (newest == v.checkpoint + 1 && signed_size < v.checkpoint_size)
            {
                // One past the view is a crash between signing and recording it; anything
                // further the writer did not sign.
                problems.push(format!(
                    "checkpoint {newest} is newer than any the writer recorded signing ({})",
                    v.checkpoint
                ));
            }
        }
        None if size > 0 || newest > 0 || bytes > 0 => problems.push(format!(
            "the signer's view {} is missing and the log is not empty: it cannot be told apart from a log someone else wrote",
            view_path.display()
        )),
        None => {}
    }
    Ok(Scan {
        frontier,
        signed,
        good,
        bytes: bytes.max(good),
        view,
        tagged,
        problems,
    })
}

/// Reads one line into `line` (without its newline), keeping at most [`MAX_RECORD_BYTES`] + 1
/// bytes of it (a longer line is not a record; the rest is read past, not kept). Answers the
/// bytes consumed and whether the line ended with a newline.
fn read_line(reader: &mut impl io::BufRead, line: &mut Vec<u8>) -> Result<(u64, bool), LogError> {
    line.clear();
    let mut consumed = 0u64;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if available.is_empty() {
            return Ok((consumed, false));
        }
        let (chunk, whole) = match available.iter().position(|&b| b == b'\n') {
            Some(end) => (&available[..end], true),
            None => (available, false),
        };
        let room = (MAX_RECORD_BYTES + 1).saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len() + usize::from(whole);
        consumed += used as u64;
        reader.consume(used);
        if whole {
            return Ok((consumed, true));
        }
    }
}

/// A file's device and inode.
fn identity(metadata: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (metadata.dev(), metadata.ino())
}

/// Whether the file at `path` (not following a link) is still the one of `written_to`
/// ([`identity`]): not when it was renamed over, moved or removed.
fn still_at(path: &Path, written_to: (u64, u64)) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| identity(&m) == written_to)
}

/// Everything in the log in `dir` that its writer did not write or that is missing from what it
/// wrote, checked with the signing `key` (tags, the view) and against `must_extend` (checkpoints
/// kept elsewhere); empty when the log is as its writer left it. Reads only.
///
/// # Errors
/// [`LogError::Io`] if the directory cannot be read.
pub fn inspect(
    dir: &Path,
    view: Option<&Path>,
    key: &LogKey,
    must_extend: &[SignedCheckpoint],
) -> Result<Vec<String>, LogError> {
    let view_path = view.map_or_else(|| dir.join(VIEW), Path::to_path_buf);
    Ok(scan(dir, &view_path, key, must_extend, None)?.problems)
}

/// Writes a view for a log written before views existed, after checking everything else: for an
/// upgrade, once, by an operator who holds checkpoints kept elsewhere (`must_extend`, at least
/// one) that the log must extend. A log that already has a view, whose records carry tags (a
/// tagged log always had a view: this one was removed), or that differs in anything else, is
/// refused.
///
/// # Errors
/// [`LogError::Damaged`] with the first problem; [`LogError::Io`].
pub fn adopt_legacy(
    dir: &Path,
    view: Option<&Path>,
    key: &LogKey,
    must_extend: &[SignedCheckpoint],
) -> Result<u64, LogError> {
    if must_extend.is_empty() {
        return Err(LogError::Damaged(
            "no checkpoint kept elsewhere to check the log against".into(),
        ));
    }
    let view_path = view.map_or_else(|| dir.join(VIEW), Path::to_path_buf);
    let scan = scan(dir, &view_path, key, must_extend, None)?;
    if scan.view.is_some() {
        return Err(LogError::Damaged("the log already has a view".into()));
    }
    if scan.tagged {
        return Err(LogError::Damaged(
            "the log's records carry tags, so it had a view: it was removed, not missing".into(),
        ));
    }
    if let Some(problem) = scan
        .problems
        .iter()
        .find(|p| !p.starts_with("the signer's view"))
    {
        return Err(LogError::Damaged(problem.clone()));
    }
    let view = View {
        size: scan.frontier.size(),
        root: scan.frontier.root(),
        checkpoint: scan.signed.as_ref().map_or(0, |(n, _)| *n),
        checkpoint_size: scan.signed.as_ref().map_or(0, |(_, s)| s.checkpoint.size),
    };
    ViewFile::open(&view_path, key.name(), key.tags())?.write(
        &view,
        key.name(),
        key.tags(),
        true,
        true,
    )?;
    Ok(scan.frontier.size())
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
        regular(&entry.path())?
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
