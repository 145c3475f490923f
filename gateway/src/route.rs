//! One route: a caller's request, checked against the upstream's judged tools, then through a
//! `ConfirmLayer` built for that catalog, to the upstream.
//!
//! The layer is built from each tool list (the tools' policies are fixed at build time in the
//! core), and swapped atomically when the list changes; keys, audience and stores are the same
//! across builds, so a confirmation asked under one build is honoured under the next unless the
//! tool changed. A `tools/call` of a tool the catalog does not know lists the tools again first
//! (at most once per [`MISS_RELIST`]); an upstream that cannot be listed gets no `tools/call`.

use mcp_confirm_pages::LayerPages as _;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use mcp_confirm::{ConfirmLayer, ConfirmLayerBuilder, KeyRing, ToolPolicy};
use serde_json::{Value, json};
use tower_layer::Layer;
use tower_service::Service;

use crate::catalog::Catalog;
use crate::config::{ConfigError, ToolEntry};
use crate::lookup::{CALLER, RecordLookup};
use crate::policy::Verdict;
use crate::recheck::Recheck;
use crate::relay::{self, Relay, RelayContext, Sealer};
use crate::standing::OfferBound;
use crate::upstream::Upstream;

use crate::answer::{GatewayBody, json_answer, plain, rpc_error, rpc_refusal};

/// The most a request body may hold (bytes).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a caller has to send its request's body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest time a tool list is trusted, whatever the upstream's `ttlMs` says.
pub const MIN_LIST_TTL: Duration = Duration::from_secs(1);

/// How often a call of an unknown tool may make the gateway list the upstream's tools again.
pub const MISS_RELIST: Duration = Duration::from_secs(2);

/// What every build of a route's layer shares: keys, audience, stores.
pub type Base = Arc<dyn Fn() -> ConfirmLayerBuilder + Send + Sync>;

/// The layer over the relay to the upstream, as built for one catalog.
type Guarded = mcp_confirm::Confirm<Relay>;

struct Built {
    catalog: Catalog,
    /// The layer itself: its pages.
    layer: ConfirmLayer,
    service: Guarded,
    /// The relay alone: a verified continuation goes straight to it.
    relay: Relay,
}

/// What every build of a route's layer shares: the base builder (keys, audience, store), the
/// continuations' sealer, and the replay store their nonces are claimed in.
#[derive(Clone)]
pub struct Shared {
    /// The base builder.
    pub base: Base,
    /// Seals and opens continuations.
    pub sealer: Sealer,
    /// The replay store.
    pub store: StoreHandle,
    /// The standing store, each grant judged against the offer in force.
    pub offers: OfferBound,
}

/// One route's state.
pub struct Route {
    path: String,
    /// The route's URL: the audience its confirmations are bound to, and its tokens must name.
    resource: String,
    upstream: Upstream,
    entries: BTreeMap<String, ToolEntry>,
    /// The operator's lookups, by the tool whose candidates they find.
    lookups: BTreeMap<String, RecordLookup>,
    /// The approvers' live checks, by tool.
    rechecks: BTreeMap<String, Recheck>,
    list_ttl: Duration,
    shared: Shared,
    current: ArcSwapOption<Built>,
    /// One listing at a time; and when the last one for a miss was.
    listing: tokio::sync::Mutex<Option<Instant>>,
    /// How many times a layer was built for this route (a list with other tools or entries).
    layers_built: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("path", &self.path)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

/// A page of the library's the gateway serves under a route's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// `<route>/approve/<id>`: one approval, decided.
    Approve,
    /// `<route>/inbox`: what waits for the visitor.
    Inbox,
    /// `<route>/standing`: the visitor's standing approvals, listed and revoked.
    Standing,
}

/// The frozen answers of the gateway's own refusals (the reasons go to the log).
mod refusal {
    pub const DENIED: &str = "This tool is not available through this gateway.";
    pub const UNLISTED: &str =
        "The upstream server's tools cannot be listed; no call is forwarded.";
    pub const BAD_REQUEST: &str = "The request cannot be read.";
    pub const TOO_LARGE: &str = "The request is too large.";
    /// A pick-one tool's call without an argument its lookup reads: the records it acts on
    /// cannot be found, and a lookup without its filter would offer every record.
    pub const UNNAMED_RECORD: &str =
        "The call does not name the records it acts on; nothing was run.";
    /// `data.reason` of [`UNNAMED_RECORD`].
    pub const UNNAMED_RECORD_REASON: &str = "lookup_argument_missing";
}

impl Route {
    /// A route on `path` to `upstream`, under the operator's `entries`, its layer built from
    /// `shared`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a lookup whose paths do not parse, or entries the layer
    /// cannot take (its reason named): refused with the file, never when a list arrives.
    pub fn new(
        path: String,
        resource: String,
        upstream: Upstream,
        entries: BTreeMap<String, ToolEntry>,
        rechecks: BTreeMap<String, Recheck>,
        list_ttl: Duration,
        shared: Shared,
    ) -> Result<Self, ConfigError> {
        let mut lookups = BTreeMap::new();
        for (name, entry) in &entries {
            if let Some(spec) = &entry.lookup {
                let lookup = RecordLookup::new(upstream.clone(), spec.clone()).map_err(|e| {
                    ConfigError::Invalid(format!("route {path:?}, tool {name:?}, lookup: {e}"))
                })?;
                lookups.insert(name.clone(), lookup);
            }
        }
        let route = Self {
            path,
            resource,
            upstream,
            entries,
            lookups,
            rechecks,
            list_ttl,
            shared,
            current: ArcSwapOption::empty(),
            listing: tokio::sync::Mutex::new(None),
            layers_built: std::sync::atomic::AtomicU64::new(0),
        };
        route.check_entries()?;
        Ok(route)
    }

    /// Builds the layer once for the operator's entries alone, as if the upstream listed every
    /// tool they name (and each lookup's tool as a read tool): a policy the core refuses is
    /// refused with the file, its reason named, and the configuration in force kept. Found only
    /// when a list arrived, it would refuse every call of the route, reads included.
    fn check_entries(&self) -> Result<(), ConfigError> {
        let definition = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
        let mut tools: Vec<Value> = self.entries.keys().map(|n| definition(n)).collect();
        for lookup in self.entries.values().filter_map(|e| e.lookup.as_ref()) {
            if !tools.iter().any(|t| t["name"] == lookup.tool.as_str()) {
                let mut read = definition(&lookup.tool);
                read["annotations"] = json!({"readOnlyHint": true});
                tools.push(read);
            }
        }
        let catalog = Catalog::new(tools, &self.entries, Duration::ZERO);
        build_layer(
            &self.shared.base,
            &catalog,
            &self.entries,
            &self.lookups,
            &self.rechecks,
        )
        .map(drop)
        .map_err(|e| ConfigError::Invalid(format!("route {:?}: {e}", self.path)))
    }

    /// The path it serves.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many layers were built for it: one per tool list with other tools or entries, not
    /// one per listing (a layer kept keeps its per-principal challenge limits).
    pub fn layers_built(&self) -> u64 {
        self.layers_built.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Its URL: the gateway's audience followed by its path.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Its standing store, with the offers of this configuration.
    pub fn offers(&self) -> &OfferBound {
        &self.shared.offers
    }

    /// The catalog now, listing the upstream if there is none or it is stale.
    ///
    /// # Errors
    /// The upstream's, when it cannot be listed.
    pub async fn catalog(&self) -> Result<Catalog, crate::upstream::UpstreamError> {
        let built = self.fresh(false).await?;
        Ok(built.catalog.clone())
    }

    /// The build to use: the current one while fresh, else a new one from a new list. With
    /// `miss`, a new list even if fresh (at most once per [`MISS_RELIST`]).
    async fn fresh(&self, miss: bool) -> Result<Arc<Built>, crate::upstream::UpstreamError> {
        if let Some(built) = self.current.load_full()
            && !built.catalog.stale()
            && !miss
        {
            return Ok(built);
        }
        let mut last_miss = self.listing.lock().await;
        // Someone else may have listed while this waited.
        if let Some(built) = self.current.load_full() {
            let fresh = !built.catalog.stale();
            let recent_miss = last_miss.is_some_and(|at| at.elapsed() < MISS_RELIST);
            if fresh && (!miss || recent_miss) {
                return Ok(built);
            }
        }
        if miss {
            *last_miss = Some(Instant::now());
        }
        let listed = self.upstream.list_tools().await.inspect_err(|e| {
            tracing::error!(route = %self.path, error = %e,
                "the upstream's tools cannot be listed: its tools/call requests are refused");
        })?;
        // The upstream's `ttlMs` shortens the operator's TTL, down to MIN_LIST_TTL: SDKs say 0
        // by default, and listing before every call would serialize every call behind a list
        // (the list and a call race anyway: a second's staleness adds no window that was not
        // there).
        let ttl = listed
            .ttl
            .map_or(self.list_ttl, |t| t.min(self.list_ttl))
            .max(MIN_LIST_TTL.min(self.list_ttl));
        let catalog = Catalog::new(listed.tools, &self.entries, ttl);
        // The same tools under the same entries: the layer in force stays (with its challenge
        // rate limiter: a new layer per list would reset every principal's limit), trusted
        // until the new list's expiry.
        if let Some(current) = self.current.load_full()
            && current.catalog.revision == catalog.revision
        {
            let built = Arc::new(Built {
                catalog,
                layer: current.layer.clone(),
                service: current.service.clone(),
                relay: current.relay.clone(),
            });
            self.current.store(Some(Arc::clone(&built)));
            return Ok(built);
        }
        tracing::info!(route = %self.path, revision = %catalog.revision,
            tools = catalog.judged.len(), "the upstream's tools were judged");
        self.layers_built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let layer = build_layer(
            &self.shared.base,
            &catalog,
            &self.entries,
            &self.lookups,
            &self.rechecks,
        )
        .map_err(|e| {
            tracing::error!(route = %self.path, error = %e,
                "the upstream's tool list cannot be enforced: its tools/call requests are refused");
            crate::upstream::UpstreamError::NotAList(format!("it cannot be enforced: {e}"))
        })?;
        let relay = self.relay_for(&catalog);
        let built = Arc::new(Built {
            service: layer.layer(relay.clone()),
            layer,
            relay,
            catalog,
        });
        self.current.store(Some(Arc::clone(&built)));
        Ok(built)
    }

    /// One later round of a confirmed call whose upstream asked a question: the continuation is
    /// opened and checked against this very request (route, principal, tool and definition,
    /// arguments, expiry, store epoch), its nonce claimed once, and exactly the confirmed call is
    /// forwarded with the upstream's own state and the answers to its questions, the gateway's
    /// keys stripped. Anything that does not hold gets the core's one answer for a bad state.
    async fn continue_call(
        &self,
        built: &Built,
        mut parts: http::request::Parts,
        mut message: Value,
    ) -> Response<GatewayBody> {
        let id = message.get("id").cloned();
        let refuse = |why: &str| {
            tracing::info!(route = %self.path, reason = why, "a continuation was refused");
            invalid_state(id.clone())
        };
        let state = message
            .pointer("/params/requestState")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let continuation = match self.shared.sealer.open(state) {
            Ok(c) => c,
            Err(why) => return refuse(why),
        };
        let bound = continuation.bound.clone();
        let principal = parts.extensions.get::<mcp_confirm::Principal>().cloned();
        let tool = message
            .pointer("/params/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let tool = tool.as_str();
        let definition = built.catalog.judge(tool).map(|j| hex::encode(j.hash));
        let arguments = message
            .pointer("/params/arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(u64::MAX, |d| d.as_secs());
        if bound.aud != self.resource {
            return refuse("another route's");
        }
        if principal.as_ref().map(mcp_confirm::Principal::subject) != Some(bound.sub.as_str()) {
            return refuse("another principal's");
        }
        if bound.tool != tool {
            return refuse("another tool's");
        }
        if definition.as_deref() != Some(bound.def.as_str()) {
            return refuse("the tool's definition changed since it was confirmed");
        }
        let select = bound.sel.as_ref().map(|(field, _)| field.as_str());
        if relay::arguments_digest(&arguments, select) != bound.args {
            return refuse("other arguments");
        }
        if now >= continuation.exp {
            return refuse("expired");
        }
        if continuation.ep != self.shared.store.epoch() {
            return refuse("issued before the replay store restarted");
        }
        let Some(nonce) = mcp_confirm::store::Nonce::from_hex(&continuation.n) else {
            return refuse("a bad nonce");
        };
        let expires_at =
            std::time::UNIX_EPOCH + Duration::from_secs(continuation.exp) + relay::CONTINUATION_TTL;
        let principal_key = {
            use sha2::Digest;
            let hash = sha2::Sha256::digest(format!("{}\0{}", bound.aud, bound.sub).as_bytes());
            let mut key = [0u8; 16];
            key.copy_from_slice(&hash[..16]);
            mcp_confirm::store::PrincipalKey::from_bytes(key)
        };
        let claim = mcp_confirm::store::ClaimRequest::new(
            nonce,
            mcp_confirm::store::Owner::random(),
            principal_key,
            expires_at,
        );
        let store = self.shared.store.replay();
        match store.claim(&claim).await {
            Ok(mcp_confirm::store::Claim::Claimed) => {
                if let Err(e) = store.complete(&claim).await {
                    tracing::warn!(error = %e, "a continuation's claim could not be completed");
                }
            }
            Ok(_) => return refuse("already used"),
            Err(e) => {
                tracing::error!(route = %self.path, error = %e, "the replay store failed");
                return refuse("the replay store failed");
            }
        }
        // Exactly the confirmed call: the choice written in, the upstream's state back, the
        // answers to its questions without the gateway's own keys.
        let params = &mut message["params"];
        let mut arguments = arguments;
        if let (Some((field, chosen)), Some(map)) = (&bound.sel, arguments.as_object_mut()) {
            map.insert(field.clone(), json!(chosen));
        }
        params["arguments"] = arguments;
        match &continuation.up {
            Some(up) => params["requestState"] = json!(up),
            None => {
                if let Some(map) = params.as_object_mut() {
                    map.remove("requestState");
                }
            }
        }
        if let Some(responses) = params
            .get_mut("inputResponses")
            .and_then(Value::as_object_mut)
        {
            responses.retain(|key, _| !key.starts_with(relay::NAMESPACE));
        }
        tracing::info!(route = %self.path, tool, revision = %built.catalog.revision,
            "a continuation of a confirmed call is forwarded");
        parts.extensions.insert(bound);
        parts.headers.remove(header::CONTENT_LENGTH);
        let request = Request::from_parts(parts, Full::new(Bytes::from(message.to_string())));
        let mut relay = built.relay.clone();
        match CALLER
            .scope(request.headers().clone(), relay.call(request))
            .await
        {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Serves one of the route's pages (`page` is `approve` or `inbox`) to a visitor the
    /// gateway already named (the principal, if any, in the request's extensions).
    pub async fn page<B>(
        &self,
        page: Page,
        sign_in_url: Option<&str>,
        request: Request<B>,
    ) -> Response<GatewayBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Ok(built) = self.fresh(false).await else {
            return plain(
                StatusCode::BAD_GATEWAY,
                "The upstream server's tools cannot be listed.",
            );
        };
        let response = match page {
            Page::Approve => {
                let mut service = built.layer.approval_page();
                if let Some(url) = sign_in_url {
                    service = service.sign_in_url(url);
                }
                service.call(request).await
            }
            Page::Inbox => {
                let mut service = built.layer.inbox_page();
                if let Some(url) = sign_in_url {
                    service = service.sign_in_url(url);
                }
                service.call(request).await
            }
            Page::Standing => {
                let standing = format!("{}/standing", self.resource);
                let Some(mut service) = built.layer.standing_page(standing) else {
                    return plain(StatusCode::NOT_FOUND, "Not found.");
                };
                if let Some(url) = sign_in_url {
                    service = service.sign_in_url(url);
                }
                service.call(request).await
            }
        };
        match response {
            Ok(response) => {
                response.map(|body| body.map_err(|never| match never {}).boxed_unsync())
            }
            Err(never) => match never {},
        }
    }

    /// The relay for `catalog`'s tools.
    fn relay_for(&self, catalog: &Catalog) -> Relay {
        let definitions = catalog
            .judged
            .iter()
            .map(|(name, j)| (name.clone(), hex::encode(j.hash)))
            .collect();
        Relay::new(
            self.upstream.clone(),
            RelayContext {
                sealer: self.shared.sealer.clone(),
                audience: self.resource.clone(),
                epoch: self.shared.store.epoch(),
                definitions: Arc::new(definitions),
            },
        )
    }

    /// Serves one request (its principal, if any, already in its extensions).
    pub async fn serve<B>(&self, request: Request<B>) -> Response<GatewayBody>
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let bytes = if parts.method == http::Method::POST {
            let read =
                tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY_BYTES).collect());
            match read.await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(_)) => {
                    return rpc_error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        -32600,
                        refusal::TOO_LARGE,
                        None,
                    );
                }
                Err(_) => {
                    return rpc_error(
                        StatusCode::REQUEST_TIMEOUT,
                        -32600,
                        refusal::BAD_REQUEST,
                        None,
                    );
                }
            }
        } else {
            Bytes::new()
        };
        let message: Option<Value> = serde_json::from_slice(&bytes).ok();
        let method = message
            .as_ref()
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str);
        let id = message.as_ref().and_then(|m| m.get("id")).cloned();
        let tool = message
            .as_ref()
            .and_then(|m| m.pointer("/params/name"))
            .and_then(Value::as_str);
        let built = if method == Some("tools/call") {
            let Some(tool) = tool else {
                return rpc_error(StatusCode::BAD_REQUEST, -32602, refusal::BAD_REQUEST, id);
            };
            let mut built = match self.fresh(false).await {
                Ok(built) => built,
                Err(_) => return rpc_error(StatusCode::BAD_GATEWAY, -32603, refusal::UNLISTED, id),
            };
            if built.catalog.judge(tool).is_none() {
                built = match self.fresh(true).await {
                    Ok(built) => built,
                    Err(_) => {
                        return rpc_error(StatusCode::BAD_GATEWAY, -32603, refusal::UNLISTED, id);
                    }
                };
            }
            if built.catalog.duplicates.iter().any(|d| d == tool) {
                tracing::info!(route = %self.path, tool, revision = %built.catalog.revision,
                    "a call of a tool the upstream lists twice was refused");
                return rpc_error(StatusCode::OK, -32602, refusal::DENIED, id);
            }
            if let Some(judged) = built.catalog.judge(tool)
                && judged.verdict == Verdict::Deny
            {
                tracing::info!(route = %self.path, tool, revision = %built.catalog.revision,
                    "a call of a tool the operator denies was refused");
                return rpc_error(StatusCode::OK, -32602, refusal::DENIED, id);
            }
            // A lookup runs only with the arguments it filters by: without one, it would find
            // every record and the form would offer them all.
            if let Some(judged) = built.catalog.judge(tool)
                && matches!(judged.verdict, Verdict::PickOne { .. })
                && let Some(lookup) = self.lookups.get(tool)
            {
                let arguments = message
                    .as_ref()
                    .and_then(|m| m.pointer("/params/arguments"))
                    .unwrap_or(&Value::Null);
                if let Err(why) = lookup.check_call(arguments) {
                    tracing::info!(route = %self.path, tool, reason = %why,
                        "a call its lookup cannot filter was refused");
                    return rpc_refusal(
                        StatusCode::OK,
                        -32602,
                        refusal::UNNAMED_RECORD,
                        refusal::UNNAMED_RECORD_REASON,
                        id,
                    );
                }
            }
            // Which policy revision the layer decides this call under (the list and the
            // operator's entries it was built from).
            match built.catalog.judge(tool) {
                Some(judged) => tracing::info!(route = %self.path, tool,
                    verdict = %judged.verdict, why = %judged.reason,
                    revision = %built.catalog.revision, "tools/call"),
                None => tracing::info!(route = %self.path, tool,
                    revision = %built.catalog.revision,
                    "tools/call of a tool the upstream does not list: the layer refuses it"),
            }
            built
        } else {
            match self.fresh(false).await {
                Ok(built) => built,
                // Nothing is confirmed without a catalog: everything but tools/call goes through
                // a layer that knows no tool, so a call it does not expect is still refused.
                Err(_) => {
                    let catalog = Catalog::new(Vec::new(), &self.entries, Duration::ZERO);
                    match build_layer(
                        &self.shared.base,
                        &catalog,
                        &self.entries,
                        &self.lookups,
                        &self.rechecks,
                    ) {
                        Ok(layer) => {
                            let relay = self.relay_for(&catalog);
                            Arc::new(Built {
                                service: layer.layer(relay.clone()),
                                layer,
                                relay,
                                catalog,
                            })
                        }
                        Err(_) => {
                            return rpc_error(
                                StatusCode::BAD_GATEWAY,
                                -32603,
                                refusal::UNLISTED,
                                id,
                            );
                        }
                    }
                }
            }
        };
        // A continuation of a call already confirmed: the relay's, not the layer's to judge.
        if method == Some("tools/call")
            && let Some(message) = message
            && message
                .pointer("/params/requestState")
                .and_then(Value::as_str)
                .is_some_and(|state| self.shared.sealer.is_continuation(state))
        {
            return self.continue_call(&built, parts, message).await;
        }
        let mut service = built.service.clone();
        let caller = parts.headers.clone();
        let request = Request::from_parts(parts, Full::new(bytes));
        // A lookup the layer runs for this request passes on what the route lets through of the
        // caller's headers.
        match CALLER.scope(caller, service.call(request)).await {
            Ok(response) => response.map(|body| body.map_err(Into::into).boxed_unsync()),
            Err(never) => match never {},
        }
    }
}

/// The layer for one catalog: every tool it confirms with a yes/no form (or, with a lookup, a
/// pick-one form over the records the lookup finds, the choice written into the call and the
/// lookup run again before forwarding), every destructive tool the operator allows exempted,
/// and the list itself given, so a tool outside it is refused. A denied tool is confirmed in
/// the layer too: the gateway refuses it before the layer, and if anything ever let one past,
/// it would still not run unconfirmed.
///
/// # Errors
/// The core's, for a list it cannot take (the list is the upstream's: this is never a panic).
fn build_layer(
    base: &Base,
    catalog: &Catalog,
    entries: &BTreeMap<String, ToolEntry>,
    lookups: &BTreeMap<String, RecordLookup>,
    rechecks: &BTreeMap<String, Recheck>,
) -> Result<ConfirmLayer, mcp_confirm::ConfigError> {
    // Where the user approves, and who (and the approvers' live check, where the file names
    // one).
    let channel = |name: &str, policy: ToolPolicy| match entries.get(name) {
        Some(entry) if entry.approvers.is_some() => {
            let policy = policy.approved_by(
                entry
                    .approvers
                    .as_ref()
                    .map(crate::config::ApproverRule::to_approvers)
                    .unwrap_or_default(),
            );
            match rechecks.get(name) {
                Some(recheck) => policy.recheck_approvers(recheck.hook()),
                None => policy,
            }
        }
        Some(entry) if entry.approve_in == crate::config::ApproveIn::Browser => {
            policy.approve_in_browser()
        }
        _ => policy,
    };
    // A standing approval's scope: the argument the operator names, as text.
    let with_standing = |name: &str, policy: ToolPolicy| match entries
        .get(name)
        .and_then(|e| e.standing.as_ref())
    {
        Some(standing) => {
            let pointer = standing.scope.clone();
            policy.standing(
                standing.up_to,
                standing.uses,
                move |lookup: &mcp_confirm::Lookup| match lookup.arguments.pointer(&pointer) {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                },
            )
        }
        None => policy,
    };
    // Every decision-log record made under this build names the revision it was made under.
    // Only what the gateway serves: a name listed twice is refused on its own, and must not
    // take the rest of the list down with it.
    let mut builder = base()
        .tool_list(catalog.served())
        .policy_revision(catalog.revision.clone());
    for (name, judged) in &catalog.judged {
        match &judged.verdict {
            Verdict::Confirm { message } => {
                let mut policy = ToolPolicy::confirm_only().input_key(relay::OWN_KEY);
                if let Some(message) = message {
                    policy = policy.message(message.clone());
                }
                builder = builder.tool(name.clone(), channel(name, with_standing(name, policy)));
            }
            Verdict::PickOne { message } => {
                let policy = match lookups.get(name) {
                    Some(lookup) => {
                        let select = lookup.select_into().to_owned();
                        let lookup = lookup.clone();
                        let mut policy = ToolPolicy::pick_one(move |asked: mcp_confirm::Lookup| {
                            let lookup = lookup.clone();
                            async move { lookup.candidates(asked).await }
                        })
                        .select_into(select)
                        // The cap the gateway built and checked its labels under.
                        .max_label_chars(crate::lookup::LABEL_CHARS)
                        .input_key(relay::OWN_KEY);
                        if let Some(message) = message {
                            policy = policy.message(message.clone());
                        }
                        policy
                    }
                    // Never without one (the verdict comes from the entry's lookup); were it
                    // so, a yes/no form still confirms it.
                    None => ToolPolicy::confirm_only(),
                };
                builder = builder.tool(name.clone(), channel(name, with_standing(name, policy)));
            }
            Verdict::Deny => builder = builder.tool(name.clone(), ToolPolicy::confirm_only()),
            Verdict::Pass if judged.destructive => builder = builder.exempt(name.clone()),
            Verdict::Pass => {}
        }
    }
    builder.try_build()
}

/// The core's one answer for a `requestState` that does not hold, word for word: a
/// continuation refused is no different from a state refused.
fn invalid_state(id: Option<Value>) -> Response<GatewayBody> {
    json_answer(
        StatusCode::OK,
        &json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
            "error": {"code": -32602, "message": relay::INVALID,
                "data": {"reason": "invalid_request_state"}}}),
    )
}

/// What every route's layer is built with besides its keys, audience and store.
#[derive(Clone, Default)]
pub struct Extras {
    /// The decision log.
    pub log: Option<mcp_confirm_log::AuditLog>,
    /// The approval page's URL prefix, when the gateway serves the pages.
    pub approval_url: Option<String>,
    /// The approvers' notifier.
    pub notifier: Option<mcp_confirm_pages::webhooks::Webhooks>,
    /// The route's standing store (over the shared one), in place of the shared one.
    pub standing: Option<OfferBound>,
}

/// The base builder every route's layer starts from: keys, audience, store, and the extras.
pub fn base(keys: KeyRing, audience: String, store: StoreHandle, extras: Extras) -> Base {
    Arc::new(move || {
        let mut builder =
            store.apply(ConfirmLayer::builder(keys.clone()).audience(audience.clone()));
        if let Some(log) = &extras.log {
            builder = builder.audit_log(log.clone());
        }
        if let Some(url) = &extras.approval_url {
            builder = builder.approval_url(url.clone());
        }
        if let Some(notifier) = &extras.notifier {
            builder = builder.notifier(notifier.clone());
        }
        if let Some(standing) = &extras.standing {
            builder = builder.standing_store(standing.clone());
        }
        builder
    })
}

/// The store every build shares.
#[derive(Clone, Debug)]
pub enum StoreHandle {
    /// In this process.
    Memory(mcp_confirm::store::MemoryReplayStore),
    /// Redis.
    Redis(Box<mcp_confirm::store::RedisStore>),
    /// PostgreSQL.
    Postgres(mcp_confirm::store::PostgresStore),
}

impl StoreHandle {
    /// The replay store.
    pub fn replay(&self) -> &dyn mcp_confirm::store::ReplayStore {
        match self {
            Self::Memory(store) => store,
            Self::Redis(store) => store.as_ref(),
            Self::Postgres(store) => store,
        }
    }

    /// The standing store.
    pub fn standing(&self) -> Arc<dyn mcp_confirm::store::standing::StandingStore> {
        match self {
            Self::Memory(store) => Arc::new(store.clone()),
            Self::Redis(store) => Arc::new(store.as_ref().clone()),
            Self::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// Its boot epoch (hex), for a store that forgets on restart.
    pub fn epoch(&self) -> Option<String> {
        self.replay()
            .boot_epoch()
            .map(|e| hex::encode(e.as_bytes()))
    }

    fn apply(&self, builder: ConfirmLayerBuilder) -> ConfirmLayerBuilder {
        match self {
            Self::Memory(store) => builder.store(store.clone()),
            Self::Redis(store) => builder.store(store.as_ref().clone()),
            Self::Postgres(store) => builder.store(store.clone()),
        }
    }
}
