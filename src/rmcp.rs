//! rmcp integration (feature `rmcp`): the [`Confirmation`] a tool handler takes as a parameter,
//! and the [`Declarations`] that wire an rmcp server's `#[confirm]` tools into the layer in one
//! call.
//!
//! The layer hands its verdict to the inner service in the HTTP request's extensions; rmcp's
//! `StreamableHttpService` keeps those inside `http::request::Parts`. [`Confirmation`] reads them
//! from there, so a handler never names `http`, never repeats its tool name and never compares a
//! version by hand:
//!
//! ```ignore
//! #[tool(description = "Delete one note", annotations(destructive_hint = true))]
//! #[confirm(pick_one = Self::matching_notes, revalidate = Self::still_the_same)]
//! async fn notes_delete(&self, confirmation: Confirmation, Parameters(args): Parameters<DeleteArgs>)
//!     -> Result<CallToolResult, ErrorData>
//! {
//!     let (id, version) = confirmation.chosen_with_version()?;   // what the user picked and saw
//!     // delete `id` if it is still at `version`
//! }
//! ```
//!
//! **It fails closed.** Extracting a `Confirmation` fails — the tool does not run, the client gets
//! a JSON-RPC error, and an audit event says the layer is missing or bypassed — unless the layer
//! confirmed (or, on purpose, [waived](crate::Waived)) *this* call: the same tool, and exactly the
//! arguments the handler receives. `#[confirm_router]` puts such a guard in front of every tool
//! it confirms, whether or not the handler takes a `Confirmation` itself, so a server that is
//! built without the layer, or a route that goes around it, cannot run a confirmed tool.

use std::sync::Arc;

use ::rmcp::ErrorData;
use ::rmcp::handler::server::common::FromContextPart;
use ::rmcp::handler::server::tool::ToolCallContext;
use serde_json::Value;

use crate::audit::event::DecisionEvent;
use crate::confirmed::{Confirmed, Waived, WaiverReason};
use crate::grant::GrantId;
use crate::policy::ToolPolicy;
use crate::principal::Principal;

/// The wire message of a call refused because no confirmation came with it. One frozen text:
/// the reason (no layer, another tool's confirmation, other arguments) goes to the audit log.
const REFUSED: &str =
    "This tool runs only after a confirmation, and none came with this call; nothing was changed.";

/// The layer's confirmation of this call, as a tool handler parameter.
///
/// Put it **first** among the parameters (before `Parameters<…>`, which takes the arguments it
/// checks). See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Confirmation {
    verdict: Verdict,
}

#[derive(Debug, Clone)]
enum Verdict {
    Confirmed(Arc<Confirmed>),
    Waived(Arc<Waived>),
}

impl Confirmation {
    /// The user's confirmation, or `None` when the layer let the call through without asking
    /// (an [exempt](crate::ConfirmLayerBuilder::exempt) tool, or a [`when`](ToolPolicy::when)
    /// condition that was false for this call).
    pub fn confirmed(&self) -> Option<&Confirmed> {
        match &self.verdict {
            Verdict::Confirmed(confirmed) => Some(confirmed),
            Verdict::Waived(_) => None,
        }
    }

    /// Why no confirmation was asked, when none was.
    pub fn waived(&self) -> Option<WaiverReason> {
        match &self.verdict {
            Verdict::Confirmed(_) => None,
            Verdict::Waived(waived) => Some(waived.reason),
        }
    }

    /// The tool this confirmation is for (always the tool being called).
    pub fn tool(&self) -> &str {
        match &self.verdict {
            Verdict::Confirmed(confirmed) => &confirmed.tool,
            Verdict::Waived(waived) => &waived.tool,
        }
    }

    /// The principal who confirmed, when the user did.
    pub fn principal(&self) -> Option<&Principal> {
        self.confirmed().map(|c| &c.principal)
    }

    /// The id the user chose (pick-one policies).
    pub fn chosen(&self) -> Option<&str> {
        self.confirmed()?.chosen.as_deref()
    }

    /// The version of the chosen record as the user saw it: make the change conditional on it.
    pub fn version(&self) -> Option<&str> {
        self.confirmed()?.version.as_deref()
    }

    /// Whether an approver narrowed this call before approving it
    /// ([`ToolPolicy::narrowable`]): the handler's arguments are then the narrowed ones.
    pub fn narrowed(&self) -> bool {
        self.confirmed().is_some_and(|c| c.narrowed)
    }

    /// The grant of a [queued](ToolPolicy::queued) tool: the only thing to enqueue.
    pub fn grant(&self) -> Option<&GrantId> {
        self.confirmed()?.grant.as_ref()
    }

    /// The chosen id and the version the user saw, or an error for the client when there is no
    /// chosen id (a confirm-only policy, or a waived call): a pick-one handler's first line.
    ///
    /// # Errors
    /// The frozen refusal, when this call carries no chosen id.
    pub fn chosen_with_version(&self) -> Result<(&str, Option<&str>), ErrorData> {
        match self.chosen() {
            Some(chosen) => Ok((chosen, self.version())),
            None => {
                DecisionEvent::Unguarded {
                    tool: self.tool(),
                    reason: "the handler asked for a chosen id and the confirmation has none",
                }
                .trace();
                Err(refused())
            }
        }
    }

    /// Whether this verdict covers `tool` called with `arguments`.
    fn is_for(&self, tool: &str, arguments: Option<&Value>) -> bool {
        match &self.verdict {
            Verdict::Confirmed(confirmed) => confirmed.is_for(tool, arguments),
            Verdict::Waived(waived) => waived.is_for(tool, arguments),
        }
    }

    /// Checks the request of a tool call: the layer's verdict must be in its extensions and be
    /// for `tool` called with exactly `arguments`. The reason of a refusal is logged, never sent.
    fn check(
        parts: Option<&http::request::Parts>,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Result<Self, &'static str> {
        let Some(parts) = parts else {
            return Err(
                "no HTTP request parts in the call's context: no ConfirmLayer in front of this server (or not served over HTTP)",
            );
        };
        if let Some(confirmed) = Confirmed::from_extensions(&parts.extensions) {
            return if confirmed.is_for(tool, arguments) {
                Ok(Self {
                    verdict: Verdict::Confirmed(Arc::new(confirmed.clone())),
                })
            } else {
                Err("the confirmation in the request is for another tool or other arguments")
            };
        }
        if let Some(waived) = Waived::from_extensions(&parts.extensions) {
            return if waived.is_for(tool, arguments) {
                Ok(Self {
                    verdict: Verdict::Waived(Arc::new(waived.clone())),
                })
            } else {
                Err("the waiver in the request is for another tool or other arguments")
            };
        }
        Err(
            "no confirmation in the request: the ConfirmLayer is missing, was not given this tool's policy, or the route bypasses it",
        )
    }
}

/// The frozen error a guarded handler answers with.
fn refused() -> ErrorData {
    ErrorData::internal_error(
        REFUSED,
        Some(serde_json::json!({ "reason": "confirmation_missing" })),
    )
}

/// A call's arguments as the layer digests them: an absent or `null` member is no arguments.
fn arguments_of(arguments: Option<&::rmcp::model::JsonObject>) -> Option<Value> {
    arguments.map(|a| Value::Object(a.clone()))
}

impl<S> FromContextPart<ToolCallContext<'_, S>> for Confirmation {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let arguments = arguments_of(context.arguments.as_ref());
        // A second extraction in the same call (the guard, then the handler's own parameter)
        // reuses the first verdict, the arguments may be gone by then; but only for the same
        // tool and, while they are still there, the same arguments: a handler that dispatches
        // to another tool in the same request context must not lend it its verdict.
        if let Some(verified) = context.request_context.extensions.get::<Confirmation>() {
            let same_tool = verified.tool() == context.name.as_ref();
            let same_arguments =
                context.arguments.is_none() || verified.is_for(&context.name, arguments.as_ref());
            if same_tool && same_arguments {
                return Ok(verified.clone());
            }
        }
        let parts = context
            .request_context
            .extensions
            .get::<http::request::Parts>();
        match Self::check(parts, &context.name, arguments.as_ref()) {
            Ok(confirmation) => {
                context
                    .request_context
                    .extensions
                    .insert(confirmation.clone());
                Ok(confirmation)
            }
            Err(reason) => {
                DecisionEvent::Unguarded {
                    tool: &context.name,
                    reason,
                }
                .trace();
                Err(refused())
            }
        }
    }
}

/// The authenticated principal, as a tool handler parameter: the [`Principal`] the
/// authentication layer put into the HTTP request's extensions (the one the layer confirms for).
/// Extracting it fails with "not authenticated" when there is none.
impl<S> FromContextPart<ToolCallContext<'_, S>> for Principal {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        context
            .request_context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("not authenticated", None))
    }
}

/// Guards, at the level of the whole server, every tool of `router` that may be destructive: its
/// definition says so by its annotations (the spec's defaults: not `readOnlyHint: true`, not
/// `destructiveHint: false`) or carries the `#[confirm]` mark. Such a tool's handler then runs
/// only with the layer's verdict on exactly this call, as a `#[confirm_router]` handler does,
/// whichever impl block it comes from; its definition is marked, so the layer knows it is
/// guarded.
///
/// For servers whose tools come from several impls, one of which may lack `#[confirm_router]`:
///
/// ```ignore
/// #[tool_handler(router = mcp_confirm::rmcp::guarded(Self::tool_router() + Self::admin_router()))]
/// impl ServerHandler for Billing { /* … */ }
/// ```
///
/// (or keep the guarded router in a field). The layer refuses to build when its tool list shows
/// a destructive tool that nothing guards ([`ConfigError::UnguardedTool`](crate::ConfigError::UnguardedTool)).
pub fn guarded<S: Send + Sync + 'static>(
    mut router: ::rmcp::handler::server::router::tool::ToolRouter<S>,
) -> ::rmcp::handler::server::router::tool::ToolRouter<S> {
    for route in router.map.values_mut() {
        let declared = route
            .attr
            .meta
            .as_ref()
            .is_some_and(|meta| meta.0.contains_key(crate::protocol::META_DECLARED));
        let annotations = route
            .attr
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok());
        if !declared && !crate::tools::is_destructive(annotations.as_ref()) {
            continue;
        }
        if !declared {
            let meta = route.attr.meta.take().unwrap_or_default();
            route.attr.meta = Some(__private::declare(meta, "destructive"));
        }
        let inner = Arc::clone(&route.call);
        route.call = Arc::new(move |context| guard_call(Arc::clone(&inner), context));
    }
    router
}

/// One guarded call: the verdict first (extracted as a handler's `Confirmation` would be),
/// then the handler.
fn guard_call<S: Send + Sync + 'static>(
    inner: Arc<::rmcp::handler::server::tool::DynCallToolHandler<S>>,
    mut context: ToolCallContext<'_, S>,
) -> std::pin::Pin<
    Box<dyn Future<Output = Result<::rmcp::model::CallToolResponse, ErrorData>> + Send + '_>,
> {
    Box::pin(async move {
        Confirmation::from_context_part(&mut context)?;
        inner(context).await
    })
}

/// What one `#[confirm_router]` impl declares: the policies of its `#[confirm]` tools and the
/// definitions of all its tools. Give it to
/// [`ConfirmLayerBuilder::declarations`](crate::ConfirmLayerBuilder::declarations): the layer
/// then has both halves from one call, and cannot be built with one and not the other.
#[derive(Debug, Default)]
pub struct Declarations {
    pub(crate) policies: Vec<(String, ToolPolicy)>,
    pub(crate) tools: Vec<Value>,
}

impl Declarations {
    /// Declarations of `policies` for the tools `tools` (rmcp `Tool`s, or their JSON).
    ///
    /// Generated by `#[confirm_router]` as `confirm_declarations()`; build one by hand only for a
    /// server whose tools are not declared with the attributes.
    pub fn new<T: serde::Serialize>(
        policies: Vec<(String, ToolPolicy)>,
        tools: impl IntoIterator<Item = T>,
    ) -> Self {
        let tools = tools
            .into_iter()
            .map(|tool| serde_json::to_value(tool).unwrap_or(Value::Null))
            .collect();
        Self { policies, tools }
    }

    /// Both impls' declarations, for a server whose tools come from several routers.
    #[must_use]
    pub fn and(mut self, other: Declarations) -> Self {
        self.policies.extend(other.policies);
        self.tools.extend(other.tools);
        self
    }

    /// The names of the tools with a policy.
    pub fn confirmed_tools(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|(name, _)| name.as_str())
    }
}

impl std::ops::Add for Declarations {
    type Output = Declarations;

    fn add(self, other: Declarations) -> Declarations {
        self.and(other)
    }
}

/// Support for the code `#[confirm_router]` generates. Not part of the API.
#[doc(hidden)]
pub mod __private {
    use serde_json::{Value, json};

    pub use crate::protocol::META_DECLARED;

    /// A tool's `_meta`, with the mark that says its confirmation is declared with `#[confirm]`
    /// (`kind`: `"pick_one"`, `"confirm"`) or that its handler is guarded because its annotations
    /// say destructive (`"destructive"`). The layer refuses to build without a policy (or an
    /// exemption) for a marked tool, and takes the mark out of `tools/list` answers.
    pub fn declare(mut meta: ::rmcp::model::MetaObject, kind: &str) -> ::rmcp::model::MetaObject {
        meta.0
            .insert(META_DECLARED.to_owned(), json!({ "kind": kind }));
        meta
    }

    /// The mark `declare` writes, read back from a tool definition's JSON.
    pub fn declared_kind(tool: &Value) -> Option<&str> {
        tool.get("_meta")?.get(META_DECLARED)?.get("kind")?.as_str()
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use serde_json::json;

    use super::*;
    use crate::confirmed::WaiverReason;
    use crate::kernel::Nonce;
    use crate::token::claims::arguments_digest;

    fn confirmed(tool: &str, arguments: &Value) -> Confirmed {
        Confirmed {
            principal: Principal::new("alice"),
            tool: Arc::from(tool),
            chosen: Some("note-7".to_owned()),
            version: Some("v7".to_owned()),
            nonce: Nonce::random(),
            expires_at: UNIX_EPOCH,
            claimed: true,
            grant: None,
            selected_into: None,
            standing: None,
            narrowed: false,
            arguments: arguments_digest(Some(arguments), None),
            original: None,
        }
    }

    fn parts(extension: impl Clone + Send + Sync + 'static) -> http::request::Parts {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(extension);
        parts
    }

    #[test]
    fn a_confirmation_covers_its_own_tool_and_arguments_only() {
        let arguments = json!({"title": "Groceries"});
        let parts = parts(confirmed("notes_delete", &arguments));
        let ok = Confirmation::check(Some(&parts), "notes_delete", Some(&arguments)).unwrap();
        assert_eq!(ok.chosen_with_version().unwrap(), ("note-7", Some("v7")));
        assert_eq!(ok.tool(), "notes_delete");
        assert!(ok.waived().is_none());
        // Another tool, other arguments, or none at all: refused.
        assert!(Confirmation::check(Some(&parts), "notes_purge", Some(&arguments)).is_err());
        let other = json!({"title": "Taxes"});
        assert!(Confirmation::check(Some(&parts), "notes_delete", Some(&other)).is_err());
        assert!(Confirmation::check(Some(&parts), "notes_delete", None).is_err());
        // No layer: no parts, or parts without a verdict.
        assert!(Confirmation::check(None, "notes_delete", Some(&arguments)).is_err());
        let bare = super::tests::parts(7u8);
        assert!(Confirmation::check(Some(&bare), "notes_delete", Some(&arguments)).is_err());
    }

    #[test]
    fn a_waiver_covers_its_own_call_and_has_no_chosen_id() {
        let arguments = json!({"count": 2});
        let waived = Waived::new("files_trim", WaiverReason::ConditionFalse, Some(&arguments));
        let parts = parts(waived);
        let ok = Confirmation::check(Some(&parts), "files_trim", Some(&arguments)).unwrap();
        assert_eq!(ok.waived(), Some(WaiverReason::ConditionFalse));
        assert!(ok.confirmed().is_none() && ok.chosen().is_none() && ok.grant().is_none());
        assert!(ok.chosen_with_version().is_err());
        let other = json!({"count": 20});
        assert!(Confirmation::check(Some(&parts), "files_trim", Some(&other)).is_err());
        assert!(Confirmation::check(Some(&parts), "files_wipe", Some(&arguments)).is_err());
        // `"arguments": null` and no arguments are the same call.
        let none = Waived::new("files_list", WaiverReason::Exempt, Some(&Value::Null));
        let parts = super::tests::parts(none);
        assert!(Confirmation::check(Some(&parts), "files_list", None).is_ok());
    }
}
