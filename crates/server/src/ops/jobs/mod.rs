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
//! - **Receipt emails**: the job queue, at least once, through the mailer port
//!   (`src/mailer/`): a job is settled only after the mailer answered; a transient failure
//!   is due again later, a permanent one ends `failed` (docs/deploy.md, "Receipt emails").
//! - **Cleanup**: finished keys and tombstones after the key retention (never processing
//!   ones), audit rows and handled webhook events after the dispute window.
//!
//! One rule, one place: both the outbox worker and reconciliation call [`drive_abandoned`],
//! which runs the pay machine (`payonce_rules::pay::ServerPay::abandoned`, interpreted by
//! src/ops/pay.rs) from the retry's own step (pay rule 5): take the expired lease, ask the provider about
//! the provider key, settle from its answer (succeeded → paid; declined → unlocked), and
//! only when the provider has *no* charge, re-drive with the *same* provider key. We chose
//! re-driving over "mark failed" for "no charge": the processing attempt is the durable intent to
//! charge that the customer committed to, the order is still locked for it, and the same
//! provider key makes the re-drive safe even if an earlier call lands late.

use crate::error::AppResult;
use crate::faults::failpoint;
use crate::faults::Failpoint;
use crate::mailer::receipt;
use crate::metrics;
use crate::ops::pay;
use crate::state::OpsState;
use crate::store::jobs::{self, Due, FinalState, ReceiptFacts, Settle};
use crate::store::mailbox::Mail;
use crate::store::orders::get_order;
use crate::store::{self, attempts as db, Horizon, RETENTION};
use payonce_protocol::admin::actor::JOB;
use payonce_rules::ids::MailId;
use payonce_rules::pay::End;
use payonce_rules::receipt::ReceiptStep;
use payonce_rules::Record;
use std::time::Duration;

/// Rows handled per step and round, so one round stays short.
const BATCH: i64 = 20;

/// Receipt batches one round may send while a backlog lasts (`send_emails`).
const EMAIL_BATCHES: usize = 10;

/// Runs every job every `every` until `stop` changes (or its sender is gone). A round in
/// flight is never cut: a graceful stop (`src/server.rs`) waits for it, so a rollout does
/// not stop a receipt between the relay's 250 and its commit (it would be sent again).
pub(crate) async fn work_every(state: OpsState, every: Duration, mut stop: Stop) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        round(&state).await;
    }
}

/// What tells a background loop to end after its round in flight.
pub(crate) type Stop = tokio::sync::watch::Receiver<()>;

/// One round of every job; failures are logged and retried next round.
/// Its provider calls are journaled as the job's (`src/journal.rs`).
pub(crate) async fn round(state: &OpsState) {
    use crate::journal::{scoped, Scope};
    let scope = Scope::immediate(JOB, None, state.store.clone(), state.clock.clone());
    scoped(scope, async {
        let n = |r: AppResult<usize>| r.map(|n| n as u64);
        report("outbox", n(drain_outbox(state).await));
        report("reconciliation", n(reconcile_stuck(state).await));
        report("refunds", n(drive_refunds(state).await));
        report("email", n(send_emails(state).await));
        report("cleanup", cleanup(state).await);
    })
    .await
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
    state: &OpsState,
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
                store::pay::check_later(&state.store, p, at, now).await?;
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
pub(crate) async fn drain_outbox(state: &OpsState) -> AppResult<usize> {
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
pub(crate) async fn reconcile_stuck(state: &OpsState) -> AppResult<usize> {
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
pub(crate) async fn drive_refunds(state: &OpsState) -> AppResult<usize> {
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
async fn flag_for_review(state: &OpsState, row: &Record) -> AppResult<()> {
    let now = state.clock.now_ms();
    let entry = payonce_rules::plan::review_entry(row.id());
    if !store::pay::flag_unknown(&state.store, row.id(), &entry, now).await? {
        return Ok(());
    }
    tracing::error!(attempt = %row.id(), order = %row.order_id(), "attempt flagged for manual review");
    metrics::reconciliation(metrics::ReconcileResult::ManualReview);
    Ok(())
}

/// Delivers the due receipt jobs (migrations/0013_receipt_outbox.sql). At least once: the
/// lease is the redelivery timer, and the job is settled only after the mailer answered.
///
/// A transient failure ends the round's receipts: the relay is likely down for all of
/// them, and a relay that never answers would otherwise hold the round (and the jobs after
/// it) for `BATCH` × `--smtp-timeout-ms`. The rest are tried next round.
pub(crate) async fn send_emails(state: &OpsState) -> AppResult<usize> {
    let mut sent = 0;
    // A backlog is drained several batches a round: one batch a round capped receipts at
    // BATCH per instance and round, below the pay rate of a busy shop (the chaos audit's
    // large run left paid orders without a receipt). A batch leases its rows, so the next
    // batch, and the other instances', read different ones.
    for _ in 0..EMAIL_BATCHES {
        let due = jobs::due(state.store.pool(), state.clock.now_ms(), BATCH).await?;
        let full = due.len() as i64 == BATCH;
        for job in due {
            match send_email(state, &job).await {
                Ok(Run::Sent) => sent += 1,
                Ok(Run::Other) => {}
                Ok(Run::RelayTrouble) => return Ok(sent),
                // Like an attempt's row (`per_row`): the next job is still sent; this one's
                // lease runs out and it is redelivered.
                Err(e) => {
                    tracing::warn!(job = %job.id, order = %job.order_id, error = %e, "email job failed; the round goes on")
                }
            }
        }
        if !full {
            break;
        }
    }
    Ok(sent)
}

/// One receipt job, and what its run came to. The mailer's answer decides what is
/// written (`payonce_rules::receipt::after`); the write is `store::jobs::settle`, after the
/// answer: a crash in between (the `email` failpoint) leaves the job to its lease, and the
/// next run sends the same message, with the same `Message-ID`, once more.
async fn send_email(state: &OpsState, job: &Due) -> AppResult<Run> {
    let now = state.clock.now_ms();
    if !jobs::lease(&state.store, &job.id, now, state.policy.lease_until(now)).await? {
        return Ok(Run::Other);
    }
    let settle = match jobs::receipt_facts(state.store.pool(), &job.order_id).await? {
        Some(facts) => deliver(state, job, &facts).await,
        // Jobs are written with a payment (src/store/pay.rs): a row that lost it is a
        // fault for an operator, not something a retry fixes.
        None => Settle::Final {
            state: FinalState::Failed,
            error: "the order has no payment to send a receipt for".into(),
        },
    };
    failpoint(Failpoint::Email);
    let now = state.clock.now_ms();
    let settled = jobs::settle(&state.store, &job.id, &job.order_id, &settle, now).await?;
    if !settled {
        tracing::info!(job = %job.id, order = %job.order_id, "receipt already settled: redelivery is a no-op");
        metrics::email(metrics::EmailResult::AlreadySent);
        return Ok(Run::Other);
    }
    report_receipt(job, &settle);
    Ok(match settle {
        Settle::Sent(_) => Run::Sent,
        Settle::Retry { .. } => Run::RelayTrouble,
        Settle::Final { .. } => Run::Other,
    })
}

/// What one receipt job's run came to, for the round.
enum Run {
    /// Delivered by this run.
    Sent,
    /// The relay failed transiently: the round's other receipts wait for the next round.
    RelayTrouble,
    /// Anything else (leased or settled by another run, failed for good, not sent).
    Other,
}

/// Asks the mailer to deliver `facts`' receipt; how the job ends.
async fn deliver(state: &OpsState, job: &Due, facts: &ReceiptFacts) -> Settle {
    use crate::mailer::Mailer;
    let final_ = |state, error: &str| Settle::Final {
        state,
        error: error.to_owned(),
    };
    let smtp = match &state.config.mailer {
        Mailer::None => return final_(FinalState::NotSent, "--mailer none"),
        // The dev mailbox is the user's: no address needed, written with the settle.
        Mailer::Dev => {
            let r = receipt::compose(facts, "payonce.dev");
            return Settle::Sent(Some(Mail {
                id: MailId::mint(&*state.ids),
                order_id: facts.order_id.clone(),
                user_id: facts.user_id.clone(),
                subject: r.subject,
                body: r.text,
            }));
        }
        Mailer::Smtp(smtp) => smtp,
    };
    let Some(to) = crate::mailer::recipient(facts.address.as_deref()) else {
        return final_(
            FinalState::NoAddress,
            "the order's address is not a mail address",
        );
    };
    let outgoing = receipt::compose(facts, smtp.domain());
    let answer = smtp.send(to, &outgoing).await;
    let spread = payonce_rules::receipt::spread(&job.id);
    match payonce_rules::receipt::after(answer, job.tries + 1, state.clock.now_ms(), spread) {
        ReceiptStep::Sent => Settle::Sent(None),
        ReceiptStep::RetryAt { at, error } => Settle::Retry { at, error },
        ReceiptStep::Failed(error) => final_(FinalState::Failed, &error),
    }
}

/// The metric and log line of a settled receipt.
fn report_receipt(job: &Due, settle: &Settle) {
    use metrics::EmailResult as R;
    let (id, order) = (&job.id, &job.order_id);
    match settle {
        Settle::Sent(_) => metrics::email(R::Sent),
        Settle::Retry { at, error } => {
            tracing::warn!(job = %id, order = %order, retry_at = at, %error, "receipt not delivered; tried again later");
            metrics::email(R::Retried);
        }
        Settle::Final {
            state: FinalState::Failed,
            error,
        } => {
            tracing::error!(job = %id, order = %order, %error, "receipt failed for good: an operator's to send");
            metrics::email(R::Failed);
        }
        Settle::Final {
            state: FinalState::NoAddress,
            error,
        } => {
            tracing::info!(job = %id, order = %order, %error, "no receipt: no address");
            metrics::email(R::NoAddress);
        }
        Settle::Final {
            state: FinalState::NotSent,
            ..
        } => metrics::email(R::NotSent),
    }
}

/// Expired keys deleted per statement: each batch is one short transaction (a few ms), so
/// pays keep running while a large backlog is deleted.
const CLEANUP_BATCH: i64 = 1000;

/// Retention ([`RETENTION`]): each table in batches (yielding between them) until nothing of
/// it is left to delete; then the journal (`store::journal::retire`: on PostgreSQL whole
/// days dropped and the next days' partitions made ready). Returns how many rows were
/// deleted, counting a dropped day of the journal as one.
pub(crate) async fn cleanup(state: &OpsState) -> Result<u64, crate::error::AppError> {
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
    let journal = store::journal::retire(&state.store, now, audit_before, CLEANUP_BATCH).await?;
    Ok(deleted + journal.rows + journal.dropped)
}
