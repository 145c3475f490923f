//! Faults between the layer and a shared replay store: unreachable, stopped mid-run, slower than the
//! timeout. Each must mean zero calls forwarded, a clear retryable error, and normal service once
//! the store is back. The faults come from a TCP proxy this test controls in front of the real
//! Redis and Postgres; the shared servers themselves are never touched.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use mcp_confirm::store::ReplayStore;
use mcp_confirm::store::{PostgresStore, RedisStore};
use mcp_confirm::{ConfirmLayer, KeyRing};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const UP: u8 = 0;
const DOWN: u8 = 1;

/// A TCP proxy that can be taken down (refusing and cutting connections) or slowed down.
#[derive(Clone)]
struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    generation: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            mode: Arc::new(AtomicU8::new(UP)),
            delay_ms: Arc::new(AtomicU64::new(0)),
            generation: Arc::new(AtomicU64::new(0)),
        };
        let this = proxy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if this.mode.load(Ordering::SeqCst) == DOWN {
                    drop(client);
                    continue;
                }
                let this = this.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    this.pipe(client, server).await;
                });
            }
        });
        proxy
    }

    async fn pipe(&self, client: TcpStream, server: TcpStream) {
        let born = self.generation.load(Ordering::SeqCst);
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let up = self.clone();
        let down = self.clone();
        let a = tokio::spawn(async move { up.copy(&mut cr, &mut sw, born).await });
        let b = tokio::spawn(async move { down.copy(&mut sr, &mut cw, born).await });
        let _ = tokio::join!(a, b);
    }

    async fn copy(
        &self,
        from: &mut (impl AsyncReadExt + Unpin),
        to: &mut (impl AsyncWriteExt + Unpin),
        born: u64,
    ) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match tokio::time::timeout(Duration::from_millis(50), from.read(&mut buf)).await
            {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => n,
                Err(_) => {
                    if self.generation.load(Ordering::SeqCst) != born {
                        return; // taken down: cut the connection
                    }
                    continue;
                }
            };
            let delay = self.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if self.generation.load(Ordering::SeqCst) != born
                || to.write_all(&buf[..n]).await.is_err()
            {
                return;
            }
        }
    }

    fn down(&self) {
        self.mode.store(DOWN, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn up(&self) {
        self.delay_ms.store(0, Ordering::SeqCst);
        self.mode.store(UP, Ordering::SeqCst);
    }

    fn slow(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

/// An address nothing listens on.
fn dead_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Over a store nothing answers for, a confirmation is refused and nothing runs.
async fn unreachable_store_refuses(store: impl ReplayStore, what: &str) {
    let f = fixture_over(store);
    let state = challenge(&f).await;
    assert_store_unavailable(&f, &state, what).await;
    assert_eq!(f.seen.count(), 0);
}

async fn reachable(backend: &str, addr: &str) -> Option<SocketAddr> {
    let addr: SocketAddr = addr.parse().unwrap();
    match TcpStream::connect(addr).await {
        Ok(_) => Some(addr),
        Err(e) => crate::backends::unavailable("fault test", backend, format!("{addr}: {e}")),
    }
}

fn fixture_over(store: impl ReplayStore) -> Fixture {
    let notes = Notes::seeded();
    let clock = mcp_confirm::clock::ManualClock::new(std::time::SystemTime::now());
    let memory = mcp_confirm::store::MemoryReplayStore::new();
    let layer = ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .clock(clock.clone())
        .replay_store(store)
        .tool("notes_delete", delete_policy(&notes))
        .build();
    Fixture::new(layer, notes, clock, memory)
}

/// Alice's accept of `state` is refused because the store is unavailable (a retryable error).
async fn assert_store_unavailable(f: &Fixture, state: &str, what: &str) {
    let answer = f.accept(state, json!(2), "note-7").await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{what}: {:?}",
        answer.bytes
    );
    assert_eq!(answer.error()["code"], -31002, "{what}");
    assert_eq!(answer.error()["data"]["retryable"], true, "{what}");
}

/// Accepts `state`, retrying while the store client has not yet noticed the store is back; the
/// confirmed call must then go through.
async fn accept_once_recovered(f: &Fixture, state: &str) {
    let mut answer = f.accept(state, json!(100), "note-7").await;
    for attempt in 101..140 {
        if answer.status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = f.accept(state, json!(attempt), "note-7").await;
    }
    assert_ran(&answer);
}

/// The fault sequence, the same for every backend.
async fn faults(f: &Fixture, proxy: &Proxy) {
    // Stopped mid-run: the form was shown, then the store went away.
    let state = challenge(f).await;
    proxy.down();
    assert_store_unavailable(f, &state, "store stopped").await;
    assert_eq!(f.seen.count(), 0);
    // Back: the same confirmation goes through (the failed claim never happened).
    proxy.up();
    accept_once_recovered(f, &state).await;
    assert_eq!(f.seen.count(), 1);

    // Slower than the timeout: refused, nothing forwarded.
    let state = challenge(f).await;
    proxy.slow(Duration::from_millis(800));
    assert_store_unavailable(f, &state, "store too slow").await;
    assert_eq!(f.seen.count(), 1);
    // Normal service once it is fast again. The slow claim may have landed after the timeout, so
    // that state may stay refused; a new confirmation works.
    proxy.up();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let state = challenge(f).await;
    accept_once_recovered(f, &state).await;
    assert_eq!(f.seen.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_faults_fail_closed_and_recover() {
    let Some(target) = reachable("Redis", "127.0.0.1:6379").await else {
        return;
    };
    // Unreachable from the start (nothing listens on the port).
    let store = RedisStore::open(&format!("redis://{}", dead_addr()))
        .unwrap()
        .timeout(Duration::from_millis(300));
    unreachable_store_refuses(store, "Redis unreachable").await;

    let proxy = Proxy::start(target).await;
    let store = RedisStore::open(&format!("redis://{}", proxy.addr))
        .unwrap()
        .prefix(format!(
            "mcp-confirm-faults:{}:",
            mcp_confirm::store::Nonce::random().to_hex()
        ))
        .timeout(Duration::from_millis(300));
    faults(&fixture_over(store), &proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_faults_fail_closed_and_recover() {
    let Some(target) = reachable("Postgres", "127.0.0.1:5432").await else {
        return;
    };
    let direct = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/test").unwrap();
    direct.migrate().await.unwrap();

    let store = PostgresStore::connect(&format!("postgres://postgres@{}/test", dead_addr()))
        .unwrap()
        .timeout(Duration::from_millis(300));
    unreachable_store_refuses(store, "Postgres unreachable").await;

    let proxy = Proxy::start(target).await;
    let store = PostgresStore::connect(&format!("postgres://postgres@{}/test", proxy.addr))
        .unwrap()
        .timeout(Duration::from_millis(300));
    faults(&fixture_over(store), &proxy).await;
}
