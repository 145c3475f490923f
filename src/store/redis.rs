//! A replay store shared through Redis.

use std::fmt;
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation, Value};

use super::{BoxFuture, Claim, Nonce, Owner, ReplayStore, StoreError};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "mcp-confirm:nonce:";
/// The default time allowed for one store call before the claim is refused.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

const CONSUMED: &str = "consumed";

/// Moves `KEYS[1]` from `inflight:<owner>` to `consumed`, keeping its expiry, only for the owner.
const COMPLETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'consumed', 'KEEPTTL')
  return 1
end
return 0
";

/// A [`ReplayStore`] in Redis, for deployments with more than one instance.
///
/// One key per nonce (`<prefix><nonce hex>`), so it works unchanged on Redis Cluster. A claim is one
/// atomic `SET key inflight:<owner> NX PX <ttl> GET`, which also tells a refused claimant whether the
/// nonce is in flight or consumed (Redis 7.0 or newer). Completing is a compare-and-set in a Lua
/// script that checks the owner.
///
/// Every call has a timeout (default 250 ms); an error or a timeout refuses the claim, so the call
/// is not forwarded and the client gets a retryable error.
///
/// # Deployment
/// - Run Redis with `maxmemory-policy noeviction`: an evicted key reopens that state's replay window.
/// - Replication is asynchronous. A claim acknowledged by a primary that fails before replicating it
///   can be claimed again on the promoted replica. Where that matters, use a single primary with
///   `appendfsync always`, or the Postgres store.
#[derive(Clone)]
pub struct RedisReplayStore {
    connection: Connection,
    prefix: String,
    timeout: Duration,
    complete: Script,
}

/// A single server (reconnecting) or a cluster.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Connection {
    async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> RedisResult<T> {
        match self.clone() {
            Connection::Single(mut c) => command.query_async(&mut c).await,
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(mut c) => command.query_async(&mut c).await,
        }
    }

    async fn invoke<T: FromRedisValue>(&self, script: &ScriptInvocation<'_>) -> RedisResult<T> {
        match self.clone() {
            Connection::Single(mut c) => script.invoke_async(&mut c).await,
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(mut c) => script.invoke_async(&mut c).await,
        }
    }
}

impl fmt::Debug for RedisReplayStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisReplayStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisReplayStore {
    /// A store for the Redis at `url` (`redis://host:port/db`). The connection is made on first use
    /// and re-made after failures, so a store that is down at start-up does not stop the server:
    /// claims are refused until it answers.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if `url` is not a valid Redis URL.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(DEFAULT_TIMEOUT))
            .set_response_timeout(Some(DEFAULT_TIMEOUT))
            .set_number_of_retries(1);
        let connection =
            ConnectionManager::new_lazy_with_config(client, config).map_err(backend)?;
        Ok(Self::with_connection(connection))
    }

    /// A store on a Redis Cluster, given some of its nodes (`redis://host:port`).
    ///
    /// # Errors
    /// [`StoreError`] if the nodes are invalid or the cluster cannot be reached now.
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub async fn connect_cluster<I, N>(nodes: I) -> Result<Self, StoreError>
    where
        I: IntoIterator<Item = N>,
        N: redis::IntoConnectionInfo,
    {
        let client = redis::cluster::ClusterClient::builder(nodes)
            .connection_timeout(DEFAULT_TIMEOUT)
            .response_timeout(DEFAULT_TIMEOUT)
            .build()
            .map_err(backend)?;
        let connection = client.get_async_connection().await.map_err(backend)?;
        Ok(Self::from_connection(Connection::Cluster(connection)))
    }

    /// A store over an existing connection manager.
    pub fn with_connection(connection: ConnectionManager) -> Self {
        Self::from_connection(Connection::Single(connection))
    }

    fn from_connection(connection: Connection) -> Self {
        Self {
            connection,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            complete: Script::new(COMPLETE),
        }
    }

    /// Namespaces the keys, e.g. per deployment sharing one Redis.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one store call may take before the claim is refused.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn key(&self, nonce: &Nonce) -> String {
        format!("{}{}", self.prefix, nonce.to_hex())
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(backend),
            Err(_) => Err(StoreError::Timeout),
        }
    }
}

fn backend(e: redis::RedisError) -> StoreError {
    StoreError::Backend(Box::new(e))
}

fn in_flight(owner: &Owner) -> String {
    format!("inflight:{}", Nonce::from_bytes(*owner.as_bytes()).to_hex())
}

/// Milliseconds from now until `expires_at`, at least one.
fn ttl_millis(expires_at: SystemTime) -> u64 {
    let left = expires_at
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl ReplayStore for RedisReplayStore {
    fn claim(
        &self,
        nonce: Nonce,
        owner: Owner,
        expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        Box::pin(async move {
            let mut set = redis::cmd("SET");
            set.arg(self.key(&nonce))
                .arg(in_flight(&owner))
                .arg("NX")
                .arg("PX")
                .arg(ttl_millis(expires_at))
                .arg("GET");
            let previous: Value = self.bounded(self.connection.query(&set)).await?;
            Ok(match previous {
                // Nothing was there: the key is ours now.
                Value::Nil => Claim::Claimed,
                Value::BulkString(held) if held == CONSUMED.as_bytes() => Claim::Consumed,
                // In flight (or anything unexpected): refused either way.
                _ => Claim::InFlight,
            })
        })
    }

    fn complete(
        &self,
        nonce: Nonce,
        owner: Owner,
        _expires_at: SystemTime,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.complete.key(self.key(&nonce));
            invocation.arg(in_flight(&owner));
            let done: i64 = self.bounded(self.connection.invoke(&invocation)).await?;
            Ok(done == 1)
        })
    }
}
