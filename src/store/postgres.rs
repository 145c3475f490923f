//! A replay store shared through PostgreSQL.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{GenericClient, Pool};

use super::approval::{
    Approval, ApprovalId, ApprovalStore, Decided, Decider, Decision, MAX_PENDING_APPROVALS,
};
use super::backend::{backend, bounded, postgres_pool, table_name};
use super::batch::{BatchDecision, SetDigest};
use super::passkey::{
    MAX_PASSKEYS_PER_SUBJECT, PasskeyStore, Registered, RegisteredPasskey, subject_key,
};
use super::standing::{
    MAX_STANDING_PER_PRINCIPAL, Standing, StandingId, StandingKey, StandingStore, Use,
};
use super::{
    BootEpoch, BoxFuture, Claim, ClaimRequest, DEFAULT_PRINCIPAL_BUDGET, Nonce, PrincipalKey,
    ReplayStore, StoreError,
};
use crate::clock::{Clock, SystemClock};

/// A [`ReplayStore`] in PostgreSQL, for deployments with more than one instance.
///
/// The claim is one short transaction: a transaction-scoped advisory lock per principal, then one
/// `INSERT … ON CONFLICT` statement that inserts a fresh nonce as in flight (or takes over an
/// expired row) only if the principal holds fewer live rows than its budget (default
/// [`DEFAULT_PRINCIPAL_BUDGET`]), and otherwise reports the live row or the spent budget. The lock
/// makes concurrent claims of one principal count each other, so the budget is exact. Create the table once with
/// [`migrate`](Self::migrate); prune expired rows with [`prune_expired`](Self::prune_expired) or
/// the task from [`spawn_pruner`](Self::spawn_pruner).
///
/// When the data a confirmed tool changes lives in the same database, the handler can do better
/// than a separate claim: [`consume_in`](Self::consume_in) records the nonce inside the
/// transaction that makes the change, so the two commit or roll back together.
///
/// Times are the application's clock (the one that verified the state), never the database's.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    table: String,
    pub(crate) timeout: Duration,
    budget: usize,
    /// The grants' table ([`DEFAULT_GRANTS_TABLE`](Self::DEFAULT_GRANTS_TABLE) by default).
    pub(crate) grants_table: String,
    /// How long a grant's row is kept after its expiry.
    pub(crate) grant_retention: Duration,
    /// What grants' leases and expiries are judged by.
    pub(crate) grant_clock: Arc<dyn Clock>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .field("timeout", &self.timeout)
            .field("budget", &self.budget)
            .field("grants_table", &self.grants_table)
            .field("grant_retention", &self.grant_retention)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// The default table.
    pub const DEFAULT_TABLE: &str = "mcp_confirm_nonces";
    /// The default time allowed for one store call (including taking a pooled connection).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
    /// The grants' default table (where `PostgresGrantStore` kept them).
    pub const DEFAULT_GRANTS_TABLE: &str = "mcp_confirm_grants";
    /// How long a grant's row is kept after its expiry by default, so late job retries find it
    /// ended.
    pub const DEFAULT_GRANT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// A store for the database at `url` (`postgres://user@host:port/db`), with a small pool that
    /// connects on demand, so a database that is down at start-up does not stop the server.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the URL or the pool configuration is invalid.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::with_pool(postgres_pool(url, Self::DEFAULT_TIMEOUT)?))
    }

    /// A store over an existing pool.
    pub fn with_pool(pool: Pool) -> Self {
        Self {
            pool,
            table: Self::DEFAULT_TABLE.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            budget: DEFAULT_PRINCIPAL_BUDGET,
            grants_table: Self::DEFAULT_GRANTS_TABLE.to_owned(),
            grant_retention: Self::DEFAULT_GRANT_RETENTION,
            grant_clock: Arc::new(SystemClock),
        }
    }

    /// Caps each principal's live rows (default [`DEFAULT_PRINCIPAL_BUDGET`], at least one).
    pub fn principal_budget(mut self, budget: usize) -> Self {
        self.budget = budget.max(1);
        self
    }

    /// Uses another table name (letters, digits and `_`, at most 63 characters).
    ///
    /// # Errors
    /// [`StoreError::Backend`] for an invalid name.
    pub fn table(mut self, table: &str) -> Result<Self, StoreError> {
        self.table = table_name(table)?;
        Ok(self)
    }

    /// How long one store call may take before the claim is refused.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Uses another table for grants (the same rules as [`table`](Self::table)).
    ///
    /// # Errors
    /// [`StoreError::Backend`] for an invalid name.
    pub fn grants_table(mut self, table: &str) -> Result<Self, StoreError> {
        self.grants_table = table_name(table)?;
        Ok(self)
    }

    /// How long a grant's row is kept after its expiry (default
    /// [`DEFAULT_GRANT_RETENTION`](Self::DEFAULT_GRANT_RETENTION)); a grant forgotten after that
    /// answers [`Begin::Unknown`](crate::grant::Begin::Unknown), which never runs.
    pub fn grant_retention(mut self, retention: Duration) -> Self {
        self.grant_retention = retention;
        self
    }

    /// The clock grants' leases and expiries are judged by (default: the system clock).
    pub fn grant_clock(mut self, clock: impl Clock) -> Self {
        self.grant_clock = Arc::new(clock);
        self
    }

    /// Creates the table and its indexes if they do not exist (and `<table>_approvals`,
    /// `<table>_standing` and `<table>_passkeys` beside it, and the grants' table), and adds the
    /// columns a table made by an earlier version lacks (`principal`; the standing uses'
    /// `tickets`).
    ///
    /// # Errors
    /// [`StoreError`] if the database cannot be reached or refuses.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let g = &self.grants_table;
        // An instance starting beside live ones must not lock their tables: when every table,
        // column and index is there (the usual start) it only reads the catalog. Otherwise the
        // DDL runs once, under a lock, in one transaction that takes each table's strongest lock
        // first (`ALTER` before `CREATE INDEX`): upgrading a lock held beside a live writer's
        // deadlocks.
        let current = format!(
            "SELECT to_regclass('{t}') IS NOT NULL
                AND to_regclass('{t}_approvals') IS NOT NULL
                AND to_regclass('{t}_standing') IS NOT NULL
                AND to_regclass('{t}_expires_at') IS NOT NULL
                AND to_regclass('{t}_principal') IS NOT NULL
                AND to_regclass('{t}_approvals_expires_at') IS NOT NULL
                AND to_regclass('{t}_approvals_principal') IS NOT NULL
                AND to_regclass('{t}_standing_principal') IS NOT NULL
                AND to_regclass('{t}_approvals_routes') IS NOT NULL
                AND to_regclass('{t}_passkeys_subject') IS NOT NULL
                AND to_regclass('{t}_batches_expires_at') IS NOT NULL
                AND (SELECT count(*) FROM pg_attribute
                     WHERE attname IN ('routes', 'audience', 'created_at', 'decided')
                       AND NOT attisdropped AND attrelid = to_regclass('{t}_approvals')) = 4
                AND (SELECT count(*) FROM pg_attribute
                     WHERE attname = 'principal' AND NOT attisdropped
                       AND attrelid IN (to_regclass('{t}'), to_regclass('{t}_approvals'))) = 2
                AND (SELECT count(*) FROM pg_attribute
                     WHERE attname = 'tickets' AND NOT attisdropped
                       AND attrelid = to_regclass('{t}_standing')) = 1
                AND to_regclass('{g}') IS NOT NULL
                AND to_regclass('{g}_keep_until') IS NOT NULL"
        );
        let sql = format!(
            "SELECT pg_advisory_xact_lock(hashtext('mcp-confirm:migrate:{t}'));
             CREATE TABLE IF NOT EXISTS {t} (
                nonce bytea PRIMARY KEY,
                state text NOT NULL CHECK (state IN ('in_flight', 'consumed')),
                owner bytea,
                principal bytea,
                expires_at timestamptz NOT NULL);
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS principal bytea;
             CREATE INDEX IF NOT EXISTS {t}_expires_at ON {t} (expires_at);
             CREATE INDEX IF NOT EXISTS {t}_principal ON {t} (principal, expires_at);
             CREATE TABLE IF NOT EXISTS {t}_approvals (
                id text PRIMARY KEY,
                principal bytea NOT NULL,
                record text NOT NULL,
                expires_at timestamptz NOT NULL);
             ALTER TABLE {t}_approvals ADD COLUMN IF NOT EXISTS principal bytea,
                ADD COLUMN IF NOT EXISTS routes text[] NOT NULL DEFAULT '{{}}',
                ADD COLUMN IF NOT EXISTS audience text NOT NULL DEFAULT '',
                ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
                ADD COLUMN IF NOT EXISTS decided boolean NOT NULL DEFAULT false;
             CREATE INDEX IF NOT EXISTS {t}_approvals_expires_at ON {t}_approvals (expires_at);
             CREATE INDEX IF NOT EXISTS {t}_approvals_principal ON {t}_approvals (principal, expires_at);
             CREATE INDEX IF NOT EXISTS {t}_approvals_routes ON {t}_approvals USING gin (routes);
             CREATE TABLE IF NOT EXISTS {t}_batches (
                id text PRIMARY KEY,
                record text NOT NULL,
                expires_at timestamptz NOT NULL);
             CREATE INDEX IF NOT EXISTS {t}_batches_expires_at ON {t}_batches (expires_at);
             CREATE TABLE IF NOT EXISTS {t}_standing (
                key bytea PRIMARY KEY,
                principal bytea NOT NULL,
                record text NOT NULL,
                used integer NOT NULL DEFAULT 0,
                tickets bytea[] NOT NULL DEFAULT '{{}}',
                expires_at timestamptz NOT NULL);
             ALTER TABLE {t}_standing ADD COLUMN IF NOT EXISTS tickets bytea[] NOT NULL DEFAULT '{{}}';
             CREATE INDEX IF NOT EXISTS {t}_standing_principal ON {t}_standing (principal, expires_at);
             CREATE TABLE IF NOT EXISTS {t}_passkeys (
                id text PRIMARY KEY,
                subject text NOT NULL,
                record text NOT NULL,
                created_ms bigint NOT NULL);
             CREATE INDEX IF NOT EXISTS {t}_passkeys_subject ON {t}_passkeys (subject, created_ms);
             CREATE TABLE IF NOT EXISTS {g} (
                id text PRIMARY KEY,
                record text NOT NULL,
                keep_until timestamptz NOT NULL);
             CREATE INDEX IF NOT EXISTS {g}_keep_until ON {g} (keep_until);"
        );
        self.bounded(async {
            let mut client = self.pool.get().await.map_err(backend)?;
            crate::store::backend::migrate_once(&mut client, &current, &sql)
                .await
                .map_err(backend)
        })
        .await
    }

    /// Deletes rows past their expiry (grants' past their retention) and returns how many.
    ///
    /// # Errors
    /// [`StoreError`] if the database cannot be reached.
    pub async fn prune_expired(&self) -> Result<u64, StoreError> {
        let sql = format!("DELETE FROM {} WHERE expires_at <= $1", self.table);
        let approvals = format!(
            "DELETE FROM {}_approvals WHERE expires_at <= $1",
            self.table
        );
        let standing = format!("DELETE FROM {}_standing WHERE expires_at <= $1", self.table);
        let batches = format!("DELETE FROM {}_batches WHERE expires_at <= $1", self.table);
        let grants = format!("DELETE FROM {} WHERE keep_until < $1", self.grants_table);
        self.bounded(async {
            let client = self.pool.get().await.map_err(backend)?;
            let now = SystemTime::now();
            let nonces = client.execute(&sql, &[&now]).await.map_err(backend)?;
            let approvals = client.execute(&approvals, &[&now]).await.map_err(backend)?;
            let standing = client.execute(&standing, &[&now]).await.map_err(backend)?;
            let batches = client.execute(&batches, &[&now]).await.map_err(backend)?;
            let grants = client
                .execute(&grants, &[&self.grant_clock.now()])
                .await
                .map_err(backend)?;
            Ok(nonces + approvals + standing + batches + grants)
        })
        .await
    }

    /// Prunes expired rows every `period` until the returned task is aborted. Failures are logged
    /// and retried at the next tick.
    pub fn spawn_pruner(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                if let Err(e) = store.prune_expired().await {
                    tracing::warn!(error = %e, "pruning expired nonces failed");
                }
            }
        })
    }

    /// Records `nonce` as used inside the caller's transaction, for handlers whose data lives in this
    /// database: the claim and the change commit together or not at all, and a crash leaves neither.
    /// Returns `false` when the nonce was already used (roll back then).
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the statement fails.
    pub async fn consume_in(
        &self,
        transaction: &impl GenericClient,
        nonce: Nonce,
        expires_at: SystemTime,
    ) -> Result<bool, StoreError> {
        handler_attempts::record(nonce);
        let sql = format!(
            "INSERT INTO {t} AS n (nonce, state, owner, expires_at) VALUES ($1, 'consumed', NULL, $2)
             ON CONFLICT (nonce) DO UPDATE SET state = 'consumed', owner = NULL, expires_at = EXCLUDED.expires_at
               WHERE n.expires_at <= $3",
            t = self.table
        );
        let now = SystemTime::now();
        let rows = transaction
            .execute(&sql, &[&nonce.as_bytes().as_slice(), &expires_at, &now])
            .await
            .map_err(backend)?;
        Ok(rows == 1)
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        bounded(self.timeout, call).await
    }
}

/// The advisory-lock key of a principal's claims: this table's class, the principal's first bytes.
/// Two principals sharing a key only wait for each other.
fn lock_key(table: &str, principal: &PrincipalKey) -> (i32, i32) {
    let class = table
        .bytes()
        .fold(0x6d63_7063_u32, |h, b| h.rotate_left(5) ^ u32::from(b));
    let [a, b, c, d, ..] = *principal.as_bytes();
    (class as i32, i32::from_be_bytes([a, b, c, d]))
}

impl ReplayStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>> {
        // One statement, after the lock: held rows answer as replays whatever the budget.
        let sql = format!(
            "WITH held AS (
               SELECT state FROM {t} WHERE nonce = $1 AND expires_at > $4),
             spent AS (
               SELECT count(*) AS n, min(expires_at) AS oldest FROM {t}
               WHERE principal = $5 AND expires_at > $4),
             claimed AS (
               INSERT INTO {t} AS n (nonce, state, owner, principal, expires_at)
               SELECT $1, 'in_flight', $2, $5, $3
               WHERE NOT EXISTS (SELECT 1 FROM held) AND (SELECT n FROM spent) < $6
               ON CONFLICT (nonce) DO UPDATE SET state = 'in_flight', owner = EXCLUDED.owner,
                 principal = EXCLUDED.principal, expires_at = EXCLUDED.expires_at
                 WHERE n.expires_at <= $4
               RETURNING 1)
             SELECT CASE
               WHEN EXISTS (SELECT 1 FROM claimed) THEN 'claimed'
               WHEN EXISTS (SELECT 1 FROM held) THEN (SELECT state FROM held)
               WHEN (SELECT n FROM spent) >= $6 THEN 'over_budget'
               ELSE 'in_flight' END,
               (SELECT oldest FROM spent)",
            t = self.table
        );
        let held_sql = format!(
            "SELECT state FROM {} WHERE nonce = $1 AND expires_at > $2",
            self.table
        );
        let claim = *claim;
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let now = SystemTime::now();
            // Replays of a held nonce are answered without the lock (and without a transaction):
            // a held row never becomes fresh again while it is live.
            let held = client.prepare_cached(&held_sql).await.map_err(backend)?;
            let row = client
                .query_opt(&held, &[&claim.nonce.as_bytes().as_slice(), &now])
                .await
                .map_err(backend)?;
            if let Some(row) = row {
                let state: String = row.get(0);
                return Ok(if state == "consumed" {
                    Claim::Consumed
                } else {
                    Claim::InFlight
                });
            }
            let lock = client
                .prepare_cached("SELECT pg_advisory_xact_lock($1, $2)")
                .await
                .map_err(backend)?;
            let statement = client.prepare_cached(&sql).await.map_err(backend)?;
            let transaction = client.transaction().await.map_err(backend)?;
            let (class, key) = lock_key(&self.table, &claim.principal);
            let budget = i64::try_from(self.budget).unwrap_or(i64::MAX);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &claim.nonce.as_bytes().as_slice(),
                &claim.owner.as_bytes().as_slice(),
                &claim.expires_at,
                &now,
                &claim.principal.as_bytes().as_slice(),
                &budget,
            ];
            // Pipelined in one round trip; the server runs them in order, so the claim's snapshot
            // is taken after the lock is held and sees every earlier claim of this principal.
            let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&class, &key];
            let (locked, row) = tokio::join!(
                transaction.execute(&lock, &lock_params),
                transaction.query_one(&statement, &params),
            );
            locked.map_err(backend)?;
            let row = row.map_err(backend)?;
            transaction.commit().await.map_err(backend)?;
            let answer: String = row.get(0);
            Ok(match answer.as_str() {
                "claimed" => Claim::Claimed,
                "consumed" => Claim::Consumed,
                "over_budget" => {
                    let oldest: Option<SystemTime> = row.get(1);
                    let left = oldest
                        .and_then(|at| at.duration_since(now).ok())
                        .unwrap_or_default();
                    return Err(StoreError::OverBudget {
                        retry_after: left.max(Duration::from_millis(1)),
                    });
                }
                // In flight, or a row committed by a racing claimant after this statement's snapshot.
                _ => Claim::InFlight,
            })
        }))
    }

    fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>> {
        let sql = format!(
            "UPDATE {} SET state = 'consumed', owner = NULL
             WHERE nonce = $1 AND state = 'in_flight' AND owner = $2 AND expires_at > $3",
            self.table
        );
        let claim = *claim;
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let statement = client.prepare_cached(&sql).await.map_err(backend)?;
            let now = SystemTime::now();
            let rows = client
                .execute(
                    &statement,
                    &[
                        &claim.nonce.as_bytes().as_slice(),
                        &claim.owner.as_bytes().as_slice(),
                        &now,
                    ],
                )
                .await
                .map_err(backend)?;
            Ok(rows == 1)
        }))
    }

    fn is_used(
        &self,
        nonce: Nonce,
        _principal: PrincipalKey,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE nonce = $1 AND expires_at > $2)",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let statement = client.prepare_cached(&sql).await.map_err(backend)?;
            let now = SystemTime::now();
            let row = client
                .query_one(&statement, &[&nonce.as_bytes().as_slice(), &now])
                .await
                .map_err(backend)?;
            Ok(row.get(0))
        }))
    }

    fn boot_epoch(&self) -> Option<BootEpoch> {
        // Rows live in the database, not in this process.
        None
    }

    fn claims_in_handler(&self) -> bool {
        true
    }

    fn take_handler_attempt(&self, nonce: Nonce) -> bool {
        handler_attempts::take(nonce)
    }
}

/// The approvals of rows whose first column is an approval's record.
fn approvals_of(rows: &[tokio_postgres::Row]) -> Result<Vec<Approval>, StoreError> {
    rows.iter()
        .map(|row| {
            let text: String = row.try_get(0).map_err(backend)?;
            Approval::decode(&text)
                .ok_or_else(|| StoreError::Backend("an approval record does not decode".into()))
        })
        .collect()
}

/// A standing approval read from its row (`record`, `used`).
fn standing_row(row: &tokio_postgres::Row) -> Result<Standing, StoreError> {
    let record: String = row.try_get("record").map_err(backend)?;
    let used: i32 = row.try_get("used").map_err(backend)?;
    Standing::decode(&record, u32::try_from(used).unwrap_or(0))
        .ok_or_else(|| StoreError::Backend("a standing approval does not decode".into()))
}

impl StandingStore for PostgresStore {
    fn live<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        // Uses and revocation are in the record: read the unexpired ones and ask each.
        let sql = format!(
            "SELECT record, used FROM {}_standing WHERE expires_at > $1",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let now = SystemTime::now();
            let rows = client.query(&sql, &[&now]).await.map_err(backend)?;
            let live = rows
                .iter()
                .filter_map(|row| {
                    let used: i32 = row.get(1);
                    Standing::decode(row.get(0), u32::try_from(used).unwrap_or(u32::MAX))
                })
                .filter(|s| s.audience == audience && s.is_live(now))
                .count();
            Ok(Some(live as u64))
        }))
    }

    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        if let Err(e) = standing.check_keepable() {
            return Box::pin(std::future::ready(Err(e)));
        }
        let t = &self.table;
        let lock = "SELECT pg_advisory_xact_lock(hashtext($1))".to_owned();
        let held = format!(
            "SELECT key, record, used FROM {t}_standing WHERE principal = $1 AND expires_at > $2"
        );
        let upsert = format!(
            "INSERT INTO {t}_standing (key, principal, record, used, expires_at)
             VALUES ($1, $2, $3, 0, $4)
             ON CONFLICT (key) DO UPDATE
             SET principal = EXCLUDED.principal, record = EXCLUDED.record, used = 0,
                 tickets = '{{}}', expires_at = EXCLUDED.expires_at"
        );
        let class = format!("mcp-confirm:standing:{t}:{}", standing.principal.to_hex());
        let key = standing.key().as_bytes().to_vec();
        let principal = standing.principal.as_bytes().to_vec();
        let (text, expires_at) = (standing.encode(), standing.expires_at);
        let cap = MAX_STANDING_PER_PRINCIPAL.min(self.budget);
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            // One principal's grants one at a time, so the count is exact.
            tx.execute(&lock, &[&class]).await.map_err(backend)?;
            let now = SystemTime::now();
            let rows = tx
                .query(&held, &[&principal, &now])
                .await
                .map_err(backend)?;
            let mut live = Vec::new();
            for row in &rows {
                let other: Vec<u8> = row.try_get("key").map_err(backend)?;
                let standing = standing_row(row)?;
                if other != key && standing.is_live(now) {
                    live.push(standing.expires_at);
                }
            }
            if live.len() >= cap {
                let soonest = live.iter().min().copied().unwrap_or(now);
                return Err(StoreError::OverBudget {
                    retry_after: soonest.duration_since(now).unwrap_or_default(),
                });
            }
            tx.execute(&upsert, &[&key, &principal, &text, &expires_at])
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)
        }))
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        let sql = format!(
            "SELECT record, used FROM {}_standing WHERE key = $1 AND expires_at > $2",
            self.table
        );
        let key = key.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let now = SystemTime::now();
            let row = client
                .query_opt(&sql, &[&key, &now])
                .await
                .map_err(backend)?;
            match row {
                Some(row) => Ok(Some(standing_row(&row)?).filter(|s| now < s.expires_at)),
                None => Ok(None),
            }
        }))
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        let t = &self.table;
        let select = format!("SELECT record, used FROM {t}_standing WHERE key = $1 FOR UPDATE");
        let update = format!(
            "UPDATE {t}_standing SET used = $2, tickets = array_append(tickets, $3) WHERE key = $1"
        );
        let key = key.as_bytes().to_vec();
        let ticket = ticket.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            // The row lock makes the check, the count and the ticket one step:
            // `Standing::use_one` decides.
            let Some(row) = tx.query_opt(&select, &[&key]).await.map_err(backend)? else {
                return Ok(Use::Unknown);
            };
            let mut standing = standing_row(&row)?;
            if standing.id != id {
                return Ok(Use::Unknown);
            }
            let used = standing.use_one(SystemTime::now());
            if let Use::Used { .. } = used {
                let count = i32::try_from(standing.used).unwrap_or(i32::MAX);
                tx.execute(&update, &[&key, &count, &ticket])
                    .await
                    .map_err(backend)?;
                tx.commit().await.map_err(backend)?;
            }
            Ok(used)
        }))
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let t = &self.table;
        let select = format!(
            "SELECT record, used, $2 = ANY(tickets) AS held FROM {t}_standing
             WHERE key = $1 FOR UPDATE"
        );
        let update = format!(
            "UPDATE {t}_standing SET used = $2, tickets = array_remove(tickets, $3) WHERE key = $1"
        );
        let key = key.as_bytes().to_vec();
        let ticket = ticket.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            // Under the row lock: the ticket found, the count and the ticket's removal are one
            // step, so a second give-back of the same ticket finds nothing.
            let Some(row) = tx
                .query_opt(&select, &[&key, &ticket])
                .await
                .map_err(backend)?
            else {
                return Ok(false);
            };
            let held: bool = row.try_get("held").map_err(backend)?;
            let mut standing = standing_row(&row)?;
            if standing.id != id || !held {
                return Ok(false);
            }
            standing.give_back();
            let count = i32::try_from(standing.used).unwrap_or(i32::MAX);
            tx.execute(&update, &[&key, &count, &ticket])
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            Ok(true)
        }))
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        let sql = format!(
            "SELECT record, used FROM {}_standing WHERE principal = $1 AND expires_at > $2",
            self.table
        );
        let principal = principal.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let now = SystemTime::now();
            let rows = client
                .query(&sql, &[&principal, &now])
                .await
                .map_err(backend)?;
            let mut live = Vec::new();
            for row in &rows {
                let standing = standing_row(row)?;
                if standing.is_live(now) {
                    live.push(standing);
                }
            }
            live.sort_by_key(|s| s.expires_at);
            Ok(live)
        }))
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let t = &self.table;
        let select = format!(
            "SELECT key, record, used FROM {t}_standing
             WHERE principal = $1 AND expires_at > $2 FOR UPDATE"
        );
        let update = format!("UPDATE {t}_standing SET record = $2 WHERE key = $1");
        let principal = principal.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            let now = SystemTime::now();
            let rows = tx
                .query(&select, &[&principal, &now])
                .await
                .map_err(backend)?;
            let mut revoked = 0;
            for row in &rows {
                let key: Vec<u8> = row.try_get("key").map_err(backend)?;
                let mut standing = standing_row(row)?;
                if !standing.is_live(now) || id.is_some_and(|id| id != standing.id) {
                    continue;
                }
                standing.revoked = true;
                tx.execute(&update, &[&key, &standing.encode()])
                    .await
                    .map_err(backend)?;
                revoked += 1;
            }
            tx.commit().await.map_err(backend)?;
            Ok(revoked)
        }))
    }
}

impl PasskeyStore for PostgresStore {
    fn passkeys<'a>(
        &'a self,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RegisteredPasskey>, StoreError>> {
        let sql = format!(
            "SELECT record FROM {}_passkeys WHERE subject = $1 ORDER BY created_ms, id",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let rows = client
                .query(&sql, &[&subject_key(subject)])
                .await
                .map_err(backend)?;
            rows.iter()
                .map(|row| {
                    let text: String = row.try_get(0).map_err(backend)?;
                    RegisteredPasskey::decode(&text)
                })
                .collect()
        }))
    }

    fn register<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<Registered, StoreError>> {
        let t = &self.table;
        let lock = "SELECT pg_advisory_xact_lock(hashtext($1))".to_owned();
        let count = format!("SELECT count(*) FROM {t}_passkeys WHERE subject = $1");
        let insert = format!(
            "INSERT INTO {t}_passkeys (id, subject, record, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO NOTHING"
        );
        let class = format!("mcp-confirm:passkeys:{t}:{}", subject_key(subject));
        Box::pin(self.bounded(async move {
            passkey.check_keepable()?;
            let key = subject_key(subject);
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            // One subject's registrations one at a time, so the cap is exact.
            tx.execute(&lock, &[&class]).await.map_err(backend)?;
            let held: i64 = tx
                .query_one(&count, &[&key])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(backend)?;
            if usize::try_from(held).unwrap_or(usize::MAX) >= MAX_PASSKEYS_PER_SUBJECT {
                return Ok(Registered::Full);
            }
            let created = i64::try_from(passkey.created_ms).unwrap_or(i64::MAX);
            let inserted = tx
                .execute(&insert, &[&passkey.id, &key, &passkey.encode(), &created])
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            Ok(if inserted == 1 {
                Registered::Added
            } else {
                Registered::Exists
            })
        }))
    }

    fn update<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let sql = format!(
            "UPDATE {}_passkeys SET record = $3 WHERE id = $1 AND subject = $2",
            self.table
        );
        Box::pin(self.bounded(async move {
            passkey.check_keepable()?;
            let client = self.pool.get().await.map_err(backend)?;
            let n = client
                .execute(
                    &sql,
                    &[&passkey.id, &subject_key(subject), &passkey.encode()],
                )
                .await
                .map_err(backend)?;
            Ok(n == 1)
        }))
    }

    fn remove<'a>(
        &'a self,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let sql = format!(
            "DELETE FROM {}_passkeys WHERE id = $1 AND subject = $2",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let n = client
                .execute(&sql, &[&id, &subject_key(subject)])
                .await
                .map_err(backend)?;
            Ok(n == 1)
        }))
    }
}

impl ApprovalStore for PostgresStore {
    fn pending<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let sql = format!(
            "SELECT count(*) FROM {}_approvals
             WHERE audience = $1 AND NOT decided AND expires_at > $2",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let row = client
                .query_one(&sql, &[&audience, &SystemTime::now()])
                .await
                .map_err(backend)?;
            let count: i64 = row.get(0);
            Ok(Some(u64::try_from(count).unwrap_or(0)))
        }))
    }

    fn propose(&self, approval: &Approval) -> BoxFuture<'_, Result<(), StoreError>> {
        let t = &self.table;
        let lock = "SELECT pg_advisory_xact_lock(hashtext($1))".to_owned();
        let count = format!(
            "SELECT count(*), min(expires_at) FROM {t}_approvals WHERE principal = $1 AND expires_at > $2"
        );
        let insert = format!(
            "INSERT INTO {t}_approvals (id, principal, record, expires_at, routes, audience, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO NOTHING"
        );
        let (routes, audience, created_at) = (
            approval.routes(),
            approval.audience.clone(),
            approval.created_at,
        );
        let class = format!("mcp-confirm:approvals:{t}:{}", approval.principal.to_hex());
        let (id, text, expires_at) = (approval.id.to_hex(), approval.encode(), approval.expires_at);
        let principal = approval.principal.as_bytes().to_vec();
        Box::pin(self.bounded(async move {
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            // One principal's proposals one at a time, so the count is exact.
            tx.execute(&lock, &[&class]).await.map_err(backend)?;
            let now = SystemTime::now();
            let row = tx
                .query_one(&count, &[&principal, &now])
                .await
                .map_err(backend)?;
            let held: i64 = row.try_get(0).map_err(backend)?;
            if usize::try_from(held).unwrap_or(usize::MAX) >= MAX_PENDING_APPROVALS {
                let oldest: Option<SystemTime> = row.try_get(1).map_err(backend)?;
                let retry_after = oldest
                    .and_then(|at| at.duration_since(now).ok())
                    .unwrap_or_default();
                return Err(StoreError::OverBudget { retry_after });
            }
            let inserted = tx
                .execute(
                    &insert,
                    &[
                        &id,
                        &principal,
                        &text,
                        &expires_at,
                        &routes,
                        &audience,
                        &created_at,
                    ],
                )
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            if inserted == 1 {
                Ok(())
            } else {
                Err(StoreError::Backend(
                    "an approval with this id exists".into(),
                ))
            }
        }))
    }

    fn approval(&self, id: ApprovalId) -> BoxFuture<'_, Result<Option<Approval>, StoreError>> {
        let sql = format!(
            "SELECT record FROM {}_approvals WHERE id = $1 AND expires_at > $2",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let row = client
                .query_opt(&sql, &[&id.to_hex(), &SystemTime::now()])
                .await
                .map_err(backend)?;
            row.map(|row| {
                let text: String = row.try_get(0).map_err(backend)?;
                Approval::decode(&text)
                    .ok_or_else(|| StoreError::Backend("an approval record does not decode".into()))
            })
            .transpose()
        }))
    }

    fn decide(
        &self,
        id: ApprovalId,
        decider: Decider,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>> {
        let select = format!(
            "SELECT record FROM {}_approvals WHERE id = $1 FOR UPDATE",
            self.table
        );
        let update = format!(
            "UPDATE {}_approvals SET record = $2, decided = $3 WHERE id = $1",
            self.table
        );
        Box::pin(self.bounded(async move {
            let key = id.to_hex();
            let mut client = self.pool.get().await.map_err(backend)?;
            let tx = client.transaction().await.map_err(backend)?;
            let Some(row) = tx.query_opt(&select, &[&key]).await.map_err(backend)? else {
                return Ok(Decided::Unknown);
            };
            let text: String = row.try_get(0).map_err(backend)?;
            let mut approval = Approval::decode(&text)
                .ok_or_else(|| StoreError::Backend("an approval record does not decode".into()))?;
            // Under the row's lock: two approvers racing are applied one after the other.
            let decided = approval.decide(decider, decision, SystemTime::now());
            if matches!(decided, Decided::Recorded | Decided::Counted { .. }) {
                let done = approval.decision.is_some();
                tx.execute(&update, &[&key, &approval.encode(), &done])
                    .await
                    .map_err(backend)?;
                tx.commit().await.map_err(backend)?;
            }
            Ok(decided)
        }))
    }

    fn inbox<'a>(
        &'a self,
        audience: &'a str,
        routes: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        let sql = format!(
            "SELECT record FROM {}_approvals
             WHERE routes && $1 AND audience = $2 AND NOT decided AND expires_at > $3
             ORDER BY created_at DESC, id LIMIT $4",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(&sql, &[&routes, &audience, &SystemTime::now(), &limit])
                .await
                .map_err(backend)?;
            approvals_of(&rows)
        }))
    }

    fn siblings<'a>(
        &'a self,
        audience: &'a str,
        principal: &'a PrincipalKey,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        let sql = format!(
            "SELECT record FROM {}_approvals
             WHERE principal = $1 AND audience = $2 AND NOT decided AND expires_at > $3
             ORDER BY created_at, id LIMIT $4",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let limit = i64::try_from(MAX_PENDING_APPROVALS).unwrap_or(i64::MAX);
            let key = principal.as_bytes().to_vec();
            let rows = client
                .query(&sql, &[&key, &audience, &SystemTime::now(), &limit])
                .await
                .map_err(backend)?;
            approvals_of(&rows)
        }))
    }

    fn record_batch<'a>(
        &'a self,
        batch: &'a BatchDecision,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        // A row past its expiry is replaced (the prune may not have run yet); a live one stays.
        let sql = format!(
            "INSERT INTO {t}_batches (id, record, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, expires_at = EXCLUDED.expires_at
             WHERE {t}_batches.expires_at <= $4",
            t = self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let kept = client
                .execute(
                    &sql,
                    &[
                        &batch.set.to_hex(),
                        &batch.encode(),
                        &batch.expires_at,
                        &SystemTime::now(),
                    ],
                )
                .await
                .map_err(backend)?;
            Ok(kept == 1)
        }))
    }

    fn batch(&self, set: SetDigest) -> BoxFuture<'_, Result<Option<BatchDecision>, StoreError>> {
        let sql = format!(
            "SELECT record FROM {}_batches WHERE id = $1 AND expires_at > $2",
            self.table
        );
        Box::pin(self.bounded(async move {
            let client = self.pool.get().await.map_err(backend)?;
            let row = client
                .query_opt(&sql, &[&set.to_hex(), &SystemTime::now()])
                .await
                .map_err(backend)?;
            row.map(|row| {
                let text: String = row.try_get(0).map_err(backend)?;
                BatchDecision::decode(&text)
                    .ok_or_else(|| StoreError::Backend("a batch decision does not decode".into()))
            })
            .transpose()
        }))
    }
}

/// The nonces handlers of this process passed to [`PostgresStore::consume_in`], until the
/// layer asks after the call: a handler that tried (and committed, or rolled back to leave the
/// confirmation usable) is told apart from one that never claimed. Bounded: when full it
/// forgets, and a forgotten attempt only means the layer burns that nonce ("ask again").
mod handler_attempts {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};

    use super::Nonce;

    const MAX: usize = 100_000;

    fn attempts() -> &'static Mutex<HashSet<Nonce>> {
        static ATTEMPTS: OnceLock<Mutex<HashSet<Nonce>>> = OnceLock::new();
        ATTEMPTS.get_or_init(Mutex::default)
    }

    pub(super) fn record(nonce: Nonce) {
        if let Ok(mut attempts) = attempts().lock() {
            if attempts.len() >= MAX {
                attempts.clear();
            }
            attempts.insert(nonce);
        }
    }

    pub(super) fn take(nonce: Nonce) -> bool {
        attempts()
            .lock()
            .map(|mut attempts| attempts.remove(&nonce))
            .unwrap_or(false)
    }
}
