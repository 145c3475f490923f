//! The one fault-injecting store of the tests: memory stores for grants and standing approvals
//! that record what was issued and begun, and fail, wait or age as a test says. Each test used
//! to write its own wrapper (a counting grant store twice, one that is down, one whose worker is
//! gone, one that is slow after `begin`, a standing store that cannot be read).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mcp_confirm::grant::{
    Begin, Finish, Grant, GrantId, GrantStore, GrantStoreError, Lease, MemoryGrantStore, Revoke,
};
use mcp_confirm::store::standing::{Standing, StandingId, StandingKey, StandingStore, Use};
use mcp_confirm::store::{BoxFuture, MemoryReplayStore, Nonce, PrincipalKey, StoreError};

/// What goes wrong, and when.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Every call fails (`Timeout`): a store that is down.
    pub down: bool,
    /// `issue` waits this long before storing (so racing retries overlap).
    pub issue_delay: Option<Duration>,
    /// Grants are stored already expired and `begin` fails: their worker is gone.
    pub worker_gone: bool,
    /// A `begin` that started an attempt answers this much later (a paused worker).
    pub slow_after_begin: Option<Duration>,
    /// Standing approvals are kept but cannot be read: every `find`, `use_one` and
    /// `give_back` fails (`Timeout`).
    pub standing_unreadable: bool,
}

/// Memory stores (grants, standing approvals) with [`Faults`].
#[derive(Debug, Clone)]
pub struct Faulty {
    pub inner: Arc<MemoryGrantStore>,
    /// Where standing approvals are kept.
    pub standing: MemoryReplayStore,
    faults: Faults,
    /// The ids `issue` was asked to store, in order.
    pub issued: Arc<Mutex<Vec<GrantId>>>,
    /// The ids stored.
    pub stored: Arc<Mutex<Vec<GrantId>>>,
    /// The last grant whose attempt `begin` started, and a wake-up when one starts.
    pub last_begun: Arc<Mutex<Option<GrantId>>>,
    pub began: Arc<tokio::sync::Notify>,
}

impl Faulty {
    pub fn new(inner: MemoryGrantStore, faults: Faults) -> Self {
        Self {
            inner: Arc::new(inner),
            standing: MemoryReplayStore::new(),
            faults,
            issued: Arc::default(),
            stored: Arc::default(),
            last_begun: Arc::default(),
            began: Arc::default(),
        }
    }

    /// A store that records and never fails.
    pub fn recording(inner: MemoryGrantStore) -> Self {
        Self::new(inner, Faults::default())
    }

    /// Keeps standing approvals in `store`.
    pub fn with_standing(mut self, store: MemoryReplayStore) -> Self {
        self.standing = store;
        self
    }

    fn unreadable<T: Send + 'static>(&self) -> Option<BoxFuture<'_, Result<T, StoreError>>> {
        (self.faults.down || self.faults.standing_unreadable)
            .then(|| Box::pin(std::future::ready(Err(StoreError::Timeout))) as _)
    }

    fn down<T: Send + 'static>(&self) -> Option<BoxFuture<'_, Result<T, GrantStoreError>>> {
        self.faults
            .down
            .then(|| Box::pin(std::future::ready(Err(GrantStoreError::Timeout))) as _)
    }
}

impl GrantStore for Faulty {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        if let Some(down) = self.down() {
            return down;
        }
        self.issued.lock().unwrap().push(grant.id);
        let mut grant = grant.clone();
        if self.faults.worker_gone {
            grant.expires_at = SystemTime::now() - Duration::from_secs(1);
        }
        Box::pin(async move {
            if let Some(delay) = self.faults.issue_delay {
                tokio::time::sleep(delay).await;
            }
            let result = self.inner.issue(&grant).await;
            if result.is_ok() {
                self.stored.lock().unwrap().push(grant.id);
            }
            result
        })
    }

    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
        if let Some(down) = self.down() {
            return down;
        }
        if self.faults.worker_gone {
            return Box::pin(std::future::ready(Err(GrantStoreError::Timeout)));
        }
        Box::pin(async move {
            let begun = self.inner.begin(id, lease).await;
            if let Ok(Begin::Started(_)) = begun {
                *self.last_begun.lock().unwrap() = Some(id);
                self.began.notify_one();
                if let Some(delay) = self.faults.slow_after_begin {
                    tokio::time::sleep(delay).await;
                }
            }
            begun
        })
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        self.down()
            .unwrap_or_else(|| self.inner.finish(lease, outcome))
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        self.down().unwrap_or_else(|| self.inner.revoke(id))
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        self.down().unwrap_or_else(|| self.inner.confirm(lease))
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        self.down().unwrap_or_else(|| self.inner.get(id))
    }
}

impl StandingStore for Faulty {
    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        self.standing.grant(standing)
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        self.unreadable().unwrap_or_else(|| self.standing.find(key))
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        self.unreadable()
            .unwrap_or_else(|| self.standing.use_one(key, id, ticket))
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.unreadable()
            .unwrap_or_else(|| self.standing.give_back(key, id, ticket))
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        self.standing.list(principal)
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        StandingStore::revoke(&self.standing, principal, id)
    }
}
