//! The response future of the HTTP adapter: buffer, decide, then call the inner service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{
    CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, TRANSFER_ENCODING, WWW_AUTHENTICATE,
};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::combinators::Collect;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::observe::CallSpan;

use super::headers;
use crate::body::{RequestBody, ResponseBody};
use crate::completion::CompletionGuard;
use crate::config::{Config, Route};
use crate::decision::{self, Decision};
use crate::guard::media_type;
use crate::kernel::BoxFuture;
use crate::listing::Marker;
use crate::message::{self, Parsed};
use crate::protocol::{Reply, RpcError};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// Response future of [`Confirm`](crate::Confirm) over HTTP.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
        B: Body,
        B::Error: Into<BoxError>,
    {
        #[pin]
        state: State<S, B>,
        config: Arc<Config>,
        // A confirmed tool's call: its span, entered while deciding and while the inner
        // service has the call.
        span: CallSpan,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
        B: Body,
        B::Error: Into<BoxError>,
    {
        // Reading the POST body, up to the cap.
        Buffering { #[pin] collect: Collect<Limited<B>>, parts: Option<Parts>, inner: Option<S> },
        // Waiting on the resolver, the replay store or the revalidation hook.
        Deciding {
            decision: BoxFuture<'static, Decision>,
            // The decision's span (none for a retired state's), entered inside the call's.
            span: CallSpan,
            parts: Option<Parts>,
            inner: Option<S>,
        },
        // The inner service has the request; `listing`: it is a `tools/list` whose answer is marked.
        Inner { #[pin] future: S::Future, guard: Option<CompletionGuard>, listing: Option<String> },
        // The layer answers on its own.
        Replying { reply: Option<Reply> },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>>,
    B: Body,
    B::Error: Into<BoxError>,
{
    pub(super) fn buffering(config: Arc<Config>, parts: Parts, body: B, inner: S) -> Self {
        let collect = Limited::new(body, config.max_body_bytes).collect();
        let state = State::Buffering {
            collect,
            parts: Some(parts),
            inner: Some(inner),
        };
        Self {
            state,
            config,
            span: CallSpan::none(),
        }
    }

    pub(super) fn inner(config: Arc<Config>, future: S::Future) -> Self {
        Self {
            state: State::Inner {
                future,
                guard: None,
                listing: None,
            },
            config,
            span: CallSpan::none(),
        }
    }

    pub(super) fn reply(config: Arc<Config>, reply: Reply) -> Self {
        Self {
            state: State::Replying { reply: Some(reply) },
            config,
            span: CallSpan::none(),
        }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // A clone, as the states below take the span by `&mut`: none for a call without one.
            let span = (!this.span.is_none()).then(|| this.span.clone());
            let _entered = span.as_ref().map(CallSpan::enter);
            let next = match this.state.as_mut().project() {
                StateProj::Buffering {
                    collect,
                    parts,
                    inner,
                } => {
                    let collected = ready!(collect.poll(cx));
                    let (Some(parts), Some(inner)) = (parts.take(), inner.take()) else {
                        panic!("ResponseFuture polled after completion");
                    };
                    match collected {
                        Ok(collected) => {
                            route(this.config, this.span, parts, collected.to_bytes(), inner)
                        }
                        Err(e) => {
                            let error = if e.downcast_ref::<LengthLimitError>().is_some() {
                                RpcError::body_too_large()
                            } else {
                                RpcError::invalid_request()
                            };
                            State::Replying {
                                reply: Some(Reply::error(Some("null"), &error)),
                            }
                        }
                    }
                }
                StateProj::Deciding {
                    decision,
                    span,
                    parts,
                    inner,
                } => {
                    let decision = {
                        let _entered = span.enter();
                        ready!(decision.as_mut().poll(cx))
                    };
                    let (Some(parts), Some(mut inner)) = (parts.take(), inner.take()) else {
                        panic!("ResponseFuture polled after completion");
                    };
                    if let Some(code) = decision.error_code() {
                        this.span.failed(code);
                    }
                    match decision {
                        Decision::Reply(reply) => State::Replying { reply: Some(reply) },
                        Decision::Pass { body, waived } => {
                            let mut parts = parts;
                            parts.extensions.insert(waived);
                            let request = Request::from_parts(parts, RequestBody::buffered(body));
                            State::Inner {
                                future: inner.call(request),
                                guard: None,
                                listing: None,
                            }
                        }
                        Decision::Untouched { body, waived } => {
                            let mut parts = parts;
                            if let Some(waived) = waived {
                                parts.extensions.insert(waived);
                            }
                            let request = Request::from_parts(parts, RequestBody::buffered(body));
                            State::Inner {
                                future: inner.call(request),
                                guard: None,
                                listing: None,
                            }
                        }
                        Decision::Forward(approved) => {
                            let mut parts = parts;
                            parts.headers.remove(TRANSFER_ENCODING);
                            parts
                                .headers
                                .insert(CONTENT_LENGTH, HeaderValue::from(approved.body.len()));
                            let chosen = approved.confirmed.chosen.as_deref();
                            if let Some((name, value)) =
                                headers::param_header(approved.tool.param_header.as_deref(), chosen)
                            {
                                parts.headers.insert(name, value);
                            }
                            parts.extensions.insert(approved.confirmed);
                            let request =
                                Request::from_parts(parts, RequestBody::buffered(approved.body));
                            State::Inner {
                                future: inner.call(request),
                                guard: approved.guard,
                                listing: None,
                            }
                        }
                    }
                }
                StateProj::Inner {
                    future,
                    guard,
                    listing,
                } => {
                    let result = ready!(future.poll(cx));
                    if let Some(id) = listing.take() {
                        return Poll::Ready(
                            result.map(|response| marked(this.config, id, response)),
                        );
                    }
                    let guard = guard.take();
                    return Poll::Ready(
                        result
                            .map(|response| response.map(|body| ResponseBody::inner(body, guard))),
                    );
                }
                StateProj::Replying { reply } => {
                    let Some(reply) = reply.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    return Poll::Ready(Ok(own_response(reply)));
                }
            };
            this.state.set(next);
        }
    }
}

/// Decides, synchronously where it can, what a fully buffered POST becomes.
fn route<S, B>(
    config: &Arc<Config>,
    span: &mut CallSpan,
    parts: Parts,
    body: Bytes,
    mut inner: S,
) -> State<S, B>
where
    S: Service<Request<RequestBody<B>>>,
    B: Body,
    B::Error: Into<BoxError>,
{
    match message::classify(&body, |tool| config.route(tool)) {
        parsed @ (Parsed::Forward | Parsed::Listing { .. }) => {
            // Not ours: the same bytes, the same headers.
            let request = Request::from_parts(parts, RequestBody::buffered(body));
            State::Inner {
                future: inner.call(request),
                guard: None,
                listing: match parsed {
                    Parsed::Listing { id } => Some(id),
                    _ => None,
                },
            }
        }
        Parsed::Reject { id, error } => State::Replying {
            reply: Some(Reply::error(id.as_deref(), &error)),
        },
        Parsed::Intercept(call, _) if decision::settled_outside(&parts.extensions) => {
            State::Replying {
                reply: Some(decision::stacked(&call)),
            }
        }
        // A retry of a tool the layer does not confirm: on to the inner service only if what
        // it carries is not the layer's own (an old state must not run under a new policy).
        Parsed::Retry(call) => retried(config, parts, call, inner, false),
        Parsed::Intercept(call, Route::Exempt) if call.is_retry() => {
            retried(config, parts, call, inner, true)
        }
        Parsed::Intercept(call, Route::Exempt) => {
            // Exempt by configuration: the same bytes, with the waiver a guarded handler needs.
            let mut parts = parts;
            let principal = config.principal(&parts.extensions);
            parts
                .extensions
                .insert(decision::exempt(&call, principal.as_ref()));
            let request = Request::from_parts(parts, RequestBody::buffered(body));
            State::Inner {
                future: inner.call(request),
                guard: None,
                listing: None,
            }
        }
        Parsed::Intercept(call, Route::Undeclared) => State::Replying {
            reply: Some(decision::undeclared(&call)),
        },
        Parsed::Intercept(call, Route::Unlisted) => State::Replying {
            reply: Some(decision::unlisted(&call)),
        },
        // A form is never shown for (nor answered by) a body a browser could send cross-site
        // without a preflight: confirmed calls must say they are JSON.
        Parsed::Intercept(call, Route::Confirm(_)) if !is_json(&parts.headers) => State::Replying {
            reply: Some(Reply::error(
                Some(&call.id),
                &RpcError::unsupported_media_type(),
            )),
        },
        // Streamable HTTP requires both in `Accept`; a server that enforces it would refuse the
        // confirmed call after the claim, so the form is never offered for such a request.
        Parsed::Intercept(call, Route::Confirm(_))
            if !headers::accepts_json_and_sse(&parts.headers) =>
        {
            State::Replying {
                reply: Some(Reply::error(Some(&call.id), &RpcError::not_acceptable())),
            }
        }
        Parsed::Intercept(call, Route::Confirm(guarded)) => {
            *span = crate::observe::call_span(&config.spans, &call);
            let principal = config.principal(&parts.extensions);
            let declared = headers::declared(&parts.headers);
            // The decision's span is the call's child: made inside it.
            let decided = {
                let _entered = span.enter();
                decision::span(config)
            };
            let decision = Box::pin(decision::decide(
                Arc::clone(config),
                guarded,
                call,
                principal,
                Some(declared),
            ));
            State::Deciding {
                decision,
                span: decided,
                parts: Some(parts),
                inner: Some(inner),
            }
        }
    }
}

/// Deciding a retry of a tool the layer does not confirm (`exempt`: by configuration).
fn retried<S, B>(
    config: &Arc<Config>,
    parts: Parts,
    call: crate::message::ToolCall,
    inner: S,
    exempt: bool,
) -> State<S, B>
where
    S: Service<Request<RequestBody<B>>>,
    B: Body,
    B::Error: Into<BoxError>,
{
    let principal = config.principal(&parts.extensions);
    State::Deciding {
        decision: Box::pin(decision::retired::decide(
            Arc::clone(config),
            call,
            principal,
            exempt,
        )),
        span: CallSpan::none(),
        parts: Some(parts),
        inner: Some(inner),
    }
}

/// A `tools/list` answer (to the request `id`), with the confirmed tools marked in its body when
/// it is a successful JSON or SSE answer (its length changes, so `Content-Length` goes). A
/// successful answer in another media type cannot be read: the layer then refuses every tool it
/// has no policy or exemption for.
fn marked<B>(
    config: &Arc<Config>,
    id: String,
    mut response: Response<B>,
) -> Response<ResponseBody<B>> {
    if !response.status().is_success() {
        return response.map(|body| ResponseBody::inner(body, None));
    }
    let sse = match media_type(response.headers()).as_deref() {
        Some("application/json") => false,
        Some("text/event-stream") => true,
        _ => {
            config
                .listing
                .unread("a tools/list answer in a media type the layer does not read");
            return response.map(|body| ResponseBody::inner(body, None));
        }
    };
    response.headers_mut().remove(CONTENT_LENGTH);
    let limit = config.max_listing_bytes;
    let listing = Arc::clone(&config.listing);
    response.map(|body| ResponseBody::listing(body, Marker::new(listing, sse, limit, id)))
}

/// Whether the request says, once, that its body is `application/json` (parameters allowed).
fn is_json(headers: &http::HeaderMap) -> bool {
    media_type(headers).as_deref() == Some("application/json")
}

fn own_response<B>(reply: Reply) -> Response<ResponseBody<B>> {
    let has_body = reply.body.is_some();
    let mut response = Response::new(ResponseBody::own(reply.body));
    *response.status_mut() = reply.status;
    if has_body {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    if let Some(seconds) = reply.retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    if reply.status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}
