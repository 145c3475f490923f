//! The gates every intercepted call passes before anything stateful, without I/O: the request's
//! own protocol declarations and capabilities, and [`Refused`], a refusal's frozen wire answer
//! beside the real reason for the audit log. The async [`decision`](crate::decision) path runs these
//! first, then the sealer, the resolver, the replay store and the revalidation hook.

use serde_json::Value;

use std::borrow::Cow;

use crate::audit::event::DecisionEvent;
use crate::kernel::Nonce;
use crate::message::{TOOLS_CALL, ToolCall};
use crate::principal::Principal;
use crate::protocol::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, Reply, RpcError};
use crate::token::StateError;

/// What the transport declared about a call outside its body. Over HTTP these are the MCP
/// headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), decoded by the HTTP adapter; a
/// transport without headers has none to cross-check.
#[derive(Debug, Clone, Default)]
pub(crate) struct Declared {
    pub(crate) protocol_version: Field,
    pub(crate) method: Field,
    pub(crate) name: Field,
}

/// One declared value: absent, present once with a readable value, or unusable (repeated, not
/// text, bad encoding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Field {
    #[default]
    Absent,
    Value(String),
    Invalid,
}

impl Field {
    fn is(&self, expected: &str) -> bool {
        matches!(self, Self::Value(v) if v == expected)
    }
}

/// A refusal: the wire error, and what the audit log records about it.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) error: RpcError,
    why: Why,
}

/// The audit side of a refusal.
#[derive(Debug)]
enum Why {
    /// A `refused` event with this reason (most are static: a refusal formats nothing).
    Reason(Cow<'static, str>),
    /// A `replay_blocked` event: the state's nonce is held (`in_flight`) or spent.
    Replay { nonce: Nonce, state: &'static str },
}

impl Refused {
    pub(crate) fn new(error: RpcError, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            error,
            why: Why::Reason(reason.into()),
        }
    }

    /// A state that did not verify.
    pub(crate) fn state(e: StateError) -> Self {
        let error = match e {
            // Not an attack signal: the state verified, the store behind it restarted.
            StateError::Restarted => RpcError::restarted(),
            _ => RpcError::invalid_state(),
        };
        Self::new(error, e.audit_reason())
    }

    /// A verified state whose nonce was already claimed: refused like any invalid state on the
    /// wire, recorded as a blocked replay.
    pub(crate) fn replay(nonce: Nonce, state: &'static str, e: StateError) -> Self {
        Self {
            error: Refused::state(e).error,
            why: Why::Replay { nonce, state },
        }
    }

    /// What this refusal reports: its class (what the wire says), and its real reason.
    pub(crate) fn event<'a>(
        &'a self,
        tool: &'a str,
        principal: Option<&'a Principal>,
    ) -> DecisionEvent<'a> {
        let class = self
            .error
            .reason()
            .map_or_else(|| Cow::Owned(self.error.code.to_string()), Cow::Borrowed);
        match &self.why {
            Why::Reason(reason) => DecisionEvent::Refused {
                tool,
                principal,
                nonce: None,
                class: Some(class),
                reason: Cow::Borrowed(reason.as_ref()),
            },
            Why::Replay { nonce, state } => DecisionEvent::ReplayBlocked {
                tool,
                principal,
                nonce,
                class,
                state,
            },
        }
    }

    /// The reply to `call` (the caller reports the refusal).
    pub(crate) fn reply(&self, call: &ToolCall) -> Reply {
        Reply::error(Some(&call.id), &self.error)
    }
}

/// Header/body agreement, `_meta` and protocol version: the checks every intercepted call passes
/// before anything else, first call and retry alike.
pub(crate) fn check_protocol(
    supported_versions: &[String],
    call: &ToolCall,
    declared: Option<&Declared>,
) -> Result<(), Refused> {
    if let Some(version) = legacy_era(supported_versions, call, declared) {
        return Err(Refused::new(
            RpcError::legacy_client(supported_versions, version),
            format!("a {version} (earlier era) request of a confirmed tool"),
        ));
    }
    if let Some(d) = declared
        && (!d.method.is(TOOLS_CALL) || !d.name.is(&call.tool))
    {
        return Err(Refused::new(
            RpcError::header_mismatch(),
            "Mcp-Method/Mcp-Name missing or not the body's",
        ));
    }
    let meta = call.params.meta.as_ref().and_then(Value::as_object);
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let capabilities = meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .and_then(Value::as_object);
    let (Some(version), Some(_)) = (version, capabilities) else {
        return Err(Refused::new(
            RpcError::missing_meta(),
            "_meta protocolVersion or clientCapabilities missing",
        ));
    };
    if let Some(d) = declared
        && !d.protocol_version.is(version)
    {
        return Err(Refused::new(
            RpcError::header_mismatch(),
            "MCP-Protocol-Version missing or not the body's",
        ));
    }
    if !supported_versions.iter().any(|v| v == version) {
        return Err(Refused::new(
            RpcError::unsupported_version(supported_versions, version),
            format!("unsupported protocol version {version:?}"),
        ));
    }
    if call.arguments_are_an_object() {
        Ok(())
    } else {
        Err(Refused::new(
            RpcError::invalid_arguments(),
            "arguments is not an object",
        ))
    }
}

/// The version a request of an earlier protocol era speaks, if it is one: over HTTP it declares
/// an unsupported version older than every supported one in `MCP-Protocol-Version`, and its
/// body carries no `_meta` version (a 2025 request never does).
fn legacy_era<'d>(
    supported_versions: &[String],
    call: &ToolCall,
    declared: Option<&'d Declared>,
) -> Option<&'d str> {
    let Field::Value(version) = &declared?.protocol_version else {
        return None;
    };
    let is_date = version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    let older = supported_versions
        .iter()
        .all(|v| version.as_str() < v.as_str());
    let meta_version = call
        .params
        .meta
        .as_ref()
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .is_some();
    (is_date && older && !meta_version).then_some(version.as_str())
}

/// Whether this request itself declares form elicitation. Earlier requests never count.
/// The elicitation mode this request must have declared: form, or URL for a tool approved in a
/// browser.
pub(crate) fn check_elicitation(call: &ToolCall, url: bool) -> Result<(), Refused> {
    if !url {
        return check_form_capability(call);
    }
    if declared_elicitation(call)
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
    {
        Ok(())
    } else {
        Err(Refused::new(
            RpcError::missing_url_elicitation(),
            "client did not declare URL elicitation",
        ))
    }
}

pub(crate) fn check_form_capability(call: &ToolCall) -> Result<(), Refused> {
    let form = match declared_elicitation(call) {
        // `{}` predates modes and means form; a mode list means exactly those modes.
        Some(Value::Object(modes)) => match modes.get("form") {
            Some(form) => form.is_object(),
            None => !modes.contains_key("url"),
        },
        _ => false,
    };
    if form {
        Ok(())
    } else {
        Err(Refused::new(
            RpcError::missing_form_elicitation(),
            "client did not declare form elicitation",
        ))
    }
}

/// The `elicitation` capability this request's `_meta` declares, if any.
fn declared_elicitation(call: &ToolCall) -> Option<&Value> {
    call.params
        .meta
        .as_ref()?
        .get(META_CLIENT_CAPABILITIES)?
        .get("elicitation")
}
