//! The gateway in front of an upstream that asks nothing itself: what reaches the upstream,
//! and when. The upstream here is a small 2026-07-28 server with no confirmation of its own; it
//! records every call it receives and the headers it came with.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// What the upstream saw: each `tools/call`'s tool and arguments, with its headers.
#[derive(Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<Vec<(String, Value, HeaderMap)>>>);

impl Seen {
    pub(crate) fn calls(&self) -> Vec<(String, Value)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(t, a, _)| (t.clone(), a.clone()))
            .collect()
    }
    fn headers(&self) -> Vec<HeaderMap> {
        self.0.lock().unwrap().iter().map(|c| c.2.clone()).collect()
    }
}

fn tools() -> Value {
    json!([
        {"name": "notes_list", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": true}},
        {"name": "notes_delete", "inputSchema": {"type": "object",
            "properties": {"title": {"type": "string"}}},
         "annotations": {"destructiveHint": true}},
        {"name": "notes_touch", "inputSchema": {"type": "object"}},
        {"name": "notes_purge", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": true}},
    ])
}

async fn upstream_mcp(
    State(seen): State<Seen>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let sse = headers.contains_key("x-test-sse");
    let answer = upstream_answer(seen, headers, body.0);
    if sse {
        // A progress notification, then the result, as an event stream.
        let text = format!(
            "event: message\ndata: {}\n\nevent: message\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}}),
            answer.0
        );
        return ([("content-type", "text/event-stream")], text).into_response();
    }
    answer.into_response()
}

fn upstream_answer(seen: Seen, headers: HeaderMap, message: Value) -> axum::Json<Value> {
    let id = message["id"].clone();
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": tools(),
            "ttlMs": 60_000, "cacheScope": "public"}),
        Some("tools/call") => {
            let name = message["params"]["name"].as_str().unwrap_or("").to_owned();
            seen.0.lock().unwrap().push((
                name.clone(),
                message["params"]["arguments"].clone(),
                headers,
            ));
            json!({"resultType": "complete",
                "content": [{"type": "text", "text": format!("{name} ran")}]})
        }
        _ => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}}));
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// An upstream on a free port; its URL and what it sees. (The two-gateway tests share it.)
pub(crate) async fn upstream() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/mcp", post(upstream_mcp))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), seen)
}

use crate::common::{ALICE, redis_up};

struct Fixture {
    url: String,
    seen: Seen,
    client: reqwest_like::Client,
    _dir: std::path::PathBuf,
    /// The gateway serving, and its file.
    gateway: Option<(Gateway, std::path::PathBuf)>,
}

/// A gateway on a free port in front of `upstream_url`, the operator's entries in `tools`.
async fn gateway_for(upstream_url: &str, seen: Seen, tools: &str) -> Fixture {
    gateway_with(upstream_url, seen, tools, "").await
}

/// As [`gateway_for`], with `more` (further routes) at the end of the file.
async fn gateway_with(upstream_url: &str, seen: Seen, tools: &str, more: &str) -> Fixture {
    gateway_full(upstream_url, seen, "", tools, more).await
}

/// As [`gateway_with`], with `top` (keys, store) at the top of the file.
async fn gateway_full(
    upstream_url: &str,
    seen: Seen,
    top: &str,
    tools: &str,
    more: &str,
) -> Fixture {
    let dir = std::env::temp_dir().join(format!(
        "gateway-test-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\n")).unwrap();
    std::fs::write(dir.join("upstream-token"), "operator-secret\n").unwrap();
    std::fs::write(
        dir.join("key"),
        "46c240e4d0c11b5a48d250f10a96b4d63b9d4f64b2faf7ea559c2627e90750cd",
    )
    .unwrap();
    std::fs::write(dir.join("redis-url"), crate::common::redis_url()).unwrap();
    let text = format!(
        r#"
        listen = "127.0.0.1:0"
        {top}
        [auth]
        kind = "static_tokens"
        file = "tokens"

        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream_url}"
        upstream_header = {{ name = "authorization", value = {{ file = "upstream-token" }} }}
        {tools}
        {more}
        "#
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    let config = GatewayConfig::load(&path).unwrap();
    let gateway = Gateway::build(&config, &dir).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gateway.clone().serve(listener));
    Fixture {
        url: format!("http://{addr}/notes/mcp"),
        seen,
        client: reqwest_like::Client::new(),
        gateway: Some((gateway, path)),
        _dir: dir,
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
           "io.modelcontextprotocol/clientInfo": {"name": "test-client", "version": "1"}})
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"_meta": meta(), "name": tool, "arguments": arguments}})
}

impl Fixture {
    async fn post(&self, token: Option<&str>, body: &Value) -> (u16, Value, HeaderMap) {
        self.post_with(token, body, &[]).await
    }

    async fn post_with(
        &self,
        token: Option<&str>,
        body: &Value,
        extra: &[(&'static str, String)],
    ) -> (u16, Value, HeaderMap) {
        let tool = body["params"]["name"].as_str();
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            (
                "mcp-method",
                body["method"].as_str().unwrap_or("").to_owned(),
            ),
        ];
        if let Some(tool) = tool {
            headers.push(("mcp-name", tool.to_owned()));
        }
        if let Some(token) = token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        headers.extend(extra.iter().cloned());
        self.client
            .post(&self.url, &headers, body.to_string())
            .await
    }

    async fn alice(&self, body: &Value) -> Value {
        let (status, json, _) = self.post(Some(ALICE), body).await;
        assert!(status == 200 || status == 400, "{status} {json}");
        json
    }
}

/// The key the form's answer goes under, and the `requestState`, from an `input_required` result.
fn asked(result: &Value) -> (String, String) {
    assert_eq!(result["result"]["resultType"], "input_required", "{result}");
    let requests = result["result"]["inputRequests"].as_object().unwrap();
    let key = requests.keys().next().unwrap().clone();
    let state = result["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    (key, state)
}

/// The form accepted: the yes/no form's one field, `confirm`, true.
fn accept() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

fn answer(mut first: Value, id: i64, key: &str, state: &str, response: Value) -> Value {
    first["id"] = json!(id);
    first["params"]["requestState"] = json!(state);
    first["params"]["inputResponses"] = json!({ key: response });
    first
}

#[tokio::test]
async fn a_destructive_call_reaches_the_upstream_only_after_acceptance() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let asked_for = f.alice(&first).await;
    let (key, state) = asked(&asked_for);
    assert!(f.seen.calls().is_empty(), "nothing ran before the answer");
    // Declined: nothing runs.
    let declined = f
        .alice(&answer(
            first.clone(),
            2,
            &key,
            &state,
            json!({"action": "decline"}),
        ))
        .await;
    assert!(f.seen.calls().is_empty(), "{declined}");
    // A new question, accepted: the call runs once, with its arguments.
    let asked_again = f
        .alice(&call(3, "notes_delete", json!({"title": "Groceries"})))
        .await;
    let (key, state) = asked(&asked_again);
    let accepted = f
        .alice(&answer(first.clone(), 4, &key, &state, accept()))
        .await;
    assert_eq!(
        accepted["result"]["content"][0]["text"], "notes_delete ran",
        "{accepted}"
    );
    assert_eq!(
        f.seen.calls(),
        [("notes_delete".to_owned(), json!({"title": "Groceries"}))]
    );
    // The same answer again: not a second run.
    let replayed = f.alice(&answer(first, 5, &key, &state, accept())).await;
    assert!(replayed.get("error").is_some(), "{replayed}");
    assert_eq!(f.seen.calls().len(), 1);
}

#[tokio::test]
async fn the_same_upstream_reached_directly_runs_the_first_call() {
    // The difference the gateway makes: without it, the first call deletes.
    let (url, seen) = upstream().await;
    let client = reqwest_like::Client::new();
    let (status, body, _) = client
        .post(
            &url,
            &[("content-type", "application/json".to_owned())],
            call(1, "notes_delete", json!({"title": "Groceries"})).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(seen.calls().len(), 1);
}

#[tokio::test]
async fn read_only_tools_pass_and_unannotated_ones_are_confirmed() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let listed = f.alice(&call(1, "notes_list", json!({}))).await;
    assert_eq!(
        listed["result"]["content"][0]["text"], "notes_list ran",
        "{listed}"
    );
    let touched = f.alice(&call(2, "notes_touch", json!({}))).await;
    asked(&touched);
    assert_eq!(f.seen.calls().len(), 1, "only notes_list ran");
}

#[tokio::test]
async fn the_operator_wins_over_the_annotations() {
    let (url, seen) = upstream().await;
    let f = gateway_for(
        &url,
        seen,
        r#"
        [route.tools.notes_purge]
        policy = "deny"
        [route.tools.notes_list]
        policy = "confirm"
        message = "List the notes?"
        [route.tools.notes_delete]
        policy = "allow"
        "#,
    )
    .await;
    let purged = f.alice(&call(1, "notes_purge", json!({}))).await;
    assert_eq!(
        purged["error"]["message"], "This tool is not available through this gateway.",
        "{purged}"
    );
    let listed = f.alice(&call(2, "notes_list", json!({}))).await;
    let (key, _) = asked(&listed);
    assert_eq!(
        listed["result"]["inputRequests"][key.as_str()]["params"]["message"]
            .as_str()
            .map(|m| m.starts_with("List the notes?")),
        Some(true),
        "{listed}"
    );
    let deleted = f
        .alice(&call(3, "notes_delete", json!({"title": "x"})))
        .await;
    assert_eq!(
        deleted["result"]["content"][0]["text"], "notes_delete ran",
        "{deleted}"
    );
    assert_eq!(f.seen.calls().len(), 1, "only the allowed delete ran");
}

#[tokio::test]
async fn an_event_stream_answer_passes_through_as_it_came() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let (status, _, headers) = f
        .post_with(
            Some(ALICE),
            &call(1, "notes_list", json!({})),
            &[("x-test-sse", "1".to_owned())],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("content-type").unwrap(), "text/event-stream");
    let text = f.client.last_text();
    assert!(
        text.contains("notifications/progress") && text.contains("notes_list ran"),
        "{text}"
    );
    assert!(
        text.find("notifications/progress") < text.find("notes_list ran"),
        "in order: {text}"
    );
}

#[tokio::test]
async fn a_destructive_tool_the_operator_denies_never_runs() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "[route.tools.notes_delete]\npolicy = \"deny\"").await;
    let refused = f
        .alice(&call(1, "notes_delete", json!({"title": "x"})))
        .await;
    assert_eq!(
        refused["error"]["message"], "This tool is not available through this gateway.",
        "{refused}"
    );
    assert!(f.seen.calls().is_empty());
}

#[tokio::test]
async fn callers_must_sign_in_and_their_token_never_reaches_the_upstream() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let (status, _, headers) = f.post(None, &call(1, "notes_list", json!({}))).await;
    assert_eq!(status, 401);
    assert_eq!(headers.get("www-authenticate").unwrap(), "Bearer");
    let (status, _, _) = f
        .post(
            Some("someone-else-0123456789"),
            &call(1, "notes_list", json!({})),
        )
        .await;
    assert_eq!(status, 401);
    assert!(f.seen.calls().is_empty());
    f.alice(&call(2, "notes_list", json!({}))).await;
    let upstream_saw = f.seen.headers();
    assert_eq!(upstream_saw.len(), 1);
    assert_eq!(
        upstream_saw[0].get("authorization").unwrap(),
        "operator-secret",
        "the operator's credential, not alice's"
    );
    assert_eq!(
        upstream_saw[0].get("mcp-protocol-version").unwrap(),
        "2026-07-28"
    );
    assert_eq!(upstream_saw[0].get("mcp-name").unwrap(), "notes_list");
}

#[tokio::test]
async fn an_upstream_that_cannot_be_listed_gets_no_call() {
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let f = gateway_for(&url, Seen::default(), "").await;
    let (status, refused, _) = f.post(Some(ALICE), &call(1, "notes_list", json!({}))).await;
    assert_eq!(status, 502);
    assert_eq!(
        refused["error"]["message"],
        "The upstream server's tools cannot be listed; no call is forwarded.",
        "{refused}"
    );
}

#[tokio::test]
async fn an_upstream_that_never_answers_its_list_gets_no_call() {
    // It accepts the connection and reads, then says nothing: the gateway stops waiting (its
    // list timeout) and refuses, rather than hanging the caller or forwarding unjudged.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = std::sync::Arc::clone(&held);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            keep.lock().unwrap().push(stream);
        }
    });
    let f = gateway_for(&url, Seen::default(), "").await;
    let (status, refused, _) = f
        .post(Some(ALICE), &call(1, "notes_delete", json!({})))
        .await;
    assert_eq!(status, 502, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "The upstream server's tools cannot be listed; no call is forwarded."
    );
    assert!(!held.lock().unwrap().is_empty(), "the upstream was reached");
}

#[tokio::test]
async fn a_tool_the_upstream_does_not_list_is_refused() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let unknown = f.alice(&call(1, "notes_secret", json!({}))).await;
    assert!(unknown.get("error").is_some(), "{unknown}");
    assert!(f.seen.calls().is_empty());
}

#[tokio::test]
async fn a_confirmation_asked_on_one_route_is_none_on_another() {
    let (url_a, seen_a) = upstream().await;
    let (url_b, seen_b) = upstream().await;
    let f = gateway_with(
        &url_a,
        seen_a,
        "",
        &format!("[[route]]\npath = \"/other/mcp\"\nupstream = \"{url_b}\"\n"),
    )
    .await;
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let (key, state) = asked(&f.alice(&first).await);
    // The same tool name and arguments on the other route, with route A's state.
    let other = Fixture {
        url: f.url.replace("/notes/mcp", "/other/mcp"),
        seen: seen_b.clone(),
        client: reqwest_like::Client::new(),
        _dir: std::env::temp_dir(),
        gateway: None,
    };
    let crossed = other.alice(&answer(first, 2, &key, &state, accept())).await;
    assert!(crossed.get("error").is_some(), "{crossed}");
    assert!(
        seen_b.calls().is_empty(),
        "nothing ran on the other upstream"
    );
    assert!(f.seen.calls().is_empty());
}

#[tokio::test]
async fn a_header_that_names_another_tool_is_refused() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    // The header says the read-only tool, the body the destructive one.
    let body = call(1, "notes_delete", json!({"title": "x"}));
    let (_, answer, _) = f
        .post_with(Some(ALICE), &body, &[("mcp-name", "notes_list".to_owned())])
        .await;
    assert!(answer.get("error").is_some(), "{answer}");
    assert!(f.seen.calls().is_empty());
}

#[tokio::test]
async fn hop_by_hop_headers_and_credentials_do_not_cross() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    f.post_with(
        Some(ALICE),
        &call(1, "notes_list", json!({})),
        &[
            ("connection", "x-internal".to_owned()),
            ("x-internal", "secret".to_owned()),
            ("proxy-authorization", "Basic cHJveHk6cHJveHk=".to_owned()),
            ("cookie", "session=alice".to_owned()),
            ("x-kept", "yes".to_owned()),
        ],
    )
    .await;
    let upstream_saw = f.seen.headers();
    assert_eq!(upstream_saw.len(), 1);
    let h = &upstream_saw[0];
    for gone in ["x-internal", "proxy-authorization", "cookie"] {
        assert!(h.get(gone).is_none(), "{gone} crossed: {h:?}");
    }
    assert_eq!(h.get("x-kept").unwrap(), "yes");
}

#[tokio::test]
async fn an_upstream_whose_list_is_too_large_gets_no_call() {
    // A list of more than 4 MiB: not read to the end, not trusted.
    let app = Router::new().route(
        "/mcp",
        post(|body: axum::Json<Value>| async move {
            let padding = "x".repeat(5 * 1024 * 1024);
            axum::Json(json!({"jsonrpc": "2.0", "id": body.0["id"], "result": {
                "resultType": "complete", "tools": [
                    {"name": "notes_list", "description": padding,
                     "annotations": {"readOnlyHint": true}}]}}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let f = gateway_for(&format!("http://{addr}/mcp"), Seen::default(), "").await;
    let (status, refused, _) = f.post(Some(ALICE), &call(1, "notes_list", json!({}))).await;
    assert_eq!(status, 502, "{refused}");
}

#[tokio::test]
async fn an_upstream_that_lies_about_a_tool_gets_the_tool_it_listed_confirmed() {
    // The list says notes_wipe is read-only; the operator does not trust that and confirms it.
    let (url, seen) = upstream().await;
    let f = gateway_for(
        &url,
        seen,
        "[route.tools.notes_purge]\npolicy = \"confirm\"",
    )
    .await;
    asked(&f.alice(&call(1, "notes_purge", json!({}))).await);
    assert!(f.seen.calls().is_empty());
}

#[tokio::test]
async fn a_changed_file_is_reloaded_and_a_bad_one_refused() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let (gateway, path) = f.gateway.clone().unwrap();
    let dir = path.parent().unwrap().to_path_buf();
    gateway.watch(path.clone(), dir);
    // Before: notes_list passes, and a delete is confirmed and run.
    f.alice(&call(1, "notes_list", json!({}))).await;
    let first = call(2, "notes_delete", json!({"title": "Groceries"}));
    let (key, state) = asked(&f.alice(&first).await);
    let accept = accept();
    f.alice(&answer(first.clone(), 3, &key, &state, accept.clone()))
        .await;
    assert_eq!(f.seen.calls().len(), 2);
    // A confirmation asked before the reload and answered after it.
    let pending = call(20, "notes_delete", json!({"title": "Standup"}));
    let (pending_key, pending_state) = asked(&f.alice(&pending).await);
    // The operator denies notes_list: in force within a few seconds, without a restart.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n[route.tools.notes_list]\npolicy = \"deny\"\n"),
    )
    .unwrap();
    let mut denied = false;
    for _ in 0..50 {
        let answer = f.alice(&call(4, "notes_list", json!({}))).await;
        if answer["error"]["message"] == "This tool is not available through this gateway." {
            denied = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(denied, "the change never took effect");
    // The store and the key were kept: the answer already used is still used, and the one
    // asked before the reload runs after it.
    let replayed = f
        .alice(&answer(first, 5, &key, &state, accept.clone()))
        .await;
    assert!(replayed.get("error").is_some(), "{replayed}");
    let ran = f
        .alice(&answer(pending, 21, &pending_key, &pending_state, accept))
        .await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    let ran_when_denied = f.seen.calls().len();
    // A file that does not validate is refused; the one in force stays.
    std::fs::write(&path, "this is not = [valid").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let still = f.alice(&call(6, "notes_list", json!({}))).await;
    assert_eq!(
        still["error"]["message"], "This tool is not available through this gateway.",
        "{still}"
    );
    assert_eq!(
        f.seen.calls().len(),
        ran_when_denied,
        "nothing ran once it was denied"
    );
    let deletes = f
        .seen
        .calls()
        .into_iter()
        .filter(|c| c.0 == "notes_delete")
        .count();
    assert_eq!(deletes, 2, "the replay did not run, the pending one did");
}

#[tokio::test]
async fn a_token_removed_from_the_tokens_file_stops_working_without_touching_the_configuration() {
    // #52, finding 7a: the tokens file was read only with the configuration, so a token removed
    // from it kept working until the configuration file itself changed.
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let (gateway, path) = f.gateway.clone().unwrap();
    let dir = path.parent().unwrap().to_path_buf();
    let tokens = dir.join("tokens");
    let bob = "bob-token-0123456789";
    std::fs::write(&tokens, format!("alice {ALICE}\nbob {bob}\n")).unwrap();
    gateway
        .reload(&GatewayConfig::load(&path).unwrap(), &dir)
        .unwrap();
    let config_before = std::fs::read(&path).unwrap();
    gateway.watch(path.clone(), dir);
    let list = call(1, "notes_list", json!({}));
    assert_eq!(f.post(Some(bob), &list).await.0, 200);
    // Bob's line goes; the configuration file is not touched.
    std::fs::write(&tokens, format!("alice {ALICE}\n")).unwrap();
    let status_within = |token: &'static str, want: u16| {
        let f = &f;
        let list = list.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let status = f.post(Some(token), &list).await.0;
                if status == want || std::time::Instant::now() > deadline {
                    return status;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(
        status_within(bob, 401).await,
        401,
        "bob's token still works"
    );
    assert_eq!(
        f.post(Some(ALICE), &list).await.0,
        200,
        "alice's still does"
    );
    // The last token removed: no one, rather than the file refused and every token kept.
    std::fs::write(&tokens, "# no one\n").unwrap();
    assert_eq!(
        status_within(ALICE, 401).await,
        401,
        "alice's token still works"
    );
    assert_eq!(std::fs::read(&path).unwrap(), config_before);
}

#[tokio::test]
async fn a_name_the_upstream_lists_twice_is_refused_and_the_others_served() {
    // #52, finding 7c: one name listed twice made the whole list unenforceable, and every tool
    // of the route was refused. Here `notes_purge` is listed read-only, then again without
    // annotations: which one a client saw is not known, so it is refused, and only it.
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/mcp",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: axum::Json<Value>| async move {
                    if body.0["method"] == "tools/list" {
                        let mut tools = tools();
                        tools.as_array_mut().unwrap().push(
                            json!({"name": "notes_purge", "inputSchema": {"type": "object"}}),
                        );
                        return axum::Json(json!({"jsonrpc": "2.0", "id": body.0["id"],
                            "result": {"resultType": "complete", "tools": tools,
                                "ttlMs": 60_000}}));
                    }
                    upstream_answer(seen, headers, body.0)
                },
            ),
        )
        .with_state(seen.clone());
    let url = crate::common::serve_upstream(app).await;
    let f = gateway_for(&url, seen, "").await;
    let refused = f.alice(&call(1, "notes_purge", json!({}))).await;
    assert_eq!(
        refused["error"]["message"], "This tool is not available through this gateway.",
        "{refused}"
    );
    // The others: a read-only one passes, a destructive one is confirmed, then runs.
    let listed = f.alice(&call(2, "notes_list", json!({}))).await;
    assert_eq!(
        listed["result"]["content"][0]["text"], "notes_list ran",
        "{listed}"
    );
    let first = call(3, "notes_delete", json!({"title": "Groceries"}));
    let (key, state) = asked(&f.alice(&first).await);
    let ran = f.alice(&answer(first, 4, &key, &state, accept())).await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    let tools: Vec<String> = f.seen.calls().into_iter().map(|c| c.0).collect();
    assert_eq!(tools, ["notes_list", "notes_delete"]);
}

#[tokio::test]
async fn two_gateways_sharing_redis_run_a_confirmation_once() {
    if !redis_up() {
        return;
    }
    let (url, seen) = upstream().await;
    let top =
        "key = { file = \"key\" }\nstore = { kind = \"redis\", url = { file = \"redis-url\" } }";
    let one = gateway_full(&url, seen.clone(), top, "", "").await;
    let two = gateway_full(&url, seen.clone(), top, "", "").await;
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let (key, state) = asked(&one.alice(&first).await);
    let accept = accept();
    // Asked on one, answered on the other (a round-robin): it runs.
    let ran = two
        .alice(&answer(first.clone(), 2, &key, &state, accept.clone()))
        .await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    // The same answer on the first: claimed already, in the store they share.
    let again = one.alice(&answer(first, 3, &key, &state, accept)).await;
    assert!(again.get("error").is_some(), "{again}");
    assert_eq!(seen.calls().len(), 1);
}

/// A minimal HTTP/1.1 client over hyper, for the tests.
#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_before_anything_else() {
    // DNS rebinding: a page on evil.example whose name now resolves to the gateway. The
    // upstream never sees the caller's Host, so the gateway is the only place to refuse it.
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let list = call(1, "notes_list", json!({}));
    for (name, value) in [
        ("host", "evil.example"),
        ("host", "evil.example:80"),
        ("origin", "http://evil.example"),
        ("origin", "null"),
    ] {
        let (status, _, _) = f
            .post_with(Some(ALICE), &list, &[(name, value.to_owned())])
            .await;
        assert_eq!(status, 403, "{name}: {value}");
    }
    assert!(f.seen.calls().is_empty());
    // The loopback names the gateway listens on, and its own origin, pass.
    let port = f.url.split(':').nth(2).unwrap().split('/').next().unwrap();
    for (name, value) in [
        ("host", format!("localhost:{port}")),
        ("origin", format!("http://127.0.0.1:{port}")),
    ] {
        let (status, body, _) = f
            .post_with(Some(ALICE), &list, &[(name, value.clone())])
            .await;
        assert_eq!(status, 200, "{name}: {value}: {body}");
    }
}

mod reqwest_like {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client as Hyper;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    pub struct Client(Hyper<HttpConnector, Full<Bytes>>, std::sync::Mutex<String>);

    impl Client {
        pub fn new() -> Self {
            Self(
                Hyper::builder(TokioExecutor::new()).build_http(),
                std::sync::Mutex::default(),
            )
        }

        /// The last answer's body as text.
        pub fn last_text(&self) -> String {
            self.1.lock().unwrap().clone()
        }

        pub async fn post(
            &self,
            url: &str,
            headers: &[(&str, String)],
            body: String,
        ) -> (u16, serde_json::Value, axum::http::HeaderMap) {
            let mut request = http::Request::post(url);
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            let response = self
                .0
                .request(request.body(Full::new(Bytes::from(body))).unwrap())
                .await
                .unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            *self.1.lock().unwrap() = String::from_utf8_lossy(&bytes).into_owned();
            let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            (status, json, headers)
        }
    }
}

/// The operator allows a tool while its form is open (#52, 1). The client's retry carries the
/// gateway's state and the user's answer to an upstream that ignores both and runs whatever
/// reaches it: a decline or a cancel must still run nothing, and an acceptance asks to call
/// again (the new policy then lets the call through). The gateway's keys never reach it.
#[tokio::test]
async fn an_answer_to_a_form_of_a_tool_allowed_since_never_reaches_the_upstream() {
    let (url, seen) = upstream().await;
    let f = gateway_for(&url, seen, "").await;
    let (gateway, path) = f.gateway.clone().unwrap();
    let dir = path.parent().unwrap().to_path_buf();
    let responses = [
        json!({"action": "decline"}),
        json!({"action": "cancel"}),
        accept(),
    ];
    let mut open = Vec::new();
    for (i, _) in responses.iter().enumerate() {
        let first = call(10 + i as i64, "notes_delete", json!({"title": "Groceries"}));
        let (key, state) = asked(&f.alice(&first).await);
        open.push((first, key, state));
    }
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n[route.tools.notes_delete]\npolicy = \"allow\"\n"),
    )
    .unwrap();
    gateway
        .reload(&GatewayConfig::load(&path).unwrap(), &dir)
        .unwrap();
    let mut outcomes = Vec::new();
    for (i, ((first, key, state), response)) in open.into_iter().zip(responses).enumerate() {
        let answered = f
            .alice(&answer(first, 20 + i as i64, &key, &state, response))
            .await;
        outcomes.push(answered["result"]["_meta"]["io.github.mcp-confirm/outcome"].clone());
    }
    assert_eq!(
        outcomes,
        [
            json!("declined"),
            json!("cancelled"),
            json!("policy_changed")
        ]
    );
    assert!(f.seen.calls().is_empty(), "an answer reached the upstream");
    // Called again, the tool is the new policy's: it runs.
    let ran = f
        .alice(&call(30, "notes_delete", json!({"title": "Groceries"})))
        .await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    assert_eq!(f.seen.calls().len(), 1);
}
