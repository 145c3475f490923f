//! The shared test suite every [`ReplayStore`] backend must pass.
//!
//! Run it from a test module with [`replay_store_conformance!`](crate::replay_store_conformance):
//!
//! ```ignore
//! mod memory {
//!     mcp_confirm::replay_store_conformance!(mcp_confirm::MemoryReplayStore::new());
//! }
//! ```
//!
//! The expression is evaluated afresh inside each async test, so it may `.await`. The tests need
//! tokio's `macros` and `rt-multi-thread` features. Each test uses random nonces, so a shared backend
//! (one Redis database, one Postgres table) can run the suite concurrently with other tests.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Claim, Nonce, Owner, ReplayStore};

fn soon() -> SystemTime {
    SystemTime::now() + Duration::from_secs(60)
}

/// A fresh nonce is claimed exactly once; a second claim sees it InFlight.
pub async fn claim_is_granted_once<S: ReplayStore>(store: &S) {
    let nonce = Nonce::random();
    assert_eq!(
        store.claim(nonce, Owner::random(), soon()).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(
        store.claim(nonce, Owner::random(), soon()).await.ok(),
        Some(Claim::InFlight)
    );
    // The same owner asking again is still refused: a claim is not re-entrant.
    let other = Nonce::random();
    let owner = Owner::random();
    assert_eq!(
        store.claim(other, owner, soon()).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(
        store.claim(other, owner, soon()).await.ok(),
        Some(Claim::InFlight)
    );
}

/// Completing by the owner makes the nonce Consumed for good; completing twice fails.
pub async fn completed_claims_stay_consumed<S: ReplayStore>(store: &S) {
    let nonce = Nonce::random();
    let owner = Owner::random();
    assert_eq!(
        store.claim(nonce, owner, soon()).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(store.complete(nonce, owner, soon()).await.ok(), Some(true));
    assert_eq!(
        store.claim(nonce, Owner::random(), soon()).await.ok(),
        Some(Claim::Consumed)
    );
    assert_eq!(
        store.claim(nonce, owner, soon()).await.ok(),
        Some(Claim::Consumed)
    );
    assert_eq!(store.complete(nonce, owner, soon()).await.ok(), Some(false));
}

/// Only the owner can complete a claim; an unknown nonce cannot be completed at all.
pub async fn only_the_owner_completes<S: ReplayStore>(store: &S) {
    let nonce = Nonce::random();
    let owner = Owner::random();
    assert_eq!(
        store.claim(nonce, owner, soon()).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(
        store.complete(nonce, Owner::random(), soon()).await.ok(),
        Some(false)
    );
    assert_eq!(
        store.claim(nonce, Owner::random(), soon()).await.ok(),
        Some(Claim::InFlight)
    );
    assert_eq!(
        store.complete(Nonce::random(), owner, soon()).await.ok(),
        Some(false)
    );
    assert_eq!(store.complete(nonce, owner, soon()).await.ok(), Some(true));
}

/// Entries are forgotten after their expiry, and not before.
pub async fn entries_expire<S: ReplayStore>(store: &S) {
    let nonce = Nonce::random();
    let expires_at = SystemTime::now() + Duration::from_millis(1_000);
    assert_eq!(
        store.claim(nonce, Owner::random(), expires_at).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(
        store.claim(nonce, Owner::random(), expires_at).await.ok(),
        Some(Claim::InFlight)
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(
        store.claim(nonce, Owner::random(), soon()).await.ok(),
        Some(Claim::Claimed)
    );
}

/// Different nonces never interfere.
pub async fn nonces_are_independent<S: ReplayStore>(store: &S) {
    let a = Nonce::random();
    let b = Nonce::random();
    let owner = Owner::random();
    assert_eq!(
        store.claim(a, owner, soon()).await.ok(),
        Some(Claim::Claimed)
    );
    assert_eq!(store.complete(a, owner, soon()).await.ok(), Some(true));
    assert_eq!(
        store.claim(b, owner, soon()).await.ok(),
        Some(Claim::Claimed)
    );
}

/// 64 concurrent claimants of one nonce: exactly one wins, the rest see it taken; 100 rounds.
pub async fn one_winner_among_concurrent_claimants<S: ReplayStore>(store: Arc<S>) {
    const CLAIMANTS: usize = 64;
    const ROUNDS: usize = 100;
    for round in 0..ROUNDS {
        let nonce = Nonce::random();
        let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMANTS));
        let tasks: Vec<_> = (0..CLAIMANTS)
            .map(|_| {
                let store = Arc::clone(&store);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(nonce, Owner::random(), soon()).await
                })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            match task.await.expect("claimant panicked") {
                Ok(Claim::Claimed) => won += 1,
                Ok(Claim::InFlight) => {}
                other => panic!("round {round}: unexpected answer {other:?}"),
            }
        }
        assert_eq!(won, 1, "round {round}: {won} claimants won");
    }
}

/// Generates one `#[tokio::test]` per conformance check for the store built by `$make`.
///
/// `replay_store_conformance!(optional make())` takes an expression of type `Option<store>`
/// instead: `None` skips every test (print why from `make`), for backends that may be absent.
#[macro_export]
macro_rules! replay_store_conformance {
    (optional $make:expr) => {
        $crate::replay_store_conformance!(@tests $make);
    };
    ($make:expr) => {
        $crate::replay_store_conformance!(@tests ::core::option::Option::Some($make));
    };
    (@tests $make:expr) => {
        #[tokio::test]
        async fn conformance_claim_is_granted_once() {
            let Some(store) = $make else { return };
            $crate::store::conformance::claim_is_granted_once(&store).await;
        }

        #[tokio::test]
        async fn conformance_completed_claims_stay_consumed() {
            let Some(store) = $make else { return };
            $crate::store::conformance::completed_claims_stay_consumed(&store).await;
        }

        #[tokio::test]
        async fn conformance_only_the_owner_completes() {
            let Some(store) = $make else { return };
            $crate::store::conformance::only_the_owner_completes(&store).await;
        }

        #[tokio::test]
        async fn conformance_entries_expire() {
            let Some(store) = $make else { return };
            $crate::store::conformance::entries_expire(&store).await;
        }

        #[tokio::test]
        async fn conformance_nonces_are_independent() {
            let Some(store) = $make else { return };
            $crate::store::conformance::nonces_are_independent(&store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_one_winner_among_concurrent_claimants() {
            let Some(store) = $make else { return };
            $crate::store::conformance::one_winner_among_concurrent_claimants(::std::sync::Arc::new(store)).await;
        }
    };
}
