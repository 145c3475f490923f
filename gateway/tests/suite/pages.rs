//! The library's pages served by the gateway: browser approvals decided on the approval page,
//! approvers finding theirs in the inbox, and who a browser visitor is (named by a sign-in proxy
//! that proves itself with a shared secret).

use crate::common;
use std::sync::{Arc, Mutex};

use crate::common::{ALICE, OWN_KEY, PAGES, SECRET, STATIC_TOKENS};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use serde_json::{Value, json};

/// What the upstream ran, and the headers each request came with.
#[derive(Clone, Default)]
struct Upstream {
    ran: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn serve_upstream(
    State(up): State<Upstream>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> axum::Json<Value> {
    let message = body.0;
    up.headers.lock().unwrap().push(headers);
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": [
            {"name": "notes_delete", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_wipe", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_list", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}}]}),
        _ => {
            up.ran.lock().unwrap().push(message["params"].clone());
            json!({"resultType": "complete", "content": [{"type": "text", "text": "deleted"}]})
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
}

struct Fixture {
    origin: String,
    up: Upstream,
    client: common::Client,
}

const TOOLS: &str = r#"
    [route.tools.notes_delete]
    policy = "confirm"
    approve_in = "browser"
    [route.tools.notes_wipe]
    policy = "confirm"
    approvers = { any_of = ["bob"] }
"#;

async fn fixture() -> Fixture {
    let up = Upstream::default();
    let upstream = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(up.clone()),
    )
    .await;
    let dir = common::temp_dir("pages");
    std::fs::write(dir.join("proxy-secret"), SECRET).unwrap();
    let (listener, addr) = common::bind().await;
    let text = format!(
        "listen = \"{addr}\"\naudience = \"http://{addr}\"\n{PAGES}\n{STATIC_TOKENS}\n\
         [[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream}\"\n{TOOLS}\n"
    );
    let gateway = common::build(&dir, &text).unwrap();
    common::serve(&gateway, listener);
    Fixture {
        origin: format!("http://{addr}"),
        up,
        client: common::client(),
    }
}

fn call(id: i64, tool: &str) -> Value {
    common::call_with(id, tool, json!({"title": "Groceries"}), true)
}

fn retry(first: &Value, id: i64, state: &str) -> Value {
    common::retry(
        first,
        id,
        &json!(state),
        json!({OWN_KEY: {"action": "accept"}}),
    )
}

impl Fixture {
    async fn mcp(&self, body: &Value, extra: &[(&str, &str)]) -> Value {
        let url = format!("{}/notes/mcp", self.origin);
        common::post_call(&self.client, &url, Some(ALICE), body, extra).await
    }

    /// A page request through the gateway, as the sign-in proxy would send it for `user`
    /// (with `secret`, or none).
    async fn page(
        &self,
        method: &str,
        url: &str,
        user: Option<&str>,
        secret: Option<&str>,
        form: Option<&str>,
    ) -> (u16, String) {
        common::proxy_page(
            &self.client,
            &self.origin,
            (method, url),
            user,
            secret,
            form,
        )
        .await
    }
}

/// The page's URL and the state, from a URL-mode `input_required`.
fn sent_to_page(answer: &Value) -> (String, String) {
    let request = &answer["result"]["inputRequests"][OWN_KEY];
    assert_eq!(request["params"]["mode"], "url", "{answer}");
    (
        request["params"]["url"].as_str().unwrap().to_owned(),
        answer["result"]["requestState"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_owned()
}

#[tokio::test]
async fn approved_on_the_page_the_retry_runs_and_declined_it_does_not() {
    let f = fixture().await;
    for (decision, runs) in [("decline", false), ("approve", true)] {
        let first = call(1, "notes_delete");
        let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
        assert!(
            url.starts_with(&format!("{}/notes/mcp/approve/", f.origin)),
            "{url}"
        );
        // A client's automatic accept before anyone decided: asked again, nothing runs.
        let early = f.mcp(&retry(&first, 2, &state), &[]).await;
        assert_eq!(sent_to_page(&early).0, url);
        let (status, html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("notes_delete"), "{html}");
        let form = format!("csrf={}&decision={decision}", csrf(&html));
        let (status, body) = f
            .page("POST", &url, Some("alice"), Some(SECRET), Some(&form))
            .await;
        assert_eq!(status, 200, "{body}");
        let after = f.mcp(&retry(&first, 3, &state), &[]).await;
        let ran = f.up.ran.lock().unwrap().len();
        if runs {
            assert_eq!(after["result"]["content"][0]["text"], "deleted", "{after}");
            assert_eq!(ran, 1);
        } else {
            assert_eq!(ran, 0, "{after}");
        }
    }
}

#[tokio::test]
async fn only_the_proxy_with_its_secret_names_a_visitor() {
    let f = fixture().await;
    let first = call(1, "notes_delete");
    let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
    // No secret, a wrong one, or a user header alone: no one is signed in, nothing is shown.
    for secret in [None, Some("wrong-secret-0123456789"), Some("")] {
        let (status, html) = f.page("GET", &url, Some("alice"), secret, None).await;
        assert_ne!(status, 200, "{secret:?}: {html}");
        assert!(!html.contains("notes_delete"), "{secret:?}");
    }
    // Someone else, signed in: not theirs to see or decide.
    let (status, html) = f
        .page("GET", &url, Some("mallory"), Some(SECRET), None)
        .await;
    assert_ne!(status, 200, "{html}");
    assert!(!html.contains("notes_delete"));
    // And a post that carries alice's name without the secret decides nothing.
    let (_, alice_html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
    let form = format!("csrf={}&decision=approve", csrf(&alice_html));
    let (status, _) = f.page("POST", &url, Some("alice"), None, Some(&form)).await;
    assert_ne!(status, 200);
    let after = f.mcp(&retry(&first, 2, &state), &[]).await;
    assert_eq!(sent_to_page(&after).0, url, "still waiting");
    assert!(f.up.ran.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_approver_finds_the_call_in_the_inbox_and_decides_it() {
    let f = fixture().await;
    let first = call(1, "notes_wipe");
    let (url, state) = sent_to_page(&f.mcp(&first, &[]).await);
    // The caller cannot approve their own call.
    let (_, html) = f.page("GET", &url, Some("alice"), Some(SECRET), None).await;
    assert!(
        !html.contains("name=\"decision\" value=\"approve\""),
        "{html}"
    );
    // Bob's inbox lists it; he approves.
    let inbox = format!("{}/notes/mcp/inbox", f.origin);
    let (status, listing) = f.page("GET", &inbox, Some("bob"), Some(SECRET), None).await;
    assert_eq!(status, 200, "{listing}");
    assert!(listing.contains("notes_wipe"), "{listing}");
    let (status, html) = f.page("GET", &url, Some("bob"), Some(SECRET), None).await;
    assert_eq!(status, 200, "{html}");
    let form = format!("csrf={}&decision=approve", csrf(&html));
    let (status, body) = f
        .page("POST", &url, Some("bob"), Some(SECRET), Some(&form))
        .await;
    assert_eq!(status, 200, "{body}");
    let done = f.mcp(&retry(&first, 2, &state), &[]).await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
}

#[tokio::test]
async fn the_proxy_secret_never_goes_upstream() {
    let f = fixture().await;
    // A passed call, sent with the proxy's secret (a proxy in front of the MCP path too).
    let listed = f
        .mcp(&call(1, "notes_list"), &[("x-proxy-secret", SECRET)])
        .await;
    assert_eq!(
        listed["result"]["content"][0]["text"], "deleted",
        "{listed}"
    );
    assert_eq!(f.up.ran.lock().unwrap().len(), 1);
    let headers = f.up.headers.lock().unwrap();
    assert!(headers.len() >= 2, "the list and the call");
    assert!(headers.iter().all(|h| !h.contains_key("x-proxy-secret")));
}

#[test]
fn pages_a_hurried_operator_writes_are_refused() {
    let route = r#"
        [auth]
        kind = "static_tokens"
        file = "tokens"
        [[route]]
        path = "/notes/mcp"
        upstream = "http://127.0.0.1:9/mcp"
    "#;
    for (text, says) in [
        (format!("{route}{TOOLS}"), "no `[pages]`"),
        (
            format!(
                "{PAGES}{route}[route.tools.x]\npolicy = \"confirm\"\napprovers = {{ any_of = [\"bob\"], role = \"admin\" }}"
            ),
            "exactly one of",
        ),
        (
            format!(
                "{PAGES}{route}[route.tools.x]\npolicy = \"confirm\"\napprovers = {{ anyone_but_caller = true }}\nstanding = {{ scope = \"/w\", up_to = \"1h\", uses = 2 }}"
            ),
            "cannot go together",
        ),
        (
            format!("{PAGES}{route}[route.tools.x]\npolicy = \"allow\"\napprove_in = \"browser\""),
            "only go with",
        ),
    ] {
        let error = GatewayConfig::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}
