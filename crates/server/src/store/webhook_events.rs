//! Provider webhook events, deduplicated on their id.

use sqlx::any::AnyExecutor;

/// Records that a webhook event arrived (its id is the primary key: a duplicate insert is a
/// no-op). Returns true when the event was already handled: a duplicate to acknowledge.
pub(crate) async fn arrived(
    tx: &mut sqlx::AnyConnection,
    event_id: &str,
    event_type: &str,
    provider_key: &str,
    now: i64,
) -> sqlx::Result<bool> {
    sqlx::query(
        "INSERT INTO webhook_events (id, event_type, provider_key, received_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(event_id)
    .bind(event_type)
    .bind(provider_key)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let row: Option<(Option<i64>,)> =
        sqlx::query_as("SELECT handled_at FROM webhook_events WHERE id = $1")
            .bind(event_id)
            .fetch_optional(tx)
            .await?;
    Ok(matches!(row, Some((Some(_),))))
}

/// Marks a webhook event handled: from now on it is a duplicate.
pub(crate) async fn handled<'c>(
    e: impl AnyExecutor<'c>,
    event_id: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE webhook_events SET handled_at = $1 WHERE id = $2 AND handled_at IS NULL")
        .bind(now)
        .bind(event_id)
        .execute(e)
        .await?;
    Ok(())
}
