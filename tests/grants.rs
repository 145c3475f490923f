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

/// The worker half of `two_worker_processes_race_one_grant`: run as a child process with
/// `GRANT_WORKER` set, it begins the grant `GRANT_ID` on `GRANT_BACKEND` once, at `GRANT_AT`
/// (unix ms), and prints what it got. Without `GRANT_WORKER` it does nothing.
#[tokio::test]
async fn grant_worker_process() {
    let (Ok(backend), Ok(id), Ok(at)) = (
        std::env::var("GRANT_BACKEND"),
        std::env::var("GRANT_ID"),
        std::env::var("GRANT_AT"),
    ) else {
        return;
    };
    if std::env::var("GRANT_WORKER").is_err() {
        return;
    }
    let id: GrantId = id.parse().expect("grant id");
    let at = std::time::UNIX_EPOCH + Duration::from_millis(at.parse().expect("start time"));
    let begin = |store: std::sync::Arc<dyn GrantStore>| async move {
        // Start together: wait for the agreed instant.
        if let Ok(wait) = at.duration_since(SystemTime::now()) {
            tokio::time::sleep(wait).await;
        }
        store.begin(id, Duration::from_secs(60)).await
    };
    let store: std::sync::Arc<dyn GrantStore> = match backend.as_str() {
        "redis" => std::sync::Arc::new(
            RedisGrantStore::open(&backends::redis_url())
                .unwrap()
                .prefix(std::env::var("GRANT_PREFIX").unwrap())
                .timeout(Duration::from_secs(5)),
        ),
        _ => std::sync::Arc::new(
            PostgresGrantStore::connect(&backends::postgres_url())
                .unwrap()
                .timeout(Duration::from_secs(5)),
        ),
    };
    let answer = begin(store).await;
    let verdict = match answer {
        Ok(mcp_confirm::grant::Begin::Started(_)) => "STARTED",
        Ok(_) => "REFUSED",
        Err(_) => "ERROR",
    };
    println!("GRANT-WORKER-ANSWER {verdict}");
}

/// Two worker processes begin the same grant at the same instant, 20 rounds per backend: every
/// round exactly one starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_race_one_grant() {
    let exe = std::env::current_exe().unwrap();
    for backend in ["redis", "postgres"] {
        let prefix = format!("mcp-confirm-test:grant-race:{}:", GrantId::random());
        let store: std::sync::Arc<dyn GrantStore> = match backend {
            "redis" => match redis_store().await {
                Some((store, _)) => std::sync::Arc::new(store.prefix(prefix.clone())),
                None => continue,
            },
            _ => match postgres_store().await {
                Some((store, _)) => std::sync::Arc::new(store),
                None => continue,
            },
        };
        for round in 0..20 {
            let clock = ManualClock::new(SystemTime::now());
            let grant = mcp_confirm::grant::conformance::grant(&clock, Duration::from_secs(600));
            store.issue(&grant).await.unwrap();
            let at = SystemTime::now() + Duration::from_millis(700);
            let at_ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis();
            let children: Vec<_> = (0..2)
                .map(|_| {
                    std::process::Command::new(&exe)
                        .args(["--exact", "grant_worker_process", "--nocapture"])
                        .env("GRANT_WORKER", "1")
                        .env("GRANT_BACKEND", backend)
                        .env("GRANT_ID", grant.id.to_string())
                        .env("GRANT_AT", at_ms.to_string())
                        .env("GRANT_PREFIX", &prefix)
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let mut verdicts = Vec::new();
            for child in children {
                let out = child.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let verdict = text
                    .lines()
                    .find_map(|l| l.strip_prefix("GRANT-WORKER-ANSWER "))
                    .unwrap_or_else(|| panic!("{backend} round {round}: no answer in {text}"))
                    .to_owned();
                verdicts.push(verdict);
            }
            verdicts.sort();
            assert_eq!(
                verdicts,
                ["REFUSED", "STARTED"],
                "{backend} round {round}: exactly one worker starts"
            );
        }
    }
}
