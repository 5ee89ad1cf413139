//! Background jobs, one loop per process (several processes may run them at once: every
//! step is guarded by the same atomic statements as a request).
//!
//! - **Outbox worker**: a processing attempt (the claim's durable "charge this provider
//!   key", migrations/0011_attempt_is_the_outbox.sql) whose lease has expired was
//!   abandoned: the process that claimed it crashed before or during its provider call, or
//!   the call was inconclusive. The worker takes the lease and drives the attempt.
//! - **Reconciliation**: an attempt still processing after `--reconcile-after-ms` is
//!   settled the same way; if the provider cannot tell us its outcome, the attempt is
//!   flagged for manual review (column, audit row, metric) and stays processing with its
//!   order locked: never charged blindly.
//! - Both skip an attempt whose charge waits for the customer (3-D Secure) until its
//!   `next_check_at` (`payonce_rules::policy::next_customer_check`: half its age, 5 s to
//!   10 min, never past its deadline), so abandoned challenges cannot fill their work
//!   lists; at `--action-deadline-secs` the machine has the provider cancel the payment
//!   and the attempt ends `expired`, freeing its order.
//! - **Refunds**: a refund still processing after `--reconcile-after-ms` whose lease has
//!   ended (its provider refund pending, a crash, a call whose answer was lost and whose
//!   held lease has passed) is driven by the refund machine
//!   (`crate::ops::refunds::drive_due`): the provider's refunds are read, and it settles,
//!   waits, or refunds only what is still unrefunded.
//! - A declined two-phase payment is cancelled at the provider before its attempt settles
//!   (src/ops/leftovers.rs): when that cancel fails the attempt stays processing, and these
//!   same workers cancel it again on a later round.
//! - **Confirmation emails**: the job queue, at least once; `confirmation_email_sent` makes
//!   a redelivered job a no-op.
//! - **Cleanup**: finished keys and tombstones after the key retention (never processing
//!   ones), audit rows and handled webhook events after the dispute window.
//!
//! One rule, one place: both the outbox worker and reconciliation call [`drive_abandoned`],
//! which runs the pay machine (`payonce_rules::flow::ServerPay::abandoned`, interpreted by
//! src/ops/pay.rs) from the retry's own step (pay rule 5): take the expired lease, ask the provider about
//! the provider key, settle from its answer (succeeded → paid; declined → unlocked), and
//! only when the provider has *no* charge, re-drive with the *same* provider key. We chose
//! re-driving over "mark failed" for "no charge": the processing attempt is the durable intent to
//! charge that the customer committed to, the order is still locked for it, and the same
//! provider key makes the re-drive safe even if an earlier call lands late.

use crate::dev::failpoint;
use crate::error::AppResult;
use crate::faults::Failpoint;
use crate::metrics;
use crate::ops::pay;
use crate::state::AppState;
use crate::store::mailbox::{self, Mail};
use crate::store::orders::{self, get_order};
use crate::store::{self, attempts as db, jobs, Horizon, RETENTION};
use payonce_rules::flow::End;
use payonce_rules::ids::MailId;
use payonce_rules::Record;
use std::time::Duration;

/// Rows handled per step and round, so one round stays short.
const BATCH: i64 = 20;

/// Runs every job every `every` until the process ends.
pub(crate) async fn run(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        round(&state).await;
    }
}

/// One round of every job; failures are logged and retried next round.
pub async fn round(state: &AppState) {
    let n = |r: AppResult<usize>| r.map(|n| n as u64);
    report("outbox", n(drain_outbox(state).await));
    report("reconciliation", n(reconcile_stuck(state).await));
    report("refunds", n(drive_refunds(state).await));
    report("email", n(send_emails(state).await));
    report("cleanup", cleanup(state).await);
}

/// Logs what one job's round did (settled, sent or deleted rows), quiet when nothing.
fn report(job: &str, result: AppResult<u64>) {
    match result {
        Ok(0) => {}
        Ok(n) => tracing::info!(rows = n, "{job} round"),
        Err(e) => tracing::warn!(error = %e, "{job} round failed"),
    }
}

/// What driving an abandoned attempt came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Someone else holds the lease or settled it first.
    Skipped,
    /// The attempt reached a final state.
    Settled,
    /// The provider could not tell; the attempt stays processing.
    Unknown,
    /// The provider's charge waits for the customer (3-D Secure): a known state, so the
    /// attempt stays processing without a review flag.
    AwaitingCustomer,
}

/// Which worker drives an abandoned attempt (for the audit trail and the failpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Worker {
    Outbox,
    Reconciliation,
}

impl Worker {
    fn name(self) -> &'static str {
        match self {
            Self::Outbox => "the outbox worker",
            Self::Reconciliation => "the reconciliation job",
        }
    }
}

/// The one function that settles or drives an abandoned attempt (see the module docs).
pub(crate) async fn drive_abandoned(
    state: &AppState,
    row: &Record,
    worker: Worker,
) -> AppResult<Driven> {
    let Some(order) = get_order(state.store.pool(), row.order_id(), row.user()).await? else {
        tracing::error!(attempt = %row.id(), "processing attempt without its order");
        return Ok(Driven::Skipped);
    };
    let outbox = worker == Worker::Outbox;
    Ok(
        match pay::abandoned(state, row, &order, worker.name(), outbox).await? {
            End::Settled(_) => Driven::Settled,
            End::ActionRequired(_) => {
                let Record::Processing(p) = row else {
                    return Ok(Driven::Skipped);
                };
                let now = state.clock.now_ms();
                let at =
                    payonce_rules::policy::next_customer_check(p.created_at, now, &state.policy);
                store::pay::check_later(&state.store, &p.id, at).await?;
                Driven::AwaitingCustomer
            }
            End::Unknown(_) => Driven::Unknown,
            // A retry or another process holds the lease or settled first.
            _ => Driven::Skipped,
        },
    )
}

/// Drives the processing attempts whose lease expired, oldest first: every one of them, as
/// reconciliation does for those older than its threshold.
pub(crate) async fn drain_outbox(state: &AppState) -> AppResult<usize> {
    let mut settled = 0;
    let now = state.clock.now_ms();
    for row in db::stuck_since(state.store.pool(), now, now, BATCH).await? {
        let Some(driven) = per_row(&row, drive_abandoned(state, &row, Worker::Outbox).await) else {
            continue;
        };
        tracing::debug!(attempt = %row.id(), ?driven, "outbox worker");
        match driven {
            Driven::Settled => metrics::outbox(metrics::OutboxResult::Drained),
            Driven::Unknown => metrics::outbox(metrics::OutboxResult::Inconclusive),
            Driven::AwaitingCustomer | Driven::Skipped => {}
        }
        settled += usize::from(driven == Driven::Settled);
    }
    Ok(settled)
}

/// Settles attempts processing longer than the threshold; flags the ones the provider
/// cannot tell us about.
pub(crate) async fn reconcile_stuck(state: &AppState) -> AppResult<usize> {
    let now = state.clock.now_ms();
    let before = state.policy.reconcile_before(now);
    let mut settled = 0;
    for row in db::stuck_since(state.store.pool(), before, now, BATCH).await? {
        let driven = drive_abandoned(state, &row, Worker::Reconciliation).await;
        match per_row(&row, driven) {
            Some(Driven::Settled) => {
                settled += 1;
                metrics::reconciliation(metrics::ReconcileResult::Settled);
                tracing::info!(attempt = %row.id(), "reconciliation settled an attempt");
            }
            Some(Driven::Unknown) => {
                per_row(&row, flag_for_review(state, &row).await);
            }
            _ => {}
        }
    }
    Ok(settled)
}

/// Drives the processing refunds older than the reconcile threshold whose lease ended.
pub(crate) async fn drive_refunds(state: &AppState) -> AppResult<usize> {
    let now = state.clock.now_ms();
    crate::ops::refunds::drive_due(state, state.policy.reconcile_before(now), now, BATCH).await
}

/// One row's failure is logged and the round goes on with the next row: a row that fails
/// every time (a constraint it breaks, a row that does not decode) must not keep the rows
/// behind it from ever being reached. It stays where it is and is tried again next round.
fn per_row<T>(row: &Record, result: AppResult<T>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(attempt = %row.id(), order = %row.order_id(), error = %e, "job row failed; the round goes on");
            None
        }
    }
}

/// Manual review: the column, an audit row and a log line (the metric hook), once.
async fn flag_for_review(state: &AppState, row: &Record) -> AppResult<()> {
    let now = state.clock.now_ms();
    let entry = payonce_rules::plan::review_entry(row.id());
    if !store::pay::flag_unknown(&state.store, row.id(), &entry, now).await? {
        return Ok(());
    }
    tracing::error!(attempt = %row.id(), order = %row.order_id(), "attempt flagged for manual review");
    metrics::reconciliation(metrics::ReconcileResult::ManualReview);
    Ok(())
}

/// Delivers due confirmation-email jobs. At least once: the lease is the redelivery timer,
/// the ack comes after the send, and the flag set with the send makes a redelivery a no-op.
pub(crate) async fn send_emails(state: &AppState) -> AppResult<usize> {
    let mut sent = 0;
    for (job, order_id) in jobs::jobs_ready(state.store.pool(), state.clock.now_ms(), BATCH).await?
    {
        match send_email(state, &job, &order_id).await {
            Ok(one) => sent += usize::from(one),
            // Like an attempt's row (`per_row`): the next job is still sent; this one's
            // lease runs out and it is redelivered.
            Err(e) => {
                tracing::warn!(%job, order = %order_id, error = %e, "email job failed; the round goes on")
            }
        }
    }
    Ok(sent)
}

/// One confirmation-email job; true when this run sent it.
async fn send_email(state: &AppState, job: &str, order_id: &str) -> AppResult<bool> {
    let pool = state.store.pool();
    let now = state.clock.now_ms();
    let (id, until) = (job.to_owned(), state.policy.lease_until(now));
    let lease = state
        .store
        .write(async move |tx| jobs::lease_job(tx, &id, now, until).await);
    if !lease.await? {
        return Ok(false);
    }
    let Some((user, amount, currency)) = orders::order_summary(pool, order_id).await? else {
        ack(state, job).await?;
        return Ok(false);
    };
    // The "send" is the mailbox insert, in the transaction that sets the flag: the dev
    // mailbox is our own table. A real mailer is outside the database; it would get the
    // job id as its idempotency key, and the flag would be set right after it answers.
    let (order, ids) = (order_id.to_owned(), state.ids.clone());
    let send = state.store.write(async move |tx| {
        if !orders::flag_email_sent(&mut *tx, &order).await? {
            return Ok::<_, sqlx::Error>(false);
        }
        let subject = format!("Order {order}: payment received");
        let body = format!(
            "We received your payment of {amount} (minor units) {currency} for order {order}. Thank you!"
        );
        let mail = Mail {
            id: MailId::mint(&*ids),
            order_id: &order,
            user_id: &user,
            subject: &subject,
            body: &body,
        };
        mailbox::insert_mail(tx, &mail, now).await?;
        Ok(true)
    });
    let sent = send.await?;
    if sent {
        metrics::email(metrics::EmailResult::Sent);
    } else {
        tracing::info!(%job, order = %order_id, "confirmation already sent: redelivery is a no-op");
        metrics::email(metrics::EmailResult::AlreadySent);
    }
    failpoint(Failpoint::Email);
    ack(state, job).await?;
    Ok(sent)
}

async fn ack(state: &AppState, job: &str) -> AppResult<()> {
    let (id, now) = (job.to_owned(), state.clock.now_ms());
    let ack = state
        .store
        .write(async move |tx| jobs::ack_job(tx, &id, now).await);
    Ok(ack.await?)
}

/// Expired keys deleted per statement: each batch is one short transaction (a few ms), so
/// pays keep running while a large backlog is deleted.
const CLEANUP_BATCH: i64 = 1000;

/// Retention ([`RETENTION`]): each table in batches (yielding between them) until nothing of
/// it is left to delete. Returns how many rows were deleted.
pub async fn cleanup(state: &AppState) -> Result<u64, crate::error::AppError> {
    let now = state.clock.now_ms();
    let audit_before = state.policy.audit_before(now);
    let mut deleted = 0;
    for &(table, cond, horizon) in RETENTION {
        let at = match horizon {
            Horizon::Now => now,
            Horizon::AuditWindow => audit_before,
        };
        loop {
            let n = state
                .store
                .delete_batch((table, cond), at, CLEANUP_BATCH)
                .await?;
            deleted += n;
            if n < CLEANUP_BATCH.unsigned_abs() {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    Ok(deleted)
}
