//! The standing-approvals page: a signed-in person lists and revokes her own standing approvals,
//! with the approval page's protections (authentication's principal only, anti-forgery token,
//! same origin, form posts only, bounded bodies, no framing or caching).

use http::StatusCode;
use mcp_confirm_pages::StandingPage;
use mcp_confirm_pages::StandingPages as _;
use serde_json::json;

use super::{call, grant, standing_fixture_with_handle};
use crate::common::browser::{FORM_HEADERS, ORIGIN, csrf, page_as, visit};
use crate::common::*;
use mcp_confirm::Principal;

const URL: &str = "http://notes.example/standing";

/// A fixture where alice holds one standing approval, and the page.
async fn granted() -> (Fixture, mcp_confirm::StandingApprovals, StandingPage) {
    let (f, approvals) = standing_fixture_with_handle(5);
    grant(&f).await;
    let page = approvals.page(URL).sign_in_url("/signin");
    (f, approvals, page)
}

async fn revoke_as(page: &StandingPage, principal: &str, form: &str) -> (StatusCode, String) {
    let (status, _, html) = visit(
        page,
        "POST",
        URL,
        Some(principal),
        &FORM_HEADERS,
        form.to_owned(),
    )
    .await;
    (status, html)
}

/// Bob confirms the team's Groceries note and chooses the standing option: he holds one too.
async fn bob_grants(f: &Fixture) {
    let as_bob = |body: serde_json::Value| send(&f.svc, post(&body, Some("bob")));
    let first = as_bob(call(json!(40), TEAM, "Groceries")).await;
    let answer = as_bob(retry(
        call(json!(40), TEAM, "Groceries"),
        json!(41),
        &first.state(),
        super::accept_remembering("note-30", json!("standing")),
    ))
    .await;
    assert_ran(&answer);
}

/// The id in the page's first revoke button.
fn first_id(html: &str) -> String {
    let at = html
        .find("name=\"revoke\" value=\"")
        .expect("a revoke button")
        + 21;
    html[at..at + 32].to_owned()
}

#[tokio::test]
async fn the_page_lists_her_own_standing_approvals_with_what_they_cover() {
    let (f, _, page) = granted().await;
    assert_ran(&f.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    let (status, headers, html) = visit(&page, "GET", URL, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    for needle in ["notes_delete", PERSONAL, "4 of 5", "GMT", "Revoke all"] {
        assert!(html.contains(needle), "{needle} missing: {html}");
    }
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
    ] {
        assert_eq!(headers[name], value);
    }
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    // Bob holds none, and sees none of alice's.
    let (status, _, html) = visit(&page, "GET", URL, Some("bob"), &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("id=\"none\""), "{html}");
    assert!(!html.contains(PERSONAL), "{html}");
}

#[tokio::test]
async fn without_a_principal_the_page_asks_to_sign_in_and_changes_nothing() {
    let (_, approvals, page) = granted().await;
    let (status, _, html) = visit(&page, "GET", URL, None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(html.contains("/signin?next=%2Fstanding"), "{html}");
    let (status, _, _) = visit(&page, "POST", URL, None, &FORM_HEADERS, "revoke=all").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        approvals
            .list(&Principal::new("alice"))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn revoking_one_from_the_page_sends_the_next_call_back_to_the_form() {
    let (events, _guard) = crate::common::audit_events::Events::record();
    let (f, approvals, page) = granted().await;
    let html = page_as(&page, URL, "alice").await;
    let form = format!("csrf={}&revoke={}", csrf(&html), first_id(&html));
    let (status, html) = revoke_as(&page, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Revoked one standing approval."), "{html}");
    assert!(html.contains("id=\"none\""), "{html}");
    assert!(
        approvals
            .list(&Principal::new("alice"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_asks(&f.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    assert_eq!(events.with("decision", "standing_revoked").len(), 1);
    // Posting the same form again revokes nothing more.
    let (status, html) = revoke_as(&page, "alice", &form).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Nothing to revoke."), "{html}");
}

#[tokio::test]
async fn revoke_all_ends_every_one_of_hers() {
    let (f, approvals, page) = granted().await;
    // A second one, on another scope; and bob's, which stays.
    let first = f.alice(&call(json!(3), TEAM, "Groceries")).await;
    let answer = f
        .alice(&retry(
            call(json!(3), TEAM, "Groceries"),
            json!(4),
            &first.state(),
            super::accept_remembering("note-30", json!("standing")),
        ))
        .await;
    assert_ran(&answer);
    bob_grants(&f).await;
    let alice = Principal::new("alice");
    assert_eq!(approvals.list(&alice).await.unwrap().len(), 2);
    let html = page_as(&page, URL, "alice").await;
    let (status, html) =
        revoke_as(&page, "alice", &format!("csrf={}&revoke=all", csrf(&html))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Revoked 2 standing approvals."), "{html}");
    assert!(approvals.list(&alice).await.unwrap().is_empty());
    let bob = Principal::new("bob");
    assert_eq!(approvals.list(&bob).await.unwrap().len(), 1, "bob's stays");
}

#[tokio::test]
async fn a_post_without_her_token_or_from_elsewhere_revokes_nothing() {
    let (f, approvals, page) = granted().await;
    bob_grants(&f).await;
    let alice = Principal::new("alice");
    let html = page_as(&page, URL, "alice").await;
    let (token, id) = (csrf(&html), first_id(&html));
    let bobs = page_as(&page, URL, "bob").await;
    let bob_token = csrf(&bobs);
    let denied = [
        // No token, a wrong one, bob's token on alice's session.
        (format!("revoke={id}"), FORM_HEADERS.to_vec()),
        (
            format!("csrf={}&revoke={id}", "0".repeat(64)),
            FORM_HEADERS.to_vec(),
        ),
        (
            format!("csrf={bob_token}&revoke={id}"),
            FORM_HEADERS.to_vec(),
        ),
        // Her token, from another site or origin, or from nowhere it says.
        (
            format!("csrf={token}&revoke={id}"),
            vec![
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "http://evil.example"),
            ],
        ),
        (
            format!("csrf={token}&revoke={id}"),
            vec![
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", ORIGIN),
                ("sec-fetch-site", "cross-site"),
            ],
        ),
        (
            format!("csrf={token}&revoke={id}"),
            vec![("content-type", "application/x-www-form-urlencoded")],
        ),
    ];
    for (form, headers) in denied {
        let (status, _, html) = visit(&page, "POST", URL, Some("alice"), &headers, form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    }
    // Not a form post, too large, another method.
    let (status, _, _) = visit(
        &page,
        "POST",
        URL,
        Some("alice"),
        &[("content-type", "application/json"), ("origin", ORIGIN)],
        format!("csrf={token}&revoke={id}"),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let huge = format!("csrf={token}&revoke={id}&pad={}", "x".repeat(64 * 1024));
    let (status, _, _) = visit(&page, "POST", URL, Some("alice"), &FORM_HEADERS, huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, headers, _) = visit(&page, "DELETE", URL, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers["allow"], "GET, POST");
    assert_eq!(
        approvals.list(&alice).await.unwrap().len(),
        1,
        "nothing revoked"
    );
}

#[tokio::test]
async fn her_id_on_another_session_revokes_nothing_and_reads_like_an_unknown_id() {
    let (f, approvals, page) = granted().await;
    bob_grants(&f).await;
    let html = page_as(&page, URL, "alice").await;
    let id = first_id(&html);
    let bobs = page_as(&page, URL, "bob").await;
    let bob_token = csrf(&bobs);
    let (status, theirs) = revoke_as(&page, "bob", &format!("csrf={bob_token}&revoke={id}")).await;
    assert_eq!(status, StatusCode::OK);
    let unknown = "ab".repeat(16);
    let (_, none) = revoke_as(&page, "bob", &format!("csrf={bob_token}&revoke={unknown}")).await;
    let (_, junk) = revoke_as(&page, "bob", &format!("csrf={bob_token}&revoke=../x")).await;
    assert_eq!(
        theirs, none,
        "an id of someone else's reads like one that does not exist"
    );
    assert_eq!(theirs, junk);
    assert_eq!(
        approvals
            .list(&Principal::new("alice"))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn what_has_ended_is_not_listed() {
    let (f, approvals, page) = granted().await;
    f.clock.advance(std::time::Duration::from_secs(601));
    let html = page_as(&page, URL, "alice").await;
    assert!(html.contains("id=\"none\""), "{html}");
    assert!(
        approvals
            .list(&Principal::new("alice"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// A repeated field revokes nothing (#52, 5): `revoke=<id>&revoke=all` is no choice between
/// them, and the page refuses it whole.
#[tokio::test]
async fn a_repeated_field_revokes_nothing() {
    use crate::browser::repeated_fields::assert_repeated;
    let (_, approvals, page) = granted().await;
    let html = page_as(&page, URL, "alice").await;
    let (token, id) = (csrf(&html), first_id(&html));
    for form in [
        format!("csrf={token}&revoke={id}&revoke=all"),
        format!("csrf={token}&revoke=all&revoke={id}"),
        format!("csrf={token}&revoke=all&revoke=all"),
        format!("csrf={token}&csrf={token}&revoke=all"),
    ] {
        let (status, body) = revoke_as(&page, "alice", &form).await;
        assert_repeated(status, &body, &form);
    }
    let alice = Principal::new("alice");
    assert_eq!(approvals.list(&alice).await.unwrap().len(), 1);
    // Each field once: revoked.
    let form = format!("csrf={token}&revoke={id}");
    let (status, body) = revoke_as(&page, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(approvals.list(&alice).await.unwrap().is_empty());
}
