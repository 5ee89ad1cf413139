//! Provider webhook events, deduplicated on their id: recorded when they arrive, marked
//! handled once applied (src/ops/webhooks.rs).

use super::journal::{self as log, Event};
use super::tx::Statement;
use super::Store;

/// Records that the event `event_id` (of the provider's type `kind`, about `subject`, the
/// provider key or saved id it names) arrived at `now`. Its id is the primary key: a second
/// arrival inserts nothing. True when the event was handled already: a duplicate to
/// acknowledge.
pub(crate) async fn arrived(
    store: &Store,
    (event_id, kind, subject): (&str, &str, &str),
    now: i64,
) -> sqlx::Result<bool> {
    let insert = Statement::new(
        "INSERT INTO webhook_events (id, event_type, provider_key, received_at)
         SELECT $1, $2, $3, $4 WHERE true",
        vec![event_id.into(), kind.into(), subject.into(), now.into()],
    )
    .tail("ON CONFLICT (id) DO NOTHING");
    if store.commit(vec![insert]).await?[0] == 1 {
        return Ok(false); // the first arrival: nothing handled it yet
    }
    // Read after the insert committed: `handled_at` is set once and never cleared.
    let row: Option<(Option<i64>,)> =
        sqlx::query_as("SELECT handled_at FROM webhook_events WHERE id = $1")
            .bind(event_id)
            .fetch_optional(store.pool())
            .await?;
    Ok(matches!(row, Some((Some(_),))))
}

/// Marks event `e` handled at `now` (from then on it is a duplicate) and journals its
/// verdict, in one transaction.
pub(crate) async fn handled(store: &Store, e: &Event<'_>, now: i64) -> sqlx::Result<()> {
    let mark = Statement::new(
        "UPDATE webhook_events SET handled_at = $1 WHERE id = $2 AND handled_at IS NULL",
        vec![now.into(), e.id.into()],
    );
    store.commit(vec![mark, log::verdict(e, now)]).await?;
    Ok(())
}

/// Journals the verdict of event `e`, which no handled mark records (a duplicate, a type
/// payonce does not act on, one to be delivered again).
pub(crate) async fn unhandled(store: &Store, e: &Event<'_>, now: i64) -> sqlx::Result<()> {
    store.commit(vec![log::verdict(e, now)]).await?;
    Ok(())
}
