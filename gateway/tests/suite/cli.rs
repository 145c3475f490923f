//! The command line: `check` prints what each upstream tool gets and why, `schema` the file's
//! JSON Schema, and a file that does not validate is refused with its reason.

use std::process::Command;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

fn gateway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcp-confirm-gateway"))
}

async fn upstream() -> String {
    let app = Router::new().route(
        "/mcp",
        post(|body: axum::Json<Value>| async move {
            axum::Json(json!({"jsonrpc": "2.0", "id": body.0["id"], "result": {
            "resultType": "complete", "ttlMs": 1000, "cacheScope": "public", "tools": [
                {"name": "notes_list", "annotations": {"readOnlyHint": true}},
                {"name": "notes_delete", "annotations": {"destructiveHint": true}},
                {"name": "notes_touch"},
                {"name": "notes_purge"},
            ]}}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

fn config_dir(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gateway-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), "alice alice-token-0123456789\n").unwrap();
    std::fs::write(dir.join("gateway.toml"), text).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn check_prints_what_each_tool_gets_and_why() {
    let url = upstream().await;
    let dir = config_dir(
        "check",
        &format!(
            "[auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n\n[[route]]\npath = \"/notes/mcp\"\n\
             upstream = \"{url}\"\n[route.tools.notes_purge]\npolicy = \"deny\"\n\
             [route.tools.notes_delete]\npolicy = \"confirm\"\n\
             [route.tools.notes_delete.lookup]\ntool = \"notes_list\"\nrecords = \"$.notes[*]\"\n\
             id = \"/id\"\nselect_into = \"id\"\n\
             [route.tools.notes_touch]\npolicy = \"confirm\"\n\
             [route.tools.notes_touch.lookup]\ntool = \"notes_purge\"\nrecords = \"$.notes[*]\"\n\
             id = \"/id\"\nselect_into = \"id\"\n"
        ),
    );
    let out = tokio::task::spawn_blocking(move || {
        gateway()
            .args(["check", "--config"])
            .arg(dir.join("gateway.toml"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (tool, verdict, why) in [
        ("notes_delete", "pick one", "the operator's entry"),
        ("notes_list", "pass", "readOnlyHint: true"),
        ("notes_purge", "deny", "the operator's entry"),
        // A lookup through a tool the gateway does not pass: denied, and why.
        ("notes_touch", "deny", "its lookup tool"),
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(tool))
            .unwrap_or_else(|| panic!("{tool} missing:\n{text}"));
        assert!(line.contains(verdict) && line.contains(why), "{line}");
    }
}

#[test]
fn check_refuses_a_file_that_does_not_validate() {
    let dir = config_dir(
        "invalid",
        "[auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n\n[[route]]\npath = \"notes\"\nupstream = \"http://127.0.0.1:1/mcp\"\n",
    );
    let out = gateway()
        .args(["check", "--config"])
        .arg(dir.join("gateway.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("starting with `/`"));
}

#[test]
fn check_says_which_upstream_cannot_be_listed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let dir = config_dir(
        "down",
        &format!(
            "[auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n\n[[route]]\npath = \"/x/mcp\"\nupstream = \"{url}\"\n"
        ),
    );
    let out = gateway()
        .args(["check", "--config"])
        .arg(dir.join("gateway.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("its tools/call requests are refused"));
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    // #52, finding 7d: the log lines had ANSI colour codes in them with stderr a pipe or a
    // file, as a log collector sees it. NO_COLOR is left unset: the terminal alone decides.
    let url = upstream().await;
    let dir = config_dir(
        "colour",
        &format!(
            "[auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n\n[[route]]\n\
             path = \"/notes/mcp\"\nupstream = \"{url}\"\n"
        ),
    );
    let out = tokio::task::spawn_blocking(move || {
        gateway()
            .args(["check", "--config"])
            .arg(dir.join("gateway.toml"))
            .env_remove("NO_COLOR")
            .env("RUST_LOG", "info")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    let logged = String::from_utf8_lossy(&out.stderr);
    // The build's warning about static tokens is there, as plain text.
    assert!(logged.contains("static tokens"), "{logged}");
    assert!(!logged.contains('\u{1b}'), "{logged:?}");
}

#[test]
fn schema_is_a_json_schema_of_the_file() {
    let out = gateway().arg("schema").output().unwrap();
    assert!(out.status.success());
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["title"], "GatewayConfig");
    assert!(schema["properties"]["route"].is_object(), "{schema}");
}

const LOG_SEED: &str = "0101010101010101010101010101010101010101010101010101010101010101";

/// A file with a decision log in `decisions/` and a route to `url`.
fn with_log(url: &str, every: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n\
         [auth]\nkind = \"static_tokens\"\nfile = \"tokens\"\n\n\
         [decision_log]\nname = \"gateway.test/decisions\"\nkey = {{ file = \"log.key\" }}\n\
         store = {{ kind = \"file\", dir = \"decisions\" }}\ncheckpoint_every = \"{every}\"\n\n\
         [[route]]\npath = \"/notes/mcp\"\nupstream = \"{url}\"\n"
    )
}

/// Every file under `dir` and its bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

async fn run_check(dir: std::path::PathBuf) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        gateway()
            .args(["check", "--config"])
            .arg(dir.join("gateway.toml"))
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// `check` reads, never writes (#52, 10b): on the file of a running gateway (whose writer holds
/// the decision log) it passes, and on a stopped one's it changes nothing in the log. It prints
/// the log's verifier key, which `mcp-confirm-audit` needs (#52, 10d).
#[tokio::test(flavor = "multi_thread")]
async fn check_reads_the_decision_log_without_opening_it() {
    let url = upstream().await;
    let dir = config_dir("check-log", &with_log(&url, "10s"));
    std::fs::write(dir.join("log.key"), LOG_SEED).unwrap();
    let running = crate::common::build(&dir, &with_log(&url, "10s")).unwrap();
    let out = run_check(dir.clone()).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("decision log: verifier key gateway.test/decisions+"),
        "{text}"
    );
    drop(running);
    let before = snapshot(&dir.join("decisions"));
    assert!(!before.is_empty());
    let out = run_check(dir.clone()).await;
    assert!(out.status.success());
    assert_eq!(
        snapshot(&dir.join("decisions")),
        before,
        "check wrote to a stopped gateway's log"
    );
}

/// SIGTERM (systemd, `docker stop`, Kubernetes) stops the gateway as Ctrl-C does: the decision
/// log's last records are signed by a checkpoint as it closes (#52, 10c). It was killed,
/// leaving them unsigned.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_signs_the_decision_logs_last_records() {
    use std::io::BufRead;
    let url = upstream().await;
    // No checkpoint but the one at shutdown.
    let dir = config_dir("sigterm", &with_log(&url, "1h"));
    std::fs::write(dir.join("log.key"), LOG_SEED).unwrap();
    let mut child = gateway()
        .args(["--config"])
        .arg(dir.join("gateway.toml"))
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the gateway never said where it listens");
        if let Some(at) = line.find("listening on http://") {
            break line[at + "listening on http://".len()..].trim().to_owned();
        }
    };
    // A confirmed call: its challenge is a record.
    let client = crate::common::client();
    let asked = crate::common::post_call(
        &client,
        &format!("http://{addr}/notes/mcp"),
        Some("alice-token-0123456789"),
        &crate::common::call(1, "notes_delete", json!({"title": "Groceries"})),
        &[],
    )
    .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
    let key = mcp_confirm_log::LogKey::from_seed("gateway.test/decisions", [1; 32]).unwrap();
    let verified = mcp_confirm_log::verify(&dir.join("decisions"), &key.verifier(), &[]).unwrap();
    assert!(!verified.records.is_empty());
    assert!(
        verified.findings.is_empty(),
        "records left unsigned: {:?}",
        verified.findings
    );
    assert_eq!(
        verified.latest().map(|c| c.size),
        Some(verified.records.len() as u64)
    );
}
