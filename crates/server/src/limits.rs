//! The per-user rate limits: in-process keyed limiters (`governor`'s GCRA, a token bucket
//! without a timer), one per [`Bucket`] (`payonce_rules::policy` says which request spends
//! which; pay has two, because a duplicate is not a new payment). A refusal is 429
//! `RATE_LIMITED` with `Retry-After` (whole seconds until a token is back).
//!
//! The buckets live in each process: with N instances a user gets up to N times the rate.
//! That is a deliberate simplification: the limit protects the provider and the store from
//! one client's loop, and a shared limiter would put Redis on the path of every request.
//! Time comes from the limiter's clock: monotonic in the server, a manual one in tests.

use crate::error::AppError;
use crate::metrics;
use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use payonce_rules::policy::{retry_after_secs, Bucket};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Forget users whose bucket is full again every this many takes (bounded memory).
const SWEEP_EVERY: u64 = 4096;

/// `per_min` tokens a minute with bursts of `burst`; `None` (no limit) when either is 0.
pub(crate) fn quota(burst: u32, per_min: u32) -> Option<Quota> {
    Some(Quota::per_minute(NonZeroU32::new(per_min)?).allow_burst(NonZeroU32::new(burst)?))
}

type Keyed<C> = RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<Nanos>>;

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
    type Instant = Nanos;

    fn now(&self) -> Self::Instant {
        match self {
            Self::Monotonic(start) => start.elapsed().into(),
            Self::Rules(c) => Duration::from_millis(u64::try_from(c.now_ms()).unwrap_or(0)).into(),
        }
    }
}

/// The limits of one process: a limiter per enabled bucket, keyed by user.
pub(crate) struct Limits<C: Clock<Instant = Nanos> + Clone = LimiterClock> {
    buckets: Vec<(Bucket, Keyed<C>)>,
    takes: AtomicU64,
    /// Users out of coupon-miss tokens, and until when (bounded memory).
    coupon_blocked: moka::sync::Cache<String, Nanos>,
    clock: C,
}

impl Limits {
    pub(crate) fn new(rates: &[(Bucket, Option<Quota>)]) -> Self {
        Self::with_clock(rates, &LimiterClock::Monotonic(std::time::Instant::now()))
    }
}

impl<C: Clock<Instant = Nanos> + Clone> Limits<C> {
    pub(crate) fn with_clock(rates: &[(Bucket, Option<Quota>)], clock: &C) -> Self {
        let buckets = rates
            .iter()
            .filter_map(|(b, q)| Some((*b, RateLimiter::dashmap_with_clock((*q)?, clock.clone()))));
        Self {
            buckets: buckets.collect(),
            takes: AtomicU64::new(0),
            coupon_blocked: moka::sync::Cache::new(100_000),
            clock: clock.clone(),
        }
    }

    /// Takes a token of `bucket` for `user`, or says how long until one is back.
    fn take(&self, bucket: Bucket, user: &str) -> Result<(), Duration> {
        let Some((_, limiter)) = self.buckets.iter().find(|(b, _)| *b == bucket) else {
            return Ok(());
        };
        if self.takes.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            limiter.retain_recent();
        }
        limiter
            .check_key(&user.to_owned())
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Takes a token of `bucket` for `user`, or refuses with 429.
    pub(crate) fn check(&self, bucket: Bucket, user: &str) -> Result<(), AppError> {
        self.take(bucket, user)
            .map_err(|wait| limited(bucket, wait))
    }

    /// After `user`'s coupon code was looked up (`known`: it is a coupon). A miss spends a
    /// token; while none is left every code is refused, a valid one too.
    pub(crate) fn coupon(&self, user: &str, known: bool) -> Result<(), AppError> {
        let now = self.clock.now();
        if let Some(until) = self.coupon_blocked.get(user).filter(|u| *u > now) {
            return Err(limited(
                Bucket::CouponMisses,
                until.duration_since(now).into(),
            ));
        }
        if known {
            return Ok(());
        }
        let Err(wait) = self.take(Bucket::CouponMisses, user) else {
            return Ok(());
        };
        self.coupon_blocked
            .insert(user.to_owned(), now + Nanos::from(wait));
        Err(limited(Bucket::CouponMisses, wait))
    }
}

/// The 429 (counted in `payonce_pay_rate_limited` for the pay buckets).
fn limited(bucket: Bucket, wait: Duration) -> AppError {
    if Bucket::ALL.contains(&bucket) {
        metrics::rate_limited(bucket);
    }
    AppError::rate_limited(bucket.label(), retry_after_secs(wait))
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use payonce_protocol::ErrorCode;

    fn limits(
        rates: &[(Bucket, u32, u32)],
        clock: &FakeRelativeClock,
    ) -> Limits<FakeRelativeClock> {
        let rates: Vec<_> = rates
            .iter()
            .map(|&(b, burst, per_min)| (b, quota(burst, per_min)))
            .collect();
        Limits::with_clock(&rates, clock)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let clock = FakeRelativeClock::default();
        let l = limits(&[(Bucket::Requests, 3, 60)], &clock); // 1 token per second
        let b = Bucket::Requests;
        for _ in 0..3 {
            assert!(l.take(b, "alice").is_ok());
        }
        let wait = l.take(b, "alice").expect_err("burst spent");
        assert!(
            wait <= Duration::from_secs(1) && wait > Duration::from_millis(900),
            "{wait:?}"
        );
        // Another user has their own bucket; another bucket is not this one.
        assert!(l.take(b, "bob").is_ok());
        assert!(
            l.take(Bucket::Orders, "alice").is_ok(),
            "no orders bucket: no limit"
        );
        // One second later exactly one more token is back.
        clock.advance(Duration::from_secs(1));
        assert!(l.take(b, "alice").is_ok());
        assert!(l.take(b, "alice").is_err());
        // A long pause refills only up to the burst.
        clock.advance(Duration::from_secs(3600));
        for _ in 0..3 {
            assert!(l.take(b, "alice").is_ok());
        }
        assert!(l.take(b, "alice").is_err());
    }

    #[test]
    fn a_zero_rate_disables_the_bucket() {
        let clock = FakeRelativeClock::default();
        let l = limits(&[(Bucket::Requests, 10, 0)], &clock);
        for _ in 0..1000 {
            assert!(l.take(Bucket::Requests, "alice").is_ok());
        }
    }

    #[test]
    fn a_refusal_is_429_with_retry_after_rounded_up() {
        let clock = FakeRelativeClock::default();
        let l = limits(&[(Bucket::Tombstones, 1, 1)], &clock);
        assert!(l.check(Bucket::Tombstones, "alice").is_ok());
        let p = l
            .check(Bucket::Tombstones, "alice")
            .expect_err("limited")
            .to_problem();
        assert_eq!(p.status, 429);
        assert_eq!(p.code, ErrorCode::RateLimited);
        assert_eq!(p.retry_after, Some(60), "one token a minute");
        clock.advance(Duration::from_millis(59_500));
        let p = l
            .check(Bucket::Tombstones, "alice")
            .expect_err("still limited")
            .to_problem();
        assert_eq!(p.retry_after, Some(1), "half a second left rounds up to 1");
        clock.advance(Duration::from_millis(500));
        assert!(
            l.check(Bucket::Tombstones, "alice").is_ok(),
            "a client that waited Retry-After gets a token"
        );
    }

    #[test]
    fn coupon_misses_block_every_code_until_a_token_is_back() {
        let clock = FakeRelativeClock::default();
        let l = limits(&[(Bucket::CouponMisses, 2, 6)], &clock); // a token per 10 s
        for _ in 0..100 {
            assert!(l.coupon("alice", true).is_ok(), "valid codes spend nothing");
        }
        assert!(l.coupon("alice", false).is_ok());
        assert!(l.coupon("alice", false).is_ok());
        let p = l
            .coupon("alice", false)
            .expect_err("third miss")
            .to_problem();
        assert_eq!(p.retry_after, Some(10));
        assert!(
            l.coupon("alice", true).is_err(),
            "a valid code is refused too"
        );
        assert!(l.coupon("bob", false).is_ok(), "per user");
        clock.advance(Duration::from_secs(10));
        assert!(l.coupon("alice", true).is_ok());
        assert!(l.coupon("alice", false).is_ok(), "the token that came back");
        assert!(l.coupon("alice", false).is_err());
    }
}
