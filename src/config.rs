//! The configuration a [`ConfirmLayer`](crate::ConfirmLayer) builds once and every service it
//! makes shares: the sealer, the replay store, the guarded tools and the request-level settings.
//!
//! It sits below the layer, the services and the decision path, which all read it; it imports
//! none of them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashSet;
use serde_json::Value;

use crate::approval::ApprovalStore;
use crate::grant::GrantStore;
use crate::kernel::PrincipalKey;
use crate::limit::ChallengeLimiter;
use crate::message::{Listed, TOOLS_CALL, ToolCall};
use crate::policy::ToolPolicy;
use crate::principal::{Principal, PrincipalExtractor};
use crate::store::ReplayStore;
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
    pub(crate) tools: HashMap<String, Arc<GuardedTool>>,
    pub(crate) supported_versions: Vec<String>,
    pub(crate) principal: Arc<dyn PrincipalExtractor>,
    pub(crate) local_principal: Option<Principal>,
    pub(crate) max_body_bytes: usize,
    /// The largest `tools/list` answer read.
    pub(crate) max_listing_bytes: usize,
    pub(crate) challenge_limiter: Option<ChallengeLimiter>,
    /// The server's `Implementation`, put in the `_meta` of the layer's own results.
    pub(crate) server_info: Option<Value>,
    /// Tool name → the `_meta` mark `tools/list` answers carry for it (see [`Self::listing_mark`]).
    pub(crate) listing_marks: Arc<HashMap<String, Value>>,
    /// Where queued tools' grants go.
    pub(crate) grants: Option<Arc<dyn GrantStore>>,
    /// How long a new grant may wait for its first attempt.
    pub(crate) grant_ttl: Duration,
    /// The approval page's URL up to the id (ends with `/`), for browser-approved tools.
    pub(crate) approval_url: Option<String>,
    /// Tools let through unconfirmed on purpose ([`exempt`](crate::ConfirmLayerBuilder::exempt)):
    /// their calls carry a [`Waived`](crate::Waived) so a guarded handler runs them.
    pub(crate) exempt: HashSet<String>,
    /// Tools a `tools/list` answer showed as destructive (or declared with `#[confirm]`) that
    /// the layer has neither a policy nor an exemption for: their calls are refused from then on.
    pub(crate) undeclared: Undeclared,
    /// The names in the tool list the layer was built with; `None` when it was built
    /// [`without_tool_list`](crate::ConfirmLayerBuilder::without_tool_list). A call of any other
    /// name is refused ([`Route::Unlisted`]).
    pub(crate) known_tools: Option<HashSet<String>>,
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

/// The names of listed tools that need a confirmation the layer does not have, learnt from the
/// `tools/list` answers it marks. Bounded: the names come from the server, but a server that
/// lists more than this many undeclared destructive tools is refused on the rest as well.
#[derive(Debug, Default)]
pub(crate) struct Undeclared {
    names: DashSet<String>,
    /// Set once the set is full: every tool without a policy or exemption is then refused.
    overflowed: std::sync::atomic::AtomicBool,
}

impl Undeclared {
    /// The most names kept.
    const MAX: usize = 1024;

    /// Records `name`; `true` the first time.
    pub(crate) fn insert(&self, name: &str) -> bool {
        if self.names.contains(name) {
            return false;
        }
        if self.names.len() >= Self::MAX {
            self.overflowed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return false;
        }
        self.names.insert(name.to_owned())
    }

    fn contains(&self, name: &str) -> bool {
        self.overflowed.load(std::sync::atomic::Ordering::Relaxed) || self.names.contains(name)
    }

    /// Refuses every tool without a policy or exemption from now on: a listing the layer could
    /// not read may have shown any tool.
    pub(crate) fn close(&self) {
        self.overflowed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_empty(&self) -> bool {
        !self.overflowed.load(std::sync::atomic::Ordering::Relaxed) && self.names.is_empty()
    }
}

impl Config {
    /// What happens to a call of the tool `name`; `None`: it is not the layer's business.
    pub(crate) fn route(&self, name: &str) -> Option<Route> {
        if let Some(tool) = self.tools.get(name) {
            return Some(Route::Confirm(Arc::clone(tool)));
        }
        if self.exempt.contains(name) {
            return Some(Route::Exempt);
        }
        if !self.undeclared.is_empty() && self.undeclared.contains(name) {
            return Some(Route::Undeclared);
        }
        if let Some(known) = &self.known_tools
            && !known.contains(name)
        {
            return Some(Route::Unlisted);
        }
        None
    }

    /// What a `tools/list` answer shows of one tool: records it when it needs a confirmation the
    /// layer was not given, and returns the mark it carries out (`None`: no mark).
    pub(crate) fn observe_listed(&self, listed: &Listed<'_>) -> Option<Value> {
        if let Some(mark) = self.listing_marks.get(listed.name) {
            return Some(mark.clone());
        }
        let needs = listed.declared.is_some() || listed.destructive;
        if needs && !self.exempt.contains(listed.name) && self.undeclared.insert(listed.name) {
            crate::audit::undeclared(listed.name, listed.declared);
        }
        None
    }

    /// A `tools/list` answer went out (or was replaced) unread: the layer does not know which
    /// tools it showed, so it refuses every tool it has no policy or exemption for.
    pub(crate) fn listing_unread(&self, why: &'static str) {
        self.undeclared.close();
        crate::audit::listing_unread(why);
    }

    /// The request's principal: from the extensions, else the configured local principal.
    pub(crate) fn principal(&self, extensions: &http::Extensions) -> Option<Principal> {
        self.principal
            .extract(extensions)
            .or_else(|| self.local_principal.clone())
    }

    /// Whom a new challenge for `principal` is charged to: the digest its state will carry.
    pub(crate) fn principal_key(&self, principal: &Principal) -> PrincipalKey {
        self.sealer.principal_digest(principal.subject())
    }

    /// The epoch a state binds: the replay store's, or zeros for a store whose entries outlive
    /// the process.
    pub(crate) fn store_epoch(&self) -> [u8; 16] {
        self.store
            .boot_epoch()
            .map_or([0; 16], |epoch| *epoch.as_bytes())
    }
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
}

impl GuardedTool {
    /// What `tools/list` answers say of this tool: the server asks the user itself, and how.
    pub(crate) fn listing_mark(&self) -> Value {
        let kind = if self.policy.resolver.is_some() {
            "pick_one"
        } else {
            "confirm"
        };
        serde_json::json!({ "kind": kind })
    }

    pub(crate) fn new(
        audience: &str,
        name: &str,
        policy: ToolPolicy,
        param_header: Option<String>,
    ) -> Self {
        Self {
            binding: ToolBinding::new(audience, TOOLS_CALL, name, &policy.input_key),
            policy,
            param_header,
        }
    }

    /// The message of this call's form: the policy's, with the call described when the policy
    /// is one [`confirm_destructive`](crate::ConfirmLayerBuilder::confirm_destructive) generated.
    pub(crate) fn message(&self, call: &ToolCall) -> std::borrow::Cow<'_, str> {
        match self.policy.describe_call {
            false => std::borrow::Cow::Borrowed(&self.policy.message),
            true => std::borrow::Cow::Owned(crate::form::describe_call(
                &self.policy.message,
                call.params.arguments.as_ref(),
            )),
        }
    }

    /// The digests this request adds: its id, and its arguments without the one the layer
    /// writes in.
    pub(crate) fn request_digests(&self, call: &ToolCall) -> RequestDigests {
        RequestDigests {
            request_id: request_id_digest(&call.id),
            arguments: arguments_digest(
                call.params.arguments.as_ref(),
                self.policy.select_into.as_deref(),
            ),
        }
    }

    /// The arguments the tool will receive: the client's, with the chosen id written in.
    pub(crate) fn confirmed_arguments(&self, call: &ToolCall, chosen: Option<&str>) -> Value {
        let mut arguments = match call.params.arguments.as_ref() {
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
