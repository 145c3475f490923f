//! A minimal MCP 2026-07-28 endpoint with `notes_delete` confirmed by `ConfirmLayer`.
//!
//! ```text
//! cargo run --example quickstart            # listens on 127.0.0.1:3000 (or pass an address)
//! ```
//!
//! The JSON-RPC handler is hand-written and keeps notes in memory, so the layer is the only moving
//! part. Tokens `alice-token` and `bob-token` stand in for a real OAuth resource server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Extension, Json, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal,
    Revalidation, ToolPolicy,
};
use serde_json::{Value, json};

/// id → (title, version). The version changes whenever the note does (a generation counter here;
/// a content hash or an ETag elsewhere): the form binds it, and the delete checks it.
type Notes = Arc<Mutex<BTreeMap<String, (String, u64)>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("mcp_confirm=info")
        .init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());

    let notes: Notes = Arc::new(Mutex::new(BTreeMap::from([
        ("note-3".to_owned(), ("Groceries".to_owned(), 1)),
        ("note-7".to_owned(), ("Groceries".to_owned(), 1)),
        ("note-14".to_owned(), ("Groceries".to_owned(), 1)),
        ("note-20".to_owned(), ("Taxes".to_owned(), 1)),
    ])));

    let find = notes.clone();
    let check = notes.clone();
    let policy = ToolPolicy::pick_one(move |lookup: Lookup| {
        let notes = find.clone();
        async move {
            let title = lookup.arguments["title"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let notes = notes
                .lock()
                .map_err(|_| PolicyError::new("notes lock poisoned"))?;
            Ok(notes
                .iter()
                .filter(|(_, (t, _))| *t == title)
                .map(|(id, (t, version))| {
                    Candidate::labelled(id.clone(), format!("{id}: {t}"))
                        .with_version(version.to_string())
                })
                .collect())
        }
    })
    .message("Choose one matching note and confirm deletion.")
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id")
    .revalidate(move |r: Revalidation| {
        // The note must still be there, as the user saw it.
        let live = r.chosen.as_ref().and_then(|id| {
            let notes = check.lock().ok()?;
            notes.get(id).map(|(_, version)| version.to_string())
        });
        async move {
            match live {
                Some(version) if Some(&version) == r.seen_version.as_ref() => Ok(()),
                Some(_) => Err(Refusal::new("note changed since the form was shown")),
                None => Err(Refusal::new("note is gone")),
            }
        }
    });

    eprintln!(
        "warning: using a random signing key; instances behind one endpoint must share a key"
    );
    let confirm = ConfirmLayer::builder(KeyRing::random())
        .audience(format!("http://{addr}/mcp"))
        // The tools the server lists, the same definitions its tools/list answers with: the
        // layer checks that every destructive one is confirmed and that no policy is misspelt.
        .tool_list(tools())
        .tool("notes_delete", policy)
        .build();

    let app = Router::new()
        .route("/mcp", post(handle))
        .layer(confirm)
        .layer(middleware::from_fn(authenticate))
        .with_state(notes);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("MCP endpoint on http://{addr}/mcp (tokens: alice-token, bob-token)");
    println!("try:\n  curl -s http://{addr}/mcp -H 'Authorization: Bearer alice-token' \\");
    println!(
        "    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\"
    );
    println!("    -H 'MCP-Protocol-Version: 2026-07-28' \\");
    println!("    -H 'Mcp-Method: tools/call' -H 'Mcp-Name: notes_delete' \\");
    println!(
        "    -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"notes_delete\",\"arguments\":{{\"title\":\"Groceries\"}},\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{{\"elicitation\":{{}}}}}}}}}}'"
    );
    axum::serve(listener, app).await?;
    Ok(())
}

/// The demo auth layer: a bearer token becomes a `Principal` in the request extensions.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let principal = match token {
        Some("Bearer alice-token") => "alice",
        Some("Bearer bob-token") => "bob",
        _ => return (StatusCode::UNAUTHORIZED, [("www-authenticate", "Bearer")]).into_response(),
    };
    request.extensions_mut().insert(Principal::new(principal));
    next.run(request).await
}

/// The server's tools, as its `tools/list` answers and as the layer is given them.
fn tools() -> Value {
    json!([
        {"name": "notes_list", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": true}},
        {"name": "notes_delete",
         "inputSchema": {"type": "object", "required": ["title"], "properties": {
             "title": {"type": "string"},
             "note_id": {"type": "string", "description": "written in by the layer"}}},
         "annotations": {"destructiveHint": true}}
    ])
}

/// A bare-bones JSON-RPC handler standing in for an MCP server.
async fn handle(
    axum::extract::State(notes): axum::extract::State<Notes>,
    confirmed: Option<Extension<Confirmed>>,
    Json(msg): Json<Value>,
) -> Response {
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let text = |s: String| json!({"resultType":"complete","content":[{"type":"text","text":s}]});
    let result = match (msg["method"].as_str(), msg["params"]["name"].as_str()) {
        (Some("tools/call"), Some("notes_delete")) => {
            let note_id = msg["params"]["arguments"]["note_id"]
                .as_str()
                .unwrap_or_default();
            // Refuse to act on anything the layer did not confirm, and delete only the version
            // the user saw.
            match confirmed {
                Some(Extension(c)) if c.covers("notes_delete", Some(note_id)) => {
                    let removed = notes.lock().ok().and_then(|mut n| {
                        let (_, version) = n.get(note_id)?;
                        let same = Some(version.to_string()) == c.version;
                        if same { n.remove(note_id) } else { None }
                    });
                    text(match removed {
                        Some((title, _)) => format!("Deleted {note_id} ({title})."),
                        None => format!("{note_id} is gone or changed; nothing was changed."),
                    })
                }
                _ => text("Refused: this call was not confirmed.".to_owned()),
            }
        }
        (Some("tools/call"), Some("notes_list")) => {
            let list = notes
                .lock()
                .map(|n| {
                    let lines: Vec<String> =
                        n.iter().map(|(id, (t, _))| format!("{id}: {t}")).collect();
                    lines.join("\n")
                })
                .unwrap_or_default();
            text(list)
        }
        (Some("tools/list"), _) => {
            json!({"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":tools()})
        }
        _ => {
            let error = json!({"code":-32601,"message":"Method not found"});
            return (
                StatusCode::NOT_FOUND,
                Json(json!({"jsonrpc":"2.0","id":id,"error":error})),
            )
                .into_response();
        }
    };
    Json(json!({"jsonrpc":"2.0","id":id,"result":result})).into_response()
}
