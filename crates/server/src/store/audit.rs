//! The append-only audit trail: who changed what, when, from which state to which, and why.
//! Written in the same transaction as the change it describes, so the two cannot disagree.

use sqlx::any::AnyExecutor;

pub(crate) use payonce_rules::plan::AuditEntry as Entry;

/// Appends `entry`.
pub(crate) async fn record<'c>(
    e: impl AnyExecutor<'c>,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(now)
    .bind(&entry.actor)
    .bind(entry.entity)
    .bind(&entry.entity_id)
    .bind(entry.from.clone())
    .bind(&entry.to)
    .bind(&entry.reason)
    .execute(e)
    .await?;
    Ok(())
}
