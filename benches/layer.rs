//! What the layer costs: untouched traffic next to the bare inner service, and the first round of a
//! confirmation. Run with `cargo bench`.

use std::convert::Infallible;
use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::Full;
use mcp_confirm::{
    Candidate, ConfirmLayer, KeyRing, Lookup, MemoryReplayStore, PolicyError, Principal, ToolPolicy,
};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

fn request(body: &Bytes, tool: &str) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Full::new(body.clone()))
        .unwrap();
    req.extensions_mut().insert(Principal::new("alice"));
    req
}

fn call(tool: &str, pad: usize) -> Bytes {
    Bytes::from(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}},
            "name":tool,"arguments":{"title":"Groceries","pad":"x".repeat(pad)}}})
        .to_string(),
    )
}

fn layer() -> ConfirmLayer {
    let policy = ToolPolicy::pick_one(|_: Lookup| async {
        Ok::<_, PolicyError>(vec![
            Candidate::labelled("note-3", "Groceries (Monday)"),
            Candidate::labelled("note-7", "Groceries (Tuesday)"),
            Candidate::labelled("note-14", "Groceries (Friday)"),
        ])
    })
    .choice_field("note_id")
    .select_into("note_id");
    ConfirmLayer::builder(KeyRing::single("k1", [7u8; 32]).unwrap())
        .audience("bench")
        .replay_store(MemoryReplayStore::new())
        .tool("notes_delete", policy)
        .build()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let noop = tower::service_fn(
        |_req: http::Request<mcp_confirm::http::RequestBody<Full<Bytes>>>| async {
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
        },
    );
    let bare = tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
    });
    let confirm = layer().layer(noop);

    let list = call("notes_list", 900);
    let mut group = c.benchmark_group("passthrough");
    group.throughput(Throughput::Elements(1));
    group.bench_function("bare_inner_1KiB", |b| {
        b.to_async(&rt)
            .iter(|| async { bare.oneshot(request(&list, "notes_list")).await.unwrap() })
    });
    group.bench_function("through_layer_1KiB", |b| {
        b.to_async(&rt).iter(|| async {
            let mut svc = confirm.clone();
            black_box(
                svc.ready()
                    .await
                    .unwrap()
                    .call(request(&list, "notes_list"))
                    .await
                    .unwrap(),
            )
        })
    });
    group.finish();

    let delete = call("notes_delete", 0);
    let mut group = c.benchmark_group("challenge");
    group.throughput(Throughput::Elements(1));
    group.bench_function("first_call_3_candidates", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                confirm
                    .clone()
                    .oneshot(request(&delete, "notes_delete"))
                    .await
                    .unwrap(),
            )
        })
    });
    group.finish();
}

criterion_group!(layer_benches, benches);
criterion_main!(layer_benches);
