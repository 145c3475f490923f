//! The upstream side of one route: a pooled HTTP/1.1 client (`hyper-util`'s) that forwards a
//! request as the caller sent it, minus what must not cross (hop-by-hop headers, the caller's
//! credentials), plus the operator's own credential; and the gateway's own `tools/list`, as the
//! operator, to learn the tools' annotations.
//!
//! A request is never retried: a connection that fails is a failed call, answered `502`, even
//! where retrying would be harmless, because the gateway cannot tell a call with side effects
//! from one without.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_confirm::Principal;
use mcp_confirm::body::RequestBody;
use serde_json::{Value, json};

/// The body the layer hands on: the bytes it read and checked (a POST), or the caller's body
/// untouched.
pub type Forwarded = RequestBody<Full<Bytes>>;

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body on its way upstream: the layer's, or one the gateway wrote (a continuation).
pub type Outgoing = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// The protocol version the gateway speaks to upstreams on its own requests.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// The most a tool list may hold (bytes).
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;

/// How long the gateway waits for a tool list.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most pages of a tool list the gateway follows.
pub const MAX_LIST_PAGES: usize = 64;

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), and the caller's
/// credentials, which are theirs and never the upstream's business.
const NOT_FORWARDED: [HeaderName; 10] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
    header::AUTHORIZATION,
    header::COOKIE,
];

/// One upstream: where it is, and the header that carries the operator's credential there.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Outgoing>,
    lister: Client<HttpConnector, Full<Bytes>>,
    uri: Arc<Uri>,
    credential: Option<Arc<(HeaderName, HeaderValue)>>,
    /// The header the route names the principal in, if any.
    principal_header: Option<HeaderName>,
    /// The route passes the caller's own `Authorization` on (token passthrough, which the MCP
    /// authorization spec forbids unless the upstream is the token's audience too).
    pass_caller_token: bool,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credential is never printed.
        f.debug_struct("Upstream")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

/// The upstream could not be reached, or answered something that is not a tool list.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// No connection, or it broke.
    #[error("the upstream cannot be reached: {0}")]
    Unreachable(String),
    /// It took longer than [`LIST_TIMEOUT`].
    #[error("the upstream did not answer in time")]
    Timeout,
    /// Its answer is not a tool list.
    #[error("the upstream's answer is not a tool list: {0}")]
    NotAList(String),
    /// Its answer to a request of the gateway's own is not a result.
    #[error("the upstream's answer is not usable: {0}")]
    BadAnswer(String),
}

impl Upstream {
    /// The upstream at `uri`, with the operator's `credential` header on every request.
    pub fn new(uri: Uri, credential: Option<(HeaderName, HeaderValue)>) -> Self {
        Self::with_caller_token(uri, credential, false)
    }

    /// As [`new`](Self::new), and with `pass_caller_token` the caller's own `Authorization`
    /// header goes upstream too (the operator's `credential` wins if it is that header).
    pub fn with_caller_token(
        uri: Uri,
        credential: Option<(HeaderName, HeaderValue)>,
        pass_caller_token: bool,
    ) -> Self {
        Self::with_options(uri, credential, pass_caller_token, None)
    }

    /// As [`with_caller_token`](Self::with_caller_token), and with `principal_header` every
    /// request upstream names the caller's principal in that header (whatever the caller sent
    /// under that name is removed).
    pub fn with_options(
        uri: Uri,
        credential: Option<(HeaderName, HeaderValue)>,
        pass_caller_token: bool,
        principal_header: Option<HeaderName>,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            // Never again: the gateway cannot tell a call with side effects from one without.
            .retry_canceled_requests(false)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector.clone());
        let lister = Client::builder(TokioExecutor::new())
            .retry_canceled_requests(false)
            .build(connector);
        Self {
            client,
            lister,
            uri: Arc::new(uri),
            credential: credential.map(Arc::new),
            principal_header,
            pass_caller_token,
        }
    }

    /// The headers of a request going upstream: the caller's, minus what must not cross, plus
    /// the operator's credential.
    fn headers_upstream(&self, headers: &mut HeaderMap) {
        let caller = self
            .pass_caller_token
            .then(|| headers.get(header::AUTHORIZATION).cloned())
            .flatten();
        strip(headers);
        if let Some(token) = caller {
            headers.insert(header::AUTHORIZATION, token);
        }
        if let Some(credential) = &self.credential {
            headers.insert(credential.0.clone(), credential.1.clone());
        }
    }

    /// Lists the upstream's tools as the operator (every page), for their annotations.
    ///
    /// # Errors
    /// [`UpstreamError`] if it cannot be reached in time or does not answer with a tool list.
    pub async fn list_tools(&self) -> Result<Listed, UpstreamError> {
        tokio::time::timeout(LIST_TIMEOUT, self.list_all())
            .await
            .map_err(|_| UpstreamError::Timeout)?
    }

    async fn list_all(&self) -> Result<Listed, UpstreamError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut ttl = None;
        for page in 0..MAX_LIST_PAGES {
            let result = self.list_page(page, cursor.as_deref()).await?;
            let listed = result
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| UpstreamError::NotAList("no `tools` array".into()))?;
            tools.extend(listed.iter().cloned());
            if let Some(ms) = result.get("ttlMs").and_then(Value::as_u64) {
                let page_ttl = Duration::from_millis(ms);
                ttl = Some(ttl.map_or(page_ttl, |t: Duration| t.min(page_ttl)));
            }
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(Listed { tools, ttl }),
            }
        }
        Err(UpstreamError::NotAList(format!(
            "more than {MAX_LIST_PAGES} pages"
        )))
    }

    async fn list_page(&self, page: usize, cursor: Option<&str>) -> Result<Value, UpstreamError> {
        let mut params = json!({"_meta": own_meta()});
        if let Some(cursor) = cursor {
            params["cursor"] = json!(cursor);
        }
        let id = format!("mcp-confirm-gateway/tools-list/{page}");
        self.exchange("tools/list", None, params, &id)
            .await
            .map_err(|e| match e {
                UpstreamError::BadAnswer(why) => UpstreamError::NotAList(why),
                other => other,
            })
    }

    /// Calls `tool` with `arguments` on the gateway's behalf, for a lookup: as `principal`
    /// (the route's principal header, and the caller's token where the route passes it on),
    /// bounded in size ([`MAX_LIST_BYTES`]) and time ([`LIST_TIMEOUT`]). The result, which
    /// must be complete: a lookup cannot answer the upstream's questions.
    ///
    /// # Errors
    /// [`UpstreamError`] if it cannot be reached in time or does not answer with a result.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        principal: &Principal,
        caller: Option<&HeaderMap>,
    ) -> Result<Value, UpstreamError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "mcp-confirm-gateway/lookup/{}",
            N.fetch_add(1, Ordering::Relaxed)
        );
        let params = json!({"_meta": own_meta(), "name": tool, "arguments": arguments});
        let exchange = self.exchange("tools/call", Some((tool, principal, caller)), params, &id);
        let result = tokio::time::timeout(LIST_TIMEOUT, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout)??;
        match result.get("resultType").and_then(Value::as_str) {
            None | Some("complete") => Ok(result),
            Some(other) => Err(UpstreamError::BadAnswer(format!(
                "a lookup answered {other:?}, not a complete result"
            ))),
        }
    }

    /// One request of the gateway's own and its answer's `result`, read whole (JSON or an
    /// event stream) up to [`MAX_LIST_BYTES`].
    async fn exchange(
        &self,
        method: &str,
        call: Option<(&str, &Principal, Option<&HeaderMap>)>,
        params: Value,
        id: &str,
    ) -> Result<Value, UpstreamError> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut builder = Request::post(self.uri.as_ref().clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", method);
        if let Some((tool, _, _)) = call {
            builder = builder.header("mcp-name", tool);
        }
        let mut request = builder
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| UpstreamError::BadAnswer(e.to_string()))?;
        let headers = request.headers_mut();
        if let Some((_, _, Some(caller))) = call
            && self.pass_caller_token
            && let Some(token) = caller.get(header::AUTHORIZATION)
        {
            headers.insert(header::AUTHORIZATION, token.clone());
        }
        self.headers_upstream(headers);
        if let Some((_, principal, _)) = call {
            self.name_principal(headers, Some(principal))?;
        }
        let response = self
            .lister
            .request(request)
            .await
            .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
        let status = response.status();
        let sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let bytes = Limited::new(response.into_body(), MAX_LIST_BYTES)
            .collect()
            .await
            .map_err(|e| UpstreamError::BadAnswer(format!("reading it: {e}")))?
            .to_bytes();
        if !status.is_success() {
            return Err(UpstreamError::BadAnswer(format!("HTTP {status}")));
        }
        let message = if sse {
            sse_message(&bytes, id)?
        } else {
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| UpstreamError::BadAnswer(e.to_string()))?
        };
        if message.get("id").and_then(Value::as_str) != Some(id) {
            return Err(UpstreamError::BadAnswer(
                "an answer to another request".into(),
            ));
        }
        if let Some(error) = message.get("error") {
            return Err(UpstreamError::BadAnswer(format!("an error: {error}")));
        }
        message
            .get("result")
            .cloned()
            .ok_or_else(|| UpstreamError::BadAnswer("no result".into()))
    }

    /// Writes `principal` into the route's principal header, after removing whatever the
    /// caller sent under that name. No principal, or one that cannot be a header value: the
    /// header is left out (the upstream then sees no one, never someone the caller named).
    ///
    /// # Errors
    /// [`UpstreamError::BadAnswer`] for a principal that cannot be written: the request is not
    /// sent rather than sent as no one.
    fn name_principal(
        &self,
        headers: &mut HeaderMap,
        principal: Option<&Principal>,
    ) -> Result<(), UpstreamError> {
        let Some(name) = &self.principal_header else {
            return Ok(());
        };
        headers.remove(name);
        if let Some(principal) = principal {
            let value = HeaderValue::from_str(principal.subject()).map_err(|_| {
                UpstreamError::BadAnswer("the principal cannot be written in a header".into())
            })?;
            headers.insert(name.clone(), value);
        }
        Ok(())
    }
}

/// The `_meta` of the gateway's own requests: no capabilities (it answers no question).
fn own_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-confirm-gateway", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What a tool list said.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// The tool definitions, every page's.
    pub tools: Vec<Value>,
    /// The shortest `ttlMs` a page gave.
    pub ttl: Option<Duration>,
}

/// The JSON-RPC response with `id` in an SSE stream's `data:` lines.
fn sse_message(bytes: &[u8], id: &str) -> Result<Value, UpstreamError> {
    let text = std::str::from_utf8(bytes).map_err(|e| UpstreamError::BadAnswer(e.to_string()))?;
    for event in text.split("\n\n").flat_map(|e| e.split("\r\n\r\n")) {
        let Some(data) = event_data(event) else {
            continue;
        };
        if let Ok(message) = serde_json::from_str::<Value>(&data)
            && message.get("id").and_then(Value::as_str) == Some(id)
        {
            return Ok(message);
        }
    }
    Err(UpstreamError::BadAnswer(
        "no answer in the event stream".into(),
    ))
}

/// The data of one event of an event stream: its `data:` lines joined (one leading space
/// dropped from each, as the SSE format says); `None` for an event without data.
pub(crate) fn event_data(event: &str) -> Option<String> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

/// Removes what must not cross the gateway, either way: hop-by-hop headers, those the
/// `Connection` header names, and credentials.
pub fn strip(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in NOT_FORWARDED.iter().chain(&named) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// What an upstream answers through the gateway: its own body, streamed as it comes, or the
/// gateway's `502` when it could not be reached.
pub type Answer = Response<AnswerBody>;

/// The body of an [`Answer`].
pub type AnswerBody = Either<hyper::body::Incoming, Full<Bytes>>;

impl<B> tower_service::Service<Request<B>> for Upstream
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let body = body.map_err(Into::into).boxed();
        self.headers_upstream(&mut parts.headers);
        let principal = parts.extensions.get::<Principal>().cloned();
        if let Err(e) = self.name_principal(&mut parts.headers, principal.as_ref()) {
            tracing::error!(error = %e, "the call is not forwarded");
            return Box::pin(async { Ok(bad_gateway()) });
        }
        parts.uri = self.target(&parts.uri);
        let request = Request::from_parts(parts, body);
        let client = self.client.clone();
        Box::pin(async move {
            match client.request(request).await {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    strip(&mut parts.headers);
                    Ok(Response::from_parts(parts, Either::Left(body)))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream cannot be reached; the call is not retried");
                    Ok(bad_gateway())
                }
            }
        })
    }
}

impl Upstream {
    /// The upstream's URI for a request that came in as `uri`: the upstream's own path, and
    /// the caller's query if it had one.
    fn target(&self, uri: &Uri) -> Uri {
        let mut parts = self.uri.as_ref().clone().into_parts();
        if let Some(query) = uri.query() {
            let path = self.uri.path();
            let joined = match self.uri.query() {
                Some(own) => format!("{path}?{own}&{query}"),
                None => format!("{path}?{query}"),
            };
            if let Ok(pq) = joined.parse() {
                parts.path_and_query = Some(pq);
            }
        }
        Uri::from_parts(parts).unwrap_or_else(|_| self.uri.as_ref().clone())
    }
}

/// The gateway's answer when the upstream cannot be reached: one frozen message, the reason in
/// the log.
pub fn bad_gateway() -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {
        "code": -32603, "message": "The upstream server cannot be reached."}});
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
