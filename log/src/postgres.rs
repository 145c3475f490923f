//! The decision log in PostgreSQL, for several instances (feature `postgres`).
//!
//! Every instance appends to one table under one sequence: a batch takes a transaction-scoped
//! advisory lock and numbers its records after the highest, so the log has one order and no
//! gaps whichever instance wrote. Checkpoints are signed by whichever instance holds a
//! session-scoped advisory lock (the first to try; another takes over when it stops). That
//! instance reads the records it has not read, checks the tree it builds against every
//! checkpoint already signed, and refuses to sign when they differ: a changed row is reported,
//! never signed over. Every row carries its writer's keyed tag (see [`view`](super::view)): a
//! row inserted or rewritten by anyone without the key is refused even where no checkpoint
//! covers it yet. Rows cannot be updated, deleted or truncated while the tables' triggers
//! stand; each round the signer also checks that the table is still the one it read (its
//! physical file: `TRUNCATE` and a rewrite change it) and still holds every row it read.
//! Finding any of this, it stops signing, the log goes down (so a fail-closed layer refuses
//! destructive calls) and it says so at error level, until an operator has looked and
//! restarted it.
//!
//! What the tables' owner can still do (disable the triggers, drop the tables, restore an old
//! dump) is caught by a [`Witness`] the database cannot write, and by
//! the signer's view in a local file ([`PostgresLog::view_file`]); give the application a role
//! that does not own the tables (SECURITY.md shows the grants).
//!
//! [`export`] copies the log into a directory the offline verifier reads
//! (`mcp-confirm-audit pull`), byte for byte.

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::LogError;
use super::checkpoint::{LogKey, SignedCheckpoint};
use super::file::{CHECKPOINTS, RECORDS, checkpoint_path};
use super::merkle::{Frontier, Hash, leaf_hash};
use super::record::{MAX_RECORD_BYTES, Record};
use super::view::{View, ViewFile, root_mismatches};
use super::witness::{Witness, Witnessing};
use super::writer::LogSink;

/// How many records one read brings while catching up.
const PAGE: i64 = 10_000;

/// The decision log in a PostgreSQL table shared by several instances: a [`LogSink`] for
/// [`AuditLog::new`](super::AuditLog::new).
pub struct PostgresLog {
    runtime: tokio::runtime::Runtime,
    url: String,
    table: String,
    key: LogKey,
    timeout: Duration,
    /// `None` after a failure, until [`recover`](LogSink::recover) connects again.
    client: Option<Client>,
    /// The task driving `client`'s connection.
    connection: Option<tokio::task::JoinHandle<()>>,
    /// Whether this instance holds the checkpoint lock (on its connection).
    leader: bool,
    /// The tree of the records this instance has read (the leader's; followers read none).
    frontier: Frontier,
    /// The size of the last checkpoint this instance knows of.
    signed: u64,
    /// How many records the table held after this instance's last append.
    size: u64,
    /// What the signing instance found changed: it stays down, signing nothing, until an
    /// operator has looked (verify the export) and restarted it.
    damaged: Option<String>,
    /// The tables' physical files when the leader read them: a `TRUNCATE`, `VACUUM FULL` or
    /// restore changes them.
    filenodes: Option<(i64, i64)>,
    /// Rows updated or deleted in the tables, as the statistics counted them when the leader
    /// began: the triggers refuse both, so any more means they were set aside.
    rewrites: Option<i64>,
    /// The leader's view, in a local file, if kept.
    view_file: Option<std::path::PathBuf>,
    /// Where checkpoints go beyond the database.
    witnessing: Witnessing,
    witnesses: Vec<std::sync::Arc<dyn Witness>>,
    /// What the witnesses held when this instance began to lead.
    must_extend: Vec<SignedCheckpoint>,
}

impl std::fmt::Debug for PostgresLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLog")
            .field("table", &self.table)
            .field("leader", &self.leader)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl PostgresLog {
    /// The default table (`<table>_checkpoints` beside it).
    pub const DEFAULT_TABLE: &'static str = "mcp_confirm_decisions";
    /// How long one database call may take by default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Connects to `url`, creates the tables if needed (`table`: a plain identifier), and
    /// signs with `key` when this instance holds the checkpoint lock. Call it outside an async
    /// context or from any thread: it runs its own small runtime.
    ///
    /// # Errors
    /// [`LogError::Backend`] if the database cannot be reached or refuses; a `table` that is
    /// not a plain identifier too.
    pub fn connect(url: &str, table: &str, key: LogKey) -> Result<Self, LogError> {
        let table = mcp_confirm::__private::table_name(table)
            .map_err(|e| LogError::Backend(e.to_string()))?;
        let url = url.to_owned();
        // Built and first used on a thread of its own: a runtime cannot be entered from inside
        // another one (the caller's, if it is async).
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let mut log = Self {
                        runtime,
                        url,
                        table,
                        key,
                        timeout: Self::DEFAULT_TIMEOUT,
                        client: None,
                        connection: None,
                        leader: false,
                        frontier: Frontier::new(),
                        signed: 0,
                        size: 0,
                        damaged: None,
                        filenodes: None,
                        rewrites: None,
                        view_file: None,
                        witnessing: Witnessing::default(),
                        witnesses: Vec::new(),
                        must_extend: Vec::new(),
                    };
                    log.reconnect()?;
                    log.migrate()?;
                    Ok(log)
                })
                .join()
                .unwrap_or_else(|_| Err(LogError::Backend("the connecting thread failed".into())))
        })
    }

    /// How long one database call may take (default [`Self::DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps the signer's view in the local file `path` while this instance leads: on taking
    /// the lead it checks the table extends what it last signed there.
    #[must_use]
    pub fn view_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.view_file = Some(path.into());
        self
    }

    /// Offers every checkpoint this instance signs to `witness`; on taking the lead it checks
    /// the table extends what the witness holds.
    #[must_use]
    pub fn witness(mut self, witness: impl Witness) -> Self {
        self.witnesses.push(std::sync::Arc::new(witness));
        self
    }

    /// Whether this instance signed the last checkpoint round (held the lock).
    pub fn is_leader(&self) -> bool {
        self.leader
    }

    /// Closes the connection, and with it the checkpoint lock if this instance held it: another
    /// instance signs from then on.
    fn disconnect(&mut self) {
        self.client = None;
        self.leader = false;
        if let Some(connection) = self.connection.take() {
            let timeout = self.timeout;
            self.runtime.block_on(async {
                let _ = tokio::time::timeout(timeout, connection).await;
            });
        }
    }

    fn reconnect(&mut self) -> Result<(), LogError> {
        self.disconnect();
        let url = self.url.clone();
        let timeout = self.timeout;
        let runtime = &self.runtime;
        let (client, connection) = runtime.block_on(async {
            tokio::time::timeout(timeout, tokio_postgres::connect(&url, NoTls))
                .await
                .map_err(|_| LogError::Backend("connecting timed out".into()))?
                .map_err(backend)
        })?;
        self.connection = Some(runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(target: mcp_confirm::audit::TARGET, error = %e,
                    "the decision log's database connection ended");
            }
        }));
        self.client = Some(client);
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), LogError> {
        let t = &self.table;
        let current = format!(
            "SELECT to_regclass('{t}') IS NOT NULL AND to_regclass('{t}_checkpoints') IS NOT NULL
                AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{t}_append_only')
                AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{t}_no_truncate')
                AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{t}_checkpoints_no_truncate')
                AND EXISTS (SELECT 1 FROM pg_constraint WHERE conname = '{t}_seq_natural')"
        );
        let ddl = format!(
            "SELECT pg_advisory_xact_lock(hashtext('mcp-confirm:migrate:{t}'));
             CREATE TABLE IF NOT EXISTS {t} (seq bigint PRIMARY KEY, line text NOT NULL);
             CREATE TABLE IF NOT EXISTS {t}_checkpoints (size bigint PRIMARY KEY, note text NOT NULL);
             CREATE OR REPLACE FUNCTION {t}_append_only() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'the decision log is append-only'; END $$;
             DROP TRIGGER IF EXISTS {t}_append_only ON {t};
             CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t}
                FOR EACH ROW EXECUTE FUNCTION {t}_append_only();
             DROP TRIGGER IF EXISTS {t}_checkpoints_append_only ON {t}_checkpoints;
             CREATE TRIGGER {t}_checkpoints_append_only BEFORE UPDATE OR DELETE ON {t}_checkpoints
                FOR EACH ROW EXECUTE FUNCTION {t}_append_only();
             DROP TRIGGER IF EXISTS {t}_no_truncate ON {t};
             CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t}
                FOR EACH STATEMENT EXECUTE FUNCTION {t}_append_only();
             DROP TRIGGER IF EXISTS {t}_checkpoints_no_truncate ON {t}_checkpoints;
             CREATE TRIGGER {t}_checkpoints_no_truncate BEFORE TRUNCATE ON {t}_checkpoints
                FOR EACH STATEMENT EXECUTE FUNCTION {t}_append_only();
             ALTER TABLE {t} DROP CONSTRAINT IF EXISTS {t}_seq_natural;
             ALTER TABLE {t} ADD CONSTRAINT {t}_seq_natural CHECK (seq >= 0) NOT VALID;"
        );
        let timeout = self.timeout;
        let client = self.client.as_mut().ok_or_else(down)?;
        self.runtime.block_on(bounded(timeout, async {
            mcp_confirm::__private::migrate_once(client, &current, &ddl)
                .await
                .map_err(backend)
        }))
    }

    /// The 64-bit advisory lock keys of this table: appends, and the checkpoint leader.
    fn lock(&self, what: &str) -> i64 {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("mcp-confirm:{what}:{}", self.table));
        i64::from_be_bytes(digest[..8].try_into().unwrap_or_default())
    }

    /// Reads the records this instance has not read, checking each row's tag and the tree
    /// against every signed checkpoint it passes and every root in `expected` (the view's, the
    /// witnesses'). A difference is damage: nothing is signed after it.
    async fn catch_up(
        client: &Client,
        table: &str,
        key: &LogKey,
        expected: &[(u64, Hash, String)],
        frontier: &mut Frontier,
        witnessing: &mut Witnessing,
    ) -> Result<u64, LogError> {
        let verifier = key.verifier();
        let checkpoints = client
            .query(
                &format!(
                    "SELECT size, note FROM {table}_checkpoints WHERE size > $1 ORDER BY size"
                ),
                &[&size_i64(frontier.size())],
            )
            .await
            .map_err(backend)?;
        let mut signed = Vec::with_capacity(checkpoints.len());
        for row in checkpoints {
            let size: i64 = row.try_get(0).map_err(backend)?;
            let note: String = row.try_get(1).map_err(backend)?;
            let opened = verifier
                .open(&note)
                .map_err(|e| LogError::Damaged(format!("the checkpoint at {size}: {e}")))?;
            if i64::try_from(opened.checkpoint.size).ok() != Some(size) {
                return Err(LogError::Damaged(format!(
                    "the checkpoint filed at {size} signs another size"
                )));
            }
            signed.push(opened);
        }
        let covered = signed.last().map_or(0, |s| s.checkpoint.size);
        let mut next = signed.iter().peekable();
        let mut last_signed = 0;
        let mut last_untagged = None;
        let check = |frontier: &Frontier| match root_mismatches(expected, frontier).next() {
            Some(why) => Err(LogError::Damaged(why)),
            None => Ok(()),
        };
        check(frontier)?;
        loop {
            let rows = client
                .query(
                    &format!("SELECT seq, line FROM {table} WHERE seq >= $1 ORDER BY seq LIMIT $2"),
                    &[&size_i64(frontier.size()), &PAGE],
                )
                .await
                .map_err(backend)?;
            let read = rows.len();
            for row in rows {
                let seq: i64 = row.try_get(0).map_err(backend)?;
                let line: String = row.try_get(1).map_err(backend)?;
                let expected_seq = frontier.size();
                let record = (line.len() <= MAX_RECORD_BYTES)
                    .then(|| Record::from_line(&line))
                    .flatten()
                    .filter(|r| r.seq == expected_seq);
                let Some(record) = record.filter(|_| i64::try_from(expected_seq).ok() == Some(seq))
                else {
                    return Err(LogError::Damaged(format!(
                        "record {expected_seq} is missing, changed or out of order"
                    )));
                };
                if record.tag.is_none() {
                    last_untagged = Some(expected_seq);
                } else if !key.tags().verifies(key.name(), &record) {
                    return Err(LogError::Damaged(format!(
                        "record {expected_seq} does not carry its writer's tag: it was written or changed by someone without the log's key"
                    )));
                }
                let leaf = leaf_hash(line.as_bytes());
                frontier.push(leaf);
                witnessing.observe(leaf);
                check(frontier)?;
                while let Some(s) = next.next_if(|s| s.checkpoint.size <= frontier.size()) {
                    if s.checkpoint.size < frontier.size() || s.checkpoint.root != frontier.root() {
                        return Err(LogError::Damaged(format!(
                            "the first {} records do not hash to the signed root",
                            s.checkpoint.size
                        )));
                    }
                    last_signed = s.checkpoint.size;
                }
            }
            if read < usize::try_from(PAGE).unwrap_or(usize::MAX) {
                break;
            }
        }
        if let Some(s) = next.next() {
            return Err(LogError::Damaged(format!(
                "a checkpoint signs {} records and the table holds {}",
                s.checkpoint.size,
                frontier.size()
            )));
        }
        if let Some(seq) = last_untagged.filter(|&seq| seq >= covered) {
            return Err(LogError::Damaged(format!(
                "record {seq} carries no tag and no checkpoint signed it: it was not written by this log's writers"
            )));
        }
        for (size, _, what) in expected {
            if frontier.size() < *size {
                return Err(LogError::Damaged(format!(
                    "the table holds {} records and {what} counts {size}: rows were removed",
                    frontier.size()
                )));
            }
        }
        Ok(last_signed)
    }

    /// One round of the checkpoint lock: take the lead if free, check the table is still what
    /// was read, read what is new, sign it, and send it on.
    fn checkpoint_round(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        let (timeout, lock) = (self.timeout, self.lock("checkpoint"));
        let was_leader = self.leader;
        let client = self.client.as_mut().ok_or_else(down)?;
        // The lock is the connection's until it closes: the first instance to take it signs
        // for all of them.
        let leader = was_leader
            || self.runtime.block_on(bounded(timeout, async {
                client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&lock])
                    .await
                    .map_err(backend)?
                    .try_get::<_, bool>(0)
                    .map_err(backend)
            }))?;
        self.leader = leader;
        if !leader {
            return Ok(None);
        }
        let expected = if was_leader {
            Vec::new()
        } else {
            self.take_lead()?
        };
        let table = self.table.clone();
        let client = self.client.as_mut().ok_or_else(down)?;
        let (frontier, witnessing, key) = (&mut self.frontier, &mut self.witnessing, &self.key);
        let filenodes = &mut self.filenodes;
        let rewrites = &mut self.rewrites;
        let written = self.size;
        let signed_before = self.signed;
        let (signed, checkpoint) = self.runtime.block_on(bounded(timeout * 4, async {
            // The rows read must still be there, in the same tables, behind triggers that
            // stand: TRUNCATE (or a restore) gives a table a new file, a removed row lowers the
            // highest seq, a disabled trigger is someone setting them aside, and rows updated or
            // deleted (which the triggers refuse) show in the statistics.
            let row = client
                .query_one(
                    &format!(
                        "SELECT pg_relation_filenode('{table}')::bigint, \
                         pg_relation_filenode('{table}_checkpoints')::bigint, \
                         (SELECT coalesce(max(seq) + 1, 0) FROM {table}), \
                         (SELECT coalesce(min(seq), 0) FROM {table}), \
                         (SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('{table}'::regclass, \
                             '{table}_checkpoints'::regclass) AND NOT tgisinternal AND tgenabled NOT IN ('O', 'A')), \
                         (SELECT coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_all_tables \
                             WHERE relid IN ('{table}'::regclass, '{table}_checkpoints'::regclass))"
                    ),
                    &[],
                )
                .await
                .map_err(backend)?;
            let nodes: (i64, i64) = (
                row.try_get(0).map_err(backend)?,
                row.try_get(1).map_err(backend)?,
            );
            let end: i64 = row.try_get(2).map_err(backend)?;
            let lowest: i64 = row.try_get(3).map_err(backend)?;
            let disabled: i64 = row.try_get(4).map_err(backend)?;
            let changed: i64 = row.try_get(5).map_err(backend)?;
            if filenodes.is_some_and(|before| before != nodes) {
                return Err(LogError::Damaged(
                    "the log's tables were truncated, restored or rewritten since the signer read them"
                        .into(),
                ));
            }
            *filenodes = Some(nodes);
            if disabled > 0 {
                return Err(LogError::Damaged(
                    "the log's append-only triggers are disabled".into(),
                ));
            }
            if rewrites.is_some_and(|before| changed > before) {
                return Err(LogError::Damaged(
                    "rows of the log were updated or deleted behind its triggers".into(),
                ));
            }
            *rewrites = Some(changed);
            if lowest < 0 {
                return Err(LogError::Damaged(format!(
                    "the table holds a row numbered {lowest}: not the writers'"
                )));
            }
            let end = u64::try_from(end).unwrap_or(0);
            if end < frontier.size() || end < written {
                return Err(LogError::Damaged(format!(
                    "the table holds {end} records, the signer read {} and this instance wrote {written}: rows were removed",
                    frontier.size()
                )));
            }
            let last = Self::catch_up(client, &table, key, &expected, frontier, witnessing).await?;
            let signed = last.max(signed_before);
            let size = frontier.size();
            if size == signed || size == 0 {
                return Ok((signed, None));
            }
            let checkpoint = key.sign(size, &frontier.root());
            client
                .execute(
                    &format!("INSERT INTO {table}_checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO NOTHING"),
                    &[&size_i64(size), &checkpoint.text],
                )
                .await
                .map_err(backend)?;
            Ok((size, Some(checkpoint)))
        }))?;
        self.signed = signed;
        if let Some(checkpoint) = &checkpoint {
            if let Some(path) = &self.view_file {
                let view = View {
                    size: checkpoint.checkpoint.size,
                    root: checkpoint.checkpoint.root,
                    checkpoint: 0,
                    checkpoint_size: checkpoint.checkpoint.size,
                };
                ViewFile::open(path, self.key.name(), self.key.tags())?.write(
                    &view,
                    self.key.name(),
                    self.key.tags(),
                    true,
                    true,
                )?;
            }
            self.witnessing.submit(checkpoint)?;
        }
        Ok(checkpoint)
    }

    /// On taking the lead: what the witnesses and the local view say the table must extend;
    /// the tree is read again from the start.
    fn take_lead(&mut self) -> Result<Vec<(u64, Hash, String)>, LogError> {
        self.frontier = Frontier::new();
        self.filenodes = None;
        self.rewrites = None;
        let (witnessing, must_extend) = Witnessing::start(
            self.witnesses.clone(),
            self.key.name(),
            &self.key.verifier(),
        )?;
        self.witnessing = witnessing;
        self.must_extend = must_extend;
        let mut expected: Vec<(u64, Hash, String)> = self
            .must_extend
            .iter()
            .map(|s| {
                (
                    s.checkpoint.size,
                    s.checkpoint.root,
                    "a witness's checkpoint".to_owned(),
                )
            })
            .collect();
        if let Some(path) = &self.view_file
            && let Some(view) = View::read(path, self.key.name(), self.key.tags())?
        {
            expected.push((view.size, view.root, "the signer's view".into()));
        }
        Ok(expected)
    }
}

impl LogSink for PostgresLog {
    fn backend(&self) -> &'static str {
        "postgres"
    }
    fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        let (table, timeout, lock) = (self.table.clone(), self.timeout, self.lock("append"));
        let (tags, origin) = (self.key.tags(), self.key.name());
        let written = self.size;
        let client = self.client.as_mut().ok_or_else(down)?;
        let first = self.runtime.block_on(bounded(timeout, async {
            let tx = client.transaction().await.map_err(backend)?;
            // One writer at a time across instances: one order, no gaps.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])
                .await
                .map_err(backend)?;
            let row = tx
                .query_one(
                    &format!("SELECT coalesce(max(seq) + 1, 0) FROM {table}"),
                    &[],
                )
                .await
                .map_err(backend)?;
            let first: i64 = row.try_get(0).map_err(backend)?;
            let first = u64::try_from(first).map_err(|_| down())?;
            if first < written {
                // Rows this instance wrote are gone: someone deleted them behind the triggers.
                return Err(LogError::Damaged(format!(
                    "this instance wrote {written} records and the table holds {first}: rows were removed"
                )));
            }
            let mut seqs = Vec::with_capacity(records.len());
            let mut lines = Vec::with_capacity(records.len());
            for (i, record) in records.iter_mut().enumerate() {
                record.seq = first + i as u64;
                seqs.push(size_i64(record.seq));
                lines.push(tags.tag(origin, record));
            }
            tx.execute(
                &format!(
                    "INSERT INTO {table} (seq, line) SELECT * FROM unnest($1::bigint[], $2::text[])"
                ),
                &[&seqs, &lines],
            )
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            Ok(first)
        }));
        match first {
            Ok(first) => {
                self.size = first + records.len() as u64;
                Ok(first)
            }
            Err(e) => {
                if let LogError::Damaged(why) = &e {
                    self.damaged = Some(why.clone());
                }
                self.disconnect();
                Err(e)
            }
        }
    }

    fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        let outcome = self.checkpoint_round();
        match outcome {
            Ok(checkpoint) => Ok(checkpoint),
            Err(e) => {
                // A damaged log stays refused; a lost connection is retried by `recover`.
                if let LogError::Damaged(why) = &e {
                    self.damaged = Some(why.clone());
                }
                self.disconnect();
                Err(e)
            }
        }
    }

    fn recover(&mut self) -> Result<(), LogError> {
        if let Some(why) = &self.damaged {
            return Err(LogError::Damaged(why.clone()));
        }
        self.reconnect()
    }

    fn size(&self) -> u64 {
        self.size.max(self.frontier.size())
    }

    fn polls(&self) -> bool {
        true
    }
}

/// Copies the log in `table` at `url` into `dir` as the offline verifier reads it
/// (`records.jsonl`, `checkpoints/`), byte for byte and in the table's order, without judging
/// it: run [`verify`](fn@super::verify) on the directory. Answers how many records it copied.
///
/// # Errors
/// [`LogError::Backend`] if the database cannot be read; [`LogError::Io`] if `dir` cannot be
/// written (it must not hold a log already).
pub fn export(url: &str, table: &str, dir: &Path) -> Result<u64, LogError> {
    let table =
        mcp_confirm::__private::table_name(table).map_err(|e| LogError::Backend(e.to_string()))?;
    fs::create_dir_all(dir.join(CHECKPOINTS))?;
    if dir.join(RECORDS).exists() {
        return Err(LogError::Io(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "the directory already holds a log",
        )));
    }
    let url = url.to_owned();
    let dir = dir.to_path_buf();
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async {
                    let (client, connection) =
                        tokio_postgres::connect(&url, NoTls).await.map_err(backend)?;
                    tokio::spawn(connection);
                    let mut records = fs::File::create(dir.join(RECORDS))?;
                    let mut from = i64::MIN;
                    let mut copied = 0u64;
                    loop {
                        let rows = client
                            .query(
                                &format!("SELECT seq, line FROM {table} WHERE seq > $1 ORDER BY seq LIMIT $2"),
                                &[&from, &PAGE],
                            )
                            .await
                            .map_err(backend)?;
                        let read = rows.len();
                        let mut text = String::new();
                        for row in rows {
                            from = row.try_get(0).map_err(backend)?;
                            let line: String = row.try_get(1).map_err(backend)?;
                            text.push_str(&line);
                            text.push('\n');
                            copied += 1;
                        }
                        records.write_all(text.as_bytes())?;
                        if read < usize::try_from(PAGE).unwrap_or(usize::MAX) {
                            break;
                        }
                    }
                    records.sync_all()?;
                    let notes = client
                        .query(
                            &format!("SELECT note FROM {table}_checkpoints ORDER BY size"),
                            &[],
                        )
                        .await
                        .map_err(backend)?;
                    for (number, row) in (1u64..).zip(notes) {
                        let note: String = row.try_get(0).map_err(backend)?;
                        fs::write(checkpoint_path(&dir, number), note)?;
                    }
                    Ok(copied)
                })
            })
            .join()
            .unwrap_or_else(|_| Err(LogError::Backend("the export thread failed".into())))
    })
}

fn size_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn backend(e: impl std::fmt::Display) -> LogError {
    LogError::Backend(e.to_string())
}

fn down() -> LogError {
    LogError::Backend("not connected".into())
}

async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, LogError>>,
) -> Result<T, LogError> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| LogError::Backend("the database did not answer in time".into()))?
}
