//! What the layer costs. `cargo bench --bench layer` (Redis benches need Redis on 127.0.0.1:6379 or
//! `REDIS_URL`; they are skipped with a message otherwise).
//!
//! - `passthrough/*`: traffic the layer does not intercept, next to the bare inner service.
//! - `challenge`: the first call of a confirmed tool (parse, gates, resolver with 3 candidates,
//!   form, seal).
//! - `retry_accept`: verify, read the answer, claim (memory store), forward to a no-op inner
//!   service, complete.
//! - `refuse_forged`: a retry whose state was tampered with: the cost an attacker can impose.
//! - `state/*`: sealing (claims built beforehand; `_with_claims` builds them inside the loop) and
//!   opening a state, next to rmcp's `RequestStateCodec` on the same bytes.
//! - `memory_store/*`, `redis_store/*`: claims, uncontended and contended; Redis next to a plain
//!   `SET NX` round trip.

mod common;
use common::ready;

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Full};
use mcp_confirm::body::RequestBody;
use mcp_confirm::store::{
    Claim, ClaimRequest, MemoryReplayStore, Nonce, Owner, PrincipalKey, ReplayStore,
};
use mcp_confirm::{ConfirmLayer, KeyRing, Lookup, PolicyError, Principal, ToolPolicy};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

fn request(body: &Bytes, method: &str, tool: Option<&str>) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(tool) = tool {
        builder = builder.header("mcp-name", tool);
    }
    let mut req = builder.body(Full::new(body.clone())).unwrap();
    req.extensions_mut().insert(Principal::new("alice"));
    req
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}})
}

fn call(tool: &str, pad: usize) -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta":meta(),"name":tool,"arguments":{"title":"Groceries","pad":"x".repeat(pad)}}})
}

fn bytes(v: &Value) -> Bytes {
    Bytes::from(v.to_string())
}

fn layer(store: MemoryReplayStore) -> ConfirmLayer {
    let policy = ToolPolicy::pick_one(|_: Lookup| async {
        Ok::<_, PolicyError>(common::three_candidates())
    })
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id");
    ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://bench.example/mcp")
        .without_challenge_rate_limit()
        .replay_store(store)
        .tool("notes_delete", policy)
        .build()
}

type NoopInner = tower::util::BoxCloneSyncService<
    http::Request<RequestBody<Full<Bytes>>>,
    http::Response<Full<Bytes>>,
    Infallible,
>;

fn noop_inner() -> NoopInner {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        |_req: http::Request<RequestBody<Full<Bytes>>>| async {
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
        },
    ))
}

/// Distinct nonces and owners, made before the clock starts.
/// `n` distinct claims, spread over 64 principals.
fn claims(n: u64, expires_at: SystemTime) -> Vec<ClaimRequest> {
    (0..n)
        .map(|i| {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&i.to_be_bytes());
            bytes[8..12].copy_from_slice(&std::process::id().to_be_bytes());
            let principal = PrincipalKey::from_bytes([(i % 64) as u8; 16]);
            ClaimRequest::new(
                Nonce::from_bytes(bytes),
                Owner::from_bytes(bytes),
                principal,
                expires_at,
            )
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let confirm = layer(MemoryReplayStore::with_capacity(10_000_000)).layer(noop_inner());
    let bare = tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
    });

    // --- pass-through -----------------------------------------------------------------------
    let list_call = bytes(&call("notes_list", 900));
    let tools_list =
        bytes(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":meta()}}));
    let notification = bytes(
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}),
    );
    let mut group = c.benchmark_group("passthrough");
    group.throughput(Throughput::Elements(1));
    for (name, body, method, tool) in [
        (
            "tools_call_1KiB",
            &list_call,
            "tools/call",
            Some("notes_list"),
        ),
        ("tools_list", &tools_list, "tools/list", None),
        (
            "notification",
            &notification,
            "notifications/cancelled",
            None,
        ),
    ] {
        group.bench_function(format!("{name}/bare"), |b| {
            b.to_async(&rt)
                .iter(|| async { bare.oneshot(request(body, method, tool)).await.unwrap() })
        });
        // A layer of its own per row: the no-op inner answers `tools/list` with `{}`, which the
        // layer reads as a list it could not see (and then refuses tools it has no policy for),
        // so one row must not change what the next one measures.
        let confirm = layer(MemoryReplayStore::with_capacity(1_000)).layer(noop_inner());
        group.bench_function(format!("{name}/layer"), |b| {
            b.to_async(&rt).iter(|| async {
                let mut svc = confirm.clone();
                black_box(
                    svc.ready()
                        .await
                        .unwrap()
                        .call(request(body, method, tool))
                        .await
                        .unwrap(),
                )
            })
        });
    }
    group.finish();

    // --- the two rounds ---------------------------------------------------------------------
    let first = call("notes_delete", 0);
    let first_bytes = bytes(&first);
    let mut group = c.benchmark_group("confirm");
    group.throughput(Throughput::Elements(1));
    group.bench_function("challenge", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                confirm
                    .clone()
                    .oneshot(request(&first_bytes, "tools/call", Some("notes_delete")))
                    .await
                    .unwrap(),
            )
        })
    });
    // Each retry needs a fresh state: setup runs a challenge (not measured).
    let fresh_retry = || {
        let response = rt
            .block_on(confirm.clone().oneshot(request(
                &first_bytes,
                "tools/call",
                Some("notes_delete"),
            )))
            .unwrap();
        let body = rt
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let state: Value = serde_json::from_slice(&body).unwrap();
        let mut retry = first.clone();
        retry["id"] = json!(2);
        retry["params"]["requestState"] = state["result"]["requestState"].clone();
        retry["params"]["inputResponses"] = json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":true}}});
        request(&bytes(&retry), "tools/call", Some("notes_delete"))
    };
    group.bench_function("retry_accept", |b| {
        b.iter_batched(
            fresh_retry,
            |req| {
                rt.block_on(async {
                    let response = confirm.clone().oneshot(req).await.unwrap();
                    // Reading the body to its end completes the claim.
                    black_box(response.into_body().collect().await.unwrap())
                })
            },
            BatchSize::SmallInput,
        )
    });
    let forged = {
        let mut req = fresh_retry();
        let body: Value =
            serde_json::from_slice(&rt.block_on(req.body_mut().collect()).unwrap().to_bytes())
                .unwrap();
        let mut forged = body.clone();
        let state = body["params"]["requestState"].as_str().unwrap();
        // A character inside the tag: still canonical base64, so the MAC check is what fails.
        let at = state.len() - 10;
        let flipped = if &state[at..=at] == "A" { "B" } else { "A" };
        forged["params"]["requestState"] =
            json!(format!("{}{flipped}{}", &state[..at], &state[at + 1..]));
        bytes(&forged)
    };
    group.bench_function("refuse_forged", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                confirm
                    .clone()
                    .oneshot(request(&forged, "tools/call", Some("notes_delete")))
                    .await
                    .unwrap(),
            )
        })
    });
    group.finish();

    // --- the state codec, next to rmcp's on the same bytes -----------------------------------
    let ring = KeyRing::single("k1", common::secret(7)).unwrap();
    let token = mcp_confirm::__bench::seal_sample(&ring);
    let payload = mcp_confirm::__bench::sample_payload();
    let rmcp_codec = rmcp::model::RequestStateCodec::try_new(vec![7u8; 32]).unwrap();
    let options = rmcp::model::SealOptions::new().ttl(Duration::from_secs(300));
    let rmcp_token = rmcp_codec.seal_with(&payload, &options);
    let mut group = c.benchmark_group("state");
    group.throughput(Throughput::Elements(1));
    // The claims are built before the clock starts, as rmcp's payload is: the challenge builds
    // them from the resolver's candidates, and `confirm/challenge` times that.
    let sample = mcp_confirm::__bench::sample_claims();
    group.bench_function("seal/mcp_confirm", |b| {
        b.iter(|| black_box(mcp_confirm::__bench::seal(&ring, black_box(&sample))))
    });
    group.bench_function("seal/mcp_confirm_with_claims", |b| {
        b.iter(|| black_box(mcp_confirm::__bench::seal_sample(&ring)))
    });
    group.bench_function("seal/rmcp", |b| {
        b.iter(|| black_box(rmcp_codec.seal_with(black_box(&payload), &options)))
    });
    group.bench_function("open/mcp_confirm", |b| {
        b.iter(|| assert!(mcp_confirm::__bench::open(&ring, black_box(&token))))
    });
    group.bench_function("open/rmcp", |b| {
        b.iter(|| black_box(rmcp_codec.open(black_box(&rmcp_token)).unwrap()))
    });
    group.finish();

    // --- replay stores ----------------------------------------------------------------------
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));
    let far = SystemTime::now() + Duration::from_secs(3_600);
    group.bench_function("claim/1_thread", |b| {
        b.iter_custom(|iters| {
            let store =
                MemoryReplayStore::with_capacity(iters as usize + 1).principal_budget(usize::MAX);
            let claims = claims(iters, far);
            let start = Instant::now();
            for claim in &claims {
                assert_eq!(ready(store.claim(claim)).unwrap(), Claim::Claimed);
            }
            start.elapsed()
        })
    });
    group.throughput(Throughput::Elements(2));
    group.bench_function("claim/2_threads", |b| {
        b.iter_custom(|iters| {
            let store = Arc::new(
                MemoryReplayStore::with_capacity(2 * iters as usize + 1)
                    .principal_budget(usize::MAX),
            );
            let mut all = claims(2 * iters, far);
            let second = all.split_off(iters as usize);
            let start = Instant::now();
            let threads: Vec<_> = [all, second]
                .into_iter()
                .map(|keys| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        for claim in keys {
                            ready(store.claim(&claim)).unwrap();
                        }
                    })
                })
                .collect();
            threads.into_iter().for_each(|t| t.join().unwrap());
            start.elapsed()
        })
    });
    group.finish();

    redis_benches(c, &rt);
}

fn redis_benches(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // The connection manager spawns its driver on the current runtime.
    let _runtime = rt.enter();
    let Ok(store) = mcp_confirm::store::RedisStore::open(&url) else {
        return;
    };
    let store = store.prefix("mcp-confirm-bench:");
    let far = SystemTime::now() + Duration::from_secs(60);
    if rt
        .block_on(store.is_used(Nonce::random(), PrincipalKey::from_bytes([0; 16])))
        .is_err()
    {
        eprintln!("redis_store benches skipped: no Redis at {url}");
        return;
    }
    let client = redis::Client::open(url.as_str()).unwrap();
    let raw = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    let mut group = c.benchmark_group("redis_store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("claim", |b| {
        b.to_async(rt).iter(|| async {
            black_box(
                store
                    .claim(&ClaimRequest::new(
                        Nonce::random(),
                        Owner::random(),
                        PrincipalKey::from_bytes(*Nonce::random().as_bytes()),
                        far,
                    ))
                    .await
                    .unwrap(),
            )
        })
    });
    group.bench_function("plain_set_nx", |b| {
        b.to_async(rt).iter(|| async {
            let mut raw = raw.clone();
            let key = format!("mcp-confirm-bench:raw:{}", Nonce::random().to_hex());
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg("1")
                .arg("NX")
                .arg("PX")
                .arg(60_000)
                .query_async(&mut raw)
                .await
                .unwrap();
            black_box(set)
        })
    });
    group.finish();
}

criterion_group!(layer_benches, benches);
criterion_main!(layer_benches);
