//! The `attempts` table: idempotency rows (pay attempts and cancel tombstones). Every state
//! change is one conditional statement, so the database decides races, not the application.

use super::decode_err;
use payonce_protocol::AttemptStatus;
use payonce_rules::ids::{AttemptId, OrderId};
use payonce_rules::{Answer, Final, Processing, Record, Terms, Tombstone};
use sqlx::any::AnyExecutor;

/// One `(user, key)` row as stored; [`record`] turns it into a [`Record`] once.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    id: String,
    user_id: String,
    order_id: String,
    status: String,
    fingerprint: Option<String>,
    order_version: Option<i64>,
    amount: Option<i64>,
    currency: Option<String>,
    payment_method_id: Option<String>,
    provider_key: Option<String>,
    provider_ref: Option<String>,
    locked_until: Option<i64>,
    response_status: Option<i64>,
    response_body: Option<String>,
    expires_at: Option<i64>,
    created_at: i64,
}

/// The columns [`AttemptRow`] reads, for queries that alias `attempts` as `a`: the one
/// list, so a new column cannot be read by one lookup and forgotten by another.
macro_rules! attempt_columns {
    () => {
        "a.id, a.user_id, a.order_id, a.status, a.fingerprint, a.order_version, a.amount,
         a.currency, a.payment_method_id, a.provider_key, a.provider_ref, a.locked_until,
         a.response_status, a.response_body, a.expires_at, a.created_at"
    };
}

/// `attempt_columns!` for queries built at run time.
pub(crate) const ATTEMPT_COLUMNS: &str = attempt_columns!();

/// The row as a [`Record`]. A row that fits no variant (a final attempt without its answer,
/// a processing one without its charge details) is a decode error: refusing to guess is
/// the safe answer, and the migrations' constraints never write one.
pub(crate) fn record(r: AttemptRow) -> sqlx::Result<Record> {
    let bad = |what: &str| decode_err(format!("attempt {}: {what}", r.id));
    let status = AttemptStatus::parse(&r.status).ok_or_else(|| bad("unknown status"))?;
    // A tombstone holds no answer; a cancelled attempt (its customer cancelled the payment
    // that waited for them) keeps the answer it settled with, replayed like any final one.
    if status == AttemptStatus::Cancelled && r.response_body.is_none() {
        return Ok(Record::Tombstone(Tombstone {
            expires_at: r
                .expires_at
                .ok_or_else(|| bad("tombstone without expiry"))?,
            order_version: r.order_version,
            id: AttemptId::from_stored(r.id),
            user: r.user_id,
            order_id: OrderId::from_stored(r.order_id),
        }));
    }
    let terms = Terms {
        fingerprint: r.fingerprint.clone().ok_or_else(|| bad("no fingerprint"))?,
        order_version: r.order_version.ok_or_else(|| bad("no version"))?,
        amount: r.amount.ok_or_else(|| bad("no amount"))?,
        currency: r.currency.clone().ok_or_else(|| bad("no currency"))?,
        user: r.user_id.clone(),
        order_id: OrderId::from_stored(r.order_id.as_str()),
    };
    if status == AttemptStatus::Processing {
        return Ok(Record::Processing(Processing {
            payment_method_id: r
                .payment_method_id
                .clone()
                .ok_or_else(|| bad("no method"))?,
            provider_key: r
                .provider_key
                .clone()
                .ok_or_else(|| bad("no provider key"))?,
            provider_ref: r.provider_ref.clone(),
            locked_until: r.locked_until,
            created_at: r.created_at,
            id: AttemptId::from_stored(r.id),
            terms,
        }));
    }
    let answer = match (r.response_status, r.response_body.clone()) {
        (Some(code), Some(body)) => Answer {
            status: u16::try_from(code).map_err(|_| bad("bad answer status"))?,
            body,
        },
        _ => return Err(bad("final without its answer")),
    };
    Ok(Record::Final(Final {
        expires_at: r.expires_at.ok_or_else(|| bad("final without expiry"))?,
        id: AttemptId::from_stored(r.id),
        terms,
        status,
        answer,
    }))
}

/// `SELECT <every column of AttemptRow> FROM attempts a WHERE <cond>`, as one static text.
macro_rules! select_attempt {
    ($cond:literal) => {
        concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts a WHERE ",
            $cond
        )
    };
}

/// Looks a key up in the caller's scope only: `(user, key)`. Another user's row with the
/// same key is invisible.
pub(crate) async fn find<'c>(
    e: impl AnyExecutor<'c>,
    user: &str,
    key: &str,
) -> sqlx::Result<Option<Record>> {
    let row: Option<AttemptRow> =
        sqlx::query_as(select_attempt!("a.user_id = $1 AND a.idem_key = $2"))
            .bind(user)
            .bind(key)
            .fetch_optional(e)
            .await?;
    row.map(record).transpose()
}

/// The attempt that owns a provider key (provider keys are unique).
pub(crate) async fn find_by_provider_key<'c>(
    e: impl AnyExecutor<'c>,
    provider_key: &str,
) -> sqlx::Result<Option<Record>> {
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("a.provider_key = $1"))
        .bind(provider_key)
        .fetch_optional(e)
        .await?;
    row.map(record).transpose()
}

/// The attempt whose saved provider object id is `provider_ref` (a Stripe PaymentIntent
/// id, for its webhooks).
pub(crate) async fn find_by_provider_ref<'c>(
    e: impl AnyExecutor<'c>,
    provider_ref: &str,
) -> sqlx::Result<Option<Record>> {
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("a.provider_ref = $1"))
        .bind(provider_ref)
        .fetch_optional(e)
        .await?;
    row.map(record).transpose()
}

/// An attempt by id.
pub(crate) async fn find_by_id<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
) -> sqlx::Result<Option<Record>> {
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("a.id = $1"))
        .bind(id)
        .fetch_optional(e)
        .await?;
    row.map(record).transpose()
}

/// Which `attempts` rows retention may delete at `$1` (now), as
/// `payonce_rules::policy::deletable` says: finished keys past their retention, and
/// tombstones past theirs whose order is no longer payable at their version (a NULL version
/// stands for every version). Processing rows never: their outcome is still unknown; nor an
/// attempt flagged for review after it settled (a payment of it succeeded anyway:
/// migrations/0012_orders_held_for_review.sql). The one place this condition is written.
pub(crate) const EXPIRED: &str =
    "status <> 'processing' AND expires_at IS NOT NULL AND expires_at < $1
    AND needs_review_at IS NULL
    AND NOT (status = 'cancelled' AND EXISTS (SELECT 1 FROM orders o WHERE o.id = attempts.order_id
        AND o.status = 'unpaid' AND o.version = COALESCE(attempts.order_version, o.version)))";

/// Processing attempts created before `before` whose lease has expired: the
/// reconciliation job's work list, and with `before = now` the outbox worker's. Oldest first.
pub(crate) async fn stuck_since<'c>(
    e: impl AnyExecutor<'c>,
    before: i64,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<Record>> {
    let sql = format!(
        "SELECT {ATTEMPT_COLUMNS} FROM attempts a
         WHERE a.status = 'processing' AND a.created_at <= $1 AND a.needs_review_at IS NULL
           AND (a.locked_until IS NULL OR a.locked_until <= $2)
           AND (a.next_check_at IS NULL OR a.next_check_at <= $2)
         ORDER BY a.created_at LIMIT $3"
    );
    let rows: Vec<AttemptRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(before)
        .bind(now)
        .bind(limit)
        .fetch_all(e)
        .await?;
    rows.into_iter().map(record).collect()
}

/// How many attempts are processing that were created at or before each of `before`, in one
/// statement, so the figures are one snapshot and cannot disagree with each other. The
/// first bound must be the latest: it is the `WHERE` bound, which the partial index serves.
pub(crate) async fn processing_before<'c>(
    e: impl AnyExecutor<'c>,
    before: [i64; 4],
) -> sqlx::Result<[i64; 4]> {
    let q = "SELECT COUNT(*), COUNT(*) FILTER (WHERE created_at <= $2),
        COUNT(*) FILTER (WHERE created_at <= $3), COUNT(*) FILTER (WHERE created_at <= $4)
        FROM attempts WHERE status = 'processing' AND created_at <= $1";
    let q = before.iter().fold(sqlx::query_as(q), |q, at| q.bind(*at));
    let (a, b, c, d) = q.fetch_one(e).await?;
    Ok([a, b, c, d])
}
