//! The shared grant-store conformance suite against every backend that keeps grants.
//!
//! Redis and Postgres are found through `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when one cannot be reached
//! its tests say so and pass, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1` (as in CI).

mod backends;

use std::time::{Duration, SystemTime};

use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantId, GrantStore, PostgresGrantStore, RedisGrantStore};

/// A Redis grant store under a prefix of its own, reading the time from a manual clock.
async fn redis_store() -> Option<(RedisGrantStore, ManualClock)> {
    let url = backends::redis_url();
    let clock = ManualClock::new(SystemTime::now());
    let store = match RedisGrantStore::open(&url) {
        Ok(store) => store
            .prefix(format!("mcp-confirm-test:grant:{}:", GrantId::random()))
            .timeout(Duration::from_secs(2))
            .clock(clock.clone()),
        Err(e) => return backends::unavailable("Redis grant-store test", "Redis", e),
    };
    match store.get(GrantId::random()).await {
        Ok(_) => Some((store, clock)),
        Err(e) => backends::unavailable("Redis grant-store test", "Redis", format!("{url}: {e}")),
    }
}

mcp_confirm::grant_store_conformance!(redis, optional super::redis_store().await);

/// A Postgres grant store on the default table, reading the time from a manual clock (each test
/// uses grants of its own, so tests share the table safely).
async fn postgres_store() -> Option<(PostgresGrantStore, ManualClock)> {
    let url = backends::postgres_url();
    let clock = ManualClock::new(SystemTime::now());
    let store = match PostgresGrantStore::connect(&url) {
        Ok(store) => store.timeout(Duration::from_secs(5)).clock(clock.clone()),
        Err(e) => return backends::unavailable("Postgres grant-store test", "Postgres", e),
    };
    match store.migrate().await {
        Ok(()) => Some((store, clock)),
        Err(e) => backends::unavailable(
            "Postgres grant-store test",
            "Postgres",
            format!("{url}: {e}"),
        ),
    }
}

mcp_confirm::grant_store_conformance!(postgres, optional super::postgres_store().await);
