//! `mcp-confirm-gateway --config FILE` runs the gateway; `check --config FILE` validates the
//! file and prints what each upstream tool gets, and why; `schema` prints the file's JSON Schema.
//! With `[metrics]`, the Prometheus text is served on a listener of its own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;

#[derive(Parser)]
#[command(
    name = "mcp-confirm-gateway",
    version,
    about = "Confirmations in front of any MCP server"
)]
struct Cli {
    /// The configuration file (TOML).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the file and print what each upstream tool gets (confirm / pass / deny), and why.
    Check,
    /// Print the file's JSON Schema.
    Schema,
}

fn load(path: Option<&Path>) -> Result<(GatewayConfig, PathBuf), String> {
    let path = path.ok_or("--config FILE is required")?;
    let config = GatewayConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let base = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    Ok((config, base))
}

#[tokio::main]
async fn main() -> ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: a file or a log collector gets plain lines,
        // not escape codes in every field.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Schema) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&mcp_confirm_gateway::config::schema())
                    .unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Some(Command::Check) => match check(cli.config.as_deref()).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        None => match run(cli.config.as_deref()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
    }
}

/// Prints each route's tools and verdicts; `false` if an upstream cannot be listed.
async fn check(path: Option<&Path>) -> Result<bool, String> {
    let (config, base) = load(path)?;
    // Reads only: a running gateway may hold the decision log, and a stopped one's must not be
    // opened (and signed) by a check.
    let gateway = Gateway::check(&config, &base).map_err(|e| e.to_string())?;
    println!(
        "{}: valid; audience {}",
        path.map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
        config.audience()
    );
    if let Some(log) = &config.decision_log {
        let verifier =
            mcp_confirm_gateway::server::log_verifier_key(log, &base).map_err(|e| e.to_string())?;
        println!("decision log: verifier key {verifier} (mcp-confirm-audit --key)");
    }
    let mut all_listed = true;
    for route in gateway.routes() {
        match route.catalog().await {
            Ok(catalog) => {
                println!("route {} (revision {}):", route.path(), catalog.revision);
                for (name, judged) in &catalog.judged {
                    let verdict = judged.verdict.to_string();
                    println!("  {name:<32} {verdict:<8} {}", judged.reason);
                }
                for name in &catalog.duplicates {
                    println!(
                        "  {name:<32} {:<8} listed twice by the upstream: never forwarded",
                        "deny"
                    );
                }
                for name in config
                    .routes
                    .iter()
                    .filter(|r| r.path.trim_end_matches('/') == route.path())
                    .flat_map(|r| r.tools.keys())
                    .filter(|name| !catalog.judged.contains_key(*name))
                {
                    println!("  {name:<32} (the operator names it; the upstream does not list it)");
                }
            }
            Err(e) => {
                all_listed = false;
                println!(
                    "route {}: {e}; its tools/call requests are refused",
                    route.path()
                );
            }
        }
    }
    Ok(all_listed)
}

async fn run(path: Option<&Path>) -> Result<(), String> {
    let (config, base) = load(path)?;
    let gateway = Gateway::build(&config, &base).map_err(|e| e.to_string())?;
    if let Some(path) = path {
        // A changed file is reloaded; one that does not validate is refused, the old one kept.
        gateway.watch(path.to_path_buf(), base.clone());
    }
    if let Some(metrics) = &config.metrics {
        // Its own listener: metrics are for operators, never served to the gateway's callers.
        let handle = mcp_confirm_gateway::metrics::install()?;
        let listener = tokio::net::TcpListener::bind(metrics.listen)
            .await
            .map_err(|e| format!("metrics: listening on {}: {e}", metrics.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        tracing::info!("metrics served on http://{addr}{}", metrics.path);
        let path = metrics.path.clone();
        tokio::spawn(async move {
            if let Err(e) = mcp_confirm_gateway::metrics::serve(listener, path, handle).await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    for route in gateway.routes() {
        tracing::info!("route http://{addr}{}", route.path());
    }
    tracing::info!("mcp-confirm-gateway listening on http://{addr}");
    let served = tokio::select! {
        served = gateway.serve(listener) => served.map_err(|e| e.to_string()),
        () = shutdown() => Ok(()),
    };
    // The decision log's writer signs what it holds in a last checkpoint as it closes: when the
    // last reference goes, with the runtime's tasks (the file watcher) as `main` returns.
    served
}

/// SIGINT (Ctrl-C) or SIGTERM (systemd, `docker stop`, Kubernetes): either ends the gateway
/// the same way, its decision log signed.
async fn shutdown() {
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(terminate) => terminate,
            Err(e) => {
                tracing::error!(error = %e, "SIGTERM cannot be handled; only Ctrl-C stops cleanly");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
