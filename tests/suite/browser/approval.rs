//! Approval in the browser: the URL-mode flow through the layer, and the approval page itself,
//! over plain HTTP (the real browser drives the same page in `.ci/browser.sh`).

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::{ConfigError, ConfirmLayer, KeyRing, Principal, ToolPolicy};
use mcp_confirm_pages::LayerPages as _;
use serde_json::json;

#[tokio::test]
async fn approved_in_the_browser_the_retry_deletes_exactly_the_chosen_note() {
    let (f, page) = browser();
    let first = f.alice(&destroy_call(json!(1))).await;
    let (url, id, state) = elicitation(&first);
    assert_eq!(url, format!("{BASE}{id}"));
    assert_eq!(id.len(), 32, "the URL carries only an opaque id");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    // Back before deciding: asked again, same page, same state; nothing runs.
    let early = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(
        elicitation(&early),
        (url.clone(), id.clone(), state.clone())
    );
    assert_eq!(f.seen.count(), 0);
    // The page, as alice: the tool, each note with its version, who asks, until when.
    let (status, headers, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    for needle in [
        "notes_destroy",
        "note-7",
        "Groceries (note-7)",
        "alice",
        "GMT",
        &format!("version {}", f.notes.version("note-7")),
    ] {
        assert!(html.contains(needle), "{needle} missing from {html}");
    }
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["cache-control"], "no-store");
    // Not no-referrer: under it a browser posts the page's own form with `Origin: null`.
    assert_eq!(headers["referrer-policy"], "same-origin");
    // Reading the page changed nothing.
    assert_eq!(
        elicitation(&f.alice(&went_to_page(&state, json!(3))).await).0,
        url
    );
    let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
    let (status, body) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Approved"));
    // Replaying the approve POST is refused; so is changing one's mind.
    let (status, _) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let decline = format!("csrf={}&decision=decline", csrf(&html));
    assert_eq!(
        decide(&page, &url, "alice", &decline).await.0,
        StatusCode::CONFLICT
    );
    // The retry runs the approved note, once.
    let done = f.alice(&went_to_page(&state, json!(4))).await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    let seen = f.seen.last();
    assert_eq!(seen.json()["params"]["arguments"]["note_id"], "note-7");
    let confirmed = seen.confirmed.unwrap();
    assert!(confirmed.covers("notes_destroy", Some("note-7")));
    assert_eq!(confirmed.version, Some(f.notes.version("note-7")));
    let replay = f.alice(&went_to_page(&state, json!(5))).await;
    assert_eq!(replay.error()["data"]["reason"], "invalid_request_state");
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn declined_in_the_browser_the_retry_is_refused() {
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let html = page_as(&page, &url, "alice").await;
    let (status, body) = decide(
        &page,
        &url,
        "alice",
        &format!("csrf={}&decision=decline", csrf(&html)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let refused = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(
        refused.result()["_meta"]["io.github.mcp-confirm/outcome"],
        "declined"
    );
    assert_eq!(f.seen.count(), 0);
    // And the declined state cannot be approved later.
    let again = f.alice(&went_to_page(&state, json!(3))).await;
    assert_eq!(again.error()["data"]["reason"], "invalid_request_state");
}

#[tokio::test]
async fn only_the_principal_who_asked_may_see_or_decide() {
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _, html) = visit(&page, "GET", &url, None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!html.contains("note-7"));
    let (status, _, html) = visit(&page, "GET", &url, Some("bob"), &[], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        !html.contains("note-7") && !html.contains("Groceries"),
        "{html}"
    );
    // Bob cannot get a token for alice's approval: the page refuses him before showing one,
    // and a token is bound to its principal, so alice's is useless to him.
    let alice_html = page_as(&page, &url, "alice").await;
    let stolen = format!("csrf={}&choice=note-7&decision=approve", csrf(&alice_html));
    assert_eq!(
        decide(&page, &url, "bob", &stolen).await.0,
        StatusCode::FORBIDDEN
    );
    // Still undecided for alice.
    assert_eq!(
        elicitation(&f.alice(&went_to_page(&state, json!(2))).await).0,
        url
    );
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn forged_and_cross_site_decisions_are_refused() {
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let html = page_as(&page, &url, "alice").await;
    let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
    let form_type = ("content-type", "application/x-www-form-urlencoded");
    for headers in [
        vec![form_type, ("origin", "http://evil.example")],
        vec![form_type, ("origin", "null")],
        vec![form_type, ("sec-fetch-site", "cross-site")],
        vec![("content-type", "text/plain"), ("origin", ORIGIN)],
    ] {
        let (status, _, _) =
            visit(&page, "POST", &url, Some("alice"), &headers, form.clone()).await;
        assert!(status.is_client_error(), "{headers:?}: {status}");
    }
    let (status, _) = decide(&page, &url, "alice", "choice=note-7&decision=approve").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no token");
    let forged = format!("csrf={}&choice=note-7&decision=approve", "0".repeat(64));
    assert_eq!(
        decide(&page, &url, "alice", &forged).await.0,
        StatusCode::FORBIDDEN
    );
    // A choice the form did not offer.
    let other = format!("csrf={}&choice=note-20&decision=approve", csrf(&html));
    let (status, body) = decide(&page, &url, "alice", &other).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Choose one of the records shown"), "{body}");
    let (status, _, _) = visit(&page, "PUT", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _, _) = visit(
        &page,
        "GET",
        &format!("{BASE}{}", "f".repeat(32)),
        Some("alice"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = visit(
        &page,
        "GET",
        &format!("{BASE}../etc"),
        Some("alice"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // None of it decided anything.
    assert_eq!(
        elicitation(&f.alice(&went_to_page(&state, json!(2))).await).0,
        url
    );
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn approving_can_require_typing_the_records_id() {
    let (f, page) = browser_with(ToolPolicy::require_typed_id);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let html = page_as(&page, &url, "alice").await;
    assert!(html.contains("name=\"typed\""));
    let token = csrf(&html);
    for typed in ["", "note-3", "NOTE-7"] {
        let form = format!("csrf={token}&choice=note-7&decision=approve&typed={typed}");
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("Type the id"), "{typed}: {body}");
    }
    assert_eq!(
        elicitation(&f.alice(&went_to_page(&state, json!(2))).await).0,
        url
    );
    let form = format!("csrf={token}&choice=note-7&decision=approve&typed=note-7");
    assert!(
        decide(&page, &url, "alice", &form)
            .await
            .1
            .contains("Approved")
    );
    f.alice(&went_to_page(&state, json!(3))).await;
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
}

#[tokio::test]
async fn a_client_without_url_elicitation_gets_32021_and_a_form_answer_decides_nothing() {
    let (f, _) = browser();
    let mut form_only = destroy_call(json!(1));
    form_only["params"]["_meta"] = meta();
    let refused = f.alice(&form_only).await;
    assert_eq!(refused.error()["code"], -32021);
    assert_eq!(
        refused.error()["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );
    // A form-style accept with content decides nothing in URL mode: the content is not read,
    // and the undecided approval is asked for again.
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(2))).await);
    let mut forged = went_to_page(&state, json!(3));
    forged["params"]["inputResponses"] = json!({"destroy_approval": {"action": "accept",
        "content": {"note_id": "note-7", "confirm": true}}});
    let answer = f.alice(&forged).await;
    assert_eq!(elicitation(&answer).0, url, "{}", answer.json());
    // Content that is not even an object is malformed: an error.
    forged["params"]["inputResponses"] =
        json!({"destroy_approval": {"action": "accept", "content": "note-7"}});
    assert_eq!(f.alice(&forged).await.error()["code"], -32602);
    assert_eq!(f.seen.count(), 0);
}

#[test]
fn browser_approval_needs_an_absolute_approval_url() {
    let notes = Notes::seeded();
    let build = |url: Option<&str>| {
        let mut b = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .tool("notes_destroy", delete_policy(&notes).approve_in_browser());
        if let Some(url) = url {
            b = b.approval_url(url);
        }
        b.try_build().map(drop)
    };
    assert_eq!(build(None), Err(ConfigError::InvalidApprovalUrl));
    assert_eq!(
        build(Some("/confirm/")),
        Err(ConfigError::InvalidApprovalUrl)
    );
    assert_eq!(
        build(Some("ftp://notes.example/confirm/")),
        Err(ConfigError::InvalidApprovalUrl)
    );
    assert_eq!(
        build(Some("https://notes.example/confirm?x=1")),
        Err(ConfigError::InvalidApprovalUrl)
    );
    assert_eq!(build(Some("https://notes.example/confirm")), Ok(()));
}

/// Two instances share a Redis or Postgres replay store: the first call reaches one, the page
/// another, the retry the first again. The decision travels with the store.
#[tokio::test]
async fn the_page_and_the_retry_may_reach_different_instances() {
    use mcp_confirm::store::{PostgresStore, RedisStore};
    use std::sync::Arc;
    use tower::Layer;
    let mut stores: Vec<(&str, Arc<dyn crate::common::Store>)> = Vec::new();
    if let Some(url) = crate::backends::redis("browser approval across instances (Redis)").await {
        let prefix = format!(
            "mcp-confirm-test:browser:{}:",
            mcp_confirm::store::Nonce::random().to_hex()
        );
        stores.push((
            "redis",
            Arc::new(RedisStore::open(&url).unwrap().prefix(prefix)),
        ));
    }
    if let Some(url) =
        crate::backends::postgres("browser approval across instances (Postgres)").await
    {
        let store = PostgresStore::connect(&url).unwrap();
        store.migrate().await.unwrap();
        stores.push(("postgres", Arc::new(store)));
    }
    for (backend, store) in stores {
        let notes = Notes::seeded();
        let instance = || {
            ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
                .without_tool_list_unchecked()
                .audience("https://notes.example/mcp")
                .store(Arc::clone(&store))
                .tool(
                    "notes_destroy",
                    delete_policy(&notes)
                        .input_key("destroy_approval")
                        .approve_in_browser(),
                )
                .approval_url(BASE)
                .build()
        };
        let (a, b) = (instance(), instance());
        let seen = Recorder::default();
        let svc_a = a.layer(recording_inner(&seen));
        let page_b = b.approval_page();
        let first = send(&svc_a, post(&destroy_call(json!(1)), Some("alice"))).await;
        let (url, _, state) = elicitation(&first);
        let (status, _, html) = visit(&page_b, "GET", &url, Some("alice"), &[], "").await;
        assert_eq!(status, StatusCode::OK, "{backend}: {html}");
        let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
        let (status, body) = decide(&page_b, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        let done = send(&svc_a, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
        assert_eq!(
            done.result()["content"][0]["text"],
            "done by inner",
            "{backend}: {}",
            done.json()
        );
        assert_eq!(
            seen.last().json()["params"]["arguments"]["note_id"],
            "note-7"
        );
        // The other instance refuses the replay.
        let svc_b = b.layer(recording_inner(&seen));
        let replay = send(&svc_b, post(&went_to_page(&state, json!(3)), Some("alice"))).await;
        assert_eq!(
            replay.error()["data"]["reason"],
            "invalid_request_state",
            "{backend}"
        );
        assert_eq!(seen.count(), 1);
    }
}

/// A layer with a local principal (a single-user deployment) still needs the page's visitor to
/// be authenticated: the local principal is never lent to whoever reaches the page.
#[tokio::test]
async fn the_page_never_falls_back_to_the_local_principal() {
    let notes = Notes::seeded();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .unauthenticated_local_principal(Principal::new("alice"))
        .tool(
            "notes_destroy",
            delete_policy(&notes)
                .input_key("destroy_approval")
                .approve_in_browser(),
        )
        .approval_url(BASE)
        .build();
    let page = layer.approval_page();
    // The local principal applies to messages only (stdio): the call comes in as one.
    let svc = tower::Layer::layer(
        &layer,
        tower::service_fn(|_: mcp_confirm::JsonRpcMessage| async {
            Ok::<_, std::convert::Infallible>(mcp_confirm::JsonRpcReply::none())
        }),
    );
    let call = destroy_call(json!(1));
    let reply = tower::ServiceExt::oneshot(svc, mcp_confirm::JsonRpcMessage::new(call.to_string()))
        .await
        .unwrap();
    let first: serde_json::Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    let url = first["result"]["inputRequests"]["destroy_approval"]["params"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    let (status, _, html) = visit(&page, "GET", &url, None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{html}");
    assert!(!html.contains("note-7"));
}

#[tokio::test]
async fn a_state_the_client_declined_is_never_challenged_again() {
    // Declined in the client (the nonce is spent), never decided on the page: the same state
    // with `accept` gets the one answer every used state gets, not the page again.
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let declined = f
        .alice(&with_answer(
            destroy_call(json!(2)),
            &state,
            json!({"action": "decline"}),
        ))
        .await;
    assert_eq!(outcome(&declined), "declined", "{}", declined.json());
    for id in 3..5 {
        let again = f.alice(&went_to_page(&state, json!(id))).await;
        assert_eq!(
            again.error()["data"]["reason"],
            "invalid_request_state",
            "{}",
            again.json()
        );
    }
    // The page agrees: nothing left to decide.
    let html = page_as(&page, &url, "alice").await;
    assert!(html.contains("Already answered"), "{html}");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn the_page_shows_labels_cleaned_as_the_form_does() {
    // Bidirectional overrides and zero-width characters in a title reach neither channel.
    let (f, page) = browser();
    let title = "Tax\u{202E}es\u{200B} 2026";
    f.notes.replace("note-50", PERSONAL, title);
    let first = f.alice(&destroy_call_in(json!(1), PERSONAL, title)).await;
    let (url, _, _) = elicitation(&first);
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Taxes 2026 (note-50)"), "{html}");
    assert!(
        !html.contains('\u{202E}') && !html.contains('\u{200B}'),
        "{html}"
    );
}

#[tokio::test]
async fn another_deployments_page_neither_shows_nor_decides_an_approval() {
    // Two deployments share a store and a key but not an audience: B's page cannot show or
    // decide A's approval, and A's retry is not moved by anything B does.
    let (f, page_a) = browser();
    let layer_b = builder(
        KeyRing::single("k1", KEY).unwrap(),
        &f.notes,
        &f.clock,
        &f.store,
    )
    .audience("https://other.example/mcp")
    .build();
    let page_b = layer_b.approval_page();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _, html) = visit(&page_b, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{html}");
    let html_a = page_as(&page_a, &url, "alice").await;
    let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html_a));
    let (status, body) = decide(&page_b, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let again = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(elicitation(&again).0, url, "still undecided");
    assert_eq!(f.seen.count(), 0);
}
