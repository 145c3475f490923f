//! The library's pages served by the gateway: browser approvals decided on the approval page,
//! approvers finding theirs in the inbox, and who a browser visitor is (named by a sign-in proxy
//! that proves itself with a shared secret).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// What the upstream ran, and the headers each request came with.
#[derive(Clone, Default)]
struct Upstream {
    ran: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn serve_upstream(
    State(up): State<Upstream>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> axum::Json<Value> {
    let message = body.0;
    up.headers.lock().unwrap().push(headers);
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": [
            {"name": "notes_delete", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_wipe", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_list", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}}]}),
        _ => {
            up.ran.lock().unwrap().push(message["params"].clone());
            json!({"resultType": "complete", "content": [{"type": "text", "text": "deleted"}]})
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
}

const SECRET: &str = "proxy-secret-0123456789";
const ALICE: &str = "alice-token-0123456789";

struct Fixture {
    origin: String,
    up: Upstream,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
}

const PAGES: &str = r#"
    [pages.visitor]
    kind = "trusted_proxy_header"
    user_header = "x-forwarded-user"
    secret_header = "x-proxy-secret"
    secret = { file = "proxy-secret" }
"#;

const TOOLS: &str = r#"
    [route.tools.notes_delete]
    policy = "confirm"
    approve_in = "browser"
    [route.tools.notes_wipe]
    policy = "confirm"
    approvers = { any_of = ["bob"] }
"#;

async fn fixture() -> Fixture {
    let up = Upstream::default();
    let app = Router::new()
        .route("/mcp", post(serve_upstream))
        .with_state(up.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gateway-pages-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\n")).unwrap();
    std::fs::write(dir.join("proxy-secret"), SECRET).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let text = format!(
        r#"
        listen = "{addr}"
        audience = "http://{addr}"
        {PAGES}
        [auth]
        kind = "static_tokens"
        file = "tokens"
        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream}"
        {TOOLS}
        "#
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    let gateway = Gateway::build(&GatewayConfig::load(&path).unwrap(), &dir).unwrap();
    tokio::spawn(gateway.serve(listener));
    Fixture {
        origin: format!("http://{addr}"),
        up,
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    }
}

fn call(id: i64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}}},
        "name": tool, "arguments": {"title": "Groceries"}}})
}

fn retry(first: &Value, id: i64, state: &str) -> Value {
    let mut retry = first.clone();
    retry["id"] = json!(id);
    retry["params"]["requestState"] = json!(state);
    retry["params"]["inputResponses"] =
        json!({"mcp-confirm-gateway/confirmation": {"action": "accept"}});
    retry
}

impl Fixture {
    async fn mcp(&self, body: &Value, extra: &[(&str, &str)]) -> Value {
        let mut request = http::Request::post(format!("{}/notes/mcp", self.origin))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", body["params"]["name"].as_str().unwrap())
            .header("authorization", format!("Bearer {ALICE}"));
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(
                request
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap(),
            )
            .await
            .unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    /// A page request through the gateway, as the sign-in proxy would send it for `user`
    /// (with `secret`, or none).
    async fn page(
        &self,
        method: &str,
        url: &str,
        user: Option<&str>,
        secret: Option<&str>,
        form: Option<&str>,
    ) -> (u16, String) {
        let mut request = http::Request::builder().method(method).uri(url);
        if let Some(user) = user {
            request = request.header("x-forwarded-user", user);
        }
        if let Some(secret) = secret {
            request = request.header("x-proxy-secret", secret);
        }
        if form.is_some() {
            request = request
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", &self.origin)
                .header("sec-fetch-site", "same-origin");
        }
        let body = form.unwrap_or_default().to_owned();
        let response = self
            .client
            .request(request.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The page's URL and the state, from a URL-mode `input_required`.
fn sent_to_page(answer: &Value) -> (String, String) {
    let request = &answer["result"]["inputRequests"]["mcp-confirm-gateway/confirmation"];
    assert_eq!(request["params"]["mode"], "url", "{answer}");
    (
        request["params"]["url"].as_str().unwrap().to_owned(),
        answer["result"]["requestState"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_owned()
}

#[tokio::test]
async fn approved_on_the_page_the_retry_runs_and_declined_it_does_not() {
    let f = fixture().await;
    for (decision, runs) in [("decline", false), ("approve", true)] {
        let first = call(1, "notes_delete");
        let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
        assert!(
            url.starts_with(&format!("{}/notes/mcp/approve/", f.origin)),
            "{url}"
        );
        // A client's automatic accept before anyone decided: asked again, nothing runs.
        let early = f.mcp(&retry(&first, 2, &state), &[]).await;
        assert_eq!(sent_to_page(&early).0, url);
        let (status, html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("notes_delete"), "{html}");
        let form = format!("csrf={}&decision={decision}", csrf(&html));
        let (status, body) = f
            .page("POST", &url, Some("alice"), Some(SECRET), Some(&form))
            .await;
        assert_eq!(status, 200, "{body}");
        let after = f.mcp(&retry(&first, 3, &state), &[]).await;
        let ran = f.up.ran.lock().unwrap().len();
        if runs {
            assert_eq!(after["result"]["content"][0]["text"], "deleted", "{after}");
            assert_eq!(ran, 1);
        } else {
            assert_eq!(ran, 0, "{after}");
        }
    }
}

#[tokio::test]
async fn only_the_proxy_with_its_secret_names_a_visitor() {
    let f = fixture().await;
    let first = call(1, "notes_delete");
    let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
    // No secret, a wrong one, or a user header alone: no one is signed in, nothing is shown.
    for secret in [None, Some("wrong-secret-0123456789"), Some("")] {
        let (status, html) = f.page("GET", &url, Some("alice"), secret, None).await;
        assert_ne!(status, 200, "{secret:?}: {html}");
        assert!(!html.contains("notes_delete"), "{secret:?}");
    }
    // Someone else, signed in: not theirs to see or decide.
    let (status, html) = f
        .page("GET", &url, Some("mallory"), Some(SECRET), None)
        .await;
    assert_ne!(status, 200, "{html}");
    assert!(!html.contains("notes_delete"));
    // And a post that carries alice's name without the secret decides nothing.
    let (_, alice_html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
    let form = format!("csrf={}&decision=approve", csrf(&alice_html));
    let (status, _) = f.page("POST", &url, Some("alice"), None, Some(&form)).await;
    assert_ne!(status, 200);
    let after = f.mcp(&retry(&first, 2, &state), &[]).await;
    assert_eq!(sent_to_page(&after).0, url, "still waiting");
    assert!(f.up.ran.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_approver_finds_the_call_in_the_inbox_and_decides_it() {
    let f = fixture().await;
    let first = call(1, "notes_wipe");
    let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
    // The caller cannot approve their own call.
    let (_, html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
    assert!(
        !html.contains("name=\"decision\" value=\"approve\""),
        "{html}"
    );
    // Bob's inbox lists it; he approves.
    let inbox = format!("{}/notes/mcp/inbox", f.origin);
    let (status, listing) = f.page("GET", &inbox, Some("bob"), Some(SECRET), None).await;
    assert_eq!(status, 200, "{listing}");
    assert!(listing.contains("notes_wipe"), "{listing}");
    let (status, html) = f.page("GET", &url, Some("bob"), Some(SECRET), None).await;
    assert_eq!(status, 200, "{html}");
    let form = format!("csrf={}&decision=approve", csrf(&html));
    let (status, body) = f
        .page("POST", &url, Some("bob"), Some(SECRET), Some(&form))
        .await;
    assert_eq!(status, 200, "{body}");
    let done = f.mcp(&retry(&first, 2, &state), &[]).await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
}

#[tokio::test]
async fn the_proxy_secret_never_goes_upstream() {
    let f = fixture().await;
    // A passed call, sent with the proxy's secret (a proxy in front of the MCP path too).
    let listed = f
        .mcp(&call(1, "notes_list"), &[("x-proxy-secret", SECRET)])
        .await;
    assert_eq!(
        listed["result"]["content"][0]["text"], "deleted",
        "{listed}"
    );
    assert_eq!(f.up.ran.lock().unwrap().len(), 1);
    let headers = f.up.headers.lock().unwrap();
    assert!(headers.len() >= 2, "the list and the call");
    assert!(headers.iter().all(|h| !h.contains_key("x-proxy-secret")));
}

#[test]
fn pages_a_hurried_operator_writes_are_refused() {
    let route = r#"
        [auth]
        kind = "static_tokens"
        file = "tokens"
        [[route]]
        path = "/notes/mcp"
        upstream = "http://127.0.0.1:9/mcp"
    "#;
    for (text, says) in [
        (format!("{route}{TOOLS}"), "no `[pages]`"),
        (
            format!(
                "{PAGES}{route}[route.tools.x]\npolicy = \"confirm\"\napprovers = {{ any_of = [\"bob\"], role = \"admin\" }}"
            ),
            "exactly one of",
        ),
        (
            format!(
                "{PAGES}{route}[route.tools.x]\npolicy = \"confirm\"\napprovers = {{ anyone_but_caller = true }}\nstanding = {{ scope = \"/w\", up_to = \"1h\", uses = 2 }}"
            ),
            "cannot go together",
        ),
        (
            format!("{PAGES}{route}[route.tools.x]\npolicy = \"allow\"\napprove_in = \"browser\""),
            "only go with",
        ),
    ] {
        let error = GatewayConfig::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}
