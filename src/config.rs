//! The configuration a [`ConfirmLayer`](crate::ConfirmLayer) builds once and every service it
//! makes shares: the sealer, the replay store, the guarded tools and the request-level settings.
//!
//! It sits below the layer, the services and the decision path, which all read it; it imports
//! none of them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::audit::event::DecisionEvent;
use crate::audit::{DecisionLog, LogEntry};
use crate::engine::Refused;
use crate::grant::GrantStore;
use crate::kernel::PrincipalKey;
use crate::limit::ChallengeLimiter;
use crate::listing::{ToolListing, Unconfirmed};
use crate::message::{TOOLS_CALL, ToolCall};
use crate::policy::ToolPolicy;
use crate::principal::{Principal, PrincipalExtractor};
use crate::store::ReplayStore;
use crate::store::approval::ApprovalStore;
use crate::store::standing::StandingStore;
use crate::token::claims::{arguments_digest, request_id_digest};
use crate::token::sealer::{RequestDigests, Sealer, ToolBinding};

/// The configuration shared by every service a layer builds.
pub(crate) struct Config {
    /// The deployment's name, recorded in the grants it issues.
    pub(crate) audience: String,
    pub(crate) sealer: Sealer,
    pub(crate) store: Arc<dyn ReplayStore>,
    /// Where browser approvals wait; the builder sees to it that a browser-approved tool has one.
    pub(crate) approvals: Option<Arc<dyn ApprovalStore>>,
    /// Where standing approvals are kept; the builder sees to it that a tool offering one has one.
    pub(crate) standing: Option<Arc<dyn StandingStore>>,
    /// Looked up by the name each call gives: foldhash (randomly seeded), as the map is built
    /// from the configuration alone.
    pub(crate) tools: foldhash::HashMap<String, Arc<GuardedTool>>,
    pub(crate) supported_versions: Vec<String>,
    pub(crate) principal: Arc<dyn PrincipalExtractor>,
    pub(crate) local_principal: Option<Principal>,
    pub(crate) max_body_bytes: usize,
    /// The largest `tools/list` answer read.
    pub(crate) max_listing_bytes: usize,
    pub(crate) challenge_limiter: Option<ChallengeLimiter>,
    /// The server's `Implementation`, put in the `_meta` of the layer's own results.
    pub(crate) server_info: Option<Value>,
    /// What the layer knows of the server's tool list, and marks in its answers.
    pub(crate) listing: Arc<ToolListing>,
    /// The nonces of `claimed_by_handler` calls running in this process, until the layer has
    /// checked that their handler claimed: a replay of one is refused as in flight.
    pub(crate) handler_calls: Arc<dashmap::DashSet<crate::kernel::Nonce>>,
    /// Where queued tools' grants go.
    pub(crate) grants: Option<Arc<dyn GrantStore>>,
    /// How long a new grant may wait for its first attempt.
    pub(crate) grant_ttl: Duration,
    /// The approval page's URL up to the id (ends with `/`), for browser-approved tools.
    pub(crate) approval_url: Option<String>,
    /// Verifies the passkeys of rules that require them (the pages read it).
    pub(crate) passkeys: Option<Arc<dyn crate::approvers::PasskeyVerifier>>,
    /// Hears of each new approval that others decide.
    pub(crate) notifier: Option<Arc<dyn crate::notify::Notifier>>,
    /// Where every decision is recorded as evidence.
    pub(crate) log: Option<Arc<dyn DecisionLog>>,
    /// The policy revision every log entry carries, if the deployment names one.
    pub(crate) policy_revision: Option<String>,
    /// Where the spans go besides `tracing`.
    pub(crate) spans: crate::observe::Spans,
}

/// What the layer does with a `tools/call` of one tool.
pub(crate) enum Route {
    /// Confirm it.
    Confirm(Arc<GuardedTool>),
    /// Let it through with a [`Waived`](crate::Waived): exempt by configuration.
    Exempt,
    /// Refuse it: the server lists it as needing a confirmation the layer was not given.
    Undeclared,
    /// Refuse it: the layer was built with the server's tool list and this name is not in it.
    /// The list was partial (a second router left out) or stale; either way the layer cannot
    /// know whether the tool is destructive, so it does not guess.
    Unlisted,
}

impl Config {
    /// What happens to a call of the tool `name`; `None`: it is not the layer's business.
    pub(crate) fn route(&self, name: &str) -> Option<Route> {
        if let Some(tool) = self.tools.get(name) {
            return Some(Route::Confirm(Arc::clone(tool)));
        }
        self.listing
            .route(name)
            .map(|unconfirmed| match unconfirmed {
                Unconfirmed::Exempt => Route::Exempt,
                Unconfirmed::Undeclared => Route::Undeclared,
                Unconfirmed::Unlisted => Route::Unlisted,
            })
    }

    /// An HTTP request's principal: from the extensions only. The
    /// [unauthenticated local principal](crate::ConfirmLayerBuilder::unauthenticated_local_principal)
    /// never applies here: an HTTP endpoint is reachable by others, whatever it listens on.
    pub(crate) fn principal(&self, extensions: &http::Extensions) -> Option<Principal> {
        let principal = self.authenticated(extensions);
        if principal.is_none() && self.local_principal.is_some() {
            tracing::warn!(target: crate::audit::TARGET,
                "an HTTP request without a principal: unauthenticated (the local principal applies to the message service only)");
        }
        principal
    }

    /// A JSON-RPC message's principal (stdio, queues): from the extensions, else the
    /// configured unauthenticated local principal. Blank ones name no one.
    pub(crate) fn message_principal(&self, extensions: &http::Extensions) -> Option<Principal> {
        self.authenticated(extensions).or_else(|| {
            self.local_principal
                .clone()
                .filter(|principal| !principal.is_blank())
        })
    }

    /// The principal the authenticator put in the extensions. A blank one (empty or
    /// whitespace) names no one: the request is unauthenticated.
    fn authenticated(&self, extensions: &http::Extensions) -> Option<Principal> {
        let principal = self.principal.extract(extensions)?;
        if principal.is_blank() {
            tracing::warn!(target: crate::audit::TARGET,
                "the authenticator put a blank principal in the request: treated as unauthenticated");
            return None;
        }
        Some(principal)
    }

    /// Whom a new challenge for `principal` is charged to: the digest its state will carry.
    pub(crate) fn principal_key(&self, principal: &Principal) -> PrincipalKey {
        self.sealer.principal_digest(principal.subject())
    }

    /// `principal`'s digest under every key of the ring, the signing key's first: records keyed
    /// by principal (standing approvals) made before a key rotation are still hers.
    pub(crate) fn principal_keys(&self, principal: &Principal) -> Vec<PrincipalKey> {
        self.sealer.keys().principal_digests(principal.subject())
    }

    /// What grants of this layer write to its decision log.
    pub(crate) fn grant_log(&self) -> crate::grant::log::GrantLog {
        crate::grant::log::GrantLog {
            log: self.log.clone(),
        }
    }

    /// Reports `event` to operators only (spans, metrics and `tracing`), not to the decision
    /// log: for what the log does not keep.
    pub(crate) fn trace(&self, event: &DecisionEvent<'_>) {
        self.observe(event);
        event.trace();
    }

    /// Reports `event` to the span and the metrics.
    fn observe(&self, event: &DecisionEvent<'_>) {
        crate::observe::decision(&|tool| self.channel_of(tool), event);
    }

    /// `tool`'s label in metrics: its own name if configured, else `other`.
    pub(crate) fn tool_label<'a>(&self, tool: &'a str) -> &'a str {
        crate::observe::tool_label(&|tool| self.channel_of(tool), tool)
    }

    /// The channel a configured tool is decided on, as operators see it (`form`, `browser`:
    /// the approval page by the caller, `approver`: by someone else); `None` for a name that is
    /// not a configured tool.
    pub(crate) fn channel_of(&self, tool: &str) -> Option<&'static str> {
        let policy = &self.tools.get(tool)?.policy;
        Some(match policy.channel {
            crate::policy::Channel::Form => "form",
            crate::policy::Channel::Browser { .. } if policy.approvers.is_caller_only() => {
                "browser"
            }
            crate::policy::Channel::Browser { .. } => "approver",
        })
    }

    /// Whether decisions are written to a decision log (what only the log needs is computed
    /// only then).
    pub(crate) fn logging(&self) -> bool {
        self.log.is_some()
    }

    /// Reports `event`: to `tracing`, and to the decision log if there is one and the event is
    /// a record there; a log that is down loses it (it counts what it loses). For what does
    /// not run anything.
    pub(crate) fn report(&self, event: DecisionEvent<'_>) {
        self.observe(&event);
        crate::audit::report(self.log.as_deref(), &event, || self.entry(&event));
    }

    /// Reports `event`, a decision that lets a call run, and resolves once its record is
    /// written (and synced, as the log says): a call never runs on a record that was only
    /// queued. A log that is down, or a write that fails, refuses it unless the log's policy
    /// is to fail open (which only queues the record).
    pub(crate) async fn report_decisive(&self, event: DecisionEvent<'_>) -> Result<(), Refused> {
        self.observe(&event);
        crate::audit::report_decisive(
            self.log.as_deref(),
            &event,
            || self.entry(&event),
            "a call runs",
        )
        .await
        .map_err(|_| log_down())
    }

    /// Whether a decision that lets a call run could be recorded now: asked before anything is
    /// claimed, so that a log that is down costs no one a confirmation.
    pub(crate) fn log_ready(&self) -> Result<(), Refused> {
        crate::audit::ready(self.log.as_deref(), "a call runs").map_err(|_| log_down())
    }

    /// The log's entry of `event` in this deployment, at the layer's time.
    fn entry(&self, event: &DecisionEvent<'_>) -> Option<LogEntry> {
        let mut entry = event.entry(
            self.sealer.now(),
            &self.audience,
            Some(&|principal: &Principal| self.principal_key(principal)),
        )?;
        entry.policy.clone_from(&self.policy_revision);
        Some(entry)
    }

    /// The epoch a state binds: the replay store's, or zeros for a store whose entries outlive
    /// the process.
    pub(crate) fn store_epoch(&self) -> [u8; 16] {
        self.store
            .boot_epoch()
            .map_or([0; 16], |epoch| *epoch.as_bytes())
    }
}

/// The refusal of a call whose decisive record the log could not take.
fn log_down() -> Refused {
    Refused::new(
        crate::protocol::RpcError::log_unavailable(),
        "the decision log is down (full queue or a failed write); fail closed",
    )
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tools: Vec<_> = self.tools.keys().collect();
        tools.sort();
        f.debug_struct("Config")
            .field("sealer", &self.sealer)
            .field("store", &self.store)
            .field("tools", &tools)
            .field("supported_versions", &self.supported_versions)
            .field("local_principal", &self.local_principal)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("challenge_limiter", &self.challenge_limiter)
            .field("server_info", &self.server_info)
            .field("grants", &self.grants)
            .field("grant_ttl", &self.grant_ttl)
            .finish_non_exhaustive()
    }
}

/// A confirmed tool as the layer keeps it: its policy, and the digests every one of its states
/// binds whatever the request, computed once when the layer is built.
pub(crate) struct GuardedTool {
    pub(crate) policy: ToolPolicy,
    pub(crate) binding: ToolBinding,
    /// The `Mcp-Param-*` name of the rewritten argument: the schema's `x-mcp-header`, else the
    /// policy's `select_header`.
    pub(crate) param_header: Option<String>,
    /// The tool declares an `outputSchema` (as far as the tool list says).
    pub(crate) structured: bool,
}

impl GuardedTool {
    pub(crate) fn new(
        audience: &str,
        name: &str,
        policy: ToolPolicy,
        param_header: Option<String>,
        structured: bool,
    ) -> Self {
        Self {
            binding: ToolBinding::with_rule(
                audience,
                TOOLS_CALL,
                name,
                &policy.input_key,
                policy.rule().as_deref(),
            ),
            policy,
            param_header,
            structured,
        }
    }

    /// The message of this call's form: the policy's, with the call described when the policy
    /// is one [`confirm_destructive`](crate::ConfirmLayerBuilder::confirm_destructive) generated.
    pub(crate) fn message(&self, call: &ToolCall) -> std::borrow::Cow<'_, str> {
        match self.policy.describe_call {
            false => std::borrow::Cow::Borrowed(&self.policy.message),
            true => std::borrow::Cow::Owned(crate::form::describe_call(
                &self.policy.message,
                call.arguments(),
            )),
        }
    }

    /// The digests this request adds: its id, and its arguments without the one the layer
    /// writes in.
    pub(crate) fn request_digests(&self, call: &ToolCall) -> RequestDigests {
        RequestDigests {
            request_id: request_id_digest(&call.id),
            arguments: arguments_digest(call.arguments(), self.policy.select_into.as_deref()),
        }
    }

    /// The arguments the tool will receive: the client's, with the chosen id written in.
    pub(crate) fn confirmed_arguments(&self, call: &ToolCall, chosen: Option<&str>) -> Value {
        let mut arguments = match call.arguments() {
            Some(Value::Object(map)) => map.clone(),
            _ => serde_json::Map::new(),
        };
        if let (Some(field), Some(chosen)) = (&self.policy.select_into, chosen) {
            arguments.insert(field.clone(), Value::String(chosen.to_owned()));
        }
        Value::Object(arguments)
    }
}

impl fmt::Debug for GuardedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedTool")
            .field("input_key", &self.policy.input_key)
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}
