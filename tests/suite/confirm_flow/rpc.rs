//! The message face of the layer: the same decisions over bare JSON-RPC messages.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use crate::common::*;
use bytes::Bytes;
use mcp_confirm::{ConfirmLayer, Confirmed, JsonRpcMessage, JsonRpcReply, KeyRing, Principal};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

type Log = Arc<Mutex<Vec<(Value, Option<Confirmed>)>>>;

fn service(
    log: &Log,
) -> impl tower::Service<JsonRpcMessage, Response = JsonRpcReply, Error = Infallible, Future = impl Send>
+ Clone {
    let notes = Notes::seeded();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", delete_policy(&notes))
        .build();
    let log = log.clone();
    layer.layer(tower::service_fn(move |msg: JsonRpcMessage| {
        let log = log.clone();
        async move {
            let value: Value = serde_json::from_slice(&msg.body).unwrap();
            log.lock().unwrap().push((value.clone(), msg.extensions.get::<Confirmed>().cloned()));
            Ok::<_, Infallible>(match value.get("id") {
                Some(id) => JsonRpcReply::message(
                    json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete","content":[]}}).to_string(),
                ),
                None => JsonRpcReply::none(),
            })
        }
    }))
}

async fn ask<S>(svc: &S, body: &Value, principal: Option<&str>) -> Option<Value>
where
    S: tower::Service<JsonRpcMessage, Response = JsonRpcReply, Error = Infallible> + Clone,
{
    let mut msg = JsonRpcMessage::new(body.to_string());
    if let Some(p) = principal {
        msg = msg.with_extension(Principal::new(p));
    }
    let reply = svc.clone().oneshot(msg).await.unwrap();
    reply.body.map(|b| serde_json::from_slice(&b).unwrap())
}

#[tokio::test]
async fn confirms_over_messages() {
    let log = Log::default();
    let svc = service(&log);
    let first = ask(&svc, &delete_call(json!(1), "Groceries"), Some("alice"))
        .await
        .unwrap();
    assert_eq!(first["result"]["resultType"], "input_required");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let go = accepted(&state, json!(2), "note-7");
    let done = ask(&svc, &go, Some("alice")).await.unwrap();
    assert_eq!(done["result"]["resultType"], "complete");
    let (forwarded, confirmed) = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(forwarded["params"]["arguments"]["note_id"], "note-7");
    assert!(forwarded["params"].get("requestState").is_none());
    assert!(confirmed.unwrap().covers("notes_delete", Some("note-7")));
    let replay = accepted(&state, json!(3), "note-7");
    assert_eq!(
        ask(&svc, &replay, Some("alice")).await.unwrap()["error"]["data"]["reason"],
        "invalid_request_state"
    );
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn messages_get_the_same_gates() {
    let log = Log::default();
    let svc = service(&log);
    // No principal.
    let err = ask(&svc, &delete_call(json!(1), "Groceries"), None)
        .await
        .unwrap();
    assert_eq!(err["error"]["code"], -31001);
    // URL-only client.
    let mut url_only = delete_call(json!(1), "Groceries");
    url_only["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation":{"url":{}}});
    assert_eq!(
        ask(&svc, &url_only, Some("alice")).await.unwrap()["error"]["code"],
        -32021
    );
    // Strict parsing.
    let reply = svc
        .clone()
        .oneshot(JsonRpcMessage::new(Bytes::from_static(b"[1]")))
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    assert_eq!(reply["error"]["code"], -32600);
    assert!(log.lock().unwrap().is_empty());
}

#[tokio::test]
async fn notifications_get_no_reply_from_the_layer() {
    let log = Log::default();
    let svc = service(&log);
    let note = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
    assert_eq!(ask(&svc, &note, None).await, None);
    assert_eq!(log.lock().unwrap().len(), 1);
    let mut destructive = delete_call(json!(1), "Groceries");
    destructive.as_object_mut().unwrap().remove("id");
    assert_eq!(ask(&svc, &destructive, Some("alice")).await, None);
    assert_eq!(log.lock().unwrap().len(), 1);
}
