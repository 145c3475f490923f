//! What operators see of the decisions, written from the same typed decision events as the audit
//! trail: the `tools/call` span, named and attributed as OpenTelemetry's MCP conventions say,
//! its `mcp_confirm.decision` child with the outcome, and one span event per step; with the
//! `metrics` feature, the counters and histograms of [`metrics`](crate::metrics).
//!
//! Spans and their events never carry a state, a nonce, an argument value, a record's label or a
//! principal: the audit events (target [`TARGET`](crate::audit::TARGET)) carry what operators
//! correlate rounds with, and are never attached to a span. Span events are `tracing` events
//! under [`SPAN_TARGET`]: route that target to your OpenTelemetry layer and out of your logs.
//!
//! The span names, attributes and events are listed in the README ("Operating it").

use tracing::Span;
use tracing::field::Empty;

use crate::audit::event::DecisionEvent;
use crate::message::TOOLS_CALL;
use crate::message::ToolCall;
use crate::protocol::META_PROTOCOL_VERSION;

/// The `tracing` target of the spans and span events: give it to the layer that exports
/// spans, keep it out of your log output.
pub const SPAN_TARGET: &str = "mcp_confirm::span";

/// What the layer says of a tool name: its channel (`form`, `browser`: the approval page by
/// the caller, `approver`: the page by someone else) if it is a configured tool, `None` for
/// anything else, which a caller may have made up: such names are labelled `other`, so a
/// caller cannot grow the number of series.
pub(crate) type Channels<'c> = &'c dyn Fn(&str) -> Option<&'static str>;

/// The label of `tool`: its own name if configured, else `other`.
pub(crate) fn tool_label<'a>(channels: Channels<'_>, tool: &'a str) -> &'a str {
    if channels(tool).is_some() {
        tool
    } else {
        "other"
    }
}

/// What one decision comes to for operators: the event's name (the outcome), the tool's label,
/// the channel and the refusal's class.
pub(crate) struct Seen<'a> {
    pub(crate) outcome: &'static str,
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) tool: &'a str,
    pub(crate) channel: &'static str,
    pub(crate) class: Option<&'a str>,
}

impl<'a> Seen<'a> {
    /// The decisions operators count; `None` for the steps and the plumbing (a step refused
    /// without ending the call, a forward, a completion), which only the audit trail keeps.
    pub(crate) fn of(channels: Channels<'_>, event: &'a DecisionEvent<'a>) -> Option<Self> {
        let seen = |tool: &'a str, channel: Option<&'static str>, class: Option<&'a str>| {
            let configured = channels(tool);
            Some(Seen {
                outcome: event.name(),
                tool: if configured.is_some() { tool } else { "other" },
                channel: channel.or(configured).unwrap_or("form"),
                class,
            })
        };
        match event {
            DecisionEvent::Challenged { tool, .. }
            | DecisionEvent::Declined { tool, .. }
            | DecisionEvent::Cancelled { tool, .. } => seen(tool, None, None),
            DecisionEvent::Accepted { call } => seen(call.tool, None, None),
            DecisionEvent::StandingUsed { call, .. } => seen(call.tool, Some("standing"), None),
            DecisionEvent::StandingGranted { tool, .. } => seen(tool, Some("standing"), None),
            DecisionEvent::Waived { tool, .. } => seen(tool, Some("none"), None),
            // Only a refusal that ends the call has a class.
            DecisionEvent::Refused {
                tool,
                class: Some(class),
                ..
            } => seen(tool, None, Some(class)),
            DecisionEvent::ReplayBlocked { tool, class, .. } => seen(tool, None, Some(class)),
            DecisionEvent::Revoked { tool, .. } => seen(tool, None, Some("revalidation")),
            DecisionEvent::ApprovalDecided { approval, .. } => seen(&approval.tool, None, None),
            _ => None,
        }
    }
}

/// Reports `event` to operators: on the current decision span, as a span event, and (feature
/// `metrics`) to the counters.
pub(crate) fn decision(channels: Channels<'_>, event: &DecisionEvent<'_>) {
    if let Some(seen) = Seen::of(channels, event) {
        emit(&seen);
    }
}

/// Reports a grant's event (issued, begun, consumed, failed). A grant exists only for a
/// configured queued tool, so its tool is its own label.
pub(crate) fn grant(event: &DecisionEvent<'_>) {
    let (DecisionEvent::GrantIssued { grant }
    | DecisionEvent::GrantBegun { grant, .. }
    | DecisionEvent::GrantConsumed { grant, .. }
    | DecisionEvent::GrantFailed { grant, .. }) = event
    else {
        return;
    };
    emit(&Seen {
        outcome: event.name(),
        tool: grant.tool,
        channel: "grant",
        class: None,
    });
}

fn emit(seen: &Seen<'_>) {
    let span = Span::current();
    if !span.is_disabled() {
        span.record("mcp_confirm.outcome", seen.outcome);
        span.record("mcp_confirm.channel", seen.channel);
        if let Some(class) = seen.class {
            span.record("mcp_confirm.refusal_class", class);
        }
    }
    span_event(seen);
    #[cfg(feature = "metrics")]
    crate::metrics::decision(seen.outcome, seen.tool, seen.channel, seen.class);
}

/// The span event of a decision, named `mcp_confirm.<outcome>` (its message, which is what
/// `tracing-opentelemetry` names span events by).
fn span_event(seen: &Seen<'_>) {
    tracing::info!(target: SPAN_TARGET,
        message = %format_args!("mcp_confirm.{}", seen.outcome),
        mcp_confirm.channel = seen.channel,
        mcp_confirm.refusal_class = seen.class);
}

/// The span of the layer's work on a confirmed tool's call: `tools/call <tool>`, kind server,
/// with the attributes of OpenTelemetry's MCP conventions (never `mcp.session.id`: 2026-07-28
/// has no session). With the `otel` feature its parent is the trace context in `params._meta`.
pub(crate) fn call_span(call: &ToolCall) -> Span {
    let version = call
        .params
        .meta
        .as_ref()
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(serde_json::Value::as_str);
    let span = tracing::info_span!(target: SPAN_TARGET, "tools/call",
        otel.name = format_args!("{TOOLS_CALL} {}", call.tool),
        otel.kind = "server",
        mcp.method.name = TOOLS_CALL,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.tool,
        jsonrpc.request.id = %call.id.trim_matches('"'),
        mcp.protocol.version = version,
        error.type = Empty,
        otel.status_code = Empty,
    );
    #[cfg(feature = "otel")]
    otel::adopt_parent(&span, call.params.meta.as_ref());
    span
}

/// The child span of the decision proper: its outcome, channel, refusal class and the
/// deployment's policy revision.
pub(crate) fn decision_span(policy: Option<&str>) -> Span {
    tracing::info_span!(target: SPAN_TARGET, "mcp_confirm.decision",
        mcp_confirm.outcome = Empty,
        mcp_confirm.channel = Empty,
        mcp_confirm.refusal_class = Empty,
        mcp_confirm.policy = policy,
    )
}

/// Marks the call span of a call the layer answered with a JSON-RPC error: `error.type` is the
/// error's code, as the conventions say.
pub(crate) fn failed(span: &Span, code: i64) {
    if !span.is_disabled() {
        span.record("error.type", tracing::field::display(code));
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(feature = "otel")]
mod otel {
    //! The W3C trace context a client put in `params._meta` (SEP-414), read through the
    //! application's global propagator.

    use opentelemetry::propagation::Extractor;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// `params._meta` as a carrier: its string members only.
    struct Meta<'a>(&'a serde_json::Map<String, serde_json::Value>);

    impl Extractor for Meta<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(serde_json::Value::as_str)
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }

    /// Makes the trace context in `meta`, if any, the parent of `span`.
    pub(super) fn adopt_parent(span: &tracing::Span, meta: Option<&serde_json::Value>) {
        let Some(meta) = meta.and_then(serde_json::Value::as_object) else {
            return;
        };
        if !meta.contains_key("traceparent") || span.is_disabled() {
            return;
        }
        let context = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Meta(meta))
        });
        // Only a span the OpenTelemetry layer knows can take a parent; others ignore it.
        let _ = span.set_parent(context);
    }
}

/// A retry's state was refused (`error`): counted by what it comes to.
pub(crate) fn state_refused(error: &crate::token::StateError) {
    use crate::token::StateError as E;
    let result = match error {
        E::Expired => "expired",
        E::Restarted => "restarted",
        E::InFlight | E::Consumed => "replay",
        E::Audience
        | E::Principal
        | E::Method
        | E::Tool
        | E::Arguments
        | E::Phase
        | E::InputKey
        | E::SameRequestId => "mismatch",
        _ => "invalid",
    };
    claim(result);
}

/// A retry's nonce was claimed.
pub(crate) fn claimed() {
    claim("ok");
}

fn claim(_result: &'static str) {
    #[cfg(feature = "metrics")]
    crate::metrics::claim(_result);
}

/// The replay store failed.
pub(crate) fn store_failed(_backend: &'static str) {
    #[cfg(feature = "metrics")]
    crate::metrics::store_error(_backend);
}

/// A retry answered the question asked at `issued_at` (`answer`: `accept`, `decline`,
/// `cancel`); `tool` is its label ([`tool_label`]).
pub(crate) fn answered(
    tool: &str,
    answer: &'static str,
    issued_at: u64,
    now: std::time::SystemTime,
) {
    #[cfg(feature = "metrics")]
    {
        let now = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        crate::metrics::answered(tool, answer, now.saturating_sub(issued_at));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (tool, answer, issued_at, now);
}
