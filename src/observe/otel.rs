//! The spans, straight to OpenTelemetry (feature `otel`).
//!
//! The layer asks the tracer for each span itself rather than going through `tracing` and
//! `tracing-opentelemetry`: the sampler decides before anything else is built, so a call it
//! drops costs a span id and a sampling decision, and one it keeps an SDK span, without the
//! `tracing` registry and the bridge's visitors in between (BENCHMARKS.md (g) measured that
//! bridge at about 10 µs per span, sampled or not).

use std::sync::{Arc, LazyLock};

use opentelemetry::global::BoxedTracer;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt, Tracer as _};
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
/// for each call, so a provider set after the layer was built is the one used.
pub(crate) type GivenTracer = Option<Arc<BoxedTracer>>;

fn start(given: &GivenTracer, builder: SpanBuilder, parent: &Context) -> Context {
    let span = match given {
        Some(tracer) => tracer.build_with_context(builder, parent),
        None => opentelemetry::global::tracer_with_scope(SCOPE.clone())
            .build_with_context(builder, parent),
    };
    parent.with_span(span)
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

/// The parent of a call's span: the W3C trace context the client put in `params._meta`
/// (SEP-414), read through the application's global propagator; else the current context.
fn parent(meta: Option<&serde_json::Value>) -> Context {
    match meta.and_then(serde_json::Value::as_object) {
        Some(meta) if meta.contains_key("traceparent") => {
            opentelemetry::global::get_text_map_propagator(|propagator| {
                propagator.extract(&Meta(meta))
            })
        }
        _ => Context::current(),
    }
}

/// The call's span, `tools/call <tool>`, kind server, with the attributes of the MCP
/// conventions; the context that holds it.
pub(crate) fn call_span(given: &GivenTracer, call: &ToolCall, version: Option<&str>) -> Context {
    let mut attributes = Vec::with_capacity(5);
    attributes.push(KeyValue::new("mcp.method.name", TOOLS_CALL));
    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    attributes.push(KeyValue::new("gen_ai.tool.name", call.tool.clone()));
    attributes.push(KeyValue::new(
        "jsonrpc.request.id",
        call.id.trim_matches('"').to_owned(),
    ));
    if let Some(version) = version {
        attributes.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
    }
    let builder = SpanBuilder::from_name(format!("{TOOLS_CALL} {}", call.tool))
        .with_kind(SpanKind::Server)
        .with_attributes(attributes);
    start(given, builder, &parent(call.params.meta.as_ref()))
}

/// The decision's span, a child of the current context (the call's, which the adapter
/// attaches while it polls).
pub(crate) fn decision_span(given: &GivenTracer, policy: Option<&str>) -> Context {
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
