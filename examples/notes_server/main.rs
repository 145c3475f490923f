//! The notes server: a real MCP 2026-07-28 server on rmcp with `notes_delete` confirmed by
//! `ConfirmLayer`.
//!
//! ```text
//! cargo run --example notes_server -- [--addr 127.0.0.1:3000] [--data-dir ./notes-data] [--key <hex>]
//! ```
//!
//! On first run the data directory is created and seeded: workspace `personal` with three notes
//! titled "Groceries" (note-3, note-7, note-14) and two others, workspace `team` with two notes.
//! Tokens: `alice-token` (personal, team) and `bob-token` (team).

mod app;
mod notes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use mcp_confirm::KeyRing;

const USAGE: &str =
    "usage: notes_server [--addr HOST:PORT] [--data-dir DIR] [--key HEX] [--without-confirmation]";

struct Flags {
    addr: SocketAddr,
    data_dir: PathBuf,
    key: Option<String>,
    without_confirmation: bool,
}

fn flags() -> Result<Flags, String> {
    let mut flags = Flags {
        addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
        data_dir: PathBuf::from("notes-data"),
        key: None,
        without_confirmation: false,
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
            "--without-confirmation" => flags.without_confirmation = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    Ok(flags)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("{e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "mcp_confirm=info,rmcp=warn".into()),
        )
        .init();
    let flags = flags()?;
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
    let store = Arc::new(notes::NotesStore::open(&flags.data_dir).map_err(|e| e.to_string())?);
    let audience = format!("http://{}/mcp", flags.addr);
    let options = app::Options {
        keys,
        audience: audience.clone(),
        replay_store: None,
        without_confirmation: flags.without_confirmation,
    };
    let router = app::app(Arc::clone(&store), options);
    let listener = tokio::net::TcpListener::bind(flags.addr)
        .await
        .map_err(|e| format!("bind {}: {e}", flags.addr))?;
    let personal = store.workspace_uri("personal");
    println!("notes MCP server (2026-07-28) on {audience}");
    println!("  data: {}", store.root_path().display());
    println!("  tokens: alice-token (personal, team), bob-token (team)");
    if flags.without_confirmation {
        println!("  WITHOUT ConfirmLayer: notes_delete refuses every call");
    }
    println!("try the terminal client:");
    println!(
        "  cargo run --example notes_client -- --url {audience} --data-dir {} delete --workspace personal Groceries",
        store.root_path().display()
    );
    println!("  (workspace personal is {personal})");
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}
