//! Notifications (issue 23): signed Standard Webhooks to a receiver that verifies them (with
//! this crate's `verify` and, independently, the Standard Webhooks reference library), retries,
//! a bounded queue that never holds up the MCP request, and the attacks a receiver must refuse.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mcp_confirm::approval::Approvers;
use mcp_confirm::notify::{self, Payload, WebhookSecret, signature::DEFAULT_TOLERANCE};
use mcp_confirm::{ConfirmLayer, KeyRing};
use mcp_confirm_pages::webhooks::{WebhookEndpoint, Webhooks};
use serde_json::{Value, json};

use crate::common::browser::*;
use crate::common::*;

/// A receiver as a deployment would write one: verify, drop repeats of a `webhook-id`, act.
#[derive(Clone)]
struct Receiver {
    secret: WebhookSecret,
    /// Accepted deliveries: headers and body.
    accepted: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    /// Every attempt, accepted or not: (webhook-id, status answered).
    attempts: Arc<Mutex<Vec<(String, StatusCode)>>>,
    seen: Arc<Mutex<HashSet<String>>>,
    /// Answer this status to the first `n` attempts.
    fail_first: Arc<Mutex<(usize, StatusCode)>>,
}

impl Receiver {
    fn new(secret: &WebhookSecret) -> Self {
        Self {
            secret: secret.clone(),
            accepted: Arc::default(),
            attempts: Arc::default(),
            seen: Arc::default(),
            fail_first: Arc::new(Mutex::new((0, StatusCode::OK))),
        }
    }

    /// What the receiving side must do before acting on a delivery.
    fn check(&self, headers: &HeaderMap, body: &[u8]) -> StatusCode {
        if notify::verify(
            &self.secret,
            headers,
            body,
            SystemTime::now(),
            DEFAULT_TOLERANCE,
        )
        .is_err()
        {
            return StatusCode::UNAUTHORIZED;
        }
        // The reference library agrees, on the same bytes.
        let reference = standardwebhooks::Webhook::new(&self.secret.expose()).unwrap();
        assert!(
            reference.verify(body, headers).is_ok(),
            "reference library refused"
        );
        let id = headers["webhook-id"].to_str().unwrap().to_owned();
        if !self.seen.lock().unwrap().insert(id) {
            return StatusCode::CONFLICT; // a replay inside the tolerance
        }
        StatusCode::NO_CONTENT
    }

    async fn serve(self) -> String {
        async fn hook(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
            let id = headers
                .get("webhook-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let failing = {
                let mut fail = r.fail_first.lock().unwrap();
                (fail.0 > 0).then(|| {
                    fail.0 -= 1;
                    fail.1
                })
            };
            let status = match failing {
                Some(status) => status,
                None => {
                    let status = r.check(&headers, &body);
                    if status.is_success() {
                        r.accepted.lock().unwrap().push((headers, body));
                    }
                    status
                }
            };
            r.attempts.lock().unwrap().push((id, status));
            status
        }
        let router = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(self);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        url
    }

    /// Waits (up to 20 s) until `n` deliveries were accepted.
    async fn accepted(&self, n: usize) -> Vec<(HeaderMap, Value)> {
        for _ in 0..400 {
            if self.accepted.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let accepted = self.accepted.lock().unwrap();
        assert_eq!(accepted.len(), n, "deliveries accepted");
        accepted
            .iter()
            .map(|(h, b)| (h.clone(), serde_json::from_slice(b).unwrap()))
            .collect()
    }
}

/// The fixture with `notes_destroy` approved by anyone but the caller and `notes_purge` by the
/// caller alone, notifying through `webhooks`.
fn notified(webhooks: &Webhooks, rule: Approvers) -> Fixture {
    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(now());
    let store = mcp_confirm::store::MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes)
                .approved_by(rule)
                .recheck_approvers(different_people),
        )
        .tool(
            "notes_purge",
            destroy_policy(&notes).input_key("destroy_approval"),
        )
        .notifier(webhooks.clone())
        .build();
    Fixture::new(layer, notes, clock, store)
}

fn fast(endpoints: Vec<WebhookEndpoint>) -> Webhooks {
    let mut builder = Webhooks::builder()
        .retry_delays([Duration::from_millis(50), Duration::from_millis(50)])
        .timeout(Duration::from_secs(5));
    for endpoint in endpoints {
        builder = builder.endpoint(endpoint);
    }
    builder.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_approval_is_posted_signed_to_every_endpoint_without_argument_values() {
    let secret = WebhookSecret::random();
    let receiver = Receiver::new(&secret);
    let url = receiver.clone().serve().await;
    // A second receiver, with a secret of its own, takes the Slack shape.
    let slack_secret = WebhookSecret::random();
    let slack_receiver = Receiver::new(&slack_secret);
    let slack_url = slack_receiver.clone().serve().await;
    let webhooks = fast(vec![
        WebhookEndpoint::new(&url, secret.clone()),
        WebhookEndpoint::new(&slack_url, slack_secret.clone()).payload(Payload::Slack),
    ]);
    let f = notified(&webhooks, Approvers::anyone_but_caller());
    // The caller's own approval notifies no one (she has the URL).
    let mut purge = destroy_call(json!(1));
    purge["params"]["name"] = json!("notes_purge");
    let (own, _, _) = elicitation(&f.alice(&purge).await);
    let (page, approval_id, _) = elicitation(&f.alice(&destroy_call(json!(2))).await);
    let standard = receiver.accepted(1).await;
    let slack = slack_receiver.accepted(1).await;
    let (headers, event) = &standard[0];
    assert_eq!(headers["webhook-id"], format!("msg_{approval_id}").as_str());
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(event["type"], "approval.requested");
    let data = &event["data"];
    assert_eq!(data["url"], page.as_str());
    assert_eq!(data["tool"], "notes_destroy");
    assert_eq!(data["requested_by"], "alice");
    assert_eq!(data["approvers"], "anyone but the caller");
    assert_eq!(data["required"], 1);
    assert!(data["expires_at"].as_str().unwrap().ends_with('Z'));
    let text = event.to_string();
    for secret_value in ["Groceries", "note-7", "note-3", PERSONAL, &own] {
        assert!(!text.contains(secret_value), "{secret_value} in {text}");
    }
    let (_, slack) = &slack[0];
    assert!(slack["text"].as_str().unwrap().contains("notes_destroy"));
    assert_eq!(slack["blocks"][1]["elements"][0]["url"], page.as_str());
    assert!(!slack.to_string().contains("Groceries"));
    let stats = webhooks.stats();
    assert_eq!((stats.delivered, stats.failed, stats.dropped), (2, 0, 0));
}

/// One delivery to a receiver for a call of `notes_destroy` under `rule`: the event's `data`
/// and the whole event as text.
async fn delivered(rule: Approvers) -> (Value, String) {
    let secret = WebhookSecret::random();
    let receiver = Receiver::new(&secret);
    let url = receiver.clone().serve().await;
    let webhooks = fast(vec![WebhookEndpoint::new(&url, secret.clone())]);
    let f = notified(&webhooks, rule);
    f.alice(&destroy_call(json!(1))).await;
    let got = receiver.accepted(1).await;
    (got[0].1["data"].clone(), got[0].1.to_string())
}

/// The labels (text the resolver made from the notes: titles and ids) come only with
/// `share_candidate_labels`, and with it no argument value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_shares_candidate_labels_sends_the_labels_and_no_argument_values() {
    let (data, text) = delivered(
        Approvers::role("notes-admin")
            .except_caller()
            .required(2)
            .share_candidate_labels(),
    )
    .await;
    assert_eq!(
        data["approvers"],
        "role notes-admin but the caller (2 approvals)"
    );
    let records = data["details"]["records"].to_string();
    for label in [
        "Groceries (note-3)",
        "Groceries (note-7)",
        "Groceries (note-14)",
    ] {
        assert!(records.contains(label), "{label} missing: {data}");
    }
    assert!(data["details"].get("arguments").is_none(), "{data}");
    assert!(!text.contains(PERSONAL), "an argument value in {text}");
}

/// The call's argument values come only with `share_argument_values`, and with it no label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_shares_argument_values_sends_them_and_no_labels() {
    let (data, text) = delivered(Approvers::anyone_but_caller().share_argument_values()).await;
    assert_eq!(
        data["details"]["arguments"],
        json!([
            "title: \"Groceries\"",
            format!("workspaceUri: \"{PERSONAL}\"")
        ]),
        "{data}"
    );
    assert!(data["details"].get("records").is_none(), "{data}");
    for label in ["note-3", "note-7", "note-14"] {
        assert!(!text.contains(label), "the label of {label} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_with_the_same_id_until_delivered() {
    let secret = WebhookSecret::random();
    let receiver = Receiver::new(&secret);
    *receiver.fail_first.lock().unwrap() = (2, StatusCode::SERVICE_UNAVAILABLE);
    let url = receiver.clone().serve().await;
    let webhooks = fast(vec![WebhookEndpoint::new(&url, secret.clone())]);
    let f = notified(&webhooks, Approvers::anyone_but_caller());
    f.alice(&destroy_call(json!(1))).await;
    receiver.accepted(1).await;
    let attempts = receiver.attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(
        attempts.iter().all(|(id, _)| *id == attempts[0].0),
        "one id: {attempts:?}"
    );
    let stats = webhooks.stats();
    assert_eq!((stats.retried, stats.delivered), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_refusal_is_not_retried_and_retries_run_out() {
    let secret = WebhookSecret::random();
    // A 400 is final.
    let refusing = Receiver::new(&secret);
    *refusing.fail_first.lock().unwrap() = (10, StatusCode::BAD_REQUEST);
    let url = refusing.clone().serve().await;
    let webhooks = fast(vec![WebhookEndpoint::new(&url, secret.clone())]);
    let f = notified(&webhooks, Approvers::anyone_but_caller());
    f.alice(&destroy_call(json!(1))).await;
    // A 500 forever: one attempt and the two retries, then given up.
    let failing = Receiver::new(&secret);
    *failing.fail_first.lock().unwrap() = (10, StatusCode::INTERNAL_SERVER_ERROR);
    let url = failing.clone().serve().await;
    let webhooks2 = fast(vec![WebhookEndpoint::new(&url, secret.clone())]);
    let g = notified(&webhooks2, Approvers::anyone_but_caller());
    g.alice(&destroy_call(json!(1))).await;
    for _ in 0..200 {
        if webhooks.stats().failed == 1 && webhooks2.stats().failed == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(refusing.attempts.lock().unwrap().len(), 1);
    assert_eq!(failing.attempts.lock().unwrap().len(), 3);
    assert_eq!(webhooks.stats().failed, 1);
    assert_eq!(
        (webhooks2.stats().failed, webhooks2.stats().retried),
        (1, 2)
    );
}

/// How a receiver refuses what an attacker sends it: a delivery replayed (same id), altered,
/// signed with another secret, or signed for a stale moment. (SECURITY.md says the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_refuses_replayed_forged_altered_and_stale_deliveries() {
    let secret = WebhookSecret::random();
    let receiver = Receiver::new(&secret);
    let url = receiver.clone().serve().await;
    let webhooks = fast(vec![WebhookEndpoint::new(&url, secret.clone())]);
    let f = notified(&webhooks, Approvers::anyone_but_caller());
    f.alice(&destroy_call(json!(1))).await;
    let (headers, _) = receiver.accepted(1).await.remove(0);
    let body = receiver.accepted.lock().unwrap()[0].1.clone();
    let client = reqwest::Client::new();
    let send = |headers: HeaderMap, body: Vec<u8>| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut request = client.post(&url).body(body);
            for (name, value) in &headers {
                request = request.header(name.as_str(), value.as_bytes());
            }
            request.send().await.unwrap().status().as_u16()
        }
    };
    // Replayed as captured: verifies, but its id was seen.
    assert_eq!(send(headers.clone(), body.to_vec()).await, 409);
    // Altered: one byte of the body.
    let mut altered = body.to_vec();
    let at = altered.iter().position(|b| *b == b'a').unwrap();
    altered[at] = b'b';
    assert_eq!(send(headers.clone(), altered).await, 401);
    // Forged: a fresh id, signed with a secret that is not the receiver's.
    let forge = |secret: &WebhookSecret, id: &str, ts: u64| {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", id.parse().unwrap());
        h.insert("webhook-timestamp", ts.to_string().parse().unwrap());
        h.insert(
            "webhook-signature",
            notify::sign(secret, id, ts, &body).parse().unwrap(),
        );
        h
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        send(
            forge(&WebhookSecret::random(), "msg_forged", now),
            body.to_vec()
        )
        .await,
        401
    );
    // Stale: the right secret, an old moment (a capture replayed after the tolerance).
    assert_eq!(
        send(forge(&secret, "msg_old", now - 600), body.to_vec()).await,
        401
    );
    // And the right secret, now, a new id: accepted (the check is not refusing everything).
    assert_eq!(
        send(forge(&secret, "msg_fresh", now), body.to_vec()).await,
        204
    );
}

/// The MCP request never waits on a notification: an endpoint that accepts connections and
/// never answers, a queue of one; every call still gets its answer, and the notices over the
/// bound are dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_endpoint_or_a_full_queue_never_holds_up_the_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // accepted, never answered
        }
    });
    let webhooks = Webhooks::builder()
        .endpoint(WebhookEndpoint::new(&url, WebhookSecret::random()))
        .queue(1)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let f = notified(&webhooks, Approvers::anyone_but_caller());
    for i in 0..3 {
        let call = destroy_call_in(json!(i), PERSONAL, "Groceries");
        let answer = f.alice(&call).await;
        elicitation(&answer);
    }
    assert_eq!(webhooks.stats().dropped, 2);
    assert_eq!(webhooks.stats().delivered, 0);
}

#[test]
fn a_notifier_that_cannot_deliver_is_refused_when_built() {
    let secret = WebhookSecret::random();
    assert!(Webhooks::builder().build().is_err(), "no endpoint");
    for bad in ["", "/hook", "ftp://x/hook", "hook.example"] {
        assert!(
            Webhooks::new([WebhookEndpoint::new(bad, secret.clone())]).is_err(),
            "{bad}"
        );
    }
    let zero = Webhooks::builder()
        .endpoint(WebhookEndpoint::new("http://127.0.0.1:9/", secret))
        .queue(0)
        .build();
    assert!(zero.is_err());
    // The layer without a tool others approve still takes a notifier (it is never called).
    let _ = ConfirmLayer::builder(KeyRing::random());
}
