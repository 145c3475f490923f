//! A load generator for the notes server: what ConfirmLayer costs under load, end to end.
//!
//! ```text
//! cargo build --release --all-features --example notes_server
//! cargo build --release -p mcp-confirm-tools --bin loadgen
//! target/release/loadgen [--flow all|list|confirm|confirm-files|files-vs-memory|confirm-redis|standing|audit-log|principals|peer|challenges]
//!     [--clients 8] [--duration 10] [--runs 3] [--requests N] [--redis redis://127.0.0.1:6379]
//!     [--warmup-ms 300] [--server-threads N] [--wrap 'taskset -c 1']
//!     [--principals 1000] [--peer-dir tools/peer-ts] [--node node]
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
//! - `principals`: the realistic shape next to the measuring one: the two-round `confirm` flow
//!   of one principal with the per-principal limits off, alternating with the same flow spread
//!   over `--principals` principals (`load-<k>`, one per operation in turn) under the server's
//!   default challenge rate and per-principal budget (only the store's capacity is sized).
//! - `peer`: the same notes server written with the official TypeScript SDK v2
//!   (`tools/peer-ts`, run with `--node`; `npm ci --prefix tools/peer-ts` first): `notes_list`
//!   and the two-round confirmation against ours, alternating, as ratios of the rates.
//! - `challenges`: first calls only, never answered: the server's memory (RSS) at the start and
//!   at the end shows that a challenge keeps no server state.

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

const USAGE: &str = "usage: loadgen [--flow all|list|confirm|confirm-files|files-vs-memory|confirm-redis|standing|audit-log|principals|peer|challenges] \
    [--clients N] [--duration SECS] [--runs N] [--requests N] [--redis URL] [--warmup-ms MS] \
    [--server-threads N] [--wrap 'COMMAND ARGS'] [--principals N] [--peer-dir DIR] [--node BIN]";
const KEY: &str = "172800cae78ee83db26ec88a3ab8f997cbf321dc49a6d6a759ea84bae8a73188";
/// Titles seeded per second of a confirm run: far above what two cores can confirm.
const TITLES_PER_SECOND: u64 = 25_000;
/// The same for the TypeScript SDK peer (it confirms a few hundred a second).
const PEER_TITLES_PER_SECOND: u64 = 3_000;
/// The same for file-backed notes (each title is three files to write before the run).
const FILE_TITLES_PER_SECOND: u64 = 10_000;

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
    if !server_bin.exists() {
        return Err(format!(
            "{} not found: build it first with `cargo build --release --all-features --example notes_server`",
            server_bin.display()
        ));
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
        "principals" => &["principals"],
        "peer" => &["peer"],
        "list" => &["list"],
        "confirm" => &["confirm"],
        "confirm-files" => &["confirm-files"],
        "files-vs-memory" => &["files-vs-memory"],
        "confirm-redis" => &["confirm-redis"],
        "challenges" => &["challenges"],
        other => return Err(format!("unknown flow {other:?}\n{USAGE}")),
    };
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
                     medians); run by run {:+.1}% (median of {} pairs, {:+.1}% to {:+.1}%); \
                     server CPU {cpu_l:.1} against {cpu_b:.1} µs/op ({:+.1}%, medians)",
                    (l / b - 1.0) * 100.0,
                    paired[paired.len() / 2],
                    paired.len(),
                    paired[0],
                    paired[paired.len() - 1],
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
                     against {a:.0} without ({:.1}% of it, {:+.1}%, medians); run by run {:.1}% \
                     to {:.1}%; server CPU {:.0} against {:.0} µs/flow (medians)",
                    b / a * 100.0,
                    (b / a - 1.0) * 100.0,
                    paired[0],
                    paired[paired.len() - 1],
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
    Standing,
    Challenges,
    /// `Confirm` spread over many principals, the server's default limits on.
    ConfirmShared,
    /// `List` against the TypeScript SDK peer.
    PeerList,
    /// `Confirm` against the TypeScript SDK peer.
    PeerConfirm,
}

impl Flow {
    /// How many principals the flow's operations are spread over.
    fn principals(self, flags: &Flags) -> u64 {
        match self {
            Flow::ConfirmShared => flags.principals,
            _ => 1,
        }
    }

    fn is_peer(self) -> bool {
        matches!(self, Flow::PeerList | Flow::PeerConfirm)
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
            (Flow::Challenges, _) => "challenges only",
            (Flow::ConfirmShared, _) => "confirm (many)",
            (Flow::PeerList, _) => "list (TS peer)",
            (Flow::PeerConfirm, _) => "confirm (TS peer)",
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
        Flow::Challenges => 1,
        Flow::List | Flow::PeerList => 0,
    };
    let server = Server::start(server_bin, flags, flow, layered, titles).await?;
    let setup = Setup {
        addr: server.addr,
        workspace: format!("file://{}/{}", server.data_dir, workspace(flow)),
        next_title: AtomicU64::new(0),
        titles,
        started: AtomicU64::new(0),
        limit: flags.requests.unwrap_or(u64::MAX),
        forms: AtomicU64::new(0),
        principals: flow.principals(flags),
    };
    let setup = Arc::new(setup);
    // Warm up connections and caches for a moment, not measured.
    let warm = drive(&setup, flow, flags.clients, flags.warmup).await?;
    drop(warm);
    setup.started.store(0, Ordering::SeqCst);
    setup.forms.store(0, Ordering::SeqCst);
    let rss_start = server.rss_kib();
    let (cpu_server, cpu_self) = (server.cpu()?, own_cpu()?);
    let start = Instant::now();
    let results = drive(&setup, flow, flags.clients, flags.duration).await?;
    let elapsed = start.elapsed();
    let (cpu_server_end, cpu_self_end) = (server.cpu()?, own_cpu()?);
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
        loadgen_cpu: cpu_self_end.saturating_sub(cpu_self),
        rss_kib: (rss_start, server.rss_kib()),
    };
    print_report(flow.name(layered), &report);
    Ok(report)
}

fn workspace(flow: Flow) -> &'static str {
    match flow {
        Flow::List | Flow::PeerList => "personal",
        _ => "load",
    }
}

/// What every client of one run shares.
struct Setup {
    addr: SocketAddr,
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
}

impl Setup {
    /// The bearer token of operation `op`.
    fn token(&self, op: u64) -> String {
        match self.principals {
            0 | 1 => "alice-token".to_owned(),
            n => format!("load-{}-token", op % n),
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
                    Flow::List | Flow::PeerList => list(&mut conn, &setup, &mut id).await,
                    Flow::Confirm
                    | Flow::ConfirmFiles
                    | Flow::ConfirmRedis
                    | Flow::ConfirmLogged
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
    let request = http::Request::post("/mcp")
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

/// A notes server child process, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    data_dir: String,
    clock_ticks: u64,
    /// Remove `data_dir` when the server is gone.
    owns_data_dir: bool,
    /// The decision log's directory, removed (with its key file) when the server is gone.
    log_dir: Option<PathBuf>,
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
            Flow::ConfirmRedis => {
                command.args(["--replay-store", &flags.redis]);
                command.args(["--principal-budget", &room]);
            }
            Flow::Confirm | Flow::ConfirmFiles | Flow::ConfirmLogged | Flow::Standing => {
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
        if let Some(threads) = flags.server_threads {
            command.env("TOKIO_WORKER_THREADS", threads.to_string());
        }
        let child = command
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let server = Self {
            child,
            addr,
            data_dir,
            clock_ticks: clock_ticks(),
            owns_data_dir: files,
            log_dir,
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
            data_dir,
            clock_ticks: clock_ticks(),
            owns_data_dir: false,
            log_dir: None,
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

    fn cpu(&self) -> Result<Duration, String> {
        process_cpu(&format!("/proc/{}/stat", self.child.id()), self.clock_ticks)
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
        // SIGTERM first, so a wrapper such as valgrind can write its output.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut exited = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.owns_data_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
        if let Some(dir) = &self.log_dir {
            let _ = std::fs::remove_dir_all(dir);
            let _ = std::fs::remove_file(dir.with_extension("key"));
        }
    }
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
