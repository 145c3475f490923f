//! One decision over several calls (a batch): formed on the approval page over one principal's
//! waiting calls, kept once per set, applied to each member; each call still runs only on its
//! own retry, after its own claim and revalidation.

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::batch::{self, BatchDecision};
use mcp_confirm::approval::{ApprovalId, ApprovalStore, Decider, Decision};
use mcp_confirm::{ConfigError, ConfirmLayer, KeyRing, ToolPolicy};
use mcp_confirm_pages::LayerPages as _;
use serde_json::{Value, json};

/// The fixture with `notes_destroy` batchable in group `notes`.
fn batched() -> (Fixture, mcp_confirm_pages::ApprovalPage) {
    browser_with(|p| p.batch_group("notes"))
}

/// Three calls of alice, one after the other: Groceries in personal (three notes), Taxes
/// (one note), Groceries in the team workspace (one note). Their (url, state, call).
async fn three(f: &Fixture) -> Vec<(String, String, Value)> {
    let mut calls = Vec::new();
    for (i, (ws, title)) in [
        (PERSONAL, "Groceries"),
        (PERSONAL, "Taxes"),
        (TEAM, "Groceries"),
    ]
    .into_iter()
    .enumerate()
    {
        let call = destroy_call_in(json!(i), ws, title);
        let (url, _, state) = elicitation(&f.alice(&call).await);
        calls.push((url, state, call));
    }
    calls
}

/// The batch form: `decision`, the rows of the calls whose page URLs are `ticked` ticked,
/// note-7 for the row with a choice.
fn form(html: &str, decision: &str, ticked: &[&str]) -> String {
    let members = hidden(html, "member");
    let mut form = format!(
        "csrf={}&set={}&decision={decision}",
        csrf(html),
        hidden(html, "set")[0]
    );
    for m in &members {
        form.push_str(&format!("&member={m}&choice-{m}=note-7"));
        if ticked.iter().any(|url| url.ends_with(m.as_str())) {
            form.push_str(&format!("&approve={m}"));
        }
    }
    form
}

/// Alice's retry of `call` on `state` (went to the page), with JSON-RPC id `id`.
async fn retry(f: &Fixture, call: &Value, state: &str, id: i64) -> Answer {
    f.alice(&with_answer(
        {
            let mut c = call.clone();
            c["id"] = json!(id);
            c
        },
        state,
        json!({"action": "accept"}),
    ))
    .await
}

#[tokio::test]
async fn a_batch_approved_whole_runs_each_member_once_on_its_own_retry() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let (status, _, html) = visit(&page, "GET", &calls[1].0, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Approve 3 requests?"), "{html}");
    for needle in ["Taxes", "note-20", "note-30", "note-7", "&quot;title&quot;"] {
        assert!(html.contains(needle), "{needle} missing from {html}");
    }
    assert_eq!(hidden(&html, "member").len(), 3);
    let (status, body) = decide(
        &page,
        &calls[1].0,
        "alice",
        &form(&html, "approve_all", &[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("3 of 3 approved"), "{body}");
    // Nothing ran on the page; each call runs on its own retry, once.
    assert_eq!(f.seen.count(), 0);
    let mut ran = Vec::new();
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let done = retry(&f, call, state, 10 + i as i64).await;
        assert_eq!(
            done.result()["content"][0]["text"],
            "done by inner",
            "{}",
            done.json()
        );
        ran.push(f.seen.last().json()["params"]["arguments"]["note_id"].clone());
    }
    assert_eq!(ran, [json!("note-7"), json!("note-20"), json!("note-30")]);
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let replay = retry(&f, call, state, 20 + i as i64).await;
        assert_eq!(replay.error()["data"]["reason"], "invalid_request_state");
    }
    assert_eq!(f.seen.count(), 3);
    // A second decision of the decided set: 409, nothing changes, nothing runs twice.
    let (status, _) = decide(
        &page,
        &calls[1].0,
        "alice",
        &form(&html, "decline_all", &[]),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(f.seen.count(), 3);
}

#[tokio::test]
async fn a_declined_member_never_runs_and_the_others_do() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    // Approve the first and the last; the middle one (Taxes) is declined.
    let (status, body) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form(&html, "approve_some", &[&calls[0].0, &calls[2].0]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("2 of 3 approved"), "{body}");
    let declined = retry(&f, &calls[1].2, &calls[1].1, 11).await;
    assert_eq!(outcome(&declined), "declined", "{}", declined.json());
    for i in [0, 2] {
        let done = retry(&f, &calls[i].2, &calls[i].1, 10 + i as i64).await;
        assert_eq!(done.result()["content"][0]["text"], "done by inner");
    }
    assert_eq!(f.seen.count(), 2);
    assert!(
        f.notes.0.lock().unwrap().contains_key("note-20"),
        "Taxes stays"
    );
}

#[tokio::test]
async fn declined_all_nothing_runs() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[2].0, "alice").await;
    let (status, body) = decide(
        &page,
        &calls[2].0,
        "alice",
        &form(&html, "decline_all", &[&calls[0].0, &calls[1].0]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (i, (_, state, call)) in calls.iter().enumerate() {
        assert_eq!(
            outcome(&retry(&f, call, state, 10 + i as i64).await),
            "declined"
        );
    }
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_member_changed_after_it_was_shown_is_refused_alone() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form(&html, "approve_all", &[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Taxes is edited between the decision and its retry.
    f.notes.edit("note-20");
    let refused = retry(&f, &calls[1].2, &calls[1].1, 11).await;
    assert_ne!(
        refused.json()["result"]["content"][0]["text"],
        "done by inner",
        "{}",
        refused.json()
    );
    for i in [0, 2] {
        let done = retry(&f, &calls[i].2, &calls[i].1, 10 + i as i64).await;
        assert_eq!(done.result()["content"][0]["text"], "done by inner");
    }
    assert_eq!(f.seen.count(), 2);
    assert!(f.notes.0.lock().unwrap().contains_key("note-20"));
}

#[tokio::test]
async fn the_decision_binds_the_set_shown_and_nothing_else() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    // A fourth call arrives after the page was shown.
    let fourth = destroy_call_in(json!(9), PERSONAL, "Groceries");
    let (fourth_url, _, fourth_state) = elicitation(&f.alice(&fourth).await);
    let fourth_id = fourth_url.rsplit('/').next().unwrap().to_owned();
    // Slipping it into the post (under the shown set's token) changes the set: refused whole.
    let slipped = format!(
        "{}&member={fourth_id}&approve={fourth_id}",
        form(&html, "approve_all", &[])
    );
    let (status, body) = decide(&page, &calls[0].0, "alice", &slipped).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Naming another set than the token's: refused.
    let other_set =
        form(&html, "approve_all", &[]).replace(&hidden(&html, "set")[0], &"a".repeat(64));
    assert_eq!(
        decide(&page, &calls[0].0, "alice", &other_set).await.0,
        StatusCode::FORBIDDEN
    );
    // Bob cannot decide alice's batch, even with her form.
    assert_eq!(
        decide(&page, &calls[0].0, "bob", &form(&html, "approve_all", &[]))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    for (i, (url, state, call)) in calls.iter().enumerate() {
        assert_eq!(
            elicitation(&retry(&f, call, state, 30 + i as i64).await).0,
            *url
        );
    }
    // The set shown is decided as shown: the fourth call is not part of it and still waits.
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form(&html, "approve_all", &[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let waiting = retry(&f, &fourth, &fourth_state, 40).await;
    assert_eq!(elicitation(&waiting).0, fourth_url);
    // Alone, it is shown alone.
    let alone = page_as(&page, &fourth_url, "alice").await;
    assert!(!alone.contains("name=\"set\""), "{alone}");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn one_call_can_still_be_decided_alone() {
    let (f, page) = batched();
    let calls = three(&f).await;
    let html = page_as(&page, &format!("{}?one", calls[1].0), "alice").await;
    assert!(!html.contains("name=\"set\""), "{html}");
    let form = format!("csrf={}&decision=approve", csrf(&html));
    assert_eq!(
        decide(&page, &calls[1].0, "alice", &form).await.0,
        StatusCode::OK
    );
    // The other two are now a batch of two.
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    let done = retry(&f, &calls[1].2, &calls[1].1, 11).await;
    assert_eq!(done.result()["content"][0]["text"], "done by inner");
}

#[tokio::test]
async fn two_instances_deciding_one_set_at_once_keep_one_decision() {
    let (f, page) = batched();
    // A second instance: its own layer and page, the same key and store.
    let other = builder(
        KeyRing::single("k1", KEY).unwrap(),
        &f.notes,
        &f.clock,
        &f.store,
    )
    .tool(
        "notes_destroy",
        destroy_policy(&f.notes).batch_group("notes"),
    )
    .build()
    .approval_page();
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let other_html = page_as(&other, &calls[0].0, "alice").await;
    assert_eq!(hidden(&html, "set"), hidden(&other_html, "set"));
    let approve = form(&html, "approve_all", &[]);
    let decline = form(&other_html, "decline_all", &[]);
    let ((a, _), (b, _)) = tokio::join!(
        decide(&page, &calls[0].0, "alice", &approve),
        decide(&other, &calls[0].0, "alice", &decline),
    );
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let approved = a == StatusCode::OK;
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let answer = retry(&f, call, state, 10 + i as i64).await;
        if approved {
            assert_eq!(answer.result()["content"][0]["text"], "done by inner");
        } else {
            assert_eq!(outcome(&answer), "declined");
        }
    }
    assert_eq!(f.seen.count(), if approved { 3 } else { 0 });
}

/// The approvals of `calls`, read from the store.
async fn approvals(
    f: &Fixture,
    calls: &[(String, String, Value)],
) -> Vec<mcp_confirm::approval::Approval> {
    let mut found = Vec::new();
    for (url, _, _) in calls {
        let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
        found.push(f.store.approval(id).await.unwrap().unwrap());
    }
    found
}

/// The three calls' approvals, and alice's all-or-nothing approval of the three (note-7,
/// note-20, note-30), kept in the store but applied to no member yet.
async fn all_approved_and_kept(
    f: &Fixture,
    calls: &[(String, String, Value)],
) -> (Vec<mcp_confirm::approval::Approval>, BatchDecision) {
    let members = approvals(f, calls).await;
    let alice = Decider::new("alice", Vec::<String>::new(), true);
    let shown = [
        (&members[0], Decision::approved("note-7")),
        (&members[1], Decision::approved("note-20")),
        (&members[2], Decision::approved("note-30")),
    ];
    let kept = BatchDecision::new(&shown, &alice, true, now());
    assert!(f.store.record_batch(&kept).await.unwrap());
    (members, kept)
}

#[tokio::test]
async fn all_or_nothing_runs_no_member_when_one_was_decided_otherwise() {
    let (f, _) = batched();
    let calls = three(&f).await;
    let (members, kept) = all_approved_and_kept(&f, &calls).await;
    let alice = Decider::new("alice", Vec::<String>::new(), true);
    // Before the decision reached it, the third was declined on its own page.
    f.store
        .decide(members[2].id, alice.clone(), Decision::Declined)
        .await
        .unwrap();
    let applied = batch::apply(&f.store, &kept).await.unwrap();
    assert_eq!(applied.missed.len(), 1);
    for (i, (_, state, call)) in calls.iter().enumerate() {
        let answer = retry(&f, call, state, 10 + i as i64).await;
        assert_ne!(
            answer.json()["result"]["content"][0]["text"],
            "done by inner",
            "{i}: {}",
            answer.json()
        );
    }
    assert_eq!(f.seen.count(), 0, "all or nothing: nothing");
}

#[tokio::test]
async fn a_crash_between_the_decision_and_its_members_is_healed_by_a_members_retry() {
    let (f, _) = batched();
    let calls = three(&f).await;
    let (members, kept) = all_approved_and_kept(&f, &calls).await;
    let alice = Decider::new("alice", Vec::<String>::new(), true);
    // Only the first member was reached before the crash.
    f.store
        .decide(
            members[0].id,
            alice.clone().in_batch(kept.mark()),
            Decision::approved("note-7"),
        )
        .await
        .unwrap();
    // The second waits (undecided); the first's retry applies the decision to the rest and runs.
    assert_eq!(
        elicitation(&retry(&f, &calls[1].2, &calls[1].1, 11).await).0,
        calls[1].0
    );
    let done = retry(&f, &calls[0].2, &calls[0].1, 10).await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    for i in [1, 2] {
        let done = retry(&f, &calls[i].2, &calls[i].1, 20 + i as i64).await;
        assert_eq!(done.result()["content"][0]["text"], "done by inner");
    }
    assert_eq!(f.seen.count(), 3);
}

#[test]
fn a_batch_group_the_approval_page_cannot_honour_is_refused_at_build() {
    let notes = Notes::seeded();
    let build = |policy: ToolPolicy| try_build_tool("notes_destroy", policy);
    for (policy, words) in [
        (
            delete_policy(&notes).batch_group("notes"),
            "needs `approve_in_browser`",
        ),
        (
            destroy_policy(&notes)
                .require_typed_id()
                .batch_group("notes"),
            "cannot go with `require_typed_id`",
        ),
        (
            destroy_policy(&notes)
                .approved_by(mcp_confirm::Approvers::any_of(["bob", "carol"]).required(2))
                .batch_group("notes"),
            "one approver meets without a passkey",
        ),
        (
            destroy_policy(&notes).batch_group(""),
            "invalid batch group",
        ),
    ] {
        match build(policy) {
            Err(ConfigError::InvalidPolicy(e)) => assert!(e.contains(words), "{e}"),
            other => panic!("expected a refusal with {words:?}, got {other:?}"),
        }
    }
}

/// The same race on Redis and on PostgreSQL, two instances on one shared store: one decision
/// of the set is kept, the other is answered 409, and each member runs (or not) once.
#[tokio::test]
async fn two_instances_on_a_shared_store_keep_one_decision_of_a_set() {
    use mcp_confirm::store::{PostgresStore, RedisStore};
    use std::sync::Arc;
    use tower::Layer;
    let mut stores: Vec<(&str, Arc<dyn crate::common::Store>)> = Vec::new();
    if let Some(url) = crate::backends::redis("batch decision across instances (Redis)").await {
        let prefix = format!(
            "mcp-confirm-test:batch:{}:",
            mcp_confirm::store::Nonce::random().to_hex()
        );
        stores.push((
            "redis",
            Arc::new(RedisStore::open(&url).unwrap().prefix(prefix)),
        ));
    }
    if let Some(url) = crate::backends::postgres("batch decision across instances (Postgres)").await
    {
        let store = PostgresStore::connect(&url).unwrap();
        store.migrate().await.unwrap();
        stores.push(("postgres", Arc::new(store)));
    }
    for (backend, store) in stores {
        // An audience of its own: other runs' approvals on the shared store are not this batch.
        let audience = format!(
            "https://notes.example/mcp/{}",
            mcp_confirm::store::Nonce::random().to_hex()
        );
        let notes = Notes::seeded();
        let instance = || {
            ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
                .without_tool_list_unchecked()
                .audience(audience.clone())
                .store(Arc::clone(&store))
                .tool("notes_destroy", destroy_policy(&notes).batch_group("notes"))
                .approval_url(BASE)
                .build()
        };
        let (a, b) = (instance(), instance());
        let seen = Recorder::default();
        let svc = a.layer(recording_inner(&seen));
        let (page_a, page_b) = (a.approval_page(), b.approval_page());
        let mut calls = Vec::new();
        for (i, (ws, title)) in [
            (PERSONAL, "Groceries"),
            (PERSONAL, "Taxes"),
            (TEAM, "Groceries"),
        ]
        .into_iter()
        .enumerate()
        {
            let call = destroy_call_in(json!(i), ws, title);
            let (url, _, state) = elicitation(&send(&svc, post(&call, Some("alice"))).await);
            calls.push((url, state, call));
        }
        let html_a = page_as(&page_a, &calls[0].0, "alice").await;
        let html_b = page_as(&page_b, &calls[0].0, "alice").await;
        assert!(
            html_a.contains("Approve 3 requests?"),
            "{backend}: {html_a}"
        );
        assert_eq!(hidden(&html_a, "set"), hidden(&html_b, "set"), "{backend}");
        let (approve, decline) = (
            form(&html_a, "approve_all", &[]),
            form(&html_b, "decline_all", &[]),
        );
        let ((sa, _), (sb, _)) = tokio::join!(
            decide(&page_a, &calls[0].0, "alice", &approve),
            decide(&page_b, &calls[0].0, "alice", &decline),
        );
        let mut statuses = [sa, sb];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CONFLICT],
            "{backend}"
        );
        let approved = sa == StatusCode::OK;
        for (i, (_, state, call)) in calls.iter().enumerate() {
            let mut retry = with_answer(call.clone(), state, json!({"action": "accept"}));
            retry["id"] = json!(10 + i);
            let answer = send(&svc, post(&retry, Some("alice"))).await;
            if approved {
                assert_eq!(
                    answer.result()["content"][0]["text"],
                    "done by inner",
                    "{backend}"
                );
            } else {
                assert_eq!(outcome(&answer), "declined", "{backend}");
            }
            // Replayed through the other instance: refused.
            retry["id"] = json!(20 + i);
            let replay = send(
                &b.layer(recording_inner(&seen)),
                post(&retry, Some("alice")),
            )
            .await;
            assert_eq!(
                replay.error()["data"]["reason"],
                "invalid_request_state",
                "{backend}"
            );
        }
        assert_eq!(seen.count(), if approved { 3 } else { 0 }, "{backend}");
    }
}

#[tokio::test]
async fn the_inbox_lists_a_batch_as_one_row_linking_to_its_list() {
    use mcp_confirm::clock::ManualClock;
    use mcp_confirm::store::MemoryReplayStore;
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", destroy_policy(&notes).batch_group("notes"))
        .build();
    let (inbox, page) = (layer.inbox_page(), layer.approval_page());
    let f = Fixture::new(layer, notes, clock, store);
    let calls = three(&f).await;
    // A fourth, three minutes later: outside the window, listed alone.
    f.clock.advance(std::time::Duration::from_secs(180));
    let (late_url, _, _) = elicitation(&f.alice(&destroy_call(json!(9))).await);
    let (status, _, html) = visit(
        &inbox,
        "GET",
        "http://notes.example/inbox",
        Some("alice"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("3 requests"), "{html}");
    let batches = &html[html.find("id=\"batches\"").unwrap()..html.find("id=\"inbox\"").unwrap()];
    let listed = &html[html.find("id=\"inbox\"").unwrap()..];
    let late_id = late_url.rsplit('/').next().unwrap();
    assert!(
        listed.contains(late_id) && !batches.contains(late_id),
        "{html}"
    );
    // The batch's link shows the list of the same three.
    let at = batches.find("href=\"").unwrap() + 6;
    let link = &batches[at..at + batches[at..].find('"').unwrap()];
    let list = page_as(&page, link, "alice").await;
    let mut shown = hidden(&list, "member");
    let mut expected: Vec<String> = calls
        .iter()
        .map(|(url, _, _)| url.rsplit('/').next().unwrap().to_owned())
        .collect();
    shown.sort();
    expected.sort();
    assert_eq!(shown, expected);
}

#[tokio::test]
async fn the_log_keeps_the_batch_decision_each_member_and_the_member_refused_alone() {
    use mcp_confirm::clock::ManualClock;
    use mcp_confirm::store::MemoryReplayStore;
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let log = crate::common::kept_log::KeptLog::default();
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", destroy_policy(&notes).batch_group("notes"))
        .audit_log(log.clone())
        .build();
    let page = layer.approval_page();
    let f = Fixture::new(layer, notes, clock, store);
    let calls = three(&f).await;
    let html = page_as(&page, &calls[0].0, "alice").await;
    let set = hidden(&html, "set")[0].clone();
    let (status, _) = decide(
        &page,
        &calls[0].0,
        "alice",
        &form(&html, "approve_all", &[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    f.notes.edit("note-20");
    for (i, (_, state, call)) in calls.iter().enumerate() {
        retry(&f, call, state, 10 + i as i64).await;
    }
    assert_eq!(f.seen.count(), 2);
    let entries = log.entries();
    let of = |event: &str| -> Vec<mcp_confirm::audit::LogEntry> {
        entries
            .iter()
            .filter(|e| e.event == event)
            .cloned()
            .collect()
    };
    let batch = of("batch_decided");
    assert_eq!(batch.len(), 1, "{entries:?}");
    assert_eq!(batch[0].batch.as_deref(), Some(set.as_str()));
    assert_eq!(batch[0].class.as_deref(), Some("all_or_nothing"));
    assert_eq!(batch[0].chosen.as_deref(), Some("3/3"));
    let members = of("approval_approved");
    assert_eq!(members.len(), 3);
    assert!(
        members
            .iter()
            .all(|m| m.batch.as_deref() == Some(set.as_str()))
    );
    assert_eq!(of("accepted").len(), 2);
    // The changed member: refused at its revalidation, in the log, by the nonce its approval
    // record carries.
    let refused = of("refused");
    let refused: Vec<_> = refused
        .iter()
        .filter(|e| e.class.as_deref() == Some("revalidation"))
        .collect();
    assert_eq!(refused.len(), 1, "{entries:?}");
    let taxes = members
        .iter()
        .find(|m| m.chosen.as_deref() == Some("note-20"))
        .expect("the Taxes member");
    assert_eq!(refused[0].nonce, taxes.nonce);
}
