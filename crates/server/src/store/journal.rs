//! The `journal` table: one row per request answered, provider call made and operator read
//! (docs/operating.md, "The journal"), with the ids that find it again. Every detail passes
//! [`redact`] on its way in: the one place that decides what the journal never keeps (a
//! card number, a secret key, a client secret, a webhook secret, a credential).
//!
//! The machine decisions and webhook verdicts are entries too, each made by [`decision`] or
//! [`verdict`] as one more statement of the transaction that writes the change it explains,
//! with the actor and request id of the task's journal scope ([`Who`], set by
//! `src/journal.rs`).
//!
//! The operator API's reads are here too: an order's timeline (its attempts, payments,
//! refunds, mails, journal and audit rows), the look-ups, the review queue.
//!
//! # Retention
//! [`retire`] removes the rows past the retention. On SQLite in bounded DELETE batches. On
//! PostgreSQL the table is range-partitioned by `at`, one partition per UTC day
//! (migrations/0015_journal_by_day.sql): each round creates the partitions of today and the
//! next [`AHEAD_DAYS`] days before any row needs them, and drops a day whose whole range is
//! past the retention (`DETACH` then `DROP`: no row-by-row delete, no growing transaction).
//! A row thus stays until its whole day has passed the retention, at most one day more. Rows
//! the DEFAULT partition took (written before their day's partition existed: the minutes
//! between the migration and the first round) go by bounded DELETE batches, as on SQLite.
//! Partitions are found by their bounds, not their names.

use super::tx::{Arg, Statement};
use super::{Backend, Store};
use payonce_protocol::admin::{actor, kind, member};
use payonce_rules::decision::Decision;
use serde_json::{Map, Value};
use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row as _};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

/// Who is acting in the current task: the journal scope's actor and request id.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub actor: &'static str,
    pub request_id: Option<String>,
}

tokio::task_local! {
    static WHO: Who;
}

/// Runs `fut` with `who` as the actor of the decisions it writes.
pub(crate) async fn as_who<F: std::future::Future>(who: Who, fut: F) -> F::Output {
    WHO.scope(who, fut).await
}

/// The current task's actor and request id; outside any scope, the system's.
pub(crate) fn who() -> Who {
    WHO.try_with(Clone::clone).unwrap_or(Who {
        actor: actor::SYSTEM,
        request_id: None,
    })
}

/// The order of entries made in the same millisecond of the injected clock (a request's
/// entry and its provider calls are written when it is answered, after the decisions of its
/// transactions): a process-wide counter, started from the wall clock's microseconds so a
/// restarted process counts on from above the previous one's.
static SEQ: LazyLock<AtomicU64> = LazyLock::new(|| {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    AtomicU64::new(since.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0)))
});

/// The next value of [`SEQ`], for an entry's `detail.seq` when its event happens.
pub(crate) fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// The ids a decision is about, that find it again.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct About<'a> {
    pub user: Option<&'a str>,
    pub order_id: Option<&'a str>,
    pub key: Option<&'a str>,
    /// The attempt's provider key or object, a charge or a refund id.
    pub provider_id: Option<&'a str>,
    pub attempt_id: Option<&'a str>,
    pub refund_id: Option<&'a str>,
}

/// The entry of decision `d` about `about`, made at `now` by the current [`who`].
pub(crate) fn decision_entry(d: &Decision, about: &About<'_>, now: i64) -> Entry {
    let who = who();
    let mut detail = Map::new();
    let mut put = |name: &str, v: Option<&str>| {
        if let Some(v) = v {
            detail.insert(name.to_owned(), v.into());
        }
    };
    put(member::OUTCOME, d.outcome);
    put(member::WHY, Some(&d.why));
    put(member::ATTEMPT_ID, about.attempt_id);
    put(member::REFUND_ID, about.refund_id);
    detail.insert(member::SEQ.to_owned(), next_seq().into());
    Entry {
        at: now,
        actor: who.actor,
        kind: d.kind,
        request_id: who.request_id,
        user: about.user.map(str::to_owned),
        order_id: about.order_id.map(str::to_owned),
        key: about.key.map(str::to_owned),
        provider_id: about.provider_id.map(str::to_owned),
        detail: Value::Object(detail),
    }
}

/// The statement that journals decision `d`: one more of the transaction it explains.
pub(crate) fn decision(d: &Decision, about: &About<'_>, now: i64) -> Statement {
    insert(&decision_entry(d, about, now))
}

/// The statement that journals decision `d` about refund row `refund`, with the ids its row
/// and its payment name (its order, user and key), made at `now` by the current [`who`]: a
/// refund's plan names only the row.
pub(crate) fn refund_decision(d: &Decision, refund: &str, now: i64) -> Statement {
    let about = About {
        refund_id: Some(refund),
        ..About::default()
    };
    let e = decision_entry(d, &about, now);
    Statement::new(
        "INSERT INTO journal (at, actor, kind, request_id, user_id, order_id, idem_key,
             provider_id, detail)
         SELECT $1, $2, $3, $4, r.user_id, p.order_id, r.idem_key, NULL, $5
         FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE r.id = $6",
        vec![
            e.at.into(),
            e.actor.into(),
            e.kind.into(),
            kept_request_id(e.request_id.as_deref()).into(),
            Arg::Text(Some(redact(e.detail).to_string())),
            refund.into(),
        ],
    )
}

/// A request id as the journal keeps it: the client chose it, so one that looks like a card
/// number or a secret is not kept (as [`insert`] does).
fn kept_request_id(r: Option<&str>) -> Option<&str> {
    r.map(|r| if string_is_secret(r) { REDACTED } else { r })
}

/// The statement that journals decision `d` about attempt `attempt`, with the ids its row
/// names (its user, order, key and provider key), made at `now` by the current [`who`]: a
/// take-over's or a flag's plan names only the attempt.
pub(crate) fn attempt_decision(d: &Decision, attempt: &str, now: i64) -> Statement {
    let about = About {
        attempt_id: Some(attempt),
        ..About::default()
    };
    let e = decision_entry(d, &about, now);
    Statement::new(
        "INSERT INTO journal (at, actor, kind, request_id, user_id, order_id, idem_key,
             provider_id, detail)
         SELECT $1, $2, $3, $4, a.user_id, a.order_id, a.idem_key, a.provider_key, $5
         FROM attempts a WHERE a.id = $6",
        vec![
            e.at.into(),
            e.actor.into(),
            e.kind.into(),
            kept_request_id(e.request_id.as_deref()).into(),
            Arg::Text(Some(redact(e.detail).to_string())),
            attempt.into(),
        ],
    )
}

/// A verified webhook event: its id, its provider type and what it came to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    /// The provider key or object id it names.
    pub subject: &'a str,
    /// `payonce_protocol::admin::verdict`.
    pub verdict: &'static str,
}

/// The statement that journals webhook event `e` at `now`.
pub(crate) fn verdict(e: &Event<'_>, now: i64) -> Statement {
    let who = who();
    let mut detail = Map::new();
    detail.insert(member::EVENT_ID.to_owned(), e.id.into());
    detail.insert(member::TYPE.to_owned(), e.kind.into());
    detail.insert(member::VERDICT.to_owned(), e.verdict.into());
    detail.insert(member::SEQ.to_owned(), next_seq().into());
    insert(&Entry {
        at: now,
        actor: who.actor,
        kind: kind::WEBHOOK,
        request_id: who.request_id,
        provider_id: Some(e.subject.to_owned()),
        detail: Value::Object(detail),
        ..Entry::default()
    })
}

/// One journal entry, before it is written.
#[derive(Debug, Clone, Default)]
pub(crate) struct Entry {
    /// When it happened (unix ms, the injected clock).
    pub at: i64,
    /// `payonce_protocol::admin::actor`.
    pub actor: &'static str,
    /// `payonce_protocol::admin::kind`.
    pub kind: &'static str,
    pub request_id: Option<String>,
    pub user: Option<String>,
    pub order_id: Option<String>,
    /// A client's idempotency key.
    pub key: Option<String>,
    /// A provider object id (`pi_…`, a charge or refund id), or for a call about an attempt
    /// whose object the answer did not name, the attempt's provider key.
    pub provider_id: Option<String>,
    /// A small JSON object; redacted when written.
    pub detail: Value,
}

/// What replaces a value the journal must not keep.
pub(crate) const REDACTED: &str = "[redacted]";

/// Member names whose values are never kept, whatever they hold (compared lower-cased, as
/// substrings: `client_secret`, `clientSecret`, `card_number`, `Authorization`).
const SECRET_NAMES: &[&str] = &[
    "secret",
    "password",
    "authorization",
    "token",
    "card",
    "cvc",
    "number",
    "api_key",
    "apikey",
];

/// Value prefixes that are credentials wherever they appear: Stripe's secret and restricted
/// keys, webhook signing secrets.
const SECRET_PREFIXES: &[&str] = &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"];

/// The one redaction rule of the journal: members named like a secret or a card are
/// replaced, and so is any string that holds a credential (`sk_…`, `whsec_…`), a client
/// secret (`…_secret_…`) or a run of 12 to 19 digits (a card number, spaced or not).
pub(crate) fn redact(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let kept = m.into_iter().map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret = SECRET_NAMES.iter().any(|n| lower.contains(n));
                let v = if secret {
                    Value::String(REDACTED.into())
                } else {
                    redact(v)
                };
                (k, v)
            });
            Value::Object(kept.collect::<Map<_, _>>())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(redact).collect()),
        Value::String(s) if string_is_secret(&s) => Value::String(REDACTED.into()),
        other => other,
    }
}

/// True when `s` holds a credential, a client secret or a card number anywhere in it.
pub(crate) fn string_is_secret(s: &str) -> bool {
    if SECRET_PREFIXES.iter().any(|p| s.contains(p)) || s.contains("_secret_") {
        return true;
    }
    card_number_in(s)
}

/// True when `s` holds a card number: 13 to 19 digits that pass the Luhn check, written
/// whole or in groups split by one space or dash, and standing as a token of their own (not
/// preceded or followed by a letter or a digit). The boundary is what keeps our own ids: a
/// UUID or a random id mixes hex letters with digit groups, and
/// `75f424cf-a1c8-4c50-8882-85790432301d` holds 17 digits (`50-8882-85790432301`) among
/// which a reading without boundaries found 13 that pass Luhn; a card number a person or a client writes stands apart
/// (`4242 4242 4242 4242`, `card:4242424242424242`, `pm_card_4000002500003155`).
fn card_number_in(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        if !starts {
            i += 1;
            continue;
        }
        // Read digits, allowing one separator between two digits.
        let mut digits: Vec<u32> = Vec::new();
        let mut j = i;
        while j < b.len() {
            if b[j].is_ascii_digit() {
                digits.push(u32::from(b[j] - b'0'));
                j += 1;
            } else if matches!(b[j], b' ' | b'-') && b.get(j + 1).is_some_and(u8::is_ascii_digit) {
                j += 1;
            } else {
                break;
            }
        }
        let stands_apart = b.get(j).is_none_or(|c| !c.is_ascii_alphanumeric());
        if stands_apart && (13..=19).contains(&digits.len()) && luhn(&digits) {
            return true;
        }
        i = j.max(i + 1);
    }
    false
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match i % 2 {
            0 => d,
            _ if d * 2 > 9 => d * 2 - 9,
            _ => d * 2,
        })
        .sum();
    sum.is_multiple_of(10)
}

/// One journal row as it is stored: `entry` with its request id and detail redacted.
#[derive(serde::Serialize)]
struct Stored<'a> {
    at: i64,
    actor: &'a str,
    kind: &'a str,
    request_id: Option<&'a str>,
    user_id: Option<&'a str>,
    order_id: Option<&'a str>,
    idem_key: Option<&'a str>,
    provider_id: Option<&'a str>,
    detail: String,
}

impl<'a> Stored<'a> {
    fn of(entry: &'a Entry) -> Self {
        Self {
            at: entry.at,
            actor: entry.actor,
            kind: entry.kind,
            // The client chose it: a card number sent as a request id is not kept either.
            request_id: entry.request_id.as_deref().map(|r| {
                if string_is_secret(r) {
                    REDACTED
                } else {
                    r
                }
            }),
            user_id: entry.user.as_deref(),
            order_id: entry.order_id.as_deref(),
            idem_key: entry.key.as_deref(),
            provider_id: entry.provider_id.as_deref(),
            detail: redact(entry.detail.clone()).to_string(),
        }
    }
}

/// The statement that appends `entry`, its detail redacted.
pub(crate) fn insert(entry: &Entry) -> Statement {
    let row = Stored::of(entry);
    Statement::new(
        "INSERT INTO journal (at, actor, kind, request_id, user_id, order_id, idem_key,
             provider_id, detail)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE true",
        vec![
            row.at.into(),
            row.actor.into(),
            row.kind.into(),
            row.request_id.into(),
            row.user_id.into(),
            row.order_id.into(),
            row.idem_key.into(),
            row.provider_id.into(),
            Arg::Text(Some(row.detail)),
        ],
    )
}

/// The statement that appends `rows` (a JSON array of [`Stored`]) on PostgreSQL: one text
/// whatever their number, so each connection prepares and plans it once. A chain of one
/// insert per row (`tx::chained`) was a new statement for every group size, planned anew
/// on each connection (docs/benchmarks.md, "A PostgreSQL pay, profiled").
fn insert_rows(rows: String) -> Statement {
    Statement::new(
        "INSERT INTO journal (at, actor, kind, request_id, user_id, order_id, idem_key,
             provider_id, detail)
         SELECT at, actor, kind, request_id, user_id, order_id, idem_key, provider_id, detail
         FROM json_to_recordset($1::json) AS r(at BIGINT, actor TEXT, kind TEXT,
           request_id TEXT, user_id TEXT, order_id TEXT, idem_key TEXT, provider_id TEXT,
           detail TEXT)
         WHERE true",
        vec![Arg::Text(Some(rows))],
    )
}

/// Appends `entries` in their order, in one transaction, and returns once it committed. On
/// SQLite through the one writer, which commits concurrent writes together already; on
/// PostgreSQL through the journal's [`Writer`], which commits the entries of concurrent
/// requests together.
pub(crate) async fn append(store: &Store, entries: &[Entry]) -> sqlx::Result<()> {
    queue(store, entries).await?.await
}

/// Returns once every entry [`queue`]d before this call has committed (or failed): a
/// graceful stop's last step, so that a stop loses no answered request's entries.
pub(crate) async fn drain(store: &Store) -> sqlx::Result<()> {
    // An empty unit: each writer answers it after everything queued before it.
    enqueue(store, &[]).await?.await
}

/// The commit of entries [`queue`]d.
pub(crate) type Committed = std::pin::Pin<Box<dyn Future<Output = sqlx::Result<()>> + Send>>;

/// As [`append`] in two steps: when this returns, the entries are queued behind every write
/// queued before them (on SQLite the one writer's, on PostgreSQL the journal writer's: a
/// write of this process queued after them, such as an operator's read journaled before it
/// reads, commits with them or after); the returned future resolves once they committed.
pub(crate) async fn queue(store: &Store, entries: &[Entry]) -> sqlx::Result<Committed> {
    if entries.is_empty() {
        return Ok(Box::pin(std::future::ready(Ok(()))));
    }
    enqueue(store, entries).await
}

/// `entries` queued behind every write queued before them, through the writer this store
/// has (PostgreSQL's journal writer, each row as its JSON; else SQLite's one writer; a store
/// without either commits them here, alone).
async fn enqueue(store: &Store, entries: &[Entry]) -> sqlx::Result<Committed> {
    if let Some(writer) = &store.journal {
        let rows = entries
            .iter()
            .map(|e| serde_json::to_string(&Stored::of(e)))
            .collect::<Result<_, _>>()
            .map_err(|e| sqlx::Error::Protocol(format!("a journal row as JSON: {e}")))?;
        return writer.queue(rows);
    }
    let list: Vec<Statement> = entries.iter().map(insert).collect();
    if let Some(writer) = &store.writer {
        let run = move |conn: &rusqlite::Connection| super::tx::steps(conn, &list).map(drop);
        return Ok(Box::pin(writer.queue_direct(run).await?));
    }
    if !list.is_empty() {
        store.commit(list).await?;
    }
    Ok(Box::pin(std::future::ready(Ok(()))))
}

/// Rows one group commit of the journal writes at most (one JSON text, [`insert_rows`]).
const GROUP_ROWS: usize = 256;

/// One request's entries, each row's JSON ([`Stored`]), and who waits for their commit.
type Job = (
    Vec<String>,
    tokio::sync::oneshot::Sender<Result<(), String>>,
);

/// The journal's group commit on PostgreSQL. Every answered pay, cancel and refund writes
/// its entries in a transaction of its own after the pay's; written one by one, that is a
/// commit (a WAL flush) per request. One task takes the entries of every request waiting
/// when it is free and writes them in one statement ([`insert_rows`]: one round trip, one
/// commit), then answers each request: an entry is never reported written
/// before it committed, and a failed commit fails every request of the group (each logs
/// it, as before). As `sqlite_writer.rs` does for SQLite's writes.
#[derive(Clone)]
pub(crate) struct Writer(tokio::sync::mpsc::UnboundedSender<Job>);

impl Writer {
    /// Starts the task on the current runtime; it ends when the last store clone is gone.
    pub(crate) fn start(pool: sqlx::AnyPool) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut group = vec![first];
                let mut rows = group[0].0.len();
                while rows < GROUP_ROWS {
                    let Ok(job) = rx.try_recv() else { break };
                    rows += job.0.len();
                    group.push(job);
                }
                let rows: Vec<String> = group.iter_mut().flat_map(|(l, _)| l.drain(..)).collect();
                // An empty group is a `drain` alone: everything before it has committed.
                let result = match rows.is_empty() {
                    true => Ok(()),
                    false => {
                        let rows = format!("[{}]", rows.join(","));
                        super::tx::chained(&pool, vec![insert_rows(rows)])
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }
                };
                for (_, done) in group {
                    let _ = done.send(result.clone());
                }
            }
        });
        Self(tx)
    }

    /// Queues `rows` to be written with the entries of the requests waiting beside it; the
    /// future resolves after the commit.
    fn queue(&self, rows: Vec<String>) -> sqlx::Result<Committed> {
        let (done, committed) = tokio::sync::oneshot::channel();
        let gone = || sqlx::Error::WorkerCrashed;
        self.0.send((rows, done)).map_err(|_| gone())?;
        Ok(Box::pin(async move {
            match committed.await.map_err(|_| gone())? {
                Ok(()) => Ok(()),
                Err(why) => Err(sqlx::Error::Protocol(why)),
            }
        }))
    }
}

/// One partition's range of `at` on PostgreSQL: a UTC day.
const DAY_MS: i64 = 86_400_000;

/// Days after today whose partitions exist before their first row: a round that fails or a
/// stopped job runner leaves this much slack before rows fall into the DEFAULT partition.
pub(crate) const AHEAD_DAYS: i64 = 3;

/// The DEFAULT partition (migrations/0015_journal_by_day.sql).
const DEFAULT_PARTITION: &str = "journal_default";

/// How long a partition change waits for the table's lock before giving up until the next
/// round: `DETACH` holds an exclusive lock on `journal`, and a queued one would stall every
/// insert behind a slow operator read.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '500ms'";

/// An arbitrary constant naming the partition maintenance among PostgreSQL advisory locks,
/// so that several instances running their jobs take turns.
const PG_PARTITION_LOCK: i64 = 0x6a6f_7572_6e61_6c21; // "journal!"

/// What one round of [`retire`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Retired {
    /// Rows deleted one by one (SQLite; PostgreSQL's DEFAULT partition).
    pub rows: u64,
    /// Day partitions created ahead and dropped whole (PostgreSQL).
    pub created: u64,
    pub dropped: u64,
}

/// Removes the journal past `before` (the start of the dispute window) and, on PostgreSQL,
/// keeps the partitions of the days from `now` on ready. Deletes go in batches of `batch`
/// rows, each its own short transaction.
pub(crate) async fn retire(
    store: &Store,
    now: i64,
    before: i64,
    batch: i64,
) -> sqlx::Result<Retired> {
    let mut done = Retired::default();
    if store.backend() == Backend::Postgres {
        let existing = partitions(store.pool()).await?;
        let today = now.div_euclid(DAY_MS);
        for day in today..=today + AHEAD_DAYS {
            let start = day * DAY_MS;
            if !existing.iter().any(|&(_, f, t)| f <= start && start < t) {
                done.created += u64::from(create_day(store, day).await?);
            }
        }
        for (name, _, to) in existing {
            if to <= before {
                done.dropped += u64::from(drop_partition(store, name, before).await?);
            }
        }
    }
    // SQLite's one writer serves the pays too: a 1,000-row delete from a table with seven
    // indexes held it for ≈ 27 ms and a backlog of 10⁶ rows quadrupled the pays' p99
    // (docs/benchmarks.md, "The journal"). Small batches with a pause leave it to the pays.
    let (batch, pause) = match store.backend() {
        Backend::Sqlite => (batch.min(SQLITE_BATCH), SQLITE_PAUSE),
        Backend::Postgres => (batch, std::time::Duration::ZERO),
    };
    loop {
        let n = delete_batch(store, before, batch).await?;
        done.rows += n;
        if n < batch.unsigned_abs() {
            return Ok(done);
        }
        tokio::time::sleep(pause).await;
    }
}

/// SQLite's journal rows deleted per writer transaction, and the pause between two.
const SQLITE_BATCH: i64 = 50;
const SQLITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// At most `limit` rows older than `before`: of the table on SQLite, of the DEFAULT
/// partition on PostgreSQL (each day partition goes whole), by `rowid`/`ctid` within that
/// one table. On PostgreSQL the transaction first says it deletes the journal
/// (`payonce.journal_delete`: migrations/0015_journal_by_day.sql skips any other delete).
async fn delete_batch(store: &Store, before: i64, limit: i64) -> sqlx::Result<u64> {
    if store.backend() == Backend::Sqlite {
        return store
            .delete_batch(("journal", "at < $1"), before, limit)
            .await;
    }
    let sql = format!(
        "DELETE FROM {DEFAULT_PARTITION} WHERE ctid IN \
         (SELECT ctid FROM {DEFAULT_PARTITION} WHERE at < $1 LIMIT $2)"
    );
    store
        .write(async move |tx| {
            sqlx::query("SELECT set_config('payonce.journal_delete', 'on', true)")
                .execute(&mut *tx)
                .await?;
            let q = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(before)
                .bind(limit);
            Ok::<_, sqlx::Error>(q.execute(&mut *tx).await?.rows_affected())
        })
        .await
}

/// The day partitions of `journal` on PostgreSQL: `(name, from, to)` of each range of `at`
/// (the DEFAULT partition, and any partition not bounded by two integers, are left out).
async fn partitions<'c, E>(conn: E) -> sqlx::Result<Vec<(String, i64, i64)>>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'journal'::regclass",
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, bound)| {
            let (from, to) = range_of(&bound)?;
            Some((name, from, to))
        })
        .collect())
}

/// `FOR VALUES FROM ('1') TO ('2')` as `(1, 2)`: PostgreSQL's text of a range partition's
/// bound (`pg_get_expr`); `None` for `DEFAULT` or a `MINVALUE`/`MAXVALUE` bound.
fn range_of(bound: &str) -> Option<(i64, i64)> {
    let mut quoted = bound.split('\'').skip(1).step_by(2);
    let from = quoted.next()?.parse().ok()?;
    let to = quoted.next()?.parse().ok()?;
    Some((from, to))
}

/// The partition's name for UTC day `day` (days since 1970-01-01): `journal_20261204`,
/// as migrations/0015_journal_by_day.sql names the days it creates.
fn day_name(day: i64) -> String {
    // Howard Hinnant's days-to-civil: the proleptic Gregorian date of a day number.
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("journal_{y:04}{m:02}{d:02}")
}

/// Creates the partition of UTC day `day` unless one overlaps it, moving into it the
/// rows the DEFAULT partition took for that day (PostgreSQL refuses a partition whose rows
/// sit in the DEFAULT one). True when it created one.
async fn create_day(store: &Store, day: i64) -> sqlx::Result<bool> {
    let (from, to) = (day * DAY_MS, (day + 1) * DAY_MS);
    let name = day_name(day);
    store
        .write(async move |tx| {
            start(tx).await?;
            // Another instance may have created it while this one waited for the lock.
            let existing = partitions(&mut *tx).await?;
            if existing.iter().any(|&(_, f, t)| f < to && from < t) {
                return Ok(false);
            }
            // Inserts wait (for milliseconds, once a day) rather than race the attach: a row
            // routed to the DEFAULT partition before the attach and written after it would
            // fail its partition check and be lost. Reads do not wait.
            let sql = format!(
                "LOCK TABLE journal IN SHARE ROW EXCLUSIVE MODE;
                 CREATE TABLE {name} (LIKE journal);
                 WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE at >= {from} AND at < {to}
                     RETURNING *)
                 INSERT INTO {name} SELECT * FROM moved;
                 ALTER TABLE journal ATTACH PARTITION {name} FOR VALUES FROM ({from}) TO ({to})"
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await?;
            tracing::info!(partition = %name, "journal partition created");
            Ok::<_, sqlx::Error>(true)
        })
        .await
}

/// Detaches and drops partition `name` if its whole range is still before `before`.
async fn drop_partition(store: &Store, name: String, before: i64) -> sqlx::Result<bool> {
    store
        .write(async move |tx| {
            start(tx).await?;
            let existing = partitions(&mut *tx).await?;
            if !existing.iter().any(|(n, _, t)| *n == name && *t <= before) {
                return Ok(false);
            }
            let sql = format!("ALTER TABLE journal DETACH PARTITION {name}; DROP TABLE {name}");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await?;
            tracing::info!(partition = %name, "journal partition dropped");
            Ok::<_, sqlx::Error>(true)
        })
        .await
}

/// A partition change's first statements: one instance at a time, a bounded wait for the
/// table's lock, and the say-so to move rows out of the DEFAULT partition.
async fn start(tx: &mut sqlx::AnyConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM pg_advisory_xact_lock($1)")
        .bind(PG_PARTITION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(LOCK_TIMEOUT).execute(&mut *tx).await?;
    sqlx::query("SELECT set_config('payonce.journal_delete', 'on', true)")
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// A journal row as read back.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Row {
    pub at: i64,
    pub actor: String,
    pub kind: String,
    pub request_id: Option<String>,
    pub user: Option<String>,
    pub order_id: Option<String>,
    pub key: Option<String>,
    pub provider_id: Option<String>,
    pub detail: Value,
}

const COLUMNS: &str =
    "id, at, actor, kind, request_id, user_id, order_id, idem_key, provider_id, detail";

/// The most rows one read returns: an order's whole story is tens of rows; a user's or a
/// key's look-up is cut here (newest first is not needed: the cut is reported).
pub(crate) const READ_LIMIT: i64 = 1000;

fn row_of(r: &AnyRow) -> sqlx::Result<Row> {
    let detail: String = r.try_get("detail")?;
    Ok(Row {
        at: r.try_get("at")?,
        actor: r.try_get("actor")?,
        kind: r.try_get("kind")?,
        request_id: r.try_get("request_id")?,
        user: r.try_get("user_id")?,
        order_id: r.try_get("order_id")?,
        key: r.try_get("idem_key")?,
        provider_id: r.try_get("provider_id")?,
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    })
}

/// Every journal row about order `id`: written with its id, or about a provider object or
/// provider key one of its attempts, its payment or its refunds holds. In time order.
pub(crate) async fn of_order(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Row>> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM journal WHERE order_id = $1
         UNION SELECT {COLUMNS} FROM journal WHERE provider_id IN (
             SELECT provider_ref FROM attempts WHERE order_id = $1 AND provider_ref IS NOT NULL
             UNION SELECT provider_key FROM attempts WHERE order_id = $1
                 AND provider_key IS NOT NULL
             UNION SELECT provider_key FROM payments WHERE order_id = $1
                 AND provider_key IS NOT NULL
             UNION SELECT charge_id FROM attempts WHERE order_id = $1 AND charge_id IS NOT NULL
             UNION SELECT charge_id FROM payments WHERE order_id = $1
             UNION SELECT r.refund_id FROM refunds r JOIN payments p ON p.id = r.payment_id
                 WHERE p.order_id = $1 AND r.refund_id IS NOT NULL)
         ORDER BY at, id LIMIT $2"
    ));
    let rows = sqlx::query(sql)
        .bind(id)
        .bind(READ_LIMIT)
        .fetch_all(pool)
        .await?;
    rows.iter().map(row_of).collect()
}

/// What `GET /admin/lookup` may search by: each a column of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    Key,
    ProviderId,
    RequestId,
    User,
}

impl By {
    fn column(self) -> &'static str {
        match self {
            By::Key => "idem_key",
            By::ProviderId => "provider_id",
            By::RequestId => "request_id",
            By::User => "user_id",
        }
    }
}

/// The orders an idempotency key (any user's) or a provider object's id belongs to, from
/// the attempts and payments that name it and from the journal (which keeps the order of a
/// key whose attempt is gone), at most [`READ_LIMIT`]; other kinds of look-up name none.
pub(crate) async fn orders_of(pool: &AnyPool, by: By, value: &str) -> sqlx::Result<Vec<String>> {
    let sql = match by {
        By::Key => {
            "SELECT order_id FROM attempts WHERE idem_key = $1
             UNION SELECT order_id FROM journal WHERE idem_key = $1 AND order_id IS NOT NULL
             ORDER BY 1 LIMIT $2"
        }
        By::ProviderId => {
            "SELECT order_id FROM attempts WHERE provider_ref = $1 OR charge_id = $1
             UNION SELECT order_id FROM payments WHERE charge_id = $1
             UNION SELECT order_id FROM journal WHERE provider_id = $1 AND order_id IS NOT NULL
             ORDER BY 1 LIMIT $2"
        }
        By::RequestId | By::User => return Ok(Vec::new()),
    };
    sqlx::query_scalar(sql)
        .bind(value)
        .bind(READ_LIMIT)
        .fetch_all(pool)
        .await
}

/// The journal rows whose `by` is `value`, in time order (at most [`READ_LIMIT`]).
pub(crate) async fn lookup(pool: &AnyPool, by: By, value: &str) -> sqlx::Result<Vec<Row>> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM journal WHERE {} = $1 ORDER BY at, id LIMIT $2",
        by.column()
    ));
    let rows = sqlx::query(sql)
        .bind(value)
        .bind(READ_LIMIT)
        .fetch_all(pool)
        .await?;
    rows.iter().map(row_of).collect()
}

/// Runs `sql` (one `$1`, the order id) and returns each row as a JSON object of its
/// columns, text and integers as they are stored.
async fn objects(pool: &AnyPool, sql: &'static str, id: &str) -> sqlx::Result<Vec<Value>> {
    use sqlx::Column;
    let rows = sqlx::query(sql).bind(id).fetch_all(pool).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut m = Map::new();
        for (i, c) in r.columns().iter().enumerate() {
            // Text or an integer: the only column types of these tables.
            let v = match r.try_get::<Option<String>, _>(i) {
                Ok(t) => t.map(Value::from),
                Err(_) => r.try_get::<Option<i64>, _>(i)?.map(Value::from),
            };
            m.insert(c.name().to_owned(), v.unwrap_or(Value::Null));
        }
        out.push(Value::Object(m));
    }
    Ok(out)
}

/// The order as an operator sees it (any user's), or `None`.
pub(crate) async fn order(pool: &AnyPool, id: &str) -> sqlx::Result<Option<Value>> {
    const SQL: &str = "SELECT id, user_id AS \"userId\", status, version, items, coupon,
        subtotal, discount, amount, currency, active_attempt AS \"activeAttempt\",
        payment_id AS \"paymentId\", review_at AS \"reviewAt\", created_at AS \"createdAt\",
        updated_at AS \"updatedAt\"
        FROM orders WHERE id = $1";
    let mut rows = objects(pool, SQL, id).await?;
    if let Some(Value::Object(o)) = rows.first_mut() {
        // The lines are stored as JSON text.
        if let Some(Value::String(items)) = o.get("items") {
            let parsed = serde_json::from_str(items).unwrap_or(Value::Null);
            o.insert("items".into(), parsed);
        }
    }
    Ok(rows.pop())
}

/// The order's attempts and cancel tombstones: each key with the version, amount and
/// currency it bound, its provider ids and status; never the stored answer body.
pub(crate) async fn attempts(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT id, user_id AS \"userId\", idem_key AS \"key\", status, fingerprint,
            order_version AS \"orderVersion\", amount, currency,
            payment_method_id AS \"paymentMethodId\", provider_key AS \"providerKey\",
            provider_ref AS \"providerRef\", charge_id AS \"chargeId\",
            response_status AS \"responseStatus\", needs_review_at AS \"needsReviewAt\",
            created_at AS \"createdAt\", updated_at AS \"updatedAt\", expires_at AS \"expiresAt\"
         FROM attempts WHERE order_id = $1 ORDER BY created_at",
        id,
    )
    .await
}

/// The order's payment, if any.
pub(crate) async fn payments(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT id, attempt_id AS \"attemptId\", amount, currency,
            payment_method_id AS \"paymentMethodId\", charge_id AS \"chargeId\", status,
            created_at AS \"createdAt\"
         FROM payments WHERE order_id = $1",
        id,
    )
    .await
}

/// The refunds of the order's payment.
pub(crate) async fn refunds(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT r.id, r.idem_key AS \"key\", r.status, r.refund_id AS \"refundId\",
            r.response_status AS \"responseStatus\", r.created_at AS \"createdAt\",
            r.updated_at AS \"updatedAt\"
         FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE p.order_id = $1
         ORDER BY r.created_at",
        id,
    )
    .await
}

/// The mails sent about the order (subject and time; the body stays in the mailbox).
pub(crate) async fn mails(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT id, subject, sent_at AS \"sentAt\" FROM mailbox WHERE order_id = $1
         ORDER BY sent_at",
        id,
    )
    .await
}

/// The audit rows of the order and of its attempts (the one that paid is named by the
/// payment after key retention deleted its row), in time order. The audit trail has no
/// index by entity (migrations/0009_pay_rows.sql keeps pays lean): this read scans it, which
/// an operator's read of one order can afford.
pub(crate) async fn audit(pool: &AnyPool, id: &str) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT at, actor, entity, entity_id AS \"entityId\", from_state AS \"from\",
            to_state AS \"to\", reason
         FROM audit_log WHERE entity_id = $1
            OR entity_id IN (SELECT id FROM attempts WHERE order_id = $1)
            OR entity_id IN (SELECT attempt_id FROM payments WHERE order_id = $1)
         ORDER BY at, id",
        id,
    )
    .await
}

/// The review queue: orders held for a person and attempts flagged for review, oldest
/// first, with the reason the audit trail gave (at most [`READ_LIMIT`]).
pub(crate) async fn reviews(pool: &AnyPool) -> sqlx::Result<Vec<Value>> {
    objects(
        pool,
        "SELECT 'order' AS \"kind\", o.id AS \"orderId\", NULL AS \"attemptId\",
            o.review_at AS \"since\", o.user_id AS \"userId\", o.amount, o.currency
         FROM orders o WHERE o.review_at IS NOT NULL AND o.id <> $1
         UNION ALL
         SELECT 'attempt', a.order_id, a.id, a.needs_review_at, a.user_id, a.amount, a.currency
         FROM attempts a WHERE a.needs_review_at IS NOT NULL
         ORDER BY 4 LIMIT 1000",
        "",
    )
    .await
}

/// The latest audit reason about `entity_id`, for the review queue.
pub(crate) async fn last_reason(pool: &AnyPool, entity_id: &str) -> sqlx::Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT reason FROM audit_log WHERE entity_id = $1 ORDER BY at DESC, id DESC LIMIT 1",
    )
    .bind(entity_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(r,)| r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Secrets, client secrets and card numbers never reach a row, by name or by shape;
    /// ids, amounts and codes do.
    #[test]
    fn the_journal_never_keeps_a_secret_or_a_card_number() {
        let detail = json!({
            "op": "confirm",
            "status": 200,
            "requestId": "req_abc123",
            "providerId": "pi_3Pabc",
            "clientSecret": "pi_3Pabc_secret_xyz",
            "note": "paid with 4242 4242 4242 4242",
            "pan": "4000002500003155",
            "auth": { "Authorization": "Bearer sk_test_123" },
            "why": "create answered 402 card_declined",
            "key": "sk_live_abcdef",
            "hook": ["whsec_0123456789", "evt_1"],
            "amount": 2500,
        });
        let kept = redact(detail);
        let text = kept.to_string();
        for never in [
            "_secret_",
            "4242",
            "4000002500003155",
            "sk_test_",
            "sk_live_",
            "whsec_",
        ] {
            assert!(!text.contains(never), "{never} kept in {text}");
        }
        assert_eq!(kept["op"], "confirm");
        assert_eq!(kept["requestId"], "req_abc123");
        assert_eq!(kept["providerId"], "pi_3Pabc");
        assert_eq!(kept["amount"], 2500);
        assert_eq!(kept["hook"][1], "evt_1");
        // "card_declined" is a code, but the member is named "why": its value stays.
        assert_eq!(kept["why"], "create answered 402 card_declined");
        // Numbers are not card numbers; a card number is one whatever separates its digits.
        assert_eq!(
            redact(json!({ "at": 1_733_300_000_000_i64 }))["at"],
            1_733_300_000_000_i64
        );
        assert!(string_is_secret("4242-4242-4242-4242"));
        assert!(string_is_secret("card:4242424242424242."));
        assert!(string_is_secret("pm_card_4000002500003155"));
        assert!(!string_is_secret("order 1234-5678, 2 items"));
        // Our own ids are not card numbers, even when a run of their digits passes Luhn
        // (the request id a test once saw redacted).
        assert!(!string_is_secret("75f424cf-a1c8-4c50-8882-85790432301d"));
        assert!(!string_is_secret("pay_4242424242424242x"));
    }

    /// A day partition is named by its UTC date, as the migration names the days it
    /// creates, and found again by its bounds as PostgreSQL prints them.
    #[test]
    fn a_day_partition_is_named_by_its_date_and_read_by_its_bounds() {
        assert_eq!(day_name(0), "journal_19700101");
        assert_eq!(day_name(1_733_300_000_000 / DAY_MS), "journal_20241204");
        assert_eq!(day_name(11_016), "journal_20000229");
        assert_eq!(day_name(-1), "journal_19691231");
        let bound = "FOR VALUES FROM ('1733270400000') TO ('1733356800000')";
        assert_eq!(
            range_of(bound),
            Some((1_733_270_400_000, 1_733_356_800_000))
        );
        assert_eq!(range_of("DEFAULT"), None);
        assert_eq!(range_of("FOR VALUES FROM (MINVALUE) TO ('5')"), None);
    }
}
