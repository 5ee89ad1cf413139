//! The store's own ceiling: the minimal durable pay flow, run through the same driver (sqlx)
//! on the same database server, with nothing of payonce in it. Two transactions per pay, as
//! any idempotent pay must make to be crash-safe (the provider is called between them):
//! - claim: insert the key row under its unique constraint, lock the order (a conditional
//!   update: unpaid and no active attempt);
//! - settle: store the answer on the key row, insert the payment, mark the order paid.
//!
//! The server's new-key pays are reported as a fraction of this, so the figure says how close
//! payonce is to what the store allows, not only how it compares with itself.
//!
//! SQLite runs every transaction on one connection (a pool of one), in WAL mode with
//! `synchronous=FULL`: the fastest a design with one transaction per step can be (writers
//! queue in the process instead of in SQLite's busy handler, which sleeps). PostgreSQL runs a
//! pool of one connection per client.

use crate::load::{self, Sample};
use crate::proc::Backend;
use crate::BenchError;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};
use std::str::FromStr;
use std::sync::Arc;

const SCHEMA: &str = "
CREATE TABLE ceiling_orders (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL, amount BIGINT NOT NULL,
    status TEXT NOT NULL, active_key TEXT);
CREATE TABLE ceiling_keys (
    user_id TEXT NOT NULL, idem_key TEXT NOT NULL, order_id TEXT NOT NULL,
    status TEXT NOT NULL, response_status INTEGER, response_body TEXT,
    PRIMARY KEY (user_id, idem_key));
CREATE TABLE ceiling_payments (
    id TEXT PRIMARY KEY, order_id TEXT NOT NULL, amount BIGINT NOT NULL,
    charge_id TEXT NOT NULL UNIQUE);
";

/// Where the flow runs.
struct Ceiling {
    pool: AnyPool,
    sqlite: bool,
}

/// Runs `pays` new-key pays with `clients` concurrent clients on `url` (a fresh SQLite file
/// of its own, or the run's PostgreSQL database, whose `ceiling_*` tables it creates).
pub(crate) async fn measure(
    backend: Backend,
    url: &str,
    clients: usize,
    pays: usize,
) -> Result<Sample, BenchError> {
    sqlx::any::install_default_drivers();
    let sqlite = backend == Backend::Sqlite;
    let options = AnyConnectOptions::from_str(url)?;
    let pool = AnyPoolOptions::new()
        .max_connections(if sqlite { 1 } else { clients as u32 })
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if sqlite {
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA synchronous = FULL").await?;
                }
                Ok(())
            })
        })
        .connect_with(options)
        .await?;
    sqlx::raw_sql(SCHEMA).execute(&pool).await?;
    // Untimed setup: one unpaid order per pay, one customer each (as the server's phase).
    let mut tx = pool.begin().await?;
    for i in 0..pays {
        sqlx::query("INSERT INTO ceiling_orders (id, user_id, amount, status) VALUES ($1, $2, 2500, 'unpaid')")
            .bind(format!("o{i}"))
            .bind(format!("u{i}"))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let ceiling = Arc::new(Ceiling { pool, sqlite });
    let c = ceiling.clone();
    let sample = load::by_count(clients, pays, move |_, i| {
        let c = c.clone();
        async move { c.pay(i).await.map_err(|e| e.to_string()) }
    })
    .await;
    let paid: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ceiling_orders WHERE status = 'paid'")
        .fetch_one(&ceiling.pool)
        .await?;
    if usize::try_from(paid).ok() != Some(pays - sample.errors) {
        return Err(BenchError::Setup(format!(
            "ceiling: {paid} orders paid after {pays} pays with {} errors",
            sample.errors
        )));
    }
    sqlx::raw_sql(
        "DROP TABLE ceiling_payments; DROP TABLE ceiling_keys; DROP TABLE ceiling_orders",
    )
    .execute(&ceiling.pool)
    .await?;
    ceiling.pool.close().await;
    Ok(sample)
}

impl Ceiling {
    /// One pay of order `i` by its customer with a new key: claim, then settle.
    async fn pay(&self, i: usize) -> Result<(), BenchError> {
        let (order, user, key) = (
            format!("o{i}"),
            format!("u{i}"),
            uuid::Uuid::new_v4().to_string(),
        );
        self.claim(&order, &user, &key).await?;
        self.settle(&order, &user, &key).await
    }

    async fn claim(&self, order: &str, user: &str, key: &str) -> Result<(), BenchError> {
        let mut tx = self.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO ceiling_keys (user_id, idem_key, order_id, status) VALUES ($1, $2, $3, 'processing')
             ON CONFLICT DO NOTHING",
        )
        .bind(user)
        .bind(key)
        .bind(order)
        .execute(&mut *tx)
        .await?;
        let locked = sqlx::query(
            "UPDATE ceiling_orders SET active_key = $1 WHERE id = $2 AND status = 'unpaid' AND active_key IS NULL",
        )
        .bind(key)
        .bind(order)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() != 1 || locked.rows_affected() != 1 {
            return Err(BenchError::Setup(format!("ceiling: claim of {order} lost")));
        }
        tx.commit().await?;
        Ok(())
    }

    async fn settle(&self, order: &str, user: &str, key: &str) -> Result<(), BenchError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE ceiling_keys SET status = 'succeeded', response_status = 200, response_body = $1
             WHERE user_id = $2 AND idem_key = $3 AND status = 'processing'",
        )
        .bind(r#"{"status":"succeeded","orderId":"…","amount":2500}"#)
        .bind(user)
        .bind(key)
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT INTO ceiling_payments (id, order_id, amount, charge_id) VALUES ($1, $2, 2500, $3)")
            .bind(format!("pay_{key}"))
            .bind(order)
            .bind(format!("ch_{key}"))
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE ceiling_orders SET status = 'paid', active_key = NULL WHERE id = $1 AND active_key = $2")
            .bind(order)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, BenchError> {
        Ok(if self.sqlite {
            self.pool.begin_with("BEGIN IMMEDIATE").await?
        } else {
            self.pool.begin().await?
        })
    }
}
