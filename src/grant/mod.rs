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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::kernel::BoxFuture;
use crate::store::StoreError;

#[cfg(any(test, feature = "test-support"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod conformance;
mod lifecycle;
pub(crate) mod log;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod record;
#[cfg(feature = "redis")]
mod redis;
mod worker;

pub use lifecycle::{Begin, Finish, Grant, GrantId, GrantIdError, GrantState, Lease, Revoke};
pub use memory::MemoryGrantStore;
pub use worker::{Attempt, GrantError, Grants, RunError};

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
