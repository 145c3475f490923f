//! Standing approvals spent from two processes at once: the use count is exact across
//! instances, on Redis and on Postgres, as the claim of a nonce is; and so it stays when some of
//! the racing calls are refused and give their uses back.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_confirm::store::standing::{Standing, StandingId, StandingKey, StandingStore, Use};
use mcp_confirm::store::{Nonce, PostgresStore, PrincipalKey, RedisStore};

/// Racing uses per process.
const RACERS: usize = 8;
/// Uses the approval allows.
const USES: u32 = 3;

/// The full name the harness knows the test `name` of this module by, for a child process.
fn test_name(name: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    format!("{module}::{name}")
}

/// The store a process of this test opens on `backend` (`STANDING_PREFIX` namespaces Redis).
async fn store(backend: &str, prefix: &str) -> Arc<dyn StandingStore> {
    match backend {
        "redis" => Arc::new(
            RedisStore::open(&crate::backends::redis_url())
                .unwrap()
                .prefix(prefix)
                .timeout(Duration::from_secs(5)),
        ),
        _ => {
            let store = PostgresStore::connect(&crate::backends::postgres_url())
                .unwrap()
                .timeout(Duration::from_secs(5));
            store.migrate().await.unwrap();
            Arc::new(store)
        }
    }
}

/// The worker half of `two_processes_spend_exactly_the_uses_of_a_standing_approval`: run as a
/// child with `STANDING_WORKER` set, it spends [`RACERS`] uses of `STANDING_KEY`/`STANDING_ID`
/// at once at `STANDING_AT` (unix ms) and prints how many it kept. With `STANDING_GIVE_BACK`
/// set, every odd racer that got a use is refused and gives it back (a give-back that returns
/// nothing counts as an error). Without `STANDING_WORKER`, it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standing_worker_process() {
    if std::env::var("STANDING_WORKER").is_err() {
        return;
    }
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // Sixteen bytes in hex, like an id.
    let key = StandingKey::from_bytes(
        *StandingId::from_hex(&var("STANDING_KEY"))
            .unwrap()
            .as_bytes(),
    );
    let id = StandingId::from_hex(&var("STANDING_ID")).unwrap();
    let at = UNIX_EPOCH + Duration::from_millis(var("STANDING_AT").parse().unwrap());
    let store = store(&var("STANDING_BACKEND"), &var("STANDING_PREFIX")).await;
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let give_back = std::env::var("STANDING_GIVE_BACK").is_ok();
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let ticket = Nonce::random();
                let used = store.use_one(key, id, ticket).await?;
                if give_back && i % 2 == 1 && matches!(used, Use::Used { .. }) {
                    return match store.give_back(key, id, ticket).await? {
                        true => Ok(Use::Exhausted),
                        false => Err(mcp_confirm::store::StoreError::Full),
                    };
                }
                Ok(used)
            })
        })
        .collect();
    let (mut used, mut errors) = (0, 0);
    for racer in racers {
        match racer.await.unwrap() {
            Ok(Use::Used { .. }) => used += 1,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    println!("STANDING-WORKER-ANSWER {used} {errors}");
}

/// Two processes, each with [`RACERS`] racing uses, against a standing approval for [`USES`]:
/// every round exactly [`USES`] are spent, on each backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_spend_exactly_the_uses_of_a_standing_approval() {
    race_two_processes(false).await;
}

/// The same race where every odd racer is refused and gives its use back: what the two
/// processes kept is exactly what the store counts, never more than [`USES`], and every use
/// given back is there for a later call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_giving_uses_back_keep_the_count_exact() {
    race_two_processes(true).await;
}

async fn race_two_processes(give_back: bool) {
    let exe = std::env::current_exe().unwrap();
    for backend in ["redis", "postgres"] {
        let reachable = match backend {
            "redis" => crate::backends::redis("standing approvals across processes (Redis)")
                .await
                .is_some(),
            _ => crate::backends::postgres("standing approvals across processes (Postgres)")
                .await
                .is_some(),
        };
        if !reachable {
            continue;
        }
        let prefix = format!(
            "mcp-confirm-test:standing-race:{}:",
            Nonce::random().to_hex()
        );
        let store = store(backend, &prefix).await;
        for round in 0..10 {
            let principal = PrincipalKey::from_bytes(*Nonce::random().as_bytes());
            let now = SystemTime::now();
            let standing = Standing::new(
                "notes.example",
                principal,
                "alice",
                "notes_delete",
                "personal",
                now,
                now + Duration::from_secs(60),
                USES,
            );
            store.grant(&standing).await.unwrap();
            let at_ms = (SystemTime::now() + Duration::from_millis(700))
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis();
            let key = StandingId::from_bytes(*standing.key().as_bytes()).to_hex();
            let children: Vec<_> = (0..2)
                .map(|_| {
                    let mut child = std::process::Command::new(&exe);
                    child
                        .args([
                            "--exact",
                            &test_name("standing_worker_process"),
                            "--nocapture",
                        ])
                        .env("STANDING_WORKER", "1")
                        .env("STANDING_BACKEND", backend)
                        .env("STANDING_PREFIX", &prefix)
                        .env("STANDING_KEY", &key)
                        .env("STANDING_ID", standing.id.to_hex())
                        .env("STANDING_AT", at_ms.to_string())
                        .stdout(std::process::Stdio::piped());
                    if give_back {
                        child.env("STANDING_GIVE_BACK", "1");
                    }
                    child.spawn().unwrap()
                })
                .collect();
            let mut spent = 0;
            for child in children {
                let out = child.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let answer = text
                    .lines()
                    .find_map(|l| l.strip_prefix("STANDING-WORKER-ANSWER "))
                    .unwrap_or_else(|| panic!("{backend} round {round}: no answer in {text}"));
                let (used, errors) = answer.split_once(' ').unwrap();
                assert_eq!(errors, "0", "{backend} round {round}: store errors");
                spent += used.parse::<u32>().unwrap();
            }
            let counted = store.find(standing.key()).await.unwrap().map(|s| s.used);
            assert_eq!(
                counted,
                Some(spent),
                "{backend} round {round}: the store counts exactly the uses kept"
            );
            if !give_back {
                assert_eq!(
                    spent, USES,
                    "{backend} round {round}: exactly the uses are spent"
                );
            }
            let mut later = 0;
            while let Use::Used { .. } = store
                .use_one(standing.key(), standing.id, Nonce::random())
                .await
                .unwrap()
            {
                later += 1;
            }
            assert_eq!(
                spent + later,
                USES,
                "{backend} round {round}: every use given back is there again"
            );
        }
    }
}
