//! Where the shared backends are, and what to do when one is missing.
//!
//! Redis and Postgres are found through `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`). A test whose backend cannot
//! be reached says so on the terminal and passes, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1` (as in
//! CI), which makes it fail.
#![allow(dead_code, unreachable_pub, unused_macros, unused_imports)]

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
    let store = mcp_confirm::store::RedisStore::open(url).map_err(|e| e.to_string())?;
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
    let store = mcp_confirm::store::PostgresStore::connect(url).map_err(|e| e.to_string())?;
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

/// One fresh replay store per backend (which also keeps standing approvals, browser approvals
/// and passkeys): what a layer-level scenario shares between the instances it builds. Each call
/// is a store of its own (a fresh Redis prefix; Postgres rows are keyed by each run's own
/// nonces and audiences), so scenarios run side by side.
pub mod replay_store {
    use std::time::Duration;

    use mcp_confirm::store::{MemoryReplayStore, Nonce, PostgresStore, RedisStore};

    /// A memory store: always there.
    pub async fn memory(_what: &str) -> Option<MemoryReplayStore> {
        Some(MemoryReplayStore::new())
    }

    /// A store in the Redis at `REDIS_URL`, under a prefix of its own; `None` (or a failure,
    /// when backends are required) if Redis does not answer.
    pub async fn redis(what: &str) -> Option<RedisStore> {
        let url = super::redis(what).await?;
        match RedisStore::open(&url) {
            Ok(store) => Some(
                store
                    .prefix(format!("mcp-confirm-test:{}:", Nonce::random().to_hex()))
                    .timeout(Duration::from_secs(5)),
            ),
            Err(e) => super::unavailable(what, "Redis", e),
        }
    }

    /// A store in the Postgres at `POSTGRES_URL`, its tables made; `None` (or a failure, when
    /// backends are required) if Postgres does not answer.
    pub async fn postgres(what: &str) -> Option<PostgresStore> {
        let url = super::postgres(what).await?;
        let store = match PostgresStore::connect(&url) {
            Ok(store) => store.timeout(Duration::from_secs(5)),
            Err(e) => return super::unavailable(what, "Postgres", e),
        };
        match store.migrate().await {
            Ok(()) => Some(store),
            Err(e) => super::unavailable(what, "Postgres", e),
        }
    }
}

/// Runs one layer-level scenario on every backend named, as the store conformance suites run
/// theirs: one test per backend, each given a fresh store of that backend
/// ([`replay_store`]); a backend that is not there is a loud skip (a failure in CI).
///
/// ```ignore
/// on_every_backend! {
///     #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
///     racing_calls_spend_exactly_the_uses;
///     memory => holds_racing_calls_spend_exactly_the_uses_on_memory,
///     redis => holds_racing_calls_spend_exactly_the_uses_on_redis,
///     postgres => holds_racing_calls_spend_exactly_the_uses_on_postgres,
/// }
/// ```
///
/// The scenario is an `async fn(store)` generic over the store traits it needs; each test keeps
/// its own name, so a failure says which backend it was.
macro_rules! on_every_backend {
    (
        $(#[$attr:meta])*
        $scenario:path;
        $( $backend:ident => $test:ident ),+ $(,)?
    ) => {
        $crate::backends::on_every_backend!(
            @each [$(#[$attr])*] $scenario; $( $backend => $test ),+
        );
    };
    (@each $attrs:tt $scenario:path; $( $backend:ident => $test:ident ),+) => {
        $( $crate::backends::on_every_backend!(@one $attrs $scenario; $backend => $test); )+
    };
    (@one [$($attrs:tt)*] $scenario:path; $backend:ident => $test:ident) => {
        $($attrs)*
        async fn $test() {
            if let Some(store) = $crate::backends::replay_store::$backend(stringify!($test)).await {
                $scenario(store).await;
            }
        }
    };
}
pub(crate) use on_every_backend;
