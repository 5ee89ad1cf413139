//! What the provider sweep reads and writes (`payonce_rules::sweep`, src/ops/sweep.rs): the
//! attempt that owns a provider key, and the sweep's two writes, each one transaction of
//! conditional statements (`tx.rs`).

use super::audit::Entry;
use super::journal::{self as log, About};
use super::tx::{Need, Statement};
use super::Store;
use payonce_protocol::AttemptStatus;
use payonce_rules::decision;
use payonce_rules::sweep::Known;
use sqlx::any::AnyExecutor;

/// The columns the sweep reads of the attempt that owns a provider key.
#[derive(sqlx::FromRow)]
struct Owner {
    id: String,
    order_id: String,
    status: String,
    provider_ref: Option<String>,
    charge_id: Option<String>,
}

/// What the store holds under `provider_key` (unique on attempts; a tombstone has none).
pub(crate) async fn known<'c>(e: impl AnyExecutor<'c>, provider_key: &str) -> sqlx::Result<Known> {
    let row: Option<Owner> = sqlx::query_as(
        "SELECT id, order_id, status, provider_ref, charge_id FROM attempts
         WHERE provider_key = $1",
    )
    .bind(provider_key)
    .fetch_optional(e)
    .await?;
    let Some(Owner {
        id: attempt,
        order_id: order,
        status,
        provider_ref: saved,
        charge_id: charge,
    }) = row
    else {
        return Ok(Known::Nothing);
    };
    let status = AttemptStatus::parse(&status)
        .ok_or_else(|| super::decode_err(format!("attempt {attempt}: status {status}")))?;
    Ok(match status {
        AttemptStatus::Processing => Known::Processing {
            attempt,
            order,
            saved,
        },
        status => Known::Ended {
            attempt,
            order,
            status,
            charge,
        },
    })
}

/// Flags a payment the store does not account for: `audit`, unless the sweep already
/// appended it for this payment (so a later round writes nothing, and an order a person
/// released is not held again); then holds `order` (a claim refuses its new keys while
/// `review_at` is set, migrations/0012_orders_held_for_review.sql) and flags the ended
/// `attempt`. True when this call flagged it.
pub(crate) async fn flag(
    store: &Store,
    audit: &Entry,
    order: Option<&str>,
    attempt: Option<&str>,
    now: i64,
) -> sqlx::Result<bool> {
    let mut list = vec![Statement::new(
        "INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         SELECT $1, $2, $3, $4, $5, $6, $7
         WHERE NOT EXISTS (SELECT 1 FROM audit_log
           WHERE entity = $3 AND entity_id = $4 AND actor = $2 AND to_state = $6)",
        vec![
            now.into(),
            (&audit.actor).into(),
            audit.entity.into(),
            (&audit.entity_id).into(),
            audit.from.as_deref().into(),
            (&audit.to).into(),
            (&audit.reason).into(),
        ],
    )
    .need(Need::Row)];
    if let Some(order) = order {
        list.push(Statement::new(
            "UPDATE orders SET review_at = $1 WHERE id = $2 AND review_at IS NULL",
            vec![now.into(), order.into()],
        ));
    }
    if let Some(attempt) = attempt {
        list.push(Statement::new(
            "UPDATE attempts SET needs_review_at = $1
             WHERE id = $2 AND status <> 'processing' AND needs_review_at IS NULL",
            vec![now.into(), attempt.into()],
        ));
    }
    // A payment of no order of ours is found again by its provider id.
    let about = About {
        order_id: order,
        attempt_id: attempt,
        provider_id: order.is_none().then_some(audit.entity_id.as_str()),
        ..About::default()
    };
    list.push(log::decision(&decision::review_flag(audit), &about, now));
    let counts = store.commit(list).await?;
    Ok(counts[0] == 1)
}

/// Records a cancel the provider made for the sweep (`audit`).
pub(crate) async fn cancelled(store: &Store, audit: &Entry, now: i64) -> sqlx::Result<()> {
    store.commit(vec![super::audit::insert(audit, now)]).await?;
    Ok(())
}
