//! The Redis store on a Redis Cluster: a three-node cluster this test starts on its own ports (with
//! the machine's `redis-server` and `redis-cli`), then the shared store conformance suite.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mcp_confirm::store::RedisStore;
use mcp_confirm::store::conformance;

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Cluster {
    ports: Vec<u16>,
    dir: PathBuf,
    _nodes: Vec<Node>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    // Cluster nodes also listen on port + 10000.
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn start_cluster() -> Result<Cluster, String> {
    let dir = std::env::temp_dir().join(format!(
        "mcp-confirm-cluster-{}",
        mcp_confirm::store::Nonce::random().to_hex()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut nodes = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let node_dir = dir.join(port.to_string());
        std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
            ])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
            ])
            .arg("--dir")
            .arg(&node_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        nodes.push(Node(child));
        ports.push(port);
    }
    for port in &ports {
        wait_for(|| redis_cli(*port, &["ping"]).is_ok_and(|out| out.contains("PONG")))?;
    }
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut create = Command::new("redis-cli");
    create.args(["--cluster", "create"]).args(&addrs).args([
        "--cluster-replicas",
        "0",
        "--cluster-yes",
    ]);
    let created = create.output().map_err(|e| format!("redis-cli: {e}"))?;
    if !created.status.success() {
        return Err(format!(
            "cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        ));
    }
    for port in &ports {
        wait_for(|| {
            redis_cli(*port, &["cluster", "info"]).is_ok_and(|out| out.contains("cluster_state:ok"))
        })?;
    }
    Ok(Cluster {
        ports,
        dir,
        _nodes: nodes,
    })
}

fn redis_cli(port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_for(ready: impl Fn() -> bool) -> Result<(), String> {
    for _ in 0..100 {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("timed out waiting for the cluster".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_redis_store_passes_the_conformance_suite_on_a_cluster() {
    let cluster = match tokio::task::spawn_blocking(start_cluster).await.unwrap() {
        Ok(cluster) => cluster,
        Err(e) => {
            crate::backends::unavailable::<()>("Redis Cluster test", "a local Redis Cluster", e);
            return;
        }
    };
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let store = RedisStore::connect_cluster(nodes)
        .await
        .unwrap()
        .timeout(Duration::from_secs(2));
    conformance::claim_is_granted_once(&store).await;
    conformance::completed_claims_stay_consumed(&store).await;
    conformance::only_the_owner_completes(&store).await;
    conformance::entries_expire(&store).await;
    conformance::nonces_are_independent(&store).await;
    // Standing approvals: a record and its use count share a hash tag, the index is apart.
    conformance::standing_uses_are_counted_exactly(&store).await;
    conformance::standing_approvals_are_revoked_and_expire(&store).await;
    conformance::concurrent_uses_never_exceed_the_count(Arc::new(store.clone())).await;
    conformance::one_winner_among_concurrent_claimants(Arc::new(store)).await;
    // Keys spread over the cluster's slots (one key per nonce needs no hash tags).
    let keys: usize = cluster
        .ports
        .iter()
        .filter_map(|p| redis_cli(*p, &["dbsize"]).ok())
        .filter(|out| out.trim().parse::<usize>().is_ok_and(|n| n > 0))
        .count();
    assert!(keys >= 2, "nonces landed on {keys} node(s)");
}
