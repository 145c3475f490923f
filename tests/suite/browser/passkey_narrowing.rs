//! Narrowing through the passkey step: under a rule that requires a passkey, what the
//! approver narrowed is what the passkey signs, what the approval records and what the retry
//! runs. Before the fix the step's form dropped every `narrow-…` field and the challenge did
//! not cover the narrowing: an approver who lowered `limit` to 1 and turned `dry_run` on got
//! "Approved", and the call ran with `limit: 50, dry_run: false`; a `Subset` argument made
//! every passkey approval fail. Each test here failed then.

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::{ApprovalId, ApprovalStore, Approvers, Decision};
use mcp_confirm::narrow::Narrowing;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{KeyRing, Principal, ToolPolicy};
use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::passkey::Passkeys;
use mcp_confirm_pages::{ApprovalPage, PasskeyPage};
use serde_json::{Value, json};

use super::narrowing::{bulk_policy, question};
use super::passkeys::{ORIGIN_URL, authenticator, options, post, register};
use crate::common::authenticator::SoftAuthenticator;

struct Setup {
    f: Fixture,
    page: ApprovalPage,
    keys_page: PasskeyPage,
}

/// `notes_bulk_delete` (ids, limit, dry_run and mode narrowable) decided under `rule`, with
/// passkeys.
fn setup(rule: Approvers) -> Setup {
    setup_with(bulk_policy(), rule)
}

/// `notes_bulk_delete` under `policy`, decided under `rule`, with passkeys.
fn setup_with(policy: ToolPolicy, rule: Approvers) -> Setup {
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let passkeys = Passkeys::new("notes.example", ORIGIN_URL, store.clone()).unwrap();
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_bulk_delete",
            policy.approved_by(rule).recheck_approvers(different_people),
        )
        .passkeys(passkeys)
        .build();
    let (page, keys_page) = (layer.approval_page(), layer.passkey_page().unwrap());
    Setup {
        f: Fixture::new(layer, Notes::seeded(), clock, store),
        page,
        keys_page,
    }
}

const ASKED: [(&str, &[&str]); 3] = [
    ("narrow-ids", &["\"note-3\"", "\"note-7\"", "\"note-14\""]),
    ("narrow-limit", &["50"]),
    ("narrow-mode", &["delete"]),
];

fn arguments() -> Value {
    json!({"workspaceUri": PERSONAL, "ids": ["note-3", "note-7", "note-14"],
           "limit": 50, "dry_run": false, "mode": "delete"})
}

fn bulk_call(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": url_meta(), "name":"notes_bulk_delete", "arguments": arguments()}})
}

async fn retry(f: &Fixture, state: &str, id: i64) -> Answer {
    let mut call = bulk_call(id);
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
    f.alice(&call).await
}

/// Narrowing fields and their values (a `Subset`'s checkboxes several).
type Edits<'a> = &'a [(&'a str, &'a [&'a str])];

/// The narrowing inputs as the page shows them (`dry_run` unticked), with `edits` in place of
/// their fields' values: what the browser posts.
fn narrowing(edits: Edits<'_>) -> Vec<(String, String)> {
    let mut fields: Vec<(&str, &[&str])> = ASKED
        .iter()
        .filter(|(name, _)| !edits.iter().any(|(edit, _)| edit == name))
        .copied()
        .collect();
    fields.extend_from_slice(edits);
    fields
        .into_iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (name.to_owned(), (*v).to_owned()))
        })
        .collect()
}

fn encode(fields: &[(String, String)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        out.append_pair(name, value);
    }
    out.finish()
}

/// `who` opens the page and approves with `edits` to the narrowing: the passkey step's html.
async fn passkey_step(s: &Setup, url: &str, who: &Principal, edits: Edits<'_>) -> String {
    passkey_step_with(s, url, who, narrowing(edits)).await
}

/// `who` opens the page and approves with the narrowing `fields`: the passkey step's html.
async fn passkey_step_with(
    s: &Setup,
    url: &str,
    who: &Principal,
    narrowing: Vec<(String, String)>,
) -> String {
    let (_, _, html) = visit_as(&s.page, "GET", url, Some(who.clone()), &[], "").await;
    let mut fields = vec![
        ("csrf".to_owned(), csrf(&html)),
        ("decision".to_owned(), "approve".to_owned()),
    ];
    fields.extend(narrowing);
    let (status, step) = post(&s.page, url, who, encode(&fields)).await;
    assert_eq!(status, StatusCode::OK, "{step}");
    assert!(step.contains("Confirm with your passkey"), "{step}");
    step
}

/// Every hidden field of the step's form, in order, as the browser posts it, `response` filled
/// with `assertion`.
fn step_form(step: &str, assertion: &str) -> Vec<(String, String)> {
    let form = &step[step.find("id=\"passkey-form\"").expect("the step's form")..];
    let form = &form[..form.find("</form>").unwrap()];
    form.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|input| {
            let (name, rest) = input.split_once("\" value=\"").unwrap();
            let value = &rest[..rest.find('"').unwrap()];
            let value = value
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            let value = if name == "response" {
                assertion.to_owned()
            } else {
                value
            };
            (name.to_owned(), value)
        })
        .collect()
}

/// `fields` with every narrowing field replaced by `narrowing`.
fn renarrowed(fields: &[(String, String)], narrowing: Vec<(String, String)>) -> String {
    let mut out: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| !name.starts_with("narrow-"))
        .cloned()
        .collect();
    out.extend(narrowing);
    encode(&out)
}

async fn bob_with_a_passkey(s: &Setup) -> (Principal, SoftAuthenticator) {
    let bob = Principal::new("bob");
    let mut key = authenticator();
    let (status, html) = register(&s.keys_page, &bob, &mut key).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    (bob, key)
}

async fn record(f: &Fixture, url: &str) -> mcp_confirm::approval::Approval {
    let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
    f.store.approval(id).await.unwrap().unwrap()
}

/// Each kind of narrowing alone, then all four at once (the reported case among them), approved
/// with a passkey: the step carries the narrowing and shows it, the passkey signs it, the
/// approval records it, and the retry runs exactly the narrowed call, once.
#[tokio::test]
async fn holds_each_narrowing_kind_approved_with_a_passkey_is_what_runs() {
    let cases: [(&str, Edits<'_>, Value); 6] = [
        (
            "Subset",
            &[("narrow-ids", &["\"note-3\"", "\"note-14\""])],
            json!({"ids": ["note-3", "note-14"]}),
        ),
        ("AtMost", &[("narrow-limit", &["1"])], json!({"limit": 1})),
        (
            "TurnOn",
            &[("narrow-dry_run", &["true"])],
            json!({"dry_run": true}),
        ),
        (
            "OneOf",
            &[("narrow-mode", &["archive"])],
            json!({"mode": "archive"}),
        ),
        (
            "the report: limit 1, dry_run on",
            &[("narrow-limit", &["1"]), ("narrow-dry_run", &["true"])],
            json!({"limit": 1, "dry_run": true}),
        ),
        (
            "all four",
            &[
                ("narrow-ids", &["\"note-7\""]),
                ("narrow-limit", &["0"]),
                ("narrow-dry_run", &["true"]),
                ("narrow-mode", &["archive"]),
            ],
            json!({"ids": ["note-7"], "limit": 0, "dry_run": true, "mode": "archive"}),
        ),
    ];
    for (kind, edits, changed) in cases {
        let s = setup(Approvers::anyone_but_caller().with_passkey());
        let (bob, mut key) = bob_with_a_passkey(&s).await;
        let (url, state) = question(&s.f.alice(&bulk_call(1)).await);
        let step = passkey_step(&s, &url, &bob, edits).await;
        // The step carries the narrowing along, and says what the passkey approves.
        for (field, values) in edits.iter() {
            let carried: Vec<String> = step_form(&step, "")
                .into_iter()
                .filter(|(name, _)| name == field)
                .map(|(_, value)| value)
                .collect();
            assert_eq!(carried, values.to_vec(), "{kind}: {field} in {step}");
        }
        assert!(step.contains("id=\"narrowed\""), "{kind}: {step}");
        let assertion = key.assert(&options(&step));
        let body = encode(&step_form(&step, &assertion));
        let (status, done) = post(&s.page, &url, &bob, body).await;
        assert_eq!(status, StatusCode::OK, "{kind}: {done}");
        assert!(done.contains("Approved"), "{kind}: {done}");
        // Recorded as narrowed, by the passkey that signed it.
        let record = record(&s.f, &url).await;
        let Some(Decision::Approved {
            narrowed: Some(narrowed),
            ..
        }) = &record.decision
        else {
            panic!("{kind}: recorded {:?}", record.decision);
        };
        assert_eq!(
            serde_json::from_str::<Value>(narrowed).unwrap(),
            changed,
            "{kind}"
        );
        assert!(record.endorsements[0].passkey.is_some(), "{kind}");
        // The retry runs exactly the narrowed call, once.
        let ran = retry(&s.f, &state, 2).await;
        assert_ran(&ran);
        let mut expected = arguments();
        for (name, value) in changed.as_object().unwrap() {
            expected[name] = value.clone();
        }
        let seen = s.f.seen.last();
        assert_eq!(seen.json()["params"]["arguments"], expected, "{kind}");
        assert!(seen.confirmed.unwrap().narrowed, "{kind}");
        assert_eq!(
            retry(&s.f, &state, 3).await.error()["data"]["reason"],
            "invalid_request_state",
            "{kind}"
        );
        assert_eq!(s.f.seen.count(), 1, "{kind}");
    }
}

/// The case as reported: a tool whose narrowable arguments are a limit and a flag only. The
/// approver lowers `limit` from 50 to 1 and turns `dry_run` on, and confirms with a passkey:
/// the call runs with `limit: 1, dry_run: true`, never as asked.
#[tokio::test]
async fn holds_the_reported_narrowing_runs_as_narrowed_not_as_asked() {
    let policy = ToolPolicy::confirm_only()
        .message("Delete these notes?")
        .input_key("bulk_approval")
        .approve_in_browser()
        .narrowable("limit", Narrowing::AtMost)
        .narrowable("dry_run", Narrowing::TurnOn);
    let s = setup_with(policy, Approvers::anyone_but_caller().with_passkey());
    let (bob, mut key) = bob_with_a_passkey(&s).await;
    let (url, state) = question(&s.f.alice(&bulk_call(1)).await);
    let fields = vec![
        ("narrow-limit".to_owned(), "1".to_owned()),
        ("narrow-dry_run".to_owned(), "true".to_owned()),
    ];
    let step = passkey_step_with(&s, &url, &bob, fields).await;
    let assertion = key.assert(&options(&step));
    let (status, html) = post(&s.page, &url, &bob, encode(&step_form(&step, &assertion))).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Approved"), "{html}");
    assert_ran(&retry(&s.f, &state, 2).await);
    let ran = &s.f.seen.last().json()["params"]["arguments"];
    assert_eq!(
        (&ran["limit"], &ran["dry_run"]),
        (&json!(1), &json!(true)),
        "{ran}"
    );
    assert_eq!(s.f.seen.count(), 1);
}

/// The passkey signs one narrowing: the step's assertion posted with another narrowing (still
/// narrower than the call), with the call as asked, or with more taken away, decides nothing
/// (403); nor does an assertion made for the call as asked, posted with a narrowing. Only the
/// narrowing it was made for is recorded and runs.
#[tokio::test]
async fn holds_a_narrowing_changed_between_the_step_and_the_assertion_is_refused() {
    let s = setup(Approvers::anyone_but_caller().with_passkey());
    let (bob, mut key) = bob_with_a_passkey(&s).await;
    let (url, state) = question(&s.f.alice(&bulk_call(1)).await);
    let signed: Edits<'_> = &[("narrow-limit", &["1"]), ("narrow-dry_run", &["true"])];
    let step = passkey_step(&s, &url, &bob, signed).await;
    let assertion = key.assert(&options(&step));
    let fields = step_form(&step, &assertion);
    for (what, other) in [
        ("another limit", narrowing(&[("narrow-limit", &["40"])])),
        (
            "the limit without dry_run",
            narrowing(&[("narrow-limit", &["1"])]),
        ),
        ("the call as asked", narrowing(&[])),
        (
            "fewer ids as well",
            narrowing(&[
                ("narrow-limit", &["1"]),
                ("narrow-dry_run", &["true"]),
                ("narrow-ids", &["\"note-3\""]),
            ]),
        ),
    ] {
        let (status, html) = post(&s.page, &url, &bob, renarrowed(&fields, other)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {html}");
        assert!(html.contains("Passkey not accepted"), "{what}: {html}");
    }
    assert!(record(&s.f, &url).await.endorsements.is_empty());
    let (waiting, _) = question(&retry(&s.f, &state, 2).await);
    assert_eq!(waiting, url);
    assert_eq!(s.f.seen.count(), 0);

    // An assertion for the call as asked, posted with a narrowing.
    let (url2, _) = question(&s.f.alice(&bulk_call(3)).await);
    let as_asked = passkey_step(&s, &url2, &bob, &[]).await;
    assert!(!as_asked.contains("id=\"narrowed\""), "{as_asked}");
    let asked_assertion = key.assert(&options(&as_asked));
    let body = renarrowed(
        &step_form(&as_asked, &asked_assertion),
        narrowing(&[("narrow-limit", &["1"])]),
    );
    let (status, html) = post(&s.page, &url2, &bob, body).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    assert!(record(&s.f, &url2).await.endorsements.is_empty());

    // The narrowing it was made for decides, and runs.
    let (status, html) = post(&s.page, &url, &bob, encode(&fields)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_ran(&retry(&s.f, &state, 4).await);
    let ran = &s.f.seen.last().json()["params"]["arguments"];
    assert_eq!((&ran["limit"], &ran["dry_run"]), (&json!(1), &json!(true)));
    assert_eq!(s.f.seen.count(), 1);
}

/// Two approvers with passkeys: the first narrows, the second's passkey signs that narrowing
/// (shown on the step, carried by nothing the second posts), and the call runs narrowed. A
/// second approver who posts another narrowing is refused before any passkey is asked for.
#[tokio::test]
async fn holds_a_later_approvers_passkey_signs_the_first_approvers_narrowing() {
    let s = setup(Approvers::anyone_but_caller().required(2).with_passkey());
    let (bob, mut bob_key) = bob_with_a_passkey(&s).await;
    let carol = Principal::new("carol");
    let mut carol_key = authenticator();
    register(&s.keys_page, &carol, &mut carol_key).await;
    let (url, state) = question(&s.f.alice(&bulk_call(1)).await);
    let step1 = passkey_step(&s, &url, &bob, &[("narrow-limit", &["1"])]).await;
    let assertion = bob_key.assert(&options(&step1));
    let (status, html) = post(&s.page, &url, &bob, encode(&step_form(&step1, &assertion))).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("1 of 2"), "{html}");

    // Carol is shown bob's narrowing; posting another is refused, no passkey asked for.
    let (_, _, page) = visit_as(&s.page, "GET", &url, Some(carol.clone()), &[], "").await;
    assert!(page.contains("narrowed this request to"), "{page}");
    let other = encode(&[
        ("csrf".to_owned(), csrf(&page)),
        ("decision".to_owned(), "approve".to_owned()),
        ("narrow-limit".to_owned(), "2".to_owned()),
    ]);
    let (status, html) = post(&s.page, &url, &carol, other).await;
    assert!(
        status == StatusCode::OK && html.contains("another narrowing"),
        "{status} {html}"
    );
    // Her step shows and signs bob's.
    let (status, step2) = post(
        &s.page,
        &url,
        &carol,
        encode(&[
            ("csrf".to_owned(), csrf(&page)),
            ("decision".to_owned(), "approve".to_owned()),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{step2}");
    assert!(step2.contains("id=\"narrowed\""), "{step2}");
    let assertion = carol_key.assert(&options(&step2));
    let (status, html) = post(
        &s.page,
        &url,
        &carol,
        encode(&step_form(&step2, &assertion)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Approved"), "{html}");
    assert_ran(&retry(&s.f, &state, 2).await);
    assert_eq!(s.f.seen.last().json()["params"]["arguments"]["limit"], 1);
    assert_eq!(s.f.seen.count(), 1);
}
