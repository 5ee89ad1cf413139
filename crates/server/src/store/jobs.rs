//! The job queue: the receipt email of each paid order (migrations/0003, 0013). A job is
//! leased, run, and settled in one transaction of statements ([`settle`]): sent, due again
//! later, or final without a delivery. At least once: the lease is the redelivery timer,
//! and the settle is written only after the mailer answered (src/ops/jobs/mod.rs).

use super::journal::{self as log, About};
use super::mailbox::{self, Mail};
use super::tx::{Need, Statement};
use super::Store;
use payonce_protocol::admin::{decision, email};
use payonce_protocol::OrderLine;
use payonce_rules::decision::Decision;
use sqlx::any::AnyExecutor;
use sqlx::Row;

/// A job whose lease is free and whose time has come.
#[derive(Debug, Clone)]
pub(crate) struct Due {
    pub id: String,
    pub order_id: String,
    /// Runs that ended without a delivery so far.
    pub tries: i64,
}

/// Pending jobs whose lease is free and which are due at `now`, oldest first.
pub(crate) async fn due<'c>(
    e: impl AnyExecutor<'c>,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<Due>> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT id, order_id, tries FROM jobs
         WHERE done_at IS NULL AND (locked_until IS NULL OR locked_until <= $1)
           AND (next_attempt_at IS NULL OR next_attempt_at <= $1)
         ORDER BY created_at LIMIT $2",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(e)
    .await?;
    let due = |(id, order_id, tries)| Due {
        id,
        order_id,
        tries,
    };
    Ok(rows.into_iter().map(due).collect())
}

/// Leases job `id` until `until` (one delivery). False if another worker leased or
/// settled it first.
pub(crate) async fn lease(store: &Store, id: &str, now: i64, until: i64) -> sqlx::Result<bool> {
    let lease = Statement::new(
        "UPDATE jobs SET locked_until = $1, deliveries = deliveries + 1
         WHERE id = $2 AND done_at IS NULL AND (locked_until IS NULL OR locked_until <= $3)",
        vec![until.into(), id.into(), now.into()],
    );
    Ok(store.commit(vec![lease]).await?[0] == 1)
}

/// What a receipt says, read from the stored order and payment (never recomputed).
#[derive(Debug, Clone)]
pub(crate) struct ReceiptFacts {
    pub order_id: String,
    pub user_id: String,
    pub items: Vec<OrderLine>,
    /// The order's address: where the receipt goes when it is a mail address.
    pub address: Option<String>,
    pub payment_id: String,
    /// The payment's amount in minor units and its currency, as charged.
    pub amount: i64,
    pub currency: String,
}

/// The receipt of `order_id`'s payment; `None` when the order has none (any more).
pub(crate) async fn receipt_facts<'c>(
    e: impl AnyExecutor<'c>,
    order_id: &str,
) -> sqlx::Result<Option<ReceiptFacts>> {
    let row = sqlx::query(
        "SELECT o.user_id, o.items, o.address, p.id AS payment_id, p.amount, p.currency
         FROM orders o JOIN payments p ON p.order_id = o.id WHERE o.id = $1",
    )
    .bind(order_id)
    .fetch_optional(e)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let items: String = row.try_get("items")?;
    Ok(Some(ReceiptFacts {
        order_id: order_id.to_owned(),
        user_id: row.try_get("user_id")?,
        items: serde_json::from_str(&items).map_err(|e| super::decode_err(e.to_string()))?,
        address: row.try_get("address")?,
        payment_id: row.try_get("payment_id")?,
        amount: row.try_get("amount")?,
        currency: row.try_get("currency")?,
    }))
}

/// How one run of a receipt job ends (`payonce_rules::receipt` decides which).
#[derive(Debug, Clone)]
pub(crate) enum Settle {
    /// Delivered: the relay answered 2xx, or (`Some`) this dev mailbox row is the delivery,
    /// written in the same transaction.
    Sent(Option<Mail>),
    /// Not delivered; due again at `at`.
    Retry { at: i64, error: String },
    /// Final without a delivery, in this state (`failed`, `no_address`, `not_sent`).
    Final { state: FinalState, error: String },
}

/// A job's final state other than `sent` (the `jobs.state` column's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinalState {
    /// The relay refused it for good, or it kept failing.
    Failed,
    /// The order has no mail address.
    NoAddress,
    /// `--mailer none`.
    NotSent,
}

impl FinalState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::NoAddress => "no_address",
            Self::NotSent => "not_sent",
        }
    }
}

/// Writes how job `id` (of order `order_id`) ended, in one transaction. False when the job
/// was already settled (another worker's run, whose write stands): nothing was written.
pub(crate) async fn settle(
    store: &Store,
    id: &str,
    order_id: &str,
    how: &Settle,
    now: i64,
) -> sqlx::Result<bool> {
    let mut list = settle_statements(id, order_id, how, now);
    let about = About {
        order_id: Some(order_id),
        ..About::default()
    };
    list.push(log::decision(&how.decision(), &about, now));
    let counts = store.commit(list).await?;
    Ok(counts[0] == 1)
}

impl Settle {
    /// The run's end as the journal keeps it.
    fn decision(&self) -> Decision {
        let (outcome, why) = match self {
            Self::Sent(_) => (email::SENT, "delivered"),
            Self::Retry { error, .. } => (email::RETRY, error.as_str()),
            Self::Final { state, error } => {
                let why = format!("{}: {error}", state.as_str());
                return Decision::new(decision::EMAIL, Some(email::FAILED), &why);
            }
        };
        Decision::new(decision::EMAIL, Some(outcome), why)
    }
}

/// `[the job's row, …what a delivery writes]` (the caller adds the journal's row): the job's
/// update gates the rest, so a job settled twice flags and fills the mailbox once.
fn settle_statements(id: &str, order_id: &str, how: &Settle, now: i64) -> Vec<Statement> {
    match how {
        Settle::Sent(mail) => {
            let job = Statement::new(
                "UPDATE jobs SET state = 'sent', done_at = $1, locked_until = NULL,
                     tries = tries + 1, last_error = NULL
                 WHERE id = $2 AND done_at IS NULL",
                vec![now.into(), id.into()],
            );
            let flag = Statement::new(
                "UPDATE orders SET confirmation_email_sent = 1
                 WHERE id = $1 AND confirmation_email_sent = 0",
                vec![order_id.into()],
            );
            let mut list = vec![job.need(Need::Row), flag];
            list.extend(mail.iter().map(|m| mailbox::insert(m, now)));
            list
        }
        Settle::Retry { at, error } => vec![Statement::new(
            "UPDATE jobs SET locked_until = NULL, tries = tries + 1, next_attempt_at = $1,
                 last_error = $2
             WHERE id = $3 AND done_at IS NULL",
            vec![(*at).into(), error.as_str().into(), id.into()],
        )
        .need(Need::Row)],
        Settle::Final { state, error } => vec![Statement::new(
            "UPDATE jobs SET state = $1, done_at = $2, locked_until = NULL, tries = tries + 1,
                 last_error = $3
             WHERE id = $4 AND done_at IS NULL",
            vec![
                state.as_str().into(),
                now.into(),
                error.as_str().into(),
                id.into(),
            ],
        )
        .need(Need::Row)],
    }
}

/// Receipts not settled yet whose job was created at or before `before` (the "waiting too
/// long" gauge of `GET /metrics`).
pub(crate) async fn waiting_since<'c>(e: impl AnyExecutor<'c>, before: i64) -> sqlx::Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM jobs WHERE done_at IS NULL AND created_at <= $1")
            .bind(before)
            .fetch_one(e)
            .await?;
    Ok(n)
}
