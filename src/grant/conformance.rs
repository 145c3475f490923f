//! The shared test suite every [`GrantStore`] backend must pass.
//!
//! Run it with [`grant_store_conformance!`](crate::grant_store_conformance), giving a module name
//! and an expression that builds a store and the [`ManualClock`] it reads the time from (each test
//! moves that clock to expire leases and grants):
//!
//! ```ignore
//! mcp_confirm::grant_store_conformance!(memory, {
//!     let clock = ManualClock::new(SystemTime::now());
//!     (MemoryGrantStore::with_clock(1000, clock.clone()), clock)
//! });
//! ```
//!
//! The tests need tokio's `macros` and `rt-multi-thread` features. Each grant has a random id, so
//! a shared backend can run the suite concurrently with other tests.

use std::sync::Arc;
use std::time::Duration;

use super::{Begin, Finish, Grant, GrantId, GrantState, GrantStore, GrantStoreError, Revoke};
use crate::clock::{Clock, ManualClock};
use crate::kernel::{Nonce, PrincipalKey};

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);

/// A fresh grant issued now by `clock`'s time, expiring after `ttl`.
pub fn grant(clock: &ManualClock, ttl: Duration) -> Grant {
    let now = clock.now();
    Grant {
        id: GrantId::random(),
        audience: "conformance".to_owned(),
        principal: PrincipalKey::from_bytes(*Nonce::random().as_bytes()),
        subject: "alice".to_owned(),
        tool: "notes_purge".to_owned(),
        arguments: serde_json::json!({"workspace": "personal", "id": "note-7"}),
        arguments_digest: [7; 32],
        standing: None,
        chosen: Some("note-7".to_owned()),
        version: Some("v1".to_owned()),
        nonce: Nonce::random(),
        issued_at: now,
        expires_at: now + ttl,
        state: GrantState::Granted,
    }
}

async fn issued<S: GrantStore>(store: &S, clock: &ManualClock) -> Grant {
    let grant = grant(clock, TTL);
    store.issue(&grant).await.expect("issue");
    grant
}

fn started(begin: Begin) -> super::Lease {
    match begin {
        Begin::Started(lease) => lease,
        other => panic!("expected a new attempt, got {other:?}"),
    }
}

/// One attempt at a time: a second begin under a live lease is refused until the lease ends.
pub async fn one_attempt_at_a_time<S: GrantStore>(store: &S, clock: &ManualClock) {
    let grant = issued(store, clock).await;
    assert_eq!(
        store.get(grant.id).await.unwrap().map(|g| g.state),
        Some(GrantState::Granted)
    );
    let lease = started(store.begin(grant.id, LEASE).await.unwrap());
    assert_eq!((lease.grant, lease.attempt), (grant.id, 1));
    assert_eq!(
        store.begin(grant.id, LEASE).await.unwrap(),
        Begin::Busy { until: lease.until }
    );
    clock.advance(LEASE - Duration::from_secs(1));
    assert!(matches!(
        store.begin(grant.id, LEASE).await.unwrap(),
        Begin::Busy { .. }
    ));
}

/// A consumed grant never runs again, and cannot be finished twice.
pub async fn consumed_grants_never_run_again<S: GrantStore>(store: &S, clock: &ManualClock) {
    let grant = issued(store, clock).await;
    let lease = started(store.begin(grant.id, LEASE).await.unwrap());
    assert!(store.finish(lease, Finish::Consumed).await.unwrap());
    for _ in 0..3 {
        assert_eq!(
            store.begin(grant.id, LEASE).await.unwrap(),
            Begin::Finished(GrantState::Consumed)
        );
    }
    assert!(!store.finish(lease, Finish::Consumed).await.unwrap());
    assert!(!store.finish(lease, Finish::Failed).await.unwrap());
    clock.advance(LEASE * 2);
    assert_eq!(
        store.begin(grant.id, LEASE).await.unwrap(),
        Begin::Finished(GrantState::Consumed)
    );
}

/// After a lease runs out the next begin is a new attempt, and only it may finish: the stalled
/// worker's late finish is fenced off.
pub async fn stale_attempts_are_fenced<S: GrantStore>(store: &S, clock: &ManualClock) {
    let grant = issued(store, clock).await;
    let first = started(store.begin(grant.id, LEASE).await.unwrap());
    clock.advance(LEASE);
    let second = started(store.begin(grant.id, LEASE).await.unwrap());
    assert_eq!(second.attempt, first.attempt + 1);
    assert!(!store.finish(first, Finish::Consumed).await.unwrap());
    assert!(store.finish(second, Finish::Failed).await.unwrap());
    assert_eq!(
        store.get(grant.id).await.unwrap().map(|g| g.state),
        Some(GrantState::Failed)
    );
}

/// A grant not begun before its expiry never runs; nor does one whose last lease ran out after it.
pub async fn expired_grants_never_run<S: GrantStore>(store: &S, clock: &ManualClock) {
    let unstarted = issued(store, clock).await;
    let abandoned = issued(store, clock).await;
    started(store.begin(abandoned.id, LEASE).await.unwrap());
    clock.advance(TTL + LEASE);
    for id in [unstarted.id, abandoned.id] {
        assert_eq!(
            store.begin(id, LEASE).await.unwrap(),
            Begin::Finished(GrantState::Expired)
        );
    }
}

/// Revoking a waiting grant ends it. Revoking a running one stops it from starting anything:
/// the attempt's `confirm` fails, no other attempt begins, and the attempt may still record
/// what it did; if it never does, the grant ends revoked once its lease is over.
pub async fn revoked_grants_never_run<S: GrantStore>(store: &S, clock: &ManualClock) {
    let waiting = issued(store, clock).await;
    assert_eq!(store.revoke(waiting.id).await.unwrap(), Revoke::Revoked);
    assert_eq!(
        store.revoke(waiting.id).await.unwrap(),
        Revoke::Ended(GrantState::Revoked)
    );
    assert_eq!(
        store.begin(waiting.id, LEASE).await.unwrap(),
        Begin::Finished(GrantState::Revoked)
    );
    // Revoked while re-checking: the attempt must not act, and it may record only that.
    let running = issued(store, clock).await;
    let lease = started(store.begin(running.id, LEASE).await.unwrap());
    assert!(store.confirm(lease).await.unwrap());
    assert_eq!(
        store.revoke(running.id).await.unwrap(),
        Revoke::Stopping { until: lease.until }
    );
    assert!(
        !store.confirm(lease).await.unwrap(),
        "a revoked attempt must not act"
    );
    assert!(matches!(
        store.begin(running.id, LEASE).await.unwrap(),
        Begin::Busy { .. }
    ));
    clock.advance(LEASE);
    assert_eq!(
        store.begin(running.id, LEASE).await.unwrap(),
        Begin::Finished(GrantState::Revoked)
    );
    assert!(!store.finish(lease, Finish::Consumed).await.unwrap());
    // Revoked while acting: what the attempt did is recorded truthfully.
    let acting = issued(store, clock).await;
    let lease = started(store.begin(acting.id, LEASE).await.unwrap());
    store.revoke(acting.id).await.unwrap();
    assert!(store.finish(lease, Finish::Consumed).await.unwrap());
    assert_eq!(
        store.get(acting.id).await.unwrap().map(|g| g.state),
        Some(GrantState::Consumed)
    );
    // A dead worker's lapsed lease: revoked at once.
    let abandoned = issued(store, clock).await;
    let lease = started(store.begin(abandoned.id, LEASE).await.unwrap());
    clock.advance(LEASE);
    assert!(
        !store.confirm(lease).await.unwrap(),
        "a lapsed lease must not act"
    );
    assert_eq!(store.revoke(abandoned.id).await.unwrap(), Revoke::Revoked);
}

/// Unknown ids never run; an id is issued once; a grant is stored as given, in state `Granted`.
pub async fn unknown_and_duplicate_ids<S: GrantStore>(store: &S, clock: &ManualClock) {
    let never = GrantId::random();
    assert_eq!(store.begin(never, LEASE).await.unwrap(), Begin::Unknown);
    assert_eq!(store.revoke(never).await.unwrap(), Revoke::Unknown);
    assert_eq!(store.get(never).await.unwrap(), None);
    let mut grant = grant(clock, TTL);
    grant.state = GrantState::Consumed;
    store.issue(&grant).await.unwrap();
    assert!(
        matches!(store.issue(&grant).await, Err(GrantStoreError::Exists)),
        "an id is issued once, and the error says so"
    );
    grant.state = GrantState::Granted;
    assert_eq!(store.get(grant.id).await.unwrap(), Some(grant));
}

/// Many workers begin the same grant at once: exactly one attempt starts.
pub async fn one_winner_among_concurrent_workers<S: GrantStore>(
    store: Arc<S>,
    clock: &ManualClock,
) {
    let grant = issued(&*store, clock).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.begin(grant.id, LEASE).await.unwrap()
            })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Begin::Started(_) => wins += 1,
            Begin::Busy { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(wins, 1);
}

/// Runs the [`GrantStore`] conformance suite in a module `$name`; `$make` builds
/// `(store, ManualClock)` (see [`crate::grant::conformance`]).
#[macro_export]
macro_rules! grant_store_conformance {
    // `$make` gives `Option<(store, clock)>`: `None` skips the test (a backend not running).
    ($name:ident, optional $make:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::grant_store_conformance!(@each $make;
                one_attempt_at_a_time,
                consumed_grants_never_run_again,
                stale_attempts_are_fenced,
                expired_grants_never_run,
                revoked_grants_never_run,
                unknown_and_duplicate_ids,
            );

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn one_winner_among_concurrent_workers() {
                let Some((store, clock)) = $make else { return };
                $crate::grant::conformance::one_winner_among_concurrent_workers(
                    ::std::sync::Arc::new(store),
                    &clock,
                )
                .await;
            }
        }
    };
    ($name:ident, $make:expr) => {
        $crate::grant_store_conformance!($name, optional (::core::option::Option::Some($make)));
    };
    (@each $make:expr; $($check:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                let Some((store, clock)) = $make else { return };
                $crate::grant::conformance::$check(&store, &clock).await;
            }
        )+
    };
}
