//! The gateway on a PostgreSQL store: its tables are made when the gateway starts, as the
//! library makes them (`PostgresStore::migrate`), so a first deployment confirms calls instead
//! of refusing every one with `503` until someone creates them by hand.
//!
//! Each test works in a schema of its own (the gateway's URL names it in `search_path`), made
//! empty and dropped afterwards, so it sees exactly what the gateway created and never meets
//! the tables other tests share. PostgreSQL is expected on 127.0.0.1:5432, database `test`
//! (`MCP_CONFIRM_TEST_POSTGRES_URL` overrides); without it the tests say SKIPPED, unless
//! `MCP_CONFIRM_REQUIRE_BACKENDS` is set, as in CI.

use serde_json::json;

use crate::common::{self, ALICE, STATIC_TOKENS, postgres_up, postgres_url};
use crate::gateway::{Seen, upstream};

/// A schema of the test's own, dropped with everything in it when dropped.
pub(crate) struct Schema {
    name: String,
    client: tokio_postgres::Client,
}

impl Schema {
    pub(crate) async fn new(what: &str) -> Self {
        let (client, connection) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!("gw_{what}_{}_{nanos}", std::process::id());
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap();
        Self { name, client }
    }

    /// The shared URL, with this schema first on the search path.
    pub(crate) fn url(&self) -> String {
        let url = postgres_url();
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}options=-csearch_path%3D{}", self.name)
    }

    /// The tables in the schema, by name.
    async fn tables(&self) -> Vec<String> {
        self.client
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = $1 ORDER BY 1",
                &[&self.name],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // Its own connection, on a thread: the test's runtime may be ending.
        let (url, name) = (postgres_url(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}

#[tokio::test]
async fn a_gateway_on_an_empty_database_makes_its_tables_and_confirms() {
    // #52, finding 7b: nothing made the store's tables, and every confirmation was refused
    // with 503 until someone created them by hand.
    if !postgres_up() {
        return;
    }
    let schema = Schema::new("store").await;
    assert!(schema.tables().await.is_empty());
    let (upstream_url, seen) = upstream().await;
    let dir = common::temp_dir("postgres");
    std::fs::write(dir.join("postgres-url"), schema.url()).unwrap();
    std::fs::write(
        dir.join("key"),
        "46c240e4d0c11b5a48d250f10a96b4d63b9d4f64b2faf7ea559c2627e90750cd",
    )
    .unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nkey = {{ file = \"key\" }}\n\
         store = {{ kind = \"postgres\", url = {{ file = \"postgres-url\" }} }}\n\
         {STATIC_TOKENS}\n[[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream_url}\"\n"
    );
    let gateway = common::build(&dir, &text).unwrap();
    let tables = schema.tables().await;
    for table in ["mcp_confirm_nonces", "mcp_confirm_grants"] {
        assert!(tables.iter().any(|t| t == table), "{table} in {tables:?}");
    }
    let (listener, addr) = common::bind().await;
    common::serve(&gateway, listener);
    let url = format!("http://{addr}/notes/mcp");
    let client = common::client();
    let first = common::call(1, "notes_delete", json!({"title": "Groceries"}));
    let asked = common::post_call(&client, &url, Some(ALICE), &first, &[]).await;
    let retry = common::accept(&first, 2, &asked, json!({"confirm": true}));
    let ran = common::post_call(&client, &url, Some(ALICE), &retry, &[]).await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    // Claimed in the table: the same answer again runs nothing.
    let again = common::post_call(&client, &url, Some(ALICE), &retry, &[]).await;
    assert!(again.get("error").is_some(), "{again}");
    assert_eq!(seen_deletes(&seen), 1);
    // A second gateway on the same, now current, database starts as well.
    common::build(&dir, &text).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_database_that_cannot_make_the_tables_stops_the_start_and_says_why() {
    // A port nothing listens on: the gateway does not start without its tables, and the reason
    // is the database's (or here the connection's), not just "db error".
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let dir = common::temp_dir("postgres-down");
    std::fs::write(
        dir.join("postgres-url"),
        format!("postgres://postgres@{closed}/test"),
    )
    .unwrap();
    let text = format!(
        "store = {{ kind = \"postgres\", url = {{ file = \"postgres-url\" }} }}\n\
         {STATIC_TOKENS}\n[[route]]\npath = \"/notes/mcp\"\nupstream = \"http://127.0.0.1:9/mcp\"\n"
    );
    let error = common::build(&dir, &text).unwrap_err();
    assert!(error.contains("creating its tables"), "{error}");
    assert!(error.to_lowercase().contains("refused"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

fn seen_deletes(seen: &Seen) -> usize {
    seen.calls()
        .iter()
        .filter(|(tool, _)| tool == "notes_delete")
        .count()
}
