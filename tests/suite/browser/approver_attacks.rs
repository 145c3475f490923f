//! The attacks on "someone else approves" (the adversarial pass on #23) — approver rules on the
//! approval page and in every store, four eyes against the caller's other sessions, roles and
//! keys, counting, the chosen record, declines racing approvals, records edited in a shared
//! store, replayed posts, the inbox, notifications (payloads, Slack, signatures, the queue) and
//! the rules a builder should refuse.
//!
//! Each test is one attack, named `holds_…` and asserting the safe behaviour. The doc comment of
//! each says what it tries. Five were findings when written, each fixed since: the caller known
//! only by the keyed digest (a page whose ring lacked the key let them approve their own
//! four-eyes request; now their recorded subject counts too), the retry trusting an
//! endorsement's own `caller` flag (now the caller's subject is compared, and every endorsement
//! must name the decided record), Redis inbox sets that never shrank under steady traffic (now
//! scored by expiry and pruned on every proposal and read), `notify::verify` panicking on a
//! timestamp past what the clock holds (now `Stale`), and a passkey rule the page could not meet
//! (now verified by the passkey step, and refused at build without `passkeys`).

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::{ApprovalPage, InboxPage};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::StatusCode;
use mcp_confirm::approval::Approvers;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::notify::signature::DEFAULT_TOLERANCE;
use mcp_confirm::notify::{self, ApprovalNotice, Notifier, Payload, WebhookError, WebhookSecret};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ApproverQuery, ConfirmLayer, KeyRing, PolicyError, Principal, ToolPolicy};
use serde_json::{Value, json};
use tower::Layer;

use super::attacks::{on_store_with, stores};
use crate::common::browser::*;
use crate::common::*;

// =============================================================================================
// Fixtures.
// =============================================================================================

const KEY2: [u8; 32] = secret(0x22);

fn admin(subject: &str) -> Principal {
    Principal::new(subject).with_roles(["notes-admin"])
}

/// Notices a layer handed to its notifier.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<ApprovalNotice>>>);

impl Notifier for Heard {
    fn approval_requested(&self, notice: ApprovalNotice) {
        self.0.lock().unwrap().push(notice);
    }
}

impl Heard {
    fn all(&self) -> Vec<ApprovalNotice> {
        self.0.lock().unwrap().clone()
    }
}

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

async fn open(page: &ApprovalPage, url: &str, who: &Principal) -> (StatusCode, String) {
    let (status, _, html) = visit_as(page, "GET", url, Some(who.clone()), &[], "").await;
    (status, html)
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

/// Opens the page as `who` and posts `form` with the token it showed (or an all-zero token
/// where it showed none, which the page must refuse).
async fn decide_as(
    page: &ApprovalPage,
    url: &str,
    who: &Principal,
    form: &str,
) -> (StatusCode, String) {
    let (_, html) = open(page, url, who).await;
    let token = if html.contains("name=\"csrf\"") {
        csrf(&html)
    } else {
        "0".repeat(64)
    };
    post_as(page, url, who, &format!("csrf={token}&{form}")).await
}

async fn inbox_of(inbox: &InboxPage, who: Principal) -> (StatusCode, String) {
    let (status, _, html) = visit_as(
        inbox,
        "GET",
        "http://notes.example/inbox",
        Some(who),
        &[],
        "",
    )
    .await;
    (status, html)
}

fn id_of(url: &str) -> String {
    url.rsplit('/').next().unwrap().to_owned()
}

fn redis_prefix() -> String {
    format!(
        "mcp-confirm-test:attack23:{}:",
        mcp_confirm::store::Nonce::random().to_hex()
    )
}

fn run_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(mcp_confirm::store::Nonce::random().as_bytes());
    key[16..].copy_from_slice(mcp_confirm::store::Nonce::random().as_bytes());
    key
}

/// A layer on a shared store `store` with `policy` for `notes_destroy`, the system clock.
fn layer_on(
    store: &Arc<dyn crate::common::Store>,
    key: [u8; 32],
    policy: ToolPolicy,
) -> (Confirm, ApprovalPage, Recorder) {
    let layer = ConfirmLayer::builder(KeyRing::single("k1", key).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .store(Arc::clone(store))
        .tool("notes_destroy", policy)
        .approval_url(BASE)
        .build();
    let seen = Recorder::default();
    let page = layer.approval_page();
    (layer.layer(recording_inner(&seen)), page, seen)
}

type Confirm = mcp_confirm::Confirm<Inner>;

// =============================================================================================
// Four eyes against the caller.
// =============================================================================================

/// The caller of a four-eyes approval, in a second session, holding the approvers' role, with
/// the approvers' token borrowed, declining instead of approving: never counted, nothing runs.
#[tokio::test]
async fn holds_the_caller_cannot_decide_four_eyes_in_any_session_or_role() {
    let (f, page, _) = approved_by(Approvers::role("notes-admin").except_caller().required(2));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    for alice in [
        Principal::new("alice"),
        admin("alice"),
        Principal::new("alice").with_roles(["notes-admin", "root"]),
    ] {
        let (status, html) = open(&page, &url, &alice).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!html.contains("name=\"csrf\""), "{html}");
        for form in ["choice=note-7&decision=approve", "decision=decline"] {
            let (status, _) = decide_as(&page, &url, &alice, form).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{form}");
        }
    }
    // Bob's token is bound to bob.
    let (_, html) = open(&page, &url, &admin("bob")).await;
    let borrowed = csrf(&html);
    let (status, _) = post_as(
        &page,
        &url,
        &admin("alice"),
        &format!("csrf={borrowed}&choice=note-7&decision=approve"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // One real approver: still 1 of 2 short; the retry stays pending.
    decide_as(&page, &url, &admin("bob"), "choice=note-7&decision=approve").await;
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(pending.result()["resultType"], "input_required");
    assert_eq!(f.seen.count(), 0);
}

/// Key rotation: the approval was made under k1; the page runs a ring [k2, k1] (the documented
/// second step). The caller is still recognised as the caller and refused.
#[tokio::test]
async fn holds_the_caller_is_recognised_across_a_key_rotation() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = || {
        destroy_policy(&notes)
            .approved_by(Approvers::anyone_but_caller())
            .recheck_approvers(different_people)
    };
    let old = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", policy())
        .build();
    let rotated = base(
        KeyRing::new([("k2", KEY2), ("k1", KEY)]).unwrap(),
        &clock,
        &store,
    )
    .tool("notes_destroy", policy())
    .build();
    let page = rotated.approval_page();
    let f = Fixture::new(old, notes.clone(), clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _) = decide_as(
        &page,
        &url,
        &Principal::new("alice"),
        "choice=note-7&decision=approve",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(pending.result()["resultType"], "input_required");
    assert_eq!(f.seen.count(), 0);
}

/// A hurried deployer mounts the approval page on an instance whose key ring lacks the key the
/// MCP instance signed with (a separate "approvals" service, or the old key dropped from the
/// page's instances before the longest TTL passed). The record says in plain text who asked
/// (`Approval::subject`), yet the page decides "is this the caller?" only by the keyed digest:
/// the caller is taken for a stranger, approves her own four-eyes request, and the retry (which
/// trusts the `caller` flag the page recorded) runs it.
#[tokio::test]
async fn holds_the_caller_cannot_self_approve_on_a_page_with_another_key() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = || {
        destroy_policy(&notes)
            .approved_by(Approvers::anyone_but_caller())
            .recheck_approvers(different_people)
    };
    let mcp = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", policy())
        .build();
    let elsewhere = base(KeyRing::single("k2", KEY2).unwrap(), &clock, &store)
        .tool("notes_destroy", policy())
        .build();
    let page = elsewhere.approval_page();
    let f = Fixture::new(mcp, notes.clone(), clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, body) = decide_as(
        &page,
        &url,
        &Principal::new("alice"),
        "choice=note-7&decision=approve",
    )
    .await;
    let retry = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(
        f.seen.count(),
        0,
        "alice approved her own four-eyes request (page said {status}: {body}); retry: {}",
        retry.json()
    );
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

/// A record in Redis edited (a buggy writer, another tool with write access) to add the
/// caller's own subject as the second approval, flagged `caller: false`. The retry knows who
/// the caller is (it holds her principal) but only checks the flag: it runs.
#[tokio::test]
async fn holds_the_retry_refuses_an_endorsement_by_the_callers_own_subject() {
    use redis::AsyncCommands;
    let Some(url) = crate::backends::redis("attack23: caller's own endorsement (Redis)").await
    else {
        return;
    };
    let prefix = redis_prefix();
    let store: Arc<dyn crate::common::Store> = Arc::new(
        mcp_confirm::store::RedisStore::open(&url)
            .unwrap()
            .prefix(prefix.clone()),
    );
    let policy = destroy_policy(&Notes::seeded())
        .approved_by(Approvers::anyone_but_caller().required(2))
        .recheck_approvers(different_people);
    let (svc, page, seen) = layer_on(&store, run_key(), policy);
    let (page_url, id, state) =
        elicitation(&send(&svc, post(&destroy_call(json!(1)), Some("alice"))).await);
    let (status, _) = decide_as(
        &page,
        &page_url,
        &Principal::new("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut redis = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{prefix}approval:{id}");
    let record: String = redis.get(&key).await.unwrap();
    let mut record: Value = serde_json::from_str(&record).unwrap();
    let at = record["endorsements"][0]["at_ms"].clone();
    record["endorsements"]
        .as_array_mut()
        .unwrap()
        .push(json!({"subject": "alice", "chosen": "note-7", "caller": false, "at_ms": at}));
    record["decision"] = json!({"decision": "approved", "chosen": "note-7", "standing": false});
    let _: () = redis
        .set_options(
            &key,
            record.to_string(),
            redis::SetOptions::default().with_expiration(redis::SetExpiry::KEEPTTL),
        )
        .await
        .unwrap();
    let retry = send(&svc, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
    assert_eq!(seen.count(), 0, "{}", retry.json());
}

/// A record in Redis edited to a caller-only rule, approved by the caller: the retry compares
/// the rule with its own policy and refuses (revoked), spending the confirmation.
#[tokio::test]
async fn holds_the_retry_refuses_a_record_whose_rule_was_edited() {
    use redis::AsyncCommands;
    let Some(url) = crate::backends::redis("attack23: edited rule (Redis)").await else {
        return;
    };
    let prefix = redis_prefix();
    let store: Arc<dyn crate::common::Store> = Arc::new(
        mcp_confirm::store::RedisStore::open(&url)
            .unwrap()
            .prefix(prefix.clone()),
    );
    let policy = destroy_policy(&Notes::seeded())
        .approved_by(Approvers::anyone_but_caller().required(2))
        .recheck_approvers(different_people);
    let (svc, _page, seen) = layer_on(&store, run_key(), policy);
    let (_, id, state) =
        elicitation(&send(&svc, post(&destroy_call(json!(1)), Some("alice"))).await);
    let mut redis = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{prefix}approval:{id}");
    let record: String = redis.get(&key).await.unwrap();
    let mut record: Value = serde_json::from_str(&record).unwrap();
    record["approvers"] = json!({"who": {"kind": "caller"}});
    record["endorsements"] =
        json!([{"subject": "alice", "chosen": "note-7", "caller": true, "at_ms": 1}]);
    record["decision"] = json!({"decision": "approved", "chosen": "note-7", "standing": false});
    let _: () = redis
        .set_options(
            &key,
            record.to_string(),
            redis::SetOptions::default().with_expiration(redis::SetExpiry::KEEPTTL),
        )
        .await
        .unwrap();
    let retry = send(&svc, post(&went_to_page(&state, json!(2)), Some("alice"))).await;
    assert_eq!(outcome(&retry), "revoked", "{}", retry.json());
    assert_eq!(seen.count(), 0);
}

// =============================================================================================
// Counting, the chosen record, replays, races.
// =============================================================================================

/// One approver in two sessions (with and without roles), then switching the record, then a
/// second approver trying to switch it: counted once, the first choice binds, and the call runs
/// on it only after two distinct subjects.
#[tokio::test]
async fn holds_one_subject_counts_once_and_cannot_switch_the_record() {
    let (f, page, _) = approved_by(Approvers::role("notes-admin").required(2));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, _) = decide_as(&page, &url, &admin("bob"), "choice=note-7&decision=approve").await;
    assert_eq!(status, StatusCode::OK);
    // The same token posted again, and a fresh session with more roles.
    let bob2 = Principal::new("bob").with_roles(["notes-admin", "ops"]);
    let (status, body) = decide_as(&page, &url, &bob2, "choice=note-3&decision=approve").await;
    assert_ne!(status, StatusCode::OK, "{body}");
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(pending.result()["resultType"], "input_required");
    // Carol tries the other record, then omits it.
    let (_, body) = decide_as(
        &page,
        &url,
        &admin("carol"),
        "choice=note-3&decision=approve",
    )
    .await;
    assert!(body.contains("Choose one of the records"), "{body}");
    let (status, _) = decide_as(&page, &url, &admin("carol"), "decision=approve").await;
    assert_eq!(status, StatusCode::OK);
    let done = f.alice(&went_to_page(&state, json!(3))).await;
    assert_ran(&done);
    assert_eq!(
        f.seen.last().json()["params"]["arguments"]["note_id"],
        "note-7"
    );
}

/// Bob's anti-forgery token for one approval, replayed on a new approval of the same tool:
/// refused; and an approval POST of an approver of another audience (same key, same store).
#[tokio::test]
async fn holds_replayed_posts_and_other_audiences_decide_nothing() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = || {
        destroy_policy(&notes)
            .approved_by(Approvers::anyone_but_caller())
            .recheck_approvers(different_people)
    };
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", policy())
        .build();
    let other = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://other.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool("notes_destroy", policy())
        .build();
    let page = layer.approval_page();
    let f = Fixture::new(layer, notes.clone(), clock, store);
    let (first, _, _) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (second, _, state2) = elicitation(&f.alice(&destroy_call(json!(2))).await);
    let bob = Principal::new("bob");
    let (_, html) = open(&page, &first, &bob).await;
    let old = csrf(&html);
    let (status, _) = post_as(
        &page,
        &second,
        &bob,
        &format!("csrf={old}&choice=note-7&decision=approve"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The other deployment computes the same token (same key): still none of its business.
    let (_, html) = open(&page, &second, &bob).await;
    let token = csrf(&html);
    let (status, _) = post_as(
        &other.approval_page(),
        &second,
        &bob,
        &format!("csrf={token}&choice=note-7&decision=approve"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let pending = f.alice(&went_to_page(&state2, json!(3))).await;
    assert_eq!(pending.result()["resultType"], "input_required");
    assert_eq!(f.seen.count(), 0);
}

/// On every store: a decline and an approval race. Under two required approvals the decline
/// always wins (a veto); under one, exactly one of them is recorded and the retry does that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_decline_racing_an_approval_is_applied_atomically() {
    for (backend, store) in stores("attack23: decline races approve").await {
        for required in [2u8, 1] {
            for round in 0..3 {
                let policy = destroy_policy(&Notes::seeded())
                    .approved_by(Approvers::anyone_but_caller().required(required))
                    .recheck_approvers(different_people);
                let (svc, page, seen) = on_store_with(&store, policy);
                let (url, _, state) = elicitation(
                    &send(&svc, post(&destroy_call(json!(round)), Some("alice"))).await,
                );
                let mut tokens = Vec::new();
                for who in ["bob", "carol"] {
                    let (_, html) = open(&page, &url, &Principal::new(who)).await;
                    tokens.push((who, csrf(&html)));
                }
                let tasks: Vec<_> = tokens
                    .into_iter()
                    .map(|(who, token)| {
                        let (page, url) = (page.clone(), url.clone());
                        let form = if who == "bob" {
                            format!("csrf={token}&choice=note-7&decision=approve")
                        } else {
                            format!("csrf={token}&decision=decline")
                        };
                        tokio::spawn(async move {
                            (who, post_as(&page, &url, &Principal::new(who), &form).await)
                        })
                    })
                    .collect();
                let mut approve_won = false;
                let mut ok = 0;
                for task in tasks {
                    let (who, (status, _)) = task.await.unwrap();
                    if status == StatusCode::OK {
                        ok += 1;
                        approve_won |= who == "bob";
                    }
                }
                let retry = send(&svc, post(&went_to_page(&state, json!(99)), Some("alice"))).await;
                if required == 2 {
                    assert_eq!(outcome(&retry), "declined", "{backend}: {}", retry.json());
                    assert_eq!(seen.count(), 0, "{backend}");
                } else {
                    assert_eq!(ok, 1, "{backend}: exactly one recorded");
                    if approve_won {
                        assert_ran(&retry);
                        assert_eq!(seen.count(), 1, "{backend}");
                    } else {
                        assert_eq!(outcome(&retry), "declined", "{backend}");
                        assert_eq!(seen.count(), 0, "{backend}");
                    }
                }
            }
        }
    }
}

// =============================================================================================
// The inbox.
// =============================================================================================

/// Two tools on one store and audience: one approved by bob only, one the caller's own; and a
/// third deployment sharing the store. Each inbox lists exactly what its reader may decide.
#[tokio::test]
async fn holds_the_inbox_lists_only_what_its_reader_may_decide() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let named = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes).approved_by(Approvers::any_of(["bob"])),
        )
        .build();
    let own = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", destroy_policy(&notes))
        .build();
    let other = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://other.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller())
                .recheck_approvers(different_people),
        )
        .build();
    let inbox = named.inbox_page();
    let seen = Recorder::default();
    let (named_svc, own_svc, other_svc) = (
        named.layer(recording_inner(&seen)),
        own.layer(recording_inner(&seen)),
        other.layer(recording_inner(&seen)),
    );
    let (for_bob, _, _) =
        elicitation(&send(&named_svc, post(&destroy_call(json!(1)), Some("alice"))).await);
    let (alices, _, _) =
        elicitation(&send(&own_svc, post(&destroy_call(json!(2)), Some("alice"))).await);
    let (elsewhere, _, _) =
        elicitation(&send(&other_svc, post(&destroy_call(json!(3)), Some("alice"))).await);
    let (for_bob, alices, elsewhere) = (id_of(&for_bob), id_of(&alices), id_of(&elsewhere));
    let (_, html) = inbox_of(&inbox, Principal::new("bob")).await;
    assert!(html.contains(&for_bob), "{html}");
    assert!(
        !html.contains(&alices) && !html.contains(&elsewhere),
        "{html}"
    );
    for who in [
        Principal::new("carol"),
        Principal::new("Bob"),
        Principal::new("bob ").with_roles(["bob"]),
    ] {
        let (_, html) = inbox_of(&inbox, who.clone()).await;
        assert!(html.contains("Nothing waits"), "{who:?}: {html}");
    }
    let (_, html) = inbox_of(&inbox, Principal::new("alice")).await;
    assert!(html.contains(&alices), "{html}");
    assert!(
        !html.contains(&for_bob) && !html.contains(&elsewhere),
        "{html}"
    );
    // The inbox page shows no labels or message, only the tool, who asks and the progress.
    let (_, html) = inbox_of(&inbox, Principal::new("bob")).await;
    assert!(
        !html.contains("Groceries") && !html.contains("Choose one"),
        "{html}"
    );
}

/// The Redis inbox files every approval's id in a sorted set per route whose expiry each new
/// approval pushes forward, and prunes a member only when an inbox read scans it (the newest
/// 200). On a deployment where approvals keep coming (one within every TTL) the set never
/// expires and the dead members are never removed: the set grows without bound. Here, with a
/// 2 s TTL and a call every 300 ms for 9 s and no inbox read, the "anyone" set holds every
/// approval ever made, not the few alive.
#[tokio::test]
async fn holds_the_redis_inbox_sets_do_not_grow_without_bound() {
    let Some(url) = crate::backends::redis("attack23: inbox set growth (Redis)").await else {
        return;
    };
    let prefix = redis_prefix();
    let store = mcp_confirm::store::RedisStore::open(&url)
        .unwrap()
        .prefix(prefix.clone());
    let layer = ConfirmLayer::builder(KeyRing::single("k1", run_key()).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .ttl(Duration::from_secs(2))
        .store(store)
        .tool(
            "notes_destroy",
            destroy_policy(&Notes::seeded())
                .approved_by(Approvers::anyone_but_caller())
                .recheck_approvers(different_people),
        )
        .approval_url(BASE)
        .build();
    let seen = Recorder::default();
    let svc = layer.layer(recording_inner(&seen));
    let mut made = 0;
    for i in 0..30 {
        let answer = send(&svc, post(&destroy_call(json!(i)), Some("alice"))).await;
        if answer.result()["resultType"] == "input_required" {
            made += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut redis = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let inboxes: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}inbox:*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let live: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}approval:*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut members = 0usize;
    for inbox in &inboxes {
        let n: usize = redis::cmd("ZCARD")
            .arg(inbox)
            .query_async(&mut redis)
            .await
            .unwrap();
        members = members.max(n);
    }
    assert!(made >= 25, "made {made}");
    // The last proposal pruned everything that had expired by then, so a set holds at most the
    // approvals made within one TTL (2 s) before it: at 300 ms apart, 7, or fewer when the
    // machine is slow. (Comparing with the approvals still live when the keys are read instead
    // was flaky: on a loaded machine more of them expire before the read than the slack allows,
    // while the set waits for the next proposal or read to prune them.)
    let within_one_ttl = 2_000 / 300 + 1;
    assert!(
        members <= within_one_ttl + 1,
        "an inbox set holds {members} members ({} approvals live, {made} made)",
        live.len()
    );
}

// =============================================================================================
// Notifications.
// =============================================================================================

/// The caller's own approvals notify no one; an approval others decide notifies without the
/// records' labels, the message or any argument value unless the rule shares details.
#[tokio::test]
async fn holds_notices_only_where_others_decide_and_no_details_unless_shared() {
    let heard = Heard::default();
    let h = heard.clone();
    let (f, _, _) = with_layer(move |b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::anyone_but_caller())
                .recheck_approvers(different_people),
        )
        .tool(
            "notes_purge",
            destroy_policy(notes).input_key("destroy_approval"),
        )
        .notifier(h)
    });
    let mut purge = destroy_call(json!(1));
    purge["params"]["name"] = json!("notes_purge");
    let answer = f.alice(&purge).await;
    assert_eq!(answer.result()["resultType"], "input_required");
    assert!(heard.all().is_empty(), "the caller's own approval notified");
    elicitation(&f.alice(&destroy_call_in(json!(2), TEAM, "Groceries")).await);
    let notices = heard.all();
    assert_eq!(notices.len(), 1);
    let notice = &notices[0];
    assert!(notice.details.is_none());
    for shape in [Payload::Standard, Payload::Slack] {
        let body = String::from_utf8(shape.body(notice, SystemTime::now())).unwrap();
        for secret in ["Groceries", "note-", "file:///", "Choose one", "team"] {
            assert!(!body.contains(secret), "{shape:?} leaks {secret:?}: {body}");
        }
    }
    // Shared: labels and message, still no argument beyond what the labels say.
    let heard = Heard::default();
    let h = heard.clone();
    let (f, _, _) = with_layer(move |b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::anyone_but_caller().share_candidate_labels())
                .recheck_approvers(different_people),
        )
        .notifier(h)
    });
    elicitation(&f.alice(&destroy_call(json!(3))).await);
    let body =
        String::from_utf8(Payload::Standard.body(&heard.all()[0], SystemTime::now())).unwrap();
    assert!(body.contains("Groceries (note-7)"), "{body}");
    assert!(!body.contains("file:///"), "{body}");
}

/// A caller whose subject is Slack markup (a mention, a link) and a label likewise: escaped in
/// both the text and the fallback, never a live mention or link.
#[tokio::test]
async fn holds_slack_markup_in_subjects_and_labels_is_escaped() {
    let heard = Heard::default();
    let h = heard.clone();
    let (f, _, _) = with_layer(move |b, _| {
        b.tool(
            "notes_destroy",
            ToolPolicy::confirm_only()
                .message("Purge <!channel> <https://evil.example|the audit log>")
                .input_key("destroy_approval")
                .approved_by(
                    Approvers::anyone_but_caller()
                        .share_candidate_labels()
                        .share_argument_values(),
                )
                .recheck_approvers(different_people),
        )
        .notifier(h)
    });
    let subject = "<!here> <https://evil.example/login|IT desk> & <@U123>";
    // And an argument value likewise, for the rule shares argument values too.
    let mut call = destroy_call(json!(1));
    call["params"]["arguments"]["reason"] = json!("<!channel> <https://evil.example|sign in>");
    let answer = send(&f.svc, post(&call, Some(subject))).await;
    elicitation(&answer);
    let notice = heard.all().pop().expect("a notice");
    let body: Value =
        serde_json::from_slice(&Payload::Slack.body(&notice, SystemTime::now())).unwrap();
    let texts = [
        body["text"].as_str().unwrap().to_owned(),
        body["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .to_owned(),
    ];
    assert!(texts[1].contains("reason: "), "{}", texts[1]);
    for text in texts {
        for live in ["<!here>", "<!channel>", "<https://evil", "<@U123>"] {
            assert!(!text.contains(live), "{live} in {text}");
        }
    }
}

/// Two endpoints, a queue of one, an endpoint that accepts connections and never answers: ten
/// calls still answer promptly, and the nineteen notices over the bound are dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_full_webhook_queue_never_blocks_the_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let webhooks = mcp_confirm_pages::webhooks::Webhooks::builder()
        .endpoint(mcp_confirm_pages::webhooks::WebhookEndpoint::new(
            &url,
            WebhookSecret::random(),
        ))
        .endpoint(mcp_confirm_pages::webhooks::WebhookEndpoint::new(
            &url,
            WebhookSecret::random(),
        ))
        .queue(1)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let w = webhooks.clone();
    let (f, _, _) = with_layer(move |b, notes| {
        b.tool(
            "notes_destroy",
            destroy_policy(notes)
                .approved_by(Approvers::anyone_but_caller())
                .recheck_approvers(different_people),
        )
        .notifier(w)
    });
    let started = std::time::Instant::now();
    for i in 0..10 {
        elicitation(&f.alice(&destroy_call(json!(i))).await);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(webhooks.stats().dropped, 19);
}

/// What a receiver runs, fed hostile headers: repeated headers, a timestamp in the future or
/// far past, signatures for another id, a list of garbage signatures. All refused, no panic.
#[test]
fn holds_verify_refuses_malformed_duplicate_and_future_deliveries() {
    let secret = WebhookSecret::random();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let ts = 1_800_000_000u64;
    let body = b"{\"a\":1}";
    let good = notify::sign(&secret, "msg_1", ts, body);
    let headers = |pairs: &[(&str, &str)]| {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    };
    let ts_s = ts.to_string();
    let ok = headers(&[
        ("webhook-id", "msg_1"),
        ("webhook-timestamp", &ts_s),
        ("webhook-signature", &good),
    ]);
    assert_eq!(
        notify::verify(&secret, &ok, body, now, DEFAULT_TOLERANCE),
        Ok(())
    );
    let future = (ts + 301).to_string();
    let past = (ts - 301).to_string();
    let sig_future = notify::sign(&secret, "msg_1", ts + 301, body);
    let sig_past = notify::sign(&secret, "msg_1", ts - 301, body);
    let garbage = format!("{} {good}", ["v1,AAAA"; 8].join(" "));
    let v2 = good.replace("v1,", "v2,");
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &good),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &ts_s),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &good),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &future),
            ("webhook-signature", &sig_future),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &past),
            ("webhook-signature", &sig_past),
        ],
        vec![
            ("webhook-id", "msg_2"),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &good),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", "-1"),
            ("webhook-signature", &good),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &v2),
        ],
        vec![
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &garbage),
        ],
        vec![("webhook-id", "msg_1"), ("webhook-timestamp", &ts_s)],
    ];
    for case in cases {
        let h = headers(&case);
        assert!(
            notify::verify(&secret, &h, body, now, DEFAULT_TOLERANCE).is_err(),
            "{case:?}"
        );
    }
}

/// A receiver's `verify` fed `webhook-timestamp: 18446744073709551615` (or any value past
/// i64 seconds): `UNIX_EPOCH + Duration::from_secs(timestamp)` overflows `SystemTime` and
/// panics, before any signature is checked. Anyone who can reach the receiver crashes its
/// handler (or the process, under `panic = "abort"`).
#[test]
fn holds_verify_does_not_panic_on_a_huge_timestamp() {
    let secret = WebhookSecret::random();
    for ts in ["18446744073709551615", "9223372036854775808"] {
        let mut h = http::HeaderMap::new();
        h.insert("webhook-id", http::HeaderValue::from_static("msg_1"));
        h.insert(
            "webhook-timestamp",
            http::HeaderValue::from_str(ts).unwrap(),
        );
        h.insert(
            "webhook-signature",
            http::HeaderValue::from_static("v1,AAAA"),
        );
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            notify::verify(&secret, &h, b"{}", SystemTime::now(), DEFAULT_TOLERANCE)
        }));
        assert!(
            matches!(result, Ok(Err(WebhookError::Stale | WebhookError::Header))),
            "timestamp {ts}: {:?}",
            result.map_err(|_| "panicked")
        );
    }
}

// =============================================================================================
// Rules a builder should refuse, and hostile input to the pages.
// =============================================================================================

/// A standing offer with approvers, in either order; a recheck hook with the caller's own
/// rule given explicitly: refused at build.
#[test]
fn holds_standing_with_approvers_and_recheck_without_others_are_refused() {
    let notes = Notes::seeded();
    let build = |policy: ToolPolicy| try_build_tool("notes_destroy", policy).map(|_| ());
    let scope = |l: &mcp_confirm::Lookup| l.arguments["workspaceUri"].as_str().map(str::to_owned);
    let before = destroy_policy(&notes)
        .standing(Duration::from_secs(60), 3, scope)
        .approved_by(Approvers::any_of(["bob"]));
    let after = destroy_policy(&notes)
        .approved_by(Approvers::any_of(["bob"]))
        .standing(Duration::from_secs(60), 3, scope);
    let recheck = destroy_policy(&notes)
        .approved_by(Approvers::caller())
        .recheck_approvers(|_: ApproverQuery| async { Ok::<_, PolicyError>(true) });
    for policy in [before, after, recheck] {
        assert!(build(policy).is_err());
    }
}

/// `with_passkey()` is accepted at build, but nothing in the crate ever verifies a passkey: the
/// approval page builds its `Decider` without one, so every approval under the rule is refused
/// ("Passkey required") and the tool can never run. A rule that cannot be met should be
/// refused at build (as `approved_by` promises), or the page should offer the passkey step.
#[tokio::test]
async fn holds_a_passkey_rule_is_refused_at_build_or_can_be_met() {
    let notes = Notes::seeded();
    let rule = Approvers::anyone_but_caller().with_passkey();
    let built = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .approval_url(BASE)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(rule.clone())
                .recheck_approvers(different_people),
        )
        .try_build();
    if built.is_err() {
        return;
    }
    let (f, page, _) = approved_by(rule);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let (status, body) = decide_as(
        &page,
        &url,
        &Principal::new("bob"),
        "choice=note-7&decision=approve",
    )
    .await;
    let retry = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(
        f.seen.count(),
        1,
        "a built passkey rule cannot be met: page {status}: {body}; retry {}",
        retry.json()
    );
}

/// Hostile paths and forms on the page under an approver rule: odd ids, repeated and invalid
/// fields, a standing approval asked for where none is offered. No panic, no 5xx, no decision.
#[tokio::test]
async fn holds_hostile_page_input_neither_panics_nor_decides() {
    let (f, page, inbox) = approved_by(Approvers::anyone_but_caller().required(2));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let id = id_of(&url);
    let bob = Principal::new("bob");
    for path in [
        format!("{BASE}{}", id.to_uppercase()),
        format!("{BASE}{id}0"),
        format!("{BASE}{id}/"),
        format!("{BASE}{}", &id[..31]),
        format!("{BASE}%2e%2e"),
        format!("{BASE}{}", "é".repeat(16)),
    ] {
        let (status, _) = open(&page, &path, &bob).await;
        assert!(status.is_client_error(), "{path}: {status}");
    }
    let (_, html) = open(&page, &url, &bob).await;
    let token = csrf(&html);
    for form in [
        format!("csrf={token}&decision=approve&choice=note-7&choice=note-3&remember=standing"),
        format!("csrf={token}&decision=approve&choice=%FF%FE"),
        format!(
            "csrf={token}&decision=approve&choice={}",
            "x".repeat(10_000)
        ),
        format!("csrf={token}&decision=maybe"),
        format!(
            "csrf={token}&csrf={}&decision=approve&choice=note-7",
            "0".repeat(64)
        ),
        format!("csrf={token}&decision=approve&choice=note-7&remember=forever"),
        format!("csrf={token}&decision=approve&choice=note-7&remember=standing"),
    ] {
        let (status, body) = post_as(&page, &url, &bob, &form).await;
        assert!(!status.is_server_error(), "{form}: {status} {body}");
    }
    let (status, _, _) = visit_as(
        &inbox,
        "GET",
        "http://notes.example/inbox?x=%FF",
        Some(bob.with_roles(["", " ", "anyone"])),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let pending = f.alice(&went_to_page(&state, json!(2))).await;
    assert_eq!(pending.result()["resultType"], "input_required");
    assert_eq!(f.seen.count(), 0);
}
