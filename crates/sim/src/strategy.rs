//! How each simulated client decides whether and when to send again.
//!
//! Every strategy sees the same [`Verdict`]s (from the SDK's own `classify_pay`) and answers
//! with the core's [`Next`]. The anchors reuse the core's backoff envelope
//! ([`RetryPolicy::backoff_ms`]: `0.5 s · 2^n` capped at 5 s) and differ only in the random
//! factor fed to it, so the comparison isolates what the issue asks about: the jitter, the
//! budget and `Retry-After`.

use payonce::core::classify::{RetryCause, Verdict};
use payonce::core::retry::{Next, PendingReason, RetryBudget, RetryPolicy, Schedule};
use rand::rngs::StdRng;
use rand::Rng;

/// The SDK's defaults that live in its web layer (`src/web/mod.rs`, `PayonceClient.create`),
/// repeated here because the web layer only builds for wasm32. Keep in step with it.
pub(crate) const SDK_REQUEST_TIMEOUT_MS: u64 = 15_000;
/// See [`SDK_REQUEST_TIMEOUT_MS`].
pub(crate) const SDK_DEADLINE_MS: u64 = 60_000;
/// See [`SDK_REQUEST_TIMEOUT_MS`].
pub(crate) const SDK_LONG_WAIT_MS: u64 = 10_000;

/// A retry strategy under test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Strategy {
    /// `0.5 s · 2^n` capped at 5 s, exactly: every client that failed together retries together.
    NoJitter,
    /// Stripe's clients: the same envelope times a factor in `[0.5, 1)`.
    Stripe,
    /// AWS SDKs: full jitter `[0, envelope)` and a 500-token retry budget per client.
    AwsFullJitter,
    /// Exactly what the SDK does: the core's `Schedule` and `RetryBudget` with this policy
    /// (full jitter, budget, `Retry-After` honoured up to its cap, the 60 s deadline).
    Sdk {
        /// Label in the table and the plot.
        label: &'static str,
        /// The policy (the SDK's default, or a proposed variant).
        policy: RetryPolicy,
        /// Changes proposed for the SDK, emulated here ([`Proposal::NONE`] = the SDK today).
        proposal: Proposal,
    },
}

/// Proposed changes to the SDK's retry policy, emulated by rewriting the verdict the core's
/// `Schedule` sees (the core itself is not changed by this program).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Proposal {
    /// Wait uniformly in `[ra, ra · (1 + spread))` for a server's `Retry-After: ra` instead of
    /// exactly `ra`. 0 = honour it to the millisecond (today).
    pub retry_after_spread: f64,
    /// After our own timeout fired, draw the first wait from `[0, window)` instead of
    /// `[0, base)`: everyone whose request hung on a dead server times out at the same moment,
    /// and `[0, 0.5 s)` cannot spread a crowd. `None` = today.
    pub timeout_window_ms: Option<u64>,
    /// Count a 429/5xx that came with `Retry-After` as the server pacing us (like a poll of an
    /// attempt in progress: free, bounded by the deadline) rather than as a failed send
    /// towards `max_attempts`. false = today.
    pub paced_is_not_failure: bool,
}

impl Proposal {
    /// What the SDK does today.
    pub(crate) const NONE: Self = Self {
        retry_after_spread: 0.0,
        timeout_window_ms: None,
        paced_is_not_failure: false,
    };
}

impl Strategy {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::NoJitter => "no jitter",
            Self::Stripe => "Stripe x0.5-1",
            Self::AwsFullJitter => "AWS full jitter",
            Self::Sdk { label, .. } => label,
        }
    }

    /// Whether the strategy honours a server's `Retry-After` (only the SDK does, like ky).
    pub(crate) fn honours_retry_after(&self) -> bool {
        matches!(self, Self::Sdk { .. })
    }
}

/// One client's retry state for its single pay call.
pub(crate) struct ClientRetry {
    strategy: Strategy,
    envelope: RetryPolicy,
    /// The AWS bucket or the SDK's bucket. One per client: each simulated client is its own
    /// browser (its own `PayonceClient`), as each AWS SDK client owns its own bucket.
    budget: Option<RetryBudget>,
    /// The SDK's schedule, for [`Strategy::Sdk`].
    schedule: Option<Schedule>,
    failures: u32,
    waits: u32,
}

impl ClientRetry {
    /// The state of a pay call that starts at `now_ms`.
    pub(crate) fn new(strategy: Strategy, now_ms: u64) -> Self {
        let envelope = RetryPolicy::default();
        let (budget, schedule) = match strategy {
            Strategy::NoJitter | Strategy::Stripe => (None, None),
            Strategy::AwsFullJitter => (Some(RetryBudget::new(envelope.budget)), None),
            Strategy::Sdk { policy, .. } => (
                Some(RetryBudget::new(policy.budget)),
                Some(Schedule::new(
                    policy,
                    now_ms as f64,
                    SDK_DEADLINE_MS,
                    SDK_LONG_WAIT_MS,
                )),
            ),
        };
        Self {
            strategy,
            envelope,
            budget,
            schedule,
            failures: 0,
            waits: 0,
        }
    }

    /// A final answer arrived: the SDK (and AWS) refill their bucket a little.
    pub(crate) fn on_final(&mut self) {
        if let Some(b) = &mut self.budget {
            b.refill();
        }
    }

    /// What follows a `Retry` verdict at `now_ms`.
    pub(crate) fn after(&mut self, verdict: &Verdict, now_ms: u64, rng: &mut StdRng) -> Next {
        if let (Strategy::Sdk { proposal, .. }, Some(schedule), Some(budget)) =
            (self.strategy, &mut self.schedule, &mut self.budget)
        {
            let verdict = proposal.rewrite(verdict, rng);
            return schedule.after(&verdict, now_ms as f64, budget, &mut || rng.gen::<f64>());
        }
        let cause = match verdict {
            Verdict::Retry { cause, .. } => *cause,
            _ => return Next::GiveUp(PendingReason::Attempts),
        };
        if cause != RetryCause::InProgress {
            self.failures += 1;
            if self.failures >= self.envelope.max_attempts {
                return Next::GiveUp(PendingReason::Attempts);
            }
        }
        let n = self.waits;
        let ms = match self.strategy {
            // u = 1 gives the envelope itself (the core clamps into [0, 1]).
            Strategy::NoJitter => self.envelope.backoff_ms(n, &mut || 1.0),
            Strategy::Stripe => self
                .envelope
                .backoff_ms(n, &mut || 0.5 + 0.5 * rng.gen::<f64>()),
            _ => self.envelope.backoff_ms(n, &mut || rng.gen::<f64>()),
        };
        if let Some(b) = &mut self.budget {
            if !b.try_withdraw(cause) {
                return Next::GiveUp(PendingReason::Budget);
            }
        }
        self.waits += 1;
        Next::Wait { ms }
    }
}

impl Proposal {
    /// The verdict as the core would see it with the proposal built in. The wait travels as a
    /// `retry_after_ms`, which `Schedule::after` then bounds by the deadline and the budget
    /// exactly as it does a server's (the cause, and so the cost, is unchanged).
    fn rewrite(&self, verdict: &Verdict, rng: &mut StdRng) -> Verdict {
        let Verdict::Retry {
            cause,
            retry_after_ms,
        } = verdict
        else {
            return verdict.clone();
        };
        let wait = match (retry_after_ms, self.timeout_window_ms) {
            (Some(ra), _) if self.retry_after_spread > 0.0 => {
                Some(ra + (*ra as f64 * self.retry_after_spread * rng.gen::<f64>()) as u64)
            }
            (None, Some(w)) if *cause == RetryCause::TimedOut => {
                Some((w as f64 * rng.gen::<f64>()) as u64)
            }
            (ra, _) => *ra,
        };
        let cause = match (cause, retry_after_ms) {
            (RetryCause::ServerTrouble, Some(_)) if self.paced_is_not_failure => {
                RetryCause::InProgress
            }
            (c, _) => *c,
        };
        Verdict::Retry {
            cause,
            retry_after_ms: wait,
        }
    }
}
