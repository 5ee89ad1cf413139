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

use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::provider::RefundOutcome;
use crate::reply::Reply;
use crate::state::AppState;
use crate::store::audit::{self, Entry};
use crate::store::refunds::{self as db, NewRefund, RefundRow};
use crate::store::{take_lease as take, Leased};
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, Payment, RefundResponse};
use payonce_rules::keyed::{self, NextAction, Stored, REFUND};
use payonce_rules::plan::{self, RefusedRefund};
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
        let failed = row.as_ref().is_some_and(|r| r.status == "failed");
        let stored = stored_fp.as_deref().map(|fingerprint| match &answer {
            Some(answer) => Stored::Final {
                fingerprint,
                status: match failed {
                    true => AttemptStatus::Failed,
                    false => AttemptStatus::Refunded,
                },
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
                    provider_refund_key: REFUND.provider_key(user, key, &payment.id),
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
                let Some(lease) = take_lease(state, row).await? else {
                    // Another request is calling the provider for this refund right now.
                    metrics::refund(metrics::RefundResult::InProgress);
                    return Err(in_progress(state));
                };
                let driven = drive(state, row, &payment, attempt_id).await;
                if !matches!(driven, Ok(Some(_))) {
                    let (id, token) = (row.id.clone(), lease);
                    let release = state
                        .store
                        .write(async move |tx| db::release_lease(tx, &id, &token).await);
                    release.await?;
                }
                if let Some(answer) = driven? {
                    return Ok(answer);
                }
            }
        }
    }
    Err(AppError::internal("refund decision did not converge"))
}

/// Takes the processing refund's lease for one provider call: its token, or `None` while
/// another request holds it. One caller at a time, so a provider that ignores the refund
/// key still sees one refund call per turn, and the adapter's read-back
/// (`src/provider/stripe.rs`, `refund`) sees what the previous turn made.
async fn take_lease(state: &AppState, row: &RefundRow) -> AppResult<Option<String>> {
    let now = state.clock.now_ms();
    let (id, token) = (row.id.clone(), uuid::Uuid::new_v4().to_string());
    let until = state.policy.lease_until(now);
    let t = token.clone();
    let take = state
        .store
        .write(async move |tx| take(tx, Leased::Refunds, &id, &t, now, until).await);
    Ok(take.await?.then_some(token))
}

fn in_progress(state: &AppState) -> AppError {
    AppError::with(ErrorCode::InProgress, |p| {
        p.detail = Some("the refund is in progress; retry with the same key".into());
        p.retry_after = Some(state.config.retry_after_secs);
    })
}

/// The provider refused the refund and nothing was refunded: the key ends `failed` with a
/// 409 `REFUND_NOT_ALLOWED` to replay, and the payment's refund slot frees (a new key may
/// try again). `None`: someone else finished the row first.
async fn fail(state: &AppState, row: &RefundRow, payment: &Payment) -> AppResult<Option<Reply>> {
    let problem = payonce_protocol::Problem::new(ErrorCode::RefundNotAllowed)
        .with_detail("the provider refused to refund this charge; nothing was refunded");
    let answer = Answer {
        status: problem.status,
        body: plan::problem_body(&problem),
    };
    let now = state.clock.now_ms();
    let expires = state.policy.expires_at(now);
    let entry = Entry::new(
        "system",
        "payment",
        &payment.id,
        Some("succeeded"),
        "succeeded",
        &format!(
            "refund {} refused by the provider; nothing refunded",
            row.id
        ),
    );
    let (id, stored) = (row.id.clone(), answer.clone());
    let failed = state.store.write(async move |tx| {
        if !db::fail(&mut *tx, &id, &stored, now, expires).await? {
            return Ok(false);
        }
        audit::record(&mut *tx, &entry, now).await?;
        Ok::<_, sqlx::Error>(true)
    });
    if !failed.await? {
        return Ok(None);
    }
    metrics::refund(metrics::RefundResult::NotAllowed);
    Ok(Some(Reply::fresh(answer)))
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
            tracing::warn!(refund = %row.id, %why, "provider refuses the refund; reading the charge's refunds");
            let refunds = state.provider.refunds_of(&payment.charge_id).await;
            match plan::refused_refund(refunds) {
                RefusedRefund::RefundedElsewhere(r) => {
                    tracing::info!(refund = %row.id, provider_refund = %r.id, "the charge was refunded elsewhere; recorded");
                    r
                }
                RefusedRefund::Failed => return fail(state, row, payment).await,
                RefusedRefund::Unknown => {
                    metrics::refund(metrics::RefundResult::InProgress);
                    return Err(in_progress(state));
                }
            }
        }
        RefundOutcome::Unknown(why) => {
            tracing::warn!(refund = %row.id, %why, "refund outcome unknown; stays processing");
            metrics::refund(metrics::RefundResult::InProgress);
            return Err(in_progress(state));
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
        if db::mark_refunded(&mut *tx, &payment.id, &payment.order_id, &attempt, now).await? {
            for entry in &entries {
                audit::record(&mut *tx, entry, now).await?;
            }
        }
        Ok::<_, sqlx::Error>(true)
    });
    if !finish.await? {
        return Ok(None);
    }
    metrics::refund(metrics::RefundResult::Refunded);
    Ok(Some(Reply::fresh(Answer { status: 200, body })))
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
            return Err(AppError::with(ErrorCode::StoreUnavailable, |p| {
                p.detail =
                    Some("the provider could not confirm this refund; deliver it again".into());
                p.retry_after = Some(1);
            }));
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
    let now = state.clock.now_ms();
    let entries = [
        ("payment", payment.id.as_str(), "succeeded"),
        ("order", payment.order_id.as_str(), "paid"),
    ]
    .map(|(entity, id, from)| {
        Entry::new(
            "provider-webhook",
            entity,
            id,
            Some(from),
            "refunded",
            reason,
        )
    });
    let (attempt, p) = (attempt.to_owned(), payment.clone());
    let moved = state.store.write(async move |tx| {
        if !db::mark_refunded(&mut *tx, &p.id, &p.order_id, &attempt, now).await? {
            return Ok(false);
        }
        for entry in &entries {
            audit::record(&mut *tx, entry, now).await?;
        }
        Ok::<_, sqlx::Error>(true)
    });
    Ok(moved.await?)
}
