//! Grants in this process's memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::{
    Begin, Finish, Grant, GrantId, GrantState, GrantStore, GrantStoreError, Lease, Revoke,
};
use crate::clock::{Clock, SystemClock};
use crate::kernel::BoxFuture;

/// Grants in this process's memory: for one instance, and for tests. A restart forgets them all,
/// and a forgotten grant never runs ([`Begin::Unknown`]).
pub struct MemoryGrantStore {
    grants: Mutex<HashMap<GrantId, Grant>>,
    capacity: usize,
    budget: usize,
    clock: Arc<dyn Clock>,
}

impl MemoryGrantStore {
    /// The default number of grants held.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// A store holding up to [`Self::DEFAULT_CAPACITY`] grants.
    pub fn new() -> Self {
        Self::with_clock(Self::DEFAULT_CAPACITY, SystemClock)
    }

    /// A store holding up to `capacity` grants, reading the time from `clock`. Ended grants are
    /// forgotten first when it is full; live ones never are (a full store refuses new grants).
    pub fn with_clock(capacity: usize, clock: impl Clock) -> Self {
        let capacity = capacity.max(1);
        Self {
            grants: Mutex::new(HashMap::new()),
            capacity,
            budget: (capacity / 100).max(1),
            clock: Arc::new(clock),
        }
    }

    /// Caps each principal's grants that can still run (default: 1 % of the capacity, at least
    /// one), so one principal cannot fill the store for everyone; over it, `issue` answers
    /// [`GrantStoreError::OverBudget`].
    pub fn principal_budget(mut self, budget: usize) -> Self {
        self.budget = budget.clamp(1, self.capacity);
        self
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut HashMap<GrantId, Grant>) -> T,
    ) -> Result<T, GrantStoreError> {
        let mut grants = self
            .grants
            .lock()
            .map_err(|_| GrantStoreError::Backend("the grant map's lock is poisoned".into()))?;
        Ok(f(&mut grants))
    }
}

impl Default for MemoryGrantStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryGrantStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryGrantStore")
            .field("capacity", &self.capacity)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl GrantStore for MemoryGrantStore {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        let now = self.clock.now();
        let result = self.with(|grants| {
            if grants.contains_key(&grant.id) {
                return Err(GrantStoreError::Exists);
            }
            let mut live = grants
                .values()
                .filter(|g| g.principal == grant.principal && !g.can_never_run(now))
                .map(|g| g.expires_at)
                .peekable();
            if live.peek().is_some() {
                let (count, soonest) = live.fold((0usize, None::<SystemTime>), |(n, s), at| {
                    (n + 1, Some(s.map_or(at, |s| s.min(at))))
                });
                if count >= self.budget {
                    let retry_after = soonest
                        .and_then(|at| at.duration_since(now).ok())
                        .unwrap_or_default();
                    return Err(GrantStoreError::OverBudget { retry_after });
                }
            }
            if grants.len() >= self.capacity {
                // Forget what can never run again: ended grants, and expired ones no live lease
                // holds.
                grants.retain(|_, g| !g.can_never_run(now));
                if grants.len() >= self.capacity {
                    return Err(GrantStoreError::Full);
                }
            }
            let mut fresh = grant.clone();
            fresh.state = GrantState::Granted;
            grants.insert(grant.id, fresh);
            Ok(())
        });
        Box::pin(std::future::ready(result.and_then(|r| r)))
    }

    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
        let now = self.clock.now();
        let result = self.with(|grants| match grants.get_mut(&id) {
            Some(grant) => grant.begin(now, lease),
            None => Begin::Unknown,
        });
        Box::pin(std::future::ready(result))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        let result = self.with(|grants| {
            grants
                .get_mut(&lease.grant)
                .is_some_and(|grant| grant.finish(&lease, outcome))
        });
        Box::pin(std::future::ready(result))
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        let now = self.clock.now();
        let result = self.with(|grants| match grants.get_mut(&id) {
            Some(grant) => grant.revoke(now),
            None => Revoke::Unknown,
        });
        Box::pin(std::future::ready(result))
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        let now = self.clock.now();
        let result = self.with(|grants| {
            grants
                .get(&lease.grant)
                .is_some_and(|grant| grant.holds(&lease, now))
        });
        Box::pin(std::future::ready(result))
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        let result = self.with(|grants| grants.get(&id).cloned());
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::grant::conformance;

    crate::grant_store_conformance!(memory, {
        let clock = ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        (MemoryGrantStore::with_clock(1000, clock.clone()), clock)
    });

    #[test]
    fn a_full_store_forgets_ended_grants_first_and_never_live_ones() {
        let clock = ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let store = MemoryGrantStore::with_clock(2, clock.clone());
        let a = conformance::grant(&clock, Duration::from_secs(60));
        let b = conformance::grant(&clock, Duration::from_secs(60));
        let c = conformance::grant(&clock, Duration::from_secs(60));
        let ready = |f: BoxFuture<'_, Result<(), GrantStoreError>>| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut f = f;
            match f.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => panic!("the memory store answers at once"),
            }
        };
        ready(store.issue(&a)).unwrap();
        ready(store.issue(&b)).unwrap();
        assert!(matches!(ready(store.issue(&c)), Err(GrantStoreError::Full)));
        store
            .with(|g| g.get_mut(&a.id).map(|g| g.revoke(clock.now())))
            .unwrap();
        ready(store.issue(&c)).unwrap();
        assert!(
            store
                .with(|g| !g.contains_key(&a.id) && g.contains_key(&b.id))
                .unwrap()
        );
    }
}
