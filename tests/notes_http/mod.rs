//! Talking to a running notes server over HTTP, and running `notes_server` processes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// POSTs a `notes_delete` call with the MCP headers and alice's token; returns the JSON answer.
pub(crate) async fn post_delete(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    post(http, url, "alice-token", body).await.2
}

/// POSTs a JSON-RPC message as `token`, with the MCP headers its method and tool name call for;
/// returns the HTTP status, the headers and the JSON answer (`Null` for an empty body).
pub(crate) async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
) -> (u16, http::HeaderMap, Value) {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28");
    if let Some(method) = body["method"].as_str() {
        request = request.header("mcp-method", method);
    }
    if let Some(name) = body["params"]["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, headers, json)
}

/// A `tools/call` of `tool` with `arguments`, from a client that answers forms.
pub(crate) fn tool_call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                 "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}},
        "name":tool,"arguments":arguments}})
}

/// `call` as the retry answering `state` with `response` under the key `delete_choice`.
pub(crate) fn answering(mut call: Value, state: &str, response: Value) -> Value {
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] = json!({ "delete_choice": response });
    call
}

/// Accepting the form with `id` chosen.
pub(crate) fn accept(id: &str) -> Value {
    json!({"action":"accept","content":{"note_id":id,"confirm":true}})
}

/// The options the form of an `input_required` result offers (its `note_id` choices).
pub(crate) fn options(result: &Value) -> &Value {
    &result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]
        ["oneOf"]
}

/// The ids the form of an `input_required` result offers, in its order.
pub(crate) fn offered_ids(result: &Value) -> Vec<String> {
    options(result)
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["const"].as_str().unwrap().to_owned())
        .collect()
}

/// What the layer says became of a confirmation (`declined`, `revoked`, …).
pub(crate) fn outcome(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["io.github.mcp-confirm/outcome"]
}

/// The confirmation was revoked: an error result, and nothing done.
pub(crate) fn assert_revoked(answer: &Value) {
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(outcome(answer), "revoked", "{answer}");
}

/// The first text of a tool result answer.
pub(crate) fn result_text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The notes_server example, built by `cargo test` next to the test binaries; or the binary
/// named by `MCP_CONFIRM_NOTES_SERVER` (to run these tests against another build, e.g. an older
/// one, and see which fail).
pub(crate) fn server_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("MCP_CONFIRM_NOTES_SERVER") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/notes_server")
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `notes_server` process, killed on drop.
pub(crate) struct Instance {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub(crate) addr: String,
    /// `http://127.0.0.1:<port>/mcp`.
    pub(crate) url: String,
    /// Where its stderr goes.
    pub(crate) log: PathBuf,
}

impl Instance {
    /// Starts `notes_server --addr 127.0.0.1:<free port> --data-dir <data> <args>` and waits until
    /// it answers; its stdout and stderr go to a log file next to `data`.
    pub(crate) async fn start(data: &Path, args: &[&str]) -> Self {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = data.with_file_name(format!("server-{port}.log"));
        std::fs::create_dir_all(data.parent().unwrap()).unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(server_binary())
            .args(["--addr", &addr, "--data-dir"])
            .arg(data)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("run target/debug/examples/notes_server (cargo test builds it)");
        let url = format!("http://{addr}/mcp");
        let instance = Self {
            child,
            addr,
            url,
            log,
        };
        wait_up(&instance.url).await;
        instance
    }

    /// What the server printed so far.
    pub(crate) fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn wait_up(url: &str) {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(url).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} did not come up");
}

/// A throwaway directory, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}",
            mcp_confirm::store::Nonce::random().to_hex()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
