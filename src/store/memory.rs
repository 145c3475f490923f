//! The in-process replay store: one process, single use, bounded memory, per-principal budgets.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry as MapEntry;

use super::approval::{
    Approval, ApprovalId, ApprovalStore, Decided, Decider, Decision, MAX_PENDING_APPROVALS,
};
use super::batch::{BatchDecision, SetDigest};
use super::passkey::{
    MAX_PASSKEYS_PER_SUBJECT, PasskeyStore, Registered, RegisteredPasskey, subject_key,
};
use super::standing::{
    MAX_STANDING_PER_PRINCIPAL, Standing, StandingId, StandingKey, StandingStore, Use,
};
use super::{
    BootEpoch, BoxFuture, Claim, ClaimRequest, Nonce, Owner, PrincipalKey, ReplayStore, StoreError,
};
use crate::clock::{Clock, SystemClock};

/// A replay store in this process's memory.
///
/// Claims are atomic per nonce (a `DashMap` entry), so any number of concurrent retries of one state
/// see exactly one [`Claim::Claimed`]. Memory is bounded by a hard capacity: when every slot holds a
/// live entry, expired entries are pruned, and if none are, the claim is refused with
/// [`StoreError::Full`]. A live entry is never evicted, because that would reopen its replay window.
/// Each principal may hold at most a budget of live entries (default 1 % of the capacity), so no
/// single principal can fill the store for everyone else.
///
/// This gives single use within one process and one process lifetime only. Several instances behind
/// a load balancer need a shared backend; and because a restart forgets every entry, each store has
/// a random [`BootEpoch`] that the layer binds into its states: states issued before a restart are
/// refused ("ask again") instead of being accepted a second time. Clones share the same entries and
/// epoch.
#[derive(Debug, Clone)]
pub struct MemoryReplayStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    entries: DashMap<Nonce, Entry>,
    /// Each principal's entries, soonest expiry first; expired ones leave lazily.
    principals: DashMap<PrincipalKey, BinaryHeap<Reverse<(SystemTime, Nonce)>>>,
    len: AtomicUsize,
    capacity: usize,
    budget: usize,
    epoch: BootEpoch,
    clock: Arc<dyn Clock>,
    /// Browser approvals, until their expiry; at most `capacity`.
    approvals: DashMap<ApprovalId, Approval>,
    /// Each principal's pending approvals (id, expiry), so `propose` counts a principal's
    /// share over its own, not over the whole store; ids of gone or expired ones leave lazily.
    pending: DashMap<PrincipalKey, Vec<(ApprovalId, SystemTime)>>,
    /// Batch decisions by set, until their last member's expiry (each member is an approval,
    /// so there are never more of them than approvals).
    batches: DashMap<SetDigest, BatchDecision>,
    /// Standing approvals by key, until their expiry; at most `capacity`.
    standing: DashMap<StandingKey, Kept>,
    /// Held while a grant counts and inserts, so two grants never both pass one cap.
    granting: std::sync::Mutex<()>,
    /// Registered passkeys by subject digest; and each credential id's subject digest.
    passkeys: DashMap<String, Vec<RegisteredPasskey>>,
    passkey_owners: DashMap<String, String>,
    /// Held while a passkey is registered or removed: the two maps change together.
    registering: std::sync::Mutex<()>,
}

/// A standing approval and the tickets of the uses spent of it, so a give-back finds exactly
/// the use its ticket spent (at most [`MAX_STANDING_USES`](super::standing::MAX_STANDING_USES)).
#[derive(Debug)]
struct Kept {
    standing: Standing,
    tickets: std::collections::HashSet<Nonce>,
}

impl Inner {
    /// Forgets expired approvals, and the per-principal ids of those gone.
    fn sweep_approvals(&self, now: SystemTime) {
        self.approvals.retain(|_, a| now < a.expires_at);
        self.batches.retain(|_, b| now < b.expires_at);
        self.pending.retain(|_, mine| {
            mine.retain(|(id, at)| now < *at && self.approvals.contains_key(id));
            !mine.is_empty()
        });
    }
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
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }
}

impl MemoryReplayStore {
    /// The default number of live entries a [`MemoryReplayStore`] holds.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// A store holding up to [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) live entries, at most 1,000 per principal.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding up to `capacity` live entries (at least one), at most 1 % of them (at least
    /// one) per principal.
    ///
    /// Size it above `confirmations issued per second × (TTL + 2 × skew)`; past that, claims are
    /// refused.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_clock(capacity, SystemClock)
    }

    /// A store that reads time from `clock`; for tests of expiry.
    pub fn with_clock(capacity: usize, clock: impl Clock) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Arc::new(Inner {
                entries: DashMap::new(),
                principals: DashMap::new(),
                len: AtomicUsize::new(0),
                capacity,
                budget: (capacity / 100).max(1),
                epoch: BootEpoch::random(),
                clock: Arc::new(clock),
                approvals: DashMap::new(),
                batches: DashMap::new(),
                pending: DashMap::new(),
                standing: DashMap::new(),
                granting: std::sync::Mutex::new(()),
                passkeys: DashMap::new(),
                passkey_owners: DashMap::new(),
                registering: std::sync::Mutex::new(()),
            }),
        }
    }

    /// Caps each principal's live entries at `budget` (at least one, at most the capacity).
    ///
    /// # Panics
    /// If called on a store that has been cloned (and so may be in use); set it right after
    /// construction.
    pub fn principal_budget(mut self, budget: usize) -> Self {
        let capacity = self.inner.capacity;
        #[allow(clippy::expect_used)]
        let inner = Arc::get_mut(&mut self.inner)
            .expect("set the principal budget before the store is cloned or shared");
        inner.budget = budget.clamp(1, capacity);
        self
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

    /// The most live entries one principal holds.
    pub fn budget(&self) -> usize {
        self.inner.budget
    }

    /// Drops every expired entry and returns how many were dropped.
    ///
    /// Claims prune on their own when the store is full; call this from a timer to give memory back
    /// sooner.
    pub fn prune_expired(&self) -> usize {
        let now = self.inner.clock.now();
        let approvals = self.inner.approvals.len();
        self.inner.sweep_approvals(now);
        let approvals = approvals.saturating_sub(self.inner.approvals.len());
        self.inner.prune(now) + approvals
    }

    fn claim_now(&self, claim: &ClaimRequest) -> Result<Claim, StoreError> {
        let inner = &*self.inner;
        let now = inner.clock.now();
        // Fast path for replays: no slot needed to turn away a live entry.
        if let Some(answer) = inner
            .entries
            .get(&claim.nonce)
            .and_then(|held| held.live(now))
        {
            return Ok(answer);
        }
        // Reserve a slot before taking any lock: pruning takes every shard lock, so it must not run
        // while this thread holds an entry.
        if !inner.reserve(now) {
            return Err(StoreError::Full);
        }
        // Lock order: the principal's heap, then the nonce's entry (pruning never holds both).
        let mut mine = inner.principals.entry(claim.principal).or_default();
        inner.drop_expired_heads(&mut mine, now);
        if mine.len() >= inner.budget {
            inner.len.fetch_sub(1, Ordering::AcqRel);
            // A live entry of the same nonce answers as a replay, never as a budget refusal.
            if let Some(answer) = inner
                .entries
                .get(&claim.nonce)
                .and_then(|held| held.live(now))
            {
                return Ok(answer);
            }
            let oldest = mine.peek().map_or(now, |Reverse((at, _))| *at);
            let retry_after = oldest.duration_since(now).unwrap_or_default();
            return Err(StoreError::OverBudget {
                retry_after: retry_after.max(Duration::from_secs(1)),
            });
        }
        let fresh = Entry {
            state: State::InFlight(claim.owner),
            expires_at: claim.expires_at,
        };
        match inner.entries.entry(claim.nonce) {
            MapEntry::Vacant(slot) => {
                slot.insert(fresh);
            }
            MapEntry::Occupied(mut slot) => {
                inner.len.fetch_sub(1, Ordering::AcqRel);
                if let Some(answer) = slot.get().live(now) {
                    return Ok(answer);
                }
                // Expired: its token no longer verifies, so reusing the slot reopens nothing.
                slot.insert(fresh);
            }
        }
        mine.push(Reverse((claim.expires_at, claim.nonce)));
        Ok(Claim::Claimed)
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

    fn is_used_now(&self, nonce: Nonce) -> bool {
        let now = self.inner.clock.now();
        self.inner
            .entries
            .get(&nonce)
            .is_some_and(|held| held.live(now).is_some())
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

    /// Forgets a principal's expired entries (the caller holds that principal's heap).
    fn drop_expired_heads(
        &self,
        heap: &mut BinaryHeap<Reverse<(SystemTime, Nonce)>>,
        now: SystemTime,
    ) {
        while let Some(Reverse((at, nonce))) = heap.peek().copied() {
            if at > now {
                break;
            }
            heap.pop();
            // The slot may have been pruned already, or reused by a newer claim: leave those.
            if self
                .entries
                .remove_if(&nonce, |_, entry| entry.expires_at <= now)
                .is_some()
            {
                self.len.fetch_sub(1, Ordering::AcqRel);
            }
        }
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
        self.principals.retain(|_, heap| {
            heap.retain(|Reverse((at, _))| *at > now);
            !heap.is_empty()
        });
        dropped
    }
}

impl ReplayStore for MemoryReplayStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>> {
        let result = self.claim_now(claim);
        Box::pin(std::future::ready(result))
    }

    fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>> {
        let result = self.complete_now(claim.nonce, claim.owner);
        Box::pin(std::future::ready(Ok(result)))
    }

    fn is_used(
        &self,
        nonce: Nonce,
        _principal: PrincipalKey,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(self.is_used_now(nonce))))
    }

    fn boot_epoch(&self) -> Option<BootEpoch> {
        Some(self.inner.epoch)
    }
}

impl StandingStore for MemoryReplayStore {
    fn live<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let now = self.inner.clock.now();
        let live = self
            .inner
            .standing
            .iter()
            .filter(|k| k.standing.audience == audience && k.standing.is_live(now))
            .count();
        Box::pin(std::future::ready(Ok(Some(live as u64))))
    }

    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        let inner = &self.inner;
        let answer = (|| {
            standing.check_keepable()?;
            let _one_at_a_time = inner.granting.lock().map_err(|_| StoreError::Full)?;
            let now = inner.clock.now();
            inner.standing.retain(|_, k| now < k.standing.expires_at);
            let key = standing.key();
            // The approval this one replaces does not count against it.
            let held = inner
                .standing
                .iter()
                .filter(|k| {
                    *k.key() != key
                        && k.standing.principal == standing.principal
                        && k.standing.is_live(now)
                })
                .count();
            if held >= MAX_STANDING_PER_PRINCIPAL.min(inner.budget) {
                let soonest = inner
                    .standing
                    .iter()
                    .filter(|k| k.standing.principal == standing.principal)
                    .map(|k| k.standing.expires_at)
                    .min()
                    .unwrap_or(now);
                return Err(StoreError::OverBudget {
                    retry_after: soonest.duration_since(now).unwrap_or_default(),
                });
            }
            if !inner.standing.contains_key(&key) && inner.standing.len() >= inner.capacity {
                return Err(StoreError::Full);
            }
            // A replacement starts with no tickets: the old approval's give nothing back here.
            inner.standing.insert(
                key,
                Kept {
                    standing: standing.clone(),
                    tickets: std::collections::HashSet::new(),
                },
            );
            Ok(())
        })();
        Box::pin(std::future::ready(answer))
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        let now = self.inner.clock.now();
        let found = self
            .inner
            .standing
            .get(&key)
            .filter(|k| now < k.standing.expires_at)
            .map(|k| k.standing.clone());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        let now = self.inner.clock.now();
        // The entry's shard lock makes the check, the count and the ticket one step.
        let used = match self.inner.standing.get_mut(&key) {
            Some(mut kept) if kept.standing.id == id => {
                let used = kept.standing.use_one(now);
                if let Use::Used { .. } = used {
                    kept.tickets.insert(ticket);
                }
                used
            }
            _ => Use::Unknown,
        };
        Box::pin(std::future::ready(Ok(used)))
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        // Under the entry's shard lock: the ticket is taken and the use returned in one step.
        let given = match self.inner.standing.get_mut(&key) {
            Some(mut kept) if kept.standing.id == id => {
                let held = kept.tickets.remove(&ticket);
                if held {
                    kept.standing.give_back();
                }
                held
            }
            _ => false,
        };
        Box::pin(std::future::ready(Ok(given)))
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        let now = self.inner.clock.now();
        let mut live: Vec<Standing> = self
            .inner
            .standing
            .iter()
            .filter(|k| k.standing.principal == principal && k.standing.is_live(now))
            .map(|k| k.standing.clone())
            .collect();
        live.sort_by_key(|s| s.expires_at);
        Box::pin(std::future::ready(Ok(live)))
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let now = self.inner.clock.now();
        let mut revoked = 0;
        for mut kept in self.inner.standing.iter_mut() {
            let standing = &mut kept.standing;
            if standing.principal == principal
                && id.is_none_or(|id| standing.id == id)
                && standing.is_live(now)
            {
                standing.revoked = true;
                revoked += 1;
            }
        }
        Box::pin(std::future::ready(Ok(revoked)))
    }
}

impl ApprovalStore for MemoryReplayStore {
    fn pending<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let now = self.inner.clock.now();
        let pending = self
            .inner
            .approvals
            .iter()
            .filter(|a| now < a.expires_at && a.decision.is_none() && a.audience == audience)
            .count();
        Box::pin(std::future::ready(Ok(Some(pending as u64))))
    }

    fn propose(&self, approval: &Approval) -> BoxFuture<'_, Result<(), StoreError>> {
        let inner = &self.inner;
        let now = inner.clock.now();
        if inner.approvals.len() >= inner.capacity {
            // Full: forget the expired ones (reads already ignore them) before deciding. Expired
            // approvals stay until then, so both maps stay within about `capacity`.
            inner.sweep_approvals(now);
        }
        // The principal's list stays locked while it is counted and the approval inserted, so
        // two proposals of one principal never both pass its budget.
        let mut mine = inner.pending.entry(approval.principal).or_default();
        mine.retain(|(id, at)| now < *at && inner.approvals.contains_key(id));
        // Budgeted like nonces: never more than the principal's share of this store's capacity,
        // so one principal's pending approvals cannot fill a small store for everyone.
        if mine.len() >= MAX_PENDING_APPROVALS.min(inner.budget) {
            let retry_after = mine
                .iter()
                .map(|(_, at)| *at)
                .min()
                .and_then(|at| at.duration_since(now).ok())
                .unwrap_or_default();
            return Box::pin(std::future::ready(Err(StoreError::OverBudget {
                retry_after,
            })));
        }
        let result = if inner.approvals.len() >= inner.capacity {
            Err(StoreError::Full)
        } else {
            match inner.approvals.entry(approval.id) {
                MapEntry::Occupied(_) => Err(StoreError::Backend(
                    "an approval with this id exists".into(),
                )),
                MapEntry::Vacant(slot) => {
                    slot.insert(approval.clone());
                    mine.push((approval.id, approval.expires_at));
                    Ok(())
                }
            }
        };
        Box::pin(std::future::ready(result))
    }

    fn approval(&self, id: ApprovalId) -> BoxFuture<'_, Result<Option<Approval>, StoreError>> {
        let now = self.inner.clock.now();
        let found = self
            .inner
            .approvals
            .get(&id)
            .filter(|a| now < a.expires_at)
            .map(|a| a.clone());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn decide(
        &self,
        id: ApprovalId,
        decider: Decider,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>> {
        let now = self.inner.clock.now();
        let decided = match self.inner.approvals.get_mut(&id) {
            Some(mut approval) => approval.decide(decider, decision, now),
            None => Decided::Unknown,
        };
        Box::pin(std::future::ready(Ok(decided)))
    }

    fn inbox<'a>(
        &'a self,
        audience: &'a str,
        routes: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        let now = self.inner.clock.now();
        // A scan: the memory store holds one process's approvals, and `propose` scans as much.
        let mut found: Vec<Approval> = self
            .inner
            .approvals
            .iter()
            .filter(|a| {
                now < a.expires_at
                    && a.decision.is_none()
                    && a.audience == audience
                    && a.routes().iter().any(|r| routes.contains(r))
            })
            .map(|a| a.clone())
            .collect();
        found.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(a.id.as_bytes().cmp(b.id.as_bytes()))
        });
        found.truncate(limit);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn siblings<'a>(
        &'a self,
        audience: &'a str,
        principal: &'a PrincipalKey,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        Box::pin(std::future::ready(Ok(
            self.siblings_now(audience, principal)
        )))
    }

    fn record_batch<'a>(
        &'a self,
        batch: &'a BatchDecision,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let now = self.inner.clock.now();
        let kept = match self.inner.batches.entry(batch.set) {
            MapEntry::Occupied(mut old) if now >= old.get().expires_at => {
                old.insert(batch.clone());
                true
            }
            MapEntry::Occupied(_) => false,
            MapEntry::Vacant(slot) => {
                slot.insert(batch.clone());
                true
            }
        };
        Box::pin(std::future::ready(Ok(kept)))
    }

    fn batch(&self, set: SetDigest) -> BoxFuture<'_, Result<Option<BatchDecision>, StoreError>> {
        let now = self.inner.clock.now();
        let found = self
            .inner
            .batches
            .get(&set)
            .filter(|b| now < b.expires_at)
            .map(|b| b.clone());
        Box::pin(std::future::ready(Ok(found)))
    }
}

impl MemoryReplayStore {
    fn siblings_now(&self, audience: &str, principal: &PrincipalKey) -> Vec<Approval> {
        let now = self.inner.clock.now();
        let Some(mine) = self.inner.pending.get(principal).map(|m| m.clone()) else {
            return Vec::new();
        };
        let mut found: Vec<Approval> = mine
            .iter()
            .filter_map(|(id, _)| self.inner.approvals.get(id).map(|a| a.clone()))
            .filter(|a| {
                now < a.expires_at
                    && a.decision.is_none()
                    && a.audience == audience
                    && a.principal == *principal
            })
            .collect();
        found.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.id.as_bytes().cmp(b.id.as_bytes()))
        });
        found
    }
}

impl PasskeyStore for MemoryReplayStore {
    fn passkeys<'a>(
        &'a self,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RegisteredPasskey>, StoreError>> {
        let mut found = self
            .inner
            .passkeys
            .get(&subject_key(subject))
            .map(|p| p.clone())
            .unwrap_or_default();
        found.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Box::pin(std::future::ready(Ok(found)))
    }

    fn register<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<Registered, StoreError>> {
        let inner = &self.inner;
        let answer = (|| {
            passkey.check_keepable()?;
            let _one_at_a_time = inner.registering.lock().map_err(|_| StoreError::Full)?;
            if inner.passkey_owners.contains_key(&passkey.id) {
                return Ok(Registered::Exists);
            }
            // One slot per subject and per id, within the store's capacity.
            if inner.passkey_owners.len() >= inner.capacity {
                return Err(StoreError::Full);
            }
            let key = subject_key(subject);
            let mut held = inner.passkeys.entry(key.clone()).or_default();
            if held.len() >= MAX_PASSKEYS_PER_SUBJECT {
                return Ok(Registered::Full);
            }
            held.push(passkey.clone());
            inner.passkey_owners.insert(passkey.id.clone(), key);
            Ok(Registered::Added)
        })();
        Box::pin(std::future::ready(answer))
    }

    fn update<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let answer = passkey.check_keepable().map(|()| {
            self.inner
                .passkeys
                .get_mut(&subject_key(subject))
                .and_then(|mut held| {
                    let slot = held.iter_mut().find(|p| p.id == passkey.id)?;
                    *slot = passkey.clone();
                    Some(())
                })
                .is_some()
        });
        Box::pin(std::future::ready(answer))
    }

    fn remove<'a>(
        &'a self,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let inner = &self.inner;
        let answer = (|| {
            let _one_at_a_time = inner.registering.lock().map_err(|_| StoreError::Full)?;
            let key = subject_key(subject);
            let removed = inner.passkeys.get_mut(&key).is_some_and(|mut held| {
                let before = held.len();
                held.retain(|p| p.id != id);
                held.len() < before
            });
            if removed {
                inner.passkey_owners.remove(id);
            }
            Ok(removed)
        })();
        Box::pin(std::future::ready(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    crate::replay_store_conformance!(
        MemoryReplayStore::new(),
        budgeted = |budget| MemoryReplayStore::new().principal_budget(budget)
    );
    crate::approval_store_conformance!(MemoryReplayStore::new());
    crate::passkey_store_conformance!(MemoryReplayStore::new());
    crate::standing_store_conformance!(MemoryReplayStore::new());

    /// A principal's share counts its own unexpired approvals only, however many others the store
    /// holds; a full store forgets expired approvals before it refuses.
    #[tokio::test]
    async fn approval_budgets_count_each_principals_own_and_a_full_store_sweeps_first() {
        use crate::store::conformance::approval;
        let clock = clock();
        let store = MemoryReplayStore::with_clock(1_000, clock.clone());
        let propose = async |principal: PrincipalKey, ttl: u64| {
            let mut a = approval(principal, Duration::from_secs(ttl));
            a.expires_at = clock.now() + Duration::from_secs(ttl);
            store.propose(&a).await
        };
        let other = |i: u32| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&i.to_be_bytes());
            PrincipalKey::from_bytes(b)
        };
        for i in 0..500 {
            propose(other(i), 60).await.unwrap();
        }
        // The budget: 1 % of 1,000.
        for _ in 0..10 {
            propose(ALICE, 120).await.unwrap();
        }
        assert!(matches!(
            propose(ALICE, 120).await,
            Err(StoreError::OverBudget { retry_after }) if retry_after == Duration::from_secs(120)
        ));
        propose(BOB, 120).await.unwrap();
        // Alice's expire: her share is free again.
        clock.advance(Duration::from_secs(121));
        propose(ALICE, 600).await.unwrap();
        // 512 held, 511 of them expired: filling to capacity sweeps them instead of refusing.
        for i in 1_000..1_488 {
            propose(other(i), 600).await.unwrap();
        }
        assert_eq!(store.inner.approvals.len(), 1_000);
        propose(other(5_000), 600).await.unwrap();
        assert_eq!(store.inner.approvals.len(), 490);
        assert!(store.inner.pending.len() <= 490);
    }

    const ALICE: PrincipalKey = PrincipalKey::from_bytes([0xa1; 16]);
    const BOB: PrincipalKey = PrincipalKey::from_bytes([0xb0; 16]);

    fn nonce(i: u32) -> Nonce {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&i.to_be_bytes());
        Nonce::from_bytes(b)
    }

    /// A manual clock at a fixed start.
    fn clock() -> ManualClock {
        ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000))
    }

    /// Claims `nonce(i)` for `principal` until `expires_at`, as a fresh owner.
    async fn claim_nonce(
        store: &MemoryReplayStore,
        i: u32,
        principal: PrincipalKey,
        expires_at: SystemTime,
    ) -> Result<Claim, StoreError> {
        let claim = ClaimRequest::new(nonce(i), Owner::random(), principal, expires_at);
        store.claim(&claim).await
    }

    #[tokio::test]
    async fn full_of_live_entries_refuses_and_never_evicts() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(3, clock.clone()).principal_budget(3);
        let exp = clock.now() + Duration::from_secs(60);
        for i in 0..3 {
            assert_eq!(
                claim_nonce(&store, i, ALICE, exp).await.unwrap(),
                Claim::Claimed
            );
        }
        assert!(matches!(
            claim_nonce(&store, 99, ALICE, exp).await,
            Err(StoreError::Full)
        ));
        // The live ones are all still there.
        for i in 0..3 {
            assert_eq!(
                claim_nonce(&store, i, ALICE, exp).await.unwrap(),
                Claim::InFlight
            );
        }
        assert_eq!(store.len(), 3);
        // Once they expire, room is made by pruning, not eviction.
        clock.advance(Duration::from_secs(61));
        assert_eq!(
            claim_nonce(&store, 99, ALICE, exp + Duration::from_secs(120))
                .await
                .unwrap(),
            Claim::Claimed
        );
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn expired_entries_are_pruned() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(100, clock.clone()).principal_budget(100);
        for i in 0..10 {
            let exp = clock.now() + Duration::from_secs(u64::from(i) + 1);
            claim_nonce(&store, i, ALICE, exp).await.unwrap();
        }
        clock.advance(Duration::from_secs(5));
        assert_eq!(store.prune_expired(), 5);
        assert_eq!(store.len(), 5);
    }

    #[tokio::test]
    async fn memory_stays_bounded_over_many_short_lived_claims() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(1_000, clock.clone()).principal_budget(1_000);
        for i in 0..1_000_000u32 {
            if i % 500 == 0 {
                clock.advance(Duration::from_secs(2));
            }
            let exp = clock.now() + Duration::from_secs(1);
            assert_eq!(
                claim_nonce(&store, i, ALICE, exp).await.unwrap(),
                Claim::Claimed
            );
            assert!(store.len() <= 1_000);
        }
    }

    #[tokio::test]
    async fn completing_an_expired_claim_fails() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(10, clock.clone());
        let owner = Owner::random();
        store
            .claim(&ClaimRequest::new(
                nonce(1),
                owner,
                ALICE,
                clock.now() + Duration::from_secs(1),
            ))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
        assert!(
            !store
                .complete(&ClaimRequest::new(nonce(1), owner, ALICE, clock.now()))
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn one_principal_cannot_fill_the_store_for_the_others() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(300, clock.clone());
        assert_eq!(store.budget(), 3);
        let exp = clock.now() + Duration::from_secs(330);
        for i in 0..3 {
            assert_eq!(
                claim_nonce(&store, i, BOB, exp).await.unwrap(),
                Claim::Claimed
            );
        }
        // Bob's flood is refused without taking a slot, with the time until his oldest expires.
        clock.advance(Duration::from_secs(30));
        for i in 3..300 {
            match claim_nonce(&store, i, BOB, exp).await {
                Err(StoreError::OverBudget { retry_after }) => {
                    assert_eq!(retry_after, Duration::from_secs(300));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(store.len(), 3);
        // A replay of one of Bob's own states is still answered as a replay.
        assert_eq!(
            claim_nonce(&store, 1, BOB, exp).await.unwrap(),
            Claim::InFlight
        );
        // Alice is unaffected.
        assert_eq!(
            claim_nonce(&store, 1_000, ALICE, exp).await.unwrap(),
            Claim::Claimed
        );
        // Once Bob's entries expire, his budget is back.
        clock.advance(Duration::from_secs(301));
        let later = clock.now() + Duration::from_secs(330);
        assert_eq!(
            claim_nonce(&store, 5_000, BOB, later).await.unwrap(),
            Claim::Claimed
        );
        assert!(store.len() <= 3);
    }

    #[tokio::test]
    async fn consumed_entries_count_against_the_budget_until_they_expire() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(100, clock.clone()).principal_budget(2);
        let exp = clock.now() + Duration::from_secs(60);
        for i in 0..2 {
            let owner = Owner::random();
            let claim = ClaimRequest::new(nonce(i), owner, BOB, exp);
            assert_eq!(store.claim(&claim).await.unwrap(), Claim::Claimed);
            assert!(
                store
                    .complete(&ClaimRequest::new(nonce(i), owner, BOB, exp))
                    .await
                    .unwrap()
            );
        }
        assert!(matches!(
            claim_nonce(&store, 9, BOB, exp).await,
            Err(StoreError::OverBudget { .. })
        ));
        // Pruning from a timer gives the budget back too.
        clock.advance(Duration::from_secs(61));
        assert_eq!(store.prune_expired(), 2);
        assert!(store.inner.principals.is_empty());
        let exp = clock.now() + Duration::from_secs(60);
        assert_eq!(
            claim_nonce(&store, 9, BOB, exp).await.unwrap(),
            Claim::Claimed
        );
    }

    #[tokio::test]
    async fn each_store_has_its_own_boot_epoch_and_clones_share_it() {
        let a = MemoryReplayStore::new();
        let b = MemoryReplayStore::new();
        assert!(a.boot_epoch().is_some());
        assert_ne!(a.boot_epoch(), b.boot_epoch());
        assert_eq!(a.boot_epoch(), a.clone().boot_epoch());
    }

    #[tokio::test]
    async fn is_used_reports_live_entries_only() {
        let clock = clock();
        let store = MemoryReplayStore::with_clock(10, clock.clone()).principal_budget(10);
        let exp = clock.now() + Duration::from_secs(5);
        assert!(!store.is_used(nonce(1), ALICE).await.unwrap());
        claim_nonce(&store, 1, ALICE, exp).await.unwrap();
        assert!(store.is_used(nonce(1), ALICE).await.unwrap());
        clock.advance(Duration::from_secs(6));
        assert!(!store.is_used(nonce(1), ALICE).await.unwrap());
    }

    #[tokio::test]
    async fn pending_approvals_are_budgeted_like_nonces() {
        use crate::store::conformance::approval;
        // A store of 20: each principal may hold 1 % of it (at least one), approvals included.
        let store = MemoryReplayStore::with_capacity(20);
        let alice = PrincipalKey::from_bytes([1; 16]);
        let bob = PrincipalKey::from_bytes([2; 16]);
        let ttl = Duration::from_secs(300);
        store.propose(&approval(alice, ttl)).await.unwrap();
        assert!(matches!(
            store.propose(&approval(alice, ttl)).await,
            Err(StoreError::OverBudget { .. })
        ));
        // Everyone else still gets theirs.
        store.propose(&approval(bob, ttl)).await.unwrap();
    }
}
