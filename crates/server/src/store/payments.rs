//! Payments: one per succeeded attempt.

use super::orders::decode_err;
use payonce_protocol::{AttemptStatus, Payment};
use sqlx::any::AnyExecutor;

/// Records a payment.
pub(crate) async fn insert_payment<'c>(
    e: impl AnyExecutor<'c>,
    p: &Payment,
    attempt: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO payments (id, order_id, attempt_id, amount, currency, payment_method_id, charge_id, status, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(p.id.as_str())
    .bind(p.order_id.as_str())
    .bind(attempt)
    .bind(p.amount)
    .bind(p.currency.as_str())
    .bind(p.payment_method_id.as_str())
    .bind(p.charge_id.as_str())
    .bind(p.status.as_str())
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// A payment by id.
pub(crate) async fn get_payment<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
) -> sqlx::Result<Option<Payment>> {
    let row: Option<(String, String, i64, String, String, String, String)> = sqlx::query_as(
        "SELECT id, order_id, amount, currency, payment_method_id, charge_id, status FROM payments WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(e)
    .await?;
    row.map(
        |(id, order_id, amount, currency, payment_method_id, charge_id, status)| {
            Ok(Payment {
                status: AttemptStatus::parse(&status)
                    .ok_or_else(|| decode_err(format!("bad payment status {status}")))?,
                id,
                order_id,
                amount,
                currency,
                payment_method_id,
                charge_id,
            })
        },
    )
    .transpose()
}

/// The payment made by an attempt, if any.
pub(crate) async fn payment_of_attempt<'c>(
    e: impl AnyExecutor<'c>,
    attempt: &str,
) -> sqlx::Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as("SELECT id FROM payments WHERE attempt_id = $1")
        .bind(attempt)
        .fetch_optional(e)
        .await?;
    Ok(row.map(|r| r.0))
}
