//! The handle a layer appends through: a bounded queue in front of one writer thread that owns
//! the log. Appending never waits for the disk; a full queue or a failed write makes the log
//! *down*, and the layer then follows its [`WhenDown`] policy until the writer recovers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::LogError;
use super::checkpoint::{LogKey, SignedCheckpoint, VerifierKey};
use super::file::{FileLog, Fsync};
use super::record::Record;

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

/// How the log is written.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Records waiting for the writer at most; past it the log is down (default 10,000).
    pub queue: usize,
    /// A checkpoint after this many records (default 10,000)…
    pub every_records: u64,
    /// …or this long after the first record it would cover (default 10 s), and on shutdown.
    pub every: Duration,
    /// When records reach the disk (default [`Fsync::EveryBatch`]).
    pub fsync: Fsync,
    /// Keep principals' subjects in the log, not only their keyed digests (default `true`).
    pub subjects: bool,
    /// What destructive calls get while the log is down (default [`WhenDown::FailClosed`]).
    pub when_down: WhenDown,
    /// This instance's name in its records (default: the host name and process id).
    pub instance: String,
}

impl Default for LogOptions {
    fn default() -> Self {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        Self {
            queue: 10_000,
            every_records: 10_000,
            every: Duration::from_secs(10),
            fsync: Fsync::default(),
            subjects: true,
            when_down: WhenDown::default(),
            instance: format!("{host}:{}", std::process::id()),
        }
    }
}

/// Where a log's records go: the writer thread owns it and calls nothing else. A
/// [`FileLog`] is one; a database table can be another.
pub trait LogSink: Send + 'static {
    /// Appends `records` (setting their `seq`) and answers the first one's number.
    ///
    /// # Errors
    /// The sink's; the log is then down until [`recover`](Self::recover) succeeds.
    fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError>;
    /// Signs a checkpoint of everything appended (none if nothing new).
    ///
    /// # Errors
    /// The sink's.
    fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError>;
    /// Makes the sink writable again after a failure, keeping what was written.
    ///
    /// # Errors
    /// The sink's, while it cannot.
    fn recover(&mut self) -> Result<(), LogError>;
    /// How many records it holds.
    fn size(&self) -> u64;
    /// Whether others append to it too (a shared database): the writer then calls
    /// [`checkpoint`](Self::checkpoint) every [`every`](LogOptions::every) even when it appended
    /// nothing itself, so that the signing instance signs what the others wrote.
    fn polls(&self) -> bool {
        false
    }
}

impl LogSink for FileLog {
    fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        FileLog::append(self, records)
    }
    fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        FileLog::checkpoint(self)
    }
    fn recover(&mut self) -> Result<(), LogError> {
        FileLog::recover(self)
    }
    fn size(&self) -> u64 {
        FileLog::size(self)
    }
}

type FlushReply = SyncSender<Result<Option<SignedCheckpoint>, String>>;

enum Command {
    Append(Box<Record>),
    /// Write what is queued, sign a checkpoint, answer.
    Flush(FlushReply),
}

struct Shared {
    /// False from a failed write until a recovery succeeds.
    healthy: AtomicBool,
    /// Records refused because the queue was full or the log down.
    dropped: AtomicU64,
}

/// A decision log a layer appends to ([`ConfirmLayerBuilder::audit_log`]). Clones share one
/// writer; the last one dropped writes a final checkpoint and stops it.
///
/// [`ConfirmLayerBuilder::audit_log`]: crate::ConfirmLayerBuilder
#[derive(Clone)]
pub struct AuditLog {
    sender: Option<SyncSender<Command>>,
    shared: Arc<Shared>,
    options: Arc<LogOptions>,
    verifier: VerifierKey,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("verifier", &self.verifier)
            .field("healthy", &self.is_healthy())
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// A log in the directory `dir` signed by `key`, recovered if it exists (see [`FileLog`]).
    ///
    /// # Errors
    /// [`LogError::Damaged`] if what was signed changed; [`LogError::Io`] if `dir` cannot be
    /// used.
    pub fn file(
        dir: impl Into<PathBuf>,
        key: LogKey,
        options: LogOptions,
    ) -> Result<Self, LogError> {
        let verifier = key.verifier();
        let log = FileLog::open(dir.into(), key, options.fsync)?;
        Self::new(log, verifier, options)
    }

    /// A log written to `sink` (e.g. a [`FileLog`]), whose checkpoints `verifier` checks.
    ///
    /// # Errors
    /// [`LogError::Io`] if the writer thread cannot be started.
    pub fn new(
        sink: impl LogSink,
        verifier: VerifierKey,
        options: LogOptions,
    ) -> Result<Self, LogError> {
        let log = sink;
        let (sender, receiver) = mpsc::sync_channel(options.queue.max(1));
        let shared = Arc::new(Shared {
            healthy: AtomicBool::new(true),
            dropped: AtomicU64::new(0),
        });
        let options = Arc::new(options);
        let thread = {
            let (shared, options) = (Arc::clone(&shared), Arc::clone(&options));
            std::thread::Builder::new()
                .name("mcp-confirm-log".into())
                .spawn(move || write_loop(log, &receiver, &shared, &options))?
        };
        Ok(Self {
            sender: Some(sender),
            shared,
            options,
            verifier,
            thread: Arc::new(Mutex::new(Some(thread))),
        })
    }

    /// The key that verifies this log's checkpoints (give it to auditors).
    pub fn verifier(&self) -> &VerifierKey {
        &self.verifier
    }

    /// How it is written.
    pub fn options(&self) -> &LogOptions {
        &self.options
    }

    /// Whether the last write succeeded (a down log is retried every
    /// [`every`](LogOptions::every)).
    pub fn is_healthy(&self) -> bool {
        self.shared.healthy.load(Ordering::Acquire)
    }

    /// Records refused so far because the queue was full or the log down.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Queues `record` (its `instance` is set here, its `seq` by the writer). Never waits.
    ///
    /// # Errors
    /// [`LogError::Unavailable`] if the log is down or its queue full: the record is not kept.
    pub fn append(&self, mut record: Record) -> Result<(), LogError> {
        let Some(sender) = &self.sender else {
            return Err(LogError::Unavailable);
        };
        if !self.is_healthy() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(LogError::Unavailable);
        }
        record.instance.clone_from(&self.options.instance);
        if !self.options.subjects {
            record.subject = None;
        }
        match sender.try_send(Command::Append(Box::new(record))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                Err(LogError::Unavailable)
            }
        }
    }

    /// Waits until everything queued is written and signs a checkpoint of it (none if nothing
    /// was appended since the last). Blocks the calling thread: for shutdown, tests and tools.
    ///
    /// # Errors
    /// [`LogError::Unavailable`] if the writer is gone; the write's error otherwise.
    pub fn flush(&self) -> Result<Option<SignedCheckpoint>, LogError> {
        let sender = self.sender.as_ref().ok_or(LogError::Unavailable)?;
        let (done, wait) = mpsc::sync_channel(1);
        sender
            .send(Command::Flush(done))
            .map_err(|_| LogError::Unavailable)?;
        wait.recv()
            .map_err(|_| LogError::Unavailable)?
            .map_err(LogError::Damaged)
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // The last handle: closing the queue makes the writer sign a final checkpoint and stop.
        if Arc::strong_count(&self.thread) == 1 {
            self.sender = None;
            if let Ok(mut thread) = self.thread.lock()
                && let Some(thread) = thread.take()
            {
                let _ = thread.join();
            }
        }
    }
}

/// How long a busy writer lets records gather before writing them.
const LINGER: Duration = Duration::from_millis(10);

/// The most records written at once.
const MAX_BATCH: usize = 4_096;

fn take(command: Command, batch: &mut Vec<Record>, flush: &mut Option<FlushReply>) {
    match command {
        Command::Append(record) => batch.push(*record),
        Command::Flush(done) => *flush = Some(done),
    }
}

/// The writer thread: batches what is queued, checkpoints on count, time and shutdown, and
/// recovers after a failed write.
fn write_loop(
    mut log: impl LogSink,
    receiver: &Receiver<Command>,
    shared: &Shared,
    options: &LogOptions,
) {
    let mut since_checkpoint = 0u64;
    let mut oldest_unsigned: Option<Instant> = None;
    let mut batch: Vec<Record> = Vec::new();
    // In a busy spell the writer sleeps for `LINGER` and takes what gathered, instead of being
    // woken by every record: on a loaded machine a wake-up per decision costs more than the
    // write. Idle, it blocks until the next record (or checkpoint) is due.
    let mut busy = false;
    loop {
        let wait = oldest_unsigned.map_or(options.every, |at| {
            options.every.saturating_sub(at.elapsed())
        });
        let mut flush = None;
        let mut timed_out = false;
        let mut closed = false;
        if busy {
            std::thread::sleep(LINGER);
        } else {
            match receiver.recv_timeout(wait) {
                Ok(command) => take(command, &mut batch, &mut flush),
                Err(RecvTimeoutError::Timeout) => timed_out = true,
                Err(RecvTimeoutError::Disconnected) => closed = true,
            }
        }
        // Take whatever else is queued: one write, one sync for all of it.
        while !closed && flush.is_none() && batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(command) => take(command, &mut batch, &mut flush),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => closed = true,
            }
        }
        busy = !batch.is_empty() && flush.is_none();
        if !shared.healthy.load(Ordering::Acquire) {
            // Down: what was queued is lost (each was counted when the layer refused the next);
            // try to recover on every wake-up.
            shared
                .dropped
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            batch.clear();
            match log.recover() {
                Ok(()) => {
                    shared.healthy.store(true, Ordering::Release);
                    tracing::warn!(target: crate::audit::TARGET, decision = "log_up",
                        records = log.size(), "the decision log is written again");
                }
                Err(e) => {
                    if let Some(done) = flush {
                        let _ = done.send(Err(e.to_string()));
                    }
                    if closed {
                        return;
                    }
                    continue;
                }
            }
        }
        if !batch.is_empty() {
            let count = batch.len() as u64;
            match log.append(&mut batch) {
                Ok(_) => {
                    since_checkpoint += count;
                    oldest_unsigned.get_or_insert_with(Instant::now);
                }
                Err(e) => {
                    shared.healthy.store(false, Ordering::Release);
                    shared.dropped.fetch_add(count, Ordering::Relaxed);
                    tracing::error!(target: crate::audit::TARGET, decision = "log_down",
                        error = %e, "the decision log cannot be written");
                }
            }
            batch.clear();
        }
        let due = since_checkpoint >= options.every_records
            || oldest_unsigned.is_some_and(|at| at.elapsed() >= options.every)
            || flush.is_some()
            || closed
            || (timed_out && log.polls());
        if due && shared.healthy.load(Ordering::Acquire) {
            let signed = log.checkpoint();
            match &signed {
                Ok(_) => {
                    since_checkpoint = 0;
                    oldest_unsigned = None;
                }
                Err(e) => {
                    shared.healthy.store(false, Ordering::Release);
                    tracing::error!(target: crate::audit::TARGET, decision = "log_down",
                        error = %e, "the decision log's checkpoint cannot be written");
                }
            }
            if let Some(done) = flush.take() {
                let _ = done.send(signed.map_err(|e| e.to_string()));
            }
        } else if let Some(done) = flush.take() {
            let _ = done.send(Err("the decision log is down".into()));
        }
        if closed {
            return;
        }
    }
}
