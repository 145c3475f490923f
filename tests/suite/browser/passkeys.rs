//! Passkey-bound approvals (issue 23): approvers register passkeys on the passkey page and
//! approve with one; the assertion's challenge binds the approval, the arguments, the chosen
//! record's version and the approver, so it moves to no other decision. A software
//! authenticator (`tests/common/authenticator.rs`) makes the registrations and assertions,
//! verified by webauthn-rs; CI does the same in Chromium with a virtual authenticator.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::{ApprovalPage, PasskeyPage};
use std::sync::Arc;

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::Approvers;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfigError, ConfirmLayer, KeyRing, Principal};
use mcp_confirm_pages::passkey::Passkeys;
use serde_json::{Value, json};

use crate::common::authenticator::SoftAuthenticator;

pub(super) const ORIGIN_URL: &str = "https://notes.example";

pub(super) fn authenticator() -> SoftAuthenticator {
    SoftAuthenticator::new(ORIGIN_URL)
}

pub(super) struct Setup {
    pub(super) f: Fixture,
    pub(super) page: ApprovalPage,
    pub(super) keys_page: PasskeyPage,
}

pub(super) fn setup(rule: Approvers) -> Setup {
    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let passkeys = Passkeys::new("notes.example", ORIGIN_URL, store.clone()).unwrap();
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(rule)
                .recheck_approvers(different_people),
        )
        .passkeys(passkeys)
        .build();
    let (page, keys_page) = (layer.approval_page(), layer.passkey_page().unwrap());
    Setup {
        f: Fixture::new(layer, notes, clock, store),
        page,
        keys_page,
    }
}

/// The value of hidden input `name` in `html`.
pub(super) fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("{name} in {html}"))
        + marker.len();
    let end = html[at..].find('"').unwrap();
    html[at..at + end]
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The ceremony's options the page embedded.
pub(super) fn options(html: &str) -> Value {
    let at = html.find("id=\"options\">").expect("options") + 13;
    let end = html[at..].find("</script>").unwrap();
    serde_json::from_str(&html[at..at + end].replace("\\u003c", "<")).unwrap()
}

pub(super) fn form(fields: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        out.append_pair(k, v);
    }
    out.finish()
}

pub(super) async fn post<P>(
    page: &P,
    url: &str,
    who: &Principal,
    body: String,
) -> (StatusCode, String)
where
    P: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<http_body_util::Full<bytes::Bytes>>,
            Error = std::convert::Infallible,
        > + Clone,
{
    let (status, _, html) =
        visit_as(page, "POST", url, Some(who.clone()), &FORM_HEADERS, body).await;
    (status, html)
}

pub(super) const KEYS_URL: &str = "http://notes.example/passkeys";

/// Registers `client`'s passkey for `who` on the passkey page; the page after it.
pub(super) async fn register(
    keys_page: &PasskeyPage,
    who: &Principal,
    client: &mut SoftAuthenticator,
) -> (StatusCode, String) {
    let (status, headers, html) =
        visit_as(keys_page, "GET", KEYS_URL, Some(who.clone()), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'sha256-") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    // The one script the policy admits is the one the page runs: its hash is computed from the
    // script file's bytes, not kept beside it by hand.
    let script = html
        .split("<script>")
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .expect("the page runs one inline script");
    let hash = {
        use base64::Engine as _;
        use sha2::Digest as _;
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script))
    };
    assert!(
        csp.contains(&format!("script-src 'sha256-{hash}'")),
        "{csp}"
    );
    assert!(script.contains("navigator.credentials.create"), "{script}");
    let response = client.register(&options(&html));
    let body = form(&[
        ("csrf", &hidden(&html, "csrf")),
        ("action", "register"),
        ("ceremony", &hidden(&html, "ceremony")),
        ("response", &response),
        ("name", "laptop"),
    ]);
    post(keys_page, KEYS_URL, who, body).await
}

/// The approval page's passkey step for `who` choosing `choice`: the step page's html.
async fn passkey_step(page: &ApprovalPage, url: &str, who: &Principal, choice: &str) -> String {
    let (_, _, html) = visit_as(page, "GET", url, Some(who.clone()), &[], "").await;
    let body = form(&[
        ("csrf", &csrf(&html)),
        ("choice", choice),
        ("decision", "approve"),
    ]);
    let (status, step) = post(page, url, who, body).await;
    assert_eq!(status, StatusCode::OK, "{step}");
    assert!(step.contains("Confirm with your passkey"), "{step}");
    step
}

/// The authenticator's assertion over the step page's options, as the page's script posts it.
async fn assertion(client: &mut SoftAuthenticator, step: &str) -> String {
    client.assert(&options(step))
}

/// Posts the step page's form with `response` (and `ceremony`) to `url`.
async fn answer_step(
    page: &ApprovalPage,
    url: &str,
    who: &Principal,
    step: &str,
    ceremony: &str,
    response: &str,
) -> (StatusCode, String) {
    let body = form(&[
        ("csrf", &hidden(step, "csrf")),
        ("decision", "approve"),
        ("choice", &hidden(step, "choice")),
        ("ceremony", ceremony),
        ("response", response),
    ]);
    post(page, url, who, body).await
}

async fn pending(f: &Fixture, state: &str, id: u64) -> Answer {
    f.alice(&went_to_page(state, json!(id))).await
}

#[tokio::test]
async fn a_second_principal_approves_with_a_passkey_and_the_retry_deletes_the_chosen_note_once() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    let (status, html) = register(&s.keys_page, &bob, &mut key).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("laptop"), "{html}");
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let step = passkey_step(&s.page, &url, &bob, "note-7").await;
    assert!(
        step.contains(&format!("version {}", s.f.notes.version("note-7"))),
        "{step}"
    );
    // The challenge carries this decision: 48 bytes, not webauthn-rs's own 32.
    let challenge = options(&step)["publicKey"]["challenge"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(challenge.len(), 64, "{challenge}");
    let response = assertion(&mut key, &step).await;
    let (status, body) = answer_step(
        &s.page,
        &url,
        &bob,
        &step,
        &hidden(&step, "ceremony"),
        &response,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Approved"), "{body}");
    // The approval records which passkey verified it.
    use mcp_confirm::approval::{ApprovalId, ApprovalStore};
    let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
    let record = s.f.store.approval(id).await.unwrap().unwrap();
    let (_, _, listed) = visit_as(&s.keys_page, "GET", KEYS_URL, Some(bob.clone()), &[], "").await;
    assert_eq!(
        record.endorsements[0].passkey.as_deref(),
        Some(hidden(&listed, "id").as_str())
    );
    let done = pending(&s.f, &state, 2).await;
    assert_ran(&done);
    assert_eq!(
        s.f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
    assert_eq!(
        pending(&s.f, &state, 3).await.error()["data"]["reason"],
        "invalid_request_state"
    );
    assert_eq!(s.f.seen.count(), 1);
}

#[tokio::test]
async fn without_a_verified_passkey_nothing_is_recorded() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let (bob, carol) = (Principal::new("bob"), Principal::new("carol"));
    let mut key = authenticator();
    register(&s.keys_page, &bob, &mut key).await;
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    // Carol has no passkey: told to register one.
    let (_, _, html) = visit_as(&s.page, "GET", &url, Some(carol.clone()), &[], "").await;
    let body = form(&[
        ("csrf", &csrf(&html)),
        ("choice", "note-7"),
        ("decision", "approve"),
    ]);
    let (status, page) = post(&s.page, &url, &carol, body).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("none registered"), "{page}");
    // Bob posts garbage, an empty response, or a ceremony without its assertion.
    let step = passkey_step(&s.page, &url, &bob, "note-7").await;
    let ceremony = hidden(&step, "ceremony");
    for (ceremony, response) in [
        (ceremony.as_str(), "{}"),
        (ceremony.as_str(), "not json"),
        ("forged.ceremony", "{}"),
    ] {
        let (status, _) = answer_step(&s.page, &url, &bob, &step, ceremony, response).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{ceremony} {response}");
    }
    // Bob's authenticator, without user verification: signed, but not verified.
    key.verify = false;
    let response = assertion(&mut key, &step).await;
    let (status, _) = answer_step(&s.page, &url, &bob, &step, &ceremony, &response).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an assertion without user verification"
    );
    let still = pending(&s.f, &state, 2).await;
    assert!(
        still.result()["resultType"] == "input_required",
        "{}",
        still.json()
    );
    assert_eq!(s.f.seen.count(), 0);
    // With it, the same step goes through: the refusals above were the passkey's.
    key.verify = true;
    let response = assertion(&mut key, &step).await;
    let (status, body) = answer_step(&s.page, &url, &bob, &step, &ceremony, &response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_ran(&pending(&s.f, &state, 3).await);
}

#[tokio::test]
async fn an_assertion_moves_to_no_other_approval_record_or_approver() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let (bob, carol) = (Principal::new("bob"), Principal::new("carol"));
    let (mut bob_key, mut carol_key) = (authenticator(), authenticator());
    register(&s.keys_page, &bob, &mut bob_key).await;
    register(&s.keys_page, &carol, &mut carol_key).await;
    let (first, _, first_state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let (second, _, _) = elicitation(&s.f.alice(&destroy_call(json!(2))).await);
    // Bob's assertion for the first approval, choosing note-7.
    let step = passkey_step(&s.page, &first, &bob, "note-7").await;
    let ceremony = hidden(&step, "ceremony");
    let response = assertion(&mut bob_key, &step).await;
    // ... posted on the second approval, with its ceremony or with the second's own.
    let (status, _) = answer_step(&s.page, &second, &bob, &step, &ceremony, &response).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "another approval, its ceremony"
    );
    let (_, _, html2) = visit_as(&s.page, "GET", &second, Some(bob.clone()), &[], "").await;
    let step2 = passkey_step(&s.page, &second, &bob, "note-7").await;
    let body = form(&[
        ("csrf", &csrf(&html2)),
        ("decision", "approve"),
        ("choice", "note-7"),
        ("ceremony", &hidden(&step2, "ceremony")),
        ("response", &response),
    ]);
    assert_eq!(
        post(&s.page, &second, &bob, body).await.0,
        StatusCode::FORBIDDEN,
        "another approval's ceremony"
    );
    // ... for another record (another id, another version) of the same approval.
    let body = form(&[
        ("csrf", &hidden(&step, "csrf")),
        ("decision", "approve"),
        ("choice", "note-3"),
        ("ceremony", &ceremony),
        ("response", &response),
    ]);
    assert_eq!(
        post(&s.page, &first, &bob, body).await.0,
        StatusCode::FORBIDDEN,
        "another record"
    );
    // ... by carol (her own token, bob's ceremony and assertion).
    let (_, _, carol_html) = visit_as(&s.page, "GET", &first, Some(carol.clone()), &[], "").await;
    let body = form(&[
        ("csrf", &csrf(&carol_html)),
        ("decision", "approve"),
        ("choice", "note-7"),
        ("ceremony", &ceremony),
        ("response", &response),
    ]);
    assert_eq!(
        post(&s.page, &first, &carol, body).await.0,
        StatusCode::FORBIDDEN,
        "another approver"
    );
    assert!(pending(&s.f, &first_state, 3).await.result()["resultType"] == "input_required");
    // Where it belongs, it decides.
    let (status, body) = answer_step(&s.page, &first, &bob, &step, &ceremony, &response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_ran(&pending(&s.f, &first_state, 4).await);
    assert_eq!(s.f.seen.count(), 1);
}

/// A version the approval was made for that changed before the retry: the passkey bound the
/// decision to the version shown, and the retry's revalidation refuses the changed record.
#[tokio::test]
async fn an_approval_for_a_version_that_changed_runs_nothing() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    register(&s.keys_page, &bob, &mut key).await;
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let step = passkey_step(&s.page, &url, &bob, "note-7").await;
    let response = assertion(&mut key, &step).await;
    let (status, _) = answer_step(
        &s.page,
        &url,
        &bob,
        &step,
        &hidden(&step, "ceremony"),
        &response,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    s.f.notes.edit("note-7");
    let refused = pending(&s.f, &state, 2).await;
    assert_eq!(outcome(&refused), "revoked", "{}", refused.json());
    assert_eq!(s.f.seen.count(), 0);
}

#[tokio::test]
async fn a_removed_passkey_verifies_nothing_even_mid_ceremony() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    let (_, listed) = register(&s.keys_page, &bob, &mut key).await;
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let step = passkey_step(&s.page, &url, &bob, "note-7").await;
    let response = assertion(&mut key, &step).await;
    // Bob removes the passkey (a lost laptop) before his assertion arrives.
    let id = hidden(&listed, "id");
    let body = form(&[
        ("csrf", &hidden(&listed, "csrf")),
        ("action", "remove"),
        ("id", &id),
    ]);
    let (status, after) = post(&s.keys_page, KEYS_URL, &bob, body).await;
    assert_eq!(status, StatusCode::OK);
    assert!(after.contains("no passkey registered"), "{after}");
    let (status, _) = answer_step(
        &s.page,
        &url,
        &bob,
        &step,
        &hidden(&step, "ceremony"),
        &response,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(pending(&s.f, &state, 2).await.result()["resultType"] == "input_required");
    assert_eq!(s.f.seen.count(), 0);
}

/// A repeated field on the passkey page, or in the approval page's passkey step, is refused
/// whole (#52, 5): nothing removed, registered, verified or recorded.
#[tokio::test]
async fn a_repeated_field_on_the_passkey_page_or_step_changes_nothing() {
    use super::repeated_fields::assert_repeated;
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    let (_, listed) = register(&s.keys_page, &bob, &mut key).await;
    let (id, token) = (hidden(&listed, "id"), hidden(&listed, "csrf"));
    for fields in [
        [
            ("csrf", &*token),
            ("action", "remove"),
            ("id", &id),
            ("id", &id),
        ],
        [
            ("csrf", &token),
            ("action", "remove"),
            ("action", "remove"),
            ("id", &id),
        ],
        [
            ("csrf", &token),
            ("csrf", &token),
            ("action", "remove"),
            ("id", &id),
        ],
        [
            ("csrf", &token),
            ("action", "register"),
            ("action", "remove"),
            ("id", &id),
        ],
    ] {
        let body = form(&fields);
        let (status, html) = post(&s.keys_page, KEYS_URL, &bob, body.clone()).await;
        assert_repeated(status, &html, &body);
    }
    let (_, _, still) = visit_as(&s.keys_page, "GET", KEYS_URL, Some(bob.clone()), &[], "").await;
    assert!(still.contains("laptop"), "{still}");
    // The passkey step: the fields it carries and the assertion, each once.
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let step = passkey_step(&s.page, &url, &bob, "note-7").await;
    let response = assertion(&mut key, &step).await;
    let (ceremony, token, choice) = (
        hidden(&step, "ceremony"),
        hidden(&step, "csrf"),
        hidden(&step, "choice"),
    );
    let once = [
        ("csrf", token.as_str()),
        ("decision", "approve"),
        ("choice", &choice),
        ("ceremony", &ceremony),
        ("response", &response),
    ];
    for twice in [
        ("response", response.as_str()),
        ("ceremony", &ceremony),
        ("decision", "decline"),
        ("choice", "note-3"),
        ("csrf", &token),
    ] {
        let mut fields = once.to_vec();
        fields.push(twice);
        let body = form(&fields);
        let (status, html) = post(&s.page, &url, &bob, body.clone()).await;
        assert_repeated(status, &html, &body);
    }
    assert_eq!(
        pending(&s.f, &state, 2).await.result()["resultType"],
        "input_required"
    );
    // The same assertion with each field once: verified and recorded.
    let (status, body) = answer_step(&s.page, &url, &bob, &step, &ceremony, &response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Approved"), "{body}");
    assert_ran(&pending(&s.f, &state, 3).await);
}

#[tokio::test]
async fn the_passkey_page_keeps_each_principal_to_their_own() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let (bob, carol) = (Principal::new("bob"), Principal::new("carol"));
    let mut key = authenticator();
    let (_, listed) = register(&s.keys_page, &bob, &mut key).await;
    let id = hidden(&listed, "id");
    // Carol cannot remove bob's passkey, with her token or his.
    let (_, _, carol_page) =
        visit_as(&s.keys_page, "GET", KEYS_URL, Some(carol.clone()), &[], "").await;
    for token in [hidden(&carol_page, "csrf"), hidden(&listed, "csrf")] {
        let body = form(&[("csrf", &token), ("action", "remove"), ("id", &id)]);
        post(&s.keys_page, KEYS_URL, &carol, body).await;
    }
    let (_, _, bob_page) =
        visit_as(&s.keys_page, "GET", KEYS_URL, Some(bob.clone()), &[], "").await;
    assert!(bob_page.contains("laptop"), "{bob_page}");
    // A ceremony carol was given, posted by bob, registers nothing; nor does registering bob's
    // credential a second time.
    let mut carol_key = authenticator();
    let response = carol_key.register(&options(&carol_page));
    let body = form(&[
        ("csrf", &hidden(&bob_page, "csrf")),
        ("action", "register"),
        ("ceremony", &hidden(&carol_page, "ceremony")),
        ("response", &response),
    ]);
    let (status, html) = post(&s.keys_page, KEYS_URL, &bob, body).await;
    assert!(html.contains("was not registered"), "{status} {html}");
    let (_, again) = register(&s.keys_page, &bob, &mut key).await;
    assert!(again.contains("was not registered"), "{again}");
    assert_eq!(again.matches("<li>").count(), 1, "{again}");
    // No principal, no page; no token, no change.
    let (status, _, _) = visit(&s.keys_page, "GET", KEYS_URL, None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let body = form(&[("action", "remove"), ("id", &id)]);
    assert_eq!(
        post(&s.keys_page, KEYS_URL, &bob, body).await.0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn a_rule_that_requires_passkeys_needs_a_verifier() {
    let notes = Notes::seeded();
    let refused = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .approval_url(BASE)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller().with_passkey())
                .recheck_approvers(different_people),
        )
        .try_build();
    assert!(
        matches!(refused, Err(ConfigError::MissingPasskeys)),
        "{refused:?}"
    );
    assert!(Passkeys::new("notes.example", "not a url", MemoryReplayStore::new()).is_err());
    assert!(
        Passkeys::new(
            "other.example",
            ORIGIN_URL,
            Arc::new(MemoryReplayStore::new())
        )
        .is_err()
    );
}

/// On every store, four instances of one deployment: bob registers his passkey on the first,
/// alice calls on the second, bob approves with the passkey on the third's page, and the retry
/// runs on the fourth: exactly the chosen note, once, and the same retry anywhere after is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_on_one_instance_approved_on_another_retried_on_a_third() {
    for (backend, store) in super::attacks::stores("passkeys across instances").await {
        let instance = || {
            let passkeys = Passkeys::new("notes.example", ORIGIN_URL, Arc::clone(&store)).unwrap();
            let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
                .without_tool_list_unchecked()
                .audience("https://notes.example/mcp")
                .store(Arc::clone(&store))
                .tool(
                    "notes_destroy",
                    destroy_policy(&Notes::seeded())
                        .approved_by(Approvers::anyone_but_caller().with_passkey())
                        .recheck_approvers(different_people),
                )
                .approval_url(BASE)
                .passkeys(passkeys)
                .build();
            let seen = Recorder::default();
            let (page, keys_page) = (layer.approval_page(), layer.passkey_page().unwrap());
            (
                tower::Layer::layer(&layer, recording_inner(&seen)),
                page,
                keys_page,
                seen,
            )
        };
        let (_, _, keys_page, _) = instance();
        let (caller, _, _, _) = instance();
        let (_, page, _, _) = instance();
        let (retry, _, _, seen) = instance();
        // A subject of this run's own: earlier runs' passkeys stay in the shared tables.
        let bob = Principal::new(format!(
            "bob-{}",
            &mcp_confirm::store::Nonce::random().to_hex()[..8]
        ));
        let mut key = authenticator();
        let (status, html) = register(&keys_page, &bob, &mut key).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {html}");
        let (url, _, state) = elicitation(
            &send(
                &caller,
                crate::common::post(&destroy_call(json!(1)), Some("alice")),
            )
            .await,
        );
        let step = passkey_step(&page, &url, &bob, "note-7").await;
        let response = assertion(&mut key, &step).await;
        let ceremony = hidden(&step, "ceremony");
        let (status, body) = answer_step(&page, &url, &bob, &step, &ceremony, &response).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        // The same assertion posted again decides nothing more.
        let (status, _) = answer_step(&page, &url, &bob, &step, &ceremony, &response).await;
        assert_ne!(status, StatusCode::OK, "{backend}: a replayed assertion");
        let ran = send(
            &retry,
            crate::common::post(&went_to_page(&state, json!(2)), Some("alice")),
        )
        .await;
        assert_ran(&ran);
        assert_eq!(
            seen.last().json()["params"]["arguments"]["note_id"],
            "note-7",
            "{backend}"
        );
        let again = send(
            &caller,
            crate::common::post(&went_to_page(&state, json!(3)), Some("alice")),
        )
        .await;
        assert_eq!(
            again.error()["data"]["reason"],
            "invalid_request_state",
            "{backend}"
        );
        assert_eq!(seen.count(), 1, "{backend}");
    }
}

/// The layer holds its passkey verifier type-erased (the pages left the core, #53). A verifier
/// that is not the pages' WebAuthn `Passkeys` (a hurried deployment's own marker type, say)
/// satisfies the build, but the page cannot verify with it: it approves nothing under a rule
/// that requires a passkey, records nothing, offers no passkey page, and the retry waits.
#[tokio::test]
async fn a_verifier_the_pages_cannot_use_approves_nothing() {
    #[derive(Debug)]
    struct NotWebAuthn;
    impl mcp_confirm::approval::PasskeyVerifier for NotWebAuthn {}

    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller().with_passkey())
                .recheck_approvers(different_people),
        )
        .passkeys(NotWebAuthn)
        .build();
    assert!(layer.passkey_page().is_none());
    let (page, desk) = (layer.approval_page(), layer.approval_desk());
    assert!(desk.needs_passkeys() && desk.passkeys().is_some());
    let f = Fixture::new(layer, notes, clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let bob = Principal::new("bob");
    let (_, _, html) = visit_as(&page, "GET", &url, Some(bob.clone()), &[], "").await;
    let body = form(&[
        ("csrf", &csrf(&html)),
        ("choice", "note-7"),
        ("decision", "approve"),
    ]);
    let (status, answer) = post(&page, &url, &bob, body).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer.contains("cannot verify"), "{answer}");
    let id = mcp_confirm::approval::ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
    let approval = desk.approval(id, &bob).await.unwrap().unwrap();
    assert!(approval.decision.is_none() && approval.endorsements.is_empty());
    let retry = pending(&f, &state, 2).await;
    assert_eq!(
        retry.result()["resultType"],
        "input_required",
        "{}",
        retry.json()
    );
    assert_eq!(f.seen.count(), 0, "nothing reached the tool");
}
