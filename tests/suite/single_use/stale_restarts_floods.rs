//! Attacks on the layer itself (the notes server gets its own in `notes_attacks.rs`): an approval
//! answered after its record changed, states replayed across a restart, one principal flooding the
//! replay store or the challenge path, and the smaller gaps of the same review (cancel after use,
//! numerically equal request ids, a confirmed call that is not JSON).

use crate::backends::on_every_backend;
use crate::common::*;
use mcp_confirm::store::{MemoryReplayStore, ReplayStore};
use mcp_confirm::{Candidate, Lookup, PolicyError, Revalidation, ToolPolicy};
use serde_json::{Value, json};

/// Bob's first call on his team's "Groceries" (note-30).
fn bobs_call(id: Value) -> Value {
    let mut call = delete_call(id, "Groceries");
    call["params"]["arguments"]["workspaceUri"] = json!(TEAM);
    call
}

fn outcome(answer: &Answer) -> Value {
    answer.result()["_meta"]["io.github.mcp-confirm/outcome"].clone()
}

// --- 1. The approval binds what the user saw ----------------------------------------------------

#[tokio::test]
async fn a_record_edited_between_form_and_answer_is_not_acted_on() {
    let (f, state) = challenged().await;
    f.notes.edit("note-7");
    let answer = f.accept(&state, json!(2), "note-7").await;
    assert_eq!(outcome(&answer), "revoked", "{:?}", answer.bytes);
    assert_eq!(answer.result()["isError"], true);
    assert_eq!(f.seen.count(), 0, "nothing reached the inner service");
    // The refusal burned the state: the same approval cannot be tried again.
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
}

#[tokio::test]
async fn a_record_replaced_under_the_same_id_is_not_acted_on() {
    let (f, state) = challenged().await;
    // note-14 is deleted and another "Groceries" note is created under the same id.
    f.notes.replace("note-14", PERSONAL, "Groceries");
    let answer = f.accept(&state, json!(2), "note-14").await;
    assert_eq!(outcome(&answer), "revoked", "{:?}", answer.bytes);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn the_version_the_user_saw_reaches_the_hook_and_the_handler() {
    let f = fixture();
    f.notes.edit("note-7");
    f.notes.edit("note-7");
    let state = challenge(&f).await;
    let answer = f.accept(&state, json!(2), "note-7").await;
    assert_ran(&answer);
    let confirmed = f.seen.last().confirmed.expect("Confirmed");
    assert_eq!(confirmed.chosen.as_deref(), Some("note-7"));
    assert_eq!(confirmed.version.as_deref(), Some("g2"));
}

fn unversioned_resolver() -> ToolPolicy {
    ToolPolicy::pick_one(|_: Lookup| async {
        Ok::<_, PolicyError>(vec![
            Candidate::labelled("note-3", "Groceries"),
            Candidate::labelled("note-7", "Groceries"),
        ])
    })
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id")
}

#[tokio::test]
async fn a_resolver_that_forgets_versions_is_refused_unless_the_policy_opts_out() {
    let f = fixture_with(|b| b.tool("notes_delete", unversioned_resolver()));
    let answer = f.alice(&delete_call(json!(1), "Groceries")).await;
    assert_eq!(answer.error()["code"], -32603, "{:?}", answer.bytes);
    assert!(answer.json().get("result").is_none(), "no form was shown");

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook_saw = seen.clone();
    let opted_out =
        unversioned_resolver()
            .without_versions()
            .revalidate(move |check: Revalidation| {
                let hook_saw = hook_saw.clone();
                async move {
                    hook_saw.lock().unwrap().push(check.seen_version.clone());
                    Ok(())
                }
            });
    let f = fixture_with(|b| b.tool("notes_delete", opted_out));
    let state = challenge(&f).await;
    let answer = f.accept(&state, json!(2), "note-7").await;
    assert_ran(&answer);
    assert_eq!(*seen.lock().unwrap(), vec![None]);
}

// --- 2. Single use across restarts --------------------------------------------------------------

#[tokio::test]
async fn a_memory_store_refuses_states_issued_before_a_restart() {
    let before = fixture();
    let state = challenge(&before).await;
    let accept = accepted(&state, json!(2), "note-7");
    let answer = before.alice(&accept).await;
    assert_ran(&answer);

    // The same key, a new process: a new memory store that never saw the nonce.
    let after = fixture();
    for body in [accept, accepted(&state, json!(3), "note-3")] {
        let answer = after.alice(&body).await;
        assert_eq!(
            answer.error(),
            json!({"code":-32602,"message":"requestState was issued before a restart; ask again",
                   "data":{"reason":"request_state_restarted"}}),
            "{:?}",
            answer.bytes
        );
    }
    assert_eq!(after.seen.count(), 0, "nothing ran a second time");
    // Asking again works.
    let fresh = challenge(&after).await;
    let answer = after.accept(&fresh, json!(4), "note-7").await;
    assert_ran(&answer);
}

#[tokio::test]
async fn only_a_state_that_verifies_learns_about_the_restart() {
    let before = fixture();
    let state = challenge(&before).await;
    let after = fixture();
    // Bob replaying alice's pre-restart state gets the frozen error, not the restart message.
    let answer = send(
        &after.svc,
        post(&accepted(&state, json!(2), "note-7"), Some("bob")),
    )
    .await;
    assert_frozen_state_error(&answer);
}

/// A state issued by one life of the server is accepted by the next (same key, same durable
/// store), once; its replay in a third life is refused.
async fn durable_states_survive_restarts(make: impl Fn() -> std::sync::Arc<dyn ReplayStore>) {
    let life =
        |store: std::sync::Arc<dyn ReplayStore>| fixture_with(move |b| b.replay_store(store));
    let first = life(make());
    let state = challenge(&first).await;
    drop(first);
    let second = life(make());
    let accept = accepted(&state, json!(2), "note-7");
    let answer = second.alice(&accept).await;
    assert_ran(&answer);
    drop(second);
    let third = life(make());
    assert_frozen_state_error(&third.alice(&accept).await);
    assert_eq!(third.seen.count(), 0);
}

/// Three lives of a server on one durable store of `store`'s backend.
async fn lives_on(store: impl ReplayStore + Clone) {
    durable_states_survive_restarts(|| std::sync::Arc::new(store.clone())).await;
}

on_every_backend! {
    #[tokio::test]
    lives_on;
    redis => redis_states_survive_restarts_and_stay_single_use,
    postgres => postgres_states_survive_restarts_and_stay_single_use,
}

// --- 3. One principal cannot lock everyone out --------------------------------------------------

/// Bob runs 300 challenge-and-decline pairs against a store whose per-principal budget is 3: the
/// first 3 are recorded, the rest are refused with a retry-after; alice's accept still runs.
async fn bob_floods_alice_confirms(store: std::sync::Arc<dyn ReplayStore>) {
    // The stores read the system clock, so the layer does too. A key of its own per run: the
    // store charges entries to a keyed digest of the principal, and bob's entries from an earlier
    // run (kept for minutes in a shared Redis or Postgres) must not count against this run's bob.
    let f = fixture_from(mcp_confirm::KeyRing::random(), 10_000, move |b| {
        b.replay_store(store)
            .without_challenge_rate_limit()
            .clock(mcp_confirm::clock::SystemClock::default())
    });
    let mut declined = 0;
    for i in 0..300u64 {
        let first = send(&f.svc, post(&bobs_call(json!(1)), Some("bob"))).await;
        let state = first.state();
        let retry = retry(bobs_call(json!(1)), json!(2 + i), &state, decline());
        let answer = send(&f.svc, post(&retry, Some("bob"))).await;
        if answer.json().get("result").is_some() {
            assert_eq!(outcome(&answer), "declined");
            declined += 1;
            continue;
        }
        assert_eq!(answer.status, http::StatusCode::TOO_MANY_REQUESTS);
        let error = answer.error();
        assert_eq!(error["code"], -31003, "{error}");
        assert_eq!(error["data"]["reason"], "principal_budget_spent");
        let retry_after = error["data"]["retryAfter"].as_u64().expect("retryAfter");
        // The entry is kept for the TTL plus twice the skew: 360 s.
        assert!((1..=361).contains(&retry_after), "retryAfter {retry_after}");
        assert_eq!(
            answer.headers["retry-after"].to_str().unwrap(),
            retry_after.to_string()
        );
    }
    assert_eq!(declined, 3, "bob's budget");
    let state = challenge(&f).await;
    let answer = f.accept(&state, json!(2), "note-7").await;
    assert_ran(&answer);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_flooding_principal_is_refused_and_others_are_unaffected_memory() {
    // Capacity 300, budget 1 % = 3: before budgets, bob filled the store for everyone.
    let store = MemoryReplayStore::with_capacity(300);
    assert_eq!(store.budget(), 3);
    bob_floods_alice_confirms(std::sync::Arc::new(store)).await;
}

#[tokio::test]
async fn a_flooding_principal_is_refused_and_others_are_unaffected_redis() {
    let Some(store) = crate::backends::replay_store::redis("flood test (Redis)").await else {
        return;
    };
    bob_floods_alice_confirms(std::sync::Arc::new(store.principal_budget(3))).await;
}

#[tokio::test]
async fn a_flooding_principal_is_refused_and_others_are_unaffected_postgres() {
    let Some(store) = crate::backends::replay_store::postgres("flood test (Postgres)").await else {
        return;
    };
    bob_floods_alice_confirms(std::sync::Arc::new(store.principal_budget(3))).await;
}

#[tokio::test]
async fn challenges_are_rate_limited_per_principal() {
    let f = fixture_with(|b| b.challenge_rate_limit(1, 5));
    let mut limited = 0;
    for _ in 0..20 {
        let answer = send(&f.svc, post(&bobs_call(json!(1)), Some("bob"))).await;
        if answer.json().get("result").is_some() {
            assert_asks(&answer);
            continue;
        }
        assert_eq!(answer.status, http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.error()["code"], -31003);
        assert_eq!(answer.error()["data"]["reason"], "challenge_rate_limited");
        assert!(answer.headers.contains_key("retry-after"));
        limited += 1;
    }
    assert!(
        limited >= 10,
        "{limited} of 20 rapid challenges were limited"
    );
    // Alice has her own bucket.
    challenge(&f).await;
}

#[test]
fn a_zero_challenge_rate_is_a_configuration_error() {
    let built = mcp_confirm::ConfirmLayer::builder(mcp_confirm::KeyRing::random())
        .without_tool_list_unchecked()
        .audience("https://a.example/mcp")
        .challenge_rate_limit(0, 5)
        .try_build();
    assert_eq!(
        built.err(),
        Some(mcp_confirm::ConfigError::InvalidRateLimit)
    );
}

// --- Smaller gaps -------------------------------------------------------------------------------

#[tokio::test]
async fn cancel_on_a_used_state_is_refused_like_any_replay() {
    let (f, state) = challenged().await;
    f.accept(&state, json!(2), "note-7").await;
    let dismissed = answered(&state, json!(3), cancel());
    assert_frozen_state_error(&f.alice(&dismissed).await);
    // A declined state too.
    let state = challenge(&f).await;
    let declined = answered(&state, json!(4), decline());
    assert_eq!(outcome(&f.alice(&declined).await), "declined");
    let dismissed = answered(&state, json!(5), cancel());
    assert_frozen_state_error(&f.alice(&dismissed).await);
}

#[tokio::test]
async fn a_retry_id_numerically_equal_to_the_original_is_the_same_id() {
    let f = fixture();
    let state = challenge(&f).await; // id 1
    for same in ["1.0", "1e0", "10E-1", "0.1e1"] {
        let body = accepted(&state, json!(0), "note-7").to_string().replacen(
            "\"id\":0",
            &format!("\"id\":{same}"),
            1,
        );
        assert!(body.contains(&format!("\"id\":{same}")), "{body}");
        assert_frozen_state_error(&send_text(&f, body).await);
    }
    assert_eq!(f.seen.count(), 0);
    // A different number is a different id.
    let answer = f.accept(&state, json!(1.5), "note-7").await;
    assert_ran(&answer);
}

fn with_content_type(
    call: &Value,
    content_type: Option<&str>,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut request = post(call, Some("alice"));
    request.headers_mut().remove(http::header::CONTENT_TYPE);
    if let Some(value) = content_type {
        request
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value.parse().unwrap());
    }
    request
}

#[tokio::test]
async fn a_confirmed_call_must_be_json() {
    let f = fixture();
    let first = delete_call(json!(1), "Groceries");
    for refused in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
    ] {
        let answer = send(&f.svc, with_content_type(&first, refused)).await;
        assert_eq!(
            answer.status,
            http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{refused:?}"
        );
        assert_eq!(answer.error()["code"], -32600);
    }
    // Two Content-Type headers are refused too.
    let mut twice = with_content_type(&first, Some("application/json"));
    twice
        .headers_mut()
        .append(http::header::CONTENT_TYPE, "text/plain".parse().unwrap());
    assert_eq!(
        send(&f.svc, twice).await.status,
        http::StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    for accepted_type in ["application/json", "Application/JSON; charset=utf-8"] {
        let answer = send(&f.svc, with_content_type(&first, Some(accepted_type))).await;
        assert_eq!(
            answer.result()["resultType"],
            "input_required",
            "{accepted_type}"
        );
    }
    // Calls the layer does not confirm are not its business.
    let list = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"_meta":meta(),
        "name":"notes_list","arguments":{"workspaceUri":PERSONAL}}});
    let answer = send(&f.svc, with_content_type(&list, Some("text/plain"))).await;
    assert_ran(&answer);
}
