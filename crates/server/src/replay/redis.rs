//! The Redis connection of the fast path, behind a circuit breaker.
//!
//! Redis is an accelerator, never a store of record: every operation here may fail, and a
//! failure only means "ask the database". So every command has a short timeout, and after
//! a failure the breaker opens for a backoff (doubling up to [`MAX_BACKOFF`], with jitter so
//! instances that saw one Redis fail together do not all come back in step) during which
//! Redis is not asked at all: a dead Redis costs one timeout per backoff period, not one
//! per request. After the backoff one request (whoever gets the connect lock; the others
//! skip Redis meanwhile) reconnects.

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// First backoff after a failure.
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// Longest backoff: how long a recovered Redis may stay unused at worst.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why Redis was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    /// The breaker is open, or another request is reconnecting.
    #[error("redis skipped (breaker open or reconnecting)")]
    Skipped,
    /// The command failed or timed out.
    #[error("redis: {0}")]
    Failed(String),
    /// The TLS handshake failed (wrong CA, a plain-text server).
    #[error("redis TLS: {0}")]
    Tls(String),
}

/// The Redis fast path's connection.
pub(crate) struct RedisCache {
    client: redis::Client,
    /// The URL without credentials, for logs.
    url: String,
    timeout: Duration,
    conn: Mutex<Option<MultiplexedConnection>>,
    /// The monotonic clock's origin for `open_until`.
    born: Instant,
    /// Nanoseconds after `born` until which Redis is not asked.
    open_until: AtomicU64,
    failures: AtomicU32,
    /// Last known state, for `/metrics` and for logging transitions once.
    up: AtomicBool,
}

impl RedisCache {
    /// A cache on `url` (parsed now, connected lazily). `timeout` bounds each connect and
    /// each command. A `rediss://` URL trusts only the `ca` certificates (PEM) when given.
    pub(crate) fn new(
        url: &str,
        timeout: Duration,
        ca: Option<&[u8]>,
    ) -> Result<Self, redis::RedisError> {
        let client = match ca.filter(|_| url.starts_with("rediss://")) {
            Some(pem) => {
                let root_cert = Some(pem.to_vec());
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert,
                };
                redis::Client::build_with_tls(url, certs)
            }
            None => redis::Client::open(url),
        }?;
        Ok(Self {
            client,
            // A password may sit in the userinfo or the query (`?password=`).
            url: crate::secret::redact_url(url),
            timeout,
            conn: Mutex::new(None),
            born: Instant::now(),
            open_until: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            up: AtomicBool::new(false),
        })
    }

    /// True while the last command succeeded.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Connects and pings once, for the start-up log line.
    pub(crate) async fn probe(&self) -> Result<(), CacheError> {
        self.query::<String>(&redis::cmd("PING")).await.map(|_| ())
    }

    /// Probes Redis at start and says in the log whether the fast path is on. Unreachable
    /// is not fatal: pays then go to the database until Redis answers. A failed TLS
    /// handshake is (a wrong CA never starts working): its error is returned.
    pub(crate) async fn announce(&self) -> Result<(), String> {
        match self.probe().await {
            Ok(()) => tracing::info!(url = %self.url, "redis fast path on"),
            Err(CacheError::Tls(e)) => return Err(e),
            Err(e) => tracing::warn!(url = %self.url, error = %e,
                "redis unreachable at start: DEGRADED, pays use the database path only until it answers"),
        }
        Ok(())
    }

    async fn connection(&self) -> Result<MultiplexedConnection, CacheError> {
        if self.elapsed_ns() < self.open_until.load(Ordering::Relaxed) {
            return Err(CacheError::Skipped);
        }
        // One reconnect at a time; everyone else goes to the database meanwhile.
        let Ok(mut guard) = self.conn.try_lock() else {
            return Err(CacheError::Skipped);
        };
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.timeout * 2, connect).await {
            Ok(Ok(c)) => {
                *guard = Some(c.clone());
                Ok(c)
            }
            Ok(Err(e)) => Err(match crate::error::tls_failure(&e) {
                Some(why) => CacheError::Tls(why),
                None => CacheError::Failed(e.to_string()),
            }),
            Err(_) => Err(CacheError::Failed("connect timed out".into())),
        }
    }

    /// Runs one command under the timeout; trips the breaker on failure.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, CacheError> {
        let mut conn = match self.connection().await {
            Ok(c) => c,
            Err(CacheError::Skipped) => return Err(CacheError::Skipped),
            Err(e) => {
                self.trip(&e);
                return Err(e);
            }
        };
        let result = match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(CacheError::Failed(e.to_string())),
            Err(_) => Err(CacheError::Failed("command timed out".into())),
        };
        match &result {
            Ok(_) => self.heal(),
            Err(e) => self.trip(e),
        }
        result
    }

    fn elapsed_ns(&self) -> u64 {
        duration_ns(self.born.elapsed())
    }

    fn heal(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!("redis fast path up");
        }
    }

    fn trip(&self, why: &CacheError) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed).min(16);
        let backoff = backoff(n, rand::random::<f64>());
        let until = self.elapsed_ns().saturating_add(duration_ns(backoff));
        self.open_until.store(until, Ordering::Relaxed);
        if self.up.swap(false, Ordering::Relaxed) || n == 0 {
            tracing::warn!(error = %why, backoff_ms = backoff.as_millis() as u64,
                "redis unavailable: degraded to the database path");
        }
        // Drop the connection so the next try after the backoff reconnects (a killed server
        // leaves a dead socket behind). Skip if someone is reconnecting right now.
        if let Ok(mut guard) = self.conn.try_lock() {
            *guard = None;
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The breaker's wait after the `n`-th failure in a row (from 0), for a uniform `jitter` in
/// [0, 1): the doubling step, capped, then "equal jitter" (between half and all of it), so a
/// recovered Redis is retried within [`MAX_BACKOFF`] and never sooner than half a step.
fn backoff(n: u32, jitter: f64) -> Duration {
    let step = MIN_BACKOFF.saturating_mul(1 << n.min(5)).min(MAX_BACKOFF);
    step.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_with_equal_jitter() {
        assert_eq!(backoff(0, 0.0), MIN_BACKOFF / 2);
        assert_eq!(backoff(0, 1.0), MIN_BACKOFF);
        assert_eq!(backoff(1, 1.0), MIN_BACKOFF * 2);
        assert_eq!(backoff(16, 1.0), MAX_BACKOFF);
        assert_eq!(backoff(16, 0.0), MAX_BACKOFF / 2);
        let spread: Vec<Duration> = [0.1, 0.5, 0.9].iter().map(|&j| backoff(3, j)).collect();
        assert!(
            spread.windows(2).all(|w| w[0] < w[1]),
            "jitter spreads: {spread:?}"
        );
    }

    #[test]
    fn urls_are_logged_without_credentials() {
        let shown = |url: &str| {
            let cache = RedisCache::new(url, Duration::from_millis(100), None).expect("parses");
            cache.url
        };
        assert_eq!(
            shown("redis://user:secret@127.0.0.1:6379/3"),
            "redis://***@127.0.0.1:6379/3"
        );
        assert_eq!(
            shown("redis://127.0.0.1:6379/0?password=secret"),
            "redis://127.0.0.1:6379/0?***"
        );
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[tokio::test]
    async fn an_unreachable_redis_fails_fast_then_is_skipped() {
        // Port 1 on loopback: nothing listens, the connect is refused at once.
        let cache = RedisCache::new("redis://127.0.0.1:1/0", Duration::from_millis(100), None)
            .expect("url parses");
        assert!(matches!(cache.probe().await, Err(CacheError::Failed(_))));
        assert!(!cache.is_up());
        // The breaker is open: the next call does not even try.
        assert!(matches!(cache.probe().await, Err(CacheError::Skipped)));
    }
}
