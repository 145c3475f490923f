//! Grants in Redis, kept by [`RedisStore`], the one type of every store in Redis: one key per
//! grant holding its record, each transition a compare-and-set.
//!
//! The transition itself is [`Grant::begin`], [`Grant::finish`] or [`Grant::revoke`], computed
//! here in Rust on the record just read, and written back only if the record is still the one
//! read (a Lua compare-and-set); a lost race re-reads and re-decides. So Redis applies exactly
//! the rules every other store applies, and two workers racing one grant get one attempt.
//!
//! A grant's key lives until its expiry plus [`RedisStore::grant_retention`]; a grant forgotten
//! after that answers [`Begin::Unknown`], which never runs. Run Redis with
//! `maxmemory-policy noeviction`.

use std::time::{Duration, SystemTime};

use super::backend;
use super::{Begin, Finish, Grant, GrantId, GrantStore, GrantStoreError, Lease, Revoke, record};
use crate::kernel::BoxFuture;
use crate::store::RedisStore;
use crate::store::backend::{bounded, millis_until};

/// How often a transition re-reads after losing a race before it reports the store as busy.
const ATTEMPTS: usize = 16;

impl RedisStore {
    fn grant_key(&self, id: GrantId) -> String {
        format!("{}{id}", self.grant_prefix)
    }

    async fn read_grant(&self, key: &str) -> Result<Option<(String, Grant)>, GrantStoreError> {
        let text: Option<String> = self
            .connection
            .query(redis::cmd("GET").arg(key))
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
    async fn grant_transition<T>(
        &self,
        id: GrantId,
        missing: T,
        step: impl Fn(&mut Grant) -> T,
    ) -> Result<T, GrantStoreError> {
        let key = self.grant_key(id);
        for _ in 0..ATTEMPTS {
            let Some((old, mut grant)) = self.read_grant(&key).await? else {
                return Ok(missing);
            };
            let answer = step(&mut grant);
            let new = record::encode(&grant);
            if new == old {
                return Ok(answer);
            }
            let set: i64 = self
                .connection
                .invoke(self.cas.key(&key).arg(&old).arg(&new))
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

    fn grant_ttl_ms(&self, grant: &Grant) -> u64 {
        millis_until(
            self.grant_clock.now(),
            grant.expires_at + self.grant_retention,
        )
    }
}

impl GrantStore for RedisStore {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        let mut fresh = grant.clone();
        fresh.state = super::GrantState::Granted;
        let (key, text, ttl) = (
            self.grant_key(grant.id),
            record::encode(&fresh),
            self.grant_ttl_ms(grant),
        );
        Box::pin(bounded(self.timeout, async move {
            let set: Option<String> = self
                .connection
                .query(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&text)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl),
                )
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
            let now: SystemTime = self.grant_clock.now();
            self.grant_transition(id, Begin::Unknown, |g| g.begin(now, lease))
                .await
        }))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            self.grant_transition(lease.grant, false, |g| g.finish(&lease, outcome))
                .await
        }))
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let now: SystemTime = self.grant_clock.now();
            self.grant_transition(id, Revoke::Unknown, |g| g.revoke(now))
                .await
        }))
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let now: SystemTime = self.grant_clock.now();
            let grant = self.read_grant(&self.grant_key(lease.grant)).await?;
            Ok(grant.is_some_and(|(_, grant)| grant.holds(&lease, now)))
        }))
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            Ok(self
                .read_grant(&self.grant_key(id))
                .await?
                .map(|(_, grant)| grant))
        }))
    }
}
