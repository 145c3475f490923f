//! What the memory stores hold in RAM: VmRSS for 1,000,000 pending approvals, 1,000,000 grants
//! and (for comparison) 1,000,000 live nonces. `cargo bench --bench memory` (about a minute), or
//! `cargo bench --bench memory -- 100000` for another count. Prints figures; asserts nothing.
//!
//! Each kind is measured in a child process of its own (this program run again with
//! `--phase <kind>`), so one kind's freed memory never counts towards, or is reused by, the
//! next: RSS is read from `/proc/self/status` after the stores are built empty and the record
//! template is made, and again after the records are in. The records go in through the public
//! store API (`ApprovalStore::propose`, `GrantStore::issue`, `ReplayStore::claim`), each a copy
//! of one the layer itself made (a browser approval proposed by a first call; a grant issued by a
//! queued tool's confirmation) with a fresh id, nonce and principal.
//!
//! The records go into one store of each kind, sized for them. `--spread` puts them in many
//! small stores instead, each sized so that its hash tables are as full as the one store's (the
//! output says how full, both ways): the way this was measured while `propose` and `issue` still
//! scanned the whole store for a principal's budget, which made one store's fill quadratic.

mod common;
use common::ready;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_confirm::approval::{Approval, ApprovalId, ApprovalStore};
use mcp_confirm::body::RequestBody;
use mcp_confirm::grant::{Grant, GrantId, GrantStore, MemoryGrantStore};
use mcp_confirm::store::{
    ClaimRequest, MemoryReplayStore, Nonce, Owner, PrincipalKey, ReplayStore,
};
use mcp_confirm::{
    ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal, Refusal, Revalidation,
    ToolPolicy,
};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

const DEFAULT_COUNT: usize = 1_000_000;
/// Pending approvals per principal: the most one principal may hold (`MAX_PENDING_APPROVALS`).
const APPROVALS_PER_PRINCIPAL: usize = mcp_confirm::approval::MAX_PENDING_APPROVALS;
/// Live nonces per principal.
const NONCES_PER_PRINCIPAL: usize = 100;
/// Long enough for no record to expire while the stores fill.
const LIVE_FOR: Duration = Duration::from_secs(3600);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = args
        .iter()
        .find_map(|a| a.replace(['_', ','], "").parse::<usize>().ok())
        .unwrap_or(DEFAULT_COUNT)
        .max(1);
    let single = !args.iter().any(|a| a == "--spread");
    if let Some(at) = args.iter().position(|a| a == "--phase") {
        match args.get(at + 1).map(String::as_str) {
            Some("approvals") => approvals(count, single),
            Some("grants") => grants(count, single),
            Some("nonces") => nonces(count),
            other => panic!("unknown phase {other:?}"),
        }
        return;
    }
    println!(
        "Memory of the memory stores: {} records of each kind, each kind in a child process of its own;",
        thousands(count)
    );
    println!(
        "VmRSS before (stores built empty, template made) and after the records are in. {} CPUs, {} DashMap shards.",
        std::thread::available_parallelism().map_or(1, usize::from),
        dashmap_shards()
    );
    let exe = std::env::current_exe().expect("this program's path");
    for phase in ["approvals", "grants", "nonces"] {
        println!();
        let mut child = std::process::Command::new(&exe);
        child.args(["--phase", phase, &count.to_string()]);
        if !single {
            child.arg("--spread");
        }
        let status = child.status().expect("run a phase");
        assert!(status.success(), "phase {phase} failed: {status}");
    }
}

// --- measuring -------------------------------------------------------------------------------

/// This process's resident set, in KiB.
fn rss_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

fn report(what: &str, count: usize, before: usize, after: usize, took: Duration) {
    let grown = after.saturating_sub(before);
    println!(
        "  {what}: RSS before {} KiB, after {} KiB, difference {} KiB = {} bytes per record (filled in {:.1} s)",
        thousands(before),
        thousands(after),
        thousands(grown),
        thousands((grown * 1024 + count / 2) / count),
        took.as_secs_f64()
    );
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How many shards a `DashMap` has here (dashmap's own rule).
fn dashmap_shards() -> usize {
    (std::thread::available_parallelism().map_or(1, usize::from) * 4).next_power_of_two()
}

/// How many buckets a hashbrown table (std's `HashMap`, each `DashMap` shard) has after `items`
/// inserts: it grows when an insert finds it full, to the smallest power of two whose capacity
/// (7/8 of the buckets; one less than the buckets below 8) holds them.
fn buckets(items: usize) -> usize {
    let mut b = 4usize;
    while (if b < 8 { b - 1 } else { b / 8 * 7 }) < items {
        b *= 2;
    }
    b
}

/// Records per store such that each table of `tables` per store is about as full as the tables
/// of one store of `count` would be: `(per store, load of one big store, load of these)`.
fn layout(count: usize, tables: usize, single: bool) -> (usize, f64, f64) {
    let per_table = count.div_ceil(tables);
    let load = per_table as f64 / buckets(per_table) as f64;
    if single {
        return (count, load, load);
    }
    // 1,024 buckets a table: small enough to fill fast, large enough that the random spread
    // over a DashMap's shards rarely crosses a growth threshold.
    let target = ((load * 1024.0).round() as usize).clamp(449, 896);
    let per_store = (target * tables).min(count);
    let mine = per_store.div_ceil(tables) as f64 / buckets(per_store.div_ceil(tables)) as f64;
    (per_store, load, mine)
}

fn random_principal() -> PrincipalKey {
    PrincipalKey::from_bytes(*Nonce::random().as_bytes())
}

// --- the records, as the layer makes them ----------------------------------------------------

fn request(body: &Value, principal: &str) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header(
            "mcp-name",
            body["params"]["name"].as_str().unwrap_or_default(),
        )
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    req.extensions_mut().insert(Principal::new(principal));
    req
}

fn call(tool: &str, capability: Value, id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": {"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities":{"elicitation": capability}},
        "name": tool,
        "arguments":{"workspaceUri":"file:///data/personal","title":"Groceries"}}})
}

fn three_notes() -> ToolPolicy {
    ToolPolicy::pick_one(|_: Lookup| async { Ok::<_, PolicyError>(common::three_candidates()) })
        .message("Choose one matching note and confirm deletion.")
        .choice_field("note_id")
        .select_into("note_id")
}

type Inner = tower::util::BoxCloneSyncService<
    http::Request<RequestBody<Full<Bytes>>>,
    http::Response<Full<Bytes>>,
    Infallible,
>;

/// A no-op inner service that keeps the grant id of the last confirmed call.
fn inner(grant: Arc<Mutex<Option<GrantId>>>) -> Inner {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |req: http::Request<RequestBody<Full<Bytes>>>| {
            if let Some(confirmed) = Confirmed::from_extensions(req.extensions()) {
                *grant.lock().unwrap() = confirmed.grant;
            }
            async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}")))) }
        },
    ))
}

async fn send(svc: &mcp_confirm::Confirm<Inner>, req: http::Request<Full<Bytes>>) -> Value {
    let response = svc.clone().oneshot(req).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A pending approval as the layer proposes it: the first call of a browser-approved tool with
/// three candidates, read back from the store.
fn approval_template() -> Approval {
    let store = MemoryReplayStore::with_capacity(100);
    let layer = ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .store(store.clone())
        .approval_url("https://notes.example/confirm/")
        .tool(
            "notes_destroy",
            three_notes()
                .input_key("destroy_approval")
                .approve_in_browser(),
        )
        .build();
    let svc = layer.layer(inner(Arc::default()));
    let answer = runtime().block_on(send(
        &svc,
        request(
            &call("notes_destroy", json!({"url":{}}), 1),
            "user-00000001",
        ),
    ));
    let params = &answer["result"]["inputRequests"]["destroy_approval"]["params"];
    let id = ApprovalId::from_hex(params["elicitationId"].as_str().expect("a URL elicitation"))
        .expect("an approval id");
    let approval = runtime()
        .block_on(store.approval(id))
        .unwrap()
        .expect("the layer stored the approval");
    assert_eq!(approval.choices.len(), 3);
    approval
}

/// A grant as a queued tool's confirmation issues it, read back from the store.
fn grant_template() -> Grant {
    let grants = Arc::new(MemoryGrantStore::new());
    let layer = ConfirmLayer::builder(KeyRing::single("k1", common::secret(7)).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .replay_store(MemoryReplayStore::with_capacity(100))
        .tool(
            "notes_delete",
            three_notes()
                .input_key("delete_choice")
                .queued()
                .revalidate(|_: Revalidation| async { Ok::<_, Refusal>(()) }),
        )
        .grant_store(Arc::clone(&grants))
        .build();
    let seen = Arc::new(Mutex::new(None));
    let svc = layer.layer(inner(Arc::clone(&seen)));
    let rt = runtime();
    let first = call("notes_delete", json!({"form":{}}), 1);
    let challenge = rt.block_on(send(&svc, request(&first, "user-00000001")));
    let mut retry = first.clone();
    retry["id"] = json!(2);
    retry["params"]["requestState"] = challenge["result"]["requestState"].clone();
    retry["params"]["inputResponses"] =
        json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":true}}});
    rt.block_on(send(&svc, request(&retry, "user-00000001")));
    let id = seen
        .lock()
        .unwrap()
        .expect("the queued call carried its grant");
    rt.block_on(grants.get(id))
        .unwrap()
        .expect("the layer issued the grant")
}

// --- the phases ------------------------------------------------------------------------------

/// How a fill went: how long it took, and its two costs, apart: a fixed cost per insert, and one
/// per record the store already held (the scan).
struct Fill {
    took: Duration,
    per_insert_ns: f64,
    per_held_ns: f64,
}

impl Fill {
    /// Inserts records `0..count` with `insert(i, store)`, `per_store` in each store in turn,
    /// timing the first and second half of each full store apart: the halves differ by the scans
    /// alone, which gives both costs.
    fn run(count: usize, per_store: usize, mut insert: impl FnMut(usize, usize)) -> Self {
        let (mut first, mut second) = (Duration::ZERO, Duration::ZERO);
        let mut full = 0usize;
        let start = Instant::now();
        for (store, from) in (0..count).step_by(per_store).enumerate() {
            let to = (from + per_store).min(count);
            let half = from + (to - from) / 2;
            let t0 = Instant::now();
            for i in from..half {
                insert(i, store);
            }
            let t1 = Instant::now();
            for i in half..to {
                insert(i, store);
            }
            if to - from == per_store {
                first += t1 - t0;
                second += t1.elapsed();
                full += 1;
            }
        }
        let took = start.elapsed();
        // Half a store of n costs a·n/2 + c·n²/8 first, a·n/2 + c·3n²/8 second.
        let n = per_store as f64;
        let per_held = 4.0 * (second.as_secs_f64() - first.as_secs_f64()).max(0.0)
            / (n * n * full.max(1) as f64);
        let rest = (count % per_store) as f64;
        let held = (count / per_store) as f64 * n * n / 2.0 + rest * rest / 2.0;
        let per_insert = (took.as_secs_f64() - per_held * held).max(0.0) / count as f64;
        Self {
            took,
            per_insert_ns: per_insert * 1e9,
            per_held_ns: per_held * 1e9,
        }
    }

    /// Prints both costs and how long one store of `count` would take to fill.
    fn explain(&self, call: &str, record: &str, count: usize) {
        let n = count as f64;
        let one_store = (self.per_insert_ns * n + self.per_held_ns * n * n / 2.0) / 1e9;
        println!(
            "  {call} costs about {:.0} ns plus {:.1} ns per {record} its store already holds, \
             so one store of {} would take about {:.0} s ({:.1} h) to fill",
            self.per_insert_ns,
            self.per_held_ns,
            thousands(count),
            one_store,
            one_store / 3600.0
        );
    }
}

fn approvals(count: usize, single: bool) {
    let template = approval_template();
    let (per_store, load, mine) = layout(count, dashmap_shards(), single);
    let stores: Vec<MemoryReplayStore> = (0..count.div_ceil(per_store))
        .map(|_| MemoryReplayStore::with_capacity(per_store))
        .collect();
    println!(
        "pending approvals (MemoryReplayStore, ApprovalStore::propose), as the layer proposes them: \
         3 choices, the policy's message, {} per principal",
        APPROVALS_PER_PRINCIPAL
    );
    println!(
        "  {} store(s) of up to {} approvals, capacity {} each (so the per-principal budget is {}, \
         and at most {} pending per principal); expected table load {:.3} (one store of all: {:.3})",
        stores.len(),
        thousands(per_store),
        thousands(per_store),
        thousands((per_store / 100).max(1)),
        APPROVALS_PER_PRINCIPAL.min((per_store / 100).max(1)),
        mine,
        load
    );
    let expires_at = SystemTime::now() + LIVE_FOR;
    let mut principal = random_principal();
    let before = rss_kib();
    let fill = Fill::run(count, per_store, |i, store| {
        if i % APPROVALS_PER_PRINCIPAL == 0 {
            principal = random_principal();
        }
        let mut approval = template.clone();
        approval.nonce = Nonce::random();
        approval.id = ApprovalId::for_nonce(&approval.nonce);
        approval.principal = principal;
        approval.subject = format!("user-{:08}", i / APPROVALS_PER_PRINCIPAL);
        approval.expires_at = expires_at;
        if let Err(e) = ready(stores[store].propose(&approval)) {
            panic!("approval {i} refused: {e}");
        }
    });
    let after = rss_kib();
    report("approvals", count, before, after, fill.took);
    println!(
        "  (an Approval is {} bytes inline, its map slot {} bytes; the rest is its strings and vectors)",
        std::mem::size_of::<Approval>(),
        std::mem::size_of::<(ApprovalId, Approval)>()
    );
    fill.explain("propose", "approval", count);
    std::hint::black_box(&stores);
}

fn grants(count: usize, single: bool) {
    let template = grant_template();
    let (per_store, load, mine) = layout(count, 1, single);
    // Tables of 2,048 buckets for grants: one table a store, so no spread to allow for.
    let (per_store, mine) = if single || per_store == count {
        (per_store, mine)
    } else {
        let per_store = ((load * 2048.0).round() as usize)
            .clamp(897, 1792)
            .min(count);
        (per_store, per_store as f64 / buckets(per_store) as f64)
    };
    let stores: Vec<MemoryGrantStore> = (0..count.div_ceil(per_store))
        .map(|_| {
            MemoryGrantStore::with_clock(per_store, mcp_confirm::clock::SystemClock::default())
                .principal_budget(per_store)
        })
        .collect();
    println!(
        "grants (MemoryGrantStore, GrantStore::issue), as a queued tool's confirmation issues them: \
         arguments with the chosen id written in, chosen id and version; one principal each"
    );
    println!(
        "  {} store(s) of up to {} grants, capacity {} and per-principal budget {} each; \
         expected table load {:.3} (one store of all: {:.3})",
        stores.len(),
        thousands(per_store),
        thousands(per_store),
        thousands(per_store),
        mine,
        load
    );
    let expires_at = SystemTime::now() + LIVE_FOR;
    let before = rss_kib();
    let fill = Fill::run(count, per_store, |i, store| {
        let mut grant = template.clone();
        grant.id = GrantId::random();
        grant.nonce = Nonce::random();
        grant.principal = random_principal();
        grant.subject = format!("user-{i:08}");
        grant.expires_at = expires_at;
        if let Err(e) = ready(stores[store].issue(&grant)) {
            panic!("grant {i} refused: {e}");
        }
    });
    let after = rss_kib();
    report("grants", count, before, after, fill.took);
    println!(
        "  (a Grant is {} bytes inline, its map slot {} bytes; the rest is its strings and its \
         arguments, a serde_json map)",
        std::mem::size_of::<Grant>(),
        std::mem::size_of::<(GrantId, Grant)>()
    );
    fill.explain("issue", "grant", count);
    std::hint::black_box(&stores);
}

fn nonces(count: usize) {
    let store = MemoryReplayStore::with_capacity(count).principal_budget(count);
    println!(
        "live nonces, for comparison (MemoryReplayStore, ReplayStore::claim), as a retry claims them: \
         in flight, {NONCES_PER_PRINCIPAL} per principal"
    );
    println!(
        "  one store, capacity {} and per-principal budget {}",
        thousands(count),
        thousands(count)
    );
    let expires_at = SystemTime::now() + LIVE_FOR;
    let mut principal = random_principal();
    let before = rss_kib();
    let start = Instant::now();
    for i in 0..count {
        if i % NONCES_PER_PRINCIPAL == 0 {
            principal = random_principal();
        }
        let claim = ClaimRequest::new(Nonce::random(), Owner::random(), principal, expires_at);
        if let Err(e) = ready(store.claim(&claim)) {
            panic!("claim {i} refused: {e}");
        }
    }
    let took = start.elapsed();
    let after = rss_kib();
    assert_eq!(store.len(), count);
    report("nonces", count, before, after, took);
}
