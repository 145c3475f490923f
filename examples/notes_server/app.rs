//! The notes MCP server: an rmcp 3 `StreamableHttpService` (stateless, 2026-07-28) behind
//! Host/Origin validation, a demo bearer-token auth layer and `ConfirmLayer`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use mcp_confirm::guard::HostOriginLayer;
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal,
    ReplayStore, Revalidation, ToolPolicy,
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

use crate::notes::{NotesError, NotesStore};

/// The demo identity provider: bearer token → principal.
pub(crate) fn principal_for_token(token: &str) -> Option<&'static str> {
    match token {
        "alice-token" => Some("alice"),
        "bob-token" => Some("bob"),
        _ => None,
    }
}

/// The demo access policy: which workspaces a principal may use (`load` exists only in the
/// in-memory variant started for load tests).
pub(crate) fn may_use(principal: &str, workspace: &str) -> bool {
    matches!(
        (principal, workspace),
        ("alice", "personal" | "team" | "load") | ("bob", "team")
    )
}

/// How the server is put together.
pub(crate) struct Options {
    pub(crate) keys: KeyRing,
    pub(crate) audience: String,
    /// `None`: the in-memory store.
    pub(crate) replay_store: Option<Arc<dyn ReplayStore>>,
    /// Serve without `ConfirmLayer` (only for measuring what the layer costs).
    pub(crate) without_confirmation: bool,
}

/// The axum app serving the MCP endpoint at `/mcp`.
pub(crate) fn app(store: Arc<NotesStore>, options: Options) -> Router {
    let server = NotesServer {
        store: Arc::clone(&store),
    };
    let rmcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_sse_keep_alive(None)
            .with_json_response(true),
    );
    let guard = ServiceBuilder::new()
        .layer(HostOriginLayer::localhost())
        .layer(middleware::from_fn(authenticate));
    if options.without_confirmation {
        return Router::new().nest_service("/mcp", guard.service(rmcp));
    }
    let mut confirm = ConfirmLayer::builder(options.keys)
        .audience(options.audience)
        .tool("notes_delete", delete_policy(store));
    if let Some(replay_store) = options.replay_store {
        confirm = confirm.replay_store(replay_store);
    }
    Router::new().nest_service("/mcp", guard.layer(confirm.build()).service(rmcp))
}

/// Bearer-token authentication: the principal goes into the request extensions, where
/// `ConfirmLayer` and the tool handlers find it.
async fn authenticate(mut request: Request, next: Next) -> Response {
    // Exactly one Authorization header: with two, "which one counts" is a parser differential.
    let mut values = request
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter();
    let token = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")),
        _ => None,
    };
    let Some(principal) = token.and_then(principal_for_token) else {
        let challenge = [(http::header::WWW_AUTHENTICATE, r#"Bearer realm="notes""#)];
        return (StatusCode::UNAUTHORIZED, challenge).into_response();
    };
    request.extensions_mut().insert(Principal::new(principal));
    next.run(request).await
}

/// Confirmation for `notes_delete`: candidates are the notes titled `title` in the workspace; the
/// chosen id goes into `note_id`; right before the delete the principal, the note and its place in
/// the workspace are checked again against the live files.
fn delete_policy(store: Arc<NotesStore>) -> ToolPolicy {
    let find = Arc::clone(&store);
    ToolPolicy::pick_one(move |lookup: Lookup| {
        let store = Arc::clone(&find);
        async move {
            let title = lookup.arguments["title"].as_str().unwrap_or_default();
            let uri = lookup.arguments["workspaceUri"]
                .as_str()
                .unwrap_or_default();
            // A workspace that is invalid or not this principal's shows nothing, like an empty one.
            let Ok(workspace) = store.workspace_name(uri) else {
                return Ok(Vec::new());
            };
            if !may_use(lookup.principal.subject(), &workspace) {
                return Ok(Vec::new());
            }
            let notes = store
                .find_by_title(&workspace, title)
                .map_err(PolicyError::new)?;
            Ok(notes
                .into_iter()
                .map(|n| {
                    Candidate::labelled(
                        n.id.clone(),
                        format!("{} ({}): {}", n.title, n.id, n.excerpt),
                    )
                })
                .collect())
        }
    })
    .message("Choose one matching note and confirm deletion. This cannot be undone.")
    .input_key("delete_choice")
    .choice_field("note_id")
    .choice_title("Note to delete")
    .confirm_title("Yes, delete this note")
    .select_into("note_id")
    .no_candidates_text(
        "No note with that title in a workspace you can access; nothing was changed.",
    )
    .revalidate(move |check: Revalidation| {
        let store = Arc::clone(&store);
        async move {
            let uri = check.arguments["workspaceUri"].as_str().unwrap_or_default();
            let workspace = store
                .workspace_name(uri)
                .map_err(|e| Refusal::new(e.to_string()))?;
            if !may_use(check.principal.subject(), &workspace) {
                return Err(Refusal::new("principal may no longer use this workspace"));
            }
            let id = check.chosen.as_deref().unwrap_or_default();
            let note = store
                .load(&workspace, id)
                .map_err(|e| Refusal::new(format!("live note check: {e}")))?;
            if Some(note.title.as_str()) != check.arguments["title"].as_str() {
                return Err(Refusal::new(
                    "the note's title changed since the form was shown",
                ));
            }
            Ok(())
        }
    })
}

/// The MCP server: three tools over the notes store.
#[derive(Clone)]
pub(crate) struct NotesServer {
    store: Arc<NotesStore>,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tools() -> Vec<Tool> {
    let workspace =
        json!({"type":"string","format":"uri","description":"file:// URI of the workspace folder"});
    vec![
        Tool::new(
            "notes_list",
            "List the notes in a workspace.",
            schema(json!({"type":"object","properties":{"workspaceUri":workspace},"required":["workspaceUri"],"additionalProperties":false})),
        )
        .annotate(ToolAnnotations::with_title("List notes").read_only(true).destructive(false).idempotent(true).open_world(false)),
        Tool::new(
            "notes_create",
            "Create a note in a workspace.",
            schema(json!({"type":"object","properties":{"workspaceUri":workspace,"title":{"type":"string"},"body":{"type":"string"}},
                "required":["workspaceUri","title","body"],"additionalProperties":false})),
        )
        .annotate(ToolAnnotations::with_title("Create a note").read_only(false).destructive(false).idempotent(false).open_world(false)),
        Tool::new(
            "notes_delete",
            "Delete one note, chosen by title. The user picks which matching note and confirms.",
            schema(json!({"type":"object","properties":{"workspaceUri":workspace,"title":{"type":"string"}},
                "required":["workspaceUri","title"]})),
        )
        .annotate(ToolAnnotations::with_title("Delete a note").read_only(false).destructive(true).idempotent(false).open_world(false)),
    ]
}

fn text(result: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(result)]).into()
}

fn refuse(result: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(result.into())]).into()
}

impl ServerHandler for NotesServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcp-confirm-notes",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Notes in workspaces. notes_delete asks the user to pick and confirm.",
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
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        // HTTP extensions reach an rmcp handler inside `http::request::Parts`.
        let parts = context.extensions.get::<http::request::Parts>();
        let Some(principal) = parts.and_then(|p| p.extensions.get::<Principal>()) else {
            return Ok(refuse("Not authenticated."));
        };
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let workspace = match self.store.workspace_name(&arg("workspaceUri")) {
            Ok(ws) if may_use(principal.subject(), &ws) => ws,
            _ => return Ok(refuse("Unknown workspace, or not yours.")),
        };
        let result = match &*request.name {
            "notes_list" => self.store.list(&workspace).map(|notes| {
                let lines: Vec<String> = notes
                    .iter()
                    .map(|n| format!("{}: {}", n.id, n.title))
                    .collect();
                if lines.is_empty() {
                    "No notes.".to_owned()
                } else {
                    lines.join("\n")
                }
            }),
            "notes_create" => self
                .store
                .create(&workspace, &arg("title"), &arg("body"))
                .map(|id| format!("Created {id}.")),
            "notes_delete" => {
                let note_id = arg("note_id");
                // Refuse to act on anything the confirmation layer did not confirm, for this user.
                let confirmed = parts.and_then(|p| p.extensions.get::<Confirmed>());
                match confirmed {
                    Some(c)
                        if c.covers("notes_delete", Some(&note_id))
                            && c.principal == *principal => {}
                    _ => {
                        return Ok(refuse(
                            "Refused: notes_delete runs only after the user confirms.",
                        ));
                    }
                }
                let title = self.store.load(&workspace, &note_id).map(|n| n.title);
                self.store.delete(&workspace, &note_id).map(|()| {
                    format!(
                        "Deleted {note_id} ({}) from {workspace}.",
                        title.unwrap_or_default()
                    )
                })
            }
            other => {
                return Err(rmcp::ErrorData::invalid_params(
                    format!("Unknown tool: {other}"),
                    None,
                ));
            }
        };
        Ok(match result {
            Ok(done) => text(done),
            Err(NotesError::NotFound) => refuse("No such note; nothing was changed."),
            Err(e) => refuse(format!("Refused: {e}. Nothing was changed.")),
        })
    }
}
