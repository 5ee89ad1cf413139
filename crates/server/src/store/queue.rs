//! The outbox, the job queue and the dev mailbox. Each step is one conditional statement:
//! whoever's `UPDATE` matches owns the row, so several processes can run the workers.

use super::attempts::{record, AttemptRow, ATTEMPT_COLUMNS};
use payonce_rules::Record;
use sqlx::any::AnyExecutor;

/// Writes "charge this provider key" for a claimed attempt (inside the claim transaction).
pub(crate) async fn insert_outbox<'c>(
    e: impl AnyExecutor<'c>,
    attempt_id: &str,
    provider_key: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO outbox (id, attempt_id, kind, provider_key, created_at)
         VALUES ($1, $2, 'charge', $3, $4)",
    )
    .bind(format!("obx_{}", uuid::Uuid::new_v4().simple()))
    .bind(attempt_id)
    .bind(provider_key)
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// Marks the attempt's outbox row done (inside the transaction that settles the attempt).
pub(crate) async fn outbox_done<'c>(
    e: impl AnyExecutor<'c>,
    attempt_id: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE outbox SET done_at = $1 WHERE attempt_id = $2 AND done_at IS NULL")
        .bind(now)
        .bind(attempt_id)
        .execute(e)
        .await?;
    Ok(())
}

/// Attempts with a pending outbox row whose lease has expired: nobody is executing them
/// (the request crashed, or its provider call was inconclusive). Oldest first. Attempts
/// flagged for manual review are left to a person (and to the client's own retries).
pub(crate) async fn outbox_pending<'c>(
    e: impl AnyExecutor<'c>,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<Record>> {
    let sql = format!(
        "SELECT {ATTEMPT_COLUMNS} FROM attempts a JOIN outbox o ON o.attempt_id = a.id
         WHERE o.done_at IS NULL AND a.status = 'processing' AND a.needs_review_at IS NULL
           AND (a.locked_until IS NULL OR a.locked_until <= $1)
         ORDER BY o.created_at LIMIT $2"
    );
    let rows: Vec<AttemptRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(now)
        .bind(limit)
        .fetch_all(e)
        .await?;
    rows.into_iter().map(record).collect()
}

/// Enqueues the confirmation email of a paid order (inside the settle transaction). The
/// unique `(kind, order_id)` makes a second enqueue a no-op.
pub(crate) async fn enqueue_email<'c>(
    e: impl AnyExecutor<'c>,
    order_id: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO jobs (id, kind, order_id, created_at) VALUES ($1, 'confirmation_email', $2, $3)
         ON CONFLICT (kind, order_id) DO NOTHING",
    )
    .bind(format!("job_{}", uuid::Uuid::new_v4().simple()))
    .bind(order_id)
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

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

/// Sets the order's `confirmation_email_sent` flag if it was not set. True: this caller
/// sends the mail; false: it was sent before (a redelivery), do nothing.
pub(crate) async fn flag_email_sent<'c>(
    e: impl AnyExecutor<'c>,
    order_id: &str,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE orders SET confirmation_email_sent = 1
         WHERE id = $1 AND status IN ('paid', 'refunded') AND confirmation_email_sent = 0",
    )
    .bind(order_id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// One mail in the dev mailbox.
pub(crate) struct Mail<'a> {
    pub order_id: &'a str,
    pub user_id: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

/// Records a sent mail.
pub(crate) async fn insert_mail<'c>(
    e: impl AnyExecutor<'c>,
    m: &Mail<'_>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO mailbox (id, order_id, user_id, subject, body, sent_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(format!("mail_{}", uuid::Uuid::new_v4().simple()))
    .bind(m.order_id)
    .bind(m.user_id)
    .bind(m.subject)
    .bind(m.body)
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// A user's mails about one order, oldest first: `(order_id, subject, body, sent_at)`.
pub(crate) async fn mails<'c>(
    e: impl AnyExecutor<'c>,
    user_id: &str,
    order_id: &str,
) -> sqlx::Result<Vec<(String, String, String, i64)>> {
    sqlx::query_as(
        "SELECT order_id, subject, body, sent_at FROM mailbox
         WHERE user_id = $1 AND order_id = $2 ORDER BY sent_at, id",
    )
    .bind(user_id)
    .bind(order_id)
    .fetch_all(e)
    .await
}

/// Flags a processing attempt for manual review, once. True when this call flagged it.
pub(crate) async fn flag_review<'c>(
    e: impl AnyExecutor<'c>,
    attempt_id: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE attempts SET needs_review_at = $1
         WHERE id = $2 AND status = 'processing' AND needs_review_at IS NULL",
    )
    .bind(now)
    .bind(attempt_id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Processing attempts created before `before` whose lease has expired: the
/// reconciliation job's work list. Oldest first.
pub(crate) async fn stuck_since<'c>(
    e: impl AnyExecutor<'c>,
    before: i64,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<Record>> {
    let sql = format!(
        "SELECT {ATTEMPT_COLUMNS} FROM attempts a
         WHERE a.status = 'processing' AND a.created_at <= $1 AND a.needs_review_at IS NULL
           AND (a.locked_until IS NULL OR a.locked_until <= $2)
         ORDER BY a.created_at LIMIT $3"
    );
    let rows: Vec<AttemptRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(before)
        .bind(now)
        .bind(limit)
        .fetch_all(e)
        .await?;
    rows.into_iter().map(record).collect()
}

/// Retention: audit rows, webhook events, acknowledged jobs and finished outbox rows older
/// than `audit_before` (the dispute window), and finished refund keys past their expiry.
/// Returns how many rows were deleted.
pub(crate) async fn delete_old<'c>(
    e: impl AnyExecutor<'c> + Copy,
    audit_before: i64,
    now: i64,
) -> sqlx::Result<u64> {
    let mut n = 0;
    for (sql, at) in [
        ("DELETE FROM audit_log WHERE at < $1", audit_before),
        (
            // Unhandled ones too (a key no attempt ever owned): the provider gave up long ago.
            "DELETE FROM webhook_events WHERE received_at < $1",
            audit_before,
        ),
        (
            "DELETE FROM jobs WHERE done_at IS NOT NULL AND done_at < $1",
            audit_before,
        ),
        (
            "DELETE FROM outbox WHERE done_at IS NOT NULL AND done_at < $1",
            audit_before,
        ),
        (
            "DELETE FROM refunds WHERE status <> 'processing' AND expires_at IS NOT NULL AND expires_at < $1",
            now,
        ),
    ] {
        n += sqlx::query(sql).bind(at).execute(e).await?.rows_affected();
    }
    Ok(n)
}

/// The owner, amount and currency of an order (for the confirmation mail).
pub(crate) async fn order_summary<'c>(
    e: impl AnyExecutor<'c>,
    order_id: &str,
) -> sqlx::Result<Option<(String, i64, String)>> {
    sqlx::query_as("SELECT user_id, amount, currency FROM orders WHERE id = $1")
        .bind(order_id)
        .fetch_optional(e)
        .await
}
