//! What an operator's resolve of a review flag reads and writes (`src/ops/review.rs`,
//! docs/operating.md, runbook "a review flag"). A flagged *processing* attempt is settled by
//! the pay machine's own settle (`super::pay::settle` clears its flag); the plan here clears
//! the flag of an *ended* attempt whose stray payment was dealt with, and lifts its order's
//! hold (`orders.review_at`, migrations/0012_orders_held_for_review.sql) once no flag of the
//! order is left, with the audit rows, in one transaction.

use super::audit;
use super::tx::{Need, Statement};
use super::Store;
use payonce_rules::plan::AuditEntry;
use sqlx::AnyPool;

/// The order's owner, whether it is held (`review_at` set), and the ids of its flagged
/// attempts, oldest flag first; `None`: no such order.
pub(crate) async fn flags(
    pool: &AnyPool,
    order: &str,
) -> sqlx::Result<Option<(String, bool, Vec<String>)>> {
    let row: Option<(String, Option<i64>)> =
        sqlx::query_as("SELECT user_id, review_at FROM orders WHERE id = $1")
            .bind(order)
            .fetch_optional(pool)
            .await?;
    let Some((user, review_at)) = row else {
        return Ok(None);
    };
    let ids: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL
         ORDER BY needs_review_at, id",
    )
    .bind(order)
    .fetch_all(pool)
    .await?;
    Ok(Some((
        user,
        review_at.is_some(),
        ids.into_iter().map(|(id,)| id).collect(),
    )))
}

/// Clears the review flag of ended attempt `attempt` (when given) and, when no other attempt
/// of `order` is still flagged, the order's hold, with `entries`. True when the attempt's
/// flag was cleared by this call (or, without one, the hold was lifted).
pub(crate) async fn clear(
    store: &Store,
    order: &str,
    attempt: Option<&str>,
    entries: &[AuditEntry],
    now: i64,
) -> sqlx::Result<bool> {
    let mut list = Vec::new();
    if let Some(id) = attempt {
        list.push(
            Statement::new(
                "UPDATE attempts SET needs_review_at = NULL, updated_at = $1
                 WHERE id = $2 AND status <> 'processing' AND needs_review_at IS NOT NULL",
                vec![now.into(), id.into()],
            )
            .need(Need::Row),
        );
    }
    // The other flags, not this one: on PostgreSQL the statements run chained from one
    // snapshot (`tx.rs`), so the clear above is not visible to this condition.
    let lift = Statement::new(
        "UPDATE orders SET review_at = NULL, updated_at = $1
         WHERE id = $2 AND review_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM attempts
             WHERE order_id = $2 AND needs_review_at IS NOT NULL AND id <> $3)",
        vec![now.into(), order.into(), attempt.unwrap_or_default().into()],
    );
    list.push(match attempt {
        Some(_) => lift,
        None => lift.need(Need::Row),
    });
    list.extend(audit::insert_all(entries, now));
    Ok(store.commit(list).await?[0] == 1)
}

/// An ended attempt as its resolve needs it: status, and how the provider finds its payment
/// (provider key, saved object id); `None`: no such attempt.
pub(crate) async fn ended(
    pool: &AnyPool,
    id: &str,
) -> sqlx::Result<Option<(String, String, Option<String>)>> {
    sqlx::query_as("SELECT status, provider_key, provider_ref FROM attempts WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}
