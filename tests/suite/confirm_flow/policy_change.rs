//! The policy changes while a form is open: a rolling deploy reaches an instance whose tool no
//! longer needs a confirmation (its `#[confirm]` dropped, the tool exempted, or the upstream's
//! list re-annotated it read-only), and the client's retry lands there.
//!
//! The inner service here ignores `requestState` and runs whatever reaches it, as any server
//! that never asks questions does. A retry that carries a state the deployment sealed must never
//! reach it as it came: a decline ends as a decline, a cancel as a cancel, an acceptance runs
//! nothing and says to call again. Each test failed before the layer looked at retries of
//! tools it does not confirm (issue #52, 1).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, ConfirmLayerBuilder, JsonRpcMessage, JsonRpcReply, KeyRing};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

/// Two instances of one deployment: `v1` confirms `notes_delete`, `v2` (built by `v2`) does
/// not; one key ring, one replay store, one clock.
struct Deploy {
    v1: Fixture,
    v2: Fixture,
}

fn deploy(v2: impl FnOnce(ConfirmLayerBuilder) -> ConfirmLayerBuilder) -> Deploy {
    let v1 = fixture();
    let layer = v2(instance(&v1.clock, &v1.store)).build();
    let v2 = Fixture::new(layer, v1.notes.clone(), v1.clock.clone(), v1.store.clone());
    Deploy { v1, v2 }
}

/// The deployment's settings without any tool policy.
fn instance(clock: &ManualClock, store: &MemoryReplayStore) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .audience("https://notes.example/mcp")
        .ttl(Duration::from_secs(300))
        .clock(clock.clone())
        .replay_store(store.clone())
}

/// `v2` without `#[confirm]`: no policy, no tool list.
fn dropped(b: ConfirmLayerBuilder) -> ConfirmLayerBuilder {
    b.without_tool_list_unchecked()
}

/// `v2` whose list re-annotated the tool read-only.
fn read_only(b: ConfirmLayerBuilder) -> ConfirmLayerBuilder {
    b.tool_list(
        json!([{"name": "notes_delete", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true}}]),
    )
}

/// `v2` that exempts the tool.
fn exempted(b: ConfirmLayerBuilder) -> ConfirmLayerBuilder {
    b.tool_list(json!([{"name": "notes_delete", "inputSchema": {"type": "object"}}]))
        .exempt("notes_delete")
}

fn outcome(answer: &Answer) -> Value {
    answer.result()["_meta"]["io.github.mcp-confirm/outcome"].clone()
}

#[tokio::test]
async fn a_decline_on_an_instance_without_the_policy_runs_nothing() {
    for v2 in [dropped, read_only, exempted] {
        let d = deploy(v2);
        let state = challenge(&d.v1).await;
        let answer = d.v2.alice(&answered(&state, json!(2), decline())).await;
        assert_eq!(d.v2.seen.count(), 0, "a declined call reached the server");
        assert_eq!(outcome(&answer), "declined", "{:?}", answer.bytes);
        // The decline spent the state: the same state accepted on v1 is a replay.
        let late = d.v1.accept(&state, json!(3), "note-3").await;
        assert_frozen_state_error(&late);
        assert_eq!(d.v1.seen.count(), 0);
    }
}

#[tokio::test]
async fn a_cancel_on_an_instance_without_the_policy_runs_nothing_and_spends_nothing() {
    for v2 in [dropped, read_only, exempted] {
        let d = deploy(v2);
        let state = challenge(&d.v1).await;
        let answer = d.v2.alice(&answered(&state, json!(2), cancel())).await;
        assert_eq!(d.v2.seen.count(), 0, "a cancelled call reached the server");
        assert_eq!(outcome(&answer), "cancelled", "{:?}", answer.bytes);
        // Nothing spent: answered again on v1, it runs once.
        let ran = d.v1.accept(&state, json!(3), "note-3").await;
        assert_ran(&ran);
        assert_eq!(d.v1.seen.count(), 1);
    }
}

#[tokio::test]
async fn an_acceptance_on_an_instance_without_the_policy_asks_to_call_again() {
    for v2 in [dropped, read_only, exempted] {
        let d = deploy(v2);
        let state = challenge(&d.v1).await;
        let answer = d.v2.accept(&state, json!(2), "note-3").await;
        assert_eq!(d.v2.seen.count(), 0, "an old acceptance reached the server");
        assert_eq!(answer.result()["isError"], true);
        assert_eq!(outcome(&answer), "policy_changed", "{:?}", answer.bytes);
        // Called again without the state, the call is the new policy's to judge: it runs.
        let again = d.v2.alice(&delete_call(json!(4), "Groceries")).await;
        assert_ran(&again);
        assert_eq!(d.v2.seen.count(), 1);
        // The key of the form was never forwarded.
        assert!(
            d.v2.seen.last().json()["params"]
                .get("inputResponses")
                .is_none()
        );
    }
}

#[tokio::test]
async fn a_decline_is_an_error_result_unless_the_list_shows_no_output_schema() {
    let typed = |b: ConfirmLayerBuilder| {
        b.tool_list(
            json!([{"name": "notes_delete", "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]),
        )
    };
    for (v2, is_error) in [
        (dropped as fn(_) -> _, true),
        (read_only, false),
        (typed, true),
    ] {
        let d = deploy(v2);
        let state = challenge(&d.v1).await;
        let answer = d.v2.alice(&answered(&state, json!(2), decline())).await;
        assert_eq!(answer.result()["isError"], is_error, "{:?}", answer.bytes);
    }
}

#[tokio::test]
async fn a_state_of_ours_is_checked_before_anything_else() {
    let d = deploy(dropped);
    let state = challenge(&d.v1).await;
    // Another principal.
    let bob = send(
        &d.v2.svc,
        post(&answered(&state, json!(2), decline()), Some("bob")),
    )
    .await;
    assert_frozen_state_error(&bob);
    // The first call's own request id.
    let same_id = d.v2.alice(&answered(&state, json!(1), decline())).await;
    assert_frozen_state_error(&same_id);
    // Another tool's call carrying it.
    let mut other = answered(&state, json!(2), decline());
    other["params"]["name"] = json!("notes_archive");
    assert_frozen_state_error(&send_text(&d.v2, other.to_string()).await);
    // Expired.
    d.v2.clock.advance(Duration::from_secs(3600));
    let late = d.v2.alice(&answered(&state, json!(2), decline())).await;
    assert_frozen_state_error(&late);
    assert_eq!(d.v2.seen.count(), 0, "a state of ours reached the server");
}

#[tokio::test]
async fn an_answer_that_is_not_accept_decline_or_cancel_is_refused() {
    let d = deploy(dropped);
    let state = challenge(&d.v1).await;
    let answer =
        d.v2.alice(&answered(
            &state,
            json!(2),
            json!({"delete_choice": {"action": "yes"}}),
        ))
        .await;
    assert_eq!(answer.error()["code"], -32602, "{:?}", answer.bytes);
    assert_eq!(d.v2.seen.count(), 0);
}

#[tokio::test]
async fn another_servers_state_goes_on_untouched() {
    let d = deploy(dropped);
    // A server behind the layer that asks its own questions: its state and its answer pass.
    let call = answered(
        "upstream-state-1",
        json!(2),
        json!({"its_own": {"action": "accept", "content": {"ok": true}}}),
    );
    let answer = d.v2.alice(&call).await;
    assert_ran(&answer);
    assert_eq!(d.v2.seen.last().json(), call);
    // One that looks like ours but was sealed under another key.
    let foreign = fixture_from(KeyRing::single("k1", secret(0x22)).unwrap(), 100, |b| b);
    let state = challenge(&foreign).await;
    let call = answered(&state, json!(3), decline());
    let answer = d.v2.alice(&call).await;
    assert_ran(&answer);
    assert_eq!(d.v2.seen.last().json(), call);
}

#[tokio::test]
async fn an_answer_under_the_layers_key_without_a_state_is_refused() {
    // v2 still confirms another tool under the same key.
    let d = deploy(|b| {
        dropped(b).tool(
            "notes_purge",
            mcp_confirm::ToolPolicy::confirm_only().input_key("delete_choice"),
        )
    });
    let mut call = delete_call(json!(2), "Groceries");
    call["params"]["inputResponses"] = decline();
    let answer = d.v2.alice(&call).await;
    assert_eq!(answer.error()["code"], -32602, "{:?}", answer.bytes);
    assert_eq!(d.v2.seen.count(), 0);
}

#[tokio::test]
async fn over_messages_a_decline_runs_nothing_either() {
    let d = deploy(dropped);
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let layer = dropped(instance(&d.v1.clock, &d.v1.store))
        .unauthenticated_local_principal(mcp_confirm::Principal::new("alice"))
        .build();
    let record = seen.clone();
    let svc = layer.layer(tower::service_fn(move |msg: JsonRpcMessage| {
        let record = record.clone();
        async move {
            let value: Value = serde_json::from_slice(&msg.body).unwrap();
            record.lock().unwrap().push(value.clone());
            Ok::<_, Infallible>(JsonRpcReply::message(
                json!({"jsonrpc":"2.0","id":value["id"],"result":{"content":[]}}).to_string(),
            ))
        }
    }));
    for responses in [decline(), cancel(), accept("note-3")] {
        let state = challenge(&d.v1).await;
        let reply = svc
            .clone()
            .oneshot(JsonRpcMessage::new(
                answered(&state, json!(2), responses).to_string(),
            ))
            .await
            .unwrap();
        let reply: Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
        assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "a retry reached the server"
    );
}

/// A relaxed rule never judges a stricter rule's state (#52, 10e). The tool was approved on the
/// page (an approver's decision, maybe four eyes); a reload or a rolling deploy now asks the
/// caller's own form. The client answers the old state with the form's `accept`: it is asked
/// again under the rule in force, nothing runs on the old state; answered anew, it runs once.
#[tokio::test]
async fn a_state_asked_on_the_page_is_asked_again_under_a_relaxed_form() {
    use crate::common::browser;
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let keys = || KeyRing::single("k1", KEY).unwrap();
    let strict = browser::base(keys(), &clock, &store)
        .tool(
            "notes_destroy",
            browser::destroy_policy(&notes).approved_by(mcp_confirm::Approvers::any_of(["bob"])),
        )
        .build();
    let relaxed = browser::base(keys(), &clock, &store)
        .tool(
            "notes_destroy",
            delete_policy(&notes).input_key("destroy_approval"),
        )
        .build();
    let v1 = Fixture::new(strict, notes.clone(), clock.clone(), store.clone());
    let v2 = Fixture::new(relaxed, notes.clone(), clock.clone(), store.clone());
    let asked = v1.alice(&browser::destroy_call(json!(1))).await;
    let (_, _, state) = browser::elicitation(&asked);
    // The client now shows forms too, and answers the old state as the relaxed form asks.
    let mut call = browser::with_answer(
        browser::destroy_call(json!(2)),
        &state,
        json!({"action": "accept", "content": {"note_id": "note-3", "confirm": true}}),
    );
    call["params"]["_meta"] = meta();
    let answer = v2.alice(&call).await;
    assert_asks(&answer);
    assert_ne!(
        answer.state(),
        state,
        "asked anew, with a state of the rule in force"
    );
    assert_eq!(
        v2.seen.count(),
        0,
        "the old state ran under the relaxed rule"
    );
    // The new question, answered, runs once.
    let fresh = answer.state();
    let mut call = browser::with_answer(
        browser::destroy_call(json!(3)),
        &fresh,
        json!({"action": "accept", "content": {"note_id": "note-3", "confirm": true}}),
    );
    call["params"]["_meta"] = meta();
    assert_ran(&v2.alice(&call).await);
    assert_eq!(v2.seen.count(), 1);
}
