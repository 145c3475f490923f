//! `migrate` as instances run it: at every start, beside live instances, several at once, and on a
//! schema an older release created. A start must never lock the live instances' tables into a
//! deadlock (CI once saw PostgreSQL abort a proposal with "deadlock detected" because a test's
//! `migrate` ran `ALTER TABLE` beside it).

use std::sync::Arc;
use std::time::Duration;

use mcp_confirm::approval::ApprovalStore;
use mcp_confirm::store::conformance::approval;
use mcp_confirm::store::standing::{Standing, StandingStore, Use};
use mcp_confirm::store::{ClaimRequest, Nonce, Owner, PostgresStore, PrincipalKey, ReplayStore};

fn principal() -> PrincipalKey {
    PrincipalKey::from_bytes(*Nonce::random().as_bytes())
}

async fn store(table: Option<&str>) -> Option<PostgresStore> {
    let url = crate::backends::postgres_url();
    let store = match PostgresStore::connect(&url) {
        Ok(store) => store.timeout(Duration::from_secs(10)),
        Err(e) => return crate::backends::unavailable("Postgres migration test", "Postgres", e),
    };
    let store = match table {
        Some(table) => store.table(table).expect("a plain identifier"),
        None => store,
    };
    match store.migrate().await {
        Ok(()) => Some(store),
        Err(e) => crate::backends::unavailable("Postgres migration test", "Postgres", e),
    }
}

fn pool() -> deadpool_postgres::Pool {
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(crate::backends::postgres_url());
    config
        .create_pool(
            Some(deadpool_postgres::Runtime::Tokio1),
            tokio_postgres::NoTls,
        )
        .expect("pool")
}

/// Drops the tables of `table` when the test ends, passed or not.
struct DropTables(String);

impl Drop for DropTables {
    fn drop(&mut self) {
        let t = self.0.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(client) = pool().get().await {
                    let _ = client
                        .batch_execute(&format!(
                            "DROP TABLE IF EXISTS {t}, {t}_approvals, {t}_standing, {t}_passkeys"
                        ))
                        .await;
                }
            });
        })
        .join();
    }
}

fn fresh_table() -> String {
    format!("mcp_confirm_migrate_{}", &Nonce::random().to_hex()[..12])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_beside_live_ones_never_deadlock_their_proposals() {
    let Some(live) = store(None).await else {
        return;
    };
    let live = Arc::new(live);
    // Four principals proposing (each under the cap) while two other "instances" start again
    // and again on the same tables.
    let proposers: Vec<_> = (0..4)
        .map(|_| {
            let live = Arc::clone(&live);
            tokio::spawn(async move {
                let alice = principal();
                for _ in 0..15 {
                    live.propose(&approval(alice, Duration::from_secs(60)))
                        .await
                        .expect("a proposal beside a starting instance");
                }
            })
        })
        .collect();
    let starters: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(async move {
                for _ in 0..25 {
                    store(None).await.expect("an instance starts");
                }
            })
        })
        .collect();
    for task in proposers.into_iter().chain(starters) {
        task.await.expect("no task panicked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_on_a_fresh_table_all_start() {
    if store(None).await.is_none() {
        return;
    }
    let table = fresh_table();
    let _drop = DropTables(table.clone());
    let starters: Vec<_> = (0..6)
        .map(|_| {
            let table = table.clone();
            tokio::spawn(async move { store(Some(&table)).await.is_some() })
        })
        .collect();
    for task in starters {
        assert!(task.await.expect("task"), "every instance starts");
    }
    let store = store(Some(&table)).await.expect("store");
    let alice = principal();
    let claim = ClaimRequest::new(
        Nonce::random(),
        Owner::random(),
        alice,
        std::time::SystemTime::now() + Duration::from_secs(60),
    );
    store.claim(&claim).await.expect("a claim on the new table");
    store
        .propose(&approval(alice, Duration::from_secs(60)))
        .await
        .expect("a proposal on the new table");
}

#[tokio::test]
async fn a_schema_from_an_older_release_is_brought_up_to_date() {
    if store(None).await.is_none() {
        return;
    }
    let table = fresh_table();
    let _drop = DropTables(table.clone());
    // The first release's tables: no `principal` column, no approvals or standing tables.
    let client = pool().get().await.expect("client");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (
                nonce bytea PRIMARY KEY,
                state text NOT NULL CHECK (state IN ('in_flight', 'consumed')),
                owner bytea,
                expires_at timestamptz NOT NULL)"
        ))
        .await
        .expect("old schema");
    let store = store(Some(&table)).await.expect("migrated");
    let alice = principal();
    let claim = ClaimRequest::new(
        Nonce::random(),
        Owner::random(),
        alice,
        std::time::SystemTime::now() + Duration::from_secs(60),
    );
    store
        .claim(&claim)
        .await
        .expect("a claim after the upgrade");
    store
        .propose(&approval(alice, Duration::from_secs(60)))
        .await
        .expect("a proposal after the upgrade");
    let columns: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = 'principal'",
            &[&table],
        )
        .await
        .expect("catalog")
        .get(0);
    assert_eq!(columns, 1);
}

/// A standing table from before uses were ticketed (no `tickets` column, a use already spent)
/// gains the column: the approval it holds keeps its count, and a use spent after the upgrade
/// can be given back.
#[tokio::test]
async fn a_standing_table_without_tickets_is_brought_up_to_date() {
    let Some(current) = store(None).await else {
        return;
    };
    let table = fresh_table();
    let _drop = DropTables(table.clone());
    let client = pool().get().await.expect("client");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table}_standing (
                key bytea PRIMARY KEY,
                principal bytea NOT NULL,
                record text NOT NULL,
                used integer NOT NULL DEFAULT 0,
                expires_at timestamptz NOT NULL)"
        ))
        .await
        .expect("old schema");
    let now = std::time::SystemTime::now();
    let held = Standing::new(
        "notes.example",
        principal(),
        "alice",
        "notes_delete",
        "personal",
        now,
        now + Duration::from_secs(60),
        3,
    );
    // Written by the old release: granted, then one use spent.
    current.grant(&held).await.expect("grant");
    let row = client
        .query_one(
            &format!(
                "SELECT record, expires_at FROM {}_standing WHERE key = $1",
                PostgresStore::DEFAULT_TABLE
            ),
            &[&held.key().as_bytes().to_vec()],
        )
        .await
        .expect("the granted row");
    let (record, expires_at): (String, std::time::SystemTime) = (row.get(0), row.get(1));
    client
        .execute(
            &format!(
                "INSERT INTO {table}_standing (key, principal, record, used, expires_at)
                 VALUES ($1, $2, $3, 1, $4)"
            ),
            &[
                &held.key().as_bytes().to_vec(),
                &held.principal.as_bytes().to_vec(),
                &record,
                &expires_at,
            ],
        )
        .await
        .expect("an old row");
    let upgraded = store(Some(&table)).await.expect("migrated");
    let found = upgraded.find(held.key()).await.unwrap().expect("kept");
    assert_eq!(found.used, 1);
    let ticket = Nonce::random();
    assert_eq!(
        upgraded.use_one(held.key(), held.id, ticket).await.unwrap(),
        Use::Used { left: 1 }
    );
    assert!(
        upgraded
            .give_back(held.key(), held.id, ticket)
            .await
            .unwrap()
    );
    assert_eq!(
        upgraded.find(held.key()).await.unwrap().map(|s| s.used),
        Some(1)
    );
    let columns: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = 'tickets'",
            &[&format!("{table}_standing")],
        )
        .await
        .expect("catalog")
        .get(0);
    assert_eq!(columns, 1);
}
