//! Attacks on the protocol gates and the form (the adversarial pass on #19): the `Accept` gate,
//! the one label sanitizer, and MRTR's rules for answers that do not answer the form.
//!
//! Tests named `holds_` held when written; the others failed then, and their doc comment says
//! **Was broken**, what broke and how it was fixed.

use crate::common::browser::*;
use crate::common::*;
use http::StatusCode;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{Candidate, ConfirmLayer, KeyRing, Lookup, PolicyError, ToolPolicy};
use mcp_confirm_pages::LayerPages as _;
use serde_json::{Value, json};

use crate::demo::cluster::*;

// =============================================================================================
// The Accept gate.
// =============================================================================================

/// A retry whose `Accept` lacks SSE (or weights it `q=0`) is refused 406 before the claim: the
/// same answer sent again with a proper `Accept` still runs, once.
#[tokio::test]
async fn holds_a_retry_without_sse_in_accept_spends_nothing() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    for accept in [
        "application/json",
        "application/json, text/event-stream;q=0",
        "application/json, text/event-stream; Q=0.000",
        "*/*",
        "application/json, text/*",
    ] {
        let mut request = post(&accepted(&state, json!(2), "note-7"), Some("alice"));
        request
            .headers_mut()
            .insert("accept", accept.parse().unwrap());
        let refused = send(&f.svc, request).await;
        assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        assert_eq!(f.seen.count(), 0, "{accept}");
    }
    let done = f.accept(&state, json!(3), "note-7").await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
}

/// A raw reqwest POST of `body` to the demo's `/mcp` as alice with `accept`.
async fn post_with_accept(url: &str, accept: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .header("authorization", "Bearer alice-token")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header(
            "mcp-name",
            body["params"]["name"].as_str().unwrap_or_default(),
        )
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, json)
}

/// **Was broken.** A parser differential between the layer's `Accept` gate and rmcp's.
///
/// `Accept: application/json;x=",text/event-stream;"` is one media range to rmcp (its
/// `accepted_media_types` splits outside quoted strings) — JSON only, so rmcp answers 406. The
/// layer's `accepts_json_and_sse` (src/http/headers.rs) splits on every `,` and `;`, finds a
/// `text/event-stream` range in the quoted parameter, and lets the call through: it shows the
/// form, claims the nonce on the accept, forwards, and rmcp refuses with 406. The confirmation
/// is burned on exactly the transport refusal #19 promised never to spend one on (the same
/// answer with a proper `Accept` then gets the replay error, and the note is not deleted).
///
/// Fixed: `Accept` is split as RFC 9110 (and rmcp) split it, outside quoted strings only
/// (honouring `\"` escapes), so a quoted parameter never yields a range.
#[tokio::test]
async fn a_quoted_comma_in_accept_spends_no_confirmation() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let accept = r#"application/json;x=",text/event-stream;""#;
    let call = crate::notes_http::tool_call(
        json!(1),
        "notes_delete",
        json!({"workspaceUri": demo.workspace("personal"), "title": "Groceries"}),
    );
    let (status, first) = post_with_accept(&demo.url(), accept, &call).await;
    if status == 406 {
        return; // The layer agrees with the server: nothing was offered, nothing spent.
    }
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let mut retry =
        crate::notes_http::answering(call.clone(), &state, crate::notes_http::accept("note-7"));
    retry["id"] = json!(2);
    let (status, answer) = post_with_accept(&demo.url(), accept, &retry).await;
    assert!(demo.note_path("personal", "note-7").exists(), "{answer}");
    // The same confirmation with a proper Accept must still work: nothing was spent on a
    // request the server refused as not acceptable.
    retry["id"] = json!(3);
    let (_, again) =
        post_with_accept(&demo.url(), "application/json, text/event-stream", &retry).await;
    assert!(
        !demo.note_path("personal", "note-7").exists(),
        "the form was shown and the confirmation spent on a call rmcp refused ({status} \
         {answer}); the retry with a proper Accept got {again}"
    );
}

// =============================================================================================
// The one label sanitizer.
// =============================================================================================

/// A layer with one pick-one tool `pick` whose resolver returns `candidates`.
fn picking(
    candidates: Vec<Candidate>,
    browser_page: bool,
) -> (Fixture, mcp_confirm_pages::ApprovalPage) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let mut policy = ToolPolicy::pick_one(move |_: Lookup| {
        let candidates = candidates.clone();
        async move { Ok::<_, PolicyError>(candidates) }
    })
    .message("Pick one.")
    .input_key("pick_choice")
    .choice_field("id");
    if browser_page {
        policy = policy.approve_in_browser();
    }
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool("pick", policy)
        .build();
    let page = layer.approval_page();
    (Fixture::new(layer, notes, clock, store), page)
}

fn pick_call(id: Value, url_mode: bool) -> Value {
    let mut meta = meta();
    if url_mode {
        meta = url_meta();
    }
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta, "name":"pick", "arguments":{"q": "x"}}})
}

/// Characters that render as nothing (or reorder text) and so let one label look like another,
/// or hide text a reader never sees: Unicode `Cf` (format) characters the sanitizer's list misses.
const HIDDEN: [char; 9] = [
    '\u{E0001}', // LANGUAGE TAG
    '\u{E0041}', // TAG LATIN CAPITAL LETTER A ("ASCII smuggling")
    '\u{E007F}', // CANCEL TAG
    '\u{206A}',  // INHIBIT SYMMETRIC SWAPPING
    '\u{206F}',  // NOMINAL DIGIT SHAPES
    '\u{FFF9}',  // INTERLINEAR ANNOTATION ANCHOR
    '\u{FFFB}',  // INTERLINEAR ANNOTATION TERMINATOR
    '\u{1D173}', // MUSICAL SYMBOL BEGIN BEAM
    '\u{1BCA0}', // SHORTHAND FORMAT LETTER OVERLAP
];

/// **Was broken.** Invisible format characters survive `form::plain_label`.
///
/// A label "note-7 · Groceries" followed by Unicode tag characters (U+E0000–E007F, invisible in
/// every renderer, read by models as ASCII: "ASCII smuggling"), or the deprecated format
/// controls U+206A–206F, interlinear annotations U+FFF9–FFFB, musical and shorthand format
/// controls, reaches the form's `title` and the approval page unchanged: the user sees one
/// thing, the label says another. `is_invisible` (src/form.rs) lists `Cc` plus a hand-picked
/// set of `Cf` code points and misses the rest of `Cf`.
///
/// Fixed: every `Cf` and every other Default_Ignorable_Code_Point (variation selectors, Hangul
/// fillers, the reserved ranges) is dropped, from one table (`kernel::is_invisible`).
#[tokio::test]
async fn every_format_and_ignorable_character_is_dropped_from_labels() {
    let label: String = std::iter::once("note-7 · Groceries".to_owned())
        .chain(HIDDEN.iter().map(|c| format!("{c}x")))
        .collect();
    let (f, _) = picking(
        vec![Candidate::labelled("note-7", label.as_str()).with_version("v1")],
        false,
    );
    let first = f.alice(&pick_call(json!(1), false)).await;
    let title = first.result()["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["oneOf"][0]["title"]
        .as_str()
        .unwrap_or_else(|| panic!("a titled choice: {}", first.json()))
        .to_owned();
    let (g, page) = picking(
        vec![Candidate::labelled("note-7", label.as_str()).with_version("v1")],
        true,
    );
    let (url, _, _) = {
        let answer = g.alice(&pick_call(json!(1), true)).await;
        let result = answer.result();
        let params = &result["inputRequests"]["pick_choice"]["params"];
        (
            params["url"]
                .as_str()
                .unwrap_or_else(|| panic!("a URL: {}", answer.json()))
                .to_owned(),
            (),
            (),
        )
    };
    let (status, _, html) = visit(&page, "GET", &url, Some("alice"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let left_in_form: Vec<String> = HIDDEN
        .iter()
        .filter(|c| title.contains(**c))
        .map(|c| format!("U+{:04X}", u32::from(*c)))
        .collect();
    let left_on_page: Vec<String> = HIDDEN
        .iter()
        .filter(|c| html.contains(**c))
        .map(|c| format!("U+{:04X}", u32::from(*c)))
        .collect();
    assert!(
        left_in_form.is_empty() && left_on_page.is_empty(),
        "invisible characters kept: form {left_in_form:?}, page {left_on_page:?}"
    );
}

/// The characters #19's sanitizer does list (RLO, zero-width, controls) are gone from the form
/// and the page alike: regression.
#[tokio::test]
async fn holds_listed_bidi_and_zero_width_characters_are_dropped_everywhere() {
    let label = "note-7\u{202E}txt.exe\u{200B}\u{2066}x\u{0007}\u{FEFF}";
    let (f, _) = picking(
        vec![Candidate::labelled("note-7", label).with_version("v1")],
        false,
    );
    let first = f.alice(&pick_call(json!(1), false)).await;
    let title = first.result()["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["oneOf"][0]["title"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(title, "note-7txt.exex");
    let (g, page) = picking(
        vec![Candidate::labelled("note-7", label).with_version("v1")],
        true,
    );
    let answer = g.alice(&pick_call(json!(1), true)).await;
    let url = answer.result()["inputRequests"]["pick_choice"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let html = page_as(&page, &url, "alice").await;
    for c in ['\u{202E}', '\u{200B}', '\u{2066}', '\u{0007}', '\u{FEFF}'] {
        assert!(!html.contains(c), "U+{:04X} on the page", u32::from(c));
    }
}

/// **Was broken.** Candidate ids are shown to the user unsanitized.
///
/// The label goes through `plain_label`, but the id does not: the approval page prints each
/// choice's id in `<strong>` right before its (clean) label (src/pages/approval/html.rs, the choices loop), and
/// a `plain_enum()` form shows only ids. An id carrying U+202E (RIGHT-TO-LEFT OVERRIDE) reverses
/// everything after it on the line, the cleaned label included, so the sanitizer is bypassed by
/// putting the payload in the id; zero-width characters make two ids look identical. Ids are
/// often built from names users chose (file names in a shared workspace).
///
/// Fixed: `Candidates::new` refuses such ids (`BadId`: a control, format or other
/// default-ignorable character, or whitespace other than a space), since an id is shown and sent
/// back exactly and cannot be cleaned. The call is refused, nothing shown.
#[tokio::test]
async fn candidate_ids_with_bidi_or_zero_width_characters_are_never_shown() {
    let spoof = "note-7\u{202E}exe.txt";
    let lookalike = "note-7\u{200B}";
    let candidates = vec![
        Candidate::labelled(spoof, "Groceries").with_version("v1"),
        Candidate::labelled(lookalike, "Groceries").with_version("v1"),
        Candidate::labelled("note-7", "Groceries").with_version("v1"),
    ];
    let (g, page) = picking(candidates.clone(), true);
    let answer = g.alice(&pick_call(json!(1), true)).await;
    let shown_on_page =
        match answer.result()["inputRequests"]["pick_choice"]["params"]["url"].as_str() {
            None => String::new(), // refused: fine
            Some(url) => visit(&page, "GET", url, Some("alice"), &[], "").await.2,
        };
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let plain = ToolPolicy::pick_one(move |_: Lookup| {
        let candidates = candidates.clone();
        async move { Ok::<_, PolicyError>(candidates) }
    })
    .input_key("pick_choice")
    .choice_field("id")
    .plain_enum();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store.clone())
        .tool("pick", plain)
        .build();
    let f = Fixture::new(layer, notes, clock, store);
    let form = f
        .alice(&pick_call(json!(1), false))
        .await
        .json()
        .to_string();
    let form: Value = serde_json::from_str(&form).unwrap();
    let enumerated = form["result"]["inputRequests"]["pick_choice"]["params"]["requestedSchema"]
        ["properties"]["id"]["enum"]
        .to_string();
    let enumerated: Value = serde_json::from_str(&enumerated).unwrap();
    let in_enum = enumerated
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|id| id.contains('\u{202E}') || id.contains('\u{200B}'));
    assert!(
        !shown_on_page.contains('\u{202E}') && !shown_on_page.contains('\u{200B}') && !in_enum,
        "ids with bidi/zero-width characters shown: page has RLO: {}, ZWSP: {}; plain enum: {enumerated}",
        shown_on_page.contains('\u{202E}'),
        shown_on_page.contains('\u{200B}'),
    );
}

// =============================================================================================
// MRTR: unknown members ignored; an answer that does not answer the form is asked again.
// =============================================================================================

/// The form of an `input_required` answer without its (fresh) state.
fn form_of(answer: &Answer) -> Value {
    let mut result = answer.result();
    assert_eq!(result["resultType"], "input_required", "{}", answer.json());
    result.as_object_mut().unwrap().remove("requestState");
    result
}

/// Choices that were not offered — a note of the same principal with another title, a note in
/// a workspace she may use but did not name, another principal's note, one that does not exist —
/// are all asked again with the identical form: nothing tells the client which ids exist. Nothing
/// is spent, and the original state still accepts an offered choice, once.
#[tokio::test]
async fn holds_a_choice_not_offered_is_asked_again_with_no_oracle_and_nothing_spent() {
    let f = fixture();
    let first = f.alice(&delete_call(json!(1), "Groceries")).await;
    let state = first.state();
    let expected = form_of(&first);
    for (n, choice) in ["note-20", "note-30", "note-99", "NOTE-7", "note-7 ", ""]
        .into_iter()
        .enumerate()
    {
        let again = f.accept(&state, json!(10 + n), choice).await;
        assert_eq!(form_of(&again), expected, "{choice:?}");
    }
    // Content missing, confirm missing: asked again too.
    for (n, response) in [
        json!({"delete_choice":{"action":"accept"}}),
        json!({"delete_choice":{"action":"accept","content":null}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7"}}}),
    ]
    .into_iter()
    .enumerate()
    {
        let again = f.alice(&answered(&state, json!(20 + n), response)).await;
        assert_eq!(form_of(&again), expected);
    }
    assert_eq!(f.seen.count(), 0);
    let done = f.accept(&state, json!(30), "note-7").await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
    let replay = f.accept(&state, json!(31), "note-3").await;
    assert_eq!(replay.error()["code"], -32602, "{}", replay.json());
}

/// Members the form did not ask for are ignored — and never reach the handler: content that
/// also names `title` and `workspaceUri` (what the user confirmed is Groceries in personal)
/// does not change the forwarded arguments.
#[tokio::test]
async fn holds_extra_answer_members_never_reach_the_forwarded_call() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    let response = json!({"delete_choice":{"action":"accept","extra":{"note_id":"note-30"},
        "content":{"note_id":"note-7","confirm":true,"title":"Taxes","workspaceUri":TEAM,
                   "arguments":{"note_id":"note-30"}}},
        "other_key":{"action":"accept","content":{"note_id":"note-30","confirm":true}}});
    let done = f.alice(&answered(&state, json!(2), response)).await;
    assert_eq!(f.seen.count(), 1, "{}", done.json());
    let forwarded = f.seen.last().json();
    assert_eq!(
        forwarded["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "title": "Groceries", "note_id": "note-7"})
    );
    assert_eq!(
        f.seen.last().confirmed.unwrap().chosen.as_deref(),
        Some("note-7")
    );
}

/// Between the form and the answer the offered note is edited: the answer is not asked again
/// with the old form (the choice was offered), it is refused by the revalidation, and a choice
/// that was not offered but now matches (note-20 renamed to Groceries) is asked again, never run.
#[tokio::test]
async fn holds_records_changed_between_form_and_answer_never_run() {
    let f = fixture();
    let state = f.alice(&delete_call(json!(1), "Groceries")).await.state();
    f.notes.replace("note-20", PERSONAL, "Groceries");
    let again = f.accept(&state, json!(2), "note-20").await;
    assert_eq!(
        again.result()["resultType"],
        "input_required",
        "{}",
        again.json()
    );
    f.notes.edit("note-7");
    let refused = f.accept(&state, json!(3), "note-7").await;
    assert_eq!(f.seen.count(), 0, "{}", refused.json());
}
