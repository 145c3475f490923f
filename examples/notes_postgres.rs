//! Notes kept in PostgreSQL, with `notes_delete` claiming the confirmation's nonce and deleting the
//! note in one transaction: both commit, or neither does.
//!
//! ```text
//! cargo run --example notes_postgres -- [--addr 127.0.0.1:3001] [--database postgres://postgres@127.0.0.1:5432/test]
//! ```
//!
//! The layer verifies the state, checks the answer and revalidates as usual, but with
//! `ToolPolicy::claimed_by_handler()` it leaves the claim to the handler, which runs
//! `BEGIN; consume nonce; DELETE note; COMMIT`. A crash or a failed delete rolls the claim back too,
//! so nothing is left half-done: no note deleted without its confirmation consumed, and no
//! confirmation consumed without its note deleted. Tokens and workspaces as in `notes_server`.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use deadpool_postgres::Pool;
use http::StatusCode;
use mcp_confirm::guard::HostOriginLayer;
use mcp_confirm::store::PostgresReplayStore;
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal,
    Revalidation, ToolPolicy,
};
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use serde_json::{Value, json};
use tower::ServiceBuilder;

fn may_use(principal: &str, workspace: &str) -> bool {
    matches!(
        (principal, workspace),
        ("alice", "personal" | "team") | ("bob", "team")
    )
}

/// The database side: the notes table and the replay store in the same database.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) notes: String,
    pub(crate) replay: PostgresReplayStore,
    /// For tests: fail inside the delete transaction after the claim, before the commit.
    pub(crate) fail_after_claim: Arc<AtomicBool>,
}

impl Db {
    /// Connects, creates both tables if needed and seeds an empty notes table.
    pub(crate) async fn open(url: &str, notes: &str, replay: &str) -> Result<Self, String> {
        let replay = PostgresReplayStore::connect(url)
            .and_then(|s| s.table(replay))
            .map_err(|e| e.to_string())?;
        replay.migrate().await.map_err(|e| e.to_string())?;
        let mut config = deadpool_postgres::Config::new();
        config.url = Some(url.to_owned());
        let pool = config
            .create_pool(
                Some(deadpool_postgres::Runtime::Tokio1),
                tokio_postgres::NoTls,
            )
            .map_err(|e| e.to_string())?;
        let db = Self {
            pool,
            notes: notes.to_owned(),
            replay,
            fail_after_claim: Arc::default(),
        };
        let client = db.pool.get().await.map_err(|e| e.to_string())?;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {notes} (
                    workspace text NOT NULL, id text NOT NULL, title text NOT NULL, body text NOT NULL,
                    PRIMARY KEY (workspace, id));
                 INSERT INTO {notes} (workspace, id, title, body)
                 SELECT * FROM (VALUES
                    ('personal', 'note-1', 'Taxes 2026', 'Collect receipts before March.'),
                    ('personal', 'note-3', 'Groceries', 'Milk, eggs, rye bread.'),
                    ('personal', 'note-7', 'Groceries', 'Apples, coffee, oat milk for the office.'),
                    ('personal', 'note-14', 'Groceries', 'Party: crisps, lemonade, 40 paper cups.'),
                    ('team', 'note-5', 'Sprint plan', 'Ship the confirmation layer.')) AS seed
                 WHERE NOT EXISTS (SELECT 1 FROM {notes});"
            ))
            .await
            .map_err(|e| e.to_string())?;
        Ok(db)
    }

    async fn find(&self, workspace: &str, title: &str) -> Result<Vec<(String, String)>, String> {
        let client = self.pool.get().await.map_err(|e| e.to_string())?;
        let sql = format!(
            "SELECT id, body FROM {} WHERE workspace = $1 AND title = $2 ORDER BY length(id), id",
            self.notes
        );
        let rows = client
            .query(&sql, &[&workspace, &title])
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn exists(&self, workspace: &str, id: &str, title: &str) -> Result<bool, String> {
        let client = self.pool.get().await.map_err(|e| e.to_string())?;
        let sql = format!(
            "SELECT 1 FROM {} WHERE workspace = $1 AND id = $2 AND title = $3",
            self.notes
        );
        let row = client
            .query_opt(&sql, &[&workspace, &id, &title])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.is_some())
    }

    /// Claims the confirmation and deletes the note in one transaction.
    async fn delete_confirmed(
        &self,
        workspace: &str,
        confirmed: &Confirmed,
    ) -> Result<String, String> {
        let id = confirmed.chosen.as_deref().unwrap_or_default();
        let mut client = self.pool.get().await.map_err(|e| e.to_string())?;
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        let fresh = self
            .replay
            .consume_in(&tx, confirmed.nonce, confirmed.expires_at)
            .await
            .map_err(|e| e.to_string())?;
        if !fresh {
            return Ok("Refused: this confirmation was already used; nothing was changed.".into());
        }
        if self.fail_after_claim.load(Ordering::SeqCst) {
            // Dropping the transaction rolls the claim back with everything else.
            return Err("simulated failure before commit".into());
        }
        let sql = format!(
            "DELETE FROM {} WHERE workspace = $1 AND id = $2",
            self.notes
        );
        let deleted = tx
            .execute(&sql, &[&workspace, &id])
            .await
            .map_err(|e| e.to_string())?;
        if deleted != 1 {
            return Ok("No such note; nothing was changed.".into());
        }
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(format!("Deleted {id} from {workspace}."))
    }
}

/// The axum app: Host/Origin, demo bearer tokens, ConfirmLayer (replay store in the same
/// database), rmcp.
pub(crate) fn app(db: Db, keys: KeyRing, audience: &str) -> Router {
    let server = NotesPg { db: db.clone() };
    let rmcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_sse_keep_alive(None)
            .with_json_response(true),
    );
    let confirm = ConfirmLayer::builder(keys)
        .audience(audience)
        .replay_store(db.replay.clone())
        .tool("notes_delete", delete_policy(db))
        .build();
    let stack = ServiceBuilder::new()
        .layer(HostOriginLayer::localhost())
        .layer(middleware::from_fn(authenticate))
        .layer(confirm)
        .service(rmcp);
    Router::new().nest_service("/mcp", stack)
}

async fn authenticate(mut request: Request, next: Next) -> Response {
    let mut values = request
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter();
    let principal = match (values.next().and_then(|v| v.to_str().ok()), values.next()) {
        (Some("Bearer alice-token"), None) => "alice",
        (Some("Bearer bob-token"), None) => "bob",
        _ => {
            return (
                StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer")],
            )
                .into_response();
        }
    };
    request.extensions_mut().insert(Principal::new(principal));
    next.run(request).await
}

fn delete_policy(db: Db) -> ToolPolicy {
    let find = db.clone();
    ToolPolicy::pick_one(move |lookup: Lookup| {
        let db = find.clone();
        async move {
            let workspace = lookup.arguments["workspace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let title = lookup.arguments["title"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !may_use(lookup.principal.subject(), &workspace) {
                return Ok(Vec::new());
            }
            let found = db
                .find(&workspace, &title)
                .await
                .map_err(PolicyError::new)?;
            Ok(found
                .into_iter()
                .map(|(id, body)| {
                    Candidate::labelled(id.clone(), format!("{title} ({id}): {body}"))
                })
                .collect())
        }
    })
    .message("Choose one matching note and confirm deletion. This cannot be undone.")
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id")
    .claimed_by_handler()
    .revalidate(move |check: Revalidation| {
        let db = db.clone();
        async move {
            let workspace = check.arguments["workspace"].as_str().unwrap_or_default();
            let title = check.arguments["title"].as_str().unwrap_or_default();
            if !may_use(check.principal.subject(), workspace) {
                return Err(Refusal::new("principal may no longer use this workspace"));
            }
            let id = check.chosen.as_deref().unwrap_or_default();
            match db.exists(workspace, id, title).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(Refusal::new("the note is gone or changed")),
                Err(e) => Err(Refusal::new(format!("live check failed: {e}"))),
            }
        }
    })
}

#[derive(Clone)]
struct NotesPg {
    db: Db,
}

fn text(s: impl Into<String>, is_error: bool) -> CallToolResponse {
    let content = vec![ContentBlock::text(s.into())];
    if is_error {
        CallToolResult::error(content).into()
    } else {
        CallToolResult::success(content).into()
    }
}

impl ServerHandler for NotesPg {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("mcp-confirm-notes-postgres", env!("CARGO_PKG_VERSION")),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        let schema = |v: Value| Arc::new(v.as_object().cloned().unwrap_or_default());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "notes_delete",
                "Delete one note, chosen by title. The user picks which matching note and confirms.",
                schema(json!({"type":"object","properties":{"workspace":{"type":"string"},"title":{"type":"string"}},
                    "required":["workspace","title"]})),
            )
            .annotate(ToolAnnotations::with_title("Delete a note").read_only(false).destructive(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        if request.name != "notes_delete" {
            return Err(rmcp::ErrorData::invalid_params(
                format!("Unknown tool: {}", request.name),
                None,
            ));
        }
        let parts = context.extensions.get::<http::request::Parts>();
        let principal = parts.and_then(|p| p.extensions.get::<Principal>());
        let confirmed = parts.and_then(|p| p.extensions.get::<Confirmed>());
        let args: JsonObject = request.arguments.clone().unwrap_or_default();
        let workspace = args
            .get("workspace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let note_id = args.get("note_id").and_then(Value::as_str);
        let (Some(principal), Some(confirmed)) = (principal, confirmed) else {
            return Ok(text(
                "Refused: notes_delete runs only after the user confirms.",
                true,
            ));
        };
        if !confirmed.covers("notes_delete", note_id)
            || confirmed.principal != *principal
            || !may_use(principal.subject(), workspace)
        {
            return Ok(text(
                "Refused: this confirmation does not cover this call.",
                true,
            ));
        }
        match self.db.delete_confirmed(workspace, confirmed).await {
            Ok(done) => Ok(text(done.clone(), !done.starts_with("Deleted"))),
            Err(e) => Err(rmcp::ErrorData::internal_error(
                format!("delete failed, nothing was changed: {e}"),
                None,
            )),
        }
    }
}

#[tokio::main]
async fn main() {
    let mut addr = "127.0.0.1:3001".to_owned();
    let mut database = "postgres://postgres@127.0.0.1:5432/test".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--addr", Some(v)) => addr = v,
            ("--database", Some(v)) => database = v,
            _ => {
                eprintln!("usage: notes_postgres [--addr HOST:PORT] [--database postgres://…]");
                std::process::exit(2);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter("mcp_confirm=info,rmcp=warn")
        .init();
    let db = match Db::open(&database, "mcp_confirm_demo_notes", "mcp_confirm_nonces").await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("cannot open {database}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!(
        "warning: using a random signing key; instances behind one endpoint must share a key"
    );
    let router = app(db, KeyRing::random(), &format!("http://{addr}/mcp"));
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bind {addr}: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "notes (PostgreSQL, transactional confirmation) on http://{addr}/mcp; tokens alice-token, bob-token"
    );
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("{e}");
    }
}
