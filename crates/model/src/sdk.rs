//! The SDK side of the model: every call the model makes into the SDK's pure core
//! (`src/core/`) goes through this file, so an API change there is a one-file fix here.
//! The [`crate::Flaw::RemoveKeyOnTimeout`] variant is injected here, never in the SDK.

use crate::Flaw;
pub use payonce::core::attempt::{Attempt, Entry};
use payonce::core::classify::{classify_cancel, classify_pay, Reply};
pub use payonce::core::classify::{CancelOutcome, Final};
pub use payonce::core::flow::{Effect, FlowConfig, PayEnd, PayFlow};
pub use payonce::core::retry::RetryBudget;
use payonce::core::retry::{BudgetConfig, RetryPolicy};
use payonce_protocol::{CancelResponse, CheckoutSnapshot, IdempotencyKey, PayResponse, Problem};

/// The pay call's settings in the model: the SDK's defaults with at most `max_sends`
/// requests per call (the bound on retries).
pub fn config(max_sends: u32) -> FlowConfig {
    FlowConfig {
        policy: RetryPolicy {
            max_attempts: max_sends,
            ..RetryPolicy::default()
        },
        deadline_ms: 60_000,
        long_wait_ms: 10_000,
    }
}

/// A fresh retry budget for a page.
pub fn budget() -> RetryBudget {
    RetryBudget::new(BudgetConfig::default())
}

/// The n-th key the model mints (the SDK mints UUID v4; any valid key will do).
pub fn key(n: u8) -> IdempotencyKey {
    IdempotencyKey::parse(&format!("00000000-0000-4000-8000-{n:012}")).expect("valid key")
}

/// The snapshot a tab pays for.
pub fn snapshot(order_id: &str, version: u64, method: &str) -> CheckoutSnapshot {
    CheckoutSnapshot {
        order_id: order_id.to_owned(),
        order_version: version,
        payment_method_id: method.to_owned(),
        extras: Default::default(),
    }
}

/// `PayFlow::start` with what storage holds for the order; `Err` when the SDK refuses to
/// start (a stored attempt for other details: the customer must cancel first).
pub fn start(
    stored: Option<&Attempt>,
    snap: CheckoutSnapshot,
    max_sends: u32,
    now: i64,
    mint: IdempotencyKey,
) -> Result<PayFlow, String> {
    let entry = match stored {
        Some(a) => Entry::Valid(a.clone()),
        None => Entry::Missing,
    };
    PayFlow::start(&entry, snap, config(max_sends), now as f64, || Some(mint))
        .map_err(|e| format!("{e:?}"))
}

/// The next effect of a flow (the browser is always online in the model).
pub fn poll(flow: &mut PayFlow, now: i64) -> Option<Effect> {
    flow.poll(now as f64, true)
}

/// An HTTP answer as the web layer decodes it: a 2xx body as the success type, anything
/// else as a problem.
pub fn decode<T: serde::de::DeserializeOwned>(
    status: u16,
    body: &str,
    retry_after: Option<&str>,
) -> Reply<T> {
    let two = (200..300).contains(&status);
    Reply::Http {
        status,
        retry_after: retry_after.map(str::to_owned),
        ok: if two {
            serde_json::from_str(body).ok()
        } else {
            None
        },
        problem: if two {
            None
        } else {
            serde_json::from_str::<Problem>(body).ok()
        },
    }
}

/// Whether the SDK's classification calls this pay answer final (the key may go).
pub fn pay_is_final(reply: &Reply<PayResponse>) -> bool {
    classify_pay(reply).removes_key()
}

/// Feeds an answer (`None`: our own timeout fired) to the flow.
pub fn on_reply(
    flow: &mut PayFlow,
    reply: Option<&Reply<PayResponse>>,
    now: i64,
    budget: &mut RetryBudget,
) {
    let timeout = Reply::NoAnswer { timed_out: true };
    flow.on_reply(reply.unwrap_or(&timeout), now as f64, budget, &mut || 0.5);
}

/// Whether, besides what the flow asked for, the (flawed) SDK drops the key after this
/// answer: only [`Flaw::RemoveKeyOnTimeout`] does, on a timeout.
pub fn flawed_removal(flaw: Option<Flaw>, reply: Option<&Reply<PayResponse>>) -> bool {
    flaw == Some(Flaw::RemoveKeyOnTimeout) && reply.is_none()
}

/// The SDK's reading of a cancel answer.
pub fn cancel_outcome(status: u16, body: &str) -> CancelOutcome {
    classify_cancel(&decode::<CancelResponse>(status, body, None))
}
