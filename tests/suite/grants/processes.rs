//! The shared grant-store conformance suite against every backend that keeps grants.
//!
//! Redis and Postgres are found through `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when one cannot be reached
//! its tests say so and pass, unless `MCP_CONFIRM_REQUIRE_BACKENDS=1` (as in CI).

use std::time::{Duration, SystemTime};

use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantId, GrantStore};
use mcp_confirm::store::{PostgresStore, RedisStore};

/// A Redis grant store under a prefix of its own, reading the time from a manual clock.
async fn redis_store() -> Option<(RedisStore, ManualClock)> {
    let url = crate::backends::redis_url();
    let clock = ManualClock::new(SystemTime::now());
    let store = match RedisStore::open(&url) {
        Ok(store) => store
            .grant_prefix(format!("mcp-confirm-test:grant:{}:", GrantId::random()))
            .timeout(Duration::from_secs(2))
            .grant_clock(clock.clone()),
        Err(e) => return crate::backends::unavailable("Redis grant-store test", "Redis", e),
    };
    match store.get(GrantId::random()).await {
        Ok(_) => Some((store, clock)),
        Err(e) => {
            crate::backends::unavailable("Redis grant-store test", "Redis", format!("{url}: {e}"))
        }
    }
}

mcp_confirm::grant_store_conformance!(redis, optional super::redis_store().await);

/// A Postgres grant store on the default table, reading the time from a manual clock (each test
/// uses grants of its own, so tests share the table safely).
async fn postgres_store() -> Option<(PostgresStore, ManualClock)> {
    let url = crate::backends::postgres_url();
    let clock = ManualClock::new(SystemTime::now());
    let store = match PostgresStore::connect(&url) {
        Ok(store) => store
            .timeout(Duration::from_secs(5))
            .grant_clock(clock.clone()),
        Err(e) => return crate::backends::unavailable("Postgres grant-store test", "Postgres", e),
    };
    match store.migrate().await {
        Ok(()) => Some((store, clock)),
        Err(e) => crate::backends::unavailable(
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
            RedisStore::open(&crate::backends::redis_url())
                .unwrap()
                .grant_prefix(std::env::var("GRANT_PREFIX").unwrap())
                .timeout(Duration::from_secs(5)),
        ),
        _ => std::sync::Arc::new(
            PostgresStore::connect(&crate::backends::postgres_url())
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
                Some((store, _)) => std::sync::Arc::new(store.grant_prefix(prefix.clone())),
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
                        .args(["--exact", &test_name("grant_worker_process"), "--nocapture"])
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

// ---------------------------------------------------------------------------------------------
// Workers that die: a worker process is killed (SIGKILL) after it began a grant; the next
// attempt must re-check the live record and never act twice.

/// The live record a grant acts on, kept in a file: present with the approved version, or gone.
/// Each deletion also appends a line to `<record>.deletions`, the count the tests check.
struct FileRecord(std::path::PathBuf);

impl FileRecord {
    fn deletions(&self) -> usize {
        std::fs::read_to_string(self.0.with_extension("deletions"))
            .map_or(0, |log| log.lines().count())
    }

    fn delete(&self) -> std::io::Result<()> {
        std::fs::remove_file(&self.0)?;
        use std::io::Write;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.0.with_extension("deletions"))?;
        writeln!(log, "deleted")
    }
}

/// Re-checks a grant against the file named in its arguments: it must exist with the version
/// the user saw.
fn file_hook() -> impl mcp_confirm::Revalidate {
    |check: mcp_confirm::Revalidation| async move {
        let path = check.arguments["path"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match std::fs::read_to_string(&path) {
            Ok(version) if Some(version.as_str()) == check.seen_version.as_deref() => Ok(()),
            Ok(_) => Err(mcp_confirm::Refusal::new("the record changed")),
            Err(_) => Err(mcp_confirm::Refusal::new("the record is gone")),
        }
    }
}

/// The grant store of `backend` for a worker process (no manual clock: leases run in real time).
fn worker_store(backend: &str, prefix: &str) -> std::sync::Arc<dyn GrantStore> {
    match backend {
        "redis" => std::sync::Arc::new(
            RedisStore::open(&crate::backends::redis_url())
                .unwrap()
                .grant_prefix(prefix)
                .timeout(Duration::from_secs(5)),
        ),
        _ => std::sync::Arc::new(
            PostgresStore::connect(&crate::backends::postgres_url())
                .unwrap()
                .timeout(Duration::from_secs(5)),
        ),
    }
}

/// The lease of the killed-worker tests: long enough to see it hold, short enough to wait out.
const SHORT_LEASE: Duration = Duration::from_secs(2);

/// The worker half of `a_killed_worker_never_acts_twice`: with `KILL_WORKER` set it begins grant
/// `GRANT_ID`, deletes the record if `KILL_AFTER` is `delete`, says so on stdout, and waits to be
/// killed. Without `KILL_WORKER` it does nothing.
#[tokio::test]
async fn grant_kill_worker_process() {
    let (Ok(backend), Ok(id), Ok(after), Ok(record)) = (
        std::env::var("KILL_WORKER"),
        std::env::var("GRANT_ID"),
        std::env::var("KILL_AFTER"),
        std::env::var("GRANT_RECORD"),
    ) else {
        return;
    };
    let prefix = std::env::var("GRANT_PREFIX").unwrap_or_default();
    let grants = mcp_confirm::grant::Grants::new(worker_store(&backend, &prefix))
        .lease(SHORT_LEASE)
        .revalidate("records_delete", file_hook());
    let attempt = grants.begin(id.parse().unwrap()).await.expect("begin");
    if after == "delete" {
        FileRecord(record.into()).delete().unwrap();
    }
    println!("KILL-WORKER-READY {}", attempt.lease().attempt);
    tokio::time::sleep(Duration::from_secs(120)).await;
    unreachable!("the test kills this process");
}

/// The full name the test harness knows the test `name` of this module by (its module path
/// without the crate's name), for running one test of this binary in a child process.
fn test_name(name: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    format!("{module}::{name}")
}

/// Starts a worker process with `env` and waits for it to report it is ready to be killed.
fn start_worker(test: &str, env: &[(&str, String)]) -> std::process::Child {
    use std::io::BufRead;
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", &test_name(test), "--nocapture"]);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.starts_with("KILL-WORKER-READY") => break,
            Some(_) => {}
            None => panic!("the worker exited before it was ready: {:?}", child.wait()),
        }
    }
    child
}

/// SIGKILL, and reap.
fn kill(mut child: std::process::Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed, not exited: {status:?}");
}

/// A worker begins a grant and is SIGKILLed, after deleting the record or before; once the lease
/// runs out, the next attempt re-checks the live record: the deleted one is never deleted again
/// (the grant fails), the untouched one is deleted exactly once (the grant is consumed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_never_acts_twice() {
    let dir = std::env::temp_dir().join(format!("mcp-confirm-kill-{}", GrantId::random()));
    std::fs::create_dir_all(&dir).unwrap();
    for backend in ["redis", "postgres"] {
        let prefix = format!("mcp-confirm-test:grant-kill:{}:", GrantId::random());
        let reachable = match backend {
            "redis" => redis_store().await.is_some(),
            _ => postgres_store().await.is_some(),
        };
        if !reachable {
            continue;
        }
        let store = worker_store(backend, &prefix);
        let grants = mcp_confirm::grant::Grants::new(std::sync::Arc::clone(&store))
            .lease(SHORT_LEASE)
            .revalidate("records_delete", file_hook());
        for after in ["delete", "begin"] {
            let record = FileRecord(dir.join(format!("{backend}-{after}.record")));
            std::fs::write(&record.0, "v1").unwrap();
            let clock = ManualClock::new(SystemTime::now());
            let mut grant =
                mcp_confirm::grant::conformance::grant(&clock, Duration::from_secs(600));
            grant.tool = "records_delete".into();
            grant.arguments = serde_json::json!({"path": record.0});
            grant.version = Some("v1".into());
            store.issue(&grant).await.unwrap();
            let worker = start_worker(
                "grant_kill_worker_process",
                &[
                    ("KILL_WORKER", backend.to_owned()),
                    ("GRANT_ID", grant.id.to_string()),
                    ("KILL_AFTER", after.to_owned()),
                    ("GRANT_RECORD", record.0.display().to_string()),
                    ("GRANT_PREFIX", prefix.clone()),
                ],
            );
            kill(worker);
            // The dead worker's lease still holds: nobody runs.
            assert!(
                matches!(grants.begin(grant.id).await, Err(e) if e.is_retryable()),
                "{backend}/{after}: the lease holds"
            );
            tokio::time::sleep(SHORT_LEASE + Duration::from_millis(200)).await;
            let delete = |_: mcp_confirm::grant::Grant| async { record.delete() };
            let outcome = grants.run(grant.id, delete).await;
            let state = store.get(grant.id).await.unwrap().unwrap().state;
            match after {
                "delete" => {
                    assert!(
                        matches!(
                            outcome,
                            Err(mcp_confirm::grant::RunError::Grant(
                                mcp_confirm::grant::GrantError::Refused(_)
                            ))
                        ),
                        "{backend}/{after}: {outcome:?}"
                    );
                    assert_eq!(state, mcp_confirm::grant::GrantState::Failed);
                }
                _ => {
                    assert!(outcome.is_ok(), "{backend}/{after}: {outcome:?}");
                    assert_eq!(state, mcp_confirm::grant::GrantState::Consumed);
                }
            }
            assert_eq!(
                record.deletions(),
                1,
                "{backend}/{after}: exactly one deletion"
            );
            assert!(!record.0.exists());
            // And a job retried now never runs.
            assert!(grants.run(grant.id, delete).await.is_err());
            assert_eq!(record.deletions(), 1);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL's one-transaction mode: begin, the change and consume commit (or roll back) together.

/// A pool on the test database, with the record tables (`id → version`, and a deletions log).
async fn records_pool() -> Option<deadpool_postgres::Pool> {
    postgres_store().await?;
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(crate::backends::postgres_url());
    let pool = config
        .create_pool(
            Some(deadpool_postgres::Runtime::Tokio1),
            tokio_postgres::NoTls,
        )
        .unwrap();
    let client = pool.get().await.unwrap();
    client
        .batch_execute(
            "SELECT pg_advisory_lock(hashtext('mcp-confirm-test:records'));
             CREATE TABLE IF NOT EXISTS mcp_confirm_test_records (id text PRIMARY KEY, version text NOT NULL);
             CREATE TABLE IF NOT EXISTS mcp_confirm_test_deletions (id text NOT NULL);
             SELECT pg_advisory_unlock(hashtext('mcp-confirm-test:records'));",
        )
        .await
        .unwrap();
    Some(pool)
}

/// A grant of `records_delete` on the record `record` at version v1, issued and the record made.
async fn pg_grant(
    store: &PostgresStore,
    pool: &deadpool_postgres::Pool,
) -> mcp_confirm::grant::Grant {
    let record = format!("record-{}", GrantId::random());
    pool.get()
        .await
        .unwrap()
        .execute(
            "INSERT INTO mcp_confirm_test_records (id, version) VALUES ($1, 'v1')",
            &[&record],
        )
        .await
        .unwrap();
    let clock = ManualClock::new(SystemTime::now());
    let mut grant = mcp_confirm::grant::conformance::grant(&clock, Duration::from_secs(600));
    grant.tool = "records_delete".into();
    grant.arguments = serde_json::json!({ "record": record });
    grant.version = Some("v1".into());
    store.issue(&grant).await.unwrap();
    grant
}

/// The record's live version, re-checked through its own connection before each attempt.
fn pg_hook(pool: deadpool_postgres::Pool) -> impl mcp_confirm::Revalidate {
    move |check: mcp_confirm::Revalidation| {
        let pool = pool.clone();
        async move {
            let record = check.arguments["record"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let client = pool
                .get()
                .await
                .map_err(|e| mcp_confirm::Refusal::new(e.to_string()))?;
            let row = client
                .query_opt(
                    "SELECT version FROM mcp_confirm_test_records WHERE id = $1",
                    &[&record],
                )
                .await
                .map_err(|e| mcp_confirm::Refusal::new(e.to_string()))?;
            match row.map(|r| r.get::<_, String>(0)) {
                Some(version) if Some(&version) == check.seen_version.as_ref() => Ok(()),
                Some(_) => Err(mcp_confirm::Refusal::new("the record changed")),
                None => Err(mcp_confirm::Refusal::new("the record is gone")),
            }
        }
    }
}

/// (record rows left, deletions logged) for `record`.
async fn pg_counts(pool: &deadpool_postgres::Pool, record: &str) -> (i64, i64) {
    let client = pool.get().await.unwrap();
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[&record])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    (
        count("SELECT count(*) FROM mcp_confirm_test_records WHERE id = $1").await,
        count("SELECT count(*) FROM mcp_confirm_test_deletions WHERE id = $1").await,
    )
}

/// The change: delete the record at the approved version and log it, in the grant's transaction.
fn pg_delete<'t>(
    tx: &'t deadpool_postgres::Transaction<'t>,
    grant: &'t mcp_confirm::grant::Grant,
) -> mcp_confirm::store::BoxFuture<'t, Result<(), String>> {
    Box::pin(async move {
        let record = grant.arguments["record"].as_str().unwrap_or_default();
        let version = grant.version.as_deref().unwrap_or_default();
        let deleted = tx
            .execute(
                "DELETE FROM mcp_confirm_test_records WHERE id = $1 AND version = $2",
                &[&record, &version],
            )
            .await
            .map_err(|e| e.to_string())?;
        if deleted != 1 {
            return Err("the record changed".into());
        }
        tx.execute(
            "INSERT INTO mcp_confirm_test_deletions (id) VALUES ($1)",
            &[&record],
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(())
    })
}

fn record_of(grant: &mcp_confirm::grant::Grant) -> String {
    grant.arguments["record"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn postgres_transaction_mode_commits_the_change_and_the_grant_together() {
    let Some(pool) = records_pool().await else {
        return;
    };
    let (store, _) = postgres_store().await.unwrap();
    let grants = mcp_confirm::grant::Grants::new(store.clone())
        .revalidate("records_delete", pg_hook(pool.clone()));
    let grant = pg_grant(&store, &pool).await;
    let record = record_of(&grant);
    // An action that fails rolls back everything it did, and the grant with it.
    let failed = grants
        .run_in_transaction(grant.id, |tx, grant| {
            Box::pin(async move {
                pg_delete(tx, grant).await?;
                Err::<(), _>("the mail server is down".to_owned())
            })
        })
        .await;
    assert!(
        matches!(failed, Err(mcp_confirm::grant::RunError::Action(_))),
        "{failed:?}"
    );
    assert_eq!(pg_counts(&pool, &record).await, (1, 0));
    assert_eq!(
        store.get(grant.id).await.unwrap().unwrap().state,
        mcp_confirm::grant::GrantState::Granted
    );
    // The retry commits the deletion and the consumed grant at once.
    grants
        .run_in_transaction(grant.id, pg_delete)
        .await
        .unwrap();
    assert_eq!(pg_counts(&pool, &record).await, (0, 1));
    assert_eq!(
        store.get(grant.id).await.unwrap().unwrap().state,
        mcp_confirm::grant::GrantState::Consumed
    );
    // A job retried after success: never again, in either mode.
    assert!(matches!(
        grants.run_in_transaction(grant.id, pg_delete).await,
        Err(mcp_confirm::grant::RunError::Grant(
            mcp_confirm::grant::GrantError::Ended(_)
        ))
    ));
    assert!(grants.begin(grant.id).await.is_err());
    assert_eq!(pg_counts(&pool, &record).await, (0, 1));
}

#[tokio::test]
async fn postgres_transaction_mode_refuses_a_changed_record_and_commits_the_failure() {
    let Some(pool) = records_pool().await else {
        return;
    };
    let (store, _) = postgres_store().await.unwrap();
    let grants = mcp_confirm::grant::Grants::new(store.clone())
        .revalidate("records_delete", pg_hook(pool.clone()));
    let grant = pg_grant(&store, &pool).await;
    let record = record_of(&grant);
    pool.get()
        .await
        .unwrap()
        .execute(
            "UPDATE mcp_confirm_test_records SET version = 'v2' WHERE id = $1",
            &[&record],
        )
        .await
        .unwrap();
    assert!(matches!(
        grants.run_in_transaction(grant.id, pg_delete).await,
        Err(mcp_confirm::grant::RunError::Grant(
            mcp_confirm::grant::GrantError::Refused(_)
        ))
    ));
    assert_eq!(pg_counts(&pool, &record).await, (1, 0));
    assert_eq!(
        store.get(grant.id).await.unwrap().unwrap().state,
        mcp_confirm::grant::GrantState::Failed
    );
}

/// The worker half of `a_worker_killed_mid_transaction_leaves_nothing_behind`: with
/// `TX_WORKER` set it runs grant `GRANT_ID` in transaction mode, deletes the record inside the
/// transaction, says so, and waits to be killed before the commit.
#[tokio::test]
async fn grant_transaction_worker_process() {
    let (Ok(_), Ok(id)) = (std::env::var("TX_WORKER"), std::env::var("GRANT_ID")) else {
        return;
    };
    let Some(pool) = records_pool().await else {
        return;
    };
    let store = PostgresStore::connect(&crate::backends::postgres_url()).unwrap();
    let grants = mcp_confirm::grant::Grants::new(store).revalidate("records_delete", pg_hook(pool));
    let _ = grants
        .run_in_transaction(id.parse().unwrap(), |tx, grant| {
            Box::pin(async move {
                pg_delete(tx, grant).await?;
                println!("KILL-WORKER-READY 1");
                tokio::time::sleep(Duration::from_secs(120)).await;
                Err::<(), String>("the test kills this process first".into())
            })
        })
        .await;
}

/// A worker deletes the record inside its grant transaction and is SIGKILLed before the commit:
/// PostgreSQL rolls back the deletion and the grant alike. While it held the row, another attempt
/// was told the grant is busy; afterwards, the next attempt deletes the record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_transaction_leaves_nothing_behind() {
    let Some(pool) = records_pool().await else {
        return;
    };
    let (store, _) = postgres_store().await.unwrap();
    let grants = mcp_confirm::grant::Grants::new(store.clone())
        .revalidate("records_delete", pg_hook(pool.clone()));
    let grant = pg_grant(&store, &pool).await;
    let record = record_of(&grant);
    let worker = start_worker(
        "grant_transaction_worker_process",
        &[
            ("TX_WORKER", "1".into()),
            ("GRANT_ID", grant.id.to_string()),
        ],
    );
    assert!(matches!(
        grants.run_in_transaction(grant.id, pg_delete).await,
        Err(mcp_confirm::grant::RunError::Grant(
            mcp_confirm::grant::GrantError::Busy { .. }
        ))
    ));
    kill(worker);
    // The server notices the dead connection and rolls back; until then the row is busy.
    let mut outcome = grants.run_in_transaction(grant.id, pg_delete).await;
    for _ in 0..100 {
        match &outcome {
            Err(mcp_confirm::grant::RunError::Grant(e)) if e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                outcome = grants.run_in_transaction(grant.id, pg_delete).await;
            }
            _ => break,
        }
    }
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        pg_counts(&pool, &record).await,
        (0, 1),
        "deleted exactly once"
    );
    assert_eq!(
        store.get(grant.id).await.unwrap().unwrap().state,
        mcp_confirm::grant::GrantState::Consumed
    );
}
