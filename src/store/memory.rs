//! The in-process replay store: one process, single use, bounded memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry as MapEntry;

use super::{BoxFuture, Claim, Nonce, Owner, ReplayStore, StoreError};
use crate::clock::{Clock, SystemClock};

/// The default number of live entries a [`MemoryReplayStore`] holds.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// A replay store in this process's memory.
///
/// Claims are atomic per nonce (a `DashMap` entry), so any number of concurrent retries of one state
/// see exactly one [`Claim::Claimed`]. Memory is bounded by a hard capacity: when every slot holds a
/// live entry, expired entries are pruned, and if none are, the claim is refused with
/// [`StoreError::Full`]. A live entry is never evicted, because that would reopen its replay window.
///
/// This gives single use within one process only. Several instances behind a load balancer need a
/// shared backend. Clones share the same entries.
#[derive(Debug, Clone)]
pub struct MemoryReplayStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    entries: DashMap<Nonce, Entry>,
    len: AtomicUsize,
    capacity: usize,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    expires_at: SystemTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    InFlight(Owner),
    Consumed,
}

impl Entry {
    /// How a claim of an unexpired entry is answered; `None` once it has expired.
    fn live(&self, now: SystemTime) -> Option<Claim> {
        (self.expires_at > now).then_some(self.state.into())
    }
}

impl From<State> for Claim {
    fn from(state: State) -> Self {
        match state {
            State::InFlight(_) => Claim::InFlight,
            State::Consumed => Claim::Consumed,
        }
    }
}

impl Default for MemoryReplayStore {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl MemoryReplayStore {
    /// A store holding up to [`DEFAULT_CAPACITY`] live entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding up to `capacity` live entries (at least one).
    ///
    /// Size it above `confirmations issued per second × (TTL + skew)`; past that, claims are refused.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_clock(capacity, SystemClock)
    }

    /// A store that reads time from `clock`; for tests of expiry.
    pub fn with_clock(capacity: usize, clock: impl Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                entries: DashMap::new(),
                len: AtomicUsize::new(0),
                capacity: capacity.max(1),
                clock: Arc::new(clock),
            }),
        }
    }

    /// The number of entries held, live or expired-but-not-yet-pruned.
    pub fn len(&self) -> usize {
        self.inner.len.load(Ordering::Acquire)
    }

    /// Whether the store holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries the store holds.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Drops every expired entry and returns how many were dropped.
    ///
    /// Claims prune on their own when the store is full; call this from a timer to give memory back
    /// sooner.
    pub fn prune_expired(&self) -> usize {
        self.inner.prune(self.inner.clock.now())
    }

    fn claim_now(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> Result<Claim, StoreError> {
        let inner = &*self.inner;
        let now = inner.clock.now();
        // Fast path for replays: no slot needed to turn away a live entry.
        if let Some(answer) = inner.entries.get(&nonce).and_then(|held| held.live(now)) {
            return Ok(answer);
        }
        // Reserve a slot before touching the map: pruning takes every shard lock, so it must not run
        // while this thread holds an entry.
        if !inner.reserve(now) {
            return Err(StoreError::Full);
        }
        let fresh = Entry {
            state: State::InFlight(owner),
            expires_at,
        };
        match inner.entries.entry(nonce) {
            MapEntry::Vacant(slot) => {
                slot.insert(fresh);
                Ok(Claim::Claimed)
            }
            MapEntry::Occupied(mut slot) => {
                inner.len.fetch_sub(1, Ordering::AcqRel);
                if let Some(answer) = slot.get().live(now) {
                    return Ok(answer);
                }
                // Expired: its token no longer verifies, so reusing the slot reopens nothing.
                slot.insert(fresh);
                Ok(Claim::Claimed)
            }
        }
    }

    fn complete_now(&self, nonce: Nonce, owner: Owner) -> bool {
        let now = self.inner.clock.now();
        match self.inner.entries.get_mut(&nonce) {
            Some(mut entry) if entry.state == State::InFlight(owner) && entry.expires_at > now => {
                entry.state = State::Consumed;
                true
            }
            _ => false,
        }
    }
}

impl Inner {
    fn reserve(&self, now: SystemTime) -> bool {
        if self.try_reserve() {
            return true;
        }
        self.prune(now);
        self.try_reserve()
    }

    fn try_reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok()
    }

    fn prune(&self, now: SystemTime) -> usize {
        let mut dropped = 0;
        self.entries.retain(|_, entry| {
            let keep = entry.expires_at > now;
            if !keep {
                dropped += 1;
            }
            keep
        });
        self.len.fetch_sub(dropped, Ordering::AcqRel);
        dropped
    }
}

impl ReplayStore for MemoryReplayStore {
    fn claim(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        let result = self.claim_now(nonce, owner, expires_at);
        Box::pin(std::future::ready(result))
    }

    fn complete(
        &self,
        nonce: Nonce,
        owner: Owner,
        _expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let result = self.complete_now(nonce, owner);
        Box::pin(std::future::ready(Ok(result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    crate::replay_store_conformance!(MemoryReplayStore::new());

    fn nonce(i: u32) -> Nonce {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&i.to_be_bytes());
        Nonce::from_bytes(b)
    }

    #[tokio::test]
    async fn full_of_live_entries_refuses_and_never_evicts() {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
        let store = MemoryReplayStore::with_clock(3, clock.clone());
        let exp = clock.now() + Duration::from_secs(60);
        for i in 0..3 {
            assert_eq!(
                store.claim(nonce(i), Owner::random(), exp).await.unwrap(),
                Claim::Claimed
            );
        }
        assert!(matches!(
            store.claim(nonce(99), Owner::random(), exp).await,
            Err(StoreError::Full)
        ));
        // The live ones are all still there.
        for i in 0..3 {
            assert_eq!(
                store.claim(nonce(i), Owner::random(), exp).await.unwrap(),
                Claim::InFlight
            );
        }
        assert_eq!(store.len(), 3);
        // Once they expire, room is made by pruning, not eviction.
        clock.advance(Duration::from_secs(61));
        assert_eq!(
            store
                .claim(nonce(99), Owner::random(), exp + Duration::from_secs(120))
                .await
                .unwrap(),
            Claim::Claimed
        );
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn expired_entries_are_pruned() {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
        let store = MemoryReplayStore::with_clock(100, clock.clone());
        for i in 0..10 {
            let exp = clock.now() + Duration::from_secs(u64::from(i) + 1);
            store.claim(nonce(i), Owner::random(), exp).await.unwrap();
        }
        clock.advance(Duration::from_secs(5));
        assert_eq!(store.prune_expired(), 5);
        assert_eq!(store.len(), 5);
    }

    #[tokio::test]
    async fn memory_stays_bounded_over_many_short_lived_claims() {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
        let store = MemoryReplayStore::with_clock(1_000, clock.clone());
        for i in 0..1_000_000u32 {
            if i % 500 == 0 {
                clock.advance(Duration::from_secs(2));
            }
            let exp = clock.now() + Duration::from_secs(1);
            assert_eq!(
                store.claim(nonce(i), Owner::random(), exp).await.unwrap(),
                Claim::Claimed
            );
            assert!(store.len() <= 1_000);
        }
    }

    #[tokio::test]
    async fn completing_an_expired_claim_fails() {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
        let store = MemoryReplayStore::with_clock(10, clock.clone());
        let owner = Owner::random();
        store
            .claim(nonce(1), owner, clock.now() + Duration::from_secs(1))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
        assert!(!store.complete(nonce(1), owner, clock.now()).await.unwrap());
    }
}
