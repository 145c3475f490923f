//! A page post must say where it came from (#52, 10f): a browser sends `Origin` on every form
//! post (and `Sec-Fetch-Site` where it supports fetch metadata), so a post that carries neither
//! is no form of the page's. Every page post (the approval page, a batch, the passkey step, the
//! passkey page, the standing-approvals page) without both is refused with the pages' one 403
//! ("This request did not come from …"), nothing decided, registered, removed or revoked, and
//! `tracing` names what was missing. `Origin` of the page's own, or `Sec-Fetch-Site:
//! same-origin`, alone passes as before. Before the fix such a post was taken on its token
//! alone: each test here failed then.

use http::StatusCode;
use mcp_confirm::Principal;
use mcp_confirm::approval::Approvers;
use serde_json::json;

use super::form_tokens::{KEYS_URL, STANDING_URL, alices_standing, grant, pages};
use super::passkeys::{authenticator, form, options, post, register, setup};
use crate::common::audit_events::Events;
use crate::common::browser::*;
use crate::common::*;

const FORM_TYPE: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

/// A post with neither header: what a proxy that strips them, or a script outside a browser,
/// sends.
const NEITHER: [(&str, &str); 1] = [FORM_TYPE];
/// A browser without fetch metadata: `Origin` only.
const ORIGIN_ONLY: [(&str, &str); 2] = [FORM_TYPE, ("origin", ORIGIN)];
/// A browser behind something that drops `Origin` but keeps fetch metadata.
const SITE_ONLY: [(&str, &str); 2] = [FORM_TYPE, ("sec-fetch-site", "same-origin")];

/// What the log says of such a post.
const MISSING: &str = "neither Origin nor Sec-Fetch-Site";

/// Asserts `status` and `html` are the pages' refusal of a post from elsewhere, on `page`, and
/// that `events` logged what was missing for `channel`.
fn assert_refused(status: StatusCode, html: &str, page: &str, events: &Events, channel: &str) {
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    assert!(
        html.contains(&format!("This request did not come from {page}.")),
        "{html}"
    );
    assert!(
        !html.contains(MISSING),
        "the reason stays in the log: {html}"
    );
    let logged: Vec<_> = events
        .with("channel", channel)
        .into_iter()
        .filter(|e| e.iter().any(|(k, v)| k == "reason" && v.contains(MISSING)))
        .collect();
    assert_eq!(logged.len(), 1, "{channel}: {:?}", events.0.lock().unwrap());
}

async fn post_with<P>(
    page: &P,
    url: &str,
    who: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, String)
where
    P: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<http_body_util::Full<bytes::Bytes>>,
            Error = std::convert::Infallible,
        > + Clone,
{
    let (status, _, html) = visit(page, "POST", url, Some(who), headers, body.to_owned()).await;
    (status, html)
}

#[tokio::test]
async fn holds_an_approval_post_with_neither_origin_nor_fetch_metadata_decides_nothing() {
    let (events, _guard) = Events::record();
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (other, _, other_state) = elicitation(&f.alice(&destroy_call(json!(2))).await);
    let approve = |html: &str| format!("csrf={}&choice=note-7&decision=approve", csrf(html));
    let form = approve(&page_as(&page, &url, "alice").await);
    let (status, html) = post_with(&page, &url, "alice", &NEITHER, &form).await;
    assert_refused(status, &html, "the approval page", &events, "approval_page");
    // Nothing decided: the retry is asked again, the page still offers the decision.
    assert_eq!(
        elicitation(&f.alice(&went_to_page(&state, json!(3))).await).0,
        url
    );
    assert!(
        page_as(&page, &url, "alice")
            .await
            .contains("id=\"approve\"")
    );
    assert_eq!(f.seen.count(), 0);
    // The same form from the page's own origin, or with same-origin fetch metadata, decides.
    let (status, html) = post_with(&page, &url, "alice", &ORIGIN_ONLY, &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let form = approve(&page_as(&page, &other, "alice").await);
    let (status, html) = post_with(&page, &other, "alice", &SITE_ONLY, &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_ran(&f.alice(&went_to_page(&state, json!(4))).await);
    assert_ran(&f.alice(&went_to_page(&other_state, json!(5))).await);
}

#[tokio::test]
async fn holds_a_batch_post_with_neither_header_decides_no_member() {
    let (events, _guard) = Events::record();
    let (f, page) = browser_with(|p| p.batch_group("notes"));
    let mut calls = Vec::new();
    for (i, (ws, title)) in [(PERSONAL, "Groceries"), (TEAM, "Groceries")]
        .into_iter()
        .enumerate()
    {
        let call = destroy_call_in(json!(i), ws, title);
        let (url, _, state) = elicitation(&f.alice(&call).await);
        calls.push((url, state, call));
    }
    let html = page_as(&page, &calls[0].0, "alice").await;
    let mut form = format!(
        "csrf={}&set={}&decision=approve_all",
        csrf(&html),
        hidden(&html, "set")[0]
    );
    let members = hidden(&html, "member");
    assert_eq!(members.len(), 2, "{html}");
    for m in &members {
        form.push_str(&format!("&member={m}&choice-{m}=note-7"));
    }
    let (status, body) = post_with(&page, &calls[0].0, "alice", &NEITHER, &form).await;
    assert_refused(status, &body, "the approval page", &events, "approval_page");
    for (i, (url, state, call)) in calls.iter().enumerate() {
        let mut retry = with_answer(call.clone(), state, json!({"action": "accept"}));
        retry["id"] = json!(10 + i);
        assert_eq!(&elicitation(&f.alice(&retry).await).0, url);
    }
    let (status, body) = post_with(&page, &calls[0].0, "alice", &ORIGIN_ONLY, &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("2 of 2 approved"), "{body}");
}

#[tokio::test]
async fn holds_a_passkey_step_post_with_neither_header_records_nothing() {
    let (events, _guard) = Events::record();
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    register(&s.keys_page, &bob, &mut key).await;
    let (url, _, state) = elicitation(&s.f.alice(&destroy_call(json!(1))).await);
    let html = page_as(&s.page, &url, "bob").await;
    let decision = form(&[
        ("csrf", &csrf(&html)),
        ("choice", "note-7"),
        ("decision", "approve"),
    ]);
    // The first post, which would show the step: refused.
    let (status, body) = post_with(&s.page, &url, "bob", &NEITHER, &decision).await;
    assert_refused(status, &body, "the approval page", &events, "approval_page");
    assert!(!body.contains("Confirm with your passkey"), "{body}");
    // The step, then its assertion posted with neither header: refused, nothing recorded.
    let (status, step) = post(&s.page, &url, &bob, decision).await;
    assert_eq!(status, StatusCode::OK, "{step}");
    let response = key.assert(&options(&step));
    let answer = form(&[
        ("csrf", &super::passkeys::hidden(&step, "csrf")),
        ("decision", "approve"),
        ("choice", "note-7"),
        ("ceremony", &super::passkeys::hidden(&step, "ceremony")),
        ("response", &response),
    ]);
    let (status, body) = post_with(&s.page, &url, "bob", &NEITHER, &answer).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("did not come from the approval page"),
        "{body}"
    );
    let waiting = s.f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(waiting.result()["resultType"], "input_required");
    assert_eq!(s.f.seen.count(), 0);
    // With same-origin fetch metadata alone, the same assertion decides.
    let (status, body) = post_with(&s.page, &url, "bob", &SITE_ONLY, &answer).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Approved"), "{body}");
    assert_ran(&s.f.alice(&went_to_page(&state, json!(3))).await);
}

#[tokio::test]
async fn holds_a_passkey_page_post_with_neither_header_removes_nothing() {
    let (events, _guard) = Events::record();
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let bob = Principal::new("bob");
    let mut key = authenticator();
    let (_, listed) = register(&s.keys_page, &bob, &mut key).await;
    let remove = form(&[
        ("csrf", &super::passkeys::hidden(&listed, "csrf")),
        ("action", "remove"),
        ("id", &super::passkeys::hidden(&listed, "id")),
    ]);
    let (status, html) = post_with(&s.keys_page, KEYS_URL, "bob", &NEITHER, &remove).await;
    assert_refused(status, &html, "the passkey page", &events, "passkey_page");
    assert!(
        page_as(&s.keys_page, KEYS_URL, "bob")
            .await
            .contains("laptop")
    );
    let (status, html) = post_with(&s.keys_page, KEYS_URL, "bob", &ORIGIN_ONLY, &remove).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("no passkey registered"), "{html}");
}

#[tokio::test]
async fn holds_a_standing_page_post_with_neither_header_revokes_nothing() {
    let (events, _guard) = Events::record();
    let p = pages();
    grant(&p.f).await;
    assert_eq!(alices_standing(&p).await, 1);
    let html = page_as(&p.standing, STANDING_URL, "alice").await;
    let revoke = format!("csrf={}&revoke=all", csrf(&html));
    let (status, html) = post_with(&p.standing, STANDING_URL, "alice", &NEITHER, &revoke).await;
    assert_refused(
        status,
        &html,
        "the standing-approvals page",
        &events,
        "standing_page",
    );
    assert_eq!(alices_standing(&p).await, 1);
    let (status, html) = post_with(&p.standing, STANDING_URL, "alice", &SITE_ONLY, &revoke).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_eq!(alices_standing(&p).await, 0);
}
