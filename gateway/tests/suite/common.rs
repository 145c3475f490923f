//! What the gateway's integration tests share: an upstream served in-process, a gateway built
//! from a file in a fresh directory and served on a free port, an HTTP client, and the shapes
//! of `tools/call` requests and their retries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// Alice's static token (the files the tests write name her `alice`).
pub const ALICE: &str = "alice-token-0123456789";
/// Bob's.
pub const BOB: &str = "bob-token-0123456789";
/// The gateway's own form's key.
pub const OWN_KEY: &str = "mcp-confirm-gateway/confirmation";

/// `router` served on a free port; its `/mcp` URL.
pub async fn serve_upstream(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

/// A fresh directory named after `what`, with a tokens file naming alice and bob.
pub fn temp_dir(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gateway-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    dir
}

/// A free port's listener and its address, for a file that must name it.
pub async fn bind() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// The gateway `text` describes, written to `dir/gateway.toml` and built there.
///
/// # Errors
/// The file's or the build's error, as text.
pub fn build(dir: &Path, text: &str) -> Result<Gateway, String> {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    let config = GatewayConfig::load(&path).map_err(|e| e.to_string())?;
    Gateway::build(&config, dir).map_err(|e| e.to_string())
}

/// `gateway` served on `listener`.
pub fn serve(gateway: &Gateway, listener: tokio::net::TcpListener) {
    tokio::spawn(gateway.clone().serve(listener));
}

/// The static-tokens section every test file uses unless it signs callers in otherwise.
pub const STATIC_TOKENS: &str = "[auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n";

/// A plain HTTP/1.1 client.
pub type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// A new client.
pub fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// Sends `request` with `body`; the status, headers and body as text.
pub async fn send(
    client: &Client,
    request: http::request::Builder,
    body: String,
) -> (u16, http::HeaderMap, String) {
    let response = client
        .request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// A `tools/call` POST of `body` to `url` with the transport's headers, the bearer `token`
/// and `extra` headers; the answer as JSON (`null` if it is not).
pub async fn post_call(
    client: &Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
    extra: &[(&str, &str)],
) -> Value {
    let mut request = http::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or(""))
        .header("mcp-name", body["params"]["name"].as_str().unwrap_or(""));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let (_, _, text) = send(client, request, body.to_string()).await;
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// A `tools/call` of `tool` with `arguments`, from a client that shows forms (and, with
/// `url_mode`, opens URLs).
pub fn call_with(id: i64, tool: &str, arguments: Value, url_mode: bool) -> Value {
    let elicitation = if url_mode {
        json!({"form": {}, "url": {}})
    } else {
        json!({"form": {}})
    };
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": elicitation}},
        "name": tool, "arguments": arguments}})
}

/// A `tools/call` from a client that shows forms.
pub fn call(id: i64, tool: &str, arguments: Value) -> Value {
    call_with(id, tool, arguments, false)
}

/// `first` again under `id`, with `state` and `responses`.
pub fn retry(first: &Value, id: i64, state: &Value, responses: Value) -> Value {
    let mut retry = first.clone();
    retry["id"] = json!(id);
    retry["params"]["requestState"] = state.clone();
    retry["params"]["inputResponses"] = responses;
    retry
}

/// `first` again, the form `asked` accepted with `content`.
pub fn accept(first: &Value, id: i64, asked: &Value, content: Value) -> Value {
    let key = asked["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("not asked: {asked}"))
        .keys()
        .next()
        .unwrap()
        .clone();
    retry(
        first,
        id,
        &asked["result"]["requestState"],
        json!({ key: {"action": "accept", "content": content} }),
    )
}

/// The environment variable naming the Redis the tests share. Not under the gateway's own
/// prefix (`MCP_CONFIRM_GATEWAY_`), whose variables override the file's keys.
const REDIS_URL_ENV: &str = "MCP_CONFIRM_TEST_REDIS_URL";
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// The Redis the tests share: `MCP_CONFIRM_TEST_REDIS_URL`, else the local one.
pub fn redis_url() -> String {
    std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned())
}

/// Whether Redis answers; CI requires it (`MCP_CONFIRM_REQUIRE_BACKENDS`).
pub fn redis_up() -> bool {
    backend_up("Redis", &redis_url(), "redis://")
}

/// The environment variable naming the PostgreSQL the tests share (not under the gateway's
/// prefix either).
const POSTGRES_URL_ENV: &str = "MCP_CONFIRM_TEST_POSTGRES_URL";
const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL the tests share: `MCP_CONFIRM_TEST_POSTGRES_URL`, else the local one.
pub fn postgres_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// Whether PostgreSQL answers; CI requires it (`MCP_CONFIRM_REQUIRE_BACKENDS`).
pub fn postgres_up() -> bool {
    backend_up("PostgreSQL", &postgres_url(), "postgres://")
}

/// Whether the backend at `url` takes a connection; a skip said loudly, or a failure where
/// backends are required.
fn backend_up(name: &str, url: &str, scheme: &str) -> bool {
    let addr = url
        .trim_start_matches(scheme)
        .split(['/', '?'])
        .next()
        .unwrap_or_default()
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .to_owned();
    let up = std::net::TcpStream::connect(&addr).is_ok();
    if !up {
        assert!(
            std::env::var_os("MCP_CONFIRM_REQUIRE_BACKENDS").is_none(),
            "{name} is required and not reachable at {addr}"
        );
        eprintln!("SKIPPED: no {name} at {addr}");
    }
    up
}

/// The sign-in proxy's shared secret in the page tests' files (`proxy-secret`).
pub const SECRET: &str = "proxy-secret-0123456789";

/// The `[pages]` section of the page tests' files: visitors named by a trusted sign-in proxy.
pub const PAGES: &str = r#"
    [pages.visitor]
    kind = "trusted_proxy_header"
    user_header = "x-forwarded-user"
    secret_header = "x-proxy-secret"
    secret = { file = "proxy-secret" }
"#;

/// A page request through the gateway at `origin`, as the sign-in proxy would send it for
/// `user` (with `secret`, or none): a form post carries the browser's same-origin headers.
pub async fn proxy_page(
    client: &Client,
    origin: &str,
    (method, url): (&str, &str),
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
            .header("origin", origin)
            .header("sec-fetch-site", "same-origin");
    }
    let body = form.unwrap_or_default().to_owned();
    let (status, _, text) = send(client, request, body).await;
    (status, text)
}
