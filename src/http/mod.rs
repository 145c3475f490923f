//! The HTTP face of [`Confirm`]: `Service<http::Request<B>>` for any inner HTTP service (an axum
//! `Router`, rmcp's `StreamableHttpService`, a hyper `service_fn`).
//!
//! POST bodies are buffered up to a cap (default 4 MiB; above it, 413 with a JSON-RPC error) and
//! read strictly. A message the layer does not intercept is forwarded as the same bytes with the
//! same headers, and the inner response (JSON or SSE) streams back unchanged. Other methods (GET,
//! DELETE) pass through without the body being touched.

mod future;
mod headers;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{Method, Request, Response};
use http_body::Body;
use std::task::{Context, Poll};
use tower_service::Service;

pub use future::ResponseFuture;

use crate::body::{RequestBody, ResponseBody};
use crate::protocol::{Reply, RpcError};
use crate::service::Confirm;

/// What [`Confirm`] can wrap over HTTP: a cloneable service of `Request<RequestBody<B>>` (an
/// axum `Router`, rmcp's `StreamableHttpService`, a hyper `service_fn`, or any service generic
/// over its request body). Implemented for every such service; it exists so that a service that
/// is not one (an axum `from_fn` middleware placed inside the layer, say) gets an error that
/// says where it belongs.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the inner service of `ConfirmLayer`",
    label = "the layer hands its inner service a `Request<RequestBody<_>>`, which this does not take",
    note = "authentication and other axum middleware go in front of the layer, which reads the `Principal` they put in the request: `ServiceBuilder::new().layer(auth).layer(confirm).service(mcp)`",
    note = "a service that takes `Request<axum::body::Body>` only can sit inside the layer behind `tower::ServiceBuilder::new().map_request(|r: Request<_>| r.map(axum::body::Body::new))`"
)]
pub trait InnerHttpService<B>:
    Service<Request<RequestBody<B>>, Response = Response<Self::ResponseBody>> + Clone
{
    /// The body of the inner service's responses.
    type ResponseBody;
}

// Not recommended: a failing bound is reported as this trait, with its message, not as the
// `Service` bound inside it.
#[diagnostic::do_not_recommend]
impl<S, B, ResBody> InnerHttpService<B> for S
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone,
{
    type ResponseBody = ResBody;
}

impl<S, B> Service<Request<B>> for Confirm<S>
where
    S: InnerHttpService<B>,
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<ResponseBody<S::ResponseBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone may not be ready; keep the one that is.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = std::sync::Arc::clone(&self.config);
        if request.method() != Method::POST {
            return ResponseFuture::inner(config, inner.call(request.map(RequestBody::streaming)));
        }
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > config.max_body_bytes as u64) {
            return ResponseFuture::reply(
                config,
                Reply::error(Some("null"), &RpcError::body_too_large()),
            );
        }
        let (parts, body) = request.into_parts();
        ResponseFuture::buffering(config, parts, body, inner)
    }
}
