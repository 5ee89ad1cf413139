//! The processes under test: the real `payonce-server` binary spawned on port 0, its
//! databases (a temp SQLite file, or a PostgreSQL database created for the run and dropped
//! after it), through `payonce-testkit`.

use crate::BenchError;
use payonce_testkit::pg::{PgDb, PgError};
pub(crate) use payonce_testkit::server::Proc;
use payonce_testkit::server::SpawnError;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Spawns `bin args…` with stderr (the server's logs: one access line per request, as
/// deployed) going to `log`, and waits for its "listening on" lines.
pub(crate) fn spawn(
    bin: &Path,
    args: &[String],
    log: PathBuf,
    want_api: bool,
) -> Result<Proc, BenchError> {
    let stderr = std::fs::File::create(&log)?;
    let mut cmd = payonce_testkit::server::command(bin);
    // Flags say everything; an inherited variable must not change what is measured.
    cmd.args(args)
        .env_remove("PAYONCE_LOG")
        .stderr(Stdio::from(stderr));
    Proc::spawn(cmd, want_api).map_err(|e| match e {
        SpawnError::Spawn(e) => BenchError::Spawn(bin.display().to_string(), e),
        SpawnError::Silent(exit) => BenchError::Setup(format!(
            "{} did not print its listening line (exit {exit:?}); see {}",
            bin.display(),
            log.display()
        )),
    })
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
    pg: Option<PgDb>,
}

impl Db {
    /// A fresh database. `pg_admin` is a PostgreSQL URL whose server may create databases.
    pub(crate) async fn create(backend: Backend, pg_admin: &str) -> Result<Db, BenchError> {
        let dir =
            std::env::temp_dir().join(format!("payonce-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let pg = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(PgDb::create(pg_admin, "payonce_bench").await.map_err(
                |e| match e {
                    PgError::Unreachable { url, why } => {
                        BenchError::Setup(format!("postgres at {url}: {why}"))
                    }
                    PgError::Create(e) => BenchError::Sql(e),
                },
            )?),
        };
        let url = match &pg {
            Some(pg) => pg.url.clone(),
            None => format!("sqlite://{}", dir.join("payonce.db").display()),
        };
        Ok(Db { url, dir, pg })
    }

    /// Removes the database (and the run's files).
    pub(crate) async fn remove(mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(pg) = self.pg.take() {
            pg.remove().await;
        }
    }
}
