//! A provider's signed, at-least-once events, one pipeline for every provider: the route
//! (src/http/webhooks.rs, mounted for the configured provider only) has the adapter turn the
//! delivery into a verified [`Hint`] (`Provider::webhook`: the signature, the body, which
//! attempt it names), then [`receive`]:
//! 1. an event type payonce does not act on is acknowledged, nothing stored;
//! 2. the event id is recorded under its primary key (`store/webhook_events.rs`): an event
//!    already *handled* is a duplicate, acknowledged, nothing applied;
//! 3. the attempt it names is found (by our provider key, or by the provider's object id
//!    saved on it: [`Subject`]) and the event applied:
//!    - a success or a failure settles the attempt through the pay machine's webhook path
//!      ([`pay::settle_from_webhook`]), which asks the provider: the event is a hint, never
//!      the evidence. A success for an attempt already settled without a charge is read
//!      back too and, if the provider charged it, flagged for review (src/ops/leftovers.rs);
//!    - a refund drives the payonce refund of the payment still processing (the refund
//!      machine reads the provider's refunds), then reflects a refund made outside payonce
//!      (the provider's dashboard): the payment, its order and its attempt become `refunded`
//!      once the provider's succeeded refunds return the whole amount ([`reflect_refund`]);
//! 4. the event is marked handled, and only then answered 2xx.
//!
//! [`Verdict`] is what the event came to, known in one place ([`receive`]): the metric, the
//! answer and the journal's verdict entry (with the handled mark, or alone) follow from it. Settling is a conditional update on a processing row, so a
//! duplicate, delayed or reordered event matches nothing. An event the provider cannot
//! confirm now (503), one whose handling failed, and one about an attempt we do not hold
//! whose key may still become ours (404, [`Subject::unknown_may_become_ours`]) stay
//! unhandled: the provider's redelivery is their queue (crates/server/README.md, "Webhooks").

use crate::error::{AppError, AppResult};
use crate::faults::failpoint;
use crate::faults::Failpoint;
use crate::metrics::{self, WebhookResult};
use crate::ops::{leftovers, pay, refunds};
use crate::provider::{Hint, RefundStatus, Subject, Topic};
use crate::state::OpsState;
use crate::store::attempts as db;
use crate::store::journal::Event;
use crate::store::orders::get_order;
use crate::store::payments;
use crate::store::webhook_events;
use payonce_protocol::admin::verdict;
use payonce_protocol::{AttemptStatus, ErrorCode};
use payonce_rules::Record;

/// What an event came to.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A type payonce does not act on: acknowledged, not stored.
    Ignored,
    /// Handled before: acknowledged, not applied again.
    Duplicate,
    /// It changed an attempt, a payment or a refund.
    Applied,
    /// Nothing to apply (settled by someone else, a partial refund, …).
    NoEffect,
    /// No attempt of ours holds what it names.
    Unknown,
    /// The provider could not confirm it now: delivered again.
    Unconfirmed(AppError),
}

impl Verdict {
    /// Whether the event is done with: marked handled, answered 2xx. `subject`: what an
    /// unknown event named.
    fn acknowledged(&self, subject: &Subject) -> bool {
        match self {
            Self::Unknown => !subject.unknown_may_become_ours(),
            Self::Unconfirmed(_) => false,
            Self::Ignored | Self::Duplicate | Self::Applied | Self::NoEffect => true,
        }
    }

    /// Its name in the journal.
    fn wire(&self) -> &'static str {
        match self {
            Self::Ignored => verdict::IGNORED,
            Self::Duplicate => verdict::DUPLICATE,
            Self::Applied => verdict::APPLIED,
            Self::NoEffect => verdict::NO_EFFECT,
            Self::Unknown => verdict::UNKNOWN_OBJECT,
            Self::Unconfirmed(_) => verdict::UNCONFIRMED,
        }
    }

    /// Whether the handled mark journaled it (`store/webhook_events.rs`): an event that
    /// was applied and acknowledged.
    fn journaled_when_handled(&self, subject: &Subject) -> bool {
        !matches!(self, Self::Ignored | Self::Duplicate) && self.acknowledged(subject)
    }

    fn metric(&self) -> Option<WebhookResult> {
        Some(match self {
            Self::Ignored => return None,
            Self::Duplicate => WebhookResult::Duplicate,
            Self::Applied => WebhookResult::Applied,
            Self::NoEffect => WebhookResult::NoEffect,
            Self::Unknown => WebhookResult::UnknownProviderKey,
            Self::Unconfirmed(_) => WebhookResult::Unconfirmed,
        })
    }
}

/// Event `hint` as the journal keeps it, with its verdict.
fn event<'a>(hint: &'a Hint, verdict: &Verdict) -> Event<'a> {
    Event {
        id: &hint.event_id,
        kind: &hint.kind,
        subject: hint.subject.id(),
        verdict: verdict.wire(),
    }
}

/// The provider could not confirm the event now: it delivers it again.
fn unconfirmed() -> Verdict {
    Verdict::Unconfirmed(AppError::unavailable(
        "the provider could not confirm this event; deliver it again",
        1,
    ))
}

/// Records an authentic event, applies it unless it was handled before, and marks it
/// handled (see the module docs). `Ok`: answer 200.
pub(crate) async fn receive(state: OpsState, hint: Hint) -> AppResult<()> {
    let store = state.store.clone();
    let clock = state.clock.clone();
    let verdict = match hint.topic {
        None => Verdict::Ignored,
        Some(topic) => record_and_apply(state, &hint, topic).await?,
    };
    if !verdict.journaled_when_handled(&hint.subject) {
        // Nothing else is written with it: a failure is logged, never the delivery's (the
        // journal explains what happened, it never decides it).
        let e = event(&hint, &verdict);
        if let Err(err) = webhook_events::unhandled(&store, &e, clock.now_ms()).await {
            tracing::warn!(event = %hint.event_id, error = %err, "journal write failed");
        }
    }
    // The one place an event's outcome is known.
    let (event, subject) = (&hint.event_id, hint.subject.id());
    tracing::debug!(%event, kind = %hint.kind, %subject, ?verdict, "webhook received");
    if let Some(m) = verdict.metric() {
        metrics::webhook_event(m);
    }
    let acknowledged = verdict.acknowledged(&hint.subject);
    match verdict {
        Verdict::Unconfirmed(e) => Err(e),
        Verdict::Unknown if !acknowledged => {
            // Not acknowledged: the provider redelivers (see `Subject::Key`).
            Err(AppError::detail(
                ErrorCode::PaymentNotFound,
                "no payment attempt owns this provider key (yet); deliver the event again later",
            ))
        }
        _ => Ok(()),
    }
}

/// Steps 2–4 of the module docs.
async fn record_and_apply(state: OpsState, hint: &Hint, topic: Topic) -> AppResult<Verdict> {
    let now = state.clock.now_ms();
    let about = (
        hint.event_id.as_str(),
        hint.kind.as_str(),
        hint.subject.id(),
    );
    if webhook_events::arrived(&state.store, about, now).await? {
        return Ok(Verdict::Duplicate);
    }
    failpoint(Failpoint::Webhook);
    // In its own task, like pay: a provider that hangs up must not abort a settle halfway.
    let hint = hint.clone();
    // The task keeps the delivery's journal scope: its decisions and provider calls are the
    // webhook's.
    let task = tokio::spawn(crate::journal::carry(async move {
        let verdict = apply(&state, &hint, topic).await?;
        if verdict.acknowledged(&hint.subject) {
            let now = state.clock.now_ms();
            webhook_events::handled(&state.store, &event(&hint, &verdict), now).await?;
        }
        Ok::<_, AppError>(verdict)
    }));
    task.await.map_err(AppError::task("webhook"))?
}

/// Applies a recorded event to the attempt it names.
async fn apply(state: &OpsState, hint: &Hint, topic: Topic) -> AppResult<Verdict> {
    let pool = state.store.pool();
    let record = match &hint.subject {
        Subject::Key(key) => db::find_by_provider_key(pool, key).await?,
        Subject::Saved(id) => db::find_by_provider_ref(pool, id).await?,
    };
    let Some(record) = record else {
        tracing::warn!(event = %hint.event_id, subject = %hint.subject.id(), "webhook about an attempt we do not hold");
        return Ok(match topic {
            // A refund of a charge no payment of ours holds is nothing to apply.
            Topic::Refund if hint.subject.unknown_may_become_ours() => Verdict::NoEffect,
            _ => Verdict::Unknown,
        });
    };
    match topic {
        Topic::Refund => reflect_refund(state, &hint.event_id, &record).await,
        Topic::Succeeded | Topic::Failed if record.is_final() => {
            after_final(state, hint, topic, &record).await
        }
        Topic::Succeeded | Topic::Failed => settle(state, &hint.event_id, &record).await,
    }
}

/// A success for an attempt settled without a charge is never dropped: the provider is asked,
/// and a charge flags the attempt and holds its order (src/ops/leftovers.rs).
async fn after_final<S: Sync>(
    state: &S,
    hint: &Hint,
    topic: Topic,
    record: &Record,
) -> AppResult<Verdict>
where
    crate::state::Ledgers: axum::extract::FromRef<S>,
{
    if topic != Topic::Succeeded {
        return Ok(Verdict::NoEffect);
    }
    let (key, saved) = match &hint.subject {
        Subject::Key(key) => (key.as_str(), None),
        Subject::Saved(id) => ("", Some(id.as_str())),
    };
    Ok(
        match leftovers::after_final(state, record, key, saved).await {
            Ok(true) => Verdict::Applied,
            Ok(false) => Verdict::NoEffect,
            Err(e) => {
                tracing::warn!(event = %hint.event_id, error = %e, "a success for a settled attempt could not be confirmed; deliver it again");
                Verdict::Unconfirmed(e)
            }
        },
    )
}

/// Settles `record`, processing, from what the provider answers for it.
async fn settle(state: &OpsState, event: &str, record: &Record) -> AppResult<Verdict> {
    let pool = state.store.pool();
    let Some(order) = get_order(pool, record.order_id(), record.user()).await? else {
        return Err(AppError::internal(format!(
            "attempt {} has no order",
            record.id()
        )));
    };
    Ok(
        match pay::settle_from_webhook(state, record, &order).await? {
            Some(true) => {
                tracing::info!(%event, attempt = %record.id(), "attempt settled by webhook");
                Verdict::Applied
            }
            Some(false) => Verdict::NoEffect,
            None => unconfirmed(),
        },
    )
}

/// A refund event about `record`'s payment: a payonce refund of it still processing is
/// driven now (the provider says something changed) instead of at the next job round; then
/// a refund made outside payonce (the provider's dashboard) is reflected, so the order does
/// not stay `paid`. Like every event a hint only: the payment, its order and its attempt
/// become `refunded` once the provider's succeeded refunds return the whole amount (a
/// pending one counts once it succeeds), in one transaction conditional on the payment still
/// being `succeeded` (a duplicate or a race changes nothing). A partial refund changes
/// nothing (the payment stays `succeeded`; a payonce refund then returns the remainder).
async fn reflect_refund(state: &OpsState, event: &str, record: &Record) -> AppResult<Verdict> {
    let pool = state.store.pool();
    let Some(payment_id) = payments::payment_of_attempt(pool, record.id()).await? else {
        return Ok(Verdict::NoEffect); // not paid (yet)
    };
    refunds::drive_payment(state, &payment_id).await?;
    let payment = payments::get_payment(pool, &payment_id).await?;
    let Some(payment) = payment.filter(|p| p.status == AttemptStatus::Succeeded) else {
        return Ok(Verdict::NoEffect); // refunded already
    };
    let refunds = match state.provider.refunds_of(&payment.charge_id).await {
        Ok(list) => list,
        Err(why) => {
            tracing::warn!(%event, %why, "the provider could not confirm a refund");
            return Ok(unconfirmed());
        }
    };
    let refunded: i64 = refunds
        .iter()
        .filter(|r| r.status == RefundStatus::Succeeded)
        .map(|r| r.amount)
        .sum();
    if refunded < payment.amount {
        tracing::info!(%event, payment = %payment.id, refunded, amount = payment.amount,
            "not refunded in full at the provider: the payment stays succeeded");
        return Ok(Verdict::NoEffect);
    }
    let reason = format!(
        "refunded at the provider (charge {}), event {event}",
        payment.charge_id
    );
    let moved = refunds::mark_refunded_at_provider(state, &payment, record.id(), &reason);
    Ok(match moved.await? {
        true => {
            tracing::info!(%event, payment = %payment.id, "refund made at the provider reflected");
            Verdict::Applied
        }
        false => Verdict::NoEffect,
    })
}
