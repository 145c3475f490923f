//! The HTTP face of the layer, end to end over an in-process inner service.

use std::time::Duration;

use crate::common::*;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use mcp_confirm::store::{
    Claim, ClaimRequest, MemoryReplayStore, Nonce, Owner, PrincipalKey, ReplayStore,
};
use mcp_confirm::{KeyRing, Principal};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Pass-through

#[tokio::test]
async fn untouched_traffic_passes_byte_for_byte_with_its_headers() {
    let f = fixture();
    let body = "{ \"jsonrpc\" : \"2.0\",\"id\":9,  \"method\":\"tools/call\",\"params\":{\"_meta\":{},\"name\":\"notes_list\",\"arguments\":{\"z\":1,\"a\":2}} }\n";
    let mut req = post_raw(body.as_bytes().to_vec(), Some("alice"), None);
    req.headers_mut()
        .insert("x-custom", "kept".parse().unwrap());
    let answer = send(&f.svc, req).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["x-inner"], "yes");
    assert_ran(&answer);
    let seen = f.seen.last();
    assert_eq!(seen.body, Bytes::from(body));
    assert_eq!(seen.headers["x-custom"], "kept");
    assert!(seen.confirmed.is_none());
    // Other methods too, whatever their params say.
    let list = json!({"jsonrpc":"2.0","id":"x","method":"tools/list","params":{"_meta":meta(),"name":"notes_delete"}});
    let answer = send(&f.svc, post(&list, None)).await;
    assert_eq!(answer.json()["id"], "x");
    assert_eq!(f.seen.count(), 2);
}

#[tokio::test]
async fn notifications_pass_through_and_get_the_inner_202() {
    let f = fixture();
    let note = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
    let answer = send(&f.svc, post(&note, None)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert!(answer.bytes.is_empty());
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn an_id_less_destructive_call_never_runs_and_never_gets_a_json_rpc_answer() {
    let f = fixture();
    let mut call = delete_call(json!(1), "Groceries");
    call.as_object_mut().unwrap().remove("id");
    let answer = f.alice(&call).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.bytes.is_empty());
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn non_post_requests_pass_without_touching_the_body() {
    let f = fixture();
    let req = http::Request::get("/mcp")
        .body(http_body_util::Full::new(Bytes::from_static(b"{not json")))
        .unwrap();
    let answer = send(&f.svc, req).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(f.seen.last().body, Bytes::from_static(b"{not json"));
}

#[tokio::test]
async fn streamed_inner_responses_are_not_buffered() {
    use http_body_util::BodyExt;
    use mcp_confirm::body::RequestBody;
    use tower::{Layer, ServiceExt};

    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = MemoryReplayStore::new();
    let layer = base_builder(&notes, &clock, &store).build();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let inner = tower::service_fn(
        move |_req: http::Request<RequestBody<http_body_util::Full<Bytes>>>| {
            let rx = rx.lock().unwrap().take().unwrap();
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(ChannelBody(rx))
                        .unwrap(),
                )
            }
        },
    );
    let svc = layer.layer(inner);
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta()}});
    let response = svc.oneshot(post(&list, None)).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    tx.send(Bytes::from_static(b"data: {\"progress\":1}\n\n"))
        .await
        .unwrap();
    // The first event arrives while the inner stream is still open.
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, Bytes::from_static(b"data: {\"progress\":1}\n\n"));
    tx.send(Bytes::from_static(b"data: {\"result\":{}}\n\n"))
        .await
        .unwrap();
    drop(tx);
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, Bytes::from_static(b"data: {\"result\":{}}\n\n"));
}

/// A response body fed by a channel; ends when the sender is dropped.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

// ---------------------------------------------------------------------------------------------
// Buffering and strict parsing

/// `call` posted as alice, with the header `name` set to `value` (whatever the call implies).
fn with_header(call: &Value, name: &'static str, value: &str) -> http::Request<Full<Bytes>> {
    let mut req = post(call, Some("alice"));
    req.headers_mut()
        .insert(name, http::HeaderValue::from_str(value).unwrap());
    req
}

/// `call` posted as alice, without the header `name`.
fn without_header(call: &Value, name: &str) -> http::Request<Full<Bytes>> {
    let mut req = post(call, Some("alice"));
    req.headers_mut().remove(name);
    req
}

#[tokio::test]
async fn bodies_over_the_cap_get_413_with_a_json_rpc_error() {
    let f = fixture_with(|b| b.max_body_bytes(1024));
    let mut call = delete_call(json!(1), "Groceries");
    call["params"]["arguments"]["pad"] = Value::String("x".repeat(2000));
    let answer = f.alice(&call).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error()["code"], -32600);
    // A declared Content-Length over the cap is refused before reading.
    let mut req = post(&call, Some("alice"));
    let len = call.to_string().len();
    req.headers_mut().insert("content-length", len.into());
    let answer = send(&f.svc, req).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.json()["id"], Value::Null);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn bodies_the_layer_cannot_read_strictly_are_never_forwarded() {
    let f = fixture();
    let valid = delete_call(json!(1), "Groceries").to_string();
    let cases: Vec<(Vec<u8>, i64)> = vec![
        (b"{bad json".to_vec(), -32700),
        (vec![0xff, 0xfe], -32700),
        ({
            let mut v = valid.clone().into_bytes();
            let at = valid.find("Groceries").unwrap();
            v[at] = 0xc3;
            v
        }, -32700),
        (format!("[{valid}]").into_bytes(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"notes_delete"}}"#.into(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list","name":"notes_delete","arguments":{}}}"#.into(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list","arguments":{"a":1,"a":2}}}"#.into(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":7,"params":{"name":"notes_delete"}}"#.into(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":{"n":"notes_delete"}}}"#.into(), -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null}}"#.into(), -32600),
    ];
    for (body, code) in cases {
        let answer = send(&f.svc, post_raw(body.clone(), Some("alice"), None)).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{:?}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(
            answer.error()["code"],
            code,
            "{:?}",
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn headers_alone_never_decide() {
    let f = fixture();
    // Body names the destructive tool, headers claim a harmless one: intercepted, and the mismatch is refused.
    let call = delete_call(json!(1), "Groceries");
    let req = with_header(&call, "mcp-name", "notes_list");
    let answer = send(&f.svc, req).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error()["code"], -32020);
    // Headers claim the destructive tool, body names a harmless one: the body wins, it passes.
    let mut list = call.clone();
    list["params"]["name"] = json!("notes_list");
    let req = with_header(&list, "mcp-name", "notes_delete");
    let _ = send(&f.svc, req).await;
    assert_eq!(f.seen.count(), 1);
    // Missing Mcp-Method / Mcp-Name on an intercepted call: refused.
    let req = without_header(&call, "mcp-method");
    assert_eq!(send(&f.svc, req).await.error()["code"], -32020);
    // The base64 form of Mcp-Name is decoded before comparing.
    let req = with_header(&call, "mcp-name", "=?base64?bm90ZXNfZGVsZXRl?=");
    assert_asks(&send(&f.svc, req).await);
}

// ---------------------------------------------------------------------------------------------
// Principal

#[tokio::test]
async fn no_principal_fails_closed_and_client_info_is_not_identity() {
    let f = fixture();
    let mut call = delete_call(json!(1), "Groceries");
    call["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] =
        json!({"name":"alice","version":"1"});
    let answer = send(&f.svc, post(&call, None)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.headers["www-authenticate"], "Bearer");
    assert_eq!(answer.error()["code"], -31001);
    assert_eq!(answer.error()["data"]["reason"], "unauthenticated");
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_custom_extractor_reads_the_auth_layers_own_type() {
    #[derive(Clone)]
    struct Claims {
        sub: String,
    }
    let f = fixture_with(|b| {
        b.principal_extractor(|ext: &http::Extensions| {
            ext.get::<Claims>().map(|c| Principal::new(c.sub.as_str()))
        })
    });
    let mut req = post(&delete_call(json!(1), "Groceries"), None);
    req.extensions_mut().insert(Claims {
        sub: "alice".into(),
    });
    assert_asks(&send(&f.svc, req).await);
}

// ---------------------------------------------------------------------------------------------
// First call

#[tokio::test]
async fn missing_meta_is_invalid_params_with_400() {
    let f = fixture();
    for drop_key in [
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
    ] {
        let mut call = delete_call(json!(1), "Groceries");
        call["params"]["_meta"]
            .as_object_mut()
            .unwrap()
            .remove(drop_key);
        let req = with_header(&call, "mcp-protocol-version", "2026-07-28");
        let answer = send(&f.svc, req).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.error()["code"], -32602);
    }
    let mut call = delete_call(json!(1), "Groceries");
    call["params"].as_object_mut().unwrap().remove("_meta");
    let answer = f.alice(&call).await;
    assert_eq!(
        (answer.status, answer.error()["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602))
    );
}

#[tokio::test]
async fn unsupported_versions_get_32022_with_exact_data() {
    let f = fixture();
    let mut call = delete_call(json!(1), "Groceries");
    call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let answer = f.alice(&call).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.error()["code"], -32022);
    assert_eq!(
        answer.error()["data"],
        json!({"supported":["2026-07-28"],"requested":"1900-01-01"})
    );
}

#[tokio::test]
async fn a_version_header_that_disagrees_with_meta_is_32020() {
    let f = fixture();
    let call = delete_call(json!(1), "Groceries");
    let req = with_header(&call, "mcp-protocol-version", "2025-11-25");
    let answer = send(&f.svc, req).await;
    assert_eq!(
        (answer.status, answer.error()["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32020))
    );
    let req = without_header(&call, "mcp-protocol-version");
    assert_eq!(send(&f.svc, req).await.error()["code"], -32020);
}

/// A 2025-era client (a session from `initialize`, no `_meta` in the request) calling a
/// confirmed tool is told what it lacks, not that its headers are wrong (#52, 9): with or
/// without the 2026 `Mcp-Method`/`Mcp-Name` headers, it gets `-32022` naming 2026-07-28.
#[tokio::test]
async fn a_legacy_client_is_told_what_it_lacks() {
    let f = fixture();
    let mut call = delete_call(json!(1), "Groceries");
    call["params"].as_object_mut().unwrap().remove("_meta");
    for version in ["2025-11-25", "2025-06-18"] {
        for keep_2026_headers in [false, true] {
            let mut req = with_header(&call, "mcp-protocol-version", version);
            req.headers_mut()
                .insert("mcp-session-id", http::HeaderValue::from_static("s-1"));
            if !keep_2026_headers {
                req.headers_mut().remove("mcp-method");
                req.headers_mut().remove("mcp-name");
            }
            let answer = send(&f.svc, req).await;
            assert_eq!(answer.status, StatusCode::BAD_REQUEST);
            let error = answer.error();
            assert_eq!(error["code"], -32022, "{error}");
            assert_eq!(error["data"]["reason"], "legacy_protocol");
            assert_eq!(error["data"]["requested"], version);
            assert!(
                error["message"].as_str().unwrap().contains("2026-07-28")
                    && error["message"]
                        .as_str()
                        .unwrap()
                        .contains("form elicitation"),
                "{error}"
            );
        }
    }
    assert_eq!(f.seen.count(), 0);
}

fn with_caps(caps: Value) -> Value {
    let mut call = delete_call(json!(1), "Groceries");
    call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps;
    call
}

#[tokio::test]
async fn form_elicitation_must_be_declared_on_this_request() {
    let f = fixture();
    for caps in [
        json!({"elicitation":{}}),
        json!({"elicitation":{"form":{}}}),
        json!({"elicitation":{"form":{},"url":{}}}),
    ] {
        let answer = f.alice(&with_caps(caps.clone())).await;
        assert_eq!(answer.result()["resultType"], "input_required", "{caps}");
    }
    for caps in [
        json!({}),
        json!({"elicitation":{"url":{}}}),
        json!({"sampling":{}}),
        json!({"elicitation":true}),
    ] {
        let answer = f.alice(&with_caps(caps.clone())).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{caps}");
        assert_eq!(answer.error()["code"], -32021);
        assert_eq!(
            answer.error()["data"]["requiredCapabilities"],
            json!({"elicitation":{"form":{}}})
        );
    }
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn url_only_client_gets_32021() {
    let f = fixture();
    let answer = f.alice(&with_caps(json!({"elicitation":{"url":{}}}))).await;
    assert_eq!(answer.error()["code"], -32021);
    assert_eq!(
        answer.error()["data"],
        json!({"requiredCapabilities":{"elicitation":{"form":{}}}})
    );
}

#[tokio::test]
async fn a_declaration_on_an_earlier_request_never_counts() {
    let (f, state) = challenged().await;
    let mut again = accepted(&state, json!(2), "note-7");
    again["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let answer = f.alice(&again).await;
    assert_eq!(answer.error()["code"], -32021);
    assert_eq!(f.seen.count(), 0);
    // Nothing was claimed: the same state still works once the retry declares the capability.
    assert_ran(&f.accept(&state, json!(3), "note-7").await);
}

#[tokio::test]
async fn zero_candidates_is_a_complete_error_result_without_state() {
    let f = fixture();
    let answer = f.alice(&delete_call(json!(1), "Nothing like this")).await;
    let result = answer.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["isError"], true);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("nothing was changed")
    );
    assert!(result.get("requestState").is_none() && result.get("inputRequests").is_none());
}

#[tokio::test]
async fn the_challenge_is_a_flat_titled_form_with_a_signed_state() {
    let f = fixture();
    let answer = f.alice(&delete_call(json!("r1"), "Groceries")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["content-type"], "application/json");
    let body = answer.json();
    assert_eq!(body["id"], "r1");
    let result = &body["result"];
    assert_eq!(result.as_object().unwrap().len(), 3);
    assert_eq!(result["resultType"], "input_required");
    assert_eq!(
        result["inputRequests"],
        json!({"delete_choice":{"method":"elicitation/create","params":{"mode":"form",
            "message":"Choose one matching note and confirm deletion.",
            "requestedSchema":{"type":"object","properties":{
                "note_id":{"type":"string","title":"Which one?","oneOf":[
                    {"const":"note-14","title":"Groceries (note-14)"},
                    {"const":"note-3","title":"Groceries (note-3)"},
                    {"const":"note-7","title":"Groceries (note-7)"}]},
                "confirm":{"type":"boolean","title":"Yes, go ahead","default":false}},
              "required":["note_id","confirm"]}}}})
    );
    let state = answer.state();
    assert!(
        state.starts_with("mcpc1.") && state.len() < 1024,
        "{}",
        state.len()
    );
    // The client can decode the state, but reads only what the form showed.
    let raw = URL_SAFE_NO_PAD.decode(&state["mcpc1.".len()..]).unwrap();
    let text = String::from_utf8_lossy(&raw);
    for secret in [
        "alice",
        "Groceries",
        "notes.example",
        "notes_delete",
        "personal",
        "delete_choice",
    ] {
        assert!(!text.contains(secret), "{secret} readable in state");
    }
    assert!(text.contains("note-7"));
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn plain_enum_and_confirm_only_forms() {
    let notes = Notes::seeded();
    let f = fixture_with(|b| {
        b.tool("notes_delete", delete_policy(&notes).plain_enum())
            .tool(
                "notes_purge",
                mcp_confirm::ToolPolicy::confirm_only().input_key("ok_to_purge"),
            )
    });
    let answer = f.alice(&delete_call(json!(1), "Groceries")).await;
    let schema = &answer.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"];
    assert_eq!(
        schema["properties"]["note_id"]["enum"],
        json!(["note-14", "note-3", "note-7"])
    );
    let mut purge = delete_call(json!(2), "Groceries");
    purge["params"]["name"] = json!("notes_purge");
    let answer = f.alice(&purge).await;
    let schema = &answer.result()["inputRequests"]["ok_to_purge"]["params"]["requestedSchema"];
    assert_eq!(schema["required"], json!(["confirm"]));
    assert_eq!(schema["properties"].as_object().unwrap().len(), 1);
}

#[tokio::test]
async fn labels_are_plain_and_capped_and_too_many_matches_are_refused() {
    let notes = Notes::seeded();
    notes
        .0
        .lock()
        .unwrap()
        .insert("note-90".into(), (PERSONAL.into(), "Taxes".into()));
    let f = fixture_with(|b| {
        b.tool(
            "notes_delete",
            delete_policy(&notes).max_label_chars(12).max_candidates(2),
        )
    });
    let answer = f.alice(&delete_call(json!(1), "Taxes")).await;
    let options = &answer.result()["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
        ["note_id"]["oneOf"];
    for o in options.as_array().unwrap() {
        assert!(o["title"].as_str().unwrap().chars().count() <= 12, "{o}");
    }
    let answer = f.alice(&delete_call(json!(1), "Groceries")).await;
    assert_eq!(answer.result()["isError"], true);
    assert!(answer.result().get("requestState").is_none());
}

// ---------------------------------------------------------------------------------------------
// The retry

#[tokio::test]
async fn accept_forwards_the_original_call_rewritten_and_confirmed() {
    let (f, state) = challenged().await;
    let mut call = accepted(&state, json!(2), "note-7");
    // Whatever the client put into the selected argument is overwritten.
    call["params"]["arguments"]["note_id"] = json!("note-3");
    let req = with_header(&call, "mcp-param-note-id", "note-3");
    let answer = send(&f.svc, req).await;
    assert_eq!(answer.headers["x-inner"], "yes");
    assert_ran(&answer);
    let seen = f.seen.last();
    let forwarded = seen.json();
    assert_eq!(forwarded["id"], 2);
    assert_eq!(forwarded["method"], "tools/call");
    assert_eq!(forwarded["params"]["name"], "notes_delete");
    assert_eq!(
        forwarded["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "title": "Groceries", "note_id": "note-7"})
    );
    assert!(forwarded["params"].get("inputResponses").is_none());
    assert!(forwarded["params"].get("requestState").is_none());
    assert_eq!(forwarded["params"]["_meta"], meta());
    assert_eq!(seen.headers["content-length"], seen.body.len().to_string());
    assert_eq!(seen.headers["mcp-param-note-id"], "note-7");
    assert_eq!(seen.headers["mcp-name"], "notes_delete");
    let confirmed = seen.confirmed.expect("Confirmed in extensions");
    assert!(confirmed.covers("notes_delete", Some("note-7")));
    assert_eq!(confirmed.principal.subject(), "alice");
    assert!(confirmed.expires_at > now());
}

#[tokio::test]
async fn a_state_is_single_use_after_success() {
    let (f, state) = challenged().await;
    f.accept(&state, json!(2), "note-7").await;
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn a_retry_while_the_first_is_in_flight_is_refused() {
    use http_body_util::BodyExt;
    use tower::{Layer, ServiceExt};

    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(100, clock.clone());
    let layer = base_builder(&notes, &clock, &store).build();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let nonce = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = nonce.clone();
    // The inner answers with a body that stays open until the test says so.
    let inner = tower::service_fn(
        move |req: http::Request<mcp_confirm::body::RequestBody<http_body_util::Full<Bytes>>>| {
            let rx = rx.clone();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            *slot.lock().unwrap() = req
                .extensions()
                .get::<mcp_confirm::Confirmed>()
                .map(|c| c.nonce);
            async move {
                let rx = rx.lock().await.take();
                let body = OnceAfter { rx, sent: false };
                Ok::<_, std::convert::Infallible>(http::Response::new(body))
            }
        },
    );
    let svc = layer.layer(inner);
    // One round as alice, its answer read to the end.
    let round = |call: Value| {
        let svc = svc.clone();
        async move {
            let response = svc.oneshot(post(&call, Some("alice"))).await.unwrap();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    let first = round(delete_call(json!(1), "Groceries")).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let go = accepted(&state, json!(2), "note-7");
    let open_response = svc.clone().oneshot(post(&go, Some("alice"))).await.unwrap();
    // While that response is still streaming, a second retry of the same state is refused.
    let refused = round(accepted(&state, json!(3), "note-7")).await;
    assert_eq!(refused["error"]["data"]["reason"], "invalid_request_state");
    // The claim is held, not yet consumed, while the response streams...
    let nonce = nonce
        .lock()
        .unwrap()
        .expect("confirmed call reached the inner service");
    assert_eq!(claim_again(&store, nonce).await, Claim::InFlight);
    tx.send(()).unwrap();
    let _ = open_response.into_body().collect().await.unwrap();
    // ...and consumed once it has ended.
    assert_eq!(claim_again(&store, nonce).await, Claim::Consumed);
    let after = round(accepted(&state, json!(4), "note-7")).await;
    assert_eq!(after["error"]["data"]["reason"], "invalid_request_state");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A body that yields one frame once `rx` fires, then ends.
struct OnceAfter {
    rx: Option<tokio::sync::oneshot::Receiver<()>>,
    sent: bool,
}

impl http_body::Body for OnceAfter {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::future::Future;
        if self.sent {
            return std::task::Poll::Ready(None);
        }
        if let Some(rx) = self.rx.as_mut() {
            let _ = std::task::ready!(std::pin::Pin::new(rx).poll(cx));
        }
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"{}")))))
    }
}

#[tokio::test]
async fn decline_is_a_final_non_error_refusal_that_burns_the_state() {
    let (f, state) = challenged().await;
    let no = answered(&state, json!(2), decline());
    let answer = f.alice(&no).await;
    let result = answer.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["isError"], false);
    assert_eq!(result["_meta"]["io.github.mcp-confirm/outcome"], "declined");
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn user_dismisses_the_dialog_cancel_keeps_the_state_retryable() {
    let (f, state) = challenged().await;
    let dismissed = answered(&state, json!(2), cancel());
    let answer = f.alice(&dismissed).await;
    let result = answer.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["_meta"]["io.github.mcp-confirm/outcome"],
        "cancelled"
    );
    assert_ne!(result["content"], send_decline_text());
    assert_eq!(f.seen.count(), 0);
    // Cancelling again is fine, and the same state accepted later runs the call.
    f.alice(&dismissed).await;
    assert_ran(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 1);
}

/// A tool that declares an `outputSchema` must answer with structured content, which the layer
/// cannot make up: its decline and cancel are error results (clients such as the official
/// Python SDK's refuse a plain result without it), still marked declined or cancelled.
#[tokio::test]
async fn a_tool_with_an_output_schema_is_declined_and_cancelled_with_error_results() {
    let f = fixture_with(|builder| {
        builder.tool_list(json!([{
            "name": "notes_delete",
            "inputSchema": {"type": "object", "properties": {
                "workspaceUri": {"type": "string"}, "title": {"type": "string"},
                "note_id": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"deleted": {"type": "string"}}},
        }]))
    });
    for (id, (answer, outcome)) in [(decline(), "declined"), (cancel(), "cancelled")]
        .into_iter()
        .enumerate()
    {
        let id = 10 * id as u64;
        let first = f.alice(&delete_call(json!(id), "Groceries")).await;
        let result = f
            .alice(&answered(&first.state(), json!(id + 1), answer))
            .await
            .result();
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["_meta"]["io.github.mcp-confirm/outcome"], outcome);
        assert!(result.get("structuredContent").is_none());
    }
    assert_eq!(f.seen.count(), 0);
}

fn send_decline_text() -> Value {
    json!([{"type":"text","text":"The user declined; nothing was changed."}])
}

#[tokio::test]
async fn confirm_false_is_a_refusal() {
    let (f, state) = challenged().await;
    let unconfirmed =
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":false}}});
    let call = answered(&state, json!(2), unconfirmed);
    let answer = f.alice(&call).await;
    assert_eq!(
        answer.result()["_meta"]["io.github.mcp-confirm/outcome"],
        "declined"
    );
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn a_missing_answer_asks_again_with_a_fresh_state() {
    let (f, state) = challenged().await;
    for responses in [
        json!({"something_else":{"action":"accept","content":{}}}),
        Value::Null,
    ] {
        let mut call = answered(&state, json!(2), responses.clone());
        if responses.is_null() {
            call["params"]
                .as_object_mut()
                .unwrap()
                .remove("inputResponses");
        }
        let answer = f.alice(&call).await;
        assert_asks(&answer);
        assert_ne!(answer.state(), state);
    }
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn malformed_answers_are_errors_never_completions() {
    let (f, state) = challenged().await;
    for bad in [
        json!(null),
        json!("accept"),
        json!([]),
        json!({"delete_choice":null}),
        json!({"delete_choice":{"action":"yes"}}),
        json!({"delete_choice":{"action":"accept","content":"note-7"}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":"yes"}}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":7,"confirm":true}}}),
    ] {
        let call = answered(&state, json!(2), bad.clone());
        let answer = f.alice(&call).await;
        assert_eq!(answer.error()["code"], -32602, "{bad}");
        assert_eq!(
            answer.error()["data"]["reason"],
            "invalid_input_responses",
            "{bad}"
        );
    }
    assert_eq!(f.seen.count(), 0);
    // Nothing was claimed along the way.
    assert_ran(&f.accept(&state, json!(3), "note-14").await);
}

/// MRTR's SHOULDs: an answer that is well formed but does not answer the form (no content, a
/// field left out, a choice that was not offered) is asked again with a fresh form, not
/// refused, and spends nothing; members the form did not ask for are ignored.
#[tokio::test]
async fn answers_that_do_not_answer_the_form_are_asked_again() {
    let (f, state) = challenged().await;
    for unanswered in [
        json!({"delete_choice":{"action":"accept"}}),
        json!({"delete_choice":{"action":"accept","content":{}}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7"}}}),
        json!({"delete_choice":{"action":"accept","content":{"confirm":true}}}),
        // Signed for nobody: another workspace's note, and one that matched no title.
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-30","confirm":true}}}),
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-20","confirm":true}}}),
    ] {
        let answer = f
            .alice(&answered(&state, json!(2), unanswered.clone()))
            .await;
        assert_asks(&answer);
        assert_ne!(answer.state(), state, "{unanswered}: a fresh form");
        // The new form offers the same (current) candidates as a first call would: no oracle.
        let ids: Vec<String> = answer.result()["inputRequests"]["delete_choice"]["params"]
            ["requestedSchema"]["properties"]["note_id"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["const"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["note-14", "note-3", "note-7"], "{unanswered}");
    }
    assert_eq!(f.seen.count(), 0);
    // Unasked-for members anywhere are ignored; the original state was never spent.
    let extra = json!({"delete_choice":{"action":"accept","also":1,
        "content":{"note_id":"note-7","confirm":true,"also":"x"}},"other_key":{"action":"decline"}});
    assert_ran(&f.alice(&answered(&state, json!(3), extra)).await);
    assert_eq!(f.seen.count(), 1);
}

#[tokio::test]
async fn record_moves_out_of_the_workspace_after_the_form_was_shown() {
    let (f, state) = challenged().await;
    f.notes.move_to("note-7", TEAM);
    let answer = f.accept(&state, json!(2), "note-7").await;
    let result = answer.result();
    assert_eq!(result["isError"], true);
    assert_eq!(result["_meta"]["io.github.mcp-confirm/outcome"], "revoked");
    assert_eq!(f.seen.count(), 0);
    // The failed revalidation burned the state.
    f.notes.move_to("note-7", PERSONAL);
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Verification and bindings

async fn refused_without_effect(f: &Fixture, call: Value, principal: &str) {
    let answer = send(&f.svc, post(&call, Some(principal))).await;
    assert_frozen_state_error(&answer);
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn changed_arguments_are_refused() {
    let (f, state) = challenged().await;
    refused_without_effect(
        &f,
        retry(
            delete_call(json!(1), "Taxes"),
            json!(2),
            &state,
            accept("note-7"),
        ),
        "alice",
    )
    .await;
    let mut extra = accepted(&state, json!(2), "note-7");
    extra["params"]["arguments"]["force"] = json!(true);
    refused_without_effect(&f, extra, "alice").await;
    // Key order and whitespace do not matter.
    let reordered = format!(
        r#"{{"params":{{"requestState":"{state}","arguments":{{ "title" : "Groceries", "workspaceUri":"{PERSONAL}"}},"name":"notes_delete","inputResponses":{},"_meta":{}}},"method":"tools/call","id":2,"jsonrpc":"2.0"}}"#,
        accept("note-7"),
        meta()
    );
    assert_ran(&send_text(&f, reordered).await);
}

#[tokio::test]
async fn bob_replaying_alices_state_is_refused() {
    let (f, state) = challenged().await;
    refused_without_effect(&f, accepted(&state, json!(2), "note-7"), "bob").await;
}

#[tokio::test]
async fn a_state_for_another_tool_is_refused() {
    let notes = Notes::seeded();
    let f = fixture_with(|b| b.tool("notes_archive", delete_policy(&notes)));
    let state = challenge(&f).await;
    let mut call = accepted(&state, json!(2), "note-7");
    call["params"]["name"] = json!("notes_archive");
    refused_without_effect(&f, call, "alice").await;
}

#[tokio::test]
async fn a_state_from_another_audience_is_refused() {
    let f = fixture();
    let other = fixture_with(|b| b.audience("https://billing.example/mcp"));
    let state = challenge(&other).await;
    refused_without_effect(&f, accepted(&state, json!(2), "note-7"), "alice").await;
}

#[tokio::test]
async fn expired_states_are_refused_at_the_boundary() {
    let (f, state) = challenged().await;
    // TTL 300 s, skew 30 s: still good just before, refused from the boundary on.
    f.clock.advance(Duration::from_secs(329));
    let call = answered(&state, json!(2), cancel());
    assert_eq!(f.alice(&call).await.result()["resultType"], "complete");
    f.clock.advance(Duration::from_secs(1));
    refused_without_effect(&f, accepted(&state, json!(3), "note-7"), "alice").await;
}

#[tokio::test]
async fn states_from_the_future_are_refused() {
    let f = fixture();
    f.clock.advance(Duration::from_secs(31));
    let state = challenge(&f).await;
    f.clock.set(now());
    refused_without_effect(&f, accepted(&state, json!(2), "note-7"), "alice").await;
}

#[tokio::test]
async fn unknown_and_removed_keys_are_refused_and_old_keys_verify_during_rotation() {
    let old = fixture();
    let state = challenge(&old).await;
    // Rotation phase 2: the new key signs, the old one still verifies.
    // Instances that rotate keys share one replay store (a separate memory store is another
    // boot epoch, whose states are refused).
    let shared = old.store.clone();
    let both = fixture_from(
        KeyRing::new([("k2", secret(0x22)), ("k1", KEY)]).unwrap(),
        100,
        move |b| b.replay_store(shared),
    );
    let call = accepted(&state, json!(2), "note-7");
    let answer = both.alice(&call).await;
    assert_ran(&answer);
    assert_eq!(both.seen.count(), 1);
    // Phase 3: the old key is gone.
    let shared = old.store.clone();
    let new_only = fixture_from(
        KeyRing::single("k2", secret(0x22)).unwrap(),
        100,
        move |b| b.replay_store(shared),
    );
    let state = challenge(&old).await;
    assert_frozen_state_error(&new_only.accept(&state, json!(2), "note-7").await);
    assert_eq!(new_only.seen.count(), 0);
}

#[tokio::test]
async fn reusing_the_original_request_id_is_refused() {
    let (f, state) = challenged().await;
    refused_without_effect(&f, accepted(&state, json!(1), "note-7"), "alice").await;
    // `1` and `"1"` are different ids.
    assert_ran(&f.accept(&state, json!("1"), "note-7").await);
}

#[tokio::test]
async fn tampered_and_malformed_states_are_refused() {
    let (f, state) = challenged().await;
    for forged in [
        format!("{state}-TAMPERED"),
        state[..state.len() - 1].to_owned(),
        state.replacen("mcpc1.", "mcpc2.", 1),
        String::new(),
        "x".repeat(10_000),
    ] {
        refused_without_effect(&f, accepted(&forged, json!(2), "note-7"), "alice").await;
    }
    let mut not_a_string = accepted(&state, json!(2), "note-7");
    not_a_string["params"]["requestState"] = json!({"nonce": 1});
    refused_without_effect(&f, not_a_string, "alice").await;
    // None of that consumed anything.
    assert_ran(&f.accept(&state, json!(3), "note-7").await);
}

#[tokio::test]
async fn tamper_sweep_through_the_layer_accepts_nothing() {
    let (f, state) = challenged().await;
    let attempt = |forged: String| {
        let call = accepted(&forged, json!(2), "note-7");
        let svc = f.svc.clone();
        async move { send(&svc, post(&call, Some("alice"))).await }
    };
    let (mut tried, mut accepted) = (0usize, 0usize);
    // Every printable ASCII substitution at every position (JSON escaping is the builder's job)...
    for i in 0..state.len() {
        for b in (0x20u8..0x7f).filter(|&b| b != state.as_bytes()[i]) {
            let mut forged = state.clone().into_bytes();
            forged[i] = b;
            tried += 1;
            let answer = attempt(String::from_utf8(forged).unwrap()).await;
            if answer.json().get("error").is_none() {
                accepted += 1;
            }
        }
    }
    // ...and every truncation.
    for n in 0..state.len() {
        tried += 1;
        if attempt(state[..n].to_owned())
            .await
            .json()
            .get("error")
            .is_none()
        {
            accepted += 1;
        }
    }
    assert!(tried > 25_000, "{tried}");
    assert_eq!(accepted, 0);
    assert_eq!(f.seen.count(), 0);
    // Forgeries claim nothing: the genuine state still works.
    let answer = attempt(state).await;
    assert_ran(&answer);
}

#[tokio::test]
async fn confirm_only_policies_forward_without_a_choice() {
    let f = fixture_with(|b| {
        b.tool(
            "notes_purge",
            mcp_confirm::ToolPolicy::confirm_only().input_key("ok"),
        )
    });
    let mut purge = delete_call(json!(1), "Groceries");
    purge["params"]["name"] = json!("notes_purge");
    let answer = f.alice(&purge).await;
    let state = answer.state();
    let yes = json!({"ok":{"action":"accept","content":{"confirm":true}}});
    let go = retry(purge.clone(), json!(2), &state, yes);
    assert_ran(&f.alice(&go).await);
    let seen = f.seen.last();
    assert!(seen.confirmed.as_ref().unwrap().covers("notes_purge", None));
    assert_eq!(
        seen.json()["params"]["arguments"],
        json!({"workspaceUri": PERSONAL, "title": "Groceries"})
    );
}

#[tokio::test]
async fn a_full_replay_store_refuses_with_a_retryable_error_and_runs_nothing() {
    let f = fixture_from(KeyRing::single("k1", KEY).unwrap(), 1, |b| b);
    let first = challenge(&f).await;
    let second = challenge(&f).await;
    let go = accepted(&first, json!(2), "note-7");
    f.alice(&go).await;
    assert_eq!(f.seen.count(), 1);
    // The one slot holds a live (consumed) entry: the next claim is refused, not evicted into.
    let answer = f.accept(&second, json!(3), "note-3").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.error()["code"], -31002);
    assert_eq!(answer.error()["data"]["retryable"], true);
    assert_eq!(f.seen.count(), 1);
    // And the first state is still refused.
    assert_frozen_state_error(&f.accept(&first, json!(4), "note-7").await);
}

/// What claiming `nonce` in `store` answers now (a probe by an owner of its own, kept an hour).
async fn claim_again(store: &MemoryReplayStore, nonce: Nonce) -> Claim {
    let far = now() + Duration::from_secs(3_600);
    let probe = ClaimRequest::new(
        nonce,
        Owner::random(),
        PrincipalKey::from_bytes([0; 16]),
        far,
    );
    store.claim(&probe).await.unwrap()
}

/// What claiming the nonce of the last confirmed call answers now.
async fn nonce_state(f: &Fixture) -> Claim {
    let nonce = f.seen.last().confirmed.expect("confirmed").nonce;
    claim_again(&f.store, nonce).await
}

#[tokio::test]
async fn the_nonce_is_consumed_when_the_response_ends() {
    let (f, state) = challenged().await;
    f.accept(&state, json!(2), "note-7").await;
    assert_eq!(nonce_state(&f).await, Claim::Consumed);
}

#[tokio::test]
async fn the_nonce_is_consumed_when_the_response_is_dropped_unread() {
    use tower::ServiceExt;
    let (f, state) = challenged().await;
    let go = accepted(&state, json!(2), "note-7");
    let response = f
        .svc
        .clone()
        .oneshot(post(&go, Some("alice")))
        .await
        .unwrap();
    drop(response);
    assert_eq!(nonce_state(&f).await, Claim::Consumed);
}

#[tokio::test]
async fn the_nonce_is_consumed_when_the_call_is_abandoned_mid_flight() {
    use std::sync::{Arc, Mutex};
    use tower::{Layer, ServiceExt};

    let f = fixture();
    // An inner service that takes the call and never answers (the client will disconnect).
    let nonce = Arc::new(Mutex::new(None));
    let slot = nonce.clone();
    let inner = tower::service_fn(
        move |req: http::Request<mcp_confirm::body::RequestBody<http_body_util::Full<Bytes>>>| {
            *slot.lock().unwrap() = req
                .extensions()
                .get::<mcp_confirm::Confirmed>()
                .map(|c| c.nonce);
            std::future::pending::<
                Result<http::Response<http_body_util::Full<Bytes>>, std::convert::Infallible>,
            >()
        },
    );
    let layer = base_builder(&f.notes, &f.clock, &f.store).build();
    let svc = layer.layer(inner);
    let state = challenge(&f).await;
    let go = accepted(&state, json!(2), "note-7");
    let call = svc.oneshot(post(&go, Some("alice")));
    // The call reaches the inner service and hangs there; then the client gives up.
    let abandoned = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert!(abandoned.is_err());
    let nonce = nonce
        .lock()
        .unwrap()
        .expect("the inner service got the confirmed call");
    assert_eq!(claim_again(&f.store, nonce).await, Claim::Consumed);
}

#[tokio::test]
async fn a_state_issued_for_another_input_key_is_refused() {
    let f = fixture();
    let state = challenge(&f).await;
    let other = fixture_with(|b| {
        b.tool(
            "notes_delete",
            delete_policy(&Notes::seeded()).input_key("other_choice"),
        )
    });
    let answer =
        json!({"other_choice":{"action":"accept","content":{"note_id":"note-7","confirm":true}}});
    let call = answered(&state, json!(2), answer);
    assert_frozen_state_error(&other.alice(&call).await);
    assert_eq!(other.seen.count(), 0);
}

#[tokio::test]
async fn claimed_by_handler_policies_forward_unclaimed_and_say_so() {
    let notes = Notes::seeded();
    let f = fixture_with(|b| {
        b.tool("notes_delete", delete_policy(&notes).claimed_by_handler())
            .replay_store(ClaimsInHandler(MemoryReplayStore::new()))
    });
    let state = challenge(&f).await;
    let go = accepted(&state, json!(2), "note-7");
    assert_ran(&f.alice(&go).await);
    let confirmed = f.seen.last().confirmed.expect("Confirmed");
    assert!(!confirmed.claimed, "the handler must claim");
    // The default policy claims in the layer and says so.
    let (f, state) = challenged().await;
    f.accept(&state, json!(2), "note-7").await;
    assert!(f.seen.last().confirmed.expect("Confirmed").claimed);
}

#[tokio::test]
async fn claimed_by_handler_policies_still_burn_failed_revalidations() {
    let notes = Notes::seeded();
    let store = MemoryReplayStore::new();
    let f = fixture_with(|b| {
        b.tool("notes_delete", delete_policy(&notes).claimed_by_handler())
            .replay_store(ClaimsInHandler(store.clone()))
    });
    let state = challenge(&f).await;
    notes.move_to("note-7", TEAM);
    let go = accepted(&state, json!(2), "note-7");
    assert_eq!(
        f.alice(&go).await.result()["_meta"]["io.github.mcp-confirm/outcome"],
        "revoked"
    );
    assert_eq!(f.seen.count(), 0);
    // The state was burned in the layer's store even though the layer does not claim on accept:
    // a later accept is refused before it reaches the handler.
    notes.move_to("note-7", PERSONAL);
    assert_frozen_state_error(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 0);
}

#[tokio::test]
async fn members_present_as_null_are_refused_not_taken_as_absent() {
    let (f, state) = challenged().await;
    let mut null_arguments = delete_call(json!(5), "Groceries");
    null_arguments["params"]["arguments"] = Value::Null;
    let answer = f.alice(&null_arguments).await;
    assert_eq!(answer.error()["data"]["reason"], "invalid_arguments");
    let mut null_state = accepted(&state, json!(6), "note-7");
    null_state["params"]["requestState"] = Value::Null;
    assert_frozen_state_error(&f.alice(&null_state).await);
    let mut null_meta = accepted(&state, json!(7), "note-7");
    null_meta["params"]["_meta"] = Value::Null;
    let answer = f.alice(&null_meta).await;
    assert_eq!(answer.error()["code"], -32602, "{:?}", answer.bytes);
    assert_eq!(f.seen.count(), 0);
    // None of it touched the state: it still confirms once.
    let ok = f.accept(&state, json!(8), "note-7").await;
    assert_eq!(ok.status, 200);
    assert_eq!(f.seen.count(), 1);
}

/// A confirmed call whose `Accept` a Streamable HTTP server refuses (406) is refused before any
/// form is offered or any state is claimed: the confirmation is not spent on a call the server
/// would not take. (Before, the layer offered the form, claimed the accepted retry, rmcp answered
/// 406, and the next correct retry got `-32602`.)
#[tokio::test]
async fn a_call_the_server_would_not_accept_spends_no_confirmation() {
    let json_only = |request: &mut http::Request<_>| {
        request
            .headers_mut()
            .insert("accept", http::HeaderValue::from_static("application/json"));
    };
    let f = fixture();
    let mut first = post(&delete_call(json!(1), "Groceries"), Some("alice"));
    json_only(&mut first);
    let refused = send(&f.svc, first).await;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(refused.error()["code"], -32600, "{:?}", refused.bytes);
    assert!(refused.result().is_null());

    let state = challenge(&f).await;
    let mut retry = post(&accepted(&state, json!(2), "note-7"), Some("alice"));
    json_only(&mut retry);
    let refused = send(&f.svc, retry).await;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(f.seen.count(), 0);
    // The same answer, sent as the protocol asks, still runs: nothing was spent.
    assert_ran(&f.accept(&state, json!(3), "note-7").await);
    assert_eq!(f.seen.count(), 1);
}
