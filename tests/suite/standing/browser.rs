//! The approval page offers the standing approval too: "only this time" or the policy's wider
//! option, chosen by the person signed in on the page (never by the client). Choosing it lets
//! later calls of the same principal, tool and scope run without the page.

use http::StatusCode;
use serde_json::json;

use super::workspace;
use crate::common::browser::*;
use crate::common::*;
use std::time::Duration;

/// The browser fixture whose `notes_destroy` offers a standing approval of three calls.
fn offering() -> (Fixture, mcp_confirm_pages::ApprovalPage) {
    browser_with(|p| p.standing(Duration::from_secs(600), 3, workspace))
}

/// Alice's first call: its page's url and the state.
async fn opened(f: &Fixture, title: &str) -> (String, String) {
    let (url, _, state) = elicitation(&f.alice(&destroy_call_in(json!(1), PERSONAL, title)).await);
    (url, state)
}

#[tokio::test]
async fn the_page_offers_only_this_time_or_the_standing_approval_in_words() {
    let (f, page) = offering();
    let (url, _) = opened(&f, "Groceries").await;
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains("id=\"remember-once\" value=\"once\" checked"),
        "{html}"
    );
    assert!(html.contains("id=\"remember-standing\""), "{html}");
    for needle in [
        "Also allow notes_destroy on",
        PERSONAL,
        "10 minutes",
        "at most 3 times",
    ] {
        assert!(html.contains(needle), "{needle} missing: {html}");
    }
    // A policy without it shows no such choice.
    let (g, plain) = browser();
    let (url, _) = opened(&g, "Groceries").await;
    let html = page_as(&plain, &url, "alice").await;
    assert!(!html.contains("remember"), "{html}");
}

#[tokio::test]
async fn choosing_it_on_the_page_covers_the_next_call_in_scope_without_the_page() {
    let (f, page) = offering();
    let (url, state) = opened(&f, "Groceries").await;
    let html = page_as(&page, &url, "alice").await;
    let form = format!(
        "csrf={}&decision=approve&choice=note-7&typed=note-7&remember=standing",
        csrf(&html)
    );
    let (status, html) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let done = f.alice(&went_to_page(&state, json!(2))).await;
    assert_ran(&done);
    assert_eq!(
        f.seen.last().confirmed.unwrap().chosen.as_deref(),
        Some("note-7")
    );
    // Taxes: one note in the same workspace; no page this time.
    let covered = f.alice(&destroy_call_in(json!(3), PERSONAL, "Taxes")).await;
    assert_ran(&covered);
    let confirmed = f.seen.last().confirmed.unwrap();
    assert!(confirmed.standing.is_some());
    assert_eq!(confirmed.chosen.as_deref(), Some("note-20"));
    // Another workspace: the page again.
    elicitation(&f.alice(&destroy_call_in(json!(4), TEAM, "Groceries")).await);
}

#[tokio::test]
async fn only_this_time_on_the_page_grants_nothing() {
    let (f, page) = offering();
    for remember in ["&remember=once", ""] {
        let (url, state) = opened(&f, "Groceries").await;
        let html = page_as(&page, &url, "alice").await;
        let form = format!(
            "csrf={}&decision=approve&choice=note-7&typed=note-7{remember}",
            csrf(&html)
        );
        let (status, _) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK);
        assert_ran(&f.alice(&went_to_page(&state, json!(2))).await);
        elicitation(&f.alice(&destroy_call_in(json!(3), PERSONAL, "Taxes")).await);
    }
}

#[tokio::test]
async fn a_standing_choice_the_page_did_not_offer_decides_nothing() {
    let (f, page) = browser();
    let (url, state) = opened(&f, "Groceries").await;
    let html = page_as(&page, &url, "alice").await;
    let token = csrf(&html);
    for remember in ["standing", "forever", ""] {
        let form =
            format!("csrf={token}&decision=approve&choice=note-7&typed=note-7&remember={remember}");
        let (status, html) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        assert!(
            html.contains("Choose how long to allow it."),
            "{remember}: {html}"
        );
    }
    // Still undecided: the retry is asked again and nothing ran.
    elicitation(&f.alice(&went_to_page(&state, json!(2))).await);
    assert_eq!(f.seen.count(), 0);
}
