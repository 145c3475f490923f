//! What the features that landed after the first benchmarks cost: durable grants, browser
//! approvals, `tools/list` marking and standing approvals. `cargo bench --bench features`.
//!
//! Redis is found at `REDIS_URL` (default `redis://127.0.0.1:6379`), PostgreSQL at `DATABASE_URL`,
//! else `POSTGRES_URL`, else `host=127.0.0.1 user=postgres dbname=test`. A backend that does not
//! answer is skipped with a message. The benches keep their Redis keys under
//! `mcp-confirm-bench:features:` and their rows in the tables `mcp_confirm_bench_grants` and
//! `mcp_confirm_bench` (with its `_approvals`, `_standing` and `_passkeys` tables); all of them
//! are deleted when the benches end.
//!
//! Each bench checks once, before it is timed, that its operation succeeds (a grant begins, a
//! call reaches the inner service, the mark is in the listing). Where it costs nothing
//! measurable, each timed operation's answer is checked too, so a bench never times refusals.
//! Every iteration works on a record of its own, made before the clock starts (`iter_custom`,
//! with chunks set up and torn down outside the timed region).
//!
//! # `grant/*`: the [`GrantStore`] operations behind queued execution
//!
//! One iteration is one call of the store trait, on a grant of its own, issued as
//! `grant::conformance::grant` makes it (two arguments, a chosen id and a version). The trait's
//! names are used: `issue` records the grant, `begin` starts an attempt (the leased claim that
//! makes it single-use), `finish` ends the attempt with `Finish::Consumed` (the "consume").
//!
//! - `grant/memory/issue`: `MemoryGrantStore::issue` into a store holding only the grants of the
//!   current chunk (0 to 63). `issue_1k_held`, `issue_10k_held`: the same store also holding
//!   1,000 or 10,000 other live grants. Chunks are revoked and forgotten outside the clock, so
//!   the population stays put. (`issue` scans every held grant for the principal's budget: its
//!   cost grows with the population, hence the three.)
//! - `grant/memory/begin`: `begin` on a `Granted` grant; issued beforehand, 256 per fresh store.
//! - `grant/memory/finish`: `finish(lease, Consumed)` of the current attempt; issued and begun
//!   beforehand, 256 per fresh store.
//! - `grant/redis/{issue,begin,finish}`, `grant/postgres/{issue,begin,finish}`: the same on
//!   `RedisStore` (issue: one `SET NX`; begin, finish: `GET`, then a Lua compare-and-set)
//!   and `PostgresStore` (issue: one `INSERT`; begin, finish: one transaction with
//!   `SELECT … FOR UPDATE` and `UPDATE`). Every grant of a sample is issued (and begun) before
//!   the sample is timed.
//!
//! # `approval/*`: the browser approval flow's two steps
//!
//! - `approval/propose/store/memory`: `ApprovalStore::propose` of one pending approval
//!   (`store::conformance::approval`: two choices, a standing option) into a
//!   `MemoryReplayStore` holding only the current chunk's (0 to 63); `memory_1k_held`,
//!   `memory_10k_held`: also holding 1,000 or 10,000 other pending approvals (`propose` scans
//!   them all). Chunks expire (manual clock) and are pruned outside the clock.
//! - `approval/propose/store/{redis,postgres}`: the same on the Redis and PostgreSQL stores.
//! - `approval/propose/layer`: the realistic path: the first `tools/call` of a tool approved in
//!   the browser through the layer's HTTP face, from request to the end of the response body
//!   (parse, gates, resolver with 3 candidates, seal, `propose` into the memory store, the
//!   URL-mode elicitation). One principal per call (each may hold only 20 pending approvals).
//! - `approval/decide/store/{memory,redis,postgres}`: `ApprovalStore::decide` of a proposed
//!   approval by its caller (approve `note-7`); proposed before the clock starts.
//! - `approval/decide/page`: the realistic path: the approval page's `POST` (form body with the
//!   anti-forgery token, same-origin headers) driven in-process, to the end of the response body:
//!   token check, read the approval, `is_used` on the replay store, `decide`, the "Done" page.
//!   The first call and the `GET` of the page that yields the token happen before the clock.
//!
//! # `listing/*`: `tools/list` marking
//!
//! A `tools/list` answer of 10 tools (one confirmed, `notes_delete`; about 3.4 KB) from the inner
//! service, read to the end of the body: `listing/json/{bare,layer}` as `application/json`,
//! `listing/sse/{bare,layer}` as one `text/event-stream` event. `bare` is the inner service
//! alone; `layer` goes through a `ConfirmLayer` built with the server's tool list, which marks
//! `notes_delete` in its `_meta`.
//!
//! # `standing/use`
//!
//! A `tools/call` covered by a live standing approval, through the layer's HTTP face to the end
//! of the response body: the layer resolves the one candidate, finds the approval, spends one use
//! in the memory store and forwards to a no-op inner service (which counts the calls that carry
//! `Confirmed::standing`). Outside the clock, each chunk of up to 1,000 calls (the most uses a
//! standing approval may have) gets a new principal and a standing approval granted through the
//! two-round confirmation, the manual clock moving past the previous one's expiry.

mod common;
use common::ready;
use mcp_confirm_pages::LayerPages as _;

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Full};
use mcp_confirm::approval::{Approval, ApprovalId, ApprovalStore, Decided, Decider, Decision};
use mcp_confirm::body::RequestBody;
use mcp_confirm::clock::{Clock, ManualClock};
use mcp_confirm::grant::{Begin, Finish, Grant, GrantId, GrantStore, Lease, MemoryGrantStore};
use mcp_confirm::store::{
    MemoryReplayStore, Nonce, PostgresStore, PrincipalKey, RedisStore, ReplayStore,
};
use mcp_confirm::{
    Candidate, ConfirmLayer, Confirmed, KeyRing, Lookup, META_CONFIRMATION, PolicyError, Principal,
    ToolPolicy,
};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

/// Records made and torn down per chunk, outside the clock.
const CHUNK: u64 = 64;
/// Records made per fresh store for `begin` and `finish` (their cost does not depend on it).
const FRESH: u64 = 256;
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);
/// Long enough for a held record to outlive every move of a manual clock in a run.
const FOREVER: Duration = Duration::from_secs(20 * 365 * 24 * 3600);
const REDIS_PREFIX: &str = "mcp-confirm-bench:features:";
const PG_GRANTS: &str = "mcp_confirm_bench_grants";
const PG_STORE: &str = "mcp_confirm_bench";
const BASE: &str = "http://notes.example/confirm/";
const ORIGIN: &str = "http://notes.example";
const PERSONAL: &str = "file:///data/personal";

fn random_principal() -> PrincipalKey {
    PrincipalKey::from_bytes(*Nonce::random().as_bytes())
}

/// A fresh grant, issued now by `clock`, for a principal of its own.
fn grant(clock: &ManualClock, ttl: Duration) -> Grant {
    let mut grant = mcp_confirm::grant::conformance::grant(clock, ttl);
    grant.audience = "bench".to_owned();
    grant
}

/// A fresh pending approval, made now by `clock`, for a principal of its own.
fn approval(clock: &ManualClock, ttl: Duration) -> Approval {
    let mut approval = mcp_confirm::store::conformance::approval(random_principal(), ttl);
    approval.created_at = clock.now();
    approval.expires_at = clock.now() + ttl;
    approval
}

fn caller() -> Decider {
    Decider::new("alice", Vec::<String>::new(), true)
}

fn approve_note_7() -> Decision {
    Decision::Approved {
        chosen: "note-7".to_owned(),
        standing: false,
        narrowed: None,
    }
}

fn started(begin: Begin) -> Lease {
    match begin {
        Begin::Started(lease) => lease,
        other => panic!("the grant did not begin: {other:?}"),
    }
}

// --- HTTP plumbing ---------------------------------------------------------------------------

fn meta(capability: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation": capability}})
}

fn request(body: &Value, principal: &str) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28");
    if let Some(method) = body["method"].as_str() {
        builder = builder.header("mcp-method", method);
    }
    if let Some(tool) = body["params"]["name"].as_str() {
        builder = builder.header("mcp-name", tool);
    }
    let mut req = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    req.extensions_mut().insert(Principal::new(principal));
    req
}

/// Sends `req` and reads the whole response body.
async fn send<S, B>(svc: &S, req: http::Request<Full<Bytes>>) -> (http::StatusCode, Bytes)
where
    S: tower::Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = svc.clone().oneshot(req).await.unwrap();
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

fn text(bytes: &Bytes) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

type Inner = tower::util::BoxCloneSyncService<
    http::Request<RequestBody<Full<Bytes>>>,
    http::Response<Full<Bytes>>,
    Infallible,
>;

/// A no-op inner service that counts the calls it gets, and those a standing approval covered.
fn counting_inner(calls: Arc<AtomicUsize>, standing: Arc<AtomicUsize>) -> Inner {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |req: http::Request<RequestBody<Full<Bytes>>>| {
            calls.fetch_add(1, Ordering::Relaxed);
            if Confirmed::from_extensions(req.extensions()).is_some_and(|c| c.standing.is_some()) {
                standing.fetch_add(1, Ordering::Relaxed);
            }
            async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                    br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
                ))))
            }
        },
    ))
}

fn three_notes() -> ToolPolicy {
    ToolPolicy::pick_one(|_: Lookup| async { Ok::<_, PolicyError>(common::three_candidates()) })
        .message("Choose one matching note and confirm deletion.")
        .choice_field("note_id")
        .select_into("note_id")
}

// --- backends --------------------------------------------------------------------------------

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .or_else(|_| std::env::var("POSTGRES_URL"))
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into())
}

/// The Redis stores, if Redis answers.
fn redis_stores(rt: &tokio::runtime::Runtime) -> Option<(RedisStore, RedisStore)> {
    let url = redis_url();
    // The connection managers spawn their drivers on the current runtime.
    let _runtime = rt.enter();
    let probe = || -> Result<_, String> {
        let grants = RedisStore::open(&url)
            .map_err(|e| e.to_string())?
            .grant_prefix(format!("{REDIS_PREFIX}grant:"))
            .grant_retention(Duration::ZERO);
        let store = RedisStore::open(&url)
            .map_err(|e| e.to_string())?
            .grant_prefix(REDIS_PREFIX);
        rt.block_on(store.is_used(Nonce::random(), random_principal()))
            .map_err(|e| e.to_string())?;
        Ok((grants, store))
    };
    probe()
        .inspect_err(|why| eprintln!("Redis benches skipped: no Redis at {url} ({why})"))
        .ok()
}

/// The PostgreSQL stores, their tables made, if PostgreSQL answers.
fn postgres_stores(rt: &tokio::runtime::Runtime) -> Option<(PostgresStore, PostgresStore)> {
    let url = postgres_url();
    let _runtime = rt.enter();
    let probe = || -> Result<_, String> {
        let grants = PostgresStore::connect(&url)
            .and_then(|s| s.grants_table(PG_GRANTS))
            .map_err(|e| e.to_string())?;
        let store = PostgresStore::connect(&url)
            .and_then(|s| s.grants_table(PG_STORE))
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            grants.migrate().await.map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())
        })?;
        Ok((grants, store))
    };
    probe()
        .inspect_err(|why| eprintln!("PostgreSQL benches skipped: no PostgreSQL at {url} ({why})"))
        .ok()
}

/// Deletes what the benches left in Redis and PostgreSQL (best effort: a message on failure).
fn clean_up(rt: &tokio::runtime::Runtime, redis: bool, postgres: bool) {
    rt.block_on(async {
        if redis && let Err(e) = clean_redis().await {
            eprintln!("could not delete the benches' Redis keys: {e}");
        }
        if postgres && let Err(e) = clean_postgres().await {
            eprintln!("could not drop the benches' PostgreSQL tables: {e}");
        }
    });
}

async fn clean_redis() -> Result<(), redis::RedisError> {
    let client = redis::Client::open(redis_url().as_str())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{REDIS_PREFIX}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await?;
        if !keys.is_empty() {
            let _: i64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut connection)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

async fn clean_postgres() -> Result<(), tokio_postgres::Error> {
    let (client, connection) =
        tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    let result = client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {PG_GRANTS}, {PG_STORE}, {PG_STORE}_approvals, \
             {PG_STORE}_standing, {PG_STORE}_passkeys"
        ))
        .await;
    drop(client);
    let _ = driver.await;
    result
}

// --- grant/* ---------------------------------------------------------------------------------

/// `issue` into a memory store holding `held` other live grants; each chunk is revoked after it
/// is timed, and forgotten by the store (which drops ended grants when it is full) before the
/// next one.
fn memory_issue(held: usize) -> impl FnMut(u64) -> Duration {
    let clock = ManualClock::new(SystemTime::now());
    let capacity = held + CHUNK as usize + 1;
    let store = MemoryGrantStore::with_clock(capacity, clock.clone());
    for _ in 0..held {
        ready(store.issue(&grant(&clock, FOREVER))).unwrap();
    }
    // Entries held, live or ended.
    let mut len = held;
    move |iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let grants: Vec<Grant> = (0..n).map(|_| grant(&clock, TTL)).collect();
            let start = Instant::now();
            for g in &grants {
                assert!(ready(store.issue(g)).is_ok());
            }
            total += start.elapsed();
            len += n as usize;
            for g in &grants {
                ready(store.revoke(g.id)).unwrap();
            }
            // Fill up with ended grants; the issue that finds the store full makes it forget
            // them all (and keeps one ended spare).
            loop {
                let spare = grant(&clock, TTL);
                ready(store.issue(&spare)).unwrap();
                ready(store.revoke(spare.id)).unwrap();
                if len >= capacity {
                    len = held + 1;
                    break;
                }
                len += 1;
            }
            left -= n;
        }
        total
    }
}

/// A fresh memory grant store with `n` grants issued (and begun, with `begin`).
fn memory_issued(clock: &ManualClock, n: u64) -> (MemoryGrantStore, Vec<GrantId>) {
    let store = MemoryGrantStore::with_clock(2 * n as usize, clock.clone());
    let ids = (0..n)
        .map(|_| {
            let g = grant(clock, TTL);
            ready(store.issue(&g)).unwrap();
            g.id
        })
        .collect();
    (store, ids)
}

fn grant_benches(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    redis: Option<&RedisStore>,
    postgres: Option<&PostgresStore>,
) {
    let mut group = c.benchmark_group("grant");
    group.throughput(Throughput::Elements(1));

    // Once, before any timing: every operation does what its bench says.
    {
        let clock = ManualClock::new(SystemTime::now());
        let (store, ids) = memory_issued(&clock, 1);
        let lease = started(ready(store.begin(ids[0], LEASE)).unwrap());
        assert!(ready(store.finish(lease, Finish::Consumed)).unwrap());
        assert!(matches!(
            ready(store.begin(ids[0], LEASE)).unwrap(),
            Begin::Finished(_)
        ));
        memory_issue(1_000)(10);
    }
    for (name, held) in [
        ("memory/issue", 0),
        ("memory/issue_1k_held", 1_000),
        ("memory/issue_10k_held", 10_000),
    ] {
        // Made on first use: a filtered-out bench costs nothing.
        let mut run = None;
        group.bench_function(name, |b| {
            b.iter_custom(run.get_or_insert_with(|| memory_issue(held)))
        });
    }
    group.bench_function("memory/begin", |b| {
        b.iter_custom(|iters| {
            let clock = ManualClock::new(SystemTime::now());
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(FRESH);
                let (store, ids) = memory_issued(&clock, n);
                let start = Instant::now();
                for id in &ids {
                    black_box(started(ready(store.begin(*id, LEASE)).unwrap()));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    group.bench_function("memory/finish", |b| {
        b.iter_custom(|iters| {
            let clock = ManualClock::new(SystemTime::now());
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(FRESH);
                let (store, ids) = memory_issued(&clock, n);
                let leases: Vec<Lease> = ids
                    .iter()
                    .map(|id| started(ready(store.begin(*id, LEASE)).unwrap()))
                    .collect();
                let start = Instant::now();
                for lease in &leases {
                    assert!(ready(store.finish(*lease, Finish::Consumed)).unwrap());
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    group.finish();

    if let Some(grants) = redis {
        shared_grant_benches(c, rt, "redis", grants, 100);
    }
    if let Some(grants) = postgres {
        shared_grant_benches(c, rt, "postgres", grants, 20);
    }
}

/// `issue`, `begin` and `finish` on a shared store; every grant of a sample is issued (and
/// begun) before the sample is timed.
fn shared_grant_benches<S: GrantStore>(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    backend: &str,
    store: &S,
    samples: usize,
) {
    let _runtime = rt.enter();
    let fresh = |n: u64| -> Vec<Grant> {
        let clock = ManualClock::new(SystemTime::now());
        (0..n).map(|_| grant(&clock, TTL)).collect()
    };
    let issued = |n: u64| -> Vec<GrantId> {
        let grants = fresh(n);
        rt.block_on(async {
            for g in &grants {
                store.issue(g).await.unwrap();
            }
        });
        grants.iter().map(|g| g.id).collect()
    };
    let begun = |n: u64| -> Vec<Lease> {
        let ids = issued(n);
        rt.block_on(async {
            let mut leases = Vec::with_capacity(ids.len());
            for id in ids {
                leases.push(started(store.begin(id, LEASE).await.unwrap()));
            }
            leases
        })
    };
    // Once, before any timing.
    let lease = begun(1)[0];
    rt.block_on(async {
        assert!(store.finish(lease, Finish::Consumed).await.unwrap());
        assert!(matches!(
            store.begin(lease.grant, LEASE).await.unwrap(),
            Begin::Finished(_)
        ));
    });

    let mut group = c.benchmark_group("grant");
    group.throughput(Throughput::Elements(1));
    group.sample_size(samples);
    group.bench_function(format!("{backend}/issue"), |b| {
        b.iter_custom(|iters| {
            let grants = fresh(iters);
            rt.block_on(async {
                let start = Instant::now();
                for g in &grants {
                    store.issue(g).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.bench_function(format!("{backend}/begin"), |b| {
        b.iter_custom(|iters| {
            let ids = issued(iters);
            rt.block_on(async {
                let start = Instant::now();
                for id in &ids {
                    black_box(started(store.begin(*id, LEASE).await.unwrap()));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function(format!("{backend}/finish"), |b| {
        b.iter_custom(|iters| {
            let leases = begun(iters);
            rt.block_on(async {
                let start = Instant::now();
                for lease in &leases {
                    assert!(store.finish(*lease, Finish::Consumed).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

// --- approval/* ------------------------------------------------------------------------------

/// `propose` into a memory store holding `held` other pending approvals; each chunk expires
/// (manual clock) and is pruned after it is timed.
fn memory_propose(held: usize) -> impl FnMut(u64) -> Duration {
    let clock = ManualClock::new(SystemTime::now());
    let store = MemoryReplayStore::with_clock(held + 10_000, clock.clone());
    for _ in 0..held {
        ready(store.propose(&approval(&clock, FOREVER))).unwrap();
    }
    move |iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let approvals: Vec<Approval> = (0..n).map(|_| approval(&clock, TTL)).collect();
            let start = Instant::now();
            for a in &approvals {
                assert!(ready(store.propose(a)).is_ok());
            }
            total += start.elapsed();
            clock.advance(TTL + Duration::from_secs(1));
            store.prune_expired();
            left -= n;
        }
        total
    }
}

/// A layer whose `notes_destroy` is approved in the browser, on a memory store and a manual
/// clock; its page; the store and the clock.
fn browser_layer() -> (
    mcp_confirm::Confirm<Inner>,
    mcp_confirm_pages::ApprovalPage,
    MemoryReplayStore,
    ManualClock,
) {
    let clock = ManualClock::new(SystemTime::now());
    let store = MemoryReplayStore::with_clock(1_000_000, clock.clone());
    let layer = ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://bench.example/mcp")
        .ttl(Duration::from_secs(60))
        .without_challenge_rate_limit()
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
        .tool(
            "notes_destroy",
            three_notes()
                .input_key("destroy_approval")
                .approve_in_browser(),
        )
        .build();
    let page = layer.approval_page();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer.layer(counting_inner(calls.clone(), calls));
    (svc, page, store, clock)
}

fn destroy_call(id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(json!({"url":{}})), "name":"notes_destroy",
        "arguments":{"workspaceUri": PERSONAL, "title":"Groceries"}}})
}

/// The page URL of a URL-mode elicitation.
fn page_url(answer: &Bytes) -> String {
    let answer: Value = serde_json::from_slice(answer).unwrap();
    let params = &answer["result"]["inputRequests"]["destroy_approval"]["params"];
    assert_eq!(
        params["mode"], "url",
        "not a URL-mode elicitation: {answer}"
    );
    params["url"].as_str().unwrap().to_owned()
}

/// A `POST` of the page's form, as the principal's browser sends it.
fn page_post(url: &str, principal: &str, form: &str) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", ORIGIN)
        .header("sec-fetch-site", "same-origin")
        .body(Full::new(Bytes::from(form.to_owned())))
        .unwrap();
    req.extensions_mut().insert(Principal::new(principal));
    req
}

/// Proposes an approval through the layer as `principal`, opens its page as them, and returns
/// the page URL and the approving form (with the page's anti-forgery token).
async fn proposed_form(
    svc: &mcp_confirm::Confirm<Inner>,
    page: &mcp_confirm_pages::ApprovalPage,
    principal: &str,
) -> (String, String) {
    let (_, answer) = send(svc, request(&destroy_call(1), principal)).await;
    let url = page_url(&answer);
    let mut get = http::Request::get(&url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    get.extensions_mut().insert(Principal::new(principal));
    let (status, html) = send(page, get).await;
    let html = text(&html);
    assert_eq!(status, http::StatusCode::OK, "{html}");
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    let form = format!("csrf={}&choice=note-7&decision=approve", &html[at..at + 64]);
    (url, form)
}

fn approval_benches(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    redis: Option<&RedisStore>,
    postgres: Option<&PostgresStore>,
) {
    let mut group = c.benchmark_group("approval");
    group.throughput(Throughput::Elements(1));

    // --- propose ---
    memory_propose(10)(10);
    for (name, held) in [
        ("propose/store/memory", 0),
        ("propose/store/memory_1k_held", 1_000),
        ("propose/store/memory_10k_held", 10_000),
    ] {
        let mut run = None;
        group.bench_function(name, |b| {
            b.iter_custom(run.get_or_insert_with(|| memory_propose(held)))
        });
    }
    let (svc, page, store, clock) = browser_layer();
    let mut principals = 0u64;
    let mut next_principal = move || {
        principals += 1;
        format!("user-{principals:08}")
    };
    // Once: the first call proposes an approval whose page shows its choices.
    {
        let alice = next_principal();
        let (_, answer) = rt.block_on(send(&svc, request(&destroy_call(1), &alice)));
        let url = page_url(&answer);
        let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
        let proposed = ready(store.approval(id))
            .unwrap()
            .expect("the approval is stored");
        assert_eq!(proposed.choices.len(), 3);
    }
    group.bench_function("propose/layer", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                let requests: Vec<_> = (0..n)
                    .map(|i| request(&destroy_call(i), &next_principal()))
                    .collect();
                let mut answers = Vec::with_capacity(n as usize);
                let start = Instant::now();
                rt.block_on(async {
                    for req in requests {
                        answers.push(send(&svc, req).await.1);
                    }
                });
                total += start.elapsed();
                for answer in &answers {
                    assert!(
                        text(answer).contains("\"mode\":\"url\""),
                        "{}",
                        text(answer)
                    );
                }
                clock.advance(Duration::from_secs(300));
                store.prune_expired();
                left -= n;
            }
            total
        })
    });
    for (backend, store) in [
        ("redis", redis.map(|s| s as &dyn ApprovalStore)),
        ("postgres", postgres.map(|s| s as &dyn ApprovalStore)),
    ] {
        let Some(store) = store else { continue };
        let _runtime = rt.enter();
        group.sample_size(if backend == "postgres" { 20 } else { 100 });
        group.bench_function(format!("propose/store/{backend}"), |b| {
            b.iter_custom(|iters| {
                let clock = ManualClock::new(SystemTime::now());
                let approvals: Vec<Approval> = (0..iters).map(|_| approval(&clock, TTL)).collect();
                rt.block_on(async {
                    let start = Instant::now();
                    for a in &approvals {
                        store.propose(a).await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.sample_size(100);

    // --- decide ---
    group.bench_function("decide/store/memory", |b| {
        let clock = ManualClock::new(SystemTime::now());
        let store = MemoryReplayStore::with_clock(100_000, clock.clone());
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(FRESH);
                let ids: Vec<ApprovalId> = (0..n)
                    .map(|_| {
                        let a = approval(&clock, TTL);
                        ready(store.propose(&a)).unwrap();
                        a.id
                    })
                    .collect();
                let start = Instant::now();
                for id in &ids {
                    assert_eq!(
                        ready(store.decide(*id, caller(), approve_note_7())).unwrap(),
                        Decided::Recorded
                    );
                }
                total += start.elapsed();
                clock.advance(TTL + Duration::from_secs(1));
                store.prune_expired();
                left -= n;
            }
            total
        })
    });
    // Once: the page's POST approves.
    {
        let alice = next_principal();
        let (status, done) = rt.block_on(async {
            let (url, form) = proposed_form(&svc, &page, &alice).await;
            send(&page, page_post(&url, &alice, &form)).await
        });
        assert_eq!(status, http::StatusCode::OK, "{}", text(&done));
        assert!(text(&done).contains("Approved"), "{}", text(&done));
    }
    group.bench_function("decide/page", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                let posts: Vec<_> = rt.block_on(async {
                    let mut posts = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        let principal = next_principal();
                        let (url, form) = proposed_form(&svc, &page, &principal).await;
                        posts.push(page_post(&url, &principal, &form));
                    }
                    posts
                });
                let mut answers = Vec::with_capacity(n as usize);
                let start = Instant::now();
                rt.block_on(async {
                    for post in posts {
                        answers.push(send(&page, post).await);
                    }
                });
                total += start.elapsed();
                for (status, body) in &answers {
                    assert_eq!(*status, http::StatusCode::OK, "{}", text(body));
                }
                clock.advance(Duration::from_secs(300));
                store.prune_expired();
                left -= n;
            }
            total
        })
    });
    for (backend, store) in [
        ("redis", redis.map(|s| s as &dyn ApprovalStore)),
        ("postgres", postgres.map(|s| s as &dyn ApprovalStore)),
    ] {
        let Some(store) = store else { continue };
        let _runtime = rt.enter();
        let proposed = |n: u64| -> Vec<ApprovalId> {
            let clock = ManualClock::new(SystemTime::now());
            let approvals: Vec<Approval> = (0..n).map(|_| approval(&clock, TTL)).collect();
            rt.block_on(async {
                for a in &approvals {
                    store.propose(a).await.unwrap();
                }
            });
            approvals.iter().map(|a| a.id).collect()
        };
        let once = proposed(1)[0];
        assert_eq!(
            rt.block_on(store.decide(once, caller(), approve_note_7()))
                .unwrap(),
            Decided::Recorded
        );
        group.sample_size(if backend == "postgres" { 20 } else { 100 });
        group.bench_function(format!("decide/store/{backend}"), |b| {
            b.iter_custom(|iters| {
                let ids = proposed(iters);
                rt.block_on(async {
                    let start = Instant::now();
                    for id in &ids {
                        assert_eq!(
                            store.decide(*id, caller(), approve_note_7()).await.unwrap(),
                            Decided::Recorded
                        );
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

// --- listing/* -------------------------------------------------------------------------------

/// A server's ten tools: one destructive (`notes_delete`, confirmed), the others read-only or
/// not destructive.
fn ten_tools() -> Value {
    let read_only = json!({"readOnlyHint": true});
    let additive = json!({"readOnlyHint": false, "destructiveHint": false});
    let object = |props: &[&str]| {
        let properties: serde_json::Map<String, Value> = props
            .iter()
            .map(|p| {
                (
                    (*p).to_owned(),
                    json!({"type": "string", "description": format!("The note's {p}.")}),
                )
            })
            .collect();
        json!({"type": "object", "properties": properties})
    };
    let tool = |name: &str, description: &str, props: &[&str], annotations: &Value| {
        json!({"name": name, "title": name.replace('_', " "), "description": description,
               "inputSchema": object(props), "annotations": annotations})
    };
    json!([
        tool(
            "notes_list",
            "List the notes of a workspace, newest first.",
            &["workspaceUri", "cursor"],
            &read_only
        ),
        tool(
            "notes_get",
            "Read one note with its full text.",
            &["workspaceUri", "note_id"],
            &read_only
        ),
        tool(
            "notes_search",
            "Search the notes of a workspace by title and text.",
            &["workspaceUri", "query"],
            &read_only
        ),
        tool(
            "notes_create",
            "Create a note in a workspace.",
            &["workspaceUri", "title", "text"],
            &additive
        ),
        tool(
            "notes_append",
            "Append text to a note.",
            &["workspaceUri", "note_id", "text"],
            &additive
        ),
        tool(
            "notes_tag",
            "Add a tag to a note.",
            &["workspaceUri", "note_id", "tag"],
            &additive
        ),
        tool(
            "notes_export",
            "Export the notes of a workspace as Markdown.",
            &["workspaceUri", "format"],
            &read_only
        ),
        tool(
            "notes_history",
            "List the versions of a note.",
            &["workspaceUri", "note_id"],
            &read_only
        ),
        tool(
            "workspaces_list",
            "List the workspaces the user may use.",
            &["cursor"],
            &read_only
        ),
        tool(
            "notes_delete",
            "Delete one note for good.",
            &["workspaceUri", "title", "note_id"],
            &json!({"readOnlyHint": false, "destructiveHint": true})
        ),
    ])
}

/// An inner service that answers every request with `body` as `content_type`.
fn listing_inner<B: Send + 'static>(
    body: Bytes,
    content_type: &'static str,
) -> tower::util::BoxCloneSyncService<http::Request<B>, http::Response<Full<Bytes>>, Infallible> {
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_req: http::Request<B>| {
        let body = body.clone();
        async move {
            Ok::<_, Infallible>(
                http::Response::builder()
                    .header("content-type", content_type)
                    .body(Full::new(body))
                    .unwrap(),
            )
        }
    }))
}

fn listing_benches(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let tools = ten_tools();
    let answer = json!({"jsonrpc":"2.0","id":2,"result":{"tools": tools}}).to_string();
    let json_body = Bytes::from(answer.clone());
    let sse_body = Bytes::from(format!("event: message\ndata: {answer}\n\n"));
    let list = json!({"jsonrpc":"2.0","id":2,"method":"tools/list",
                      "params":{"_meta": meta(json!({"form":{}}))}});
    let layer = || {
        ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
            .tool_list(tools.clone())
            .audience("https://bench.example/mcp")
            .without_challenge_rate_limit()
            .replay_store(MemoryReplayStore::with_capacity(10_000))
            .tool("notes_delete", three_notes().input_key("delete_choice"))
            .build()
    };
    let mut group = c.benchmark_group("listing");
    group.throughput(Throughput::Elements(1));
    for (framing, body, content_type) in [
        ("json", json_body, "application/json"),
        ("sse", sse_body, "text/event-stream"),
    ] {
        let bare = listing_inner::<Full<Bytes>>(body.clone(), content_type);
        let marked = layer().layer(listing_inner(body.clone(), content_type));
        // Once: the layer marks notes_delete, and only it; the bare answer is the inner's.
        let (_, out) = rt.block_on(send(&marked, request(&list, "alice")));
        let out = text(&out);
        assert_eq!(out.matches(META_CONFIRMATION).count(), 1, "{out}");
        let data = out
            .trim()
            .strip_prefix("event: message\ndata: ")
            .unwrap_or(out);
        let parsed: Value = serde_json::from_str(data).unwrap();
        let delete = &parsed["result"]["tools"][9];
        assert_eq!(delete["name"], "notes_delete");
        assert_eq!(
            delete["_meta"][META_CONFIRMATION]["kind"], "pick_one",
            "{delete}"
        );
        let (_, plain) = rt.block_on(send(&bare, request(&list, "alice")));
        assert_eq!(plain, body);
        group.bench_function(format!("{framing}/bare"), |b| {
            b.to_async(rt)
                .iter(|| async { black_box(send(&bare, request(&list, "alice")).await) })
        });
        group.bench_function(format!("{framing}/layer"), |b| {
            b.to_async(rt)
                .iter(|| async { black_box(send(&marked, request(&list, "alice")).await) })
        });
    }
    group.finish();
}

// --- standing/* ------------------------------------------------------------------------------

fn standing_benches(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    const USES: u32 = mcp_confirm::store::standing::MAX_STANDING_USES;
    let clock = ManualClock::new(SystemTime::now());
    let store = MemoryReplayStore::with_clock(1_000_000, clock.clone());
    let policy = ToolPolicy::pick_one(|_: Lookup| async {
        Ok::<_, PolicyError>(vec![
            Candidate::labelled("note-20", "Taxes (note-20)").with_version("v1-20"),
        ])
    })
    .message("Confirm deleting this note.")
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id")
    .standing(Duration::from_secs(600), USES, |lookup: &Lookup| {
        lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
    });
    let layer = ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://bench.example/mcp")
        .without_challenge_rate_limit()
        .clock(clock.clone())
        .replay_store(store.clone())
        .standing_store(store.clone())
        .tool("notes_delete", policy)
        .build();
    let (calls, covered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let svc = layer.layer(counting_inner(calls.clone(), covered.clone()));
    let call = |id: u64| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "_meta": meta(json!({"form":{}})), "name":"notes_delete",
            "arguments":{"workspaceUri": PERSONAL, "title":"Taxes"}}})
    };
    let mut principals = 0u64;
    // A new principal, past the previous one's standing approval, with one of her own granted
    // through the two rounds.
    let mut granted = || -> String {
        principals += 1;
        let principal = format!("user-{principals:08}");
        clock.advance(Duration::from_secs(601));
        rt.block_on(async {
            let (_, first) = send(&svc, request(&call(1), &principal)).await;
            let first: Value = serde_json::from_slice(&first).unwrap();
            let state = first["result"]["requestState"]
                .as_str()
                .expect("a form")
                .to_owned();
            let mut retry = call(2);
            retry["params"]["requestState"] = json!(state);
            retry["params"]["inputResponses"] = json!({"delete_choice":{"action":"accept",
                "content":{"note_id":"note-20","confirm":true,"remember":"standing"}}});
            let before = calls.load(Ordering::Relaxed);
            let (_, ran) = send(&svc, request(&retry, &principal)).await;
            assert_eq!(calls.load(Ordering::Relaxed), before + 1, "{}", text(&ran));
        });
        principal
    };
    // Once: covered calls run without a form, each as a standing approval's use.
    {
        let alice = granted();
        let before = covered.load(Ordering::Relaxed);
        for id in 10..13 {
            let (_, answer) = rt.block_on(send(&svc, request(&call(id), &alice)));
            assert!(
                !text(&answer).contains("input_required"),
                "{}",
                text(&answer)
            );
        }
        assert_eq!(covered.load(Ordering::Relaxed), before + 3);
    }
    let mut group = c.benchmark_group("standing");
    group.throughput(Throughput::Elements(1));
    group.bench_function("use", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(u64::from(USES));
                let principal = granted();
                let requests: Vec<_> = (0..n).map(|i| request(&call(10 + i), &principal)).collect();
                let before = covered.load(Ordering::Relaxed);
                let start = Instant::now();
                rt.block_on(async {
                    for req in requests {
                        black_box(send(&svc, req).await);
                    }
                });
                total += start.elapsed();
                assert_eq!(covered.load(Ordering::Relaxed), before + n as usize);
                left -= n;
            }
            total
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = redis_stores(&rt);
    let postgres = postgres_stores(&rt);
    grant_benches(
        c,
        &rt,
        redis.as_ref().map(|(grants, _)| grants),
        postgres.as_ref().map(|(grants, _)| grants),
    );
    approval_benches(
        c,
        &rt,
        redis.as_ref().map(|(_, store)| store),
        postgres.as_ref().map(|(_, store)| store),
    );
    listing_benches(c, &rt);
    standing_benches(c, &rt);
    clean_up(&rt, redis.is_some(), postgres.is_some());
}

criterion_group!(feature_benches, benches);
criterion_main!(feature_benches);
