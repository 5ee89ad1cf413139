//! How each simulated client decides whether and when to send again.
//!
//! Every strategy sees the same [`Verdict`]s (from the SDK's own `classify_pay`) and answers
//! with the core's [`Next`]. The anchors share one backoff envelope ([`envelope_wait_ms`]:
//! `0.5 s · 2^n` capped at 5 s, the default policy's numbers) and differ only in the random
//! factor fed to it, so the comparison isolates what matters: the jitter, the budget and
//! `Retry-After`. "ours" is the SDK itself: its pay loop (`payonce::core::flow::PayFlow`, the
//! one the browser layer drives) with its `RetryBudget`; "previous SDK default"
//! re-enacts, on the same envelope and budget, the policy the SDK had before the simulation's
//! findings were applied to it, so the change stays measurable.

use payonce::core::attempt::Entry;
use payonce::core::classify::{classify_pay, Reply, RetryCause, Verdict};
use payonce::core::flow::{Effect, FlowConfig, PayEnd, PayFlow};
use payonce::core::retry::{
    Next, PendingReason, RetryBudget, RetryPolicy, DEFAULT_DEADLINE_MS, DEFAULT_LONG_WAIT_MS,
};
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey, PayResponse};
use rand::rngs::StdRng;
use rand::Rng;

/// A retry strategy under test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Strategy {
    /// `0.5 s · 2^n` capped at 5 s, exactly: every client that failed together retries together.
    NoJitter,
    /// Stripe's clients: the same envelope times a factor in `[0.5, 1)`.
    Stripe,
    /// AWS SDKs: full jitter `[0, envelope)` and a 500-token retry budget per client.
    AwsFullJitter,
    /// The SDK before the retry-storm findings were applied: full jitter from `base` after every
    /// failure (timeouts included), `Retry-After` honoured to the millisecond, and a 503 with
    /// `Retry-After` counted as a failed send towards `max_attempts`. Same policy numbers,
    /// budget and deadline as [`Strategy::Sdk`].
    PreviousSdk,
    /// Exactly what the SDK does: the core's pay flow and `RetryBudget` with this policy and
    /// the SDK's default deadline (`payonce::core::retry::DEFAULT_DEADLINE_MS`).
    Sdk {
        /// Label in the table and the plot.
        label: &'static str,
        /// The policy (the SDK's default, or a candidate in the experiments).
        policy: RetryPolicy,
    },
    /// An experiment, not the SDK: [`Strategy::Sdk`] except that the wait after our own
    /// timeout is AWS's *decorrelated jitter*, `min(cap, random(base, 3 · previous wait))`
    /// starting from `previous = base`, instead of full jitter over `[0, cap)`. Everything else
    /// (Retry-After, attempts, budget, deadline) is the SDK's own pay flow.
    SdkDecorrelated {
        /// Label in the table.
        label: &'static str,
        /// Base and cap of the draw, and the rest of the policy.
        policy: RetryPolicy,
    },
}

impl Strategy {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::NoJitter => "no jitter",
            Self::Stripe => "Stripe x0.5-1",
            Self::AwsFullJitter => "AWS full jitter",
            Self::PreviousSdk => "previous SDK default",
            Self::Sdk { label, .. } | Self::SdkDecorrelated { label, .. } => label,
        }
    }

    /// Whether the strategy honours a server's `Retry-After` (only the SDK does, like ky).
    pub(crate) fn honours_retry_after(&self) -> bool {
        matches!(
            self,
            Self::Sdk { .. } | Self::SdkDecorrelated { .. } | Self::PreviousSdk
        )
    }
}

/// What a client does after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The answer was final: paid.
    Paid,
    /// Send again after this wait, or stop.
    Then(Next),
}

/// One client's retry state for its single pay call.
pub(crate) struct ClientRetry {
    strategy: Strategy,
    envelope: RetryPolicy,
    /// The AWS bucket or the SDK's bucket. One per client: each simulated client is its own
    /// browser (its own `PayonceClient`), as each AWS SDK client owns its own bucket.
    budget: Option<RetryBudget>,
    /// The SDK's pay flow, for [`Strategy::Sdk`] and [`Strategy::SdkDecorrelated`], polled up
    /// to its next request.
    flow: Option<PayFlow>,
    /// When the pay call started, for [`Strategy::PreviousSdk`]'s deadline.
    started_ms: u64,
    failures: u32,
    waits: u32,
    /// The previous decorrelated wait, for [`Strategy::SdkDecorrelated`].
    prev_ms: u64,
}

impl ClientRetry {
    /// The state of a pay call that starts at `now_ms`.
    pub(crate) fn new(strategy: Strategy, now_ms: u64) -> Self {
        let envelope = RetryPolicy::default();
        let (budget, flow) = match strategy {
            Strategy::NoJitter | Strategy::Stripe => (None, None),
            Strategy::AwsFullJitter | Strategy::PreviousSdk => {
                (Some(RetryBudget::new(envelope.budget)), None)
            }
            Strategy::Sdk { policy, .. } | Strategy::SdkDecorrelated { policy, .. } => {
                let config = FlowConfig {
                    policy,
                    deadline_ms: DEFAULT_DEADLINE_MS,
                    long_wait_ms: DEFAULT_LONG_WAIT_MS,
                };
                let mut flow = PayFlow::start(
                    &Entry::Missing,
                    sim_checkout(),
                    config,
                    now_ms as f64,
                    || IdempotencyKey::parse("00000000-0000-4000-8000-000000000000").ok(),
                )
                .ok();
                if let Some(f) = &mut flow {
                    to_next_send(f, now_ms);
                }
                (Some(RetryBudget::new(policy.budget)), flow)
            }
        };
        Self {
            strategy,
            envelope,
            budget,
            flow,
            started_ms: now_ms,
            failures: 0,
            waits: 0,
            prev_ms: match strategy {
                Strategy::SdkDecorrelated { policy, .. } => policy.base_delay_ms,
                _ => 0,
            },
        }
    }

    /// A final answer arrived: the SDK (and AWS) refill their bucket a little.
    pub(crate) fn on_final(&mut self) {
        if let Some(b) = &mut self.budget {
            b.refill();
        }
    }

    /// What follows the answer `reply` at `now_ms`. Strategies that ignore `Retry-After` see
    /// a shed request as plain server trouble.
    pub(crate) fn answer(
        &mut self,
        reply: &Reply<PayResponse>,
        now_ms: u64,
        rng: &mut StdRng,
    ) -> Step {
        let verdict = classify_pay(reply);
        if let (Some(flow), Some(budget)) = (&mut self.flow, &mut self.budget) {
            let timed_out = matches!(
                verdict,
                Verdict::Retry {
                    cause: RetryCause::TimedOut,
                    retry_after_ms: None
                }
            );
            match self.strategy {
                Strategy::SdkDecorrelated { policy, .. } if timed_out => {
                    // The SDK draws `base + (cap - base) · u` after a timeout: feed it the `u`
                    // that gives the decorrelated wait, so the flow's other rules apply
                    // unchanged.
                    let cap = policy.max_delay_ms.max(policy.base_delay_ms + 1);
                    let lo = policy.base_delay_ms;
                    let hi = self.prev_ms.saturating_mul(3).max(lo + 1);
                    let d = rng.gen_range(lo..hi).min(cap);
                    self.prev_ms = d;
                    let u = (d - lo) as f64 / (cap - lo) as f64;
                    flow.on_reply(reply, now_ms as f64, budget, &mut || u);
                }
                _ => flow.on_reply(reply, now_ms as f64, budget, &mut || rng.gen::<f64>()),
            }
            return flow_step(flow, now_ms);
        }
        if let Verdict::Final(_) = verdict {
            self.on_final();
            return Step::Paid;
        }
        let verdict = if self.strategy.honours_retry_after() {
            verdict
        } else {
            strip_retry_after(verdict)
        };
        Step::Then(self.after(&verdict, now_ms, rng))
    }

    /// What follows a `Retry` verdict at `now_ms`, for the strategies that are not the SDK.
    fn after(&mut self, verdict: &Verdict, now_ms: u64, rng: &mut StdRng) -> Next {
        let (cause, retry_after_ms) = match verdict {
            Verdict::Retry {
                cause,
                retry_after_ms,
            } => (*cause, *retry_after_ms),
            _ => return Next::GiveUp(PendingReason::Attempts),
        };
        // Every strategy but ours counts any failure, a 503 with `Retry-After` included.
        if cause != RetryCause::InProgress {
            self.failures += 1;
            if self.failures >= self.envelope.max_attempts {
                return Next::GiveUp(PendingReason::Attempts);
            }
        }
        let n = self.waits;
        let ms = match (self.strategy, retry_after_ms) {
            // The previous SDK: the server's number exactly, capped; no random draw.
            (Strategy::PreviousSdk, Some(ra)) => ra.min(self.envelope.max_retry_after_ms),
            // u = 1 gives the envelope itself.
            (Strategy::NoJitter, _) => envelope_wait_ms(&self.envelope, n, 1.0),
            (Strategy::Stripe, _) => {
                envelope_wait_ms(&self.envelope, n, 0.5 + 0.5 * rng.gen::<f64>())
            }
            _ => envelope_wait_ms(&self.envelope, n, rng.gen::<f64>()),
        };
        if self.strategy == Strategy::PreviousSdk {
            let elapsed = now_ms.saturating_sub(self.started_ms);
            if ms >= DEFAULT_DEADLINE_MS.saturating_sub(elapsed) {
                return Next::GiveUp(PendingReason::Deadline);
            }
        }
        if let Some(b) = &mut self.budget {
            if !b.try_withdraw(cause) {
                return Next::GiveUp(PendingReason::Budget);
            }
        }
        self.waits += 1;
        Next::Wait { ms }
    }
}

/// `u · min(max_delay, base · 2^n)` for `u` in `[0, 1]`: the anchors' envelope (AWS's full
/// jitter for `u` uniform), without the SDK's floor under every wait (the SDK's own rule is
/// [`RetryPolicy::backoff_ms`]).
fn envelope_wait_ms(p: &RetryPolicy, n: u32, u: f64) -> u64 {
    let exp = p
        .base_delay_ms
        .saturating_mul(1u64.checked_shl(n.min(63)).unwrap_or(u64::MAX));
    ((exp.min(p.max_delay_ms) as f64) * u.clamp(0.0, 1.0)) as u64
}

/// The checkout every simulated client pays (the model's server ignores its details).
fn sim_checkout() -> CheckoutSnapshot {
    CheckoutSnapshot {
        order_id: "ord_sim".into(),
        order_version: 1,
        payment_method_id: "pm_sim".into(),
        extras: Default::default(),
    }
}

/// Performs the flow's effects up to its next request (storage and statuses are no-ops here;
/// the model never goes offline).
fn to_next_send(flow: &mut PayFlow, now_ms: u64) {
    while let Some(e) = flow.poll(now_ms as f64, true) {
        if let Effect::Send { .. } = e {
            return;
        }
    }
}

/// The flow's next step after an answer: a wait (the flow then moves on to its next request,
/// which the model sends when the wait is over), or its end.
fn flow_step(flow: &mut PayFlow, now_ms: u64) -> Step {
    while let Some(e) = flow.poll(now_ms as f64, true) {
        match e {
            Effect::Wait { ms, .. } => {
                flow.on_waited();
                to_next_send(flow, now_ms + ms);
                return Step::Then(Next::Wait { ms });
            }
            Effect::Done(PayEnd::Final(_)) => return Step::Paid,
            Effect::Done(PayEnd::Pending(reason)) => return Step::Then(Next::GiveUp(reason)),
            Effect::Done(PayEnd::Failed(_) | PayEnd::ActionRequired | PayEnd::Busy) => {
                return Step::Then(Next::GiveUp(PendingReason::Attempts))
            }
            _ => {}
        }
    }
    Step::Then(Next::GiveUp(PendingReason::Attempts))
}

/// The verdict as a client that ignores `Retry-After` sees it: a shed request is plain
/// server trouble, not the server pacing it.
fn strip_retry_after(v: Verdict) -> Verdict {
    match v {
        Verdict::Retry { cause, .. } => Verdict::Retry {
            cause: match cause {
                RetryCause::Paced => RetryCause::ServerTrouble,
                c => c,
            },
            retry_after_ms: None,
        },
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn decorrelated_jitter_waits_between_base_and_three_times_base_after_a_first_timeout() {
        let policy = RetryPolicy::default();
        let s = Strategy::SdkDecorrelated {
            label: "test",
            policy,
        };
        let timed_out = Reply::NoAnswer { timed_out: true };
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..200 {
            let mut c = ClientRetry::new(s, 0);
            match c.answer(&timed_out, 15_000, &mut rng) {
                Step::Then(Next::Wait { ms }) => assert!(
                    (policy.base_delay_ms - 1..3 * policy.base_delay_ms).contains(&ms),
                    "{ms} ms"
                ),
                other => panic!("expected a wait, got {other:?}"),
            }
        }
    }
}
