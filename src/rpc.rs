//! The message face of [`Confirm`]: `Service<JsonRpcMessage>` for inner services that take one
//! JSON-RPC message and give back at most one (stdio servers, in-process transports, queues).
//!
//! The same strict reading and the same decision path as over HTTP; only the framing differs:
//! there are no headers to cross-check, and an answer to a notification is simply no message.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Extensions;
use tower_service::Service;

use crate::config::Route;
use crate::decision::{self, Decision};
use crate::kernel::BoxFuture;
use crate::listing::{self, Listed};
use crate::message::{self, Parsed};
use crate::protocol::{Reply, RpcError};
use crate::service::Confirm;

/// One incoming JSON-RPC message, as raw bytes, with the extensions an auth layer filled in (a
/// [`Principal`](crate::Principal), by default).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JsonRpcMessage {
    /// The message exactly as received.
    pub body: Bytes,
    /// Request-scoped values: the principal in, [`Confirmed`](crate::Confirmed) out.
    pub extensions: Extensions,
}

impl JsonRpcMessage {
    /// A message with empty extensions.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            extensions: Extensions::new(),
        }
    }

    /// Adds a value to the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
}

/// The answer to a [`JsonRpcMessage`]: one message, or none (for a notification).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonRpcReply {
    /// The response message, if there is one.
    pub body: Option<Bytes>,
}

impl JsonRpcReply {
    /// A reply carrying `body`.
    pub fn message(body: impl Into<Bytes>) -> Self {
        Self {
            body: Some(body.into()),
        }
    }

    /// No reply.
    pub fn none() -> Self {
        Self { body: None }
    }
}

impl From<Reply> for JsonRpcReply {
    fn from(reply: Reply) -> Self {
        Self { body: reply.body }
    }
}

impl<S> Service<JsonRpcMessage> for Confirm<S>
where
    S: Service<JsonRpcMessage, Response = JsonRpcReply> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = JsonRpcReply;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<JsonRpcReply, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut msg: JsonRpcMessage) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        if msg.body.len() > config.max_body_bytes {
            let reply = Reply::error(Some("null"), &RpcError::body_too_large());
            return Box::pin(std::future::ready(Ok(reply.into())));
        }
        let (call, guarded) = match message::classify(&msg.body, |tool| config.route(tool)) {
            Parsed::Forward => return Box::pin(inner.call(msg)),
            Parsed::Listing { .. } => {
                let future = inner.call(msg);
                return Box::pin(async move {
                    let mut reply = future.await?;
                    if let Some(body) = &reply.body
                        && let Some(marked) = listing::annotate(body, &|listed: &Listed<'_>| {
                            config.listing.observe(listed)
                        })
                    {
                        reply.body = Some(marked);
                    }
                    Ok(reply)
                });
            }
            Parsed::Reject { id, error } => {
                let reply = Reply::error(id.as_deref(), &error);
                return Box::pin(std::future::ready(Ok(reply.into())));
            }
            Parsed::Intercept(call, _) if decision::settled_outside(&msg.extensions) => {
                let reply = decision::stacked(&call);
                return Box::pin(std::future::ready(Ok(reply.into())));
            }
            Parsed::Intercept(call, Route::Exempt) if call.is_retry() => {
                let principal = config.message_principal(&msg.extensions);
                let decision = decision::retired::decide(config, call, principal, true);
                return Box::pin(settle(decision, msg, inner));
            }
            Parsed::Intercept(call, Route::Exempt) => {
                let principal = config.message_principal(&msg.extensions);
                msg.extensions
                    .insert(decision::exempt(&call, principal.as_ref()));
                return Box::pin(inner.call(msg));
            }
            Parsed::Intercept(call, Route::Undeclared) => {
                let reply = decision::undeclared(&call);
                return Box::pin(std::future::ready(Ok(reply.into())));
            }
            Parsed::Intercept(call, Route::Unlisted) => {
                let reply = decision::unlisted(&call);
                return Box::pin(std::future::ready(Ok(reply.into())));
            }
            Parsed::Retry(call) => {
                let principal = config.message_principal(&msg.extensions);
                let decision = decision::retired::decide(config, call, principal, false);
                return Box::pin(settle(decision, msg, inner));
            }
            Parsed::Intercept(call, Route::Confirm(guarded)) => (call, guarded),
        };
        let span = crate::observe::call_span(&config.spans, &call);
        let marked = span.clone();
        Box::pin(span.instrument(async move {
            let principal = config.message_principal(&msg.extensions);
            let decision =
                decision::decide(Arc::clone(&config), guarded, call, principal, None).await;
            if let Some(code) = decision.error_code() {
                marked.failed(code);
            }
            settle(std::future::ready(decision), msg, inner).await
        }))
    }
}

/// Carries out `decision` for `msg`: the layer's reply, or the inner service's.
async fn settle<S>(
    decision: impl Future<Output = Decision>,
    mut msg: JsonRpcMessage,
    mut inner: S,
) -> Result<JsonRpcReply, S::Error>
where
    S: Service<JsonRpcMessage, Response = JsonRpcReply>,
{
    match decision.await {
        Decision::Reply(reply) => Ok(reply.into()),
        Decision::Pass { body, waived } => {
            msg.body = body;
            msg.extensions.insert(waived);
            inner.call(msg).await
        }
        Decision::Untouched { body, waived } => {
            msg.body = body;
            if let Some(waived) = waived {
                msg.extensions.insert(waived);
            }
            inner.call(msg).await
        }
        Decision::Forward(approved) => {
            msg.body = approved.body;
            msg.extensions.insert(approved.confirmed);
            let result = inner.call(msg).await;
            // The call is over: the nonce is consumed, whatever the outcome.
            drop(approved.guard);
            result
        }
    }
}
