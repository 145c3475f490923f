//! `[metrics]`: the core's and the decision log's metrics as Prometheus text, on a listener of
//! their own, never on the public one. The recorder is the process's one: the gateway runs as a
//! child process here (the real binary), so the counts are this test's alone, whatever the
//! suite's other gateways record in the test process.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mcp_confirm_gateway::config::GatewayConfig;
use serde_json::json;

use crate::common::{ALICE, STATIC_TOKENS, accept, call, client, post_call, retry, send, temp_dir};

/// The gateway binary running, killed when dropped; its public and metrics addresses.
struct Running {
    child: Child,
    public: String,
    metrics: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary on `dir/gateway.toml` (both listeners on free ports); waits for it to say
/// where it listens.
fn run(dir: &std::path::Path) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-confirm-gateway"))
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, said) = mpsc::channel();
    // Read to the end, so the child never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("gateway: {line}");
            let _ = lines.send(line);
        }
    });
    let url_in = |line: &str, after: &str| {
        line.split_once(after)
            .map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_owned())
    };
    let (mut public, mut metrics) = (None, None);
    while public.is_none() || metrics.is_none() {
        let line = said
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway said where it listens");
        public = public.or_else(|| url_in(&line, "mcp-confirm-gateway listening on "));
        metrics = metrics.or_else(|| url_in(&line, "metrics served on "));
    }
    Running {
        child,
        public: public.unwrap(),
        metrics: metrics.unwrap(),
    }
}

/// The value of the sample `series` (name and labels, exactly as exposed); `None` if absent.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().unwrap())
}

async fn get(url: &str) -> (u16, http::HeaderMap, String) {
    send(&client(), http::Request::get(url), String::new()).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_listener_counts_each_decision_and_the_public_one_serves_none() {
    let (upstream, seen) = crate::gateway::upstream().await;
    let dir = temp_dir("metrics");
    std::fs::write(
        dir.join("log-key"),
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    )
    .unwrap();
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\n{STATIC_TOKENS}\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\n\
             [decision_log]\nname = \"test/decisions\"\nkey = {{ file = \"log-key\" }}\n\
             store = {{ kind = \"file\", dir = \"decisions\" }}\ncheckpoint_every = \"1s\"\n\n\
             [[route]]\npath = \"/notes/mcp\"\nupstream = \"{upstream}\"\n"
        ),
    )
    .unwrap();
    let gateway = tokio::task::spawn_blocking(move || run(&dir))
        .await
        .unwrap();
    let url = format!("{}/notes/mcp", gateway.public);
    let client = client();

    // Declined: asked, then the answer is no.
    let first = call(1, "notes_delete", json!({"title": "Groceries"}));
    let asked = post_call(&client, &url, Some(ALICE), &first, &[]).await;
    let key = asked["result"]["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .unwrap_or_else(|| panic!("not asked: {asked}"));
    let declined = retry(
        &first,
        2,
        &asked["result"]["requestState"],
        json!({ key: {"action": "decline"} }),
    );
    let answered = post_call(&client, &url, Some(ALICE), &declined, &[]).await;
    assert!(seen.calls().is_empty(), "{answered}");
    // Accepted: asked again, and the call runs.
    let asked = post_call(
        &client,
        &url,
        Some(ALICE),
        &call(3, "notes_delete", json!({"title": "Groceries"})),
        &[],
    )
    .await;
    let accepted = accept(&first, 4, &asked, json!({"confirm": true}));
    let ran = post_call(&client, &url, Some(ALICE), &accepted, &[]).await;
    assert_eq!(
        ran["result"]["content"][0]["text"], "notes_delete ran",
        "{ran}"
    );
    // A read-only tool passes; a name the upstream does not list is refused.
    let listed = post_call(
        &client,
        &url,
        Some(ALICE),
        &call(5, "notes_list", json!({})),
        &[],
    )
    .await;
    assert_eq!(
        listed["result"]["content"][0]["text"], "notes_list ran",
        "{listed}"
    );
    let made_up = post_call(
        &client,
        &url,
        Some(ALICE),
        &call(6, "made_up_tool", json!({})),
        &[],
    )
    .await;
    assert_eq!(
        made_up["error"]["data"]["reason"], "tool_not_listed",
        "{made_up}"
    );
    assert_eq!(seen.calls().len(), 2);

    let (status, headers, text) = get(&gateway.metrics).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    // Exactly what happened: two questions, one no, one yes; the two answers' states claimed.
    let decisions = "mcp_confirm_decisions_total{tool=\"notes_delete\"";
    for (series, value) in [
        (format!("{decisions},outcome=\"challenged\",channel=\"form\"}}"), 2.0),
        (format!("{decisions},outcome=\"declined\",channel=\"form\"}}"), 1.0),
        (format!("{decisions},outcome=\"accepted\",channel=\"form\"}}"), 1.0),
        ("mcp_confirm_claims_total{result=\"ok\"}".to_owned(), 2.0),
        // Answer times in the day-long buckets (not the exporter's default summary).
        (
            "mcp_confirm_answer_seconds_bucket{tool=\"notes_delete\",answer=\"decline\",le=\"86400\"}"
                .to_owned(),
            1.0,
        ),
        (
            "mcp_confirm_answer_seconds_count{tool=\"notes_delete\",answer=\"accept\"}".to_owned(),
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), Some(value), "{series}:\n{text}");
    }
    assert!(
        text.contains("# HELP mcp_confirm_decisions_total "),
        "described:\n{text}"
    );
    // A read-only tool's pass is no decision; a made-up name grows no series.
    assert!(
        !text.contains("notes_list") && !text.contains("made_up_tool"),
        "{text}"
    );
    assert!(!text.contains("outcome=\"refused\""), "{text}");

    // The decision log's checkpoint, once its round (every second here) has taken the four
    // records: two questions and two answers.
    let records = "mcp_confirm_log_records{backend=\"file\"}";
    let mut text = text;
    for _ in 0..50 {
        if sample(&text, records) == Some(4.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        text = get(&gateway.metrics).await.2;
    }
    assert_eq!(sample(&text, records), Some(4.0), "{text}");
    let signed = sample(
        &text,
        "mcp_confirm_log_checkpoint_timestamp_seconds{backend=\"file\"}",
    )
    .unwrap_or_else(|| panic!("{text}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - 60.0..=now + 1.0).contains(&signed), "{signed} {now}");
    assert!(!text.contains("mcp_confirm_log_errors_total{"), "{text}");

    // Only the path, only GET.
    let (status, _, _) = get(&format!(
        "{}/other",
        gateway.metrics.trim_end_matches("/metrics")
    ))
    .await;
    assert_eq!(status, 404);
    let (status, headers, _) = send(
        &client,
        http::Request::post(&gateway.metrics),
        String::new(),
    )
    .await;
    assert_eq!(status, 405);
    assert_eq!(headers["allow"], "GET, HEAD");
    // The public listener serves no metrics, at any path a scraper would try.
    for path in ["/metrics", "/notes/mcp/metrics"] {
        let (status, _, body) = get(&format!("{}{path}", gateway.public)).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("mcp_confirm"), "{path}: {body}");
    }
}

#[test]
fn a_changed_metrics_section_takes_a_restart() {
    let dir = temp_dir("metrics-reload");
    let file = |metrics: &str| {
        format!(
            "{STATIC_TOKENS}\n{metrics}\n[[route]]\npath = \"/x/mcp\"\n\
             upstream = \"http://127.0.0.1:1/mcp\"\n"
        )
    };
    let on = "[metrics]\nlisten = \"127.0.0.1:9464\"\n";
    // Building the gateway installs nothing: the binary sets the metrics up, once.
    let gateway = crate::common::build(&dir, &file(on)).unwrap();
    let reload = |text: &str| {
        let config = GatewayConfig::from_toml(text).unwrap();
        gateway.reload(&config, &dir).map_err(|e| e.to_string())
    };
    reload(&file(on)).unwrap();
    for changed in [
        String::new(),
        on.replace("9464", "9465"),
        format!("{on}path = \"/m\"\n"),
    ] {
        let error = reload(&file(&changed)).unwrap_err();
        assert!(
            error.contains("the `metrics` section changed: that takes a restart"),
            "{error}"
        );
    }
    // Nor is a gateway started without metrics given them by a reload.
    let gateway = crate::common::build(&dir, &file("")).unwrap();
    let config = GatewayConfig::from_toml(&file(on)).unwrap();
    assert!(gateway.reload(&config, &dir).is_err());
}

#[test]
fn check_and_schema_know_the_metrics_section() {
    let dir = temp_dir("metrics-cli");
    let (listener, addr) = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    };
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "{STATIC_TOKENS}\n[metrics]\nlisten = \"{addr}\"\n\n[[route]]\n\
             path = \"/x/mcp\"\nupstream = \"http://127.0.0.1:1/mcp\"\n"
        ),
    )
    .unwrap();
    // `check` validates the section and listens on nothing (the port is taken here).
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-confirm-gateway"))
        .args(["check", "--config"])
        .arg(dir.join("gateway.toml"))
        .output()
        .unwrap();
    drop(listener);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("valid"), "{stdout}");
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "{STATIC_TOKENS}\n[metrics]\nlisten = \"{addr}\"\npath = \"metrics\"\n\n[[route]]\n\
             path = \"/x/mcp\"\nupstream = \"http://127.0.0.1:1/mcp\"\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-confirm-gateway"))
        .args(["check", "--config"])
        .arg(dir.join("gateway.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("metrics: path \"metrics\""), "{stderr}");

    let out = Command::new(env!("CARGO_BIN_EXE_mcp-confirm-gateway"))
        .arg("schema")
        .output()
        .unwrap();
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let metrics = &schema["$defs"]["Metrics"];
    assert!(schema["properties"]["metrics"].is_object(), "{schema}");
    assert_eq!(metrics["required"], json!(["listen"]), "{metrics}");
    assert_eq!(
        metrics["properties"]["path"]["default"], "/metrics",
        "{metrics}"
    );
    assert_eq!(metrics["additionalProperties"], false, "{metrics}");
}
