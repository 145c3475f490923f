//! What the shared-backend stores (the Redis and Postgres replay stores, and the grant stores
//! beside them) do alike: connect with bounded waits, bound each call, name their tables safely,
//! and turn a backend's error into a [`StoreError`].

use std::time::Duration;

use super::StoreError;

/// Runs `call`, failing with a timeout ([`StoreError::Timeout`], as the store's error type says
/// it) if it takes longer than `timeout`.
pub(crate) async fn bounded<T, E: From<StoreError>>(
    timeout: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| Err(E::from(StoreError::Timeout)))
}

/// Brings a PostgreSQL schema up to date: when `current` (a query answering one boolean) says it
/// is, only the catalog was read, so an instance starting beside live ones locks none of their
/// tables; otherwise `ddl` runs in one transaction (rolled back if it fails, so the connection is
/// not left inside it). Every migration of the crate goes through here.
#[cfg(feature = "postgres")]
pub async fn migrate_once(
    client: &mut tokio_postgres::Client,
    current: &str,
    ddl: &str,
) -> Result<(), tokio_postgres::Error> {
    if client
        .query_one(current, &[])
        .await?
        .try_get::<_, bool>(0)?
    {
        return Ok(());
    }
    let tx = client.transaction().await?;
    tx.batch_execute(ddl).await?;
    tx.commit().await
}

/// A backend's own error, kept as the source.
pub(crate) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// Sets `KEYS[1]` to `ARGV[2]` (keeping its expiry) only if it still holds `ARGV[1]`: how the
/// Redis stores write back a record they decided on in Rust (grants, browser approvals).
#[cfg(feature = "redis")]
pub(crate) const COMPARE_AND_SET: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
";

/// A lazily connecting, reconnecting Redis connection for `url`, each connect and answer bounded
/// by `timeout`.
#[cfg(feature = "redis")]
pub(crate) fn redis_connection(
    url: &str,
    timeout: Duration,
) -> Result<redis::aio::ConnectionManager, StoreError> {
    let client = redis::Client::open(url).map_err(backend)?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1);
    redis::aio::ConnectionManager::new_lazy_with_config(client, config).map_err(backend)
}

/// A pool of up to 16 connections to the Postgres at `url`; making or recycling a connection is
/// bounded by `timeout`.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_pool(
    url: &str,
    timeout: Duration,
) -> Result<deadpool_postgres::Pool, StoreError> {
    use deadpool_postgres::{PoolConfig, Runtime, Timeouts};
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(url.to_owned());
    let mut pool = PoolConfig::new(16);
    pool.timeouts = Timeouts {
        // Waiting for a pooled connection is part of the store call, which the store's own
        // timeout bounds as a whole: a second, fixed bound here would ignore a longer one.
        wait: None,
        create: Some(timeout),
        recycle: Some(timeout),
    };
    config.pool = Some(pool);
    config
        .create_pool(Some(Runtime::Tokio1), tokio_postgres::NoTls)
        .map_err(backend)
}

/// `table` if it is a plain SQL identifier (letters, digits and `_`, not starting with a digit,
/// at most 63 bytes), the only names spliced into SQL text.
#[cfg(feature = "postgres")]
pub fn table_name(table: &str) -> Result<String, StoreError> {
    let valid = !table.is_empty()
        && table.len() <= 63
        && table.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(table.to_owned())
    } else {
        Err(StoreError::Backend(
            format!("invalid table name {table:?}").into(),
        ))
    }
}

/// Milliseconds from `now` until `until`, at least one (a Redis expiry of zero is an error).
#[cfg(feature = "redis")]
pub(crate) fn millis_until(now: std::time::SystemTime, until: std::time::SystemTime) -> u64 {
    let left = until.duration_since(now).unwrap_or_default();
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}
