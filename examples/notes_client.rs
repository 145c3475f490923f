//! A terminal client for the notes server: shows the confirmation form the way a person sees it.
//!
//! ```text
//! cargo run --example notes_client -- delete --workspace personal Groceries
//! cargo run --example notes_client -- list --workspace personal
//! cargo run --example notes_client -- create --workspace team "Lunch" "Friday at noon"
//! ```
//!
//! Flags: `--url` (default `http://127.0.0.1:3000/mcp`), `--token` (default `alice-token`),
//! `--data-dir` (default `notes-data`, to turn a workspace name into its `file://` URI; a
//! `--workspace` that is already a URI is used as is), and for scripted use `--decline`,
//! `--cancel`, or `--choose N` (accept the N-th choice and confirm without asking).
//!
//! It is an rmcp client in 2026-07-28 mode that declares form elicitation; rmcp drives the
//! `input_required` rounds and hands each form to this client's elicitation handler.

use std::io::Write;
use std::path::PathBuf;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, JsonObject, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData};
use serde_json::{Map, Value, json};

const USAGE: &str = "usage: notes_client [--url URL] [--token TOKEN] [--data-dir DIR] \
[--decline | --cancel | --choose N] (list --workspace W | create --workspace W TITLE BODY | delete --workspace W TITLE)";

/// How the form gets answered.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Ask,
    Decline,
    Cancel,
    Choose(usize),
}

#[derive(Clone)]
struct TerminalClient {
    mode: Mode,
}

impl ClientHandler for TerminalClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation":{"form":{}}})).unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("notes_client", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
        let mode = self.mode;
        // Terminal input blocks; keep it off the async runtime's threads.
        tokio::task::spawn_blocking(move || fill_form(&message, &schema, mode))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// Shows a flat form and answers it: choices are numbered, booleans are yes/no.
fn fill_form(message: &str, schema: &Value, mode: Mode) -> ElicitResult {
    println!("\n┌─ the server asks for your confirmation");
    println!("│ {message}");
    let empty = Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    let mut content = Map::new();
    // Choices first, then the yes/no, whatever order the schema's keys arrive in.
    let mut fields: Vec<(&String, &Value)> = properties.iter().collect();
    fields.sort_by_key(|(_, spec)| spec["type"] == "boolean");
    for (field, spec) in fields {
        let title = spec["title"].as_str().unwrap_or(field);
        if let Some(choices) = choices(spec) {
            println!("│ {title}");
            for (i, (_, label)) in choices.iter().enumerate() {
                println!("│   {}) {label}", i + 1);
            }
            let picked = match mode {
                // `--choose N` picks the record; a standing approval is never given unasked:
                // "how long" takes its first option, only this time.
                Mode::Choose(_) if field == "remember" => 1,
                Mode::Choose(n) => n,
                Mode::Decline | Mode::Cancel => 0,
                Mode::Ask => loop {
                    let line = prompt(&format!(
                        "│ choose 1-{} (or d to decline, c to cancel): ",
                        choices.len()
                    ));
                    match line.as_str() {
                        "d" => return outcome(ElicitationAction::Decline),
                        "c" | "" => return outcome(ElicitationAction::Cancel),
                        n => match n.parse::<usize>() {
                            Ok(n) if (1..=choices.len()).contains(&n) => break n,
                            _ => println!("│ please type a number from 1 to {}", choices.len()),
                        },
                    }
                },
            };
            if let Some((id, _)) = choices.get(picked.wrapping_sub(1)) {
                content.insert(field.clone(), Value::String(id.clone()));
            }
        } else if spec["type"] == "boolean" {
            let yes = match mode {
                Mode::Choose(_) => {
                    println!("│ {title}? yes");
                    true
                }
                Mode::Decline | Mode::Cancel => false,
                Mode::Ask => matches!(prompt(&format!("│ {title}? [y/N]: ")).as_str(), "y" | "yes"),
            };
            content.insert(field.clone(), Value::Bool(yes));
        }
    }
    match mode {
        Mode::Decline => {
            println!("└─ declined");
            outcome(ElicitationAction::Decline)
        }
        Mode::Cancel => {
            println!("└─ dismissed");
            outcome(ElicitationAction::Cancel)
        }
        Mode::Ask | Mode::Choose(_) => {
            println!("└─ sent");
            ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
        }
    }
}

fn outcome(action: ElicitationAction) -> ElicitResult {
    ElicitResult::new(action)
}

/// `(id, label)` pairs of a titled single-select (`oneOf`) or a plain `enum`.
fn choices(spec: &Value) -> Option<Vec<(String, String)>> {
    if let Some(options) = spec["oneOf"].as_array() {
        return Some(
            options
                .iter()
                .filter_map(|o| {
                    let id = o["const"].as_str()?;
                    Some((id.to_owned(), o["title"].as_str().unwrap_or(id).to_owned()))
                })
                .collect(),
        );
    }
    spec["enum"].as_array().map(|ids| {
        ids.iter()
            .filter_map(Value::as_str)
            .map(|id| (id.to_owned(), id.to_owned()))
            .collect()
    })
}

fn prompt(question: &str) -> String {
    print!("{question}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    line.trim().to_lowercase()
}

struct Args {
    url: String,
    token: String,
    data_dir: PathBuf,
    mode: Mode,
    command: String,
    workspace: Option<String>,
    rest: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        url: "http://127.0.0.1:3000/mcp".into(),
        token: "alice-token".into(),
        data_dir: PathBuf::from("notes-data"),
        mode: Mode::Ask,
        command: String::new(),
        workspace: None,
        rest: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--url" => args.url = value()?,
            "--token" => args.token = value()?,
            "--data-dir" => args.data_dir = PathBuf::from(value()?),
            "--workspace" => args.workspace = Some(value()?),
            "--decline" => args.mode = Mode::Decline,
            "--cancel" => args.mode = Mode::Cancel,
            "--choose" => {
                args.mode = Mode::Choose(value()?.parse().map_err(|_| "--choose needs a number")?)
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if args.command.is_empty() => args.command = arg,
            _ => args.rest.push(arg),
        }
    }
    Ok(args)
}

fn workspace_uri(args: &Args) -> Result<String, String> {
    let workspace = args.workspace.as_deref().ok_or("--workspace is required")?;
    if workspace.contains("://") {
        return Ok(workspace.to_owned());
    }
    let root = args.data_dir.canonicalize().map_err(|e| {
        format!(
            "--data-dir {}: {e} (pass the server's data directory)",
            args.data_dir.display()
        )
    })?;
    Ok(format!("file://{}", root.join(workspace).display()))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let args = parse()?;
    let uri = workspace_uri(&args)?;
    let (name, arguments) = match (args.command.as_str(), args.rest.as_slice()) {
        ("list", []) => ("notes_list", json!({"workspaceUri": uri})),
        ("create", [title, body]) => (
            "notes_create",
            json!({"workspaceUri": uri, "title": title, "body": body}),
        ),
        ("delete", [title]) => ("notes_delete", json!({"workspaceUri": uri, "title": title})),
        _ => return Err(USAGE.into()),
    };
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(args.url.clone())
            .auth_header(args.token.clone()),
    );
    let client = TerminalClient { mode: args.mode }
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .map_err(|e| format!("cannot reach {}: {e}", args.url))?;
    let arguments: JsonObject = serde_json::from_value(arguments).unwrap_or_default();
    println!("→ {name} {}", Value::Object(arguments.clone()));
    let result = client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .map_err(|e| format!("✗ {e}"))?;
    let text: Vec<String> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    let mark = if result.is_error == Some(true) {
        "✗"
    } else {
        "✓"
    };
    println!("{mark} {}", text.join("\n  "));
    let _ = client.cancel().await;
    Ok(())
}
