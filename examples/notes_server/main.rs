//! The notes server: a real MCP 2026-07-28 server on rmcp with `notes_delete` confirmed by
//! `ConfirmLayer`.
//!
//! ```text
//! cargo run --example notes_server -- [--addr 127.0.0.1:3000] [--data-dir ./notes-data] [--key <hex>]
//!     [--audience URL] [--replay-store memory[:CAPACITY]|redis://…|postgres://…] [--notes files|memory]
//!     [--load-titles N] [--without-confirmation]
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

const USAGE: &str = "usage: notes_server [--addr HOST:PORT] [--data-dir DIR] [--key HEX] \
     [--audience URL] [--replay-store memory[:CAPACITY]|redis://…|postgres://…] [--notes files|memory] \
     [--load-titles N] [--without-confirmation]";

struct Flags {
    addr: SocketAddr,
    data_dir: PathBuf,
    key: Option<String>,
    audience: Option<String>,
    replay_store: String,
    /// Keep the notes in memory (for load tests) instead of files.
    memory_notes: bool,
    load_titles: u64,
    without_confirmation: bool,
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
            "--without-confirmation" => flags.without_confirmation = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if flags.load_titles > 0 && !flags.memory_notes {
        return Err(format!("--load-titles needs --notes memory\n{USAGE}"));
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
    let store = if flags.memory_notes {
        notes::NotesStore::in_memory(&flags.data_dir, flags.load_titles)
    } else {
        notes::NotesStore::open(&flags.data_dir)
    };
    let store = Arc::new(store.map_err(|e| e.to_string())?);
    let url = format!("http://{}/mcp", flags.addr);
    // Instances behind one endpoint must share the audience, the key and the replay store.
    let audience = flags.audience.clone().unwrap_or_else(|| url.clone());
    let replay_store = replay_store(&flags.replay_store).await?;
    let options = app::Options {
        keys,
        audience,
        replay_store,
        without_confirmation: flags.without_confirmation,
    };
    let router = app::app(Arc::clone(&store), options);
    let listener = tokio::net::TcpListener::bind(flags.addr)
        .await
        .map_err(|e| format!("bind {}: {e}", flags.addr))?;
    let personal = store.workspace_uri("personal");
    println!("notes MCP server (2026-07-28) on {url}");
    println!("  replay store: {}", flags.replay_store);
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
    if flags.without_confirmation {
        println!("  WITHOUT ConfirmLayer: notes_delete refuses every call");
    }
    println!("try the terminal client:");
    println!(
        "  cargo run --example notes_client -- --url {url} --data-dir {} delete --workspace personal Groceries",
        store.root_path().display()
    );
    println!("  (workspace personal is {personal})");
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}

/// The replay store named on the command line. A shared store that is down at start-up does not
/// stop the server: confirmations are refused (fail closed) until it answers.
async fn replay_store(spec: &str) -> Result<Option<Arc<dyn mcp_confirm::ReplayStore>>, String> {
    use mcp_confirm::store::{PostgresReplayStore, RedisReplayStore};
    if spec == "memory" {
        return Ok(None);
    }
    if let Some(capacity) = spec.strip_prefix("memory:") {
        // Live nonces held at once: confirmations per second × (TTL + skew) at the least.
        let capacity = capacity
            .parse()
            .map_err(|e| format!("--replay-store memory:<capacity>: {e}"))?;
        return Ok(Some(Arc::new(
            mcp_confirm::MemoryReplayStore::with_capacity(capacity),
        )));
    }
    if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        let store = RedisReplayStore::open(spec).map_err(|e| format!("--replay-store: {e}"))?;
        return Ok(Some(Arc::new(store)));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        let store =
            PostgresReplayStore::connect(spec).map_err(|e| format!("--replay-store: {e}"))?;
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
