//! The `attempts` table: idempotency rows (pay attempts and cancel tombstones). Every state
//! change is one conditional statement, so the database decides races, not the application.

use super::orders::decode_err;
use payonce_protocol::AttemptStatus;
use payonce_rules::plan::Finish;
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
    locked_until: Option<i64>,
    response_status: Option<i64>,
    response_body: Option<String>,
    expires_at: Option<i64>,
}

/// The columns [`AttemptRow`] reads, for queries that alias `attempts` as `a`.
pub(crate) const ATTEMPT_COLUMNS: &str =
    "a.id, a.user_id, a.order_id, a.status, a.fingerprint, a.order_version, a.amount, a.currency,
     a.payment_method_id, a.provider_key, a.locked_until, a.response_status, a.response_body,
     a.expires_at";

/// The row as a [`Record`]. A row that fits no variant (a final attempt without its answer,
/// a processing one without its charge details) is a decode error: refusing to guess is
/// the safe answer, and the migrations' constraints never write one.
pub(crate) fn record(r: AttemptRow) -> sqlx::Result<Record> {
    let bad = |what: &str| decode_err(format!("attempt {}: {what}", r.id));
    let status = AttemptStatus::parse(&r.status).ok_or_else(|| bad("unknown status"))?;
    if status == AttemptStatus::Cancelled {
        return Ok(Record::Tombstone(Tombstone {
            expires_at: r
                .expires_at
                .ok_or_else(|| bad("tombstone without expiry"))?,
            order_version: r.order_version,
            id: r.id,
            user: r.user_id,
            order_id: r.order_id,
        }));
    }
    let terms = Terms {
        fingerprint: r.fingerprint.clone().ok_or_else(|| bad("no fingerprint"))?,
        order_version: r.order_version.ok_or_else(|| bad("no version"))?,
        amount: r.amount.ok_or_else(|| bad("no amount"))?,
        currency: r.currency.clone().ok_or_else(|| bad("no currency"))?,
        user: r.user_id.clone(),
        order_id: r.order_id.clone(),
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
            locked_until: r.locked_until,
            id: r.id,
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
        id: r.id,
        terms,
        status,
        answer,
    }))
}

/// `SELECT <every column of AttemptRow> FROM attempts WHERE <cond>`, one column list for
/// every lookup so a new column cannot be read by one and forgotten by another.
macro_rules! select_attempt {
    ($cond:literal) => {
        concat!(
            "SELECT id, user_id, order_id, status, fingerprint, order_version, amount, currency, ",
            "payment_method_id, provider_key, locked_until, response_status, response_body, expires_at ",
            "FROM attempts WHERE ",
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
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("user_id = $1 AND idem_key = $2"))
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
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("provider_key = $1"))
        .bind(provider_key)
        .fetch_optional(e)
        .await?;
    row.map(record).transpose()
}

/// An attempt by id.
pub(crate) async fn find_by_id<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
) -> sqlx::Result<Option<Record>> {
    let row: Option<AttemptRow> = sqlx::query_as(select_attempt!("id = $1"))
        .bind(id)
        .fetch_optional(e)
        .await?;
    row.map(record).transpose()
}

/// Which `attempts` rows retention may delete at `$1` (now), as
/// `payonce_rules::policy::deletable` says: finished keys past their retention, and
/// tombstones past theirs whose order is no longer payable at their version (a NULL version
/// stands for every version). Processing rows never: their outcome is still unknown. The
/// one place this condition is written.
pub(crate) const EXPIRED: &str =
    "status <> 'processing' AND expires_at IS NOT NULL AND expires_at < $1
    AND NOT (status = 'cancelled' AND EXISTS (SELECT 1 FROM orders o WHERE o.id = attempts.order_id
        AND o.status = 'unpaid' AND o.version = COALESCE(attempts.order_version, o.version)))";

/// The claim: inserts the key as processing unless any unique slot is taken, either
/// `(user, key)` (the same key seen before) or "one processing attempt per order". Returns
/// whether this call inserted it. Never read-then-write: the unique indexes decide.
pub(crate) async fn insert_processing<'c>(
    e: impl AnyExecutor<'c>,
    a: &Processing,
    key: &str,
    lease_token: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let row: Option<(String,)> = sqlx::query_as(
        "INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint, order_version, amount, currency,
                               payment_method_id, provider_key, locked_until, lease_token, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'processing', $5, $6, $7, $8, $9, $10, $11, $12, $13, $13)
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(&a.id)
    .bind(&a.terms.user)
    .bind(key)
    .bind(&a.terms.order_id)
    .bind(&a.terms.fingerprint)
    .bind(a.terms.order_version)
    .bind(a.terms.amount)
    .bind(&a.terms.currency)
    .bind(&a.payment_method_id)
    .bind(&a.provider_key)
    .bind(a.locked_until)
    .bind(lease_token)
    .bind(now)
    .fetch_optional(e)
    .await?;
    Ok(row.is_some())
}

/// The cancel tombstone: takes the `(user, key)` slot as `cancelled` if it is free.
pub(crate) async fn insert_tombstone<'c>(
    e: impl AnyExecutor<'c>,
    t: &Tombstone,
    key: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let row: Option<(String,)> = sqlx::query_as(
        "INSERT INTO attempts (id, user_id, idem_key, order_id, status, order_version, created_at, updated_at, expires_at)
         VALUES ($1, $2, $3, $4, 'cancelled', $5, $6, $6, $7)
         ON CONFLICT (user_id, idem_key) DO NOTHING
         RETURNING id",
    )
    .bind(&t.id)
    .bind(&t.user)
    .bind(key)
    .bind(&t.order_id)
    .bind(t.order_version)
    .bind(now)
    .bind(t.expires_at)
    .fetch_optional(e)
    .await?;
    Ok(row.is_some())
}

/// Takes over the lease of a processing attempt whose lease has expired. Exactly one of
/// several concurrent retries wins.
pub(crate) async fn take_expired_lease<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    now: i64,
    until: i64,
    token: &str,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE attempts SET locked_until = $1, lease_token = $2, updated_at = $3
         WHERE id = $4 AND status = 'processing' AND (locked_until IS NULL OR locked_until <= $3)",
    )
    .bind(until)
    .bind(token)
    .bind(now)
    .bind(id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Ends our lease early after an inconclusive provider call: nobody is talking to the
/// provider about this attempt any more, so the next retry may ask it at once.
pub(crate) async fn release_lease<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    token: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE attempts SET locked_until = $1, updated_at = $1
         WHERE id = $2 AND status = 'processing' AND lease_token = $3",
    )
    .bind(now)
    .bind(id)
    .bind(token)
    .execute(e)
    .await?;
    Ok(())
}

/// Moves a processing attempt to its final status with the answer to replay. Returns false
/// when it was no longer processing (someone else settled it first: their answer stands).
/// A manual-review flag is cleared: the outcome is known now (the audit trail keeps that it
/// was flagged), so a review queue holds only attempts that still need a person.
pub(crate) async fn finish<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    fin: &Finish,
    now: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE attempts SET status = $1, response_status = $2, response_body = $3, charge_id = $4,
                locked_until = NULL, lease_token = NULL, updated_at = $5, expires_at = $6,
                needs_review_at = NULL
         WHERE id = $7 AND status = 'processing'",
    )
    .bind(fin.status.as_str())
    .bind(i64::from(fin.answer.status))
    .bind(&fin.answer.body)
    .bind(fin.charge_id.clone())
    .bind(now)
    .bind(fin.expires_at)
    .bind(id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Flags a processing attempt for manual review, once. True when this call flagged it.
pub(crate) async fn flag_review<'c>(
    e: impl AnyExecutor<'c>,
    attempt_id: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE attempts SET needs_review_at = $1
         WHERE id = $2 AND status = 'processing' AND needs_review_at IS NULL",
    )
    .bind(now)
    .bind(attempt_id)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Processing attempts created before `before` whose lease has expired: the
/// reconciliation job's work list. Oldest first.
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
