//! The gateway as a whole: built from its file (secrets read, key, store, tokens, routes), then
//! served: each request is authenticated, given to its route by path, and answered.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use mcp_confirm::KeyRing;
use tokio::net::TcpListener;

use crate::auth::StaticTokens;
use crate::config::{Auth, ConfigError, GatewayConfig, Store};
use crate::route::{self, GatewayBody, Route, StoreHandle};
use crate::upstream::Upstream;

/// How long a caller has to send its request's headers.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A gateway ready to serve.
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    routes: Vec<Route>,
    tokens: StaticTokens,
}

impl Gateway {
    /// Builds the gateway `config` describes; relative paths in it are relative to `base`.
    ///
    /// # Errors
    /// [`ConfigError`] if a secret cannot be read, the key is not one, or a store cannot be
    /// opened.
    pub fn build(config: &GatewayConfig, base: &Path) -> Result<Self, ConfigError> {
        let keys = match &config.key {
            Some(secret) => KeyRing::single_hex("k1", &secret.read(base)?)
                .map_err(|e| ConfigError::Invalid(format!("key ({secret}): {e}")))?,
            None => {
                tracing::warn!(
                    "no `key` in the configuration: a random one was made; confirmations asked \
                     before a restart are refused after it, and no other gateway can share them"
                );
                KeyRing::random()
            }
        };
        let store = match &config.store {
            Store::Memory => StoreHandle::Memory(mcp_confirm::store::MemoryReplayStore::new()),
            Store::Redis { url } => StoreHandle::Redis(Box::new(
                mcp_confirm::store::RedisStore::open(&url.read(base)?)
                    .map_err(|e| ConfigError::Invalid(format!("store (redis): {e}")))?,
            )),
            Store::Postgres { url } => StoreHandle::Postgres(
                mcp_confirm::store::PostgresStore::connect(&url.read(base)?)
                    .map_err(|e| ConfigError::Invalid(format!("store (postgres): {e}")))?,
            ),
        };
        let tokens = match &config.auth {
            Auth::StaticTokens { file } => {
                tracing::warn!(
                    "callers are authenticated by static tokens: for a first try, not for production"
                );
                StaticTokens::read(&base.join(file))?
            }
        };
        let audience = config.audience();
        let mut routes = Vec::new();
        for entry in &config.routes {
            let credential = match &entry.upstream_header {
                Some(header) => {
                    let value = header.value.read(base)?;
                    let name = http::HeaderName::from_bytes(header.name.as_bytes())
                        .map_err(|e| ConfigError::Invalid(format!("upstream_header: {e}")))?;
                    let value = HeaderValue::from_str(&value).map_err(|_| {
                        ConfigError::Invalid(format!(
                            "upstream_header {}: {} is not a header value",
                            header.name, header.value
                        ))
                    })?;
                    Some((name, value))
                }
                None => None,
            };
            let uri = entry
                .upstream
                .parse()
                .map_err(|e| ConfigError::Invalid(format!("upstream: {e}")))?;
            let path = entry.path.trim_end_matches('/').to_owned();
            // Each route is a deployment of its own: a confirmation asked on one route is no
            // confirmation on another, whatever its tools are called.
            let base_builder = route::base(
                keys.clone(),
                format!("{}{path}", audience.trim_end_matches('/')),
                store.clone(),
            );
            routes.push(Route::new(
                path,
                Upstream::new(uri, credential),
                entry.tools.clone(),
                entry.list_ttl,
                base_builder,
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner { routes, tokens }),
        })
    }

    /// Its routes.
    pub fn routes(&self) -> &[Route] {
        &self.inner.routes
    }

    /// Answers one request.
    pub async fn handle<B>(&self, mut request: Request<B>) -> Response<GatewayBody>
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = request.uri().path().trim_end_matches('/');
        let Some(route) = self.inner.routes.iter().find(|r| r.path() == path) else {
            return plain(StatusCode::NOT_FOUND, "Not found.");
        };
        // Whatever the caller put there is not a principal: only the gateway's authentication
        // names one.
        request.extensions_mut().remove::<mcp_confirm::Principal>();
        match self.inner.tokens.principal(request.headers()) {
            Some(principal) => {
                request.extensions_mut().insert(principal);
            }
            None => {
                let mut response = plain(
                    StatusCode::UNAUTHORIZED,
                    "Sign in: a bearer token is required.",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
        }
        route.serve(request).await
    }

    /// Serves on `listener` until the process ends.
    ///
    /// # Errors
    /// The listener's, if it stops accepting.
    pub async fn serve(self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let gateway = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let gateway = gateway.clone();
                    async move { Ok::<_, std::convert::Infallible>(gateway.handle(request).await) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    // A caller that trickles its headers is cut off.
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(io, service)
                    .await
                {
                    tracing::debug!(error = %e, "a connection ended with an error");
                }
            });
        }
    }
}

/// A short text answer of the gateway's.
fn plain(status: StatusCode, text: &'static str) -> Response<GatewayBody> {
    let mut response = Response::new(
        http_body_util::Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
