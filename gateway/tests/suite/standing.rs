//! Standing approvals from the file, attacked (#52, 10f): a grant counts only while the offer it
//! was granted under is in force (removed and restored, it does not come back: on one gateway,
//! and on another that shares its Redis or PostgreSQL store and was never reloaded), and a user
//! lists and revokes hers on the standing page the gateway serves at `<route>/standing`.

use crate::common;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::common::{ALICE, PAGES, SECRET, STATIC_TOKENS};
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
            {"name": "notes_delete", "inputSchema": {"type": "object"},
             "annotations": {"destructiveHint": true}}]}),
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

const KEY: &str = "46c240e4d0c11b5a48d250f10a96b4d63b9d4f64b2faf7ea559c2627e90750cd";

/// The offer.
const OFFERED: &str = r#"
    [route.tools.notes_delete]
    policy = "confirm"
    standing = { scope = "/workspace", up_to = "1h", uses = 5 }
"#;

/// The same tool, without it.
const NOT_OFFERED: &str = r#"
    [route.tools.notes_delete]
    policy = "confirm"
"#;

/// A gateway's file: `audience`, `store`, the pages, one route to `upstream` with `tools`.
fn file_text(audience: &str, store: &str, upstream: &str, tools: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\naudience = \"{audience}\"\nkey = {{ file = \"key\" }}\n\
         {store}\n{PAGES}\n{STATIC_TOKENS}\n[[route]]\npath = \"/notes/mcp\"\n\
         upstream = \"{upstream}\"\n{tools}\n"
    )
}

/// One gateway, served, and the directory of its file.
struct Served {
    origin: String,
    /// The audience's origin: the pages' own.
    audience: String,
    dir: PathBuf,
    gateway: Gateway,
    client: common::Client,
}

/// A gateway built from `text` in a fresh directory, served on a free port.
async fn start(text: &str) -> Served {
    let dir = common::temp_dir("standing");
    std::fs::write(dir.join("proxy-secret"), SECRET).unwrap();
    std::fs::write(dir.join("key"), KEY).unwrap();
    let gateway = common::build(&dir, text).unwrap();
    let (listener, addr) = common::bind().await;
    common::serve(&gateway, listener);
    let audience = GatewayConfig::from_toml(text).unwrap().audience();
    Served {
        origin: format!("http://{addr}"),
        audience,
        dir,
        gateway,
        client: common::client(),
    }
}

impl Served {
    fn reload(&self, text: &str) {
        let path = self.dir.join("gateway.toml");
        std::fs::write(&path, text).unwrap();
        let config = GatewayConfig::load(&path).unwrap();
        self.gateway.reload(&config, &self.dir).unwrap();
    }

    async fn mcp(&self, body: &Value) -> Value {
        let url = format!("{}/notes/mcp", self.origin);
        common::post_call(&self.client, &url, Some(ALICE), body, &[]).await
    }

    /// Alice deletes a note in workspace w1, accepts the form and allows later calls there.
    async fn grant(&self, id: i64) {
        let first = common::call(id, "notes_delete", json!({"workspace": "w1", "title": "A"}));
        let asked = self.mcp(&first).await;
        assert!(asked.to_string().contains("remember"), "offered: {asked}");
        let done = self
            .mcp(&common::accept(
                &first,
                id + 1,
                &asked,
                json!({"confirm": true, "remember": "standing"}),
            ))
            .await;
        assert_eq!(done["result"]["content"][0]["text"], "deleted", "{done}");
    }

    /// Whether a later call of alice's on w1 runs without a form (`false`: the form).
    async fn covered(&self, id: i64) -> bool {
        let answer = self
            .mcp(&common::call(
                id,
                "notes_delete",
                json!({"workspace": "w1", "title": "B"}),
            ))
            .await;
        if answer["result"]["resultType"] == "input_required" {
            return false;
        }
        assert_eq!(
            answer["result"]["content"][0]["text"], "deleted",
            "{answer}"
        );
        true
    }

    /// A page request as the sign-in proxy sends it for alice.
    async fn page(&self, method: &str, form: Option<&str>) -> (u16, String) {
        let url = format!("{}/notes/mcp/standing", self.origin);
        common::proxy_page(
            &self.client,
            &self.audience,
            (method, &url),
            Some("alice"),
            Some(SECRET),
            form,
        )
        .await
    }
}

async fn upstream() -> (String, Ran) {
    let ran = Ran::default();
    let url = common::serve_upstream(
        Router::new()
            .route("/mcp", post(serve_upstream))
            .with_state(ran.clone()),
    )
    .await;
    (url, ran)
}

/// An audience no other test and no other run uses: runs never meet in a shared store.
fn unique_audience() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "https://standing-{}-{nanos}-{}.test",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

#[tokio::test]
async fn a_grant_does_not_come_back_with_its_offer() {
    let (upstream, ran) = upstream().await;
    let audience = unique_audience();
    let text = |tools| file_text(&audience, "", &upstream, tools);
    let g = start(&text(OFFERED)).await;
    g.grant(1).await;
    assert!(g.covered(3).await, "granted");
    // The operator takes the offer away, then puts it back as it was.
    g.reload(&text(NOT_OFFERED));
    assert!(!g.covered(4).await, "no offer, no standing approval");
    g.reload(&text(OFFERED));
    assert!(!g.covered(5).await, "the grant came back with the offer");
    // The offer itself works again: a new grant covers.
    g.grant(6).await;
    assert!(g.covered(8).await, "granted anew");
    // The whole route taken away and put back: the same.
    let elsewhere = text(OFFERED).replace("path = \"/notes/mcp\"", "path = \"/elsewhere/mcp\"");
    g.reload(&elsewhere);
    g.reload(&text(OFFERED));
    assert!(!g.covered(9).await, "the grant came back with its route");
    // Other terms are another offer: what was granted under the old ones does not count.
    g.grant(10).await;
    assert!(g.covered(12).await, "granted anew");
    g.reload(&text(&OFFERED.replace("uses = 5", "uses = 2")));
    assert!(!g.covered(13).await, "a grant outlived its terms");
    assert_eq!(ran.0.lock().unwrap().len(), 6);
}

/// Two gateways sharing `store`: a grant on one covers on the other; the offer removed and
/// restored on the first, the grant covers on neither, the second never reloaded.
async fn shared_store_keeps_the_offer_apart(store: &str) {
    let (upstream, _) = upstream().await;
    let audience = unique_audience();
    let text = |tools| file_text(&audience, store, &upstream, tools);
    let a = start(&text(OFFERED)).await;
    let b = start(&text(OFFERED)).await;
    a.grant(1).await;
    assert!(b.covered(3).await, "shared");
    a.reload(&text(NOT_OFFERED));
    a.reload(&text(OFFERED));
    // A call on the first waits for its offer to be in force; the second sees it then.
    assert!(!a.covered(4).await, "the grant came back with the offer");
    assert!(
        !b.covered(5).await,
        "the other gateway still honoured the old grant"
    );
    // A restart that keeps the offer keeps the grants made under it.
    b.grant(6).await;
    assert!(a.covered(8).await, "granted on the other");
    let c = start(&text(OFFERED)).await;
    assert!(
        c.covered(9).await,
        "a restart kept the offer, and its grants"
    );
}

#[tokio::test]
async fn gateways_sharing_redis_do_not_revive_a_grant_either() {
    if !common::redis_up() {
        return;
    }
    let url = dir_file("redis-url", &common::redis_url());
    shared_store_keeps_the_offer_apart(&format!(
        "store = {{ kind = \"redis\", url = {{ file = \"{}\" }} }}",
        url.display()
    ))
    .await;
}

#[tokio::test]
async fn gateways_sharing_postgres_do_not_revive_a_grant_either() {
    if !common::postgres_up() {
        return;
    }
    let schema = crate::postgres::Schema::new("standing").await;
    let url = dir_file("postgres-url", &schema.url());
    shared_store_keeps_the_offer_apart(&format!(
        "store = {{ kind = \"postgres\", url = {{ file = \"{}\" }} }}",
        url.display()
    ))
    .await;
}

/// `contents` in a file of a fresh directory; its absolute path.
fn dir_file(name: &str, contents: &str) -> PathBuf {
    let path = common::temp_dir("standing-url").join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[tokio::test]
async fn a_grant_revoked_on_the_standing_page_covers_no_more_calls() {
    let (upstream, ran) = upstream().await;
    let audience = unique_audience();
    let g = start(&file_text(&audience, "", &upstream, OFFERED)).await;
    g.grant(1).await;
    let (status, html) = g.page("GET", None).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("notes_delete") && html.contains("w1"),
        "{html}"
    );
    let id = attribute(&html, "name=\"revoke\" value=\"");
    let csrf = attribute(&html, "name=\"csrf\" value=\"");
    let (status, html) = g
        .page("POST", Some(&format!("csrf={csrf}&revoke={id}")))
        .await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Revoked one"), "{html}");
    assert!(!g.covered(3).await, "revoked, it still covered");
    assert_eq!(ran.0.lock().unwrap().len(), 1);
    // And a grant of an offer no longer in force is not listed.
    g.grant(4).await;
    g.reload(&file_text(&audience, "", &upstream, NOT_OFFERED));
    let (status, html) = g.page("GET", None).await;
    assert_eq!(status, 200, "{html}");
    assert!(!html.contains("notes_delete"), "{html}");
}

/// The value after `prefix` in `html`, up to its closing quote.
fn attribute(html: &str, prefix: &str) -> String {
    let at = html
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix}: {html}"))
        + prefix.len();
    html[at..].split('"').next().unwrap_or_default().to_owned()
}
