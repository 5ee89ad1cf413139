//! `POST /orders/{id}/payment-attempts/cancel` with `{key}` in the body (never the URL, so
//! keys stay out of access logs): the cancel table of docs/protocol.md, section 9.
//!
//! The tombstone and a late pay race for one unique slot: whichever inserts first wins, so a
//! pay that arrives after the cancel can never charge. The order is read after the insert,
//! in its transaction: a charge under the key that settled before it shows as a paid order,
//! and then the payment's provider key decides ([`plan::cancel_from_store`]); only when the
//! store does not know it is the provider asked ([`plan::cancel_forgotten`]), and that lookup
//! spends a tombstone token first, so a loop of fresh keys cannot spend the merchant's
//! provider quota.

use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::store;
use crate::store::attempts as db;
use crate::store::cancel::Tombstoned;
use crate::store::orders::OrderRow;
use crate::store::payments::{get_payment, paid_with, payment_of_attempt};
use payonce_protocol::{AttemptStatus, CancelResponse, IdempotencyKey, Payment};
use payonce_rules::flow::End;
use payonce_rules::ids::AttemptId;
use payonce_rules::keyed::PAY;
use payonce_rules::policy::Bucket;
use payonce_rules::{plan, provider_key, Record};

/// The cancel table for the caller's `key` on `order` (already checked to be theirs).
pub(crate) async fn cancel(
    state: &AppState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
) -> AppResult<CancelResponse> {
    let now = state.clock.now_ms();
    let id = AttemptId::mint(&*state.ids).into();
    let (tombstone, entry) =
        plan::plan_tombstone(user, &order.id, order.version, id, now, &state.policy);
    // Inserts the tombstone; the first insert only while the order is unpaid.
    // `spend`: take a tombstone token before the commit (false when the lookup before it
    // took one): only a cancel that keeps a tombstone (or asks the provider) spends one.
    let insert = |unless_paid: bool, spend: bool| {
        let (limits, owner) = (state.limits.clone(), user.to_owned());
        let before_commit = move || match spend {
            true => limits.check(Bucket::Tombstones, &owner),
            false => Ok::<_, AppError>(()),
        };
        let k = key.as_str();
        store::cancel::tombstone(
            &state.store,
            &tombstone,
            &entry,
            k,
            now,
            unless_paid,
            before_commit,
        )
    };
    let cancelled = CancelResponse {
        status: AttemptStatus::Cancelled,
        payment: None,
    };
    match insert(true, true).await? {
        Tombstoned::Inserted => return Ok(cancelled),
        Tombstoned::KeyTaken => {}
        Tombstoned::OrderPaid(current) => {
            let id = current.and_then(|o| o.payment_id);
            let paid = match &id {
                Some(id) => paid_with(state.store.pool(), id).await?,
                None => None,
            };
            let payment = payment(state, id).await?;
            let pk = provider_key(user, key, &order.id);
            let (answer, spent) =
                match plan::cancel_from_store(&pk, paid.as_deref(), payment.clone()) {
                    Some(answer) => (answer, false),
                    None => {
                        state.limits.check(Bucket::Tombstones, user)?;
                        // A payment without its key is older than the column, and so is the
                        // key that paid it: unscoped.
                        let legacy = PAY.legacy_provider_key(user, key);
                        let lookup = state.provider.lookup(&legacy, None).await;
                        (plan::cancel_forgotten(lookup, payment), true)
                    }
                };
            if answer.status != AttemptStatus::Cancelled {
                return Ok(answer);
            }
            // Never charged, and the paid order refuses it: the tombstone makes a late
            // pay's answer ATTEMPT_CANCELLED, as for any cancelled key.
            insert(false, !spent).await?;
            return Ok(answer);
        }
    }
    // The slot is taken; it cannot be freed, so reading it now is safe.
    let record = db::find(state.store.pool(), user, key.as_str())
        .await?
        .ok_or_else(|| AppError::internal("attempt vanished after a unique conflict"))?;
    let (mut status, mut with_payment) = plan::cancel_answer(&record, &order.id)?;
    // Nobody holds the lease: ask the provider as a retry would, never charging. A payment
    // waiting for the customer's action is cancelled there; a finished charge is settled;
    // no charge or no answer leaves the attempt processing (docs/protocol.md, section 9).
    if let Record::Processing(p) = &record {
        if p.locked_until.is_none_or(|t| t <= state.clock.now_ms()) {
            if let End::Settled(f) =
                crate::ops::pay::cancel_waiting(state, &record, order, user).await?
            {
                status = f.status;
                with_payment = status == AttemptStatus::Succeeded;
            }
        }
    }
    let id = match with_payment {
        true => payment_of_attempt(state.store.pool(), record.id()).await?,
        false => None,
    };
    let payment = payment(state, id).await?;
    Ok(CancelResponse { status, payment })
}

async fn payment(state: &AppState, id: Option<String>) -> AppResult<Option<Payment>> {
    Ok(match id {
        Some(id) => get_payment(state.store.pool(), &id).await?,
        None => None,
    })
}
