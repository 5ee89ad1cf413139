//! The job queue (confirmation emails): leased, delivered at least once, acknowledged.

use sqlx::any::AnyExecutor;

/// Unacknowledged jobs whose lease is free: `(id, order_id)`, oldest first.
pub(crate) async fn jobs_ready<'c>(
    e: impl AnyExecutor<'c>,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<(String, String)>> {
    sqlx::query_as(
        "SELECT id, order_id FROM jobs
         WHERE done_at IS NULL AND (locked_until IS NULL OR locked_until <= $1)
         ORDER BY created_at LIMIT $2",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(e)
    .await
}

/// Leases a job (one delivery). False if another worker leased it first.
pub(crate) async fn lease_job<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    now: i64,
    until: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE jobs SET locked_until = $1, deliveries = deliveries + 1
         WHERE id = $2 AND done_at IS NULL AND (locked_until IS NULL OR locked_until <= $3)",
    )
    .bind(until)
    .bind(id)
    .bind(now)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Acknowledges a job.
pub(crate) async fn ack_job<'c>(e: impl AnyExecutor<'c>, id: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE jobs SET done_at = $1, locked_until = NULL WHERE id = $2")
        .bind(now)
        .bind(id)
        .execute(e)
        .await?;
    Ok(())
}
