//! The pay rate limit: in-process keyed limiters per user (`governor`'s GCRA, which is a
//! token bucket without a timer).
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
//!
//! Time comes from the limiter's clock: the monotonic clock in the server, a manual one in
//! tests.

use crate::error::AppError;
use crate::metrics::{self, Bucket};
use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use payonce_protocol::ErrorCode;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Forget users whose bucket is full again every this many takes (bounded memory).
const SWEEP_EVERY: u64 = 4096;

/// A bucket's size and refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    /// Requests a full bucket allows at once.
    pub burst: NonZeroU32,
    /// Tokens added per minute.
    pub per_min: NonZeroU32,
}

impl Rate {
    /// `per_min` per minute with bursts of `burst`; either 0 disables the bucket.
    pub(crate) fn new(burst: u32, per_min: u32) -> Option<Self> {
        Some(Self {
            burst: NonZeroU32::new(burst)?,
            per_min: NonZeroU32::new(per_min)?,
        })
    }

    fn quota(self) -> Quota {
        Quota::per_minute(self.per_min).allow_burst(self.burst)
    }
}

type Keyed<C> =
    RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One kind of request's limiter, keyed by user; `None` when the bucket is off.
struct Buckets<C: Clock + Clone> {
    limiter: Option<Keyed<C>>,
    bucket: Bucket,
    takes: AtomicU64,
    clock: C,
}

impl<C: Clock + Clone> Buckets<C> {
    fn new(bucket: Bucket, rate: Option<Rate>, clock: &C) -> Self {
        Self {
            limiter: rate.map(|r| RateLimiter::dashmap_with_clock(r.quota(), clock.clone())),
            bucket,
            takes: AtomicU64::new(0),
            clock: clock.clone(),
        }
    }

    /// Takes a token for `user`, or says how long until one is back.
    fn take(&self, user: &str) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if self.takes.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            limiter.retain_recent();
        }
        limiter
            .check_key(&user.to_owned())
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    fn check(&self, user: &str) -> Result<(), AppError> {
        self.take(user).map_err(|wait| {
            metrics::rate_limited(self.bucket);
            // Round up: a client that waits exactly Retry-After must find a token.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            AppError::with(ErrorCode::RateLimited, |p| {
                p.retry_after = Some(secs.max(1));
                p.detail = Some(format!(
                    "too many pay requests ({}) for this user; retry with the same key later",
                    self.bucket.label()
                ));
            })
        })
    }
}

/// The limiters' clock: monotonic in the server (a wall-clock step never empties a bucket),
/// or the state's clock (`src/clock.rs`) in tests, which move it instead of sleeping.
#[derive(Clone)]
pub(crate) enum LimiterClock {
    /// Time since the process's limiters were made.
    Monotonic(std::time::Instant),
    /// The state's clock.
    Rules(std::sync::Arc<dyn crate::clock::Clock>),
}

impl Clock for LimiterClock {
    type Instant = governor::nanos::Nanos;

    fn now(&self) -> Self::Instant {
        match self {
            Self::Monotonic(start) => start.elapsed().into(),
            Self::Rules(c) => Duration::from_millis(u64::try_from(c.now_ms()).unwrap_or(0)).into(),
        }
    }
}

/// The pay limits of one process.
pub(crate) struct Limits<C: Clock + Clone = LimiterClock> {
    requests: Buckets<C>,
    new_attempts: Buckets<C>,
}

impl Limits {
    pub(crate) fn new(requests: Option<Rate>, new_attempts: Option<Rate>) -> Self {
        let clock = LimiterClock::Monotonic(std::time::Instant::now());
        Self::with_clock(requests, new_attempts, &clock)
    }
}

impl<C: Clock + Clone> Limits<C> {
    pub(crate) fn with_clock(
        requests: Option<Rate>,
        new_attempts: Option<Rate>,
        clock: &C,
    ) -> Self {
        Self {
            requests: Buckets::new(Bucket::Requests, requests, clock),
            new_attempts: Buckets::new(Bucket::NewAttempts, new_attempts, clock),
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
    use governor::clock::FakeRelativeClock;

    fn bucket(burst: u32, per_min: u32, clock: &FakeRelativeClock) -> Buckets<FakeRelativeClock> {
        Buckets::new(Bucket::Requests, Rate::new(burst, per_min), clock)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let clock = FakeRelativeClock::default();
        let b = bucket(3, 60, &clock); // 1 token per second
        for _ in 0..3 {
            assert!(b.take("alice").is_ok());
        }
        let wait = b.take("alice").expect_err("burst spent");
        assert!(
            wait <= Duration::from_secs(1) && wait > Duration::from_millis(900),
            "{wait:?}"
        );
        // Another user has their own bucket.
        assert!(b.take("bob").is_ok());
        // One second later exactly one more token is back.
        clock.advance(Duration::from_secs(1));
        assert!(b.take("alice").is_ok());
        assert!(b.take("alice").is_err());
        // A long pause refills only up to the burst.
        clock.advance(Duration::from_secs(3600));
        for _ in 0..3 {
            assert!(b.take("alice").is_ok());
        }
        assert!(b.take("alice").is_err());
    }

    #[test]
    fn a_zero_rate_disables_the_bucket() {
        let clock = FakeRelativeClock::default();
        let b = bucket(10, 0, &clock);
        for _ in 0..1000 {
            assert!(b.take("alice").is_ok());
        }
    }

    #[test]
    fn a_refusal_is_429_with_retry_after_rounded_up() {
        let clock = FakeRelativeClock::default();
        let limits = Limits::with_clock(Rate::new(1, 1), None, &clock);
        assert!(limits.request("alice").is_ok());
        let p = limits.request("alice").expect_err("limited").to_problem();
        assert_eq!(p.status, 429);
        assert_eq!(p.code, ErrorCode::RateLimited);
        assert_eq!(p.retry_after, Some(60), "one token a minute");
        clock.advance(Duration::from_millis(59_500));
        let p = limits
            .request("alice")
            .expect_err("still limited")
            .to_problem();
        assert_eq!(p.retry_after, Some(1), "half a second left rounds up to 1");
        clock.advance(Duration::from_millis(500));
        assert!(
            limits.request("alice").is_ok(),
            "a client that waited Retry-After gets a token"
        );
    }

    #[test]
    fn replays_spend_only_the_requests_bucket() {
        let clock = FakeRelativeClock::default();
        let limits = Limits::with_clock(Rate::new(100, 60), Rate::new(1, 1), &clock);
        assert!(limits.new_attempt("alice").is_ok());
        for _ in 0..50 {
            assert!(limits.request("alice").is_ok(), "50 replays of one key");
        }
        assert!(
            limits.new_attempt("alice").is_err(),
            "a second new key within the minute"
        );
    }
}
