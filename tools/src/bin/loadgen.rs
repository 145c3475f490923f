//! A load generator for the notes server: what ConfirmLayer costs under load, end to end.
//!
//! ```text
//! cargo build --release --all-features --example notes_server
//! cargo build --release -p mcp-confirm-tools --bin loadgen
//! target/release/loadgen [--flow all|list|confirm|confirm-files|files-vs-memory|confirm-redis|standing|audit-log|observe|principals|peer|challenges|gateway]
//!     [--clients 8] [--duration 10] [--runs 3] [--requests N] [--redis redis://127.0.0.1:6379]
//!     [--warmup-ms 300] [--server-threads N] [--wrap 'taskset -c 1']
//!     [--principals 1000] [--peer-dir tools/peer-ts] [--node node]
//!     [--python target/ci-clients/venv/bin/python] [--upstream-py tools/upstream-py/server.py]
//!     [--gateway target/<profile>/mcp-confirm-gateway] [--gateway-log info]
//!     [--upstream-list-ttl-ms MS]
//! ```
//!
//! `--server-threads` sets the server's worker threads; `--wrap` runs the server under another
//! command (`taskset` to pin it to a core, `valgrind --tool=callgrind` to count its instructions;
//! the server is stopped with SIGTERM so such a wrapper can write its output).
//!
//! It starts the `notes_server` example built in the same target directory and profile
//! (`target/<profile>/examples/notes_server` for `target/<profile>/loadgen`, so `cargo run
//! --release -p mcp-confirm-tools --bin loadgen -- …` works too) on a free loopback port with its
//! notes in memory, so the layers are what is measured and not the disk, and drives it over
//! HTTP/1.1 keep-alive with `--clients` concurrent connections for `--duration` seconds (or
//! `--requests` operations). Each run gets a fresh server. It prints throughput, latency
//! percentiles and the CPU time the server and the generator spent per operation (from `/proc`).
//! The server runs with `RUST_LOG=warn`, so audit events are not logged.
//!
//! Flows:
//! - `list`: `notes_list` through the server without ConfirmLayer, then with it, alternating
//!   for `--runs` runs each; prints the throughput lost to the layer (median against median).
//! - `confirm`: the full two-round confirmation: first call (a form with three candidates), then
//!   the accepting retry, which deletes one note. One operation is both rounds; every operation
//!   uses its own title, so every form offers three notes.
//! - `confirm-files`: the same against the default, file-backed notes (a fresh data directory per
//!   run, seeded with the titles the run needs, three files each); the layer is the same.
//! - `files-vs-memory`: `confirm` and `confirm-files` alternating for `--runs` runs each, then
//!   the file-backed rate as a share of the in-memory one (medians, and run by run).
//! - `confirm-redis`: the same with the Redis replay store.
//! - `standing`: deletes under a standing approval (the demo's `notes_delete` offers one for 10
//!   minutes and 20 calls per workspace): each call names a title of one note, so a live
//!   approval covers it with no form; when its uses run out (every 20th delete, or another
//!   client's grant replaced it), the call gets the form and the client answers it choosing the
//!   standing option again. One operation is one note deleted, either way. Alternates for
//!   `--runs` runs each with `notes_list` through the layer (plain pass-through) and with the
//!   two-round `confirm` flow, and prints the rates as ratios (medians).
//! - `audit-log`: the two-round `confirm` flow without the decision log, then with it (the
//!   demo's file sink in a fresh directory, fsync per batch), alternating for `--runs` runs each;
//!   prints the rate with the log as a share of the rate without (medians). Every other flow
//!   runs its server without the log.
//! - `observe`: the two-round `confirm` flow (notes in memory, the memory replay store, no
//!   decision log) with the server's metrics and spans off (`--no-metrics`: no recorder, no
//!   `/metrics`), then on (`--otel`: the Prometheus recorder, and the spans through an
//!   OpenTelemetry SDK tracer with no exporter), alternating for `--runs` runs each; prints the
//!   rate with them as a share of the rate without (medians). Every other flow runs the server
//!   as it starts by default: metrics on, spans off.
//! - `principals`: the realistic shape next to the measuring one: the two-round `confirm` flow
//!   of one principal with the per-principal limits off, alternating with the same flow spread
//!   over `--principals` principals (`load-<k>`, one per operation in turn) under the server's
//!   default challenge rate and per-principal budget (only the store's capacity is sized).
//! - `peer`: the same notes server written with the official TypeScript SDK v2
//!   (`tools/peer-ts`, run with `--node`; `npm ci --prefix tools/peer-ts` first): `notes_list`
//!   and the two-round confirmation against ours, alternating, as ratios of the rates.
//! - `challenges`: first calls only, never answered: the server's memory (RSS) at the start and
//!   at the end shows that a challenge keeps no server state.
//! - `gateway`: what `mcp-confirm-gateway` adds in front of servers with no confirmation of their
//!   own: the TypeScript SDK's notes server (`tools/peer-ts/upstream-plain.mjs`, run with
//!   `--node`; `npm ci --prefix tools/peer-ts` first) and the Python SDK's
//!   (`--upstream-py`, run with `--python`: the venv `.ci/install-clients.sh` makes). Against
//!   each, alternating for `--runs` runs: `notes_list` (a read tool the gateway passes) reached
//!   directly, then through the gateway; `notes_delete` reached directly (one round: it
//!   deletes), then through the gateway (two rounds: the yes/no form, then the accepting retry
//!   with the same arguments and `requestState`, after which the upstream deletes). Each run gets
//!   a fresh upstream, seeded with a note per title it deletes (`--load-titles`), and a fresh
//!   gateway in front of it: the release binary next to this one (`cargo build --release -p
//!   mcp-confirm-gateway`; or `--gateway`), configured in a fresh temporary directory (static
//!   tokens for `--principals` load principals, over which the calls are spread so that the
//!   layer's default per-principal limits hold, the memory store, a key from a file), logging at
//!   `--gateway-log` (its default, `info`: a line per `tools/call`) to a file there. Prints the
//!   rates, median and p99 latencies, their ratios (through the gateway against direct), and the
//!   CPU the upstream, the gateway and the generator each used (from `/proc`), in cores over the
//!   run and per call; the "server" columns are the upstream's. `--server-threads` sets the
//!   gateway's worker threads; `--wrap` is not applied. Both SDKs say by default that their
//!   tool list is stale at once (`ttlMs: 0`), which the gateway honours by listing the tools
//!   again before every call; `--upstream-list-ttl-ms` makes both upstreams give their list that
//!   long instead, which measures the gateway with the list cached.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

const USAGE: &str = "usage: loadgen [--flow all|list|confirm|confirm-files|files-vs-memory|confirm-redis|standing|audit-log|observe|principals|peer|challenges|gateway] \
    [--clients N] [--duration SECS] [--runs N] [--requests N] [--redis URL] [--warmup-ms MS] \
    [--server-threads N] [--wrap 'COMMAND ARGS'] [--principals N] [--peer-dir DIR] [--node BIN] \
    [--python BIN] [--upstream-py FILE] [--gateway BIN] [--gateway-log FILTER] \
    [--upstream-list-ttl-ms MS]";
const KEY: &str = "172800cae78ee83db26ec88a3ab8f997cbf321dc49a6d6a759ea84bae8a73188";
/// Titles seeded per second of a confirm run: far above what two cores can confirm.
const TITLES_PER_SECOND: u64 = 25_000;
/// The same for the TypeScript SDK peer (it confirms a few hundred a second).
const PEER_TITLES_PER_SECOND: u64 = 3_000;
/// The same for file-backed notes (each title is three files to write before the run).
const FILE_TITLES_PER_SECOND: u64 = 10_000;
/// The same for the gateway flow's upstreams (a note per title; they delete a few thousand a
/// second at most).
const UPSTREAM_TITLES_PER_SECOND: u64 = 10_000;
/// The bearer token the upstreams accept: the operator's, which the gateway sends them and the
/// direct calls use.
const OPERATOR_TOKEN: &str = "operator-token-0123456789";
/// What follows `load-<k>-token` in the gateway's tokens (it wants 16 characters or more).
const GATEWAY_TOKEN_SUFFIX: &str = "-0123456789";

struct Flags {
    flow: String,
    clients: usize,
    duration: Duration,
    runs: usize,
    requests: Option<u64>,
    redis: String,
    warmup: Duration,
    /// A command the server runs under, e.g. `valgrind --tool=callgrind`.
    wrap: Vec<String>,
    /// Worker threads of the server's runtime (`TOKIO_WORKER_THREADS`); `None`: one per core.
    server_threads: Option<u64>,
    /// Principals of the realistic shape (`principals` flow).
    principals: u64,
    /// The TypeScript SDK peer's directory (`tools/peer-ts`, with its `node_modules`).
    peer_dir: PathBuf,
    /// The Node.js the peer runs on.
    node: String,
    /// The Python the gateway flow's Python upstream runs on (with the official `mcp` SDK).
    python: PathBuf,
    /// The gateway flow's Python upstream (`tools/upstream-py/server.py`).
    upstream_py: PathBuf,
    /// The gateway's binary (default: `mcp-confirm-gateway` beside this one).
    gateway: PathBuf,
    /// The gateway's log filter (`RUST_LOG`).
    gateway_log: String,
    /// The `ttlMs` the gateway flow's upstreams give their tool list; `None`: their SDK's
    /// default (0).
    upstream_list_ttl_ms: Option<u64>,
}

fn flags() -> Result<Flags, String> {
    let mut flags = Flags {
        flow: "all".into(),
        clients: 8,
        duration: Duration::from_secs(10),
        runs: 3,
        requests: None,
        redis: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        warmup: Duration::from_millis(300),
        wrap: Vec::new(),
        server_threads: None,
        principals: 1_000,
        peer_dir: PathBuf::from("tools/peer-ts"),
        node: "node".into(),
        python: PathBuf::from("target/ci-clients/venv/bin/python"),
        upstream_py: PathBuf::from("tools/upstream-py/server.py"),
        gateway: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("mcp-confirm-gateway"),
        gateway_log: "info".into(),
        upstream_list_ttl_ms: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--flow" => flags.flow = value()?,
            "--clients" => flags.clients = number(value()?)?.max(1) as usize,
            "--duration" => flags.duration = Duration::from_secs(number(value()?)?.max(1)),
            "--runs" => flags.runs = number(value()?)?.max(1) as usize,
            "--requests" => flags.requests = Some(number(value()?)?),
            "--redis" => flags.redis = value()?,
            "--server-threads" => flags.server_threads = Some(number(value()?)?.max(1)),
            "--warmup-ms" => flags.warmup = Duration::from_millis(number(value()?)?),
            "--wrap" => flags.wrap = value()?.split_whitespace().map(str::to_owned).collect(),
            "--principals" => flags.principals = number(value()?)?.max(2),
            "--peer-dir" => flags.peer_dir = PathBuf::from(value()?),
            "--node" => flags.node = value()?,
            "--python" => flags.python = PathBuf::from(value()?),
            "--upstream-py" => flags.upstream_py = PathBuf::from(value()?),
            "--gateway" => flags.gateway = PathBuf::from(value()?),
            "--gateway-log" => flags.gateway_log = value()?,
            "--upstream-list-ttl-ms" => flags.upstream_list_ttl_ms = Some(number(value()?)?),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    Ok(flags)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("{e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let flags = flags()?;
    // The generator takes one core; the server gets the rest.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // `target/<profile>/loadgen` starts `target/<profile>/examples/notes_server`.
    let server_bin = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("examples")
        .join("notes_server");
    let flows: &[&str] = match flags.flow.as_str() {
        "all" => &[
            "list",
            "confirm",
            "confirm-files",
            "confirm-redis",
            "standing",
        ],
        "standing" => &["standing"],
        "audit-log" => &["audit-log"],
        "observe" => &["observe"],
        "principals" => &["principals"],
        "peer" => &["peer"],
        "list" => &["list"],
        "confirm" => &["confirm"],
        "confirm-files" => &["confirm-files"],
        "files-vs-memory" => &["files-vs-memory"],
        "confirm-redis" => &["confirm-redis"],
        "challenges" => &["challenges"],
        "gateway" => &["gateway"],
        other => return Err(format!("unknown flow {other:?}\n{USAGE}")),
    };
    // The gateway flow starts upstreams of other languages, not the notes server.
    if flows.iter().any(|flow| *flow != "gateway") && !server_bin.exists() {
        return Err(format!(
            "{} not found: build it first with `cargo build --release --all-features --example notes_server`",
            server_bin.display()
        ));
    }
    if flows.contains(&"gateway") {
        gateway_prerequisites(&flags)?;
    }
    println!(
        "loadgen: {} clients, {}, {} run(s) per flow, {} cores",
        flags.clients,
        match flags.requests {
            Some(n) => format!("{n} operations per run"),
            None => format!("{} s per run", flags.duration.as_secs()),
        },
        flags.runs,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    print_header();
    let mut errors = 0;
    for flow in flows {
        match *flow {
            "list" => {
                let [bare, layered] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [(Flow::List, false), (Flow::List, true)],
                    &mut errors,
                )?;
                let (b, l) = (median(&bare, Report::rate), median(&layered, Report::rate));
                // Runs alternate, so each layered run has a neighbour measured under the same
                // conditions: the run-by-run ratios are less noisy than the medians.
                let paired = paired(&bare, &layered, |b, l| (l.rate() / b.rate() - 1.0) * 100.0);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                let (cpu_b, cpu_l) = (median(&bare, cpu), median(&layered, cpu));
                println!(
                    "notes_list with ConfirmLayer: {l:.0} ops/s against {b:.0} without ({:+.1}%, \
                     medians); run by run {}; server CPU {cpu_l:.1} against {cpu_b:.1} µs/op \
                     ({:+.1}%, medians)",
                    (l / b - 1.0) * 100.0,
                    run_by_run(&paired, true),
                    (cpu_l / cpu_b - 1.0) * 100.0,
                );
            }
            "standing" => {
                let [standing, list, confirm] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [
                        (Flow::Standing, true),
                        (Flow::List, true),
                        (Flow::Confirm, true),
                    ],
                    &mut errors,
                )?;
                let rate = |r: &[Report]| median(r, Report::rate);
                let (s, l, c) = (rate(&standing), rate(&list), rate(&confirm));
                let forms = median(&standing, |r| r.forms as f64 / r.ops.max(1) as f64 * 100.0);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "deletes under a standing approval: {s:.0}/s; {:.2}× notes_list passing \
                     through the layer ({l:.0}/s), {:.1}× confirming every delete in two rounds \
                     ({c:.0} flows/s) (medians); server CPU {:.0} µs per delete against {:.0} per \
                     notes_list and {:.0} per two-round flow; {forms:.1}% of the deletes showed a \
                     form (the approval's uses ran out, or another client's grant replaced it, \
                     and the client granted it again)",
                    s / l,
                    s / c,
                    median(&standing, cpu),
                    median(&list, cpu),
                    median(&confirm, cpu),
                );
            }
            "principals" => {
                let [one, many] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [(Flow::Confirm, true), (Flow::ConfirmShared, true)],
                    &mut errors,
                )?;
                let (a, b) = (median(&one, Report::rate), median(&many, Report::rate));
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "two-round confirmation, {} principals under the default limits: {b:.0} \
                     flows/s against {a:.0} for one principal with the limits off ({:.1}% of \
                     it, medians); server CPU {:.0} against {:.0} µs/flow (medians)",
                    flags.principals,
                    b / a * 100.0,
                    median(&many, cpu),
                    median(&one, cpu),
                );
            }
            "peer" => {
                if !flags.peer_dir.join("node_modules").exists() {
                    return Err(format!(
                        "{}/node_modules not found: run `npm ci --prefix {}` first",
                        flags.peer_dir.display(),
                        flags.peer_dir.display()
                    ));
                }
                let [list, peer_list, confirm, peer_confirm] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [
                        (Flow::List, true),
                        (Flow::PeerList, true),
                        (Flow::Confirm, true),
                        (Flow::PeerConfirm, true),
                    ],
                    &mut errors,
                )?;
                let ratios = |ours: &[Report], theirs: &[Report]| {
                    let paired = paired(ours, theirs, |o, t| o.rate() / t.rate());
                    (
                        median(ours, Report::rate) / median(theirs, Report::rate),
                        paired[0],
                        paired[paired.len() - 1],
                    )
                };
                let (l, l_lo, l_hi) = ratios(&list, &peer_list);
                let (c, c_lo, c_hi) = ratios(&confirm, &peer_confirm);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "against the TypeScript SDK peer ({} clients): notes_list {l:.1}× its rate \
                     (run by run {l_lo:.1}× to {l_hi:.1}×; server CPU {:.0} against {:.0} µs/op); \
                     two-round confirmation {c:.1}× (run by run {c_lo:.1}× to {c_hi:.1}×; server \
                     CPU {:.0} against {:.0} µs/flow); medians",
                    flags.clients,
                    median(&list, cpu),
                    median(&peer_list, cpu),
                    median(&confirm, cpu),
                    median(&peer_confirm, cpu),
                );
            }
            "audit-log" => {
                let [off, on] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [(Flow::Confirm, true), (Flow::ConfirmLogged, true)],
                    &mut errors,
                )?;
                let (a, b) = (median(&off, Report::rate), median(&on, Report::rate));
                let paired = paired(&off, &on, |off, on| on.rate() / off.rate() * 100.0);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "two-round confirmation with the decision log (file sink): {b:.0} flows/s \
                     against {a:.0} without ({:.1}% of it, {:+.1}%, medians); run by run {}; \
                     server CPU {:.0} against {:.0} µs/flow (medians)",
                    b / a * 100.0,
                    (b / a - 1.0) * 100.0,
                    run_by_run(&paired, false),
                    median(&on, cpu),
                    median(&off, cpu),
                );
            }
            "observe" => {
                let [off, on] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [
                        (Flow::ConfirmUnobserved, true),
                        (Flow::ConfirmObserved, true),
                    ],
                    &mut errors,
                )?;
                let (a, b) = (median(&off, Report::rate), median(&on, Report::rate));
                let paired = paired(&off, &on, |off, on| on.rate() / off.rate() * 100.0);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "two-round confirmation with metrics and spans (--otel): {b:.0} flows/s \
                     against {a:.0} without (--no-metrics) ({:.1}% of it, {:+.1}%, medians); run \
                     by run {}; server CPU {:.1} against {:.1} µs/flow (medians)",
                    b / a * 100.0,
                    (b / a - 1.0) * 100.0,
                    run_by_run(&paired, false),
                    median(&on, cpu),
                    median(&off, cpu),
                );
            }
            "files-vs-memory" => {
                let [memory, files] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [(Flow::Confirm, true), (Flow::ConfirmFiles, true)],
                    &mut errors,
                )?;
                let (m, f) = (median(&memory, Report::rate), median(&files, Report::rate));
                let paired = paired(&memory, &files, |m, f| f.rate() / m.rate() * 100.0);
                let cpu = |r: &Report| r.per_op_us(r.server_cpu);
                println!(
                    "two-round confirmation, file-backed notes: {f:.0} flows/s against {m:.0} with \
                     notes in memory ({:.0}% of it, medians); run by run {:.0}% to {:.0}%; server \
                     CPU {:.0} against {:.0} µs/flow (medians)",
                    f / m * 100.0,
                    paired[0],
                    paired[paired.len() - 1],
                    median(&files, cpu),
                    median(&memory, cpu),
                );
            }
            "gateway" => {
                // Each upstream reached directly, then through the gateway: the call the gateway
                // passes, then the one it confirms; the runs of both upstreams interleaved.
                let (ts, py) = (Upstream::Ts, Upstream::Py);
                let [
                    ts_list,
                    ts_list_gw,
                    ts_delete,
                    ts_confirm_gw,
                    py_list,
                    py_list_gw,
                    py_delete,
                    py_confirm_gw,
                ] = alternate(
                    &rt,
                    &flags,
                    &server_bin,
                    [
                        (Flow::UpstreamList(ts), false),
                        (Flow::UpstreamList(ts), true),
                        (Flow::UpstreamDelete(ts), false),
                        (Flow::UpstreamDelete(ts), true),
                        (Flow::UpstreamList(py), false),
                        (Flow::UpstreamList(py), true),
                        (Flow::UpstreamDelete(py), false),
                        (Flow::UpstreamDelete(py), true),
                    ],
                    &mut errors,
                )?;
                print_gateway_summary(
                    ts,
                    &flags,
                    [&ts_list, &ts_list_gw, &ts_delete, &ts_confirm_gw],
                );
                print_gateway_summary(
                    py,
                    &flags,
                    [&py_list, &py_list_gw, &py_delete, &py_confirm_gw],
                );
            }
            "confirm" | "confirm-files" | "challenges" => {
                let flow = match *flow {
                    "confirm" => Flow::Confirm,
                    "confirm-files" => Flow::ConfirmFiles,
                    _ => Flow::Challenges,
                };
                for _ in 0..flags.runs {
                    errors += rt
                        .block_on(measure(&flags, &server_bin, flow, true))?
                        .errors;
                }
            }
            _ => {
                if !redis_reachable(&flags.redis) {
                    println!("confirm-redis skipped: no Redis at {}", flags.redis);
                    continue;
                }
                for _ in 0..flags.runs {
                    errors += rt
                        .block_on(measure(&flags, &server_bin, Flow::ConfirmRedis, true))?
                        .errors;
                }
            }
        }
    }
    if errors > 0 {
        return Err(format!("{errors} operations failed"));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    List,
    Confirm,
    ConfirmFiles,
    ConfirmRedis,
    /// `Confirm` with the decision log on.
    ConfirmLogged,
    /// `Confirm` with the server's metrics off (`--no-metrics`), and so no observability.
    ConfirmUnobserved,
    /// `Confirm` with the server's metrics and spans on (`--otel`).
    ConfirmObserved,
    Standing,
    Challenges,
    /// `Confirm` spread over many principals, the server's default limits on.
    ConfirmShared,
    /// `List` against the TypeScript SDK peer.
    PeerList,
    /// `Confirm` against the TypeScript SDK peer.
    PeerConfirm,
    /// `notes_list` of an upstream with no confirmation of its own (the gateway passes it).
    UpstreamList(Upstream),
    /// `notes_delete` of that upstream: one round reached directly, two through the gateway.
    UpstreamDelete(Upstream),
}

/// An MCP server with no confirmation of its own, for the gateway to stand in front of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// `tools/peer-ts/upstream-plain.mjs`, on the official TypeScript SDK v2.
    Ts,
    /// `tools/upstream-py/server.py`, on the official Python SDK.
    Py,
}

impl Upstream {
    fn name(self) -> &'static str {
        match self {
            Upstream::Ts => "the TypeScript SDK upstream",
            Upstream::Py => "the Python SDK upstream",
        }
    }
}

impl Flow {
    /// How many principals the flow's operations are spread over.
    fn principals(self, flags: &Flags) -> u64 {
        match self {
            // Through the gateway: under the layer's default per-principal limits. Reached
            // directly, every call is the operator's.
            Flow::ConfirmShared | Flow::UpstreamList(_) | Flow::UpstreamDelete(_) => {
                flags.principals
            }
            _ => 1,
        }
    }

    fn is_peer(self) -> bool {
        matches!(self, Flow::PeerList | Flow::PeerConfirm)
    }

    /// The upstream of the gateway flow's shapes.
    fn upstream(self) -> Option<Upstream> {
        match self {
            Flow::UpstreamList(upstream) | Flow::UpstreamDelete(upstream) => Some(upstream),
            _ => None,
        }
    }

    fn name(self, layered: bool) -> &'static str {
        match (self, layered) {
            (Flow::List, false) => "list (no layer)",
            (Flow::List, true) => "list (layer)",
            (Flow::Confirm, _) => "confirm (memory)",
            (Flow::ConfirmFiles, _) => "confirm (files)",
            (Flow::ConfirmRedis, _) => "confirm (redis)",
            (Flow::Standing, _) => "standing (memory)",
            (Flow::ConfirmLogged, _) => "confirm + log",
            (Flow::ConfirmUnobserved, _) => "confirm (obs off)",
            (Flow::ConfirmObserved, _) => "confirm (obs on)",
            (Flow::Challenges, _) => "challenges only",
            (Flow::ConfirmShared, _) => "confirm (many)",
            (Flow::PeerList, _) => "list (TS peer)",
            (Flow::PeerConfirm, _) => "confirm (TS peer)",
            (Flow::UpstreamList(Upstream::Ts), false) => "list (TS direct)",
            (Flow::UpstreamList(Upstream::Ts), true) => "list (TS gateway)",
            (Flow::UpstreamDelete(Upstream::Ts), false) => "delete (TS direct)",
            (Flow::UpstreamDelete(Upstream::Ts), true) => "confirm (TS gw)",
            (Flow::UpstreamList(Upstream::Py), false) => "list (Py direct)",
            (Flow::UpstreamList(Upstream::Py), true) => "list (Py gateway)",
            (Flow::UpstreamDelete(Upstream::Py), false) => "delete (Py direct)",
            (Flow::UpstreamDelete(Upstream::Py), true) => "confirm (Py gw)",
        }
    }
}

/// What one run measured.
struct Report {
    ops: u64,
    errors: u64,
    /// Operations that showed a form (the standing flow's re-grants).
    forms: u64,
    elapsed: Duration,
    /// Operation latencies, sorted, in nanoseconds.
    latencies: Vec<u64>,
    server_cpu: Duration,
    /// The gateway's, when the server was behind it.
    gateway_cpu: Option<Duration>,
    loadgen_cpu: Duration,
    rss_kib: (u64, u64),
}

impl Report {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// `time` spread over every operation of the run, in microseconds.
    fn per_op_us(&self, time: Duration) -> f64 {
        time.as_secs_f64() * 1e6 / (self.ops + self.errors).max(1) as f64
    }

    /// `time` spread over the run: the cores a process kept busy.
    fn cores(&self, time: Duration) -> f64 {
        time.as_secs_f64() / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        Duration::from_nanos(self.latencies[rank.clamp(1, self.latencies.len()) - 1])
    }
}

/// Runs each of `shapes` (a flow, and whether through the layer) in turn, `--runs` times, each
/// on a fresh server, so that every run has neighbours measured under the same conditions;
/// returns each shape's reports and adds their failed operations to `errors`.
fn alternate<const N: usize>(
    rt: &tokio::runtime::Runtime,
    flags: &Flags,
    server_bin: &PathBuf,
    shapes: [(Flow, bool); N],
    errors: &mut u64,
) -> Result<[Vec<Report>; N], String> {
    let mut reports: [Vec<Report>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..flags.runs {
        for ((flow, layered), runs) in shapes.iter().zip(&mut reports) {
            let report = rt.block_on(measure(flags, server_bin, *flow, *layered))?;
            *errors += report.errors;
            runs.push(report);
        }
    }
    Ok(reports)
}

/// `ratio` of each run of `a` and the run of `b` beside it, sorted.
fn paired(a: &[Report], b: &[Report], ratio: impl Fn(&Report, &Report) -> f64) -> Vec<f64> {
    let mut paired: Vec<f64> = a.iter().zip(b).map(|(a, b)| ratio(a, b)).collect();
    paired.sort_by(f64::total_cmp);
    paired
}

/// Sorted paired ratios (percent) as the summaries print them: their median, how many pairs,
/// and their range; `signed` for differences (`+3.1%`), not shares.
fn run_by_run(paired: &[f64], signed: bool) -> String {
    let percent = |v: f64| {
        if signed {
            format!("{v:+.1}%")
        } else {
            format!("{v:.1}%")
        }
    };
    format!(
        "{} (median of {} pairs, {} to {})",
        percent(paired[paired.len() / 2]),
        paired.len(),
        percent(paired[0]),
        percent(paired[paired.len() - 1]),
    )
}

/// The median of `measure` over the runs.
fn median(reports: &[Report], measure: impl Fn(&Report) -> f64) -> f64 {
    let mut values: Vec<f64> = reports.iter().map(measure).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn print_header() {
    println!(
        "{:<18} {:>9} {:>7} {:>9} {:>9} {:>9} {:>13} {:>14} {:>17}",
        "flow",
        "ops/s",
        "errors",
        "p50",
        "p99",
        "p999",
        "server CPU/op",
        "loadgen CPU/op",
        "server RSS (KiB)"
    );
}

fn print_report(name: &str, r: &Report) {
    let per_op = |d: Duration| format!("{:.1} µs", r.per_op_us(d));
    let us = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6);
    println!(
        "{:<18} {:>9.0} {:>7} {:>9} {:>9} {:>9} {:>13} {:>14} {:>17}",
        name,
        r.rate(),
        r.errors,
        us(r.percentile(50.0)),
        us(r.percentile(99.0)),
        us(r.percentile(99.9)),
        per_op(r.server_cpu),
        per_op(r.loadgen_cpu),
        format!("{} → {}", r.rss_kib.0, r.rss_kib.1),
    );
}

/// The gateway flow's second line of a run: the cores the upstream, the gateway and the
/// generator kept busy, and the gateway's CPU per operation.
fn print_cores(r: &Report) {
    let gateway = match r.gateway_cpu {
        Some(cpu) => format!(
            ", gateway {:.2} ({:.1} µs/op)",
            r.cores(cpu),
            r.per_op_us(cpu)
        ),
        None => String::new(),
    };
    println!(
        "{:<18} cores busy: upstream {:.2}{gateway}, loadgen {:.2}",
        "",
        r.cores(r.server_cpu),
        r.cores(r.loadgen_cpu),
    );
}

/// The gateway flow's figures for one upstream: each shape's rate, median and p99 latency
/// (medians over the runs), through the gateway against direct, and the CPU each process used.
fn print_gateway_summary(upstream: Upstream, flags: &Flags, runs: [&[Report]; 4]) {
    let [list, list_gw, delete, confirm_gw] = runs;
    let rate = |r: &[Report]| median(r, Report::rate);
    let p50 = |r: &[Report]| median(r, |r| r.percentile(50.0).as_secs_f64() * 1e6);
    let p99 = |r: &[Report]| median(r, |r| r.percentile(99.0).as_secs_f64() * 1e6);
    let shape = |r: &[Report]| {
        format!(
            "{:.0}/s, p50 {:.0} µs, p99 {:.0} µs",
            rate(r),
            p50(r),
            p99(r)
        )
    };
    let against = |gw: &[Report], direct: &[Report]| {
        let by_run = paired(direct, gw, |d, g| g.rate() / d.rate() * 100.0);
        format!(
            "{:.1} % of the direct rate (run by run {:.1} % to {:.1} %), p50 {:+.1} %, p99 {:+.1} %",
            rate(gw) / rate(direct) * 100.0,
            by_run[0],
            by_run[by_run.len() - 1],
            (p50(gw) / p50(direct) - 1.0) * 100.0,
            (p99(gw) / p99(direct) - 1.0) * 100.0,
        )
    };
    let cores = |r: &[Report], cpu: fn(&Report) -> Duration| median(r, |r| r.cores(cpu(r)));
    let per_op = |r: &[Report], cpu: fn(&Report) -> Duration| median(r, |r| r.per_op_us(cpu(r)));
    let upstream_cpu: fn(&Report) -> Duration = |r| r.server_cpu;
    let gateway_cpu: fn(&Report) -> Duration = |r| r.gateway_cpu.unwrap_or_default();
    let loadgen_cpu: fn(&Report) -> Duration = |r| r.loadgen_cpu;
    println!(
        "gateway in front of {} (its tool list's ttlMs: {}), {} clients, medians of {} runs:",
        upstream.name(),
        flags
            .upstream_list_ttl_ms
            .map_or_else(|| "the SDK's default, 0".to_owned(), |ms| ms.to_string()),
        flags.clients,
        list.len()
    );
    println!(
        "  notes_list (passed): direct {}; through the gateway {}: {}",
        shape(list),
        shape(list_gw),
        against(list_gw, list)
    );
    println!(
        "  notes_delete: direct, one round {}; through the gateway, two rounds {} (flows): {}",
        shape(delete),
        shape(confirm_gw),
        against(confirm_gw, delete)
    );
    for (what, direct, gw) in [
        ("notes_list", list, list_gw),
        ("notes_delete", delete, confirm_gw),
    ] {
        println!(
            "  CPU, {what}: upstream {:.2} cores ({:.0} µs/op) direct, {:.2} ({:.0} µs/op) behind \
             the gateway; gateway {:.2} cores ({:.0} µs/op); loadgen {:.2} and {:.2} cores",
            cores(direct, upstream_cpu),
            per_op(direct, upstream_cpu),
            cores(gw, upstream_cpu),
            per_op(gw, upstream_cpu),
            cores(gw, gateway_cpu),
            per_op(gw, gateway_cpu),
            cores(direct, loadgen_cpu),
            cores(gw, loadgen_cpu),
        );
    }
    let kept = rate(list_gw) / rate(list) * 100.0;
    let added = (p50(list_gw) / p50(list) - 1.0) * 100.0;
    let (gw_cores, up_cores) = (cores(list_gw, gateway_cpu), cores(list_gw, upstream_cpu));
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!(
        "  targets for a passed call: >= 90 % of the direct rate {} ({kept:.1} %); <= +10 % to the \
         median latency {} ({added:+.1} %); gateway busier than the upstream: {} ({gw_cores:.2} \
         against {up_cores:.2} cores)",
        verdict(kept >= 90.0),
        verdict(added <= 10.0),
        if gw_cores < up_cores { "no" } else { "YES" },
    );
}

/// What the gateway flow needs, said before anything starts.
fn gateway_prerequisites(flags: &Flags) -> Result<(), String> {
    if !flags.gateway.exists() {
        return Err(format!(
            "{} not found: build it first with `cargo build --release -p mcp-confirm-gateway` \
             (or name it with --gateway)",
            flags.gateway.display()
        ));
    }
    if !flags.peer_dir.join("node_modules").exists() {
        return Err(format!(
            "{}/node_modules not found: run `npm ci --prefix {}` first",
            flags.peer_dir.display(),
            flags.peer_dir.display()
        ));
    }
    if !flags.python.exists() {
        return Err(format!(
            "{} not found: run `bash .ci/install-clients.sh` first (or name a Python with the \
             official `mcp` SDK with --python)",
            flags.python.display()
        ));
    }
    if !flags.upstream_py.exists() {
        return Err(format!("{} not found", flags.upstream_py.display()));
    }
    Ok(())
}

/// Starts a fresh server, drives one flow against it, prints and returns the report.
async fn measure(
    flags: &Flags,
    server_bin: &PathBuf,
    flow: Flow,
    layered: bool,
) -> Result<Report, String> {
    let titles = match flow {
        Flow::Confirm
        | Flow::ConfirmRedis
        | Flow::ConfirmLogged
        | Flow::ConfirmUnobserved
        | Flow::ConfirmObserved
        | Flow::Standing
        | Flow::ConfirmShared => match flags.requests {
            Some(n) => n + 1,
            None => TITLES_PER_SECOND * flags.duration.as_secs(),
        },
        // The peer confirms a few hundred a second: fewer titles keep its start-up short.
        Flow::PeerConfirm => match flags.requests {
            Some(n) => n + 1,
            None => PEER_TITLES_PER_SECOND * (flags.duration.as_secs() + 1),
        },
        // The warm-up confirms too: room for it.
        Flow::ConfirmFiles => match flags.requests {
            Some(n) => n + 1 + FILE_TITLES_PER_SECOND * flags.warmup.as_millis() as u64 / 1_000,
            None => {
                FILE_TITLES_PER_SECOND * (flags.duration.as_secs() + 1)
                    + FILE_TITLES_PER_SECOND * flags.warmup.as_millis() as u64 / 1_000
            }
        },
        // The warm-up deletes too (capped at `--requests` like the run).
        Flow::UpstreamDelete(_) => match flags.requests {
            Some(n) => 2 * n + 1,
            None => {
                UPSTREAM_TITLES_PER_SECOND * (flags.duration.as_secs() + 1)
                    + UPSTREAM_TITLES_PER_SECOND * flags.warmup.as_millis() as u64 / 1_000
            }
        },
        Flow::Challenges => 1,
        Flow::List | Flow::PeerList | Flow::UpstreamList(_) => 0,
    };
    let server = Server::start(server_bin, flags, flow, layered, titles).await?;
    let through_gateway = server.gateway.is_some();
    let setup = Setup {
        addr: server.addr,
        path: server.path,
        workspace: format!("file://{}/{}", server.data_dir, workspace(flow)),
        next_title: AtomicU64::new(0),
        titles,
        started: AtomicU64::new(0),
        limit: flags.requests.unwrap_or(u64::MAX),
        forms: AtomicU64::new(0),
        principals: flow.principals(flags),
        // An upstream reached directly takes the operator's token, which the gateway sends it.
        bearer: (flow.upstream().is_some() && !through_gateway).then_some(OPERATOR_TOKEN),
        token_suffix: if through_gateway {
            GATEWAY_TOKEN_SUFFIX
        } else {
            ""
        },
        through_gateway,
    };
    let setup = Arc::new(setup);
    // Warm up connections and caches for a moment, not measured.
    let warm = drive(&setup, flow, flags.clients, flags.warmup).await?;
    drop(warm);
    setup.started.store(0, Ordering::SeqCst);
    setup.forms.store(0, Ordering::SeqCst);
    let rss_start = server.rss_kib();
    let (cpu_server, cpu_gateway, cpu_self) = (server.cpu()?, server.gateway_cpu()?, own_cpu()?);
    let start = Instant::now();
    let results = drive(&setup, flow, flags.clients, flags.duration).await?;
    let elapsed = start.elapsed();
    let (cpu_server_end, cpu_gateway_end, cpu_self_end) =
        (server.cpu()?, server.gateway_cpu()?, own_cpu()?);
    let mut latencies = Vec::new();
    let mut errors = 0;
    for (lat, errs) in results {
        latencies.extend(lat);
        errors += errs;
    }
    latencies.sort_unstable();
    let report = Report {
        ops: latencies.len() as u64,
        errors,
        forms: setup.forms.load(Ordering::SeqCst),
        elapsed,
        latencies,
        server_cpu: cpu_server_end.saturating_sub(cpu_server),
        gateway_cpu: cpu_gateway_end
            .zip(cpu_gateway)
            .map(|(end, start)| end.saturating_sub(start)),
        loadgen_cpu: cpu_self_end.saturating_sub(cpu_self),
        rss_kib: (rss_start, server.rss_kib()),
    };
    print_report(flow.name(layered), &report);
    if flow.upstream().is_some() {
        print_cores(&report);
    }
    if report.errors > 0
        && let Some((_, dir)) = &server.gateway
    {
        // Its directory goes with it: what it said, while it is still there.
        let log = std::fs::read_to_string(dir.join("gateway.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        eprintln!("the gateway's log ends:");
        for line in &lines[lines.len().saturating_sub(10)..] {
            eprintln!("  {line}");
        }
    }
    Ok(report)
}

fn workspace(flow: Flow) -> &'static str {
    match flow {
        Flow::List | Flow::PeerList | Flow::UpstreamList(_) => "personal",
        _ => "load",
    }
}

/// What every client of one run shares.
struct Setup {
    addr: SocketAddr,
    /// The path the calls are posted to.
    path: &'static str,
    workspace: String,
    next_title: AtomicU64,
    titles: u64,
    started: AtomicU64,
    limit: u64,
    /// Operations that got a form (the standing flow).
    forms: AtomicU64,
    /// Principals the operations are spread over: 1 is alice; more are the server's load
    /// principals `load-<k>`, one per operation in turn.
    principals: u64,
    /// The one bearer token of every operation, when there is one (an upstream reached
    /// directly takes the operator's).
    bearer: Option<&'static str>,
    /// What follows `load-<k>-token` in the load principals' tokens.
    token_suffix: &'static str,
    /// Whether the calls go through the gateway (the gateway flow's `notes_delete` then takes
    /// two rounds).
    through_gateway: bool,
}

impl Setup {
    /// The bearer token of operation `op`.
    fn token(&self, op: u64) -> String {
        if let Some(bearer) = self.bearer {
            return bearer.to_owned();
        }
        match self.principals {
            0 | 1 => "alice-token".to_owned(),
            n => format!("load-{}-token{}", op % n, self.token_suffix),
        }
    }
}

/// Runs `clients` connections until `duration` has passed or the operation limit is reached;
/// returns each client's latencies and error count.
async fn drive(
    setup: &Arc<Setup>,
    flow: Flow,
    clients: usize,
    duration: Duration,
) -> Result<Vec<(Vec<u64>, u64)>, String> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let setup = Arc::clone(setup);
        let mut conn = connect(setup.addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut id = Ids {
                next: 0,
                token: String::new(),
            };
            loop {
                let op = setup.started.fetch_add(1, Ordering::Relaxed);
                if Instant::now() >= deadline || op >= setup.limit {
                    break;
                }
                id.token = setup.token(op);
                let began = Instant::now();
                let ok = match flow {
                    Flow::List | Flow::PeerList | Flow::UpstreamList(_) => {
                        list(&mut conn, &setup, &mut id).await
                    }
                    Flow::UpstreamDelete(_) if setup.through_gateway => {
                        confirm_through_gateway(&mut conn, &setup, &mut id).await
                    }
                    Flow::UpstreamDelete(_) => delete_directly(&mut conn, &setup, &mut id).await,
                    Flow::Confirm
                    | Flow::ConfirmFiles
                    | Flow::ConfirmRedis
                    | Flow::ConfirmLogged
                    | Flow::ConfirmUnobserved
                    | Flow::ConfirmObserved
                    | Flow::ConfirmShared
                    | Flow::PeerConfirm => confirm(&mut conn, &setup, &mut id).await,
                    Flow::Standing => under_standing(&mut conn, &setup, &mut id).await,
                    Flow::Challenges => challenge_only(&mut conn, &setup, &mut id).await,
                };
                match ok {
                    Ok(()) => latencies.push(began.elapsed().as_nanos() as u64),
                    Err(e) => {
                        if errors == 0 {
                            eprintln!("error: {e}");
                        }
                        errors += 1;
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.map_err(|e| e.to_string())?);
    }
    Ok(results)
}

type Conn = SendRequest<Full<Bytes>>;

/// One client's request ids, and the bearer token of the operation under way.
struct Ids {
    next: u64,
    token: String,
}

async fn connect(addr: SocketAddr) -> Result<Conn, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},
           "io.modelcontextprotocol/clientInfo":{"name":"loadgen","version":"1"}})
}

/// One tools/call; returns the parsed `result`, or why there is none.
async fn call(
    conn: &mut Conn,
    setup: &Setup,
    id: &mut Ids,
    tool: &str,
    params: Value,
) -> Result<Value, String> {
    id.next += 1;
    let mut params = params;
    params["name"] = json!(tool);
    params["_meta"] = meta();
    let body = json!({"jsonrpc":"2.0","id":id.next,"method":"tools/call","params":params});
    let request = http::Request::post(setup.path)
        .header("host", setup.addr.to_string())
        .header("authorization", format!("Bearer {}", id.token))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    conn.ready().await.map_err(|e| e.to_string())?;
    let response = conn
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let mut answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "{status}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    match answer.get_mut("result") {
        Some(result) if status.is_success() => Ok(result.take()),
        _ => Err(format!("{status}: {answer}")),
    }
}

async fn list(conn: &mut Conn, setup: &Setup, id: &mut Ids) -> Result<(), String> {
    let args = json!({"arguments":{"workspaceUri": setup.workspace}});
    let result = call(conn, setup, id, "notes_list", args).await?;
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    if result["isError"] == true || !text.contains("note-1: ") {
        return Err(format!("unexpected list result {result}"));
    }
    Ok(())
}

fn next_title(setup: &Setup) -> Result<String, String> {
    let k = setup.next_title.fetch_add(1, Ordering::Relaxed);
    if k >= setup.titles {
        return Err("ran out of seeded titles".into());
    }
    Ok(format!("load-{k}"))
}

/// The first `notes_delete` call for `title`: its arguments and its result.
async fn first_call(
    conn: &mut Conn,
    setup: &Setup,
    id: &mut Ids,
    title: String,
) -> Result<(Value, Value), String> {
    let arguments = json!({"workspaceUri": setup.workspace, "title": title});
    let params = json!({ "arguments": arguments });
    let first = call(conn, setup, id, "notes_delete", params).await?;
    Ok((arguments, first))
}

/// The first round: returns the state, the first offered id, and the arguments.
async fn first_round(
    conn: &mut Conn,
    setup: &Setup,
    id: &mut Ids,
) -> Result<(String, String, Value), String> {
    let (arguments, first) = first_call(conn, setup, id, next_title(setup)?).await?;
    let offered = &first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
        ["note_id"]["oneOf"];
    match (
        first["requestState"].as_str(),
        offered[0]["const"].as_str(),
        offered.as_array().map(Vec::len),
    ) {
        (Some(state), Some(choice), Some(3)) => {
            Ok((state.to_owned(), choice.to_owned(), arguments))
        }
        _ => Err(format!("unexpected first round {first}")),
    }
}

async fn challenge_only(conn: &mut Conn, setup: &Setup, id: &mut Ids) -> Result<(), String> {
    // Challenges are never answered, so one title serves every call.
    let (_, first) = first_call(conn, setup, id, "load-0".to_owned()).await?;
    if first["resultType"] != "input_required" {
        return Err(format!("unexpected first round {first}"));
    }
    Ok(())
}

async fn confirm(conn: &mut Conn, setup: &Setup, id: &mut Ids) -> Result<(), String> {
    let (state, choice, arguments) = first_round(conn, setup, id).await?;
    let params = json!({
        "arguments": arguments,
        "requestState": state,
        "inputResponses": {"delete_choice": {"action":"accept","content":{"note_id": choice,"confirm":true}}},
    });
    let done = call(conn, setup, id, "notes_delete", params).await?;
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    if done["isError"] == true || !text.starts_with("Deleted ") {
        return Err(format!("unexpected second round {done}"));
    }
    Ok(())
}

/// One delete of a one-note title: covered by the standing approval (no form), or, when it is
/// used up, confirmed with the form while granting it again.
async fn under_standing(conn: &mut Conn, setup: &Setup, id: &mut Ids) -> Result<(), String> {
    let (arguments, first) = first_call(conn, setup, id, next_title(setup)?).await?;
    let done = if first["resultType"] == "input_required" {
        setup.forms.fetch_add(1, Ordering::Relaxed);
        let form =
            &first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"];
        let (Some(state), Some(choice), Some("standing")) = (
            first["requestState"].as_str(),
            form["note_id"]["oneOf"][0]["const"].as_str(),
            form["remember"]["oneOf"][1]["const"].as_str(),
        ) else {
            return Err(format!("unexpected form {first}"));
        };
        let params = json!({
            "arguments": arguments,
            "requestState": state,
            "inputResponses": {"delete_choice": {"action":"accept","content":{
                "note_id": choice, "confirm": true, "remember": "standing"}}},
        });
        call(conn, setup, id, "notes_delete", params).await?
    } else {
        first
    };
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    if done["isError"] == true || !text.starts_with("Deleted ") {
        return Err(format!("unexpected delete {done}"));
    }
    Ok(())
}

/// `notes_delete` of an upstream reached directly: one round, and it deletes.
async fn delete_directly(conn: &mut Conn, setup: &Setup, id: &mut Ids) -> Result<(), String> {
    let (_, done) = first_call(conn, setup, id, next_title(setup)?).await?;
    deleted(&done)
}

/// `notes_delete` of an upstream through the gateway: the first call gets the gateway's yes/no
/// form and reaches nothing; the retry accepts it with the same arguments and the
/// `requestState`, and the upstream deletes.
async fn confirm_through_gateway(
    conn: &mut Conn,
    setup: &Setup,
    id: &mut Ids,
) -> Result<(), String> {
    let (arguments, first) = first_call(conn, setup, id, next_title(setup)?).await?;
    let asked = first["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next());
    let (Some("input_required"), Some(state), Some((key, form))) = (
        first["resultType"].as_str(),
        first["requestState"].as_str(),
        asked,
    ) else {
        return Err(format!("unexpected first round {first}"));
    };
    if form["params"]["requestedSchema"]["properties"]["confirm"]["type"] != "boolean" {
        return Err(format!("unexpected form {first}"));
    }
    let params = json!({
        "arguments": arguments,
        "requestState": state,
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"confirm": true}}},
    });
    let done = call(conn, setup, id, "notes_delete", params).await?;
    deleted(&done)
}

/// Whether an upstream's `notes_delete` result says it deleted the note.
fn deleted(result: &Value) -> Result<(), String> {
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    if result["isError"] == true || !text.starts_with("Deleted ") {
        return Err(format!("unexpected delete {result}"));
    }
    Ok(())
}

/// A server child process (the notes server, the TypeScript peer, or an upstream of the
/// gateway flow with the gateway in front of it), stopped on drop.
struct Server {
    child: Child,
    /// Where the clients connect: the server's address, or the gateway's in front of it.
    addr: SocketAddr,
    /// The path the clients post to.
    path: &'static str,
    data_dir: String,
    clock_ticks: u64,
    /// Remove `data_dir` when the server is gone.
    owns_data_dir: bool,
    /// The decision log's directory, removed (with its key file) when the server is gone.
    log_dir: Option<PathBuf>,
    /// The gateway in front of the server, and its directory (configuration, tokens, key, log),
    /// removed when it is gone.
    gateway: Option<(Child, PathBuf)>,
}

/// Numbers the runs, for their data directories.
static RUN: AtomicU64 = AtomicU64::new(0);

impl Server {
    async fn start(
        bin: &PathBuf,
        flags: &Flags,
        flow: Flow,
        layered: bool,
        titles: u64,
    ) -> Result<Self, String> {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        // File-backed notes get a fresh directory per run (removed when the server stops).
        let files = flow == Flow::ConfirmFiles;
        let data_dir = if files {
            std::env::temp_dir()
                .join(format!(
                    "loadgen-notes-{}-{}",
                    std::process::id(),
                    RUN.fetch_add(1, Ordering::Relaxed)
                ))
                .display()
                .to_string()
        } else {
            "/srv/loadgen-notes".to_owned()
        };
        if flow.is_peer() {
            return Self::start_peer(flags, addr, data_dir, titles).await;
        }
        if let Some(upstream) = flow.upstream() {
            return Self::start_upstream(flags, upstream, layered, addr, data_dir, titles).await;
        }
        let mut command = match flags.wrap.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(bin);
                command
            }
            None => Command::new(bin),
        };
        command
            .args(["--addr", &addr.to_string(), "--data-dir", &data_dir])
            .args([
                "--key",
                KEY,
                "--notes",
                if files { "files" } else { "memory" },
            ])
            .args(["--load-titles", &titles.to_string()])
            .args([
                "--load-notes-per-title",
                if flow == Flow::Standing { "1" } else { "3" },
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if !layered {
            command.arg("--without-confirmation");
        } else if flow != Flow::ConfirmShared {
            // One principal (alice) asks for thousands of forms a second: far past the default
            // per-principal challenge rate, which is what it is for.
            command.args(["--challenge-rate", "off"]);
        }
        // Every confirmation keeps its nonce for the state's lifetime (5 minutes), all of them
        // alice's: room for every one of the run, which neither the default capacity (100,000)
        // nor the default per-principal budget is. Spread over many principals, each stays
        // within the default budget; only the store's capacity is sized for the run.
        let room = (titles + 1_000).to_string();
        match flow {
            Flow::ConfirmShared => {
                command.args(["--replay-store", &format!("memory:{room}")]);
            }
            Flow::PeerList | Flow::PeerConfirm => {}
            // Started by `start_upstream`, never here.
            Flow::UpstreamList(_) | Flow::UpstreamDelete(_) => {}
            Flow::ConfirmRedis => {
                command.args(["--replay-store", &flags.redis]);
                command.args(["--principal-budget", &room]);
            }
            Flow::Confirm
            | Flow::ConfirmFiles
            | Flow::ConfirmLogged
            | Flow::ConfirmUnobserved
            | Flow::ConfirmObserved
            | Flow::Standing => {
                command.args(["--replay-store", &format!("memory:{room}")]);
                command.args(["--principal-budget", &room]);
            }
            Flow::List | Flow::Challenges => {}
        }
        // The decision log only where it is measured, in a directory of its own.
        let log_dir = (flow == Flow::ConfirmLogged).then(|| {
            std::env::temp_dir().join(format!(
                "loadgen-decisions-{}-{}",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed)
            ))
        });
        match &log_dir {
            Some(dir) => {
                let key = dir.with_extension("key");
                command.arg("--audit-dir").arg(dir);
                command.arg("--audit-key-file").arg(&key);
            }
            None => {
                command.arg("--no-audit-log");
            }
        }
        // Metrics and spans: off, or both on, where they are measured; elsewhere the server's
        // default (metrics on, spans off).
        match flow {
            Flow::ConfirmUnobserved => {
                command.arg("--no-metrics");
            }
            Flow::ConfirmObserved => {
                command.arg("--otel");
            }
            _ => {}
        }
        if let Some(threads) = flags.server_threads {
            command.env("TOKIO_WORKER_THREADS", threads.to_string());
        }
        let child = command
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let server = Self {
            child,
            addr,
            path: "/mcp",
            data_dir,
            clock_ticks: clock_ticks(),
            owns_data_dir: files,
            log_dir,
            gateway: None,
        };
        // Seeding hundreds of thousands of files takes a while.
        let deadline = Instant::now() + Duration::from_secs(600);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if Instant::now() > deadline {
                return Err("the notes server did not start within 600 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(server)
    }

    /// Starts the TypeScript SDK peer (`tools/peer-ts/server.mjs`) with the same notes.
    async fn start_peer(
        flags: &Flags,
        addr: SocketAddr,
        data_dir: String,
        titles: u64,
    ) -> Result<Self, String> {
        let script = flags.peer_dir.join("server.mjs");
        let child = Command::new(&flags.node)
            .arg(&script)
            .args(["--addr", &addr.to_string()])
            .args(["--load-titles", &titles.to_string()])
            .args(["--load-notes-per-title", "3"])
            .env("NODE_ENV", "production")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {} {}: {e}", flags.node, script.display()))?;
        let server = Self {
            child,
            addr,
            path: "/mcp",
            data_dir,
            clock_ticks: clock_ticks(),
            owns_data_dir: false,
            log_dir: None,
            gateway: None,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if Instant::now() > deadline {
                return Err("the TypeScript peer did not start within 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(server)
    }

    /// Starts an upstream with no confirmation of its own on `addr`, with a note for each of
    /// `titles`, and with `through_gateway` the gateway in front of it: its release binary,
    /// configured in a fresh temporary directory (static tokens for alice and the load
    /// principals, the memory store, the key from a file, the operator's token for the
    /// upstream), its log written there.
    async fn start_upstream(
        flags: &Flags,
        upstream: Upstream,
        through_gateway: bool,
        addr: SocketAddr,
        data_dir: String,
        titles: u64,
    ) -> Result<Self, String> {
        let mut command = match upstream {
            Upstream::Ts => {
                let mut command = Command::new(&flags.node);
                command
                    .arg(flags.peer_dir.join("upstream-plain.mjs"))
                    .args(["--addr", &addr.to_string()])
                    .env("NODE_ENV", "production");
                command
            }
            Upstream::Py => {
                let mut command = Command::new(&flags.python);
                command
                    .arg(&flags.upstream_py)
                    .args(["--port", &addr.port().to_string()]);
                command
            }
        };
        if let Some(ttl) = flags.upstream_list_ttl_ms {
            command.args(["--list-ttl-ms", &ttl.to_string()]);
        }
        let child = command
            .args(["--load-titles", &titles.to_string()])
            .env("UPSTREAM_TOKEN", OPERATOR_TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {}: {e}", upstream.name()))?;
        let mut server = Self {
            child,
            addr,
            path: "/mcp",
            data_dir,
            clock_ticks: clock_ticks(),
            owns_data_dir: false,
            log_dir: None,
            gateway: None,
        };
        listening(&mut server.child, addr, upstream.name()).await?;
        if !through_gateway {
            return Ok(server);
        }
        let gateway_addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!(
            "loadgen-gateway-{}-{}",
            std::process::id(),
            RUN.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut tokens = String::from("alice alice-token-0123456789\n");
        for k in 0..flags.principals {
            tokens.push_str(&format!("load-{k} load-{k}-token{GATEWAY_TOKEN_SUFFIX}\n"));
        }
        let config = format!(
            "listen = \"{gateway_addr}\"\n\
             key = {{ file = \"key\" }}\n\
             store = {{ kind = \"memory\" }}\n\
             [auth]\n\
             kind = \"static_tokens\"\n\
             file = \"tokens\"\n\
             [[route]]\n\
             path = \"/notes/mcp\"\n\
             upstream = \"http://{addr}/mcp\"\n\
             upstream_header = {{ name = \"authorization\", value = {{ file = \"upstream-token\" }} }}\n"
        );
        for (name, contents) in [
            ("key", format!("{KEY}\n")),
            ("tokens", tokens),
            ("upstream-token", format!("Bearer {OPERATOR_TOKEN}\n")),
            ("gateway.toml", config),
        ] {
            std::fs::write(dir.join(name), contents)
                .map_err(|e| format!("{}: {e}", dir.join(name).display()))?;
        }
        let log = std::fs::File::create(dir.join("gateway.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(&flags.gateway);
        command
            .arg("--config")
            .arg(dir.join("gateway.toml"))
            .env("RUST_LOG", &flags.gateway_log)
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(threads) = flags.server_threads {
            command.env("TOKIO_WORKER_THREADS", threads.to_string());
        }
        let child = command
            .spawn()
            .map_err(|e| format!("start {}: {e}", flags.gateway.display()))?;
        let (gateway, _) = server.gateway.insert((child, dir));
        listening(gateway, gateway_addr, "the gateway").await?;
        server.addr = gateway_addr;
        server.path = "/notes/mcp";
        Ok(server)
    }

    fn cpu(&self) -> Result<Duration, String> {
        process_cpu(&format!("/proc/{}/stat", self.child.id()), self.clock_ticks)
    }

    /// The gateway's CPU time, when there is one.
    fn gateway_cpu(&self) -> Result<Option<Duration>, String> {
        self.gateway
            .as_ref()
            .map(|(child, _)| process_cpu(&format!("/proc/{}/stat", child.id()), self.clock_ticks))
            .transpose()
    }

    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((gateway, dir)) = &mut self.gateway {
            stop(gateway);
            let _ = std::fs::remove_dir_all(dir);
        }
        stop(&mut self.child);
        if self.owns_data_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
        if let Some(dir) = &self.log_dir {
            let _ = std::fs::remove_dir_all(dir);
            // The demo keeps the signer's view and the witness beside the log's directory.
            let _ = std::fs::remove_file(dir.with_extension("key"));
            let _ = std::fs::remove_file(dir.with_extension("view"));
            let _ = std::fs::remove_dir_all(dir.with_extension("witness"));
        }
    }
}

/// Stops a child: SIGTERM first, so a wrapper such as valgrind can write its output; SIGKILL
/// if it is still there 30 s later.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits until `child` (`what`) accepts connections on `addr`, or says why it will not.
async fn listening(child: &mut Child, addr: SocketAddr, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{what} exited ({status}) before listening on {addr}"
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("{what} did not listen on {addr} within 120 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn own_cpu() -> Result<Duration, String> {
    process_cpu("/proc/self/stat", clock_ticks())
}

/// User plus system CPU time of a process, from `/proc/<pid>/stat` (fields 14 and 15).
fn process_cpu(path: &str, ticks_per_second: u64) -> Result<Duration, String> {
    let stat = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) may hold spaces; count fields after its closing parenthesis.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("bad stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let total = ticks(11) + ticks(12);
    Ok(Duration::from_secs_f64(
        total as f64 / ticks_per_second as f64,
    ))
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn redis_reachable(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("redis://")
        .map(|r| r.rsplit_once('@').map_or(r, |(_, host)| host))
    else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or(rest);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:6379")
    };
    std::net::TcpStream::connect_timeout(
        &match host.parse() {
            Ok(addr) => addr,
            Err(_) => return false,
        },
        Duration::from_secs(1),
    )
    .is_ok()
}
