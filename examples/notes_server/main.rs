//! The notes server: a real MCP 2026-07-28 server on rmcp with `notes_delete` confirmed by
//! `ConfirmLayer`.
//!
//! ```text
//! cargo run --example notes_server -- [--addr 127.0.0.1:3000] [--data-dir ./notes-data] [--key <hex>]
//!     [--audience URL] [--replay-store memory[:CAPACITY]|redis://…|postgres://…] [--notes files|memory]
//!     [--principal-budget N] [--challenge-rate PER_SECOND:BURST|off] [--body-timeout-ms MS]
//!     [--header-timeout-ms MS] [--request-timeout-ms MS] [--max-in-flight N] [--load-titles N]
//!     [--load-notes-per-title 1..3] [--without-confirmation]
//!     [--audit-dir DIR | --audit-postgres postgres://… [--audit-table NAME]] [--audit-key-file FILE] [--audit-witness-dir DIR] [--no-audit-log]
//!     [--public-url URL] [--webhook-url URL [--webhook-secret-file FILE] [--webhook-slack]]
//!     [--no-metrics] [--otel]
//! ```
//!
//! On first run the data directory is created and seeded: workspace `personal` with three notes
//! titled "Groceries" (note-3, note-7, note-14) and two others, workspace `team` with two notes.
//! Tokens: `alice-token` (personal, team) and `bob-token` (team).
//!
//! `--principal-budget` caps the live replay-store entries of one principal (whichever store);
//! `--challenge-rate` sets how fast one principal is shown new forms (`off` for load tests).
//!
//! The connection handling is hyper's with limits: request headers must arrive within
//! `--header-timeout-ms` (default 10 s), a request body may not stall for longer than
//! `--body-timeout-ms` (default 10 s; the request, and what was buffered of it, is dropped), a
//! request must be answered (its response headers sent) within `--request-timeout-ms` (default
//! 30 s, HTTP 408 otherwise; this also bounds a body that trickles in a byte at a time), and at most
//! `--max-in-flight` requests (default 256) are handled at once, the rest wait.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use mcp_confirm::KeyRing;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use mcp_confirm_demo::app::{self, ChallengeRate};
use mcp_confirm_demo::notes;

const USAGE: &str = "usage: notes_server [--addr HOST:PORT] [--data-dir DIR] [--key HEX] \
     [--audience URL] [--replay-store memory[:CAPACITY]|redis://…|postgres://…] [--notes files|memory] \
     [--principal-budget N] [--challenge-rate PER_SECOND:BURST|off] [--body-timeout-ms MS] \
     [--header-timeout-ms MS] [--request-timeout-ms MS] [--max-in-flight N] [--load-titles N] [--load-notes-per-title 1..3] [--without-confirmation] \
     [--audit-dir DIR | --audit-postgres postgres://… [--audit-table NAME]] [--audit-key-file FILE] [--audit-witness-dir DIR] [--no-audit-log] \
     [--public-url URL] [--webhook-url URL [--webhook-secret-file FILE] [--webhook-slack]] \
     [--no-metrics] [--otel]";

struct Flags {
    addr: SocketAddr,
    data_dir: PathBuf,
    key: Option<String>,
    audience: Option<String>,
    replay_store: String,
    /// Keep the notes in memory (for load tests) instead of files.
    memory_notes: bool,
    load_titles: u64,
    /// Notes per load title, in memory (1 to 3; 3 by default).
    load_per_title: u64,
    without_confirmation: bool,
    principal_budget: Option<usize>,
    challenge_rate: ChallengeRate,
    limits: Limits,
    /// The decision log's directory (default: `<data-dir>-decisions`).
    audit_dir: Option<PathBuf>,
    /// The file holding the decision log's signing seed (default: `<audit-dir>.key`).
    audit_key_file: Option<PathBuf>,
    /// Where the decision log's checkpoints are witnessed (default: `<audit-dir>.witness`).
    audit_witness_dir: Option<PathBuf>,
    /// Keep the decision log in this PostgreSQL database, shared with other instances.
    audit_postgres: Option<String>,
    /// Its table there (default `PostgresLog::DEFAULT_TABLE`).
    audit_table: Option<String>,
    /// No decision log (load tests measure with and without).
    no_audit_log: bool,
    /// Where browsers reach the server (default `http://ADDR`); the approval links and the
    /// passkeys' relying party come from it.
    public_url: Option<String>,
    /// Tell approvers of each approval waiting for them with a signed webhook to this URL.
    webhook_url: Option<String>,
    /// The file holding the webhook signing secret (default: `<data-dir>-webhook.secret`).
    webhook_secret_file: Option<PathBuf>,
    /// Post Slack incoming-webhook messages instead of Standard Webhooks events.
    webhook_slack: bool,
    /// No metrics and no `/metrics` (load tests measure with and without).
    no_metrics: bool,
    /// Record spans through OpenTelemetry (an SDK tracer with no exporter: what the spans
    /// cost, and their trace context taken from `_meta`).
    otel: bool,
}

/// What one connection and one request may take.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Until the request line and headers have arrived.
    header_timeout: Duration,
    /// The longest pause in a request body.
    body_timeout: Duration,
    /// From the request's headers to the response's: reading the body included.
    request_timeout: Duration,
    /// Requests handled at once, over all connections.
    max_in_flight: usize,
}

fn flags() -> Result<Flags, String> {
    let mut flags = Flags {
        addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
        data_dir: PathBuf::from("notes-data"),
        key: None,
        audience: None,
        replay_store: "memory".to_owned(),
        memory_notes: false,
        load_titles: 0,
        load_per_title: 3,
        without_confirmation: false,
        principal_budget: None,
        challenge_rate: ChallengeRate::Default,
        limits: Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_in_flight: 256,
        },
        audit_dir: None,
        audit_key_file: None,
        audit_witness_dir: None,
        audit_postgres: None,
        audit_table: None,
        no_audit_log: false,
        public_url: None,
        webhook_url: None,
        webhook_secret_file: None,
        webhook_slack: false,
        no_metrics: false,
        otel: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--addr" => flags.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--data-dir" => flags.data_dir = PathBuf::from(value()?),
            "--key" => flags.key = Some(value()?),
            "--audience" => flags.audience = Some(value()?),
            "--replay-store" => flags.replay_store = value()?,
            "--notes" => {
                flags.memory_notes = match value()?.as_str() {
                    "files" => false,
                    "memory" => true,
                    other => {
                        return Err(format!("--notes: expected files or memory, got {other:?}"));
                    }
                }
            }
            "--load-titles" => {
                flags.load_titles = value()?
                    .parse()
                    .map_err(|e| format!("--load-titles: {e}"))?;
            }
            "--load-notes-per-title" => {
                flags.load_per_title = value()?
                    .parse()
                    .map_err(|e| format!("--load-notes-per-title: {e}"))?;
                if !(1..=3).contains(&flags.load_per_title) {
                    return Err("--load-notes-per-title: 1, 2 or 3".into());
                }
            }
            "--principal-budget" => {
                let budget: usize = value()?
                    .parse()
                    .map_err(|e| format!("--principal-budget: {e}"))?;
                if budget == 0 {
                    return Err("--principal-budget: must be at least 1".into());
                }
                flags.principal_budget = Some(budget);
            }
            "--challenge-rate" => flags.challenge_rate = challenge_rate(&value()?)?,
            "--body-timeout-ms" => flags.limits.body_timeout = millis(&flag, &value()?)?,
            "--header-timeout-ms" => flags.limits.header_timeout = millis(&flag, &value()?)?,
            "--request-timeout-ms" => flags.limits.request_timeout = millis(&flag, &value()?)?,
            "--max-in-flight" => {
                flags.limits.max_in_flight = value()?
                    .parse::<usize>()
                    .map_err(|e| format!("--max-in-flight: {e}"))?
                    .max(1);
            }
            "--without-confirmation" => flags.without_confirmation = true,
            "--audit-dir" => flags.audit_dir = Some(PathBuf::from(value()?)),
            "--audit-key-file" => flags.audit_key_file = Some(PathBuf::from(value()?)),
            "--audit-witness-dir" => flags.audit_witness_dir = Some(PathBuf::from(value()?)),
            "--audit-postgres" => flags.audit_postgres = Some(value()?),
            "--audit-table" => flags.audit_table = Some(value()?),
            "--no-audit-log" => flags.no_audit_log = true,
            "--public-url" => flags.public_url = Some(public_url(&value()?)?),
            "--webhook-url" => flags.webhook_url = Some(value()?),
            "--webhook-secret-file" => flags.webhook_secret_file = Some(PathBuf::from(value()?)),
            "--webhook-slack" => flags.webhook_slack = true,
            "--no-metrics" => flags.no_metrics = true,
            "--otel" => flags.otel = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    Ok(flags)
}

/// `PER_SECOND:BURST`, or `off`.
fn challenge_rate(spec: &str) -> Result<ChallengeRate, String> {
    if spec == "off" {
        return Ok(ChallengeRate::Off);
    }
    let bad = || format!("--challenge-rate: expected PER_SECOND:BURST or off, got {spec:?}");
    let (per_second, burst) = spec.split_once(':').ok_or_else(bad)?;
    let per_second: u32 = per_second.parse().map_err(|_| bad())?;
    let burst: u32 = burst.parse().map_err(|_| bad())?;
    if per_second == 0 || burst == 0 {
        return Err(bad());
    }
    Ok(ChallengeRate::Limit { per_second, burst })
}

/// A positive number of milliseconds.
fn millis(flag: &str, value: &str) -> Result<Duration, String> {
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{flag}: expected a positive number of milliseconds, got {value:?}"
        )),
    }
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("{e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), String> {
    let flags = flags()?;
    tracing_setup(flags.otel);
    let metrics = (!flags.no_metrics).then(metrics_setup).transpose()?;
    let keys = match &flags.key {
        Some(hex) => KeyRing::single_hex("k1", hex).map_err(|e| format!("--key: {e}"))?,
        None => {
            eprintln!(
                "warning: no --key given, using a random signing key. Every instance behind one \
                 endpoint must share a key; pass --key <64+ hex digits> in production."
            );
            KeyRing::random()
        }
    };
    let store = if flags.memory_notes {
        notes::NotesStore::in_memory(&flags.data_dir, flags.load_titles, flags.load_per_title)
    } else {
        notes::NotesStore::open_with_load(&flags.data_dir, flags.load_titles)
    };
    let store = Arc::new(store.map_err(|e| e.to_string())?);
    let listener = tokio::net::TcpListener::bind(flags.addr)
        .await
        .map_err(|e| format!("bind {}: {e}", flags.addr))?;
    // The address bound (a port of 0 becomes the one the system chose).
    let addr = listener
        .local_addr()
        .map_err(|e| format!("bind {}: {e}", flags.addr))?;
    let url = format!("http://{addr}/mcp");
    // Instances behind one endpoint must share the audience, the key and the replay store.
    let audience = flags.audience.clone().unwrap_or_else(|| url.clone());
    let replay_store = replay_store(&flags.replay_store, flags.principal_budget).await?;
    let memory_replay_store = flags.replay_store.starts_with("memory");
    if flags.key.is_some() && memory_replay_store && !flags.without_confirmation {
        eprintln!(
            "warning: the memory replay store cannot promise single use across restarts, so \
             states issued before a restart are refused (\"ask again\"); use --replay-store \
             redis://… or postgres://… for that."
        );
    }
    let grant_store = grant_store(&flags.replay_store).await;
    let (audit_log, log_dir) = if flags.no_audit_log || flags.without_confirmation {
        (None, None)
    } else {
        let (log, dir) = audit_log(&flags)?;
        (Some(log), Some(dir))
    };
    if let Some(log) = &audit_log {
        // Stopped by a signal, the log signs what it holds first.
        let log = log.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = log.flush();
            std::process::exit(0);
        });
    }
    let log_lines = audit_log.as_ref().zip(log_dir).map(|(log, dir)| {
        let vkey = log.verifier().to_string();
        match &flags.audit_postgres {
            Some(url) => (
                vkey.clone(),
                format!(
                    "PostgreSQL table {table} at {url}\n    copy it: cargo run -p mcp-confirm-log --features postgres -- pull --postgres {url} --table {table} --dir DIR",
                    table = audit_table(&flags)
                ),
                "DIR".to_owned(),
            ),
            None => (vkey, dir.display().to_string(), dir.display().to_string()),
        }
    });
    let witness_dir = audit_witness_dir(&flags);
    let public_url = flags
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));
    let notifier = match &flags.webhook_url {
        Some(url) => Some(webhooks(&flags, url)?),
        None => None,
    };
    let options = app::Options {
        keys,
        audience,
        replay_store,
        grant_store,
        public_url: public_url.clone(),
        challenge_rate: flags.challenge_rate,
        without_confirmation: flags.without_confirmation,
        audit_log,
        notifier,
    };
    let (mut router, gauges) = app::app_with_gauges(Arc::clone(&store), options);
    if let Some(metrics) = metrics {
        router = router.route(
            "/metrics",
            axum::routing::get(move || scrape(metrics.clone(), gauges.clone())),
        );
    }
    let personal = store.workspace_uri("personal");
    println!("notes MCP server (2026-07-28) on {url}");
    match flags.principal_budget {
        Some(budget) => println!(
            "  replay store: {} (at most {budget} live entries per principal)",
            flags.replay_store
        ),
        None => println!("  replay store: {}", flags.replay_store),
    }
    if flags.memory_notes {
        println!(
            "  data: in memory ({} load titles), URIs under {}",
            flags.load_titles,
            store.root_path().display()
        );
    } else {
        println!("  data: {}", store.root_path().display());
    }
    println!("  tokens: alice-token (personal, team), bob-token (team)");
    if !flags.no_metrics {
        println!("  metrics: http://{addr}/metrics (Prometheus text)");
    }
    if !flags.without_confirmation {
        let (rp_id, rp_origin) = app::passkey_origin(&public_url);
        println!(
            "  notes_shred is approved by someone else with a passkey: register one at \
             {rp_origin}/passkeys (relying party {rp_id}); approvals wait at {rp_origin}/inbox"
        );
        if let Some(url) = &flags.webhook_url {
            println!(
                "  webhooks: to {url}, signed with the secret in {}",
                webhook_secret_file(&flags).display()
            );
        }
    }
    match &log_lines {
        Some((vkey, place, dir)) => {
            println!("  decision log: {place}");
            println!("    checkpoints witnessed in {}", witness_dir.display());
            println!(
                "    verify it: cargo run -p mcp-confirm-log -- verify --dir {dir} --key {vkey} --witness {}",
                witness_dir.display()
            );
        }
        None => println!("  decision log: off"),
    }
    if flags.without_confirmation {
        println!("  WITHOUT ConfirmLayer: notes_delete refuses every call");
    }
    println!("try the terminal client:");
    println!(
        "  cargo run --example notes_client -- --url {url} --data-dir {} delete --workspace personal Groceries",
        store.root_path().display()
    );
    println!("  (workspace personal is {personal})");
    serve(listener, router, flags.limits).await;
    Ok(())
}

/// Logs the audit events (not the span events); with `--otel`, sends the layer's spans to
/// an OpenTelemetry tracer provider too, their parents taken from the W3C trace context in
/// `params._meta`.
fn tracing_setup(otel: bool) {
    if otel {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        // No exporter: the demo measures and shows the spans, a deployment adds its own
        // (`opentelemetry-otlp`). The sampler is the SDK's default (parent-based, always on),
        // or what `OTEL_TRACES_SAMPLER` says.
        opentelemetry::global::set_tracer_provider(
            opentelemetry_sdk::trace::SdkTracerProvider::builder().build(),
        );
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "mcp_confirm=info,mcp_confirm::span=off,rmcp=warn".into()),
        )
        .init();
}

/// Installs the Prometheus recorder, with hour-long buckets for the answer times.
fn metrics_setup() -> Result<metrics_exporter_prometheus::PrometheusHandle, String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(mcp_confirm::metrics::ANSWER_SECONDS.to_owned()),
            mcp_confirm::metrics::ANSWER_SECONDS_BUCKETS,
        )
        .map_err(|e| format!("metrics: {e}"))?
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    mcp_confirm::metrics::describe();
    mcp_confirm_log::metrics::describe();
    // The exporter drains its histograms' samples on upkeep.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// `GET /metrics`: the Prometheus text exposition, the gauges counted in the stores first.
async fn scrape(
    handle: metrics_exporter_prometheus::PrometheusHandle,
    gauges: Option<mcp_confirm::metrics::Gauges>,
) -> impl axum::response::IntoResponse {
    if let Some(gauges) = gauges {
        gauges.refresh().await;
    }
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
}

/// `--public-url`: an absolute `http(s)` origin, with no path.
fn public_url(text: &str) -> Result<String, String> {
    let trimmed = text.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| format!("--public-url: expected http://HOST[:PORT], got {text:?}"))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return Err(format!(
            "--public-url: expected an origin (scheme, host, port), got {text:?}"
        ));
    }
    Ok(trimmed.to_owned())
}

/// The webhook signing secret's file: `--webhook-secret-file`, or `<data-dir>-webhook.secret`.
fn webhook_secret_file(flags: &Flags) -> PathBuf {
    flags.webhook_secret_file.clone().unwrap_or_else(|| {
        let mut name = flags.data_dir.as_os_str().to_owned();
        name.push("-webhook.secret");
        PathBuf::from(name)
    })
}

/// The approvers' notifier: signed webhooks to `url`, the secret kept in its file (created, mode
/// 0600, on first start) for the receiving side to read; never printed.
fn webhooks(flags: &Flags, url: &str) -> Result<mcp_confirm_pages::webhooks::Webhooks, String> {
    use mcp_confirm::notify::{Payload, WebhookSecret};
    use mcp_confirm_pages::webhooks::{WebhookEndpoint, Webhooks};
    let file = webhook_secret_file(flags);
    let secret = match std::fs::read_to_string(&file) {
        Ok(text) => WebhookSecret::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?,
        Err(_) => {
            let secret = WebhookSecret::random();
            write_secret(&file, &secret.expose())?;
            secret
        }
    };
    let mut endpoint = WebhookEndpoint::new(url, secret);
    if flags.webhook_slack {
        endpoint = endpoint.payload(Payload::Slack);
    }
    Webhooks::new([endpoint]).map_err(|e| format!("--webhook-url: {e}"))
}

/// The decision log's directory: `--audit-dir`, or `<data-dir>-decisions` beside the notes.
fn audit_dir(flags: &Flags) -> PathBuf {
    flags.audit_dir.clone().unwrap_or_else(|| {
        let mut name = flags.data_dir.as_os_str().to_owned();
        name.push("-decisions");
        PathBuf::from(name)
    })
}

/// `<audit-dir><suffix>`: where the demo keeps what belongs beside the log, not in it.
fn beside_audit_dir(flags: &Flags, suffix: &str) -> PathBuf {
    let mut name = audit_dir(flags).as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The witness directory: `--audit-witness-dir`, or `<audit-dir>.witness`.
fn audit_witness_dir(flags: &Flags) -> PathBuf {
    flags
        .audit_witness_dir
        .clone()
        .unwrap_or_else(|| beside_audit_dir(flags, ".witness"))
}

/// The demo's decision log: its signing seed is kept in `--audit-key-file` (created, mode 0600,
/// on first start), the signer's view beside it (`<audit-dir>.view`), and every checkpoint goes
/// to a witness directory (`--audit-witness-dir`). A real deployment keeps the key and the view
/// away from the log's disk and the witness on storage the log's writers cannot change: whoever
/// holds the key can rewrite history and sign it, and whoever holds the log, its view and its
/// witness together can roll all three back.
fn audit_log(flags: &Flags) -> Result<(mcp_confirm_log::AuditLog, PathBuf), String> {
    use mcp_confirm_log::{AuditLog, DirWitness, LogKey, LogOptions};
    let dir = audit_dir(flags);
    let key_file = flags
        .audit_key_file
        .clone()
        .unwrap_or_else(|| beside_audit_dir(flags, ".key"));
    let seed = match std::fs::read_to_string(&key_file) {
        Ok(text) => text.trim().to_owned(),
        Err(_) => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| format!("random: {e}"))?;
            let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
            write_secret(&key_file, &hex)?;
            hex
        }
    };
    let seed: [u8; 32] = (0..32)
        .map(|i| {
            seed.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| format!("{}: not 64 hex digits", key_file.display()))?;
    let key = LogKey::from_seed("notes.example/decisions", seed).map_err(|e| e.to_string())?;
    let witness = DirWitness::new(audit_witness_dir(flags), key.verifier())
        .map_err(|e| format!("decision log witness: {e}"))?;
    let view = beside_audit_dir(flags, ".view");
    let options = LogOptions {
        every: Duration::from_secs(1),
        ..LogOptions::default()
    };
    if let Some(url) = &flags.audit_postgres {
        // Shared by every instance given the same URL (and key file): one sequence, one tree.
        let table = audit_table(flags);
        let sink = mcp_confirm_log::PostgresLog::connect(url, table, key)
            .map_err(|e| format!("decision log in {url}: {e}"))?
            .view_file(view)
            .witness(witness);
        let verifier = key_again(seed)?.verifier();
        let log = AuditLog::new(sink, verifier, options).map_err(|e| e.to_string())?;
        return Ok((log, dir));
    }
    let options = LogOptions {
        view: Some(view),
        witnesses: vec![std::sync::Arc::new(witness)],
        ..options
    };
    match AuditLog::file(&dir, key, options) {
        // Two writers on one directory would sign two trees under one name: the second
        // instance does not start.
        Err(mcp_confirm_log::LogError::Locked) => Err(format!(
            "decision log {}: another instance writes it; give this one its own --data-dir (or \
             --audit-dir with its own --audit-key-file), or share one log through --audit-postgres",
            dir.display()
        )),
        other => other
            .map(|log| (log, dir.clone()))
            .map_err(|e| format!("decision log {}: {e}", dir.display())),
    }
}

fn audit_table(flags: &Flags) -> &str {
    flags
        .audit_table
        .as_deref()
        .unwrap_or(mcp_confirm_log::PostgresLog::DEFAULT_TABLE)
}

fn key_again(seed: [u8; 32]) -> Result<mcp_confirm_log::LogKey, String> {
    mcp_confirm_log::LogKey::from_seed("notes.example/decisions", seed).map_err(|e| e.to_string())
}

fn write_secret(path: &std::path::Path, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Serves `router` on every connection `listener` accepts, over HTTP/1.1, within `limits`.
///
/// Stopping: with a decision log, SIGTERM and SIGINT make the log sign what it holds, then the
/// process exits at once (connections are not drained); without one (`--no-audit-log`, as the
/// load generator runs it) no handler is installed and the signals end the process directly (and
/// a wrapper such as valgrind sees them).
async fn serve(listener: tokio::net::TcpListener, router: axum::Router, limits: Limits) {
    let service = ServiceBuilder::new()
        .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight))
        // A deadline for the whole request, body included: a body trickling in never trips the
        // body timeout below (it restarts at every chunk), but it does trip this one.
        .layer(TimeoutLayer::with_status_code(
            http::StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        // A stalled body fails the read after the timeout: the layer (or rmcp) answers and the
        // request, with whatever it buffered, is dropped.
        .layer(RequestBodyTimeoutLayer::new(limits.body_timeout))
        .service(router);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(service.clone()),
        );
        tokio::spawn(async move {
            // A connection's errors (a client gone, a timeout) concern that connection only.
            let _ = connection.await;
        });
    }
}

/// Where `notes_purge`'s grants are kept: beside the replay store (the same Redis or PostgreSQL),
/// in memory otherwise.
async fn grant_store(spec: &str) -> Arc<dyn mcp_confirm::grant::GrantStore> {
    use mcp_confirm::grant::MemoryGrantStore;
    use mcp_confirm::store::{PostgresStore, RedisStore};
    if (spec.starts_with("redis://") || spec.starts_with("rediss://"))
        && let Ok(store) = RedisStore::open(spec)
    {
        return Arc::new(store);
    }
    if (spec.starts_with("postgres://") || spec.starts_with("postgresql://"))
        && let Ok(store) = PostgresStore::connect(spec)
    {
        if let Err(e) = store.migrate().await {
            eprintln!(
                "warning: cannot prepare the grant table yet ({e}); purges are refused until it can"
            );
        }
        return Arc::new(store);
    }
    Arc::new(MemoryGrantStore::new())
}

/// The replay store named on the command line. A shared store that is down at start-up does not
/// stop the server: confirmations are refused (fail closed) until it answers.
///
/// `budget` caps one principal's live entries in whichever store (each store's default otherwise).
async fn replay_store(
    spec: &str,
    budget: Option<usize>,
) -> Result<Option<Arc<dyn app::Store>>, String> {
    use mcp_confirm::store::MemoryReplayStore;
    use mcp_confirm::store::{PostgresStore, RedisStore};
    if spec == "memory" {
        return Ok(budget.map(|budget| {
            let store = MemoryReplayStore::new().principal_budget(budget);
            Arc::new(store) as Arc<dyn app::Store>
        }));
    }
    if let Some(capacity) = spec.strip_prefix("memory:") {
        // Live nonces held at once: confirmations per second × (TTL + skew) at the least.
        let capacity = capacity
            .parse()
            .map_err(|e| format!("--replay-store memory:<capacity>: {e}"))?;
        let mut store = MemoryReplayStore::with_capacity(capacity);
        if let Some(budget) = budget {
            store = store.principal_budget(budget);
        }
        return Ok(Some(Arc::new(store)));
    }
    if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        let mut store = RedisStore::open(spec).map_err(|e| format!("--replay-store: {e}"))?;
        if let Some(budget) = budget {
            store = store.principal_budget(budget);
        }
        return Ok(Some(Arc::new(store)));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        let mut store = PostgresStore::connect(spec).map_err(|e| format!("--replay-store: {e}"))?;
        if let Some(budget) = budget {
            store = store.principal_budget(budget);
        }
        if let Err(e) = store.migrate().await {
            eprintln!(
                "warning: cannot prepare the replay-store table yet ({e}); confirmations are refused until it can"
            );
        }
        store.spawn_pruner(std::time::Duration::from_secs(60));
        return Ok(Some(Arc::new(store)));
    }
    Err(format!(
        "--replay-store: expected memory, memory:<capacity>, redis://… or postgres://…, got {spec:?}\n{USAGE}"
    ))
}
