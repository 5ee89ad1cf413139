//! `POST /payments/{id}/refund` with its own `Idempotency-Key`: a succeeded payment is
//! refunded once, through the provider's refund with a provider refund key derived from
//! (user, refund key), so retries and races at any step reach the provider as one refund.
//!
//! | the caller's refund key is | we do |
//! |---|---|
//! | used for another payment | 422 `KEY_REUSED_WITH_DIFFERENT_DETAILS` |
//! | final | replay the stored answer byte for byte (`Idempotent-Replayed: true`) |
//! | processing | call the provider again with the same refund key (it deduplicates) |
//! | new, payment succeeded and not being refunded | claim it (unique slots), then call |
//! | new, otherwise | 409 `REFUND_NOT_ALLOWED` |
//!
//! A provider that cannot be reached leaves the refund processing: 409 `IN_PROGRESS` with
//! `Retry-After`, and the retry calls again with the same key.

use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::provider::RefundOutcome;
use crate::reply::Reply;
use crate::state::AppState;
use crate::store::audit::{self, Entry};
use crate::store::refunds::{self as db, NewRefund, RefundRow};
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, Payment, RefundResponse};
use payonce_rules::keyed::{self, NextAction, Stored, REFUND};
use payonce_rules::Answer;

/// Refunds `payment` (the caller's) under the caller's refund `key`, by the rule every keyed
/// operation shares (`crates/rules/src/keyed.rs`): the refund's fingerprint is the caller and
/// the payment, so the key on another payment is a 422; a final key replays; a processing one
/// (refunds take no lease) calls the provider again with the same refund key.
pub(crate) async fn run(
    state: &AppState,
    user: &str,
    key: &IdempotencyKey,
    payment: Payment,
    attempt_id: &str,
) -> AppResult<Reply> {
    let pool = state.store.pool();
    let fp = REFUND.fingerprint(&[user, &payment.id]);
    // Each turn ends or observes someone else's progress (a row appeared or was settled).
    for _ in 0..100 {
        let row = db::find(pool, user, key.as_str()).await?;
        let answer = row.as_ref().and_then(RefundRow::answer);
        let stored_fp = row
            .as_ref()
            .map(|r| REFUND.fingerprint(&[user, &r.payment_id]));
        let stored = stored_fp.as_deref().map(|fingerprint| match &answer {
            Some(answer) => Stored::Final {
                fingerprint,
                status: AttemptStatus::Refunded,
                answer,
            },
            None => Stored::Processing {
                fingerprint,
                locked_until: None,
            },
        });
        match keyed::decide(
            stored,
            Some(&fp),
            user,
            &payment.id,
            state.clock.now_ms(),
            false,
        ) {
            NextAction::Mismatch(_) => {
                return Err(AppError::detail(
                    ErrorCode::KeyReusedWithDifferentDetails,
                    "this refund key was used for another payment",
                ));
            }
            NextAction::Replay(answer) => {
                metrics::refund(metrics::RefundResult::Replayed);
                return Ok(Reply::replay(answer));
            }
            NextAction::StartProcessing => {
                if payment.status != AttemptStatus::Succeeded {
                    return Err(not_allowed("the payment is not in a refundable state"));
                }
                let new = NewRefund {
                    id: format!("rfd_{}", uuid::Uuid::new_v4().simple()),
                    user: user.to_owned(),
                    key: key.as_str().to_owned(),
                    payment_id: payment.id.clone(),
                    provider_refund_key: REFUND.provider_key(user, key),
                    now: state.clock.now_ms(),
                };
                let insert = state
                    .store
                    .write(async move |tx| db::insert_processing(tx, &new).await);
                if !insert.await? && db::find(pool, user, key.as_str()).await?.is_none() {
                    // Not our key's slot: the payment's one refund belongs to another key.
                    return Err(not_allowed(
                        "this payment is already refunded or being refunded",
                    ));
                }
            }
            _ => {
                let Some(row) = &row else { continue };
                if let Some(answer) = drive(state, row, &payment, attempt_id).await? {
                    return Ok(answer);
                }
            }
        }
    }
    Err(AppError::internal("refund decision did not converge"))
}

fn not_allowed(detail: &str) -> AppError {
    metrics::refund(metrics::RefundResult::NotAllowed);
    AppError::detail(ErrorCode::RefundNotAllowed, detail)
}

/// Calls the provider with the saved refund key and stores the outcome. `None`: someone
/// else stored it first; the caller replays theirs.
async fn drive(
    state: &AppState,
    row: &RefundRow,
    payment: &Payment,
    attempt_id: &str,
) -> AppResult<Option<Reply>> {
    let refund = match state
        .provider
        .refund(&payment.charge_id, &row.provider_refund_key)
        .await
    {
        RefundOutcome::Refunded(r) => r,
        RefundOutcome::NotAllowed(why) => {
            tracing::warn!(refund = %row.id, %why, "provider refuses the refund");
            return Err(not_allowed("the provider refuses to refund this charge"));
        }
        RefundOutcome::Unknown(why) => {
            tracing::warn!(refund = %row.id, %why, "refund outcome unknown; stays processing");
            metrics::refund(metrics::RefundResult::InProgress);
            return Err(AppError::with(ErrorCode::InProgress, |p| {
                p.detail = Some("the refund is in progress; retry with the same key".into());
                p.retry_after = Some(state.config.retry_after_secs);
            }));
        }
    };
    let body = serde_json::to_string(&RefundResponse {
        payment: Payment {
            status: AttemptStatus::Refunded,
            ..payment.clone()
        },
        refund_id: refund.id.clone(),
    })
    .map_err(|e| AppError::internal(e.to_string()))?;
    let now = state.clock.now_ms();
    let expires = state.policy.expires_at(now);
    let reason = format!(
        "provider refund {} of charge {}",
        refund.id, payment.charge_id
    );
    let entries = [
        ("payment", payment.id.as_str(), "succeeded"),
        ("order", payment.order_id.as_str(), "paid"),
    ]
    .map(|(entity, id, from)| Entry::new("system", entity, id, Some(from), "refunded", &reason));
    let (rid, attempt, payment, answer) = (
        row.id.clone(),
        attempt_id.to_owned(),
        payment.clone(),
        body.clone(),
    );
    let finish = state.store.write(async move |tx| {
        if !db::finish(&mut *tx, &rid, &refund.id, 200, &answer, now, expires).await? {
            return Ok(false);
        }
        db::mark_refunded(tx, &payment.id, &payment.order_id, &attempt, now).await?;
        for entry in &entries {
            audit::record(&mut *tx, entry, now).await?;
        }
        Ok::<_, sqlx::Error>(true)
    });
    if !finish.await? {
        return Ok(None);
    }
    metrics::refund(metrics::RefundResult::Refunded);
    Ok(Some(Reply::fresh(Answer { status: 200, body })))
}
