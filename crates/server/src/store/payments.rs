//! Payments: one per succeeded attempt.

use super::decode_err;
use payonce_protocol::{AttemptStatus, Payment};
use payonce_rules::ids::PaymentId;
use sqlx::any::AnyExecutor;

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
) -> sqlx::Result<Option<PaymentId>> {
    let row: Option<(String,)> = sqlx::query_as("SELECT id FROM payments WHERE attempt_id = $1")
        .bind(attempt)
        .fetch_optional(e)
        .await?;
    Ok(row.map(|r| PaymentId::from_stored(r.0)))
}

/// The provider key payment `id` was charged under (`None`: a payment older than the
/// column whose attempt was already deleted when it was added).
pub(crate) async fn paid_with<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
) -> sqlx::Result<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT provider_key FROM payments WHERE id = $1")
            .bind(id)
            .fetch_optional(e)
            .await?;
    Ok(row.and_then(|r| r.0))
}
