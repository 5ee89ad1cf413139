//! The outbox: "charge this provider key", written with the claim, deleted with the settle.
//! Each step is one conditional statement, so several processes can run the worker.

use super::attempts::{record, AttemptRow, ATTEMPT_COLUMNS};
use payonce_rules::Record;
use sqlx::any::AnyExecutor;

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
           AND (a.next_check_at IS NULL OR a.next_check_at <= $1)
         ORDER BY o.created_at LIMIT $2"
    );
    let rows: Vec<AttemptRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(now)
        .bind(limit)
        .fetch_all(e)
        .await?;
    rows.into_iter().map(record).collect()
}
