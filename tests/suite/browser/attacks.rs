//! Attacks on "approval in the browser" (issue 13): the approval page, the URL-mode retry, the
//! stores' approval records, and the demo's sign-in.
//!
//! Each test is an attack and shows that the promise it attacks holds. Several were findings when
//! first written (their comments still describe the hole, which is now closed); the others were
//! refused from the start.

use mcp_confirm_demo::{app, notes};
use mcp_confirm_pages::ApprovalPage;
use mcp_confirm_pages::LayerPages as _;
use std::sync::Arc;
use std::time::Duration;

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{Candidate, Confirm, ConfirmLayer, KeyRing, Lookup, PolicyError, ToolPolicy};
use serde_json::{Value, json};
use tower::Layer;

/// Alice's first call, and her page's token: (url, id, state, csrf).
async fn opened(f: &Fixture, page: &ApprovalPage, id: Value) -> (String, String, String, String) {
    let (url, eid, state) = elicitation(&f.alice(&destroy_call(id)).await);
    let (status, _, html) = visit(page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    (url, eid, state, csrf(&html))
}

/// Still undecided: alice's retry is asked again, with the same URL; nothing ran.
async fn still_undecided(f: &Fixture, state: &str, url: &str) {
    let again = f.alice(&went_to_page(state, json!(900))).await;
    assert_eq!(elicitation(&again).0, url, "{}", again.json());
    assert_eq!(f.seen.count(), 0);
}

// =============================================================================================
// FINDINGS (these tests fail today)
// =============================================================================================

/// Key rotation, deployed as the README says (`[old, new]`, then `[new, old]`): an approval
/// proposed before the signing key changed records the principal's digest under the *old*
/// signing key, and the page compares it with the digest under the *current* signing key. The
/// person who asked is told "This approval was requested by someone else" (403) and can never
/// decide it, on the rotated instance, while that instance still verifies the state. During a
/// rolling deploy the same happens whenever the first call and the page reach instances on
/// different steps.
#[tokio::test]
async fn holds_key_rotation_keeps_a_pending_approval_its_owners() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let old = builder(KeyRing::single("k1", KEY).unwrap(), &notes, &clock, &store).build();
    let rotated_keys = KeyRing::new([("k2", secret(0x22)), ("k1", KEY)]).unwrap();
    let rotated = builder(rotated_keys, &notes, &clock, &store).build();
    let rotated_page = rotated.approval_page();
    let before = Fixture::new(old, notes.clone(), clock.clone(), store.clone());
    let after = Fixture::new(rotated, notes, clock, store);
    let (url, _, state) = elicitation(&before.alice(&destroy_call(json!(1))).await);
    // The rotated instance verifies alice's state (k1 is still in its ring): asked again.
    still_undecided(&after, &state, &url).await;
    let (status, _, html) = visit(&rotated_page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "alice, who asked, is refused her own approval after the rotation: {html}"
    );
}

/// One principal fills the memory store's approvals for everyone. Approvals are not charged to
/// the per-principal budget (here 1 entry: capacity 30) and have no cap of their own; the
/// default challenge rate (bursts of 30) is all it takes. Bob's first call to a browser-approved
/// tool is then refused ("store unavailable") until alice's approvals expire. At the default
/// capacity (100,000, budget 1,000) one principal holds 30 + 10/s × 300 s = 3,030 approvals per
/// instance; 33 principals (or one with a raised rate limit) lock out every other user.
#[tokio::test]
async fn holds_one_principal_cannot_fill_the_stores_approvals() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(30, clock.clone());
    assert_eq!(store.budget(), 1, "alice may hold one live entry");
    let layer = builder(KeyRing::single("k1", KEY).unwrap(), &notes, &clock, &store).build();
    let f = Fixture::new(layer, notes, clock, store);
    // Budgeted like nonces: her share of a 30-entry store is one pending approval (not 20,
    // which filled a `memory:20` store for everyone).
    elicitation(&f.alice(&destroy_call(json!(0))).await);
    // Alice's next one waits for hers to expire; nobody else is charged for it.
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
    assert_eq!(
        bob.result()["resultType"],
        "input_required",
        "bob is locked out by alice's 30 pending approvals: {}",
        bob.json()
    );
}

/// `MemoryReplayStore::prune_expired` ("drops every expired entry") leaves expired approvals in
/// memory: nothing but a full map ever removes them, so the map grows to its capacity and stays
/// there. (Observed through `Debug`, which prints the whole map.)
#[tokio::test]
async fn holds_expired_approvals_are_pruned_from_the_memory_store() {
    let (f, _page) = browser();
    elicitation(&f.alice(&destroy_call(json!(1))).await);
    f.clock.advance(Duration::from_secs(3600));
    f.store.prune_expired();
    let debug = format!("{:?}", f.store);
    assert!(
        !debug.contains("Groceries (note-7)"),
        "an approval that expired an hour ago is still held after prune_expired: {debug}"
    );
}

/// `Debug` of the layer (and of the memory store) prints every pending approval: who asked
/// (the subject), the policy's message and every record's label. A `tracing::debug!(?layer)` or
/// a panic message puts users' names and record titles in the logs, which the crate otherwise
/// avoids (keys redacted, nonces and grant ids truncated, "never the name" for principals).
#[tokio::test]
async fn holds_layer_debug_keeps_pending_approvals_out_of_logs() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = builder(KeyRing::single("k1", KEY).unwrap(), &notes, &clock, &store).build();
    let f = Fixture::new(layer.clone(), notes, clock, store);
    elicitation(&f.alice(&destroy_call(json!(1))).await);
    let debug = format!("{layer:?}");
    assert!(
        !debug.contains("Groceries (note-7)") && !debug.contains("subject: \"alice\""),
        "the layer's Debug shows pending approvals: {debug}"
    );
}

/// The page keeps offering, and records, an approval after the client has already declined
/// (the nonce is consumed): it answers "Approved. Return to your client and continue: the
/// request runs there." Nothing runs, but the person is told it will, and the audit log records
/// a page approval of a confirmation that was declined. The page never asks the replay store
/// whether the nonce is still fresh.
#[tokio::test]
async fn holds_the_page_refuses_a_confirmation_the_client_already_answered() {
    let (f, page) = browser();
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    let declined = f
        .alice(&with_answer(
            destroy_call(json!(2)),
            &state,
            json!({"action": "decline"}),
        ))
        .await;
    assert_eq!(outcome(&declined), "declined");
    let form = format!("csrf={token}&choice=note-7&decision=approve");
    let (status, body) = decide(&page, &url, "alice", &form).await;
    assert_eq!(f.seen.count(), 0);
    assert!(
        status != StatusCode::OK || !body.contains("the request runs there"),
        "the page promises a run that cannot happen: {status} {body}"
    );
}

/// The same-origin check compares the browser's `Origin` byte for byte with the approval URL's
/// `scheme://authority` as configured. A valid configuration with an explicit default port or
/// upper-case host never matches what a browser sends (`https://notes.example`), so every real
/// decision is refused with 403 and the feature is unusable.
#[tokio::test]
async fn holds_the_origin_check_accepts_the_browsers_origin_for_equivalent_urls() {
    let mut refused = Vec::new();
    for (configured, browser_origin) in [
        (
            "https://notes.example:443/confirm/",
            "https://notes.example",
        ),
        ("https://Notes.Example/confirm/", "https://notes.example"),
    ] {
        let notes = Notes::seeded();
        let clock = ManualClock::new(now());
        let store = MemoryReplayStore::with_clock(10_000, clock.clone());
        let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .clock(clock.clone())
            .store(store.clone())
            .tool("notes_destroy", destroy_policy(&notes))
            .approval_url(configured)
            .build();
        let page = layer.approval_page();
        let f = Fixture::new(layer, notes, clock, store);
        let (url, _, _) = elicitation(&f.alice(&destroy_call(json!(1))).await);
        let html = page_as(&page, &url, "alice").await;
        let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
        let headers = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", browser_origin),
            ("sec-fetch-site", "same-origin"),
        ];
        let (status, _, _) = visit(&page, "POST", &url, Some("alice"), &headers, form).await;
        if status != StatusCode::OK {
            refused.push(format!("{configured} refuses {browser_origin}: {status}"));
        }
    }
    assert!(refused.is_empty(), "{refused:#?}");
}

/// Defense in depth (needs write access to the shared store): the retry takes whatever decision
/// the record under `ApprovalId::for_nonce(state's nonce)` holds, without checking that the
/// record's `principal` and `nonce` are the state's. A record rewritten to name another
/// principal and marked approved (as a record another deployment or a buggy writer might leave)
/// runs alice's call; the page itself would have refused to let that principal's decision
/// count for her. Compare `Grant`s, which the worker re-checks against what it expects.
#[tokio::test]
async fn holds_the_retry_ignores_an_approval_record_of_another_principal() {
    use redis::AsyncCommands;
    let Some(url) = crate::backends::redis("approval record of another principal (Redis)").await
    else {
        return;
    };
    let prefix = redis_prefix();
    let store: Arc<dyn crate::common::Store> = Arc::new(
        mcp_confirm::store::RedisStore::open(&url)
            .unwrap()
            .prefix(prefix.clone()),
    );
    let (svc, _page, seen) = on_store(&store);
    let first = send(&svc, post(&destroy_call(json!(1)), Some("alice"))).await;
    let (_, id, state) = elicitation(&first);
    let mut redis = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{prefix}approval:{id}");
    let record: String = redis.get(&key).await.unwrap();
    let mut record: Value = serde_json::from_str(&record).unwrap();
    record["principal"] = json!("0".repeat(32));
    record["nonce"] = json!("1".repeat(32));
    record["subject"] = json!("mallory");
    record["decision"] = json!({"decision": "approved", "chosen": "note-7"});
    let _: () = redis
        .set_options(
            &key,
            record.to_string(),
            redis::SetOptions::default().with_expiration(redis::SetExpiry::KEEPTTL),
        )
        .await
        .unwrap();
    let retry = send(&svc, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
    assert_eq!(
        seen.count(),
        0,
        "a decision recorded for another principal and nonce ran alice's call: {}",
        retry.json()
    );
}

// ---------------------------------------------------------------------------------------------
// The demo (examples/notes_server) over real HTTP
// ---------------------------------------------------------------------------------------------

struct Demo {
    base: String,
    dir: std::path::PathBuf,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Demo {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mcp-confirm-browser-attack-{}",
            mcp_confirm::store::Nonce::random().to_hex()
        ));
        let store = Arc::new(notes::NotesStore::open(&dir.join("data")).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = app::Options {
            keys: KeyRing::single("k1", secret(0x5a)).unwrap(),
            audience: "https://notes-browser-attack.example/mcp".into(),
            replay_store: None,
            grant_store: Arc::new(mcp_confirm::grant::MemoryGrantStore::new()),
            public_url: format!("http://{addr}"),
            challenge_rate: app::ChallengeRate::Default,
            without_confirmation: false,
            audit_log: None,
            notifier: None,
        };
        let router = app::app(store, options);
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            base: format!("http://{addr}"),
            dir,
        }
    }

    fn http() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// POSTs the sign-in form with extra headers; (status, Location, Set-Cookie).
    async fn sign_in(
        &self,
        body: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>, Option<String>) {
        let mut request = Self::http()
            .post(format!("{}/signin", self.base))
            .header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.body(body.to_owned()).send().await.unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        (
            response.status().as_u16(),
            header("location"),
            header("set-cookie"),
        )
    }
}

/// Login CSRF on the demo's sign-in: `/signin` sits outside the Host/Origin guard and takes no
/// anti-forgery token, so any site can auto-submit a form that signs the visitor's browser in as
/// the attacker (`bob-token`, a real account). The approval page itself refuses such a POST
/// (403); the sign-in sets the session cookie. Alice, now signed in as bob, is told her own
/// approval "was requested by someone else"; with a real sign-in the same hole lets the attacker
/// choose whose session the victim's browser carries.
#[tokio::test]
async fn holds_demo_signin_refuses_a_cross_site_post() {
    let demo = Demo::start().await;
    let cross_site = [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, _, cookie) = demo
        .sign_in(
            "token=bob-token&next=/confirm/00000000000000000000000000000000",
            &cross_site,
        )
        .await;
    assert!(
        status == 403 && cookie.is_none(),
        "a cross-site form signed the browser in: {status}, Set-Cookie {cookie:?}"
    );
}

/// The demo's session cookie is the MCP bearer token itself (`notes_session=alice-token`): the
/// person types their MCP credential into the page's sign-in, the browser stores it, and
/// whoever reads the cookie jar (an extension, a synced profile, a proxy log of `Cookie`) holds
/// a credential for `/mcp`. README: the sign-in "is not a way to sign in to the MCP endpoint".
#[tokio::test]
async fn holds_demo_session_cookie_is_not_the_mcp_bearer_token() {
    let demo = Demo::start().await;
    let (status, _, cookie) = demo.sign_in("token=alice-token&next=", &[]).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    let value = cookie
        .split(';')
        .next()
        .unwrap()
        .strip_prefix("notes_session=")
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{}}}});
    let (status, _, answer) =
        crate::notes_http::post(&Demo::http(), &format!("{}/mcp", demo.base), &value, &list).await;
    assert_ne!(
        status, 200,
        "the session cookie's value ({value}) is accepted as a bearer token at /mcp: {answer}"
    );
}

// =============================================================================================
// HOLDS (attacks that were refused; kept as regression tests)
// =============================================================================================

/// Principal confusion: subjects that differ from alice's only in ways a sloppy comparison or
/// encoding might blur (case, whitespace, NUL, a delimiter, a prefix) neither see nor decide
/// her approval, and her page's token is useless to them. Checked by mutation: replacing the
/// page's `principal_key(principal) != approval.principal` checks with `false` fails this test.
#[tokio::test]
async fn holds_lookalike_principals_neither_see_nor_decide() {
    let (f, page) = browser();
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    for subject in [
        "bob",
        "Alice",
        "ALICE",
        "alice ",
        " alice",
        "alice\0",
        "alice\n",
        "alice|x",
        "alic",
        "alicee",
        "",
        "\u{0430}lice",
    ] {
        // A blank subject names no one: signed out (401), not someone else (403).
        let refused = if subject.trim().is_empty() {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::FORBIDDEN
        };
        let (status, _, html) = visit(&page, "GET", &url, Some(subject), &[], "").await;
        assert_eq!(status, refused, "{subject:?}");
        assert!(
            !html.contains("note-7") && !html.contains("csrf"),
            "{subject:?}: {html}"
        );
        let form = format!("csrf={token}&choice=note-7&decision=approve");
        let (status, _) = decide(&page, &url, subject, &form).await;
        assert_eq!(status, refused, "{subject:?}");
    }
    // Bob cannot use alice's state either (the state binds her).
    let bob = send(&f.svc, post(&went_to_page(&state, json!(2)), Some("bob"))).await;
    assert_frozen_state_error(&bob);
    still_undecided(&f, &state, &url).await;
}

/// Cross-site request forgery, every variant tried: no token, a forged one, alice's token for
/// her *other* approval, a duplicated field with the forged token first, `Origin: null`,
/// another site's origin, `Sec-Fetch-Site` other than same-origin, and content types a
/// cross-site form or fetch can send without a preflight besides form-encoding (text/plain,
/// multipart) or near-misses of it. None decides, and neither does the real form with neither
/// `Origin` nor `Sec-Fetch-Site` (#52, 10f: no browser's form post; it used to pass on its
/// token alone). Checked by mutation, each failing this test: `FormTokens::accepts` always
/// true; `same_origin` always `Ok`; the form-encoding check removed.
#[tokio::test]
async fn holds_forged_decisions_are_refused() {
    let (f, page) = browser();
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    let (other_url, _, _, other_token) = opened(&f, &page, json!(2)).await;
    assert_ne!(url, other_url);
    assert_ne!(token, other_token, "a token is bound to its approval");
    let approve = |csrf: &str| format!("csrf={csrf}&choice=note-7&decision=approve");
    let forged = "0".repeat(64);
    for form in [
        "choice=note-7&decision=approve".to_owned(),
        approve(&forged),
        approve(&other_token),
        approve(&token.to_uppercase()[..63]),
        format!("csrf={token}x&choice=note-7&decision=approve"),
        format!("csrf%00={token}&choice=note-7&decision=approve"),
    ] {
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{form}: {body}");
    }
    // A token posted twice, a forged one beside it: the form is refused before either is read.
    let twice = format!("csrf={forged}&csrf={token}&choice=note-7&decision=approve");
    let (status, body) = decide(&page, &url, "alice", &twice).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{twice}: {body}");
    let form = approve(&token);
    let form_type = ("content-type", "application/x-www-form-urlencoded");
    for headers in [
        vec![form_type, ("origin", "null")],
        vec![form_type, ("origin", "http://evil.example")],
        vec![form_type, ("origin", "http://notes.example.evil.example")],
        vec![form_type, ("origin", "https://notes.example")],
        vec![form_type, ("origin", "http://notes.example:8080")],
        vec![form_type, ("origin", "http://notes.example/")],
        vec![form_type, ("sec-fetch-site", "cross-site")],
        vec![form_type, ("sec-fetch-site", "same-site")],
        vec![form_type, ("sec-fetch-site", "none")],
        vec![form_type, ("sec-fetch-site", "Same-Origin")],
        vec![("content-type", "text/plain"), ("origin", ORIGIN)],
        vec![
            ("content-type", "multipart/form-data; boundary=x"),
            ("origin", ORIGIN),
        ],
        vec![
            ("content-type", "application/x-www-form-urlencodedx"),
            ("origin", ORIGIN),
        ],
        vec![
            (
                "content-type",
                "text/plain; application/x-www-form-urlencoded",
            ),
            ("origin", ORIGIN),
        ],
        vec![("content-type", "application/json"), ("origin", ORIGIN)],
        vec![("origin", ORIGIN)],
        vec![],
    ] {
        let (status, _, body) =
            visit(&page, "POST", &url, Some("alice"), &headers, form.clone()).await;
        assert!(
            status == StatusCode::FORBIDDEN || status == StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{headers:?}: {status} {body}"
        );
    }
    // Deciding through anything but POST changes nothing.
    for method in ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let (status, _, _) = visit(
            &page,
            method,
            &format!("{url}?{form}"),
            Some("alice"),
            &FORM_HEADERS,
            form.clone(),
        )
        .await;
        assert!(
            status == StatusCode::OK || status == StatusCode::METHOD_NOT_ALLOWED,
            "{method}: {status}"
        );
    }
    let override_get = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-http-method-override", "POST"),
    ];
    visit(
        &page,
        "GET",
        &url,
        Some("alice"),
        &override_get,
        form.clone(),
    )
    .await;
    still_undecided(&f, &state, &url).await;
    // The real form, with a charset parameter, without `Origin` or `Sec-Fetch-Site`: refused.
    let content_type = (
        "content-type",
        "Application/X-WWW-Form-Urlencoded ; charset=utf-8",
    );
    let (status, _, body) = visit(
        &page,
        "POST",
        &url,
        Some("alice"),
        &[content_type],
        form.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    still_undecided(&f, &state, &url).await;
    // With the page's own `Origin` and no fetch metadata (a browser without it): accepted
    // exactly once.
    let headers = [content_type, ("origin", ORIGIN)];
    let (status, _, body) = visit(&page, "POST", &url, Some("alice"), &headers, form.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, _) = visit(&page, "POST", &url, Some("alice"), &headers, form).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// Choices the page did not offer: a note of the same user in the other workspace, a note that
/// exists but was not a candidate, the typed id of another candidate, two `choice` fields (one
/// of them the typed one: refused whole), an empty choice. With `require_typed_id`, only the
/// chosen id typed exactly approves. Checked by mutation: without `Approval::decide`'s
/// offered-choice check the page approves `note-20` and this test fails.
#[tokio::test]
async fn holds_only_an_offered_choice_typed_exactly_is_approved() {
    let (f, page) = browser_with(ToolPolicy::require_typed_id);
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    for tail in [
        "choice=note-20&typed=note-20",
        "choice=note-30&typed=note-30",
        "choice=note-3&typed=note-7",
        "choice=&typed=",
        "typed=note-7",
        "choice=note-7",
        "choice=note-7&typed=note-7x",
        "choice=note-7&typed=note%2D7%00",
        "choice=NOTE-7&typed=NOTE-7",
    ] {
        let form = format!("csrf={token}&decision=approve&{tail}");
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{tail}");
        assert!(!body.contains("Approved."), "{tail} was approved: {body}");
    }
    for tail in [
        "decision=maybe",
        "decision=",
        "decision=Approve",
        "",
        // Two choices, the second the one typed: neither is read.
        "decision=approve&choice=note-3&choice=note-7&typed=note-7",
    ] {
        let (status, _) = decide(&page, &url, "alice", &format!("csrf={token}&{tail}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{tail}");
    }
    still_undecided(&f, &state, &url).await;
    let form = format!("csrf={token}&decision=approve&choice=note-7&typed=+note-7+");
    assert!(
        decide(&page, &url, "alice", &form)
            .await
            .1
            .contains("Approved.")
    );
    assert_ran(&f.alice(&went_to_page(&state, json!(3))).await);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
}

/// The retry: the page's decision is read by the approval of *this* state's nonce only. An
/// approval of another call does not run this one; a state cannot be moved to other arguments
/// or another principal; a form-style accept with content decides nothing, a decline or a cancel
/// on the client after an approve on the page run nothing; the approved call runs once, and replays are
/// refused. Checked by mutation: a `settle_browser` that takes an undecided approval as
/// approved runs call B here, and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_the_retry_runs_only_its_own_approved_choice_once() {
    let (f, page) = browser();
    let (url_a, _, state_a, token_a) = opened(&f, &page, json!(1)).await;
    let (url_b, _, state_b, _) = opened(&f, &page, json!(2)).await;
    let form = format!("csrf={token_a}&choice=note-7&decision=approve");
    assert_eq!(
        decide(&page, &url_a, "alice", &form).await.0,
        StatusCode::OK
    );
    // B's state is not approved by A's approval.
    let b = f.alice(&went_to_page(&state_b, json!(3))).await;
    assert_eq!(elicitation(&b).0, url_b);
    // A's state on other arguments, or as bob: refused.
    let moved = with_answer(
        destroy_call_in(json!(4), PERSONAL, "Taxes"),
        &state_a,
        json!({"action": "accept"}),
    );
    assert_frozen_state_error(&f.alice(&moved).await);
    let team = with_answer(
        destroy_call_in(json!(5), TEAM, "Groceries"),
        &state_a,
        json!({"action": "accept"}),
    );
    assert_frozen_state_error(&send(&f.svc, post(&team, Some("bob"))).await);
    // A URL accept carrying content (a smuggled choice) decides nothing: the content is not
    // read (MRTR: unrequested members are ignored), and B, undecided, is asked again.
    let smuggled = with_answer(
        destroy_call(json!(6)),
        &state_b,
        json!({"action": "accept", "content": {"note_id": "note-3", "confirm": true}}),
    );
    assert_eq!(elicitation(&f.alice(&smuggled).await).0, url_b);
    // Cancel on the client after the approve: nothing runs, nothing is spent.
    let cancelled = f
        .alice(&with_answer(
            destroy_call(json!(7)),
            &state_a,
            json!({"action": "cancel"}),
        ))
        .await;
    assert_eq!(outcome(&cancelled), "cancelled");
    assert_eq!(f.seen.count(), 0);
    // The approved retry runs note-7, once, even when retried concurrently.
    let retries: Vec<_> = (0..8)
        .map(|i| {
            let (svc, call) = (f.svc.clone(), went_to_page(&state_a, json!(100 + i)));
            tokio::spawn(async move { send(&svc, post(&call, Some("alice"))).await })
        })
        .collect();
    let mut ran = 0;
    for retry in retries {
        let answer = retry.await.unwrap();
        if answer.result()["content"][0]["text"] == "done by inner" {
            ran += 1;
        }
    }
    assert_eq!(ran, 1);
    assert_eq!(f.seen.count(), 1);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
    assert_frozen_state_error(&f.alice(&went_to_page(&state_a, json!(8))).await);
    // Approve on the page, then decline on the client: the decline wins, nothing runs.
    let (url_c, _, state_c, token_c) = opened(&f, &page, json!(9)).await;
    let form = format!("csrf={token_c}&choice=note-3&decision=approve");
    assert_eq!(
        decide(&page, &url_c, "alice", &form).await.0,
        StatusCode::OK
    );
    let declined = f
        .alice(&with_answer(
            destroy_call(json!(10)),
            &state_c,
            json!({"action": "decline"}),
        ))
        .await;
    assert_eq!(outcome(&declined), "declined");
    assert_frozen_state_error(&f.alice(&went_to_page(&state_c, json!(11))).await);
    assert_eq!(f.seen.count(), 1);
}

/// After expiry the page shows nothing and records nothing, even with a valid token, and the
/// retry is refused. Checked by mutation: without the expiry filter in the memory store's
/// `approval` the expired form is shown and this test fails.
#[tokio::test]
async fn holds_nothing_is_decided_after_expiry() {
    let (f, page) = browser();
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    f.clock.advance(Duration::from_secs(300));
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!html.contains("note-7"));
    let form = format!("csrf={token}&choice=note-7&decision=approve");
    assert_eq!(
        decide(&page, &url, "alice", &form).await.0,
        StatusCode::NOT_FOUND
    );
    f.clock.set(now());
    // Back in time (a clock step): still undecided, so the late POST recorded nothing.
    still_undecided(&f, &state, &url).await;
    f.clock.advance(Duration::from_secs(400));
    let late = f.alice(&went_to_page(&state, json!(2))).await;
    assert_frozen_state_error(&late);
    assert_eq!(f.seen.count(), 0);
}

/// HTML injection through everything the page prints that someone other than the deployer
/// may influence: record ids, labels and versions (from the resolver, i.e. user data), the
/// policy message and the subject. All escaped, in text and in attributes; the page carries
/// its CSP on every answer. Checked by mutation: making `escape` the identity fails this test.
#[tokio::test]
async fn holds_the_page_escapes_what_it_shows() {
    const EVIL: &str = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>";
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = ToolPolicy::pick_one(|_: Lookup| async {
        Ok::<_, PolicyError>(vec![
            Candidate::labelled(format!("id{EVIL}"), format!("label{EVIL}"))
                .with_version(format!("v{EVIL}")),
            Candidate::labelled("plain", "plain").with_version("1"),
        ])
    })
    .message(format!("message{EVIL}"))
    .input_key("destroy_approval")
    .choice_field("note_id")
    .select_into("note_id")
    .approve_in_browser();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .tool("notes_destroy", policy)
        .approval_url(BASE)
        .build();
    let page = layer.approval_page();
    let f = Fixture::new(layer, notes, clock, store);
    let subject = format!("eve{EVIL}");
    let first = send(&f.svc, post(&destroy_call(json!(1)), Some(&subject))).await;
    let (url, _, state) = elicitation(&first);
    let (status, headers, html) = visit(&page, "GET", &url, Some(&subject), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    for raw in ["<script", "<img", "\"'>"] {
        assert!(!html.contains(raw), "{raw} unescaped in {html}");
    }
    // Every attribute is double-quoted (the page builder writes them so), so a `'` is inert
    // and stays as it is; `"` and `>` are escaped.
    assert!(html.contains("&lt;script&gt;") && html.contains("&quot;'&gt;"));
    // The escaped id still round-trips through the form as the record's id.
    let choice: String = format!("id{EVIL}")
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    let form = format!("csrf={}&choice={choice}&decision=approve", csrf(&html));
    let (status, body) = decide(&page, &url, &subject, &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = send(
        &f.svc,
        post(&went_to_page(&state, json!(2)), Some(&subject)),
    )
    .await;
    assert_ran(&done);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        format!("id{EVIL}")
    );
}

/// Path tricks on the id segment: trailing slash, upper case, percent-encoding, an encoded
/// slash, `..`, a NUL, an over-long id, a prefix or suffix: none reaches the approval (404, and
/// no existence oracle before authentication: an unauthenticated visitor gets the same 401 for
/// a live id and a made-up one). A query string is ignored and decides nothing. Checked by
/// mutation: `ApprovalId::from_hex` accepting upper-case hex fails this test.
#[tokio::test]
async fn holds_only_the_exact_id_segment_names_an_approval() {
    let (f, page) = browser();
    let (url, id, state, _) = opened(&f, &page, json!(1)).await;
    let pct: String = id.bytes().map(|b| format!("%{b:02x}")).collect();
    for path in [
        format!("{url}/"),
        format!("{BASE}{}", id.to_uppercase()),
        format!("{BASE}{pct}"),
        format!("{BASE}{}%2F", id),
        format!("{BASE}{}%00", id),
        format!("{BASE}{id}0"),
        format!("{BASE}{}", &id[..31]),
        format!("{BASE}{id}/.."),
        format!("{BASE}{}", "a".repeat(60_000)),
        format!("{BASE}{id};x"),
    ] {
        let (status, _, html) = visit(&page, "GET", &path, Some("alice"), &[], "").await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "{}",
            &path[..path.len().min(80)]
        );
        assert!(!html.contains("note-7"));
    }
    let (live, _, _) = visit(&page, "GET", &url, None, &[], "").await;
    let (made_up, _, _) = visit(
        &page,
        "GET",
        &format!("{BASE}{}", "0".repeat(32)),
        None,
        &[],
        "",
    )
    .await;
    assert_eq!(
        (live, made_up),
        (StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED)
    );
    let (status, _, _) = visit(
        &page,
        "GET",
        &format!("{url}?decision=approve&choice=note-7"),
        Some("alice"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    still_undecided(&f, &state, &url).await;
}

/// A form body over 16 KiB is refused before it is parsed, whether or not it declares its
/// length, and decides nothing; the padding of a real decision up to the limit still works.
/// Checked by mutation: a 16 MiB `MAX_FORM_BYTES` fails this test.
#[tokio::test]
async fn holds_big_form_bodies_are_refused() {
    let (f, page) = browser();
    let (url, _, state, token) = opened(&f, &page, json!(1)).await;
    let form = format!("csrf={token}&choice=note-7&decision=approve&pad=");
    let big = format!("{form}{}", "x".repeat(16 * 1024 - form.len() + 1));
    let (status, _) = decide(&page, &url, "alice", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let mut headers = FORM_HEADERS.to_vec();
    headers.push(("content-length", "10"));
    let (status, _, _) = visit(&page, "POST", &url, Some("alice"), &headers, big.clone()).await;
    assert_ne!(status, StatusCode::OK);
    still_undecided(&f, &state, &url).await;
    let fits = format!("{form}{}", "x".repeat(16 * 1024 - form.len()));
    assert_eq!(decide(&page, &url, "alice", &fits).await.0, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// Shared stores: races and corrupted records
// ---------------------------------------------------------------------------------------------

/// The stores to attack: memory, and Redis and Postgres when they answer.
pub(super) async fn stores(what: &str) -> Vec<(&'static str, Arc<dyn crate::common::Store>)> {
    let mut stores: Vec<(&'static str, Arc<dyn crate::common::Store>)> =
        vec![("memory", Arc::new(MemoryReplayStore::new()))];
    if let Some(url) = crate::backends::redis(what).await {
        stores.push(("redis", Arc::new(redis_store(&url))));
    }
    if let Some(url) = crate::backends::postgres(what).await {
        stores.push(("postgres", Arc::new(pg_store(&url).await)));
    }
    stores
}

/// The Postgres store on this file's own table, migrated once (concurrent `CREATE TABLE IF NOT
/// EXISTS` races in Postgres's catalog).
async fn pg_store(url: &str) -> mcp_confirm::store::PostgresStore {
    static MIGRATED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let store = mcp_confirm::store::PostgresStore::connect(url)
        .unwrap()
        .table("browser_attacks")
        .unwrap();
    MIGRATED
        .get_or_init(|| async { store.migrate().await.unwrap() })
        .await;
    store
}

fn redis_prefix() -> String {
    format!(
        "mcp-confirm-test:browser-attacks:{}:",
        mcp_confirm::store::Nonce::random().to_hex()
    )
}

fn redis_store(url: &str) -> mcp_confirm::store::RedisStore {
    mcp_confirm::store::RedisStore::open(url)
        .unwrap()
        .prefix(redis_prefix())
}

/// A layer on `store` with the system clock, its page, and the recording service.
fn on_store(store: &Arc<dyn crate::common::Store>) -> (Confirm<Inner>, ApprovalPage, Recorder) {
    on_store_with(store, destroy_policy(&Notes::seeded()))
}

/// A signing key drawn once per run of this test binary.
fn run_key() -> [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    *KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(mcp_confirm::store::Nonce::random().as_bytes());
        key[16..].copy_from_slice(mcp_confirm::store::Nonce::random().as_bytes());
        key
    })
}

/// As [`on_store`], with `policy` for `notes_destroy`.
pub(super) fn on_store_with(
    store: &Arc<dyn crate::common::Store>,
    policy: ToolPolicy,
) -> (Confirm<Inner>, ApprovalPage, Recorder) {
    // A key of this run's own: the principal digests (and so the per-principal cap on pending
    // approvals) are not shared with earlier runs' records still in the Postgres table.
    let layer = ConfirmLayer::builder(KeyRing::single("k1", run_key()).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .store(Arc::clone(store))
        .tool("notes_destroy", policy)
        .approval_url(BASE)
        .build();
    let seen = Recorder::default();
    let page = layer.approval_page();
    (layer.layer(recording_inner(&seen)), page, seen)
}

/// Concurrent decisions on one approval, on every store: sixteen POSTs, approving note-3 or
/// note-7 or declining, race; exactly one is recorded (200), the others get 409, and the retry
/// does exactly what the recorded one said. Checked by mutation: `Approval::decide` without its
/// `AlreadyDecided` rule gives several 200s here (memory first) and fails this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_concurrent_decisions_record_exactly_one() {
    for (backend, store) in stores("concurrent page decisions").await {
        for round in 0..3 {
            let (svc, page, seen) = on_store(&store);
            let first = send(&svc, post(&destroy_call(json!(1)), Some("alice"))).await;
            let (url, _, state) = elicitation(&first);
            let html = page_as(&page, &url, "alice").await;
            let token = csrf(&html);
            let forms = [
                format!("csrf={token}&choice=note-3&decision=approve"),
                format!("csrf={token}&choice=note-7&decision=approve"),
                format!("csrf={token}&decision=decline"),
            ];
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let (page, url, form) = (page.clone(), url.clone(), forms[i % 3].clone());
                    tokio::spawn(async move {
                        let (status, body) = decide(&page, &url, "alice", &form).await;
                        (status, form, body)
                    })
                })
                .collect();
            let mut recorded = Vec::new();
            for task in tasks {
                let (status, form, body) = task.await.unwrap();
                match status {
                    StatusCode::OK => recorded.push(form),
                    StatusCode::CONFLICT => {}
                    other => panic!("{backend}: {other} {body}"),
                }
            }
            assert_eq!(recorded.len(), 1, "{backend} round {round}: {recorded:?}");
            let done = send(&svc, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
            if recorded[0].contains("decline") {
                assert_eq!(outcome(&done), "declined", "{backend}");
                assert_eq!(seen.count(), 0);
            } else {
                assert_ran(&done);
                let chosen = if recorded[0].contains("note-3") {
                    "note-3"
                } else {
                    "note-7"
                };
                assert_eq!(seen.last().json()["params"]["arguments"]["note_id"], chosen);
            }
        }
    }
}

/// A corrupted approval record in Redis or Postgres (garbage, the wrong shape, unknown fields,
/// a decision for a record that was never offered, an absurd expiry, another id): the page and
/// the retry never panic, the page shows nothing it cannot decode (503), and nothing but a
/// signed candidate ever runs (the tool here has no revalidation hook, so the retry's own
/// check is what refuses). Checked by mutation: without the retry's signed-candidate check in
/// `settle_browser`, `note-20` runs from the forged decision and this test fails.
#[tokio::test]
async fn holds_corrupted_approval_records_fail_closed() {
    use redis::AsyncCommands;
    type Mutation = Box<dyn Fn(&Value) -> String>;
    let mutations: Vec<(&str, Mutation)> = vec![
        ("garbage", Box::new(|_| "not json".to_owned())),
        ("empty object", Box::new(|_| "{}".to_owned())),
        ("array", Box::new(|_| "[1,2]".to_owned())),
        (
            "unknown field",
            Box::new(|r| {
                let mut r = r.clone();
                r["extra"] = json!(1);
                r.to_string()
            }),
        ),
        (
            "unoffered decision",
            Box::new(|r| {
                let mut r = r.clone();
                r["decision"] = json!({"decision": "approved", "chosen": "note-20"});
                r.to_string()
            }),
        ),
        (
            "far expiry",
            Box::new(|r| {
                let mut r = r.clone();
                r["expires_at_ms"] = json!(u64::MAX);
                r.to_string()
            }),
        ),
        (
            "bad hex",
            Box::new(|r| {
                let mut r = r.clone();
                r["nonce"] = json!("zz".repeat(16));
                r.to_string()
            }),
        ),
    ];
    let redis_url = crate::backends::redis("corrupted approval records (Redis)").await;
    let pg_url = crate::backends::postgres("corrupted approval records (Postgres)").await;
    for (what, mutate) in &mutations {
        let mut targets: Vec<(&str, Arc<dyn crate::common::Store>)> = Vec::new();
        let prefix = redis_prefix();
        if let Some(url) = &redis_url {
            let store = mcp_confirm::store::RedisStore::open(url)
                .unwrap()
                .prefix(prefix.clone());
            targets.push(("redis", Arc::new(store)));
        }
        if let Some(url) = &pg_url {
            targets.push(("postgres", Arc::new(pg_store(url).await)));
        }
        for (backend, store) in targets {
            // No revalidation hook: the retry's own check of the page's choice against the
            // signed candidates is all that stands between a forged decision and the tool.
            let policy = ToolPolicy::pick_one(|_: Lookup| async {
                Ok::<_, PolicyError>(vec![
                    Candidate::labelled("note-3", "Groceries (note-3)").with_version("1"),
                    Candidate::labelled("note-7", "Groceries (note-7)").with_version("1"),
                ])
            })
            .input_key("destroy_approval")
            .choice_field("note_id")
            .select_into("note_id")
            .approve_in_browser();
            let (svc, page, seen) = on_store_with(&store, policy);
            let first = send(&svc, post(&destroy_call(json!(1)), Some("alice"))).await;
            let (url, id, state) = elicitation(&first);
            // Read the record, corrupt it in place.
            if backend == "redis" {
                let mut redis = redis::Client::open(redis_url.clone().unwrap())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let key = format!("{prefix}approval:{id}");
                let record: String = redis.get(&key).await.unwrap();
                let record: Value = serde_json::from_str(&record).unwrap();
                let _: () = redis
                    .set_options(
                        &key,
                        mutate(&record),
                        redis::SetOptions::default().with_expiration(redis::SetExpiry::KEEPTTL),
                    )
                    .await
                    .unwrap();
            } else {
                let pool = pg_pool();
                let client = pool.get().await.unwrap();
                let row = client
                    .query_one(
                        "SELECT record FROM browser_attacks_approvals WHERE id = $1",
                        &[&id],
                    )
                    .await
                    .unwrap();
                let record: Value = serde_json::from_str(&row.get::<_, String>(0)).unwrap();
                client
                    .execute(
                        "UPDATE browser_attacks_approvals SET record = $2 WHERE id = $1",
                        &[&id, &mutate(&record)],
                    )
                    .await
                    .unwrap();
            }
            let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
            assert!(
                [
                    StatusCode::OK,
                    StatusCode::FORBIDDEN,
                    StatusCode::SERVICE_UNAVAILABLE
                ]
                .contains(&status),
                "{backend} {what}: {status} {html}"
            );
            let retry = send(&svc, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
            let json = retry.json();
            assert_eq!(seen.count(), 0, "{backend} {what}: ran {json}");
            let _ = (html, json);
        }
    }
}

/// A raw pool on the test database (to corrupt rows).
fn pg_pool() -> deadpool_postgres::Pool {
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(crate::backends::postgres_url());
    config
        .create_pool(
            Some(deadpool_postgres::Runtime::Tokio1),
            tokio_postgres::NoTls,
        )
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The demo's sign-in
// ---------------------------------------------------------------------------------------------

/// The demo's `next` is not an open redirect, its form does not reflect it unescaped, the
/// session cookie is `HttpOnly; SameSite=Strict`, an unknown token sets nothing, and the cookie
/// does not authenticate `/mcp` (which reads `Authorization` only). The page itself refuses a
/// cross-site POST before the layer's page sees it. Checked by mutation: `safe_next` returning
/// its input fails the first loop.
#[tokio::test]
async fn holds_demo_signin_redirects_home_and_its_cookie_stays_on_the_page() {
    let demo = Demo::start().await;
    for next in [
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/confirm/",
        "/confirm//evil.example",
        "/confirm/%2F%2Fevil",
        "/confirm/\r\nSet-Cookie:x=1",
        "/confirm/../signin",
        "javascript:alert(1)",
        "/confirm/\"><script>",
    ] {
        let body = format!(
            "token=alice-token&next={}",
            next.bytes()
                .map(|b| format!("%{b:02X}"))
                .collect::<String>()
        );
        let (status, location, cookie) = demo.sign_in(&body, &[]).await;
        assert_eq!(status, 303, "{next:?}");
        assert_eq!(location.as_deref(), Some("/signin"), "{next:?}");
        let cookie = cookie.unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        let form = Demo::http()
            .get(format!(
                "{}/signin?next={}",
                demo.base,
                next.bytes()
                    .map(|b| format!("%{b:02X}"))
                    .collect::<String>()
            ))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(form.contains("value=\"/signin\""), "{next:?}: {form}");
    }
    let (status, _, cookie) = demo.sign_in("token=mallory&next=", &[]).await;
    assert_eq!((status, cookie), (401, None));
    // The cookie alone does not reach /mcp.
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{}}}});
    let response = Demo::http()
        .post(format!("{}/mcp", demo.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .header("cookie", "notes_session=alice-token")
        .body(list.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    // A cross-site POST to the page is refused by the guard and the page.
    let response = Demo::http()
        .post(format!("{}/confirm/{}", demo.base, "0".repeat(32)))
        .header("cookie", "notes_session=alice-token")
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("decision=approve")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
}

/// Login CSRF from a sibling loopback origin: any page on another local port could sign a
/// browser in as someone else, because the sign-in only checked "some localhost origin". Now the
/// origin must be exactly the server's own, and `Sec-Fetch-Site` same-origin when sent; the same
/// for signing out. The sign-in page says `nosniff`.
#[tokio::test]
async fn holds_demo_signin_takes_posts_from_its_exact_origin_only() {
    let demo = Demo::start().await;
    let port: u16 = demo.base.rsplit(':').next().unwrap().parse().unwrap();
    let other = port.wrapping_add(1).max(1);
    let sibling_localhost = format!("http://localhost:{other}");
    let sibling_loopback = format!("http://127.0.0.1:{other}");
    let body = "token=bob-token&next=/confirm/00000000000000000000000000000000";
    for headers in [
        vec![
            ("origin", sibling_localhost.as_str()),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![("origin", sibling_loopback.as_str())],
        vec![
            ("origin", demo.base.as_str()),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![("origin", "null")],
    ] {
        let (status, _, cookie) = demo.sign_in(body, &headers).await;
        assert!(
            status == 403 && cookie.is_none(),
            "{headers:?} signed the browser in: {status}, Set-Cookie {cookie:?}"
        );
    }
    let own = [
        ("origin", demo.base.as_str()),
        ("sec-fetch-site", "same-origin"),
    ];
    let (status, _, cookie) = demo.sign_in(body, &own).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    let session = cookie.split(';').next().unwrap().to_owned();

    // Signing out: from another site refused; from the page it ends the session.
    let sign_out = |headers: Vec<(&'static str, String)>| {
        let mut request = Demo::http()
            .post(format!("{}/signout", demo.base))
            .header("cookie", session.clone());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send()
    };
    let refused = sign_out(vec![("origin", sibling_loopback.clone())])
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let done = sign_out(vec![
        ("origin", demo.base.clone()),
        ("sec-fetch-site", "same-origin".to_owned()),
    ])
    .await
    .unwrap();
    assert_eq!(done.status(), 200);
    let cleared = done.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let page = Demo::http()
        .get(format!(
            "{}/confirm/00000000000000000000000000000000",
            demo.base
        ))
        .header("cookie", session.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 401, "the old session is gone");

    let form = Demo::http()
        .get(format!("{}/signin", demo.base))
        .send()
        .await
        .unwrap();
    assert_eq!(form.headers()["x-content-type-options"], "nosniff");
}

/// The guard's 403 and every 404 under `/confirm/` carry the page's framing and sniffing rules,
/// not only the page's own answers.
#[tokio::test]
async fn holds_demo_refusals_under_confirm_carry_the_page_headers() {
    let demo = Demo::start().await;
    for path in ["/confirm/", "/confirm/nope", "/confirm/a/b/c"] {
        let response = Demo::http()
            .get(format!("{}{path}", demo.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let headers = response.headers();
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
    }
    let forbidden = Demo::http()
        .get(format!(
            "{}/confirm/00000000000000000000000000000000",
            demo.base
        ))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);
    let headers = forbidden.headers();
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
}
