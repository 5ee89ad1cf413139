//! How long to wait before sending the same key again, and when to stop asking.
//!
//! The anchors and where this goes further:
//! - Stripe's clients wait `0.5 s · 2^n` capped at 5 s, jittered to ×0.5–1. We use the same
//!   envelope with jitter over all of it **above a floor**: every wait is drawn from
//!   `[base, min(cap, base · 2^(n+1)))`. AWS's full jitter (`random(0, envelope)`) spreads a
//!   crowd best but may wait 0 ms; a floor of `base` keeps most of the spread and makes a hot
//!   loop impossible whatever the answers say.
//! - After our own request **timeout** the wait is drawn over the whole cap, `[base, 5 s)`,
//!   whatever `n` is: a timeout means the server may be down or drowning, and every client whose
//!   request hung on it times out at about the same moment; `[0.5 s, 1 s)` cannot spread them.
//! - AWS SDKs share a **retry budget** (a token bucket of 500; a retry costs 5, a timeout 10,
//!   a success refills). Ours is per client and the same shape, so a dying server is not
//!   hammered by every tab. Polling an attempt the server reports as in progress costs nothing.
//! - ky honours `Retry-After` up to a cap and aborts waits at once. We honour it up to
//!   [`RetryPolicy::max_retry_after_ms`], never below the base delay, never past the total
//!   deadline, and the web layer makes every wait abortable. We **jitter** it over `[ra, 2·ra]`
//!   (`ra` raised to the base delay first): clients the server shed in the same instant with the
//!   same `Retry-After` must not all come back in the same instant, and `Retry-After: 0` means
//!   "soon", not "now, forever".
//! - [`RetryPolicy::max_attempts`] counts **every request** of a pay call: the first, retries,
//!   polls of an attempt in progress and answers to `Retry-After`. A server that keeps answering
//!   202 or 429 ends the call as `pending` (reason `attempts`) after that many requests; the
//!   deadline and the budget bound it too. 429/503 with `Retry-After`
//!   ([`RetryCause::Paced`]) also cost [`BudgetConfig::retry_cost`] (as throttling errors do in
//!   AWS's standard mode): a server that keeps shedding a client drains that client's bucket,
//!   so across calls the client stops asking.
//!
//! The figures behind these choices: `docs/retry-storm.md` (`crates/sim`, driven by this very
//! module). Randomness is injected ([`Jitter`]), so tests and the simulation drive it
//! deterministically.

use crate::core::classify::{RetryCause, Verdict};
use serde::Serialize;

/// Default per-request timeout of the web layer (`requestTimeoutMs`). Here, in the core, so
/// the native retry-storm simulation uses the very numbers the SDK ships with.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u32 = 15_000;
/// Default total time one `pay` keeps asking before it returns `pending` (`deadlineMs`).
pub const DEFAULT_DEADLINE_MS: u64 = 60_000;
/// Default time after which `onStatus` hears `takingLonger` (`longWaitMs`).
pub const DEFAULT_LONG_WAIT_MS: u64 = 10_000;

/// The least `requestTimeoutMs`: below about a second a request "times out" while the server
/// is still charging, and every retry of the same key is then only another poll of it.
pub const MIN_REQUEST_TIMEOUT_MS: u64 = 1_000;
/// The least `retry.baseDelayMs`: the floor of every wait between two requests with the same
/// key. A few milliseconds would put several same-key requests on a backend within one of its
/// own round trips, which only a backend with an atomic claim survives.
pub const MIN_BASE_DELAY_MS: u64 = 100;

/// A client's timing options, defaults filled in, as `create` read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// `requestTimeoutMs`.
    pub request_timeout_ms: u64,
    /// `deadlineMs`.
    pub deadline_ms: u64,
    /// `retry.*`.
    pub policy: RetryPolicy,
}

impl Timings {
    /// The bounds, one rule in one place: every timing option with the least value it may
    /// take, and the option that value comes from when it is another option's.
    /// (`retry.maxRetryAfterMs` has none: a wait is never shorter than `baseDelayMs` anyway.)
    fn bounds(&self) -> [(&'static str, u64, Option<&'static str>, u64); 4] {
        let p = &self.policy;
        [
            (
                "requestTimeoutMs",
                self.request_timeout_ms,
                None,
                MIN_REQUEST_TIMEOUT_MS,
            ),
            (
                "retry.baseDelayMs",
                p.base_delay_ms,
                None,
                MIN_BASE_DELAY_MS,
            ),
            (
                "retry.maxDelayMs",
                p.max_delay_ms,
                Some("retry.baseDelayMs"),
                p.base_delay_ms,
            ),
            (
                "deadlineMs",
                self.deadline_ms,
                Some("requestTimeoutMs"),
                self.request_timeout_ms,
            ),
        ]
    }

    /// `Err` names the first option below its bound, its value and the bound, e.g.
    /// `retry.maxDelayMs must be at least retry.baseDelayMs (500), got 200`.
    pub fn check(&self) -> Result<(), String> {
        use crate::core::error::decimal;
        for (name, value, from, least) in self.bounds() {
            if value < least {
                let bound = match from {
                    Some(other) => [other, " (", &decimal(least), ")"].concat(),
                    None => decimal(least),
                };
                return Err([
                    name,
                    " must be at least ",
                    &bound,
                    ", got ",
                    &decimal(value),
                ]
                .concat());
            }
        }
        Ok(())
    }
}

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

/// `ceiling · u` for the next `u` in `[0, 1]` (non-finite draws count as 0).
fn scaled(ceiling: u64, jitter: &mut impl Jitter) -> u64 {
    let u = jitter.next_unit();
    let u = if u.is_finite() {
        u.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // `as` saturates; u < 1 keeps the result < ceiling (u = 1 gives the ceiling itself).
    ((ceiling as f64) * u) as u64
}

/// Backoff and retry limits. Public so a native simulation can reuse the exact policy.
/// JavaScript sets it as `ClientOptions.retry` (members in camelCase, each optional).
///
/// Every wait is at least [`RetryPolicy::base_delay_ms`] and jittered, whatever the server
/// says: a `Retry-After: 0` (a broken proxy, a misconfigured server) can never turn a pay call
/// into back-to-back requests, and clients shed in the same instant never come back in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The least wait before any retry (default 500 ms). Backoff draws from
    /// `[base, min(max_delay, base · 2^(n+1)))` before retry `n`; a `Retry-After` below it is
    /// raised to it.
    pub base_delay_ms: u64,
    /// Cap of the computed (jittered, exponential) wait (default 5 s); after our own timeout
    /// the wait is drawn from `[base, max_delay)`.
    pub max_delay_ms: u64,
    /// How many requests one pay call sends at most, every one counted: the first, retries
    /// after no answer or a 5xx, polls of an attempt in progress, and answers to a server's
    /// `Retry-After` (default 8). Then the call returns `pending` (reason `attempts`).
    pub max_attempts: u32,
    /// Cap of a server-requested `Retry-After`, jitter included (default 10 s). Never lowers
    /// a wait below `base_delay_ms`.
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
    /// The wait before retry number `n` (0-based): uniform in
    /// `[base, max(base, min(max_delay, base · 2^(n+1))))`, saturating instead of overflowing.
    pub fn backoff_ms(&self, n: u32, jitter: &mut impl Jitter) -> u64 {
        let exp = self.base_delay_ms.saturating_mul(
            1u64.checked_shl(n.saturating_add(1).min(63))
                .unwrap_or(u64::MAX),
        );
        self.above_base(exp.min(self.max_delay_ms), jitter)
    }

    /// The wait after our own request timeout: uniform over `[base, max_delay)`.
    pub fn after_timeout_ms(&self, jitter: &mut impl Jitter) -> u64 {
        self.above_base(self.max_delay_ms, jitter)
    }

    /// `base` plus jitter up to `top` (nothing above `base` when `top <= base`).
    fn above_base(&self, top: u64, jitter: &mut impl Jitter) -> u64 {
        let base = self.base_delay_ms;
        base + scaled(top.saturating_sub(base), jitter)
    }

    /// The wait for a server's `Retry-After: ra`: `lo = max(base, min(ra, cap))`, uniform in
    /// `[lo, min(2·lo, max(cap, lo))]` where `cap` is `max_retry_after_ms`. So never sooner
    /// than the server asked (up to the cap) nor than the base delay, and jittered even for
    /// `Retry-After: 0`.
    pub fn retry_after_wait_ms(&self, ra: u64, jitter: &mut impl Jitter) -> u64 {
        let lo = self.retry_after_floor_ms(ra);
        let top = lo.saturating_mul(2).min(self.max_retry_after_ms.max(lo));
        lo + scaled(top - lo, jitter)
    }

    fn retry_after_floor_ms(&self, ra: u64) -> u64 {
        ra.min(self.max_retry_after_ms).max(self.base_delay_ms)
    }

    /// The wait before the next send after `cause`, and the least of it that must fit before
    /// the deadline: `(floor, wait)`. A server's `Retry-After` (floored, jittered, capped) when
    /// it gave one; after our timeout, `[base, cap)`; otherwise the jittered backoff. The
    /// floor is the server's number (or the base delay, if larger) for `Retry-After`, the base
    /// delay otherwise: the jitter above it may be cut at the deadline, the floor may not.
    pub fn delay_ms(
        &self,
        n: u32,
        cause: RetryCause,
        retry_after_ms: Option<u64>,
        jitter: &mut impl Jitter,
    ) -> (u64, u64) {
        match (retry_after_ms, cause) {
            (Some(ra), _) => (
                self.retry_after_floor_ms(ra),
                self.retry_after_wait_ms(ra, jitter),
            ),
            (None, RetryCause::TimedOut) => (self.base_delay_ms, self.after_timeout_ms(jitter)),
            (None, _) => (self.base_delay_ms, self.backoff_ms(n, jitter)),
        }
    }
}

/// The retry budget's shape (AWS "standard" retry mode numbers by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Tokens when full.
    pub capacity: u32,
    /// Cost of retrying after no answer, a 408/429/5xx, or a 429/503 with `Retry-After`.
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
            // Pacing is not a failure (no attempt counted) but it is a request the server had to
            // refuse: it costs like one, so a client the server keeps shedding runs dry.
            RetryCause::NoAnswer | RetryCause::ServerTrouble | RetryCause::Paced => {
                self.config.retry_cost
            }
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

/// Why a pay call stopped asking while the outcome was still open. The key is kept. Serialized
/// as the `reason` of a `pending` outcome in JavaScript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PendingReason {
    /// The total deadline ran out (or the next wait would pass it).
    Deadline,
    /// `max_attempts` failed sends.
    Attempts,
    /// The client's retry budget is empty.
    Budget,
}

impl PendingReason {
    /// The `reason` of a `pending` outcome (the serde derive's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Attempts => "attempts",
            Self::Budget => "budget",
        }
    }
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
    sends: u32,
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
            sends: 0,
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

    /// Decides what follows a verdict that was not final: counts the send it answers (every
    /// send counts towards `max_attempts`), draws the wait, keeps it inside the deadline,
    /// charges the budget.
    /// `Final` and `Rejected` verdicts end the call elsewhere; given one here, this gives up
    /// (defensive, never a panic).
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
        // Every answer that reaches here is one more request sent: the first, a retry, a poll
        // or an answer to `Retry-After` alike.
        self.sends += 1;
        if self.sends >= self.policy.max_attempts {
            return Next::GiveUp(PendingReason::Attempts);
        }
        let (floor, ms) = self.policy.delay_ms(self.waits, cause, retry_after, jitter);
        // A wait whose floor ends past the deadline is pointless: report pending now. Jitter
        // above the floor is ours, so it is cut at the deadline rather than ending the call.
        let remaining = self.remaining_ms(now_ms);
        if floor >= remaining {
            return Next::GiveUp(PendingReason::Deadline);
        }
        let ms = ms.min(remaining - 1);
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
    const TIMED_OUT: Verdict = Verdict::Retry {
        cause: RetryCause::TimedOut,
        retry_after_ms: None,
    };
    fn paced(ms: u64) -> Verdict {
        Verdict::Retry {
            cause: RetryCause::Paced,
            retry_after_ms: Some(ms),
        }
    }
    fn poll(ms: u64) -> Verdict {
        Verdict::Retry {
            cause: RetryCause::InProgress,
            retry_after_ms: Some(ms),
        }
    }
    const CAUSES: [RetryCause; 5] = [
        RetryCause::InProgress,
        RetryCause::NoAnswer,
        RetryCause::TimedOut,
        RetryCause::ServerTrouble,
        RetryCause::Paced,
    ];

    #[test]
    fn backoff_envelope_doubles_up_to_the_cap_above_the_base() {
        let p = RetryPolicy::default();
        let near_one = 0.999_999;
        let tops: Vec<u64> = (0..6)
            .map(|n| p.backoff_ms(n, &mut fixed(near_one)))
            .collect();
        assert_eq!(tops, vec![999, 1999, 3999, 4999, 4999, 4999]);
        assert_eq!(
            p.backoff_ms(3, &mut fixed(0.0)),
            500,
            "the jitter never goes below the base delay"
        );
    }

    #[test]
    fn retry_after_is_honoured_jittered_up_to_twice_and_capped() {
        let p = RetryPolicy::default();
        let wait = |ra, u| p.delay_ms(0, RetryCause::Paced, Some(ra), &mut fixed(u));
        assert_eq!(wait(2_000, 0.0), (2_000, 2_000), "never sooner than asked");
        assert_eq!(wait(2_000, 0.5), (2_000, 3_000));
        assert_eq!(wait(2_000, 0.999_999), (2_000, 3_999));
        assert_eq!(wait(7_000, 1.0), (7_000, 10_000), "jitter stops at the cap");
        assert_eq!(
            wait(3_600_000, 0.5),
            (p.max_retry_after_ms, p.max_retry_after_ms),
            "an absurd Retry-After is capped"
        );
        // `Retry-After: 0` is raised to the base delay and still jittered: no hot loop.
        assert_eq!(wait(0, 0.0), (500, 500));
        assert_eq!(wait(0, 0.5), (500, 750));
        assert_eq!(wait(100, 0.999_999), (500, 999));
        // A cap below the base delay never lowers a wait under it.
        let low_cap = RetryPolicy {
            max_retry_after_ms: 100,
            ..p
        };
        assert_eq!(
            low_cap.delay_ms(0, RetryCause::InProgress, Some(0), &mut fixed(0.9)),
            (500, 500)
        );
    }

    #[test]
    fn a_timeout_spreads_the_first_wait_over_the_whole_cap() {
        let p = RetryPolicy::default();
        let near_one = 0.999_999;
        // No answer: the usual envelope starts at [0.5 s, 1 s).
        assert_eq!(
            p.delay_ms(0, RetryCause::NoAnswer, None, &mut fixed(near_one)),
            (500, 999)
        );
        // Our own timeout: the first wait already spans [0.5 s, 5 s).
        assert_eq!(
            p.delay_ms(0, RetryCause::TimedOut, None, &mut fixed(near_one)),
            (500, 4_999)
        );
        assert_eq!(
            p.delay_ms(0, RetryCause::TimedOut, None, &mut fixed(0.0)),
            (500, 500)
        );
        // Through a schedule: the first wait after a timeout may be anywhere in the window.
        let mut s = Schedule::new(p, 0.0, DEFAULT_DEADLINE_MS, DEFAULT_LONG_WAIT_MS);
        let mut b = RetryBudget::new(BudgetConfig::default());
        assert_eq!(
            s.after(&TIMED_OUT, 15_000.0, &mut b, &mut fixed(0.6)),
            Next::Wait { ms: 3_200 }
        );
        assert_eq!(b.tokens(), 490, "a timeout costs the timeout price");
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
        assert!(b.try_withdraw(RetryCause::Paced), "pacing costs a retry");
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
    fn schedule_gives_up_after_max_attempts_counting_polls_and_pacing() {
        let policy = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        let mut s = Schedule::new(policy, 0.0, 600_000, 15_000);
        let mut b = RetryBudget::new(BudgetConfig::default());
        assert_eq!(
            s.after(&poll(1_000), 0.0, &mut b, &mut fixed(0.5)),
            Next::Wait { ms: 1_500 }
        );
        assert_eq!(
            s.after(&paced(1_000), 0.0, &mut b, &mut fixed(0.0)),
            Next::Wait { ms: 1_000 }
        );
        assert_eq!(b.tokens(), 500 - 5, "polls are free, pacing is not");
        assert_eq!(
            s.after(&poll(0), 0.0, &mut b, &mut fixed(0.5)),
            Next::GiveUp(PendingReason::Attempts),
            "the third request was the last"
        );
    }

    #[test]
    fn schedule_never_waits_past_the_deadline() {
        let mut s = Schedule::new(RetryPolicy::default(), 1_000.0, 10_000, 5_000);
        let mut b = RetryBudget::new(BudgetConfig::default());
        assert_eq!(
            s.after(&poll(3_000), 1_000.0, &mut b, &mut fixed(0.0)),
            Next::Wait { ms: 3_000 }
        );
        // 2 s left: Retry-After 1.5 s fits, its jitter up to 3 s is cut just before the end.
        assert_eq!(
            s.after(&paced(1_500), 9_000.0, &mut b, &mut fixed(0.9)),
            Next::Wait { ms: 1_999 }
        );
        // 1 s left: Retry-After 3 s does not fit at all.
        assert_eq!(
            s.after(&poll(3_000), 10_000.0, &mut b, &mut fixed(0.0)),
            Next::GiveUp(PendingReason::Deadline)
        );
        assert!(!s.taking_longer(5_999.0));
        assert!(s.taking_longer(6_000.0));
        assert!(!s.taking_longer(7_000.0), "reported once");
    }

    #[test]
    fn paced_answers_end_at_max_attempts_or_at_the_deadline() {
        let run = |policy: RetryPolicy| {
            let mut s = Schedule::new(policy, 0.0, DEFAULT_DEADLINE_MS, 10_000);
            let mut b = RetryBudget::new(BudgetConfig::default());
            let (mut now, mut sends) = (0.0, 1);
            loop {
                match s.after(&paced(1_000), now, &mut b, &mut fixed(0.5)) {
                    Next::Wait { ms } => {
                        now += ms as f64;
                        sends += 1;
                    }
                    Next::GiveUp(r) => break (r, sends, now),
                }
            }
        };
        let (end, sends, _) = run(RetryPolicy::default());
        assert_eq!((end, sends), (PendingReason::Attempts, 8));
        let (end, sends, now) = run(RetryPolicy {
            max_attempts: 1_000,
            ..RetryPolicy::default()
        });
        assert_eq!(end, PendingReason::Deadline, "{sends} sends");
        assert!(
            now < DEFAULT_DEADLINE_MS as f64,
            "the last wait ended in time"
        );
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
        assert_eq!(
            s.after(&paced(1_000), 0.0, &mut b, &mut fixed(0.5)),
            Next::GiveUp(PendingReason::Budget),
            "a shed client with an empty bucket stops asking"
        );
    }

    proptest! {
        #[test]
        fn backoff_stays_within_the_base_and_the_cap(
            base in 0u64..100_000, cap in 0u64..1_000_000, n in 0u32..200, u in proptest::num::f64::ANY,
        ) {
            let p = RetryPolicy { base_delay_ms: base, max_delay_ms: cap, ..RetryPolicy::default() };
            let d = p.backoff_ms(n, &mut fixed(u));
            prop_assert!(d >= base);
            prop_assert!(d <= cap.max(base));
            let envelope = base.saturating_mul(1u64.checked_shl(n.saturating_add(1).min(63)).unwrap_or(u64::MAX));
            prop_assert!(d <= envelope.max(base));
        }

        #[test]
        fn retry_after_waits_stay_within_ra_and_twice_ra_under_the_cap_above_the_base(
            ra in 0u64..10_000_000, cap in 0u64..1_000_000, base in 0u64..5_000, n in 0u32..100,
            c in 0usize..5, u in proptest::num::f64::ANY,
        ) {
            let p = RetryPolicy { max_retry_after_ms: cap, base_delay_ms: base, ..RetryPolicy::default() };
            let (floor, d) = p.delay_ms(n, CAUSES[c], Some(ra), &mut fixed(u));
            let lo = ra.min(cap).max(base);
            prop_assert_eq!(floor, lo);
            prop_assert!(d >= lo, "{} < {}", d, lo);
            prop_assert!(d <= (2 * lo).min(cap.max(lo)), "{} > {}", d, (2 * lo).min(cap.max(lo)));
        }

        #[test]
        fn the_wait_after_a_timeout_is_within_the_base_and_the_cap(
            n in 0u32..100, cap in 501u64..1_000_000, u in 0.0f64..1.0,
        ) {
            let p = RetryPolicy { max_delay_ms: cap, ..RetryPolicy::default() };
            let (floor, d) = p.delay_ms(n, RetryCause::TimedOut, None, &mut fixed(u));
            prop_assert_eq!(floor, 500);
            prop_assert!((500..cap).contains(&d));
            // and the draw uses the whole window, not just [base, 2 base)
            prop_assert_eq!(d, 500 + (((cap - 500) as f64) * u) as u64);
        }

        #[test]
        fn every_wait_is_at_least_the_base_delay_and_sends_stop_at_max_attempts(
            causes in proptest::collection::vec((0usize..5, proptest::option::of(0u64..3)), 1..100),
            us in proptest::collection::vec(proptest::num::f64::ANY, 100),
            base in 0u64..2_000, max_attempts in 1u32..20, step in 0u64..2_000,
        ) {
            let policy = RetryPolicy { base_delay_ms: base, max_attempts, ..RetryPolicy::default() };
            let mut s = Schedule::new(policy, 0.0, DEFAULT_DEADLINE_MS, 10_000);
            let mut b = RetryBudget::new(BudgetConfig::default());
            let (mut now, mut sends) = (0.0, 1u32);
            for ((c, ra_s), u) in causes.iter().zip(&us) {
                let v = Verdict::Retry { cause: CAUSES[*c], retry_after_ms: ra_s.map(|s| s * 1000) };
                match s.after(&v, now, &mut b, &mut fixed(*u)) {
                    Next::Wait { ms } => {
                        prop_assert!(ms >= base, "{} ms < base {}", ms, base);
                        if let Some(ra) = ra_s {
                            prop_assert!(ms >= (ra * 1000).min(10_000), "sooner than the server asked");
                        }
                        prop_assert!(now + (ms as f64) < DEFAULT_DEADLINE_MS as f64);
                        sends += 1;
                        prop_assert!(sends <= max_attempts, "{} sends > {}", sends, max_attempts);
                        now += (ms + step) as f64;
                    }
                    Next::GiveUp(PendingReason::Attempts) => {
                        prop_assert_eq!(sends, max_attempts);
                        break;
                    }
                    Next::GiveUp(_) => break,
                }
            }
        }

        #[test]
        fn a_schedule_ends_and_never_overruns_the_deadline(
            causes in proptest::collection::vec(0usize..5, 1..300), seed in 0.0f64..1.0, step in 0u64..5_000,
        ) {
            let mut s = Schedule::new(RetryPolicy::default(), 0.0, 60_000, 15_000);
            let mut b = RetryBudget::new(BudgetConfig::default());
            let mut now = 0.0;
            for c in causes {
                let cause = CAUSES[c];
                let server_paced = matches!(cause, RetryCause::InProgress | RetryCause::Paced);
                let v = Verdict::Retry { cause, retry_after_ms: server_paced.then_some(1_000) };
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

    fn timings() -> Timings {
        Timings {
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS.into(),
            deadline_ms: DEFAULT_DEADLINE_MS,
            policy: RetryPolicy::default(),
        }
    }

    #[test]
    fn the_defaults_are_within_every_bound_and_the_bounds_themselves_are_accepted() {
        assert_eq!(timings().check(), Ok(()));
        let p = RetryPolicy {
            base_delay_ms: MIN_BASE_DELAY_MS,
            max_delay_ms: MIN_BASE_DELAY_MS,
            max_retry_after_ms: 0,
            ..RetryPolicy::default()
        };
        let least = Timings {
            request_timeout_ms: MIN_REQUEST_TIMEOUT_MS,
            deadline_ms: MIN_REQUEST_TIMEOUT_MS,
            policy: p,
        };
        assert_eq!(least.check(), Ok(()));
    }

    #[test]
    fn an_unsafe_timing_is_refused_naming_the_option_the_value_and_the_bound() {
        let t = timings();
        let p = t.policy;
        let cases = [
            (
                Timings {
                    request_timeout_ms: 0,
                    ..t
                },
                "requestTimeoutMs must be at least 1000, got 0",
            ),
            (
                Timings {
                    policy: RetryPolicy {
                        base_delay_ms: 1,
                        ..p
                    },
                    ..t
                },
                "retry.baseDelayMs must be at least 100, got 1",
            ),
            (
                Timings {
                    policy: RetryPolicy {
                        max_delay_ms: 200,
                        ..p
                    },
                    ..t
                },
                "retry.maxDelayMs must be at least retry.baseDelayMs (500), got 200",
            ),
            (
                Timings {
                    deadline_ms: 5_000,
                    ..t
                },
                "deadlineMs must be at least requestTimeoutMs (15000), got 5000",
            ),
        ];
        for (timings, message) in cases {
            assert_eq!(timings.check(), Err(message.to_owned()));
        }
    }
}
