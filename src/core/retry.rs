//! How long to wait before sending the same key again, and when to stop asking.
//!
//! The anchors and where this goes further:
//! - Stripe's clients wait `0.5 s · 2^n` capped at 5 s, jittered to ×0.5–1. We use the same
//!   envelope with **full jitter** (AWS: `random(0, min(cap, base · 2^n))`), which spreads a
//!   crowd of clients best after an outage.
//! - AWS SDKs share a **retry budget** (a token bucket of 500; a retry costs 5, a timeout 10,
//!   a success refills). Ours is per client and the same shape, so a dying server is not
//!   hammered by every tab. Polling an attempt the server reports as in progress costs nothing:
//!   the server paces it with `Retry-After`.
//! - ky honours `Retry-After` up to a cap and aborts waits at once. We honour it up to
//!   [`RetryPolicy::max_retry_after_ms`], never past the total deadline, and the web layer makes
//!   every wait abortable.
//!
//! Randomness is injected ([`Jitter`]), so tests and a native retry-storm simulation drive it
//! deterministically.

use crate::core::classify::{RetryCause, Verdict};
use serde::Deserialize;

/// A source of uniform randomness in `[0, 1)`.
pub trait Jitter {
    /// The next value in `[0, 1)`. Values outside are clamped.
    fn next_unit(&mut self) -> f64;
}

impl<F: FnMut() -> f64> Jitter for F {
    fn next_unit(&mut self) -> f64 {
        self()
    }
}

/// Backoff and retry limits. Public so a native simulation can reuse the exact policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Backoff base: the first wait is drawn from `[0, base]`.
    pub base_delay_ms: u64,
    /// Cap of the computed (jittered, exponential) wait.
    pub max_delay_ms: u64,
    /// How many failed sends (no answer, timeout, 5xx) a pay call tolerates before it returns
    /// `pending`. Polls of an in-progress attempt do not count: the deadline bounds them.
    pub max_attempts: u32,
    /// Cap of a server-requested `Retry-After`.
    pub max_retry_after_ms: u64,
    /// The retry budget.
    pub budget: BudgetConfig,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base_delay_ms: 500,
            max_delay_ms: 5_000,
            max_attempts: 8,
            max_retry_after_ms: 10_000,
            budget: BudgetConfig::default(),
        }
    }
}

impl RetryPolicy {
    /// The full-jitter wait before retry number `n` (0-based): uniform in
    /// `[0, min(max_delay, base · 2^n)]`, saturating instead of overflowing.
    pub fn backoff_ms(&self, n: u32, jitter: &mut impl Jitter) -> u64 {
        let exp = self
            .base_delay_ms
            .saturating_mul(1u64.checked_shl(n.min(63)).unwrap_or(u64::MAX));
        let ceiling = exp.min(self.max_delay_ms);
        let u = jitter.next_unit();
        let u = if u.is_finite() {
            u.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // `as` saturates; u < 1 keeps the result ≤ ceiling.
        ((ceiling as f64) * u) as u64
    }

    /// The wait before the next send: the server's `Retry-After` (capped) when it gave one,
    /// otherwise the jittered backoff.
    pub fn delay_ms(&self, n: u32, retry_after_ms: Option<u64>, jitter: &mut impl Jitter) -> u64 {
        match retry_after_ms {
            Some(ra) => ra.min(self.max_retry_after_ms),
            None => self.backoff_ms(n, jitter),
        }
    }
}

/// The retry budget's shape (AWS "standard" retry mode numbers by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Tokens when full.
    pub capacity: u32,
    /// Cost of retrying after no answer or a 5xx.
    pub retry_cost: u32,
    /// Cost of retrying after our own timeout fired.
    pub timeout_cost: u32,
    /// Tokens returned by a request that got a final answer.
    pub success_refill: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
            success_refill: 1,
        }
    }
}

/// A token bucket shared by every pay call of one client: retries withdraw, final answers
/// refill. When it runs dry, calls stop retrying and report `pending` instead of joining a
/// retry storm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryBudget {
    config: BudgetConfig,
    tokens: u32,
}

impl RetryBudget {
    /// A full bucket.
    pub fn new(config: BudgetConfig) -> Self {
        Self {
            config,
            tokens: config.capacity,
        }
    }

    /// Tokens left.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The cost of retrying after `cause`.
    pub fn cost(&self, cause: RetryCause) -> u32 {
        match cause {
            RetryCause::InProgress => 0,
            RetryCause::TimedOut => self.config.timeout_cost,
            RetryCause::NoAnswer | RetryCause::ServerTrouble => self.config.retry_cost,
        }
    }

    /// Takes the cost of a retry; false (and nothing taken) if the bucket cannot pay it.
    pub fn try_withdraw(&mut self, cause: RetryCause) -> bool {
        let cost = self.cost(cause);
        match self.tokens.checked_sub(cost) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }

    /// A request got a definite answer: refill a little, up to capacity.
    pub fn refill(&mut self) {
        self.tokens = self
            .tokens
            .saturating_add(self.config.success_refill)
            .min(self.config.capacity);
    }
}

/// Why a pay call stopped asking while the outcome was still open. The key is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PendingReason {
    /// The total deadline ran out (or the next wait would pass it).
    Deadline,
    /// `max_attempts` failed sends.
    Attempts,
    /// The client's retry budget is empty.
    Budget,
}

/// The next thing a pay call does after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait this long, then send the same key again.
    Wait {
        /// Milliseconds.
        ms: u64,
    },
    /// Stop: return `pending`, keep the key.
    GiveUp(PendingReason),
}

/// The retry state of one pay call: counts, deadline, and the "taking longer" latch.
#[derive(Debug, Clone)]
pub struct Schedule {
    policy: RetryPolicy,
    started_ms: f64,
    deadline_ms: u64,
    long_wait_ms: u64,
    waits: u32,
    failures: u32,
    told_longer: bool,
}

impl Schedule {
    /// A schedule starting at `now_ms`.
    pub fn new(policy: RetryPolicy, now_ms: f64, deadline_ms: u64, long_wait_ms: u64) -> Self {
        Self {
            policy,
            started_ms: now_ms,
            deadline_ms,
            long_wait_ms,
            waits: 0,
            failures: 0,
            told_longer: false,
        }
    }

    /// Milliseconds left before the deadline (0 once passed).
    pub fn remaining_ms(&self, now_ms: f64) -> u64 {
        let elapsed = (now_ms - self.started_ms).max(0.0) as u64;
        self.deadline_ms.saturating_sub(elapsed)
    }

    /// True exactly once, the first time this is asked after `long_wait_ms` passed.
    pub fn taking_longer(&mut self, now_ms: f64) -> bool {
        let due = (now_ms - self.started_ms).max(0.0) as u64 >= self.long_wait_ms;
        let fire = due && !self.told_longer;
        self.told_longer |= due;
        fire
    }

    /// Decides what follows a verdict that was not final. `Final` and `Rejected` verdicts end
    /// the call elsewhere; given one here, this gives up (defensive, never a panic).
    pub fn after(
        &mut self,
        verdict: &Verdict,
        now_ms: f64,
        budget: &mut RetryBudget,
        jitter: &mut impl Jitter,
    ) -> Next {
        let (cause, retry_after) = match verdict {
            Verdict::Retry {
                cause,
                retry_after_ms,
            } => (*cause, *retry_after_ms),
            _ => return Next::GiveUp(PendingReason::Attempts),
        };
        if cause != RetryCause::InProgress {
            self.failures += 1;
            if self.failures >= self.policy.max_attempts {
                return Next::GiveUp(PendingReason::Attempts);
            }
        }
        let ms = self.policy.delay_ms(self.waits, retry_after, jitter);
        // A wait that ends past the deadline is pointless: report pending now.
        if ms >= self.remaining_ms(now_ms) {
            return Next::GiveUp(PendingReason::Deadline);
        }
        if !budget.try_withdraw(cause) {
            return Next::GiveUp(PendingReason::Budget);
        }
        self.waits += 1;
        Next::Wait { ms }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fixed(u: f64) -> impl FnMut() -> f64 {
        move || u
    }
    const NO_ANSWER: Verdict = Verdict::Retry {
        cause: RetryCause::NoAnswer,
        retry_after_ms: None,
    };

    #[test]
    fn backoff_envelope_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        let near_one = 0.999_999;
        let tops: Vec<u64> = (0..6)
            .map(|n| p.backoff_ms(n, &mut fixed(near_one)))
            .collect();
        assert_eq!(tops, vec![499, 999, 1999, 3999, 4999, 4999]);
        assert_eq!(
            p.backoff_ms(3, &mut fixed(0.0)),
            0,
            "full jitter reaches zero"
        );
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_ms(0, Some(2_000), &mut fixed(0.0)), 2_000);
        assert_eq!(
            p.delay_ms(0, Some(3_600_000), &mut fixed(0.0)),
            p.max_retry_after_ms
        );
    }

    #[test]
    fn budget_stops_retries_and_successes_refill() {
        let mut b = RetryBudget::new(BudgetConfig {
            capacity: 12,
            retry_cost: 5,
            timeout_cost: 10,
            success_refill: 1,
        });
        assert!(b.try_withdraw(RetryCause::NoAnswer));
        assert!(b.try_withdraw(RetryCause::NoAnswer));
        assert!(
            !b.try_withdraw(RetryCause::NoAnswer),
            "2 tokens cannot pay 5"
        );
        assert_eq!(b.tokens(), 2);
        assert!(b.try_withdraw(RetryCause::InProgress), "polling is free");
        for _ in 0..100 {
            b.refill();
        }
        assert_eq!(b.tokens(), 12, "refill stops at capacity");
    }

    #[test]
    fn schedule_gives_up_after_max_attempts_but_polls_do_not_count() {
        let policy = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        let mut s = Schedule::new(policy, 0.0, 600_000, 15_000);
        let mut b = RetryBudget::new(BudgetConfig::default());
        let poll = Verdict::Retry {
            cause: RetryCause::InProgress,
            retry_after_ms: Some(1_000),
        };
        for _ in 0..20 {
            assert_eq!(
                s.after(&poll, 0.0, &mut b, &mut fixed(0.5)),
                Next::Wait { ms: 1_000 }
            );
        }
        assert!(matches!(
            s.after(&NO_ANSWER, 0.0, &mut b, &mut fixed(0.5)),
            Next::Wait { .. }
        ));
        assert!(matches!(
            s.after(&NO_ANSWER, 0.0, &mut b, &mut fixed(0.5)),
            Next::Wait { .. }
        ));
        assert_eq!(
            s.after(&NO_ANSWER, 0.0, &mut b, &mut fixed(0.5)),
            Next::GiveUp(PendingReason::Attempts)
        );
    }

    #[test]
    fn schedule_never_waits_past_the_deadline() {
        let mut s = Schedule::new(RetryPolicy::default(), 1_000.0, 10_000, 5_000);
        let mut b = RetryBudget::new(BudgetConfig::default());
        let poll = Verdict::Retry {
            cause: RetryCause::InProgress,
            retry_after_ms: Some(3_000),
        };
        assert_eq!(
            s.after(&poll, 1_000.0, &mut b, &mut fixed(0.0)),
            Next::Wait { ms: 3_000 }
        );
        assert_eq!(
            s.after(&poll, 9_000.0, &mut b, &mut fixed(0.0)),
            Next::GiveUp(PendingReason::Deadline)
        );
        assert!(!s.taking_longer(5_999.0));
        assert!(s.taking_longer(6_000.0));
        assert!(!s.taking_longer(7_000.0), "reported once");
    }

    #[test]
    fn empty_budget_returns_pending_not_a_retry() {
        let mut s = Schedule::new(RetryPolicy::default(), 0.0, 600_000, 15_000);
        let mut b = RetryBudget::new(BudgetConfig {
            capacity: 4,
            ..BudgetConfig::default()
        });
        assert_eq!(
            s.after(&NO_ANSWER, 0.0, &mut b, &mut fixed(0.5)),
            Next::GiveUp(PendingReason::Budget)
        );
    }

    proptest! {
        #[test]
        fn backoff_stays_within_zero_and_the_cap(
            base in 0u64..100_000, cap in 0u64..1_000_000, n in 0u32..200, u in proptest::num::f64::ANY,
        ) {
            let p = RetryPolicy { base_delay_ms: base, max_delay_ms: cap, ..RetryPolicy::default() };
            let d = p.backoff_ms(n, &mut fixed(u));
            prop_assert!(d <= cap);
            prop_assert!(d <= base.saturating_mul(1u64.checked_shl(n.min(63)).unwrap_or(u64::MAX)));
        }

        #[test]
        fn any_delay_is_bounded_and_honours_retry_after(
            n in 0u32..100, ra in proptest::option::of(0u64..10_000_000), u in 0.0f64..1.0,
        ) {
            let p = RetryPolicy::default();
            let d = p.delay_ms(n, ra, &mut fixed(u));
            prop_assert!(d <= p.max_delay_ms.max(p.max_retry_after_ms));
            if let Some(ra) = ra {
                prop_assert_eq!(d, ra.min(p.max_retry_after_ms));
            }
        }

        #[test]
        fn a_schedule_ends_and_never_overruns_the_deadline(
            causes in proptest::collection::vec(0u8..3, 1..300), seed in 0.0f64..1.0, step in 0u64..5_000,
        ) {
            let mut s = Schedule::new(RetryPolicy::default(), 0.0, 60_000, 15_000);
            let mut b = RetryBudget::new(BudgetConfig::default());
            let mut now = 0.0;
            for c in causes {
                let cause = [RetryCause::InProgress, RetryCause::NoAnswer, RetryCause::TimedOut][c as usize];
                let v = Verdict::Retry { cause, retry_after_ms: (cause == RetryCause::InProgress).then_some(1_000) };
                let next = s.after(&v, now, &mut b, &mut fixed(seed));
                if now >= 60_000.0 {
                    prop_assert!(matches!(next, Next::GiveUp(_)), "waited past the deadline");
                }
                match next {
                    Next::Wait { ms } => {
                        prop_assert!(now + (ms as f64) < 60_000.0, "a wait must end before the deadline");
                        now += (ms + step) as f64;
                    }
                    Next::GiveUp(_) => break,
                }
            }
        }
    }
}
