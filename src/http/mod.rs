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

impl<S, B, ResBody> Service<Request<B>> for Confirm<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone,
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<ResponseBody<ResBody>>;
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
