//! Someone else approves (issue 23): approver rules on the approval page, the caller's pending
//! retries, four eyes, several approvals, the inbox, and the attacks on each.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::{ApprovalPage, InboxPage};
use std::sync::{Arc, Mutex};

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::Approvers;
use mcp_confirm::{ApproverQuery, ConfirmLayer, KeyRing, PolicyError, Principal};
use serde_json::json;

use super::attacks::{on_store_with, stores};

fn admin(subject: &str) -> Principal {
    Principal::new(subject).with_roles(["notes-admin"])
}

/// The fixture with `notes_destroy` approved by `rule`, its page and its inbox.
fn approved_by(rule: Approvers) -> (Fixture, ApprovalPage, InboxPage) {
    with_layer(|b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(rule)
                .recheck_approvers(different_people),
        )
    })
}

/// GETs `url` as `who`: (status, html).
async fn open(page: &ApprovalPage, url: &str, who: &Principal) -> (StatusCode, String) {
    let (status, _, html) = visit_as(page, "GET", url, Some(who.clone()), &[], "").await;
    (status, html)
}

/// Opens the page as `who` and posts `form` (after `csrf=<token>&`) with the token it showed.
async fn decide_as(
    page: &ApprovalPage,
    url: &str,
    who: &Principal,
    form: &str,
) -> (StatusCode, String) {
    let (status, html) = open(page, url, who).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    post_as(page, url, who, &format!("csrf={}&{form}", csrf(&html))).await
}

async fn post_as(
    page: &ApprovalPage,
    url: &str,
    who: &Principal,
    form: &str,
) -> (StatusCode, String) {
    let (status, _, body) = visit_as(
        page,
        "POST",
        url,
        Some(who.clone()),
        &FORM_HEADERS,
        form.to_owned(),
    )
    .await;
    (status, body)
}

/// The message of a pending retry's `input_required`.
fn message(answer: &Answer) -> String {
    answer.result()["inputRequests"]["destroy_approval"]["params"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn four_eyes_the_caller_waits_in_every_session_and_another_approves() {
    let (f, page, _) = approved_by(Approvers::role("notes-admin").except_caller());
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    // The caller, even holding the approvers' role, in this or a second session: the page shows
    // where it stands and offers no form; a post is refused and records nothing.
    let alice = admin("alice");
    let (status, html) = open(&page, &url, &alice).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains("Waiting for approval") && html.contains("0 of 1"),
        "{html}"
    );
    assert!(
        !html.contains("name=\"csrf\""),
        "no decision form for the caller: {html}"
    );
    // A token the page gave an approver (carol) is bound to her: alice cannot post it.
    let (_, carol_html) = open(&page, &url, &admin("carol")).await;
    let borrowed = csrf(&carol_html);
    for form in [
        format!("csrf={borrowed}&choice=note-7&decision=approve"),
        format!("csrf={borrowed}&decision=decline"),
        format!("csrf={}&choice=note-7&decision=approve", "0".repeat(64)),
    ] {
        let (status, _) = post_as(&page, &url, &alice, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{form}");
    }
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert!(
        message(&pending).contains("someone other than you: 0 of 1"),
        "{}",
        pending.json()
    );
    assert_eq!(f.seen.count(), 0);
    // Someone without the role is not an approver.
    let (status, html) = open(&page, &url, &Principal::new("dave")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!html.contains("note-7"), "{html}");
    // Carol, an admin, approves; alice's retry deletes exactly note-7, once.
    let (status, body) = decide_as(
        &page,
        &url,
        &admin("carol"),
        "choice=note-7&decision=approve",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = f.alice(&went_to_page(&state, json!(3))).await;
    assert_ran(&done);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
    let again = f.alice(&went_to_page(&state, json!(4))).await;
    assert_eq!(again.error()["data"]["reason"], "invalid_request_state");
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn two_approvals_counted_once_each_on_the_first_ones_choice() {
    let (f, page, _) = approved_by(Approvers::any_of(["bob", "carol", "dave"]).required(2));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let bob = Principal::new("bob");
    let (status, body) = decide_as(&page, &url, &bob, "choice=note-7&decision=approve").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("1 of 2"), "{body}");
    // Bob again, from a second session: counted once; his page says so.
    let (status, html) = open(&page, &url, &bob).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("You approved") && !html.contains("name=\"csrf\""),
        "{html}"
    );
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert!(message(&pending).contains("1 of 2"), "{}", pending.json());
    assert_eq!(f.seen.count(), 0);
    // Carol is offered only bob's choice, and cannot switch it.
    let carol = Principal::new("carol");
    let (_, html) = open(&page, &url, &carol).await;
    assert!(
        html.contains("note-7") && !html.contains("value=\"note-3\""),
        "{html}"
    );
    let (_, body) = decide_as(&page, &url, &carol, "choice=note-3&decision=approve").await;
    assert!(body.contains("Choose one of the records shown"), "{body}");
    let still = f.alice(&went_to_page(&state, json!(9))).await;
    assert!(message(&still).contains("1 of 2"), "{}", still.json());
    let (status, body) = decide_as(&page, &url, &carol, "decision=approve").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Dave is too late: decided.
    let (status, html) = open(&page, &url, &Principal::new("dave")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Already decided"), "{html}");
    let done = f.alice(&went_to_page(&state, json!(3))).await;
    assert_ran(&done);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_decline_by_any_approver_ends_it() {
    let (f, page, _) = approved_by(Approvers::anyone_but_caller().required(2));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _) = decide_as(
        &page,
        &url,
        &Principal::new("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = decide_as(&page, &url, &Principal::new("carol"), "decision=decline").await;
    assert_eq!(status, StatusCode::OK);
    let refused = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(outcome(&refused), "declined");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn an_approver_revoked_between_decision_and_retry_runs_nothing() {
    let revoked: Arc<Mutex<Vec<String>>> = Arc::default();
    let list = Arc::clone(&revoked);
    let asked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let (f, page, _) = with_layer(move |b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::role("notes-admin").except_caller())
                .recheck_approvers(move |q: ApproverQuery| {
                    let gone = list.lock().unwrap().contains(&q.approver);
                    seen.lock()
                        .unwrap()
                        .push((q.approver.clone(), q.caller.subject().to_owned()));
                    async move { Ok::<_, PolicyError>(!gone) }
                }),
        )
    });
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _) = decide_as(&page, &url, &admin("bob"), "choice=note-7&decision=approve").await;
    assert_eq!(status, StatusCode::OK);
    // Bob loses the role (the deployment's directory says so) before alice's retry.
    revoked.lock().unwrap().push("bob".into());
    let refused = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(outcome(&refused), "revoked", "{}", refused.json());
    assert_eq!(f.seen.count(), 0);
    assert_eq!(
        asked.lock().unwrap()[0],
        ("bob".to_owned(), "alice".to_owned())
    );
    // The confirmation is spent: restoring bob does not bring it back.
    revoked.lock().unwrap().clear();
    let again = f.alice(&went_to_page(&state, json!(3))).await;
    assert_eq!(again.error()["data"]["reason"], "invalid_request_state");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_failing_recheck_refuses_the_call() {
    let (f, page, _) = with_layer(|b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::anyone_but_caller())
                .recheck_approvers(|_: ApproverQuery| async {
                    Err::<bool, _>(PolicyError::new("directory down"))
                }),
        )
    });
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    decide_as(
        &page,
        &url,
        &Principal::new("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    let refused = f.alice(&went_to_page(&state, json!(2))).await;
    assert!(refused.json().get("error").is_some(), "{}", refused.json());
    assert!(!refused.json().to_string().contains("directory down"));
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn rules_that_cannot_hold_are_refused_at_build() {
    let notes = Notes::seeded();
    let build = |policy: mcp_confirm::ToolPolicy| {
        ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .approval_url(BASE)
            .tool("notes_destroy", policy)
            .try_build()
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let standing = mcp_confirm::ToolPolicy::standing;
    for (policy, words) in [
        (
            destroy_policy(&notes)
                .approved_by(Approvers::caller().except_caller())
                .recheck_approvers(different_people),
            "admits no one",
        ),
        (
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller().required(0))
                .recheck_approvers(different_people),
            "between 1 and",
        ),
        (
            destroy_policy(&notes).approved_by(Approvers::any_of(["bob"]).required(2)),
            "named principals",
        ),
        (
            destroy_policy(&notes).approved_by(Approvers::any_of(Vec::<String>::new())),
            "name between",
        ),
        (
            destroy_policy(&notes).approved_by(Approvers::role(" ")),
            "empty role",
        ),
        (
            destroy_policy(&notes)
                .recheck_approvers(|_: ApproverQuery| async { Ok::<_, PolicyError>(true) }),
            "needs `approved_by`",
        ),
        (
            standing(
                destroy_policy(&notes)
                    .approved_by(Approvers::anyone_but_caller())
                    .recheck_approvers(different_people),
                std::time::Duration::from_secs(60),
                3,
                |l: &mcp_confirm::Lookup| l.arguments["workspaceUri"].as_str().map(str::to_owned),
            ),
            "`standing` cannot go with `approved_by`",
        ),
    ] {
        let refused = build(policy).expect_err(words);
        assert!(refused.contains(words), "{refused}");
    }
    assert!(
        build(
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller().required(2))
                .recheck_approvers(different_people)
        )
        .is_ok()
    );
}

#[tokio::test]
async fn the_inbox_lists_what_waits_for_each_approver_newest_first() {
    let (f, page, inbox) = approved_by(Approvers::role("notes-admin").except_caller().required(2));
    let first = elicitation(&f.alice(&destroy_call(json!(1))).await).0;
    f.clock.advance(std::time::Duration::from_secs(5));
    let second = elicitation(&f.alice(&destroy_call_in(json!(2), TEAM, "Groceries")).await).0;
    let list = |who: Principal| {
        let inbox = inbox.clone();
        async move {
            visit_as(
                &inbox,
                "GET",
                "http://notes.example/inbox",
                Some(who),
                &[],
                "",
            )
            .await
        }
    };
    let (status, headers, html) = list(admin("bob")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let (a, b) = (html.find(&second).unwrap(), html.find(&first).unwrap());
    assert!(a < b, "newest first: {html}");
    assert!(
        html.contains("alice") && html.contains("0 of 2") && html.contains("GMT"),
        "{html}"
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(headers["x-frame-options"], "DENY");
    // The caller does not see her own four-eyes requests; a non-admin sees nothing.
    let (_, _, html) = list(admin("alice")).await;
    assert!(html.contains("Nothing waits"), "{html}");
    let (_, _, html) = list(Principal::new("dave")).await;
    assert!(html.contains("Nothing waits"), "{html}");
    // Bob approves the first: it leaves his inbox, and stays in carol's with its progress.
    let (status, _) = decide_as(
        &page,
        &first,
        &admin("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, _, html) = list(admin("bob")).await;
    assert!(!html.contains(&first) && html.contains(&second), "{html}");
    let (_, _, html) = list(admin("carol")).await;
    assert!(html.contains(&first) && html.contains("1 of 2"), "{html}");
    // Not signed in, or anything but GET.
    let (status, _, _) = visit(&inbox, "GET", "http://notes.example/inbox", None, &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = visit_as(
        &inbox,
        "POST",
        "http://notes.example/inbox",
        Some(admin("bob")),
        &FORM_HEADERS,
        "x",
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // Expired approvals leave the inbox.
    f.clock.advance(std::time::Duration::from_secs(400));
    let (_, _, html) = list(admin("carol")).await;
    assert!(html.contains("Nothing waits"), "{html}");
}

/// On every store: the call on one instance, the approvers on a second (two, racing, under a
/// two-approval rule), the retry on a third; exactly the chosen note, once. And another
/// deployment sharing the store sees none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_instances_two_racing_approvers_and_the_retry_elsewhere() {
    for (backend, store) in stores("approvers across instances").await {
        let policy = || {
            destroy_policy(&Notes::seeded())
                .approved_by(Approvers::anyone_but_caller().required(2))
                .recheck_approvers(different_people)
        };
        let (first, _, _) = on_store_with(&store, policy());
        let (_, page, _) = on_store_with(&store, policy());
        let (third, _, seen) = on_store_with(&store, policy());
        let (url, _, state) =
            elicitation(&send(&first, post(&destroy_call(json!(1)), Some("alice"))).await);
        // Two approvers post at once, from the page of the second instance.
        let mut tokens = Vec::new();
        for who in ["bob", "carol"] {
            let (_, html) = open(&page, &url, &Principal::new(who)).await;
            tokens.push((who, csrf(&html)));
        }
        let tasks: Vec<_> = tokens
            .into_iter()
            .map(|(who, token)| {
                let (page, url) = (page.clone(), url.clone());
                tokio::spawn(async move {
                    post_as(
                        &page,
                        &url,
                        &Principal::new(who),
                        &format!("csrf={token}&choice=note-7&decision=approve"),
                    )
                    .await
                })
            })
            .collect();
        for task in tasks {
            let (status, body) = task.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        }
        let done = send(&third, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
        assert_ran(&done);
        assert_eq!(seen.count(), 1, "{backend}");
        assert_eq!(
            seen.last().json()["params"]["arguments"]["note_id"],
            "note-7"
        );
        let replay = send(&first, post(&went_to_page(&state, json!(3)), Some("alice"))).await;
        assert_eq!(
            replay.error()["data"]["reason"],
            "invalid_request_state",
            "{backend}"
        );
        // An approver of another deployment, sharing the store: nothing to see.
        let other = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
            .without_tool_list_unchecked()
            .audience("https://other.example/mcp")
            .store(Arc::clone(&store))
            .tool("notes_destroy", policy())
            .approval_url(BASE)
            .build();
        let (_, page2, _) = on_store_with(&store, policy());
        let (url2, _, _) =
            elicitation(&send(&first, post(&destroy_call(json!(4)), Some("alice"))).await);
        let (status, html) = open(&other.approval_page(), &url2, &Principal::new("bob")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{backend}: {html}");
        let (status, _, html) = visit_as(
            &other.inbox_page(),
            "GET",
            "http://x/inbox",
            Some(Principal::new("bob")),
            &[],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            !html.contains(url2.rsplit('/').next().unwrap()),
            "{backend}: {html}"
        );
        drop(page2);
    }
}

/// The rule an approval was made under is the one its retry checks: an instance whose policy
/// names other approvers (a redeploy, a misconfigured replica) never runs the call on approvals
/// its own rule would not have taken. The state binds the rule it was asked under, so the
/// question is asked again under the rule in force (#52, 10e; it was refused as `revoked`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_under_another_rule_runs_nothing() {
    for (backend, store) in stores("approver rule changed").await {
        let named = |who: &str| {
            destroy_policy(&Notes::seeded()).approved_by(Approvers::any_of([who.to_owned()]))
        };
        let (old, page, _) = on_store_with(&store, named("bob"));
        let (new, _, seen) = on_store_with(&store, named("carol"));
        let (url, _, state) =
            elicitation(&send(&old, post(&destroy_call(json!(1)), Some("alice"))).await);
        let (status, _) = decide_as(
            &page,
            &url,
            &Principal::new("bob"),
            "choice=note-7&decision=approve",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{backend}");
        let again = send(&new, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
        let (url2, _, state2) = elicitation(&again);
        assert_ne!(url2, url, "{backend}: asked again, on a page of its own");
        assert_ne!(state2, state, "{backend}");
        assert_eq!(seen.count(), 0);
    }
}

/// A queued tool others approve: no grant while the approvers have not decided; the grant is
/// issued on the retry after their approval, and the worker runs it once.
#[tokio::test]
async fn a_queued_tool_gets_its_grant_only_once_the_approvers_decide() {
    let grants = Arc::new(mcp_confirm::grant::MemoryGrantStore::new());
    let store_for_layer = Arc::clone(&grants);
    let (f, page, _) = with_layer(move |b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .queued()
                .approved_by(Approvers::anyone_but_caller().required(2))
                .recheck_approvers(different_people),
        )
        .grant_store(store_for_layer)
    });
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    decide_as(
        &page,
        &url,
        &Principal::new("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert!(message(&pending).contains("1 of 2"), "{}", pending.json());
    assert_eq!(
        f.seen.count(),
        0,
        "no grant, nothing forwarded, before the approvers decide"
    );
    decide_as(&page, &url, &Principal::new("carol"), "decision=approve").await;
    let done = f.alice(&went_to_page(&state, json!(3))).await;
    assert_ran(&done);
    let confirmed = f.seen.last().confirmed.expect("Confirmed");
    let grant = confirmed
        .grant
        .expect("a queued tool's call carries its grant");
    let worker = mcp_confirm::grant::Grants::new(Arc::clone(&grants))
        .audience("https://notes.example/mcp")
        .revalidate("notes_destroy", |_: mcp_confirm::Revalidation| async {
            Ok(())
        });
    let attempt = worker.begin(grant).await.expect("the grant begins");
    assert_eq!(attempt.grant().tool, "notes_destroy");
    attempt.consumed().await.unwrap();
    assert!(worker.begin(grant).await.is_err(), "once");
}
