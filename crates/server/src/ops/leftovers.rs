//! Nothing confirmable outlives its attempt: the I/O shell of the rules' leftover decisions
//! (`payonce_rules::plan::{after_leftover_cancel, plan_stray}`).
//!
//! A declined two-phase payment (a Stripe PaymentIntent back in `requires_payment_method`)
//! is one the customer's page could still confirm with another card: it holds the intent's
//! client secret. The pay machine has it cancelled before the attempt settles uncharged
//! ([`cancel`], `Effect::CancelLeftover`) and reads it back; a cancel that fails leaves the
//! attempt processing (its saved intent id is the durable record), and the next retry or job
//! cancels again.
//!
//! A success reported for an attempt that settled without a charge anyway (a provider
//! event, [`after_final`]) is never dropped: read back from the provider, and if it charged,
//! logged at error, the attempt flagged for review, its order held (new keys refused with 409
//! `ORDER_UNDER_REVIEW`) and counted (`payonce_leftover_payments_total{result="flagged"}`).

use crate::error::{AppError, AppResult};
use crate::metrics::{self, LeftoverResult};
use crate::provider::Provider;
use crate::state::Ledgers;
use crate::store;
use axum::extract::FromRef;
use payonce_protocol::AttemptStatus;
use payonce_rules::plan::{self, Leftover, Lookup, Stray};
use payonce_rules::{Processing, Record};

/// Cancels attempt `a`'s uncharged payment object at the provider (idempotent: the cancel
/// has its own idempotency key, and cancelling a canceled object changes nothing), then
/// returns the object as the provider holds it.
pub(crate) async fn cancel(provider: &Provider, a: &Processing) -> Lookup {
    let lookup = provider
        .cancel_uncharged(&a.provider_key, a.provider_ref.as_deref())
        .await;
    match plan::leftover(lookup.clone()) {
        Leftover::Cancelled => {
            tracing::info!(attempt = %a.id, "the uncharged payment is cancelled at the provider");
            metrics::leftover(LeftoverResult::Cancelled);
        }
        Leftover::Charged(c) => {
            tracing::warn!(attempt = %a.id, payment = %c.id, "the declined payment was confirmed by the customer meanwhile; settled as charged");
            metrics::leftover(LeftoverResult::ChargedMeanwhile);
        }
        Leftover::Confirmable(why) | Leftover::Unknown(why) => {
            tracing::warn!(attempt = %a.id, %why, "the uncharged payment is not cancelled yet; the attempt stays processing and is cancelled again");
            metrics::leftover(LeftoverResult::Retried);
        }
    }
    lookup
}

/// A provider event says the payment of `row`, a final attempt, succeeded (`provider_key`,
/// `provider_ref`: how the provider finds it). For an attempt settled without a charge the
/// provider is asked (the event is a hint) and a charge is flagged ([`Stray`]). True when
/// the event had an effect; `Err` when the provider could not tell (deliver it again).
pub(crate) async fn after_final<S: Sync>(
    state: &S,
    row: &Record,
    provider_key: &str,
    provider_ref: Option<&str>,
) -> AppResult<bool>
where
    Ledgers: FromRef<S>,
{
    let state = &Ledgers::from_ref(state);
    let Record::Final(f) = row else {
        return Ok(false);
    };
    if matches!(f.status, AttemptStatus::Succeeded | AttemptStatus::Refunded) {
        return Ok(false);
    }
    let lookup = state.provider.lookup(provider_key, provider_ref).await;
    let (charge, entry) = match plan::plan_stray(&f.id, f.status, lookup) {
        Stray::Nothing => return Ok(false),
        Stray::Unknown(why) => {
            tracing::warn!(attempt = %f.id, %why, "a success reported for a settled attempt could not be read back");
            return Err(AppError::unavailable(
                "the provider could not confirm this event; deliver it again",
                1,
            ));
        }
        Stray::Flag { charge, audit } => (charge, audit),
    };
    let now = state.clock.now_ms();
    let order = &f.terms.order_id;
    if !store::pay::flag_stray(&state.store, &f.id, order, &entry, now).await? {
        return Ok(false);
    }
    tracing::error!(attempt = %f.id, %order, payment = %charge.id, amount = charge.amount, status = %f.status.as_str(), "a payment succeeded at the provider for an attempt settled without a charge; attempt flagged for review, order held");
    metrics::leftover(LeftoverResult::Flagged);
    Ok(true)
}
