//! The attacks on standing approvals (the adversarial pass on #21) — the scope a later call is
//! matched by, the granting retry and its signed terms, the use count under races and across
//! instances and backends, restarts and key rotations, budgets and floods, the protocol gates on
//! a call that needs no form, the standing-approvals page, and the corners of the `remember`
//! answer.
//!
//! Each test is one attack, named `holds_…` and asserting the safe behaviour: a test that fails
//! is a finding. The doc comment of each says what it tries.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::StandingPage;
use mcp_confirm_pages::StandingPages as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http::StatusCode;
use mcp_confirm::clock::{ManualClock, SystemClock};
use mcp_confirm::store::standing::{
    MAX_STANDING_PER_PRINCIPAL, Standing, StandingId, StandingStore,
};
use mcp_confirm::store::{MemoryReplayStore, Nonce, PrincipalKey, StoreError};
use mcp_confirm::{ConfirmLayer, KeyRing, Lookup, Principal, StandingApprovals, ToolPolicy};
use serde_json::{Value, json};

use crate::backends::on_every_backend;
use crate::common::browser::{FORM_HEADERS, ORIGIN, csrf, page_as, visit};
use crate::common::*;

// =============================================================================================
// Fixtures.
// =============================================================================================

const KEY2: [u8; 32] = secret(0x22);
const PAGE: &str = "http://notes.example/standing";

/// The scope of a notes call: its workspace URI, as sent.
fn workspace(lookup: &Lookup) -> Option<String> {
    lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
}

fn delete_in(id: Value, ws: &str, title: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": ws, "title": title}}})
}

fn remembering(choice: &str, remember: Value) -> Value {
    json!({"delete_choice":{"action":"accept","content":{
        "note_id": choice, "confirm": true, "remember": remember}}})
}

fn add_note(notes: &Notes, id: &str, ws: &str, title: &str) {
    notes
        .0
        .lock()
        .unwrap()
        .insert(id.into(), (ws.into(), title.into()));
}

fn alice() -> Principal {
    Principal::new("alice")
}

/// A layer of `audience` signing with `keys`, on `store`, whose `notes_delete` offers a standing
/// approval of `uses` calls for `up_to`, scoped to the workspace URI.
fn layer_with(
    keys: KeyRing,
    audience: &str,
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
    uses: u32,
    up_to: Duration,
) -> ConfirmLayer {
    ConfirmLayer::builder(keys)
        .without_tool_list_unchecked()
        .audience(audience)
        .ttl(Duration::from_secs(300))
        .clock(clock.clone())
        .replay_store(store.clone())
        .standing_store(store.clone())
        .tool(
            "notes_delete",
            delete_policy(notes)
                .select_header("Note-Id")
                .standing(up_to, uses, workspace),
        )
        .build()
}

fn k1() -> KeyRing {
    KeyRing::single("k1", KEY).unwrap()
}

/// One deployment, one layer: (fixture, its standing approvals).
fn deployment(uses: u32) -> (Fixture, StandingApprovals) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = layer_with(
        k1(),
        "https://notes.example/mcp",
        &notes,
        &clock,
        &store,
        uses,
        Duration::from_secs(600),
    );
    let approvals = layer.standing_approvals().unwrap();
    (Fixture::new(layer, notes, clock, store), approvals)
}

/// Alice confirms note-7 among the personal Groceries and chooses the standing option.
async fn grant(f: &Fixture) -> Answer {
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    assert_asks(&first);
    let answer = f
        .alice(&retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            remembering("note-7", json!("standing")),
        ))
        .await;
    assert_ran(&answer);
    answer
}

fn is_asked(answer: &Answer) -> bool {
    answer.json()["result"]["resultType"] == "input_required"
}

fn ran(answer: &Answer) -> bool {
    answer.json()["result"]["content"][0]["text"] == "done by inner"
}

/// A layer on the system clock over `standing` (Redis, Postgres), with its own memory replay
/// store.
fn system_layer(
    audience: &str,
    notes: &Notes,
    standing: impl StandingStore,
    uses: u32,
) -> ConfirmLayer {
    ConfirmLayer::builder(k1())
        .without_tool_list_unchecked()
        .audience(audience)
        .ttl(Duration::from_secs(300))
        .clock(SystemClock::default())
        .replay_store(MemoryReplayStore::new())
        .standing_store(standing)
        .tool(
            "notes_delete",
            delete_policy(notes).standing(Duration::from_secs(600), uses, workspace),
        )
        .build()
}

fn system_fixture(layer: ConfirmLayer, notes: Notes) -> Fixture {
    let clock = ManualClock::new(now());
    Fixture::new(layer, notes, clock, MemoryReplayStore::new())
}

fn unique_audience() -> String {
    format!("https://attack21-{}.example/mcp", Nonce::random().to_hex())
}

// =============================================================================================
// 1. Scope widening through the arguments.
// =============================================================================================

mod demo_fixture {
    use super::*;
    use mcp_confirm::grant::MemoryGrantStore;
    use mcp_confirm_demo::{app, notes};

    pub(super) struct Demo {
        pub(super) url: String,
        pub(super) store: Arc<notes::NotesStore>,
        pub(super) http: reqwest::Client,
    }

    /// The demo deployment over in-memory notes, on 127.0.0.1.
    pub(super) async fn serve() -> Demo {
        let dir =
            std::env::temp_dir().join(format!("mcp-confirm-attack21-{}", Nonce::random().to_hex()));
        let store = Arc::new(notes::NotesStore::in_memory(&dir.join("data"), 0, 3).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = app::Options {
            keys: KeyRing::single("k1", secret(0x21)).unwrap(),
            audience: "https://notes-attack-21.example/mcp".into(),
            replay_store: None,
            grant_store: Arc::new(MemoryGrantStore::new()),
            public_url: format!("http://{addr}"),
            challenge_rate: app::ChallengeRate::Off,
            without_confirmation: false,
            audit_log: None,
            notifier: None,
        };
        let router = app::app(Arc::clone(&store), options);
        tokio::spawn(async move { axum::serve(listener, router).await });
        Demo {
            url: format!("http://{addr}/mcp"),
            store,
            http: reqwest::Client::new(),
        }
    }

    impl Demo {
        pub(super) async fn call(&self, token: &str, body: &Value) -> Value {
            crate::notes_http::post(&self.http, &self.url, token, body)
                .await
                .2
        }

        pub(super) fn titles(&self, ws: &str) -> Vec<String> {
            self.store
                .list(ws)
                .unwrap()
                .into_iter()
                .map(|n| n.title)
                .collect()
        }
    }
}

fn demo_delete(id: Value, ws: &str, title: &str) -> Value {
    crate::notes_http::tool_call(
        id,
        "notes_delete",
        json!({"workspaceUri": ws, "title": title}),
    )
}

fn demo_text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Alice confirms deleting one of the demo's personal Groceries notes and chooses the standing
/// option ("workspace personal").
async fn demo_grant(demo: &demo_fixture::Demo) {
    let personal = demo.store.workspace_uri("personal");
    let first = demo
        .call(
            "alice-token",
            &demo_delete(json!(1), &personal, "Groceries"),
        )
        .await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let words = first["result"]["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
        ["properties"]["remember"]["oneOf"][1]["title"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(words.contains("workspace personal"), "{words}");
    let state = first["result"]["requestState"].as_str().unwrap();
    let retry = crate::notes_http::answering(
        demo_delete(json!(2), &personal, "Groceries"),
        state,
        json!({"action":"accept","content":{"note_id":"note-3","confirm":true,"remember":"standing"}}),
    );
    let answer = demo.call("alice-token", &retry).await;
    assert!(demo_text(&answer).starts_with("Deleted note-3"), "{answer}");
}

/// With the demo's scope (the canonical workspace), every other spelling of the personal
/// workspace's URI deletes in personal only, and every spelling of another workspace (`..`,
/// `%2e%2e`, `%2E%2E`, a trailing slash, `localhost`, case, a path below, the data root itself,
/// encoded separators, a query) never runs without the form. A title that exists in both
/// workspaces is deleted only in the one covered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_no_spelling_of_a_workspace_uri_widens_the_demos_standing_scope() {
    let demo = demo_fixture::serve().await;
    demo_grant(&demo).await;
    let root = demo.store.root_path().display().to_string();
    for ws in ["personal", "team"] {
        demo.store.create(ws, "Dup", "in both", None).unwrap();
    }
    demo.store.create("team", "Team only", "t", None).unwrap();
    let team_before = demo.titles("team");

    // Another workspace (or none), however spelled: never without the form.
    let elsewhere = [
        format!("file://{root}/personal/../team"),
        format!("file://{root}/personal/%2e%2e/team"),
        format!("file://{root}/personal/%2E%2E/team"),
        format!("file://{root}/./team"),
        format!("file://localhost{root}/team/"),
        format!("file://{root}//team"),
        format!("file://{root}/Personal"),
        format!("file://{root}/PERSONAL"),
        format!("file://{root}/personal/.."),
        format!("file://{root}/personal/x"),
        format!("file://{root}/personal%2f..%2fteam"),
        format!("file://{root}/personal%252f..%252fteam"),
        format!("file://{root}/personal?../team"),
        format!("file://evil.example{root}/personal"),
        format!("file://{root}"),
    ];
    for (i, uri) in elsewhere.iter().enumerate() {
        for title in ["Dup", "Team only"] {
            let answer = demo
                .call("alice-token", &demo_delete(json!(100 + i), uri, title))
                .await;
            assert!(
                !demo_text(&answer).starts_with("Deleted"),
                "{uri} {title}: ran without a form: {answer}"
            );
        }
    }
    assert_eq!(demo.titles("team"), team_before, "nothing left the team");

    // The same workspace, spelled otherwise: runs (or asks), and only ever in personal.
    let same = [
        format!("file://localhost{root}/personal"),
        format!("file://{root}/personal/"),
        format!("file://{root}//personal"),
        format!("file://{root}/team/../personal"),
        format!("file://{root}/%70ersonal"),
        format!("FILE://{root}/personal"),
        format!("file:{root}/personal"),
        format!("file://{root}/personal/."),
    ];
    let mut covered = 0;
    for (i, uri) in same.iter().enumerate() {
        let title = format!("Solo {i}");
        demo.store.create("personal", &title, "p", None).unwrap();
        let answer = demo
            .call("alice-token", &demo_delete(json!(200 + i), uri, &title))
            .await;
        let text = demo_text(&answer);
        if text.starts_with("Deleted") {
            covered += 1;
            assert!(text.ends_with("from personal."), "{uri}: {text}");
            assert!(!demo.titles("personal").contains(&title), "{uri}");
        } else {
            assert_eq!(
                answer["result"]["resultType"], "input_required",
                "{uri}: {answer}"
            );
        }
    }
    assert_eq!(
        covered,
        same.len(),
        "every spelling of personal is one scope"
    );
    // The title in both: only personal's goes.
    let personal = demo.store.workspace_uri("personal");
    let answer = demo
        .call("alice-token", &demo_delete(json!(300), &personal, "Dup"))
        .await;
    assert!(demo_text(&answer).ends_with("from personal."), "{answer}");
    assert!(!demo.titles("personal").contains(&"Dup".to_owned()));
    assert_eq!(demo.titles("team"), team_before);
    // Bob, in the workspace he shares with alice: his own form.
    let team = demo.store.workspace_uri("team");
    let answer = demo
        .call("bob-token", &demo_delete(json!(301), &team, "Team only"))
        .await;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
}

/// Extra arguments in the demo (`note_id`, `workspace`, a differently cased `workspaceURI`)
/// steer nothing: under the standing approval the note deleted is the one the layer resolved in
/// the covered workspace, and the team's notes stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_extra_arguments_do_not_steer_a_standing_delete_in_the_demo() {
    let demo = demo_fixture::serve().await;
    demo_grant(&demo).await;
    let team = demo.store.workspace_uri("team");
    let personal = demo.store.workspace_uri("personal");
    let id = demo.store.create("personal", "Steer", "p", None).unwrap();
    let team_before = demo.titles("team");
    let body = crate::notes_http::tool_call(
        json!(10),
        "notes_delete",
        json!({"workspaceUri": personal, "title": "Steer", "note_id": "note-5",
               "workspaceURI": team, "workspace": "team", "id": "note-8"}),
    );
    let answer = demo.call("alice-token", &body).await;
    let text = demo_text(&answer);
    assert!(
        text.starts_with(&format!("Deleted {id} (Steer) from personal")),
        "{answer}"
    );
    assert_eq!(demo.titles("team"), team_before);
}

/// In the library fixture (`select_into("note_id")`, `select_header("Note-Id")`): a covered call
/// that names another note in `note_id`, in an `Mcp-Param-Note-Id` header, and a choice in
/// `inputResponses` is forwarded with exactly the scoped arguments plus the resolved id, the
/// header rewritten to it, the answers dropped, and a `Confirmed` for those arguments that names
/// the standing approval.
#[tokio::test]
async fn holds_the_forwarded_body_is_exactly_what_was_scoped_and_resolved() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let id = approvals.list(&alice()).await.unwrap()[0].id;
    let mut body = delete_in(json!(10), PERSONAL, "Taxes");
    body["params"]["arguments"]["note_id"] = json!("note-3");
    body["params"]["arguments"]["extra"] = json!({"workspaceUri": TEAM});
    body["params"]["inputResponses"] = remembering("note-14", json!("standing"));
    let mut request = post(&body, Some("alice"));
    request
        .headers_mut()
        .insert("mcp-param-note-id", "note-3".parse().unwrap());
    let answer = send(&f.svc, request).await;
    assert_ran(&answer);
    let seen = f.seen.last();
    let forwarded = seen.json();
    assert_eq!(
        forwarded["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "title": "Taxes", "note_id": "note-20",
               "extra": {"workspaceUri": TEAM}})
    );
    assert!(forwarded["params"].get("inputResponses").is_none());
    assert!(forwarded["params"].get("requestState").is_none());
    assert_eq!(seen.headers["mcp-param-note-id"], "note-20");
    assert_eq!(seen.headers.get_all("mcp-param-note-id").iter().count(), 1);
    let confirmed = seen.confirmed.unwrap();
    assert_eq!(confirmed.chosen.as_deref(), Some("note-20"));
    assert_eq!(confirmed.standing, Some(id));
    assert!(confirmed.is_for("notes_delete", Some(&forwarded["params"]["arguments"])));
}

/// Duplicate keys in the arguments (the scope once for a covered workspace, once for another, in
/// either order) are refused before anything is looked up: nothing runs, no use is spent.
#[tokio::test]
async fn holds_duplicate_argument_keys_are_refused_and_spend_nothing() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let ran_before = f.seen.count();
    for (a, b) in [(TEAM, PERSONAL), (PERSONAL, TEAM)] {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"_meta":{},"name":"notes_delete","arguments":{{"workspaceUri":"{a}","title":"Taxes","workspaceUri":"{b}"}}}}}}"#,
            meta()
        );
        let answer = send_text(&f, text).await;
        assert_eq!(answer.error()["code"], -32600, "{:?}", answer.bytes);
    }
    // An escaped spelling of the same key is the same key.
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"_meta":{},"name":"notes_delete","arguments":{{"workspaceUri":"{TEAM}","title":"Taxes","workspace\u0055ri":"{PERSONAL}"}}}}}}"#,
        meta()
    );
    let answer = send_text(&f, text).await;
    assert_eq!(answer.error()["code"], -32600, "{:?}", answer.bytes);
    assert_eq!(f.seen.count(), ran_before);
    assert_eq!(approvals.list(&alice()).await.unwrap()[0].used, 0);
}

// =============================================================================================
// 2. Replay and forged terms.
// =============================================================================================

/// The granting retry sent again (same id, a new id, and two at once) after it succeeded grants
/// no second standing approval, resets no use count and runs nothing.
#[tokio::test]
async fn holds_a_replayed_granting_retry_grants_nothing_and_runs_nothing() {
    let (f, approvals) = deployment(5);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    let state = first.state();
    let granting = |id: Value| {
        retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            id,
            &state,
            remembering("note-7", json!("standing")),
        )
    };
    assert_ran(&f.alice(&granting(json!(2))).await);
    let listed = approvals.list(&alice()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_ran(&f.alice(&delete_in(json!(3), PERSONAL, "Taxes")).await);
    let ran_before = f.seen.count();
    for id in [json!(2), json!(4), json!("x")] {
        let answer = f.alice(&granting(id)).await;
        assert!(!ran(&answer) && !is_asked(&answer), "{:?}", answer.bytes);
        assert_eq!(answer.error()["code"], -32602, "{:?}", answer.bytes);
    }
    assert_eq!(f.seen.count(), ran_before);
    let after = approvals.list(&alice()).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, listed[0].id, "not replaced");
    assert_eq!(after[0].used, 1, "not reset");
}

/// Two copies of one granting retry at once: exactly one runs, exactly one approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_two_granting_retries_at_once_run_once_and_grant_once() {
    let (f, approvals) = deployment(5);
    let f = Arc::new(f);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    let state = first.state();
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let f = Arc::clone(&f);
            let body = retry(
                delete_in(json!(1), PERSONAL, "Groceries"),
                json!(100 + i),
                &state,
                remembering("note-7", json!("standing")),
            );
            tokio::spawn(async move { f.alice(&body).await })
        })
        .collect();
    let mut ran_count = 0;
    for racer in racers {
        if ran(&racer.await.unwrap()) {
            ran_count += 1;
        }
    }
    assert_eq!(ran_count, 1);
    assert_eq!(f.seen.count(), 1);
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
}

/// A state tampered anywhere (every byte of its body and tag flipped in turn: the standing
/// terms' scope digest, seconds and uses among them) is refused: nothing runs, nothing is
/// granted.
#[tokio::test]
async fn holds_a_tampered_state_claims_no_standing_terms() {
    let (f, approvals) = deployment(3);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    let state = first.state();
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let raw = engine
        .decode(state.strip_prefix("mcpc1.").unwrap())
        .unwrap();
    for at in 0..raw.len() {
        for flip in [0x01u8, 0x80] {
            let mut forged = raw.clone();
            forged[at] ^= flip;
            let token = format!("mcpc1.{}", engine.encode(&forged));
            let answer = f
                .alice(&retry(
                    delete_in(json!(1), PERSONAL, "Groceries"),
                    json!(2),
                    &token,
                    remembering("note-7", json!("standing")),
                ))
                .await;
            assert!(!ran(&answer), "byte {at} ^ {flip:#x}: {:?}", answer.bytes);
        }
    }
    assert_eq!(f.seen.count(), 0);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    // The genuine state still works, and grants the policy's terms.
    assert_ran(
        &f.alice(&retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &state,
            remembering("note-7", json!("standing")),
        ))
        .await,
    );
    let listed = approvals.list(&alice()).await.unwrap();
    assert_eq!((listed.len(), listed[0].uses), (1, 3));
}

/// A state offered by a layer whose policy allowed 3 uses for 10 minutes, answered on a layer of
/// the same deployment whose policy now allows 1 use for 1 minute, grants 1 use for 1 minute;
/// and the other way round, the state's smaller terms are kept. Never more than either says.
#[tokio::test]
async fn holds_a_state_never_grants_more_than_the_policy_now_allows() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let wide = layer_with(
        k1(),
        "https://notes.example/mcp",
        &notes,
        &clock,
        &store,
        3,
        Duration::from_secs(600),
    );
    let narrow = layer_with(
        k1(),
        "https://notes.example/mcp",
        &notes,
        &clock,
        &store,
        1,
        Duration::from_secs(60),
    );
    let approvals = narrow.standing_approvals().unwrap();
    let wide = Fixture::new(wide, notes.clone(), clock.clone(), store.clone());
    let narrow = Fixture::new(narrow, notes.clone(), clock.clone(), store.clone());
    for (offering, answering) in [(&wide, &narrow), (&narrow, &wide)] {
        approvals.revoke(&alice(), None).await.unwrap();
        let first = offering
            .alice(&delete_in(json!(1), PERSONAL, "Groceries"))
            .await;
        let answer = answering
            .alice(&retry(
                delete_in(json!(1), PERSONAL, "Groceries"),
                json!(2),
                &first.state(),
                remembering("note-7", json!("standing")),
            ))
            .await;
        assert_ran(&answer);
        notes.edit("note-7");
        let listed = approvals.list(&alice()).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].uses, 1);
        assert_eq!(
            listed[0]
                .expires_at
                .duration_since(listed[0].granted_at)
                .unwrap(),
            Duration::from_secs(60)
        );
        assert_ran(&wide.alice(&delete_in(json!(3), PERSONAL, "Taxes")).await);
        assert_asks(&wide.alice(&delete_in(json!(4), PERSONAL, "Taxes")).await);
    }
}

// =============================================================================================
// 3. Racing the last use.
// =============================================================================================

async fn race(f: Arc<Fixture>, racers: usize) -> (usize, usize) {
    let before = f.seen.count();
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let f = Arc::clone(&f);
            tokio::spawn(async move {
                f.alice(&delete_in(json!(1000 + i), PERSONAL, "Taxes"))
                    .await
            })
        })
        .collect();
    let (mut ran_count, mut asked) = (0, 0);
    for task in tasks {
        let answer = task.await.unwrap();
        if ran(&answer) {
            ran_count += 1;
        } else {
            assert_asks(&answer);
            asked += 1;
        }
    }
    assert_eq!(f.seen.count() - before, ran_count);
    (ran_count, asked)
}

/// 24 concurrent covered calls against 3 uses, through one layer on `store`: exactly 3 run.
async fn racing_calls_spend_exactly_the_uses(store: impl StandingStore + Clone) {
    let notes = Notes::seeded();
    let audience = unique_audience();
    let a = system_fixture(
        system_layer(&audience, &notes, store.clone(), 3),
        notes.clone(),
    );
    grant(&a).await;
    assert_eq!(race(Arc::new(a), 24).await, (3, 21));
}

on_every_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    racing_calls_spend_exactly_the_uses;
    memory => holds_racing_calls_spend_exactly_the_uses_on_memory,
    redis => holds_racing_calls_spend_exactly_the_uses_on_redis,
    postgres => holds_racing_calls_spend_exactly_the_uses_on_postgres,
}

// =============================================================================================
// 4. Instances, restarts.
// =============================================================================================

async fn revoke_elsewhere_then_use(store: impl StandingStore + Clone) {
    let notes = Notes::seeded();
    let audience = unique_audience();
    let a_layer = system_layer(&audience, &notes, store.clone(), 10);
    let b_layer = system_layer(&audience, &notes, store.clone(), 10);
    let b_approvals = b_layer.standing_approvals().unwrap();
    let a = system_fixture(a_layer, notes.clone());
    let b = system_fixture(b_layer, notes.clone());
    grant(&a).await;
    assert_ran(&b.alice(&delete_in(json!(10), PERSONAL, "Taxes")).await);
    assert_eq!(b_approvals.revoke(&alice(), None).await.unwrap(), 1);
    assert_asks(&a.alice(&delete_in(json!(11), PERSONAL, "Taxes")).await);
    assert_asks(&b.alice(&delete_in(json!(12), PERSONAL, "Taxes")).await);
    assert!(b_approvals.list(&alice()).await.unwrap().is_empty());
}

on_every_backend! {
    /// Revoked on one instance, used on another, sharing one store: the form.
    #[tokio::test]
    revoke_elsewhere_then_use;
    redis => holds_a_revocation_on_one_instance_stops_the_next_use_on_another_redis,
    postgres => holds_a_revocation_on_one_instance_stops_the_next_use_on_another_postgres,
}

/// A restart with the memory store (a new `MemoryReplayStore`): no approval is carried over, and
/// a state issued before the restart, answered "standing" after it, is refused and grants
/// nothing.
#[tokio::test]
async fn holds_a_memory_store_restart_carries_no_standing_approval_over() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let before = MemoryReplayStore::with_clock(10_000, clock.clone());
    let old = layer_with(
        k1(),
        "https://notes.example/mcp",
        &notes,
        &clock,
        &before,
        10,
        Duration::from_secs(600),
    );
    let old = Fixture::new(old, notes.clone(), clock.clone(), before);
    grant(&old).await;
    // Groceries is ambiguous: the form, even under the standing approval.
    let pending = old.alice(&delete_in(json!(5), PERSONAL, "Groceries")).await;
    assert_ran(&old.alice(&delete_in(json!(6), PERSONAL, "Taxes")).await);

    let after = MemoryReplayStore::with_clock(10_000, clock.clone());
    let new = layer_with(
        k1(),
        "https://notes.example/mcp",
        &notes,
        &clock,
        &after,
        10,
        Duration::from_secs(600),
    );
    let approvals = new.standing_approvals().unwrap();
    let new = Fixture::new(new, notes.clone(), clock.clone(), after);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    assert_asks(&new.alice(&delete_in(json!(7), PERSONAL, "Taxes")).await);
    let answer = new
        .alice(&retry(
            delete_in(json!(5), PERSONAL, "Groceries"),
            json!(8),
            &pending.state(),
            remembering("note-3", json!("standing")),
        ))
        .await;
    assert!(!ran(&answer), "{:?}", answer.bytes);
    assert_eq!(new.seen.count(), 0);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
}

// =============================================================================================
// 5. Other principals, audiences, keys.
// =============================================================================================

/// Bob, and alice in another deployment on the same store and keys, are not covered by alice's
/// approval; nor is another tool with the same scope function.
#[tokio::test]
async fn holds_another_principal_audience_or_tool_is_not_covered() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let build = |audience: &str| {
        ConfirmLayer::builder(k1())
            .without_tool_list_unchecked()
            .audience(audience)
            .clock(clock.clone())
            .replay_store(store.clone())
            .standing_store(store.clone())
            .tool(
                "notes_delete",
                delete_policy(&notes).standing(Duration::from_secs(600), 10, workspace),
            )
            .tool(
                "notes_erase",
                delete_policy(&notes).input_key("delete_choice").standing(
                    Duration::from_secs(600),
                    10,
                    workspace,
                ),
            )
            .build()
    };
    let a = Fixture::new(
        build("https://notes.example/mcp"),
        notes.clone(),
        clock.clone(),
        store.clone(),
    );
    let other = Fixture::new(
        build("https://other.example/mcp"),
        notes.clone(),
        clock.clone(),
        store.clone(),
    );
    grant(&a).await;
    let ran_before = a.seen.count();
    // Bob: a workspace he may use, a title that resolves to one note.
    add_note(&notes, "note-41", TEAM, "Team solo");
    assert_asks(
        &send(
            &a.svc,
            post(&delete_in(json!(10), TEAM, "Team solo"), Some("bob")),
        )
        .await,
    );
    // Bob naming alice's workspace: no scope of his.
    let bob = send(
        &a.svc,
        post(&delete_in(json!(11), PERSONAL, "Taxes"), Some("bob")),
    )
    .await;
    assert!(!ran(&bob), "{:?}", bob.bytes);
    // Alice in the other deployment.
    assert_asks(&other.alice(&delete_in(json!(12), PERSONAL, "Taxes")).await);
    // Alice, another tool.
    let mut erase = delete_in(json!(13), PERSONAL, "Taxes");
    erase["params"]["name"] = json!("notes_erase");
    assert_asks(&a.alice(&erase).await);
    assert_eq!(a.seen.count(), ran_before);
    assert_eq!(other.seen.count(), 0);
    // A principal whose subject merely starts like alice's.
    let alicex = send(
        &a.svc,
        post(&delete_in(json!(14), PERSONAL, "Taxes"), Some("alice\0")),
    )
    .await;
    assert!(!ran(&alicex));
}

/// After a key rotation (every instance signing with k2, k1 kept to verify), an approval
/// granted under k1 stays its holder's, as a pending browser approval does: it covers alice's
/// next call, never bob's. Once k1 leaves the ring, it covers nothing.
#[tokio::test]
async fn holds_a_key_rotation_keeps_an_approval_its_holders_and_no_one_elses() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = |keys: KeyRing| {
        let layer = layer_with(
            keys,
            "https://notes.example/mcp",
            &notes,
            &clock,
            &store,
            10,
            Duration::from_secs(600),
        );
        Fixture::new(layer, notes.clone(), clock.clone(), store.clone())
    };
    let old = layer(k1());
    grant(&old).await;
    let new = layer(KeyRing::new([("k2", KEY2), ("k1", KEY)]).unwrap());
    let answer = new.alice(&delete_in(json!(10), PERSONAL, "Taxes")).await;
    assert!(ran(&answer), "alice's own approval, after the rotation");
    let bob = send(
        &new.svc,
        post(&delete_in(json!(11), TEAM, "Groceries"), Some("bob")),
    )
    .await;
    assert!(!ran(&bob));
    let retired = layer(KeyRing::single("k2", KEY2).unwrap());
    assert_asks(
        &retired
            .alice(&delete_in(json!(12), PERSONAL, "Taxes"))
            .await,
    );
}

/// Two instances of one deployment in the middle of a rolling key rotation, on one store: A
/// still signs with k1, B already with k2, and both rings hold both keys. (A, B, B's standing
/// approvals.)
fn rolling_rotation() -> (Fixture, Fixture, StandingApprovals) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let instance = |keys| {
        let layer = layer_with(
            keys,
            "https://notes.example/mcp",
            &notes,
            &clock,
            &store,
            10,
            Duration::from_secs(600),
        );
        let approvals = layer.standing_approvals().unwrap();
        let fixture = Fixture::new(layer, notes.clone(), clock.clone(), store.clone());
        (fixture, approvals)
    };
    let (a, _) = instance(KeyRing::new([("k1", KEY), ("k2", KEY2)]).unwrap());
    let (b, b_approvals) = instance(KeyRing::new([("k2", KEY2), ("k1", KEY)]).unwrap());
    (a, b, b_approvals)
}

/// Two instances of one deployment during a key rotation (A still signs with k1, B already with
/// k2; both rings hold both keys, as a rolling rotation has them). Alice grants on A, then
/// revokes all her standing approvals from B (its API, as its page does). The next call on A
/// must get the form.
#[tokio::test]
async fn holds_a_revocation_during_a_key_rotation_reaches_approvals_granted_under_the_old_key() {
    let (a, _, b_approvals) = rolling_rotation();
    grant(&a).await;
    let listed_on_b = b_approvals.list(&alice()).await.unwrap().len();
    let revoked = b_approvals.revoke(&alice(), None).await.unwrap();
    let answer = a.alice(&delete_in(json!(10), PERSONAL, "Taxes")).await;
    assert!(
        !ran(&answer),
        "revoked from B (which listed {listed_on_b} and revoked {revoked}), still used on A"
    );
}

/// The same rolling rotation, the other way: alice is asked on A (state signed with k1) and
/// answers "standing" through B. The approval she just granted must be on B's list, where she
/// would revoke it.
#[tokio::test]
async fn holds_an_approval_granted_on_a_rotated_instance_is_listed_there() {
    let (a, b, b_approvals) = rolling_rotation();
    let first = a.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    assert_ran(
        &b.alice(&retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            remembering("note-7", json!("standing")),
        ))
        .await,
    );
    let covered_on_a = ran(&a.alice(&delete_in(json!(3), PERSONAL, "Taxes")).await);
    assert_eq!(
        b_approvals.list(&alice()).await.unwrap().len(),
        1,
        "granted through B, not listed on B (covered on A: {covered_on_a})"
    );
}

// =============================================================================================
// 6. Floods and budgets.
// =============================================================================================

fn wipe_call(id: Value, scope: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(), "name":"wipe", "arguments":{"scope": scope}}})
}

fn wipe_standing() -> Value {
    json!({"wipe_ok":{"action":"accept","content":{"confirm":true,"remember":"standing"}}})
}

/// A confirm-only tool `wipe` whose standing approvals are scoped by its `scope` argument.
fn wipe_fixture() -> (Fixture, StandingApprovals) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = ConfirmLayer::builder(k1())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
        .standing_store(store.clone())
        .without_challenge_rate_limit()
        .tool(
            "wipe",
            ToolPolicy::confirm_only().input_key("wipe_ok").standing(
                Duration::from_secs(600),
                5,
                |l: &Lookup| l.arguments["scope"].as_str().map(str::to_owned),
            ),
        )
        .build();
    let approvals = layer.standing_approvals().unwrap();
    (Fixture::new(layer, notes, clock, store), approvals)
}

async fn wipe_grant(f: &Fixture, who: &str, scope: &str) -> Answer {
    let first = send(&f.svc, post(&wipe_call(json!(1), scope), Some(who))).await;
    assert_asks(&first);
    send(
        &f.svc,
        post(
            &retry(
                wipe_call(json!(1), scope),
                json!(2),
                &first.state(),
                wipe_standing(),
            ),
            Some(who),
        ),
    )
    .await
}

/// Alice grants past MAX_STANDING_PER_PRINCIPAL: the extra grant is refused gracefully (its call
/// still runs, the next call of that scope gets the form), her earlier ones still cover, and
/// bob's budget is his own.
#[tokio::test]
async fn holds_a_standing_flood_is_refused_gracefully_per_principal() {
    let (f, approvals) = wipe_fixture();
    for i in 0..MAX_STANDING_PER_PRINCIPAL {
        assert_ran(&wipe_grant(&f, "alice", &format!("s{i}")).await);
    }
    assert_eq!(
        approvals.list(&alice()).await.unwrap().len(),
        MAX_STANDING_PER_PRINCIPAL
    );
    let extra = format!("s{MAX_STANDING_PER_PRINCIPAL}");
    assert_ran(&wipe_grant(&f, "alice", &extra).await);
    assert_eq!(
        approvals.list(&alice()).await.unwrap().len(),
        MAX_STANDING_PER_PRINCIPAL
    );
    assert_asks(&f.alice(&wipe_call(json!(5), &extra)).await);
    assert_ran(&f.alice(&wipe_call(json!(6), "s0")).await);
    // Bob is not affected.
    assert_ran(&wipe_grant(&f, "bob", "s0").await);
    assert_ran(&send(&f.svc, post(&wipe_call(json!(7), "s0"), Some("bob"))).await);
    assert_eq!(
        approvals.list(&Principal::new("bob")).await.unwrap().len(),
        1
    );
    // Once one of hers is used up, its place is free again: a new grant for it is kept.
    for i in 0..5 {
        assert_ran(&f.alice(&wipe_call(json!(100 + i), "s1")).await);
    }
    assert_ran(&wipe_grant(&f, "alice", "s1").await);
    let s1 = approvals
        .list(&alice())
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.scope == "s1")
        .unwrap();
    assert_eq!(s1.used, 0);
}

fn standing_for(principal: PrincipalKey, scope: &str) -> Standing {
    let now = SystemTime::now();
    Standing::new(
        "attack21",
        principal,
        "alice",
        "wipe",
        scope,
        now,
        now + Duration::from_secs(120),
        1,
    )
}

/// The budget counts live approvals ("at most MAX_STANDING_PER_PRINCIPAL live ones"): after a
/// principal revokes all of hers, she may grant again; the same after they are all used up.
async fn revoked_and_exhausted_free_the_budget(store: impl StandingStore) {
    let backend = std::any::type_name_of_val(&store);
    let mut refused = Vec::new();
    for how in ["revoked", "exhausted"] {
        let principal = PrincipalKey::from_bytes(*Nonce::random().as_bytes());
        let mut held = Vec::new();
        for i in 0..MAX_STANDING_PER_PRINCIPAL {
            let s = standing_for(principal, &format!("s{i}"));
            store.grant(&s).await.unwrap();
            held.push(s);
        }
        let over = store.grant(&standing_for(principal, "over")).await;
        assert!(
            matches!(over, Err(StoreError::OverBudget { .. })),
            "{backend}: {over:?}"
        );
        if how == "revoked" {
            assert_eq!(
                store.revoke(principal, None).await.unwrap(),
                MAX_STANDING_PER_PRINCIPAL
            );
        } else {
            for s in &held {
                store.use_one(s.key(), s.id, Nonce::random()).await.unwrap();
            }
        }
        assert!(store.list(principal).await.unwrap().is_empty(), "{backend}");
        if let Err(e) = store.grant(&standing_for(principal, "after")).await {
            refused.push(format!("{how}: {e:?}"));
        }
    }
    assert!(
        refused.is_empty(),
        "{backend}: with no live approval left, a new grant is refused ({})",
        refused.join("; ")
    );
}

on_every_backend! {
    #[tokio::test]
    revoked_and_exhausted_free_the_budget;
    memory => holds_revoked_or_exhausted_approvals_free_the_budget_on_memory,
    redis => holds_revoked_or_exhausted_approvals_free_the_budget_on_redis,
    postgres => holds_revoked_or_exhausted_approvals_free_the_budget_on_postgres,
}

/// A huge scope (1 MiB, from the scope function over the arguments) is shown cut, in the form
/// and on the page; the call and the grant are answered normally.
#[tokio::test]
async fn holds_a_huge_scope_is_shown_cut_in_the_form_and_on_the_page() {
    // Since the fix for this pass: a scope over the bound is offered no standing option at all
    // (the form is "only this time"), and a standing answer to it is asked again.
    let (f, approvals) = wipe_fixture();
    let huge = "w".repeat(1 << 20);
    let first = f.alice(&wipe_call(json!(1), &huge)).await;
    assert_asks(&first);
    assert!(first.bytes.len() < 16 * 1024, "{}", first.bytes.len());
    assert!(
        first.result()["inputRequests"]["wipe_ok"]["params"]["requestedSchema"]["properties"]
            .get("remember")
            .is_none(),
        "no standing option for a scope too long to keep"
    );
    let answer = send(
        &f.svc,
        post(
            &retry(
                wipe_call(json!(1), &huge),
                json!(2),
                &first.state(),
                wipe_standing(),
            ),
            Some("alice"),
        ),
    )
    .await;
    assert_asks(&answer);
    let page = approvals.page(PAGE);
    let (status, _, html) = visit(&page, "GET", PAGE, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.len() < 16 * 1024, "{}", html.len());
    assert!(html.contains("id=\"none\""), "{html}");
}

/// A scope full of markup and invisible characters (from the arguments) is shown escaped and
/// cleaned on the page: no element, attribute or bidirectional override of its own.
#[tokio::test]
async fn holds_a_hostile_scope_is_escaped_on_the_page() {
    let (f, approvals) = wipe_fixture();
    let hostile = "\"><script>alert(1)</script><img src=x onerror=alert(2)>\u{202e}gpj.exe";
    assert_ran(&wipe_grant(&f, "alice", hostile).await);
    let page = approvals.page(PAGE);
    let (status, _, html) = visit(&page, "GET", PAGE, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK);
    for needle in ["<script", "<img", "\u{202e}", "onerror=alert(2)>"] {
        assert!(!html.contains(needle), "{needle:?} in {html}");
    }
    assert!(html.contains("&quot;&gt;&lt;script&gt;"), "{html}");
}

/// A huge scope is not kept whole: the standing store holds at most what a queued grant may keep
/// of a call's arguments (64 KiB); a larger scope is either refused or not granted.
#[tokio::test]
async fn holds_a_huge_scope_is_not_kept_whole_in_the_standing_store() {
    let (f, approvals) = wipe_fixture();
    let huge = "w".repeat(1 << 20);
    let first = f.alice(&wipe_call(json!(1), &huge)).await;
    let _ = send(
        &f.svc,
        post(
            &retry(
                wipe_call(json!(1), &huge),
                json!(2),
                &first.state(),
                wipe_standing(),
            ),
            Some("alice"),
        ),
    )
    .await;
    let kept: usize = approvals
        .list(&alice())
        .await
        .unwrap()
        .iter()
        .map(|s| s.scope.len())
        .sum();
    assert!(
        kept <= 64 * 1024,
        "the standing store keeps a {kept}-byte scope (×{MAX_STANDING_PER_PRINCIPAL} per principal)"
    );
}

// =============================================================================================
// 7. Protocol gates on a call that needs no form.
// =============================================================================================

/// Under a standing approval: a client that declares no elicitation capability still runs (the
/// layer checks elicitation only where it would show a form: documented here); outside the
/// approval it gets the capability error. An unsupported protocol version, headers that disagree
/// with the body, a missing `_meta`, and no principal are refused as ever, spending no use.
#[tokio::test]
async fn holds_a_standing_call_still_passes_the_protocol_gates() {
    let (f, approvals) = deployment(10);
    grant(&f).await;
    let with_meta = |id: i64, ws: &str, meta: Value| {
        let mut c = delete_in(json!(id), ws, "Taxes");
        c["params"]["_meta"] = meta;
        c
    };
    let no_elicitation = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}});
    // Documented: covered, and no form needed, so it runs.
    let covered = f
        .alice(&with_meta(10, PERSONAL, no_elicitation.clone()))
        .await;
    assert_ran(&covered);
    assert_eq!(approvals.list(&alice()).await.unwrap()[0].used, 1);
    // Not covered: the form is needed and cannot be shown.
    add_note(&f.notes, "note-42", TEAM, "Taxes");
    let uncovered = f.alice(&with_meta(11, TEAM, no_elicitation)).await;
    assert_eq!(uncovered.error()["code"], -32021, "{:?}", uncovered.bytes);

    let ran_before = f.seen.count();
    let old = json!({"io.modelcontextprotocol/protocolVersion":"2025-06-18",
        "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}});
    let answer = f.alice(&with_meta(12, PERSONAL, old)).await;
    assert_eq!(answer.error()["code"], -32022, "{:?}", answer.bytes);
    // Body says the supported version, the header another.
    let body = delete_in(json!(13), PERSONAL, "Taxes");
    let mut request = post(&body, Some("alice"));
    request
        .headers_mut()
        .insert("mcp-protocol-version", "2025-06-18".parse().unwrap());
    let answer = send(&f.svc, request).await;
    assert_eq!(answer.error()["code"], -32020, "{:?}", answer.bytes);
    // Header names another tool.
    let mut request = post(&body, Some("alice"));
    request
        .headers_mut()
        .insert("mcp-name", "notes_list".parse().unwrap());
    let answer = send(&f.svc, request).await;
    assert_eq!(answer.error()["code"], -32020, "{:?}", answer.bytes);
    // No _meta.
    let mut bare = delete_in(json!(14), PERSONAL, "Taxes");
    bare["params"].as_object_mut().unwrap().remove("_meta");
    let answer = f.alice(&bare).await;
    assert_eq!(answer.error()["code"], -32602, "{:?}", answer.bytes);
    // No principal.
    let answer = send(&f.svc, post(&body, None)).await;
    assert_eq!(answer.error()["code"], -31001, "{:?}", answer.bytes);
    assert_eq!(f.seen.count(), ran_before);
    assert_eq!(
        approvals.list(&alice()).await.unwrap()[0].used,
        1,
        "no use spent"
    );
}

// =============================================================================================
// 8. The standing-approvals page.
// =============================================================================================

async fn page_post(
    page: &StandingPage,
    who: &str,
    headers: &[(&str, &str)],
    form: String,
) -> (StatusCode, String) {
    let (status, _, html) = visit(page, "POST", PAGE, Some(who), headers, form).await;
    (status, html)
}

fn first_id(html: &str) -> String {
    let at = html
        .find("name=\"revoke\" value=\"")
        .expect("a revoke button")
        + 21;
    html[at..at + 32].to_owned()
}

/// HEAD, OPTIONS and every other method but GET and POST: 405, nothing revoked; a GET carrying
/// `revoke=` in its query or body revokes nothing.
#[tokio::test]
async fn holds_the_standing_page_takes_no_other_method_and_get_changes_nothing() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let page = approvals.page(PAGE);
    let html = page_as(&page, PAGE, "alice").await;
    let form = format!("csrf={}&revoke=all", csrf(&html));
    for method in [
        "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT",
    ] {
        let (status, headers, _) = visit(
            &page,
            method,
            PAGE,
            Some("alice"),
            &FORM_HEADERS,
            form.clone(),
        )
        .await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(headers["allow"], "GET, POST");
    }
    let url = format!("{PAGE}?{form}");
    let (status, _, _) = visit(
        &page,
        "GET",
        &url,
        Some("alice"),
        &FORM_HEADERS,
        form.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
}

/// One principal's page token used on another's session, in either direction: 403, nothing
/// revoked; bob revoking alice's id (with his own token) revokes nothing.
#[tokio::test]
async fn holds_a_page_token_or_id_of_one_principal_revokes_nothing_of_another() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let first = send(
        &f.svc,
        post(&delete_in(json!(40), TEAM, "Groceries"), Some("bob")),
    )
    .await;
    assert_ran(
        &send(
            &f.svc,
            post(
                &retry(
                    delete_in(json!(40), TEAM, "Groceries"),
                    json!(41),
                    &first.state(),
                    remembering("note-30", json!("standing")),
                ),
                Some("bob"),
            ),
        )
        .await,
    );
    let page = approvals.page(PAGE);
    let alices = page_as(&page, PAGE, "alice").await;
    let bobs = page_as(&page, PAGE, "bob").await;
    let (alice_token, alice_id) = (csrf(&alices), first_id(&alices));
    let (bob_token, bob_id) = (csrf(&bobs), first_id(&bobs));
    let (status, _) = page_post(
        &page,
        "bob",
        &FORM_HEADERS,
        format!("csrf={alice_token}&revoke=all"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = page_post(
        &page,
        "alice",
        &FORM_HEADERS,
        format!("csrf={bob_token}&revoke={bob_id}"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, html) = page_post(
        &page,
        "bob",
        &FORM_HEADERS,
        format!("csrf={bob_token}&revoke={alice_id}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Nothing to revoke."), "{html}");
    // Two `revoke`s (an id of alice's, then `all`): neither counts, the post is refused whole
    // and revokes nothing (#52, 5).
    let (status, html) = page_post(
        &page,
        "bob",
        &FORM_HEADERS,
        format!("csrf={bob_token}&revoke={alice_id}&revoke=all"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("The form repeats a field."), "{html}");
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
    assert_eq!(
        approvals.list(&Principal::new("bob")).await.unwrap().len(),
        1
    );
}

/// Cross-origin and cross-site posts with her valid token: refused, nothing revoked.
#[tokio::test]
async fn holds_cross_origin_posts_revoke_nothing() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let page = approvals.page(PAGE);
    let html = page_as(&page, PAGE, "alice").await;
    let form = format!("csrf={}&revoke=all", csrf(&html));
    let ct = ("content-type", "application/x-www-form-urlencoded");
    for headers in [
        vec![ct, ("origin", "http://evil.example")],
        vec![ct, ("origin", "null")],
        vec![ct, ("origin", "https://notes.example")],
        vec![ct, ("origin", "http://notes.example:80")],
        vec![ct, ("origin", "http://notes.example:8080")],
        vec![ct, ("origin", "http://notes.example.evil.example")],
        vec![ct, ("origin", "HTTP://NOTES.EXAMPLE")],
        vec![ct, ("origin", "http://notes.example/")],
        vec![ct, ("origin", ORIGIN), ("sec-fetch-site", "same-site")],
        vec![ct, ("origin", ORIGIN), ("sec-fetch-site", "cross-site")],
        vec![ct, ("origin", ORIGIN), ("sec-fetch-site", "none")],
        vec![ct, ("sec-fetch-site", "cross-site")],
    ] {
        let (status, _) = page_post(&page, "alice", &headers, form.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
    }
    // Not a form post.
    for ty in [
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/json",
    ] {
        let (status, _) = page_post(
            &page,
            "alice",
            &[("content-type", ty), ("origin", ORIGIN)],
            form.clone(),
        )
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ty}");
    }
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
}

/// Huge, malformed and differently spelled ids revoke nothing and never fail the page.
#[tokio::test]
async fn holds_huge_or_malformed_ids_revoke_nothing() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    let page = approvals.page(PAGE);
    let html = page_as(&page, PAGE, "alice").await;
    let (token, id) = (csrf(&html), first_id(&html));
    for revoke in [
        "f".repeat(15 * 1024),
        id.to_uppercase(),
        format!("{id}0"),
        id[..31].to_owned(),
        format!(" {id}"),
        format!("{id}%00"),
        "ALL".to_owned(),
        "all%20".to_owned(),
        String::new(),
        "%FF%FE".to_owned(),
    ] {
        let (status, html) = page_post(
            &page,
            "alice",
            &FORM_HEADERS,
            format!("csrf={token}&revoke={revoke}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{revoke:.40}");
        assert!(html.contains("Nothing to revoke."), "{revoke:.40}: {html}");
    }
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
}

/// The approval page's anti-forgery token is no token on the standing page, and the standing
/// page's is none on the approval page (nothing revoked, nothing decided).
#[tokio::test]
async fn holds_the_approval_pages_token_and_the_standing_pages_do_not_cross() {
    use crate::common::browser::{BASE, destroy_policy, elicitation};
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = ConfirmLayer::builder(k1())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool("notes_destroy", destroy_policy(&notes))
        .tool(
            "notes_delete",
            delete_policy(&notes).standing(Duration::from_secs(600), 5, workspace),
        )
        .build();
    let approval_page = layer.approval_page();
    let approvals = layer.standing_approvals().unwrap();
    let f = Fixture::new(layer, notes, clock, store);
    grant(&f).await;
    let asked = f
        .alice(&crate::common::browser::destroy_call(json!(50)))
        .await;
    let (url, _, _) = elicitation(&asked);
    let approval_html = page_as(&approval_page, &url, "alice").await;
    let approval_token = csrf(&approval_html);
    let standing_page = approvals.page(PAGE);
    let standing_html = page_as(&standing_page, PAGE, "alice").await;
    let standing_token = csrf(&standing_html);
    assert_ne!(approval_token, standing_token);
    let (status, _) = page_post(
        &standing_page,
        "alice",
        &FORM_HEADERS,
        format!("csrf={approval_token}&revoke=all"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
    let (status, _, _) = visit(
        &approval_page,
        "POST",
        &url,
        Some("alice"),
        &FORM_HEADERS,
        format!("csrf={standing_token}&decision=approve&choice=note-7&typed=note-7"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// A layer with a local principal: the page still knows no one without authentication (no
/// listing, no revocation as the local principal).
#[tokio::test]
async fn holds_the_local_principal_is_no_one_on_the_standing_page() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = ConfirmLayer::builder(k1())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
        .standing_store(store.clone())
        .unauthenticated_local_principal(alice())
        .tool(
            "notes_delete",
            delete_policy(&notes).standing(Duration::from_secs(600), 5, workspace),
        )
        .build();
    let approvals = layer.standing_approvals().unwrap();
    let f = Fixture::new(layer, notes, clock, store);
    grant(&f).await;
    let page = approvals.page(PAGE);
    let (status, _, html) = visit(&page, "GET", PAGE, None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!html.contains(PERSONAL));
    let (status, _, _) = visit(&page, "POST", PAGE, None, &FORM_HEADERS, "revoke=all").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(approvals.list(&alice()).await.unwrap().len(), 1);
}

/// Revoke-all on one deployment's page leaves alice's approvals in another deployment on the
/// same store and keys.
#[tokio::test]
async fn holds_revoke_all_on_one_deployments_page_leaves_anothers() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let a = layer_with(
        k1(),
        "https://a.example/mcp",
        &notes,
        &clock,
        &store,
        5,
        Duration::from_secs(600),
    );
    let b = layer_with(
        k1(),
        "https://b.example/mcp",
        &notes,
        &clock,
        &store,
        5,
        Duration::from_secs(600),
    );
    let (a_approvals, b_approvals) = (
        a.standing_approvals().unwrap(),
        b.standing_approvals().unwrap(),
    );
    let a = Fixture::new(a, notes.clone(), clock.clone(), store.clone());
    let b = Fixture::new(b, notes.clone(), clock.clone(), store.clone());
    grant(&a).await;
    notes.edit("note-7");
    grant(&b).await;
    let page = a_approvals.page(PAGE);
    let html = page_as(&page, PAGE, "alice").await;
    let (status, html) = page_post(
        &page,
        "alice",
        &FORM_HEADERS,
        format!("csrf={}&revoke=all", csrf(&html)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Revoked one standing approval."), "{html}");
    assert!(a_approvals.list(&alice()).await.unwrap().is_empty());
    assert_eq!(b_approvals.list(&alice()).await.unwrap().len(), 1);
    assert_asks(&a.alice(&delete_in(json!(10), PERSONAL, "Taxes")).await);
    assert_ran(&b.alice(&delete_in(json!(11), PERSONAL, "Taxes")).await);
}

/// `remember` is the standing option's field: a policy that offers a standing approval cannot
/// give its confirm or choice field that name (the answer would be read twice).
#[test]
fn holds_a_form_field_named_remember_is_refused_with_standing() {
    let notes = Notes::seeded();
    let offer = |p: ToolPolicy| p.standing(Duration::from_secs(60), 3, workspace);
    for policy in [
        offer(delete_policy(&notes).confirm_field("remember")),
        offer(delete_policy(&notes).choice_field("remember")),
        offer(ToolPolicy::confirm_only().confirm_field("remember")),
    ] {
        let built = ConfirmLayer::builder(k1())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .tool("notes_delete", policy)
            .try_build();
        assert!(
            matches!(built, Err(mcp_confirm::ConfigError::InvalidPolicy(ref m)) if m.contains("remember")),
            "{:?}",
            built.err()
        );
    }
}

// =============================================================================================
// 9. The `remember` answer and the granting path.
// =============================================================================================

/// "standing" chosen with a decline, a cancel, or an accept with `confirm: false`: nothing runs,
/// nothing is granted.
#[tokio::test]
async fn holds_standing_with_decline_cancel_or_unconfirmed_grants_nothing() {
    let (f, approvals) = deployment(5);
    let content = json!({"note_id":"note-7","confirm":true,"remember":"standing"});
    let mut unconfirmed = content.clone();
    unconfirmed["confirm"] = json!(false);
    for (i, response) in [
        json!({"action":"decline","content":content}),
        json!({"action":"cancel","content":content}),
        json!({"action":"accept","content":unconfirmed}),
    ]
    .into_iter()
    .enumerate()
    {
        let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
        let answer = f
            .alice(&retry(
                delete_in(json!(1), PERSONAL, "Groceries"),
                json!(10 + i),
                &first.state(),
                json!({"delete_choice": response}),
            ))
            .await;
        assert!(!ran(&answer), "{i}: {:?}", answer.bytes);
    }
    assert_eq!(f.seen.count(), 0);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    assert_asks(&f.alice(&delete_in(json!(20), PERSONAL, "Taxes")).await);
}

/// Odd `remember` answers (another spelling, padded, an array, an object, null, a number, a
/// boolean, duplicated keys in either order, placed outside `content`) never grant a standing
/// approval; the same state then accepted "once" runs and grants nothing.
#[tokio::test]
async fn holds_odd_remember_answers_never_grant() {
    let (f, approvals) = deployment(5);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    let state = first.state();
    let call = || delete_in(json!(1), PERSONAL, "Groceries");
    for (i, remember) in [
        json!("Standing"),
        json!(" standing"),
        json!("standing\u{0}"),
        json!("standing\u{200b}"),
        json!(["standing"]),
        json!({"standing": true}),
        Value::Null,
        json!(1),
        json!(true),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = f
            .alice(&retry(
                call(),
                json!(10 + i),
                &state,
                remembering("note-7", remember.clone()),
            ))
            .await;
        assert!(!ran(&answer), "{remember}: {:?}", answer.bytes);
    }
    for (a, b) in [("once", "standing"), ("standing", "once")] {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{{"_meta":{},"name":"notes_delete","arguments":{{"workspaceUri":"{PERSONAL}","title":"Groceries"}},"requestState":"{state}","inputResponses":{{"delete_choice":{{"action":"accept","content":{{"note_id":"note-7","confirm":true,"remember":"{a}","remember":"{b}"}}}}}}}}}}"#,
            meta()
        );
        let answer = send_text(&f, text).await;
        assert_eq!(answer.error()["code"], -32600, "{:?}", answer.bytes);
    }
    assert_eq!(f.seen.count(), 0);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    // "standing" outside the content, then the plain accept: runs once, grants nothing.
    let mut outside = json!({"delete_choice":{"action":"accept","remember":"standing",
        "content":{"note_id":"note-7","confirm":true}}});
    outside["remember"] = json!("standing");
    let mut body = retry(call(), json!(40), &state, outside);
    body["params"]["remember"] = json!("standing");
    assert_ran(&f.alice(&body).await);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    assert_asks(&f.alice(&delete_in(json!(41), PERSONAL, "Taxes")).await);
}

/// The scope function names another scope at the answer than at the form (the world changed
/// between them): the call runs as confirmed, but no standing approval is granted, for either
/// scope.
#[tokio::test]
async fn holds_a_scope_that_changed_between_form_and_answer_grants_nothing() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let era = Arc::new(Mutex::new("before".to_owned()));
    let cell = Arc::clone(&era);
    let layer = ConfirmLayer::builder(k1())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
        .standing_store(store.clone())
        .tool(
            "notes_delete",
            delete_policy(&notes).standing(Duration::from_secs(600), 5, move |l: &Lookup| {
                Some(format!(
                    "{}|{}",
                    l.arguments["workspaceUri"].as_str()?,
                    cell.lock().unwrap()
                ))
            }),
        )
        .build();
    let approvals = layer.standing_approvals().unwrap();
    let f = Fixture::new(layer, notes, clock, store);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    *era.lock().unwrap() = "after".to_owned();
    assert_ran(
        &f.alice(&retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            remembering("note-7", json!("standing")),
        ))
        .await,
    );
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
    assert_asks(&f.alice(&delete_in(json!(3), PERSONAL, "Taxes")).await);
    *era.lock().unwrap() = "before".to_owned();
    assert_asks(&f.alice(&delete_in(json!(4), PERSONAL, "Taxes")).await);
}

/// A granting retry whose revalidation fails (the note changed since the form) runs nothing and
/// grants nothing.
#[tokio::test]
async fn holds_a_granting_retry_that_fails_revalidation_grants_nothing() {
    let (f, approvals) = deployment(5);
    let first = f.alice(&delete_in(json!(1), PERSONAL, "Groceries")).await;
    f.notes.edit("note-7");
    let answer = f
        .alice(&retry(
            delete_in(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            remembering("note-7", json!("standing")),
        ))
        .await;
    assert_eq!(
        answer.result()["_meta"]["io.github.mcp-confirm/outcome"],
        "revoked"
    );
    assert_eq!(f.seen.count(), 0);
    assert!(approvals.list(&alice()).await.unwrap().is_empty());
}

/// An ambiguous call in a covered scope, and one whose only match is gone, spend no use; at the
/// expiry boundary (exactly `up_to` after the grant) the form is back.
#[tokio::test]
async fn holds_ambiguity_spends_no_use_and_the_expiry_boundary_asks() {
    let (f, approvals) = deployment(5);
    grant(&f).await;
    assert_asks(&f.alice(&delete_in(json!(10), PERSONAL, "Groceries")).await);
    let nothing = f.alice(&delete_in(json!(11), PERSONAL, "Nothing")).await;
    assert!(!ran(&nothing));
    assert_eq!(approvals.list(&alice()).await.unwrap()[0].used, 0);
    f.clock.advance(Duration::from_secs(599));
    assert_ran(&f.alice(&delete_in(json!(12), PERSONAL, "Taxes")).await);
    f.clock.advance(Duration::from_secs(1));
    assert_asks(&f.alice(&delete_in(json!(13), PERSONAL, "Taxes")).await);
}

/// A standing approval's id is not a capability: a `Confirmed` naming it cannot be minted by a
/// client, and a store record with the id but another key covers nothing. (A use of a known id
/// under another key answers `Unknown`.)
#[tokio::test]
async fn holds_a_standing_id_under_another_key_covers_nothing() {
    let store = MemoryReplayStore::new();
    let alice_key = PrincipalKey::from_bytes([0xa1; 16]);
    let bob_key = PrincipalKey::from_bytes([0xb0; 16]);
    let now = SystemTime::now();
    let s = Standing::new(
        "a",
        alice_key,
        "alice",
        "wipe",
        "s",
        now,
        now + Duration::from_secs(60),
        3,
    );
    store.grant(&s).await.unwrap();
    let other = Standing::new(
        "a",
        bob_key,
        "bob",
        "wipe",
        "s",
        now,
        now + Duration::from_secs(60),
        3,
    );
    assert_eq!(
        store
            .use_one(other.key(), s.id, Nonce::random())
            .await
            .unwrap(),
        mcp_confirm::store::standing::Use::Unknown
    );
    assert_eq!(store.revoke(bob_key, Some(s.id)).await.unwrap(), 0);
    assert_eq!(
        store
            .revoke(alice_key, Some(StandingId::random()))
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.list(alice_key).await.unwrap()[0].used, 0);
}
