//! Attacks on batches and narrowing: each tries to make a destructive call run without the
//! confirmation meant (another principal's decision, a set other than the one shown, a member
//! that may never be batched, an edit that widens or is silently dropped) and checks what ran.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::{ApprovalPage, InboxPage};
use std::time::Duration;

use super::narrowing::{bulk_policy, question};
use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::batch::BatchDecision;
use mcp_confirm::approval::{ApprovalId, ApprovalStore, Approvers, Decided, Decider, Decision};
use mcp_confirm::clock::ManualClock;
use mcp_confirm::narrow::Narrowing;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{KeyRing, ToolPolicy};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Fixtures

/// `notes_destroy` batchable in group `notes`.
fn batched() -> (Fixture, ApprovalPage, InboxPage) {
    with_layer(|b, notes| b.tool("notes_destroy", destroy_policy(notes).batch_group("notes")))
}

/// A call of tool `name` (asked through `destroy_approval`), in `ws`, for `title`.
fn call_of(name: &str, id: Value, ws: &str, title: &str) -> Value {
    let mut call = destroy_call_in(id, ws, title);
    call["params"]["name"] = json!(name);
    call
}

/// Calls of alice (or `who`): (url, state, call) of each.
async fn calls_as(f: &Fixture, who: &str, calls: Vec<Value>) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for call in calls {
        let answer = send(&f.svc, post(&call, Some(who))).await;
        let (url, _, state) = elicitation(&answer);
        out.push((url, state, call));
    }
    out
}

/// Alice's three calls: Groceries (personal, three notes), Taxes, Groceries (team).
async fn three(f: &Fixture) -> Vec<(String, String, Value)> {
    calls_as(
        f,
        "alice",
        vec![
            destroy_call_in(json!(0), PERSONAL, "Groceries"),
            destroy_call_in(json!(1), PERSONAL, "Taxes"),
            destroy_call_in(json!(2), TEAM, "Groceries"),
        ],
    )
    .await
}

/// The batch form as the page built it: `decision`, every row ticked, note-7 where a row has a
/// choice.
fn form(html: &str, decision: &str) -> String {
    form_of(html, decision, &hidden(html, "member"))
}

/// The batch form of `html`'s token and set, naming `members` (all ticked).
fn form_of(html: &str, decision: &str, members: &[String]) -> String {
    let mut form = format!(
        "csrf={}&set={}&decision={decision}",
        csrf(html),
        hidden(html, "set")[0]
    );
    for (i, m) in members.iter().enumerate() {
        form.push_str(&format!("&member={m}"));
        // A row's choice and tick once per row, even where a member is named twice.
        if !members[..i].contains(m) {
            form.push_str(&format!("&choice-{m}=note-7&approve={m}"));
        }
    }
    form
}

/// The id at the end of a page URL.
fn id_of(url: &str) -> String {
    url.rsplit('/').next().unwrap().to_owned()
}

/// `who`'s retry of `call` on `state`, with JSON-RPC id `id`.
async fn retry_as(f: &Fixture, who: &str, call: &Value, state: &str, id: i64) -> Answer {
    let mut c = with_answer(call.clone(), state, json!({"action": "accept"}));
    c["id"] = json!(id);
    send(&f.svc, post(&c, Some(who))).await
}

async fn retry(f: &Fixture, call: &Value, state: &str, id: i64) -> Answer {
    retry_as(f, "alice", call, state, id).await
}

fn ran(answer: &Answer) -> bool {
    answer.json()["result"]["content"][0]["text"] == "done by inner"
}

/// Every call of `calls` still waits: its retry is asked the same page again.
async fn all_wait(f: &Fixture, calls: &[(String, String, Value)], first_id: i64) {
    for (i, (url, state, call)) in calls.iter().enumerate() {
        let answer = retry(f, call, state, first_id + i as i64).await;
        assert_eq!(elicitation(&answer).0, *url, "{i}: {}", answer.json());
    }
}

// --- Narrowing fixtures ---

fn bulk_with(policy: impl FnOnce(ToolPolicy) -> ToolPolicy) -> (Fixture, ApprovalPage) {
    let (f, page, _) = with_layer(|b, _| b.tool("notes_bulk_delete", policy(bulk_policy())));
    (f, page)
}

fn bulk() -> (Fixture, ApprovalPage) {
    bulk_with(|p| p)
}

fn bulk_arguments() -> Value {
    json!({"workspaceUri": PERSONAL, "ids": ["note-3", "note-7", "note-14"],
           "limit": 50, "dry_run": false, "mode": "delete"})
}

fn bulk_call_with(id: i64, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": url_meta(), "name":"notes_bulk_delete", "arguments": arguments}})
}

/// Alice's retry of bulk `call` on `state` with JSON-RPC id `id`.
async fn bulk_retry(f: &Fixture, call: &Value, state: &str, id: i64) -> Answer {
    let mut c = call.clone();
    c["id"] = json!(id);
    c["params"]["requestState"] = json!(state);
    c["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
    f.alice(&c).await
}

fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The narrow-ids fields keeping `ids` (JSON strings).
fn keep(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("narrow-ids={}", enc(&format!("\"{id}\""))))
        .collect::<Vec<_>>()
        .join("&")
}

/// Alice's bulk call with `arguments`, the page as alice, its token: (url, state, call, token).
async fn bulk_asked(
    f: &Fixture,
    page: &ApprovalPage,
    id: i64,
    arguments: Value,
) -> (String, String, Value, String) {
    let call = bulk_call_with(id, arguments);
    let (url, state) = question(&f.alice(&call).await);
    let (status, _, html) = visit(page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let token = csrf(&html);
    (url, state, call, token)
}

/// The post was refused on the page: re-shown with an error, or answered otherwise than 200.
fn refused(status: StatusCode, body: &str) -> bool {
    status != StatusCode::OK || body.contains("class=\"error\"")
}

// ---------------------------------------------------------------------------------------------
// Batches

#[tokio::test]
async fn bob_can_neither_see_nor_decide_alices_batch_even_with_a_batch_token_of_his_own() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    // Bob's own two calls (team workspace) form a batch of his, with a token he may hold.
    let bobs = calls_as(
        &f,
        "bob",
        vec![
            destroy_call_in(json!(5), TEAM, "Groceries"),
            destroy_call_in(json!(6), TEAM, "Groceries"),
        ],
    )
    .await;
    let (status, _, alices) = visit(&page, "GET", &calls[0].0, Some("bob"), &[], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        !alices.contains("Taxes") && !alices.contains("name=\"set\""),
        "{alices}"
    );
    let (status, _, his) = visit(&page, "GET", &bobs[0].0, Some("bob"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{his}");
    assert!(his.contains("Approve 2 requests?"), "{his}");
    // His own set's form, posted at alice's call: refused, it is not his.
    let (status, _) = decide(&page, &calls[0].0, "bob", &form(&his, "approve_all")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // His token and set with alice's members, at his own call: the set is not what he was shown.
    let mut members = hidden(&his, "member");
    members.push(id_of(&calls[0].0));
    let (status, _) = decide(
        &page,
        &bobs[0].0,
        "bob",
        &form_of(&his, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Alice's members under his token, at his call: conflict, nothing decided.
    let alice_members: Vec<String> = calls.iter().map(|c| id_of(&c.0)).collect();
    let mut mixed = vec![id_of(&bobs[0].0)];
    mixed.extend(alice_members);
    let (status, _) = decide(
        &page,
        &bobs[0].0,
        "bob",
        &form_of(&his, "approve_all", &mixed),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    all_wait(&f, &calls, 10).await;
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_member_of_another_principal_swapped_into_the_post_is_refused() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let bobs = calls_as(
        &f,
        "bob",
        vec![destroy_call_in(json!(5), TEAM, "Groceries")],
    )
    .await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let mut members = hidden(&html, "member");
    members[2] = id_of(&bobs[0].0);
    let (status, body) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Added besides the three: refused as well.
    let mut members = hidden(&html, "member");
    members.push(id_of(&bobs[0].0));
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    all_wait(&f, &calls, 10).await;
    let answer = retry_as(&f, "bob", &bobs[0].2, &bobs[0].1, 20).await;
    assert_eq!(elicitation(&answer).0, bobs[0].0);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_member_of_another_audience_on_the_same_store_is_never_batched() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let keys = || KeyRing::single("k1", KEY).unwrap();
    let here = base(keys(), &clock, &store)
        .tool("notes_destroy", destroy_policy(&notes).batch_group("notes"))
        .build();
    let there = base(keys(), &clock, &store)
        .audience("https://other.example/mcp")
        .tool("notes_destroy", destroy_policy(&notes).batch_group("notes"))
        .build();
    let page = here.approval_page();
    let f = Fixture::new(here, notes.clone(), clock.clone(), store.clone());
    let g = Fixture::new(there, notes, clock, store);
    let calls = three(&f).await;
    let others = three(&g).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 3 requests?"), "{html}");
    // The other deployment's approval is not this page's to show.
    let (status, _, _) = visit(&page, "GET", &others[0].0, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut members = hidden(&html, "member");
    members[1] = id_of(&others[0].0);
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Its own set posted at the other deployment's approval (same path shape): not found.
    let (status, _) = decide(&page, &others[0].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    all_wait(&f, &calls, 10).await;
    for (i, (url, state, call)) in others.iter().enumerate() {
        let mut c = with_answer(call.clone(), state, json!({"action": "accept"}));
        c["id"] = json!(30 + i);
        assert_eq!(elicitation(&g.alice(&c).await).0, *url);
    }
    assert_eq!(f.seen.count() + g.seen.count(), 0);
}

#[tokio::test]
async fn duplicate_member_ids_are_refused_whole() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let mut members = hidden(&html, "member");
    members.push(members[0].clone());
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // A duplicate in place of a member (the set's digest deduplicates; the post may not).
    let mut members = hidden(&html, "member");
    members[2] = members[1].clone();
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // One member only (a batch of one is no batch): refused.
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&html, "approve_all", &members[..1]),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    all_wait(&f, &calls, 10).await;
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn twenty_one_members_are_refused_and_twenty_are_decided() {
    let (f, page, _) = batched();
    let calls = calls_as(
        &f,
        "alice",
        (0..20)
            .map(|i| destroy_call_in(json!(i), PERSONAL, "Taxes"))
            .collect(),
    )
    .await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 20 requests?"), "{html}");
    let members = hidden(&html, "member");
    assert_eq!(members.len(), 20);
    // A 21st member field (the first again, or garbage): refused whole.
    for extra in [members[0].clone(), "0".repeat(32), "zz".into()] {
        let mut more = members.clone();
        more.push(extra.clone());
        let (status, _) = decide(
            &page,
            &calls[0].0,
            "alice",
            &form_of(&html, "approve_all", &more),
        )
        .await;
        if extra == "zz" {
            // Unreadable ids are dropped: the 20 still make the set shown.
            assert_eq!(status, StatusCode::OK, "{extra}");
        } else {
            assert_eq!(status, StatusCode::CONFLICT, "{extra}");
        }
    }
    // The one decision kept: each runs once.
    for (i, (_, state, call)) in calls.iter().enumerate() {
        assert!(ran(&retry(&f, call, state, 100 + i as i64).await), "{i}");
    }
    assert_eq!(f.seen.count(), 20);
}

#[tokio::test]
async fn a_token_of_one_set_decides_no_other_set() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let three_html = page_as(&page, &calls[0].0, "alice").await;
    // The third is declined alone; the page now shows the other two, with a token of that set.
    let one = page_as(&page, &format!("{}?one", calls[2].0), "alice").await;
    let (status, _) = decide(
        &page,
        &calls[2].0,
        "alice",
        &format!("csrf={}&decision=decline", csrf(&one)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let two_html = page_as(&page, &calls[0].0, "alice").await;
    assert!(two_html.contains("Approve 2 requests?"), "{two_html}");
    let two_set = hidden(&two_html, "set")[0].clone();
    let two_members = hidden(&two_html, "member");
    // The old token with the new set: the token is for another set.
    let forged = form_of(&three_html, "approve_all", &two_members)
        .replace(&hidden(&three_html, "set")[0], &two_set);
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &forged).await.0,
        StatusCode::FORBIDDEN
    );
    // The old set and token with the two members left: not the set shown.
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form_of(&three_html, "approve_all", &two_members),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The old form whole (its third member decided since): not the set shown.
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form(&three_html, "approve_all"),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The new token with the old set's digest: refused.
    let forged = form(&two_html, "approve_all").replace(&two_set, &hidden(&three_html, "set")[0]);
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &forged).await.0,
        StatusCode::FORBIDDEN
    );
    // The single approval's token as a batch token: refused.
    let single_as_batch = form(&two_html, "approve_all").replace(&csrf(&two_html), &csrf(&one));
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &single_as_batch)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    all_wait(&f, &calls[..2], 10).await;
    assert_eq!(
        outcome(&retry(&f, &calls[2].2, &calls[2].1, 20).await),
        "declined"
    );
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn replaying_a_batch_post_after_its_calls_ran_changes_nothing() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let approve = form(&html, "approve_all");
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &approve).await.0,
        StatusCode::OK
    );
    for (i, (_, state, call)) in calls.iter().enumerate() {
        assert!(ran(&retry(&f, call, state, 10 + i as i64).await));
    }
    assert_eq!(f.seen.count(), 3);
    // The same post again, at each member's URL, and as approve_some / decline_all.
    for (url, _, _) in &calls {
        for body in [
            approve.clone(),
            form(&html, "approve_some"),
            form(&html, "decline_all"),
        ] {
            let (status, answer) = decide(&page, url, "alice", &body).await;
            assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        }
    }
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let replay = retry(&f, call, state, 20 + i as i64).await;
        assert_eq!(replay.error()["data"]["reason"], "invalid_request_state");
    }
    assert_eq!(f.seen.count(), 3);
}

#[tokio::test]
async fn a_member_declined_alone_while_the_batch_decision_is_in_flight_stops_the_batch() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let mut members = Vec::new();
    for (url, _, _) in &calls {
        let id = ApprovalId::from_hex(&id_of(url)).unwrap();
        members.push(f.store.approval(id).await.unwrap().unwrap());
    }
    // The page's post has kept its decision (approve all) but not reached the members yet.
    let approve = |chosen: &str| Decision::Approved {
        chosen: chosen.into(),
        standing: false,
        narrowed: None,
    };
    let alice = Decider::new("alice", Vec::<String>::new(), true);
    let shown = [
        (&members[0], approve("note-7")),
        (&members[1], approve("note-20")),
        (&members[2], approve("note-30")),
    ];
    let kept = BatchDecision::new(&shown, &alice, true, now());
    assert_eq!(kept.set.to_hex(), hidden(&html, "set")[0]);
    assert!(f.store.record_batch(&kept).await.unwrap());
    // Meanwhile the second is declined on its own page.
    let one = page_as(&page, &format!("{}?one", calls[1].0), "alice").await;
    assert!(!one.contains("name=\"set\""), "{one}");
    let (status, body) = decide(
        &page,
        &calls[1].0,
        "alice",
        &format!("csrf={}&decision=decline", csrf(&one)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The batch post is resubmitted: the kept decision stands and is applied to the rest.
    let (status, _) = decide(&page, &calls[0].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let answer = retry(&f, call, state, 10 + i as i64).await;
        assert!(!ran(&answer), "{i}: {}", answer.json());
        let expected = if i == 1 { "declined" } else { "revoked" };
        assert_eq!(outcome(&answer), expected, "{i}: {}", answer.json());
    }
    assert_eq!(f.seen.count(), 0, "all or nothing: nothing");
}

#[tokio::test]
async fn a_member_decided_alone_at_the_same_time_as_the_batch_never_leaves_a_partial_run() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let one = page_as(&page, &format!("{}?one", calls[1].0), "alice").await;
    let batch_form = form(&html, "approve_all");
    let decline = format!("csrf={}&decision=decline", csrf(&one));
    let ((batch_status, _), (single_status, _)) = tokio::join!(
        decide(&page, &calls[0].0, "alice", &batch_form),
        decide(&page, &calls[1].0, "alice", &decline),
    );
    let mut outcomes = Vec::new();
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let answer = retry(&f, call, state, 10 + i as i64).await;
        outcomes.push(if ran(&answer) {
            "ran".to_owned()
        } else if answer.result()["resultType"] == "input_required" {
            "waits".to_owned()
        } else {
            outcome(&answer).as_str().unwrap_or("error").to_owned()
        });
    }
    match (batch_status, single_status) {
        // The batch reached the second first: all three ran, the decline was too late.
        (StatusCode::OK, StatusCode::CONFLICT) => {
            assert_eq!(outcomes, ["ran", "ran", "ran"]);
        }
        // The decline came first, before the batch re-read its set: the batch changed nothing.
        (StatusCode::CONFLICT, StatusCode::OK) => {
            assert_eq!(outcomes, ["waits", "declined", "waits"]);
        }
        // The decline landed between the batch's record and its members: nothing runs.
        (StatusCode::OK, StatusCode::OK) => {
            assert_eq!(outcomes, ["revoked", "declined", "revoked"]);
        }
        other => panic!("unexpected {other:?}: {outcomes:?}"),
    }
    assert_eq!(
        f.seen.count(),
        outcomes.iter().filter(|o| *o == "ran").count()
    );
    assert!(f.seen.count() == 0 || f.seen.count() == 3);
}

#[tokio::test]
async fn approve_some_ticking_an_id_outside_the_set_approves_nothing_outside_it() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    // A fourth call after the page was shown, and one of bob's.
    let later = calls_as(
        &f,
        "alice",
        vec![destroy_call_in(json!(9), PERSONAL, "Taxes")],
    )
    .await;
    let bobs = calls_as(
        &f,
        "bob",
        vec![destroy_call_in(json!(8), TEAM, "Groceries")],
    )
    .await;
    let members = hidden(&html, "member");
    let mut body = format!(
        "csrf={}&set={}&decision=approve_some",
        csrf(&html),
        hidden(&html, "set")[0]
    );
    for m in &members {
        body.push_str(&format!("&member={m}&choice-{m}=note-7"));
    }
    // Ticked: the first member, the later call, bob's call.
    body.push_str(&format!(
        "&approve={}&approve={}&approve={}",
        members[0],
        id_of(&later[0].0),
        id_of(&bobs[0].0)
    ));
    let (status, answer) = decide(&page, &calls[0].0, "alice", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(answer.contains("1 of 3 approved"), "{answer}");
    let first = calls
        .iter()
        .position(|c| id_of(&c.0) == members[0])
        .unwrap();
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let answer = retry(&f, call, state, 10 + i as i64).await;
        if i == first {
            assert!(ran(&answer), "{}", answer.json());
        } else {
            assert_eq!(outcome(&answer), "declined", "{i}");
        }
    }
    assert_eq!(
        elicitation(&retry(&f, &later[0].2, &later[0].1, 20).await).0,
        later[0].0
    );
    assert_eq!(
        elicitation(&retry_as(&f, "bob", &bobs[0].2, &bobs[0].1, 21).await).0,
        bobs[0].0
    );
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_member_edited_between_the_page_and_the_post_does_not_run() {
    let (f, page, _) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    // Taxes (note-20) changes after the page showed it, before the approver clicks.
    f.notes.edit("note-20");
    let (status, _) = decide(&page, &calls[0].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::OK);
    let taxes = retry(&f, &calls[1].2, &calls[1].1, 11).await;
    assert!(!ran(&taxes), "{}", taxes.json());
    assert_eq!(outcome(&taxes), "revoked", "{}", taxes.json());
    assert!(f.notes.0.lock().unwrap().contains_key("note-20"));
    for i in [0, 2] {
        assert!(ran(
            &retry(&f, &calls[i].2, &calls[i].1, 10 + i as i64).await
        ));
    }
    assert_eq!(f.seen.count(), 2);
}

#[tokio::test]
async fn typed_and_four_eyes_calls_are_never_batched_even_when_named_in_a_post() {
    let (f, page, _) = with_layer(|b, notes| {
        b.tool("notes_destroy", destroy_policy(notes).batch_group("notes"))
            .tool("notes_shred", destroy_policy(notes).require_typed_id())
            .tool(
                "notes_wipe",
                destroy_policy(notes)
                    .approved_by(Approvers::anyone_but_caller())
                    .recheck_approvers(different_people),
            )
    });
    let calls = calls_as(
        &f,
        "alice",
        vec![
            call_of("notes_destroy", json!(0), PERSONAL, "Taxes"),
            call_of("notes_destroy", json!(1), TEAM, "Groceries"),
            call_of("notes_shred", json!(2), PERSONAL, "Taxes"),
            call_of("notes_wipe", json!(3), PERSONAL, "Taxes"),
        ],
    )
    .await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    assert!(
        !html.contains("notes_shred") && !html.contains("notes_wipe"),
        "{html}"
    );
    // The typed one, shown alone.
    let shred = page_as(&page, &calls[2].0, "alice").await;
    assert!(!shred.contains("name=\"set\""), "{shred}");
    let (shred_id, wipe_id) = (id_of(&calls[2].0), id_of(&calls[3].0));
    for extra in [&shred_id, &wipe_id] {
        let mut members = hidden(&html, "member");
        members.push(extra.clone());
        // At the batch's own URL, and at the typed / four-eyes call's URL.
        for url in [&calls[0].0, &calls[2].0, &calls[3].0] {
            let (status, _) = decide(
                &page,
                url,
                "alice",
                &form_of(&html, "approve_all", &members),
            )
            .await;
            assert_ne!(status, StatusCode::OK, "{url} with {extra}");
        }
        // In place of a member.
        let mut members = hidden(&html, "member");
        members[1] = extra.clone();
        let (status, _) = decide(
            &page,
            &calls[0].0,
            "alice",
            &form_of(&html, "approve_all", &members),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{extra}");
    }
    // The batch's own set posted at the typed call's URL: it is not a member.
    let (status, _) = decide(&page, &calls[2].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    all_wait(&f, &calls, 10).await;
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn the_inbox_never_lists_another_principals_calls() {
    let (f, _, inbox) = with_layer(|b, notes| {
        b.tool("notes_destroy", destroy_policy(notes).batch_group("notes"))
            .tool(
                "notes_review",
                destroy_policy(notes)
                    .approved_by(Approvers::any_of(["bob"]))
                    .recheck_approvers(different_people)
                    .batch_group("notes"),
            )
    });
    let calls = three(&f).await;
    let reviewed = calls_as(
        &f,
        "alice",
        vec![
            call_of("notes_review", json!(5), PERSONAL, "Taxes"),
            call_of("notes_review", json!(6), TEAM, "Groceries"),
        ],
    )
    .await;
    let inbox_of = |who: &'static str| {
        let inbox = inbox.clone();
        async move {
            let (status, _, html) = visit(
                &inbox,
                "GET",
                "http://notes.example/inbox",
                Some(who),
                &[],
                "",
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{html}");
            html
        }
    };
    // Bob is the approver of the two reviews only: they are listed (as one batch), alice's
    // own calls are not.
    let bob = inbox_of("bob").await;
    assert!(bob.contains("2 requests"), "{bob}");
    for (url, _, _) in &calls {
        assert!(!bob.contains(&id_of(url)), "{bob}");
    }
    assert!(!bob.contains("notes_destroy"), "{bob}");
    // Carol is nobody's approver here.
    let carol = inbox_of("carol").await;
    assert!(carol.contains("Nothing waits"), "{carol}");
    // Alice sees her own calls, never the reviews she may not decide.
    let alice = inbox_of("alice").await;
    assert!(alice.contains("3 requests"), "{alice}");
    for (url, _, _) in &reviewed {
        assert!(!alice.contains(&id_of(url)), "{alice}");
    }
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn remember_standing_on_a_batch_post_grants_nothing_later() {
    let (f, page, _) = with_layer(|b, notes| {
        let scope =
            |l: &mcp_confirm::Lookup| l.arguments["workspaceUri"].as_str().map(str::to_owned);
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .standing(Duration::from_secs(600), 5, scope)
                .batch_group("notes"),
        )
    });
    let calls = calls_as(
        &f,
        "alice",
        vec![
            destroy_call_in(json!(0), PERSONAL, "Taxes"),
            destroy_call_in(json!(1), TEAM, "Groceries"),
        ],
    )
    .await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    let body = format!("{}&remember=standing", form(&html, "approve_all"));
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &body).await.0,
        StatusCode::OK
    );
    for (i, (_, state, call)) in calls.iter().enumerate() {
        assert!(ran(&retry(&f, call, state, 10 + i as i64).await));
    }
    // A later call of the same scope still asks.
    let later = send(
        &f.svc,
        post(
            &destroy_call_in(json!(20), PERSONAL, "Groceries"),
            Some("alice"),
        ),
    )
    .await;
    elicitation(&later);
    assert_eq!(f.seen.count(), 2);
}

#[tokio::test]
async fn narrowing_fields_on_a_batch_post_never_reach_the_calls() {
    // Batch rows are approved as asked (README): a post that narrows (or names a tool) is
    // refused whole and decides nothing; the plain post then runs what was asked and shown.
    let (f, page) = bulk_with(|p| p.batch_group("bulk"));
    let mut calls = Vec::new();
    for i in 0..2 {
        let call = bulk_call_with(i, bulk_arguments());
        let (url, state) = question(&f.alice(&call).await);
        calls.push((url, state, call));
    }
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    assert!(!html.contains("narrow-"), "{html}");
    let body = format!(
        "{}&{}&narrow-limit=1&narrow-dry_run=true&narrow-mode=archive&tool=notes_list",
        form(&html, "approve_all"),
        keep(&["note-3"])
    );
    let (status, answer) = decide(&page, &calls[0].0, "alice", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    for (i, (url, state, call)) in calls.iter().enumerate() {
        let (waiting, _) = question(&bulk_retry(&f, call, state, 5 + i as i64).await);
        assert_eq!(waiting, *url);
    }
    let (status, answer) = decide(&page, &calls[0].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let done = bulk_retry(&f, call, state, 10 + i as i64).await;
        assert!(ran(&done), "{}", done.json());
        let seen = f.seen.last();
        assert_eq!(seen.json()["params"]["arguments"], bulk_arguments());
        assert_eq!(seen.json()["params"]["name"], "notes_bulk_delete");
        assert!(!seen.confirmed.unwrap().narrowed);
    }
    assert_eq!(f.seen.count(), 2);
}

// ---------------------------------------------------------------------------------------------
// Narrowing

#[tokio::test]
async fn bob_cannot_narrow_or_approve_alices_call() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let (status, _, html) = visit(&page, "GET", &url, Some("bob"), &[], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!html.contains("narrow-"), "{html}");
    let body = format!("csrf={token}&decision=approve&{}", keep(&["note-3"]));
    let (status, _) = decide(&page, &url, "bob", &body).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn malformed_subset_edits_are_refused_and_nothing_is_approved() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let huge = format!(
        "narrow-ids={}",
        enc(&format!("\"{}\"", "x".repeat(100_000)))
    );
    let many = vec![format!("narrow-ids={}", enc("\"note-3\"")); 5_000].join("&");
    for edit in [
        // Not JSON.
        "narrow-ids=note-3".to_owned(),
        // Nested: the list inside the list.
        format!("narrow-ids={}", enc("[\"note-3\"]")),
        // An object.
        format!("narrow-ids={}", enc("{\"id\":\"note-3\"}")),
        // Another id, null, a number.
        format!("narrow-ids={}", enc("\"note-20\"")),
        "narrow-ids=null".to_owned(),
        "narrow-ids=3".to_owned(),
        // Twice the same id.
        keep(&["note-3", "note-3"]),
        // One good, one bad.
        format!("{}&narrow-ids=note-7", keep(&["note-3"])),
        // Empty: nothing kept.
        "narrow-ids=".to_owned(),
        "narrow-limit=10".to_owned(),
        huge,
        many,
    ] {
        let body = format!("csrf={token}&decision=approve&{edit}");
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        let short: String = edit.chars().take(60).collect();
        assert!(refused(status, &answer), "{short}: {status} {answer}");
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn numbers_and_strings_are_different_ids() {
    let (f, page) = bulk();
    // ids as strings: the numbers 1 and 2 are not among them.
    let strings = json!({"ids": ["1", "2", "3"], "limit": 5});
    let (url, state, call, token) = bulk_asked(&f, &page, 1, strings).await;
    for edit in ["narrow-ids=1&narrow-ids=2", "narrow-ids=1.0"] {
        let (status, answer) = decide(
            &page,
            &url,
            "alice",
            &format!("csrf={token}&decision=approve&{edit}"),
        )
        .await;
        assert!(refused(status, &answer), "{edit}: {answer}");
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    // ids as numbers: the strings "1" and "2" are not among them, nor 1.0 for 1.
    let numbers = json!({"ids": [1, 2, 3], "limit": 5});
    let (url, state, call, token) = bulk_asked(&f, &page, 3, numbers).await;
    for edit in [
        format!("narrow-ids={}", enc("\"1\"")),
        "narrow-ids=1.0".to_owned(),
        "narrow-ids=1e0".to_owned(),
    ] {
        let (status, answer) = decide(
            &page,
            &url,
            "alice",
            &format!("csrf={token}&decision=approve&{edit}"),
        )
        .await;
        assert!(refused(status, &answer), "{edit}: {answer}");
    }
    // Keeping the number 2 narrows to exactly [2].
    let (status, answer) = decide(
        &page,
        &url,
        "alice",
        &format!("csrf={token}&decision=approve&narrow-ids=2"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(!answer.contains("class=\"error\""), "{answer}");
    let done = bulk_retry(&f, &call, &state, 4).await;
    assert!(ran(&done), "{}", done.json());
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["ids"],
        json!([2])
    );
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn at_most_refuses_everything_but_a_whole_number_no_larger() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    for edit in [
        "1e400", "-1e400", "50.0", "50.5", "49.5", "1e1", "-1", "-0", "-0.0", "51", "\"10\"",
        "[10]", "null", "true", "0x10", "Infinity", "NaN", "", "10abc", "{}", "50%2E0",
    ] {
        let body = format!(
            "csrf={token}&decision=approve&{}&narrow-limit={edit}",
            keep(&["note-3", "note-7", "note-14"])
        );
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        assert!(refused(status, &answer), "{edit:?}: {status} {answer}");
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
    // `-0` reads as a float (refused above); the whole number 0 is a narrowing, and what runs.
    let body = format!(
        "csrf={token}&decision=approve&{}&narrow-limit=0",
        keep(&["note-3", "note-7", "note-14"])
    );
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(!answer.contains("class=\"error\""), "{answer}");
    let done = bulk_retry(&f, &call, &state, 3).await;
    assert!(ran(&done), "{}", done.json());
    let limit = &f.seen.last().json()["params"]["arguments"]["limit"];
    assert_eq!(*limit, json!(0));
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn at_most_never_lets_a_large_integer_grow() {
    let (f, page) = bulk();
    // A limit of 2^62 (amounts in the smallest unit reach such sizes); the "narrowed" one is
    // 511 more, which as an f64 is the same number.
    let asked: u64 = 1 << 62;
    let wider = asked + 511;
    let mut arguments = bulk_arguments();
    arguments["limit"] = json!(asked);
    let (url, state, call, token) = bulk_asked(&f, &page, 1, arguments).await;
    let body = format!(
        "csrf={token}&decision=approve&{}&narrow-limit={wider}",
        keep(&["note-3", "note-7", "note-14"])
    );
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    let done = bulk_retry(&f, &call, &state, 2).await;
    if ran(&done) {
        let limit = f.seen.last().json()["params"]["arguments"]["limit"].as_u64();
        assert!(
            limit.is_some_and(|l| l <= asked),
            "the handler received limit {limit:?} > {asked} (page: {status})"
        );
    }
    assert!(refused(status, &answer), "{status}: {answer}");
}

#[tokio::test]
async fn turn_on_with_a_value_it_does_not_read_is_refused_not_dropped() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let all = keep(&["note-3", "note-7", "note-14"]);
    for value in ["TRUE", "on", "1", "True", "yes"] {
        let body = format!("csrf={token}&decision=approve&{all}&narrow-dry_run={value}");
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        if !refused(status, &answer) {
            // Approved: whatever ran must be the dry run the approver asked for.
            let done = bulk_retry(&f, &call, &state, 2).await;
            let args = f.seen.last().json()["params"]["arguments"].clone();
            panic!(
                "`narrow-dry_run={value}` was approved ({}); ran with dry_run = {}",
                ran(&done),
                args["dry_run"]
            );
        }
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn turn_on_can_never_turn_off() {
    let (f, page) = bulk();
    let mut arguments = bulk_arguments();
    arguments["dry_run"] = json!(true);
    let (url, state, call, token) = bulk_asked(&f, &page, 1, arguments.clone()).await;
    let all = keep(&["note-3", "note-7", "note-14"]);
    for edit in [
        "narrow-dry_run=false".to_owned(),
        String::new(),
        "narrow-dry_run=".to_owned(),
    ] {
        let body = format!("csrf={token}&decision=approve&{all}&{edit}");
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        assert!(refused(status, &answer), "{edit:?}: {answer}");
    }
    // Posted twice: no answer the page asked for, refused.
    let body =
        format!("csrf={token}&decision=approve&{all}&narrow-dry_run=false&narrow-dry_run=true");
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert!(refused(status, &answer), "{answer}");
    // Left on: approved as asked.
    let body = format!("csrf={token}&decision=approve&{all}&narrow-dry_run=true");
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let done = bulk_retry(&f, &call, &state, 2).await;
    assert!(ran(&done), "{}", done.json());
    assert_eq!(f.seen.last().json()["params"]["arguments"], arguments);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn one_of_outside_the_list_wider_or_repeated_is_refused() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let all = keep(&["note-3", "note-7", "note-14"]);
    for mode in [
        "purge",
        "Archive",
        "shred",
        "",
        "archive%00",
        "%22archive%22",
        "shred&narrow-mode=archive",
        "archive&narrow-mode=shred",
        "archive&narrow-mode=archive",
    ] {
        let body = format!("csrf={token}&decision=approve&{all}&narrow-mode={mode}");
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        assert!(refused(status, &answer), "{mode:?}: {answer}");
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    // Once: the edit, and what runs.
    let body = format!("csrf={token}&decision=approve&{all}&narrow-mode=archive");
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(!answer.contains("class=\"error\""), "{answer}");
    let done = bulk_retry(&f, &call, &state, 3).await;
    assert!(ran(&done), "{}", done.json());
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["mode"],
        "archive"
    );
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn no_field_may_name_a_tool_or_an_undeclared_argument_however_spelt() {
    let (f, page) = bulk();
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let narrowed = keep(&["note-3"]);
    for field in [
        "%74ool=notes_list",
        "n%61me=notes_list",
        "tool=",
        "name=",
        "narrow-tool=notes_list",
        "narrow-name=notes_list",
        "narrow-workspaceUri=x",
        "narrow-=x",
        "narrow-ids%00=x",
        "narrow-IDS=%22note-3%22",
    ] {
        let body = format!("csrf={token}&decision=approve&{narrowed}&{field}");
        let (status, answer) = decide(&page, &url, "alice", &body).await;
        assert!(refused(status, &answer), "{field}: {answer}");
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_call_too_large_to_show_cannot_be_narrowed() {
    let (f, page) = bulk();
    let mut arguments = bulk_arguments();
    arguments["note"] = json!("p".repeat(3_000));
    let (url, state, call, token) = bulk_asked(&f, &page, 1, arguments.clone()).await;
    let body = format!("csrf={token}&decision=approve&{}", keep(&["note-3"]));
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert!(refused(status, &answer), "{answer}");
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    // Approved without an edit: it runs as asked.
    let (status, _) = decide(
        &page,
        &url,
        "alice",
        &format!("csrf={token}&decision=approve"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ran(&bulk_retry(&f, &call, &state, 3).await));
    assert_eq!(f.seen.last().json()["params"]["arguments"], arguments);
}

#[tokio::test]
async fn a_narrowing_is_never_a_standing_approval() {
    let (f, page) = bulk_with(|p| {
        p.standing(Duration::from_secs(600), 5, |l: &mcp_confirm::Lookup| {
            l.arguments["workspaceUri"].as_str().map(str::to_owned)
        })
    });
    let (url, state, call, token) = bulk_asked(&f, &page, 1, bulk_arguments()).await;
    let body = format!(
        "csrf={token}&decision=approve&remember=standing&{}",
        keep(&["note-3"])
    );
    let (status, answer) = decide(&page, &url, "alice", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(answer.contains("approved only this time"), "{answer}");
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    // The store refuses it too, whoever writes it.
    let id = ApprovalId::from_hex(&id_of(&url)).unwrap();
    let decided = f
        .store
        .decide(
            id,
            Decider::new("alice", Vec::<String>::new(), true),
            Decision::Approved {
                chosen: String::new(),
                standing: true,
                narrowed: Some(r#"{"ids":["note-3"]}"#.into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(decided, Decided::InvalidChoice);
    // Narrowed once: it runs narrowed, and the next call of the same scope asks again.
    let body = format!(
        "csrf={token}&decision=approve&remember=once&{}",
        keep(&["note-3"])
    );
    assert_eq!(decide(&page, &url, "alice", &body).await.0, StatusCode::OK);
    assert!(ran(&bulk_retry(&f, &call, &state, 3).await));
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["ids"],
        json!(["note-3"])
    );
    question(&f.alice(&bulk_call_with(4, bulk_arguments())).await);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn narrowable_and_select_into_on_one_argument_is_refused_in_either_order() {
    let notes = Notes::seeded();
    let build = |policy: ToolPolicy| try_build_tool("notes_destroy", policy).map(|_| ());
    for how in [Narrowing::Subset, Narrowing::AtMost, Narrowing::TurnOn] {
        // destroy_policy selects into `note_id` already; narrowable after it, and before a
        // select_into given again.
        assert!(build(destroy_policy(&notes).narrowable("note_id", how.clone())).is_err());
        assert!(
            build(
                destroy_policy(&notes)
                    .narrowable("note_id", how)
                    .select_into("note_id")
            )
            .is_err()
        );
    }
}

/// `notes_bulk_delete` approved by two of bob and carol (never the caller).
fn two_approvers() -> (Fixture, ApprovalPage) {
    bulk_with(|p| {
        p.approved_by(Approvers::any_of(["bob", "carol"]).required(2))
            .recheck_approvers(different_people)
    })
}

#[tokio::test]
async fn a_later_approver_who_opens_the_page_after_the_first_approves_that_narrowing() {
    let (f, page) = two_approvers();
    let call = bulk_call_with(1, bulk_arguments());
    let (url, state) = question(&f.alice(&call).await);
    let html = page_as(&page, &url, "bob").await;
    let body = format!(
        "csrf={}&decision=approve&{}",
        csrf(&html),
        keep(&["note-3"])
    );
    let (status, answer) = decide(&page, &url, "bob", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // Carol's page, opened now, offers no narrowing; she approves what it offers: bob's.
    let html = page_as(&page, &url, "carol").await;
    assert!(!html.contains("narrow-"), "{html}");
    let body = format!("csrf={}&decision=approve", csrf(&html));
    let (status, answer) = decide(&page, &url, "carol", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let done = bulk_retry(&f, &call, &state, 2).await;
    assert!(ran(&done), "{}", done.json());
    let seen = f.seen.last();
    assert_eq!(seen.json()["params"]["arguments"]["ids"], json!(["note-3"]));
    assert!(seen.confirmed.unwrap().narrowed);
    // The caller, excluded by the rule, has no form and no say.
    let (status, body) = decide(
        &page,
        &url,
        "alice",
        &format!("csrf={}&decision=approve", "0".repeat(64)),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_later_approvers_narrowing_is_never_silently_dropped() {
    let (f, page) = two_approvers();
    let call = bulk_call_with(1, bulk_arguments());
    let (url, state) = question(&f.alice(&call).await);
    // Both open the page while nothing is approved: both are offered the narrowing.
    let bobs = page_as(&page, &url, "bob").await;
    let carols = page_as(&page, &url, "carol").await;
    assert!(carols.contains("narrow-ids"), "{carols}");
    // Bob approves all three as asked.
    let body = format!(
        "csrf={}&decision=approve&{}",
        csrf(&bobs),
        keep(&["note-3", "note-7", "note-14"])
    );
    assert_eq!(decide(&page, &url, "bob", &body).await.0, StatusCode::OK);
    // Carol, on the page she opened before, keeps note-7 only and approves.
    let body = format!(
        "csrf={}&decision=approve&{}",
        csrf(&carols),
        keep(&["note-7"])
    );
    let (status, answer) = decide(&page, &url, "carol", &body).await;
    let done = bulk_retry(&f, &call, &state, 2).await;
    if ran(&done) {
        let ids = f.seen.last().json()["params"]["arguments"]["ids"].clone();
        panic!(
            "carol approved [\"note-7\"] ({status}: {}), and the call ran with ids {ids}",
            answer.contains("Approved")
        );
    }
    // Her approval with another narrowing is refused: she approves bob's, or nothing.
    assert!(refused(status, &answer), "{status}: {answer}");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn the_second_approvers_narrowing_race_is_caught_by_the_store() {
    // Carol's page reads the approval before bob's approval lands; her narrowing then reaches
    // the store, which refuses an approval of another narrowing than the first.
    let (f, _page) = two_approvers();
    let call = bulk_call_with(1, bulk_arguments());
    let (url, state) = question(&f.alice(&call).await);
    let id = ApprovalId::from_hex(&id_of(&url)).unwrap();
    let bob = Decider::new("bob", Vec::<String>::new(), false);
    let decided = f
        .store
        .decide(
            id,
            bob,
            Decision::Approved {
                chosen: String::new(),
                standing: false,
                narrowed: Some(r#"{"ids":["note-3"]}"#.into()),
            },
        )
        .await
        .unwrap();
    assert!(matches!(decided, Decided::Counted { .. }), "{decided:?}");
    let carol = Decider::new("carol", Vec::<String>::new(), false);
    for narrowed in [None, Some(r#"{"ids":["note-7"]}"#.to_owned())] {
        let decided = f
            .store
            .decide(
                id,
                carol.clone(),
                Decision::Approved {
                    chosen: String::new(),
                    standing: false,
                    narrowed,
                },
            )
            .await
            .unwrap();
        assert_eq!(decided, Decided::InvalidChoice);
    }
    let (waiting, _) = question(&bulk_retry(&f, &call, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn an_approver_of_two_callers_cannot_mix_their_calls_in_one_batch() {
    let (f, page, _) = with_layer(|b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::any_of(["carol"]))
                .recheck_approvers(different_people)
                .batch_group("notes"),
        )
    });
    let alices = calls_as(
        &f,
        "alice",
        vec![
            destroy_call_in(json!(0), PERSONAL, "Taxes"),
            destroy_call_in(json!(1), TEAM, "Groceries"),
        ],
    )
    .await;
    let bobs = calls_as(
        &f,
        "bob",
        vec![
            destroy_call_in(json!(2), TEAM, "Groceries"),
            destroy_call_in(json!(3), TEAM, "Groceries"),
        ],
    )
    .await;
    // Carol is shown each caller's calls as a batch of their own.
    let html = page_as(&page, &alices[0].0, "carol").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    for (url, _, _) in &bobs {
        assert!(!html.contains(&id_of(url)), "{html}");
    }
    // Alice, the caller, is not the approver: no form, no decision.
    let (status, _) = decide(&page, &alices[0].0, "alice", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // One of bob's calls in place of alice's second, and in addition: refused.
    let mut swapped = hidden(&html, "member");
    swapped[1] = id_of(&bobs[0].0);
    let mut added = hidden(&html, "member");
    added.push(id_of(&bobs[0].0));
    for members in [swapped, added] {
        let (status, _) = decide(
            &page,
            &alices[0].0,
            "carol",
            &form_of(&html, "approve_all", &members),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
    }
    // Alice's set posted at bob's call: not a member.
    let (status, _) = decide(&page, &bobs[0].0, "carol", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Carol decides alice's set as shown: alice's two run, bob's two still wait.
    let (status, body) = decide(&page, &alices[0].0, "carol", &form(&html, "approve_all")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (i, (_, state, call)) in alices.iter().enumerate() {
        let done = retry(&f, call, state, 10 + i as i64).await;
        assert!(ran(&done), "{}", done.json());
    }
    for (i, (url, state, call)) in bobs.iter().enumerate() {
        let answer = retry_as(&f, "bob", call, state, 20 + i as i64).await;
        assert_eq!(elicitation(&answer).0, *url);
    }
    assert_eq!(f.seen.count(), 2);
}
