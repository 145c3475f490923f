//! Two gateway processes behind a round-robin, sharing one Redis and one key: every promise a
//! single gateway keeps holds across the two. A confirmation asked on one is answered on the
//! other and runs once; the same answer, replayed on either, runs nothing; two retries of one
//! answer at the same moment, one on each, run it exactly once; a decline on one is final on the
//! other, a cancel on one leaves the question open on the other; the user who was asked is the
//! only one who answers; and a deployment of another audience, on the same Redis and key, honours
//! none of it.
//!
//! Each gateway is built on its own (its own Redis connection, its own tool list) from one file,
//! `store = { kind = "redis", url = { file = … } }`, as two processes would be. Each test names an
//! audience no other run uses, so runs never meet in Redis. Redis is expected on
//! 127.0.0.1:6379 (`MCP_CONFIRM_TEST_REDIS_URL` overrides); without it the tests say SKIPPED,
//! unless `MCP_CONFIRM_REQUIRE_BACKENDS` is set, as in CI.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

use crate::common::{ALICE, BOB, redis_up, redis_url};
use crate::gateway::{Seen, upstream};

/// An audience no other test and no other run uses: runs never meet in Redis.
fn unique_audience() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "https://two-gateways-{}-{nanos}-{}.test",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A directory holding a gateway's file, its tokens and its key; removed when dropped.
struct ConfigDir(std::path::PathBuf);

impl ConfigDir {
    fn file(&self) -> std::path::PathBuf {
        self.0.join("gateway.toml")
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file gateways are built from: one key, the shared Redis (its URL in a file beside it),
/// `audience`, one route to `upstream_url`.
fn config_dir(upstream_url: &str, audience: &str) -> ConfigDir {
    let dir = std::env::temp_dir().join(
        audience
            .trim_start_matches("https://")
            .trim_end_matches(".test"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    std::fs::write(
        dir.join("key"),
        "46c240e4d0c11b5a48d250f10a96b4d63b9d4f64b2faf7ea559c2627e90750cd",
    )
    .unwrap();
    std::fs::write(dir.join("redis-url"), redis_url()).unwrap();
    let text = format!(
        r#"
        listen = "127.0.0.1:0"
        audience = "{audience}"
        key = {{ file = "key" }}
        store = {{ kind = "redis", url = {{ file = "redis-url" }} }}

        [auth]
        kind = "static_tokens"
        file = "tokens"

        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream_url}"
        "#
    );
    let dir = ConfigDir(dir);
    std::fs::write(dir.file(), text).unwrap();
    dir
}

/// One gateway built from the file in `dir` and served on a free port: its route's URL.
async fn serve(dir: &ConfigDir) -> String {
    let config = GatewayConfig::load(&dir.file()).unwrap();
    let gateway = Gateway::build(&config, &dir.0).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gateway.serve(listener));
    format!("http://{addr}/notes/mcp")
}

/// Two gateways from one file, behind a round-robin, in front of one upstream.
struct Pair {
    gateways: [String; 2],
    upstream_url: String,
    next: AtomicUsize,
    seen: Seen,
    client: http_client::Client,
    _dir: ConfigDir,
}

impl Pair {
    async fn new() -> Self {
        let (url, seen) = upstream().await;
        let dir = config_dir(&url, &unique_audience());
        let gateways = [serve(&dir).await, serve(&dir).await];
        Self {
            gateways,
            upstream_url: url,
            next: AtomicUsize::new(0),
            seen,
            client: http_client::Client::new(),
            _dir: dir,
        }
    }

    /// `body` to gateway `which` (0 or 1) with `token`: the JSON-RPC answer.
    async fn on(&self, which: usize, token: &str, body: &Value) -> Value {
        send(&self.client, &self.gateways[which], token, body).await
    }

    /// `body` as alice, to whichever gateway the round-robin picks next.
    async fn round_robin(&self, body: &Value) -> Value {
        let which = self.next.fetch_add(1, Ordering::Relaxed) % 2;
        self.on(which, ALICE, body).await
    }

    fn deletes(&self) -> usize {
        self.seen
            .calls()
            .iter()
            .filter(|(tool, _)| tool == "notes_delete")
            .count()
    }
}

async fn send(client: &http_client::Client, url: &str, token: &str, body: &Value) -> Value {
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("accept", "application/json, text/event-stream".to_owned()),
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        (
            "mcp-method",
            body["method"].as_str().unwrap_or("").to_owned(),
        ),
        ("authorization", format!("Bearer {token}")),
    ];
    if let Some(tool) = body["params"]["name"].as_str() {
        headers.push(("mcp-name", tool.to_owned()));
    }
    let (status, json) = client.post(url, &headers, body.to_string()).await;
    assert!(status == 200 || status == 400, "{status} {json}");
    json
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
           "io.modelcontextprotocol/clientInfo": {"name": "test-client", "version": "1"}})
}

fn delete(id: i64, title: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"_meta": meta(), "name": "notes_delete", "arguments": {"title": title}}})
}

/// The key the form's answer goes under, and the `requestState`, from an `input_required` result.
fn asked(result: &Value) -> (String, String) {
    assert_eq!(result["result"]["resultType"], "input_required", "{result}");
    let requests = result["result"]["inputRequests"].as_object().unwrap();
    let key = requests.keys().next().unwrap().clone();
    let state = result["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    (key, state)
}

/// The retry of `first` carrying `response` to the form under `key`, with `state`.
fn answer(first: &Value, id: i64, (key, state): &(String, String), response: Value) -> Value {
    let mut retry = first.clone();
    retry["id"] = json!(id);
    retry["params"]["requestState"] = json!(state);
    retry["params"]["inputResponses"] = json!({ key.as_str(): response });
    retry
}

/// The yes/no form accepted.
fn accept() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

fn ran(result: &Value) -> bool {
    result["result"]["content"][0]["text"] == "notes_delete ran"
}

/// Refused as a state that cannot be used (a replay, another audience): on the wire the same
/// error as any invalid state. Not "issued before a restart" (a store the gateways do not share)
/// nor "store unavailable".
fn refused(result: &Value) -> bool {
    result["error"]["data"]["reason"] == "invalid_request_state"
}

/// How a confirmation ended without running the tool (`declined`, `cancelled`).
fn outcome(result: &Value) -> Option<&str> {
    result["result"]["_meta"]["io.github.mcp-confirm/outcome"].as_str()
}

#[tokio::test]
async fn asked_on_one_answered_on_the_other_runs_once_and_never_again() {
    if !redis_up() {
        return;
    }
    let pair = Pair::new().await;
    let first = delete(1, "Groceries");
    let question = asked(&pair.on(0, ALICE, &first).await);
    assert_eq!(pair.deletes(), 0, "nothing runs before the answer");
    let accepted = pair
        .on(1, ALICE, &answer(&first, 2, &question, accept()))
        .await;
    assert!(ran(&accepted), "{accepted}");
    assert_eq!(
        pair.seen.calls(),
        [("notes_delete".to_owned(), json!({"title": "Groceries"}))]
    );
    // The same answer again, on each gateway: claimed already, in the store they share.
    for (which, id) in [(0, 3), (1, 4), (0, 5)] {
        let replayed = pair
            .on(which, ALICE, &answer(&first, id, &question, accept()))
            .await;
        assert!(refused(&replayed), "gateway {which}: {replayed}");
    }
    assert_eq!(pair.deletes(), 1, "nothing ran twice");
}

#[tokio::test]
async fn two_retries_of_one_answer_at_once_one_on_each_run_exactly_once() {
    if !redis_up() {
        return;
    }
    let pair = Pair::new().await;
    // Several rounds, each a new question: the race is decided in Redis, whoever arrives first.
    for round in 0..8 {
        let first = delete(100 + round, &format!("note-{round}"));
        let question = asked(&pair.on((round % 2) as usize, ALICE, &first).await);
        let on_a = answer(&first, 1000 + round, &question, accept());
        let on_b = answer(&first, 2000 + round, &question, accept());
        let (a, b) = tokio::join!(pair.on(0, ALICE, &on_a), pair.on(1, ALICE, &on_b));
        let runs = [&a, &b].into_iter().filter(|r| ran(r)).count();
        let refusals = [&a, &b].into_iter().filter(|r| refused(r)).count();
        assert_eq!(
            (runs, refusals),
            (1, 1),
            "round {round}: one runs, one is refused: {a} / {b}"
        );
        assert_eq!(
            pair.deletes(),
            round as usize + 1,
            "round {round}: {a} / {b}"
        );
    }
}

#[tokio::test]
async fn through_the_round_robin_every_confirmed_call_runs_once() {
    if !redis_up() {
        return;
    }
    let pair = Pair::new().await;
    // Each call asked on one gateway and answered on the other, as a round-robin sends them.
    let mut answered = Vec::new();
    for n in 0..6 {
        let first = delete(n, &format!("note-{n}"));
        let question = asked(&pair.round_robin(&first).await);
        let retry = answer(&first, 100 + n, &question, accept());
        let accepted = pair.round_robin(&retry).await;
        assert!(ran(&accepted), "{accepted}");
        answered.push(retry);
    }
    assert_eq!(pair.deletes(), 6);
    // Every answer replayed, twice, through the round-robin: each gateway refuses each.
    for retry in answered.iter().chain(&answered) {
        let replayed = pair.round_robin(retry).await;
        assert!(refused(&replayed), "{replayed}");
    }
    assert_eq!(pair.deletes(), 6, "nothing ran twice");
}

#[tokio::test]
async fn a_decline_on_one_is_final_on_the_other_and_a_cancel_is_not() {
    if !redis_up() {
        return;
    }
    let pair = Pair::new().await;
    // Declined on B: the confirmation is spent; accepting it afterwards, on A or on B, runs
    // nothing.
    let first = delete(1, "Groceries");
    let question = asked(&pair.on(0, ALICE, &first).await);
    let declined = pair
        .on(
            1,
            ALICE,
            &answer(&first, 2, &question, json!({"action": "decline"})),
        )
        .await;
    assert_eq!(outcome(&declined), Some("declined"), "{declined}");
    for (which, id) in [(0, 3), (1, 4)] {
        let late = pair
            .on(which, ALICE, &answer(&first, id, &question, accept()))
            .await;
        assert!(refused(&late), "gateway {which}: {late}");
    }
    assert_eq!(pair.deletes(), 0, "a declined call never runs");
    // Cancelled on B: nothing is spent, and the same question answered on A runs, once.
    let second = delete(10, "Standup");
    let question = asked(&pair.on(0, ALICE, &second).await);
    let cancelled = pair
        .on(
            1,
            ALICE,
            &answer(&second, 11, &question, json!({"action": "cancel"})),
        )
        .await;
    assert_eq!(outcome(&cancelled), Some("cancelled"), "{cancelled}");
    assert_eq!(pair.deletes(), 0);
    let accepted = pair
        .on(0, ALICE, &answer(&second, 12, &question, accept()))
        .await;
    assert!(ran(&accepted), "{accepted}");
    let replayed = pair
        .on(1, ALICE, &answer(&second, 13, &question, accept()))
        .await;
    assert!(refused(&replayed), "{replayed}");
    assert_eq!(pair.deletes(), 1);
}

#[tokio::test]
async fn only_the_user_asked_answers_on_either_gateway() {
    if !redis_up() {
        return;
    }
    let pair = Pair::new().await;
    let first = delete(1, "Groceries");
    let question = asked(&pair.on(0, ALICE, &first).await);
    // Bob holds alice's question and answer: refused on the other gateway, and on the one asked.
    for (which, id) in [(1, 2), (0, 3)] {
        let by_bob = pair
            .on(which, BOB, &answer(&first, id, &question, accept()))
            .await;
        assert!(!ran(&by_bob), "gateway {which}: {by_bob}");
    }
    assert_eq!(pair.deletes(), 0, "bob ran nothing");
    // Alice's own answer still runs, once.
    let accepted = pair
        .on(1, ALICE, &answer(&first, 4, &question, accept()))
        .await;
    assert!(ran(&accepted), "{accepted}");
    assert_eq!(pair.deletes(), 1);
}

#[tokio::test]
async fn another_audience_on_the_same_redis_and_key_honours_none_of_it() {
    if !redis_up() {
        return;
    }
    // Staging and production: the same Redis, the same key, the same upstream, each its own
    // audience.
    let pair = Pair::new().await;
    let other_dir = config_dir(&pair.upstream_url, &unique_audience());
    let other = serve(&other_dir).await;
    let first = delete(1, "Groceries");
    let question = asked(&pair.on(0, ALICE, &first).await);
    let crossed = send(
        &pair.client,
        &other,
        ALICE,
        &answer(&first, 2, &question, accept()),
    )
    .await;
    assert!(refused(&crossed), "{crossed}");
    assert_eq!(pair.deletes(), 0, "the other deployment ran nothing");
    // Its own deployment still honours it.
    let accepted = pair
        .on(1, ALICE, &answer(&first, 3, &question, accept()))
        .await;
    assert!(ran(&accepted), "{accepted}");
    assert_eq!(pair.deletes(), 1);
}

/// A minimal HTTP/1.1 client over hyper, for the tests.
mod http_client {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client as Hyper;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    pub struct Client(Hyper<HttpConnector, Full<Bytes>>);

    impl Client {
        pub fn new() -> Self {
            Self(Hyper::builder(TokioExecutor::new()).build_http())
        }

        /// The answer's status and body (`null` if it is not JSON).
        pub async fn post(
            &self,
            url: &str,
            headers: &[(&str, String)],
            body: String,
        ) -> (u16, serde_json::Value) {
            let mut request = http::Request::post(url);
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            let response = self
                .0
                .request(request.body(Full::new(Bytes::from(body))).unwrap())
                .await
                .unwrap();
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            (status, json)
        }
    }
}
