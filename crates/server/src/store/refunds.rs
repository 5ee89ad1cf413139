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
    /// `processing`, `succeeded` or `failed` (the provider refused, nothing was refunded).
    pub status: String,
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
        "SELECT id, payment_id, provider_refund_key, status, response_status, response_body
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

/// Ends a processing refund `failed` with its answer (the provider refused it and nothing
/// was refunded): the payment's refund slot frees. False if someone else finished it.
pub(crate) async fn fail<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    answer: &payonce_rules::Answer,
    now: i64,
    expires_at: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE refunds SET status = 'failed', response_status = $1, response_body = $2,
                updated_at = $3, expires_at = $4
         WHERE id = $5 AND status = 'processing'",
    )
    .bind(i64::from(answer.status))
    .bind(&answer.body)
    .bind(now)
    .bind(expires_at)
    .bind(id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Ends the lease `token` holds on a refund early (the call proved nothing): the next retry
/// may call again at once.
pub(crate) async fn release_lease<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    token: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE refunds SET locked_until = NULL, lease_token = NULL
         WHERE id = $1 AND lease_token = $2",
    )
    .bind(id)
    .bind(token)
    .execute(e)
    .await?;
    Ok(())
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

/// Marks the payment, its order and its attempt refunded. False: the payment was not
/// `succeeded` (refunded already), and nothing changed.
pub(crate) async fn mark_refunded(
    tx: &mut sqlx::AnyConnection,
    payment_id: &str,
    order_id: &str,
    attempt_id: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "UPDATE payments SET status = 'refunded' WHERE id = $1 AND status = 'succeeded'",
    )
    .bind(payment_id)
    .execute(&mut *tx)
    .await?;
    if moved.rows_affected() == 0 {
        return Ok(false);
    }
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
    Ok(true)
}

/// The payment of provider charge `charge_id`, with its attempt's id.
pub(crate) async fn payment_of_charge<'c>(
    e: impl AnyExecutor<'c> + Copy,
    charge_id: &str,
) -> sqlx::Result<Option<(Payment, String)>> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT id, attempt_id FROM payments WHERE charge_id = $1")
            .bind(charge_id)
            .fetch_optional(e)
            .await?;
    let Some((id, attempt_id)) = row else {
        return Ok(None);
    };
    Ok(get_payment(e, &id).await?.map(|p| (p, attempt_id)))
}

/// Whether payonce itself started a refund of `payment_id` (processing or done).
pub(crate) async fn started_for<'c>(
    e: impl AnyExecutor<'c>,
    payment_id: &str,
) -> sqlx::Result<bool> {
    let row: Option<(String,)> = sqlx::query_as("SELECT id FROM refunds WHERE payment_id = $1")
        .bind(payment_id)
        .fetch_optional(e)
        .await?;
    Ok(row.is_some())
}
