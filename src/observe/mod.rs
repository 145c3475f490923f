//! What operators see of the decisions, written from the same typed decision events as the audit
//! trail: the `tools/call` span, named and attributed as OpenTelemetry's MCP conventions say,
//! its `mcp_confirm.decision` child with the outcome, and one span event per step; with the
//! `metrics` feature, the counters and histograms of [`metrics`](crate::metrics).
//!
//! Spans and their events never carry a state, a nonce, an argument value, a record's label or a
//! principal: the audit events (target [`TARGET`](crate::audit::TARGET)) carry what operators
//! correlate rounds with, and are never attached to a span.
//!
//! Two ways out: `tracing` spans and span events under [`SPAN_TARGET`] (for logs; they cost an
//! atomic load when nothing wants that target), and, with the `otel` feature, the same spans
//! started with OpenTelemetry's API (`otel.rs`), so the application's sampler decides before
//! anything is built. Don't also bridge [`SPAN_TARGET`] through `tracing-opentelemetry`: each
//! span would be exported twice.
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
    if spans_wanted() {
        let span = Span::current();
        span.record("mcp_confirm.outcome", seen.outcome);
        span.record("mcp_confirm.channel", seen.channel);
        if let Some(class) = seen.class {
            span.record("mcp_confirm.refusal_class", class);
        }
    }
    span_event(seen);
    #[cfg(feature = "otel")]
    otel::seen(seen);
    #[cfg(feature = "metrics")]
    crate::metrics::decision(seen.outcome, seen.tool, seen.channel, seen.class);
}

/// The span event of a decision, named `mcp_confirm.<outcome>` (its message).
fn span_event(seen: &Seen<'_>) {
    tracing::info!(target: SPAN_TARGET,
        message = %format_args!("mcp_confirm.{}", seen.outcome),
        mcp_confirm.channel = seen.channel,
        mcp_confirm.refusal_class = seen.class);
}

/// Where the spans go besides `tracing`: with the `otel` feature, the OpenTelemetry tracer the
/// application gave the layer, or else the global provider's.
#[derive(Clone, Default)]
pub(crate) struct Spans {
    #[cfg(feature = "otel")]
    pub(crate) otel: otel::GivenTracer,
}

/// The spans of one confirmed call: its `tracing` span and (feature `otel`) the OpenTelemetry
/// context that holds its OpenTelemetry span. Both are entered while the layer works on the
/// call and while the inner service runs it, so what the handler traces is their child.
#[derive(Clone)]
pub(crate) struct CallSpan {
    span: Span,
    #[cfg(feature = "otel")]
    otel: Option<opentelemetry::Context>,
}

/// A [`CallSpan`] entered; leaves it when dropped.
pub(crate) struct Entered<'a> {
    _span: Option<tracing::span::Entered<'a>>,
    #[cfg(feature = "otel")]
    _otel: Option<opentelemetry::ContextGuard>,
}

impl CallSpan {
    /// No span: for what the layer does not decide.
    pub(crate) fn none() -> Self {
        Self {
            span: Span::none(),
            #[cfg(feature = "otel")]
            otel: None,
        }
    }

    /// Whether there is no span at all (nothing to enter).
    pub(crate) fn is_none(&self) -> bool {
        #[cfg(feature = "otel")]
        if self.otel.is_some() {
            return false;
        }
        self.span.is_none()
    }

    /// Enters both spans on this thread until the guard is dropped.
    pub(crate) fn enter(&self) -> Entered<'_> {
        Entered {
            _span: (!self.span.is_none()).then(|| self.span.enter()),
            #[cfg(feature = "otel")]
            _otel: self.otel.clone().map(opentelemetry::Context::attach),
        }
    }

    /// `future`, run inside both spans.
    pub(crate) fn instrument<F: Future>(self, future: F) -> Traced<F> {
        Traced { span: self, future }
    }

    /// Marks the call's spans as answered with the JSON-RPC error `code`: `error.type` is the
    /// code, as the conventions say, and the status an error.
    pub(crate) fn failed(&self, code: i64) {
        if !self.span.is_disabled() {
            self.span
                .record("error.type", tracing::field::display(code));
            self.span.record("otel.status_code", "ERROR");
        }
        #[cfg(feature = "otel")]
        if let Some(cx) = &self.otel {
            otel::failed(cx, code);
        }
    }
}

pin_project_lite::pin_project! {
    /// A future run inside a [`CallSpan`].
    pub(crate) struct Traced<F> {
        span: CallSpan,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Traced<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        this.future.poll(cx)
    }
}

/// The span of the layer's work on a confirmed tool's call: `tools/call <tool>`, kind server,
/// with the attributes of OpenTelemetry's MCP conventions (never `mcp.session.id`: 2026-07-28
/// has no session). With the `otel` feature, its OpenTelemetry span's parent is the trace
/// context in `params._meta`.
pub(crate) fn call_span(_spans: &Spans, call: &ToolCall) -> CallSpan {
    let span = if !spans_wanted() {
        Span::none()
    } else {
        tracing::info_span!(target: SPAN_TARGET, "tools/call",
            otel.name = format_args!("{TOOLS_CALL} {}", call.tool),
            otel.kind = "server",
            mcp.method.name = TOOLS_CALL,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.tool,
            jsonrpc.request.id = %call.id.trim_matches('"'),
            mcp.protocol.version = protocol_version(call),
            error.type = Empty,
            otel.status_code = Empty,
        )
    };
    CallSpan {
        span,
        #[cfg(feature = "otel")]
        otel: otel::call_span(&_spans.otel, call),
    }
}

/// The protocol version the call's `_meta` names (only a span that records reads it).
fn protocol_version(call: &ToolCall) -> Option<&str> {
    call.params
        .meta
        .as_ref()
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(serde_json::Value::as_str)
}

/// The child span of the decision proper: its outcome, channel, refusal class and the
/// deployment's policy revision. A child of the call's spans, which are entered.
pub(crate) fn decision_span(_spans: &Spans, policy: Option<&str>) -> CallSpan {
    let span = if !spans_wanted() {
        Span::none()
    } else {
        tracing::info_span!(target: SPAN_TARGET, "mcp_confirm.decision",
            mcp_confirm.outcome = Empty,
            mcp_confirm.channel = Empty,
            mcp_confirm.refusal_class = Empty,
            mcp_confirm.policy = policy,
        )
    };
    CallSpan {
        span,
        #[cfg(feature = "otel")]
        otel: otel::decision_span(&_spans.otel, policy),
    }
}

/// Whether a `tracing` subscriber wants the spans. Asked first, so that without one no span
/// is made at all (not even the disabled span `tracing` would still hand to `log` when its
/// `log` feature is on, as axum's `tower-log` turns it on).
fn spans_wanted() -> bool {
    tracing::span_enabled!(target: SPAN_TARGET, tracing::Level::INFO)
}

#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "otel")]
pub(crate) use otel::GivenTracer;

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
