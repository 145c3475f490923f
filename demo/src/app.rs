//! The notes MCP server: an rmcp 3 `StreamableHttpService` (stateless, 2026-07-28) behind
//! Host/Origin validation, a demo bearer-token auth layer and `ConfirmLayer`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use mcp_confirm::approval::ApprovalStore;
use mcp_confirm::grant::GrantStore;
use mcp_confirm::guard::HostOriginLayer;
use mcp_confirm::rmcp::Confirmation;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::store::ReplayStore;
use mcp_confirm::store::passkey::PasskeyStore;
use mcp_confirm::store::standing::StandingStore;
use mcp_confirm::{
    ApproverQuery, Candidate, ConfirmLayer, KeyRing, Lookup, PolicyError, Principal, Refusal,
    Revalidation, confirm_router,
};
use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::passkey::Passkeys;
use mcp_confirm_pages::webhooks::Webhooks;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, ProtocolVersion, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use tower::ServiceBuilder;

use crate::notes::{NotesError, NotesStore};
use crate::queue::{self, Queue};
pub use crate::shared::{may_use, principal_for_token, refuse, text, with_notes};
use crate::signin;

/// A store of nonces, browser approvals and standing approvals (every store of mcp-confirm is one).
pub trait Store: ReplayStore + ApprovalStore + StandingStore + PasskeyStore {}

impl<S: ReplayStore + ApprovalStore + StandingStore + PasskeyStore> Store for S {}

/// How the server is put together.
pub struct Options {
    /// The keys the layer signs and verifies states with.
    pub keys: KeyRing,
    /// The deployment's audience: states, approvals and grants are bound to it.
    pub audience: String,
    /// Where nonces and browser approvals are kept; `None`: the in-memory store.
    pub replay_store: Option<Arc<dyn Store>>,
    /// Where `notes_purge`'s grants wait for their task.
    pub grant_store: Arc<dyn GrantStore>,
    /// The server's own origin (`http://127.0.0.1:3000`): the approval page is under it.
    pub public_url: String,
    /// How fast one principal may be shown new forms.
    pub challenge_rate: ChallengeRate,
    /// Serve without `ConfirmLayer` (only for measuring what the layer costs).
    pub without_confirmation: bool,
    /// Where every decision is recorded, tamper-evident; `None`: no decision log.
    pub audit_log: Option<mcp_confirm_log::AuditLog>,
    /// Who is told of each approval waiting for someone else (`notes_shred`); `None`: no one
    /// (the approvers' inbox lists them all the same).
    pub notifier: Option<Webhooks>,
}

/// The passkeys' relying party for the server at `public_url`: its host, when that is a name.
/// WebAuthn takes no IP address as a relying party, so a server at `127.0.0.1:PORT` verifies
/// passkeys for `localhost:PORT`: approvers open its pages there (`--public-url`).
pub fn passkey_origin(public_url: &str) -> (String, String) {
    let rest = public_url
        .split_once("://")
        .map_or(public_url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => (host, Some(port)),
        _ => (authority, None),
    };
    let is_ip = host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok();
    if !is_ip {
        return (host.to_owned(), public_url.trim_end_matches('/').to_owned());
    }
    let origin = match port {
        Some(port) => format!("http://localhost:{port}"),
        None => "http://localhost".to_owned(),
    };
    ("localhost".to_owned(), origin)
}

/// The per-principal challenge rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeRate {
    /// The layer's default (10 per second, bursts of 30).
    Default,
    /// `per_second` on average, bursts of `burst`.
    Limit {
        /// Forms per second, on average.
        per_second: u32,
        /// Forms at once.
        burst: u32,
    },
    /// No limit (load tests).
    Off,
}

/// The axum app serving the MCP endpoint at `/mcp`.
pub fn app(store: Arc<NotesStore>, options: Options) -> Router {
    app_with_gauges(store, options).0
}

/// The app, and the gauges its layer's stores answer (none without `ConfirmLayer`).
pub fn app_with_gauges(
    store: Arc<NotesStore>,
    options: Options,
) -> (Router, Option<mcp_confirm::metrics::Gauges>) {
    let store_load_users = store.load_users();
    let server = NotesServer::new(store);
    let declarations = server.confirm_declarations();
    let queue = server.queue.clone();
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
        .layer(middleware::from_fn_with_state(
            LoadUsers(store_load_users),
            authenticate,
        ));
    if options.without_confirmation {
        return (
            Router::new().nest_service("/mcp", guard.service(rmcp)),
            None,
        );
    }
    // What is confirmed comes from the tools themselves, in one call: the `#[confirm]` policies
    // with the tools' definitions; and every other tool whose annotations say destructive (none
    // today; a later one is covered) gets the generic form naming it.
    // One store for nonces, approvals, standing approvals and the approvers' passkeys.
    let store: Arc<dyn Store> = options
        .replay_store
        .unwrap_or_else(|| Arc::new(MemoryReplayStore::new()));
    let (rp_id, rp_origin) = passkey_origin(&options.public_url);
    let passkeys = match Passkeys::new(&rp_id, &rp_origin, Arc::clone(&store)) {
        Ok(passkeys) => passkeys,
        Err(e) => panic!("the passkeys' relying party {rp_id} at {rp_origin}: {e}"),
    };
    let mut confirm = ConfirmLayer::builder(options.keys)
        .audience(options.audience)
        .declarations(declarations)
        .confirm_destructive()
        .grant_store(options.grant_store)
        .approval_url(format!("{}/confirm/", options.public_url))
        .server_info(server_info())
        .store(store)
        .passkeys(passkeys);
    if let Some(notifier) = options.notifier {
        confirm = confirm.notifier(notifier);
    }
    if let Some(log) = options.audit_log {
        confirm = confirm.audit_log(log);
    }
    confirm = match options.challenge_rate {
        ChallengeRate::Default => confirm,
        ChallengeRate::Limit { per_second, burst } => {
            confirm.challenge_rate_limit(per_second, burst)
        }
        ChallengeRate::Off => confirm.without_challenge_rate_limit(),
    };
    let confirm = confirm.build();
    let gauges = confirm.gauges();
    // The worker runs grants with the layer's store and the queued tools' revalidation hooks.
    queue.start(confirm.grants());
    // The approval page and its sign-in: a session cookie, read there only (never at /mcp).
    let sessions = signin::Sessions::new(&options.public_url);
    let page = ServiceBuilder::new()
        .layer(HostOriginLayer::localhost())
        .layer(middleware::from_fn_with_state(
            sessions.clone(),
            signin::from_cookie,
        ))
        .service(confirm.approval_page().sign_in_url("/signin"));
    // The approvers' inbox and their passkeys: the same session, headers and origin rules.
    let signed_in = || {
        ServiceBuilder::new()
            .layer(HostOriginLayer::localhost())
            .layer(middleware::from_fn_with_state(
                sessions.clone(),
                signin::from_cookie,
            ))
    };
    let inbox = signed_in().service(confirm.inbox_page().sign_in_url("/signin"));
    let passkey_page = confirm
        .passkey_page()
        .map(|page| signed_in().service(page.sign_in_url("/signin")));
    // The standing-approvals page: the same session, headers and origin rules.
    let standing = confirm
        .standing_page(format!("{}/standing", options.public_url))
        .map(|page| {
            ServiceBuilder::new()
                .layer(HostOriginLayer::localhost())
                .layer(middleware::from_fn_with_state(
                    sessions.clone(),
                    signin::from_cookie,
                ))
                .service(page.sign_in_url("/signin"))
        });
    let sign_in = axum::routing::get(signin::form)
        .post(signin::submit)
        .fallback(signin::method_not_allowed("GET, HEAD, POST"))
        .with_state(sessions.clone())
        .layer(HostOriginLayer::localhost());
    let sign_out = axum::routing::post(signin::sign_out)
        .fallback(signin::method_not_allowed("POST"))
        .with_state(sessions)
        .layer(HostOriginLayer::localhost());
    let mut router = Router::new()
        .nest_service("/mcp", guard.layer(confirm).service(rmcp))
        .route_service("/confirm/{id}", page)
        .route_service("/inbox", inbox)
        .route("/signin", sign_in)
        .route("/signout", sign_out);
    if let Some(standing) = standing {
        router = router.route_service("/standing", standing);
    }
    if let Some(passkey_page) = passkey_page {
        router = router.route_service("/passkeys", passkey_page);
    }
    // Anything else (`/confirm/`, `/confirm/a/b`) is a 404 with the pages' headers.
    (router.fallback(signin::not_found), Some(gauges))
}

/// Whether the load generator's principals are let in (a store seeded for load tests).
#[derive(Clone, Copy)]
struct LoadUsers(bool);

/// Bearer-token authentication: the principal goes into the request extensions, where
/// `ConfirmLayer` and the tool handlers find it.
async fn authenticate(
    axum::extract::State(LoadUsers(load_users)): axum::extract::State<LoadUsers>,
    mut request: Request,
    next: Next,
) -> Response {
    // Exactly one Authorization header: with two, "which one counts" is a parser differential.
    let mut values = request
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter();
    let token = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")),
        _ => None,
    };
    let principal = match token {
        Some(token) => match principal_for_token(token) {
            Some(known) => Some(known.to_owned()),
            None if load_users => crate::shared::load_principal_for_token(token),
            None => None,
        },
        None => None,
    };
    let Some(principal) = principal else {
        let challenge = [(http::header::WWW_AUTHENTICATE, r#"Bearer realm="notes""#)];
        return (StatusCode::UNAUTHORIZED, challenge).into_response();
    };
    request.extensions_mut().insert(Principal::new(principal));
    next.run(request).await
}

/// A `workspaceUri` argument: the `file://` URI of one workspace folder.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ListArgs {
    /// file:// URI of the workspace folder
    #[serde(rename = "workspaceUri")]
    #[schemars(extend("format" = "uri"))]
    workspace_uri: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
/// `notes_create`'s arguments.
pub struct CreateArgs {
    /// file:// URI of the workspace folder
    #[serde(rename = "workspaceUri")]
    #[schemars(extend("format" = "uri"))]
    workspace_uri: String,
    title: String,
    body: String,
}

/// Which note is deleted is not an argument: the user's choice reaches the handler in its
/// [`Confirmation`].
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteArgs {
    /// file:// URI of the workspace folder
    #[serde(rename = "workspaceUri")]
    #[schemars(extend("format" = "uri"))]
    workspace_uri: String,
    /// Read by the layer's hooks from the raw arguments; here only for the schema.
    #[allow(dead_code)]
    title: String,
}

/// The MCP server: three tools over the notes store. Which of them is confirmed, and how, is
/// declared here, on the tools, and nowhere else.
#[derive(Clone)]
pub struct NotesServer {
    store: Arc<NotesStore>,
    /// The background work of `notes_purge`: its tasks and the grants they run.
    queue: Queue,
    tool_router: ToolRouter<Self>,
}

/// `notes_purge`'s arguments: every note titled `title` in the workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PurgeArgs {
    /// file:// URI of the workspace folder
    #[serde(rename = "workspaceUri")]
    #[schemars(extend("format" = "uri"))]
    workspace_uri: String,
    /// Read by the layer's hooks and the worker from the confirmed arguments; here for the schema.
    #[allow(dead_code)]
    title: String,
}

/// The outcome of a notes operation as a tool result.
fn reply(result: Result<String, NotesError>) -> CallToolResult {
    match result {
        Ok(done) => text(done),
        Err(NotesError::NotFound) => refuse("No such note; nothing was changed."),
        Err(NotesError::Changed) => {
            refuse("Refused: the note changed since it was confirmed; nothing was changed.")
        }
        Err(e) => refuse(format!("Refused: {e}. Nothing was changed.")),
    }
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl NotesServer {
    /// The server over `store`.
    pub fn new(store: Arc<NotesStore>) -> Self {
        Self {
            queue: Queue::new(Arc::clone(&store)),
            store,
            tool_router: Self::tool_router(),
        }
    }

    /// The workspace `principal` may use, or the refusal to answer with.
    fn workspace(&self, principal: &Principal, uri: &str) -> Result<String, CallToolResult> {
        match self.store.workspace_name(uri) {
            Ok(ws) if may_use(principal.subject(), &ws) => Ok(ws),
            _ => Err(refuse("Unknown workspace, or not yours.")),
        }
    }

    #[tool(
        description = "List the notes in a workspace.",
        annotations(
            title = "List notes",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn notes_list(
        &self,
        principal: Principal,
        Parameters(args): Parameters<ListArgs>,
    ) -> CallToolResult {
        let workspace = match self.workspace(&principal, &args.workspace_uri) {
            Ok(workspace) => workspace,
            Err(refusal) => return refusal,
        };
        reply(
            with_notes(&self.store, move |notes| notes.list(&workspace))
                .await
                .map(|notes| {
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
        )
    }

    #[tool(
        description = "Create a note in a workspace.",
        annotations(
            title = "Create a note",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn notes_create(
        &self,
        principal: Principal,
        Parameters(args): Parameters<CreateArgs>,
    ) -> CallToolResult {
        let workspace = match self.workspace(&principal, &args.workspace_uri) {
            Ok(workspace) => workspace,
            Err(refusal) => return refusal,
        };
        let creator = principal.subject().to_owned();
        reply(
            with_notes(&self.store, move |notes| {
                notes.create(&workspace, &args.title, &args.body, Some(&creator))
            })
            .await
            .map(|id| format!("Created {id}.")),
        )
    }

    /// Candidates are the notes titled `title` in the workspace, each with its version (a hash of
    /// the file); the chosen id reaches the handler in its `Confirmation`; right before the delete the principal, the
    /// note, its place in the workspace and its version are checked again against the live files
    /// (`still_the_note_shown`), and the handler deletes only if the version still matches.
    #[tool(
        description = "Delete one note, chosen by title. The user picks which matching note and confirms.",
        annotations(
            title = "Delete a note",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    #[confirm(
        pick_one = Self::matching_notes,
        revalidate = Self::still_the_note_shown,
        message = "Choose one matching note and confirm deletion. This cannot be undone.",
        input_key = "delete_choice",
        choice_field = "note_id",
        choice_title = "Note to delete",
        confirm_title = "Yes, delete this note",
        // Room for the server's facts, a title and an excerpt (each capped in `Note::label`).
        max_label_chars = 112,
        no_candidates_text = "No note with that title in a workspace you can access; nothing was changed.",
        // The user may also allow deleting notes in this one workspace for up to ten minutes
        // (at most 20 later calls, each still resolving exactly one note and re-checked live).
        standing(up_to = "10m", uses = 20, scope = Self::workspace_scope)
    )]
    async fn notes_delete(
        &self,
        confirmation: Confirmation,
        principal: Principal,
        Parameters(args): Parameters<DeleteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.delete_confirmed(&confirmation, &principal, args).await
    }

    /// Like `notes_delete`, for good: the approval happens on the server's own page in the
    /// person's browser (URL-mode elicitation), signed in as the same user, typing the note's id.
    #[tool(
        description = "Permanently destroy one note, chosen by title. The user approves it on the server's approval page in a browser.",
        annotations(
            title = "Destroy a note",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    #[confirm(
        pick_one = Self::matching_notes,
        revalidate = Self::still_the_note_shown,
        approve_in_browser,
        require_typed_id,
        message = "Approve destroying one note with this title. This cannot be undone.",
        input_key = "destroy_approval",
        max_label_chars = 112,
        no_candidates_text = "No note with that title in a workspace you can access; nothing was changed."
    )]
    async fn notes_destroy(
        &self,
        confirmation: Confirmation,
        principal: Principal,
        Parameters(args): Parameters<DeleteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.delete_confirmed(&confirmation, &principal, args).await
    }

    /// Like `notes_destroy`, for the many-calls-at-once case: an agent cleaning up calls it once
    /// per note, in parallel, and the person approves the calls that wait together in one
    /// decision on the server's page (a batch: approve all, some, or none).
    #[tool(
        description = "Delete one note, chosen by title. Calls made together are approved together on the server's approval page in a browser.",
        annotations(
            title = "Discard a note",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    #[confirm(
        pick_one = Self::matching_notes,
        revalidate = Self::still_the_note_shown,
        approve_in_browser,
        batch_group = "notes",
        message = "Approve discarding one note with this title. This cannot be undone.",
        input_key = "discard_approval",
        max_label_chars = 112,
        no_candidates_text = "No note with that title in a workspace you can access; nothing was changed."
    )]
    async fn notes_discard(
        &self,
        confirmation: Confirmation,
        principal: Principal,
        Parameters(args): Parameters<DeleteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.delete_confirmed(&confirmation, &principal, args).await
    }

    /// Like `notes_destroy`, under four eyes: someone other than the caller approves it on the
    /// server's page, with a passkey registered at `/passkeys`; the approval link reaches them
    /// in their inbox (`/inbox`) and, with `--webhook-url`, as a signed webhook.
    #[tool(
        description = "Permanently shred one note, chosen by title. Someone other than the caller approves it on the server's approval page, with a passkey.",
        annotations(
            title = "Shred a note (four eyes)",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    #[confirm(
        pick_one = Self::matching_notes,
        revalidate = Self::still_the_note_shown,
        approved_by(
            anyone_but_caller,
            passkey,
            share_candidate_labels,
            recheck = Self::still_an_account
        ),
        message = "Someone other than the caller approves shredding one note with this title, with a passkey. This cannot be undone.",
        input_key = "shred_approval",
        max_label_chars = 112,
        no_candidates_text = "No note with that title in a workspace you can access; nothing was changed."
    )]
    async fn notes_shred(
        &self,
        confirmation: Confirmation,
        principal: Principal,
        Parameters(args): Parameters<DeleteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.delete_confirmed(&confirmation, &principal, args).await
    }

    /// Deletes the note the user chose, at the version the user saw. The `Confirmation` exists
    /// only if the layer confirmed exactly this call (else the call never got here).
    async fn delete_confirmed(
        &self,
        confirmation: &Confirmation,
        principal: &Principal,
        args: DeleteArgs,
    ) -> Result<CallToolResult, ErrorData> {
        let workspace = match self.workspace(principal, &args.workspace_uri) {
            Ok(workspace) => workspace,
            Err(refusal) => return Ok(refusal),
        };
        let (note_id, version) = confirmation.chosen_with_version()?;
        let (note_id, Some(version)) = (note_id.to_owned(), version.map(str::to_owned)) else {
            return Ok(refuse(
                "Refused: the confirmation names no version of the note; nothing was changed.",
            ));
        };
        Ok(reply(
            with_notes(&self.store, move |notes| {
                let note = notes.delete_if_version(&workspace, &note_id, &version)?;
                Ok(format!(
                    "Deleted {note_id} ({}) from {workspace}.",
                    note.title
                ))
            })
            .await,
        ))
    }

    /// Deletes every note with a title, in the background: the user confirms the set as it is,
    /// the confirmation becomes a durable grant, and a task runs it after re-checking that the
    /// set is still exactly what the user saw (`same_title_set`).
    #[tool(
        description = "Delete every note with a given title, as a background task. The user confirms the whole set first.",
        annotations(
            title = "Purge notes by title",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    #[confirm(
        pick_one = Self::title_set,
        revalidate = Self::same_title_set,
        queued,
        message = "Delete every note with this title? This runs in the background and cannot be undone.",
        input_key = "purge_choice",
        choice_field = "set",
        choice_title = "Notes to delete",
        confirm_title = "Yes, delete all of them",
        max_label_chars = 200,
        no_candidates_text = "No note with that title in a workspace you can access; nothing was changed."
    )]
    async fn notes_purge(
        &self,
        confirmation: Confirmation,
        principal: Principal,
        Parameters(args): Parameters<PurgeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Err(refusal) = self.workspace(&principal, &args.workspace_uri) {
            return Ok(refusal.into());
        }
        // The grant is the only thing the job gets; the arguments above are descriptive.
        let Some(grant) = confirmation.grant().copied() else {
            return Ok(refuse("Refused: notes_purge runs only from a confirmed grant.").into());
        };
        let tasks = ctx
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if tasks {
            Ok(self.queue.enqueue(grant, &principal).into())
        } else {
            // A client that cannot follow a task waits for the same work in the request.
            Ok(self.queue.run(grant).await.into())
        }
    }

    /// The one choice `notes_purge` offers: the whole set of notes titled `title`, versioned by
    /// the ids and versions of its members, so adding, editing or removing one changes it.
    async fn title_set(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let notes = self
            .notes_titled(&lookup.principal, &lookup.arguments)
            .await;
        let notes = notes.map_err(PolicyError::new)?;
        if notes.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = notes.iter().map(|n| n.id.as_str()).collect();
        let label = format!(
            "All {} notes titled {:?}: {}",
            notes.len(),
            notes[0].title,
            ids.join(", ")
        );
        Ok(vec![
            Candidate::labelled(queue::WHOLE_SET, label).with_version(queue::set_version(&notes)),
        ])
    }

    /// Before the purge runs (at approval, and again in the task): the principal may still use
    /// the workspace, and the notes titled `title` are exactly the set the user saw.
    async fn same_title_set(&self, check: Revalidation) -> Result<(), Refusal> {
        let notes = self
            .notes_titled(&check.principal, &check.arguments)
            .await
            .map_err(|e| Refusal::new(e.to_string()))?;
        if notes.is_empty() {
            return Err(Refusal::new("the notes are gone since the form was shown"));
        }
        if check.seen_version.as_deref() != Some(queue::set_version(&notes).as_str()) {
            return Err(Refusal::new(
                "the set of notes changed since the form was shown",
            ));
        }
        Ok(())
    }

    /// The notes titled `arguments.title` in `arguments.workspaceUri`, if `principal` may use it
    /// (none otherwise).
    async fn notes_titled(
        &self,
        principal: &Principal,
        arguments: &serde_json::Value,
    ) -> Result<Vec<crate::notes::Note>, NotesError> {
        let title = arguments["title"].as_str().unwrap_or_default().to_owned();
        let uri = arguments["workspaceUri"].as_str().unwrap_or_default();
        let Ok(workspace) = self.store.workspace_name(uri) else {
            return Ok(Vec::new());
        };
        if !may_use(principal.subject(), &workspace) {
            return Ok(Vec::new());
        }
        with_notes(&self.store, move |notes| {
            notes.find_by_title(&workspace, &title)
        })
        .await
    }

    /// What a standing approval of `notes_delete` covers: one workspace, by its canonical name
    /// (every spelling of its URI maps to the same name; a URI that names no workspace of this
    /// principal is covered by nothing, so it always gets the form).
    fn workspace_scope(&self, lookup: &Lookup) -> Option<String> {
        let uri = lookup.arguments["workspaceUri"].as_str()?;
        let workspace = self.store.workspace_name(uri).ok()?;
        may_use(lookup.principal.subject(), &workspace).then(|| format!("workspace {workspace}"))
    }

    /// The notes of `title` in the workspace this principal may use: what the form offers.
    async fn matching_notes(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let title = lookup.arguments["title"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let uri = lookup.arguments["workspaceUri"]
            .as_str()
            .unwrap_or_default();
        // A workspace that is invalid or not this principal's shows nothing, like an empty one.
        let Ok(workspace) = self.store.workspace_name(uri) else {
            return Ok(Vec::new());
        };
        if !may_use(lookup.principal.subject(), &workspace) {
            return Ok(Vec::new());
        }
        let notes = with_notes(&self.store, move |notes| {
            notes.find_by_title(&workspace, &title)
        })
        .await
        .map_err(PolicyError::new)?;
        Ok(notes
            .into_iter()
            .map(|n| Candidate::labelled(n.id.clone(), n.label()).with_version(n.version))
            .collect())
    }

    /// As an approved shred is about to run: the approver's account still exists (the demo's
    /// identity provider knows it); a deployment asks its directory here.
    async fn still_an_account(&self, query: ApproverQuery) -> Result<bool, PolicyError> {
        Ok(matches!(query.approver.as_str(), "alice" | "bob"))
    }

    /// Right before the delete: the principal may still use the workspace, and the note is still
    /// there, with the title and the version the user saw.
    async fn still_the_note_shown(&self, check: Revalidation) -> Result<(), Refusal> {
        let uri = check.arguments["workspaceUri"].as_str().unwrap_or_default();
        let workspace = self
            .store
            .workspace_name(uri)
            .map_err(|e| Refusal::new(e.to_string()))?;
        if !may_use(check.principal.subject(), &workspace) {
            return Err(Refusal::new("principal may no longer use this workspace"));
        }
        let Some(seen) = check.seen_version else {
            return Err(Refusal::new("no version was shown with the note"));
        };
        let id = check.chosen.unwrap_or_default();
        let note = with_notes(&self.store, move |notes| notes.load(&workspace, &id))
            .await
            .map_err(|e| match e {
                NotesError::NotFound => Refusal::new("the note is gone since the form was shown"),
                e => Refusal::new(format!("live note check: {e}")),
            })?;
        if note.version != seen {
            return Err(Refusal::new("the note changed since the form was shown"));
        }
        if Some(note.title.as_str()) != check.arguments["title"].as_str() {
            return Err(Refusal::new(
                "the note's title changed since the form was shown",
            ));
        }
        Ok(())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for NotesServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(server_info())
        .with_instructions("Notes in workspaces. notes_delete asks the user to pick and confirm.")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    // A task is its creator's: anyone else asking about it is told it does not exist.

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let principal = queue::principal_of(&context)?;
        self.queue.get(&request.task_id, &principal).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = queue::principal_of(&context)?;
        self.queue
            .update(&request.task_id, &principal, request.input_responses)
    }

    /// Cancelling a purge revokes its grant: whatever state the task is in, it never runs.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = queue::principal_of(&context)?;
        self.queue.cancel(&request.task_id, &principal).await
    }
}

fn server_info() -> Implementation {
    Implementation::new("mcp-confirm-notes", env!("CARGO_PKG_VERSION"))
}
