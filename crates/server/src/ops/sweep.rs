//! The provider sweep: the provider's payment objects created since a time, each compared
//! with what the store holds under its provider key (`payonce_rules::sweep::decide`), and
//! the answer performed: an unconfirmed object nobody saved is cancelled at the provider, a
//! payment the store does not account for is flagged for review (an audit row, the order
//! held), never refunded nor marked paid. `payonce-server sweep --since T` runs it once
//! and prints a [`Report`] (docs/deploy.md, "Restoring"); the background job
//! ([`sweep_every`], `--sweep-interval-secs`) runs it over the last `--sweep-window-secs`, a
//! bounded number of pages per round.
//!
//! Safe beside live traffic: an object whose attempt is processing is left to it, every
//! write is conditional (`src/store/sweep.rs`), and a cancel is idempotent at the provider.

use crate::provider::Listed;
use crate::state::Ledgers;
use crate::store::sweep as db;
use axum::extract::FromRef;
use payonce_rules::plan::{self, Leftover};
use payonce_rules::sweep::{self, Action};
use std::time::Duration;

/// Pages one job round reads at most (the command reads to the end).
const PAGES_PER_ROUND: usize = 10;

/// Why a sweep stopped early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SweepError {
    /// The provider's list could not be read.
    #[error("the provider's list: {0}")]
    Provider(String),
    /// The store failed.
    #[error("the store: {0}")]
    Store(#[from] sqlx::Error),
}

/// What one sweep found and did.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Objects listed.
    pub(crate) listed: u64,
    /// The store agrees, or not ours.
    pub(crate) agreed: u64,
    /// Left to their processing attempt.
    pub(crate) left: u64,
    /// Cancelled at the provider.
    pub(crate) cancelled: u64,
    /// Flagged for review by this sweep.
    pub(crate) flagged: u64,
    /// Flagged by an earlier sweep (nothing written).
    pub(crate) flagged_before: u64,
    /// A cancel the provider did not confirm: the next sweep tries again.
    pub(crate) not_cancelled: u64,
    /// One line per object: its id, order, status and what the sweep did.
    pub(crate) lines: Vec<String>,
    /// Where the next page starts, when the sweep stopped at its page bound.
    pub(crate) next: Option<String>,
}

impl Report {
    /// The counts, one line.
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} listed: {} agree, {} left to their attempt, {} cancelled, {} flagged for review, {} flagged before, {} not cancelled yet",
            self.listed,
            self.agreed,
            self.left,
            self.cancelled,
            self.flagged,
            self.flagged_before,
            self.not_cancelled
        )
    }
}

/// Sweeps the objects created at `since_ms` or later, from the page after `after`, at most
/// `pages` pages (`None`: to the end).
pub(crate) async fn sweep<S: Sync>(
    state: &S,
    since_ms: i64,
    mut after: Option<String>,
    pages: Option<usize>,
) -> Result<Report, SweepError>
where
    Ledgers: FromRef<S>,
{
    let state = &Ledgers::from_ref(state);
    let mut report = Report::default();
    for _ in 0..pages.unwrap_or(usize::MAX) {
        let page = state
            .provider
            .list_since(since_ms, after.as_deref())
            .await
            .map_err(SweepError::Provider)?;
        for object in &page.objects {
            one(state, object, &mut report).await?;
        }
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    report.next = after;
    Ok(report)
}

/// Decides and performs one object, and reports it.
async fn one(state: &Ledgers, object: &Listed, report: &mut Report) -> Result<(), SweepError> {
    let known = match &object.provider_key {
        Some(key) => db::known(state.store.pool(), key).await?,
        None => payonce_rules::sweep::Known::Nothing,
    };
    let action = sweep::decide(object, &known);
    let now = state.clock.now_ms();
    report.listed += 1;
    let done = match &action {
        Action::Agree => {
            report.agreed += 1;
            action.name()
        }
        Action::Leave => {
            report.left += 1;
            action.name()
        }
        Action::Cancel { audit } => {
            match plan::leftover(state.provider.cancel_listed(object).await) {
                Leftover::Cancelled => {
                    db::cancelled(&state.store, audit, now).await?;
                    tracing::warn!(payment = %object.id, reason = %audit.reason, "provider sweep cancelled a payment object");
                    report.cancelled += 1;
                    action.name()
                }
                Leftover::Charged(_) | Leftover::Confirmable(_) | Leftover::Unknown(_) => {
                    report.not_cancelled += 1;
                    "not cancelled yet (the next sweep reads it again)"
                }
            }
        }
        Action::Flag {
            audit,
            order,
            attempt,
        } => {
            if db::flag(
                &state.store,
                audit,
                order.as_deref(),
                attempt.as_deref(),
                now,
            )
            .await?
            {
                tracing::error!(payment = %object.id, order = ?order, reason = %audit.reason, "provider sweep flagged a payment for review");
                report.flagged += 1;
                action.name()
            } else {
                report.flagged_before += 1;
                "flagged before"
            }
        }
    };
    let order = object.order_id.as_deref().unwrap_or("-");
    report.lines.push(format!(
        "{} order {order} {} {} {}: {done}",
        object.id, object.status, object.amount, object.currency
    ));
    Ok(())
}

/// The job: every `every`, a round over the objects created in the last `window`, at most
/// [`PAGES_PER_ROUND`] pages of `crate::provider::PAGE` objects; a round that stops at its bound goes on
/// from there the next time, and the one after the last page starts again from the newest.
/// The first round runs one `every` after the start.
/// It ends when `stop` changes, after its round in flight (as `ops::jobs::work_every`).
pub(crate) async fn sweep_every(
    state: Ledgers,
    every: Duration,
    window: Duration,
    mut stop: crate::ops::jobs::Stop,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut after = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let since = state.clock.now_ms().saturating_sub(window_ms);
        match sweep(&state, since, after.take(), Some(PAGES_PER_ROUND)).await {
            Ok(report) => {
                after = report.next.clone();
                // Quiet when the provider and the store agree, like the other jobs.
                if report.cancelled + report.flagged + report.not_cancelled > 0 {
                    tracing::info!(summary = %report.summary(), "provider sweep round");
                } else {
                    tracing::debug!(summary = %report.summary(), "provider sweep round");
                }
            }
            Err(e) => tracing::warn!(error = %e, "provider sweep round failed"),
        }
    }
}
