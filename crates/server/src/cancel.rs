//! `POST /orders/{id}/payment-attempts/cancel` with `{key}` in the body (never the URL, so
//! keys stay out of access logs).
//!
//! | the caller's key is | we do | answer |
//! |---|---|---|
//! | unknown | insert a `cancelled` tombstone in the same `(user, key)` slot | `cancelled` |
//! | processing | nothing: a charge may be under way | `processing` |
//! | declined / failed / cancelled | nothing | the same status |
//! | succeeded | nothing (undoing it is a refund) | `succeeded` + payment |
//!
//! The tombstone and a late pay race for one unique slot: whichever inserts first wins, so a
//! pay that arrives after the cancel can never charge.

use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::store::attempts as db;
use crate::store::audit;
use crate::store::payments::{get_payment, payment_of_attempt};
use payonce_protocol::{AttemptStatus, CancelResponse};
use payonce_rules::plan;
use payonce_rules::policy::Bucket;

/// The cancel table for the caller's `key` on `order_id` (already checked to be theirs).
pub(crate) async fn cancel(
    state: &AppState,
    user: &str,
    order_id: &str,
    key: &str,
) -> AppResult<CancelResponse> {
    let now = state.clock.now_ms();
    let id = format!("att_{}", uuid::Uuid::new_v4().simple());
    let (tombstone, entry) = plan::plan_tombstone(user, order_id, id, now, &state.policy);
    let mut tx = state.store.begin_write().await?;
    if db::insert_tombstone(&mut *tx, &tombstone, key, now).await? {
        // Only a cancel that writes a tombstone spends a token (dropping `tx` undoes it).
        state.limits.check(Bucket::Tombstones, user)?;
        audit::record(&mut *tx, &entry, now).await?;
        tx.commit().await?;
        return Ok(CancelResponse {
            status: AttemptStatus::Cancelled,
            payment: None,
        });
    }
    tx.rollback().await?;
    // The slot is taken; it cannot be freed, so reading it now is safe.
    let record = db::find(state.store.pool(), user, key)
        .await?
        .ok_or_else(|| AppError::internal("attempt vanished after a unique conflict"))?;
    let (status, with_payment) = plan::cancel_answer(&record, order_id)?;
    let payment = match with_payment {
        true => match payment_of_attempt(state.store.pool(), record.id()).await? {
            Some(pid) => get_payment(state.store.pool(), &pid).await?,
            None => None,
        },
        false => None,
    };
    Ok(CancelResponse { status, payment })
}
