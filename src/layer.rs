//! [`ConfirmLayer`] and its builder, which checks a configuration once and freezes it.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, GuardedTool};
use crate::grant::{GrantStore, Grants};
use crate::limit::ChallengeLimiter;
use crate::listing::{self, ToolListing};
use crate::notify::Notifier;
use crate::policy::{Channel, Settlement, ToolPolicy};
use crate::principal::{Principal, PrincipalExtractor, PrincipalFromExtension};
use crate::protocol::PROTOCOL_VERSION;
use crate::service::Confirm;
use crate::store::approval::ApprovalStore;
use crate::store::standing::StandingStore;
use crate::store::{MemoryReplayStore, ReplayStore};
use crate::token::keyring::KeyRing;
use crate::token::sealer::Sealer;
use crate::tools::{self, ToolInfo};

/// The default lifetime of a confirmation: five minutes.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The default tolerance for clock differences between instances.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// The default cap on a buffered request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The largest `tools/list` answer the layer reads by default; see
/// [`ConfirmLayerBuilder::max_listing_bytes`].
pub const DEFAULT_MAX_LISTING_BYTES: usize = 16 * 1024 * 1024;
/// The longest confirmation lifetime the builder accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The default time a queued tool's grant may wait for its first attempt: fifteen minutes.
pub const DEFAULT_GRANT_TTL: Duration = Duration::from_secs(15 * 60);
/// The longest grant lifetime the builder accepts.
pub const MAX_GRANT_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default per-principal challenge rate: 10 forms a second on average…
pub const DEFAULT_CHALLENGES_PER_SECOND: u32 = 10;
/// …and up to 30 at once.
pub const DEFAULT_CHALLENGE_BURST: u32 = 30;

/// Why a [`ConfirmLayerBuilder`] could not build a layer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No audience was set. It must name the deployment and be the same on every instance.
    #[error(
        "an audience is required: the endpoint's own URL (e.g. https://notes.example/mcp), the \
         same on every instance"
    )]
    MissingAudience,
    /// The audience is not the endpoint's absolute `http(s)` URL. A name such as
    /// `"notes.example"` is what a staging and a production config both copy from the docs,
    /// and a state signed for one would then be accepted by the other (when they share a key).
    /// A URL names one endpoint, as an OAuth resource indicator does.
    #[error(
        "the audience {0:?} is not an absolute http(s) URL: give the endpoint's own URL (e.g. \
         https://notes.example/mcp), which differs between staging and production"
    )]
    InvalidAudience(String),
    /// The TTL is zero or longer than [`MAX_TTL`].
    #[error("the TTL must be between 1 second and 24 hours")]
    InvalidTtl,
    /// No protocol version is supported.
    #[error("at least one protocol version must be supported")]
    NoSupportedVersions,
    /// A tool policy is inconsistent.
    #[error("invalid tool policy: {0}")]
    InvalidPolicy(String),
    /// A challenge rate limit of zero per second or a zero burst.
    #[error("the challenge rate limit needs a rate and a burst of at least one")]
    InvalidRateLimit,
    /// The tool list given to [`ConfirmLayerBuilder::tool_list`] could not be read, or an
    /// `exempt` tool is not in it.
    #[error("invalid tool list: {0}")]
    InvalidToolList(String),
    /// No tool list: without the server's tool definitions the layer cannot tell that every
    /// destructive tool is confirmed (a policy under a misspelt name would leave the real tool
    /// unconfirmed). Give [`tool_list`](ConfirmLayerBuilder::tool_list) or
    /// [`declarations`](ConfirmLayerBuilder::declarations).
    #[error(
        "the layer needs the server's tool list to check that every destructive tool is confirmed: \
         give .declarations(server.confirm_declarations()) with rmcp, or .tool_list(…) with the \
         tools your server lists"
    )]
    MissingToolList,
    /// A tool declared with `#[confirm]` (its definition carries the mark) has no policy in the
    /// layer: the declarations were not handed over.
    #[error(
        "tool {0:?} is declared with #[confirm] but the layer has no policy for it: \
         build the layer with .declarations(server.confirm_declarations())"
    )]
    DeclaredWithoutPolicy(String),
    /// A tool whose annotations say destructive has neither a policy nor an exemption.
    #[error(
        "tool {0:?} is destructive by its annotations and nothing confirms it: give it a policy \
         (#[confirm], .tool(…)), confirm every such tool with .confirm_destructive(), exempt it with \
         .exempt({0:?}), or annotate it read_only_hint / destructive_hint = false"
    )]
    UnconfirmedDestructiveTool(String),
    /// A tool that may be destructive (by its annotations) has no guard on its handler while the
    /// server's other tools do: it sits in an impl without `#[confirm_router]` (a second
    /// `#[tool_router(router = …)]` impl, say). A route that goes around the layer would run it
    /// unconfirmed.
    #[error(
        "tool {0:?} may be destructive and its handler has no guard (its impl lacks \
         #[confirm_router]): put #[confirm_router] on the impl that declares it, or serve the \
         server's tools through mcp_confirm::rmcp::guarded(router)"
    )]
    UnguardedTool(String),
    /// The server info is not an object with a string `name` and `version`.
    #[error("server info must be an object with a string name and version")]
    InvalidServerInfo,
    /// A [`queued`](ToolPolicy::queued) tool without a
    /// [`grant_store`](ConfirmLayerBuilder::grant_store) to keep its grants in.
    #[error("queued tools need a grant store (grant_store)")]
    MissingGrantStore,
    /// A tool is [approved in the browser](ToolPolicy::approve_in_browser), a
    /// [`replay_store`](ConfirmLayerBuilder::replay_store) is given, and no
    /// [`approval_store`](ConfirmLayerBuilder::approval_store) to keep its approvals in.
    #[error(
        "browser-approved tools need an approval store (approval_store; every replay store of \
         this crate is one)"
    )]
    MissingApprovalStore,
    /// A tool offers a [standing approval](ToolPolicy::standing), a
    /// [`replay_store`](ConfirmLayerBuilder::replay_store) is given, and no
    /// [`standing_store`](ConfirmLayerBuilder::standing_store) to keep standing approvals in.
    #[error(
        "tools offering standing approvals need a standing store (standing_store; every replay \
         store of this crate is one)"
    )]
    MissingStandingStore,
    /// A tool is [approved in the browser](ToolPolicy::approve_in_browser) but no
    /// [`approval_url`](ConfirmLayerBuilder::approval_url) says where the page is, or it is not
    /// an absolute `http(s)` URL.
    #[error("browser-approved tools need an absolute http(s) approval_url")]
    InvalidApprovalUrl,
    /// A rule requires passkeys ([`Approvers::with_passkey`](crate::approval::Approvers::with_passkey))
    /// and the layer was given nothing to verify them with
    /// ([`passkeys`](ConfirmLayerBuilder::passkeys)): no approval under it could be made.
    #[error("an approver rule requires passkeys: give the layer the passkeys that verify them")]
    MissingPasskeys,
    /// The grant TTL is zero or longer than [`MAX_GRANT_TTL`].
    #[error("the grant TTL must be between 1 second and 7 days")]
    InvalidGrantTtl,
}

/// A tower [`Layer`] that puts a signed, one-time user confirmation in front of destructive tools.
///
/// Cheap to clone: the configuration is shared. Build one with [`ConfirmLayer::builder`].
#[derive(Clone, Debug)]
pub struct ConfirmLayer {
    config: Arc<Config>,
}

impl ConfirmLayer {
    /// The gauges this layer's approval and standing stores answer: refresh them before each
    /// scrape (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub fn gauges(&self) -> crate::metrics::Gauges {
        crate::metrics::Gauges {
            audience: self.config.audience.clone(),
            approvals: self.config.approvals.clone(),
            standing: self.config.standing.clone(),
        }
    }

    /// Starts a layer whose states are signed by the first key of `keys`.
    pub fn builder(keys: KeyRing) -> ConfirmLayerBuilder {
        ConfirmLayerBuilder {
            keys,
            audience: None,
            ttl: DEFAULT_TTL,
            skew: DEFAULT_CLOCK_SKEW,
            store: None,
            approvals: None,
            standing: None,
            tools: HashMap::new(),
            supported_versions: vec![PROTOCOL_VERSION.to_owned()],
            principal: Arc::new(PrincipalFromExtension),
            local_principal: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_listing_bytes: DEFAULT_MAX_LISTING_BYTES,
            clock: Arc::new(SystemClock),
            challenge_rate: Some((DEFAULT_CHALLENGES_PER_SECOND, DEFAULT_CHALLENGE_BURST)),
            duplicates: Vec::new(),
            tool_lists: Vec::new(),
            without_tool_list: false,
            guards_handlers: false,
            confirm_destructive: false,
            destructive_messages: Vec::new(),
            exempt: Vec::new(),
            server_info: None,
            grants: None,
            grant_ttl: DEFAULT_GRANT_TTL,
            approval_url: None,
            notifier: None,
            passkeys: None,
            log: None,
            policy_revision: None,
            spans: crate::observe::Spans::default(),
        }
    }

    /// The browser channel's port: what a page may do with this layer (read and decide its
    /// deployment's approvals, report, sign its forms). The crate `mcp-confirm-pages` builds
    /// the approval page, the inbox, the standing-approvals page and the passkey page over it.
    #[must_use]
    pub fn approval_desk(&self) -> crate::approval::ApprovalDesk {
        crate::approval::ApprovalDesk::new(Arc::clone(&self.config))
    }

    /// The standing approvals this layer grants ([`ToolPolicy::standing`]): list and revoke a
    /// principal's. `None` when the layer keeps none (a replay store given without a
    /// [`standing_store`](ConfirmLayerBuilder::standing_store)).
    pub fn standing_approvals(&self) -> Option<crate::standing::StandingApprovals> {
        crate::standing::StandingApprovals::new(Arc::clone(&self.config))
    }

    /// The worker's handle on the grants this layer issues: its
    /// [grant store](ConfirmLayerBuilder::grant_store) and the revalidation hooks of its
    /// [queued](ToolPolicy::queued) tools, running only this layer's audience's grants. `None`
    /// without a grant store.
    pub fn grants(&self) -> Option<Grants> {
        let store = Arc::clone(self.config.grants.as_ref()?);
        let hooks = self
            .config
            .tools
            .iter()
            .filter(|(_, tool)| tool.policy.settlement == Settlement::Queued)
            .filter_map(|(name, tool)| {
                Some((name.clone(), Arc::clone(tool.policy.revalidate.as_ref()?)))
            })
            .collect();
        Some(Grants::with_hooks(
            store,
            &self.config.audience,
            hooks,
            self.config.standing.clone(),
            self.config.grant_log(),
        ))
    }
}

impl<S> Layer<S> for ConfirmLayer {
    type Service = Confirm<S>;

    fn layer(&self, inner: S) -> Confirm<S> {
        Confirm::new(inner, Arc::clone(&self.config))
    }
}

/// Configures a [`ConfirmLayer`].
#[must_use = "call .build() to get the layer"]
pub struct ConfirmLayerBuilder {
    keys: KeyRing,
    audience: Option<String>,
    ttl: Duration,
    skew: Duration,
    store: Option<Arc<dyn ReplayStore>>,
    approvals: Option<Arc<dyn ApprovalStore>>,
    standing: Option<Arc<dyn StandingStore>>,
    tools: HashMap<String, ToolPolicy>,
    supported_versions: Vec<String>,
    principal: Arc<dyn PrincipalExtractor>,
    local_principal: Option<Principal>,
    max_body_bytes: usize,
    max_listing_bytes: usize,
    clock: Arc<dyn Clock>,
    challenge_rate: Option<(u32, u32)>,
    duplicates: Vec<String>,
    tool_lists: Vec<Result<Value, String>>,
    without_tool_list: bool,
    /// `declarations` was called: the server guards its handlers with `#[confirm_router]`.
    guards_handlers: bool,
    confirm_destructive: bool,
    destructive_messages: Vec<(String, String)>,
    exempt: Vec<String>,
    server_info: Option<Result<Value, String>>,
    grants: Option<Arc<dyn GrantStore>>,
    grant_ttl: Duration,
    approval_url: Option<String>,
    passkeys: Option<Arc<dyn crate::approvers::PasskeyVerifier>>,
    notifier: Option<Arc<dyn Notifier>>,
    log: Option<Arc<dyn crate::audit::DecisionLog>>,
    policy_revision: Option<String>,
    spans: crate::observe::Spans,
}

impl fmt::Debug for ConfirmLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmLayerBuilder")
            .field("keys", &self.keys)
            .field("audience", &self.audience)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ConfirmLayerBuilder {
    /// Names the deployment: the endpoint's own absolute URL, e.g. `https://notes.example/mcp`
    /// ([`ConfigError::InvalidAudience`] otherwise). Bound into every state, so a state from
    /// another deployment sharing a key (staging and production, say) is refused. Required; the
    /// same value on every instance behind one endpoint.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// How long a confirmation stays answerable (default five minutes, at most 24 hours).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How far instances' clocks may disagree (default 30 seconds).
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.skew = skew;
        self
    }

    /// Where nonces are claimed. Defaults to a [`MemoryReplayStore`], which gives single use in one
    /// process only, and only until it restarts (states issued before a restart are refused);
    /// several instances, or states that must survive a restart, need a shared store.
    pub fn replay_store(mut self, store: impl ReplayStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Keeps nonces, browser approvals and standing approvals in one store:
    /// [`replay_store`](Self::replay_store), [`approval_store`](Self::approval_store) and
    /// [`standing_store`](Self::standing_store) at once. Every store of this crate keeps all three.
    pub fn store<S: ReplayStore + ApprovalStore + StandingStore>(mut self, store: S) -> Self {
        let store = Arc::new(store);
        self.approvals = Some(Arc::clone(&store) as Arc<dyn ApprovalStore>);
        self.standing = Some(Arc::clone(&store) as Arc<dyn StandingStore>);
        self.store = Some(store);
        self
    }

    /// Where the [standing approvals](ToolPolicy::standing) of the tools that offer them are
    /// kept and counted; required with such a tool ([`ConfigError::MissingStandingStore`])
    /// unless no replay store is given either, when the default memory store keeps them.
    pub fn standing_store(mut self, store: impl StandingStore) -> Self {
        self.standing = Some(Arc::new(store));
        self
    }

    /// Records every decision in `log`, a tamper-evident decision log (`mcp-confirm-log`'s
    /// `AuditLog`, or any [`DecisionLog`](crate::audit::DecisionLog)). A call is let through
    /// only once its record is written; while the log is down, the log's
    /// [`WhenDown`](crate::audit::WhenDown) policy says what happens (by default such calls
    /// are refused, nothing runs and no confirmation is spent).
    pub fn audit_log(mut self, log: impl crate::audit::DecisionLog) -> Self {
        self.log = Some(Arc::new(log));
        self
    }

    /// Names the revision of the policy this layer enforces (a commit, a configuration file's
    /// digest): every decision-log record made under it carries it, so a record says which
    /// rules decided it. Layers rebuilt when the policy changes give each build its own.
    pub fn policy_revision(mut self, revision: impl Into<String>) -> Self {
        self.policy_revision = Some(revision.into());
        self
    }

    /// Sends the layer's spans to `tracer` rather than to the global tracer provider's tracer
    /// (which is asked on the calls, so a provider set after the layer was built is used; while
    /// none is set, a thread asks again only every 256th call, so a layer without a tracer
    /// builds no span).
    /// For an application with more than one provider, and for tests.
    #[cfg(feature = "otel")]
    pub fn otel_tracer(mut self, tracer: opentelemetry::global::BoxedTracer) -> Self {
        self.spans.otel = crate::observe::GivenTracer::given(tracer);
        self
    }

    /// Where [browser-approved](ToolPolicy::approve_in_browser) tools' approvals wait for their
    /// decision; required with such a tool ([`ConfigError::MissingApprovalStore`]) unless no
    /// replay store is given either, when the default memory store keeps both. Every replay
    /// store of this crate is an approval store too: [`store`](Self::store) gives one for both.
    pub fn approval_store(mut self, store: impl ApprovalStore) -> Self {
        self.approvals = Some(Arc::new(store));
        self
    }

    /// Confirms calls of the tool `name` as `policy` says. Calling it again for a name replaces the
    /// policy.
    pub fn tool(mut self, name: impl Into<String>, policy: ToolPolicy) -> Self {
        self.tools.insert(name.into(), policy);
        self
    }

    /// Confirms each tool of `policies` as its policy says: the output of the generated
    /// `confirm_policies()` of a `#[confirm_router]` impl, or any list of names and policies.
    ///
    /// A name that already has a policy (from [`tool`](Self::tool) or an earlier `tools`) makes
    /// [`try_build`](Self::try_build) fail: one tool, one declaration.
    pub fn tools<I, N>(mut self, policies: I) -> Self
    where
        I: IntoIterator<Item = (N, ToolPolicy)>,
        N: Into<String>,
    {
        for (name, policy) in policies {
            let name = name.into();
            if self.tools.contains_key(&name) {
                // Two declarations of one tool (an attribute and a builder call, say): which one
                // wins must not be an accident of call order.
                self.duplicates.push(name.clone());
            }
            self.tools.insert(name, policy);
        }
        self
    }

    /// The server's tool definitions, as `tools/list` returns them: rmcp's
    /// `ToolRouter::list_all()`, a `ListToolsResult`, or the JSON (`[tool, …]` or
    /// `{"tools": [tool, …]}`) of a server in another framework.
    ///
    /// With it the layer reads each confirmed tool's `x-mcp-header` annotation (the `Mcp-Param-*`
    /// header of the argument it rewrites follows the schema, no `select_header` needed), and
    /// [`confirm_destructive`](Self::confirm_destructive) reads the tools' annotations.
    pub fn tool_list(mut self, tools: impl serde::Serialize) -> Self {
        self.tool_lists
            .push(serde_json::to_value(tools).map_err(|e| e.to_string()));
        self
    }

    /// What a `#[confirm_router]` impl declares, from its generated `confirm_declarations()`: the
    /// policies of its `#[confirm]` tools **and** the definitions of its tools, in one call, so
    /// the layer cannot be given one without the other. Call it once per impl (or add them up);
    /// a [`tool_list`](Self::tool_list) may list the same tools again.
    #[cfg(feature = "rmcp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
    pub fn declarations(self, declarations: crate::rmcp::Declarations) -> Self {
        let crate::rmcp::Declarations { policies, tools } = declarations;
        let mut builder = self.tools(policies).tool_list(tools);
        builder.guards_handlers = true;
        builder
    }

    /// Builds the layer without the server's tool list. **Removes a guarantee on purpose**, as
    /// its name says: the layer then confirms exactly the tools named in [`tool`](Self::tool) and
    /// [`tools`](Self::tools), and cannot tell at build time that a name is misspelt
    /// (`.tool("files_delte", …)`) or that a destructive tool has no policy. Such a tool runs
    /// unconfirmed until the net below catches it, on each instance, after each restart. For
    /// servers whose tools change at run time; everything else gives a tool list.
    ///
    /// What remains is a run-time net: each `tools/list` answer the layer marks is read, and a
    /// listed tool that is destructive by its annotations (or declared with `#[confirm]`) and
    /// has neither a policy nor an exemption is refused from then on, with an error in the audit
    /// log. Calls that arrive before this instance saw such an answer are not covered.
    pub fn without_tool_list_unchecked(mut self) -> Self {
        self.without_tool_list = true;
        self
    }

    /// Confirms every tool of the [`tool_list`](Self::tool_list) whose annotations say it is
    /// destructive, with [`ToolPolicy::confirm_only`], unless a policy for it was given (by
    /// [`tool`](Self::tool), [`tools`](Self::tools) or an attribute) or it is
    /// [`exempt`](Self::exempt).
    ///
    /// Destructive as the spec defines it: `readOnlyHint: true` never is; otherwise a tool is,
    /// unless it says `destructiveHint: false`. So a destructive tool added later is confirmed
    /// without anyone remembering to list it.
    pub fn confirm_destructive(mut self) -> Self {
        self.confirm_destructive = true;
        self
    }

    /// The message of the form [`confirm_destructive`](Self::confirm_destructive) generates for
    /// the tool `name` (by default `"Allow <title> to run? It may change or delete data."`). The
    /// form still lists the call's arguments under it. The tool must be one that
    /// `confirm_destructive` confirms.
    pub fn destructive_message(
        mut self,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.destructive_messages
            .push((name.into(), message.into()));
        self
    }

    /// Lets the destructive tool `name` run unconfirmed. It must be in the tool list and must
    /// not also be given a policy. Its calls carry a [`Waived`](crate::Waived), so a handler
    /// guarded by `#[confirm_router]` runs them; without this layer in front it still refuses.
    pub fn exempt(mut self, name: impl Into<String>) -> Self {
        self.exempt.push(name.into());
        self
    }

    /// The server's `Implementation` (`name`, `version`, …), e.g. rmcp's
    /// `ServerHandler::get_info().server_info`: the layer's own results then carry it in
    /// `_meta["io.modelcontextprotocol/serverInfo"]`, as the server's do.
    pub fn server_info(mut self, info: impl serde::Serialize) -> Self {
        self.server_info = Some(serde_json::to_value(info).map_err(|e| e.to_string()));
        self
    }

    /// The protocol versions accepted on confirmed calls (default: `2026-07-28` only). Others get
    /// `-32022` listing these.
    pub fn supported_versions<I, V>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: Into<String>,
    {
        self.supported_versions = versions.into_iter().map(Into::into).collect();
        self
    }

    /// How the principal is found in request extensions (default: a [`Principal`] stored as is).
    pub fn principal_extractor(mut self, extractor: impl PrincipalExtractor) -> Self {
        self.principal = Arc::new(extractor);
        self
    }

    /// The principal a JSON-RPC **message** runs as when it carries none: for a local server
    /// run by one user over stdio, behind the layer's message service. **Removes
    /// authentication on purpose**, so it never applies to HTTP requests: an HTTP request
    /// without a principal is refused (`-31001`) whatever this says, because an HTTP endpoint is
    /// reachable by others even when it listens on localhost.
    pub fn unauthenticated_local_principal(mut self, principal: Principal) -> Self {
        self.local_principal = Some(principal);
        self
    }

    /// The largest request body buffered (default 4 MiB); larger POSTs get HTTP 413.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    /// The largest `tools/list` answer the layer reads to mark its confirmed tools and to learn
    /// which listed tools need a confirmation it was not given (default 16 MiB). The layer reads
    /// every listing it forwards: one it cannot (larger than this, or in a media type it does not
    /// know) is replaced by a JSON-RPC error, and from then on every call of a tool without a
    /// policy or exemption is refused, as when the quarantine overflows.
    pub fn max_listing_bytes(mut self, max: usize) -> Self {
        self.max_listing_bytes = max;
        self
    }

    /// Limits how fast one principal is shown new forms: `per_second` on average, up to `burst` at
    /// once (default 10 and 30). Past it, the call is refused with `-31003` and a retry-after (HTTP
    /// 429 with `Retry-After`). The limit is per instance.
    pub fn challenge_rate_limit(mut self, per_second: u32, burst: u32) -> Self {
        self.challenge_rate = Some((per_second, burst));
        self
    }

    /// No per-principal challenge limit (for benchmarks, or when a gateway in front limits).
    pub fn without_challenge_rate_limit(mut self) -> Self {
        self.challenge_rate = None;
        self
    }

    /// Where the grants of [queued](ToolPolicy::queued) tools are kept: a store every instance and
    /// every worker shares ([`RedisStore`](crate::store::RedisStore),
    /// [`PostgresStore`](crate::store::PostgresStore), which keep every other store too; a
    /// [`MemoryGrantStore`](crate::grant::MemoryGrantStore) only when the workers run in this
    /// process).
    pub fn grant_store(mut self, store: impl GrantStore) -> Self {
        self.grants = Some(Arc::new(store));
        self
    }

    /// Where the approval page of [browser-approved](ToolPolicy::approve_in_browser) tools is
    /// served: an absolute URL the id is appended to, e.g. `https://notes.example/confirm/`. Use
    /// HTTPS outside development.
    pub fn approval_url(mut self, url: impl Into<String>) -> Self {
        let mut url = url.into();
        if !url.ends_with('/') {
            url.push('/');
        }
        self.approval_url = Some(url);
        self
    }

    /// Tells approvers of each new approval that others decide
    /// ([`approved_by`](ToolPolicy::approved_by)): e.g. signed webhooks
    /// (`mcp_confirm_pages::webhooks::Webhooks`, feature `webhooks`). Called after the approval
    /// is stored, never waited on; the caller's own approvals notify no one.
    pub fn notifier(mut self, notifier: impl Notifier) -> Self {
        self.notifier = Some(Arc::new(notifier));
        self
    }

    /// Verifies approvers' passkeys where a rule requires them
    /// ([`Approvers::with_passkey`](crate::approval::Approvers::with_passkey)): `Passkeys` of
    /// the crate `mcp-confirm-pages` (WebAuthn). The pages read it back through
    /// [`ApprovalDesk::passkeys`](crate::approval::ApprovalDesk::passkeys); required with such
    /// a rule ([`ConfigError::MissingPasskeys`]).
    pub fn passkeys(mut self, passkeys: impl crate::approvers::PasskeyVerifier) -> Self {
        self.passkeys = Some(Arc::new(passkeys));
        self
    }

    /// How long a grant may wait for its first attempt (default [`DEFAULT_GRANT_TTL`]); a grant
    /// not begun by then expires and never runs.
    pub fn grant_ttl(mut self, ttl: Duration) -> Self {
        self.grant_ttl = ttl;
        self
    }

    /// The clock for state issue and expiry (default: the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the layer.
    ///
    /// # Errors
    /// [`ConfigError`] when the audience is missing, the TTL is out of range, no version is
    /// supported, or a tool policy is inconsistent.
    pub fn try_build(self) -> Result<ConfirmLayer, ConfigError> {
        let audience = self
            .audience
            .filter(|a| !a.is_empty())
            .ok_or(ConfigError::MissingAudience)?;
        if !is_absolute_http_url(&audience) {
            return Err(ConfigError::InvalidAudience(audience));
        }
        if self.ttl.as_secs() == 0 || self.ttl > MAX_TTL {
            return Err(ConfigError::InvalidTtl);
        }
        if self.supported_versions.is_empty() {
            return Err(ConfigError::NoSupportedVersions);
        }
        let listed = if self.tool_lists.is_empty() {
            if !self.without_tool_list {
                return Err(ConfigError::MissingToolList);
            }
            None
        } else {
            let list = merged_tool_list(self.tool_lists)?;
            Some(tools::read(&list).map_err(|e| ConfigError::InvalidToolList(e.to_string()))?)
        };
        if let Some(name) = self.duplicates.first() {
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?} is given two policies"
            )));
        }
        let mut policies = self.tools;
        match &listed {
            Some(listed) => {
                if let Some(name) = sorted_names(&policies)
                    .into_iter()
                    .find(|name| !listed.contains_key(*name))
                {
                    // A policy for a name the server does not have: a typo, or a stale list.
                    // Either way the tool it meant would run unconfirmed.
                    return Err(ConfigError::InvalidToolList(format!(
                        "tool {name:?} has a policy but is not in the tool list"
                    )));
                }
                check_guarded(listed, self.guards_handlers, &self.exempt)?;
                check_declared(&policies, listed, &self.exempt)?;
                confirm_destructive(
                    &mut policies,
                    listed,
                    self.confirm_destructive,
                    &self.exempt,
                    &self.destructive_messages,
                )?;
            }
            None if self.confirm_destructive
                || !self.exempt.is_empty()
                || !self.destructive_messages.is_empty() =>
            {
                return Err(ConfigError::MissingToolList);
            }
            None => {}
        }
        for (name, policy) in &mut policies {
            policy.validate(name).map_err(ConfigError::InvalidPolicy)?;
            let title = listed
                .as_ref()
                .and_then(|listed| listed.get(name))
                .and_then(|info| info.title.as_deref())
                .unwrap_or(name);
            policy.describe_for(&crate::form::plain_label(title, 80));
            policy.revalidate_by_default();
        }
        if policies
            .values()
            .any(|p| p.settlement == Settlement::Queued)
            && self.grants.is_none()
        {
            return Err(ConfigError::MissingGrantStore);
        }
        if self.grant_ttl.as_secs() == 0 || self.grant_ttl > MAX_GRANT_TTL {
            return Err(ConfigError::InvalidGrantTtl);
        }
        if let Some(url) = &self.approval_url {
            if !is_absolute_http_url(url) {
                return Err(ConfigError::InvalidApprovalUrl);
            }
        } else if policies.values().any(|p| p.channel != Channel::Form) {
            return Err(ConfigError::InvalidApprovalUrl);
        }
        let server_info = match self.server_info {
            None => None,
            Some(info) => {
                let info = info.map_err(|_| ConfigError::InvalidServerInfo)?;
                let text = |key: &str| info.get(key).is_some_and(Value::is_string);
                if !(info.is_object() && text("name") && text("version")) {
                    return Err(ConfigError::InvalidServerInfo);
                }
                Some(info)
            }
        };
        let challenge_limiter = match self.challenge_rate {
            None => None,
            Some((per_second, burst)) => {
                let (Some(per_second), Some(burst)) =
                    (NonZeroU32::new(per_second), NonZeroU32::new(burst))
                else {
                    return Err(ConfigError::InvalidRateLimit);
                };
                Some(ChallengeLimiter::new(per_second, burst))
            }
        };
        if self.passkeys.is_none() && policies.values().any(|p| p.approvers.needs_passkey()) {
            return Err(ConfigError::MissingPasskeys);
        }
        let browser = policies.values().any(|p| p.channel != Channel::Form);
        let standing_offered = policies.values().any(|p| p.standing.is_some());
        // With no replay store given, the default memory store keeps the rest too; with one
        // given, each capability a policy needs must be given as well.
        let (store, approvals, standing): (Arc<dyn ReplayStore>, _, _) = match self.store {
            None => {
                let memory = Arc::new(MemoryReplayStore::new());
                let approvals = self.approvals.unwrap_or_else(|| memory.clone());
                let standing = self.standing.unwrap_or_else(|| memory.clone());
                (memory, Some(approvals), Some(standing))
            }
            Some(_) if browser && self.approvals.is_none() => {
                return Err(ConfigError::MissingApprovalStore);
            }
            Some(_) if standing_offered && self.standing.is_none() => {
                return Err(ConfigError::MissingStandingStore);
            }
            Some(store) => (store, self.approvals, self.standing),
        };
        if let Some(name) = sorted_names(&policies)
            .into_iter()
            .find(|name| policies[*name].settlement == Settlement::ByHandler)
            && !store.claims_in_handler()
        {
            // The handler could not claim anything: every answer would run it again.
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?} is claimed_by_handler, and its handler cannot claim a nonce of \
                 this replay store in its transaction (PostgresStore::consume_in can): \
                 use that store, or let the layer claim"
            )));
        }
        let mut tools =
            foldhash::HashMap::with_capacity_and_hasher(policies.len(), Default::default());
        for (name, policy) in policies {
            let header = param_header(&name, &policy, listed.as_ref())?;
            let structured = listed
                .as_ref()
                .and_then(|listed| listed.get(&name))
                .is_some_and(|info| info.structured);
            let guarded = GuardedTool::new(&audience, &name, policy, header, structured);
            tools.insert(name, Arc::new(guarded));
        }
        let structured_tools = listed.as_ref().map(|listed| {
            listed
                .iter()
                .filter(|(_, info)| info.structured)
                .map(|(name, _)| name.clone())
                .collect()
        });
        let known_tools = listed.map(|listed| listed.into_keys().collect());
        let marks = tools
            .iter()
            .map(|(name, tool)| (name.clone(), listing::mark_of(&tool.policy)))
            .collect();
        let listing = ToolListing::new(
            marks,
            self.exempt.into_iter().collect(),
            known_tools,
            structured_tools,
        );
        Ok(ConfirmLayer {
            config: Arc::new(Config {
                audience: audience.clone(),
                sealer: Sealer::new(self.keys, self.ttl, self.skew, self.clock),
                store,
                approvals,
                standing,
                tools,
                supported_versions: self.supported_versions,
                principal: self.principal,
                local_principal: self.local_principal,
                max_body_bytes: self.max_body_bytes,
                max_listing_bytes: self.max_listing_bytes,
                challenge_limiter,
                server_info,
                listing: Arc::new(listing),
                handler_calls: Arc::default(),
                grants: self.grants,
                grant_ttl: self.grant_ttl,
                approval_url: self.approval_url,
                notifier: self.notifier,
                passkeys: self.passkeys,
                log: self.log,
                policy_revision: self.policy_revision,
                spans: self.spans,
            }),
        })
    }

    /// Builds the layer.
    ///
    /// # Panics
    /// On a configuration error; see [`try_build`](Self::try_build).
    pub fn build(self) -> ConfirmLayer {
        match self.try_build() {
            Ok(layer) => layer,
            Err(e) => panic!("invalid ConfirmLayer configuration: {e}"),
        }
    }
}

/// A map's tool names, sorted: checks visit tools in one order, and errors name the same tool
/// on every run.
fn sorted_names<V>(by_name: &HashMap<String, V>) -> Vec<&String> {
    let mut names: Vec<&String> = by_name.keys().collect();
    names.sort();
    names
}

/// An absolute `http(s)` URL with a host, and no query or fragment.
fn is_absolute_http_url(url: &str) -> bool {
    let absolute = url.parse::<http::Uri>().ok().is_some_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some_and(|h| !h.is_empty())
    });
    absolute && !url.contains(['?', '#'])
}

/// The `Mcp-Param-*` header name of the argument a policy rewrites: the tool's own `x-mcp-header`
/// annotation when the tool list is known, else the policy's `select_header`. Both given and
/// different is a configuration error: one of them is stale.
fn param_header(
    name: &str,
    policy: &ToolPolicy,
    listed: Option<&HashMap<String, ToolInfo>>,
) -> Result<Option<String>, ConfigError> {
    let from_schema = policy
        .select_into
        .as_ref()
        .and_then(|argument| listed?.get(name)?.param_headers.get(argument).cloned());
    match (from_schema, &policy.select_header) {
        (Some(schema), Some(given)) if !schema.eq_ignore_ascii_case(given) => {
            Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?}: select_header {given:?} disagrees with the schema's x-mcp-header {schema:?}"
            )))
        }
        (Some(schema), _) => {
            if schema.is_empty()
                || http::HeaderName::try_from(format!("mcp-param-{schema}")).is_err()
            {
                return Err(ConfigError::InvalidToolList(format!(
                    "tool {name:?}: x-mcp-header {schema:?} is not a header name"
                )));
            }
            Ok(Some(schema))
        }
        (None, given) => Ok(given.clone()),
    }
}

/// The tool lists given (by [`ConfirmLayerBuilder::tool_list`] and
/// [`ConfirmLayerBuilder::declarations`]) as one: a tool listed by several with the same
/// definition counts once; with different definitions, one of them is stale.
fn merged_tool_list(mut lists: Vec<Result<Value, String>>) -> Result<Value, ConfigError> {
    if lists.len() == 1
        && let Some(only) = lists.pop()
    {
        return only.map_err(ConfigError::InvalidToolList);
    }
    let mut merged: Vec<Value> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for list in lists {
        let list = list.map_err(ConfigError::InvalidToolList)?;
        let tools = match list {
            Value::Array(tools) => tools,
            Value::Object(mut result) => {
                if result.get("nextCursor").is_some_and(|c| !c.is_null()) {
                    return Err(ConfigError::InvalidToolList(
                        tools::ToolListError::Paginated.to_string(),
                    ));
                }
                match result.remove("tools") {
                    Some(Value::Array(tools)) => tools,
                    _ => {
                        return Err(ConfigError::InvalidToolList(
                            tools::ToolListError::Shape.to_string(),
                        ));
                    }
                }
            }
            _ => {
                return Err(ConfigError::InvalidToolList(
                    tools::ToolListError::Shape.to_string(),
                ));
            }
        };
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else {
                // tools::read names the culprit.
                merged.push(tool);
                continue;
            };
            match index.get(&name) {
                Some(&at) if merged[at] == tool => {}
                Some(_) => {
                    return Err(ConfigError::InvalidToolList(format!(
                        "tool {name:?} is listed twice with different definitions"
                    )));
                }
                None => {
                    index.insert(name, merged.len());
                    merged.push(tool);
                }
            }
        }
    }
    Ok(Value::Array(merged))
}

/// The checks that tie the policies to the server's own definitions: a tool declared with
/// `#[confirm]` has a policy of the kind it declared, and a policy's `select_into` names an
/// argument the tool's schema has (else the chosen id would be written where the handler never
/// looks, after the user confirmed).
fn check_declared(
    policies: &HashMap<String, ToolPolicy>,
    listed: &HashMap<String, ToolInfo>,
    exempt: &[String],
) -> Result<(), ConfigError> {
    let names = sorted_names(listed);
    for name in names {
        let info = &listed[name];
        let Some(kind) = info.declared.as_deref() else {
            continue;
        };
        if kind == "destructive" {
            // Guarded for its annotations alone: confirm_destructive, a policy or an exemption
            // covers it (confirm_destructive checks).
            continue;
        }
        let Some(policy) = policies.get(name) else {
            return Err(ConfigError::DeclaredWithoutPolicy(name.clone()));
        };
        if exempt.contains(name) {
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?} is declared with #[confirm] and exempt"
            )));
        }
        let given = if policy.resolver.is_some() {
            "pick_one"
        } else {
            "confirm"
        };
        if given != kind {
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?} is declared {kind} with #[confirm] but given a {given} policy"
            )));
        }
    }
    let mut named: Vec<(&String, &ToolPolicy)> = policies.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    for (name, policy) in named {
        let (Some(argument), Some(info)) = (&policy.select_into, listed.get(name)) else {
            continue;
        };
        if let Some(arguments) = &info.arguments
            && !arguments.iter().any(|a| a == argument)
        {
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?}: select_into {argument:?} is not an argument of the tool (its schema has: {})",
                if arguments.is_empty() {
                    "none".to_owned()
                } else {
                    arguments.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// When the server guards its handlers (its declarations came from `#[confirm_router]`, or any
/// listed tool carries the mark), every listed tool that may be destructive must carry the mark
/// too: one without it comes from an impl nothing guards, and would run unconfirmed on a route
/// around the layer. Exempt tools run unconfirmed on purpose and are left alone.
fn check_guarded(
    listed: &HashMap<String, ToolInfo>,
    guards_handlers: bool,
    exempt: &[String],
) -> Result<(), ConfigError> {
    let guarding = guards_handlers || listed.values().any(|info| info.declared.is_some());
    if !guarding {
        return Ok(());
    }
    let names = sorted_names(listed);
    match names.into_iter().find(|name| {
        let info = &listed[*name];
        info.destructive && info.declared.is_none() && !exempt.contains(name)
    }) {
        Some(name) => Err(ConfigError::UnguardedTool(name.clone())),
        None => Ok(()),
    }
}

/// Gives each destructive tool of `listed` a confirm-only policy that names the tool and
/// describes the call when `all_destructive` (unless it has a policy or is exempt), after
/// checking that each exempt tool is listed and has no policy; without `all_destructive`, a
/// destructive tool with neither is an error.
fn confirm_destructive(
    policies: &mut HashMap<String, ToolPolicy>,
    listed: &HashMap<String, ToolInfo>,
    all_destructive: bool,
    exempt: &[String],
    messages: &[(String, String)],
) -> Result<(), ConfigError> {
    for name in exempt {
        if !listed.contains_key(name) {
            return Err(ConfigError::InvalidToolList(format!(
                "exempt tool {name:?} is not in the tool list"
            )));
        }
        if policies.contains_key(name) {
            return Err(ConfigError::InvalidPolicy(format!(
                "tool {name:?} is both exempt and given a policy"
            )));
        }
    }
    let names = sorted_names(listed);
    let mut generated = Vec::new();
    for name in names {
        let info = &listed[name];
        let needs = info.destructive || info.declared.is_some();
        if !needs || exempt.contains(name) || policies.contains_key(name) {
            continue;
        }
        if !all_destructive {
            return Err(ConfigError::UnconfirmedDestructiveTool(name.clone()));
        }
        let title = crate::form::plain_label(info.title.as_deref().unwrap_or(name), 80);
        let message = messages.iter().rev().find(|(n, _)| n == name).map_or_else(
            || format!("Allow {title} to run? It may change or delete data."),
            |(_, m)| m.clone(),
        );
        let policy = ToolPolicy::confirm_only()
            .message(message)
            .confirm_title(format!("Yes, run {title}"));
        policies.insert(name.clone(), policy);
        generated.push(name);
    }
    for (name, _) in messages {
        if !generated.contains(&name) {
            return Err(ConfigError::InvalidPolicy(format!(
                "destructive_message for {name:?}: confirm_destructive does not confirm that tool \
                 (not listed, not destructive, exempt, or given its own policy)"
            )));
        }
    }
    Ok(())
}
