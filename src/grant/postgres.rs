//! Grants in PostgreSQL: one row per grant, each transition a row-locked read, decide, write.
//!
//! `SELECT … FOR UPDATE` holds the grant's row for the transaction; the transition is
//! [`Grant::begin`], [`Grant::finish`] or [`Grant::revoke`], decided in Rust on the row just read,
//! and written back before the lock is released. So PostgreSQL applies exactly the rules every
//! other store applies, and two workers racing one grant get one attempt.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Transaction;
use tokio_postgres::error::SqlState;

use super::backend;
use super::{
    Begin, Finish, Grant, GrantError, GrantId, GrantState, GrantStore, GrantStoreError, Grants,
    Lease, Revoke, RunError, record,
};
use crate::audit::event::DecisionEvent;
use crate::kernel::BoxFuture;
use crate::store::PostgresStore;
use crate::store::backend::bounded;

/// Grants kept by [`PostgresStore`], the one type of every store in PostgreSQL: one row per
/// grant in its grants' table (made by [`PostgresStore::migrate`]), kept until the grant's expiry
/// plus [`PostgresStore::grant_retention`] (older rows are deleted by
/// [`PostgresStore::prune_expired`]); a grant forgotten after that answers [`Begin::Unknown`],
/// which never runs.
impl PostgresStore {
    /// Writes `grant`'s record in `tx`.
    async fn write_grant(
        &self,
        tx: &Transaction<'_>,
        grant: &Grant,
    ) -> Result<(), GrantStoreError> {
        let update = format!("UPDATE {} SET record = $2 WHERE id = $1", self.grants_table);
        let (id, text) = (grant.id.to_string(), record::encode(grant));
        bounded(self.timeout, async {
            tx.execute(&update, &[&id, &text]).await.map_err(backend)
        })
        .await
        .map(drop)
    }

    /// Applies `step` to the grant `id` with its row locked, writing it back if it changed;
    /// `missing` answers for an unknown id.
    async fn grant_transition<T>(
        &self,
        id: GrantId,
        missing: T,
        step: impl FnOnce(&mut Grant) -> T,
    ) -> Result<T, GrantStoreError> {
        let select = format!(
            "SELECT record FROM {} WHERE id = $1 FOR UPDATE",
            self.grants_table
        );
        let update = format!("UPDATE {} SET record = $2 WHERE id = $1", self.grants_table);
        let id = id.to_string();
        let mut client = self.pool.get().await.map_err(backend)?;
        let tx = client.transaction().await.map_err(backend)?;
        let Some(row) = tx.query_opt(&select, &[&id]).await.map_err(backend)? else {
            return Ok(missing);
        };
        let old: String = row.try_get(0).map_err(backend)?;
        let mut grant = record::decode(&old).ok_or_else(|| GrantStoreError::Corrupt)?;
        let answer = step(&mut grant);
        let new = record::encode(&grant);
        if new != old {
            tx.execute(&update, &[&id, &new]).await.map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(answer)
    }
}

impl Grants<PostgresStore> {
    /// Runs grant `id`'s action in one PostgreSQL transaction with the grant's own transitions:
    /// the grant's row is locked, begun, re-checked, acted on by `action` (with the same
    /// transaction, for data in this database) and consumed, and all of it commits together.
    ///
    /// So there is no window in which the change happened and the grant does not say so: a
    /// worker killed mid-action rolls back the change and the grant alike, and the next attempt
    /// starts clean. An attempt that finds the row locked by another gets [`GrantError::Busy`]
    /// at once; an `action` error rolls everything back and leaves the grant as it was, so the
    /// job may retry it. A refused re-check commits the grant as failed.
    ///
    /// # Errors
    /// [`RunError::Grant`] if the action must not run (or the commit failed, which undid it);
    /// [`RunError::Action`] with the action's error.
    pub async fn run_in_transaction<T, E, F>(
        &self,
        id: GrantId,
        action: F,
    ) -> Result<T, RunError<E>>
    where
        F: for<'t> FnOnce(&'t Transaction<'t>, &'t Grant) -> BoxFuture<'t, Result<T, E>>,
    {
        self.log.ready().map_err(RunError::Grant)?;
        let store = &self.store;
        let unavailable = |e: GrantStoreError| RunError::Grant(GrantError::Unavailable(e));
        let select = format!(
            "SELECT record FROM {} WHERE id = $1 FOR UPDATE NOWAIT",
            store.grants_table
        );
        let key = id.to_string();
        let mut client = bounded(store.timeout, async {
            store.pool.get().await.map_err(backend)
        })
        .await
        .map_err(unavailable)?;
        let tx = bounded(store.timeout, async {
            client.transaction().await.map_err(backend)
        })
        .await
        .map_err(unavailable)?;
        let row = match tokio::time::timeout(store.timeout, tx.query_opt(&select, &[&key])).await {
            Err(_) => return Err(unavailable(GrantStoreError::Timeout)),
            Ok(Err(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                return Err(RunError::Grant(GrantError::Busy {
                    retry_after: store.grant_clock.now() + self.lease,
                }));
            }
            Ok(Err(e)) => return Err(unavailable(backend(e))),
            Ok(Ok(None)) => return Err(RunError::Grant(GrantError::Unknown)),
            Ok(Ok(Some(row))) => row,
        };
        let text: String = row.try_get(0).map_err(|e| unavailable(backend(e)))?;
        let mut grant =
            record::decode(&text).ok_or_else(|| unavailable(GrantStoreError::Corrupt))?;
        let write = async |tx: &Transaction<'_>, grant: &Grant| {
            store.write_grant(tx, grant).await.map_err(unavailable)
        };
        let lease = match grant.begin(store.grant_clock.now(), self.lease) {
            Begin::Started(lease) => lease,
            Begin::Busy { until } => {
                return Err(RunError::Grant(GrantError::Busy { retry_after: until }));
            }
            Begin::Unknown => return Err(RunError::Grant(GrantError::Unknown)),
            Begin::Finished(state) => {
                if record::encode(&grant) != text {
                    // This attempt expired it: record that.
                    write(&tx, &grant).await?;
                    commit(store, tx).await.map_err(unavailable)?;
                    let expired = DecisionEvent::GrantExpired {
                        id: id.short(),
                        grant: Some(grant.facts()),
                    };
                    self.log.report(expired, store.grant_clock.now());
                }
                return Err(RunError::Grant(GrantError::Ended(state)));
            }
        };
        // Unrecorded, nothing acts: the transaction rolls back and the grant stays as it was.
        let begun = DecisionEvent::GrantBegun {
            grant: grant.facts(),
            attempt: lease.attempt,
        };
        self.log
            .begun(begun, store.grant_clock.now())
            .await
            .map_err(RunError::Grant)?;
        if let Err(refusal) = self.check(&grant).await {
            grant.finish(&lease, Finish::Failed);
            write(&tx, &grant).await?;
            commit(store, tx).await.map_err(unavailable)?;
            let failed = DecisionEvent::GrantFailed {
                grant: grant.facts(),
                reason: refusal.reason(),
            };
            self.log.report(failed, store.grant_clock.now());
            return Err(RunError::Grant(GrantError::Refused(refusal)));
        }
        // On an error the transaction is dropped: the change and the grant roll back together.
        let value = action(&tx, &grant).await.map_err(RunError::Action)?;
        grant.finish(&lease, Finish::Consumed);
        write(&tx, &grant).await?;
        commit(store, tx).await.map_err(unavailable)?;
        let consumed = DecisionEvent::GrantConsumed {
            grant: grant.facts(),
            attempt: lease.attempt,
        };
        self.log.report(consumed, store.grant_clock.now());
        Ok(value)
    }
}

async fn commit(store: &PostgresStore, tx: Transaction<'_>) -> Result<(), GrantStoreError> {
    bounded(store.timeout, async { tx.commit().await.map_err(backend) }).await
}

impl GrantStore for PostgresStore {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        let mut fresh = grant.clone();
        fresh.state = GrantState::Granted;
        let (id, text) = (grant.id.to_string(), record::encode(&fresh));
        let keep_until: SystemTime = grant.expires_at + self.grant_retention;
        let sql = format!(
            "INSERT INTO {} (id, record, keep_until) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
            self.grants_table
        );
        Box::pin(bounded(self.timeout, async move {
            let client = self.pool.get().await.map_err(backend)?;
            let inserted = client
                .execute(&sql, &[&id, &text, &keep_until])
                .await
                .map_err(backend)?;
            if inserted == 1 {
                Ok(())
            } else {
                Err(GrantStoreError::Exists)
            }
        }))
    }

    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            // The time is read once the row is locked, so a lease never starts in the past.
            let clock = Arc::clone(&self.grant_clock);
            self.grant_transition(id, Begin::Unknown, move |g| g.begin(clock.now(), lease))
                .await
        }))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        Box::pin(bounded(
            self.timeout,
            self.grant_transition(lease.grant, false, move |g| g.finish(&lease, outcome)),
        ))
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        Box::pin(bounded(self.timeout, async move {
            let clock = Arc::clone(&self.grant_clock);
            self.grant_transition(id, Revoke::Unknown, move |g| g.revoke(clock.now()))
                .await
        }))
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        let now = self.grant_clock.now();
        Box::pin(async move {
            let grant = self.get(lease.grant).await?;
            Ok(grant.is_some_and(|grant| grant.holds(&lease, now)))
        })
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        let sql = format!("SELECT record FROM {} WHERE id = $1", self.grants_table);
        Box::pin(bounded(self.timeout, async move {
            let client = self.pool.get().await.map_err(backend)?;
            let row = client
                .query_opt(&sql, &[&id.to_string()])
                .await
                .map_err(backend)?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let text: String = row.try_get(0).map_err(backend)?;
                    record::decode(&text)
                        .map(Some)
                        .ok_or_else(|| GrantStoreError::Corrupt)
                }
            }
        }))
    }
}
