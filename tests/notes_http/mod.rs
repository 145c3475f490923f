//! Talking to a running notes server over HTTP, as alice.

use serde_json::Value;

/// POSTs a `notes_delete` call with the MCP headers and alice's token; returns the JSON answer.
pub(crate) async fn post_delete(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", "Bearer alice-token")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "notes_delete")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
