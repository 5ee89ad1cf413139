//! The per-user rate limits: in-process keyed limiters (GCRA, a token bucket without a
//! timer, as `governor` computes it, whose [`Quota`] the flags build), one per [`Bucket`]
//! (`payonce_rules::policy` says which request spends which; pay has two, because a
//! duplicate is not a new payment). A refusal is 429 `RATE_LIMITED` with `Retry-After`
//! (whole seconds until a token is back).
//!
//! The bucket is this file's own rather than governor's limiter so that a caller may ask
//! whether a token is there without taking it ([`Limits::ready`]): a new key's claim then
//! commits in one statement and takes its token after (`store/pay.rs`), instead of holding a
//! transaction open for the take.
//!
//! The buckets live in each process: with N instances a user gets up to N times the rate.
//! That is a deliberate simplification: the limit protects the provider and the store from
//! one client's loop, and a shared limiter would put Redis on the path of every request.
//! Time comes from the limiter's clock: monotonic in the server, a manual one in tests.

use crate::error::AppError;
use crate::metrics;
use governor::clock::{Clock, Reference as _};
use governor::nanos::Nanos;
use governor::Quota;
use payonce_rules::policy::{retry_after_secs, Bucket};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Forget users whose bucket is full again every this many takes (bounded memory).
const SWEEP_EVERY: u64 = 4096;

/// `per_min` tokens a minute with bursts of `burst`; `None` (no limit) when either is 0.
pub(crate) fn quota(burst: u32, per_min: u32) -> Option<Quota> {
    Some(Quota::per_minute(NonZeroU32::new(per_min)?).allow_burst(NonZeroU32::new(burst)?))
}

/// One bucket per user: the theoretical arrival time of each user's next token, in
/// nanoseconds since the limiter was made (governor's `Gcra`: `t` per token, `tau` the
/// burst's slack). A user absent is a full bucket.
struct Keyed {
    t: u64,
    tau: u64,
    tats: Mutex<HashMap<String, u64>>,
}

impl Keyed {
    fn new(q: Quota) -> Self {
        let t = u64::try_from(q.replenish_interval().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let tau = t.saturating_mul(u64::from(q.burst_size().get() - 1));
        Self {
            t,
            tau,
            tats: Mutex::new(HashMap::new()),
        }
    }

    /// How long until `user` has a token at `now` (zero: one is there); takes it when one
    /// is there and `take`, or always when `force` (a token owed: the bucket may go below
    /// empty, and the next ones wait for it).
    fn measure(&self, user: &str, now: u64, take: bool, force: bool) -> Duration {
        let mut tats = self.tats.lock().unwrap_or_else(|e| e.into_inner());
        let tat = tats.get(user).copied().unwrap_or(now);
        let earliest = tat.saturating_sub(self.tau);
        let wait = Duration::from_nanos(earliest.saturating_sub(now));
        if (take && wait.is_zero()) || force {
            tats.insert(user.to_owned(), tat.max(now).saturating_add(self.t));
        }
        wait
    }

    /// Forgets the users whose bucket is full again at `now`.
    fn sweep(&self, now: u64) {
        let mut tats = self.tats.lock().unwrap_or_else(|e| e.into_inner());
        tats.retain(|_, tat| *tat > now);
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
    buckets: Vec<(Bucket, Keyed)>,
    takes: AtomicU64,
    /// Users out of coupon-miss tokens, and until when (bounded memory).
    coupon_blocked: moka::sync::Cache<String, Nanos>,
    clock: C,
    /// The clock's reading when the limiters were made: bucket times count from it.
    start: Nanos,
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
            .filter_map(|(b, q)| Some((*b, Keyed::new((*q)?))));
        Self {
            buckets: buckets.collect(),
            takes: AtomicU64::new(0),
            coupon_blocked: moka::sync::Cache::new(100_000),
            start: clock.now(),
            clock: clock.clone(),
        }
    }

    /// `bucket`'s limiter and the time in it, or `None` when the bucket has no limit.
    fn bucket(&self, bucket: Bucket) -> Option<(&Keyed, u64)> {
        let (_, limiter) = self.buckets.iter().find(|(b, _)| *b == bucket)?;
        let now = self.clock.now().duration_since(self.start);
        Some((limiter, u64::from(now)))
    }

    /// Takes a token of `bucket` for `user`, or says how long until one is back.
    fn take(&self, bucket: Bucket, user: &str) -> Result<(), Duration> {
        let Some((limiter, now)) = self.bucket(bucket) else {
            return Ok(());
        };
        if self.takes.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            limiter.sweep(now);
        }
        let wait = limiter.measure(user, now, true, false);
        if wait.is_zero() {
            Ok(())
        } else {
            Err(wait)
        }
    }

    /// Takes a token of `bucket` for `user`, or refuses with 429.
    pub(crate) fn check(&self, bucket: Bucket, user: &str) -> Result<(), AppError> {
        self.take(bucket, user)
            .map_err(|wait| limited(bucket, wait))
    }

    /// True when `user` has a token of `bucket` now; none is taken.
    pub(crate) fn ready(&self, bucket: Bucket, user: &str) -> bool {
        self.bucket(bucket)
            .is_none_or(|(limiter, now)| limiter.measure(user, now, false, false).is_zero())
    }

    /// Takes a token of `bucket` for `user` that [`Limits::ready`] found, even if a
    /// concurrent take spent it meanwhile (the bucket then owes it: the next token comes
    /// later by as much).
    pub(crate) fn spend(&self, bucket: Bucket, user: &str) {
        if let Some((limiter, now)) = self.bucket(bucket) {
            limiter.measure(user, now, false, true);
        }
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
    fn ready_takes_nothing_and_a_spent_token_is_owed() {
        let clock = FakeRelativeClock::default();
        let l = limits(&[(Bucket::NewAttempts, 2, 60)], &clock);
        let b = Bucket::NewAttempts;
        for _ in 0..10 {
            assert!(l.ready(b, "alice"), "asking spends nothing");
        }
        l.spend(b, "alice");
        assert!(l.take(b, "alice").is_ok(), "the second of the burst");
        assert!(!l.ready(b, "alice"));
        // A token spent when none was left is owed: the next one is a second later.
        l.spend(b, "alice");
        clock.advance(Duration::from_secs(1));
        assert!(!l.ready(b, "alice"), "the owed token came back first");
        clock.advance(Duration::from_secs(1));
        assert!(l.ready(b, "alice"));
        assert!(
            l.ready(Bucket::Orders, "alice"),
            "no orders bucket: no limit"
        );
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
