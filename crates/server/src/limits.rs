//! The pay rate limit: in-process token buckets per user.
//!
//! Two buckets, because a duplicate is not a new payment:
//! - `requests`: every pay request of a user takes a token. Generous (a double click, a
//!   retry loop and 50 tabs replaying one key are normal); it only stops a runaway client.
//! - `new_attempts`: only a request that wins the claim of a NEW key takes one (inside the
//!   claim transaction, before its commit: `pay::claim`). Replays, waits on a key in flight,
//!   duplicates that lose the race for the key's slot and 409/422 answers never reach it, so
//!   retrying with the same key is never limited like minting new keys, which is what costs
//!   provider calls and stock reservations.
//!
//! A refusal is 429 `RATE_LIMITED` with `Retry-After` (whole seconds until a token is back).
//! The buckets live in each process: with N instances a user gets up to N times the rate.
//! That is a deliberate simplification: the limit protects the provider and the store from
//! one client's loop, and a shared limiter would put Redis on the path of every request.

use crate::error::AppError;
use payonce_protocol::ErrorCode;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Users idle this long are forgotten (their bucket would be full again anyway).
const IDLE_EVICT: Duration = Duration::from_secs(600);

/// Sweep the map for idle users every this many takes.
const SWEEP_EVERY: u64 = 4096;

/// A bucket's size and refill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rate {
    /// Tokens a full bucket holds: how many requests may come at once.
    pub burst: f64,
    /// Tokens added per second.
    pub per_sec: f64,
}

impl Rate {
    /// `per_min` per minute with bursts of `burst`; `per_min == 0` disables the bucket.
    pub(crate) fn new(burst: u32, per_min: u32) -> Option<Self> {
        (per_min > 0 && burst > 0).then(|| Self {
            burst: f64::from(burst),
            per_sec: f64::from(per_min) / 60.0,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets for one kind of request, keyed by user.
#[derive(Debug)]
struct Buckets {
    rate: Option<Rate>,
    name: &'static str,
    map: Mutex<(HashMap<String, Bucket>, u64)>,
}

impl Buckets {
    fn new(name: &'static str, rate: Option<Rate>) -> Self {
        Self {
            rate,
            name,
            map: Mutex::new((HashMap::new(), 0)),
        }
    }

    /// Takes a token for `user` at `now`, or says how long until one is back.
    fn take(&self, user: &str, now: Instant) -> Result<(), Duration> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        let mut guard = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (map, takes) = &mut *guard;
        *takes += 1;
        if (*takes).is_multiple_of(SWEEP_EVERY) {
            map.retain(|_, b| now.saturating_duration_since(b.at) < IDLE_EVICT);
        }
        let b = map.entry(user.to_owned()).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate.per_sec).min(rate.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / rate.per_sec))
        }
    }

    fn check(&self, user: &str) -> Result<(), AppError> {
        self.take(user, Instant::now()).map_err(|wait| {
            crate::metrics::rate_limited(self.name);
            // Round up: a client that waits exactly Retry-After must find a token.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            AppError::with(ErrorCode::RateLimited, |p| {
                p.retry_after = Some(secs.max(1));
                p.detail = Some(format!(
                    "too many pay requests ({}) for this user; retry with the same key later",
                    self.name
                ));
            })
        })
    }
}

/// The pay limits of one process.
#[derive(Debug)]
pub(crate) struct Limits {
    requests: Buckets,
    new_attempts: Buckets,
}

impl Limits {
    pub(crate) fn new(requests: Option<Rate>, new_attempts: Option<Rate>) -> Self {
        Self {
            requests: Buckets::new("requests", requests),
            new_attempts: Buckets::new("new_attempts", new_attempts),
        }
    }

    /// Any pay request of `user`.
    pub(crate) fn request(&self, user: &str) -> Result<(), AppError> {
        self.requests.check(user)
    }

    /// A pay request of `user` about to claim a new key.
    pub(crate) fn new_attempt(&self, user: &str) -> Result<(), AppError> {
        self.new_attempts.check(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let b = Buckets::new("t", Rate::new(3, 60)); // 1 token per second
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(b.take("alice", t0).is_ok());
        }
        let wait = b.take("alice", t0).expect_err("burst spent");
        assert!(wait <= Duration::from_secs(1) && wait > Duration::from_millis(900));
        // Another user has their own bucket.
        assert!(b.take("bob", t0).is_ok());
        // One second later exactly one more token is back.
        let t1 = t0 + Duration::from_secs(1);
        assert!(b.take("alice", t1).is_ok());
        assert!(b.take("alice", t1).is_err());
        // A long pause refills only up to the burst.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(b.take("alice", t2).is_ok());
        }
        assert!(b.take("alice", t2).is_err());
    }

    #[test]
    fn a_zero_rate_disables_the_bucket() {
        let b = Buckets::new("t", Rate::new(10, 0));
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert!(b.take("alice", t0).is_ok());
        }
    }

    #[test]
    fn a_refusal_is_429_with_retry_after() {
        let limits = Limits::new(Rate::new(1, 1), None);
        assert!(limits.request("alice").is_ok());
        let p = limits.request("alice").expect_err("limited").to_problem();
        assert_eq!(p.status, 429);
        assert_eq!(p.code, ErrorCode::RateLimited);
        assert!(p.retry_after.is_some_and(|s| (1..=60).contains(&s)));
    }
}
