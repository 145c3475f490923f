//! The handle a layer appends through: a bounded queue in front of one writer thread, which
//! batches, checkpoints and recovers the log. A record that lets a call run is appended with
//! [`AuditLog::append_durable`], whose future resolves only once the record is written (and
//! synced, per [`Fsync`]); everything else never waits. A sink whose append is only a write into
//! the page cache ([`LogSink::appends_inline`]: the file sink, unless it syncs before answering)
//! is written on the caller's thread when it is free and nothing queued is still unwritten: no
//! hand-off to the writer thread and back, which is most of what a record cost a busy server.
//! There a durable record waits one turn of its caller's executor before it is written, so that
//! the calls ready on the same thread add theirs: one write for several decisions, each
//! answered only once that write is done. A full queue or a failed write makes the log *down*,
//! and the layer then follows its [`WhenDown`] policy. The log is up again only once a write
//! and its sync succeeded (the writer probes with a `log_resumed` record, backing off while the
//! sink stays down), never merely because the sink could be reopened.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::LogError;
use super::checkpoint::{LogKey, SignedCheckpoint, VerifierKey};
use super::file::{FileLog, Fsync};
use super::record::Record;

pub use mcp_confirm::audit::WhenDown;

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
    /// Where a file log keeps its signer's view (default: in the log's directory). See
    /// [`FileOptions::view`](super::file::FileOptions::view).
    pub view: Option<PathBuf>,
    /// Where checkpoints go beyond this machine (default: nowhere). See
    /// [`witness`](super::witness).
    pub witnesses: Vec<Arc<dyn super::witness::Witness>>,
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
            view: None,
            witnesses: Vec::new(),
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
    /// Whether an append is only a short write on the calling thread (no sync, no network, no
    /// runtime of its own), so that a handle may append on the caller's (async) thread when the
    /// log is free instead of handing the record to the writer thread (default `false`).
    fn appends_inline(&self) -> bool {
        false
    }
    /// Whether others append to it too (a shared database): the writer then calls
    /// [`checkpoint`](Self::checkpoint) every [`every`](LogOptions::every) even when it appended
    /// nothing itself, so that the signing instance signs what the others wrote.
    fn polls(&self) -> bool {
        false
    }
    /// What it is kept in, as metrics label it: `file`, `postgres`; `custom` by default.
    fn backend(&self) -> &'static str {
        "custom"
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
    fn appends_inline(&self) -> bool {
        FileLog::appends_inline(self)
    }
    fn backend(&self) -> &'static str {
        "file"
    }
}

type FlushReply = SyncSender<Result<Option<SignedCheckpoint>, String>>;

/// Answers a durable append: the record's number once written, or the failure.
type Ack = oneshot::Sender<Result<u64, ()>>;

enum Command {
    /// A record, and whom to tell once it is written (a durable append).
    Append(Box<Record>, Option<Ack>),
    /// Write what is queued, sign a checkpoint, answer.
    Flush(FlushReply),
    /// Look again: an append on a caller's thread made a checkpoint due or took the log down.
    Nudge,
}

/// Resolves once a record appended with [`AuditLog::append_durable`] is written: to its
/// sequence number, or to [`LogError::Unavailable`] if the write failed (the record is then not
/// in the log, and whatever it would have let run must not run).
#[derive(Debug)]
#[must_use = "a durable append means nothing until it resolves"]
pub struct Durable {
    written: Written,
}

#[derive(Debug)]
enum Written {
    /// Written on the caller's thread: the answer is known.
    Now(Option<Result<u64, ()>>),
    /// Handed to the writer thread.
    Later(oneshot::Receiver<Result<u64, ()>>),
    /// Held on callers' side for one turn of the executor, then written by whoever comes first.
    Deferred(Deferred),
}

impl std::future::Future for Durable {
    type Output = Result<u64, LogError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let answer = match &mut self.written {
            Written::Now(answer) => std::task::Poll::Ready(answer.take().ok_or(())),
            Written::Later(written) => std::pin::Pin::new(written)
                .poll(cx)
                .map(|answer| answer.map_err(|_| ())),
            Written::Deferred(deferred) => deferred.poll(cx).map(Ok),
        };
        answer.map(|answer| match answer {
            Ok(Ok(seq)) => Ok(seq),
            Ok(Err(())) | Err(()) => Err(LogError::Unavailable),
        })
    }
}

/// A durable record held on callers' side: the future yields once, so that the other calls
/// ready on its thread may add theirs, and then writes everything held in one write, unless
/// another such future (or the writer thread) did first. Under load that write, not the
/// record, is what the log costs a decision.
struct Deferred {
    answer: oneshot::Receiver<Result<u64, ()>>,
    /// The yield, until it is done: a runtime's own runs it again only once the thread has
    /// nothing else ready (on Tokio, after its I/O was polled too), so the most calls join it.
    yielding: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    appender: Appender,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("yielded", &self.yielding.is_none())
            .finish_non_exhaustive()
    }
}

impl Deferred {
    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<u64, ()>> {
        use std::task::Poll;
        fn answered(
            answer: &mut oneshot::Receiver<Result<u64, ()>>,
            cx: &mut std::task::Context<'_>,
        ) -> Poll<Result<u64, ()>> {
            std::pin::Pin::new(answer)
                .poll(cx)
                .map(|answer| answer.unwrap_or(Err(())))
        }
        if let Poll::Ready(answer) = answered(&mut self.answer, cx) {
            return Poll::Ready(answer);
        }
        if let Some(yielding) = &mut self.yielding {
            if yielding.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.yielding = None;
        }
        // The writer thread holding the sink (or about to) took it after this record was held,
        // so its round writes the record, or refuses it, and answers: nothing to do but wait.
        if !self.appender.shared.writer_holds.load(Ordering::SeqCst) {
            let mut core = lock(&self.appender.core);
            let _ = self.appender.write_held(&mut core);
        }
        answered(&mut self.answer, cx)
    }
}

/// What a caller's thread needs to write what is held. It does not keep the queue open: the
/// last [`AuditLog`] dropped closes it, and the writer then writes what is held and stops,
/// whatever futures still wait.
struct Appender {
    core: Arc<Mutex<Core>>,
    shared: Arc<Shared>,
    every_records: u64,
    sender: std::sync::Weak<SyncSender<Command>>,
}

impl Appender {
    /// Wakes the writer thread to look again (a checkpoint is due, or the log went down).
    fn nudge(&self) {
        if let Some(sender) = self.sender.upgrade() {
            let _ = sender.try_send(Command::Nudge);
        }
    }

    /// Writes everything held, in one write, and answers whoever waits on it. `Ok`: the first
    /// record's number; `Err`: the log is down now.
    fn write_held(&self, core: &mut Core) -> Result<u64, ()> {
        let count = core.held.records.len() as u64;
        if count == 0 {
            return Ok(core.log.size());
        }
        let answer = match core.log.append(&mut core.held.records) {
            Ok(first) => {
                core.appended(count);
                if core.since_checkpoint >= self.every_records {
                    self.nudge();
                }
                Ok(first)
            }
            Err(e) => {
                // Down before anyone hears of it; the writer thread probes it back up.
                self.shared.healthy.store(false, Ordering::Release);
                self.shared.dropped.fetch_add(count, Ordering::Relaxed);
                log_down(core.log.backend(), &e, "cannot be written");
                self.nudge();
                Err(())
            }
        };
        core.held.answer(answer);
        answer
    }
}

struct Shared {
    /// False from a failed write until a recovery succeeds.
    healthy: AtomicBool,
    /// Records refused because the queue was full or the log down.
    dropped: AtomicU64,
    /// The writer is parked for `LINGER`: a durable append wakes it.
    lingering: AtomicBool,
    /// Durable appends queued so far (the writer compares with those it took before parking).
    durable_sent: AtomicU64,
    /// Records queued and not yet written (or refused) by the writer: while any are, a caller
    /// does not append on its own thread, so the log keeps the order records were made in.
    unwritten: AtomicU64,
    /// The writer thread holds the sink (to write, sign or probe, which may take a while): a
    /// caller queues its record rather than wait for it.
    writer_holds: AtomicBool,
    /// The writer wakes every [`HOLD`] to write held records: a caller holding the first one
    /// need not wake it.
    ticking: AtomicBool,
    /// Rounds of the writer loop so far (each a wake-up: they must stay few when idle or down).
    rounds: AtomicU64,
}

/// The sink and what the writer thread and the callers appending on their own threads share
/// about it, under one lock.
struct Core {
    log: Box<dyn LogSink>,
    /// Records appended since the last checkpoint, and when the first of them was.
    since_checkpoint: u64,
    oldest_unsigned: Option<Instant>,
    /// Records that let nothing run, appended on callers' threads but not yet written: they go
    /// out with the next record that does let something run (one write for both), or within
    /// [`HOLD`] from the writer thread. In order, before anything queued after them. Durable
    /// records are held too, for one turn of their caller's executor ([`Deferred`]).
    held: Batch,
}

impl Core {
    fn appended(&mut self, count: u64) {
        self.since_checkpoint += count;
        self.oldest_unsigned.get_or_insert_with(Instant::now);
    }
}

/// A decision log a layer appends to ([`ConfirmLayerBuilder::audit_log`]). Clones share one
/// writer; the last one dropped writes a final checkpoint and stops it.
///
/// [`ConfirmLayerBuilder::audit_log`]: mcp_confirm::ConfirmLayerBuilder::audit_log
#[derive(Clone)]
pub struct AuditLog {
    /// Shared by the clones; the last one dropped closes the queue.
    sender: Option<Arc<SyncSender<Command>>>,
    shared: Arc<Shared>,
    options: Arc<LogOptions>,
    verifier: VerifierKey,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// The writer, to wake from a linger when someone waits on a record.
    writer: std::thread::Thread,
    /// The sink, for appends on the caller's thread.
    core: Arc<Mutex<Core>>,
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
        let file = super::file::FileOptions {
            fsync: options.fsync,
            view: options.view.clone(),
            witnesses: options.witnesses.clone(),
        };
        let log = FileLog::open_with(dir.into(), key, file)?;
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
        let core = Arc::new(Mutex::new(Core {
            log: Box::new(sink),
            since_checkpoint: 0,
            oldest_unsigned: None,
            held: Batch::default(),
        }));
        let (sender, receiver) = mpsc::sync_channel(options.queue.max(1));
        let shared = Arc::new(Shared {
            healthy: AtomicBool::new(true),
            dropped: AtomicU64::new(0),
            lingering: AtomicBool::new(false),
            durable_sent: AtomicU64::new(0),
            unwritten: AtomicU64::new(0),
            writer_holds: AtomicBool::new(false),
            ticking: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
        });
        let options = Arc::new(options);
        let thread = {
            let (shared, options, core) =
                (Arc::clone(&shared), Arc::clone(&options), Arc::clone(&core));
            std::thread::Builder::new()
                .name("mcp-confirm-log".into())
                .spawn(move || write_loop(&core, &receiver, &shared, &options))?
        };
        Ok(Self {
            sender: Some(Arc::new(sender)),
            shared,
            options,
            verifier,
            writer: thread.thread().clone(),
            thread: Arc::new(Mutex::new(Some(thread))),
            core,
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

    /// Queues `record` (its `instance` is set here, its `seq` by the writer). Never waits, and
    /// says nothing about whether it will be written: for records that let nothing run. A sink
    /// written on callers' threads holds it for at most 10 ms and writes it with the
    /// next durable record, so a decision costs one write, not two; a crash in between loses it,
    /// never a record that let something run.
    ///
    /// # Errors
    /// [`LogError::Unavailable`] if the log is down or its queue full: the record is not kept.
    pub fn append(&self, record: Record) -> Result<(), LogError> {
        match self.append_inline(record, false) {
            Ok(Inline::Written(written)) => written.map(|_| ()),
            Ok(Inline::Held | Inline::Waiting(_)) => Ok(()),
            Err(record) => self.enqueue(record, None),
        }
    }

    /// Appends `record` and answers a future that resolves once it is written and synced (per
    /// [`LogOptions::fsync`]): what a decision that lets a call run waits for. Records waited
    /// on together go out in one write (and one sync), so waiting costs latency, not
    /// throughput: on a sink written on callers' threads the future lets the other calls ready
    /// on its thread go first, once, and then writes what they held with its own.
    ///
    /// # Errors
    /// [`LogError::Unavailable`] if the log is down or its queue full, at once; a write that
    /// fails resolves the future to it.
    pub fn append_durable(&self, record: Record) -> Result<Durable, LogError> {
        let record = match self.append_inline(record, true) {
            Ok(Inline::Written(written)) => {
                let seq = written?;
                return Ok(Durable {
                    written: Written::Now(Some(Ok(seq))),
                });
            }
            Ok(Inline::Waiting(answer)) => {
                return Ok(Durable {
                    written: Written::Deferred(Deferred {
                        answer,
                        yielding: Some(Box::pin(tokio::task::yield_now())),
                        appender: self.appender(),
                    }),
                });
            }
            // Not for a durable record: it is always waited on.
            Ok(Inline::Held) => return Err(LogError::Unavailable),
            Err(record) => record,
        };
        let (ack, written) = oneshot::channel();
        self.enqueue(record, Some(ack))?;
        Ok(Durable {
            written: Written::Later(written),
        })
    }

    /// What a caller's thread needs to write what is held.
    fn appender(&self) -> Appender {
        Appender {
            core: Arc::clone(&self.core),
            shared: Arc::clone(&self.shared),
            every_records: self.options.every_records,
            sender: self
                .sender
                .as_ref()
                .map_or_else(std::sync::Weak::new, Arc::downgrade),
        }
    }

    /// What this instance sets on every record it makes.
    fn stamp(&self, record: &mut Record) {
        record.instance.clone_from(&self.options.instance);
        if !self.options.subjects {
            record.subject = None;
        }
    }

    /// Holds `record` on callers' side if the sink allows it, the log is up, the writer thread
    /// is not holding the sink (it may be signing or recovering; other callers hold it for one
    /// write each, and are waited for), and nothing queued is still unwritten. Past
    /// [`HOLD_MAX`] held records, they are written at once, on this thread, in one write.
    /// `Err`: it was not appended, queue it.
    fn append_inline(&self, mut record: Record, durable: bool) -> Result<Inline, Box<Record>> {
        if self.sender.is_none()
            || !self.is_healthy()
            || self.shared.unwritten.load(Ordering::SeqCst) != 0
            || self.shared.writer_holds.load(Ordering::SeqCst)
        {
            return Err(Box::new(record));
        }
        let Ok(mut core) = self.core.lock() else {
            return Err(Box::new(record));
        };
        // Checked again under the lock: the writer writes (or refuses) what it took, and
        // counts it out, while holding it.
        if !core.log.appends_inline()
            || !self.is_healthy()
            || self.shared.unwritten.load(Ordering::SeqCst) != 0
        {
            return Err(Box::new(record));
        }
        self.stamp(&mut record);
        if core.held.records.len() < HOLD_MAX {
            let first = core.held.records.is_empty();
            let (ack, answer) = if durable {
                let (ack, answer) = oneshot::channel();
                (Some(ack), Some(answer))
            } else {
                (None, None)
            };
            core.held.hold(record, ack);
            // Read after the push, under the lock: a writer that stopped ticking before this
            // found nothing held, so it is woken here; one still ticking writes it in time
            // (should whoever waits on it go away first).
            if first && !self.shared.ticking.load(Ordering::SeqCst) {
                drop(core);
                self.nudge();
            }
            return Ok(answer.map_or(Inline::Held, Inline::Waiting));
        }
        core.held.hold(record, None);
        let count = core.held.records.len() as u64;
        let written = self.appender().write_held(&mut core);
        Ok(Inline::Written(
            written
                .map(|first| first + count - 1)
                .map_err(|()| LogError::Unavailable),
        ))
    }

    /// Wakes the writer thread to look again.
    fn nudge(&self) {
        if let Some(sender) = &self.sender {
            let _ = sender.try_send(Command::Nudge);
        }
        self.writer.unpark();
    }

    fn enqueue(&self, mut record: Box<Record>, ack: Option<Ack>) -> Result<(), LogError> {
        let Some(sender) = &self.sender else {
            return Err(LogError::Unavailable);
        };
        if !self.is_healthy() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(LogError::Unavailable);
        }
        self.stamp(&mut record);
        let waited_on = ack.is_some();
        // Counted before it can be taken: the writer counts it out once written.
        self.shared.unwritten.fetch_add(1, Ordering::SeqCst);
        match sender.try_send(Command::Append(record, ack)) {
            Ok(()) => {
                if waited_on {
                    // A lingering writer takes it now: someone is waiting. (Either the writer
                    // sees this count before it parks, or this sees it lingering.)
                    self.shared.durable_sent.fetch_add(1, Ordering::SeqCst);
                    if self.shared.lingering.load(Ordering::SeqCst) {
                        self.writer.unpark();
                    }
                }
                Ok(())
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.unwritten.fetch_sub(1, Ordering::SeqCst);
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

/// Where [`AuditLog::append_inline`] left a record.
enum Inline {
    /// Held, no one waits on it.
    Held,
    /// Held; the answer comes once it is written.
    Waiting(oneshot::Receiver<Result<u64, ()>>),
    /// Written at once, with everything held: its number, or the failure.
    Written(Result<u64, LogError>),
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

/// How long a busy writer lets records gather before writing them, when no one waits on them.
const LINGER: Duration = Duration::from_millis(10);

/// How long a record no one waits on may be held on callers' side before the writer thread
/// writes it, and how many at most (past it, the next is written at once with them).
const HOLD: Duration = Duration::from_millis(10);
const HOLD_MAX: usize = 256;

/// The writer stops waking every [`HOLD`] once nothing was held for this long.
const TICK_IDLE: Duration = Duration::from_secs(1);

/// How long a writer gathers records waited on when several decisions waited on the last
/// write: with concurrent decisions, one write for several costs each a little latency and saves
/// the process a wake-up and a write per decision. (Longer, growing with the waiters, cost more
/// in latency than it saved at 8 concurrent flows: BENCHMARKS.md (f).)
const GATHER: Duration = Duration::from_micros(250);

/// The most records written at once.
const MAX_BATCH: usize = 4_096;

/// The first wait before probing a sink that is down again, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the writer took from the queue in one round.
#[derive(Default)]
struct Batch {
    records: Vec<Record>,
    /// One per record; `None` where no one waits.
    acks: Vec<Option<Ack>>,
    /// Durable appends taken from the queue so far.
    durable_taken: u64,
}

impl Batch {
    fn hold(&mut self, record: Record, ack: Option<Ack>) {
        self.records.push(record);
        self.acks.push(ack);
    }

    fn take(&mut self, command: Command, flush: &mut Option<FlushReply>) {
        match command {
            Command::Append(record, ack) => {
                self.records.push(*record);
                self.durable_taken += u64::from(ack.is_some());
                self.acks.push(ack);
            }
            Command::Flush(done) => *flush = Some(done),
            Command::Nudge => {}
        }
    }

    fn waited_on(&self) -> bool {
        self.acks.iter().any(Option::is_some)
    }

    /// Tells whoever waits how the write ended, and empties the batch.
    fn answer(&mut self, written: Result<u64, ()>) {
        for (i, ack) in self.acks.drain(..).enumerate() {
            if let Some(ack) = ack {
                let _ = ack.send(written.map(|first| first + i as u64));
            }
        }
        self.records.clear();
    }
}

/// The writer's view of whether the sink takes records.
enum Health {
    Up,
    /// Down since a failed write; the next probe no earlier than `retry_at`.
    Down {
        retry_at: Instant,
        backoff: Duration,
        refused: u64,
    },
}

/// The writer thread: batches what is queued, answers durable appends once written,
/// checkpoints on count, time and shutdown, and brings a failed sink back only by a write that
/// succeeded. It holds the sink's lock only to write, sign and probe, never while it waits.
fn write_loop(
    core: &Mutex<Core>,
    receiver: &Receiver<Command>,
    shared: &Shared,
    options: &LogOptions,
) {
    let mut batch = Batch::default();
    let mut health = Health::Up;
    // In a busy spell the writer parks for `LINGER` and takes what gathered, instead of being
    // woken by every record; a durable append wakes it (someone waits), and while records are
    // waited on it does not linger at all: the sync it is about to do is the grouping.
    let mut linger = false;
    let mut gather = Duration::ZERO;
    let mut last_held: Option<Instant> = None;
    loop {
        // Ticking is given up before looking at what is held: a caller that holds a record
        // after this look sees it given up, and wakes the writer.
        let mut ticking = last_held.is_some_and(|at| at.elapsed() < TICK_IDLE);
        shared.ticking.store(ticking, Ordering::SeqCst);
        let (oldest_unsigned, holding) = {
            let core = lock(core);
            (core.oldest_unsigned, !core.held.records.is_empty())
        };
        if holding {
            last_held = Some(Instant::now());
            ticking = true;
            shared.ticking.store(true, Ordering::SeqCst);
        }
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        let mut wait = match &health {
            // Nothing is signed while down: the next probe is what to wake for, not an overdue
            // checkpoint (waiting for that one would be no wait at all: a busy loop).
            Health::Down { retry_at, .. } => retry_at.saturating_duration_since(Instant::now()),
            Health::Up => oldest_unsigned.map_or(options.every, |at| {
                options.every.saturating_sub(at.elapsed())
            }),
        };
        if ticking {
            wait = wait.min(HOLD);
        }
        let mut flush = None;
        let mut timed_out = false;
        let mut closed = false;
        if linger {
            shared.lingering.store(true, Ordering::SeqCst);
            if shared.durable_sent.load(Ordering::SeqCst) == batch.durable_taken {
                std::thread::park_timeout(LINGER);
            }
            shared.lingering.store(false, Ordering::SeqCst);
        } else {
            match receiver.recv_timeout(wait) {
                Ok(command) => {
                    // A caller held a record while it was not ticking: tick again for a while.
                    // Looking for held records alone is not enough to keep ticking, as the next
                    // durable append on a caller's thread usually writes them first, and each
                    // call's first record would then wake the writer (thousands a second).
                    if matches!(command, Command::Nudge) {
                        last_held = Some(Instant::now());
                    }
                    batch.take(command, &mut flush);
                    if !gather.is_zero() && flush.is_none() {
                        std::thread::sleep(gather);
                    }
                }
                Err(RecvTimeoutError::Timeout) => timed_out = true,
                Err(RecvTimeoutError::Disconnected) => closed = true,
            }
        }
        // Take whatever else is queued: one write, one sync for all of it.
        while !closed && flush.is_none() && batch.records.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(command) => batch.take(command, &mut flush),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => closed = true,
            }
        }
        let waited = batch.acks.iter().filter(|a| a.is_some()).count();
        gather = if waited >= 2 { GATHER } else { Duration::ZERO };
        let mut core = Held::take(core, shared);
        // A sink written on callers' threads is not lingered over: while anything queued is
        // unwritten, callers queue too, so what is queued is written at once.
        linger = !batch.records.is_empty()
            && flush.is_none()
            && !batch.waited_on()
            && !core.log.appends_inline();
        let taken = batch.records.len() as u64;
        // A caller's append failed on its own thread since the last round (one record: after
        // it, no caller appends until the log is up again).
        if matches!(health, Health::Up) && !shared.healthy.load(Ordering::Acquire) {
            health = Health::Down {
                retry_at: Instant::now() + BACKOFF_FIRST,
                backoff: BACKOFF_FIRST,
                refused: 1,
            };
        }
        if let Health::Down {
            retry_at,
            backoff,
            refused,
        } = &mut health
        {
            // Down: what was queued or held is refused (the layer refused what it let wait on
            // it), and the sink is probed when its backoff allows, with a record of the outage.
            let held = core.held.records.len() as u64;
            core.held.answer(Err(()));
            *refused += taken + held;
            shared.dropped.fetch_add(taken + held, Ordering::Relaxed);
            batch.answer(Err(()));
            shared.unwritten.fetch_sub(taken, Ordering::SeqCst);
            if Instant::now() >= *retry_at || closed || flush.is_some() {
                match probe(&mut *core.log, options, *refused) {
                    Ok(()) => {
                        health = Health::Up;
                        core.appended(1);
                        shared.healthy.store(true, Ordering::Release);
                        tracing::warn!(target: mcp_confirm::audit::TARGET, decision = "log_up",
                            records = core.log.size(), "the decision log is written again");
                    }
                    Err(e) => {
                        *backoff = (*backoff * 2).min(BACKOFF_MAX);
                        *retry_at = Instant::now() + *backoff;
                        tracing::debug!(target: mcp_confirm::audit::TARGET, error = %e,
                            retry_in_ms = backoff.as_millis() as u64,
                            "the decision log is still down");
                    }
                }
            }
            if matches!(health, Health::Down { .. }) {
                if let Some(done) = flush.take() {
                    let _ = done.send(Err("the decision log is down".into()));
                }
                if closed {
                    return;
                }
                continue;
            }
        }
        // What callers hold goes first: it was made before anything queued (callers queue only
        // while something queued is unwritten, and hold only while nothing is).
        if !core.held.records.is_empty() {
            let held = &mut core.held;
            batch.records.splice(0..0, held.records.drain(..));
            batch.acks.splice(0..0, held.acks.drain(..));
        }
        if !batch.records.is_empty() {
            let count = batch.records.len() as u64;
            match core.log.append(&mut batch.records) {
                Ok(first) => {
                    core.appended(count);
                    batch.answer(Ok(first));
                }
                Err(e) => {
                    // Down before anyone hears of it: the next decision is refused at once.
                    let backend = core.log.backend();
                    go_down(shared, &mut health, count, &e, backend, "cannot be written");
                    shared.dropped.fetch_add(count, Ordering::Relaxed);
                    batch.answer(Err(()));
                }
            }
            // Counted out under the lock: a caller appending on its own thread after this sees
            // every record queued before its own already written.
            shared.unwritten.fetch_sub(taken, Ordering::SeqCst);
        }
        let due = core.since_checkpoint >= options.every_records
            || core
                .oldest_unsigned
                .is_some_and(|at| at.elapsed() >= options.every)
            || flush.is_some()
            || closed
            || (timed_out && core.log.polls());
        if due && matches!(health, Health::Up) {
            let signed = core.log.checkpoint();
            match &signed {
                Ok(new) => {
                    core.since_checkpoint = 0;
                    core.oldest_unsigned = None;
                    #[cfg(feature = "metrics")]
                    super::metrics::checkpointed(
                        core.log.backend(),
                        new.is_some(),
                        core.log.size(),
                    );
                    #[cfg(not(feature = "metrics"))]
                    let _ = new;
                }
                Err(e) => {
                    let backend = core.log.backend();
                    go_down(shared, &mut health, 0, e, backend, "cannot be checkpointed");
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

/// The writer thread's hold on the sink: callers queue their records while it lasts.
struct Held<'a> {
    core: std::sync::MutexGuard<'a, Core>,
    shared: &'a Shared,
}

impl<'a> Held<'a> {
    fn take(core: &'a Mutex<Core>, shared: &'a Shared) -> Self {
        shared.writer_holds.store(true, Ordering::SeqCst);
        Self {
            core: lock(core),
            shared,
        }
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.core
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.shared.writer_holds.store(false, Ordering::SeqCst);
    }
}

/// The sink's lock: a thread that panicked while holding it left the sink as it was (every
/// append is one write, answered after), so the lock is taken back.
fn lock(core: &Mutex<Core>) -> std::sync::MutexGuard<'_, Core> {
    core.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Marks the log down after `error`, and lets the sink drop what it may have half-written.
fn go_down(
    shared: &Shared,
    health: &mut Health,
    refused: u64,
    error: &LogError,
    backend: &'static str,
    what: &str,
) {
    shared.healthy.store(false, Ordering::Release);
    *health = Health::Down {
        retry_at: Instant::now() + BACKOFF_FIRST,
        backoff: BACKOFF_FIRST,
        refused,
    };
    log_down(backend, error, what);
}

/// Says at error level that the log went down, and why.
fn log_down(backend: &'static str, error: &LogError, what: &str) {
    #[cfg(feature = "metrics")]
    super::metrics::failed(backend, matches!(error, LogError::Damaged(_)));
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
    if let LogError::Damaged(why) = error {
        tracing::error!(target: mcp_confirm::audit::TARGET, decision = "log_damaged",
            error = %why,
            "the decision log was changed by someone other than its writer: nothing more is \
             signed and calls that need a record are refused until an operator inspects it \
             (mcp-confirm-audit inspect)");
    } else {
        tracing::error!(target: mcp_confirm::audit::TARGET, decision = "log_down",
            error = %error, "the decision log {what}");
    }
}

/// Tries to bring a sink that failed back: it drops what it half-wrote, then a record of the
/// outage must be written (and synced) before anything else is.
fn probe(log: &mut dyn LogSink, options: &LogOptions, refused: u64) -> Result<(), LogError> {
    log.recover()?;
    let mut record = Record::new("log_resumed");
    record.at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    record.instance.clone_from(&options.instance);
    record.reason = Some(format!(
        "{refused} records were refused while the log could not be written"
    ));
    log.append(std::slice::from_mut(&mut record)).map(|_| ())
}

impl mcp_confirm::audit::DecisionLog for AuditLog {
    fn when_down(&self) -> WhenDown {
        self.options.when_down
    }

    fn is_healthy(&self) -> bool {
        AuditLog::is_healthy(self)
    }

    fn append(
        &self,
        entry: mcp_confirm::audit::LogEntry,
    ) -> Result<(), mcp_confirm::audit::LogDown> {
        AuditLog::append(self, Record::from(entry)).map_err(|_| mcp_confirm::audit::LogDown)
    }

    fn append_durable(
        &self,
        entry: mcp_confirm::audit::LogEntry,
    ) -> Result<mcp_confirm::audit::DurableWrite, mcp_confirm::audit::LogDown> {
        let durable = AuditLog::append_durable(self, Record::from(entry))
            .map_err(|_| mcp_confirm::audit::LogDown)?;
        Ok(Box::pin(async move {
            durable
                .await
                .map(|_| ())
                .map_err(|_| mcp_confirm::audit::LogDown)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that keeps each record's event and the thread that wrote it.
    struct Kept {
        written: Arc<Mutex<Vec<(String, std::thread::ThreadId)>>>,
        failing: Arc<AtomicBool>,
        /// How many records each call of `append` was given, successful or not.
        writes: Writes,
    }

    impl LogSink for Kept {
        fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
            self.writes.lock().unwrap().push(records.len());
            if self.failing.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("no space left on device").into());
            }
            let mut written = self.written.lock().unwrap();
            let first = written.len() as u64;
            for (i, record) in records.iter_mut().enumerate() {
                record.seq = first + i as u64;
                written.push((record.event.clone(), std::thread::current().id()));
            }
            Ok(first)
        }
        fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
            Ok(None)
        }
        fn recover(&mut self) -> Result<(), LogError> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.written.lock().unwrap().len() as u64
        }
        fn appends_inline(&self) -> bool {
            true
        }
    }

    type Events = Arc<Mutex<Vec<(String, std::thread::ThreadId)>>>;
    type Writes = Arc<Mutex<Vec<usize>>>;

    fn kept() -> (AuditLog, Events, Arc<AtomicBool>) {
        let (log, written, failing, _) = kept_counting();
        (log, written, failing)
    }

    fn kept_counting() -> (AuditLog, Events, Arc<AtomicBool>, Writes) {
        kept_with(LogOptions::default())
    }

    fn kept_with(options: LogOptions) -> (AuditLog, Events, Arc<AtomicBool>, Writes) {
        let written = Events::default();
        let failing = Arc::new(AtomicBool::new(false));
        let writes = Writes::default();
        let sink = Kept {
            written: Arc::clone(&written),
            failing: Arc::clone(&failing),
            writes: Arc::clone(&writes),
        };
        let key = LogKey::from_seed("test.example/log", [7; 32]).unwrap();
        let log = AuditLog::new(sink, key.verifier(), options).unwrap();
        (log, written, failing, writes)
    }

    /// How many times the sink was written to.
    fn count(writes: &Writes) -> usize {
        writes.lock().unwrap().len()
    }

    fn events(written: &Events) -> Vec<String> {
        written
            .lock()
            .unwrap()
            .iter()
            .map(|w| w.0.clone())
            .collect()
    }

    /// Keeps the writer thread out of the test's way: once it has started (and is waiting for
    /// its first checkpoint, seconds away), holding a record does not wake it.
    fn quiet(log: &AuditLog) {
        while log.shared.rounds.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        log.shared.ticking.store(true, Ordering::SeqCst);
    }

    /// Waits (at most 5 s) until `written` holds `count` records.
    fn wait_for(written: &Events, count: usize) {
        for _ in 0..2_500 {
            if written.lock().unwrap().len() >= count {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("never written: {:?}", events(written));
    }

    #[test]
    fn a_record_no_one_waits_on_goes_out_with_the_next_durable_one_in_one_write() {
        let (log, written, _, writes) = kept_counting();
        quiet(&log);
        log.append(Record::new("challenged")).unwrap();
        log.append(Record::new("declined")).unwrap();
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        // The durable record's own number, after the two held before it.
        assert_eq!(block_on(durable).unwrap(), 2);
        assert_eq!(count(&writes), 1);
        assert_eq!(events(&written), ["challenged", "declined", "accepted"]);
    }

    #[test]
    fn a_durable_record_is_answered_only_once_written() {
        let (log, written, _, writes) = kept_counting();
        quiet(&log);
        let mut durable = log.append_durable(Record::new("accepted")).unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // The first poll lets the calls ready on this thread go first: nothing written yet,
        // and no answer.
        assert!(std::pin::Pin::new(&mut durable).poll(&mut cx).is_pending());
        assert!(events(&written).is_empty());
        assert_eq!(count(&writes), 0);
        // The next writes it, on this thread, and answers.
        let answer = std::pin::Pin::new(&mut durable).poll(&mut cx);
        assert!(matches!(answer, std::task::Poll::Ready(Ok(0))));
        assert_eq!(
            written.lock().unwrap().clone(),
            [("accepted".into(), std::thread::current().id())]
        );
    }

    #[test]
    fn durable_records_made_in_one_turn_go_out_in_one_write_each_with_its_number() {
        let (log, written, _, writes) = kept_counting();
        quiet(&log);
        let numbers = on_one_thread(5, |i| {
            let log = log.clone();
            async move {
                log.append(Record::new("challenged")).unwrap();
                let seq = log
                    .append_durable(Record::new("accepted"))
                    .unwrap()
                    .await
                    .unwrap();
                (i, seq)
            }
        });
        // Five calls, ten records, one write, in the order they were made.
        assert_eq!(count(&writes), 1);
        assert_eq!(numbers, [(0, 1), (1, 3), (2, 5), (3, 7), (4, 9)]);
        assert_eq!(events(&written), ["challenged", "accepted"].repeat(5));
    }

    #[test]
    fn a_failed_write_refuses_every_call_that_waited_on_it() {
        let (log, written, failing, writes) = kept_counting();
        failing.store(true, Ordering::SeqCst);
        quiet(&log);
        let answers = on_one_thread(4, |_| {
            let log = log.clone();
            async move { log.append_durable(Record::new("accepted")).unwrap().await }
        });
        // One write tried for all four (the writer's probes after it are one record each), and
        // no call told to go on.
        assert_eq!(writes.lock().unwrap()[0], 4);
        assert!(
            answers
                .iter()
                .all(|a| matches!(a, Err(LogError::Unavailable))),
            "{answers:?}"
        );
        assert_eq!(log.dropped(), 4);
        assert!(!log.is_healthy());
        assert!(events(&written).is_empty());
    }

    /// Runs the `calls` tasks `call` makes on one current-thread runtime, all spawned before
    /// any runs, and answers what each returned, in order.
    fn on_one_thread<T, F>(calls: usize, call: impl Fn(usize) -> F) -> Vec<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = T> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let tasks: Vec<_> = (0..calls).map(|i| tokio::spawn(call(i))).collect();
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.unwrap());
            }
            answers
        })
    }

    /// Runs `work` on a thread of its own and answers whether it finished within 10 s (a hang
    /// detector: nothing here should take more than milliseconds).
    fn finishes(work: impl FnOnce() + Send + 'static) -> bool {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            work();
            let _ = done.send(());
        });
        finished.recv_timeout(Duration::from_secs(10)).is_ok()
    }

    #[test]
    fn dropping_the_last_handle_does_not_wait_for_a_durable_append_still_pending() {
        let (log, written, _, _) = kept_counting();
        quiet(&log);
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        // The last handle goes while the append has not even been polled: the writer writes
        // what is held, signs and stops; the append then hears it was written.
        assert!(finishes(move || drop(log)), "dropping the last handle hung");
        assert_eq!(events(&written), ["accepted"]);
        assert_eq!(block_on(durable).unwrap(), 0);
    }

    #[test]
    fn a_server_that_drops_its_log_while_a_call_on_its_thread_waits_stops() {
        let (log, written, _, _) = kept_counting();
        quiet(&log);
        let stopped = finishes(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
                let durable = log.append_durable(Record::new("accepted")).unwrap();
                let server = tokio::spawn(async move {
                    let _ = stopping.await;
                    drop(log);
                });
                let call = tokio::spawn(async move {
                    let _ = stop.send(());
                    durable.await
                });
                server.await.unwrap();
                assert_eq!(call.await.unwrap().unwrap(), 0);
            });
        });
        assert!(stopped, "the runtime hung");
        assert_eq!(events(&written), ["accepted"]);
    }

    #[test]
    fn a_durable_record_whose_caller_went_away_is_written_all_the_same() {
        let (log, written, _, _) = kept_counting();
        drop(log.append_durable(Record::new("accepted")).unwrap());
        wait_for(&written, 1);
        assert_eq!(events(&written), ["accepted"]);
    }

    #[test]
    fn a_held_record_is_written_by_the_writer_thread_when_nothing_follows_it() {
        let (log, written, _, _) = kept_counting();
        log.append(Record::new("challenged")).unwrap();
        wait_for(&written, 1);
        let written = written.lock().unwrap().clone();
        assert_eq!(written[0].0, "challenged");
        assert_ne!(
            written[0].1,
            std::thread::current().id(),
            "the writer wrote it"
        );
    }

    #[test]
    fn a_held_record_is_written_after_the_writer_stopped_ticking() {
        let (log, written, _, _) = kept_counting();
        log.append(Record::new("challenged")).unwrap();
        wait_for(&written, 1);
        // Idle for longer than the writer ticks: the next held record wakes it.
        std::thread::sleep(TICK_IDLE + HOLD * 5);
        assert!(!log.shared.ticking.load(Ordering::SeqCst));
        log.append(Record::new("declined")).unwrap();
        wait_for(&written, 2);
        assert_eq!(events(&written), ["challenged", "declined"]);
    }

    #[test]
    fn a_flush_writes_what_is_held_first() {
        let (log, written, _, _) = kept_counting();
        log.append(Record::new("challenged")).unwrap();
        log.flush().unwrap();
        assert_eq!(events(&written), ["challenged"]);
    }

    #[test]
    fn a_failed_write_drops_what_was_held_with_it_and_counts_it() {
        let (log, written, failing, _) = kept_counting();
        log.append(Record::new("challenged")).unwrap();
        failing.store(true, Ordering::SeqCst);
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        assert!(matches!(block_on(durable), Err(LogError::Unavailable)));
        assert_eq!(log.dropped(), 2);
        assert!(events(&written).is_empty());
    }

    #[test]
    fn no_more_than_hold_max_records_are_held() {
        let (log, written, _, writes) = kept_counting();
        let mut core = lock(&log.core);
        for _ in 0..HOLD_MAX {
            core.held.hold(Record::new("challenged"), None);
        }
        drop(core);
        log.append(Record::new("declined")).unwrap();
        // The one past the limit goes out with every held one, at once (the writer, not
        // ticking, would not look for seconds).
        wait_for(&written, HOLD_MAX + 1);
        assert_eq!(count(&writes), 1);
    }

    #[test]
    fn a_free_log_is_written_on_the_callers_thread() {
        let (log, written, _) = kept();
        quiet(&log);
        log.append(Record::new("challenged")).unwrap();
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        assert_eq!(block_on(durable).unwrap(), 1);
        let here = std::thread::current().id();
        let written = written.lock().unwrap().clone();
        assert_eq!(
            written,
            [("challenged".into(), here), ("accepted".into(), here)]
        );
    }

    #[test]
    fn a_record_queued_before_is_written_before_one_made_after_it() {
        let (log, written, _) = kept();
        // The writer thread holds the log: the first record is queued.
        let held = Held::take(&log.core, &log.shared);
        log.append(Record::new("challenged")).unwrap();
        assert_eq!(log.shared.unwritten.load(Ordering::SeqCst), 1);
        drop(held);
        // However soon after, the record made later is written after it.
        let accepted = log.append_durable(Record::new("accepted")).unwrap();
        let seq = block_on(accepted).unwrap();
        assert_eq!(seq, 1);
        let events: Vec<String> = written
            .lock()
            .unwrap()
            .iter()
            .map(|w| w.0.clone())
            .collect();
        assert_eq!(events, ["challenged", "accepted"]);
    }

    #[test]
    fn a_failed_write_on_the_callers_thread_takes_the_log_down_until_a_write_succeeds() {
        let (log, written, failing) = kept();
        failing.store(true, Ordering::SeqCst);
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        assert!(matches!(block_on(durable), Err(LogError::Unavailable)));
        assert!(!log.is_healthy());
        // Down: refused at once, on every path, and nothing is written.
        assert!(log.append(Record::new("challenged")).is_err());
        assert!(log.append_durable(Record::new("accepted")).is_err());
        // Writes work again: the writer's probe brings it back with a record of the outage.
        failing.store(false, Ordering::SeqCst);
        for _ in 0..1000 {
            if log.is_healthy() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(log.is_healthy(), "never came back");
        let written = written.lock().unwrap().clone();
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].0, "log_resumed");
        assert_ne!(
            written[0].1,
            std::thread::current().id(),
            "the writer probes"
        );
    }

    #[test]
    fn a_log_down_past_its_checkpoint_time_waits_for_its_next_probe() {
        let (log, _, failing, _) = kept_with(LogOptions {
            every: Duration::from_millis(20),
            ..LogOptions::default()
        });
        // A record awaits its checkpoint, then the log goes down and stays down past the time
        // that checkpoint was due.
        block_on(log.append_durable(Record::new("accepted")).unwrap()).unwrap();
        failing.store(true, Ordering::SeqCst);
        let durable = log.append_durable(Record::new("accepted")).unwrap();
        assert!(block_on(durable).is_err());
        let before = log.shared.rounds.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(400));
        let rounds = log.shared.rounds.load(Ordering::SeqCst) - before;
        // Probes back off from 10 ms, and the writer ticks every 10 ms for a while after a
        // wake-up: a few dozen rounds at most. A writer that waited for the overdue
        // checkpoint instead would spin: millions.
        assert!(rounds < 200, "{rounds} rounds in 400 ms while down");
        assert!(!log.is_healthy());
    }

    /// Polls `future` on this thread until it is ready (the writer thread answers it).
    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }
}
