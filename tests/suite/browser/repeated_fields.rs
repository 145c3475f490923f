//! A form post that repeats a field is refused whole on every page (#52, 5): which of two values
//! counts is never guessed, as a JSON object with a key twice is no object. Before, the first
//! `decision`, `csrf`, `narrow-limit` or `narrow-mode` counted (`decision=approve&decision=decline`
//! approved), and a batch row's choice was whichever the reader took. Only the fields a page
//! carries as lists (a subset's checkboxes, a batch's rows) repeat. The passkey page and the
//! passkey step are in `passkeys.rs`, the standing-approvals page in `standing/page.rs`.

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::approval::batch::SetDigest;
use mcp_confirm::approval::{ApprovalId, ApprovalStore};
use serde_json::{Value, json};

/// The words of the one refusal of a repeated field.
pub(crate) const REPEATED: &str = "The form repeats a field. Nothing changed; reload the page.";

/// Asserts the page's answer is the one refusal of a repeated field.
pub(crate) fn assert_repeated(status: StatusCode, body: &str, form: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{form}: {body}");
    assert!(body.contains(REPEATED), "{form}: {body}");
}

/// Still undecided: alice's retry is asked again, with the same URL; nothing ran.
async fn still_waiting(f: &Fixture, state: &str, url: &str, id: i64) {
    let again = f.alice(&went_to_page(state, json!(id))).await;
    assert_eq!(elicitation(&again).0, url, "{}", again.json());
    assert_eq!(f.seen.count(), 0);
}

fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn a_repeated_field_on_the_approval_page_decides_nothing() {
    let (f, page) = browser();
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let token = csrf(&page_as(&page, &url, "alice").await);
    for form in [
        format!("csrf={token}&choice=note-7&decision=approve&decision=decline"),
        format!("csrf={token}&choice=note-7&decision=decline&decision=approve"),
        format!("csrf={token}&choice=note-7&decision=approve&decision=approve"),
        // Spelt otherwise, the same name once decoded.
        format!("csrf={token}&choice=note-7&decision=approve&decisio%6E=decline"),
        format!("csrf={token}&csrf={token}&choice=note-7&decision=approve"),
        format!("csrf={token}&choice=note-7&choice=note-3&decision=approve"),
        format!("csrf={token}&choice=note-7&decision=approve&remember=once&remember=once"),
        format!("csrf={token}&choice=note-7&decision=approve&typed=note-7&typed=note-7"),
        // Batch rows on one approval's post: no list here.
        format!("csrf={token}&choice=note-7&decision=approve&approve=a&approve=b"),
        // A narrowing field of a tool that declares none.
        format!("csrf={token}&choice=note-7&decision=approve&narrow-x=1&narrow-x=2"),
    ] {
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_repeated(status, &body, &form);
    }
    still_waiting(&f, &state, &url, 2).await;
    // Nothing was spent: the page still decides, once.
    let html = page_as(&page, &url, "alice").await;
    assert!(html.contains("id=\"approve\""), "{html}");
    let form = format!("csrf={token}&choice=note-7&decision=decline");
    let (status, body) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Declined"), "{body}");
}

/// `notes_bulk_delete` (narrowing.rs's policy) asked by alice: the page's URL and the state.
async fn bulk_asked(f: &Fixture) -> (String, String, Value) {
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta": url_meta(), "name":"notes_bulk_delete",
        "arguments":{"workspaceUri": PERSONAL, "ids": ["note-3", "note-7", "note-14"],
                     "limit": 50, "dry_run": false, "mode": "delete"}}});
    let (url, state) = super::narrowing::question(&f.alice(&call).await);
    (url, state, call)
}

#[tokio::test]
async fn a_repeated_narrowing_field_decides_nothing_and_only_a_subsets_checkboxes_repeat() {
    let (f, page, _) =
        with_layer(|b, _| b.tool("notes_bulk_delete", super::narrowing::bulk_policy()));
    let (url, state, call) = bulk_asked(&f).await;
    let token = csrf(&page_as(&page, &url, "alice").await);
    let ids = format!(
        "narrow-ids={}&narrow-ids={}",
        enc("\"note-3\""),
        enc("\"note-7\"")
    );
    for edit in [
        "narrow-limit=10&narrow-limit=60",
        "narrow-limit=60&narrow-limit=10",
        "narrow-limit=50&narrow-limit=50",
        "narrow-mode=archive&narrow-mode=shred",
        "narrow-mode=shred&narrow-mode=archive",
        "narrow-dry_run=true&narrow-dry_run=true",
        "narrow-limit=10&narrow%2Dlimit=60",
    ] {
        let form = format!("csrf={token}&decision=approve&{ids}&{edit}");
        let (status, body) = decide(&page, &url, "alice", &form).await;
        assert_repeated(status, &body, &form);
    }
    let mut retry = call.clone();
    retry["id"] = json!(2);
    retry["params"]["requestState"] = json!(state);
    retry["params"]["inputResponses"] = json!({"bulk_approval": {"action": "accept"}});
    let (waiting, _) = super::narrowing::question(&f.alice(&retry).await);
    assert_eq!(waiting, url);
    assert_eq!(f.seen.count(), 0);
    // The subset's checkboxes are the one list: two kept, with each other field once.
    let form = format!("csrf={token}&decision=approve&{ids}&narrow-limit=10&narrow-mode=archive");
    let (status, body) = decide(&page, &url, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    retry["id"] = json!(3);
    let done = f.alice(&retry).await;
    assert_eq!(
        done.result()["content"][0]["text"],
        "done by inner",
        "{}",
        done.json()
    );
    assert_eq!(
        f.seen.last().json()["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "ids": ["note-3", "note-7"], "limit": 10,
               "dry_run": false, "mode": "archive"})
    );
}

#[tokio::test]
async fn a_repeated_field_in_a_batch_post_decides_no_member() {
    let (f, page) = browser_with(|p| p.batch_group("notes"));
    let mut calls = Vec::new();
    for (i, title) in ["Groceries", "Taxes"].into_iter().enumerate() {
        let (url, _, state) =
            elicitation(&f.alice(&destroy_call_in(json!(i), PERSONAL, title)).await);
        calls.push((url, state));
    }
    let html = page_as(&page, &calls[0].0, "alice").await;
    assert!(html.contains("Approve 2 requests?"), "{html}");
    let (token, set, members) = (
        csrf(&html),
        hidden(&html, "set")[0].clone(),
        hidden(&html, "member"),
    );
    let rows = |extra: &str| {
        let mut rows = String::new();
        for m in &members {
            rows.push_str(&format!("&member={m}&approve={m}&choice-{m}=note-7"));
        }
        format!("{rows}{extra}")
    };
    let first = &members[0];
    for form in [
        format!(
            "csrf={token}&set={set}&decision=approve_all&decision=decline_all{}",
            rows("")
        ),
        format!(
            "csrf={token}&set={set}&decision=decline_all&decision=approve_all{}",
            rows("")
        ),
        format!(
            "csrf={token}&csrf={token}&set={set}&decision=approve_all{}",
            rows("")
        ),
        format!(
            "csrf={token}&set={set}&set={set}&decision=approve_all{}",
            rows("")
        ),
        // A row's choice twice: the first row's record is never guessed.
        format!(
            "csrf={token}&set={set}&decision=approve_all{}",
            rows(&format!("&choice-{first}=note-3"))
        ),
        format!(
            "csrf={token}&set={set}&decision=approve_some{}",
            rows(&format!("&choice-{first}=note-7"))
        ),
    ] {
        let (status, body) = decide(&page, &calls[0].0, "alice", &form).await;
        assert_repeated(status, &body, &form);
    }
    // Nothing kept for the set, no member decided, none runs.
    let digest = SetDigest::from_hex(&set).unwrap();
    assert!(f.store.batch(digest).await.unwrap().is_none());
    for (i, (url, state)) in calls.iter().enumerate() {
        let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
        assert!(
            f.store
                .approval(id)
                .await
                .unwrap()
                .unwrap()
                .decision
                .is_none()
        );
        let again = f
            .alice(&with_answer(
                destroy_call_in(json!(10 + i), PERSONAL, ["Groceries", "Taxes"][i]),
                state,
                json!({"action": "accept"}),
            ))
            .await;
        assert_eq!(elicitation(&again).0, *url);
    }
    // The rows are lists: the same form with each field once decides the set.
    let form = format!("csrf={token}&set={set}&decision=approve_all{}", rows(""));
    let (status, body) = decide(&page, &calls[0].0, "alice", &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("2 of 2 approved"), "{body}");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn the_inbox_takes_no_post_repeated_fields_or_not() {
    let (f, page, inbox) = with_layer(|b, notes| b.tool("notes_destroy", destroy_policy(notes)));
    let (url, _, state) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let token = csrf(&page_as(&page, &url, "alice").await);
    let form = format!("csrf={token}&choice=note-7&decision=approve&decision=decline");
    let (status, _, _) = visit(
        &inbox,
        "POST",
        "http://notes.example/inbox",
        Some("alice"),
        &FORM_HEADERS,
        form,
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    still_waiting(&f, &state, &url, 2).await;
}
