//! Replay stores: what makes a confirmation single-use.
//!
//! A signed `requestState` bounds *who* may answer *which* question until *when*; it cannot stop
//! the same answer from being sent twice. The store does: each state carries a random nonce, and
//! before anything runs the layer claims that nonce, atomically, in a store every instance shares.
//!
//! A nonce moves one way only: Fresh (absent) → InFlight (claimed by one owner) → Consumed. It never
//! returns to Fresh while the state it belongs to could still verify; entries are forgotten only
//! after the state's expiry plus twice the clock skew, when every instance refuses the token.
//!
//! Two more promises keep one store honest under abuse and restarts:
//! - **Per-principal budgets.** Every entry is charged to the (keyed digest of the) principal whose
//!   verified retry made it, and a principal's live entries are capped far below the store's
//!   capacity. One principal's flood of declines is refused with [`StoreError::OverBudget`] and a
//!   retry-after, while every other principal's claims go through.
//! - **Boot epochs.** A store that forgets its entries on restart (the memory store) says so with a
//!   [`BootEpoch`]; the layer binds it into every state it issues and refuses states from an
//!   earlier epoch, because whether they were used before the restart is unknown.
//!
//! Backends implement [`ReplayStore`] (and, to keep browser approvals,
//! [`ApprovalStore`](crate::approval::ApprovalStore)) and prove it with the shared `conformance`
//! suite (feature `test-support`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(crate) mod approval;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) mod backend;
pub(crate) mod batch;
#[cfg(any(test, feature = "test-support"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod conformance;
mod memory;
pub mod passkey;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
pub mod standing;

pub use memory::MemoryReplayStore;

pub(crate) use crate::kernel::sixteen_bytes;
pub use crate::kernel::{BoxFuture, Nonce, PrincipalKey};

/// The default cap on one principal's live entries in the Redis and Postgres stores; the memory
/// store's default is 1 % of its capacity.
pub const DEFAULT_PRINCIPAL_BUDGET: usize = 1_000;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisStore;

/// The former name of [`PostgresStore`], which keeps every store in PostgreSQL.
#[cfg(feature = "postgres")]
#[deprecated(
    since = "0.2.0",
    note = "renamed `PostgresStore`: one type keeps every store"
)]
pub type PostgresReplayStore = PostgresStore;

/// The former name of [`RedisStore`], which keeps every store in Redis.
#[cfg(feature = "redis")]
#[deprecated(
    since = "0.2.0",
    note = "renamed `RedisStore`: one type keeps every store"
)]
pub type RedisReplayStore = RedisStore;

/// Identifies the one retry that holds a claim, so only it can complete the claim.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner([u8; 16]);

impl Owner {
    /// A fresh random owner token.
    ///
    /// # Panics
    /// If the OS random source fails.
    pub fn random() -> Self {
        Self(*Nonce::random().as_bytes())
    }
}

sixteen_bytes!(
    Owner,
    /// An owner with the given bytes.
    from_bytes,
    /// The owner's bytes.
    as_bytes,
);

/// Identifies one life of a store that loses its entries when the process stops.
///
/// A state carries the epoch of the store that issued it; a store answers with its own, and a
/// state from another epoch is refused: its nonce may have been used in a life the store forgot.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootEpoch([u8; 16]);

impl BootEpoch {
    /// A fresh random epoch, for a store that has just started empty.
    ///
    /// # Panics
    /// If the OS random source fails.
    pub fn random() -> Self {
        Self(*Nonce::random().as_bytes())
    }
}

sixteen_bytes!(
    BootEpoch,
    /// An epoch with the given bytes.
    from_bytes,
    /// The epoch's bytes.
    as_bytes,
);

/// What a claim asks the store to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// The state's nonce.
    pub nonce: Nonce,
    /// The retry that will hold the claim.
    pub owner: Owner,
    /// Whom the entry is charged to.
    pub principal: PrincipalKey,
    /// When every instance refuses the state (its expiry plus twice the clock skew): the entry is
    /// kept until then.
    pub expires_at: SystemTime,
}

impl ClaimRequest {
    /// A claim of `nonce` by `owner`, charged to `principal`, kept until `expires_at`.
    pub const fn new(
        nonce: Nonce,
        owner: Owner,
        principal: PrincipalKey,
        expires_at: SystemTime,
    ) -> Self {
        Self {
            nonce,
            owner,
            principal,
            expires_at,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The nonce was fresh and now belongs to the caller (InFlight).
    Claimed,
    /// Another retry holds the nonce right now.
    InFlight,
    /// The nonce was already used.
    Consumed,
}

/// A replay store failure. The layer treats every error as "not claimed": it refuses the call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store is full of live entries; it refuses rather than evicting one.
    #[error("replay store is full of live entries")]
    Full,
    /// The principal already holds its budget of live entries. Nothing was recorded; the oldest
    /// of them expires after `retry_after`.
    #[error("the principal's budget of live confirmations is spent; retry after {retry_after:?}")]
    OverBudget {
        /// How long until one of the principal's entries expires.
        retry_after: Duration,
    },
    /// The backend did not answer in time.
    #[error("replay store timed out")]
    Timeout,
    /// The backend failed.
    #[error("replay store backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A store of one-time nonces shared by every instance that verifies the same states.
///
/// Implementations must make [`claim`](ReplayStore::claim) a single atomic compare-and-set (never
/// read-then-write), keep each entry until its expiry, never evict an unexpired entry, and cap each
/// principal's live entries. Errors make the layer refuse the call, so a store that cannot answer
/// fails closed. Prove an implementation with `replay_store_conformance!` (feature `test-support`).
///
/// # Write your own
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use std::time::{Duration, SystemTime};
///
/// use mcp_confirm::store::{
///     BootEpoch, BoxFuture, Claim, ClaimRequest, Nonce, Owner, PrincipalKey, ReplayStore, StoreError,
/// };
///
/// /// One process, a mutex and a map: the shape of a real backend, none of its sharding.
/// #[derive(Debug)]
/// struct MapStore {
///     epoch: BootEpoch,
///     budget: usize,
///     entries: Mutex<HashMap<Nonce, (Option<Owner>, PrincipalKey, SystemTime)>>,
/// }
///
/// impl MapStore {
///     fn claim_now(&self, claim: &ClaimRequest) -> Result<Claim, StoreError> {
///         let now = SystemTime::now();
///         let mut entries = self.entries.lock().map_err(|_| StoreError::Full)?;
///         entries.retain(|_, (_, _, expires_at)| *expires_at > now);
///         if let Some((owner, ..)) = entries.get(&claim.nonce) {
///             return Ok(if owner.is_some() { Claim::InFlight } else { Claim::Consumed });
///         }
///         let mine = entries.values().filter(|(_, p, _)| *p == claim.principal);
///         if mine.count() >= self.budget {
///             return Err(StoreError::OverBudget { retry_after: Duration::from_secs(1) });
///         }
///         entries.insert(claim.nonce, (Some(claim.owner), claim.principal, claim.expires_at));
///         Ok(Claim::Claimed)
///     }
/// }
///
/// impl ReplayStore for MapStore {
///     fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>> {
///         let answer = self.claim_now(claim);
///         Box::pin(async move { answer })
///     }
///
///     fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>> {
///         let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
///         let done = match entries.get_mut(&claim.nonce) {
///             Some((held, ..)) if *held == Some(claim.owner) => { *held = None; true }
///             _ => false,
///         };
///         Box::pin(async move { Ok(done) })
///     }
///
///     fn is_used(&self, nonce: Nonce, _: PrincipalKey) -> BoxFuture<'_, Result<bool, StoreError>> {
///         let now = SystemTime::now();
///         let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
///         let used = entries.get(&nonce).is_some_and(|(_, _, expires_at)| *expires_at > now);
///         Box::pin(async move { Ok(used) })
///     }
///
///     // Entries live in this process only: a restart forgets them, so say so.
///     fn boot_epoch(&self) -> Option<BootEpoch> {
///         Some(self.epoch)
///     }
/// }
///
/// let store = MapStore { epoch: BootEpoch::random(), budget: 100, entries: Default::default() };
/// let layer = mcp_confirm::ConfirmLayer::builder(mcp_confirm::KeyRing::random())
///     .without_tool_list_unchecked()
///     .audience("https://notes.example/mcp")
///     .replay_store(store)
///     .build();
/// # let _ = layer;
/// ```
pub trait ReplayStore: fmt::Debug + Send + Sync + 'static {
    /// Atomically moves `claim.nonce` from Fresh to InFlight, owned by `claim.owner`, charged to
    /// `claim.principal`, kept until `claim.expires_at`.
    ///
    /// An unexpired entry is never replaced: the answer is then [`Claim::InFlight`] or
    /// [`Claim::Consumed`], whatever the budget. A fresh nonce whose principal already holds its
    /// budget of live entries is refused with [`StoreError::OverBudget`] and not recorded.
    fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>>;

    /// Moves the nonce of an earlier successful `claim` from InFlight to Consumed, if
    /// `claim.owner` still holds it. Returns `false` when the nonce is unknown, consumed, or held
    /// by someone else.
    fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Whether `principal`'s `nonce` holds a live entry (InFlight or Consumed). Read-only: a
    /// cancelled form asks this, so that a used state is refused rather than "cancelled" again.
    fn is_used(
        &self,
        nonce: Nonce,
        principal: PrincipalKey,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// `Some` for a store whose entries do not survive a restart of this process: the epoch of
    /// this life of the store. `None` only if entries outlive the process (Redis, Postgres).
    fn boot_epoch(&self) -> Option<BootEpoch>;

    /// What the store is kept in, as metrics label its failures: `memory`, `redis`,
    /// `postgres`; `custom` by default.
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether a tool's handler can claim a nonce of this store itself, inside the transaction
    /// that makes its change (`PostgresStore::consume_in`): what a
    /// [`claimed_by_handler`](crate::ToolPolicy::claimed_by_handler) tool needs. `false` by
    /// default, and a layer with such a tool does not build on a store that says `false`.
    fn claims_in_handler(&self) -> bool {
        false
    }

    /// Whether a handler of this process tried to claim `nonce` itself (and forgets it): `true`
    /// after `PostgresStore::consume_in`, committed or rolled back. After a
    /// `claimed_by_handler` call the layer burns a nonce no handler tried to claim, and leaves
    /// one that was tried as the handler's transaction left it.
    fn take_handler_attempt(&self, nonce: Nonce) -> bool {
        let _ = nonce;
        false
    }
}

impl<S: ReplayStore + ?Sized> ReplayStore for Arc<S> {
    fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>> {
        (**self).claim(claim)
    }

    fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>> {
        (**self).complete(claim)
    }

    fn is_used(
        &self,
        nonce: Nonce,
        principal: PrincipalKey,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        (**self).is_used(nonce, principal)
    }

    fn boot_epoch(&self) -> Option<BootEpoch> {
        (**self).boot_epoch()
    }

    fn claims_in_handler(&self) -> bool {
        (**self).claims_in_handler()
    }

    fn take_handler_attempt(&self, nonce: Nonce) -> bool {
        (**self).take_handler_attempt(nonce)
    }
}
