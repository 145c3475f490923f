//! Durable grants: a confirmation that outlives its request, for work that runs later.
//!
//! A synchronous confirmation is a property of the request: the call runs inside it, once. When
//! an approved action is queued instead, the approval must become a record of its own, checked
//! again when the work actually runs, or job retries run it twice, stale approvals run, and a
//! crash leaves the outcome unknown. A [`Grant`] is that record; a [`GrantStore`] keeps it.
//!
//! A grant moves one way only:
//!
//! ```text
//! Granted ──begin──► Executing(attempt n, lease) ──finish──► Consumed | Failed
//!    │                    │  lease runs out: the next begin is attempt n+1
//!    │                    └──revoke──► Revoking(n, lease) ──finish──► Consumed | Failed
//!    │                                     └── lease runs out ──► Revoked
//!    └──revoke──► Revoked                 (expiry before a begin ► Expired)
//! ```
//!
//! - **Fencing.** Each `begin` hands out a [`Lease`] with a new attempt number; only the holder of
//!   the current attempt may `finish`. A worker that stalled past its lease and wakes up finds its
//!   attempt superseded and its `finish` refused.
//! - **Leases.** A second `begin` while a lease holds is refused ([`Begin::Busy`]); after a worker
//!   dies, the next `begin` after the lease starts a new attempt, which must re-check the live
//!   record before acting.
//! - **Revoking a running grant** stops it from starting anything new: the attempt under way
//!   fails its [`GrantStore::confirm`] (so an attempt still re-checking never acts), no later
//!   attempt begins, and an attempt that is already acting may still record what it did.
//! - **Final states are final.** After `Consumed`, `Failed`, `Revoked` or `Expired`, every `begin`
//!   answers [`Begin::Finished`]: a job retried after success never runs again.
//!
//! The transitions are pure functions of the record and the time ([`Grant::begin`],
//! [`Grant::finish`], [`Grant::revoke`]), so every store applies exactly the same rules;
//! stores differ only in how they make one transition atomic. Prove a store with
//! `grant_store_conformance!` (feature `test-support`).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::audit;
use crate::clock::{Clock, SystemClock};
use crate::kernel::{BoxFuture, Nonce, PrincipalKey, hex, unhex};
use crate::store::StoreError;

#[cfg(any(test, feature = "test-support"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod conformance;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod record;
#[cfg(feature = "redis")]
mod redis;
mod worker;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresGrantStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisGrantStore;
pub use worker::{Attempt, GrantError, Grants, RunError};

/// The unguessable id of a grant: 128 random bits. The only thing a queued job needs to carry.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantId([u8; 16]);

impl GrantId {
    /// A fresh id from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails; there is no safe fallback for an unguessable id.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut bytes) {
            panic!("the OS random source failed: {e}");
        }
        Self(bytes)
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The first four bytes in hex, for logs: enough to correlate, not enough to use.
    pub(crate) fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

impl fmt::Display for GrantId {
    /// 32 lowercase hex digits, the form [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for GrantId {
    /// The first four bytes only: enough to correlate, not enough to use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GrantId({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// Why a string is not a [`GrantId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a grant id is 32 lowercase hex digits")]
pub struct GrantIdError;

impl FromStr for GrantId {
    type Err = GrantIdError;

    fn from_str(s: &str) -> Result<Self, GrantIdError> {
        unhex(s).map(Self).ok_or(GrantIdError)
    }
}

impl Grant {
    /// Whether no transition from `now` on can run this grant again.
    fn can_never_run(&self, now: SystemTime) -> bool {
        match self.state {
            state if state.is_final() => true,
            GrantState::Granted => now >= self.expires_at,
            GrantState::Executing { lease_until, .. }
            | GrantState::Revoking { lease_until, .. } => {
                now >= lease_until && now >= self.expires_at
            }
            _ => false,
        }
    }

    /// What the audit events of this grant name.
    pub(crate) fn audit(&self) -> audit::GrantFields<'_> {
        audit::GrantFields {
            tool: &self.tool,
            subject: &self.subject,
            grant: self.id.short(),
            nonce: self.nonce.short(),
        }
    }
}

/// Where a grant is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrantState {
    /// Approved, not started.
    Granted,
    /// A worker holds attempt `attempt` until `lease_until`.
    Executing {
        /// The fence: only this attempt may finish.
        attempt: u32,
        /// When the lease runs out and another attempt may begin.
        lease_until: SystemTime,
    },
    /// Revoked while attempt `attempt` was under way: that attempt may still record what it did
    /// until `lease_until`; nothing else begins, and then the grant is revoked.
    Revoking {
        /// The attempt under way.
        attempt: u32,
        /// When its lease runs out.
        lease_until: SystemTime,
    },
    /// Done, once.
    Consumed,
    /// The worker reported a failure it will not retry.
    Failed,
    /// Withdrawn before it finished.
    Revoked,
    /// Not begun before its expiry.
    Expired,
}

impl GrantState {
    /// Whether no transition leaves this state.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Consumed | Self::Failed | Self::Revoked | Self::Expired
        )
    }
}

/// A confirmed action, kept until the work runs: who approved what, on which record as shown,
/// until when, and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The grant's id.
    pub id: GrantId,
    /// The deployment that issued it.
    pub audience: String,
    /// Who approved: the keyed digest of the principal that the confirmation's state bound.
    pub principal: PrincipalKey,
    /// Who approved, as the authentication layer named them: the worker re-authorizes this
    /// subject when the work runs.
    pub subject: String,
    /// The confirmed tool.
    pub tool: String,
    /// The arguments the confirmed call carried (with the chosen id written in): what the work
    /// acts on. A job carries only the grant id; anything else it carries is descriptive.
    pub arguments: Value,
    /// The digest of the arguments the confirmation's state bound.
    pub arguments_digest: [u8; 32],
    /// The record the user chose, if the tool offered a choice.
    pub chosen: Option<String>,
    /// The version of that record the user saw.
    pub version: Option<String>,
    /// The confirmation's nonce, for the audit trail.
    pub nonce: Nonce,
    /// When the grant was issued.
    pub issued_at: SystemTime,
    /// After this, a grant not yet begun expires.
    pub expires_at: SystemTime,
    /// Where it is now.
    pub state: GrantState,
}

/// The right to run one attempt of a grant, until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The grant.
    pub grant: GrantId,
    /// The fence: this attempt, and no other, may finish the grant.
    pub attempt: u32,
    /// When the lease runs out.
    pub until: SystemTime,
}

/// What a [`GrantStore::begin`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begin {
    /// Run it now, under this lease; re-check the live record first.
    Started(Lease),
    /// Another attempt holds a lease until then: do not run; retry after it.
    Busy {
        /// When the current lease runs out.
        until: SystemTime,
    },
    /// It is over (consumed, failed, revoked or expired): never run it.
    Finished(GrantState),
    /// No such grant (never issued, or forgotten after it ended): never run it.
    Unknown,
}

/// What a [`GrantStore::revoke`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoke {
    /// The grant will never run.
    Revoked,
    /// An attempt is under way: it will not start acting if it has not yet (its
    /// [`GrantStore::confirm`] fails), no later attempt begins, and one already acting may still
    /// record its outcome until `until`.
    Stopping {
        /// When the attempt's lease runs out.
        until: SystemTime,
    },
    /// It had already ended, in this state.
    Ended(GrantState),
    /// No such grant.
    Unknown,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finish {
    /// The action happened.
    Consumed,
    /// The action will not happen (the live record changed, the principal lost access, …).
    Failed,
}

impl Grant {
    /// Starts an attempt at `now` with a lease of `lease`, if the grant allows one.
    pub fn begin(&mut self, now: SystemTime, lease: Duration) -> Begin {
        match self.state {
            state if state.is_final() => Begin::Finished(state),
            GrantState::Executing { lease_until, .. }
            | GrantState::Revoking { lease_until, .. }
                if now < lease_until =>
            {
                Begin::Busy { until: lease_until }
            }
            GrantState::Revoking { .. } => {
                // The attempt under way when it was revoked did not finish: revoked for good.
                self.state = GrantState::Revoked;
                Begin::Finished(self.state)
            }
            GrantState::Executing {
                attempt: u32::MAX, ..
            } => {
                // No fence number left to hand out.
                self.state = GrantState::Failed;
                Begin::Finished(self.state)
            }
            GrantState::Granted if now >= self.expires_at => {
                self.state = GrantState::Expired;
                Begin::Finished(self.state)
            }
            GrantState::Executing { .. } if now >= self.expires_at => {
                // The last attempt's lease ran out and so did the grant: nobody finished it.
                self.state = GrantState::Expired;
                Begin::Finished(self.state)
            }
            state => {
                let attempt = match state {
                    GrantState::Executing { attempt, .. } => attempt.saturating_add(1),
                    _ => 1,
                };
                // A lease past the end of time is a configuration error; cap it rather than panic.
                let until = now
                    .checked_add(lease)
                    .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 60 * 60));
                self.state = GrantState::Executing {
                    attempt,
                    lease_until: until,
                };
                Begin::Started(Lease {
                    grant: self.id,
                    attempt,
                    until,
                })
            }
        }
    }

    /// Ends the attempt `lease` holds; `false` (and nothing changes) unless it is the current one.
    pub fn finish(&mut self, lease: &Lease, outcome: Finish) -> bool {
        match self.state {
            GrantState::Executing { attempt, .. } | GrantState::Revoking { attempt, .. }
                if attempt == lease.attempt =>
            {
                self.state = match outcome {
                    Finish::Consumed => GrantState::Consumed,
                    Finish::Failed => GrantState::Failed,
                };
                true
            }
            _ => false,
        }
    }

    /// Withdraws the grant at `now`: at once if no attempt holds a live lease, else once the
    /// attempt under way ends (see [`Revoke::Stopping`]).
    pub fn revoke(&mut self, now: SystemTime) -> Revoke {
        match self.state {
            state if state.is_final() => Revoke::Ended(state),
            GrantState::Executing {
                attempt,
                lease_until,
            } if now < lease_until => {
                self.state = GrantState::Revoking {
                    attempt,
                    lease_until,
                };
                Revoke::Stopping { until: lease_until }
            }
            GrantState::Revoking { lease_until, .. } if now < lease_until => {
                Revoke::Stopping { until: lease_until }
            }
            _ => {
                self.state = GrantState::Revoked;
                Revoke::Revoked
            }
        }
    }

    /// Whether `lease` is still the live, unrevoked attempt at `now`: the last check before an
    /// attempt acts.
    pub fn holds(&self, lease: &Lease, now: SystemTime) -> bool {
        matches!(self.state, GrantState::Executing { attempt, lease_until }
            if attempt == lease.attempt && now < lease_until)
    }
}

/// A grant store failure. The layer refuses the call (nothing is spent); a worker does not run
/// the grant, and may retry later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantStoreError {
    /// The store holds as many grants as it may; it refuses rather than forgetting a live one.
    #[error("grant store is full")]
    Full,
    /// The principal already holds its budget of live grants. Nothing was recorded; the oldest
    /// of them expires after `retry_after`.
    #[error("the principal's budget of live grants is spent; retry after {retry_after:?}")]
    OverBudget {
        /// How long until one of the principal's grants expires.
        retry_after: Duration,
    },
    /// A grant with this id is already stored.
    #[error("a grant with this id exists")]
    Exists,
    /// A stored record does not read as a grant: it is never run.
    #[error("a grant record does not decode")]
    Corrupt,
    /// The backend did not answer in time.
    #[error("grant store timed out")]
    Timeout,
    /// The backend failed.
    #[error("grant store backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A backend's own error, kept as the source.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn backend(e: impl std::error::Error + Send + Sync + 'static) -> GrantStoreError {
    GrantStoreError::Backend(Box::new(e))
}

/// The failures a grant store shares with the replay stores on the same backends: connecting,
/// timing out, the backend's own errors.
impl From<StoreError> for GrantStoreError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Full => Self::Full,
            StoreError::OverBudget { retry_after } => Self::OverBudget { retry_after },
            StoreError::Timeout => Self::Timeout,
            StoreError::Backend(e) => Self::Backend(e),
        }
    }
}

/// Where grants are kept, shared by the instances that issue them and the workers that run them.
///
/// Each method is one atomic transition of one record, applying [`Grant::begin`],
/// [`Grant::finish`] or [`Grant::revoke`]. Errors mean "unknown": a worker that cannot `begin`
/// must not run, and may retry later.
pub trait GrantStore: fmt::Debug + Send + Sync + 'static {
    /// Stores a new grant (state `Granted`). An id that exists is [`GrantStoreError::Exists`].
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>>;

    /// Starts an attempt, under a lease of `lease`.
    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>>;

    /// Ends the attempt `lease` holds; `Ok(false)` if that attempt is no longer current.
    fn finish(&self, lease: Lease, outcome: Finish)
    -> BoxFuture<'_, Result<bool, GrantStoreError>>;

    /// Withdraws a grant ([`Grant::revoke`]).
    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>>;

    /// Whether `lease` is still the live, unrevoked attempt ([`Grant::holds`]), by the store's
    /// clock: asked right before an attempt acts.
    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>>;

    /// The grant as it stands.
    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>>;
}

impl<S: GrantStore + ?Sized> GrantStore for Arc<S> {
    fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
        (**self).issue(grant)
    }

    fn begin(&self, id: GrantId, lease: Duration) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
        (**self).begin(id, lease)
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
    ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        (**self).finish(lease, outcome)
    }

    fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
        (**self).revoke(id)
    }

    fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
        (**self).confirm(lease)
    }

    fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
        (**self).get(id)
    }
}

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

    crate::grant_store_conformance!(memory, {
        let clock = ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        (MemoryGrantStore::with_clock(1000, clock.clone()), clock)
    });

    #[test]
    fn ids_round_trip_through_text_and_refuse_anything_else() {
        let id = GrantId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<GrantId>(), Ok(id));
        for bad in [
            "",
            "00",
            &text.to_uppercase(),
            &format!("{text}0"),
            &text.replace(|c: char| c.is_ascii_digit(), "g"),
        ] {
            if bad != text {
                assert_eq!(bad.parse::<GrantId>(), Err(GrantIdError), "{bad}");
            }
        }
        assert!(!format!("{id:?}").contains(&text));
    }

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
