//! SQLite's one writer: a thread that owns the only write connections and commits what
//! concurrent requests queued together (group commit). SQLite lets one transaction write at
//! a time, and a connection that finds the lock taken does not queue: its busy handler
//! sleeps 1, 2, 5 … 100 ms between tries. Here writes queue in a channel instead, and a
//! batch pays one `BEGIN IMMEDIATE … COMMIT`, so one fsync (WAL, `synchronous=FULL`).
//!
//! Two kinds of work share the thread. A pay's transactions are lists of statements
//! (`tx.rs`): they run synchronously on this thread, through SQLite's C library (rusqlite)
//! with cached prepared statements, so a statement costs a function call, not a handoff to
//! another thread. Every other write is an async closure over a sqlx connection, which runs
//! each statement on sqlx's own SQLite thread. The thread drives one kind at a time, each in
//! its own transaction, so its two connections never wait for each other's lock.
//!
//! Each unit of work runs in its own savepoint: one that fails (or panics) is rolled back
//! alone and the rest of its batch commits. Nobody is answered before the `COMMIT` returned,
//! so an answered write is durable; a failed commit fails every request of its batch.

use futures_util::FutureExt;
use sqlx::{AnyConnection, AssertSqlSafe};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use tokio::sync::{mpsc, oneshot};

/// A unit of work on the sqlx connection; true: keep its statements.
type Unit = Box<
    dyn for<'c> FnOnce(&'c mut AnyConnection) -> Pin<Box<dyn Future<Output = bool> + 'c>> + Send,
>;

/// A unit of work on the C library's connection, run on the writer's thread; true: keep.
type Direct = Box<dyn FnOnce(&rusqlite::Connection) -> bool + Send>;

/// What a request queues.
enum Work {
    Conn(Unit),
    Direct(Direct),
}

/// A unit and where its batch's fate goes.
type Job = (Work, oneshot::Sender<Result<(), String>>);

/// At most this many requests share a transaction; what is queued beyond waits for the next.
const BATCH: usize = 64;

/// Prepared statements kept on the direct connection: a pay's two lists with every variant
/// of their statements, and the batch's own.
const STATEMENT_CACHE: usize = 128;

/// The handle requests send their work to.
#[derive(Clone)]
pub(crate) struct Writer(mpsc::Sender<Job>);

impl Writer {
    /// Starts the writer on `conn` and a connection of its own to the file at `path`, on a
    /// thread of its own (the units' futures never leave it, so they need not be `Send`).
    pub(crate) fn start(conn: AnyConnection, path: &str) -> Result<Self, sqlx::Error> {
        let direct = rusqlite::Connection::open(path).map_err(super::tx::sqlite_error)?;
        direct.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        direct
            .execute_batch("PRAGMA synchronous = FULL; PRAGMA busy_timeout = 15000")
            .map_err(super::tx::sqlite_error)?;
        let (tx, rx) = mpsc::channel(1024);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || rt.block_on(write_batches(conn, direct, rx)))?;
        Ok(Self(tx))
    }

    /// Runs `f` in the next batch; its result once that batch is committed, or the commit's
    /// error.
    pub(crate) async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&mut AnyConnection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        let (result_tx, result) = oneshot::channel();
        let unit: Unit = Box::new(move |conn| {
            Box::pin(async move {
                let r = f(conn).await;
                let keep = r.is_ok();
                let _ = result_tx.send(r);
                keep
            })
        });
        self.send(Work::Conn(unit), result).await
    }

    /// Runs `f` on the writer's thread in the next batch, on the C library's connection;
    /// its result once that batch is committed, or the commit's error.
    pub(crate) async fn write_direct<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        self.queue_direct(f).await?.await
    }

    /// As [`Writer::write_direct`] in two steps: when this returns, `f` is queued (after
    /// every unit queued before it: its batch commits with or after theirs); the future it
    /// returns resolves once that batch is committed.
    pub(crate) async fn queue_direct<T, E, F>(
        &self,
        f: F,
    ) -> Result<impl std::future::Future<Output = Result<T, E>> + Send + use<T, E, F>, E>
    where
        F: FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        let (result_tx, result) = oneshot::channel();
        let unit: Direct = Box::new(move |conn| {
            let r = f(conn);
            let keep = r.is_ok();
            let _ = result_tx.send(r);
            keep
        });
        self.queue(Work::Direct(unit), result).await
    }

    async fn send<T, E>(&self, work: Work, result: oneshot::Receiver<Result<T, E>>) -> Result<T, E>
    where
        E: From<sqlx::Error>,
    {
        self.queue(work, result).await?.await
    }

    async fn queue<T, E>(
        &self,
        work: Work,
        result: oneshot::Receiver<Result<T, E>>,
    ) -> Result<impl std::future::Future<Output = Result<T, E>> + use<T, E>, E>
    where
        E: From<sqlx::Error>,
    {
        let (committed, batch) = oneshot::channel();
        let sent = self.0.send((work, committed)).await;
        sent.map_err(|_| sqlx::Error::PoolClosed)?;
        Ok(async move {
            match batch.await.map_err(|_| sqlx::Error::WorkerCrashed)? {
                // The result was sent before the commit; none: the unit panicked.
                Ok(()) => result.await.map_err(|_| sqlx::Error::WorkerCrashed)?,
                Err(why) => Err(sqlx::Error::Io(std::io::Error::other(why)).into()),
            }
        })
    }
}

async fn write_batches(
    mut conn: AnyConnection,
    direct: rusqlite::Connection,
    mut rx: mpsc::Receiver<Job>,
) {
    let mut jobs = Vec::with_capacity(BATCH);
    // Whatever is queued when the last batch ends: no waiting for more to arrive.
    while rx.recv_many(&mut jobs, BATCH).await > 0 {
        let (mut units, mut directs) = (Vec::new(), Vec::new());
        for (work, answer) in jobs.drain(..) {
            match work {
                Work::Conn(u) => units.push((u, answer)),
                Work::Direct(d) => directs.push((d, answer)),
            }
        }
        // The requests of one batch are concurrent (each is answered only after its commit),
        // so running the direct ones first changes no outcome.
        if !directs.is_empty() {
            let (work, answers): (Vec<_>, Vec<_>) = directs.into_iter().unzip();
            let outcome = direct_batch(&direct, work).map_err(super::tx::sqlite_error);
            if outcome.is_err() {
                let _ = direct.execute_batch("ROLLBACK");
            }
            answer(outcome, answers);
        }
        if !units.is_empty() {
            let (work, answers): (Vec<_>, Vec<_>) = units.into_iter().unzip();
            let outcome = batch(&mut conn, work).await;
            if outcome.is_err() {
                let _ = sqlx::raw_sql("ROLLBACK").execute(&mut conn).await;
            }
            answer(outcome, answers);
        }
    }
}

/// Sends a batch's fate to each of its requests.
fn answer<E: std::fmt::Display>(
    outcome: Result<(), E>,
    answers: Vec<oneshot::Sender<Result<(), String>>>,
) {
    let outcome = outcome.map_err(|e| {
        tracing::error!(error = %e, requests = answers.len(), "write batch not committed");
        format!("the write batch was not committed: {e}")
    });
    for answer in answers {
        let _ = answer.send(outcome.clone());
    }
}

/// One transaction over `units`, each in its own savepoint, on the C library's connection.
fn direct_batch(conn: &rusqlite::Connection, units: Vec<Direct>) -> rusqlite::Result<()> {
    let run = |sql: &str| conn.prepare_cached(sql)?.execute([]).map(drop);
    run("BEGIN IMMEDIATE")?;
    for unit in units {
        run("SAVEPOINT unit")?;
        let keep = std::panic::catch_unwind(AssertUnwindSafe(|| unit(conn)));
        if !matches!(keep, Ok(true)) {
            run("ROLLBACK TO unit")?;
        }
        run("RELEASE unit")?;
    }
    run("COMMIT")
}

/// One transaction over `units`, each in its own savepoint; a unit's end shares one call
/// (a round trip to sqlx's SQLite thread) with the next one's start, or with `COMMIT`.
async fn batch(conn: &mut AnyConnection, units: Vec<Unit>) -> sqlx::Result<()> {
    let mut end = "BEGIN IMMEDIATE";
    for unit in units {
        let sql = format!("{end}; SAVEPOINT unit");
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await?;
        let keep = AssertUnwindSafe(unit(&mut *conn)).catch_unwind().await;
        end = match keep {
            Ok(true) => "RELEASE unit",
            _ => "ROLLBACK TO unit; RELEASE unit",
        };
    }
    let sql = format!("{end}; COMMIT");
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await?;
    Ok(())
}
