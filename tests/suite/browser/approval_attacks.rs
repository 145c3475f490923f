//! Attacks on approval in the browser (the adversarial pass on #19): spent browser-approval
//! states, approvals bound to their audience, the memory store's approval cap.
//!
//! Tests named `holds_` held when written; the others failed then, and their doc comment says
//! **Was broken**, what broke and how it was fixed.

use mcp_confirm_pages::LayerPages as _;
use std::time::Duration;

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::MAX_PENDING_APPROVALS;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, KeyRing};
use serde_json::json;

// =============================================================================================
// Spent browser-approval states.
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
    let html = page_as(&page, &url, "alice").await;
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
    let html = page_as(&page, &url, "alice").await;
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
// Approvals carry their audience.
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
    let html_a = page_as(&page_a, &url, "alice").await;
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
// The memory store's approval cap.
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
