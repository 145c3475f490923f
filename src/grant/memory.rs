//! Grants in this process's memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::{
    Begin, Finish, Grant, GrantId, GrantState, GrantStore, GrantStoreError, Lease, Revoke,
};
use crate::clock::{Clock, SystemClock};
use crate::kernel::{BoxFuture, PrincipalKey};

/// Grants in this process's memory: for one instance, and for tests. A restart forgets them all,
/// and a forgotten grant never runs ([`Begin::Unknown`]).
pub struct MemoryGrantStore {
    grants: Mutex<Grants>,
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
            grants: Mutex::new(Grants::default()),
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

    fn with<T>(&self, f: impl FnOnce(&mut Grants) -> T) -> Result<T, GrantStoreError> {
        let mut grants = self
            .grants
            .lock()
            .map_err(|_| GrantStoreError::Backend("the grant map's lock is poisoned".into()))?;
        Ok(f(&mut grants))
    }
}

/// The grants, and each principal's grant ids, so a principal's budget is counted over its own
/// grants, not the whole store. An id stays listed until its principal issues again or the store
/// forgets ended grants, whichever is first: the lists never hold more ids than were issued
/// since the last sweep, plus the grants held.
#[derive(Default)]
struct Grants {
    by_id: HashMap<GrantId, Grant>,
    by_principal: HashMap<PrincipalKey, Vec<GrantId>>,
}

impl std::ops::Deref for Grants {
    type Target = HashMap<GrantId, Grant>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

impl std::ops::DerefMut for Grants {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.by_id
    }
}

impl Grants {
    /// Forgets what can never run again (ended grants, and expired ones no live lease holds),
    /// and the ids of forgotten grants.
    fn sweep(&mut self, now: SystemTime) {
        self.by_id.retain(|_, g| !g.can_never_run(now));
        let by_id = &self.by_id;
        self.by_principal.retain(|_, ids| {
            ids.retain(|id| by_id.contains_key(id));
            !ids.is_empty()
        });
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
            if grants.by_id.contains_key(&grant.id) {
                return Err(GrantStoreError::Exists);
            }
            // This principal's grants that can still run; ids of the others leave the list.
            let Grants {
                by_id,
                by_principal,
            } = grants;
            let ids = by_principal.entry(grant.principal).or_default();
            ids.retain(|id| by_id.get(id).is_some_and(|g| !g.can_never_run(now)));
            if ids.len() >= self.budget {
                let retry_after = ids
                    .iter()
                    .filter_map(|id| by_id.get(id).map(|g| g.expires_at))
                    .min()
                    .and_then(|at| at.duration_since(now).ok())
                    .unwrap_or_default();
                return Err(GrantStoreError::OverBudget { retry_after });
            }
            if grants.by_id.len() >= self.capacity {
                grants.sweep(now);
                if grants.by_id.len() >= self.capacity {
                    return Err(GrantStoreError::Full);
                }
            }
            let mut fresh = grant.clone();
            fresh.state = GrantState::Granted;
            grants.by_id.insert(grant.id, fresh);
            grants
                .by_principal
                .entry(grant.principal)
                .or_default()
                .push(grant.id);
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
