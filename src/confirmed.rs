//! What the inner service learns about a call the layer let through: [`Confirmed`] for a call
//! the user confirmed, [`Waived`] for one the layer's configuration lets run without asking.
//!
//! Both are bound to the call they came with (the tool and a digest of the exact arguments the
//! handler receives), so a guard in the handler can tell "the layer let *this* call through" from
//! "no layer was in front" (see [`rmcp::Confirmation`](crate::rmcp)).

use std::sync::Arc;
use std::time::SystemTime;

use http::Extensions;
use subtle::ConstantTimeEq;

use crate::grant::GrantId;
use crate::kernel::Nonce;
use crate::principal::Principal;
use crate::store::standing::StandingId;
use crate::token::claims::arguments_digest;

/// Proof, in the forwarded request's extensions, that the layer confirmed this call.
///
/// A handler that deletes anything should refuse to act when this value is absent, or when it does
/// not match the arguments it is about to act on: that way a route that accidentally bypasses the
/// layer fails closed.
///
/// Behind rmcp's `StreamableHttpService`, HTTP extensions reach a tool handler inside
/// `http::request::Parts`: read it with
/// `ctx.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<Confirmed>())`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Confirmed {
    /// The principal who confirmed.
    pub principal: Principal,
    /// The confirmed tool.
    pub tool: Arc<str>,
    /// The id the user chose (pick-one policies), also written into the arguments.
    pub chosen: Option<String>,
    /// The version of the chosen record the user saw ([`Candidate::with_version`](crate::Candidate::with_version)).
    /// Make the change conditional on it where the data allows (`DELETE … WHERE id = $1 AND
    /// version = $2`): the version is then the fence, whatever happened since the revalidation.
    pub version: Option<String>,
    /// The nonce claimed for this call; unique per confirmation.
    pub nonce: Nonce,
    /// When the confirmation expires (and the replay store may forget its nonce).
    pub expires_at: SystemTime,
    /// Whether the layer claimed the nonce. `false` only for a
    /// [`claimed_by_handler`](crate::ToolPolicy::claimed_by_handler) policy: the handler must then
    /// consume [`nonce`](Self::nonce) itself, in the transaction that makes the change, and act
    /// only if that succeeded.
    pub claimed: bool,
    /// The grant of a [`queued`](crate::ToolPolicy::queued) tool: enqueue this id, and nothing
    /// the job carries besides it decides what runs. The worker runs it with
    /// [`Grants`](crate::grant::Grants). `None` for tools that run in the request.
    pub grant: Option<GrantId>,
    /// The argument the chosen id was written into ([`ToolPolicy::select_into`](crate::ToolPolicy::select_into)), if any.
    pub selected_into: Option<Arc<str>>,
    /// The [standing approval](crate::ToolPolicy::standing) this call ran under, without a form
    /// of its own (one of its uses was spent on it); `None` for a call the user confirmed.
    pub standing: Option<StandingId>,
    /// Whether an approver narrowed the call before approving it
    /// ([`ToolPolicy::narrowable`](crate::ToolPolicy::narrowable)): the arguments the handler
    /// receives are then the narrowed ones, not those the client sent.
    pub narrowed: bool,
    /// A digest of the arguments as forwarded (the chosen id written in).
    pub(crate) arguments: [u8; 32],
    /// Where narrowed, a digest of the arguments as asked.
    pub(crate) original: Option<[u8; 32]>,
}

impl Confirmed {
    /// The `Confirmed` value in `extensions`, if any.
    pub fn from_extensions(extensions: &Extensions) -> Option<&Self> {
        extensions.get::<Self>()
    }

    /// Whether this confirmation covers `tool` acting on `chosen`.
    pub fn covers(&self, tool: &str, chosen: Option<&str>) -> bool {
        &*self.tool == tool && self.chosen.as_deref() == chosen
    }

    /// Whether this confirmation was given for a call of `tool` with exactly these `arguments`
    /// (`None` for a call without arguments): what a handler about to act checks, so that the
    /// value cannot be carried over to another call.
    pub fn is_for(&self, tool: &str, arguments: Option<&serde_json::Value>) -> bool {
        &*self.tool == tool && bool::from(call_digest(arguments).ct_eq(&self.arguments))
    }
}

/// The digest a verdict binds: of the call's arguments, where `null` and absent are the same (a
/// server reads both as no arguments).
fn call_digest(arguments: Option<&serde_json::Value>) -> [u8; 32] {
    arguments_digest(arguments.filter(|a| !a.is_null()), None)
}

/// The layer let this call through **without** asking the user, on purpose: the tool is
/// [exempt](crate::ConfirmLayerBuilder::exempt), or its policy's
/// [condition](crate::ToolPolicy::when) said this call needs no confirmation.
///
/// Like [`Confirmed`], it is bound to the tool and the exact arguments of the call it came with,
/// and a handler guard accepts it only for that call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waived {
    /// The tool called.
    pub tool: Arc<str>,
    /// Why no confirmation was asked.
    pub reason: WaiverReason,
    /// A digest of the call's arguments.
    pub(crate) arguments: [u8; 32],
}

/// Why the layer let a call of a guarded tool through without a confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaiverReason {
    /// The layer was built with [`exempt`](crate::ConfirmLayerBuilder::exempt) for this tool.
    Exempt,
    /// The policy's [`when`](crate::ToolPolicy::when) condition was false for this call.
    ConditionFalse,
}

impl Waived {
    pub(crate) fn new(
        tool: &str,
        reason: WaiverReason,
        arguments: Option<&serde_json::Value>,
    ) -> Self {
        Self {
            tool: Arc::from(tool),
            reason,
            arguments: call_digest(arguments),
        }
    }

    /// The `Waived` value in `extensions`, if any.
    pub fn from_extensions(extensions: &Extensions) -> Option<&Self> {
        extensions.get::<Self>()
    }

    /// Whether this waiver was given for a call of `tool` with exactly these `arguments`.
    pub fn is_for(&self, tool: &str, arguments: Option<&serde_json::Value>) -> bool {
        &*self.tool == tool && bool::from(call_digest(arguments).ct_eq(&self.arguments))
    }
}
