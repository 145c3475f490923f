//! The shared replay-store conformance suite against every backend: memory, Redis and Postgres.
//!
//! Redis and Postgres are found through `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`). When one cannot be reached its
//! tests say so and pass, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1` (as in CI), which makes them fail.

use std::time::Duration;

use mcp_confirm::store::{MemoryReplayStore, Nonce, PrincipalKey, ReplayStore};
use mcp_confirm::store::{PostgresStore, RedisStore};

pub(crate) async fn redis_store(budget: Option<usize>) -> Option<RedisStore> {
    let url = crate::backends::redis_url();
    let store = match RedisStore::open(&url) {
        Ok(store) => store
            .prefix(format!("mcp-confirm-test:{}:", Nonce::random().to_hex()))
            .timeout(Duration::from_secs(2)),
        Err(e) => return crate::backends::unavailable("Redis replay-store test", "Redis", e),
    };
    let store = match budget {
        Some(budget) => store.principal_budget(budget),
        None => store,
    };
    // A probe tells whether the server answers.
    match store
        .is_used(Nonce::random(), PrincipalKey::from_bytes([0; 16]))
        .await
    {
        Ok(_) => Some(store),
        Err(e) => {
            crate::backends::unavailable("Redis replay-store test", "Redis", format!("{url}: {e}"))
        }
    }
}

pub(crate) async fn postgres_store(budget: Option<usize>) -> Option<PostgresStore> {
    let url = crate::backends::postgres_url();
    let store = match PostgresStore::connect(&url) {
        Ok(store) => store.timeout(Duration::from_secs(5)),
        Err(e) => return crate::backends::unavailable("Postgres replay-store test", "Postgres", e),
    };
    let store = match budget {
        Some(budget) => store.principal_budget(budget),
        None => store,
    };
    match store.migrate().await {
        Ok(()) => Some(store),
        Err(e) => crate::backends::unavailable(
            "Postgres replay-store test",
            "Postgres",
            format!("{url}: {e}"),
        ),
    }
}

mod memory {
    mcp_confirm::replay_store_conformance!(
        super::MemoryReplayStore::new(),
        budgeted = |budget| super::MemoryReplayStore::new().principal_budget(budget)
    );
    mcp_confirm::approval_store_conformance!(super::MemoryReplayStore::new());
    mcp_confirm::standing_store_conformance!(super::MemoryReplayStore::new());
    mcp_confirm::passkey_store_conformance!(super::MemoryReplayStore::new());
}

mod redis {
    mcp_confirm::replay_store_conformance!(
        optional super::redis_store(None).await,
        budgeted = |budget| super::redis_store(Some(budget)).await
    );
    mcp_confirm::approval_store_conformance!(optional super::redis_store(None).await);
    mcp_confirm::standing_store_conformance!(optional super::redis_store(None).await);
    mcp_confirm::passkey_store_conformance!(optional super::redis_store(None).await);
}

mod postgres {
    mcp_confirm::replay_store_conformance!(
        optional super::postgres_store(None).await,
        budgeted = |budget| super::postgres_store(Some(budget)).await
    );
    mcp_confirm::approval_store_conformance!(optional super::postgres_store(None).await);
    mcp_confirm::standing_store_conformance!(optional super::postgres_store(None).await);
    mcp_confirm::passkey_store_conformance!(optional super::postgres_store(None).await);
}
