//! A transaction written once, as data: a list of [`Statement`]s (SQL text and binds) and
//! two executors. On SQLite ([`steps`]) they run one by one inside the writer's transaction
//! (`sqlite_writer.rs`), on its thread through SQLite's C library with the prepared
//! statements cached, so a statement costs a function call. On PostgreSQL ([`chained`])
//! they become one statement of data-modifying CTEs, so a transaction of a pay is one round
//! trip instead of one per statement.
//!
//! Both executors mean the same thing by the list: statements run in its order; a statement
//! that needs a row ([`Need::Row`]) and changed none ends the run there (the later ones do
//! not run); one that must change a row once it runs ([`Need::Assert`]) and changed none
//! fails the transaction (nothing is written). Both answer how many rows each statement
//! changed (0 for one that did not run), so the caller reads the outcome once.
//!
//! The chained form places each statement's text as `c{i} AS (<text> AND <gate> <tail>
//! RETURNING 1)`: so every text ends in its `WHERE` clause (`INSERT … SELECT … WHERE true`
//! for an insert) and keeps what must follow it (`ON CONFLICT …`) in its tail. A CTE runs
//! only when the statement before it has run and the last [`Need::Row`] before it returned
//! its row, so the order of row locks is the list's. Its statements share one snapshot: no
//! two statements of a transaction may touch the same row.
//!
//! The chained text depends only on the list's shape (which statements, how many values
//! each), so it is built once per shape and kept ([`text`]); a list sends its values and
//! the kept text, which PostgreSQL has prepared on the connection already (sqlx's
//! statement cache).
//!
//! A list may also be run all or nothing ([`chained_all`]): a [`Need::Row`] that changed
//! no row then rolls back what ran before it, as a transaction the caller rolls back would,
//! but in the one statement: its final `SELECT` fails with the counts in the error's text
//! (the only way a statement can both abort and say how far it got), so a claim that lost
//! costs the same one round trip as one that won.

use payonce_rules::ids::{AttemptId, LeaseToken, OrderId, PaymentId, RefundId};
use sqlx::any::{AnyArguments, AnyExecutor};
use sqlx::{Arguments, Row};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// A bound value.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Self::Text(Some(v.to_owned()))
    }
}
impl From<&String> for Arg {
    fn from(v: &String) -> Self {
        Self::Text(Some(v.clone()))
    }
}
/// The plans' typed ids bind as their text (`payonce_rules::ids`): the store boundary.
macro_rules! id_arg {
    ($($id:ty),*) => {$(
        impl From<&$id> for Arg {
            fn from(v: &$id) -> Self {
                Self::Text(Some(v.as_str().to_owned()))
            }
        }
    )*};
}
id_arg!(AttemptId, LeaseToken, OrderId, PaymentId, RefundId);

impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Self {
        Self::Text(v.map(str::to_owned))
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}
impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Self {
        Self::Int(v)
    }
}

/// What the rest of the transaction needs from a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: its row count is only reported.
    Any,
    /// A changed row, or the statements after it do not run (a conditional step that lost:
    /// the caller reads which one from the counts).
    Row,
    /// A changed row once it runs, or the transaction fails with this reason: a broken
    /// invariant, never an expected outcome.
    Assert(&'static str),
}

/// One statement: its text with `$1…` placeholders, the text that follows a chained
/// executor's gate, the values, and what the transaction needs from it.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    sql: &'static str,
    tail: &'static str,
    args: Vec<Arg>,
    need: Need,
}

impl Statement {
    /// A statement whose `sql` ends in its `WHERE` clause.
    pub(crate) fn new(sql: &'static str, args: Vec<Arg>) -> Self {
        Self {
            sql,
            tail: "",
            args,
            need: Need::Any,
        }
    }

    /// What follows the `WHERE` clause (`ON CONFLICT …`).
    pub(crate) fn tail(mut self, tail: &'static str) -> Self {
        self.tail = tail;
        self
    }

    /// What the transaction needs from it.
    pub(crate) fn need(mut self, need: Need) -> Self {
        self.need = need;
        self
    }

    /// True when the statements after it run only if it changed a row ([`Need::Row`]).
    pub(crate) fn gates(&self) -> bool {
        self.need == Need::Row
    }
}

/// The statements one by one on `conn` (SQLite, inside the writer's transaction, on its
/// thread).
pub(crate) fn steps(conn: &rusqlite::Connection, list: &[Statement]) -> sqlx::Result<Vec<u64>> {
    let mut counts = vec![0; list.len()];
    for (s, count) in list.iter().zip(&mut counts) {
        *count = step(conn, s).map_err(sqlite_error)?;
        match s.need {
            Need::Row if *count == 0 => break,
            Need::Assert(why) if *count == 0 => return Err(sqlx::Error::Protocol(why.into())),
            _ => {}
        }
    }
    Ok(counts)
}

/// One statement on the C library's connection: the rows it changed. `$n` is a named
/// parameter to SQLite, numbered in order of first appearance, so each is bound by its
/// name's number, as sqlx's SQLite driver does.
fn step(conn: &rusqlite::Connection, s: &Statement) -> rusqlite::Result<u64> {
    let mut stmt = conn.prepare_cached(&format!("{} {}", s.sql, s.tail))?;
    for i in 1..=stmt.parameter_count() {
        let n = stmt
            .parameter_name(i)
            .and_then(|name| name.strip_prefix('$')?.parse::<usize>().ok());
        let arg = n.and_then(|n| s.args.get(n.checked_sub(1)?));
        let arg = arg.ok_or(rusqlite::Error::InvalidParameterCount(i, s.args.len()))?;
        match arg {
            Arg::Text(v) => stmt.raw_bind_parameter(i, v)?,
            Arg::Int(v) => stmt.raw_bind_parameter(i, v)?,
        }
    }
    Ok(stmt.raw_execute()? as u64)
}

/// A C library error as the store's: the file unreachable (busy, I/O, full) is `Io`, so it
/// answers 503 as sqlx's would (`src/error.rs`); anything else is a bug.
pub(crate) fn sqlite_error(e: rusqlite::Error) -> sqlx::Error {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(
            C::DatabaseBusy
            | C::DatabaseLocked
            | C::SystemIoFailure
            | C::DiskFull
            | C::CannotOpen
            | C::ReadOnly,
        ) => sqlx::Error::Io(std::io::Error::other(e)),
        _ => sqlx::Error::Protocol(format!("sqlite: {e}")),
    }
}

/// The statements as one (PostgreSQL): a round trip, atomic on its own.
pub(crate) async fn chained<'c>(
    e: impl AnyExecutor<'c>,
    list: Vec<Statement>,
) -> sqlx::Result<Vec<u64>> {
    let (n, text) = (list.len(), text(&list, false));
    let row = sqlx::query_with(sqlx::AssertSqlSafe(text), values(list))
        .fetch_one(e)
        .await?;
    (0..n)
        .map(|i| Ok(u64::try_from(row.try_get::<i64, _>(i)?).unwrap_or(0)))
        .collect()
}

/// What marks the counts of a list that lost a [`Need::Row`] in [`chained_all`]'s error.
const LOST: &str = "payonce-lost:";

/// The statements as one (PostgreSQL), all or nothing: `Ok(counts)` when every
/// [`Need::Row`] changed its row and the whole list is committed; `Err(counts)` when one
/// changed none, and then nothing is written (the counts say how far it got: the ones after
/// the loss are 0). One round trip either way, atomic on its own.
pub(crate) async fn chained_all<'c>(
    e: impl AnyExecutor<'c>,
    list: Vec<Statement>,
) -> sqlx::Result<Result<Vec<u64>, Vec<u64>>> {
    let (n, text) = (list.len(), text(&list, true));
    let row = match sqlx::query_with(sqlx::AssertSqlSafe(text), values(list))
        .fetch_one(e)
        .await
    {
        Ok(row) => row,
        Err(e) => return lost_counts(&e, n).map(Err).ok_or(e),
    };
    let counts = (0..n)
        .map(|i| Ok(u64::try_from(row.try_get::<i64, _>(i)?).unwrap_or(0)))
        .collect::<sqlx::Result<_>>()?;
    Ok(Ok(counts))
}

/// The counts [`chained_all`]'s statement put in its error when it lost (PostgreSQL says
/// `invalid input syntax for type bigint: "payonce-lost:1,0,0"`); `None` for any other
/// error.
fn lost_counts(e: &sqlx::Error, n: usize) -> Option<Vec<u64>> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    let msg = db.message();
    let at = msg.find(LOST)? + LOST.len();
    let text = msg[at..].split('"').next()?;
    let counts: Vec<u64> = text
        .split(',')
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    (counts.len() == n).then_some(counts)
}

/// A list's shape: per statement its text, tail and need (each `'static`, so its address
/// and length name it) and how many values it binds; and whether it runs all or nothing.
/// Lists of one shape have one chained text.
#[derive(PartialEq, Eq, Hash)]
struct Shape(bool, Vec<[usize; 7]>);

impl Shape {
    fn of(list: &[Statement], all: bool) -> Self {
        let name = |s: &'static str| [s.as_ptr() as usize, s.len()];
        let each = list.iter().map(|s| {
            let need = match s.need {
                Need::Any => [0, 0],
                Need::Row => [1, 0],
                Need::Assert(why) => name(why),
            };
            let ([a, b], [c, d], [e, f]) = (name(s.sql), name(s.tail), need);
            [a, b, c, d, e, f, s.args.len()]
        });
        Self(all, each.collect())
    }
}

/// At most this many chained texts are kept; a list of a shape beyond them builds its text
/// each time. A server sends a few dozen shapes (a plan kind by its number of stock lines
/// and audit rows).
const TEXTS_KEPT: usize = 1024;

/// The chained texts built so far, by shape: a pay sends the same few shapes over and
/// over, and building the text was a sixth of the server's instructions per pay
/// (docs/benchmarks.md, "A PostgreSQL pay, profiled").
static TEXTS: LazyLock<Mutex<HashMap<Shape, Arc<str>>>> = LazyLock::new(Default::default);

/// `list`'s chained text ([`chain`]), built once per shape.
fn text(list: &[Statement], all: bool) -> Arc<str> {
    let shape = Shape::of(list, all);
    let texts = || TEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(text) = texts().get(&shape) {
        return text.clone();
    }
    let text: Arc<str> = chain(list, all).into();
    let mut kept = texts();
    if kept.len() < TEXTS_KEPT {
        kept.insert(shape, text.clone());
    }
    text
}

/// `list`'s values in order, moved out of it: the chained text numbers them through
/// ([`renumber`]).
fn values(list: Vec<Statement>) -> AnyArguments {
    let mut args = AnyArguments::default();
    for a in list.into_iter().flat_map(|s| s.args) {
        // Pushing a plain value into the Any buffer cannot fail.
        let _ = match a {
            Arg::Text(v) => args.add(v),
            Arg::Int(v) => args.add(v),
        };
    }
    args
}

/// The chained text: `WITH c0 AS (…), c1 AS (…) SELECT <count of each>, <assertions>`,
/// each statement's placeholders renumbered past the values of the ones before it.
/// An assertion that fails casts its reason to a number, which aborts the statement; it
/// reads a CTE, so the planner never folds it. `all`: the last [`Need::Row`] that returned
/// no row is such an assertion too (so every one before it did: each ran only when the one
/// before returned its row), whose text is the counts ([`lost_counts`]).
fn chain(list: &[Statement], all: bool) -> String {
    let (mut ctes, mut counts, mut checks) = (Vec::new(), Vec::new(), "0".to_owned());
    let mut bound = 0;
    let mut gate: Option<usize> = None;
    for (i, s) in list.iter().enumerate() {
        let sql = renumber(s.sql, bound);
        bound += s.args.len();
        let mut cond = String::new();
        if let Some(g) = gate {
            cond.push_str(&format!(" AND EXISTS (SELECT 1 FROM c{g})"));
        }
        if i > 0 && gate != Some(i - 1) {
            cond.push_str(&format!(" AND (SELECT count(*) FROM c{}) >= 0", i - 1));
        }
        ctes.push(format!("c{i} AS ({sql}{cond} {} RETURNING 1)", s.tail));
        counts.push(format!("(SELECT count(*) FROM c{i})"));
        match s.need {
            Need::Row => gate = Some(i),
            Need::Assert(why) => {
                debug_assert!(!why.contains('\''), "a reason is an SQL literal");
                let ran = gate.map_or("TRUE".to_owned(), |g| {
                    format!("EXISTS (SELECT 1 FROM c{g})")
                });
                let failed = format!("NOT EXISTS (SELECT 1 FROM c{i})");
                checks.push_str(&format!(
                    " + CASE WHEN {ran} AND {failed}
                       THEN CAST((SELECT '{why}' WHERE {failed}) AS BIGINT) ELSE 0 END"
                ));
            }
            Need::Any => {}
        }
    }
    if let (true, Some(g)) = (all, gate) {
        let each: Vec<String> = (0..list.len())
            .map(|i| format!("(SELECT count(*) FROM c{i})"))
            .collect();
        checks.push_str(&format!(
            " + CASE WHEN EXISTS (SELECT 1 FROM c{g}) THEN 0
               ELSE CAST('{LOST}' || {} AS BIGINT) END",
            each.join(" || ',' || ")
        ));
    }
    counts.push(checks); // read by nobody: it only aborts
    format!("WITH {}\nSELECT {}", ctes.join(",\n"), counts.join(", "))
}

/// `sql` with each `$n` as `$(n + by)`.
fn renumber(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + by).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renumbering_shifts_every_placeholder_once() {
        assert_eq!(
            renumber("a = $1 AND b = $12 AND c >= $1", 3),
            "a = $4 AND b = $15 AND c >= $4"
        );
        assert_eq!(renumber("no placeholders", 5), "no placeholders");
    }

    #[test]
    fn a_chain_gates_each_statement_on_the_last_row_it_needs() {
        let s = |sql| Statement::new(sql, vec![Arg::from(1)]);
        let list = [
            s("UPDATE t SET x = $1 WHERE true").need(Need::Row),
            s("UPDATE u SET x = $1 WHERE true"),
            s("UPDATE v SET x = $1 WHERE true").need(Need::Assert("broken")),
        ];
        let text = chain(&list, false);
        assert!(
            text.contains("c1 AS (UPDATE u SET x = $2 WHERE true AND EXISTS (SELECT 1 FROM c0)")
        );
        assert!(text.contains(
            "c2 AS (UPDATE v SET x = $3 WHERE true AND EXISTS (SELECT 1 FROM c0) AND (SELECT count(*) FROM c1) >= 0"
        ));
        assert!(
            text.contains("CAST((SELECT 'broken' WHERE NOT EXISTS (SELECT 1 FROM c2)) AS BIGINT)")
        );
        assert!(
            !text.contains(LOST),
            "only an all-or-nothing chain reports a loss"
        );
    }

    #[test]
    fn a_shape_is_chained_once_and_its_values_move_in_order() {
        let s = |sql, v: &str| Statement::new(sql, vec![Arg::from(v), Arg::from(7)]);
        let one = |a, b| {
            vec![
                s("UPDATE t SET x = $1 WHERE y = $2", a),
                s("UPDATE u SET x = $2 WHERE y = $1", b),
            ]
        };
        let (first, again) = (text(&one("a", "b"), false), text(&one("c", "d"), false));
        assert!(Arc::ptr_eq(&first, &again), "one text per shape");
        assert!(
            first.contains("UPDATE u SET x = $4 WHERE y = $3"),
            "{first}"
        );
        assert!(
            !Arc::ptr_eq(&first, &text(&one("a", "b"), true)),
            "all or nothing is another text"
        );
        let longer = [one("a", "b"), one("c", "d")].concat();
        assert!(text(&longer, false).contains("c3 AS (UPDATE u SET x = $8 WHERE y = $7"));
        assert_eq!(values(longer).len(), 8);
    }

    #[test]
    fn an_all_or_nothing_chain_fails_with_its_counts_unless_the_last_gate_passed() {
        let s = |sql| Statement::new(sql, vec![Arg::from(1)]);
        let list = [
            s("UPDATE t SET x = $1 WHERE true").need(Need::Row),
            s("UPDATE u SET x = $1 WHERE true").need(Need::Row),
            s("UPDATE v SET x = $1 WHERE true"),
        ];
        let text = chain(&list, true);
        assert!(text.contains(
            "CASE WHEN EXISTS (SELECT 1 FROM c1) THEN 0
               ELSE CAST('payonce-lost:' || (SELECT count(*) FROM c0) || ',' || (SELECT count(*) FROM c1) || ',' || (SELECT count(*) FROM c2) AS BIGINT) END"
        ), "{text}");
    }
}
