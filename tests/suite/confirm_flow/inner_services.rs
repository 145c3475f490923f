//! The layer in front of real inner services: an axum `Router`, rmcp's `StreamableHttpService`,
//! and a hyper `service_fn` served over TCP.

use std::borrow::Cow;
use std::sync::Arc;

use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm::{ConfirmLayer, Confirmed, KeyRing, Principal};
use serde_json::{Value, json};
use tower::{ServiceBuilder, ServiceExt};

fn layer(notes: &Notes) -> ConfirmLayer {
    ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .tool("notes_delete", delete_policy(notes))
        .build()
}

/// What the handler behind the layer reports back: the arguments it got and the `Confirmed` value.
fn echo(arguments: &Value, confirmed: Option<&Confirmed>) -> Value {
    json!({
        "arguments": arguments,
        "confirmed": confirmed.map(|c| json!({"tool": &*c.tool, "chosen": c.chosen, "principal": c.principal.subject()})),
    })
}

async fn body_json(
    response: http::Response<impl http_body::Body<Data = Bytes, Error = impl std::fmt::Debug>>,
) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    // rmcp may answer as SSE; take the last `data:` event.
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .next_back()
        .map(str::trim)
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn with_host(mut req: http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    req.headers_mut()
        .insert("host", "127.0.0.1".parse().unwrap());
    req
}

#[tokio::test]
async fn axum_router_inner() {
    use axum::{Extension, Json, Router, routing::post as route_post};

    let notes = Notes::seeded();
    let handler = |confirmed: Option<Extension<Confirmed>>, Json(msg): Json<Value>| async move {
        let out = echo(
            &msg["params"]["arguments"],
            confirmed.as_ref().map(|c| &c.0),
        );
        Json(
            json!({"jsonrpc":"2.0","id":msg["id"],"result":{"resultType":"complete","structuredContent":out,"content":[]}}),
        )
    };
    let app = Router::new()
        .route("/mcp", route_post(handler))
        .layer(layer(&notes));
    let first = app
        .clone()
        .oneshot(post_any(&delete_call(json!(1), "Groceries")))
        .await
        .unwrap();
    let first = body_json(first).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let go = accepted(&state, json!(2), "note-3");
    let answer = body_json(app.oneshot(post_any(&go)).await.unwrap()).await;
    let out = &answer["result"]["structuredContent"];
    assert_eq!(out["arguments"]["note_id"], "note-3");
    assert_eq!(
        out["confirmed"],
        json!({"tool":"notes_delete","chosen":"note-3","principal":"alice"})
    );
}

fn post_any(body: &Value) -> http::Request<axum::body::Body> {
    let req = post(body, Some("alice"));
    let (parts, body) = req.into_parts();
    http::Request::from_parts(parts, axum::body::Body::new(body))
}

mod rmcp_inner {
    use super::*;
    use rmcp::ServerHandler;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ProtocolVersion,
        ServerCapabilities, ServerConfig,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };

    #[derive(Clone)]
    struct NotesServer;

    impl ServerHandler for NotesServer {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
            Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, rmcp::ErrorData> {
            let confirmed = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Confirmed>())
                .cloned();
            let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
            let report = echo(&arguments, confirmed.as_ref());
            Ok(CallToolResult::success(vec![ContentBlock::text(report.to_string())]).into())
        }
    }

    #[tokio::test]
    async fn rmcp_streamable_http_service_inner() {
        let notes = Notes::seeded();
        let rmcp = StreamableHttpService::new(
            || Ok(NotesServer),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default()
                .with_legacy_session_mode(false)
                .with_sse_keep_alive(None),
        );
        let svc = ServiceBuilder::new().layer(layer(&notes)).service(rmcp);

        // Not intercepted: rmcp answers tools/list itself, through the layer.
        let list =
            json!({"jsonrpc":"2.0","id":"l","method":"tools/list","params":{"_meta":meta()}});
        let listed = body_json(
            svc.clone()
                .oneshot(with_host(post(&list, Some("alice"))))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(listed["id"], "l");
        assert!(listed["result"]["tools"].is_array(), "{listed}");

        let first = body_json(
            svc.clone()
                .oneshot(with_host(post(
                    &delete_call(json!(1), "Groceries"),
                    Some("alice"),
                )))
                .await
                .unwrap(),
        )
        .await;
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        let go = accepted(&state, json!(2), "note-14");
        let response = svc
            .clone()
            .oneshot(with_host(post(&go, Some("alice"))))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let answer = body_json(response).await;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        let report: Value = serde_json::from_str(text).unwrap();
        assert_eq!(report["arguments"]["note_id"], "note-14");
        assert_eq!(
            report["confirmed"],
            json!({"tool":"notes_delete","chosen":"note-14","principal":"alice"})
        );

        // rmcp's own protocol answers still come through: an unknown method is 404.
        let unknown =
            json!({"jsonrpc":"2.0","id":9,"method":"nope/nope","params":{"_meta":meta()}});
        let response = svc
            .clone()
            .oneshot(with_host(post(&unknown, None)))
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
    }
}

#[tokio::test]
async fn hyper_service_fn_inner_over_tcp() {
    use hyper::server::conn::http1;
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;

    let notes = Notes::seeded();
    let inner = tower::service_fn(
        |req: http::Request<mcp_confirm::body::RequestBody<hyper::body::Incoming>>| async move {
            let confirmed = req.extensions().get::<Confirmed>().cloned();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
            let out = echo(&msg["params"]["arguments"], confirmed.as_ref());
            let answer = json!({"jsonrpc":"2.0","id":msg["id"],"result":{"resultType":"complete","structuredContent":out,"content":[]}});
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                answer.to_string(),
            ))))
        },
    );
    // The "auth layer": everyone on this socket is alice.
    let auth =
        tower::util::MapRequestLayer::new(|mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(Principal::new("alice"));
            req
        });
    let svc = ServiceBuilder::new()
        .layer(auth)
        .layer(layer(&notes))
        .service(inner);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = TowerToHyperService::new(svc.clone());
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
        }
    });

    let client = |body: Value| async move {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = post(&body, None);
        req.headers_mut()
            .insert("host", addr.to_string().parse().unwrap());
        body_json(sender.send_request(req).await.unwrap()).await
    };
    let first = client(delete_call(json!(1), "Groceries")).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = client(accepted(&state, json!(2), "note-7")).await;
    assert_eq!(
        answer["result"]["structuredContent"]["arguments"]["note_id"],
        "note-7"
    );
    assert_eq!(
        answer["result"]["structuredContent"]["confirmed"]["chosen"],
        "note-7"
    );
    let replay = client(accepted(&state, json!(3), "note-7")).await;
    assert_eq!(replay["error"]["data"]["reason"], "invalid_request_state");
}

#[test]
fn layer_and_service_are_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<ConfirmLayer>();
    check::<mcp_confirm::Confirm<Inner>>();
}
