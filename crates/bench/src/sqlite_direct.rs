//! SQLite's own ceiling: the minimal durable pay flow of `ceiling.rs` (the same tables and
//! statements) through SQLite's C library directly (rusqlite on the libsqlite3-sys that sqlx
//! links), with no async driver in between: prepared statements cached per connection, WAL
//! and `synchronous=FULL` as the server opens its database (crates/server/src/store/mod.rs),
//! one pay = a claim transaction and a settle transaction, each `BEGIN IMMEDIATE … COMMIT`
//! (one fsync each).
//!
//! Run from one thread (one connection: the fastest one-pay-per-transaction writer can be)
//! and from `threads` threads with a connection each, which queue for SQLite's write lock in
//! its busy handler (`busy_timeout`, as the server's connections).

use crate::load::Sample;
use crate::BenchError;
use rusqlite::{params, Connection};
use std::path::Path;
use std::time::{Duration, Instant};

/// The tables of `ceiling.rs`, in SQLite's spelling.
const SCHEMA: &str = "
CREATE TABLE ceiling_orders (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL, amount INTEGER NOT NULL,
    status TEXT NOT NULL, active_key TEXT);
CREATE TABLE ceiling_keys (
    user_id TEXT NOT NULL, idem_key TEXT NOT NULL, order_id TEXT NOT NULL,
    status TEXT NOT NULL, response_status INTEGER, response_body TEXT,
    PRIMARY KEY (user_id, idem_key));
CREATE TABLE ceiling_payments (
    id TEXT PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL,
    charge_id TEXT NOT NULL UNIQUE);
";

const CLAIM_KEY: &str = "INSERT INTO ceiling_keys (user_id, idem_key, order_id, status)
    VALUES (?1, ?2, ?3, 'processing') ON CONFLICT DO NOTHING";
const CLAIM_ORDER: &str = "UPDATE ceiling_orders SET active_key = ?1
    WHERE id = ?2 AND status = 'unpaid' AND active_key IS NULL";
const SETTLE_KEY: &str = "UPDATE ceiling_keys SET status = 'succeeded', response_status = 200,
    response_body = ?1 WHERE user_id = ?2 AND idem_key = ?3 AND status = 'processing'";
const SETTLE_PAYMENT: &str = "INSERT INTO ceiling_payments (id, order_id, amount, charge_id)
    VALUES (?1, ?2, 2500, ?3)";
const SETTLE_ORDER: &str = "UPDATE ceiling_orders SET status = 'paid', active_key = NULL
    WHERE id = ?1 AND active_key = ?2";

/// Opens `path` as the server does: WAL, `synchronous=FULL`, a busy timeout.
fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 15000",
    )?;
    // Every statement a pay runs stays prepared (rusqlite's per-connection cache).
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
}

/// `pays` pays on a fresh file `path`, from `threads` threads with one connection each.
/// Blocking: call it from `spawn_blocking`.
pub(crate) fn measure(path: &Path, threads: usize, pays: usize) -> Result<Sample, BenchError> {
    let setup = |e: rusqlite::Error| BenchError::Setup(format!("direct SQLite: {e}"));
    let conn = open(path).map_err(setup)?;
    conn.execute_batch(SCHEMA).map_err(setup)?;
    // Untimed: one unpaid order per pay, one customer each (as the server's phase).
    conn.execute_batch("BEGIN").map_err(setup)?;
    for i in 0..pays {
        conn.execute(
            "INSERT INTO ceiling_orders (id, user_id, amount, status) VALUES (?1, ?2, 2500, 'unpaid')",
            params![format!("o{i}"), format!("u{i}")],
        )
        .map_err(setup)?;
    }
    conn.execute_batch("COMMIT").map_err(setup)?;
    let threads = threads.max(1);
    let started = Instant::now();
    // Per thread: the latency of each pay that succeeded, the first error.
    let results: Vec<(Vec<u64>, Option<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let conn = match open(path) {
                        Ok(c) => c,
                        Err(e) => return (Vec::new(), Some(e.to_string())),
                    };
                    let (mut lat, mut first_error) = (Vec::with_capacity(pays / threads + 1), None);
                    // Thread `t` pays orders t, t + threads, …: each order once.
                    for i in (t..pays).step_by(threads) {
                        let t0 = Instant::now();
                        match pay(&conn, i) {
                            Ok(()) => lat
                                .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX)),
                            Err(e) => {
                                first_error.get_or_insert(format!("pay {i}: {e}"));
                            }
                        }
                    }
                    (lat, first_error)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (Vec::new(), Some("thread panicked".into())))
            })
            .collect()
    });
    let wall = started.elapsed();
    let mut lat = Vec::with_capacity(pays);
    let mut first_error = None;
    for (l, e) in results {
        lat.extend(l);
        if let Some(e) = e {
            first_error.get_or_insert(e);
        }
    }
    let errors = pays - lat.len();
    let paid: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM ceiling_orders WHERE status = 'paid'",
            [],
            |r| r.get(0),
        )
        .map_err(setup)?;
    if usize::try_from(paid).ok() != Some(lat.len()) {
        return Err(BenchError::Setup(format!(
            "direct SQLite: {paid} orders paid after {} pays",
            lat.len()
        )));
    }
    let mut sample = Sample::from_latencies(lat, errors, wall.max(Duration::from_micros(1)));
    sample.first_error = first_error;
    Ok(sample)
}

/// One pay of order `i` by its customer with a new key: claim, then settle.
fn pay(conn: &Connection, i: usize) -> Result<(), String> {
    let (order, user, key) = (
        format!("o{i}"),
        format!("u{i}"),
        uuid::Uuid::new_v4().to_string(),
    );
    let claimed = transaction(conn, || {
        let inserted = conn
            .prepare_cached(CLAIM_KEY)?
            .execute(params![user, key, order])?;
        let locked = conn
            .prepare_cached(CLAIM_ORDER)?
            .execute(params![key, order])?;
        Ok(inserted == 1 && locked == 1)
    })
    .map_err(|e| e.to_string())?;
    if !claimed {
        return Err(format!("claim of {order} lost"));
    }
    transaction(conn, || {
        conn.prepare_cached(SETTLE_KEY)?.execute(params![
            r#"{"status":"succeeded","orderId":"…","amount":2500}"#,
            user,
            key
        ])?;
        conn.prepare_cached(SETTLE_PAYMENT)?.execute(params![
            format!("pay_{key}"),
            order,
            format!("ch_{key}")
        ])?;
        conn.prepare_cached(SETTLE_ORDER)?
            .execute(params![order, key])?;
        Ok(())
    })
    .map_err(|e| e.to_string())
}

/// `BEGIN IMMEDIATE`, `f`, `COMMIT` (or `ROLLBACK` when `f` failed).
fn transaction<T>(
    conn: &Connection,
    f: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    match f() {
        Ok(v) => {
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(v)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
