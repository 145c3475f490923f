//! Attacks on queued work (the adversarial pass on #19): oversized queued arguments, and the
//! demo's tasks across instances.
//!
//! Tests named `holds_` held when written; the others failed then, and their doc comment says
//! **Was broken**, what broke and how it was fixed.

use crate::common::faulty::{Faults, Faulty};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use mcp_confirm::grant::{GrantId, GrantStore, MemoryGrantStore};
use serde_json::{Value, json};

use crate::demo::cluster::*;

// =============================================================================================
// Oversized queued arguments.
// =============================================================================================

/// The arguments of a queued `notes_delete` whose JSON is exactly `size` bytes.
fn arguments_of_size(size: usize) -> Value {
    let mut arguments = json!({"workspaceUri": PERSONAL, "title": "Groceries", "padding": ""});
    let base = serde_json::to_vec(&arguments).unwrap().len();
    arguments["padding"] = json!("x".repeat(size - base));
    assert_eq!(serde_json::to_vec(&arguments).unwrap().len(), size);
    arguments
}

/// **Was broken.** "Oversized arguments refused before the form" is checked on the arguments without
/// the chosen id, and again at accept on the arguments *with* it.
///
/// `challenge` (src/driver.rs) calls `check_grant_arguments(&confirmed_arguments(call, None))`;
/// `issue_grant` calls it on `confirmed_arguments(call, Some(chosen))`, where `select_into` has
/// written the chosen id in (up to `MAX_CANDIDATE_ID_LEN` bytes plus the field). Arguments a few
/// bytes under the 64 KiB limit pass the first check, the user is shown the form and accepts,
/// and the accept is refused `arguments_too_large`: a confirmation asked for a call that could
/// never be queued. (Nothing is spent, but no answer to that form can ever succeed.)
///
/// Fixed: the challenge checks the largest arguments any answer can produce (the candidate id
/// longest in JSON written into `select_into`), so a form is shown only when every choice can be
/// queued.
#[tokio::test]
async fn queued_arguments_no_choice_fits_get_no_form() {
    let (f, _, _) = crate::common::queued::queued();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete", "arguments": arguments_of_size(64 * 1024 - 4)}});
    let first = f.alice(&call).await;
    if first.error()["data"]["reason"] == "arguments_too_large" {
        return; // refused before the form: right
    }
    let state = first.state();
    let retry = retry(call, json!(2), &state, accept("note-14"));
    let answer = f.alice(&retry).await;
    assert!(
        answer.json().get("error").is_none(),
        "a form was shown for a call that cannot be queued; accepting it got {}",
        answer.json()["error"]
    );
}

/// Regression: arguments over the limit are refused on the first call, no form.
#[tokio::test]
async fn holds_queued_arguments_over_the_limit_get_no_form() {
    let (f, _, _) = crate::common::queued::queued();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete", "arguments": arguments_of_size(64 * 1024 + 1)}});
    let first = f.alice(&call).await;
    assert_eq!(
        first.error()["data"]["reason"],
        "arguments_too_large",
        "{}",
        first.json()
    );
}

// =============================================================================================
// The demo's tasks across instances.
// =============================================================================================

/// Bob, on the instance that runs alice's task and on another one, asks about and cancels it
/// under every spelling of its id he can make up: the real id, its grant id with another
/// suffix, in upper-case hex, without the suffix, with an extra dot, and a random grant id.
/// Every answer is the same "unknown task" (code and message, up to the id echoed back): he
/// cannot learn whether alice's grant exists, and her purge still runs exactly once.
#[tokio::test]
async fn holds_forged_task_ids_tell_bob_nothing_and_stop_nothing() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let (grant, local) = task.split_once('.').expect("<grant>.<uuid>");
    assert_eq!(grant.len(), 32, "{task}");
    let random = GrantId::random().to_string();
    let forged = [
        task.clone(),
        format!("{grant}.x"),
        format!("{grant}.{local}.extra"),
        format!("{}.{local}", grant.to_uppercase()),
        grant.to_owned(),
        format!("{grant}."),
        format!(".{local}"),
        format!("{random}.{local}"),
        format!("{random}.x"),
    ];
    for at in [&first, &second] {
        let bob = task_client(at, "bob-token").await;
        for id in &forged {
            let seen = get_task(&bob, id).await.unwrap_err();
            let stopped = cancel_task(&bob, id).await.unwrap_err();
            for (code, message) in [seen, stopped] {
                assert_eq!(code, -32602, "{id}: {message}");
                assert_eq!(
                    message.replace(id.as_str(), "<id>"),
                    "unknown task: <id>",
                    "{id}"
                );
            }
        }
    }
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(first.notes_in("personal"), ["note-1.md", "note-2.md"]);
}

/// Alice asks about her own task under malformed spellings (upper-case hex, no suffix, an
/// empty grant part) on another instance: unknown, never someone else's grant and never a
/// crash; under the exact id she gets the task.
#[tokio::test]
async fn holds_malformed_task_ids_are_unknown_even_to_their_owner() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let (grant, local) = task.split_once('.').unwrap();
    for id in [
        format!("{}.{local}", grant.to_uppercase()),
        grant.to_owned(),
        format!(".{local}"),
        format!("+{}.{local}", &grant[1..]),
        format!("{} .{local}", &grant[..31]),
        String::new(),
        format!("{grant}\u{0}.{local}"),
    ] {
        let (code, _) = get_task(&alice_there, &id).await.unwrap_err();
        assert_eq!(code, -32602, "{id:?}");
    }
    let seen = get_task(&alice_there, &task).await.unwrap();
    assert_eq!(seen["taskId"], json!(task), "{seen}");
    settled(&alice, &task).await;
}

/// Three instances: the task runs on the first; alice cancels it on the third and asks about it
/// on the second. Cancelled everywhere it is asked from the grant, and the purge never runs.
#[tokio::test]
async fn holds_a_cancel_on_a_third_instance_stops_the_purge() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, Arc::clone(&grants)).await;
    let third = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let alice_third = task_client(&third, "alice-token").await;
    cancel_task(&alice_third, &task).await.expect("cancel");
    // Twice: idempotent.
    cancel_task(&alice_third, &task)
        .await
        .expect("cancel again");
    let alice_second = task_client(&second, "alice-token").await;
    let there = settled(&alice_second, &task).await;
    assert_eq!(there["status"], "cancelled", "{there}");
    settled(&alice, &task).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
}

/// Cancelling after the purge completed (on the instance that ran it, and on another one)
/// changes nothing: the task still reads completed on both, and no grant is "revoked" after
/// the fact.
#[tokio::test]
async fn holds_a_cancel_after_completion_changes_nothing() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let done = settled(&alice, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let _ = cancel_task(&alice_there, &task).await;
    let _ = cancel_task(&alice, &task).await;
    let here = get_task(&alice, &task).await.unwrap();
    let there = get_task(&alice_there, &task).await.unwrap();
    assert_eq!(here["status"], "completed", "{here}");
    assert_eq!(there["status"], "completed", "{there}");
}

/// **Was broken (spec, low).** The same task reads differently on two instances when the purge is
/// refused.
///
/// A note of the confirmed set is edited before the task runs: on the instance that runs it the
/// task is `completed` with an `isError: true` result (the tool refused), as the Tasks extension
/// says ("`failed` is reserved for JSON-RPC errors"); on every other instance `remote_task`
/// (demo/src/queue.rs) maps `GrantState::Failed` to `TaskPayload::Failed`, so the
/// same task id reads `failed`. A client that polls whichever instance its load balancer picks
/// sees the task change status.
///
/// Fixed: the demo maps `Failed` (and `Expired`) to `completed` with an `isError: true` result,
/// the shape the running instance reports.
#[tokio::test]
async fn a_refused_purge_reads_the_same_on_every_instance() {
    let (_dir, store) = notes_store();
    let grants = shared_grants();
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    let path = first.note_path("personal", "note-14");
    std::fs::write(
        &path,
        std::fs::read_to_string(&path).unwrap() + "\nand coffee",
    )
    .unwrap();
    let here = settled(&alice, &task).await;
    assert_eq!(here["result"]["isError"], true, "{here}");
    let there = settled(&alice_there, &task).await;
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
    assert_eq!(
        there["status"], here["status"],
        "here: {here}\nthere: {there}"
    );
}

/// **Was broken (liveness, restart).** A task whose grant can never run reads `working` forever on
/// every other instance.
///
/// The instance that held the task restarts (rmcp's tasks are in-process: the task is gone) and
/// the grant is never begun; past its expiry it can never run. `Grants::state`
/// (src/grant/worker.rs) returns the state *as stored* — still `Granted`, since only a `begin`
/// marks a grant expired — and `remote_task` (demo/src/queue.rs) maps anything
/// not final to `working`. A client polling another instance is told "working" until the record
/// is pruned, then "unknown task": it never learns the purge it confirmed did not happen.
///
/// Fixed: `Grants::state` reports the effective state by the grants' clock (`Expired` for a
/// `Granted` grant past its expiry, or an `Executing` one past its lease and its expiry;
/// `Revoked` for a `Revoking` one past its lease).
#[tokio::test]
async fn a_task_whose_grant_expired_reads_finished_elsewhere() {
    let (_dir, store) = notes_store();
    let grants: Arc<dyn GrantStore> = Arc::new(Faulty::new(
        MemoryGrantStore::new(),
        Faults {
            worker_gone: true,
            ..Faults::default()
        },
    ));
    let first = instance(&store, Arc::clone(&grants)).await;
    let second = instance(&store, grants).await;
    let alice = task_client(&first, "alice-token").await;
    let alice_there = task_client(&second, "alice-token").await;
    let task = purged_task(&alice, &first).await;
    // The first instance's own task gives up (its worker could not begin the grant).
    let here = settled(&alice, &task).await;
    assert_eq!(here["result"]["isError"], true, "{here}");
    assert_eq!(first.notes_in("personal"), ALL_PERSONAL);
    let there = get_task(&alice_there, &task).await.expect("tasks/get");
    assert_ne!(
        there["status"], "working",
        "the grant is past its expiry and can never run, yet the task reads {there}"
    );
}
