//! Upstreams that ask questions themselves, through the gateway: the user confirms once, the
//! upstream's own question is relayed with its state sealed inside the gateway's continuation,
//! and the answer reaches the upstream with the confirmed call and nothing else, once.

use crate::common;
use std::sync::{Arc, Mutex};

use crate::common::{ALICE, BOB, STATIC_TOKENS, call, retry};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// Every `tools/call` params the upstream received, and which of them ran.
#[derive(Clone, Default)]
struct Upstream {
    received: Arc<Mutex<Vec<Value>>>,
    ran: Arc<Mutex<Vec<Value>>>,
    /// The key the upstream asks under (default `sure`).
    key: Arc<Mutex<Option<String>>>,
}

async fn serve_upstream(
    State(up): State<Upstream>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> axum::response::Response {
    let message = body.0;
    let id = message["id"].clone();
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": [
            {"name": "notes_delete", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_ask", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
        ]}),
        Some("tools/call") => {
            let params = message["params"].clone();
            up.received.lock().unwrap().push(params.clone());
            let key = up.key.lock().unwrap().clone().unwrap_or("sure".into());
            match params["requestState"].as_str() {
                None if params["arguments"]["huge"] == true => {
                    up.ran.lock().unwrap().push(params["arguments"].clone());
                    json!({"resultType": "complete",
                        "content": [{"type": "text", "text": "x".repeat(9 * 1024 * 1024)}]})
                }
                None => json!({"resultType": "input_required",
                    "inputRequests": {key: {"method": "elicitation/create", "params": {
                        "mode": "form", "message": "Really?",
                        "requestedSchema": {"type": "object", "properties": {}}}}},
                    "requestState": "up-1"}),
                Some("up-1") if params["inputResponses"][&key]["action"] == "accept" => {
                    up.ran.lock().unwrap().push(params["arguments"].clone());
                    json!({"resultType": "complete",
                        "content": [{"type": "text", "text": "deleted"}]})
                }
                _ => json!({"resultType": "complete", "isError": true,
                    "content": [{"type": "text", "text": "not done"}]}),
            }
        }
        _ => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}}))
            .into_response();
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    if headers.contains_key("x-test-sse") {
        let text = format!(
            "event: message\ndata: {}\n\nid: 7\nevent: message\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}}),
            answer
        );
        return ([("content-type", "text/event-stream")], text).into_response();
    }
    axum::Json(answer).into_response()
}

struct Fixture {
    url: String,
    other_route: String,
    up: Upstream,
    client: common::Client,
}

async fn fixture() -> Fixture {
    fixture_keyed("").await.0
}

/// The fixture with `top` (keys) at the top of its file; the gateway and its file, to reload.
async fn fixture_keyed(top: &str) -> (Fixture, Gateway, std::path::PathBuf) {
    let up = Upstream::default();
    let upstream = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(up.clone()),
    )
    .await;
    let dir = common::temp_dir("relay");
    std::fs::write(dir.join("k1"), KEY_1).unwrap();
    std::fs::write(dir.join("k2"), KEY_2).unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\n{top}\n{STATIC_TOKENS}\n\
         [[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream}\"\n\
         [[route]]\npath = \"/other/mcp\"\nupstream = \"{upstream}\"\n"
    );
    let gateway = common::build(&dir, &text).unwrap();
    let (listener, addr) = common::bind().await;
    common::serve(&gateway, listener);
    let fixture = Fixture {
        url: format!("http://{addr}/notes/mcp"),
        other_route: format!("http://{addr}/other/mcp"),
        up,
        client: common::client(),
    };
    (fixture, gateway, dir)
}

const KEY_1: &str = "9f2c4e81a7d35b06c8e1f49a2b7d60e3514c8a9f0e2d7b36a18c5f4e9d02b7a6";
const KEY_2: &str = "31d8a6f0c2e94b7d58a1e3f6092c7b4d8e5a1f3c6b0d9e2a74c18f5b3e6d0a92";

impl Fixture {
    async fn post_to(&self, url: &str, token: &str, body: &Value, sse: bool) -> Value {
        if !sse {
            return common::post_call(&self.client, url, Some(token), body, &[]).await;
        }
        let request = http::Request::post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", body["params"]["name"].as_str().unwrap_or(""))
            .header("authorization", format!("Bearer {token}"))
            .header("x-test-sse", "1");
        let (_, headers, text) = common::send(&self.client, request, body.to_string()).await;
        let is_sse = headers
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        if is_sse {
            // The answer is the last event's data; the progress event must have come through.
            assert!(text.contains("notifications/progress"), "{text}");
            let last = text
                .split("\n\n")
                .filter(|e| e.contains("data:"))
                .last()
                .unwrap();
            let data = last.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            return serde_json::from_str(data).unwrap();
        }
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn post(&self, body: &Value) -> Value {
        self.post_to(&self.url, ALICE, body, false).await
    }

    /// Asks, accepts the gateway's own form, and returns the relayed upstream question.
    async fn confirmed(&self, first: &Value, sse: bool) -> Value {
        let asked = self.post(first).await;
        assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
        let keys: Vec<&String> = asked["result"]["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["mcp-confirm-gateway/confirmation"]);
        let accepted = retry(
            first,
            2,
            &asked["result"]["requestState"],
            json!({"mcp-confirm-gateway/confirmation":
                {"action": "accept", "content": {"confirm": true}}}),
        );
        self.post_to(&self.url, ALICE, &accepted, sse).await
    }
}

fn answer_sure() -> Value {
    json!({"sure": {"action": "accept", "content": {}}})
}

#[tokio::test]
async fn the_upstreams_question_is_relayed_and_its_answer_runs_the_confirmed_call_once() {
    for sse in [false, true] {
        let f = fixture().await;
        let first = call(1, "notes_delete", json!({"title": "Groceries"}));
        let relayed = f.confirmed(&first, sse).await;
        // The upstream's own question, under its own key; its state sealed in ours.
        assert_eq!(
            relayed["result"]["resultType"], "input_required",
            "{relayed}"
        );
        assert!(relayed["result"]["inputRequests"]["sure"].is_object());
        let state = relayed["result"]["requestState"].as_str().unwrap();
        // The core's token format (a sealed value under the gateway's ring), not a format of
        // the gateway's own (#52, 8).
        assert!(state.starts_with("mcpc1."), "{state}");
        assert!(f.up.ran.lock().unwrap().is_empty());
        // The client answers it (and leaves the gateway's old answer in, as a sloppy client
        // might): not asked to confirm again; the upstream gets its state and its answer only.
        let mut responses = answer_sure();
        responses["mcp-confirm-gateway/confirmation"] =
            json!({"action": "accept", "content": {"confirm": true}});
        let done = f
            .post(&retry(
                &first,
                3,
                &relayed["result"]["requestState"],
                responses,
            ))
            .await;
        assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
        assert_eq!(*f.up.ran.lock().unwrap(), [json!({"title": "Groceries"})]);
        let last = f.up.received.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last["requestState"], "up-1");
        assert_eq!(last["inputResponses"], answer_sure());
        // The same continuation again: refused, the upstream not reached.
        let received = f.up.received.lock().unwrap().len();
        let again = f
            .post(&retry(
                &first,
                4,
                &relayed["result"]["requestState"],
                answer_sure(),
            ))
            .await;
        assert_eq!(again["error"]["message"], "Invalid or expired requestState");
        assert_eq!(f.up.received.lock().unwrap().len(), received);
        assert_eq!(f.up.ran.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_continuation_authorizes_exactly_its_call_and_nothing_else() {
    let f = fixture().await;
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let relayed = f.confirmed(&first, false).await;
    let state = relayed["result"]["requestState"].clone();
    let before = f.up.received.lock().unwrap().len();
    let invalid = |v: &Value| v["error"]["message"] == "Invalid or expired requestState";
    // Other arguments.
    let other_args = retry(
        &call(1, "notes_delete", json!({"title": "Taxes"})),
        5,
        &state,
        answer_sure(),
    );
    assert!(invalid(&f.post(&other_args).await));
    // Another tool (one the gateway passes: the continuation still may not carry it).
    let other_tool = retry(
        &call(1, "notes_ask", json!({"title": "Groceries"})),
        6,
        &state,
        answer_sure(),
    );
    assert!(invalid(&f.post(&other_tool).await));
    // Another principal.
    let as_bob = f
        .post_to(&f.url, BOB, &retry(&first, 7, &state, answer_sure()), false)
        .await;
    assert!(invalid(&as_bob), "{as_bob}");
    // Another route to the same upstream.
    let other_route = f
        .post_to(
            &f.other_route,
            ALICE,
            &retry(&first, 8, &state, answer_sure()),
            false,
        )
        .await;
    assert!(invalid(&other_route), "{other_route}");
    // Tampered: the upstream state inside changed.
    let text = state.as_str().unwrap();
    let body = &text["mcpc1.".len()..];
    let mut forged_body = body.to_owned();
    let at = body.len() / 2;
    forged_body.replace_range(at..at + 1, if &body[at..at + 1] == "A" { "B" } else { "A" });
    let forged = json!(format!("mcpc1.{forged_body}"));
    assert!(invalid(
        &f.post(&retry(&first, 9, &forged, answer_sure())).await
    ));
    // The upstream's own state sent bare, past the gateway's: the layer refuses it.
    let bare = f
        .post(&retry(&first, 10, &json!("up-1"), answer_sure()))
        .await;
    assert!(bare.get("error").is_some(), "{bare}");
    assert_eq!(
        f.up.received.lock().unwrap().len(),
        before,
        "none reached the upstream"
    );
    assert!(f.up.ran.lock().unwrap().is_empty());
    // And the genuine continuation still works after all that.
    let done = f.post(&retry(&first, 11, &state, answer_sure())).await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
}

#[tokio::test]
async fn a_question_under_the_gateways_own_namespace_is_not_relayed() {
    let f = fixture().await;
    *f.up.key.lock().unwrap() = Some("mcp-confirm-gateway/confirmation".into());
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let relayed = f.confirmed(&first, false).await;
    assert_eq!(
        relayed["error"]["message"], "The upstream server's question cannot be relayed.",
        "{relayed}"
    );
    assert!(f.up.ran.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_passed_tools_question_goes_through_as_the_upstream_wrote_it() {
    let f = fixture().await;
    let first = call(1, "notes_ask", json!({}));
    let asked = f.post(&first).await;
    assert_eq!(asked["result"]["requestState"], "up-1", "{asked}");
    let done = f
        .post(&retry(&first, 2, &json!("up-1"), answer_sure()))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
}

#[tokio::test]
async fn a_confirmed_calls_large_answer_passes_whole() {
    // Larger than any question is read whole: it is the answer of a call that ran, and goes on
    // as it came.
    let f = fixture().await;
    let first = call(1, "notes_delete", json!({"huge": true}));
    let done = f.confirmed(&first, false).await;
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(
        done["result"]["content"][0]["text"].as_str().map(str::len),
        Some(9 * 1024 * 1024)
    );
    assert_eq!(f.up.ran.lock().unwrap().len(), 1);
}

/// A key rotation while an upstream question is open (#52, 8): the continuation was sealed
/// under the ring's first key; with `[k2, k1]` in force it still opens, and runs the call once.
/// (Continuations were keyed from the first key only, so a rotation broke every open one.)
/// Once `k1` is gone, it is refused like any state.
#[tokio::test]
async fn a_rotation_keeps_open_continuations_until_their_key_is_removed() {
    let one = r#"keys = [{ id = "k1", value = { file = "k1" } }]"#;
    let both = r#"keys = [{ id = "k2", value = { file = "k2" } }, { id = "k1", value = { file = "k1" } }]"#;
    let only_new = r#"keys = [{ id = "k2", value = { file = "k2" } }]"#;
    let (f, gateway, dir) = fixture_keyed(one).await;
    let reload = |top: &str| {
        let path = dir.join("gateway.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let (_, rest) = text.split_once("\n").unwrap();
        let (_, rest) = rest.split_once("\n").unwrap();
        std::fs::write(&path, format!("listen = \"127.0.0.1:0\"\n{top}\n{rest}")).unwrap();
        gateway
            .reload(&GatewayConfig::load(&path).unwrap(), &dir)
            .unwrap();
    };
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let relayed = f.confirmed(&first, false).await;
    let second = call(5, "notes_delete", json!({"title": "Standup"}));
    let relayed_too = f.confirmed(&second, false).await;
    reload(both);
    let done = f
        .post(&retry(
            &first,
            3,
            &relayed["result"]["requestState"],
            answer_sure(),
        ))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    reload(only_new);
    let refused = f
        .post(&retry(
            &second,
            6,
            &relayed_too["result"]["requestState"],
            answer_sure(),
        ))
        .await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert_eq!(*f.up.ran.lock().unwrap(), [json!({"title": "Groceries"})]);
}
