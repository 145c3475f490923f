//! Issue 34, mistake 4: the approval page named people differently from the MCP endpoint (an
//! e-mail on the page, a user id on the endpoint). To the page the caller was "someone else",
//! and she approved her own four-eyes request. A rule that excludes the caller now needs
//! `recheck_approvers`, which sees the caller as the endpoint names her and each approver as the
//! page names them, and is asked before the call runs: the deployment's directory, the one
//! place that knows both names of one person, says whether they are the same.

use http::StatusCode;
use mcp_confirm::approval::Approvers;
use mcp_confirm::{ApproverQuery, ConfigError, KeyRing, PolicyError, Principal};
use mcp_confirm_pages::ApprovalPage;
use mcp_confirm_pages::LayerPages as _;
use serde_json::json;

use crate::common::browser::*;
use crate::common::*;

/// The deployment's directory: user id (the endpoint's name) → e-mail (the page's name).
fn directory() -> [(&'static str, &'static str); 2] {
    [("alice", "alice@example.com"), ("bob", "bob@example.com")]
}

/// The recheck a deployment writes over its directory: the approver may decide unless they are
/// the caller under either name.
async fn not_the_caller(query: ApproverQuery) -> Result<bool, PolicyError> {
    let caller = query.caller.subject();
    let same = directory()
        .iter()
        .any(|(id, email)| *id == caller && *email == query.approver);
    Ok(query.approver != caller && !same)
}

fn layer(policy: mcp_confirm::ToolPolicy) -> Result<(Fixture, ApprovalPage), ConfigError> {
    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = mcp_confirm::store::MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", policy)
        .try_build()?;
    let page = layer.approval_page();
    Ok((Fixture::new(layer, notes, clock, store), page))
}

/// Approves on the page as `who` (the page's name for them): the page's answer.
async fn approve_as(page: &ApprovalPage, url: &str, who: &str) -> StatusCode {
    let who = Principal::new(who);
    let (status, _, html) = visit_as(page, "GET", url, Some(who.clone()), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
    visit_as(page, "POST", url, Some(who), &FORM_HEADERS, form)
        .await
        .0
}

#[test]
fn a_rule_that_excludes_the_caller_without_a_directory_does_not_build() {
    let notes = Notes::seeded();
    for rule in [
        Approvers::anyone_but_caller(),
        Approvers::role("finance").except_caller(),
        Approvers::any_of(["bob@example.com"]).except_caller(),
    ] {
        let error = layer(destroy_policy(&notes).approved_by(rule)).err();
        match error {
            Some(ConfigError::InvalidPolicy(reason)) => {
                assert!(reason.contains("recheck_approvers"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn the_caller_approving_her_own_request_under_another_name_runs_nothing() {
    let notes = Notes::seeded();
    let policy = destroy_policy(&notes)
        .approved_by(Approvers::anyone_but_caller())
        .recheck_approvers(not_the_caller);
    let (f, page) = layer(policy).unwrap();
    // Alice calls on the endpoint (named "alice") and approves on the page (signed in by e-mail).
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    approve_as(&page, &url, "alice@example.com").await;
    let answer = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(outcome(&answer), "revoked", "{}", answer.json());
    assert_eq!(f.seen.count(), 0, "nothing ran");
    // Bob, signed in on the page by his e-mail, is someone else: his approval runs the call.
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(3))).await);
    assert_eq!(
        approve_as(&page, &url, "bob@example.com").await,
        StatusCode::OK
    );
    let answer = f.alice(&went_to_page(&state, json!(4))).await;
    assert_eq!(f.seen.count(), 1, "{}", answer.json());
}
