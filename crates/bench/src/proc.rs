//! The processes under test: the real `payonce-server` binary spawned on port 0, its
//! databases (a temp SQLite file, or a PostgreSQL database created for the run and dropped
//! after it).

use crate::BenchError;
use sqlx::Connection;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One spawned process; killed when dropped.
pub(crate) struct Proc {
    child: Child,
    pub api: Option<String>,
    pub provider: Option<String>,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `bin args…` with stderr (the server's logs: one access line per request, as
    /// deployed) going to `log`, and waits for its "listening on" lines.
    pub(crate) fn spawn(
        bin: &Path,
        args: &[String],
        log: PathBuf,
        want_api: bool,
    ) -> Result<Proc, BenchError> {
        let stderr = std::fs::File::create(&log)?;
        let mut child = Command::new(bin)
            .args(args)
            // Flags say everything; an inherited variable must not change what is measured.
            .env_remove("DATABASE_URL")
            .env_remove("PAYONCE_PROVIDER_URL")
            .env_remove("REDIS_URL")
            .env_remove("PAYONCE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| BenchError::Spawn(bin.display().to_string(), e))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError::Setup("the server's stdout was not captured".into()))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keeps reading after the listening lines, so the pipe never fills.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut proc = Proc {
            child,
            api: None,
            provider: None,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while (want_api && proc.api.is_none()) || (!want_api && proc.provider.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let exit = proc.child.try_wait().ok().flatten();
                return Err(BenchError::Setup(format!(
                    "{} did not print its listening line (exit {exit:?}); see {}",
                    bin.display(),
                    proc.log.display()
                )));
            };
            if let Some(url) = line.strip_prefix("payonce: api listening on ") {
                proc.api = Some(url.to_owned());
            } else if let Some(url) = line.strip_prefix("payonce: provider listening on ") {
                proc.provider = Some(url.to_owned());
            }
        }
        Ok(proc)
    }

    /// The API URL (for a process spawned with `want_api`).
    pub(crate) fn api(&self) -> String {
        self.api.clone().unwrap_or_default()
    }

    /// The provider URL, if the process runs one.
    pub(crate) fn provider(&self) -> String {
        self.provider.clone().unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which store a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }

    /// The name `--only` takes.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A database for one run, removed when dropped.
pub(crate) struct Db {
    pub url: String,
    /// Where the run's files go (the SQLite file, the server logs).
    pub dir: PathBuf,
    pg: Option<(String, String)>,
}

impl Db {
    /// A fresh database. `pg_admin` is a PostgreSQL URL whose server may create databases.
    pub(crate) async fn create(backend: Backend, pg_admin: &str) -> Result<Db, BenchError> {
        let dir =
            std::env::temp_dir().join(format!("payonce-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        match backend {
            Backend::Sqlite => Ok(Db {
                url: format!("sqlite://{}", dir.join("payonce.db").display()),
                dir,
                pg: None,
            }),
            Backend::Postgres => {
                let mut conn = tokio::time::timeout(
                    Duration::from_secs(10),
                    sqlx::PgConnection::connect(pg_admin),
                )
                .await
                .map_err(|_| {
                    BenchError::Setup(format!("postgres at {pg_admin}: connect timed out"))
                })??;
                let name = format!("payonce_bench_{}", uuid::Uuid::new_v4().simple());
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await?;
                let _ = conn.close().await;
                let base = pg_admin.rsplit_once('/').map_or(pg_admin, |(b, _)| b);
                Ok(Db {
                    url: format!("{base}/{name}"),
                    dir,
                    pg: Some((pg_admin.to_owned(), name)),
                })
            }
        }
    }

    /// Removes the database (and the run's files).
    pub(crate) async fn remove(mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((admin, name)) = self.pg.take() {
            if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await;
                let _ = conn.close().await;
            }
        }
    }
}
