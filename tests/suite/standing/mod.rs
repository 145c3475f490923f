//! Standing approvals through the layer: the form offers "only this time" or the policy's standing
//! approval; choosing it lets later calls of the same principal, tool and scope run without a
//! form, each spending one use, each still unambiguous and revalidated (a refused call spends
//! nothing: `refused`); anything else (another scope or principal, ambiguity, expiry, no uses
//! left, revocation) gets the form again.

use std::time::Duration;

use crate::common::*;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{
    ConfigError, ConfirmLayer, KeyRing, Lookup, Principal, StandingApprovals, ToolPolicy,
};
use serde_json::{Value, json};

mod attacks;
mod browser;
mod page;
mod queued;
mod refused;

/// The scope of a notes call: its workspace.
fn workspace(lookup: &Lookup) -> Option<String> {
    lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
}

/// A fixture whose `notes_delete` offers a standing approval for ten minutes and `uses` calls,
/// scoped to the workspace.
fn standing_fixture(uses: u32) -> Fixture {
    standing_fixture_with_handle(uses).0
}

/// [`standing_fixture`], with the layer's handle on its standing approvals.
fn standing_fixture_with_handle(uses: u32) -> (Fixture, StandingApprovals) {
    scoped_fixture(uses, workspace)
}

/// A fixture whose standing approvals are scoped by `scope`.
fn scoped_fixture(
    uses: u32,
    scope: impl Fn(&Lookup) -> Option<String> + Send + Sync + 'static,
) -> (Fixture, StandingApprovals) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = delete_policy(&notes).standing(Duration::from_secs(600), uses, scope);
    let layer = base_builder(&notes, &clock, &store)
        .standing_store(store.clone())
        .tool("notes_delete", policy)
        .build();
    let approvals = layer.standing_approvals().unwrap();
    (Fixture::new(layer, notes, clock, store), approvals)
}

fn call(id: Value, workspace: &str, title: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": workspace, "title": title}}})
}

/// An accept of `choice`, with `remember` (`"once"`, `"standing"`, or anything).
fn accept_remembering(choice: &str, remember: Value) -> Value {
    json!({"delete_choice":{"action":"accept","content":{
        "note_id": choice, "confirm": true, "remember": remember}}})
}

/// Alice confirms one Groceries note in her personal workspace and chooses the standing option.
async fn grant(f: &Fixture) {
    let first = f.alice(&call(json!(1), PERSONAL, "Groceries")).await;
    assert_asks(&first);
    let retry = retry(
        call(json!(1), PERSONAL, "Groceries"),
        json!(2),
        &first.state(),
        accept_remembering("note-7", json!("standing")),
    );
    let answer = f.alice(&retry).await;
    assert_ran(&answer);
    assert_eq!(f.seen.last().confirmed.unwrap().standing, None);
}

#[tokio::test]
async fn the_form_offers_only_this_time_or_the_policys_standing_approval() {
    let f = standing_fixture(3);
    let first = f.alice(&call(json!(1), PERSONAL, "Groceries")).await;
    assert_asks(&first);
    let remember = &first.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
        ["remember"];
    assert_eq!(remember["default"], "once", "{remember}");
    assert_eq!(remember["oneOf"][0]["const"], "once");
    assert_eq!(remember["oneOf"][1]["const"], "standing");
    let words = remember["oneOf"][1]["title"].as_str().unwrap();
    for needle in ["notes_delete", PERSONAL, "10 minutes", "at most 3 times"] {
        assert!(words.contains(needle), "{needle} missing from {words:?}");
    }
    // "remember" is not required: a client that sends no choice gets "only this time".
    let required =
        &first.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["required"];
    assert!(!required.as_array().unwrap().contains(&json!("remember")));
}

#[tokio::test]
async fn later_calls_in_scope_run_without_a_form_until_the_uses_run_out() {
    let (events, _guard) = crate::common::audit_events::Events::record();
    let f = standing_fixture(3);
    grant(&f).await;
    // "Taxes" resolves to exactly one note (note-20) in the same workspace.
    for round in 0..3 {
        let answer = f.alice(&call(json!(10 + round), PERSONAL, "Taxes")).await;
        assert_ran(&answer);
        let confirmed = f.seen.last().confirmed.unwrap();
        assert!(confirmed.standing.is_some(), "round {round}");
        assert_eq!(confirmed.chosen.as_deref(), Some("note-20"));
        assert_eq!(confirmed.version, Some(f.notes.version("note-20")));
        assert!(confirmed.is_for(
            "notes_delete",
            Some(&f.seen.last().json()["params"]["arguments"])
        ));
    }
    let ran = f.seen.count();
    // The fourth: no uses left, the form again.
    assert_asks(&f.alice(&call(json!(20), PERSONAL, "Taxes")).await);
    assert_eq!(f.seen.count(), ran);
    // Audit: granted once, used three times (each with its arguments' digest), then exhausted.
    assert_eq!(events.with("decision", "standing_granted").len(), 1);
    let used = events.with("decision", "standing_used");
    assert_eq!(used.len(), 3, "{:?}", events.field("decision"));
    assert!(
        used.iter()
            .all(|e| e.iter().any(|(k, v)| k == "arguments" && v.len() == 16))
    );
    let ended = events.with("decision", "standing_ended");
    assert_eq!(ended.len(), 1);
    assert!(
        ended[0]
            .iter()
            .any(|(k, v)| k == "outcome" && v == "exhausted")
    );
}

#[tokio::test]
async fn only_the_same_principal_tool_and_scope_and_only_unambiguous_calls_are_covered() {
    let f = standing_fixture(10);
    grant(&f).await;
    let ran = f.seen.count();
    // Three Groceries notes in the scope: as ambiguous as ever, so the form.
    assert_asks(&f.alice(&call(json!(10), PERSONAL, "Groceries")).await);
    // Another workspace: another scope.
    assert_asks(&f.alice(&call(json!(11), TEAM, "Groceries")).await);
    // Another principal in a workspace both may use.
    let bob = send(
        &f.svc,
        post(&call(json!(12), TEAM, "Groceries"), Some("bob")),
    )
    .await;
    assert_asks(&bob);
    assert_eq!(f.seen.count(), ran, "nothing ran without a form");
    // While in scope and unambiguous, it still runs.
    assert_ran(&f.alice(&call(json!(13), PERSONAL, "Taxes")).await);
}

#[tokio::test]
async fn expiry_and_revocation_send_the_next_call_back_to_the_form() {
    let f = standing_fixture(10);
    grant(&f).await;
    assert_ran(&f.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    f.clock.advance(Duration::from_secs(601));
    assert_asks(&f.alice(&call(json!(11), PERSONAL, "Taxes")).await);

    let (g, approvals) = standing_fixture_with_handle(10);
    grant(&g).await;
    let alice = Principal::new("alice");
    let listed = approvals.list(&alice).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].tool.as_str(), listed[0].scope.as_str()),
        ("notes_delete", PERSONAL)
    );
    assert!(
        approvals
            .list(&Principal::new("bob"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        approvals
            .revoke(&Principal::new("bob"), Some(listed[0].id))
            .await
            .unwrap(),
        0,
        "not bob's to revoke"
    );
    assert_ran(&g.alice(&call(json!(12), PERSONAL, "Taxes")).await);
    assert_eq!(
        approvals.revoke(&alice, Some(listed[0].id)).await.unwrap(),
        1
    );
    assert_asks(&g.alice(&call(json!(13), PERSONAL, "Taxes")).await);
    assert!(approvals.list(&alice).await.unwrap().is_empty());
}

#[tokio::test]
async fn only_this_time_grants_nothing() {
    let f = standing_fixture(10);
    for (round, remember) in [json!("once"), Value::Null].into_iter().enumerate() {
        let first = f.alice(&call(json!(1), PERSONAL, "Groceries")).await;
        let mut responses = accept_remembering("note-7", remember.clone());
        if remember.is_null() {
            responses["delete_choice"]["content"]
                .as_object_mut()
                .unwrap()
                .remove("remember");
        }
        let retry = retry(
            call(json!(1), PERSONAL, "Groceries"),
            json!(2 + round),
            &first.state(),
            responses,
        );
        assert_ran(&f.alice(&retry).await);
        assert_asks(&f.alice(&call(json!(10 + round), PERSONAL, "Taxes")).await);
    }
}

#[tokio::test]
async fn a_standing_choice_the_form_did_not_offer_is_asked_again_and_runs_nothing() {
    // A scope function that names no scope for this call: no standing option in the form.
    let (f, _) = scoped_fixture(10, |_: &Lookup| None);
    let unscoped = call(json!(1), PERSONAL, "Groceries");
    let first = f.alice(&unscoped).await;
    assert_asks(&first);
    assert!(
        first.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
            .get("remember")
            .is_none()
    );
    let ran = f.seen.count();
    let forged = retry(
        unscoped,
        json!(2),
        &first.state(),
        accept_remembering("note-7", json!("standing")),
    );
    assert_asks(&f.alice(&forged).await);
    assert_eq!(f.seen.count(), ran, "nothing ran");
    // Where it is offered, an unknown choice is asked again too; a non-string one is a protocol
    // error.
    let f = standing_fixture(10);
    let first = f.alice(&call(json!(3), PERSONAL, "Groceries")).await;
    let odd = retry(
        call(json!(3), PERSONAL, "Groceries"),
        json!(4),
        &first.state(),
        accept_remembering("note-7", json!("forever")),
    );
    assert_asks(&f.alice(&odd).await);
    let bad = retry(
        call(json!(3), PERSONAL, "Groceries"),
        json!(5),
        &first.state(),
        accept_remembering("note-7", json!(true)),
    );
    assert_eq!(f.alice(&bad).await.error()["code"], -32602);
    assert_eq!(f.seen.count(), 0, "nothing ran");
}

#[test]
fn standing_is_refused_where_it_cannot_be_kept() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(100, clock.clone());
    let build = |policy: ToolPolicy, with_store: bool| {
        let mut b = base_builder(&notes, &clock, &store).tool("notes_delete", policy);
        if with_store {
            b = b.standing_store(store.clone());
        }
        b.try_build().map(|_| ())
    };
    let offer = |p: ToolPolicy| p.standing(Duration::from_secs(600), 3, workspace);
    assert!(build(offer(delete_policy(&notes)), true).is_ok());
    assert_eq!(
        build(offer(delete_policy(&notes)), false),
        Err(ConfigError::MissingStandingStore)
    );
    for (policy, why) in [
        (
            delete_policy(&notes).standing(Duration::ZERO, 3, workspace),
            "lasts",
        ),
        (
            delete_policy(&notes).standing(Duration::from_secs(90_000), 3, workspace),
            "lasts",
        ),
        (
            delete_policy(&notes).standing(Duration::from_secs(60), 0, workspace),
            "covers",
        ),
        (
            offer(delete_policy(&notes).claimed_by_handler()),
            "claimed_by_handler",
        ),
        (
            offer(delete_policy(&notes).choice_field("remember")),
            "remember",
        ),
    ] {
        match build(policy, true) {
            Err(ConfigError::InvalidPolicy(message)) => {
                assert!(message.contains(why), "{why}: {message}");
            }
            other => panic!("{why}: {other:?}"),
        }
    }
    // With no store given at all, the default memory store keeps them.
    ConfirmLayer::builder(KeyRing::random())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", offer(delete_policy(&notes)))
        .try_build()
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Attacks.

/// Two layers ("instances") of one deployment on one store, and a third of another deployment.
fn instances(uses: u32) -> (Fixture, Fixture, Fixture, StandingApprovals) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = |audience: &str| {
        base_builder(&notes, &clock, &store)
            .audience(audience)
            .standing_store(store.clone())
            .tool(
                "notes_delete",
                delete_policy(&notes).standing(Duration::from_secs(600), uses, workspace),
            )
            .build()
    };
    let (a, b, other) = (
        layer("https://notes.example/mcp"),
        layer("https://notes.example/mcp"),
        layer("https://other.example/mcp"),
    );
    let revoker = b.standing_approvals().unwrap();
    (
        Fixture::new(a, notes.clone(), clock.clone(), store.clone()),
        Fixture::new(b, notes.clone(), clock.clone(), store.clone()),
        Fixture::new(other, notes, clock, store),
        revoker,
    )
}

#[tokio::test]
async fn a_revocation_on_one_instance_stops_the_next_use_on_another() {
    let (a, b, _, revoker) = instances(10);
    grant(&a).await;
    // Granted on one instance, used on the other.
    assert_ran(&b.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    let alice = Principal::new("alice");
    assert_eq!(revoker.revoke(&alice, None).await.unwrap(), 1);
    assert_asks(&a.alice(&call(json!(11), PERSONAL, "Taxes")).await);
    assert_asks(&b.alice(&call(json!(12), PERSONAL, "Taxes")).await);
}

#[tokio::test]
async fn another_deployment_on_the_same_store_and_keys_is_not_covered() {
    let (a, _, other, revoker) = instances(10);
    grant(&a).await;
    assert_asks(&other.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    // Nor does it list or revoke this deployment's approvals.
    let alice = Principal::new("alice");
    let foreign = {
        let notes = Notes::seeded();
        let clock = ManualClock::new(now());
        let store = MemoryReplayStore::with_clock(100, clock.clone());
        base_builder(&notes, &clock, &store)
            .standing_store(store.clone())
            .tool(
                "notes_delete",
                delete_policy(&notes).standing(Duration::from_secs(600), 3, workspace),
            )
            .build()
            .standing_approvals()
            .unwrap()
    };
    assert!(foreign.list(&alice).await.unwrap().is_empty());
    assert_eq!(revoker.list(&alice).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_calls_spend_exactly_the_uses() {
    let f = std::sync::Arc::new(standing_fixture(3));
    grant(&f).await;
    let before = f.seen.count();
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let f = std::sync::Arc::clone(&f);
            tokio::spawn(async move { f.alice(&call(json!(100 + i), PERSONAL, "Taxes")).await })
        })
        .collect();
    let mut asked = 0;
    for racer in racers {
        let answer = racer.await.unwrap();
        if answer.result()["resultType"] == "input_required" {
            asked += 1;
        } else {
            assert_ran(&answer);
        }
    }
    assert_eq!(f.seen.count() - before, 3, "exactly the three uses ran");
    assert_eq!(asked, 13, "the rest got the form");
}

#[tokio::test]
async fn a_call_under_a_standing_approval_is_revalidated_on_the_live_record() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let allowed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let hook = std::sync::Arc::clone(&allowed);
    let policy = delete_policy(&notes)
        .revalidate(move |_: mcp_confirm::Revalidation| {
            let allowed = hook.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                if allowed {
                    Ok(())
                } else {
                    Err(mcp_confirm::Refusal::new("access withdrawn"))
                }
            }
        })
        .standing(Duration::from_secs(600), 10, workspace);
    let layer = base_builder(&notes, &clock, &store)
        .standing_store(store.clone())
        .tool("notes_delete", policy)
        .build();
    let approvals = layer.standing_approvals().unwrap();
    let f = Fixture::new(layer, notes, clock, store);
    grant(&f).await;
    let ran = f.seen.count();
    allowed.store(false, std::sync::atomic::Ordering::SeqCst);
    let answer = f.alice(&call(json!(10), PERSONAL, "Taxes")).await;
    assert_eq!(answer.result()["isError"], true, "{:?}", answer.bytes);
    assert_eq!(
        answer.result()["_meta"]["io.github.mcp-confirm/outcome"],
        "revoked"
    );
    assert_eq!(f.seen.count(), ran, "the refused call did not run");
    // Its use was reserved before the check and given back when the check refused.
    let left = approvals.list(&Principal::new("alice")).await.unwrap();
    assert_eq!(left[0].used, 0);
    // A note taken out of the scope is no longer found there: nothing runs.
    allowed.store(true, std::sync::atomic::Ordering::SeqCst);
    f.notes.move_to("note-20", TEAM);
    let answer = f.alice(&call(json!(11), PERSONAL, "Taxes")).await;
    assert_ne!(answer.result()["content"][0]["text"], "done by inner");
    assert_eq!(f.seen.count(), ran);
}

#[tokio::test]
async fn a_standing_store_that_cannot_answer_covers_nothing_and_refuses_nothing() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base_builder(&notes, &clock, &store)
        .standing_store(
            crate::common::faulty::Faulty::new(
                mcp_confirm::grant::MemoryGrantStore::new(),
                crate::common::faulty::Faults {
                    standing_unreadable: true,
                    ..Default::default()
                },
            )
            .with_standing(store.clone()),
        )
        .tool(
            "notes_delete",
            delete_policy(&notes).standing(Duration::from_secs(600), 10, workspace),
        )
        .build();
    let f = Fixture::new(layer, notes, clock, store);
    grant(&f).await;
    let ran = f.seen.count();
    // Covered, but the store cannot say so: the form, as without a standing approval.
    assert_asks(&f.alice(&call(json!(10), PERSONAL, "Taxes")).await);
    assert_eq!(f.seen.count(), ran);
}
