//! Refund keys: one row per `(user, refund key)`, at most one per payment (full refunds
//! only), each with the answer to replay once final.

use super::payments::get_payment;
use payonce_protocol::Payment;
use sqlx::any::AnyExecutor;

/// One refund row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct RefundRow {
    pub id: String,
    pub payment_id: String,
    pub provider_refund_key: String,
    pub response_status: Option<i64>,
    pub response_body: Option<String>,
}

/// The caller's refund row for `key` (another user's is invisible).
pub(crate) async fn find<'c>(
    e: impl AnyExecutor<'c>,
    user: &str,
    key: &str,
) -> sqlx::Result<Option<RefundRow>> {
    sqlx::query_as(
        "SELECT id, payment_id, provider_refund_key, response_status, response_body
         FROM refunds WHERE user_id = $1 AND idem_key = $2",
    )
    .bind(user)
    .bind(key)
    .fetch_optional(e)
    .await
}

impl RefundRow {
    /// The stored answer, once final.
    pub(crate) fn answer(&self) -> Option<payonce_rules::Answer> {
        let status = u16::try_from(self.response_status?).ok()?;
        let body = self.response_body.clone()?;
        Some(payonce_rules::Answer { status, body })
    }
}

/// A new processing refund.
pub(crate) struct NewRefund {
    pub id: String,
    pub user: String,
    pub key: String,
    pub payment_id: String,
    pub provider_refund_key: String,
    pub now: i64,
}

/// Claims the refund: inserts unless `(user, key)` or the payment's one refund slot is
/// taken. True when this call inserted it.
pub(crate) async fn insert_processing<'c>(
    e: impl AnyExecutor<'c>,
    r: &NewRefund,
) -> sqlx::Result<bool> {
    let row: Option<(String,)> = sqlx::query_as(
        "INSERT INTO refunds (id, user_id, idem_key, payment_id, provider_refund_key, status, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'processing', $6, $6)
         ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(&r.id)
    .bind(&r.user)
    .bind(&r.key)
    .bind(&r.payment_id)
    .bind(&r.provider_refund_key)
    .bind(r.now)
    .fetch_optional(e)
    .await?;
    Ok(row.is_some())
}

/// Stores the final answer of a processing refund. False if someone else finished it.
pub(crate) async fn finish<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    refund_id: &str,
    response_status: u16,
    response_body: &str,
    now: i64,
    expires_at: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE refunds SET status = 'succeeded', refund_id = $1, response_status = $2,
                response_body = $3, updated_at = $4, expires_at = $5
         WHERE id = $6 AND status = 'processing'",
    )
    .bind(refund_id)
    .bind(i64::from(response_status))
    .bind(response_body)
    .bind(now)
    .bind(expires_at)
    .bind(id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// A payment, if it pays one of `user`'s orders.
pub(crate) async fn owned_payment<'c>(
    e: impl AnyExecutor<'c> + Copy,
    user: &str,
    payment_id: &str,
) -> sqlx::Result<Option<(Payment, String)>> {
    let owner: Option<(String,)> = sqlx::query_as(
        "SELECT p.attempt_id FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.id = $1 AND o.user_id = $2",
    )
    .bind(payment_id)
    .bind(user)
    .fetch_optional(e)
    .await?;
    let Some((attempt_id,)) = owner else {
        return Ok(None);
    };
    Ok(get_payment(e, payment_id).await?.map(|p| (p, attempt_id)))
}

/// Marks the payment, its order and its attempt refunded.
pub(crate) async fn mark_refunded(
    tx: &mut sqlx::AnyConnection,
    payment_id: &str,
    order_id: &str,
    attempt_id: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE payments SET status = 'refunded' WHERE id = $1")
        .bind(payment_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE orders SET status = 'refunded', updated_at = $1 WHERE id = $2 AND status = 'paid'",
    )
    .bind(now)
    .bind(order_id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE attempts SET status = 'refunded', updated_at = $1 WHERE id = $2 AND status = 'succeeded'")
        .bind(now)
        .bind(attempt_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
