//! Narrowing a call before approving it, on the approval page: the tool declares what may be
//! narrowed and how; an edit that narrows is what the handler receives and what the log keeps
//! beside the original; anything else (wider, undeclared, another tool) is refused and nothing
//! runs.

use mcp_confirm_pages::ApprovalPage;
use mcp_confirm_pages::LayerPages as _;
use std::sync::Arc;

use crate::common::browser::*;
use crate::common::kept_log::KeptLog;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::narrow::Narrowing;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{KeyRing, ToolPolicy};
use serde_json::{Value, json};

/// `notes_bulk_delete(ids, limit, dry_run, mode, workspaceUri)`, approved in the browser, its
/// ids, limit, dry_run and mode narrowable; the page; the log.
fn bulk() -> (Fixture, ApprovalPage, KeptLog) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let log = KeptLog::default();
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_bulk_delete", bulk_policy())
        .audit_log(log.clone())
        .build();
    let page = layer.approval_page();
    (Fixture::new(layer, notes, clock, store), page, log)
}

/// `notes_bulk_delete(ids, limit, dry_run, mode)`, confirm-only, approved in the browser, its
/// ids, limit, dry_run and mode narrowable.
pub(super) fn bulk_policy() -> ToolPolicy {
    ToolPolicy::confirm_only()
        .message("Delete these notes?")
        .input_key("bulk_approval")
        .approve_in_browser()
        .narrowable("ids", Narrowing::Subset)
        .narrowable("limit", Narrowing::AtMost)
        .narrowable("dry_run", Narrowing::TurnOn)
        .narrowable(
            "mode",
            Narrowing::OneOf(vec!["archive".into(), "delete".into(), "shred".into()]),
        )
}

fn bulk_call(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": url_meta(), "name":"notes_bulk_delete",
        "arguments":{"workspaceUri": PERSONAL, "ids": ["note-3", "note-7", "note-14"],
                     "limit": 50, "dry_run": false, "mode": "delete"}}})
}

/// The URL and state of a bulk call's question.
pub(super) fn question(answer: &Answer) -> (String, String) {
    let result = answer.result();
    assert_eq!(result["resultType"], "input_required", "{}", answer.json());
    let params = &result["inputRequests"]["bulk_approval"]["params"];
    (
        params["url"].as_str().unwrap().to_owned(),
        result["requestState"].as_str().unwrap().to_owned(),
    )
}

async fn retry(f: &Fixture, state: &str, id: i64) -> Answer {
    let mut call = bulk_call(id);
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
    f.alice(&call).await
}

fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn a_narrowed_approval_runs_exactly_the_narrowed_arguments() {
    let (f, page, log) = bulk();
    let (url, state) = question(&f.alice(&bulk_call(1)).await);
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    for needle in [
        "narrow-ids",
        "narrow-limit",
        "narrow-dry_run",
        "narrow-mode",
        "max=\"50\"",
    ] {
        assert!(html.contains(needle), "{needle} missing from {html}");
    }
    // The mode offers "delete" and the narrower "archive", never "shred".
    assert!(
        html.contains("value=\"archive\"") && !html.contains("value=\"shred\""),
        "{html}"
    );
    // Keep two of the three ids, lower the limit, turn dry_run on, archive instead of delete.
    let form = format!(
        "csrf={}&decision=approve&narrow-ids={}&narrow-ids={}&narrow-limit=10&narrow-dry_run=true&narrow-mode=archive",
        csrf(&html),
        enc("\"note-3\""),
        enc("\"note-14\"")
    );
    let (status, body) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = retry(&f, &state, 2).await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    let seen = f.seen.last();
    assert_eq!(
        seen.json()["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "ids": ["note-3", "note-14"], "limit": 10,
               "dry_run": true, "mode": "archive"})
    );
    assert!(seen.confirmed.unwrap().narrowed);
    // The log keeps both: the digest of what ran, and of what was asked.
    let entries = log.entries();
    let accepted = entries
        .iter()
        .find(|e| e.event == "accepted")
        .expect("accepted");
    let original = accepted.original.clone().expect("the original digest");
    assert_ne!(Some(original), accepted.arguments);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn an_unchanged_approval_runs_as_asked_and_says_so() {
    let (f, page, _) = bulk();
    let (url, state) = question(&f.alice(&bulk_call(1)).await);
    let html = page_as(&page, &url, "alice").await;
    // The form as shown: every input at the call's own value.
    let form = format!(
        "csrf={}&decision=approve&narrow-ids={}&narrow-ids={}&narrow-ids={}&narrow-limit=50&narrow-mode=delete",
        csrf(&html),
        enc("\"note-3\""),
        enc("\"note-7\""),
        enc("\"note-14\"")
    );
    assert_eq!(decide(&page, &url, "alice", &form).await.0, StatusCode::OK);
    let done = retry(&f, &state, 2).await;
    assert_eq!(done.result()["content"][0]["text"], "done by inner");
    let seen = f.seen.last();
    assert_eq!(
        seen.json()["params"]["arguments"]["ids"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(!seen.confirmed.unwrap().narrowed);
}

#[tokio::test]
async fn edits_that_widen_touch_an_undeclared_argument_or_rename_the_tool_are_refused() {
    let (f, page, _) = bulk();
    let (url, state) = question(&f.alice(&bulk_call(1)).await);
    let html = page_as(&page, &url, "alice").await;
    let token = csrf(&html);
    for (edit, words) in [
        (
            format!("narrow-ids={}", enc("\"note-20\"")),
            "would not narrow",
        ),
        (
            format!(
                "narrow-ids={}&narrow-ids={}",
                enc("\"note-3\""),
                enc("\"note-3\"")
            ),
            "would not narrow",
        ),
        ("narrow-limit=51".to_owned(), "would not narrow"),
        ("narrow-limit=-1".to_owned(), "would not narrow"),
        ("narrow-mode=shred".to_owned(), "would not narrow"),
        (
            "narrow-workspaceUri=team".to_owned(),
            "Only the arguments the tool declares",
        ),
        ("tool=notes_list".to_owned(), "tool cannot be changed"),
        ("name=notes_list".to_owned(), "tool cannot be changed"),
    ] {
        let form = format!("csrf={token}&decision=approve&{edit}");
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{edit}: {body}");
        assert!(body.contains(words), "{edit}: {body}");
    }
    // None of it decided anything: still waiting, nothing ran.
    let (waiting, _) = question(&retry(&f, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
}

/// The call's arguments as the page's inputs post them left as shown, for every narrowable
/// argument but `skip` (`bulk_call`'s values).
fn as_shown_but(skip: &str) -> String {
    let mut form = String::new();
    for (name, value) in [
        ("ids", "\"note-3\""),
        ("ids", "\"note-7\""),
        ("ids", "\"note-14\""),
        ("limit", "50"),
        ("mode", "delete"),
    ] {
        if name != skip {
            form.push_str(&format!("&narrow-{name}={}", enc(value)));
        }
    }
    form
}

/// Retries `call` on `state` (went to the page), with JSON-RPC id `id`.
async fn retry_of(f: &Fixture, call: &Value, state: &str, id: i64) -> Answer {
    let mut call = call.clone();
    call["id"] = json!(id);
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
    f.alice(&call).await
}

/// A narrowable argument whose value is not of its kind (what models send: a flag or a number
/// as a string, a list for an enum, null, nothing) is shown as it was sent, escaped, with no
/// input; the form as shown approves the call as asked, and it runs as sent. An edit of it is
/// refused on the page, and a recorded one on the retry.
#[tokio::test]
async fn a_value_that_cannot_be_narrowed_is_shown_as_sent_and_approved_as_asked() {
    let (f, page, _) = bulk();
    let cases = [
        ("dry_run", Some(json!("true")), json!(true)),
        ("dry_run", Some(json!("<b>yes</b>")), json!(true)),
        ("dry_run", Some(json!(null)), json!(true)),
        ("dry_run", Some(json!(1)), json!(true)),
        ("limit", Some(json!("50")), json!(1)),
        ("limit", Some(json!(null)), json!(1)),
        ("limit", Some(json!(-5)), json!(0)),
        ("limit", None, json!(1)),
        ("ids", Some(json!("note-3")), json!(["note-3"])),
        ("ids", Some(json!([])), json!(["note-3"])),
        ("ids", None, json!(["note-3"])),
        ("mode", Some(json!(["delete"])), json!("archive")),
        ("mode", Some(json!("erase")), json!("archive")),
        ("mode", Some(json!(null)), json!("archive")),
        ("mode", None, json!("archive")),
    ];
    let escape = |text: &str| {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    for (i, (name, value, narrower)) in cases.into_iter().enumerate() {
        let what = format!("{name}: {value:?}");
        let id = 100 * i as i64;
        let mut call = bulk_call(id);
        let arguments = call["params"]["arguments"].as_object_mut().unwrap();
        match &value {
            Some(value) => arguments.insert(name.to_owned(), value.clone()),
            None => arguments.remove(name),
        };
        let asked = call["params"]["arguments"].clone();
        let (url, state) = question(&f.alice(&call).await);
        let html = page_as(&page, &url, "alice").await;
        let sent = match &value {
            Some(value) => format!(
                "<code id=\"narrow-{name}-sent\">{}</code>",
                escape(&value.to_string())
            ),
            None => format!("<em id=\"narrow-{name}-sent\">not sent</em>"),
        };
        assert!(html.contains(&sent), "{what}: {sent} not in {html}");
        assert!(html.contains("cannot be narrowed"), "{what}: {html}");
        assert!(
            !html.contains(&format!("name=\"narrow-{name}\"")),
            "{what}: {html}"
        );
        assert!(!html.contains("<b>yes"), "{what}: {html}");
        // Ticking a box it does not have (or any edit of it): refused, nothing approved.
        let token = csrf(&html);
        let edit = format!(
            "csrf={token}&decision=approve{}&narrow-{name}={}",
            as_shown_but(name),
            enc(&narrower.to_string())
        );
        let (status, body) = decide(&page, &url, "alice", &edit).await;
        assert_eq!(status, StatusCode::OK, "{what}: {body}");
        assert!(
            body.contains("cannot be narrowed is approved as sent"),
            "{what}: {body}"
        );
        let (waiting, _) = question(&retry_of(&f, &call, &state, id + 1).await);
        assert_eq!(waiting, url, "{what}");
        // The form as shown: approved as asked, and it runs as sent.
        let form = format!("csrf={token}&decision=approve{}", as_shown_but(name));
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{what}: {body}");
        assert!(body.contains("Approved"), "{what}: {body}");
        let done = retry_of(&f, &call, &state, id + 2).await;
        assert_eq!(
            done.result()["content"][0]["text"],
            "done by inner",
            "{what}: {}",
            done.json()
        );
        let seen = f.seen.last();
        assert_eq!(seen.json()["params"]["arguments"], asked, "{what}");
        assert!(!seen.confirmed.unwrap().narrowed, "{what}");
        // The retry agrees with the page: a narrowing of it recorded anyway runs nothing.
        use mcp_confirm::approval::{ApprovalId, ApprovalStore, Decider, Decision};
        let (url, state) = question(
            &f.alice(&{
                let mut c = call.clone();
                c["id"] = json!(id + 3);
                c
            })
            .await,
        );
        let approval = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
        f.store
            .decide(
                approval,
                Decider::new("alice", Vec::<String>::new(), true),
                Decision::Approved {
                    chosen: String::new(),
                    standing: false,
                    narrowed: Some(json!({ name: narrower }).to_string()),
                },
            )
            .await
            .unwrap();
        let refused = retry_of(&f, &call, &state, id + 4).await;
        assert_eq!(outcome(&refused), "revoked", "{what}: {}", refused.json());
        // A fresh budget of pending confirmations for the next case.
        f.clock.advance(std::time::Duration::from_secs(400));
    }
    assert_eq!(f.seen.count(), 15);
}

#[tokio::test]
async fn a_recorded_narrowing_that_widens_runs_nothing() {
    // Someone with write access to the approval store (or a page of another release) records a
    // "narrowing" that widens the call: the retry checks it against the declaration again, spends
    // the confirmation and runs nothing.
    use mcp_confirm::approval::{ApprovalId, ApprovalStore, Decider, Decision};
    let (f, _, _) = bulk();
    for (i, edit) in [
        r#"{"limit":500}"#,
        r#"{"ids":["note-3","note-99"]}"#,
        r#"{"workspaceUri":"file:///data/team"}"#,
        r#"{"mode":"shred"}"#,
        r#"["not an object"]"#,
    ]
    .into_iter()
    .enumerate()
    {
        let id = 10 * i as i64;
        let (url, state) = question(&f.alice(&bulk_call(id)).await);
        let approval = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
        let decided = f
            .store
            .decide(
                approval,
                Decider::new("alice", Vec::<String>::new(), true),
                Decision::Approved {
                    chosen: String::new(),
                    standing: false,
                    narrowed: Some(edit.to_owned()),
                },
            )
            .await
            .unwrap();
        assert_eq!(decided, mcp_confirm::approval::Decided::Recorded);
        let refused = retry(&f, &state, id + 1).await;
        assert_eq!(outcome(&refused), "revoked", "{edit}: {}", refused.json());
        let again = retry(&f, &state, id + 2).await;
        assert_eq!(
            again.error()["data"]["reason"],
            "invalid_request_state",
            "{edit}"
        );
    }
    assert_eq!(f.seen.count(), 0);
}

#[test]
fn narrowing_the_page_cannot_offer_is_refused_at_build() {
    let build = |policy: ToolPolicy| try_build_tool("notes_bulk_delete", policy);
    let notes = Notes::seeded();
    for (policy, words) in [
        (
            ToolPolicy::confirm_only()
                .confirm_field("narrow_limit")
                .narrowable("limit", Narrowing::AtMost),
            "is taken",
        ),
        (
            destroy_policy(&notes)
                .select_into("note_id")
                .narrowable("note_id", Narrowing::Subset),
            "`select_into` argument",
        ),
        (
            ToolPolicy::confirm_only()
                .approve_in_browser()
                .narrowable("mode", Narrowing::OneOf(vec!["a".into()])),
            "two or more distinct values",
        ),
        (
            ToolPolicy::confirm_only()
                .approve_in_browser()
                .narrowable("", Narrowing::TurnOn),
            "invalid narrowable argument",
        ),
    ] {
        match build(policy) {
            Err(mcp_confirm::ConfigError::InvalidPolicy(e)) => assert!(e.contains(words), "{e}"),
            other => panic!("expected a refusal with {words:?}, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The form flow: the client's form shows a field per narrowable argument, filled with the call's
// own value; what the user leaves or narrows comes back in the form's content.

/// The same tool, confirmed in the client's form.
fn bulk_in_form() -> Fixture {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let policy = ToolPolicy::confirm_only()
        .message("Delete these notes?")
        .input_key("bulk_form")
        .narrowable("ids", Narrowing::Subset)
        .narrowable("limit", Narrowing::AtMost)
        .narrowable("dry_run", Narrowing::TurnOn)
        .narrowable(
            "mode",
            Narrowing::OneOf(vec!["archive".into(), "delete".into(), "shred".into()]),
        );
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_bulk_delete", policy)
        .build();
    Fixture::new(layer, notes, clock, store)
}

fn form_call(id: i64) -> Value {
    let mut call = bulk_call(id);
    call["params"]["_meta"] = meta();
    call
}

async fn answer_form(f: &Fixture, state: &str, id: i64, content: Value) -> Answer {
    let mut call = form_call(id);
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] =
        json!({"bulk_form": {"action": "accept", "content": content}});
    f.alice(&call).await
}

#[tokio::test]
async fn the_form_offers_each_narrowable_argument_at_the_calls_value_and_runs_the_narrowed_call() {
    let f = bulk_in_form();
    let first = f.alice(&form_call(1)).await;
    let result = first.result();
    let schema = &result["inputRequests"]["bulk_form"]["params"]["requestedSchema"];
    let properties = &schema["properties"];
    assert_eq!(
        properties["narrow_ids"]["items"]["enum"],
        json!(["note-3", "note-7", "note-14"])
    );
    assert_eq!(
        properties["narrow_ids"]["default"],
        json!(["note-3", "note-7", "note-14"])
    );
    assert_eq!(properties["narrow_limit"]["maximum"], 50);
    assert_eq!(properties["narrow_limit"]["type"], "integer");
    assert_eq!(properties["narrow_dry_run"]["default"], false);
    assert_eq!(
        properties["narrow_mode"]["enum"],
        json!(["archive", "delete"])
    );
    assert_eq!(
        schema["required"],
        json!(["confirm"]),
        "narrowing is optional"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    // A wider edit: refused, nothing claimed or run; the state still answers.
    for (content, what) in [
        (json!({"confirm": true, "narrow_limit": 500}), "wider"),
        (
            json!({"confirm": true, "narrow_ids": ["note-20"]}),
            "another id",
        ),
        (
            json!({"confirm": true, "narrow_mode": "shred"}),
            "wider mode",
        ),
        (
            json!({"confirm": true, "narrow_workspaceUri": "team"}),
            "undeclared",
        ),
    ] {
        let refused = answer_form(&f, &state, 2, content).await;
        assert_eq!(
            refused.error()["code"],
            -32602,
            "{what}: {}",
            refused.json()
        );
    }
    assert_eq!(f.seen.count(), 0);
    let done = answer_form(
        &f,
        &state,
        3,
        json!({"confirm": true, "narrow_ids": ["note-7"], "narrow_limit": 1,
               "narrow_dry_run": true, "narrow_mode": "archive"}),
    )
    .await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    let seen = f.seen.last();
    assert_eq!(
        seen.json()["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "ids": ["note-7"], "limit": 1, "dry_run": true,
               "mode": "archive"})
    );
    assert!(seen.confirmed.unwrap().narrowed);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_form_left_as_shown_runs_the_call_as_asked() {
    let f = bulk_in_form();
    let first = f.alice(&form_call(1)).await;
    let state = first.result()["requestState"].as_str().unwrap().to_owned();
    let done = answer_form(
        &f,
        &state,
        2,
        json!({"confirm": true, "narrow_ids": ["note-3", "note-7", "note-14"],
               "narrow_limit": 50, "narrow_dry_run": false, "narrow_mode": "delete"}),
    )
    .await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    assert!(!f.seen.last().confirmed.unwrap().narrowed);
}

/// On Redis and on PostgreSQL, across two instances: the page of one records the narrowing, the
/// other's retry runs exactly the narrowed call.
#[tokio::test]
async fn a_narrowing_decided_on_one_instance_runs_on_another() {
    use mcp_confirm::store::{PostgresStore, RedisStore};
    use tower::Layer;
    let mut stores: Vec<(&str, Arc<dyn crate::common::Store>)> = Vec::new();
    if let Some(url) = crate::backends::redis("narrowing across instances (Redis)").await {
        let prefix = format!(
            "mcp-confirm-test:narrow:{}:",
            mcp_confirm::store::Nonce::random().to_hex()
        );
        stores.push((
            "redis",
            Arc::new(RedisStore::open(&url).unwrap().prefix(prefix)),
        ));
    }
    if let Some(url) = crate::backends::postgres("narrowing across instances (Postgres)").await {
        let store = PostgresStore::connect(&url).unwrap();
        store.migrate().await.unwrap();
        stores.push(("postgres", Arc::new(store)));
    }
    for (backend, store) in stores {
        let instance = || {
            mcp_confirm::ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
                .without_tool_list_unchecked()
                .audience("https://notes.example/mcp")
                .store(Arc::clone(&store))
                .tool(
                    "notes_bulk_delete",
                    ToolPolicy::confirm_only()
                        .input_key("bulk_approval")
                        .approve_in_browser()
                        .narrowable("ids", Narrowing::Subset)
                        .narrowable("limit", Narrowing::AtMost),
                )
                .approval_url(BASE)
                .build()
        };
        let (a, b) = (instance(), instance());
        let seen = Recorder::default();
        let (svc_a, page_b) = (a.layer(recording_inner(&seen)), b.approval_page());
        let first = send(&svc_a, post(&bulk_call(1), Some("alice"))).await;
        let (url, state) = question(&first);
        let html = page_as(&page_b, &url, "alice").await;
        let form = format!(
            "csrf={}&decision=approve&narrow-ids={}&narrow-limit=7",
            csrf(&html),
            enc("\"note-7\"")
        );
        let (status, body) = decide(&page_b, &url, "alice", &form).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        let mut retry = bulk_call(2);
        retry["params"]["requestState"] = json!(state);
        retry["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
        let done = send(&svc_a, post(&retry, Some("alice"))).await;
        assert_eq!(
            done.result()["content"][0]["text"],
            "done by inner",
            "{backend}"
        );
        let arguments = seen.last().json()["params"]["arguments"].clone();
        assert_eq!(arguments["ids"], json!(["note-7"]), "{backend}");
        assert_eq!(arguments["limit"], 7, "{backend}");
        assert_eq!(seen.count(), 1, "{backend}");
    }
}
