//! `POST /webhooks/provider`: the provider's signed, at-least-once event stream.
//!
//! An event is only a hint that an attempt may be settled. The handler:
//! 1. checks the `Payonce-Signature` (HMAC with the shared secret, timestamp within a
//!    tolerance): bad or stale → 400, nothing stored;
//! 2. records the event id under its primary key (the unique index deduplicates); an event
//!    already *handled* is a duplicate: acknowledged, nothing applied;
//! 3. links the event to our attempt through the provider key, and settles that attempt
//!    from what the provider itself answers for the key ([`pay::settle_from_webhook`]);
//! 4. marks the event handled, and only then answers 2xx.
//!
//! `charge.refunded`, `refund.updated`, `refund.failed` (our refund, or one made in the
//! provider's dashboard) drive a payonce refund of the charge still processing, and mark the
//! payment refunded once the provider's succeeded refunds return it all ([`refunded`]).
//!
//! Settling is a conditional update on a processing row, so a duplicate, delayed or
//! reordered event matches nothing. An event for a provider key no attempt owns (404), one
//! the provider cannot confirm now (503) and one whose handling crashed stay unhandled, and
//! the provider's at-least-once redelivery is their queue: our claim commits the attempt
//! before the provider is called, so an unknown key is a commit not yet visible or not
//! ours (crates/server/README.md, "Webhooks").

use crate::dev::failpoint;
use crate::error::{AppError, AppResult};
use crate::faults::Failpoint;
use crate::metrics;
use crate::ops::pay;
use crate::provider::RefundStatus;
use crate::state::AppState;
use crate::store::attempts as db;
use crate::store::orders::get_order;
use crate::store::refunds;
use crate::store::webhook_events;
use payonce_protocol::provider::{EventType, WebhookEvent};
use payonce_protocol::{AttemptStatus, ErrorCode};

/// `charge.refunded`: the charge was refunded, by our refund call or elsewhere (the
/// provider's dashboard). A hint like any event: only the provider's own list of the
/// charge's refunds marks the payment, its order and its attempt refunded, once, audited.
/// A charge no payment of ours holds is nothing to apply.
async fn refunded(state: &AppState, event: &WebhookEvent) -> AppResult<()> {
    let pool = state.store.pool();
    let Some((payment, attempt)) = refunds::payment_of_charge(pool, &event.charge.id).await? else {
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    };
    // A payonce refund of the payment still processing reads the provider now.
    crate::ops::refunds::drive_payment(state, &payment.id).await?;
    let payment = match crate::store::payments::get_payment(pool, &payment.id).await? {
        Some(p) if p.status == AttemptStatus::Succeeded => p,
        _ => {
            metrics::webhook_event(metrics::WebhookResult::NoEffect);
            return Ok(());
        }
    };
    let refunds = match state.provider.refunds_of(&payment.charge_id).await {
        Ok(list) => list,
        Err(why) => {
            tracing::warn!(event = %event.id, %why, "cannot confirm a refund event");
            metrics::webhook_event(metrics::WebhookResult::Unconfirmed);
            return Err(AppError::unavailable(
                "the provider could not confirm this event; deliver it again",
                1,
            ));
        }
    };
    // Only succeeded refunds that return the whole payment make it refunded.
    let succeeded: Vec<_> = refunds
        .iter()
        .filter(|r| r.status == RefundStatus::Succeeded)
        .collect();
    let refunded: i64 = succeeded.iter().map(|r| r.amount).sum();
    let Some(refund) = succeeded.first().filter(|_| refunded >= payment.amount) else {
        metrics::webhook_event(metrics::WebhookResult::NoEffect);
        return Ok(());
    };
    let reason = format!(
        "provider refund {} of charge {} (charge.refunded)",
        refund.id, payment.charge_id
    );
    let applied =
        crate::ops::refunds::mark_refunded_at_provider(state, &payment, &attempt, &reason);
    let result = match applied.await? {
        true => metrics::WebhookResult::Applied,
        false => metrics::WebhookResult::NoEffect,
    };
    metrics::webhook_event(result);
    Ok(())
}

/// Records an authentic event, applies it unless it was handled before, and marks it
/// handled (see the module docs).
pub(crate) async fn receive(state: AppState, event: WebhookEvent) -> AppResult<()> {
    let kind = event.event_type.as_str();
    let (id, key, now) = (
        event.id.clone(),
        event.charge.provider_key.clone(),
        state.clock.now_ms(),
    );
    let arrived = state
        .store
        .write(async move |tx| webhook_events::arrived(tx, &id, kind, &key, now).await);
    if arrived.await? {
        tracing::debug!(event = %event.id, "duplicate webhook acknowledged");
        metrics::webhook_event(metrics::WebhookResult::Duplicate);
        return Ok(());
    }
    failpoint(Failpoint::Webhook);
    // In its own task, like pay: a provider that hangs up must not abort a settle.
    let task = tokio::spawn(async move {
        handle(&state, &event).await?;
        let (id, now) = (event.id.clone(), state.clock.now_ms());
        let handled = state
            .store
            .write(async move |tx| webhook_events::handled(tx, &id, now).await);
        handled.await?;
        Ok::<_, AppError>(())
    });
    task.await.map_err(AppError::task("webhook"))??;
    Ok(())
}

async fn handle(state: &AppState, event: &WebhookEvent) -> AppResult<()> {
    if matches!(
        event.event_type,
        EventType::ChargeRefunded | EventType::RefundUpdated | EventType::RefundFailed
    ) {
        return refunded(state, event).await;
    }
    let Some(row) =
        db::find_by_provider_key(state.store.pool(), &event.charge.provider_key).await?
    else {
        // Not acknowledged: the provider redelivers (see the module docs for why).
        tracing::warn!(event = %event.id, "webhook for a provider key no attempt owns (yet)");
        metrics::webhook_event(metrics::WebhookResult::UnknownProviderKey);
        return Err(AppError::detail(
            ErrorCode::PaymentNotFound,
            "no payment attempt owns this provider key (yet); deliver the event again later",
        ));
    };
    if row.is_final() {
        // As for Stripe's events (src/ops/leftovers.rs): a success for an attempt settled
        // without a charge is read back from the provider and flagged, never dropped.
        if event.event_type == EventType::ChargeSucceeded {
            let pk = &event.charge.provider_key;
            if crate::ops::leftovers::after_final(state, &row, pk, None).await? {
                metrics::webhook_event(metrics::WebhookResult::Applied);
            }
        }
        return Ok(());
    }
    let Some(order) = get_order(state.store.pool(), row.order_id(), row.user()).await? else {
        return Err(AppError::internal(format!(
            "attempt {} has no order",
            row.id()
        )));
    };
    match pay::settle_from_webhook(state, &row, &order).await? {
        Some(true) => {
            tracing::info!(event = %event.id, attempt = %row.id(), "attempt settled by webhook");
            metrics::webhook_event(metrics::WebhookResult::Applied);
        }
        Some(false) => metrics::webhook_event(metrics::WebhookResult::NoEffect),
        None => {
            metrics::webhook_event(metrics::WebhookResult::Unconfirmed);
            return Err(AppError::unavailable(
                "the provider could not confirm this event; deliver it again",
                1,
            ));
        }
    }
    Ok(())
}
