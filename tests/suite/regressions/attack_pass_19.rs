//! Attack pass 19: an adversarial pass on the behaviour changed for issue #19 — spent browser
//! states, the demo's sign-in, approval audiences and caps, the `Accept` gate, the one label
//! sanitizer, oversized queued arguments, MRTR's ask-again, the demo's tasks across instances,
//! and the tool-list and policy-shape rules.
//!
//! Each test is one attack. Tests whose name starts with `holds_` held when they were written:
//! they are regression tests. The others failed when they were written; their doc comment says
//! **Was broken**, what broke, where, and how it was fixed.

use crate::common::faulty::{Faults, FaultyGrants};
use mcp_confirm_demo::{app, notes};
use std::sync::Arc;
use std::time::Duration;

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::MAX_PENDING_APPROVALS;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantId, GrantStore, MemoryGrantStore};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{Candidate, ConfirmLayer, KeyRing, Lookup, PolicyError, ToolPolicy};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

// =============================================================================================
// Fixtures: the demo server, one or several instances of one deployment.
// =============================================================================================

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One instance of the demo deployment on 127.0.0.1.
struct Instance {
    base: String,
    store: Arc<notes::NotesStore>,
}

impl Instance {
    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn workspace(&self, name: &str) -> String {
        self.store.workspace_uri(name)
    }

    fn notes_in(&self, workspace: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.store.root_path().join(workspace))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn note_path(&self, workspace: &str, id: &str) -> std::path::PathBuf {
        self.store
            .root_path()
            .join(workspace)
            .join(format!("{id}.md"))
    }
}

/// A fresh notes directory (removed on drop) and its store.
fn notes_store() -> (TempDir, Arc<notes::NotesStore>) {
    let dir = std::env::temp_dir().join(format!(
        "mcp-confirm-attack19-{}",
        mcp_confirm::store::Nonce::random().to_hex()
    ));
    let store = Arc::new(notes::NotesStore::open(&dir.join("data")).unwrap());
    (TempDir(dir), store)
}

/// Serves one instance of the deployment over `store` and `grants` (its own replay store and
/// rmcp task manager, as a second process would have).
async fn instance(store: &Arc<notes::NotesStore>, grants: Arc<dyn GrantStore>) -> Instance {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = app::Options {
        keys: KeyRing::single("k1", secret(0x19)).unwrap(),
        audience: "https://notes-attack-19.example/mcp".into(),
        replay_store: None,
        grant_store: grants,
        public_url: format!("http://{addr}"),
        challenge_rate: app::ChallengeRate::Default,
        without_confirmation: false,
        audit_log: None,
        notifier: None,
    };
    let router = app::app(Arc::clone(store), options);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Instance {
        base: format!("http://{addr}"),
        store: Arc::clone(store),
    }
}

#[derive(Clone)]
struct Handler {
    capabilities: ClientCapabilities,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("attack-19", "1.0.0"),
        )
    }
}

type Client = RunningService<RoleClient, Handler>;

/// A client of `instance` as `token` that answers forms and follows tasks.
async fn task_client(instance: &Instance, token: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(instance.url()).auth_header(token),
    );
    let capabilities = serde_json::from_value(json!({
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }))
    .unwrap();
    Handler { capabilities }
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect")
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn purge_call(instance: &Instance) -> CallToolRequestParams {
    CallToolRequestParams::new("notes_purge").with_arguments(object(
        json!({"workspaceUri": instance.workspace("personal"), "title": "Groceries"}),
    ))
}

/// Alice (or whoever `client` is) confirms purging "Groceries": the task id.
async fn purged_task(client: &Client, instance: &Instance) -> String {
    let first = match client.call_tool_once(purge_call(instance)).await {
        Ok(CallToolResponse::InputRequired(result)) => serde_json::to_value(result).unwrap(),
        other => panic!("expected input_required, got {other:?}"),
    };
    let state = first["requestState"].as_str().unwrap().to_owned();
    let responses = serde_json::from_value(
        json!({"purge_choice": {"action": "accept", "content": {"set": "all", "confirm": true}}}),
    )
    .unwrap();
    let call = purge_call(instance)
        .with_request_state(state)
        .with_input_responses(responses);
    match client.call_tool_once(call).await {
        Ok(CallToolResponse::Task(created)) => {
            let created = serde_json::to_value(created).unwrap();
            created["taskId"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

/// `tasks/get` as JSON, or the JSON-RPC error (code, message).
async fn get_task(client: &Client, id: &str) -> Result<Value, (i32, String)> {
    match client
        .get_task(rmcp::model::GetTaskParams::new(id.to_owned()))
        .await
    {
        Ok(task) => Ok(serde_json::to_value(task).unwrap()),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.message.to_string())),
        Err(e) => panic!("transport error {e}"),
    }
}

/// `tasks/cancel`: `Ok` or the JSON-RPC error (code, message).
async fn cancel_task(client: &Client, id: &str) -> Result<(), (i32, String)> {
    match client
        .cancel_task(rmcp::model::CancelTaskParams::new(id.to_owned()))
        .await
    {
        Ok(()) => Ok(()),
        Err(ServiceError::McpError(e)) => Err((e.code.0, e.message.to_string())),
        Err(e) => panic!("transport error {e}"),
    }
}

/// Polls `tasks/get` until the task is no longer working.
async fn settled(client: &Client, id: &str) -> Value {
    for _ in 0..200 {
        let task = get_task(client, id).await.expect("tasks/get");
        if task["status"] != "working" {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never settled");
}

const ALL_PERSONAL: [&str; 5] = [
    "note-1.md",
    "note-14.md",
    "note-2.md",
    "note-3.md",
    "note-7.md",
];

/// A grant store that forwards to a memory store.
fn shared_grants() -> Arc<dyn GrantStore> {
    Arc::new(MemoryGrantStore::new())
}

// =============================================================================================
// 1. Spent browser-approval states.
// =============================================================================================

/// Alice declines in her client (the state is spent) while the page still shows the approval
/// undecided; her client then says "accept" (she went to the page after all), or sends the
/// retry again with no answer, or cancels. None of these may show the page again for the spent
/// state: the accept gets the frozen replay answer (-32602), and nothing ever runs.
#[tokio::test]
async fn holds_a_declined_browser_state_never_gets_its_page_again() {
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let declined = f
        .alice(&with_answer(
            destroy_call(json!(2)),
            &state,
            json!({"action": "decline"}),
        ))
        .await;
    assert_eq!(
        declined.result()["resultType"],
        "complete",
        "{}",
        declined.json()
    );
    // The page is still undecided; the client now claims the user went there.
    let accepted = f.alice(&went_to_page(&state, json!(3))).await;
    assert_eq!(accepted.error()["code"], -32602, "{}", accepted.json());
    // A cancel of a spent state is a replay too, never a fresh start.
    let cancelled = f
        .alice(&with_answer(
            destroy_call(json!(4)),
            &state,
            json!({"action": "cancel"}),
        ))
        .await;
    assert_eq!(cancelled.error()["code"], -32602, "{}", cancelled.json());
    // Deciding on the page after the client declined decides nothing that runs.
    let (_, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    if html.contains("name=\"csrf\"") {
        let _ = decide(
            &page,
            &url,
            "alice",
            &format!("csrf={}&decision=approve&choice=note-7", csrf(&html)),
        )
        .await;
    }
    let after = f.alice(&went_to_page(&state, json!(5))).await;
    assert_eq!(after.error()["code"], -32602, "{}", after.json());
    assert_eq!(f.seen.count(), 0, "nothing ran");
}

/// The same spent state retried *without* an answer (a client that lost the user's response):
/// whatever comes back must not point at the old approval's page, and never runs anything.
#[tokio::test]
async fn holds_a_spent_browser_state_retried_without_an_answer_never_reopens_its_page() {
    let (f, page) = browser();
    let (url, eid, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (_, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    let (status, _) = decide(
        &page,
        &url,
        "alice",
        &format!("csrf={}&decision=approve&choice=note-7", csrf(&html)),
    )
    .await;
    assert!(status.is_success() || status.is_redirection(), "{status}");
    let done = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
    let mut bare = destroy_call(json!(3));
    bare["params"]["requestState"] = json!(state);
    let again = f.alice(&bare).await;
    let json = again.json();
    assert!(
        !json.to_string().contains(&eid),
        "the spent approval's page was offered again: {json}"
    );
    assert_eq!(f.seen.count(), 1, "nothing ran again");
}

// =============================================================================================
// 3. Approvals carry their audience.
// =============================================================================================

/// Two deployments share one replay store and one key ring (a hurried operator reusing both).
/// Alice's approval from deployment A is opened, and posted with A's anti-forgery token, on
/// deployment B's page: B neither shows nor decides it, and A's retry still finds it undecided.
#[tokio::test]
async fn holds_another_deployments_page_neither_shows_nor_decides_an_approval() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let keys = || KeyRing::single("k1", KEY).unwrap();
    let a = builder(keys(), &notes, &clock, &store).build();
    let b = ConfirmLayer::builder(keys())
        .without_tool_list_unchecked()
        .audience("https://other.example/mcp")
        .ttl(Duration::from_secs(300))
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool("notes_destroy", destroy_policy(&notes))
        .build();
    let (page_a, page_b) = (a.approval_page(), b.approval_page());
    let f = Fixture::new(a, notes, clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _, html_b) = visit(&page_b, "GET", &url, Some("alice"), &[], "").await;
    assert!(
        status != StatusCode::OK && !html_b.contains("note-7"),
        "B showed A's approval: {status} {html_b}"
    );
    let (_, _, html_a) = visit(&page_a, "GET", &url, Some("alice"), &[], "").await;
    let token = csrf(&html_a);
    let (status, body) = decide(
        &page_b,
        &url,
        "alice",
        &format!("csrf={token}&decision=approve&choice=note-7"),
    )
    .await;
    assert!(
        status.is_client_error(),
        "B decided A's approval: {status} {body}"
    );
    let again = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(elicitation(&again).0, url, "{}", again.json());
    assert_eq!(f.seen.count(), 0);
}

// =============================================================================================
// 4. The memory store's approval cap.
// =============================================================================================

/// At the default capacity a principal may keep `MAX_PENDING_APPROVALS` (20) pending approvals,
/// no more, however fast the rate limit lets her ask; the 21st is refused with a retry-after, and
/// bob is not charged for her flood.
#[tokio::test]
async fn holds_one_principal_holds_at_most_twenty_pending_approvals() {
    let (f, _) = browser();
    assert_eq!(MAX_PENDING_APPROVALS, 20);
    for n in 0..MAX_PENDING_APPROVALS {
        elicitation(&f.alice(&destroy_call(json!(n))).await);
    }
    let over = f.alice(&destroy_call(json!("over"))).await;
    assert_eq!(
        over.error()["data"]["reason"],
        "principal_budget_spent",
        "{}",
        over.json()
    );
    let bob = send(
        &f.svc,
        post(&destroy_call_in(json!("b"), TEAM, "Groceries"), Some("bob")),
    )
    .await;
    elicitation(&bob);
}

// =============================================================================================
// 5. The Accept gate.
// =============================================================================================

/// A retry whose `Accept` lacks SSE (or weights it `q=0`) is refused 406 before the claim: the
/// same answer sent again with a proper `Accept` still runs, once.
#[tokio::test]
async fn holds_a_retry_without_sse_in_accept_spends_nothing() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    for accept in [
        "application/json",
        "application/json, text/event-stream;q=0",
        "application/json, text/event-stream; Q=0.000",
        "*/*",
        "application/json, text/*",
    ] {
        let mut request = post(&accepted(&state, json!(2), "note-7"), Some("alice"));
        request
            .headers_mut()
            .insert("accept", accept.parse().unwrap());
        let refused = send(&f.svc, request).await;
        assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        assert_eq!(f.seen.count(), 0, "{accept}");
    }
    let done = f.accept(&state, json!(3), "note-7").await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
}

/// A raw reqwest POST of `body` to the demo's `/mcp` as alice with `accept`.
async fn post_with_accept(url: &str, accept: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .header("authorization", "Bearer alice-token")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header(
            "mcp-name",
            body["params"]["name"].as_str().unwrap_or_default(),
        )
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, json)
}

/// **Was broken.** A parser differential between the layer's `Accept` gate and rmcp's.
///
/// `Accept: application/json;x=",text/event-stream;"` is one media range to rmcp (its
/// `accepted_media_types` splits outside quoted strings) — JSON only, so rmcp answers 406. The
/// layer's `accepts_json_and_sse` (src/http/headers.rs) splits on every `,` and `;`, finds a
/// `text/event-stream` range in the quoted parameter, and lets the call through: it shows the
/// form, claims the nonce on the accept, forwards, and rmcp refuses with 406. The confirmation
/// is burned on exactly the transport refusal #19 promised never to spend one on (the same
/// answer with a proper `Accept` then gets the replay error, and the note is not deleted).
///
/// Fixed: `Accept` is split as RFC 9110 (and rmcp) split it, outside quoted strings only
/// (honouring `\"` escapes), so a quoted parameter never yields a range.
#[tokio::test]
async fn a_quoted_comma_in_accept_spends_no_confirmation() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let accept = r#"application/json;x=",text/event-stream;""#;
    let call = crate::notes_http::tool_call(
        json!(1),
        "notes_delete",
        json!({"workspaceUri": demo.workspace("personal"), "title": "Groceries"}),
    );
    let (status, first) = post_with_accept(&demo.url(), accept, &call).await;
    if status == 406 {
        return; // The layer agrees with the server: nothing was offered, nothing spent.
    }
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let mut retry =
        crate::notes_http::answering(call.clone(), &state, crate::notes_http::accept("note-7"));
    retry["id"] = json!(2);
    let (status, answer) = post_with_accept(&demo.url(), accept, &retry).await;
    assert!(demo.note_path("personal", "note-7").exists(), "{answer}");
    // The same confirmation with a proper Accept must still work: nothing was spent on a
    // request the server refused as not acceptable.
    retry["id"] = json!(3);
    let (_, again) =
        post_with_accept(&demo.url(), "application/json, text/event-stream", &retry).await;
    assert!(
        !demo.note_path("personal", "note-7").exists(),
        "the form was shown and the confirmation spent on a call rmcp refused ({status} \
         {answer}); the retry with a proper Accept got {again}"
    );
}

// =============================================================================================
// 6. The one label sanitizer.
// =============================================================================================

/// A layer with one pick-one tool `pick` whose resolver returns `candidates`.
fn picking(candidates: Vec<Candidate>, browser_page: bool) -> (Fixture, mcp_confirm::ApprovalPage) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let mut policy = ToolPolicy::pick_one(move |_: Lookup| {
        let candidates = candidates.clone();
        async move { Ok::<_, PolicyError>(candidates) }
    })
    .message("Pick one.")
    .input_key("pick_choice")
    .choice_field("id");
    if browser_page {
        policy = policy.approve_in_browser();
    }
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool("pick", policy)
        .build();
    let page = layer.approval_page();
    (Fixture::new(layer, notes, clock, store), page)
}

fn pick_call(id: Value, url_mode: bool) -> Value {
    let mut meta = meta();
    if url_mode {
        meta = url_meta();
    }
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta, "name":"pick", "arguments":{"q": "x"}}})
}

/// Characters that render as nothing (or reorder text) and so let one label look like another,
/// or hide text a reader never sees: Unicode `Cf` (format) characters the sanitizer's list misses.
const HIDDEN: [char; 9] = [
    '\u{E0001}', // LANGUAGE TAG
    '\u{E0041}', // TAG LATIN CAPITAL LETTER A ("ASCII smuggling")
    '\u{E007F}', // CANCEL TAG
    '\u{206A}',  // INHIBIT SYMMETRIC SWAPPING
    '\u{206F}',  // NOMINAL DIGIT SHAPES
    '\u{FFF9}',  // INTERLINEAR ANNOTATION ANCHOR
    '\u{FFFB}',  // INTERLINEAR ANNOTATION TERMINATOR
    '\u{1D173}', // MUSICAL SYMBOL BEGIN BEAM
    '\u{1BCA0}', // SHORTHAND FORMAT LETTER OVERLAP
];

/// **Was broken.** Invisible format characters survive `form::plain_label`.
///
/// A label "note-7 · Groceries" followed by Unicode tag characters (U+E0000–E007F, invisible in
/// every renderer, read by models as ASCII: "ASCII smuggling"), or the deprecated format
/// controls U+206A–206F, interlinear annotations U+FFF9–FFFB, musical and shorthand format
/// controls, reaches the form's `title` and the approval page unchanged: the user sees one
/// thing, the label says another. `is_invisible` (src/form.rs) lists `Cc` plus a hand-picked
/// set of `Cf` code points and misses the rest of `Cf`.
///
/// Fixed: every `Cf` and every other Default_Ignorable_Code_Point (variation selectors, Hangul
/// fillers, the reserved ranges) is dropped, from one table (`kernel::is_invisible`).
#[tokio::test]
async fn every_format_and_ignorable_character_is_dropped_from_labels() {
    let label: String = std::iter::once("note-7 · Groceries".to_owned())
        .chain(HIDDEN.iter().map(|c| format!("{c}x")))
        .collect();
    let (f, _) = picking(
        vec![Candidate::labelled("note-7", label.as_str()).with_version("v1")],
        false,
    );
    let first = f.alice(&pick_call(json!(1), false)).await;
    let title = first.result()["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["oneOf"][0]["title"]
        .as_str()
        .unwrap_or_else(|| panic!("a titled choice: {}", first.json()))
        .to_owned();
    let (g, page) = picking(
        vec![Candidate::labelled("note-7", label.as_str()).with_version("v1")],
        true,
    );
    let (url, _, _) = {
        let answer = g.alice(&pick_call(json!(1), true)).await;
        let result = answer.result();
        let params = &result["inputRequests"]["pick_choice"]["params"];
        (
            params["url"]
                .as_str()
                .unwrap_or_else(|| panic!("a URL: {}", answer.json()))
                .to_owned(),
            (),
            (),
        )
    };
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let left_in_form: Vec<String> = HIDDEN
        .iter()
        .filter(|c| title.contains(**c))
        .map(|c| format!("U+{:04X}", u32::from(*c)))
        .collect();
    let left_on_page: Vec<String> = HIDDEN
        .iter()
        .filter(|c| html.contains(**c))
        .map(|c| format!("U+{:04X}", u32::from(*c)))
        .collect();
    assert!(
        left_in_form.is_empty() && left_on_page.is_empty(),
        "invisible characters kept: form {left_in_form:?}, page {left_on_page:?}"
    );
}

/// The characters #19's sanitizer does list (RLO, zero-width, controls) are gone from the form
/// and the page alike: regression.
#[tokio::test]
async fn holds_listed_bidi_and_zero_width_characters_are_dropped_everywhere() {
    let label = "note-7\u{202E}txt.exe\u{200B}\u{2066}x\u{0007}\u{FEFF}";
    let (f, _) = picking(
        vec![Candidate::labelled("note-7", label).with_version("v1")],
        false,
    );
    let first = f.alice(&pick_call(json!(1), false)).await;
    let title = first.result()["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["oneOf"][0]["title"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(title, "note-7txt.exex");
    let (g, page) = picking(
        vec![Candidate::labelled("note-7", label).with_version("v1")],
        true,
    );
    let answer = g.alice(&pick_call(json!(1), true)).await;
    let url = answer.result()["inputRequests"]["pick_choice"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    for c in ['\u{202E}', '\u{200B}', '\u{2066}', '\u{0007}', '\u{FEFF}'] {
        assert!(!html.contains(c), "U+{:04X} on the page", u32::from(c));
    }
}

/// **Was broken.** Candidate ids are shown to the user unsanitized.
///
/// The label goes through `plain_label`, but the id does not: the approval page prints each
/// choice's id in `<strong>` right before its (clean) label (src/page.rs, the choices loop), and
/// a `plain_enum()` form shows only ids. An id carrying U+202E (RIGHT-TO-LEFT OVERRIDE) reverses
/// everything after it on the line, the cleaned label included, so the sanitizer is bypassed by
/// putting the payload in the id; zero-width characters make two ids look identical. Ids are
/// often built from names users chose (file names in a shared workspace).
///
/// Fixed: `Candidates::new` refuses such ids (`BadId`: a control, format or other
/// default-ignorable character, or whitespace other than a space), since an id is shown and sent
/// back exactly and cannot be cleaned. The call is refused, nothing shown.
#[tokio::test]
async fn candidate_ids_with_bidi_or_zero_width_characters_are_never_shown() {
    let spoof = "note-7\u{202E}exe.txt";
    let lookalike = "note-7\u{200B}";
    let candidates = vec![
        Candidate::labelled(spoof, "Groceries").with_version("v1"),
        Candidate::labelled(lookalike, "Groceries").with_version("v1"),
        Candidate::labelled("note-7", "Groceries").with_version("v1"),
    ];
    let (g, page) = picking(candidates.clone(), true);
    let answer = g.alice(&pick_call(json!(1), true)).await;
    let shown_on_page =
        match answer.result()["inputRequests"]["pick_choice"]["params"]["url"].as_str() {
            None => String::new(), // refused: fine
            Some(url) => visit(&page, "GET", url, Some("alice"), &[], "").await.2,
        };
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let plain = ToolPolicy::pick_one(move |_: Lookup| {
        let candidates = candidates.clone();
        async move { Ok::<_, PolicyError>(candidates) }
    })
    .input_key("pick_choice")
    .choice_field("id")
    .plain_enum();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
        .tool("pick", plain)
        .build();
    let f = Fixture::new(layer, notes, clock, store);
    let form = f
        .alice(&pick_call(json!(1), false))
        .await
        .json()
        .to_string();
    let form: Value = serde_json::from_str(&form).unwrap();
    let enumerated = form["result"]["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["enum"]
        .to_string();
    let enumerated: Value = serde_json::from_str(&enumerated).unwrap();
    let in_enum = enumerated
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|id| id.contains('\u{202E}') || id.contains('\u{200B}'));
    assert!(
        !shown_on_page.contains('\u{202E}') && !shown_on_page.contains('\u{200B}') && !in_enum,
        "ids with bidi/zero-width characters shown: page has RLO: {}, ZWSP: {}; plain enum: {enumerated}",
        shown_on_page.contains('\u{202E}'),
        shown_on_page.contains('\u{200B}'),
    );
}

// =============================================================================================
// 7. Oversized queued arguments.
// =============================================================================================

/// The arguments of a queued `notes_delete` whose JSON is exactly `size` bytes.
fn arguments_of_size(size: usize) -> Value {
    let mut arguments = json!({"workspaceUri": PERSONAL, "title": "Groceries", "padding": ""});
    let base = serde_json::to_vec(&arguments).unwrap().len();
    arguments["padding"] = json!("x".repeat(size - base));
    assert_eq!(serde_json::to_vec(&arguments).unwrap().len(), size);
    arguments
}

/// **Was broken.** "Oversized arguments refused before the form" is checked on the arguments without
/// the chosen id, and again at accept on the arguments *with* it.
///
/// `challenge` (src/driver.rs) calls `check_grant_arguments(&confirmed_arguments(call, None))`;
/// `issue_grant` calls it on `confirmed_arguments(call, Some(chosen))`, where `select_into` has
/// written the chosen id in (up to `MAX_CANDIDATE_ID_LEN` bytes plus the field). Arguments a few
/// bytes under the 64 KiB limit pass the first check, the user is shown the form and accepts,
/// and the accept is refused `arguments_too_large`: a confirmation asked for a call that could
/// never be queued. (Nothing is spent, but no answer to that form can ever succeed.)
///
/// Fixed: the challenge checks the largest arguments any answer can produce (the candidate id
/// longest in JSON written into `select_into`), so a form is shown only when every choice can be
/// queued.
#[tokio::test]
async fn queued_arguments_no_choice_fits_get_no_form() {
    let (f, _, _) = crate::common::queued::queued();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete", "arguments": arguments_of_size(64 * 1024 - 4)}});
    let first = f.alice(&call).await;
    if first.error()["data"]["reason"] == "arguments_too_large" {
        return; // refused before the form: right
    }
    let state = first.state();
    let retry = retry(call, json!(2), &state, accept("note-14"));
    let answer = f.alice(&retry).await;
    assert!(
        answer.json().get("error").is_none(),
        "a form was shown for a call that cannot be queued; accepting it got {}",
        answer.json()["error"]
    );
}

/// Regression: arguments over the limit are refused on the first call, no form.
#[tokio::test]
async fn holds_queued_arguments_over_the_limit_get_no_form() {
    let (f, _, _) = crate::common::queued::queued();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete", "arguments": arguments_of_size(64 * 1024 + 1)}});
    let first = f.alice(&call).await;
    assert_eq!(
        first.error()["data"]["reason"],
        "arguments_too_large",
        "{}",
        first.json()
    );
}

// =============================================================================================
// 8. MRTR: unknown members ignored; an answer that does not answer the form is asked again.
// =============================================================================================

/// The form of an `input_required` answer without its (fresh) state.
fn form_of(answer: &Answer) -> Value {
    let mut result = answer.result();
    assert_eq!(result["resultType"], "input_required", "{}", answer.json());
    result.as_object_mut().unwrap().remove("requestState");
    result
}

/// Choices that were not offered — a note of the same principal with another title, a note in
/// a workspace she may use but did not name, another principal's note, one that does not exist —
/// are all asked again with the identical form: nothing tells the client which ids exist. Nothing
/// is spent, and the original state still accepts an offered choice, once.
#[tokio::test]
async fn holds_a_choice_not_offered_is_asked_again_with_no_oracle_and_nothing_spent() {
    let f = fixture();
    let first = f.alice(&delete_call(json!(1), "Groceries")).await;
    let state = first.state();
    let expected = form_of(&first);
    for (n, choice) in ["note-20", "note-30", "note-99", "NOTE-7", "note-7 ", ""]
        .into_iter()
        .enumerate()
    {
        let again = f.accept(&state, json!(10 + n), choice).await;
        assert_eq!(form_of(&again), expected, "{choice:?}");
    }
    // Content missing, confirm missing: asked again too.
    for (n, response) in [
        json!({"delete_choice":{"action":"accept"}}),
        json!({"delete_choice":{"action":"accept","content":null}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7"}}}),
    ]
    .into_iter()
    .enumerate()
    {
        let again = f.alice(&answered(&state, json!(20 + n), response)).await;
        assert_eq!(form_of(&again), expected);
    }
    assert_eq!(f.seen.count(), 0);
    let done = f.accept(&state, json!(30), "note-7").await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
    let replay = f.accept(&state, json!(31), "note-3").await;
    assert_eq!(replay.error()["code"], -32602, "{}", replay.json());
}

/// Members the form did not ask for are ignored — and never reach the handler: content that
/// also names `title` and `workspaceUri` (what the user confirmed is Groceries in personal)
/// does not change the forwarded arguments.
#[tokio::test]
async fn holds_extra_answer_members_never_reach_the_forwarded_call() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    let response = json!({"delete_choice":{"action":"accept","extra":{"note_id":"note-30"},
        "content":{"note_id":"note-7","confirm":true,"title":"Taxes","workspaceUri":TEAM,
                   "arguments":{"note_id":"note-30"}}},
        "other_key":{"action":"accept","content":{"note_id":"note-30","confirm":true}}});
    let done = f.alice(&answered(&state, json!(2), response)).await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
    let forwarded = f.seen.last().json();
    assert_eq!(
        forwarded["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "title": "Groceries", "note_id": "note-7"})
    );
    assert_eq!(
        f.seen.last().confirmed.unwrap().chosen.as_deref(),
        Some("note-7")
    );
}

/// Between the form and the answer the offered note is edited: the answer is not asked again
/// with the old form (the choice was offered), it is refused by the revalidation, and a choice
/// that was not offered but now matches (note-20 renamed to Groceries) is asked again, never run.
#[tokio::test]
async fn holds_records_changed_between_form_and_answer_never_run() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    f.notes.replace("note-20", PERSONAL, "Groceries");
    let again = f.accept(&state, json!(2), "note-20").await;
    assert_eq!(
        again.result()["resultType"],
        "input_required",
        "{}",
        again.json()
    );
    f.notes.edit("note-7");
    let refused = f.accept(&state, json!(3), "note-7").await;
    assert_eq!(f.seen.count(), 0, "{}", refused.json());
}

// =============================================================================================
// 9. The demo's tasks across instances.
// =============================================================================================

/// Bob, on the instance that runs alice's task and on another one, asks about and cancels it
/// under every spelling of its id he can make up: the real id, its grant id with another
/// suffix, in upper-case hex, without the suffix, with an extra dot, and a random grant id.
/// Every answer is the same "unknown task" (code and message, up to the id echoed back): he
/// cannot learn whether alice's grant exists, and her purge still runs exactly once.
#[tokio::test]
async fn holds_forged_task_ids_tell_bob_nothing_and_stop_nothing() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let (grant, local) = task.split_once('.').expect("<grant>.<uuid>");
    assert_eq!(grant.len(), 32, "{task}");
    let random = GrantId::random().to_string();
    let forged = [
        task.clone(),
        format!("{grant}.x"),
        format!("{grant}.{local}.extra"),
        format!("{}.{local}", grant.to_uppercase()),
        grant.to_owned(),
        format!("{grant}."),
        format!(".{local}"),
        format!("{random}.{local}"),
        format!("{random}.x"),
    ];
    for at in [&first, &second] {
        let bob = task_client(at, "bob-token").await;
        for id in &forged {
            let seen = get_task(&bob, id).await.unwrap_err();
            let stopped = cancel_task(&bob, id).await.unwrap_err();
            for (code, message) in [seen, stopped] {
                assert_eq!(code, -32602, "{id}: {message}");
                assert_eq!(
                    message.replace(id.as_str(), "<id>"),
                    "unknown task: <id>",
                    "{id}"
                );
            }
        }
    }
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(first.notes_in("personal"), ["note-1.md", "note-2.md"]);
}

/// Alice asks about her own task under malformed spellings (upper-case hex, no suffix, an
/// empty grant part) on another instance: unknown, never someone else's grant and never a
/// crash; under the exact id she gets the task.
#[tokio::test]
async fn holds_malformed_task_ids_are_unknown_even_to_their_owner() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let (grant, local) = task.split_once('.').unwrap();
    for id in [
        format!("{}.{local}", grant.to_uppercase()),
        grant.to_owned(),
        format!(".{local}"),
        format!("+{}.{local}", &grant[1..]),
        format!("{} .{local}", &grant[..31]),
        String::new(),
        format!("{grant}\u{0}.{local}"),
    ] {
        let (code, _) = get_task(&alice_there, &id).await.unwrap_err();
        assert_eq!(code, -32602, "{id:?}");
    }
    let seen = get_task(&alice_there, &task).await.unwrap();
    assert_eq!(seen["taskId"], json!(task), "{seen}");
    settled(&alice, &task).await;
}

/// Three instances: the task runs on the first; alice cancels it on the third and asks about it
/// on the second. Cancelled everywhere it is asked from the grant, and the purge never runs.
#[tokio::test]
async fn holds_a_cancel_on_a_third_instance_stops_the_purge() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, Arc::clone(&grants)).await;
    let third = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let alice_third = task_client(&third, "alice-token").await;
    cancel_task(&alice_third, &task).await.expect("cancel");
    // Twice: idempotent.
    cancel_task(&alice_third, &task)
        .await
        .expect("cancel again");
    let alice_second = task_client(&second, "alice-token").await;
    let there = settled(&alice_second, &task).await;
    assert_eq!(there["status"], "cancelled", "{there}");
    settled(&alice, &task).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
}

/// Cancelling after the purge completed (on the instance that ran it, and on another one)
/// changes nothing: the task still reads completed on both, and no grant is "revoked" after
/// the fact.
#[tokio::test]
async fn holds_a_cancel_after_completion_changes_nothing() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let _ = cancel_task(&alice_there, &task).await;
    let _ = cancel_task(&alice, &task).await;
    let here = get_task(&alice, &task).await.unwrap();
    let there = get_task(&alice_there, &task).await.unwrap();
    assert_eq!(here["status"], "completed", "{here}");
    assert_eq!(there["status"], "completed", "{there}");
}

/// **Was broken (spec, low).** The same task reads differently on two instances when the purge is
/// refused.
///
/// A note of the confirmed set is edited before the task runs: on the instance that runs it the
/// task is `completed` with an `isError: true` result (the tool refused), as the Tasks extension
/// says ("`failed` is reserved for JSON-RPC errors"); on every other instance `remote_task`
/// (demo/src/queue.rs) maps `GrantState::Failed` to `TaskPayload::Failed`, so the
/// same task id reads `failed`. A client that polls whichever instance its load balancer picks
/// sees the task change status.
///
/// Fixed: the demo maps `Failed` (and `Expired`) to `completed` with an `isError: true` result,
/// the shape the running instance reports.
#[tokio::test]
async fn a_refused_purge_reads_the_same_on_every_instance() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let path = first.note_path("personal", "note-14");
    std::fs::write(
        &path,
        std::fs::read_to_string(&path).unwrap() + "\nand coffee",
    )
    .unwrap();
    let here = settled(&alice, &task).await;
    assert_eq!(here["result"]["isError"], true, "{here}");
    let there = settled(&alice_there, &task).await;
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
    assert_eq!(
        there["status"], here["status"],
        "here: {here}\nthere: {there}"
    );
}

/// **Was broken (liveness, restart).** A task whose grant can never run reads `working` forever on
/// every other instance.
///
/// The instance that held the task restarts (rmcp's tasks are in-process: the task is gone) and
/// the grant is never begun; past its expiry it can never run. `Grants::state`
/// (src/grant/worker.rs) returns the state *as stored* — still `Granted`, since only a `begin`
/// marks a grant expired — and `remote_task` (demo/src/queue.rs) maps anything
/// not final to `working`. A client polling another instance is told "working" until the record
/// is pruned, then "unknown task": it never learns the purge it confirmed did not happen.
///
/// Fixed: `Grants::state` reports the effective state by the grants' clock (`Expired` for a
/// `Granted` grant past its expiry, or an `Executing` one past its lease and its expiry;
/// `Revoked` for a `Revoking` one past its lease).
#[tokio::test]
async fn a_task_whose_grant_expired_reads_finished_elsewhere() {
    let (_dir, store) = notes_store();
    let grants: Arc<dyn GrantStore> = Arc::new(FaultyGrants::new(
        MemoryGrantStore::new(),
        Faults {
            worker_gone: true,
            ..Faults::default()
        },
    ));
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    // The first instance's own task gives up (its worker could not begin the grant).
    let here = settled(&alice, &task).await;
    assert_eq!(here["result"]["isError"], true, "{here}");
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
    let there = get_task(&alice_there, &task).await.expect("tasks/get");
    assert_ne!(
        there["status"], "working",
        "the grant is past its expiry and can never run, yet the task reads {there}"
    );
}

// =============================================================================================
// 2. The demo's sign-in and page refusals.
// =============================================================================================

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Origin spellings that are not exactly the server's own: trailing slash, upper case, default
/// port spelled out, `localhost` for `127.0.0.1`, a path, two Origin headers (one right), and a
/// right Origin with `Sec-Fetch-Site` other than same-origin. None signs in, none signs out.
#[tokio::test]
async fn holds_signin_and_signout_take_the_exact_origin_only() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let base = demo.base.clone();
    let port = base.rsplit(':').next().unwrap().to_owned();
    let wrong: Vec<Vec<(&str, String)>> = vec![
        vec![("origin", format!("{base}/"))],
        vec![("origin", base.to_uppercase())],
        vec![("origin", format!("http://localhost:{port}"))],
        vec![("origin", format!("{base}/signin"))],
        vec![("origin", format!("https://127.0.0.1:{port}"))],
        vec![("origin", "null".to_owned()), ("origin", base.clone())],
        vec![("origin", base.clone()), ("origin", base.clone())],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "same-site".to_owned()),
        ],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "none".to_owned()),
        ],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "SAME-ORIGIN".to_owned()),
        ],
        vec![("sec-fetch-site", "cross-site".to_owned())],
    ];
    for headers in &wrong {
        let mut request = no_redirects()
            .post(format!("{base}/signin"))
            .header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let response = request.body("token=bob-token&next=").send().await.unwrap();
        assert!(
            response.status() == 403 && response.headers().get("set-cookie").is_none(),
            "{headers:?}: {}",
            response.status()
        );
        assert_eq!(
            response.headers()["x-content-type-options"],
            "nosniff",
            "{headers:?}"
        );
    }
    // A real session, then the same spellings on /signout: it survives them all.
    let signed_in = no_redirects()
        .post(format!("{base}/signin"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", base.as_str())
        .header("sec-fetch-site", "same-origin")
        .body("token=alice-token&next=")
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let session = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for headers in &wrong {
        let mut request = no_redirects()
            .post(format!("{base}/signout"))
            .header("cookie", session.as_str());
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 403, "{headers:?}");
    }
    // Still signed in: the page knows her (404 for an unknown approval, not 401).
    let page = no_redirects()
        .get(format!("{base}/confirm/{}", "0".repeat(32)))
        .header("cookie", session.as_str())
        .send()
        .await
        .unwrap();
    assert_ne!(page.status(), 401, "a refused sign-out ended the session");
}

/// **Was broken (hardening, low).** Every answer the demo's browser-facing routes give to a refused
/// or unroutable request should carry `nosniff` and `X-Frame-Options: DENY`, like its pages.
///
/// The guard's 403s in front of /signin and /signout and the 404 fallback do (#19). A method the
/// route does not serve does not: `GET /signout` and `PUT /signin` get axum's bare `405 Method
/// Not Allowed` (the `MethodRouter`s built in `app::app`, demo/src/app.rs, have no
/// method-not-allowed fallback), without CSP, `X-Frame-Options`, `nosniff` or `no-store`. The
/// body is empty, so the impact is small, but "every refusal carries the page headers" is not
/// true of the demo.
///
/// Fixed: the sign-in routes have a method fallback (`signin::method_not_allowed`) that answers
/// 405 with `Allow` and the pages' headers.
#[tokio::test]
async fn every_demo_refusal_carries_the_page_headers() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let base = demo.base.clone();
    let http = no_redirects();
    let cases = [
        ("POST", "/signin", Some("http://evil.example")),
        ("POST", "/signout", Some("http://evil.example")),
        ("GET", "/signin", Some("http://evil.example")),
        ("GET", "/nothing-here", None),
        ("GET", "/signout", None),
        ("PUT", "/signin", None),
    ];
    let mut missing = Vec::new();
    for (method, path, origin) in cases {
        let mut request = http.request(method.parse().unwrap(), format!("{base}{path}"));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        let headers = response.headers();
        let ok = headers.get("x-content-type-options").map(|v| v.as_bytes())
            == Some(b"nosniff".as_slice())
            && headers.get("x-frame-options").map(|v| v.as_bytes()) == Some(b"DENY".as_slice());
        if !ok {
            missing.push(format!("{method} {path} -> {}", response.status()));
        }
    }
    assert!(missing.is_empty(), "without the page headers: {missing:?}");
}

// =============================================================================================
// 10. Tool lists, listings, policy shapes.
// =============================================================================================

/// `when` with `select_into` is refused when the layer is built (not only by the macros): a
/// hurried developer adding a condition to a pick-one policy gets an error, not a layer that
/// forwards the client's own value in the argument the handler trusts.
#[test]
fn holds_when_with_select_into_is_a_build_error() {
    let notes = Notes::seeded();
    let policy = delete_policy(&notes).when(|_: Lookup| async { Ok::<_, PolicyError>(false) });
    let built = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", policy)
        .try_build();
    let error = built.expect_err("a build error");
    assert!(error.to_string().contains("select_into"), "{error}");
}

/// A layer built with the server's tool list refuses a call to a name in no list — also when the
/// name differs from a listed one only by case, a trailing space, or a Unicode look-alike — and
/// the inner server never sees it.
#[tokio::test]
async fn holds_names_in_no_list_are_refused_however_they_are_spelt() {
    let seen = Recorder::default();
    let store = MemoryReplayStore::with_capacity(1_000);
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .audience("https://notes.example/mcp")
        .tool_list(json!([
            {"name": "notes_list", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
            {"name": "notes_wipe", "inputSchema": {"type": "object"}}
        ]))
        .replay_store(store)
        .confirm_destructive()
        .build();
    let svc = tower::Layer::layer(&layer, recording_inner(&seen));
    for name in [
        "Notes_list",
        "notes_list ",
        "notes_lіst", // Cyrillic i
        "notes_list\u{200B}",
        "notes_wipe2",
        "",
    ] {
        let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "_meta": meta(), "name": name, "arguments": {}}});
        let answer = send(&svc, post(&call, Some("alice"))).await;
        let json = answer.json();
        assert!(
            json.get("error").is_some(),
            "{name:?} was not refused: {json}"
        );
        assert_eq!(seen.count(), 0, "{name:?} reached the server");
    }
    let listed = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name": "notes_list", "arguments": {}}});
    send(&svc, post(&listed, Some("alice"))).await;
    assert_eq!(seen.count(), 1, "the listed read-only tool goes through");
}
