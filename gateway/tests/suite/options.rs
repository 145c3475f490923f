//! The library's options, reached from the gateway's file: the decision log (each record naming
//! the policy revision it was made under), key rotation, and standing approvals.

use crate::common;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::common::{ALICE, STATIC_TOKENS, accept, call};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// What the upstream ran, and how often its tools were listed.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<Value>>>, Arc<std::sync::atomic::AtomicUsize>);

async fn serve_upstream(State(ran): State<Ran>, body: axum::Json<Value>) -> axum::Json<Value> {
    let message = body.0;
    let result = match message["method"].as_str() {
        Some("tools/list") => {
            ran.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // As the SDKs say by default: stale at once.
            json!({"resultType": "complete", "ttlMs": 0, "tools": [
            {"name": "notes_delete", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}}]})
        }
        _ => {
            ran.0
                .lock()
                .unwrap()
                .push(message["params"]["arguments"].clone());
            json!({"resultType": "complete", "content": [{"type": "text", "text": "deleted"}]})
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
}

struct Fixture {
    url: String,
    dir: PathBuf,
    upstream: String,
    ran: Ran,
    gateway: Gateway,
    client: common::Client,
}

const K1: &str = "46c240e4d0c11b5a48d250f10a96b4d63b9d4f64b2faf7ea559c2627e90750cd";
const K2: &str = "9f1b0a7c2e3d4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c";
const LOG_SEED: &str = "0101010101010101010101010101010101010101010101010101010101010101";

fn file_text(upstream: &str, top: &str, tools: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{top}\n{STATIC_TOKENS}\n[[route]]\npath = \"/notes/mcp\"\n\
         upstream = \"{upstream}\"\n{tools}\n"
    )
}

async fn fixture(top: &str, tools: &str) -> Fixture {
    let ran = Ran::default();
    let upstream = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(ran.clone()),
    )
    .await;
    let dir = common::temp_dir("options");
    std::fs::write(dir.join("k1"), K1).unwrap();
    std::fs::write(dir.join("k2"), K2).unwrap();
    std::fs::write(dir.join("log.key"), LOG_SEED).unwrap();
    let gateway = common::build(&dir, &file_text(&upstream, top, tools)).unwrap();
    let (listener, addr) = common::bind().await;
    common::serve(&gateway, listener);
    Fixture {
        url: format!("http://{addr}/notes/mcp"),
        dir,
        upstream,
        ran,
        gateway,
        client: common::client(),
    }
}

impl Fixture {
    fn reload(&self, top: &str, tools: &str) -> Result<(), String> {
        let path = self.dir.join("gateway.toml");
        std::fs::write(&path, file_text(&self.upstream, top, tools)).unwrap();
        let config = GatewayConfig::load(&path).map_err(|e| e.to_string())?;
        self.gateway
            .reload(&config, &self.dir)
            .map_err(|e| e.to_string())
    }

    async fn post(&self, body: &Value) -> Value {
        common::post_call(&self.client, &self.url, Some(ALICE), body, &[]).await
    }

    async fn revision(&self) -> String {
        self.gateway.routes()[0].catalog().await.unwrap().revision
    }
}

fn read_records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("decisions").join("records.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const LOG: &str = r#"
    [decision_log]
    name = "gateway.test/decisions"
    key = { file = "log.key" }
    store = { kind = "file", dir = "decisions" }
"#;

#[tokio::test]
async fn each_decision_record_names_the_policy_revision_it_was_made_under() {
    let f = fixture(LOG, "").await;
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let asked = f.post(&first).await;
    let done = f
        .post(&accept(&first, 2, &asked, json!({"confirm": true})))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    let revision = f.revision().await;
    let records = read_records(&f.dir);
    let accepted: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{records:?}");
    assert_eq!(accepted[0]["policy"], revision.as_str());
    assert_eq!(accepted[0]["tool"], "notes_delete");
    assert!(
        records
            .iter()
            .filter(|r| r["event"] == "challenged")
            .all(|r| r["policy"] == revision.as_str())
    );

    // The operator changes the tool's entry: a new revision, and the next records carry it.
    f.reload(
        LOG,
        "[route.tools.notes_delete]\npolicy = \"confirm\"\nmessage = \"Delete it?\"",
    )
    .unwrap();
    let next = f.revision().await;
    assert_ne!(next, revision);
    let asked = f
        .post(&call(3, "notes_delete", json!({"title": "Taxes"})))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    // A record that lets nothing run is written within the log's hold (10 ms), not before the
    // answer: wait for it, up to two seconds.
    let mut last = Value::Null;
    for _ in 0..200 {
        last = read_records(&f.dir).last().cloned().unwrap();
        if last["event"] == "challenged" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(last["event"], "challenged");
    assert_eq!(last["policy"], next.as_str());

    // The log's section cannot change under a running writer: the reload is refused whole.
    let error = f
        .reload(&LOG.replace("gateway.test", "other.test"), "")
        .unwrap_err();
    assert!(error.contains("takes a restart"), "{error}");
}

#[tokio::test]
async fn a_rotated_key_answers_what_the_old_one_asked_until_it_is_removed() {
    let one = r#"keys = [{ id = "k1", value = { file = "k1" } }]"#;
    let both = r#"keys = [{ id = "k2", value = { file = "k2" } }, { id = "k1", value = { file = "k1" } }]"#;
    let only_new = r#"keys = [{ id = "k2", value = { file = "k2" } }]"#;
    let f = fixture(one, "").await;
    let first = call(1, "notes_delete", json!({"title": "A"}));
    let asked_under_k1 = f.post(&first).await;
    let second = call(3, "notes_delete", json!({"title": "B"}));
    let also_under_k1 = f.post(&second).await;
    // Rotate: k2 signs, k1 still verifies.
    f.reload(both, "").unwrap();
    let done = f
        .post(&accept(
            &first,
            2,
            &asked_under_k1,
            json!({"confirm": true}),
        ))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    // k1 removed: what it signed is refused; what k2 signs works.
    f.reload(only_new, "").unwrap();
    let refused = f
        .post(&accept(
            &second,
            4,
            &also_under_k1,
            json!({"confirm": true}),
        ))
        .await;
    assert!(refused.get("error").is_some(), "{refused}");
    let third = call(5, "notes_delete", json!({"title": "C"}));
    let asked_under_k2 = f.post(&third).await;
    let done = f
        .post(&accept(
            &third,
            6,
            &asked_under_k2,
            json!({"confirm": true}),
        ))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    assert_eq!(
        *f.ran.0.lock().unwrap(),
        [json!({"title": "A"}), json!({"title": "C"})]
    );
}

#[tokio::test]
async fn a_standing_approval_covers_later_calls_on_its_scope_only() {
    let tools = r#"
        [route.tools.notes_delete]
        policy = "confirm"
        standing = { scope = "/workspace", up_to = "1h", uses = 2 }
    "#;
    let f = fixture("", tools).await;
    let first = call(1, "notes_delete", json!({"workspace": "w1", "title": "A"}));
    let asked = f.post(&first).await;
    let offered = asked.to_string();
    assert!(offered.contains("remember"), "{asked}");
    let done = f
        .post(&accept(
            &first,
            2,
            &asked,
            json!({"confirm": true, "remember": "standing"}),
        ))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    // The same workspace: runs without a form, twice; then the form again.
    for (id, title) in [(3, "B"), (4, "C")] {
        let ran = f
            .post(&call(
                id,
                "notes_delete",
                json!({"workspace": "w1", "title": title}),
            ))
            .await;
        assert_eq!(ran["result"]["content"][0]["text"], "deleted", "{ran}");
    }
    let asked = f
        .post(&call(
            5,
            "notes_delete",
            json!({"workspace": "w1", "title": "D"}),
        ))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    // Another workspace: the form.
    let asked = f
        .post(&call(
            6,
            "notes_delete",
            json!({"workspace": "w2", "title": "E"}),
        ))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(f.ran.0.lock().unwrap().len(), 3);
}

#[test]
fn options_a_hurried_operator_writes_are_refused() {
    let upstream = "http://127.0.0.1:9/mcp";
    for (top, tools, says) in [
        (
            "key = { file = \"k1\" }\nkeys = [{ id = \"k1\", value = { file = \"k1\" } }]",
            "",
            "both `key` and `keys`",
        ),
        (
            "keys = [{ id = \"k1\", value = { file = \"k1\" } }, { id = \"k1\", value = { file = \"k2\" } }]",
            "",
            "repeated id",
        ),
        (
            "",
            "[route.tools.notes_delete]\npolicy = \"confirm\"\nstanding = { scope = \"workspace\", up_to = \"1h\", uses = 2 }",
            "not a JSON Pointer",
        ),
        (
            "",
            "[route.tools.notes_delete]\npolicy = \"allow\"\nstanding = { scope = \"/w\", up_to = \"1h\", uses = 2 }",
            "only goes with",
        ),
    ] {
        let error = GatewayConfig::from_toml(&file_text(upstream, top, tools))
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}

#[tokio::test]
async fn a_list_with_the_same_tools_keeps_the_layer_and_its_limits() {
    // The upstream says its list is stale at once: the gateway lists it again (at most once a
    // second), and keeps the layer it built while the tools and entries are the same, so each
    // principal's challenge limit is not reset by every list.
    let f = fixture("", "").await;
    let asked = f
        .post(&call(1, "notes_delete", json!({"title": "A"})))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let asked = f
        .post(&call(2, "notes_delete", json!({"title": "B"})))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert!(
        f.ran.1.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "listed again"
    );
    assert_eq!(f.gateway.routes()[0].layers_built(), 1);
}
