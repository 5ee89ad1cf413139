//! Refund keys: one row per `(user, refund key)`, at most one per payment that is not
//! `failed` (full refunds only), each with the answer to replay once final. What a refund
//! writes is planned by the rules (`payonce_rules::refund`: the claim, the settle, a
//! payment becoming refunded); each plan is a list of conditional statements here, run by
//! the backend's executor (`tx.rs`), so the row counts decide the races.

use super::journal as log;
use super::payments::get_payment;
use super::tx::{Need, Statement};
use super::{audit, decode_err, Leased, Store};
use payonce_protocol::{IdempotencyKey, Payment};
use payonce_rules::decision;
use payonce_rules::ids::{AttemptId, PaymentId, RefundId};
use payonce_rules::refund::{
    Claimed, Lease, MarkRefunded, RefundClaimPlan, RefundRecord, RefundState, SettleRefund,
};
use payonce_rules::Answer;
use sqlx::any::AnyExecutor;

/// One refund row, as read.
#[derive(Debug, Clone, sqlx::FromRow)]
struct RefundRow {
    id: String,
    payment_id: String,
    provider_refund_key: String,
    /// `processing`, `succeeded` or `failed` (the provider refused, nothing was refunded).
    status: String,
    response_status: Option<i64>,
    response_body: Option<String>,
}

impl RefundRow {
    /// The row as the rules' record: a final row carries its answer, a processing one none.
    /// A row that fits neither is a decode error (the statements below never write one).
    fn record(self) -> sqlx::Result<RefundRecord> {
        let answer = match (self.response_status, self.response_body) {
            (Some(status), Some(body)) => u16::try_from(status)
                .ok()
                .map(|status| Answer { status, body }),
            _ => None,
        };
        let state = match (self.status.as_str(), answer) {
            ("processing", None) => RefundState::Processing,
            ("succeeded", Some(a)) => RefundState::Refunded(a),
            ("failed", Some(a)) => RefundState::Failed(a),
            (status, _) => {
                let why = format!(
                    "refund {}: status {status} does not fit its answer",
                    self.id
                );
                return Err(decode_err(why));
            }
        };
        Ok(RefundRecord {
            id: RefundId::from_stored(self.id),
            payment_id: PaymentId::from_stored(self.payment_id),
            provider_refund_key: self.provider_refund_key,
            state,
        })
    }
}

/// The caller's refund row for `key` (another user's is invisible).
pub(crate) async fn find<'c>(
    e: impl AnyExecutor<'c>,
    user: &str,
    key: &str,
) -> sqlx::Result<Option<RefundRecord>> {
    let row: Option<RefundRow> = sqlx::query_as(
        "SELECT id, payment_id, provider_refund_key, status, response_status, response_body
         FROM refunds WHERE user_id = $1 AND idem_key = $2",
    )
    .bind(user)
    .bind(key)
    .fetch_optional(e)
    .await?;
    row.map(RefundRow::record).transpose()
}

/// Claims the refund: inserts its processing row unless `(user, key)` or the payment's one
/// refund slot is taken. Which slot was taken is read after the insert lost: our key's row
/// exists (decide again with it) or the payment's refund belongs to another key.
pub(crate) async fn claim(
    store: &Store,
    plan: &RefundClaimPlan,
    now: i64,
) -> sqlx::Result<Claimed> {
    let insert = Statement::new(
        "INSERT INTO refunds (id, user_id, idem_key, payment_id, provider_refund_key, status,
           created_at, updated_at)
         SELECT $1, $2, $3, $4, $5, 'processing', $6, $6 WHERE true",
        vec![
            (&plan.id).into(),
            (&plan.user).into(),
            plan.key.as_str().into(),
            (&plan.payment_id).into(),
            (&plan.provider_refund_key).into(),
            now.into(),
        ],
    )
    .tail("ON CONFLICT DO NOTHING");
    if store.commit(vec![insert]).await?[0] == 1 {
        return Ok(Claimed::Won);
    }
    Ok(
        match find(store.pool(), &plan.user, plan.key.as_str()).await? {
            Some(_) => Claimed::KeyTaken,
            None => Claimed::PaymentTaken,
        },
    )
}

/// Takes the processing refund's lease for one provider call, if nobody holds an
/// unexpired one (exactly one contender wins).
pub(crate) async fn take_lease(store: &Store, lease: &Lease, now: i64) -> sqlx::Result<bool> {
    let (id, token) = (&lease.refund_id, &lease.token);
    let take = super::take_lease(Leased::Refunds, id, token, now, lease.until).need(Need::Row);
    let journal = log::refund_decision(&decision::refund_lease(), id, now);
    Ok(store.commit(vec![take, journal]).await?[0] == 1)
}

/// Keeps the lease until `until`: a call whose answer was lost may land until then, and no
/// other contender may call meanwhile (`crates/rules/src/refund.rs`, `Effect::HoldLease`).
pub(crate) async fn hold_lease(store: &Store, lease: &Lease, until: i64) -> sqlx::Result<()> {
    let hold = Statement::new(
        "UPDATE refunds SET locked_until = $1 WHERE id = $2 AND lease_token = $3",
        vec![
            until.into(),
            (&lease.refund_id).into(),
            (&lease.token).into(),
        ],
    );
    store.commit(vec![hold]).await?;
    Ok(())
}

/// Ends the lease early (no call in flight): the next retry may read the provider at once.
pub(crate) async fn release_lease(store: &Store, lease: &Lease) -> sqlx::Result<()> {
    let release = Statement::new(
        "UPDATE refunds SET locked_until = NULL, lease_token = NULL
         WHERE id = $1 AND lease_token = $2",
        vec![(&lease.refund_id).into(), (&lease.token).into()],
    );
    store.commit(vec![release]).await?;
    Ok(())
}

/// The settle of a processing refund, in one transaction: the row's final status and
/// answer, then (refunded) the payment, its order and its attempt, or (failed) the
/// payment's audit row. False when the refund was no longer processing (someone else
/// settled it first); then nothing was written.
pub(crate) async fn settle(store: &Store, plan: &SettleRefund, now: i64) -> sqlx::Result<bool> {
    let (id, status, refund_id, answer, expires_at) = match plan {
        SettleRefund::Refunded {
            id,
            provider_refund_id,
            answer,
            expires_at,
            ..
        } => (
            id,
            "succeeded",
            Some(provider_refund_id.as_str()),
            answer,
            *expires_at,
        ),
        SettleRefund::Failed {
            id,
            answer,
            expires_at,
            ..
        } => (id, "failed", None, answer, *expires_at),
    };
    let mut list = vec![Statement::new(
        "UPDATE refunds SET status = $1, refund_id = $2, response_status = $3,
           response_body = $4, updated_at = $5, expires_at = $6
         WHERE id = $7 AND status = 'processing'",
        vec![
            status.into(),
            refund_id.into(),
            i64::from(answer.status).into(),
            (&answer.body).into(),
            now.into(),
            expires_at.into(),
            id.into(),
        ],
    )
    .need(Need::Row)];
    match plan {
        SettleRefund::Refunded { mark, .. } => list.extend(mark_statements(mark, now)),
        SettleRefund::Failed { audit, .. } => list.push(audit::insert(audit, now)),
    }
    list.push(log::refund_decision(
        &decision::refund_settle(plan),
        id,
        now,
    ));
    Ok(store.commit(list).await?[0] == 1)
}

/// Marks the payment, its order and its attempt refunded with their audit rows, in one
/// transaction. False: the payment was not `succeeded` (refunded already), and nothing
/// changed.
pub(crate) async fn mark_refunded(
    store: &Store,
    mark: &MarkRefunded,
    now: i64,
) -> sqlx::Result<bool> {
    let mut list = mark_statements(mark, now);
    let about = log::About {
        order_id: Some(&mark.order_id),
        attempt_id: Some(&mark.attempt_id),
        ..log::About::default()
    };
    list.push(log::decision(
        &decision::refunded_at_provider(mark),
        &about,
        now,
    ));
    Ok(store.commit(list).await?[0] == 1)
}

/// `[payment, order, attempt, audit…]`: everything after the payment's conditional update
/// runs only when it moved.
fn mark_statements(mark: &MarkRefunded, now: i64) -> Vec<Statement> {
    let mut list = vec![
        Statement::new(
            "UPDATE payments SET status = 'refunded' WHERE id = $1 AND status = 'succeeded'",
            vec![(&mark.payment_id).into()],
        )
        .need(Need::Row),
        Statement::new(
            "UPDATE orders SET status = 'refunded', updated_at = $1 WHERE id = $2 AND status = 'paid'",
            vec![now.into(), (&mark.order_id).into()],
        ),
        Statement::new(
            "UPDATE attempts SET status = 'refunded', updated_at = $1
             WHERE id = $2 AND status = 'succeeded'",
            vec![now.into(), (&mark.attempt_id).into()],
        ),
    ];
    list.extend(audit::insert_all(&mark.audit, now));
    list
}

/// A payment, if it pays one of `user`'s orders.
pub(crate) async fn owned_payment<'c>(
    e: impl AnyExecutor<'c> + Copy,
    user: &str,
    payment_id: &str,
) -> sqlx::Result<Option<(Payment, AttemptId)>> {
    let owner: Option<(String,)> = sqlx::query_as(
        "SELECT p.attempt_id FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.id = $1 AND o.user_id = $2",
    )
    .bind(payment_id)
    .bind(user)
    .fetch_optional(e)
    .await?;
    let Some((attempt_id,)) = owner else {
        return Ok(None);
    };
    let attempt_id = AttemptId::from_stored(attempt_id);
    Ok(get_payment(e, payment_id).await?.map(|p| (p, attempt_id)))
}

/// A processing refund row with whose it is: what the refund job and provider refund
/// events drive.
#[derive(Debug, Clone)]
pub(crate) struct Processing {
    /// The caller.
    pub(crate) user: String,
    /// Its refund key.
    pub(crate) key: IdempotencyKey,
    /// The payment refunded.
    pub(crate) payment_id: String,
    /// The row.
    pub(crate) record: RefundRecord,
}

#[derive(sqlx::FromRow)]
struct ProcessingRow {
    user_id: String,
    idem_key: String,
    #[sqlx(flatten)]
    row: RefundRow,
}

impl ProcessingRow {
    fn processing(self) -> sqlx::Result<Processing> {
        let key = IdempotencyKey::parse(&self.idem_key)
            .map_err(|_| decode_err(format!("refund {}: unreadable key", self.row.id)))?;
        let record = self.row.record()?;
        Ok(Processing {
            user: self.user_id,
            key,
            payment_id: record.payment_id.to_string(),
            record,
        })
    }
}

/// Up to `limit` processing refunds created at or before `before` whose lease has ended at
/// `now` (or that never had one), oldest first: the refund job's work list.
pub(crate) async fn processing_due<'c>(
    e: impl AnyExecutor<'c>,
    before: i64,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<Processing>> {
    let rows: Vec<ProcessingRow> = sqlx::query_as(
        "SELECT user_id, idem_key, id, payment_id, provider_refund_key, status,
           response_status, response_body
         FROM refunds
         WHERE status = 'processing' AND created_at <= $1
           AND (locked_until IS NULL OR locked_until <= $2)
         ORDER BY created_at LIMIT $3",
    )
    .bind(before)
    .bind(now)
    .bind(limit)
    .fetch_all(e)
    .await?;
    rows.into_iter().map(ProcessingRow::processing).collect()
}

/// The processing payonce refund of `payment_id`, if any (at most one: the payment's one
/// refund slot that is not failed).
pub(crate) async fn processing_of_payment<'c>(
    e: impl AnyExecutor<'c>,
    payment_id: &str,
) -> sqlx::Result<Option<Processing>> {
    let row: Option<ProcessingRow> = sqlx::query_as(
        "SELECT user_id, idem_key, id, payment_id, provider_refund_key, status,
           response_status, response_body
         FROM refunds WHERE payment_id = $1 AND status = 'processing'",
    )
    .bind(payment_id)
    .fetch_optional(e)
    .await?;
    row.map(ProcessingRow::processing).transpose()
}
