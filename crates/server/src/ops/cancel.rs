//! `POST /orders/{id}/payment-attempts/cancel` with `{key}` in the body (never the URL, so
//! keys stay out of access logs): the I/O shell of the cancel machine
//! [`payonce_rules::cancel::ServerCancel`], which decides every step of the cancel table of
//! docs/protocol.md, section 9 (the tombstone, the token spent before any provider call,
//! the lookup, the answer); [`cancel`] performs each effect it asks for and feeds the result
//! back.

use crate::error::{AppError, AppResult};
use crate::state::OpsState;
use crate::store;
use crate::store::attempts as db;
use crate::store::orders::OrderRow;
use crate::store::payments::{get_payment, paid_with, payment_of_attempt};
use payonce_protocol::{CancelResponse, IdempotencyKey, Payment};
use payonce_rules::cancel::{Effect, ServerCancel};
use payonce_rules::ids::PaymentId;
use payonce_rules::pay::End;
use payonce_rules::policy::Bucket;

/// Effects one cancel may ask for: it asks for at most eight; the bound only guards against
/// a livelock bug.
const MAX_EFFECTS: usize = 16;

/// The cancel table for the caller's `key` on `order` (already checked to be theirs).
pub(crate) async fn cancel(
    state: &OpsState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
) -> AppResult<CancelResponse> {
    let now = state.clock.now_ms();
    let at = (&order.id, order.version);
    let mut m = ServerCancel::new(user, key, at, &*state.ids, now, &state.policy);
    for _ in 0..MAX_EFFECTS {
        match m.poll() {
            Effect::Done(answer) => return Ok(answer?),
            Effect::Tombstone {
                tombstone,
                entry,
                unless_paid,
                spend,
            } => {
                let (limits, owner) = (state.limits.clone(), user.to_owned());
                // A refusal rolls the tombstone back and is the answer.
                let before_commit = move || match spend {
                    true => limits.check(Bucket::Tombstones, &owner),
                    false => Ok::<_, AppError>(()),
                };
                let (s, k) = (&state.store, key.as_str());
                let t = store::cancel::tombstone(
                    s,
                    &tombstone,
                    &entry,
                    k,
                    now,
                    unless_paid,
                    before_commit,
                );
                m.on_tombstone(t.await?);
            }
            Effect::ReadPaid { payment_id } => {
                let (paid, payment) = read_paid(state, payment_id).await?;
                m.on_paid(paid.as_deref(), payment);
            }
            Effect::Spend => {
                state.limits.check(Bucket::Tombstones, user)?;
                m.on_spent();
            }
            Effect::Lookup { provider_key } => {
                m.on_lookup(state.provider.lookup(&provider_key, None).await);
            }
            Effect::ReadKey => {
                let record = db::find(state.store.pool(), user, key.as_str()).await?;
                let vanished = || AppError::internal("attempt vanished after a unique conflict");
                m.on_record(record.ok_or_else(vanished)?, state.clock.now_ms());
            }
            Effect::CancelWaiting(record) => {
                let end = crate::ops::pay::cancel_waiting(state, &record, order, user).await?;
                m.on_waiting_cancelled(match end {
                    End::Settled(f) => Some(f.status),
                    _ => None,
                });
            }
            Effect::ReadPayment { attempt_id } => {
                let id = payment_of_attempt(state.store.pool(), &attempt_id).await?;
                m.on_payment(payment(&state.store, id).await?);
            }
        }
    }
    Err(AppError::internal("the cancel did not end"))
}

/// What the machine's `ReadPaid` asks: the key's attempt's payment id if the order is paid
/// with it, and that payment.
async fn read_paid(
    state: &OpsState,
    payment_id: Option<PaymentId>,
) -> AppResult<(Option<String>, Option<Payment>)> {
    let paid = match &payment_id {
        Some(id) => paid_with(state.store.pool(), id).await?,
        None => None,
    };
    Ok((paid, payment(&state.store, payment_id).await?))
}

async fn payment(store: &crate::store::Store, id: Option<PaymentId>) -> AppResult<Option<Payment>> {
    Ok(match id {
        Some(id) => get_payment(store.pool(), &id).await?,
        None => None,
    })
}
