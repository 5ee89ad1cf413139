//! Background jobs, one loop per process (several processes may run them at once: every
//! step is guarded by the same atomic statements as a request).
//!
//! - Reconciliation: an attempt left `processing` with an expired lease (the provider timed
//!   out, or the server crashed mid-charge) and no client retry would keep its order locked
//!   forever. The job settles it exactly like a retry does (pay rule 5): take the lease, ask
//!   the provider about the provider key, settle, re-drive only if the provider has no charge.
//! - Cleanup: finished keys and tombstones are deleted once their retention has passed
//!   (announced to clients in `Idempotency-Key-Retention`); processing rows never are.

use crate::error::AppResult;
use crate::pay;
use crate::store::attempts as db;
use crate::store::orders::get_order;
use crate::{now_ms, AppState};
use std::time::Duration;

/// Attempts settled per round, so one round stays short.
const BATCH: i64 = 20;

/// Runs both jobs every `every` until the process ends.
pub(crate) async fn run(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match reconcile_stuck(&state).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(settled = n, "reconciliation round"),
            Err(e) => tracing::warn!(error = %e, "reconciliation round failed"),
        }
        match db::delete_expired(state.store.pool(), now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "expired keys deleted"),
            Err(e) => tracing::warn!(error = %e, "key cleanup failed"),
        }
    }
}

/// One reconciliation round; returns how many attempts reached a final state.
pub(crate) async fn reconcile_stuck(state: &AppState) -> AppResult<usize> {
    let mut settled = 0;
    for row in db::stuck(state.store.pool(), now_ms(), BATCH).await? {
        let Some(order) = get_order(state.store.pool(), &row.order_id, &row.user_id).await? else {
            tracing::error!(attempt = %row.id, "processing attempt without its order");
            continue;
        };
        let Some(claim) =
            pay::take_over(state, &row, &order, "system", "the reconciliation job").await?
        else {
            continue; // a retry or another process got there first
        };
        if let Some(answer) = pay::reconcile(state, &claim).await? {
            if answer.is_final() {
                settled += 1;
            }
        }
    }
    Ok(settled)
}
