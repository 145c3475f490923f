//! Replay stores: what makes a confirmation single-use.
//!
//! A signed `requestState` bounds *who* may answer *which* question until *when*; it cannot stop
//! the same answer from being sent twice. The store does: each state carries a random nonce, and
//! before anything runs the layer claims that nonce, atomically, in a store every instance shares.
//!
//! A nonce moves one way only: Fresh (absent) → InFlight (claimed by one owner) → Consumed. It never
//! returns to Fresh while the state it belongs to could still verify; entries are forgotten only
//! after the state's expiry plus clock skew, when the token itself is refused.
//!
//! Backends implement [`ReplayStore`] and prove it with the shared [`conformance`] suite.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

pub mod conformance;
mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

pub use memory::{DEFAULT_CAPACITY, MemoryReplayStore};
#[cfg(feature = "postgres")]
pub use postgres::PostgresReplayStore;
#[cfg(feature = "redis")]
pub use redis::RedisReplayStore;

/// A boxed `Send` future, as returned by the object-safe store and policy traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The 128-bit random value that identifies one issued `requestState` in the replay store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nonce([u8; 16]);

impl Nonce {
    /// A fresh nonce from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails; there is no safe fallback for a security nonce.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        #[allow(clippy::expect_used)]
        getrandom::fill(&mut bytes).expect("the OS random source failed");
        Self(bytes)
    }

    /// A nonce with the given bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The nonce's bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Lower-case hex, for store keys.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The first four bytes in hex: enough to correlate log lines, too little to be a store key.
    pub(crate) fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({}…)", self.short())
    }
}

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

    /// An owner with the given bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The owner's bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({}…)", hex(&self.0[..4]))
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
/// read-then-write), keep each entry until `expires_at`, and never evict an unexpired entry. Errors
/// make the layer refuse the call, so a store that cannot answer fails closed.
pub trait ReplayStore: fmt::Debug + Send + Sync + 'static {
    /// Atomically moves `nonce` from Fresh to InFlight, owned by `owner`, kept until `expires_at`.
    /// An unexpired entry is never replaced: the answer is then [`Claim::InFlight`] or
    /// [`Claim::Consumed`].
    fn claim(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<Claim, StoreError>>;

    /// Moves `nonce` from InFlight to Consumed if `owner` holds it. Returns `false` when the nonce
    /// is unknown, consumed, or held by someone else.
    fn complete(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;
}

impl<S: ReplayStore + ?Sized> ReplayStore for Arc<S> {
    fn claim(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        (**self).claim(nonce, owner, expires_at)
    }

    fn complete(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        (**self).complete(nonce, owner, expires_at)
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}
