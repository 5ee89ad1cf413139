//! PostgreSQL databases of their own: created on the machine's server for one test or run,
//! dropped afterwards (never anyone else's).

use sqlx::Connection;
use std::time::Duration;

/// The server tests' admin URL: `PAYONCE_TEST_PG_URL`, else the machine's `test` database.
pub fn admin_url() -> String {
    std::env::var("PAYONCE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".to_owned())
}

/// How to start the machine's PostgreSQL, for the failure message.
pub const HOW_TO_START: &str =
    "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start";

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("postgres unreachable at {url} ({why})")]
    Unreachable { url: String, why: String },
    #[error("CREATE DATABASE: {0}")]
    Create(#[source] sqlx::Error),
}

/// A database created for one test or run; dropped (`WITH (FORCE)`) when this drops, or
/// by [`PgDb::remove`].
pub struct PgDb {
    pub url: String,
    pub name: String,
    /// `None` once removed.
    admin: Option<String>,
}

impl PgDb {
    /// A fresh database `{prefix}_{uuid}` on the server of `admin` (a URL whose user may
    /// create databases).
    pub async fn create(admin: &str, prefix: &str) -> Result<PgDb, PgError> {
        let unreachable = |why: String| PgError::Unreachable {
            url: admin.to_owned(),
            why,
        };
        let mut conn =
            tokio::time::timeout(Duration::from_secs(10), sqlx::PgConnection::connect(admin))
                .await
                .map_err(|_| unreachable("connect timed out".into()))?
                .map_err(|e| unreachable(e.to_string()))?;
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .map_err(PgError::Create)?;
        let _ = conn.close().await;
        let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
        Ok(PgDb {
            url: format!("{base}/{name}"),
            name,
            admin: Some(admin.to_owned()),
        })
    }

    /// A test's database on [`admin_url`]; `None` when PostgreSQL is unreachable and
    /// skipping is allowed ([`crate::unavailable`]).
    pub async fn for_test() -> Option<PgDb> {
        match Self::create(&admin_url(), "payonce_test").await {
            Ok(db) => Some(db),
            Err(e @ PgError::Unreachable { .. }) => {
                crate::unavailable(&e.to_string(), HOW_TO_START, "PostgreSQL tests")
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Keeps the database after this value is gone (`payonce-chaos --keep`): no drop.
    pub fn keep(mut self) {
        self.admin = None;
    }

    /// Drops the database now (callers that have a runtime at hand).
    pub async fn remove(mut self) {
        if let Some(admin) = self.admin.take() {
            drop_database(&admin, &self.name).await;
        }
    }
}

async fn drop_database(admin: &str, name: &str) -> Option<()> {
    let mut conn = sqlx::PgConnection::connect(admin).await.ok()?;
    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await;
    conn.close().await.ok()
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let Some(admin) = self.admin.take() else {
            return;
        };
        let name = std::mem::take(&mut self.name);
        // Drop may run inside a test's runtime; a runtime of our own on another thread does
        // the async cleanup without blocking it.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(drop_database(&admin, &name))
        })
        .join();
    }
}
