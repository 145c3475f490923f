//! What operators see: the metrics a scrape shows count exactly what happened, and the spans
//! follow OpenTelemetry's MCP conventions, take their parent from `params._meta` and carry no
//! secret.

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};

use crate::common::*;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::{MemoryReplayStore, StoreError};

fn recorder() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(mcp_confirm::metrics::ANSWER_SECONDS.to_owned()),
            mcp_confirm::metrics::ANSWER_SECONDS_BUCKETS,
        )
        .unwrap()
        .build_recorder()
}

/// Every sample of a scrape, `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn decisions(outcome: &str) -> String {
    format!(
        "mcp_confirm_decisions_total{{tool=\"notes_delete\",outcome=\"{outcome}\",channel=\"form\"}}"
    )
}

#[tokio::test]
async fn a_scrape_counts_exactly_what_happened() {
    let recorder = recorder();
    let handle = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let (f, state) = challenged().await;
    let call = |id: i64, responses| answered(&state, json!(id), responses);
    // Cancelled after 5 s; a choice that was not offered (asked again: a second form).
    f.clock.advance(Duration::from_secs(5));
    f.alice(&call(2, json!({"delete_choice":{"action":"cancel"}})))
        .await;
    f.alice(&call(
        3,
        json!({"delete_choice":{"action":"accept","content":{"note_id":"nope","confirm":true}}}),
    ))
    .await;
    // Bob answers alice's state: a mismatch. Alice accepts after 90 s; then replays it.
    send(&f.svc, post(&call(4, accept("note-7")), Some("bob"))).await;
    f.clock.advance(Duration::from_secs(85));
    assert_eq!(f.alice(&call(5, accept("note-7"))).await.status, 200);
    f.alice(&call(6, accept("note-7"))).await;
    // A third form, declined at once; a fourth, answered after it expired.
    let other = challenge(&f).await;
    f.alice(&retry(
        delete_call(json!(1), "Groceries"),
        json!(7),
        &other,
        decline(),
    ))
    .await;
    let late = challenge(&f).await;
    f.clock.advance(Duration::from_secs(400));
    f.alice(&retry(
        delete_call(json!(1), "Groceries"),
        json!(8),
        &late,
        accept("note-3"),
    ))
    .await;
    // A made-up tool's name is no label: the layer has no business with it.
    let mut made_up = delete_call(json!(9), "Groceries");
    made_up["params"]["name"] = json!("x-made-up-tool");
    f.alice(&made_up).await;
    assert_eq!(
        f.seen.count(),
        2,
        "the accepted delete and the made-up call ran"
    );

    let text = handle.render();
    let seen = samples(&text);
    let expect = [
        (decisions("challenged"), 4.0),
        (decisions("cancelled"), 1.0),
        (decisions("accepted"), 1.0),
        (decisions("declined"), 1.0),
        (decisions("refused"), 2.0),
        (decisions("replay_blocked"), 1.0),
        (
            "mcp_confirm_refusals_total{tool=\"notes_delete\",class=\"invalid_request_state\"}"
                .into(),
            3.0,
        ),
        ("mcp_confirm_claims_total{result=\"ok\"}".into(), 2.0),
        ("mcp_confirm_claims_total{result=\"replay\"}".into(), 1.0),
        ("mcp_confirm_claims_total{result=\"mismatch\"}".into(), 1.0),
        ("mcp_confirm_claims_total{result=\"expired\"}".into(), 1.0),
        (
            "mcp_confirm_answer_seconds_count{tool=\"notes_delete\",answer=\"accept\"}".into(),
            1.0,
        ),
        (
            "mcp_confirm_answer_seconds_sum{tool=\"notes_delete\",answer=\"accept\"}".into(),
            90.0,
        ),
        (
            "mcp_confirm_answer_seconds_bucket{tool=\"notes_delete\",answer=\"accept\",le=\"60\"}"
                .into(),
            0.0,
        ),
        (
            "mcp_confirm_answer_seconds_bucket{tool=\"notes_delete\",answer=\"accept\",le=\"120\"}"
                .into(),
            1.0,
        ),
        (
            "mcp_confirm_answer_seconds_sum{tool=\"notes_delete\",answer=\"cancel\"}".into(),
            5.0,
        ),
        (
            "mcp_confirm_answer_seconds_count{tool=\"notes_delete\",answer=\"decline\"}".into(),
            1.0,
        ),
    ];
    for (series, value) in &expect {
        assert_eq!(seen.get(series), Some(value), "{series} in\n{text}");
    }
    // Nothing else was counted: every decision, refusal and claim series is one of the above.
    let counted: Vec<_> = seen
        .keys()
        .filter(|s| !s.starts_with("mcp_confirm_answer_seconds"))
        .collect();
    let expected: Vec<_> = expect
        .iter()
        .map(|(s, _)| s)
        .filter(|s| !s.starts_with("mcp_confirm_answer_seconds"))
        .collect();
    assert_eq!(counted, {
        let mut e = expected;
        e.sort();
        e
    });
    assert!(!text.contains("x-made-up"), "{text}");
    assert!(
        !text.contains("alice") && !text.contains("note-7"),
        "{text}"
    );
}

/// A replay store whose backend never answers.
#[derive(Debug)]
struct Unreachable;

impl mcp_confirm::store::ReplayStore for Unreachable {
    fn claim(
        &self,
        _: &mcp_confirm::store::ClaimRequest,
    ) -> mcp_confirm::store::BoxFuture<'_, Result<mcp_confirm::store::Claim, StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn complete(
        &self,
        _: &mcp_confirm::store::ClaimRequest,
    ) -> mcp_confirm::store::BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn is_used(
        &self,
        _: mcp_confirm::store::Nonce,
        _: mcp_confirm::store::PrincipalKey,
    ) -> mcp_confirm::store::BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn boot_epoch(&self) -> Option<mcp_confirm::store::BootEpoch> {
        None
    }
}

#[tokio::test]
async fn a_store_that_fails_is_counted_under_its_backend_and_a_spent_budget_is_not() {
    let recorder = recorder();
    let handle = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let f = fixture_with(|b| b.replay_store(Unreachable));
    let state = challenge(&f).await;
    let refused = f.accept(&state, json!(2), "note-7").await;
    assert_eq!(f.seen.count(), 0, "{}", refused.json());
    // A principal over its budget is a refusal, not a failing store.
    let (notes, clock) = (Notes::seeded(), ManualClock::new(now()));
    let store = MemoryReplayStore::with_clock(1_000, clock.clone()).principal_budget(1);
    let g = Fixture::new(
        base_builder(&notes, &clock, &store).build(),
        notes,
        clock,
        store,
    );
    let first = challenge(&g).await;
    let second = challenge(&g).await;
    assert_eq!(g.accept(&first, json!(2), "note-7").await.status, 200);
    g.accept(&second, json!(3), "note-3").await;
    let text = handle.render();
    let seen = samples(&text);
    let errors: Vec<_> = seen
        .iter()
        .filter(|(k, _)| k.starts_with("mcp_confirm_store_errors_total"))
        .collect();
    assert_eq!(
        errors,
        [(
            &"mcp_confirm_store_errors_total{backend=\"custom\"}".to_owned(),
            &1.0
        )],
        "{text}"
    );
    assert_eq!(
        seen.get(
            "mcp_confirm_refusals_total{tool=\"notes_delete\",class=\"principal_budget_spent\"}"
        ),
        Some(&1.0),
        "{text}"
    );
}

/// The spans one test's calls made, read back from an in-memory exporter: the layer is given
/// its own tracer, so no other test's spans are mixed in.
struct Spans {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl Spans {
    fn record() -> Self {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        Self { exporter, provider }
    }

    /// The notes fixture, its layer sending its spans here.
    fn fixture(&self) -> Fixture {
        let tracer = BoxedTracer::new(Box::new(self.provider.tracer("test")));
        fixture_with(|builder| builder.otel_tracer(tracer))
    }

    fn finished(&self) -> Vec<SpanData> {
        self.provider.force_flush().unwrap();
        self.exporter.get_finished_spans().unwrap()
    }
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn traced(mut call: Value) -> Value {
    call["params"]["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-{PARENT_ID}-01"));
    call
}

#[tokio::test]
async fn spans_follow_the_mcp_conventions_take_their_parent_from_meta_and_carry_no_secret() {
    let spans = Spans::record();
    let f = spans.fixture();
    let asked = f.alice(&traced(delete_call(json!(1), "Groceries"))).await;
    let state = asked.state();
    f.alice(&traced(accepted(&state, json!(2), "note-7"))).await;
    f.alice(&traced(accepted(&state, json!(3), "note-7"))).await;
    let finished = spans.finished();

    let calls: Vec<&SpanData> = finished
        .iter()
        .filter(|s| s.name == "tools/call notes_delete")
        .collect();
    assert_eq!(calls.len(), 3, "{finished:#?}");
    for (call, id) in calls.iter().zip(["1", "2", "3"]) {
        assert_eq!(call.span_kind, SpanKind::Server);
        assert_eq!(call.span_context.trace_id().to_string(), TRACE_ID);
        assert_eq!(call.parent_span_id.to_string(), PARENT_ID);
        assert_eq!(
            attribute(call, "mcp.method.name").as_deref(),
            Some("tools/call")
        );
        assert_eq!(
            attribute(call, "gen_ai.tool.name").as_deref(),
            Some("notes_delete")
        );
        assert_eq!(
            attribute(call, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        assert_eq!(attribute(call, "jsonrpc.request.id").as_deref(), Some(id));
        assert_eq!(
            attribute(call, "mcp.protocol.version").as_deref(),
            Some("2026-07-28")
        );
        assert_eq!(attribute(call, "mcp.session.id"), None);
    }
    // The replay failed: its error type is the JSON-RPC code.
    assert_eq!(attribute(calls[2], "error.type").as_deref(), Some("-32602"));
    assert!(matches!(calls[2].status, Status::Error { .. }));
    assert_eq!(attribute(calls[1], "error.type"), None);

    // Each call has one decision child with its outcome, and the step as a span event.
    let decision = |call: &SpanData| {
        finished
            .iter()
            .find(|s| {
                s.name == "mcp_confirm.decision" && s.parent_span_id == call.span_context.span_id()
            })
            .unwrap_or_else(|| panic!("no decision under {call:#?}"))
            .clone()
    };
    let outcomes: Vec<_> = calls
        .iter()
        .map(|call| {
            let d = decision(call);
            let events: Vec<String> = d.events.iter().map(|e| e.name.to_string()).collect();
            (attribute(&d, "mcp_confirm.outcome"), events)
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                Some("challenged".into()),
                vec!["mcp_confirm.challenged".to_owned()]
            ),
            (
                Some("accepted".into()),
                vec!["mcp_confirm.accepted".to_owned()]
            ),
            (
                Some("replay_blocked".into()),
                vec!["mcp_confirm.replay_blocked".to_owned()]
            ),
        ]
    );
    let replay = decision(calls[2]);
    assert_eq!(
        attribute(&replay, "mcp_confirm.refusal_class").as_deref(),
        Some("invalid_request_state")
    );
    assert_eq!(
        attribute(&replay, "mcp_confirm.channel").as_deref(),
        Some("form")
    );

    // No span, attribute or event carries the state, its nonce, an argument, the chosen
    // record or the principal.
    let everything = format!("{finished:?}");
    let nonce_hint = &state[6..30];
    for secret in [
        nonce_hint,
        "mcpc1.",
        "note-7",
        "Groceries",
        "alice",
        "workspace",
    ] {
        assert!(!everything.contains(secret), "{secret} in the spans");
    }
}

#[tokio::test]
async fn without_a_traceparent_the_call_span_is_a_root() {
    let spans = Spans::record();
    let f = spans.fixture();
    f.alice(&delete_call(json!(1), "Groceries")).await;
    let finished = spans.finished();
    let call = finished
        .iter()
        .find(|s| s.name == "tools/call notes_delete")
        .unwrap();
    assert_eq!(call.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    assert_ne!(call.span_context.trace_id().to_string(), TRACE_ID);
}

#[tokio::test]
async fn a_call_the_sampler_drops_exports_nothing_and_still_decides() {
    let spans = Spans::record();
    let f = spans.fixture();
    // The client's trace is not sampled (flags 00): the SDK's parent-based sampler drops the
    // call's span and so its decision's.
    let unsampled = |mut call: Value| {
        call["params"]["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-{PARENT_ID}-00"));
        call
    };
    let asked = f
        .alice(&unsampled(delete_call(json!(1), "Groceries")))
        .await;
    let state = asked.state();
    let done = f
        .alice(&unsampled(accepted(&state, json!(2), "note-7")))
        .await;
    assert_ran(&done);
    assert_eq!(spans.finished(), Vec::<SpanData>::new());
}

#[tokio::test]
async fn what_the_inner_service_traces_while_it_runs_the_call_is_a_child_of_its_span() {
    use opentelemetry::trace::Tracer as _;
    let spans = Spans::record();
    let handler = spans.provider.tracer("handler");
    // An inner service that traces its work the OpenTelemetry way: its span's parent is the
    // current context.
    let inner: Inner = tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |_request: http::Request<
            mcp_confirm::body::RequestBody<http_body_util::Full<bytes::Bytes>>,
        >| {
            let handler = handler.clone();
            async move {
                let _span = handler.start("handler work");
                let body = json!({"jsonrpc": "2.0", "id": 2,
                    "result": {"content": [{"type": "text", "text": "done by inner"}]}});
                Ok(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from(body.to_string()),
                )))
            }
        },
    ));
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(1_000, clock.clone());
    let tracer = BoxedTracer::new(Box::new(spans.provider.tracer("test")));
    let svc = tower::Layer::layer(
        &base_builder(&notes, &clock, &store)
            .otel_tracer(tracer)
            .build(),
        inner,
    );
    let asked = send(
        &svc,
        post(&delete_call(json!(1), "Groceries"), Some("alice")),
    )
    .await;
    let done = send(
        &svc,
        post(&accepted(&asked.state(), json!(2), "note-7"), Some("alice")),
    )
    .await;
    assert_ran(&done);

    let finished = spans.finished();
    let work = finished
        .iter()
        .find(|s| s.name == "handler work")
        .unwrap_or_else(|| panic!("no handler span in {finished:#?}"));
    let call = finished
        .iter()
        .find(|s| {
            s.name == "tools/call notes_delete"
                && attribute(s, "jsonrpc.request.id").as_deref() == Some("2")
        })
        .unwrap();
    assert_eq!(work.parent_span_id, call.span_context.span_id());
    assert_eq!(work.span_context.trace_id(), call.span_context.trace_id());
}

#[tokio::test]
async fn without_a_tracer_of_its_own_the_layer_uses_the_global_provider_set_after_it_was_built() {
    // Built before any provider is set: the global one is asked on each call. (The only test
    // that sets it; other tests' calls may land in it too, so this one looks for its own ids.)
    let f = fixture();
    // Another layer served a call while no provider was set: this thread lets its next calls
    // by without asking again (a layer without a tracer builds no span), but not for long.
    let early = fixture();
    early
        .alice(&delete_call(json!("before-any-provider"), "Groceries"))
        .await;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    f.alice(&delete_call(json!("global-provider"), "Groceries"))
        .await;
    for n in 0..300 {
        early
            .alice(&delete_call(json!(format!("early-{n}")), "Groceries"))
            .await;
    }
    provider.force_flush().unwrap();
    let finished = exporter.get_finished_spans().unwrap();
    let early_traced: Vec<u32> = finished
        .iter()
        .filter_map(|s| {
            attribute(s, "jsonrpc.request.id")?
                .strip_prefix("early-")?
                .parse()
                .ok()
        })
        .collect();
    let first = early_traced.iter().min().copied();
    assert!(
        first.is_some_and(|first| first <= 256),
        "the provider set later was not asked within 256 calls: {first:?}"
    );
    // From then on, every call.
    let first = first.unwrap_or_default();
    assert_eq!(early_traced.len() as u32, 300 - first, "{early_traced:?}");
    let call = finished
        .iter()
        .find(|s| attribute(s, "jsonrpc.request.id").as_deref() == Some("global-provider"))
        .unwrap_or_else(|| panic!("no call span in {finished:#?}"));
    assert_eq!(call.name, "tools/call notes_delete");
    assert_eq!(call.instrumentation_scope.name(), "mcp-confirm");
    assert_eq!(
        call.instrumentation_scope.version(),
        Some(env!("CARGO_PKG_VERSION"))
    );
}

/// Alice's acceptance of `choice` that also asks for the standing approval offered.
fn remembering(state: &str, id: Value, choice: &str) -> Value {
    answered(
        state,
        id,
        json!({"delete_choice":{"action":"accept","content":{
            "note_id": choice, "confirm": true, "remember": "standing"}}}),
    )
}

#[tokio::test]
async fn the_gauges_count_what_waits_and_what_is_in_force_in_the_stores() {
    use crate::common::browser::{base, destroy_call, destroy_policy};
    let recorder = recorder();
    let handle = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let workspace =
        |lookup: &mcp_confirm::Lookup| lookup.arguments["workspaceUri"].as_str().map(str::to_owned);
    let layer = base(
        mcp_confirm::KeyRing::single("k1", KEY).unwrap(),
        &clock,
        &store,
    )
    .tool("notes_destroy", destroy_policy(&notes))
    .tool(
        "notes_delete",
        delete_policy(&notes).standing(Duration::from_secs(600), 5, workspace),
    )
    .build();
    let gauges = layer.gauges();
    let f = Fixture::new(layer, notes, clock.clone(), store);
    let gauge = |name: &str| samples(&handle.render()).get(name).copied();

    gauges.refresh().await;
    assert_eq!(gauge("mcp_confirm_pending_approvals"), Some(0.0));
    assert_eq!(gauge("mcp_confirm_standing_active"), Some(0.0));
    // Two approvals wait on the page; a standing approval is granted.
    f.alice(&destroy_call(json!(1))).await;
    f.alice(&destroy_call(json!(2))).await;
    let state = challenge(&f).await;
    assert_eq!(
        f.alice(&remembering(&state, json!(3), "note-7"))
            .await
            .status,
        200
    );
    gauges.refresh().await;
    assert_eq!(gauge("mcp_confirm_pending_approvals"), Some(2.0));
    assert_eq!(gauge("mcp_confirm_standing_active"), Some(1.0));
    // Unseen, the approvals expire (300 s), then the standing approval (600 s): the stores say
    // so at the next refresh.
    clock.advance(Duration::from_secs(301));
    gauges.refresh().await;
    assert_eq!(gauge("mcp_confirm_pending_approvals"), Some(0.0));
    assert_eq!(gauge("mcp_confirm_standing_active"), Some(1.0));
    clock.advance(Duration::from_secs(300));
    gauges.refresh().await;
    assert_eq!(gauge("mcp_confirm_standing_active"), Some(0.0));
}

#[tokio::test]
async fn a_grant_is_counted_as_issued_begun_and_consumed() {
    let recorder = recorder();
    let handle = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let (f, worker, _) = crate::common::queued::queued();
    let id = crate::common::queued::approved(&f).await;
    worker
        .run(id, |grant: mcp_confirm::grant::Grant| async move {
            Ok::<_, std::io::Error>(grant.chosen)
        })
        .await
        .unwrap();
    let seen = samples(&handle.render());
    for outcome in ["grant_issued", "grant_begun", "grant_consumed"] {
        let series = format!(
            "mcp_confirm_decisions_total{{tool=\"notes_delete\",outcome=\"{outcome}\",channel=\"grant\"}}"
        );
        assert_eq!(seen.get(&series), Some(&1.0), "{series} in {seen:#?}");
    }
    assert_eq!(seen.get(&decisions("accepted")), Some(&1.0));
}
