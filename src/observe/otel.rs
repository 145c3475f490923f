//! The spans, straight to OpenTelemetry (feature `otel`).
//!
//! The layer asks the tracer for each span itself rather than going through `tracing` and
//! `tracing-opentelemetry`: the sampler decides before anything else is built, so a call it
//! drops costs a span id and a sampling decision, and one it keeps an SDK span, without the
//! `tracing` registry and the bridge's visitors in between (BENCHMARKS.md (g) measured that
//! bridge at about 10 µs per span, sampled or not).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use opentelemetry::global::BoxedTracer;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};

use super::Seen;
use crate::message::{TOOLS_CALL, ToolCall};

/// Who the spans say made them.
static SCOPE: LazyLock<InstrumentationScope> = LazyLock::new(|| {
    InstrumentationScope::builder("mcp-confirm")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
});

/// The tracer the application gave the layer, if any; otherwise the global provider's, asked
/// for each call, so a provider set after the layer was built is the one used: but while it is
/// the no-op provider (none installed), only every [`NOOP_SKIPPED`]`+1`th call on each thread,
/// so that a layer without a tracer builds no span at all.
#[derive(Clone)]
pub(crate) struct GivenTracer {
    given: Option<Arc<BoxedTracer>>,
    /// Tells this layer's countdown from another's in [`SKIPPING`].
    id: u64,
}

impl Default for GivenTracer {
    fn default() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Self {
            given: None,
            id: IDS.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Calls a thread lets by without a span once the global provider turned out to be the no-op.
const NOOP_SKIPPED: u32 = 255;

thread_local! {
    /// The layer whose calls this thread lets by without asking the global provider, and how
    /// many more. One layer at a time: another's call asks, and takes the countdown over.
    static SKIPPING: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

impl GivenTracer {
    /// The application's `tracer`.
    pub(crate) fn given(tracer: BoxedTracer) -> Self {
        Self {
            given: Some(Arc::new(tracer)),
            ..Self::default()
        }
    }

    /// Whether this layer's calls on this thread go without a span for now: the global
    /// provider was the no-op one a few calls ago.
    fn skipping(&self) -> bool {
        let (id, left) = SKIPPING.get();
        self.given.is_none() && id == self.id && left > 0
    }

    /// Whether this call goes without a span ([`skipping`](Self::skipping)), counted.
    fn skips(&self) -> bool {
        let skips = self.skipping();
        if skips {
            SKIPPING.set((self.id, SKIPPING.get().1 - 1));
        }
        skips
    }

    /// Remembers what the global provider turned out to be.
    fn saw(&self, noop: bool) {
        SKIPPING.set((self.id, if noop { NOOP_SKIPPED } else { 0 }));
    }
}

/// Starts the span `builder` describes under `parent`; `None` when the tracer is a no-op (no
/// provider installed): its span is its parent's, so there is nothing to enter or to mark, and
/// the call is spared a context attached at every poll.
fn start(tracer: &GivenTracer, builder: SpanBuilder, parent: &Context) -> Option<Context> {
    let span = match &tracer.given {
        Some(tracer) => tracer.build_with_context(builder, parent),
        None => opentelemetry::global::tracer_with_scope(SCOPE.clone())
            .build_with_context(builder, parent),
    };
    // Every SDK span, sampled or not, has a span id of its own; a no-op span repeats its
    // parent's (or the invalid id, without a parent).
    let own = span.span_context().span_id() != parent.span().span_context().span_id();
    let noop = !own && !span.is_recording();
    if tracer.given.is_none() {
        tracer.saw(noop);
    }
    (!noop).then(|| parent.with_span(span))
}

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

/// The W3C trace context the client put in `params._meta` (SEP-414), read through the
/// application's global propagator: the parent of the call's span, and, for a call without a
/// span of the layer's, what the handler still sees (for what it propagates further).
fn remote_parent(meta: Option<&serde_json::Value>) -> Option<Context> {
    let meta = meta?.as_object()?;
    meta.contains_key("traceparent").then(|| {
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&Meta(meta)))
    })
}

/// The call's span, `tools/call <tool>`, kind server, with the attributes of the MCP
/// conventions; the context that holds it. The sampler sees the name, the kind, the method and
/// the tool; the request id and the protocol version, which no sampler needs, are added only
/// to a span that records, so that a call without a tracer builds next to nothing.
pub(crate) fn call_span(tracer: &GivenTracer, call: &ToolCall) -> Option<Context> {
    if tracer.skips() {
        return remote_parent(call.params.meta.as_ref());
    }
    let mut name = String::with_capacity(TOOLS_CALL.len() + 1 + call.tool.len());
    name.push_str(TOOLS_CALL);
    name.push(' ');
    name.push_str(&call.tool);
    let builder = SpanBuilder::from_name(name)
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("mcp.method.name", TOOLS_CALL),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.tool.clone()),
        ]);
    let remote = remote_parent(call.params.meta.as_ref());
    let parent = remote.clone().unwrap_or_else(Context::current);
    let Some(cx) = start(tracer, builder, &parent) else {
        return remote;
    };
    let span = cx.span();
    if span.is_recording() {
        span.set_attribute(KeyValue::new(
            "jsonrpc.request.id",
            call.id.trim_matches('"').to_owned(),
        ));
        if let Some(version) = super::protocol_version(call) {
            span.set_attribute(KeyValue::new("mcp.protocol.version", version.to_owned()));
        }
    }
    Some(cx)
}

/// The decision's span, a child of the current context (the call's, which the adapter
/// attaches while it polls).
pub(crate) fn decision_span(given: &GivenTracer, policy: Option<&str>) -> Option<Context> {
    // No span in the context, or a call let by: the call's tracer is a no-op, and so is this
    // one (a client's `traceparent` alone is no span of ours).
    if given.skipping() || !Context::map_current(TraceContextExt::has_active_span) {
        return None;
    }
    let builder = SpanBuilder::from_name("mcp_confirm.decision").with_attributes(
        policy.map(|policy| KeyValue::new("mcp_confirm.policy", policy.to_owned())),
    );
    start(given, builder, &Context::current())
}

/// A decision on the current span: its attributes and a span event `mcp_confirm.<outcome>`.
/// Nothing is built for a span that is not recording.
pub(crate) fn seen(seen: &Seen<'_>) {
    Context::map_current(|cx| {
        let span = cx.span();
        if !span.is_recording() {
            return;
        }
        let mut attributes = vec![KeyValue::new("mcp_confirm.channel", seen.channel)];
        if let Some(class) = seen.class {
            attributes.push(KeyValue::new("mcp_confirm.refusal_class", class.to_owned()));
        }
        span.set_attribute(KeyValue::new("mcp_confirm.outcome", seen.outcome));
        span.set_attributes(attributes.iter().cloned());
        span.add_event(format!("mcp_confirm.{}", seen.outcome), attributes);
    });
}

/// Marks the call's span as answered with the JSON-RPC error `code`.
pub(crate) fn failed(cx: &Context, code: i64) {
    let span = cx.span();
    if span.is_recording() {
        span.set_attribute(KeyValue::new("error.type", code.to_string()));
        span.set_status(Status::error(""));
    }
}
