//! Attacks on queued execution (issue 12): grants, their stores, the worker API and the layer.
//!
//! Each test is an attack and shows that the promise it attacks holds. Several were findings when
//! first written (their comments still describe the hole they found, which the grant code now
//! closes); the others held from the start, and their comments say which protection they would
//! catch being removed.
//!
//! Redis and Postgres come from `REDIS_URL` / `POSTGRES_URL` (defaults 127.0.0.1); a backend that
//! cannot be reached skips its tests, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::common::audit_events::Events;
use crate::common::faulty::{Faults, Faulty};
use crate::common::*;
use mcp_confirm::clock::{Clock, ManualClock};
use mcp_confirm::grant::{
    Begin, Finish, Grant, GrantError, GrantId, GrantState, GrantStore, Grants, MemoryGrantStore,
    Revoke, RunError, conformance,
};
use mcp_confirm::store::{MemoryReplayStore, PostgresStore, RedisStore};
use mcp_confirm::{ConfirmLayer, KeyRing, Principal, Refusal, Revalidation};
use serde_json::{Value, json};
use tokio::sync::Notify;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);

// ---------------------------------------------------------------------------------------------
// Helpers

fn manual_clock() -> ManualClock {
    ManualClock::new(now())
}

fn memory(clock: &ManualClock) -> Arc<MemoryGrantStore> {
    Arc::new(MemoryGrantStore::with_clock(100, clock.clone()))
}

/// A hook that lets every grant through (like the README's `workspace_still_ours`, which only
/// re-authorizes the principal), counting its calls.
fn passing_hook(calls: Arc<AtomicUsize>) -> impl mcp_confirm::Revalidate {
    move |_: Revalidation| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), Refusal>(()) }
    }
}

/// A hook whose first call (only) announces itself on `entered` and then waits for `go` before it
/// answers `Ok`: the re-check is "slow" exactly once, so a race can be placed inside it.
fn slow_once_hook(entered: Arc<Notify>, go: Arc<Notify>) -> impl mcp_confirm::Revalidate {
    let first = Arc::new(AtomicUsize::new(0));
    move |_: Revalidation| {
        let (entered, go) = (Arc::clone(&entered), Arc::clone(&go));
        let slow = first.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if slow {
                entered.notify_one();
                go.notified().await;
            }
            Ok::<(), Refusal>(())
        }
    }
}

async fn issued<S: GrantStore>(store: &S, clock: &ManualClock, ttl: Duration) -> Grant {
    let grant = conformance::grant(clock, ttl);
    store.issue(&grant).await.expect("issue");
    grant
}

async fn state_of<S: GrantStore>(store: &S, id: GrantId) -> GrantState {
    store
        .get(id)
        .await
        .unwrap()
        .expect("the grant exists")
        .state
}

/// A Redis grant store under a prefix of its own, on a manual clock; `None` when Redis is down.
async fn redis_store(clock: &ManualClock) -> Option<RedisStore> {
    redis_store_at(
        clock,
        &format!("mcp-confirm-attack:grant:{}:", GrantId::random()),
    )
    .await
}

async fn redis_store_at(clock: &ManualClock, prefix: &str) -> Option<RedisStore> {
    let url = crate::backends::redis_url();
    let store = match RedisStore::open(&url) {
        Ok(store) => store
            .grant_prefix(prefix)
            .timeout(Duration::from_secs(5))
            .grant_clock(clock.clone()),
        Err(e) => return crate::backends::unavailable("grant attack", "Redis", e),
    };
    match store.get(GrantId::random()).await {
        Ok(_) => Some(store),
        Err(e) => crate::backends::unavailable("grant attack", "Redis", e),
    }
}

/// A Postgres grant store on a table of its own, on a manual clock; `None` when Postgres is down.
async fn postgres_store(clock: &ManualClock) -> Option<PostgresStore> {
    let url = crate::backends::postgres_url();
    let store = match PostgresStore::connect(&url) {
        Ok(store) => store
            .grants_table("mcp_confirm_attack_grants")
            .unwrap()
            .timeout(Duration::from_secs(5))
            .grant_clock(clock.clone()),
        Err(e) => return crate::backends::unavailable("grant attack", "Postgres", e),
    };
    match store.migrate().await {
        Ok(()) => Some(store),
        Err(e) => crate::backends::unavailable("grant attack", "Postgres", e),
    }
}

/// A raw Redis connection (to corrupt records).
async fn redis_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(crate::backends::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A raw pool on the test database (to corrupt rows).
fn pg_pool() -> deadpool_postgres::Pool {
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(crate::backends::postgres_url());
    config
        .create_pool(
            Some(deadpool_postgres::Runtime::Tokio1),
            tokio_postgres::NoTls,
        )
        .unwrap()
}

// =============================================================================================
// FINDINGS (these tests fail today)
// =============================================================================================

/// Revocation between `begin` and the action: the user cancels while the worker is still in the
/// re-check, before anything was done. `revoke` answers `Ok(true)` ("it stopped a grant"), yet
/// `Grants::begin` never looks at the state of the grant it re-read (nor re-reads it after the
/// hook), so the attempt is handed out and `run` performs the action. README: "a revoked grant
/// never runs"; the demo: "whatever state the task is in, it never runs".
#[tokio::test]
async fn holds_a_grant_revoked_during_the_recheck_never_acts() {
    let clock = manual_clock();
    let store = memory(&clock);
    let (entered, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let grants = Grants::new(Arc::clone(&store))
        .lease(LEASE)
        .revalidate("notes_purge", slow_once_hook(entered.clone(), go.clone()));
    let grant = issued(&*store, &clock, TTL).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (grants, ran) = (grants.clone(), Arc::clone(&ran));
        tokio::spawn(async move {
            grants
                .run(grant.id, |_| async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(())
                })
                .await
                .map(drop)
        })
    };
    entered.notified().await;
    // The owner cancels while the worker is re-checking: the action has not started.
    let stopped = grants
        .revoke(grant.id, &Principal::new("alice"))
        .await
        .unwrap();
    assert!(matches!(stopped, Revoke::Stopping { .. }), "{stopped:?}");
    go.notify_one();
    let outcome = worker.await.unwrap();
    assert!(
        matches!(
            outcome,
            Err(RunError::Grant(GrantError::Ended(GrantState::Revoked)))
        ),
        "{outcome:?}"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a grant revoked before its action must not run"
    );
    clock.advance(LEASE);
    assert!(grants.begin(grant.id).await.is_err());
    assert_eq!(state_of(&*store, grant.id).await, GrantState::Revoked);
}

/// Revocation while the action runs: `revoke` answers `Ok(true)`, the action completes anyway,
/// its `consumed` is refused, `run` still answers `Ok`, and the grant ends `Revoked`: the record
/// and the audit trail (grant_revoked, no grant_consumed) say the work was stopped when it
/// happened. The caller of `revoke` (the demo's tasks/cancel) is told it stopped the work.
#[tokio::test]
async fn holds_a_grant_revoked_while_its_action_runs_records_what_it_did() {
    let (events, _guard) = Events::record();
    let clock = manual_clock();
    let store = memory(&clock);
    let grants = Grants::new(Arc::clone(&store))
        .lease(LEASE)
        .revalidate("notes_purge", passing_hook(Arc::default()));
    let grant = issued(&*store, &clock, TTL).await;
    let (acting, finish) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (grants, ran) = (grants.clone(), Arc::clone(&ran));
        let (acting, finish) = (Arc::clone(&acting), Arc::clone(&finish));
        tokio::spawn(async move {
            grants
                .run(grant.id, |_| async move {
                    acting.notify_one();
                    finish.notified().await;
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>("deleted")
                })
                .await
        })
    };
    acting.notified().await;
    let stopped = grants
        .revoke(grant.id, &Principal::new("alice"))
        .await
        .unwrap();
    finish.notify_one();
    let outcome = worker.await.unwrap();
    let state = state_of(&*store, grant.id).await;
    let consumed_events = events.with("decision", "grant_consumed").len();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // The revoke came too late to stop the work, and says so; the record says it ran.
    assert!(matches!(stopped, Revoke::Stopping { .. }), "{stopped:?}");
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(state, GrantState::Consumed);
    assert_eq!(consumed_events, 1);
}

/// A slow re-check outlives the lease: the attempt is handed out anyway, after a second attempt
/// has begun and acted. `Grants::begin` checks neither the lease's end nor the grant's state
/// after the hook, so "one attempt at a time" fails inside the library's own begin, before any
/// user code runs. Both hooks pass because both re-checked before either acted.
#[tokio::test]
async fn holds_an_attempt_whose_lease_ran_out_during_the_recheck_never_acts() {
    let clock = manual_clock();
    let store = memory(&clock);
    let (entered, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let grants = Grants::new(Arc::clone(&store))
        .lease(LEASE)
        .revalidate("notes_purge", slow_once_hook(entered.clone(), go.clone()));
    let grant = issued(&*store, &clock, TTL).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let action = |runs: Arc<AtomicUsize>| {
        move |_: Grant| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    };
    let first = {
        let (grants, runs) = (grants.clone(), Arc::clone(&runs));
        tokio::spawn(async move { grants.run(grant.id, action(runs)).await.map(drop) })
    };
    entered.notified().await;
    // The first worker's re-check is slow: its lease runs out, a second worker takes over.
    clock.advance(LEASE);
    grants
        .run(grant.id, action(Arc::clone(&runs)))
        .await
        .unwrap();
    assert_eq!(state_of(&*store, grant.id).await, GrantState::Consumed);
    go.notify_one();
    let late = first.await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the first worker's begin returned an attempt whose lease had ended and whose grant was \
         already consumed; it acted a second time (its run answered {late:?})"
    );
}

/// Grants record the audience (deployment) that issued them, but nothing checks it: a worker of
/// another deployment sharing the grant store (e.g. the default Redis prefix) runs a grant that
/// deployment never issued, for a tool of the same name.
#[tokio::test]
async fn holds_a_grant_issued_for_one_audience_never_runs_in_another() {
    let notes = Notes::seeded();
    let clock = manual_clock();
    let replay = MemoryReplayStore::with_clock(10_000, clock.clone());
    let shared = Arc::new(MemoryGrantStore::with_clock(100, clock.clone()));
    let layer = |audience: &str| {
        ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience(audience)
            .clock(clock.clone())
            .replay_store(replay.clone())
            .tool("notes_delete", delete_policy(&notes).queued())
            .grant_store(Arc::clone(&shared))
            .build()
    };
    let f = Fixture::new(
        layer("https://notes.example/mcp"),
        notes.clone(),
        clock.clone(),
        replay.clone(),
    );
    let other = layer("https://billing.example/mcp").grants().unwrap();
    let id = approved(&f).await;
    assert_eq!(
        shared.get(id).await.unwrap().unwrap().audience,
        "https://notes.example/mcp"
    );
    let result = other.begin(id).await;
    assert!(
        result.is_err(),
        "billing.example's worker began a grant issued by notes.example: {:?}",
        result.map(|a| a.lease())
    );
}

/// The memory store's capacity forgets ended grants and unstarted expired ones, but not an
/// `Executing` grant whose worker died and whose expiry and lease have both passed, though its
/// next `begin` can only end it (`Expired`). Abandoned attempts (a failing action leaves the grant
/// executing) thus fill the store for good, and every new approval is refused with `Full`.
#[tokio::test]
async fn holds_abandoned_attempts_past_their_expiry_are_forgotten() {
    let clock = manual_clock();
    let store = MemoryGrantStore::with_clock(1, clock.clone());
    let abandoned = issued(&store, &clock, Duration::from_secs(60)).await;
    assert!(matches!(
        store.begin(abandoned.id, LEASE).await.unwrap(),
        Begin::Started(_)
    ));
    // The worker dies (or its action errors); the lease and then the grant run out.
    clock.advance(Duration::from_secs(60) + LEASE);
    let fresh = conformance::grant(&clock, Duration::from_secs(60));
    let issue = store.issue(&fresh).await;
    assert!(
        issue.is_ok(),
        "a store full of a grant that can never run again refuses a new one: {issue:?}"
    );
}

/// The layer with a queued `notes_delete` (the `tests/suite/grants/queued.rs` set-up) over a memory grant
/// store of `capacity` on the fixture's clock: the fixture, the worker handle and the store.
fn queued_fixture(capacity: usize) -> (Fixture, Grants, Arc<MemoryGrantStore>) {
    let notes = Notes::seeded();
    let clock = manual_clock();
    let replay = MemoryReplayStore::with_clock(10_000, clock.clone());
    let grants = Arc::new(MemoryGrantStore::with_clock(capacity, clock.clone()));
    let layer = base_builder(&notes, &clock, &replay)
        .tool("notes_delete", delete_policy(&notes).queued())
        .grant_store(Arc::clone(&grants))
        .grant_ttl(Duration::from_secs(120))
        .build();
    let worker = layer.grants().unwrap();
    (Fixture::new(layer, notes, clock, replay), worker, grants)
}

/// Alice confirms deleting note-7; the grant id the forwarded call carries.
async fn approved(f: &Fixture) -> GrantId {
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    let done = f.accept(&state, json!(2), "note-7").await;
    assert_ran(&done);
    f.seen.last().confirmed.unwrap().grant.unwrap()
}

/// `principal` asks to delete note-30 (team, "Groceries") with `extra` in the arguments, and
/// accepts; the answer to the retry.
async fn approve_as(f: &Fixture, principal: &str, extra: &Value, n: u64) -> Answer {
    let call = json!({"jsonrpc":"2.0","id":n,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": TEAM, "title": "Groceries", "padding": extra}}});
    let first = send(&f.svc, post(&call, Some(principal))).await;
    let state = first.state();
    let retry = retry(call, json!(n + 1), &state, accept("note-30"));
    send(&f.svc, post(&retry, Some(principal))).await
}

/// No per-principal budget and no size bound on grants: one principal (bob) fills the grant
/// store with grants he never runs, each carrying up to `max_body_bytes` (4 MiB) of arguments,
/// and everyone else's approvals of queued tools are refused, their confirmations burned. The
/// replay store has per-principal budgets for exactly this; the grant store has none (nor do the
/// Redis and Postgres grant stores, which keep the same unbounded records).
#[tokio::test]
async fn holds_one_principal_cannot_fill_the_grant_store_for_everyone() {
    // Capacity 400: each principal may hold 4 grants that can still run.
    let (f, _, _) = queued_fixture(400);
    // Too large to keep in a grant: refused on the first call, before any form is offered, so
    // no user confirms something that cannot be queued.
    let huge = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": TEAM, "title": "Groceries",
                     "padding": "x".repeat(2 * 1024 * 1024)}}});
    let huge = send(&f.svc, post(&huge, Some("bob"))).await;
    assert_eq!(
        huge.error()["data"]["reason"],
        "arguments_too_large",
        "{}",
        huge.json()
    );
    assert!(huge.json()["result"].is_null(), "no form was offered");
    let padding = json!("x".repeat(1024));
    for n in 1..=4 {
        assert_ran(&approve_as(&f, "bob", &padding, 10 * n + 1).await);
    }
    let over = approve_as(&f, "bob", &padding, 100).await;
    assert_eq!(
        over.error()["data"]["reason"],
        "principal_budget_spent",
        "{}",
        over.json()
    );
    // Alice, who never issued a grant, confirms her own deletion.
    let state = f.alice(&delete_call(json!(100), "Groceries")).await.state();
    let refused = f.accept(&state, json!(101), "note-7").await;
    let again = f.accept(&state, json!(102), "note-7").await;
    assert!(
        refused.json().get("error").is_none(),
        "alice's approval was refused because bob filled the grant store: {}; her confirmation \
         is spent, the same answer again gets: {}",
        refused.json(),
        again.json()
    );
}

/// `Grants::lease` is not validated. A lease of `Duration::MAX` ("never take over") panics in
/// `Grant::begin` (`SystemTime + Duration` overflows) while the memory store holds its lock, which
/// poisons the store: from then on every call fails, including the layer's `issue`, so no queued
/// tool can be approved until a restart.
#[tokio::test]
async fn holds_a_huge_lease_neither_panics_nor_poisons_the_store() {
    let clock = manual_clock();
    let store = memory(&clock);
    let grant = issued(&*store, &clock, TTL).await;
    let begin = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(store.begin(grant.id, Duration::MAX));
    }));
    let other = conformance::grant(&clock, TTL);
    let issue = store.issue(&other).await;
    assert!(
        begin.is_ok() && issue.is_ok(),
        "begin panicked: {}; the next issue answered {issue:?}",
        begin.is_err()
    );
}

/// A zero lease (also accepted without complaint) lets every `begin` start a new attempt at once:
/// two workers run the same grant concurrently.
#[tokio::test]
async fn holds_a_zero_lease_never_lets_two_attempts_run_at_once() {
    let clock = manual_clock();
    let store = memory(&clock);
    let grants = Grants::new(Arc::clone(&store))
        .lease(Duration::ZERO)
        .revalidate("notes_purge", passing_hook(Arc::default()));
    let grant = issued(&*store, &clock, TTL).await;
    let first = grants.begin(grant.id).await;
    let second = grants.begin(grant.id).await;
    assert!(
        first.is_err() || second.is_err(),
        "two attempts at once: {:?} and {:?}",
        first.map(|a| a.lease().attempt),
        second.map(|a| a.lease().attempt)
    );
}

/// Attempt numbers saturate at `u32::MAX`: from there on every attempt gets the same number, so
/// a stalled attempt's finish is accepted after another attempt started (the fence is gone).
/// Reachable only after 2^32 attempts or from a corrupted/forged record; hardening.
#[test]
fn holds_attempt_numbers_never_repeat_the_last_attempt_fails_the_grant() {
    let clock = manual_clock();
    let mut grant = conformance::grant(&clock, TTL);
    grant.state = GrantState::Executing {
        attempt: u32::MAX - 1,
        lease_until: clock.now(),
    };
    let Begin::Started(stale) = grant.begin(clock.now(), LEASE) else {
        panic!("attempt u32::MAX starts");
    };
    assert_eq!(stale.attempt, u32::MAX);
    clock.advance(LEASE);
    // No fence number is left: the grant fails rather than hand one out twice.
    assert_eq!(
        grant.begin(clock.now(), LEASE),
        Begin::Finished(GrantState::Failed)
    );
    assert!(!grant.finish(&stale, Finish::Consumed));
}

// =============================================================================================
// ATTACKS THAT HELD (regression tests)
// =============================================================================================

/// Expiry boundaries, on every backend: a `begin` exactly at `expires_at` expires the grant; one
/// a millisecond before starts an attempt whose lease runs past the expiry; once that lease has
/// lapsed, the next `begin` expires it rather than starting attempt 2, and the stale attempt's
/// late finish is refused. (Fails if `now >= expires_at` became `>`, or if the `Executing`
/// expiry arm were removed: attempt 2 would start.)
async fn expiry_boundaries<S: GrantStore>(store: &S, clock: &ManualClock) {
    let at_expiry = issued(store, clock, TTL).await;
    let before_expiry = issued(store, clock, TTL).await;
    clock.advance(TTL - Duration::from_millis(1));
    let Begin::Started(lease) = store.begin(before_expiry.id, LEASE).await.unwrap() else {
        panic!("a millisecond before expiry, an attempt starts");
    };
    assert!(lease.until > before_expiry.expires_at);
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        store.begin(at_expiry.id, LEASE).await.unwrap(),
        Begin::Finished(GrantState::Expired)
    );
    clock.advance(LEASE);
    assert_eq!(
        store.begin(before_expiry.id, LEASE).await.unwrap(),
        Begin::Finished(GrantState::Expired)
    );
    assert!(!store.finish(lease, Finish::Consumed).await.unwrap());
    assert_eq!(
        store.revoke(before_expiry.id).await.unwrap(),
        Revoke::Ended(GrantState::Expired)
    );
}

/// A clock on a whole millisecond (the Redis and Postgres records keep milliseconds).
fn ms_clock() -> ManualClock {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

#[tokio::test]
async fn holds_expiry_boundaries_memory() {
    let clock = ms_clock();
    expiry_boundaries(&*memory(&clock), &clock).await;
}

#[tokio::test]
async fn holds_expiry_boundaries_redis() {
    let clock = ms_clock();
    let Some(store) = redis_store(&clock).await else {
        return;
    };
    expiry_boundaries(&store, &clock).await;
}

#[tokio::test]
async fn holds_expiry_boundaries_postgres() {
    let clock = ms_clock();
    let Some(store) = postgres_store(&clock).await else {
        return;
    };
    expiry_boundaries(&store, &clock).await;
}

/// `revoke` and the current attempt's `finish` race on one grant, many times: exactly one wins,
/// never both (a compare-and-set that ignored a lost race, or a row not locked, would let both
/// answer true).
async fn revoke_and_finish_race<S: GrantStore>(store: Arc<S>, clock: &ManualClock) {
    for _ in 0..40 {
        let grant = issued(&*store, clock, TTL).await;
        let Begin::Started(lease) = store.begin(grant.id, LEASE).await.unwrap() else {
            panic!("starts");
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let revoke = {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.revoke(grant.id).await.unwrap()
            })
        };
        let finish = {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.finish(lease, Finish::Consumed).await.unwrap()
            })
        };
        // Revoking a running attempt lets it record what it did: the finish always wins,
        // and the revoke reports that it came while the attempt was under way, or after.
        let (revoked, finished) = (revoke.await.unwrap(), finish.await.unwrap());
        assert!(finished, "revoked {revoked:?}, finished {finished}");
        assert!(
            matches!(
                revoked,
                Revoke::Stopping { .. } | Revoke::Ended(GrantState::Consumed)
            ),
            "{revoked:?}"
        );
        assert_eq!(state_of(&*store, grant.id).await, GrantState::Consumed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_revoke_and_finish_race_redis() {
    let clock = manual_clock_now();
    let Some(store) = redis_store(&clock).await else {
        return;
    };
    revoke_and_finish_race(Arc::new(store), &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_revoke_and_finish_race_postgres() {
    let clock = manual_clock_now();
    let Some(store) = postgres_store(&clock).await else {
        return;
    };
    revoke_and_finish_race(Arc::new(store), &clock).await;
}

fn manual_clock_now() -> ManualClock {
    ManualClock::new(SystemTime::now())
}

/// Many workers race `begin` on Redis while the owner revokes: at most one attempt ever starts,
/// and if one did, revoke either came first (no attempt) or the attempt's finish is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_redis_begin_flood_with_a_concurrent_revoke() {
    let clock = manual_clock_now();
    let Some(store) = redis_store(&clock).await else {
        return;
    };
    let store = Arc::new(store);
    for _ in 0..10 {
        let grant = issued(&*store, &clock, TTL).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(9));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store.begin(grant.id, LEASE).await.unwrap()
            }));
        }
        let revoke = {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.revoke(grant.id).await.unwrap()
            })
        };
        let mut leases = Vec::new();
        for task in tasks {
            if let Begin::Started(lease) = task.await.unwrap() {
                leases.push(lease);
            }
        }
        let revoked = revoke.await.unwrap();
        assert!(leases.len() <= 1, "{leases:?}");
        for lease in &leases {
            // An attempt that began before the revoke may not act any more.
            assert!(!store.confirm(*lease).await.unwrap());
        }
        match revoked {
            Revoke::Revoked => {
                assert_eq!(state_of(&*store, grant.id).await, GrantState::Revoked);
            }
            Revoke::Stopping { .. } => assert!(matches!(
                state_of(&*store, grant.id).await,
                GrantState::Revoking { .. }
            )),
            other => panic!("{other:?}"),
        }
    }
}

/// A hook on a flag standing for the live record: passes while the record is there.
fn record_hook(present: Arc<std::sync::atomic::AtomicBool>) -> impl mcp_confirm::Revalidate {
    move |_: Revalidation| {
        let present = present.load(Ordering::SeqCst);
        async move {
            if present {
                Ok(())
            } else {
                Err(Refusal::new("the record is gone"))
            }
        }
    }
}

/// Postgres: the one-transaction mode and the plain path on the same grant. While
/// `run_in_transaction` holds the row (its change not yet committed), a plain `Grants::run` and
/// a `revoke` wait on the row lock; after the commit they find the grant consumed: the change
/// happens once and the revoke does not claim to have stopped it. The other way round, a plain
/// attempt under a live lease makes `run_in_transaction` answer `Busy` without acting. (Fails if
/// the plain path's `FOR UPDATE` were dropped, or the transaction's begin did not check the lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_postgres_transaction_mode_against_the_plain_path_on_one_grant() {
    let clock = manual_clock_now();
    let Some(store) = postgres_store(&clock).await else {
        return;
    };
    let present = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let grants = Grants::new(store.clone())
        .lease(LEASE)
        .revalidate("notes_purge", record_hook(Arc::clone(&present)));
    let grant = issued(&store, &clock, TTL).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let (inside, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let tx_worker = {
        let (grants, runs, present) = (grants.clone(), Arc::clone(&runs), Arc::clone(&present));
        let (inside, release) = (Arc::clone(&inside), Arc::clone(&release));
        tokio::spawn(async move {
            grants
                .run_in_transaction(grant.id, move |_tx, _grant| {
                    Box::pin(async move {
                        inside.notify_one();
                        release.notified().await;
                        runs.fetch_add(1, Ordering::SeqCst);
                        present.store(false, Ordering::SeqCst);
                        Ok::<_, String>(())
                    })
                })
                .await
                .map_err(|e| format!("{e:?}"))
        })
    };
    inside.notified().await;
    let plain = {
        let (grants, runs) = (grants.clone(), Arc::clone(&runs));
        tokio::spawn(async move {
            grants
                .run(grant.id, |_| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                })
                .await
                .map_err(|e| format!("{e:?}"))
        })
    };
    let revoke = {
        let grants = grants.clone();
        tokio::spawn(async move { grants.revoke(grant.id, &Principal::new("alice")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.notify_one();
    tx_worker.await.unwrap().unwrap();
    let plain = plain.await.unwrap();
    assert!(
        plain
            .as_ref()
            .is_err_and(|e| e.contains("Ended(Consumed)") || e.contains("Unavailable")),
        "{plain:?}"
    );
    let revoked = revoke.await.unwrap();
    assert!(
        matches!(revoked, Ok(Revoke::Ended(GrantState::Consumed))),
        "{revoked:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(state_of(&store, grant.id).await, GrantState::Consumed);

    // The other way round: a plain attempt holds the lease; the transaction mode is busy.
    present.store(true, Ordering::SeqCst);
    let second = issued(&store, &clock, TTL).await;
    let attempt = grants.begin(second.id).await.unwrap();
    let busy = grants
        .run_in_transaction(second.id, |_tx, _grant| {
            Box::pin(async { Ok::<_, String>(()) })
        })
        .await;
    assert!(
        matches!(busy, Err(RunError::Grant(GrantError::Busy { .. }))),
        "{busy:?}"
    );
    attempt.consumed().await.unwrap();
    assert_eq!(state_of(&store, second.id).await, GrantState::Consumed);
}

/// Two retries of one accepted confirmation race through the layer on two threads, 20 times:
/// each time one is forwarded with one grant, the other is refused, and exactly one grant is
/// stored. (Fails if the grant were issued before the claim, or the claim were not atomic.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_one_confirmation_races_into_one_grant() {
    let notes = Notes::seeded();
    let clock = manual_clock();
    let replay = MemoryReplayStore::with_clock(10_000, clock.clone());
    // Each grant takes 20 ms to store, so two racing retries overlap.
    let store = Faulty::new(
        MemoryGrantStore::with_clock(10_000, clock.clone()),
        Faults {
            issue_delay: Some(Duration::from_millis(20)),
            ..Faults::default()
        },
    );
    let (ids, inner) = (Arc::clone(&store.issued), Arc::clone(&store.inner));
    let layer = base_builder(&notes, &clock, &replay)
        .tool("notes_delete", delete_policy(&notes).queued())
        .grant_store(store)
        .build();
    let f = Fixture::new(layer, notes, clock, replay);
    for round in 0..20u64 {
        let state = f
            .alice(&delete_call(json!(round * 10), "Groceries"))
            .await
            .state();
        let before = f.seen.count();
        let earlier = ids.lock().unwrap().len();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let racers: Vec<_> = (1..=2)
            .map(|n| {
                let (svc, barrier) = (f.svc.clone(), Arc::clone(&barrier));
                let retry = accepted(&state, json!(round * 10 + n), "note-7");
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(&svc, post(&retry, Some("alice"))).await.json()
                })
            })
            .collect();
        let mut forwarded = 0;
        for racer in racers {
            if racer.await.unwrap().get("error").is_none() {
                forwarded += 1;
            }
        }
        assert_eq!(forwarded, 1);
        assert_eq!(f.seen.count(), before + 1);
        // The grant is stored before the claim; a retry that loses the claim withdraws its
        // grant, so exactly one grant per confirmation can ever run.
        let forwarded_grant = f.seen.last().confirmed.unwrap().grant.unwrap();
        let others: Vec<GrantId> = ids
            .lock()
            .unwrap()
            .iter()
            .skip(earlier)
            .copied()
            .filter(|id| *id != forwarded_grant)
            .collect();
        for id in others {
            let state = inner.get(id).await.unwrap().map(|g| g.state);
            assert!(
                matches!(state, Some(GrantState::Revoked) | None),
                "round {round}: only the forwarded grant can run, another is {state:?}"
            );
        }
    }
}

/// The grant records exactly the arguments the inner service was forwarded (chosen id written
/// in), the version the state signed, and the principal who confirmed; a declined or cancelled
/// confirmation issues none. (Fails if the grant took the first call's arguments, or if decline
/// reached `issue_grant`.)
#[tokio::test]
async fn holds_the_grant_records_what_was_forwarded_and_only_for_acceptances() {
    let (events, _guard) = Events::record();
    let (f, _, grants) = queued_fixture(10_000);
    let id = approved(&f).await;
    let forwarded = f.seen.last().json()["params"]["arguments"].clone();
    let grant = grants.get(id).await.unwrap().unwrap();
    assert_eq!(grant.arguments, forwarded);
    assert_eq!(forwarded["note_id"], "note-7");
    assert_eq!(grant.version, Some(f.notes.version("note-7")));
    assert_eq!(grant.subject, "alice");
    for answer in [decline(), cancel()] {
        let state = f.alice(&delete_call(json!(7), "Groceries")).await.state();
        let reply = f.alice(&answered(&state, json!(8), answer)).await;
        assert!(reply.json().get("error").is_none(), "{}", reply.json());
    }
    assert_eq!(events.with("decision", "grant_issued").len(), 1);
    assert_eq!(f.seen.count(), 1);
}

/// Revocation by anyone but the grant's subject, including look-alike subjects, is refused and
/// changes nothing. (Fails if the comparison were case-insensitive, trimmed, or a prefix test.)
#[tokio::test]
async fn holds_only_the_exact_subject_may_revoke() {
    let clock = manual_clock();
    let store = memory(&clock);
    let grants =
        Grants::new(Arc::clone(&store)).revalidate("notes_purge", passing_hook(Arc::default()));
    let grant = issued(&*store, &clock, TTL).await;
    for other in [
        "bob", "Alice", "alice ", " alice", "alice\0", "alic", "alicee", "",
    ] {
        assert!(
            matches!(
                grants.revoke(grant.id, &Principal::new(other)).await,
                Err(GrantError::NotOwner)
            ),
            "{other:?}"
        );
        assert_eq!(state_of(&*store, grant.id).await, GrantState::Granted);
    }
    assert_eq!(
        grants
            .revoke(grant.id, &Principal::new("alice"))
            .await
            .unwrap(),
        Revoke::Revoked
    );
}

/// Corrupted records (garbage, a state without its lease, a negative attempt, an unknown field,
/// an id or nonce that does not parse, a state in the wrong case) never run and never panic, on
/// Redis and Postgres: `begin`, `revoke` and `get` answer a store error (retryable, fail closed).
/// Each corruption starts from the record as stored, and the unchanged record is written back
/// first to show it still runs (so the test is not vacuous). (Fails if `decode` were lenient:
/// e.g. `executing` without a lease decoding to something that starts.)
#[tokio::test]
async fn holds_corrupted_records_never_run_redis() {
    let clock = manual_clock_now();
    let prefix = format!("mcp-confirm-attack:grant:{}:", GrantId::random());
    let Some(store) = redis_store_at(&clock, &prefix).await else {
        return;
    };
    let mut redis = redis_connection().await;
    for (n, corrupt) in corruptions().iter().enumerate() {
        let grant = issued(&store, &clock, TTL).await;
        let key = format!("{prefix}{}", grant.id);
        let stored: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
        let text = corrupt(serde_json::from_str(&stored).unwrap());
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&text)
            .query_async(&mut redis)
            .await
            .unwrap();
        if n == 0 {
            assert!(matches!(
                store.begin(grant.id, LEASE).await,
                Ok(Begin::Started(_))
            ));
        } else {
            expect_fail_closed(&store, grant.id).await;
        }
    }
}

#[tokio::test]
async fn holds_corrupted_records_never_run_postgres() {
    let clock = manual_clock_now();
    let Some(store) = postgres_store(&clock).await else {
        return;
    };
    let client = pg_pool().get().await.unwrap();
    for (n, corrupt) in corruptions().iter().enumerate() {
        let grant = issued(&store, &clock, TTL).await;
        let id = grant.id.to_string();
        let stored: String = client
            .query_one(
                "SELECT record FROM mcp_confirm_attack_grants WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap()
            .get(0);
        let text = corrupt(serde_json::from_str(&stored).unwrap());
        client
            .execute(
                "UPDATE mcp_confirm_attack_grants SET record = $2 WHERE id = $1",
                &[&id, &text],
            )
            .await
            .unwrap();
        if n == 0 {
            assert!(matches!(
                store.begin(grant.id, LEASE).await,
                Ok(Begin::Started(_))
            ));
            continue;
        }
        expect_fail_closed(&store, grant.id).await;
        let grants =
            Grants::new(store.clone()).revalidate("notes_purge", passing_hook(Arc::default()));
        let ran = grants
            .run_in_transaction(grant.id, |_tx, _g| Box::pin(async { Ok::<_, String>(()) }))
            .await;
        assert!(
            matches!(ran, Err(RunError::Grant(GrantError::Unavailable(_)))),
            "{ran:?}"
        );
    }
}

type Corruption = Box<dyn Fn(Value) -> String>;

/// Ways to damage a grant's stored JSON; the first leaves it intact (the control).
fn corruptions() -> Vec<Corruption> {
    fn with(f: impl Fn(&mut Value) + 'static) -> Corruption {
        Box::new(move |mut v| {
            f(&mut v);
            v.to_string()
        })
    }
    vec![
        with(|_| {}),
        Box::new(|_| "not json".to_owned()),
        Box::new(|_| String::new()),
        with(|v| {
            v["state"] = json!("executing");
            v["attempt"] = json!(1);
        }),
        with(|v| {
            v["state"] = json!("executing");
            v["attempt"] = json!(-1);
            v["lease_until_ms"] = json!(0);
        }),
        with(|v| {
            v["state"] = json!("executing");
            v["attempt"] = json!(u64::from(u32::MAX) + 1);
            v["lease_until_ms"] = json!(0);
        }),
        with(|v| v["extra"] = json!(true)),
        with(|v| {
            let id = v["id"].as_str().unwrap().to_uppercase();
            v["id"] = json!(id);
        }),
        with(|v| v["state"] = json!("Granted")),
        with(|v| v["nonce"] = json!("zz".repeat(16))),
        with(|v| v["expires_at_ms"] = json!(-1)),
        with(|v| {
            v.as_object_mut().unwrap().remove("subject");
        }),
    ]
}

async fn expect_fail_closed<S: GrantStore + Clone>(store: &S, id: GrantId) {
    assert!(store.begin(id, LEASE).await.is_err());
    assert!(store.revoke(id).await.is_err());
    assert!(store.get(id).await.is_err());
    let grants = Grants::new(store.clone()).revalidate("notes_purge", passing_hook(Arc::default()));
    let ran = AtomicUsize::new(0);
    let result = grants
        .run(id, |_| async {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await;
    assert!(
        matches!(&result, Err(RunError::Grant(e)) if e.is_retryable()),
        "{result:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// Grant ids from untrusted text (a job payload) never panic the parser, whatever the bytes.
#[test]
fn holds_grant_id_parsing_never_panics() {
    for text in [
        "é".repeat(16),
        "\u{10FFFF}".repeat(8),
        "0".repeat(31) + "é",
        "+".repeat(32),
        " ".repeat(32),
        "0x".repeat(16),
        "G".repeat(32),
        String::from_utf8(vec![b'a'; 32]).unwrap(),
    ] {
        let parsed = text.parse::<GrantId>();
        assert_eq!(parsed.is_ok(), text == "a".repeat(32), "{text:?}");
    }
}

/// The full grant id never reaches the audit trail, on any path: issue, executing, consumed, a
/// revoke by another principal, a revoke, a refused re-check, a superseded finish, a lost finish,
/// expiry. (Fails if any event carried `%grant.id` instead of the short form.)
#[tokio::test]
async fn holds_the_full_grant_id_is_never_logged() {
    let (events, _guard) = Events::record();
    let (f, worker, _) = queued_fixture(10_000);
    let mut ids = Vec::new();
    // Issued, executing, consumed.
    let id = approved(&f).await;
    ids.push(id);
    worker
        .run(id, |_| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    // Revoked by another principal (refused), then by its owner.
    let id = approved(&f).await;
    ids.push(id);
    let _ = worker.revoke(id, &Principal::new("bob")).await;
    worker.revoke(id, &Principal::new("alice")).await.unwrap();
    // A refused re-check.
    let id = approved(&f).await;
    ids.push(id);
    f.notes.edit("note-7");
    let _ = worker.run(id, |_| async { Ok::<_, String>(()) }).await;
    // A superseded attempt, and a finish lost to a revoke inside `run`.
    let id = approved(&f).await;
    ids.push(id);
    let stale = worker.begin(id).await.unwrap();
    f.clock
        .advance(Grants::<Arc<MemoryGrantStore>>::DEFAULT_LEASE);
    let current = worker.begin(id).await.unwrap();
    let _ = stale.consumed().await;
    current.consumed().await.unwrap();
    let id = approved(&f).await;
    ids.push(id);
    let _ = worker
        .run(id, |_| {
            let (worker, clock) = (worker.clone(), f.clock.clone());
            async move {
                // The lease runs out mid-action and another attempt takes over.
                clock.advance(Grants::<Arc<MemoryGrantStore>>::DEFAULT_LEASE);
                let _other = worker.begin(id).await;
                Ok::<_, String>(())
            }
        })
        .await;
    // Expired.
    let id = approved(&f).await;
    ids.push(id);
    f.clock.advance(Duration::from_secs(120));
    let _ = worker.begin(id).await;
    let all = format!("{:?}", events.0.lock().unwrap());
    assert!(!events.with("decision", "grant_finish_lost").is_empty());
    for id in ids {
        assert!(!all.contains(&id.to_string()), "{id:?} logged in full");
    }
}

/// A grant begun before its expiry whose attempt died (the work may have happened) is never run
/// again once lease and expiry have passed: the next begin ends it. It is then labelled
/// `Expired`, documented as "not begun before its expiry": the label is wrong (the outcome is
/// unknown), the safety holds. (Fails if attempt 2 could start after expiry.)
#[tokio::test]
async fn holds_an_executing_grant_whose_lease_lapsed_after_expiry_never_runs_again() {
    let clock = manual_clock();
    let store = memory(&clock);
    let calls = Arc::new(AtomicUsize::new(0));
    let grants = Grants::new(Arc::clone(&store))
        .lease(LEASE)
        .revalidate("notes_purge", passing_hook(Arc::clone(&calls)));
    let grant = issued(&*store, &clock, Duration::from_secs(60)).await;
    let attempt = grants.begin(grant.id).await.unwrap();
    // It acted and died before `consumed`.
    std::mem::forget(attempt);
    clock.advance(Duration::from_secs(60) + LEASE);
    assert!(matches!(
        grants.begin(grant.id).await,
        Err(GrantError::Ended(GrantState::Expired))
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
