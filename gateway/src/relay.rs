//! Upstreams that ask questions themselves: a confirmed call whose upstream answers with its own
//! `input_required` is relayed to the client, the upstream's `requestState` carried inside a
//! continuation of the gateway's (signed, never rewritten), so that the client's later rounds
//! reach the upstream without the user being asked to confirm again, and only for that call.
//!
//! [`Relay`] sits between the layer and the upstream and sees only what the layer forwards. For a
//! call the layer confirmed (it carries [`mcp_confirm::Confirmed`]) or a continuation the route
//! verified (it carries [`Bound`]), an `input_required` answer (JSON, or an event in a stream,
//! rewritten as it passes) gets a [`Continuation`] as its `requestState`. A continuation binds
//! the route, the principal, the tool and its definition, the call's arguments, the user's
//! choice, a one-time nonce claimed in the route's replay store, the store's boot epoch and an
//! expiry. The route opens it on the next round ([`Sealer::open`]), claims its nonce, strips the
//! gateway's own keys from `inputResponses`, puts the upstream's state back and forwards exactly
//! the confirmed call: one round, once.
//!
//! The gateway's own form answers under [`OWN_KEY`], in a namespace of its own: an upstream
//! question under a key in that namespace cannot be relayed without ambiguity and is answered
//! with an error instead.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::{Request, Response, header};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, Limited};
use mcp_confirm::Principal;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::answer::{GatewayBody, json_answer};
use crate::upstream::{BoxError, Upstream};

/// The namespace of the gateway's own `inputRequests` keys.
pub const NAMESPACE: &str = "mcp-confirm-gateway/";

/// The key the gateway's own form is asked and answered under.
pub const OWN_KEY: &str = "mcp-confirm-gateway/confirmation";

/// How long the client has to answer the upstream's question.
pub const CONTINUATION_TTL: Duration = Duration::from_secs(600);

/// The longest upstream `requestState` carried (bytes); a longer one is not relayed.
pub const MAX_UPSTREAM_STATE: usize = 64 * 1024;

/// The most a relayed JSON answer, or one event of a relayed stream, may hold (bytes).
pub const MAX_RELAYED_BYTES: usize = 8 * 1024 * 1024;

/// The one answer for a continuation that does not hold (the reason goes to the log).
pub const INVALID: &str = "Invalid or expired requestState";

/// The answer in place of an upstream question that cannot be relayed.
const NOT_RELAYED: &str = "The upstream server's question cannot be relayed.";

/// What a continuation authorizes: exactly this call, on this route, for this principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    /// The route's URL.
    pub aud: String,
    /// The principal's subject.
    pub sub: String,
    /// The tool.
    pub tool: String,
    /// The tool definition's SHA-256 (hex) when it was confirmed: a swapped tool is another.
    pub def: String,
    /// SHA-256 (hex) of the call's arguments as the client sends them, without the argument the
    /// choice is written into.
    pub args: String,
    /// The argument the user's choice is written into, and the choice.
    pub sel: Option<(String, String)>,
}

/// A continuation: what it binds, the upstream's state, and its own one-time use.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Continuation {
    /// The call it continues.
    pub bound: Bound,
    /// The upstream's `requestState`, as it gave it.
    pub up: Option<String>,
    /// The nonce claimed when it is used (hex).
    pub n: String,
    /// Until when (Unix seconds).
    pub exp: u64,
    /// The replay store's boot epoch, for a store that forgets on restart (hex).
    pub ep: Option<String>,
}

/// Seals and opens continuations in the core's token format, under the route's key ring: a
/// continuation sealed before a rotation opens while the ring still holds its key.
#[derive(Clone)]
pub struct Sealer {
    keys: mcp_confirm::KeyRing,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

/// The domain continuations are sealed for: no other sealed value of the ring opens as one.
const DOMAIN: &str = "mcp-confirm-gateway/continuation/v2";

impl Sealer {
    /// A sealer under `keys` (the gateway's ring: the first key seals, every key opens).
    pub fn new(keys: mcp_confirm::KeyRing) -> Self {
        Self { keys }
    }

    /// The continuation as a `requestState`; `None` if it is too large to seal.
    pub fn seal(&self, continuation: &Continuation) -> Option<String> {
        let payload = serde_json::to_vec(continuation).ok()?;
        self.keys.seal_value(DOMAIN, &payload).ok()
    }

    /// Whether `state` has a continuation's shape (the core's sealed-value format): such a
    /// state is the route's to open, never the layer's nor the upstream's.
    pub fn is_continuation(&self, state: &str) -> bool {
        self.keys.is_sealed_value(state)
    }

    /// The continuation a `requestState` holds, if this gateway's ring sealed it (the tag
    /// compared in constant time). Its binding, expiry and nonce are the caller's to check.
    ///
    /// # Errors
    /// Why not, for the log.
    pub fn open(&self, state: &str) -> Result<Continuation, &'static str> {
        let payload = self.keys.open_value(DOMAIN, state).map_err(|e| match e {
            mcp_confirm::token::SealError::UnknownKey => "sealed under a key no longer held",
            mcp_confirm::token::SealError::BadTag => "bad tag",
            _ => "not a continuation",
        })?;
        serde_json::from_slice(&payload).map_err(|_| "bad payload")
    }
}

/// The core's digest (hex) of `arguments` without `select_into`: what a continuation binds,
/// computed as a `requestState` binds them.
pub fn arguments_digest(arguments: &Value, select_into: Option<&str>) -> String {
    hex::encode(mcp_confirm::token::arguments_digest(
        Some(arguments),
        select_into,
    ))
}

/// What the relay needs from the route: who it is, and its replay store's epoch.
#[derive(Debug, Clone)]
pub struct RelayContext {
    /// The sealer.
    pub sealer: Sealer,
    /// The route's URL.
    pub audience: String,
    /// The replay store's boot epoch, if it forgets on restart.
    pub epoch: Option<String>,
    /// Each tool's definition hash (hex), as of the catalog this relay was built for.
    pub definitions: Arc<std::collections::BTreeMap<String, String>>,
}

/// The service between the layer and the upstream; see the module's documentation.
#[derive(Debug, Clone)]
pub struct Relay {
    upstream: Upstream,
    context: Arc<RelayContext>,
}

impl Relay {
    /// A relay to `upstream`.
    pub fn new(upstream: Upstream, context: RelayContext) -> Self {
        Self {
            upstream,
            context: Arc::new(context),
        }
    }
}

impl<B> tower_service::Service<Request<B>> for Relay
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut upstream = self.upstream.clone();
        let context = Arc::clone(&self.context);
        let bound = request.extensions().get::<Bound>().cloned();
        let confirmed = request
            .extensions()
            .get::<mcp_confirm::Confirmed>()
            .cloned();
        if bound.is_none() && confirmed.is_none() {
            // Not a confirmed call: whatever the upstream answers goes back as it is.
            let future = tower_service::Service::call(&mut upstream, request);
            return Box::pin(async move {
                let Ok(response) = future.await;
                Ok(response.map(|body| body.map_err(Into::into).boxed_unsync()))
            });
        }
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = match Limited::new(body, MAX_RELAYED_BYTES).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => return Ok(gateway_error(Value::Null, NOT_RELAYED)),
            };
            let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            let bound = bound.or_else(|| {
                let confirmed = confirmed?;
                let principal = parts.extensions.get::<Principal>()?;
                let tool = confirmed.tool.to_string();
                let select = confirmed.selected_into.as_deref();
                let arguments = message
                    .pointer("/params/arguments")
                    .cloned()
                    .unwrap_or(json!({}));
                Some(Bound {
                    aud: context.audience.clone(),
                    sub: principal.subject().to_owned(),
                    def: context.definitions.get(&tool)?.clone(),
                    args: arguments_digest(&arguments, select),
                    sel: select
                        .zip(confirmed.chosen.clone())
                        .map(|(f, c)| (f.to_owned(), c)),
                    tool,
                })
            });
            let request = Request::from_parts(parts, Full::new(bytes));
            let Ok(response) = tower_service::Service::call(&mut upstream, request).await;
            if bound.is_none() {
                // A confirmed call the relay cannot bind (no principal, a tool not in the
                // catalog): its answer passes, but a question in it is not relayed.
                tracing::warn!(
                    "a confirmed call could not be bound; an upstream question in its answer is not relayed"
                );
            }
            let rewriter = Rewriter { id, bound, context };
            Ok(rewrite_response(response, rewriter).await)
        })
    }
}

/// Rewrites the upstream's answer to one request: its `input_required` result gets a
/// continuation, or, when it cannot be relayed, becomes an error.
#[derive(Clone)]
struct Rewriter {
    id: Value,
    bound: Option<Bound>,
    context: Arc<RelayContext>,
}

impl Rewriter {
    /// `message` as it goes to the client; `None` when it is not the answer to rewrite.
    fn rewrite(&self, message: &Value) -> Option<Value> {
        if message.get("id") != Some(&self.id)
            || message
                .pointer("/result/resultType")
                .and_then(Value::as_str)
                != Some("input_required")
        {
            return None;
        }
        Some(match self.continued(message) {
            Ok(message) => message,
            Err(why) => {
                tracing::warn!(reason = why, "an upstream question was not relayed");
                json!({"jsonrpc": "2.0", "id": self.id,
                    "error": {"code": -32603, "message": NOT_RELAYED}})
            }
        })
    }

    fn continued(&self, message: &Value) -> Result<Value, &'static str> {
        let bound = self.bound.clone().ok_or("the call is not bound")?;
        let result = message.get("result").ok_or("no result")?;
        if let Some(requests) = result.get("inputRequests").and_then(Value::as_object)
            && requests.keys().any(|k| k.starts_with(NAMESPACE))
        {
            return Err("the upstream asks under a key in the gateway's namespace");
        }
        let up = match result.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.len() <= MAX_UPSTREAM_STATE => Some(s.clone()),
            Some(Value::String(_)) => return Err("the upstream's requestState is too long"),
            Some(_) => return Err("the upstream's requestState is not a string"),
        };
        let exp = SystemTime::now()
            .checked_add(CONTINUATION_TTL)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let continuation = Continuation {
            bound,
            up,
            n: mcp_confirm::store::Nonce::random().to_hex(),
            exp,
            ep: self.context.epoch.clone(),
        };
        let sealed = self
            .context
            .sealer
            .seal(&continuation)
            .ok_or("the continuation is too large to seal")?;
        let mut message = message.clone();
        message["result"]["requestState"] = json!(sealed);
        Ok(message)
    }
}

/// The upstream's response with the one answer rewritten: a JSON body read whole, an event
/// stream event by event as it passes; anything else untouched.
async fn rewrite_response(
    response: Response<crate::upstream::AnswerBody>,
    rewriter: Rewriter,
) -> Response<GatewayBody> {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let (mut parts, body) = response.into_parts();
    if content_type.starts_with("application/json") {
        let mut body = body.map_err(Into::into).boxed_unsync();
        let mut buffered = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return gateway_error(rewriter.id.clone(), NOT_RELAYED);
            };
            if let Ok(data) = frame.into_data() {
                buffered.extend_from_slice(&data);
            }
            if buffered.len() > MAX_RELAYED_BYTES {
                // Too large to be a question: the answer of a call that ran, passed on as it
                // comes (what was read, then the rest).
                let body = Prefixed {
                    prefix: Some(buffered.freeze()),
                    rest: body,
                };
                return Response::from_parts(parts, body.boxed_unsync());
            }
        }
        let bytes = buffered.freeze();
        let rewritten = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|m| rewriter.rewrite(&m));
        let bytes = match rewritten {
            Some(message) => {
                parts.headers.remove(header::CONTENT_LENGTH);
                Bytes::from(message.to_string())
            }
            None => bytes,
        };
        return Response::from_parts(
            parts,
            Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
    }
    if content_type.starts_with("text/event-stream") {
        parts.headers.remove(header::CONTENT_LENGTH);
        let body = EventRewrite {
            inner: body.map_err(Into::into).boxed_unsync(),
            pending: BytesMut::new(),
            rewriter,
            ended: false,
        };
        return Response::from_parts(parts, body.boxed_unsync());
    }
    Response::from_parts(parts, body.map_err(Into::into).boxed_unsync())
}

/// Bytes already read, then the rest of the body.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: GatewayBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// An event stream passed through event by event, the one answer rewritten.
struct EventRewrite {
    inner: GatewayBody,
    pending: BytesMut,
    rewriter: Rewriter,
    ended: bool,
}

impl EventRewrite {
    /// The first complete event in `pending` (with its blank line), if there is one.
    fn next_event(&mut self) -> Option<Bytes> {
        let text = &self.pending[..];
        let mut at = None;
        for (i, window) in text.windows(2).enumerate() {
            if window == b"\n\n" || window == b"\r\r" {
                at = Some(i + 2);
                break;
            }
            if i + 4 <= text.len() && &text[i..i + 4] == b"\r\n\r\n" {
                at = Some(i + 4);
                break;
            }
        }
        at.map(|end| self.pending.split_to(end).freeze())
    }

    /// The event as it goes on: the same bytes, or the rewritten answer.
    fn process(&self, event: Bytes) -> Bytes {
        let Ok(text) = std::str::from_utf8(&event) else {
            return event;
        };
        let Some(rewritten) = crate::upstream::event_data(text)
            .and_then(|data| serde_json::from_str::<Value>(&data).ok())
            .and_then(|m| self.rewriter.rewrite(&m))
        else {
            return event;
        };
        // The event's other fields (`event:`, `id:`) stay; its data is the rewritten answer.
        let mut out = String::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("data:"))
        {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&rewritten.to_string());
        out.push_str("\n\n");
        Bytes::from(out)
    }
}

impl Body for EventRewrite {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.next_event() {
                return Poll::Ready(Some(Ok(Frame::data(this.process(event)))));
            }
            if this.ended {
                if this.pending.is_empty() {
                    return Poll::Ready(None);
                }
                // An unfinished last event goes on as it came.
                let rest = this.pending.split().freeze();
                return Poll::Ready(Some(Ok(Frame::data(rest))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if this.pending.len() + data.len() > MAX_RELAYED_BYTES {
                            return Poll::Ready(Some(Err(
                                "an event of the upstream's stream is too large".into(),
                            )));
                        }
                        this.pending.extend_from_slice(&data);
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A JSON-RPC error of the gateway's in place of the upstream's answer.
fn gateway_error(id: Value, message: &'static str) -> Response<GatewayBody> {
    json_answer(
        http::StatusCode::OK,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> Bound {
        Bound {
            aud: "http://gw/notes/mcp".into(),
            sub: "alice".into(),
            tool: "notes_delete".into(),
            def: "00".into(),
            args: arguments_digest(&json!({"title": "T", "id": "x"}), Some("id")),
            sel: Some(("id".into(), "n2".into())),
        }
    }

    fn continuation() -> Continuation {
        Continuation {
            bound: bound(),
            up: Some("upstream-state".into()),
            n: "00".repeat(16),
            exp: 1,
            ep: None,
        }
    }

    fn ring(keys: &[(&str, u8)]) -> mcp_confirm::KeyRing {
        use sha2::Digest;
        mcp_confirm::KeyRing::new(
            keys.iter()
                .map(|(id, seed)| (*id, sha2::Sha256::digest([*seed]))),
        )
        .unwrap()
    }

    #[test]
    fn a_sealed_continuation_opens_only_unchanged_and_under_its_ring() {
        let sealer = Sealer::new(ring(&[("k1", 1)]));
        let sealed = sealer.seal(&continuation()).unwrap();
        assert!(sealed.starts_with(mcp_confirm::token::PREFIX));
        assert!(sealer.is_continuation(&sealed));
        let opened = sealer.open(&sealed).unwrap();
        assert_eq!(opened.bound, bound());
        assert_eq!(opened.up.as_deref(), Some("upstream-state"));
        // Another key under the same id, or no such key.
        assert!(Sealer::new(ring(&[("k1", 2)])).open(&sealed).is_err());
        assert!(Sealer::new(ring(&[("k2", 1)])).open(&sealed).is_err());
        // After a rotation to [k2, k1], the continuation sealed by k1 still opens (#52, 8).
        assert_eq!(
            Sealer::new(ring(&[("k2", 2), ("k1", 1)]))
                .open(&sealed)
                .unwrap()
                .bound,
            bound()
        );
        for junk in ["", "mcpgw1.a.b", "mcpc1.x", "up-1"] {
            assert!(sealer.open(junk).is_err(), "{junk:?}");
            assert!(!sealer.is_continuation(junk), "{junk:?}");
        }
    }

    #[test]
    fn the_argument_the_choice_goes_into_is_not_bound() {
        assert_eq!(
            arguments_digest(&json!({"title": "T", "id": "n3"}), Some("id")),
            arguments_digest(&json!({"title": "T"}), Some("id"))
        );
        assert_ne!(
            arguments_digest(&json!({"title": "T"}), None),
            arguments_digest(&json!({"title": "U"}), None)
        );
        // Key order is not a difference.
        assert_eq!(
            arguments_digest(&json!({"a": 1, "b": 2}), None),
            arguments_digest(&json!({"b": 2, "a": 1}), None)
        );
    }

    #[test]
    fn only_the_answer_to_the_call_is_rewritten_and_namespaced_keys_are_refused() {
        let rewriter = Rewriter {
            id: json!(7),
            bound: Some(bound()),
            context: Arc::new(RelayContext {
                sealer: Sealer::new(ring(&[("k1", 1)])),
                audience: "http://gw/notes/mcp".into(),
                epoch: None,
                definitions: Arc::default(),
            }),
        };
        let asked = json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required",
            "inputRequests": {"sure": {"method": "elicitation/create"}},
            "requestState": "up-1"}});
        let out = rewriter.rewrite(&asked).unwrap();
        let state = out["result"]["requestState"].as_str().unwrap();
        let opened = rewriter.context.sealer.open(state).unwrap();
        assert_eq!(opened.up.as_deref(), Some("up-1"));
        assert_eq!(
            out["result"]["inputRequests"],
            asked["result"]["inputRequests"]
        );
        // Another id, or a complete result: untouched.
        let mut other = asked.clone();
        other["id"] = json!(8);
        assert!(rewriter.rewrite(&other).is_none());
        let done = json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "complete"}});
        assert!(rewriter.rewrite(&done).is_none());
        // A key in the gateway's namespace: an error, not a relay.
        let mut clash = asked.clone();
        clash["result"]["inputRequests"] = json!({OWN_KEY: {}});
        let out = rewriter.rewrite(&clash).unwrap();
        assert_eq!(out["error"]["message"], NOT_RELAYED);
    }
}
