//! Host and Origin validation (DNS-rebinding protection) to stack in front of [`ConfirmLayer`].
//!
//! MCP servers on HTTP must validate `Origin` and should validate `Host`. Servers such as rmcp's
//! `StreamableHttpService` do it inside; but the answers [`ConfirmLayer`] writes itself never reach
//! the inner server, so the check has to run before the layer too.
//!
//! [`ConfirmLayer`]: crate::ConfirmLayer

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::ResponseBody;

/// Refuses requests whose `Host` or `Origin` is not on an allow-list, with 403.
///
/// Defaults allow `localhost`, `127.0.0.1` and `[::1]` on any port, as hosts and as
/// `http://` origins. Requests without an `Origin` header (non-browser clients) pass the origin
/// check; a missing `Host` fails the host check.
#[derive(Debug, Clone)]
pub struct HostOriginLayer {
    rules: Arc<Rules>,
}

#[derive(Debug)]
struct Rules {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Default for HostOriginLayer {
    fn default() -> Self {
        Self::localhost()
    }
}

impl HostOriginLayer {
    /// Loopback only: the right default for a server bound to localhost.
    pub fn localhost() -> Self {
        let hosts = ["localhost", "127.0.0.1", "[::1]"];
        Self {
            rules: Arc::new(Rules {
                hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                origins: hosts.iter().map(|h| format!("http://{h}:*")).collect(),
            }),
        }
    }

    /// Replaces the allowed hosts: `name` (any port) or `name:port`, compared case-insensitively.
    pub fn allow_hosts<I: IntoIterator<Item = S>, S: Into<String>>(self, hosts: I) -> Self {
        let hosts = hosts
            .into_iter()
            .map(|h| h.into().to_ascii_lowercase())
            .collect();
        Self {
            rules: Arc::new(Rules {
                hosts,
                origins: self.rules.origins.clone(),
            }),
        }
    }

    /// Replaces the allowed origins: `scheme://host[:port]`, or `scheme://host:*` for any port.
    pub fn allow_origins<I: IntoIterator<Item = S>, S: Into<String>>(self, origins: I) -> Self {
        let origins = origins
            .into_iter()
            .map(|o| o.into().to_ascii_lowercase())
            .collect();
        Self {
            rules: Arc::new(Rules {
                hosts: self.rules.hosts.clone(),
                origins,
            }),
        }
    }
}

impl<S> Layer<S> for HostOriginLayer {
    type Service = HostOrigin<S>;

    fn layer(&self, inner: S) -> HostOrigin<S> {
        HostOrigin {
            inner,
            rules: Arc::clone(&self.rules),
        }
    }
}

/// The service built by [`HostOriginLayer`].
#[derive(Debug, Clone)]
pub struct HostOrigin<S> {
    inner: S,
    rules: Arc<Rules>,
}

impl Rules {
    fn host_ok(&self, host: Option<&HeaderValue>) -> bool {
        let Some(host) = host
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase)
        else {
            return false;
        };
        let name = strip_port(&host);
        self.hosts
            .iter()
            .any(|allowed| *allowed == host || *allowed == name)
    }

    fn origin_ok(&self, origin: Option<&HeaderValue>) -> bool {
        let Some(origin) = origin else { return true };
        let Some(origin) = origin.to_str().ok().map(str::to_ascii_lowercase) else {
            return false;
        };
        self.origins
            .iter()
            .any(|allowed| match allowed.strip_suffix(":*") {
                Some(base) => {
                    origin == base || origin.strip_prefix(base).is_some_and(is_port_suffix)
                }
                None => *allowed == origin,
            })
    }
}

/// The media type `Content-Type` names, lowercased and without parameters, if the header is
/// there exactly once and readable: the one reading of it, for the layer and its pages
/// (`mcp-confirm-pages`).
pub fn media_type(headers: &http::HeaderMap) -> Option<String> {
    let mut values = headers.get_all(http::header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let media_type = value.to_str().ok()?.split(';').next().unwrap_or_default();
    Some(media_type.trim().to_ascii_lowercase())
}

/// `host:port` → `host`; `[::1]:80` → `[::1]`.
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') && is_port_suffix(&host[i..]) => &host[..i],
        _ => host,
    }
}

fn is_port_suffix(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl<S, B, ResBody> Service<Request<B>> for HostOrigin<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = GuardFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let headers = request.headers();
        if self.rules.host_ok(headers.get(HOST)) && self.rules.origin_ok(headers.get(ORIGIN)) {
            let future = self.inner.call(request);
            return GuardFuture {
                kind: Kind::Inner { future },
            };
        }
        tracing::warn!(target: crate::audit::TARGET, decision = "refused", reason = "Host or Origin not allowed");
        GuardFuture {
            kind: Kind::Forbidden { done: false },
        }
    }
}

fn forbidden<B>() -> Response<ResponseBody<B>> {
    let body = Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Forbidden: Host or Origin not allowed"}}"#,
    );
    // One body for every refusal; the audit log has the reason.
    let mut response = Response::new(ResponseBody::own(Some(body)));
    *response.status_mut() = StatusCode::FORBIDDEN;
    // In front of a page as well as an endpoint: the refusal is never framed, sniffed or kept.
    let headers = response.headers_mut();
    for (name, value) in [
        (CONTENT_TYPE, "application/json"),
        (
            http::header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; frame-ancestors 'none'",
        ),
        (http::header::X_FRAME_OPTIONS, "DENY"),
        (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (http::header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

pin_project! {
    /// Response future of [`HostOrigin`].
    pub struct GuardFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Forbidden { done: bool },
    }
}

impl<F, ResBody, E> Future for GuardFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future
                .poll(cx)
                .map_ok(|r| r.map(|b| ResponseBody::inner(b, None))),
            KindProj::Forbidden { done } => {
                assert!(!*done, "GuardFuture polled after completion");
                *done = true;
                Poll::Ready(Ok(forbidden()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Arc<Rules> {
        HostOriginLayer::localhost().rules
    }

    #[test]
    fn hosts() {
        let r = rules();
        for ok in [
            "127.0.0.1:3000",
            "localhost",
            "LOCALHOST:1",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(r.host_ok(Some(&HeaderValue::from_static(ok))), "{ok}");
        }
        for bad in [
            "example.com",
            "example.com:3000",
            "127.0.0.1.evil.com",
            "localhost.evil:3000",
            "[::2]:80",
        ] {
            assert!(!r.host_ok(Some(&HeaderValue::from_static(bad))), "{bad}");
        }
        assert!(!r.host_ok(None));
        let pinned = HostOriginLayer::localhost()
            .allow_hosts(["notes.example:443"])
            .rules;
        assert!(pinned.host_ok(Some(&HeaderValue::from_static("notes.example:443"))));
        assert!(!pinned.host_ok(Some(&HeaderValue::from_static("notes.example:80"))));
    }

    #[test]
    fn origins() {
        let r = rules();
        assert!(r.origin_ok(None));
        for ok in [
            "http://localhost:5173",
            "http://127.0.0.1:3000",
            "http://localhost",
            "http://[::1]:9",
        ] {
            assert!(r.origin_ok(Some(&HeaderValue::from_static(ok))), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "https://localhost:5173",
            "http://localhost.evil:1",
            "http://localhost:",
        ] {
            assert!(!r.origin_ok(Some(&HeaderValue::from_static(bad))), "{bad}");
        }
    }
}
