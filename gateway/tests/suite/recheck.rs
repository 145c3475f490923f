//! Approver rules that exclude the caller, from the file (#52, 10a): such a rule needs the
//! deployment's live check of each approver (`approvers.recheck`), which the gateway asks right
//! before the approved call runs, failing closed; and a file the gateway cannot build is refused
//! (on reload, at start, by `check`) with its reason, the configuration in force kept.

use crate::common;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{ALICE, OWN_KEY, PAGES, SECRET, STATIC_TOKENS};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// What the upstream ran.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<Value>>>);

async fn serve_upstream(State(ran): State<Ran>, body: axum::Json<Value>) -> axum::Json<Value> {
    let message = body.0;
    let result = match message["method"].as_str() {
        Some("tools/list") => json!({"resultType": "complete", "tools": [
            {"name": "notes_wipe", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}},
            {"name": "notes_list", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}}]}),
        _ => {
            ran.0.lock().unwrap().push(message["params"].clone());
            json!({"resultType": "complete", "content": [{"type": "text", "text": "done"}]})
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
}

/// What the recheck endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Says {
    Yes,
    No,
    /// 500.
    Fails,
    /// Never answers.
    Hangs,
    /// 200 with a body that is not the answer.
    Babbles,
}

/// The recheck endpoint's mode and the questions it was asked.
#[derive(Clone)]
struct Endpoint {
    says: Arc<Mutex<Says>>,
    asked: Arc<Mutex<Vec<Value>>>,
}

async fn recheck(
    State(endpoint): State<Endpoint>,
    body: axum::Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    endpoint.asked.lock().unwrap().push(body.0);
    let says = *endpoint.says.lock().unwrap();
    match says {
        Says::Yes => axum::Json(json!({"still_approver": true})).into_response(),
        Says::No => axum::Json(json!({"still_approver": false})).into_response(),
        Says::Fails => (http::StatusCode::INTERNAL_SERVER_ERROR, "down").into_response(),
        Says::Babbles => axum::Json(json!({"ok": true})).into_response(),
        Says::Hangs => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            axum::Json(json!({"still_approver": true})).into_response()
        }
    }
}

struct Fixture {
    origin: String,
    upstream: String,
    dir: std::path::PathBuf,
    addr: std::net::SocketAddr,
    gateway: Gateway,
    ran: Ran,
    client: common::Client,
}

fn file_text(addr: std::net::SocketAddr, upstream: &str, tools: &str) -> String {
    format!(
        "listen = \"{addr}\"\naudience = \"http://{addr}\"\n{PAGES}\n{STATIC_TOKENS}\n\
         [[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream}\"\n{tools}\n"
    )
}

async fn fixture(tools: &str) -> Fixture {
    let ran = Ran::default();
    let upstream = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(ran.clone()),
    )
    .await;
    let dir = common::temp_dir("recheck");
    std::fs::write(dir.join("proxy-secret"), SECRET).unwrap();
    let (listener, addr) = common::bind().await;
    let gateway = common::build(&dir, &file_text(addr, &upstream, tools)).unwrap();
    common::serve(&gateway, listener);
    Fixture {
        origin: format!("http://{addr}"),
        upstream,
        dir,
        addr,
        gateway,
        ran,
        client: common::client(),
    }
}

impl Fixture {
    /// The file with `tools` instead, written and reloaded.
    fn reload(&self, tools: &str) -> Result<(), String> {
        let path = self.dir.join("gateway.toml");
        std::fs::write(&path, file_text(self.addr, &self.upstream, tools)).unwrap();
        let config = GatewayConfig::load(&path).map_err(|e| e.to_string())?;
        self.gateway
            .reload(&config, &self.dir)
            .map_err(|e| e.to_string())
    }

    async fn mcp(&self, body: &Value) -> Value {
        let url = format!("{}/notes/mcp", self.origin);
        common::post_call(&self.client, &url, Some(ALICE), body, &[]).await
    }

    /// A page request as the sign-in proxy sends it for `user`.
    async fn page(&self, method: &str, url: &str, user: &str, form: Option<&str>) -> (u16, String) {
        common::proxy_page(
            &self.client,
            &self.origin,
            (method, url),
            Some(user),
            Some(SECRET),
            form,
        )
        .await
    }

    /// Alice calls `tool`; bob approves it on its page; alice retries. The retry's answer.
    async fn approved_by_bob(&self, tool: &str, id: i64) -> Value {
        let first = common::call_with(id, tool, json!({"title": "Groceries"}), true);
        let asked = self.mcp(&first).await;
        let request = &asked["result"]["inputRequests"][OWN_KEY];
        assert_eq!(request["params"]["mode"], "url", "{asked}");
        let url = request["params"]["url"].as_str().unwrap().to_owned();
        let state = asked["result"]["requestState"].clone();
        let (status, html) = self.page("GET", &url, "bob", None).await;
        assert_eq!(status, 200, "{html}");
        let form = format!("csrf={}&decision=approve", csrf(&html));
        let (status, body) = self.page("POST", &url, "bob", Some(&form)).await;
        assert_eq!(status, 200, "{body}");
        let retry = common::retry(
            &first,
            id + 1,
            &state,
            json!({OWN_KEY: {"action": "accept"}}),
        );
        self.mcp(&retry).await
    }
}

fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_owned()
}

/// A recheck endpoint on a free port; its URL.
async fn serve_endpoint(endpoint: &Endpoint) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/recheck", listener.local_addr().unwrap());
    let router = Router::new()
        .route("/recheck", post(recheck))
        .with_state(endpoint.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

#[tokio::test]
async fn anyone_but_the_caller_runs_only_when_the_recheck_endpoint_says_yes() {
    let endpoint = Endpoint {
        says: Arc::new(Mutex::new(Says::Yes)),
        asked: Arc::default(),
    };
    let url = serve_endpoint(&endpoint).await;
    let tools = format!(
        "[route.tools.notes_wipe]\npolicy = \"confirm\"\n\
         approvers = {{ anyone_but_caller = true, recheck = {{ url = \"{url}\", timeout = \"1s\" }} }}\n"
    );
    let f = fixture(&tools).await;
    let mut id = 1;
    for says in [Says::No, Says::Fails, Says::Hangs, Says::Babbles, Says::Yes] {
        *endpoint.says.lock().unwrap() = says;
        let before = endpoint.asked.lock().unwrap().len();
        let answer = f.approved_by_bob("notes_wipe", id).await;
        id += 2;
        let ran = f.ran.0.lock().unwrap().len();
        if says == Says::Yes {
            assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
            assert_eq!(ran, 1, "{says:?}");
        } else {
            assert_ne!(
                answer["result"]["content"][0]["text"], "done",
                "{says:?}: {answer}"
            );
            assert_eq!(ran, 0, "{says:?}: {answer}");
        }
        // Asked once, about bob, for alice's call of this tool.
        let asked = endpoint.asked.lock().unwrap();
        assert_eq!(asked.len(), before + 1, "{says:?}");
        let question = asked.last().unwrap();
        assert_eq!(question["approver"], "bob", "{question}");
        assert_eq!(question["caller"]["subject"], "alice", "{question}");
        assert_eq!(question["tool"], "notes_wipe", "{question}");
        assert_eq!(
            question["route"],
            format!("{}/notes/mcp", f.origin),
            "{question}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_recheck_endpoint_refuses_the_call() {
    // A port nothing listens on (bound, then closed).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let tools = format!(
        "[route.tools.notes_wipe]\npolicy = \"confirm\"\n\
         approvers = {{ anyone_but_caller = true, recheck = {{ url = \"http://{closed}/recheck\" }} }}\n"
    );
    let f = fixture(&tools).await;
    let answer = f.approved_by_bob("notes_wipe", 1).await;
    assert_ne!(answer["result"]["content"][0]["text"], "done", "{answer}");
    assert!(f.ran.0.lock().unwrap().is_empty(), "{answer}");
}

#[tokio::test]
async fn a_file_the_gateway_cannot_build_is_refused_and_the_one_in_force_stays() {
    let in_force =
        "[route.tools.notes_wipe]\npolicy = \"confirm\"\napprovers = { any_of = [\"bob\"] }\n";
    let f = fixture(in_force).await;
    for (tools, says) in [
        // What the README offers, without the check it needs: refused with the file, saying
        // which key is missing.
        (
            "[route.tools.notes_wipe]\npolicy = \"confirm\"\napprovers = { anyone_but_caller = true }\n",
            "recheck",
        ),
        (
            "[route.tools.notes_wipe]\npolicy = \"confirm\"\napprovers = { any_of = [\"bob\"], except_caller = true }\n",
            "recheck",
        ),
        // One only the layer's build finds: refused with the file too, its reason named.
        (
            "[route.tools.notes_wipe]\npolicy = \"confirm\"\napprovers = { any_of = [\"bob\"], required = 2 }\n",
            "2 approvals required of 1",
        ),
    ] {
        let error = f.reload(tools).unwrap_err();
        assert!(error.contains(says), "{says}: {error}");
        assert!(error.contains("notes_wipe"), "{error}");
        // And at start, and by `check`.
        let dir = common::temp_dir("recheck-start");
        std::fs::write(dir.join("proxy-secret"), SECRET).unwrap();
        let text = file_text(f.addr, &f.upstream, tools);
        let error = common::build(&dir, &text).err().unwrap();
        assert!(error.contains(says), "{says}: {error}");
        let checked = GatewayConfig::from_toml(&text)
            .map_err(|e| e.to_string())
            .and_then(|config| {
                Gateway::check(&config, &dir)
                    .map(drop)
                    .map_err(|e| e.to_string())
            });
        assert!(checked.unwrap_err().contains(says), "{says}");
    }
    // The configuration in force still serves: reads pass, and the confirmed tool still goes
    // to bob.
    let read = f.mcp(&common::call(10, "notes_list", json!({}))).await;
    assert_eq!(read["result"]["content"][0]["text"], "done", "{read}");
    let done = f.approved_by_bob("notes_wipe", 11).await;
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
}

#[test]
fn recheck_a_hurried_operator_writes_is_refused() {
    let route = format!(
        "{PAGES}{STATIC_TOKENS}[[route]]\npath = \"/notes/mcp\"\nupstream = \"http://127.0.0.1:9/mcp\"\n\
         [route.tools.x]\npolicy = \"confirm\"\n"
    );
    for (rule, says) in [
        (
            r#"{ anyone_but_caller = true, recheck = { url = "http://directory.example/r" } }"#,
            "only on a loopback host",
        ),
        (
            r#"{ anyone_but_caller = true, recheck = { url = "https://me:pw@directory.example/r" } }"#,
            "not written in the file",
        ),
        (
            r#"{ anyone_but_caller = true, recheck = { url = "https://d.example/r", timeout = "0s" } }"#,
            "at most 30 s",
        ),
        (
            r#"{ anyone_but_caller = true, recheck = { url = "https://d.example/r", timeout = "31s" } }"#,
            "at most 30 s",
        ),
        (r#"{ anyone_but_caller = true }"#, "need `recheck"),
    ] {
        let error = GatewayConfig::from_toml(&format!("{route}approvers = {rule}\n"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{rule}: {error}");
    }
    // Named, a URL may carry its credential; written as https, it is taken.
    GatewayConfig::from_toml(&format!(
        "{route}approvers = {{ anyone_but_caller = true, recheck = {{ url = {{ env = \"RECHECK_URL\" }} }} }}\n"
    ))
    .unwrap();
    GatewayConfig::from_toml(&format!(
        "{route}approvers = {{ role = \"admin\", recheck = {{ url = \"https://d.example/r\" }} }}\n"
    ))
    .unwrap();
}
