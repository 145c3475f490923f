//! Grants in Redis: one key per grant holding its record, each transition a compare-and-set.
//!
//! The transition itself is [`Grant::begin`], [`Grant::finish`] or [`Grant::revoke`], computed
//! here in Rust on the record just read, and written back only if the record is still the one
//! read (a Lua compare-and-set); a lost race re-reads and re-decides. So Redis applies exactly
//! the rules every other store applies, and two workers racing one grant get one attempt.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::Script;
use redis::aio::ConnectionManager;

use super::backend;
use super::{Begin, Finish, Grant, GrantId, GrantStore, GrantStoreError, Lease, Revoke, record};
use crate::clock::{Clock, SystemClock};
use crate::kernel::BoxFuture;
use crate::store::backend::{COMPARE_AND_SET, bounded, millis_until, redis_connection};

/// How often a transition re-reads after losing a race before it reports the store as busy.
const ATTEMPTS: usize = 16;

/// A [`GrantStore`] in Redis (7.0 or newer), shared by every instance and worker.
///
/// A grant's key lives until its expiry plus [`RedisGrantStore::DEFAULT_RETENTION`] (or
/// [`retention`](Self::retention)); a grant forgotten after that answers [`Begin::Unknown`], which
/// never runs. Run Redis with `maxmemory-policy noeviction`.
#[derive(Clone)]
pub struct RedisGrantStore {
    connection: ConnectionManager,
    prefix: String,
    timeout: Duration,
    retention: Duration,
    clock: Arc<dyn Clock>,
    cas: Script,
}

impl fmt::Debug for RedisGrantStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisGrantStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl RedisGrantStore {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &str = "mcp-confirm:grant:";
    /// The default time allowed for one store call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
    /// How long a grant is kept after its expiry, so late job retries find it ended.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// A store for the Redis at `url`; the connection is made on first use.
    ///
    /// # Errors
    /// [`GrantStoreError::Backend`] if `url` is not a valid Redis URL.
    pub fn open(url: &str) -> Result<Self, GrantStoreError> {
        Ok(Self::with_connection(redis_connection(
            url,
            Self::DEFAULT_TIMEOUT,
        )?))
    }

    /// A store over an existing connection manager.
    pub fn with_connection(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            retention: Self::DEFAULT_RETENTION,
            clock: Arc::new(SystemClock),
            cas: Script::new(COMPARE_AND_SET),
        }
    }

    /// Namespaces the keys.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one store call may take before it fails (and the worker must not run).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a grant is kept after its expiry.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The clock leases and expiries are judged by (default: the system clock). Every instance's
    /// clock must agree within the leases' margin.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    fn key(&self, id: GrantId) -> String {
        format!("{}{id}", self.prefix)
    }

    async fn read(&self, key: &str) -> Result<Option<(String, Grant)>, GrantStoreError> {
        let mut connection = self.connection.clone();
        let text: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        match text {
            None => Ok(None),
            Some(text) => match record::decode(&text) {
                Some(grant) => Ok(Some((text, grant))),
                None => Err(GrantStoreError::Corrupt),
            },
        }
    }

    /// Applies `step` to the grant under `id` and writes the result back if it changed and the
    /// record is still the one read; `missing` answers for an unknown id.
    async fn transition<T>(
        &self,
        id: GrantId,
        missing: T,
        step: impl Fn(&mut Grant) -> T,
    ) -> Result<T, GrantStoreError> {
        let key = self.key(id);
        for _ in 0..ATTEMPTS {
            let Some((old, mut grant)) = self.read(&key).await? else {
                return Ok(missing);
            };
            let answer = step(&mut grant);
            let new = record::encode(&grant);
            if new == old {
                return Ok(answer);
            }
            let mut connection = self.connection.clone();
            let set: i64 = self
                .cas
                .key(&key)
                .arg(&old)
                .arg(&new)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            if set == 1 {
                return Ok(answer);
            }
        }
        Err(GrantStoreError::Backend(
            "the grant kept changing under this transition".into(),
        ))
    }

    fn ttl_ms(&self, grant: &Grant) -> u64 {
        millis_until(self.clock.now(), grant.expires_at + self.retention)
    }
}

impl GrantStore for RedisGrantStore {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        let mut fresh = grant.clone();
        fresh.state = super::GrantState::Granted;
        let (key, text, ttl) = (
            self.key(grant.id),
            record::encode(&fresh),
            self.ttl_ms(grant),
        );
        Box::pin(bounded(self.timeout, async move {
            let mut connection = self.connection.clone();
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&text)
                .arg("NX")
                .arg("PX")
                .arg(ttl)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            match set {
                Some(_) => Ok(()),
                None => Err(GrantStoreError::Exists),
            }
        }))
    }

    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let now: SystemTime = self.clock.now();
            self.transition(id, Begin::Unknown, |g| g.begin(now, lease))
                .await
        }))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            self.transition(lease.grant, false, |g| g.finish(&lease, outcome))
                .await
        }))
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let now: SystemTime = self.clock.now();
            self.transition(id, Revoke::Unknown, |g| g.revoke(now))
                .await
        }))
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let now: SystemTime = self.clock.now();
            let grant = self.read(&self.key(lease.grant)).await?;
            Ok(grant.is_some_and(|(_, grant)| grant.holds(&lease, now)))
        }))
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            Ok(self.read(&self.key(id)).await?.map(|(_, grant)| grant))
        }))
    }
}
