//! The layer writes its decisions to the log: what each record says, "who approved deleting
//! note-7" answered and proved from the log alone, and what a destructive call gets while the
//! log cannot take its record (fail closed by default: nothing runs, no confirmation is spent).

use mcp_confirm_pages::LayerPages as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mcp_confirm::clock::ManualClock;
use mcp_confirm::grant::{GrantError, GrantState, GrantStore, Grants, MemoryGrantStore, Revoke};
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayerBuilder, KeyRing, Principal};
use mcp_confirm_log::{
    AuditLog, FileLog, Fsync, LogError, LogOptions, LogSink, Record, SignedCheckpoint, WhenDown,
    merkle, verify,
};
use serde_json::json;

use super::{fresh_dir, key};
use crate::common::*;

/// A file log that fails every write while `down` is set, as a full disk does. `inline`: the
/// file sink's own choice of appending on the caller's thread (`false` sends every record
/// through the writer thread).
struct Flaky {
    log: FileLog,
    down: Arc<AtomicBool>,
    inline: bool,
}

impl LogSink for Flaky {
    fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("no space left on device").into());
        }
        self.log.append(records)
    }
    fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        self.log.checkpoint()
    }
    fn recover(&mut self) -> Result<(), LogError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("no space left on device").into());
        }
        self.log.recover()
    }
    fn size(&self) -> u64 {
        self.log.size()
    }
    fn appends_inline(&self) -> bool {
        self.inline && self.log.appends_inline()
    }
}

struct Logged {
    f: Fixture,
    /// The layer's grant worker, for queued tools.
    grants: Option<Grants>,
    /// The layer's standing approvals, where it offers them.
    standing: Option<mcp_confirm::StandingApprovals>,
    log: AuditLog,
    dir: std::path::PathBuf,
    down: Arc<AtomicBool>,
}

fn logged(when_down: WhenDown) -> Logged {
    logged_with(when_down, |builder, _| builder)
}

/// A fixture whose layer is `base_builder`'s, changed by `adjust`, with a log on a sink that
/// can be taken down.
fn logged_with(
    when_down: WhenDown,
    adjust: impl FnOnce(ConfirmLayerBuilder, &Notes) -> ConfirmLayerBuilder,
) -> Logged {
    logged_on(when_down, true, adjust)
}

/// As [`logged_with`], appending on the caller's thread where the file sink would (`inline`)
/// or always through the writer thread.
fn logged_on(
    when_down: WhenDown,
    inline: bool,
    adjust: impl FnOnce(ConfirmLayerBuilder, &Notes) -> ConfirmLayerBuilder,
) -> Logged {
    let dir = fresh_dir("layer");
    let down = Arc::new(AtomicBool::new(false));
    let sink = Flaky {
        log: FileLog::open(&dir, key(), Fsync::Never).unwrap(),
        down: Arc::clone(&down),
        inline,
    };
    let options = LogOptions {
        when_down,
        every: std::time::Duration::from_millis(5),
        instance: "test-1".into(),
        ..LogOptions::default()
    };
    let log = AuditLog::new(sink, key().verifier(), options).unwrap();
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = adjust(base_builder(&notes, &clock, &store), &notes)
        .audit_log(log.clone())
        .build();
    Logged {
        grants: layer.grants(),
        standing: layer.standing_approvals(),
        f: Fixture::new(layer, notes, clock, store),
        log,
        dir,
        down,
    }
}

/// The test layer, on its own notes, clock and replay store, writing its decisions to `log`.
fn layer_logging_to(
    log: &AuditLog,
) -> (
    mcp_confirm::ConfirmLayer,
    Notes,
    ManualClock,
    MemoryReplayStore,
) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base_builder(&notes, &clock, &store)
        .audit_log(log.clone())
        .build();
    (layer, notes, clock, store)
}

fn records(l: &Logged) -> Vec<Record> {
    l.log.flush().unwrap();
    verify(&l.dir, &key().verifier(), &[]).unwrap().records
}

/// Down, and seen to be down by the writer (a write failed).
fn take_down(l: &Logged) {
    // What was queued before goes in first (a failed write loses the batch it was writing).
    l.log.flush().unwrap();
    l.down.store(true, Ordering::SeqCst);
    let _ = l.log.append(Record::new("probe"));
    for _ in 0..500 {
        if !l.log.is_healthy() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("the log never noticed it was down");
}

fn bring_up(l: &Logged) {
    l.down.store(false, Ordering::SeqCst);
    for _ in 0..500 {
        if l.log.is_healthy() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("the log never came back");
}

#[tokio::test]
async fn every_decision_is_recorded_and_who_approved_note_7_is_proved() {
    let l = logged(WhenDown::FailClosed);
    let first = l.f.alice(&delete_call(json!(1), "Groceries")).await;
    let done = l.f.accept(&first.state(), json!(2), "note-7").await;
    assert_ran(&done);
    // A second confirmation, declined; then a replay of the first.
    let second = l.f.alice(&delete_call(json!(3), "Groceries")).await;
    l.f.alice(&retry(
        delete_call(json!(3), "Groceries"),
        json!(4),
        &second.state(),
        json!({"delete_choice": {"action": "decline"}}),
    ))
    .await;
    l.f.accept(&first.state(), json!(5), "note-7").await;
    let all = records(&l);
    let events: Vec<&str> = all.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        events,
        [
            "challenged",
            "accepted",
            "challenged",
            "declined",
            "replay_blocked"
        ],
        "{all:?}"
    );
    let (challenged, accepted) = (&all[0], &all[1]);
    assert_eq!(accepted.subject.as_deref(), Some("alice"));
    assert_eq!(accepted.tool.as_deref(), Some("notes_delete"));
    assert_eq!(accepted.chosen.as_deref(), Some("note-7"));
    assert_eq!(accepted.version, Some(l.f.notes.version("note-7")));
    assert_eq!(accepted.nonce, challenged.nonce, "the two rounds correlate");
    assert_eq!(accepted.principal, challenged.principal);
    assert_eq!(accepted.instance, "test-1");
    assert!(challenged.shown.as_ref().is_some_and(|s| s.len() == 64));
    assert!(accepted.arguments.as_ref().is_some_and(|a| a.len() == 64));
    // No argument values anywhere in the log.
    let text = std::fs::read_to_string(l.dir.join("records.jsonl")).unwrap();
    assert!(
        !text.contains("Groceries") && !text.contains(PERSONAL),
        "{text}"
    );
    // Who approved deleting note-7: found, and proved included in a signed checkpoint.
    let verified = verify(&l.dir, &key().verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    let who = verified
        .records
        .iter()
        .position(|r| r.event == "accepted" && r.chosen.as_deref() == Some("note-7"))
        .unwrap();
    let latest = verified.latest().unwrap();
    let size = latest.size as usize;
    let proof = merkle::inclusion_proof(&verified.leaves[..size], who).unwrap();
    assert!(merkle::verify_inclusion(
        who as u64,
        latest.size,
        &verified.leaves[who],
        &proof,
        &latest.root
    ));
}

#[tokio::test]
async fn a_log_that_is_down_refuses_the_call_and_spends_no_confirmation() {
    down_refuses_and_spends_nothing(true).await;
}

#[tokio::test]
async fn a_log_that_is_down_refuses_the_call_and_spends_no_confirmation_on_the_writer_thread() {
    down_refuses_and_spends_nothing(false).await;
}

async fn down_refuses_and_spends_nothing(inline: bool) {
    let l = logged_on(WhenDown::FailClosed, inline, |builder, _| builder);
    let first = l.f.alice(&delete_call(json!(1), "Groceries")).await;
    take_down(&l);
    let refused = l.f.accept(&first.state(), json!(2), "note-7").await;
    assert_eq!(
        refused.error()["data"]["reason"],
        "decision_log_unavailable",
        "{:?}",
        refused.json()
    );
    assert_eq!(l.f.seen.count(), 0, "nothing ran");
    // Once the log is back, the same answer goes through: the confirmation was not spent.
    bring_up(&l);
    assert_ran(&l.f.accept(&first.state(), json!(3), "note-7").await);
    let events: Vec<String> = records(&l).into_iter().map(|r| r.event).collect();
    assert!(events.contains(&"accepted".to_owned()), "{events:?}");
}

#[tokio::test]
async fn failing_open_is_a_choice_and_lets_the_call_run() {
    let l = logged(WhenDown::FailOpen);
    let first = l.f.alice(&delete_call(json!(1), "Groceries")).await;
    take_down(&l);
    assert_ran(&l.f.accept(&first.state(), json!(2), "note-7").await);
    assert!(l.log.dropped() > 0);
}

#[tokio::test]
async fn a_grants_life_is_recorded_and_a_log_that_is_down_keeps_it_from_beginning() {
    let grants = Arc::new(MemoryGrantStore::new());
    let store = Arc::clone(&grants);
    let l = logged_with(WhenDown::FailClosed, move |builder, notes| {
        builder
            .tool("notes_delete", delete_policy(notes).queued())
            .grant_store(store)
    });
    let worker = l.grants.clone().unwrap();
    let approve = async |n: u64| {
        let state = l.f.alice(&delete_call(json!(n), "Groceries")).await.state();
        assert_ran(&l.f.accept(&state, json!(n + 1), "note-7").await);
        l.f.seen.last().confirmed.unwrap().grant.unwrap()
    };
    let (run, revoke) = (approve(1).await, approve(3).await);
    // Down: the grant does not begin (retryably), and is left as it was.
    take_down(&l);
    let refused = worker.begin(run).await;
    assert!(
        matches!(refused, Err(GrantError::LogUnavailable)),
        "{:?}",
        refused.map(|a| a.lease())
    );
    assert!(refused.is_err_and(|e| e.is_retryable()));
    assert_eq!(
        grants.get(run).await.unwrap().unwrap().state,
        GrantState::Granted
    );
    // Back: it begins, runs and is consumed; the other is revoked by alice.
    bring_up(&l);
    worker.begin(run).await.unwrap().consumed().await.unwrap();
    assert_eq!(
        worker
            .revoke(revoke, &Principal::new("alice"))
            .await
            .unwrap(),
        Revoke::Revoked
    );
    let all = records(&l);
    let of = |id: mcp_confirm::grant::GrantId| -> Vec<&str> {
        let prefix = id.to_string();
        all.iter()
            .filter(|r| r.event.starts_with("grant_"))
            .filter(|r| {
                r.grant
                    .as_ref()
                    .is_some_and(|g| prefix.starts_with(g.as_str()))
            })
            .map(|r| r.event.as_str())
            .collect()
    };
    assert_eq!(
        of(run),
        ["grant_issued", "grant_begun", "grant_consumed"],
        "{all:?}"
    );
    assert_eq!(of(revoke), ["grant_issued", "grant_revoked"], "{all:?}");
    let begun = all.iter().find(|r| r.event == "grant_begun").unwrap();
    let accepted = all.iter().find(|r| r.event == "accepted").unwrap();
    assert_eq!(
        begun.arguments, accepted.arguments,
        "the digest of what was approved"
    );
    assert_eq!(begun.chosen.as_deref(), Some("note-7"));
    assert_eq!(begun.version, Some(l.f.notes.version("note-7")));
    assert_eq!(begun.principal, accepted.principal);
    assert_eq!(begun.subject.as_deref(), Some("alice"));
}

#[tokio::test]
async fn approval_page_decisions_are_recorded_with_what_the_page_showed() {
    use crate::common::browser::*;
    let dir = fresh_dir("page");
    let log = AuditLog::file(&dir, key(), LogOptions::default()).unwrap();
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", destroy_policy(&notes))
        .audit_log(log.clone())
        .build();
    let page = layer.approval_page();
    let f = Fixture::new(layer, notes, clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let html = page_as(&page, &url, "alice").await;
    let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
    assert_eq!(
        decide(&page, &url, "alice", &form).await.0,
        http::StatusCode::OK
    );
    assert_ran(&f.alice(&went_to_page(&state, json!(2))).await);
    let (url, _, _) = elicitation(&f.alice(&destroy_call(json!(3))).await);
    let html = page_as(&page, &url, "alice").await;
    let form = format!("csrf={}&decision=decline", csrf(&html));
    assert_eq!(
        decide(&page, &url, "alice", &form).await.0,
        http::StatusCode::OK
    );
    log.flush().unwrap();
    let all = verify(&dir, &key().verifier(), &[]).unwrap().records;
    let events: Vec<&str> = all.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        events,
        [
            "challenged",
            "approval_approved",
            "accepted",
            "challenged",
            "approval_declined"
        ],
        "{all:?}"
    );
    let (challenged, approved) = (&all[0], &all[1]);
    assert_eq!(approved.nonce, challenged.nonce);
    assert_eq!(approved.chosen.as_deref(), Some("note-7"));
    assert_eq!(approved.version, Some(f.notes.version("note-7")));
    assert_eq!(approved.subject.as_deref(), Some("alice"));
    assert!(approved.shown.as_ref().is_some_and(|s| s.len() == 64));
    assert_eq!(all[4].chosen, None);
}

/// Under approvers, each approval is recorded with who gave it: the first as counted
/// (`approval_endorsed`), the last as the decision; a withdrawn one as a refusal with its class.
#[tokio::test]
async fn each_approvers_decision_is_recorded_with_who_gave_it() {
    use crate::common::browser::*;
    use mcp_confirm::approval::Approvers;
    let dir = fresh_dir("approvers");
    let log = AuditLog::file(&dir, key(), LogOptions::default()).unwrap();
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(Approvers::anyone_but_caller().required(2))
                .recheck_approvers(different_people),
        )
        .audit_log(log.clone())
        .build();
    let page = layer.approval_page();
    let f = Fixture::new(layer, notes, clock, store);
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    for who in ["bob", "carol"] {
        let html = page_as(&page, &url, who).await;
        let form = format!("csrf={}&choice=note-7&decision=approve", csrf(&html));
        assert_eq!(
            decide(&page, &url, who, &form).await.0,
            http::StatusCode::OK
        );
    }
    assert_ran(&f.alice(&went_to_page(&state, json!(2))).await);
    log.flush().unwrap();
    let all = verify(&dir, &key().verifier(), &[]).unwrap().records;
    let events: Vec<(&str, Option<&str>)> = all
        .iter()
        .map(|r| (r.event.as_str(), r.subject.as_deref()))
        .collect();
    assert_eq!(
        events,
        [
            ("challenged", Some("alice")),
            ("approval_endorsed", Some("bob")),
            ("approval_approved", Some("carol")),
            ("accepted", Some("alice")),
        ],
        "{all:?}"
    );
    assert_eq!(all[1].nonce, all[0].nonce);
    assert_eq!(all[2].chosen.as_deref(), Some("note-7"));
}

#[tokio::test]
async fn standing_approvals_are_recorded_granted_used_and_revoked() {
    let l = logged_with(WhenDown::FailClosed, |builder, notes| {
        let standing = MemoryReplayStore::with_clock(10_000, ManualClock::new(now()));
        let scope = |lookup: &mcp_confirm::Lookup| {
            lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
        };
        builder.standing_store(standing).tool(
            "notes_delete",
            delete_policy(notes).standing(std::time::Duration::from_secs(600), 5, scope),
        )
    });
    let call = |id: u64, title: &str| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "_meta": meta(), "name":"notes_delete",
            "arguments":{"workspaceUri": PERSONAL, "title": title}}})
    };
    let first = l.f.alice(&call(1, "Groceries")).await;
    let answer = json!({"delete_choice":{"action":"accept","content":{
        "note_id": "note-7", "confirm": true, "remember": "standing"}}});
    assert_ran(
        &l.f.alice(&retry(
            call(1, "Groceries"),
            json!(2),
            &first.state(),
            answer,
        ))
        .await,
    );
    // Covered: runs with no form, under the approval.
    assert_ran(&l.f.alice(&call(3, "Taxes")).await);
    let alice = Principal::new("alice");
    let standing = l.standing.clone().unwrap();
    assert_eq!(standing.revoke(&alice, None).await.unwrap(), 1);
    let all = records(&l);
    let events: Vec<&str> = all.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        events,
        [
            "challenged",
            "standing_granted",
            "accepted",
            "standing_used",
            "standing_revoked"
        ],
        "{all:?}"
    );
    let (granted, used, revoked) = (&all[1], &all[3], &all[4]);
    assert!(granted.standing.is_some());
    assert_eq!(used.standing, granted.standing);
    assert_eq!(revoked.standing, granted.standing);
    assert!(used.arguments.as_ref().is_some_and(|a| a.len() == 64));
    assert_eq!(used.subject.as_deref(), Some("alice"));
}

/// A file log whose writes fail while `failing` is set but which reopens fine, as a file-size
/// limit (`RLIMIT_FSIZE`) or a quota does: reopening alone must not bring it back. `inline` as
/// for [`Flaky`].
struct WritesFail {
    log: FileLog,
    failing: Arc<AtomicBool>,
    inline: bool,
}

impl LogSink for WritesFail {
    fn append(&mut self, records: &mut [Record]) -> Result<u64, LogError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("file too large").into());
        }
        self.log.append(records)
    }
    fn checkpoint(&mut self) -> Result<Option<SignedCheckpoint>, LogError> {
        self.log.checkpoint()
    }
    fn recover(&mut self) -> Result<(), LogError> {
        self.log.recover()
    }
    fn size(&self) -> u64 {
        self.log.size()
    }
    fn appends_inline(&self) -> bool {
        self.inline && self.log.appends_inline()
    }
}

/// Issue 33, attack 3: writes fail while the log still looks healthy, and reopening works. No
/// call runs on a record that was only queued: each is refused, none is lost from the log, and
/// the log is up again only after a write succeeded.
#[tokio::test]
async fn no_call_runs_on_a_record_that_was_only_queued_when_writes_fail() {
    no_call_runs_when_writes_fail(true).await;
}

#[tokio::test]
async fn no_call_runs_on_a_record_that_was_only_queued_when_writes_fail_on_the_writer_thread() {
    no_call_runs_when_writes_fail(false).await;
}

async fn no_call_runs_when_writes_fail(inline: bool) {
    let dir = fresh_dir("writes-fail");
    let failing = Arc::new(AtomicBool::new(false));
    let sink = WritesFail {
        log: FileLog::open(&dir, key(), Fsync::EveryBatch).unwrap(),
        failing: Arc::clone(&failing),
        inline,
    };
    let options = LogOptions {
        every: std::time::Duration::from_millis(5),
        instance: "test-1".into(),
        ..LogOptions::default()
    };
    let log = AuditLog::new(sink, key().verifier(), options).unwrap();
    let (layer, notes, clock, store) = layer_logging_to(&log);
    let f = Fixture::new(layer, notes, clock, store);
    let mut states = Vec::new();
    for n in 0..4u64 {
        states.push(
            f.alice(&delete_call(json!(10 * n), "Groceries"))
                .await
                .state(),
        );
    }
    // The writes start failing before the writer has noticed anything: the log is "healthy".
    log.flush().unwrap();
    failing.store(true, Ordering::SeqCst);
    assert!(log.is_healthy());
    for (n, state) in states[..3].iter().enumerate() {
        let refused = f.accept(state, json!(10 * n as u64 + 1), "note-7").await;
        assert_eq!(
            refused.error()["data"]["reason"],
            "decision_log_unavailable",
            "{:?}",
            refused.json()
        );
    }
    assert_eq!(
        f.seen.count(),
        0,
        "nothing ran on a record that was not written"
    );
    // Reopening works, writes do not: the log stays down, however long it is given.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!log.is_healthy(), "up again without a write that succeeded");
    assert!(
        !std::fs::read_dir(&dir).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".cut")),
        "nothing is moved aside per retry"
    );
    // Writes work again: a probe record goes in first, then the call runs on its own record.
    failing.store(false, Ordering::SeqCst);
    for _ in 0..1000 {
        if log.is_healthy() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(log.is_healthy());
    assert_ran(&f.accept(&states[3], json!(99), "note-7").await);
    log.flush().unwrap();
    let verified = verify(&dir, &key().verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    let events: Vec<&str> = verified.records.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        events.iter().filter(|e| **e == "accepted").count(),
        1,
        "exactly the call that ran is recorded as accepted: {events:?}"
    );
    assert!(events.contains(&"log_resumed"), "{events:?}");
}

/// A durable append resolves only once its record is written, and fails when the write does,
/// from its future, whichever thread wrote it; once down, the log refuses the next at once.
#[tokio::test]
async fn a_durable_append_answers_after_the_write() {
    durable_answers_after_the_write(true).await;
}

#[tokio::test]
async fn a_durable_append_answers_after_the_write_on_the_writer_thread() {
    durable_answers_after_the_write(false).await;
}

async fn durable_answers_after_the_write(inline: bool) {
    let dir = fresh_dir("durable");
    let failing = Arc::new(AtomicBool::new(false));
    let sink = WritesFail {
        log: FileLog::open(&dir, key(), Fsync::EveryBatch).unwrap(),
        failing: Arc::clone(&failing),
        inline,
    };
    let log = AuditLog::new(sink, key().verifier(), LogOptions::default()).unwrap();
    let seq = log
        .append_durable(Record::new("accepted"))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(seq, 0);
    // It is in the file before anything else happened (no flush, no checkpoint).
    let on_disk = std::fs::read_to_string(dir.join(mcp_confirm_log::file::RECORDS)).unwrap();
    assert!(on_disk.contains("\"event\":\"accepted\""));
    failing.store(true, Ordering::SeqCst);
    let lost = log.append_durable(Record::new("accepted")).unwrap().await;
    assert!(matches!(lost, Err(LogError::Unavailable)), "{lost:?}");
    assert!(matches!(
        log.append_durable(Record::new("accepted")),
        Err(LogError::Unavailable)
    ));
}

/// Many confirmed calls at once on two worker threads, the file sink writing the records of one
/// executor turn together: each call reaches the inner service only once its own `accepted`
/// record is in the records file, and every one of them is there, once, after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_run_only_once_their_own_record_is_in_the_file() {
    const CALLS: u64 = 24;
    let dir = fresh_dir("concurrent");
    let options = LogOptions {
        instance: "test-1".into(),
        ..LogOptions::default()
    };
    let sink = FileLog::open(&dir, key(), Fsync::EveryBatch).unwrap();
    let log = AuditLog::new(sink, key().verifier(), options).unwrap();
    let (layer, notes, clock, store) = layer_logging_to(&log);
    // In front of the recording inner service: is the call's own record in the file yet?
    let records = dir.join(mcp_confirm_log::file::RECORDS);
    let unrecorded = Arc::new(std::sync::Mutex::new(Vec::new()));
    let checking = |seen: &Recorder| {
        let recording = recording_inner(seen);
        let unrecorded = Arc::clone(&unrecorded);
        let checking = move |request: http::Request<mcp_confirm::body::RequestBody<_>>| {
            if let Some(confirmed) = request.extensions().get::<mcp_confirm::Confirmed>() {
                let nonce = format!("\"nonce\":\"{}\"", &confirmed.nonce.to_hex()[..8]);
                let file = std::fs::read_to_string(&records).unwrap_or_default();
                if !file
                    .lines()
                    .any(|line| line.contains("\"event\":\"accepted\"") && line.contains(&nonce))
                {
                    unrecorded.lock().unwrap().push(nonce);
                }
            }
            tower::ServiceExt::oneshot(recording.clone(), request)
        };
        tower::util::BoxCloneSyncService::new(tower::service_fn(checking))
    };
    let f = Arc::new(Fixture::with_inner(layer, checking, notes, clock, store));
    let mut states = Vec::new();
    for n in 0..CALLS {
        states.push(f.alice(&delete_call(json!(n), "Groceries")).await.state());
    }
    let calls: Vec<_> = states
        .into_iter()
        .zip(CALLS..)
        .map(|(state, id)| {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.accept(&state, json!(id), "note-7").await })
        })
        .collect();
    for call in calls {
        assert_ran(&call.await.unwrap());
    }
    assert_eq!(f.seen.count(), CALLS as usize);
    let unrecorded = unrecorded.lock().unwrap().clone();
    assert!(
        unrecorded.is_empty(),
        "ran before their record was written: {unrecorded:?}"
    );
    log.flush().unwrap();
    let verified = verify(&dir, &key().verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    let accepted = verified
        .records
        .iter()
        .filter(|r| r.event == "accepted")
        .count();
    assert_eq!(accepted, CALLS as usize);
}
