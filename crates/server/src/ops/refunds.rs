//! `POST /payments/{id}/refund` with its own `Idempotency-Key`: a succeeded payment is
//! refunded once, by amount, through the provider's refund carrying a provider refund key
//! derived from (user, refund key, payment) and saved before any call, so retries and races
//! at any step reach the provider as one refund, whether or not it deduplicates.
//!
//! | the caller's refund key is | we do |
//! |---|---|
//! | used for another payment | 422 `KEY_REUSED_WITH_DIFFERENT_DETAILS` |
//! | final | replay the stored answer byte for byte (`Idempotent-Replayed: true`) |
//! | processing | take its lease, read the provider's refunds, and call again only for what is still unrefunded; lease held by another request (or by a call whose answer was lost): 409 `IN_PROGRESS` |
//! | new, payment succeeded and not being refunded | claim it (unique slots), then read and call |
//! | new, otherwise | 409 `REFUND_NOT_ALLOWED` |
//!
//! Before each call the charge's refunds at the provider are listed
//! ([`payonce_rules::refund::standing`]): a refund carrying our key is this one; refunds
//! that did not fail and cover the payment (the dashboard's too) are the payment's refund;
//! otherwise only the remainder is refunded. A refund is `refunded` only once the provider
//! says it succeeded; a pending one keeps the key processing (409 `IN_PROGRESS`) until a
//! retry, the refund job ([`drive_due`]) or a provider refund event ([`drive_payment`])
//! reads it final. A call whose answer is unknown may still land, so its lease is held a
//! whole lease from then (longer than the provider timeout, a start check): nothing calls
//! again meanwhile. A provider that refuses the refund is read again: nothing explaining it
//! ends the key `failed` with a 409 `REFUND_NOT_ALLOWED` to replay, and frees the payment
//! for a new refund key; so does a refund of ours the provider failed.
//!
//! The rules above, in order, are the refund machine
//! ([`payonce_rules::refund::ServerRefund`], `crates/rules/src/refund.rs`), which also
//! builds every row a refund writes; [`interpret`] performs each effect it asks for (a
//! read, a transaction of `src/store/refunds.rs`, a provider call) and feeds the result
//! back. The provider is never called inside a transaction.

use crate::error::{AppError, AppResult};
use crate::metrics::{self, RefundResult};
use crate::reply::Reply;
use crate::state::OpsState;
use crate::store::refunds as db;
use payonce_protocol::{IdempotencyKey, Payment};
use payonce_rules::ids::AttemptId;
use payonce_rules::refund::{self, Effect, End, RefundOutcome, RefundStatus, ServerRefund};

/// Effects one refund may ask for: each read of the key ends the request or observes
/// someone else's progress (a row appeared or was settled); the bound only guards against a
/// livelock bug.
const MAX_EFFECTS: usize = 1_000;

/// Refunds `payment` (the caller's, made by attempt `attempt_id`) under the caller's refund
/// `key`, by the rule every keyed operation shares (`crates/rules/src/keyed.rs`): the
/// refund's fingerprint is the caller and the payment, so the key on another payment is a
/// 422; a final key replays; a processing one reads the provider again under its lease.
pub(crate) async fn refund(
    state: &OpsState,
    user: &str,
    key: &IdempotencyKey,
    payment: Payment,
    attempt_id: AttemptId,
) -> AppResult<Reply> {
    let req = refund::Request {
        user: user.to_owned(),
        key: key.clone(),
        payment,
        attempt_id,
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
async fn interpret(state: &OpsState, mut m: ServerRefund) -> AppResult<End> {
    let store = &state.store;
    for _ in 0..MAX_EFFECTS {
        match m.poll(state.clock.now_ms(), &*state.ids) {
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
            Effect::ListRefunds { lease, charge_id } => {
                let refunds = state.provider.refunds_of(charge_id).await;
                if let Err(why) = &refunds {
                    tracing::warn!(refund = %lease.refund_id, %why, "the provider's refunds are unknown; stays processing");
                }
                m.on_refunds(refunds);
            }
            Effect::Refund {
                lease,
                charge_id,
                amount,
            } => {
                let key = &lease.provider_refund_key;
                let outcome = state.provider.refund(charge_id, key, amount).await;
                match &outcome {
                    RefundOutcome::NotAllowed(why) => {
                        tracing::warn!(refund = %lease.refund_id, %why, "provider refuses the refund; reading the charge's refunds")
                    }
                    RefundOutcome::Unknown(why) => {
                        tracing::warn!(refund = %lease.refund_id, %why, "refund outcome unknown; no call until its lease ends")
                    }
                    RefundOutcome::Created(r) if r.status != RefundStatus::Succeeded => {
                        tracing::info!(refund = %lease.refund_id, provider_refund = %r.id, status = ?r.status, "the provider's refund is not final; stays processing")
                    }
                    RefundOutcome::Created(_) => {}
                }
                m.on_refund(outcome);
            }
            Effect::HoldLease { lease, until } => {
                db::hold_lease(store, lease, until).await?;
                m.on_held();
            }
            Effect::Settle { plan, lease, now } => {
                let settled = match db::settle(store, plan, now).await {
                    Ok(settled) => settled,
                    Err(e) => {
                        // The call's outcome is not stored: the next retry reads the
                        // provider's refunds again at once (ours carries our key).
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

fn in_progress(state: &OpsState) -> AppError {
    AppError::refund_in_progress(state.config.retry_after_secs)
}

/// Drives the processing refund `row` without a request (the refund job, a provider refund
/// event): the machine resumed at its lease, so a lease held elsewhere (a live call, or one
/// whose answer was lost) is left alone. What it came to, `None` when the payment is gone.
async fn drive(state: &OpsState, row: db::Processing) -> AppResult<Option<End>> {
    let pool = state.store.pool();
    let Some((payment, attempt_id)) = db::owned_payment(pool, &row.user, &row.payment_id).await?
    else {
        return Ok(None);
    };
    let req = refund::Request {
        user: row.user,
        key: row.key,
        payment,
        attempt_id,
    };
    let m = ServerRefund::resume(req, &row.record, state.policy);
    let end = interpret(state, m).await?;
    match &end {
        End::Refunded(_) => metrics::refund(RefundResult::Refunded),
        End::Failed(_) => metrics::refund(RefundResult::NotAllowed),
        _ => {}
    }
    Ok(Some(end))
}

/// The refund job: drives up to `limit` processing refunds created at or before `before`
/// whose lease has ended at `now` (a pending refund, a crash, a call whose answer was lost).
/// How many it settled.
pub(crate) async fn drive_due(
    state: &OpsState,
    before: i64,
    now: i64,
    limit: i64,
) -> AppResult<usize> {
    let due = db::processing_due(state.store.pool(), before, now, limit).await?;
    let mut settled = 0;
    for row in due {
        let id = row.record.id.clone();
        match drive(state, row).await {
            Ok(Some(End::Refunded(_) | End::Failed(_))) => settled += 1,
            Ok(_) => {}
            Err(e) => tracing::warn!(refund = %id, error = %e, "refund job: driving failed"),
        }
    }
    Ok(settled)
}

/// A provider refund event about `payment_id`: its processing payonce refund, if any, is
/// driven now (the provider says something changed) instead of at the next job round.
pub(crate) async fn drive_payment(state: &OpsState, payment_id: &str) -> AppResult<()> {
    if let Some(row) = db::processing_of_payment(state.store.pool(), payment_id).await? {
        drive(state, row).await?;
    }
    Ok(())
}

/// Marks `payment`, its order and its `attempt` refunded by a refund the provider made (a
/// webhook's, confirmed by the provider's own list), with the audit rows, in one transaction
/// conditional on the payment still being `succeeded`. False: it was not (a duplicate or a
/// race), and nothing changed.
pub(crate) async fn mark_refunded_at_provider(
    state: &OpsState,
    payment: &Payment,
    attempt: &AttemptId,
    reason: &str,
) -> AppResult<bool> {
    let mark = refund::mark_refunded("provider-webhook", payment, attempt, reason);
    Ok(db::mark_refunded(&state.store, &mark, state.clock.now_ms()).await?)
}
