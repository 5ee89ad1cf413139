//! `POST /payments/{id}/refund` with its own `Idempotency-Key`: a succeeded payment is
//! refunded once, through the provider's refund with a provider refund key derived from
//! (user, refund key, payment), so retries and races at any step reach the provider as one refund.
//!
//! | the caller's refund key is | we do |
//! |---|---|
//! | used for another payment | 422 `KEY_REUSED_WITH_DIFFERENT_DETAILS` |
//! | final | replay the stored answer byte for byte (`Idempotent-Replayed: true`) |
//! | processing | take its lease and call the provider again with the same refund key (the adapter reads back first); held by another request: 409 `IN_PROGRESS` |
//! | new, payment succeeded and not being refunded | claim it (unique slots), then call |
//! | new, otherwise | 409 `REFUND_NOT_ALLOWED` |
//!
//! A provider that cannot be reached leaves the refund processing: 409 `IN_PROGRESS` with
//! `Retry-After`, and the retry calls again with the same key. A provider that refuses the
//! refund is asked for the charge's refunds ([`plan::refused_refund`]): one made elsewhere
//! (the dashboard) is recorded as this refund; none ends the key `failed` with a 409
//! `REFUND_NOT_ALLOWED` to replay, and frees the payment for a new refund key.
//! Only the holder of a processing refund's lease calls the provider; a retry meanwhile is
//! 409 `IN_PROGRESS`.
//!
//! The rules above, in order, are the refund machine
//! ([`payonce_rules::refund::ServerRefund`], `crates/rules/src/refund.rs`), which also
//! builds every row a refund writes; [`interpret`] performs each effect it asks for (a
//! read, a transaction of `src/store/refunds.rs`, a provider call) and feeds the result
//! back. The provider is never called inside a transaction.

use crate::error::{AppError, AppResult};
use crate::metrics::{self, RefundResult};
use crate::ops::pay::Fresh;
use crate::reply::Reply;
use crate::state::AppState;
use crate::store::refunds as db;
use payonce_protocol::{AttemptStatus, IdempotencyKey, Payment};
use payonce_rules::plan::{self, RefusedRefund};
use payonce_rules::refund::{self, Effect, End, RefundOutcome, ServerRefund};

/// Effects one refund may ask for: each read of the key ends the request or observes
/// someone else's progress (a row appeared or was settled); the bound only guards against a
/// livelock bug.
const MAX_EFFECTS: usize = 1_000;

/// Refunds `payment` (the caller's, made by attempt `attempt_id`) under the caller's refund
/// `key`, by the rule every keyed operation shares (`crates/rules/src/keyed.rs`): the
/// refund's fingerprint is the caller and the payment, so the key on another payment is a
/// 422; a final key replays; a processing one is called again with the same refund key.
pub(crate) async fn run(
    state: &AppState,
    user: &str,
    key: &IdempotencyKey,
    payment: Payment,
    attempt_id: &str,
) -> AppResult<Reply> {
    let req = refund::Request {
        user: user.to_owned(),
        key: key.clone(),
        payment,
        attempt_id: attempt_id.to_owned(),
    };
    let end = interpret(state, ServerRefund::new(req, state.policy)).await?;
    let (result, reply) = match end {
        End::Replay(answer) => (RefundResult::Replayed, Ok(Reply::replay(answer))),
        End::Refunded(answer) => (RefundResult::Refunded, Ok(Reply::fresh(answer))),
        End::Failed(answer) => (RefundResult::NotAllowed, Ok(Reply::fresh(answer))),
        End::NotAllowed(problem) => (RefundResult::NotAllowed, Err(problem.into())),
        End::Mismatch(problem) => return Err(problem.into()),
        End::InProgress => (RefundResult::InProgress, Err(in_progress(state))),
    };
    metrics::refund(result);
    reply
}

/// Performs `m`'s effects until it ends.
async fn interpret(state: &AppState, mut m: ServerRefund) -> AppResult<End> {
    let store = &state.store;
    for _ in 0..MAX_EFFECTS {
        match m.poll(state.clock.now_ms(), &mut Fresh(&*state.ids)) {
            Effect::Done(end) => return Ok(end.clone()),
            Effect::ReadKey { user, key } => {
                let record = db::find(store.pool(), user, key.as_str()).await?;
                m.on_record(record, state.clock.now_ms());
            }
            Effect::Claim { plan, now } => {
                let claimed = db::claim(store, plan, now).await?;
                m.on_claim(claimed);
            }
            Effect::TakeLease { lease, now } => {
                let taken = db::take_lease(store, lease, now).await?;
                m.on_leased(taken);
            }
            Effect::Refund { lease, charge_id } => {
                let key = &lease.provider_refund_key;
                let outcome = state.provider.refund(charge_id, key).await;
                match &outcome {
                    RefundOutcome::NotAllowed(why) => {
                        tracing::warn!(refund = %lease.refund_id, %why, "provider refuses the refund; reading the charge's refunds")
                    }
                    RefundOutcome::Unknown(why) => {
                        tracing::warn!(refund = %lease.refund_id, %why, "refund outcome unknown; stays processing")
                    }
                    RefundOutcome::Refunded(_) => {}
                }
                m.on_refund(outcome);
            }
            Effect::ListRefunds { lease, charge_id } => {
                let refunds = state.provider.refunds_of(charge_id).await;
                if let RefusedRefund::RefundedElsewhere(r) = plan::refused_refund(refunds.clone()) {
                    tracing::info!(refund = %lease.refund_id, provider_refund = %r.id, "the charge was refunded elsewhere; recorded");
                }
                m.on_refunds(refunds);
            }
            Effect::Settle { plan, lease, now } => {
                let settled = match db::settle(store, plan, now).await {
                    Ok(settled) => settled,
                    Err(e) => {
                        // The call's outcome is not stored: the next retry may call again
                        // at once, with the same refund key.
                        db::release_lease(store, lease).await?;
                        return Err(e.into());
                    }
                };
                m.on_settled(settled);
            }
            Effect::Release(lease) => {
                db::release_lease(store, lease).await?;
                m.on_released();
            }
        }
    }
    Err(AppError::internal("refund decision did not converge"))
}

fn in_progress(state: &AppState) -> AppError {
    AppError::refund_in_progress(state.config.retry_after_secs)
}

/// A provider webhook says `intent`, `record`'s payment at the provider, was refunded: a
/// refund made outside payonce (Stripe's dashboard) is reflected, so the order does not stay
/// `paid`. Like every webhook a hint only: the payment, its order and its attempt become
/// `refunded` once the provider confirms it refunded the whole amount, in one transaction
/// conditional on the payment still being `succeeded` (a duplicate or a race changes nothing).
/// A refund payonce started itself is left to its own path (above); a partial refund is
/// logged and changes nothing (payonce refunds in full only).
pub(crate) async fn reflect_provider_refund(
    state: &AppState,
    event: &str,
    record: &payonce_rules::Record,
    intent: &str,
) -> AppResult<()> {
    use crate::provider::RefundCheck;
    let pool = state.store.pool();
    let payment_id = crate::store::payments::payment_of_attempt(pool, record.id()).await?;
    let payment = match payment_id {
        Some(id) => crate::store::payments::get_payment(pool, &id).await?,
        None => None,
    };
    let Some(payment) = payment.filter(|p| p.status == AttemptStatus::Succeeded) else {
        // Not paid (yet), or refunded already: nothing to reflect.
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    };
    if db::started_for(pool, &payment.id).await? {
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    }
    let refunded = match state.provider.refunded(intent).await {
        RefundCheck::Refunded { amount } => amount,
        RefundCheck::Unknown(why) => {
            tracing::warn!(%event, %intent, %why, "the provider could not confirm a refund");
            metrics::webhook_event(metrics::WebhookResult::Unconfirmed);
            let detail = "the provider could not confirm this refund; deliver it again";
            return Err(AppError::unavailable(detail, 1));
        }
    };
    if refunded == 0 {
        tracing::info!(%event, %intent, "no refund at the provider for this event; nothing to reflect");
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    }
    if refunded < payment.amount {
        tracing::warn!(%event, payment = %payment.id, refunded, amount = payment.amount,
            "partial refund at the provider: the payment stays succeeded (full refunds only)");
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    }
    let reason = format!("refunded at the provider (intent {intent}), event {event}");
    let moved = mark_refunded_at_provider(state, &payment, record.id(), &reason);
    if moved.await? {
        tracing::info!(%event, payment = %payment.id, "refund made at the provider reflected");
        metrics::webhook_event(metrics::WebhookResult::Applied);
    } else {
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
    }
    Ok(())
}

/// Marks `payment`, its order and its `attempt` refunded by a refund the provider made (a
/// webhook's, confirmed by the provider's own list), with the audit rows, in one transaction
/// conditional on the payment still being `succeeded`. False: it was not (a duplicate or a
/// race), and nothing changed.
pub(crate) async fn mark_refunded_at_provider(
    state: &AppState,
    payment: &Payment,
    attempt: &str,
    reason: &str,
) -> AppResult<bool> {
    let mark = refund::mark_refunded("provider-webhook", payment, attempt, reason);
    Ok(db::mark_refunded(&state.store, &mark, state.clock.now_ms()).await?)
}
