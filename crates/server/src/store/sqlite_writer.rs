//! SQLite's one writer: a thread that owns the only write connection and commits what
//! concurrent requests queued together (group commit). SQLite lets one transaction write at
//! a time, and a connection that finds the lock taken does not queue: its busy handler
//! sleeps 1, 2, 5 … 100 ms between tries. Here writes queue in a channel instead, and a
//! batch pays one `BEGIN IMMEDIATE … COMMIT`, so one fsync (WAL, `synchronous=FULL`).
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

/// A unit of work on the writer's connection; true: keep its statements.
type Unit = Box<
    dyn for<'c> FnOnce(&'c mut AnyConnection) -> Pin<Box<dyn Future<Output = bool> + 'c>> + Send,
>;

/// A unit and where its batch's fate goes.
type Job = (Unit, oneshot::Sender<Result<(), String>>);

/// At most this many requests share a transaction; what is queued beyond waits for the next.
const BATCH: usize = 64;

/// The handle requests send their work to.
#[derive(Clone)]
pub(crate) struct Writer(mpsc::Sender<Job>);

impl Writer {
    /// Starts the writer on `conn`, on a thread of its own (the units' futures never leave
    /// it, so they need not be `Send`).
    pub(crate) fn start(conn: AnyConnection) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(1024);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || rt.block_on(run(conn, rx)))?;
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
        let (committed, batch) = oneshot::channel();
        let unit: Unit = Box::new(move |conn| {
            Box::pin(async move {
                let r = f(conn).await;
                let keep = r.is_ok();
                let _ = result_tx.send(r);
                keep
            })
        });
        let sent = self.0.send((unit, committed)).await;
        sent.map_err(|_| sqlx::Error::PoolClosed)?;
        match batch.await.map_err(|_| sqlx::Error::WorkerCrashed)? {
            // The result was sent before the commit; none: the unit panicked.
            Ok(()) => result.await.map_err(|_| sqlx::Error::WorkerCrashed)?,
            Err(why) => Err(sqlx::Error::Io(std::io::Error::other(why)).into()),
        }
    }
}

async fn run(mut conn: AnyConnection, mut rx: mpsc::Receiver<Job>) {
    let mut jobs = Vec::with_capacity(BATCH);
    // Whatever is queued when the last batch ends: no waiting for more to arrive.
    while rx.recv_many(&mut jobs, BATCH).await > 0 {
        let (units, answers): (Vec<_>, Vec<_>) = jobs.drain(..).unzip();
        let outcome = batch(&mut conn, units).await.map_err(|e| {
            tracing::error!(error = %e, requests = answers.len(), "write batch not committed");
            format!("the write batch was not committed: {e}")
        });
        if outcome.is_err() {
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut conn).await;
        }
        for answer in answers {
            let _ = answer.send(outcome.clone());
        }
    }
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
