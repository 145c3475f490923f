//! The gateway as a whole: built from its file (secrets read, key, store, tokens, routes), then
//! served: each request is authenticated, given to its route by path, and answered.

use std::path::{Path, PathBuf};

use arc_swap::ArcSwap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use mcp_confirm::KeyRing;
use tokio::net::TcpListener;

use crate::answer::{GatewayBody, json_answer, plain};
use crate::auth::{Authenticator, StaticTokens};
use crate::config::{Auth, ConfigError, GatewayConfig, Jwks, Store};
use crate::oauth::{KeySource, OAuth, OAuthSettings};
use crate::recheck::Recheck;
use crate::relay::Sealer;
use crate::route::{self, Route, StoreHandle};
use crate::standing::OfferBound;
use crate::upstream::Upstream;

/// How long a caller has to send its request's headers.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where each route's protected-resource metadata is served (RFC 9728 §3.1), followed by the
/// route's path.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// How often the file (and the files it names that are read only when it is loaded: the
/// tokens file, a JWKS file) is looked at for a change.
pub const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A gateway ready to serve. Clones share one state, which [`reload`](Self::reload) replaces
/// as a whole.
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<ArcSwap<Inner>>,
}

#[derive(Debug)]
struct Inner {
    config: GatewayConfig,
    routes: Vec<Arc<Route>>,
    auth: Authenticator,
    /// Kept across reloads while the file's `store` section is unchanged: a memory store made
    /// anew would forget which confirmations were claimed.
    store: StoreHandle,
    /// The random key made when the file names none, kept across reloads for the same reason.
    random_keys: Option<KeyRing>,
    /// Who a browser visitor of the pages is, when the gateway serves them.
    visitors: Option<Visitors>,
    /// The `Host` and `Origin` check every request passes first.
    guard: mcp_confirm::guard::HostOriginLayer,
    /// The decision log, opened once: a second writer on the same log would be refused.
    decision_log: Option<mcp_confirm_log::AuditLog>,
}

impl Gateway {
    /// Builds the gateway `config` describes; relative paths in it are relative to `base`.
    ///
    /// # Errors
    /// [`ConfigError`] if a secret cannot be read, the key is not one, or a store cannot be
    /// opened.
    pub fn build(config: &GatewayConfig, base: &Path) -> Result<Self, ConfigError> {
        let inner = Inner::build(config, base, None, Purpose::Serve)?;
        inner.in_force();
        Ok(Self {
            inner: Arc::new(ArcSwap::from_pointee(inner)),
        })
    }

    /// Builds the gateway `config` describes to check it (`mcp-confirm-gateway check`), writing
    /// nothing: the decision log's settings and seed are read and checked but the log is not
    /// opened (its writer may be a running gateway, and a stopped one's log must not be signed
    /// by a check), and a PostgreSQL store's tables are not made. Such a gateway must not serve.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn check(config: &GatewayConfig, base: &Path) -> Result<Self, ConfigError> {
        Ok(Self {
            inner: Arc::new(ArcSwap::from_pointee(Inner::build(
                config,
                base,
                None,
                Purpose::Check,
            )?)),
        })
    }

    /// Replaces the gateway's configuration with `config`, or keeps the one in force if
    /// `config` cannot be built. The store is kept while its section is unchanged, and so is a
    /// random key while the file still names none; routes list their upstreams' tools anew. The
    /// listening address cannot change without a restart; a file whose `decision_log` or
    /// `metrics` section changed is refused (each takes a restart).
    ///
    /// # Errors
    /// As [`build`](Self::build); the configuration in force is then unchanged.
    pub fn reload(&self, config: &GatewayConfig, base: &Path) -> Result<(), ConfigError> {
        let previous = self.inner.load_full();
        let next = Inner::build(config, base, Some(&previous), Purpose::Serve)?;
        if next.config.listen != previous.config.listen {
            tracing::warn!(listen = %next.config.listen, still = %previous.config.listen,
                "the listening address changed in the file: it takes a restart");
        }
        next.in_force();
        self.inner.store(Arc::new(next));
        tracing::info!("the configuration was reloaded");
        Ok(())
    }

    /// Reloads the file at `path` whenever its contents change, or those of a file it names
    /// that is read only when it is loaded (the tokens file, a JWKS file: a token removed from
    /// it stops working without the file being touched). Read every [`WATCH_EVERY`]; a file
    /// replaced through a symlink, as Kubernetes does with a ConfigMap or a Secret, counts. A
    /// file that does not validate is refused and said at error level; the one in force stays.
    pub fn watch(&self, path: PathBuf, base: PathBuf) -> tokio::task::JoinHandle<()> {
        let gateway = self.clone();
        tokio::spawn(async move {
            let mut seen = gateway.watched_digest(&path, &base);
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let now = gateway.watched_digest(&path, &base);
                if now == seen {
                    continue;
                }
                seen = now;
                let loaded =
                    GatewayConfig::load(&path).and_then(|config| gateway.reload(&config, &base));
                if let Err(e) = loaded {
                    tracing::error!(file = %path.display(), error = %e,
                        "the changed configuration was refused; the one in force stays");
                }
            }
        })
    }

    /// A digest of the file at `path` and of the files the configuration in force names that
    /// are read only when it is loaded.
    fn watched_digest(&self, path: &Path, base: &Path) -> [u8; 32] {
        use sha2::Digest;
        let named = self.inner.load().config.files_read_on_load();
        let mut whole = sha2::Sha256::new();
        for file in std::iter::once(path.to_path_buf()).chain(named.iter().map(|f| base.join(f))) {
            match contents_digest(&file) {
                Some(digest) => {
                    whole.update([1]);
                    whole.update(digest);
                }
                None => whole.update([0]),
            }
        }
        whole.finalize().into()
    }

    /// Its routes, as configured now.
    pub fn routes(&self) -> Vec<Arc<Route>> {
        self.inner.load().routes.clone()
    }

    /// Answers one request.
    pub async fn handle<B>(&self, mut request: Request<B>) -> Response<GatewayBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let inner = self.inner.load_full();
        let path = request.uri().path().trim_end_matches('/').to_owned();
        if let Some(resource_path) = path.strip_prefix(METADATA_PREFIX) {
            return inner.metadata(resource_path, request.method());
        }
        // Whatever the caller put there is not a principal: only the gateway's authentication
        // names one.
        request.extensions_mut().remove::<mcp_confirm::Principal>();
        if let Some((route, page)) = inner.page_of(&path) {
            let Some(visitors) = &inner.visitors else {
                return plain(StatusCode::NOT_FOUND, "Not found.");
            };
            if let Some(principal) = visitors.visitor(request.headers(), &inner.auth) {
                request.extensions_mut().insert(principal);
            }
            return route
                .page(page, visitors.sign_in_url.as_deref(), request)
                .await;
        }
        let Some(route) = inner.routes.iter().find(|r| r.path() == path) else {
            return plain(StatusCode::NOT_FOUND, "Not found.");
        };
        // The sign-in proxy's secret is the gateway's, never the upstream's.
        if let Some(visitors) = &inner.visitors {
            request.headers_mut().remove(&visitors.secret_header);
        }
        match inner
            .auth
            .authenticate(request.headers(), route.resource())
            .await
        {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
            }
            Err(rejection) => {
                tracing::info!(route = %route.path(), reason = %rejection,
                    "a request was not let in");
                return inner.auth.refuse(&rejection, route.resource());
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
            // Answers go out as written: with Nagle's algorithm on, a small answer waits for
            // the caller's delayed ACK (tens of milliseconds per request).
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY could not be set");
            }
            let gateway = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let gateway = gateway.clone();
                    // Host and Origin first, with the rules of the file in force now.
                    let guard = gateway.inner.load().guard.clone();
                    let mut checked = tower_layer::Layer::layer(&guard, Handle(gateway));
                    tower_service::Service::call(&mut checked, request)
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

/// Who a browser visitor of the pages is: named by the sign-in proxy in front, which proves
/// itself with a shared secret.
struct Visitors {
    user_header: http::HeaderName,
    secret_header: http::HeaderName,
    secret: zeroize::Zeroizing<String>,
    roles_header: Option<http::HeaderName>,
    sign_in_url: Option<String>,
}

impl std::fmt::Debug for Visitors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret is never printed.
        f.debug_struct("Visitors")
            .field("user_header", &self.user_header)
            .field("secret_header", &self.secret_header)
            .finish_non_exhaustive()
    }
}

impl Visitors {
    fn new(pages: &crate::config::Pages, base: &Path) -> Result<Self, ConfigError> {
        let crate::config::Visitor::TrustedProxyHeader {
            user_header,
            secret_header,
            secret,
            roles_header,
        } = &pages.visitor;
        let name = |n: &str| {
            http::HeaderName::from_bytes(n.as_bytes()).map_err(|_| {
                ConfigError::Invalid(format!("pages.visitor: {n:?} is not a header name"))
            })
        };
        let secret = zeroize::Zeroizing::new(secret.read(base)?);
        if secret.len() < 16 {
            return Err(ConfigError::Invalid(
                "pages.visitor: a secret of at least 16 characters".into(),
            ));
        }
        Ok(Self {
            user_header: name(user_header)?,
            secret_header: name(secret_header)?,
            secret,
            roles_header: roles_header.as_deref().map(name).transpose()?,
            sign_in_url: pages.sign_in_url.clone(),
        })
    }

    /// The visitor a page request names: only with the proxy's secret (compared in constant
    /// time), and one printable user name. With OAuth callers, the issuer comes first, as in
    /// the principals it names.
    fn visitor(
        &self,
        headers: &http::HeaderMap,
        auth: &Authenticator,
    ) -> Option<mcp_confirm::Principal> {
        use subtle::ConstantTimeEq;
        let mut secrets = headers.get_all(&self.secret_header).iter();
        let (Some(given), None) = (secrets.next(), secrets.next()) else {
            return None;
        };
        if !bool::from(given.as_bytes().ct_eq(self.secret.as_bytes())) {
            tracing::warn!("a page request carried a wrong sign-in proxy secret");
            return None;
        }
        let mut users = headers.get_all(&self.user_header).iter();
        let (Some(user), None) = (users.next(), users.next()) else {
            return None;
        };
        let user = user.to_str().ok()?.trim();
        if user.is_empty() || user.chars().any(char::is_control) {
            return None;
        }
        let subject = match auth.oauth() {
            Some(oauth) => crate::oauth::principal_subject(oauth.issuer(), user),
            None => user.to_owned(),
        };
        let roles: Vec<String> = self
            .roles_header
            .as_ref()
            .and_then(|h| headers.get(h))
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split([',', ' '])
                    .filter(|r| !r.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some(mcp_confirm::Principal::new(subject).with_roles(roles))
    }
}

/// [`Gateway::handle`] as a service, for the `Host` and `Origin` check to wrap.
#[derive(Clone)]
struct Handle(Gateway);

impl tower_service::Service<Request<hyper::body::Incoming>> for Handle {
    type Response = Response<GatewayBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Response<GatewayBody>, std::convert::Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<hyper::body::Incoming>) -> Self::Future {
        let gateway = self.0.clone();
        Box::pin(async move { Ok(gateway.handle(request).await) })
    }
}

/// A digest of the file's contents: a write within the same second, or a symlink swapped to
/// another file, changes it; a touch does not.
fn contents_digest(path: &Path) -> Option<[u8; 32]> {
    use sha2::Digest;
    std::fs::read(path)
        .ok()
        .map(|bytes| sha2::Sha256::digest(&bytes).into())
}

/// What a gateway is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// To serve: the decision log opened as its writer, a store's tables made.
    Serve,
    /// To check the file: nothing opened for writing, nothing made.
    Check,
}

/// The verifier key of the decision log the file names (`<name>+<id>+<key>`), which every
/// `mcp-confirm-audit` command takes: read from its seed, the log itself not opened.
///
/// # Errors
/// [`ConfigError`] if the seed cannot be read or is not one.
pub fn log_verifier_key(
    log: &crate::config::DecisionLog,
    base: &Path,
) -> Result<String, ConfigError> {
    Ok(log_key(log, base)?.verifier().to_string())
}

/// The decision log's signing key, from its seed.
fn log_key(
    log: &crate::config::DecisionLog,
    base: &Path,
) -> Result<mcp_confirm_log::LogKey, ConfigError> {
    let invalid = |why: String| ConfigError::Invalid(format!("decision_log: {why}"));
    let seed = zeroize::Zeroizing::new(log.key.read(base)?);
    let seed: zeroize::Zeroizing<[u8; 32]> = zeroize::Zeroizing::new(
        decode_hex(&seed)
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| invalid(format!("{}: not 64 hex digits", log.key)))?,
    );
    mcp_confirm_log::LogKey::from_seed(&log.name, *seed).map_err(|e| invalid(e.to_string()))
}

/// Opens the decision log the file names.
fn open_decision_log(
    log: &crate::config::DecisionLog,
    base: &Path,
) -> Result<mcp_confirm_log::AuditLog, ConfigError> {
    use mcp_confirm_log::{AuditLog, DirWitness, LogOptions};
    let invalid = |why: String| ConfigError::Invalid(format!("decision_log: {why}"));
    let key = || log_key(log, base);
    let mut options = LogOptions {
        every: log.checkpoint_every,
        view: log.view.as_ref().map(|v| base.join(v)),
        ..LogOptions::default()
    };
    let witness = match &log.witness_dir {
        Some(dir) => Some(
            DirWitness::new(base.join(dir), key()?.verifier())
                .map_err(|e| invalid(format!("witness: {e}")))?,
        ),
        None => None,
    };
    match &log.store {
        crate::config::LogStore::File { dir } => {
            if let Some(witness) = witness {
                options.witnesses.push(std::sync::Arc::new(witness));
            }
            let dir = base.join(dir);
            AuditLog::file(&dir, key()?, options).map_err(|e| match e {
                mcp_confirm_log::LogError::Locked => invalid(format!(
                    "{}: another process writes this log; give each gateway its own, or share \
                     one through PostgreSQL",
                    dir.display()
                )),
                other => invalid(format!("{}: {other}", dir.display())),
            })
        }
        crate::config::LogStore::Postgres { url, table } => {
            let table = table
                .as_deref()
                .unwrap_or(mcp_confirm_log::PostgresLog::DEFAULT_TABLE);
            let mut sink = mcp_confirm_log::PostgresLog::connect(&url.read(base)?, table, key()?)
                .map_err(|e| invalid(format!("postgres: {e}")))?;
            if let Some(view) = options.view.take() {
                sink = sink.view_file(view);
            }
            if let Some(witness) = witness {
                sink = sink.witness(witness);
            }
            AuditLog::new(sink, key()?.verifier(), options).map_err(|e| invalid(e.to_string()))
        }
    }
}

/// Hex digits as bytes (either case); `None` for anything else.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Opens the store the file names.
fn open_store(store: &Store, base: &Path, purpose: Purpose) -> Result<StoreHandle, ConfigError> {
    Ok(match store {
        Store::Memory => StoreHandle::Memory(mcp_confirm::store::MemoryReplayStore::new()),
        Store::Redis { url } => StoreHandle::Redis(Box::new(
            mcp_confirm::store::RedisStore::open(&url.read(base)?)
                .map_err(|e| ConfigError::Invalid(format!("store (redis): {e}")))?,
        )),
        Store::Postgres { url } => {
            let url = zeroize::Zeroizing::new(url.read(base)?);
            let store = mcp_confirm::store::PostgresStore::connect(&url)
                .map_err(|e| ConfigError::Invalid(format!("store (postgres): {e}")))?;
            if purpose == Purpose::Serve {
                create_tables(&url)?;
            }
            StoreHandle::Postgres(store)
        }
    })
}

/// How long creating the PostgreSQL store's tables may take (the store's own calls get
/// 500 ms; DDL beside other instances starting may wait for their locks).
pub const CREATE_TABLES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Creates the PostgreSQL store's tables if they are missing, as the library does
/// (`PostgresStore::migrate`): when they are all there, it only reads the catalog. Without
/// them every confirmation would be refused with `503`. Runs on a thread of its own with its
/// own runtime and connection, as the decision log creates its table: the gateway is built
/// from synchronous code that may itself run on a runtime.
fn create_tables(url: &str) -> Result<(), ConfigError> {
    let failed = |why: String| ConfigError::Store(format!("postgres: creating its tables: {why}"));
    // The database's own words ("permission denied for schema …") are a source of a source.
    let chain = |e: &dyn std::error::Error| {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(e) = source {
            text = format!("{text}: {e}");
            source = e.source();
        }
        text
    };
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| failed(e.to_string()))?;
                runtime.block_on(async {
                    let store = mcp_confirm::store::PostgresStore::connect(url)
                        .map_err(|e| failed(chain(&e)))?
                        .timeout(CREATE_TABLES_TIMEOUT);
                    store.migrate().await.map_err(|e| failed(chain(&e)))
                })
            })
            .join()
            .unwrap_or_else(|_| Err(failed("the thread creating them failed".into())))
    })
}

impl Inner {
    fn build(
        config: &GatewayConfig,
        base: &Path,
        previous: Option<&Inner>,
        purpose: Purpose,
    ) -> Result<Self, ConfigError> {
        let mut random_keys = None;
        let keys = match &config.key {
            None if !config.keys.is_empty() => {
                let mut ring = Vec::new();
                for named in &config.keys {
                    let hex = zeroize::Zeroizing::new(named.value.read(base)?);
                    let bytes = decode_hex(&hex).ok_or_else(|| {
                        ConfigError::Invalid(format!("keys.{}: not hex", named.id))
                    })?;
                    ring.push((named.id.clone(), zeroize::Zeroizing::new(bytes)));
                }
                KeyRing::new(ring.iter().map(|(id, b)| (id.clone(), b.as_slice())))
                    .map_err(|e| ConfigError::Invalid(format!("keys: {e}")))?
            }
            Some(secret) => {
                let hex = zeroize::Zeroizing::new(secret.read(base)?);
                KeyRing::single_hex("k1", &hex)
                    .map_err(|e| ConfigError::Invalid(format!("key ({secret}): {e}")))?
            }
            None => {
                let keys = match previous.and_then(|p| p.random_keys.clone()) {
                    Some(keys) => keys,
                    None => {
                        tracing::warn!(
                            "no `key` in the configuration: a random one was made; confirmations \
                             asked before a restart are refused after it, and no other gateway \
                             can share them"
                        );
                        KeyRing::random()
                    }
                };
                random_keys = Some(keys.clone());
                keys
            }
        };
        // Continuations are sealed under the same ring, rotation honoured.
        let sealer = Sealer::new(keys.clone());
        let store = match previous {
            Some(previous) if previous.config.store == config.store => previous.store.clone(),
            _ => open_store(&config.store, base, purpose)?,
        };
        let decision_log = match previous {
            Some(previous) if previous.config.decision_log == config.decision_log => {
                previous.decision_log.clone()
            }
            Some(_) => {
                return Err(ConfigError::Invalid(
                    "the `decision_log` section changed: that takes a restart (its writer holds \
                     the log)"
                        .into(),
                ));
            }
            None => match &config.decision_log {
                Some(log) if purpose == Purpose::Check => {
                    // Checked, not opened: its writer may be running.
                    log_key(log, base)?;
                    None
                }
                Some(log) => {
                    let opened = open_decision_log(log, base)?;
                    tracing::info!(verifier_key = %log_verifier_key(log, base)?,
                        "the decision log is written; its verifier key is what \
                         mcp-confirm-audit --key takes");
                    Some(opened)
                }
                None => None,
            },
        };
        if let Some(previous) = previous
            && previous.config.metrics != config.metrics
        {
            return Err(ConfigError::Invalid(
                "the `metrics` section changed: that takes a restart (its listener and the \
                 process's recorder are set up once, at start)"
                    .into(),
            ));
        }
        let auth = match &config.auth {
            Auth::StaticTokens { file } => {
                tracing::warn!(
                    "callers are authenticated by static tokens: for a first try, not for production"
                );
                let path = base.join(file);
                // On a reload, a file emptied of tokens revokes the last one: refused, it
                // would keep every token of the file in force working.
                let tokens = match previous {
                    Some(_) => StaticTokens::read_allowing_none(&path)?,
                    None => StaticTokens::read(&path)?,
                };
                if tokens.is_empty() {
                    tracing::warn!(file = %path.display(),
                        "the tokens file lists no token: every request is refused");
                }
                Authenticator::Static(tokens)
            }
            Auth::Oauth {
                issuer,
                jwks,
                algorithms,
                scopes,
                roles_claim,
                leeway,
            } => Authenticator::OAuth(Box::new(OAuth::new(OAuthSettings {
                issuer: issuer.clone(),
                keys: match jwks {
                    Some(Jwks::File(path)) => KeySource::File(base.join(path)),
                    Some(Jwks::Url(url)) => KeySource::Url(url.clone()),
                    None => KeySource::Discover,
                },
                algorithms: algorithms.clone(),
                scopes: scopes.clone(),
                roles_claim: roles_claim.clone(),
                leeway: *leeway,
            })?)),
        };
        let visitors = config
            .pages
            .as_ref()
            .map(|pages| Visitors::new(pages, base))
            .transpose()?;
        let notifier = if config.webhooks.is_empty() {
            None
        } else {
            let mut endpoints = Vec::new();
            for hook in &config.webhooks {
                let secret = mcp_confirm::notify::WebhookSecret::parse(&hook.secret.read(base)?)
                    .map_err(|e| ConfigError::Invalid(format!("webhook {}: {e}", hook.url)))?;
                let mut endpoint =
                    mcp_confirm_pages::webhooks::WebhookEndpoint::new(&hook.url, secret);
                if hook.slack {
                    endpoint = endpoint.payload(mcp_confirm::notify::Payload::Slack);
                }
                endpoints.push(endpoint);
            }
            Some(
                mcp_confirm_pages::webhooks::Webhooks::new(endpoints)
                    .map_err(|e| ConfigError::Invalid(format!("webhooks: {e}")))?,
            )
        };
        let audience = config.audience();
        let (hosts, origins) = config.hosts_and_origins();
        tracing::info!(
            ?hosts,
            ?origins,
            "callers may use these Host names and Origins"
        );
        let guard = mcp_confirm::guard::HostOriginLayer::localhost()
            .allow_hosts(hosts)
            .allow_origins(origins);
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
            let resource = format!("{}{path}", audience.trim_end_matches('/'));
            // Standing approvals count only under the offer they were granted under: an offer
            // this configuration restores (or changes) starts anew.
            let offers = OfferBound::new(
                store.standing(),
                &resource,
                &entry.tools,
                previous.is_some(),
                previous
                    .and_then(|p| p.routes.iter().find(|r| r.resource() == resource))
                    .map(|r| r.offers()),
            );
            let base_builder = route::base(
                keys.clone(),
                resource.clone(),
                store.clone(),
                route::Extras {
                    log: decision_log.clone(),
                    approval_url: visitors.as_ref().map(|_| format!("{resource}/approve/")),
                    notifier: notifier.clone(),
                    standing: Some(offers.clone()),
                },
            );
            let shared = route::Shared {
                base: base_builder,
                sealer: sealer.clone(),
                store: store.clone(),
                offers,
            };
            let principal_header = entry
                .principal_header
                .as_deref()
                .map(|name| {
                    http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| ConfigError::Invalid(format!("principal_header: {e}")))
                })
                .transpose()?;
            let mut rechecks = std::collections::BTreeMap::new();
            for (name, tool) in &entry.tools {
                let Some(rule) = &tool.approvers else {
                    continue;
                };
                match &rule.recheck {
                    Some(recheck) => {
                        let made = Recheck::new(
                            &recheck.url,
                            recheck.timeout,
                            base,
                            resource.clone(),
                            rule.role.clone(),
                        )
                        .map_err(|e| match e {
                            ConfigError::Invalid(why) => ConfigError::Invalid(format!(
                                "route {:?}, tool {name:?}: approvers.{why}",
                                entry.path
                            )),
                            other => other,
                        })?;
                        rechecks.insert(name.clone(), made);
                    }
                    None if rule.role.is_some() => tracing::warn!(route = %entry.path,
                        tool = %name, "approvers name a role without `recheck`: an approver \
                        whose role is taken away still counts until the confirmation expires"),
                    None => {}
                }
            }
            routes.push(Arc::new(Route::new(
                path,
                resource,
                Upstream::with_options(
                    uri,
                    credential,
                    entry.pass_caller_token_upstream,
                    principal_header,
                ),
                entry.tools.clone(),
                rechecks,
                entry.list_ttl,
                shared,
            )?));
        }
        Ok(Self {
            config: config.clone(),
            routes,
            auth,
            store,
            random_keys,
            decision_log,
            guard,
            visitors,
        })
    }
}

impl Inner {
    /// This configuration is the one in force (built to serve, and kept): what it starts in the
    /// shared stores starts now.
    fn in_force(&self) {
        for route in &self.routes {
            route.offers().start_preparing();
        }
    }

    /// The route and page a path names, if it is one of the pages the gateway serves.
    fn page_of(&self, path: &str) -> Option<(&Arc<Route>, route::Page)> {
        self.routes.iter().find_map(|route| {
            let rest = path.strip_prefix(route.path())?;
            if rest == "/inbox" {
                return Some((route, route::Page::Inbox));
            }
            if rest == "/standing" {
                return Some((route, route::Page::Standing));
            }
            let id = rest.strip_prefix("/approve/")?;
            (!id.is_empty() && !id.contains('/')).then_some((route, route::Page::Approve))
        })
    }

    /// The protected-resource metadata of the route on `path` (RFC 9728), when callers sign in
    /// with OAuth; a `404` otherwise.
    fn metadata(&self, path: &str, method: &http::Method) -> Response<GatewayBody> {
        let (Some(oauth), Some(route)) = (
            self.auth.oauth(),
            self.routes.iter().find(|r| r.path() == path),
        ) else {
            return plain(StatusCode::NOT_FOUND, "Not found.");
        };
        if method != http::Method::GET && method != http::Method::HEAD {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "GET only.");
        }
        let mut response = json_answer(
            StatusCode::OK,
            &crate::oauth::metadata(route.resource(), oauth),
        );
        // Public, and the same for everyone: clients and proxies may keep it a while.
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=300"),
        );
        response
    }
}
