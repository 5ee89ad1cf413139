//! The append-only audit trail: who changed what, when, from which state to which, and why.
//! Written in the same transaction as the change it describes, so the two cannot disagree.

use sqlx::any::AnyExecutor;

/// One state change.
pub(crate) struct Entry<'a> {
    /// The user, or `system` for changes the server makes on its own.
    pub actor: &'a str,
    /// `order` or `attempt`.
    pub entity: &'static str,
    pub entity_id: &'a str,
    pub from: Option<&'a str>,
    pub to: &'a str,
    pub reason: &'a str,
}

/// Appends `entry`.
pub(crate) async fn record<'c>(
    e: impl AnyExecutor<'c>,
    entry: &Entry<'_>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(now)
    .bind(entry.actor)
    .bind(entry.entity)
    .bind(entry.entity_id)
    .bind(entry.from.map(str::to_owned))
    .bind(entry.to)
    .bind(entry.reason)
    .execute(e)
    .await?;
    Ok(())
}
