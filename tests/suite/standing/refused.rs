//! A call its revalidation refuses spends no use of the standing approval that covered it: the
//! use is reserved before the check (so racing calls never hold more than the approval has) and
//! given back when the check refuses, on every store and across instances.
//!
//! The scenario of issue 33: twelve calls race under one standing approval for twelve uses, all
//! for the same note. The first to pass its revalidation deletes the note; the other eleven are
//! refused because it is gone. One use is spent, eleven are left, and the next call in scope
//! still runs without a form. (Before the fix, all twelve were spent.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use mcp_confirm::body::RequestBody;
use mcp_confirm::clock::{ManualClock, SystemClock};
use mcp_confirm::store::standing::StandingStore;
use mcp_confirm::store::{MemoryReplayStore, Nonce};
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal,
    Revalidation, StandingApprovals, ToolPolicy,
};
use serde_json::{Value, json};

use super::{accept_remembering, call, workspace};
use crate::backends::on_every_backend;
use crate::common::*;

/// How many calls race, and how many uses the approval has.
const RACERS: usize = 12;

/// What the racing calls share: the notes; the barrier every racer's lookup waits at once it
/// has found the note (so all of them resolve it before any is checked), and how many lookups
/// still wait there; and the gate that makes "check, then delete" one step per call (held from
/// a passed revalidation until the inner service has deleted the note).
#[derive(Clone)]
struct Race {
    notes: Notes,
    barrier: Arc<tokio::sync::Barrier>,
    waiting: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Mutex<()>>,
    held: Arc<Mutex<Option<tokio::sync::OwnedMutexGuard<()>>>>,
}

impl Race {
    fn new() -> Self {
        Self {
            notes: Notes::seeded(),
            barrier: Arc::new(tokio::sync::Barrier::new(RACERS)),
            waiting: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            held: Arc::default(),
        }
    }

    /// `notes_delete` as the common fixture's, offering a standing approval for [`RACERS`] uses
    /// per workspace; its lookups wait at the barrier while a race is on.
    fn policy(&self) -> ToolPolicy {
        let (find, check) = (self.clone(), self.clone());
        ToolPolicy::pick_one(move |lookup: Lookup| {
            let race = find.clone();
            async move {
                let ws = lookup.arguments["workspaceUri"]
                    .as_str()
                    .unwrap_or_default();
                let title = lookup.arguments["title"].as_str().unwrap_or_default();
                let found: Vec<String> = race
                    .notes
                    .0
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, (w, t))| w == ws && t == title)
                    .map(|(id, _)| id.clone())
                    .collect();
                let found: Vec<Candidate> = found
                    .into_iter()
                    .map(|id| {
                        let version = race.notes.version(&id);
                        Candidate::labelled(id.clone(), id).with_version(version)
                    })
                    .collect();
                // While a race is on: every racer has looked the note up before any goes on.
                if race
                    .waiting
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    race.barrier.wait().await;
                }
                Ok::<_, PolicyError>(found)
            }
        })
        .message("Choose one matching note and confirm deletion.")
        .input_key("delete_choice")
        .choice_field("note_id")
        .select_into("note_id")
        .revalidate(move |seen: Revalidation| {
            let race = check.clone();
            async move {
                let turn = Arc::clone(&race.gate).lock_owned().await;
                let chosen = seen.chosen.clone().unwrap_or_default();
                let ws = seen.arguments["workspaceUri"].as_str().unwrap_or_default();
                let live = race.notes.0.lock().unwrap().get(&chosen).cloned();
                let verdict = match live {
                    Some((w, _)) if w != ws => Err(Refusal::new("note moved out of the workspace")),
                    Some(_) if seen.seen_version != Some(race.notes.version(&chosen)) => {
                        Err(Refusal::new("note changed since it was looked up"))
                    }
                    Some(_) => Ok(()),
                    None => Err(Refusal::new("note is gone")),
                };
                if verdict.is_ok() {
                    // Held until the inner service has deleted it: the next check sees that.
                    *race.held.lock().unwrap() = Some(turn);
                }
                verdict
            }
        })
        .standing(Duration::from_secs(600), RACERS as u32, workspace)
    }

    /// The inner service: deletes the note the forwarded call names, lets the next check in,
    /// and answers as the recording one does.
    fn inner(&self, seen: &Recorder) -> Inner {
        let (race, seen) = (self.clone(), seen.clone());
        tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |req: Request<RequestBody<Full<Bytes>>>| {
                let (race, seen) = (race.clone(), seen.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let message: Value = serde_json::from_slice(&body).unwrap();
                    if let Some(id) = message["params"]["arguments"]["note_id"].as_str() {
                        race.notes.0.lock().unwrap().remove(id);
                    }
                    race.held.lock().unwrap().take();
                    seen.0.lock().unwrap().push(Seen {
                        body,
                        headers: parts.headers,
                        confirmed: parts.extensions.get::<Confirmed>().cloned(),
                    });
                    let answer = json!({"jsonrpc":"2.0","id":message["id"],"result":{
                        "resultType":"complete",
                        "content":[{"type":"text","text":"done by inner"}]}});
                    Ok(Response::new(Full::new(Bytes::from(answer.to_string()))))
                }
            },
        ))
    }

    /// One instance of the deployment over `standing`, on the system clock (the shared stores
    /// keep time by it), with its own replay store.
    fn instance(
        &self,
        keys: &KeyRing,
        audience: &str,
        standing: Arc<dyn StandingStore>,
    ) -> Fixture {
        let layer = ConfirmLayer::builder(keys.clone())
            .without_tool_list_unchecked()
            .audience(audience)
            .ttl(Duration::from_secs(300))
            .clock(SystemClock::default())
            .replay_store(MemoryReplayStore::new())
            .standing_store(standing)
            .tool("notes_delete", self.policy())
            .build();
        Fixture::with_inner(
            layer,
            |seen| self.inner(seen),
            self.notes.clone(),
            ManualClock::new(now()),
            MemoryReplayStore::new(),
        )
    }
}

/// The instances' handle on their standing approvals.
fn approvals(
    keys: &KeyRing,
    audience: &str,
    standing: Arc<dyn StandingStore>,
) -> StandingApprovals {
    ConfirmLayer::builder(keys.clone())
        .without_tool_list_unchecked()
        .audience(audience)
        .standing_store(standing)
        .tool("notes_delete", Race::new().policy())
        .build()
        .standing_approvals()
        .unwrap()
}

/// The race on `standing`, from two instances: alice grants the standing approval on one, then
/// [`RACERS`] calls for the one Taxes note race, alternating between the instances.
async fn twelve_racing_calls_spend_one_use(standing: Arc<dyn StandingStore>) {
    // A ring of its own: alice's approvals on a shared store are this run's only.
    let keys = KeyRing::random();
    let audience = format!("https://refused-{}.example/mcp", Nonce::random().to_hex());
    let race = Race::new();
    let (a, b) = (
        race.instance(&keys, &audience, Arc::clone(&standing)),
        race.instance(&keys, &audience, Arc::clone(&standing)),
    );
    let first = a.alice(&call(json!(1), PERSONAL, "Groceries")).await;
    assert_asks(&first);
    let granted = a
        .alice(&retry(
            call(json!(1), PERSONAL, "Groceries"),
            json!(2),
            &first.state(),
            accept_remembering("note-7", json!("standing")),
        ))
        .await;
    assert_ran(&granted);
    let handle = approvals(&keys, &audience, Arc::clone(&standing));
    let alice = Principal::new("alice");
    assert_eq!(handle.list(&alice).await.unwrap()[0].used, 0);

    race.waiting.store(RACERS, Ordering::SeqCst);
    let (a, b) = (Arc::new(a), Arc::new(b));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let f = Arc::clone(if i % 2 == 0 { &a } else { &b });
            tokio::spawn(async move { f.alice(&call(json!(100 + i), PERSONAL, "Taxes")).await })
        })
        .collect();
    let (mut ran, mut refused) = (0, 0);
    for racer in racers {
        let answer = racer.await.unwrap();
        let result = answer.result();
        if result["content"][0]["text"] == "done by inner" {
            assert!(result.get("isError").is_none(), "{result}");
            ran += 1;
        } else {
            assert_eq!(
                result["_meta"]["io.github.mcp-confirm/outcome"], "revoked",
                "{result}"
            );
            refused += 1;
        }
    }
    assert_eq!(
        (ran, refused),
        (1, RACERS - 1),
        "one deletion, the rest refused"
    );
    assert!(race.notes.0.lock().unwrap().get("note-20").is_none());
    let taxes = |f: &Fixture| {
        f.seen
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.json()["params"]["arguments"]["title"] == "Taxes")
            .count()
    };
    assert_eq!(taxes(&a) + taxes(&b), 1);

    // Only the call that ran spent a use.
    let live = handle.list(&alice).await.unwrap();
    assert_eq!(live.len(), 1, "the approval is still live");
    assert_eq!(
        (live[0].used, live[0].uses),
        (1, RACERS as u32),
        "one use spent, the refused ones given back"
    );
    // And the uses given back cover the next call in scope, on either instance, without a form.
    race.notes.replace("note-40", PERSONAL, "Receipts");
    let next = b.alice(&call(json!(200), PERSONAL, "Receipts")).await;
    assert_ran(&next);
    let confirmed = b.seen.last().confirmed.unwrap();
    assert_eq!(confirmed.standing, Some(live[0].id));
    assert_eq!(handle.list(&alice).await.unwrap()[0].used, 2);
}

/// The twelve racing calls on one standing store of `store`'s backend.
async fn racing_calls_refused_on(store: impl StandingStore) {
    twelve_racing_calls_spend_one_use(Arc::new(store)).await;
}

on_every_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    racing_calls_refused_on;
    memory => racing_calls_refused_by_their_revalidation_spend_no_use,
    redis => racing_calls_refused_by_their_revalidation_spend_no_use_on_redis,
    postgres => racing_calls_refused_by_their_revalidation_spend_no_use_on_postgres,
}

/// A call whose client goes away while its revalidation runs never ran: its use comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_during_its_revalidation_spends_no_use() {
    let keys = KeyRing::random();
    let standing = Arc::new(MemoryReplayStore::new());
    let race = Race::new();
    let f = race.instance(&keys, "https://notes.example/mcp", standing.clone());
    let first = f.alice(&call(json!(1), PERSONAL, "Groceries")).await;
    f.alice(&retry(
        call(json!(1), PERSONAL, "Groceries"),
        json!(2),
        &first.state(),
        accept_remembering("note-7", json!("standing")),
    ))
    .await;
    let handle = approvals(&keys, "https://notes.example/mcp", standing);
    let alice = Principal::new("alice");
    // The gate held: the next revalidation waits at it, with its use reserved.
    let gate = Arc::clone(&race.gate).lock_owned().await;
    let svc = f.svc.clone();
    let stuck = tokio::spawn(async move {
        send(
            &svc,
            post(&call(json!(10), PERSONAL, "Taxes"), Some("alice")),
        )
        .await
    });
    let reserved = async {
        loop {
            if handle.list(&alice).await.unwrap()[0].used == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), reserved)
        .await
        .expect("the use is reserved while the check runs");
    stuck.abort();
    let _ = stuck.await;
    assert_eq!(handle.list(&alice).await.unwrap()[0].used, 0, "given back");
    drop(gate);
    assert_eq!(f.seen.count(), 1, "only the granting call ran");
}
