//! The per-principal limit on challenges: how fast one principal may be shown new forms.
//!
//! A challenge costs the server a resolver call and a signature but keeps no state, so it cannot
//! fill the replay store; what it can do is burn CPU and the resolver's backend, and hand a flooding
//! client a stock of fresh states. The limit is per instance (a token bucket per principal, from
//! `governor`), deliberately simple: the replay store's per-principal budget is what bounds shared
//! state.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::kernel::PrincipalKey;

/// How often, in checks, idle principals are dropped from the limiter.
const HOUSEKEEPING_EVERY: u64 = 4_096;

/// A token bucket per principal.
pub(crate) struct ChallengeLimiter {
    limiter: DefaultKeyedRateLimiter<PrincipalKey>,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl ChallengeLimiter {
    /// `per_second` challenges per second on average, up to `burst` at once.
    pub(crate) fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        let quota = Quota::per_second(per_second).allow_burst(burst);
        Self {
            limiter: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    /// `Ok` if `principal` may be challenged now; otherwise how long until it may.
    pub(crate) fn check(&self, principal: &PrincipalKey) -> Result<(), Duration> {
        if self
            .checks
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(HOUSEKEEPING_EVERY)
        {
            // Principals whose bucket is full again are indistinguishable from new ones.
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter
            .check_key(principal)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

impl std::fmt::Debug for ChallengeLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChallengeLimiter")
            .field("principals", &self.limiter.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_refusals_per_principal() {
        let nz = |n| NonZeroU32::new(n).unwrap();
        let limiter = ChallengeLimiter::new(nz(1), nz(3));
        let bob = PrincipalKey::from_bytes([1; 16]);
        let alice = PrincipalKey::from_bytes([2; 16]);
        for _ in 0..3 {
            assert!(limiter.check(&bob).is_ok());
        }
        let wait = limiter.check(&bob).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(limiter.check(&alice).is_ok());
    }
}
