//! `POST /webhooks/stripe`: Stripe's signed, at-least-once events, when the server runs with
//! `--provider stripe` (the HTTP layer, `src/http/stripe_webhooks.rs`, has checked the
//! `Stripe-Signature` already).
//!
//! These event types matter; every other is acknowledged and ignored:
//! - `payment_intent.succeeded`, `payment_intent.payment_failed`: the attempt whose saved
//!   PaymentIntent id is the event's intent is settled through the pay machine's webhook
//!   path ([`pay::settle_from_webhook`]), which asks Stripe for that intent: the event is a
//!   hint, never the evidence. A success for an attempt already settled without a charge
//!   (which the cancel made before every uncharged settle rules out, so this is the
//!   backstop) is read back too and, if Stripe charged it, flagged for review
//!   (src/ops/leftovers.rs);
//! - `charge.refunded`, `refund.updated`, `refund.failed`: a payonce refund of the intent
//!   still processing is driven by the refund machine (it reads Stripe's refunds: a pending
//!   one that succeeded settles it, one that failed ends it `failed`), and a refund made
//!   outside payonce (Stripe's dashboard) is reflected: the payment, its order and its
//!   attempt become `refunded` once Stripe's succeeded refunds return the whole amount.
//!
//! Deduplicated on the event id like the mock's (`src/ops/webhooks.rs`): recorded on arrival,
//! marked handled once applied, and a handled event is a duplicate.
//!
//! Unlike the mock's, an event for an intent no attempt saved is acknowledged (200) and
//! logged. Why that is safe: the adapter saves the intent id in its own write before it
//! confirms the intent (docs/providers.md), and only a confirmed intent succeeds, fails or is
//! refunded, so an unknown intent is not ours (another integration on the same Stripe
//! account) and redelivery would never make it known: a non-2xx answer would only make
//! Stripe retry it for days.

use crate::dev::failpoint;
use crate::error::{AppError, AppResult};
use crate::faults::Failpoint;
use crate::metrics::{self, WebhookResult};
use crate::ops::{leftovers, pay};
use crate::provider::WebhookHint;
use crate::state::AppState;
use crate::store::attempts as db;
use crate::store::orders::get_order;
use crate::store::webhook_events;

/// The event types payonce acts on, as Stripe spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topic {
    /// `payment_intent.succeeded`.
    IntentSucceeded,
    /// `payment_intent.payment_failed`.
    IntentFailed,
    /// `charge.refunded` (a full or partial refund of the intent's charge).
    ChargeRefunded,
    /// `refund.updated` (a refund's status changed, e.g. pending → succeeded).
    RefundUpdated,
    /// `refund.failed` (a refund failed after it was accepted).
    RefundFailed,
}

impl Topic {
    /// Every topic, for exhaustive tests.
    pub(crate) const ALL: [Topic; 5] = [
        Self::IntentSucceeded,
        Self::IntentFailed,
        Self::ChargeRefunded,
        Self::RefundUpdated,
        Self::RefundFailed,
    ];

    /// Stripe's spelling (also what the server stores as the event's type).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::IntentSucceeded => "payment_intent.succeeded",
            Self::IntentFailed => "payment_intent.payment_failed",
            Self::ChargeRefunded => "charge.refunded",
            Self::RefundUpdated => "refund.updated",
            Self::RefundFailed => "refund.failed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// Records an authentic event, applies it unless it was handled before, and marks it
/// handled (see the module docs).
pub(crate) async fn receive(state: AppState, hint: WebhookHint) -> AppResult<()> {
    let Some(topic) = Topic::parse(&hint.kind) else {
        tracing::debug!(event = %hint.event_id, kind = %hint.kind, "Stripe event payonce does not act on, acknowledged");
        return Ok(());
    };
    let (event, intent) = (hint.event_id, hint.intent);
    let (id, now) = (event.clone(), state.clock.now_ms());
    let key = intent.clone();
    let arrived = state
        .store
        .write(async move |tx| webhook_events::arrived(tx, &id, topic.as_str(), &key, now).await);
    if arrived.await? {
        tracing::debug!(%event, "duplicate Stripe webhook acknowledged");
        metrics::webhook_event(WebhookResult::Duplicate);
        return Ok(());
    }
    failpoint(Failpoint::Webhook);
    // In its own task, like pay: Stripe hanging up must not abort a settle halfway.
    let task = tokio::spawn(async move {
        handle(&state, &event, topic, &intent).await?;
        let (id, now) = (event.clone(), state.clock.now_ms());
        let handled = state
            .store
            .write(async move |tx| webhook_events::handled(tx, &id, now).await);
        handled.await?;
        Ok::<_, AppError>(())
    });
    task.await.map_err(AppError::task("Stripe webhook"))??;
    Ok(())
}

async fn handle(state: &AppState, event: &str, topic: Topic, intent: &str) -> AppResult<()> {
    let Some(row) = db::find_by_provider_ref(state.store.pool(), intent).await? else {
        tracing::warn!(%event, %intent, "Stripe event for an intent no attempt saved; acknowledged");
        metrics::webhook_event(WebhookResult::UnknownProviderKey);
        return Ok(());
    };
    if matches!(
        topic,
        Topic::ChargeRefunded | Topic::RefundUpdated | Topic::RefundFailed
    ) {
        return crate::ops::refunds::reflect_provider_refund(state, event, &row, intent).await;
    }
    if row.is_final() {
        // A success for an attempt settled without a charge is never dropped: the intent is
        // read back, and a charge flags the attempt and holds its order (src/ops/leftovers.rs).
        let applied = match topic {
            Topic::IntentSucceeded => leftovers::after_final(state, &row, "", Some(intent)).await,
            _ => Ok(false),
        };
        if let Err(e) = &applied {
            tracing::warn!(%event, %intent, error = %e, "Stripe success for a settled attempt could not be confirmed; deliver it again");
            metrics::webhook_event(WebhookResult::Unconfirmed);
        }
        metrics::webhook_event(match applied? {
            true => WebhookResult::Applied,
            false => WebhookResult::NoEffect,
        });
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
            tracing::info!(%event, attempt = %row.id(), "attempt settled by Stripe webhook");
            metrics::webhook_event(WebhookResult::Applied);
        }
        Some(false) => metrics::webhook_event(WebhookResult::NoEffect),
        None => {
            metrics::webhook_event(WebhookResult::Unconfirmed);
            return Err(AppError::unavailable(
                "Stripe could not confirm this event; deliver it again",
                1,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_round_trip_and_nothing_else_is_one() {
        for t in Topic::ALL {
            assert_eq!(Topic::parse(t.as_str()), Some(t));
        }
        for other in [
            "payment_intent.created",
            "charge.succeeded",
            "",
            "charge.refunded ",
        ] {
            assert_eq!(Topic::parse(other), None, "{other:?}");
        }
    }
}
