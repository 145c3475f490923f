//! Every store shared through Redis, in one type: the replay store, standing approvals,
//! browser approvals and passkeys here; its grants in [`crate::grant`] (`grant/redis.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};

use super::approval::{
    Approval, ApprovalId, ApprovalStore, Decided, Decider, Decision, MAX_PENDING_APPROVALS,
};
use super::backend::{COMPARE_AND_SET, backend, millis_until, redis_connection};
use super::batch::{BatchDecision, SetDigest};
use super::passkey::{
    MAX_PASSKEYS_PER_SUBJECT, PasskeyStore, Registered, RegisteredPasskey, subject_key,
};
use super::standing::{
    MAX_STANDING_PER_PRINCIPAL, Standing, StandingId, StandingKey, StandingStore, Use,
};
use super::{
    BootEpoch, BoxFuture, Claim, ClaimRequest, DEFAULT_PRINCIPAL_BUDGET, Nonce, Owner,
    PrincipalKey, ReplayStore, StoreError,
};
use crate::clock::{Clock, SystemClock};
use crate::kernel::hex;

/// Claims `KEYS[1]` (a nonce) for the principal whose live entries are the sorted set `KEYS[2]`
/// (nonce → expiry in ms), in one atomic step: a held nonce is reported as held (1 in flight,
/// 2 consumed) whatever the budget; otherwise the principal's expired entries are dropped, and if
/// it still holds `ARGV[5]` live ones the claim is refused (3, with the ms until the oldest
/// expires); otherwise the nonce is set in flight and added to the set (0).
const CLAIM: &str = r"
local held = redis.call('GET', KEYS[1])
if held then
  if held == 'consumed' then return {2, 0} end
  return {1, 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {3, tonumber(oldest[2]) - tonumber(ARGV[3])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return {0, 0}
";

/// Moves `KEYS[1]` from `inflight:<owner>` to `consumed`, keeping its expiry, only for the owner.
const COMPLETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'consumed', 'KEEPTTL')
  return 1
end
return 0
";

/// Replaces field `ARGV[1]` of hash `KEYS[1]` with `ARGV[2]`, only if it exists: 1, else 0.
const REPLACE_FIELD: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
";

/// Spends one use of the standing approval whose record is `KEYS[1]` and use count `KEYS[2]` (one
/// slot), if its id is `ARGV[1]`, at `ARGV[2]` ms: [`Standing::use_one`] as one atomic step. The
/// spending call's ticket `ARGV[3]` joins the set `KEYS[3]`, which expires with the record.
/// Answers `{0, left}` used, `{1, 0}` exhausted, `{2, 0}` expired, `{3, 0}` revoked, `{4, 0}`
/// unknown.
const USE_STANDING: &str = r"
local record = redis.call('GET', KEYS[1])
if not record then return {4, 0} end
local s = cjson.decode(record)
if s.id ~= ARGV[1] then return {4, 0} end
if s.revoked then return {3, 0} end
if tonumber(ARGV[2]) >= s.expires_at_ms then return {2, 0} end
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if used >= s.uses then return {1, 0} end
used = redis.call('INCR', KEYS[2])
redis.call('SADD', KEYS[3], ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
return {0, s.uses - used}
";

/// Gives back the use ticket `ARGV[2]` spent of the standing approval `KEYS[1]` (use count
/// `KEYS[2]`, tickets `KEYS[3]`), if its id is still `ARGV[1]` and the ticket is there:
/// [`Standing::give_back`] as one atomic step. 1 given back, 0 not.
const GIVE_BACK_STANDING: &str = r"
local record = redis.call('GET', KEYS[1])
if not record then return 0 end
local s = cjson.decode(record)
if s.id ~= ARGV[1] then return 0 end
if redis.call('SREM', KEYS[3], ARGV[2]) == 0 then return 0 end
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if used > 0 then redis.call('DECR', KEYS[2]) end
return 1
";

/// Stores a standing approval: its record `KEYS[1]` (`ARGV[1]`) and a fresh use count `KEYS[2]`,
/// both for `ARGV[2]` ms, and no tickets (`KEYS[3]`), in one step (one slot).
const GRANT_STANDING: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], '0', 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
return 1
";

/// A [`ReplayStore`] in Redis, for deployments with more than one instance.
///
/// One key per nonce, `<prefix>{<principal>}:<nonce>`, and one sorted set per principal,
/// `<prefix>{<principal>}:live`, holding that principal's live nonces by expiry: the hash tag puts
/// both in one slot, so it works unchanged on Redis Cluster. A claim is one Lua script (atomic):
/// a held nonce answers as in flight or consumed; a fresh one is refused with
/// [`StoreError::OverBudget`] when the principal already holds its budget of live entries
/// (default [`DEFAULT_PRINCIPAL_BUDGET`]), and is otherwise set in flight with its expiry.
/// Completing is a compare-and-set in a second script that checks the owner.
///
/// Entries outlive this process, so a state issued before a restart keeps working after it (and
/// stays single-use); they outlive a restart of Redis only if Redis persists them (AOF).
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
pub struct RedisStore {
    pub(crate) connection: Connection,
    prefix: String,
    pub(crate) timeout: Duration,
    budget: usize,
    /// Where grants are kept: `{prefix}grant:`, [`DEFAULT_GRANT_PREFIX`](Self::DEFAULT_GRANT_PREFIX)
    /// by default.
    pub(crate) grant_prefix: String,
    /// How long a grant is kept after its expiry.
    pub(crate) grant_retention: Duration,
    /// What grants' leases and expiries are judged by.
    pub(crate) grant_clock: Arc<dyn Clock>,
    claim: Script,
    complete: Script,
    pub(crate) cas: Script,
    replace_field: Script,
    use_standing: Script,
    give_back_standing: Script,
    grant_standing: Script,
}

/// A single server (reconnecting) or a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Connection {
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> RedisResult<T> {
        match self.clone() {
            Connection::Single(mut c) => command.query_async(&mut c).await,
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(mut c) => command.query_async(&mut c).await,
        }
    }

    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        match self.clone() {
            Connection::Single(mut c) => script.invoke_async(&mut c).await,
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(mut c) => script.invoke_async(&mut c).await,
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("budget", &self.budget)
            .field("grant_prefix", &self.grant_prefix)
            .field("grant_retention", &self.grant_retention)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &str = "mcp-confirm:nonce:";
    /// The default time allowed for one store call before the claim is refused.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
    /// Where grants are kept by default (where `RedisGrantStore` kept them).
    pub const DEFAULT_GRANT_PREFIX: &str = "mcp-confirm:grant:";
    /// How long a grant is kept after its expiry by default, so late job retries find it ended.
    pub const DEFAULT_GRANT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// A store for the Redis at `url` (`redis://host:port/db`). The connection is made on first use
    /// and re-made after failures, so a store that is down at start-up does not stop the server:
    /// claims are refused until it answers.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if `url` is not a valid Redis URL.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Ok(Self::with_connection(redis_connection(
            url,
            Self::DEFAULT_TIMEOUT,
        )?))
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
            .connection_timeout(Self::DEFAULT_TIMEOUT)
            .response_timeout(Self::DEFAULT_TIMEOUT)
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
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            budget: DEFAULT_PRINCIPAL_BUDGET,
            grant_prefix: Self::DEFAULT_GRANT_PREFIX.to_owned(),
            grant_retention: Self::DEFAULT_GRANT_RETENTION,
            grant_clock: Arc::new(SystemClock),
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            cas: Script::new(COMPARE_AND_SET),
            replace_field: Script::new(REPLACE_FIELD),
            use_standing: Script::new(USE_STANDING),
            give_back_standing: Script::new(GIVE_BACK_STANDING),
            grant_standing: Script::new(GRANT_STANDING),
        }
    }

    /// Namespaces the keys, e.g. per deployment sharing one Redis: every key of this store
    /// starts with `prefix`, grants' with `{prefix}grant:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self.grant_prefix = format!("{}grant:", self.prefix);
        self
    }

    /// Where grants are kept, if not under [`prefix`](Self::prefix) (set after it).
    pub fn grant_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.grant_prefix = prefix.into();
        self
    }

    /// How long a grant is kept after its expiry (default
    /// [`DEFAULT_GRANT_RETENTION`](Self::DEFAULT_GRANT_RETENTION)); a grant forgotten after that
    /// answers [`Begin::Unknown`](crate::grant::Begin::Unknown), which never runs.
    pub fn grant_retention(mut self, retention: Duration) -> Self {
        self.grant_retention = retention;
        self
    }

    /// The clock grants' leases and expiries are judged by (default: the system clock). Every
    /// instance's clock must agree within the leases' margin.
    pub fn grant_clock(mut self, clock: impl Clock) -> Self {
        self.grant_clock = Arc::new(clock);
        self
    }

    /// How long one store call may take before the claim is refused.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Caps each principal's live entries (default [`DEFAULT_PRINCIPAL_BUDGET`], at least one).
    pub fn principal_budget(mut self, budget: usize) -> Self {
        self.budget = budget.max(1);
        self
    }

    fn key(&self, principal: &PrincipalKey, nonce: &Nonce) -> String {
        format!(
            "{}{{{}}}:{}",
            self.prefix,
            principal.to_hex(),
            nonce.to_hex()
        )
    }

    fn approval_key(&self, id: &ApprovalId) -> String {
        format!("{}approval:{}", self.prefix, id.to_hex())
    }

    /// The approvals of `audience` filed under inbox `route` (a digest), by creation time.
    fn inbox_key(&self, audience: &str, route: &str) -> String {
        format!(
            "{}inbox:{}:{route}",
            self.prefix,
            crate::kernel::hex(&audience_digest(audience))
        )
    }

    /// The stored text and the approval under `key`, if it is there and unexpired.
    async fn read_approval(&self, key: &str) -> Result<Option<(String, Approval)>, StoreError> {
        let text: Option<String> = self
            .bounded(self.connection.query(redis::cmd("GET").arg(key)))
            .await?;
        let Some(text) = text else { return Ok(None) };
        let approval = Approval::decode(&text)
            .ok_or_else(|| StoreError::Backend("an approval record does not decode".into()))?;
        if SystemTime::now() >= approval.expires_at {
            return Ok(None);
        }
        Ok(Some((text, approval)))
    }

    /// A standing approval's record, and its use count beside it (one hash tag, one slot).
    fn standing_keys(&self, key: &StandingKey) -> (String, String) {
        let record = format!("{}{{standing:{}}}", self.prefix, hex(key.as_bytes()));
        let used = format!("{record}:used");
        (record, used)
    }

    /// The set of tickets that spent a use of the approval under `key` (the same slot).
    fn standing_tickets(&self, key: &StandingKey) -> String {
        format!(
            "{}{{standing:{}}}:tickets",
            self.prefix,
            hex(key.as_bytes())
        )
    }

    /// A principal's standing approvals: key (hex) → expiry in ms.
    fn standing_index(&self, principal: &PrincipalKey) -> String {
        format!("{}{{{}}}:standing", self.prefix, principal.to_hex())
    }

    /// The record text and the approval under `key` (expired or not), if it is there.
    async fn read_standing(
        &self,
        key: &StandingKey,
    ) -> Result<Option<(String, Standing)>, StoreError> {
        let (record, used) = self.standing_keys(key);
        let mut get = redis::cmd("MGET");
        get.arg(&record).arg(&used);
        let (text, count): (Option<String>, Option<u32>) =
            self.bounded(self.connection.query(&get)).await?;
        let Some(text) = text else { return Ok(None) };
        let standing = Standing::decode(&text, count.unwrap_or(0))
            .ok_or_else(|| StoreError::Backend("a standing approval does not decode".into()))?;
        Ok(Some((text, standing)))
    }

    /// Drops from a principal's index every member whose approval is no longer live (revoked,
    /// every use spent, gone) and answers how many are left: what the cap counts.
    async fn prune_ended(&self, index: &str, now: SystemTime) -> Result<usize, StoreError> {
        let mut members = redis::cmd("ZRANGE");
        members.arg(index).arg(0).arg(-1);
        let members: Vec<String> = self.bounded(self.connection.query(&members)).await?;
        let mut live = 0;
        for member in members {
            let key = crate::kernel::unhex(&member).map(StandingKey::from_bytes);
            let alive = match key {
                Some(key) => self
                    .read_standing(&key)
                    .await?
                    .is_some_and(|(_, standing)| standing.is_live(now)),
                None => false,
            };
            if alive {
                live += 1;
            } else {
                let mut drop = redis::cmd("ZREM");
                drop.arg(index).arg(&member);
                let _: i64 = self.bounded(self.connection.query(&drop)).await?;
            }
        }
        Ok(live)
    }

    fn live_key(&self, principal: &PrincipalKey) -> String {
        format!("{}{{{}}}:live", self.prefix, principal.to_hex())
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

fn in_flight(owner: &Owner) -> String {
    format!("inflight:{}", Nonce::from_bytes(*owner.as_bytes()).to_hex())
}

/// Milliseconds since the Unix epoch.
fn unix_millis(at: SystemTime) -> u64 {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl ReplayStore for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn claim(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<Claim, StoreError>> {
        let claim = *claim;
        Box::pin(async move {
            let now = SystemTime::now();
            let mut invocation = self.claim.key(self.key(&claim.principal, &claim.nonce));
            invocation
                .key(self.live_key(&claim.principal))
                .arg(in_flight(&claim.owner))
                .arg(millis_until(now, claim.expires_at))
                .arg(unix_millis(now))
                .arg(unix_millis(claim.expires_at))
                .arg(self.budget)
                .arg(claim.nonce.to_hex());
            let answer: (i64, i64) = self.bounded(self.connection.invoke(&invocation)).await?;
            match answer {
                (0, _) => Ok(Claim::Claimed),
                (2, _) => Ok(Claim::Consumed),
                (3, left) => Err(StoreError::OverBudget {
                    retry_after: Duration::from_millis(u64::try_from(left).unwrap_or(0))
                        .max(Duration::from_millis(1)),
                }),
                // In flight (or anything unexpected): refused either way.
                _ => Ok(Claim::InFlight),
            }
        })
    }

    fn complete(&self, claim: &ClaimRequest) -> BoxFuture<'_, Result<bool, StoreError>> {
        let claim = *claim;
        Box::pin(async move {
            let mut invocation = self.complete.key(self.key(&claim.principal, &claim.nonce));
            invocation.arg(in_flight(&claim.owner));
            let done: i64 = self.bounded(self.connection.invoke(&invocation)).await?;
            Ok(done == 1)
        })
    }

    fn is_used(
        &self,
        nonce: Nonce,
        principal: PrincipalKey,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut exists = redis::cmd("EXISTS");
            exists.arg(self.key(&principal, &nonce));
            let found: i64 = self.bounded(self.connection.query(&exists)).await?;
            Ok(found == 1)
        })
    }

    fn boot_epoch(&self) -> Option<BootEpoch> {
        // Entries live in Redis, not in this process.
        None
    }
}

impl StandingStore for RedisStore {
    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        if let Err(e) = standing.check_keepable() {
            return Box::pin(std::future::ready(Err(e)));
        }
        let key = standing.key();
        let (record, used) = self.standing_keys(&key);
        let tickets = self.standing_tickets(&key);
        let index = self.standing_index(&standing.principal);
        let member = hex(key.as_bytes());
        let text = standing.encode();
        let now = SystemTime::now();
        let ttl = millis_until(now, standing.expires_at);
        let (now_ms, until_ms) = (unix_millis(now), unix_millis(standing.expires_at));
        let cap = MAX_STANDING_PER_PRINCIPAL.min(self.budget);
        Box::pin(async move {
            // The index and the record are in different slots: checked, then written, so
            // concurrent grants can pass the cap by their number (each is a confirmed answer,
            // which the challenge rate limit bounds).
            let mut prune = redis::cmd("ZREMRANGEBYSCORE");
            prune.arg(&index).arg("-inf").arg(now_ms);
            let _: i64 = self.bounded(self.connection.query(&prune)).await?;
            let mut held = redis::cmd("ZCARD");
            held.arg(&index);
            let mut held: usize = self.bounded(self.connection.query(&held)).await?;
            let mut mine = redis::cmd("ZSCORE");
            mine.arg(&index).arg(&member);
            let replacing: Option<f64> = self.bounded(self.connection.query(&mine)).await?;
            if replacing.is_none() && held >= cap {
                // The index keeps members until they expire; only live approvals count.
                held = self.prune_ended(&index, now).await?;
            }
            if replacing.is_none() && held >= cap {
                let mut oldest = redis::cmd("ZRANGE");
                oldest.arg(&index).arg(0).arg(0).arg("WITHSCORES");
                let first: Vec<(String, u64)> =
                    self.bounded(self.connection.query(&oldest)).await?;
                let retry_after = first.first().map_or(0, |(_, at)| at.saturating_sub(now_ms));
                return Err(StoreError::OverBudget {
                    retry_after: Duration::from_millis(retry_after),
                });
            }
            let mut grant = self.grant_standing.key(&record);
            grant.key(&used).key(&tickets).arg(&text).arg(ttl);
            let _: i64 = self.bounded(self.connection.invoke(&grant)).await?;
            let mut add = redis::cmd("ZADD");
            add.arg(&index).arg(until_ms).arg(&member);
            let _: i64 = self.bounded(self.connection.query(&add)).await?;
            let mut keep = redis::cmd("PEXPIRE");
            keep.arg(&index).arg(ttl).arg("GT");
            let _: i64 = self.bounded(self.connection.query(&keep)).await?;
            let mut fresh = redis::cmd("PEXPIRE");
            fresh.arg(&index).arg(ttl).arg("NX");
            let _: i64 = self.bounded(self.connection.query(&fresh)).await?;
            Ok(())
        })
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        Box::pin(async move {
            let now = SystemTime::now();
            Ok(self
                .read_standing(&key)
                .await?
                .map(|(_, standing)| standing)
                .filter(|standing| now < standing.expires_at))
        })
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        let (record, used) = self.standing_keys(&key);
        let tickets = self.standing_tickets(&key);
        let now_ms = unix_millis(SystemTime::now());
        Box::pin(async move {
            let mut spend = self.use_standing.key(&record);
            spend
                .key(&used)
                .key(&tickets)
                .arg(id.to_hex())
                .arg(now_ms)
                .arg(ticket.to_hex());
            let (code, left): (i64, i64) = self.bounded(self.connection.invoke(&spend)).await?;
            Ok(match code {
                0 => Use::Used {
                    left: u32::try_from(left).unwrap_or(0),
                },
                1 => Use::Exhausted,
                2 => Use::Expired,
                3 => Use::Revoked,
                _ => Use::Unknown,
            })
        })
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (record, used) = self.standing_keys(&key);
        let tickets = self.standing_tickets(&key);
        Box::pin(async move {
            let mut give = self.give_back_standing.key(&record);
            give.key(&used)
                .key(&tickets)
                .arg(id.to_hex())
                .arg(ticket.to_hex());
            let given: i64 = self.bounded(self.connection.invoke(&give)).await?;
            Ok(given == 1)
        })
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        let index = self.standing_index(&principal);
        Box::pin(async move {
            let now = SystemTime::now();
            let mut members = redis::cmd("ZRANGEBYSCORE");
            members.arg(&index).arg(unix_millis(now)).arg("+inf");
            let members: Vec<String> = self.bounded(self.connection.query(&members)).await?;
            let mut live = Vec::new();
            for member in members {
                let Some(key) = crate::kernel::unhex(&member).map(StandingKey::from_bytes) else {
                    continue;
                };
                if let Some((_, standing)) = self.read_standing(&key).await?
                    && standing.principal == principal
                    && standing.is_live(now)
                {
                    live.push(standing);
                }
            }
            live.sort_by_key(|s| s.expires_at);
            Ok(live)
        })
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut revoked = 0;
            for standing in self.list(principal).await? {
                if id.is_some_and(|id| id != standing.id) {
                    continue;
                }
                let key = standing.key();
                // Read, mark, write back only if the record is still the one read.
                for attempt in 0..16 {
                    let Some((old, mut current)) = self.read_standing(&key).await? else {
                        break;
                    };
                    if current.id != standing.id || current.revoked {
                        break;
                    }
                    current.revoked = true;
                    let (record, _) = self.standing_keys(&key);
                    let mut cas = self.cas.key(&record);
                    cas.arg(&old).arg(current.encode());
                    let set: i64 = self.bounded(self.connection.invoke(&cas)).await?;
                    if set == 1 {
                        revoked += 1;
                        break;
                    }
                    if attempt == 15 {
                        return Err(StoreError::Backend(
                            "the standing approval kept changing under its revocation".into(),
                        ));
                    }
                }
            }
            Ok(revoked)
        })
    }
}

impl ApprovalStore for RedisStore {
    fn propose(&self, approval: &Approval) -> BoxFuture<'_, Result<(), StoreError>> {
        let (key, text) = (self.approval_key(&approval.id), approval.encode());
        let now = SystemTime::now();
        let ttl = millis_until(now, approval.expires_at).max(1);
        let pending = format!("{}approvals:{}", self.prefix, approval.principal.to_hex());
        let (now_ms, until_ms) = (unix_millis(now), unix_millis(approval.expires_at));
        let member = approval.id.to_hex();
        let (routes, audience) = (approval.routes(), approval.audience.clone());
        Box::pin(async move {
            // The principal's pending approvals, by expiry: at most MAX_PENDING_APPROVALS. Two
            // keys in different slots, so checked, then added: concurrent calls can pass the cap
            // by their number, which the challenge rate limit bounds.
            let mut prune = redis::cmd("ZREMRANGEBYSCORE");
            prune.arg(&pending).arg("-inf").arg(now_ms);
            let _: i64 = self.bounded(self.connection.query(&prune)).await?;
            let mut count = redis::cmd("ZCARD");
            count.arg(&pending);
            let held: usize = self.bounded(self.connection.query(&count)).await?;
            if held >= MAX_PENDING_APPROVALS {
                let mut oldest = redis::cmd("ZRANGE");
                oldest.arg(&pending).arg(0).arg(0).arg("WITHSCORES");
                let first: Vec<(String, u64)> =
                    self.bounded(self.connection.query(&oldest)).await?;
                let retry_after = first.first().map_or(0, |(_, at)| at.saturating_sub(now_ms));
                return Err(StoreError::OverBudget {
                    retry_after: Duration::from_millis(retry_after),
                });
            }
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(&text).arg("NX").arg("PX").arg(ttl);
            let set: Option<String> = self.bounded(self.connection.query(&set)).await?;
            if set.is_none() {
                return Err(StoreError::Backend(
                    "an approval with this id exists".into(),
                ));
            }
            let mut add = redis::cmd("ZADD");
            add.arg(&pending).arg(until_ms).arg(&member);
            let _: i64 = self.bounded(self.connection.query(&add)).await?;
            // The set lives as long as its longest-lived member.
            let mut keep = redis::cmd("PEXPIRE");
            keep.arg(&pending).arg(ttl).arg("GT");
            let _: i64 = self.bounded(self.connection.query(&keep)).await?;
            let mut fresh = redis::cmd("PEXPIRE");
            fresh.arg(&pending).arg(ttl).arg("NX");
            let _: i64 = self.bounded(self.connection.query(&fresh)).await?;
            // Filed in each inbox route's set, scored by expiry: the expired leave on every
            // proposal and read, so a set holds only live approvals, however long it lives.
            for route in routes {
                let inbox = self.inbox_key(&audience, &route);
                let mut prune = redis::cmd("ZREMRANGEBYSCORE");
                prune.arg(&inbox).arg("-inf").arg(now_ms);
                let _: i64 = self.bounded(self.connection.query(&prune)).await?;
                let mut add = redis::cmd("ZADD");
                add.arg(&inbox).arg(until_ms).arg(&member);
                let _: i64 = self.bounded(self.connection.query(&add)).await?;
                for flag in ["GT", "NX"] {
                    let mut keep = redis::cmd("PEXPIRE");
                    keep.arg(&inbox).arg(ttl).arg(flag);
                    let _: i64 = self.bounded(self.connection.query(&keep)).await?;
                }
            }
            Ok(())
        })
    }

    fn approval(&self, id: ApprovalId) -> BoxFuture<'_, Result<Option<Approval>, StoreError>> {
        Box::pin(async move {
            let key = self.approval_key(&id);
            Ok(self
                .read_approval(&key)
                .await?
                .map(|(_, approval)| approval))
        })
    }

    fn decide(
        &self,
        id: ApprovalId,
        decider: Decider,
        decision: Decision,
    ) -> BoxFuture<'_, Result<Decided, StoreError>> {
        Box::pin(async move {
            let key = self.approval_key(&id);
            // Read, decide in Rust, write back only if the record is still the one read: two
            // approvers racing are applied one after the other.
            for _ in 0..16 {
                let Some((old, mut approval)) = self.read_approval(&key).await? else {
                    return Ok(Decided::Unknown);
                };
                let decided = approval.decide(decider.clone(), decision.clone(), SystemTime::now());
                if !matches!(decided, Decided::Recorded | Decided::Counted { .. }) {
                    return Ok(decided);
                }
                let new = approval.encode();
                let mut cas = self.cas.key(&key);
                cas.arg(&old).arg(&new);
                let set: i64 = self.bounded(self.connection.invoke(&cas)).await?;
                if set == 1 {
                    return Ok(decided);
                }
            }
            Err(StoreError::Backend(
                "the approval kept changing under this decision".into(),
            ))
        })
    }

    fn inbox<'a>(
        &'a self,
        audience: &'a str,
        routes: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        Box::pin(async move {
            let now = SystemTime::now();
            let mut found: Vec<Approval> = Vec::new();
            for route in routes {
                let inbox = self.inbox_key(audience, route);
                let mut prune = redis::cmd("ZREMRANGEBYSCORE");
                prune.arg(&inbox).arg("-inf").arg(unix_millis(now));
                let _: i64 = self.bounded(self.connection.query(&prune)).await?;
                // The latest to expire first (the newest, where confirmations live alike; the
                // list is sorted by creation below); decided ones are skipped.
                let mut newest = redis::cmd("ZRANGE");
                newest
                    .arg(&inbox)
                    .arg("+inf")
                    .arg("-inf")
                    .arg("BYSCORE")
                    .arg("REV")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(INBOX_SCAN);
                let members: Vec<String> = self.bounded(self.connection.query(&newest)).await?;
                for member in members {
                    let Some(id) = ApprovalId::from_hex(&member) else {
                        continue;
                    };
                    if found.iter().any(|a| a.id == id) {
                        continue;
                    }
                    match self.read_approval(&self.approval_key(&id)).await? {
                        Some((_, a))
                            if a.decision.is_none()
                                && a.audience == audience
                                && now < a.expires_at =>
                        {
                            found.push(a);
                        }
                        Some(_) => {}
                        None => {
                            let mut drop = redis::cmd("ZREM");
                            drop.arg(&inbox).arg(&member);
                            let _: i64 = self.bounded(self.connection.query(&drop)).await?;
                        }
                    }
                }
            }
            found.sort_by(|a, b| {
                b.created_at
                    .cmp(&a.created_at)
                    .then(a.id.as_bytes().cmp(b.id.as_bytes()))
            });
            found.truncate(limit);
            Ok(found)
        })
    }

    fn siblings<'a>(
        &'a self,
        audience: &'a str,
        principal: &'a PrincipalKey,
    ) -> BoxFuture<'a, Result<Vec<Approval>, StoreError>> {
        Box::pin(async move {
            // The principal's pending approvals (at most MAX_PENDING_APPROVALS live ones).
            let pending = format!("{}approvals:{}", self.prefix, principal.to_hex());
            let now = SystemTime::now();
            let mut live = redis::cmd("ZRANGE");
            live.arg(&pending)
                .arg(unix_millis(now))
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(MAX_PENDING_APPROVALS);
            let members: Vec<String> = self.bounded(self.connection.query(&live)).await?;
            let mut found = Vec::new();
            for member in members {
                let Some(id) = ApprovalId::from_hex(&member) else {
                    continue;
                };
                if let Some((_, a)) = self.read_approval(&self.approval_key(&id)).await?
                    && a.decision.is_none()
                    && a.audience == audience
                    && a.principal == *principal
                {
                    found.push(a);
                }
            }
            found.sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then(a.id.as_bytes().cmp(b.id.as_bytes()))
            });
            Ok(found)
        })
    }

    fn record_batch<'a>(
        &'a self,
        batch: &'a BatchDecision,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let ttl = millis_until(SystemTime::now(), batch.expires_at).max(1);
            let mut set = redis::cmd("SET");
            set.arg(self.batch_key(&batch.set))
                .arg(batch.encode())
                .arg("NX")
                .arg("PX")
                .arg(ttl);
            let set: Option<String> = self.bounded(self.connection.query(&set)).await?;
            Ok(set.is_some())
        })
    }

    fn batch(&self, set: SetDigest) -> BoxFuture<'_, Result<Option<BatchDecision>, StoreError>> {
        Box::pin(async move {
            let mut get = redis::cmd("GET");
            get.arg(self.batch_key(&set));
            let text: Option<String> = self.bounded(self.connection.query(&get)).await?;
            let Some(text) = text else { return Ok(None) };
            let batch = BatchDecision::decode(&text)
                .ok_or_else(|| StoreError::Backend("a batch decision does not decode".into()))?;
            Ok((SystemTime::now() < batch.expires_at).then_some(batch))
        })
    }
}

impl RedisStore {
    /// A batch decision, by its set.
    fn batch_key(&self, set: &SetDigest) -> String {
        format!("{}batch:{}", self.prefix, set.to_hex())
    }

    /// A subject's passkeys: one hash, credential id → record.
    fn passkeys_key(&self, subject: &str) -> String {
        format!("{}passkeys:{}", self.prefix, subject_key(subject))
    }

    /// Who holds credential `id` (its subject's digest): ids are unique across subjects.
    fn passkey_owner_key(&self, id: &str) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(id.as_bytes());
        format!(
            "{}passkey-owner:{}",
            self.prefix,
            crate::kernel::hex(&digest[..16])
        )
    }
}

impl PasskeyStore for RedisStore {
    fn passkeys<'a>(
        &'a self,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RegisteredPasskey>, StoreError>> {
        Box::pin(async move {
            let mut all = redis::cmd("HVALS");
            all.arg(self.passkeys_key(subject));
            let texts: Vec<String> = self.bounded(self.connection.query(&all)).await?;
            let mut found = texts
                .iter()
                .map(|t| RegisteredPasskey::decode(t))
                .collect::<Result<Vec<_>, _>>()?;
            found.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
            Ok(found)
        })
    }

    fn register<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<Registered, StoreError>> {
        Box::pin(async move {
            passkey.check_keepable()?;
            let (held, owner) = (
                self.passkeys_key(subject),
                self.passkey_owner_key(&passkey.id),
            );
            // The id first, across subjects; the subject's cap then (two registrations of one
            // subject at once may pass it by one: they are its own, not anyone else's).
            let mut claim = redis::cmd("SET");
            claim.arg(&owner).arg(subject_key(subject)).arg("NX");
            let claimed: Option<String> = self.bounded(self.connection.query(&claim)).await?;
            if claimed.is_none() {
                return Ok(Registered::Exists);
            }
            let mut count = redis::cmd("HLEN");
            count.arg(&held);
            let n: usize = self.bounded(self.connection.query(&count)).await?;
            if n >= MAX_PASSKEYS_PER_SUBJECT {
                let mut release = redis::cmd("DEL");
                release.arg(&owner);
                let _: i64 = self.bounded(self.connection.query(&release)).await?;
                return Ok(Registered::Full);
            }
            let mut add = redis::cmd("HSETNX");
            add.arg(&held).arg(&passkey.id).arg(passkey.encode());
            let _: i64 = self.bounded(self.connection.query(&add)).await?;
            Ok(Registered::Added)
        })
    }

    fn update<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            passkey.check_keepable()?;
            let mut replace = self.replace_field.key(self.passkeys_key(subject));
            replace.arg(&passkey.id).arg(passkey.encode());
            let done: i64 = self.bounded(self.connection.invoke(&replace)).await?;
            Ok(done == 1)
        })
    }

    fn remove<'a>(
        &'a self,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut drop = redis::cmd("HDEL");
            drop.arg(self.passkeys_key(subject)).arg(id);
            let removed: i64 = self.bounded(self.connection.query(&drop)).await?;
            if removed == 1 {
                let mut release = redis::cmd("DEL");
                release.arg(self.passkey_owner_key(id));
                let _: i64 = self.bounded(self.connection.query(&release)).await?;
            }
            Ok(removed == 1)
        })
    }
}

/// How many members of one inbox route a read looks at: the newest, decided ones included.
const INBOX_SCAN: usize = 200;

/// Eight bytes of a digest of an audience: keys name no deployment, and any audience fits.
fn audience_digest(audience: &str) -> [u8; 8] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(audience.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    bytes
}
