//! Pick-one forms through the gateway: the operator's lookup finds the records a call may mean
//! with a read tool of the upstream, the user picks one, the choice is written into the call,
//! and the lookup runs again before anything is forwarded. The upstream here keeps notes in
//! memory that a test may change between the form and the answer, and records every call.

use crate::common;
use std::sync::{Arc, Mutex};

use crate::common::{ALICE, STATIC_TOKENS};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use serde_json::{Value, json};

/// One call the upstream ran: tool, arguments, and the user its principal header named.
type Ran = (String, Value, Option<String>);

/// The upstream's notes, what it ran, and how its search lies, if it does.
#[derive(Clone, Default)]
struct Upstream {
    notes: Arc<Mutex<Vec<Value>>>,
    calls: Arc<Mutex<Vec<Ran>>>,
    /// Replaces the search's records when set.
    lie: Arc<Mutex<Option<Value>>>,
}

impl Upstream {
    fn ran(&self, tool: &str) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == tool)
            .map(|c| c.1.clone())
            .collect()
    }
    fn users(&self) -> Vec<Option<String>> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.2.clone())
            .collect()
    }
}

async fn serve_upstream(
    State(up): State<Upstream>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> axum::Json<Value> {
    let message = body.0;
    let id = message["id"].clone();
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": [
            {"name": "notes_search", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
            {"name": "notes_delete", "inputSchema": {"type": "object",
                "properties": {"title": {"type": "string"}, "id": {"type": "string"}}},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_purge", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
        ]}),
        Some("tools/call") => {
            let name = message["params"]["name"].as_str().unwrap_or("").to_owned();
            let arguments = message["params"]["arguments"].clone();
            let user = headers
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            up.calls
                .lock()
                .unwrap()
                .push((name.clone(), arguments.clone(), user));
            match name.as_str() {
                "notes_search" => {
                    // Without a query, every note: as many read tools answer.
                    let query = arguments.get("query").and_then(Value::as_str);
                    let notes: Vec<Value> = up
                        .notes
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|n| query.is_none_or(|q| n["title"] == q))
                        .cloned()
                        .collect();
                    let notes = up.lie.lock().unwrap().clone().unwrap_or(json!(notes));
                    // Only in a text block, as many servers do.
                    json!({"resultType": "complete", "content": [{"type": "text",
                        "text": json!({"notes": notes}).to_string()}]})
                }
                "notes_delete" => {
                    let target = arguments["id"].as_str().unwrap_or("").to_owned();
                    up.notes.lock().unwrap().retain(|n| n["id"] != target);
                    json!({"resultType": "complete",
                        "content": [{"type": "text", "text": format!("deleted {target}")}]})
                }
                _ => json!({"resultType": "complete", "content": []}),
            }
        }
        _ => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}}));
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

struct Fixture {
    url: String,
    up: Upstream,
    client: common::Client,
}

/// The lookup every test uses unless it writes its own.
const LOOKUP: &str = r#"
    [route.tools.notes_delete]
    policy = "confirm"
    [route.tools.notes_delete.lookup]
    tool = "notes_search"
    arguments = { query = "/title" }
    records = "$.structuredContent.notes[*]"
    id = "/id"
    label = "/title"
    select_into = "id"
"#;

async fn fixture(route: &str) -> Fixture {
    let up = Upstream::default();
    *up.notes.lock().unwrap() = vec![
        json!({"id": "n1", "title": "Groceries", "body": "milk"}),
        json!({"id": "n2", "title": "Groceries", "body": "eggs"}),
        json!({"id": "n3", "title": "Groceries", "body": "bread"}),
        json!({"id": "n4", "title": "Taxes", "body": "2026"}),
    ];
    let upstream = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(up.clone()),
    )
    .await;
    let dir = common::temp_dir("lookup");
    let text = format!(
        "listen = \"127.0.0.1:0\"\n{STATIC_TOKENS}\n\
         [[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream}\"\n{route}\n"
    );
    let gateway = common::build(&dir, &text).unwrap();
    let (listener, addr) = common::bind().await;
    common::serve(&gateway, listener);
    Fixture {
        url: format!("http://{addr}/notes/mcp"),
        up,
        client: common::client(),
    }
}

fn call(id: i64, arguments: Value) -> Value {
    common::call(id, "notes_delete", arguments)
}

fn answer(first: &Value, id: i64, asked: &Value, content: Value) -> Value {
    common::accept(first, id, asked, content)
}

impl Fixture {
    async fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Value {
        common::post_call(&self.client, &self.url, Some(ALICE), body, extra).await
    }
}

/// The ids the form offers.
fn offered(asked: &Value) -> Vec<String> {
    let request = asked["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    let choice = &request["params"]["requestedSchema"]["properties"]["choice"];
    let options = choice["oneOf"]
        .as_array()
        .or_else(|| choice["enum"].as_array())
        .unwrap_or_else(|| panic!("no choice in {request}"));
    options
        .iter()
        .map(|o| o.get("const").unwrap_or(o).as_str().unwrap().to_owned())
        .collect()
}

/// The titles the form shows its options under.
fn titles(asked: &Value) -> Vec<String> {
    let request = asked["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("no form in {asked}"))
        .values()
        .next()
        .unwrap();
    request["params"]["requestedSchema"]["properties"]["choice"]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("no titled choice in {request}"))
        .iter()
        .map(|o| o["title"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn options_titled_alike_read_apart_with_their_ids_first() {
    // #52, finding 2: three notes titled "Groceries" were offered as "Groceries" three times,
    // their ids only in `const`, which clients do not show.
    let f = fixture(LOOKUP).await;
    let asked = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
    assert_eq!(
        titles(&asked),
        ["n1 · Groceries", "n2 · Groceries", "n3 · Groceries"]
    );
    // Several pointers, each value after the id, in order.
    let f = fixture(&LOOKUP.replace("label = \"/title\"", "label = [\"/title\", \"/body\"]")).await;
    let first = call(1, json!({"title": "Groceries"}));
    let asked = f.post(&first, &[]).await;
    assert_eq!(
        titles(&asked),
        [
            "n1 · Groceries · milk",
            "n2 · Groceries · eggs",
            "n3 · Groceries · bread"
        ]
    );
    // The choice is still the id, and it still runs only what was picked.
    let done = f
        .post(
            &answer(&first, 2, &asked, json!({"choice": "n2", "confirm": true})),
            &[],
        )
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted n2", "{done}");
}

#[tokio::test]
async fn options_that_would_still_read_the_same_refuse_the_call() {
    // An id that spells another option's id and title: the user could not tell them apart,
    // so nothing is shown and nothing runs. Likewise when the only difference is a character
    // the form drops (the gateway drops the same ones before it compares).
    for hidden in [
        "",
        "\u{202E}",
        "\u{200B}",
        "\u{2066}",
        "\u{3164}",
        "\u{00AD}",
        "\u{FE0F}",
        "\u{FEFF}",
        "\u{E0041}",
        "\u{0007}",
    ] {
        let f = fixture(LOOKUP).await;
        *f.up.lie.lock().unwrap() = Some(json!([
            {"id": "n1", "title": format!("Groceries{hidden}")},
            {"id": "n1 · Groceries", "title": ""}]));
        let refused = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
        assert!(refused.get("error").is_some(), "{hidden:?}: {refused}");
        assert!(f.up.ran("notes_delete").is_empty());
    }
}

#[tokio::test]
async fn a_record_listed_twice_is_offered_once() {
    // The same record twice: one option (a form whose choices repeat a value is one strict
    // schema validators reject). Two different records under one id: refused.
    let f = fixture(LOOKUP).await;
    *f.up.lie.lock().unwrap() = Some(json!([
        {"id": "f001", "title": "Groceries"},
        {"id": "f001", "title": "Groceries"},
        {"id": "f002", "title": "Groceries"}]));
    let asked = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(offered(&asked), ["f001", "f002"], "{asked}");
    *f.up.lie.lock().unwrap() = Some(json!([
        {"id": "f001", "title": "Groceries"},
        {"id": "f001", "title": "Groceries", "body": "another record"}]));
    let refused = f.post(&call(2, json!({"title": "Groceries"})), &[]).await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(f.up.ran("notes_delete").is_empty());
}

#[tokio::test]
async fn a_call_without_what_its_lookup_reads_is_refused_before_anything_runs() {
    // #52, finding 3: `notes_delete {"id": "n3"}` with a lookup that reads the title: the
    // lookup ran without its query, the upstream returned every note, and the form offered
    // them all (a client taking the first option deleted n1).
    let f = fixture(LOOKUP).await;
    for (n, arguments) in [
        json!({"id": "n3"}),
        json!({}),
        json!({"title": null, "id": "n3"}),
        json!({"title": "", "id": "n3"}),
    ]
    .into_iter()
    .enumerate()
    {
        let refused = f.post(&call(n as i64, arguments.clone()), &[]).await;
        assert_eq!(refused["error"]["code"], -32602, "{arguments}: {refused}");
        assert_eq!(
            refused["error"]["message"],
            "The call does not name the records it acts on; nothing was run."
        );
        assert_eq!(
            refused["error"]["data"]["reason"],
            "lookup_argument_missing"
        );
    }
    assert!(
        f.up.calls.lock().unwrap().is_empty(),
        "nothing ran upstream"
    );
    // Named, it is asked as before.
    let asked = f
        .post(&call(9, json!({"title": "Taxes", "id": "n3"})), &[])
        .await;
    assert_eq!(offered(&asked), ["n4"]);
}

#[tokio::test]
async fn the_user_picks_one_record_and_only_that_one_is_deleted() {
    let f = fixture(LOOKUP).await;
    // The caller names n3 in the argument the choice goes into: the choice wins.
    let first = call(1, json!({"title": "Groceries", "id": "n3"}));
    let asked = f.post(&first, &[]).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(offered(&asked), ["n1", "n2", "n3"]);
    assert!(f.up.ran("notes_delete").is_empty());
    let done = f
        .post(
            &answer(&first, 2, &asked, json!({"choice": "n2", "confirm": true})),
            &[],
        )
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted n2", "{done}");
    assert_eq!(
        f.up.ran("notes_delete"),
        [json!({"title": "Groceries", "id": "n2"})]
    );
    // The lookup ran twice: for the form, and again before forwarding.
    assert_eq!(
        f.up.ran("notes_search"),
        [json!({"query": "Groceries"}), json!({"query": "Groceries"})]
    );
}

#[tokio::test]
async fn a_record_changed_or_gone_since_the_form_is_refused_and_nothing_forwarded() {
    for change in ["edit", "delete"] {
        let f = fixture(LOOKUP).await;
        let first = call(1, json!({"title": "Groceries"}));
        let asked = f.post(&first, &[]).await;
        {
            let mut notes = f.up.notes.lock().unwrap();
            if change == "edit" {
                notes[1]["body"] = json!("eggs, and the bank details");
            } else {
                notes.remove(1);
            }
        }
        let refused = f
            .post(
                &answer(&first, 2, &asked, json!({"choice": "n2", "confirm": true})),
                &[],
            )
            .await;
        assert!(
            refused.get("error").is_some() || refused["result"]["isError"] == true,
            "{change}: {refused}"
        );
        assert!(f.up.ran("notes_delete").is_empty(), "{change}");
    }
}

#[tokio::test]
async fn a_choice_that_was_not_offered_is_refused() {
    let f = fixture(LOOKUP).await;
    let first = call(1, json!({"title": "Groceries"}));
    let asked = f.post(&first, &[]).await;
    let refused = f
        .post(
            &answer(&first, 2, &asked, json!({"choice": "n4", "confirm": true})),
            &[],
        )
        .await;
    // The layer asks again (a fresh form over the same records), or refuses: never runs n4.
    assert!(
        refused.get("error").is_some() || refused["result"]["resultType"] == "input_required",
        "{refused}"
    );
    assert!(f.up.ran("notes_delete").is_empty());
}

#[tokio::test]
async fn an_upstream_that_lies_in_its_lookup_gets_nothing_run() {
    // Records without ids: the call is refused, nothing shown, nothing run.
    let f = fixture(LOOKUP).await;
    *f.up.lie.lock().unwrap() = Some(json!([{"title": "Groceries"}]));
    let refused = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(f.up.ran("notes_delete").is_empty());

    // Labels that try to mislead are cleaned like every label: no control or bidi characters
    // reach the form.
    let f = fixture(LOOKUP).await;
    *f.up.lie.lock().unwrap() = Some(json!([
        {"id": "n1", "title": "Groceries\u{202e}txt.exe\u{0007}"},
        {"id": "n2", "title": "Gro\u{200b}ceries"}]));
    let asked = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
    let form = asked.to_string();
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    for bad in ["\\u202e", "\\u0007", "\\u200b", "\u{202e}", "\u{200b}"] {
        assert!(!form.contains(bad), "{bad} in {form}");
    }
}

#[tokio::test]
async fn a_lookup_through_a_tool_that_is_not_read_only_denies_the_tool() {
    // The operator points the lookup at a destructive tool: running it for the form would run
    // it unconfirmed. The confirmed tool is denied instead, and neither runs.
    let f = fixture(&LOOKUP.replace("tool = \"notes_search\"", "tool = \"notes_purge\"")).await;
    let refused = f.post(&call(1, json!({"title": "Groceries"})), &[]).await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(f.up.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_lookup_and_the_call_name_the_same_principal_and_never_the_callers_claim() {
    let f = fixture(&format!("principal_header = \"x-user\"\n{LOOKUP}")).await;
    let first = call(1, json!({"title": "Groceries"}));
    // The caller claims to be someone else in the principal header: replaced.
    let asked = f.post(&first, &[("x-user", "root")]).await;
    f.post(
        &answer(&first, 2, &asked, json!({"choice": "n1", "confirm": true})),
        &[("x-user", "root")],
    )
    .await;
    assert_eq!(f.up.ran("notes_delete").len(), 1);
    assert_eq!(
        f.up.users(),
        [
            Some("alice".into()),
            Some("alice".into()),
            Some("alice".into())
        ]
    );
}

#[test]
fn lookups_a_hurried_operator_writes_are_refused() {
    let base = r#"
        [auth]
        kind = "static_tokens"
        file = "tokens"
        [[route]]
        path = "/notes/mcp"
        upstream = "http://127.0.0.1:9000/mcp"
    "#;
    for (lookup, says) in [
        (
            LOOKUP.replace(
                "records = \"$.structuredContent.notes[*]\"",
                "records = \"notes.*\"",
            ),
            "JSONPath",
        ),
        (
            LOOKUP.replace("id = \"/id\"", "id = \"id\""),
            "JSON Pointer",
        ),
        (
            LOOKUP.replace("tool = \"notes_search\"", "tool = \"notes_delete\""),
            "its own records",
        ),
        (
            LOOKUP.replace("policy = \"confirm\"", "policy = \"allow\""),
            "only goes with",
        ),
        (
            LOOKUP.replace("select_into = \"id\"", "select_into = \"\""),
            "select_into",
        ),
        // Looked up again without the choice, the lookup would lack its argument.
        (
            LOOKUP.replace(
                "arguments = { query = \"/title\" }",
                "arguments = { query = \"/title\", id = \"/id\" }",
            ),
            "the argument the choice is written into",
        ),
        (
            LOOKUP.replace("label = \"/title\"", "label = []"),
            "label names no pointer",
        ),
        (
            LOOKUP.replace("label = \"/title\"", "label = [\"/title\", \"owner\"]"),
            "JSON Pointer",
        ),
    ] {
        let error = GatewayConfig::from_toml(&format!("{base}{lookup}"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}
