//! Where the shared backends are, and what to do when one is missing.
//!
//! Redis and Postgres are found through `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`). A test whose backend cannot
//! be reached says so on the terminal and passes, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1` (as in
//! CI), which makes it fail.
#![allow(dead_code, unreachable_pub)]

use std::io::Write;

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn postgres_url() -> String {
    std::env::var("POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Fails the test if backends are required; otherwise reports the skip and returns `None`.
pub fn unavailable<T>(what: &str, backend: &str, why: impl std::fmt::Display) -> Option<T> {
    let required = std::env::var("MCP_CONFIRM_REQUIRE_BACKENDS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{backend} is required (MCP_CONFIRM_REQUIRE_BACKENDS=1) but unavailable: {why}"
    );
    // Straight to the terminal: the test harness hides what passing tests print.
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {what}: {backend} unavailable ({why}); set MCP_CONFIRM_REQUIRE_BACKENDS=1 to make this a failure"
    );
    // And into the run's list of skips, which `tests/zz_backend_skips.rs` (the last test binary
    // of a `cargo test`) prints as one loud summary.
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skip_log())
    {
        let _ = writeln!(log, "{backend}\t{what}");
    }
    None
}

/// Where the skips of this run are listed until the summary reads them.
pub fn skip_log() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped-backend-tests")
}

/// `Ok` if the Redis at `url` answers a read-only probe.
pub async fn redis_answers(url: &str) -> Result<(), String> {
    use mcp_confirm::store::ReplayStore;
    let store = mcp_confirm::store::RedisReplayStore::open(url).map_err(|e| e.to_string())?;
    store
        .is_used(
            mcp_confirm::store::Nonce::random(),
            mcp_confirm::store::PrincipalKey::from_bytes([0; 16]),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `Ok` if the Postgres at `url` answers and the replay-store table exists (made if missing).
pub async fn postgres_answers(url: &str) -> Result<(), String> {
    let store = mcp_confirm::store::PostgresReplayStore::connect(url).map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())
}

/// The Redis URL, when the Redis there answers; otherwise `what` is reported as skipped (or fails,
/// when backends are required) and the answer is `None`.
pub async fn redis(what: &str) -> Option<String> {
    let url = redis_url();
    match redis_answers(&url).await {
        Ok(()) => Some(url),
        Err(why) => unavailable(what, "Redis", why),
    }
}

/// The Postgres URL, when the Postgres there answers (the replay-store table made if missing);
/// otherwise as [`redis`].
pub async fn postgres(what: &str) -> Option<String> {
    let url = postgres_url();
    // The probe migrates, and many tests probe at once on a loaded machine: their DDL can wait on
    // each other past the store's timeout. A backend that is there answers one of three tries.
    let mut why = String::new();
    for attempt in 0..3 {
        match postgres_answers(&url).await {
            Ok(()) => return Some(url),
            Err(e) => why = e,
        }
        tokio::time::sleep(std::time::Duration::from_millis(250 * (attempt + 1))).await;
    }
    unavailable(what, "Postgres", why)
}
