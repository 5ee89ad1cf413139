//! Database access: one [`Store`] over sqlx's `Any` driver, SQLite or PostgreSQL. The SQL
//! of the server is here, and nothing outside this folder does anything by backend.
//!
//! Each statement is written once for both: `$1` placeholders, `INSERT … ON CONFLICT DO
//! NOTHING`, conditional `UPDATE`s and a partial unique index behave the same on both, so
//! every rule is an atomic statement instead of a read-then-write, and no `SELECT … FOR
//! UPDATE` is needed. A pay's transactions are lists of such statements (`tx.rs`): run one
//! by one on SQLite, chained into one round trip on PostgreSQL. What the backends do apart is
//! chosen in this file: an auto-increment key ([`Backend::dialect`]), the executor of such a
//! list, a row's address for batched deletes, and PostgreSQL's advisory lock.
//!
//! # Layout
//! One file per table (`attempts`, `orders`, `catalog` with the coupons, `payments`,
//! `outbox`, `jobs`, `mailbox`, `webhook_events`, `refunds`, `audit`, `journal`); `pay`: what
//! a pay writes (the claim, the settle, the take-over, the review flags, ...); `cancel`: what a
//! cancel writes (the tombstone); `erase`: a user's personal data erased; `review`: an operator's resolve of a review flag; `sweep`: what the
//! provider sweep reads and writes; `tx`: a transaction as data and its two executors;
//! `sqlite_writer`: SQLite's one writer; this file: connecting, pragmas, write transactions,
//! migrations, and retention across tables.

pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod catalog;
pub(crate) mod erase;
pub(crate) mod jobs;
pub(crate) mod journal;
pub(crate) mod mailbox;
pub(crate) mod orders;
pub(crate) mod pay;
pub(crate) mod payments;
pub(crate) mod refunds;
pub(crate) mod review;
mod sqlite_writer;
pub(crate) mod sweep;
mod tx;
pub(crate) mod webhook_events;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, ConnectOptions, Connection};
use std::str::FromStr;
use std::time::Duration;

/// A table whose processing rows are leased to the one request or job that may call the
/// provider about them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Leased {
    Attempts,
    Refunds,
}

/// The statement that takes the lease of processing row `id` of `table` until `until`
/// under `token`, if nobody holds an unexpired one: exactly one of several concurrent
/// contenders changes the row.
pub(crate) fn take_lease(
    table: Leased,
    id: &str,
    token: &str,
    now: i64,
    until: i64,
) -> tx::Statement {
    let sql = match table {
        Leased::Attempts => {
            "UPDATE attempts SET locked_until = $1, lease_token = $2, updated_at = $3
             WHERE id = $4 AND status = 'processing' AND (locked_until IS NULL OR locked_until <= $3)"
        }
        Leased::Refunds => {
            "UPDATE refunds SET locked_until = $1, lease_token = $2, updated_at = $3
             WHERE id = $4 AND status = 'processing' AND (locked_until IS NULL OR locked_until <= $3)"
        }
    };
    tx::Statement::new(sql, vec![until.into(), token.into(), now.into(), id.into()])
}

/// A stored value this code cannot read back (a status, a JSON column), as sqlx reports one.
pub(crate) fn decode_err(msg: String) -> sqlx::Error {
    sqlx::Error::Decode(msg.into())
}

/// Which database is behind the `Any` pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded file, the default.
    Sqlite,
    /// `DATABASE_URL=postgres://…`; several server processes may share it.
    Postgres,
}

impl Backend {
    /// A migration's text in this backend's dialect. The schema is written once; what
    /// SQLite and PostgreSQL do not share is an auto-increment primary key, and a line that
    /// starts with `{{POSTGRES}}` is PostgreSQL's only (a constraint SQLite never made).
    fn dialect(self, sql: &str) -> String {
        let lines = sql
            .lines()
            .filter_map(|l| match l.strip_prefix("{{POSTGRES}}") {
                Some(pg) => (self == Backend::Postgres).then_some(pg),
                None => Some(l),
            });
        lines.collect::<Vec<_>>().join("\n").replace(
            "{{ID_PRIMARY_KEY}}",
            match self {
                Backend::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
                Backend::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            },
        )
    }

    /// Its name, as `GET /healthz` reports it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The store: a pool for reads and what it talks to; on SQLite, the one writer.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    writer: Option<sqlite_writer::Writer>,
    /// On PostgreSQL, the journal's group commit (`journal::Writer`).
    journal: Option<journal::Writer>,
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Neither `sqlite:` nor `postgres:`.
    #[error("unsupported database url (expected sqlite://PATH or postgres://...)")]
    UnsupportedUrl,
    /// The SQLite file's directory could not be created.
    #[error("cannot create the database directory: {0}")]
    Dir(#[from] std::io::Error),
    /// Connecting or migrating failed.
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    /// `--migrate check` and this binary's migrations are not all applied.
    #[error(
        "the schema is at version {at}, this binary needs {needs}: run `payonce-server migrate` \
         first (or start with --migrate auto)"
    )]
    SchemaBehind {
        /// The database's newest migration.
        at: i64,
        /// This binary's.
        needs: i64,
    },
    /// A newer binary migrated the database past what this one can serve.
    #[error(
        "the schema is at version {at}, migrated by a newer payonce-server that needs schema \
         {needs} or later; this binary has {binary}: run the newer release"
    )]
    SchemaNewer {
        /// The database's newest migration.
        at: i64,
        /// The oldest binary that can serve it.
        needs: i64,
        /// This binary's newest migration.
        binary: i64,
    },
}

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

impl Migration {
    /// The oldest binary, by the newest migration it has, that can still serve a database
    /// this migration was applied to. Most migrations rebuilt or dropped what the binaries
    /// before them read (`0010` rebuilds `attempts`, `0011` drops `outbox`), so each needs
    /// its own version. A migration that only adds (a column with a default, a table, an
    /// index) declares an older version here; the one that removes what that older binary
    /// reads waits for a later release (docs/deploy.md, "Upgrading").
    const fn compatible_from(&self) -> i64 {
        match self.version {
            // `0014` only adds the journal, a table no older binary reads or writes.
            14 => 12,
            // `0015` partitions the journal by day: schema 14 still inserts and reads
            // through `journal`, and its cleanup's deletes there are skipped by the
            // migration's guard (migrations/0015_journal_by_day.sql says why).
            15 => 12,
            v => v,
        }
    }
}

/// What a start does about the schema (`--migrate`; docs/deploy.md, "Upgrading").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MigrateMode {
    /// Apply this binary's migrations that the database lacks (dev's default).
    Auto,
    /// Refuse to start unless the schema is at this binary's version, or at a newer one
    /// declared compatible with it (the default without `--dev`: migrating is a step of its
    /// own, `payonce-server migrate`).
    Check,
    /// Neither migrate nor check.
    Off,
}

/// Where a database's schema stands for this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Every migration of this binary is applied, and none newer.
    Current,
    /// Migrations of this binary are missing.
    Behind {
        /// The database's newest migration (0: none).
        at: i64,
    },
    /// A newer binary migrated it, declaring this binary compatible.
    NewerCompatible {
        /// The database's newest migration.
        at: i64,
    },
    /// A newer binary migrated it past what this one can serve.
    NewerIncompatible {
        /// The database's newest migration.
        at: i64,
        /// The oldest binary, by its newest migration, that can serve it.
        needs: i64,
    },
}

/// The newest migration this binary has.
pub fn schema_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Judges a schema from what the database records: the versions applied, each with the
/// oldest binary that can serve it (`None`: not recorded, so none older than itself).
fn judge(binary: i64, applied: &[(i64, Option<i64>)]) -> Schema {
    let at = applied.iter().map(|&(v, _)| v).max().unwrap_or(0);
    if at < binary {
        return Schema::Behind { at };
    }
    let needs = applied
        .iter()
        .filter(|&&(v, _)| v > binary)
        .map(|&(v, compatible_from)| compatible_from.unwrap_or(v))
        .max();
    match needs {
        None => Schema::Current,
        Some(needs) if needs <= binary => Schema::NewerCompatible { at },
        Some(needs) => Schema::NewerIncompatible { at, needs },
    }
}

/// Every migration, in order: one text for both backends (see [`Backend::dialect`]).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "webhook_events",
        sql: include_str!("../../migrations/0002_webhook_events.sql"),
    },
    Migration {
        version: 3,
        name: "outbox_jobs_refunds",
        sql: include_str!("../../migrations/0003_outbox_jobs_refunds.sql"),
    },
    Migration {
        version: 4,
        name: "attempts_by_time",
        sql: include_str!("../../migrations/0004_attempts_by_time.sql"),
    },
    Migration {
        version: 5,
        name: "catalog_source",
        sql: include_str!("../../migrations/0005_catalog_source.sql"),
    },
    Migration {
        version: 6,
        name: "retention_by_time",
        sql: include_str!("../../migrations/0006_retention_by_time.sql"),
    },
    Migration {
        version: 7,
        name: "provider_refs",
        sql: include_str!("../../migrations/0007_provider_refs.sql"),
    },
    Migration {
        version: 8,
        name: "provider_keys_failed_refunds",
        sql: include_str!("../../migrations/0008_provider_keys_failed_refunds.sql"),
    },
    Migration {
        version: 9,
        name: "pay_rows",
        sql: include_str!("../../migrations/0009_pay_rows.sql"),
    },
    Migration {
        version: 10,
        name: "expired_attempts",
        sql: include_str!("../../migrations/0010_expired_attempts.sql"),
    },
    Migration {
        version: 11,
        name: "attempt_is_the_outbox",
        sql: include_str!("../../migrations/0011_attempt_is_the_outbox.sql"),
    },
    Migration {
        version: 12,
        name: "orders_held_for_review",
        sql: include_str!("../../migrations/0012_orders_held_for_review.sql"),
    },
    Migration {
        version: 13,
        name: "receipt_outbox",
        sql: include_str!("../../migrations/0013_receipt_outbox.sql"),
    },
    Migration {
        version: 14,
        name: "journal",
        sql: include_str!("../../migrations/0014_journal.sql"),
    },
    Migration {
        version: 15,
        name: "journal_by_day",
        sql: include_str!("../../migrations/0015_journal_by_day.sql"),
    },
];

/// A pool connection idle longer than this is pinged before it is used.
const IDLE_PING: Duration = Duration::from_secs(5);

/// An arbitrary constant naming the migration lock among PostgreSQL advisory locks, so that
/// several processes starting together migrate one at a time.
const PG_MIGRATION_LOCK: i64 = 0x7061_796f_6e63_6521; // "payonce!"

impl Store {
    /// Connects, prepares and migrates (`--migrate auto`): for the tools, tests and benches.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::open(url, MigrateMode::Auto).await
    }

    /// Connects and prepares, then does what `mode` says about the schema. A database a
    /// newer, incompatible binary migrated is refused in every mode but `off`.
    pub async fn open(url: &str, mode: MigrateMode) -> Result<Self, StoreError> {
        let store = Self::connect_only(url).await?;
        if mode == MigrateMode::Off {
            return Ok(store);
        }
        let binary = schema_version();
        match (store.schema().await?, mode) {
            (Schema::NewerIncompatible { at, needs }, _) => {
                Err(StoreError::SchemaNewer { at, needs, binary })
            }
            (Schema::Behind { .. }, MigrateMode::Auto) => {
                store.migrate().await?;
                Ok(store)
            }
            (Schema::Behind { at }, _) => Err(StoreError::SchemaBehind { at, needs: binary }),
            (Schema::Current | Schema::NewerCompatible { .. }, _) => Ok(store),
        }
    }

    /// Applies this binary's migrations the database lacks (`payonce-server migrate`), and
    /// says where the schema then stands.
    pub async fn migrate_to_current(url: &str) -> Result<Schema, StoreError> {
        let store = Self::connect_only(url).await?;
        if let Schema::NewerIncompatible { at, needs } = store.schema().await? {
            let binary = schema_version();
            return Err(StoreError::SchemaNewer { at, needs, binary });
        }
        store.migrate().await?;
        Ok(store.schema().await?)
    }

    /// Where the schema stands for this binary (read only).
    pub async fn schema(&self) -> sqlx::Result<Schema> {
        let exists = match self.backend {
            Backend::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1"
            }
            Backend::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = $1"
            }
        };
        let count = |table: &'static str| {
            sqlx::query_as::<_, (i64,)>(exists)
                .bind(table)
                .fetch_one(&self.pool)
        };
        let mut applied: Vec<(i64, Option<i64>)> = Vec::new();
        if count("payonce_migrations").await?.0 > 0 {
            let compat = count("payonce_schema_compat").await?.0 > 0;
            let sql = match compat {
                true => {
                    "SELECT m.version, c.compatible_from FROM payonce_migrations m \
                     LEFT JOIN payonce_schema_compat c ON c.version = m.version"
                }
                false => "SELECT version, CAST(NULL AS BIGINT) FROM payonce_migrations",
            };
            applied = sqlx::query_as(sql).fetch_all(&self.pool).await?;
        }
        Ok(judge(schema_version(), &applied))
    }

    async fn connect_only(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = normalize_url(url)?;
        let options = AnyConnectOptions::from_str(&url)?;
        let mut writer = None;
        if backend == Backend::Sqlite {
            // WAL lets the pool's readers run beside the writer. It is a property of the file
            // and needs an exclusive lock that busy_timeout cannot wait for, so it is set on
            // the writer's connection before the pool opens more. The busy timeout only
            // waits for another process on the file (this one's writes all queue in the
            // writer).
            let mut conn = options.connect().await?;
            sqlx::raw_sql(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 15000",
            )
            .execute(&mut conn)
            .await?;
            let path = sqlite_path(&url).ok_or(StoreError::UnsupportedUrl)?;
            writer = Some(sqlite_writer::Writer::start(conn, path)?);
        }
        let pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 8 } else { 16 })
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every connection it takes back (a round trip each); pinging it again
            // when it is handed out doubles that on every statement of a pay. Only one idle
            // long enough to have been dropped by the server is pinged (a dead one is
            // replaced, as with the default test).
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move { Ok(meta.idle_for < IDLE_PING || conn.ping().await.is_ok()) })
            })
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // Reads only: a write here would wait on the writer's lock in
                        // SQLite's sleeping busy handler; every write goes to the writer.
                        sqlx::raw_sql("PRAGMA busy_timeout = 15000; PRAGMA query_only = ON")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let journal = (backend == Backend::Postgres).then(|| journal::Writer::start(pool.clone()));
        Ok(Self {
            pool,
            backend,
            writer,
            journal,
        })
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Runs `f` as one write transaction: committed when it returns `Ok`, rolled back when
    /// it returns `Err`, and answered only after the commit. On SQLite through the one writer
    /// (`sqlite_writer.rs`: batched with concurrent writes, each in its own savepoint); on
    /// PostgreSQL in a transaction of the pool, whose row locks and unique indexes serialize
    /// the conflicting statements themselves.
    ///
    /// Every write of the server is a plan of `store/` ([`Store::transact`], [`Store::commit`]):
    /// private to this folder, and the layout test (tests/blackbox/layout.rs) fails on a
    /// write transaction opened anywhere else.
    pub(in crate::store) async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&mut AnyConnection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        if let Some(writer) = &self.writer {
            return writer.write(f).await;
        }
        let mut tx = self.pool.begin().await?;
        let value = f(&mut *tx).await?; // an error drops `tx`: rolled back
        tx.commit().await?;
        Ok(value)
    }

    /// Runs `list` as one write transaction (`tx.rs`), then `decide` over how many rows each
    /// statement changed: its `Ok` commits, its `Err` rolls everything back. On SQLite in the
    /// writer, on its thread (`sqlite_writer.rs`); on PostgreSQL as one statement in a
    /// transaction of the pool.
    pub(crate) async fn transact<T, E, D>(
        &self,
        list: Vec<tx::Statement>,
        decide: D,
    ) -> Result<T, E>
    where
        D: FnOnce(&[u64]) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        match &self.writer {
            Some(writer) => {
                let run = move |conn: &rusqlite::Connection| decide(&tx::steps(conn, &list)?);
                writer.write_direct(run).await
            }
            None => {
                self.write(async move |conn| decide(&tx::chained(conn, list).await?))
                    .await
            }
        }
    }

    /// Commits `list` as one transaction of its own (`tx.rs`): on SQLite in the writer, on
    /// PostgreSQL as one statement on the pool (atomic by itself: no `BEGIN`/`COMMIT`
    /// round trips). How many rows each statement changed.
    async fn commit(&self, list: Vec<tx::Statement>) -> sqlx::Result<Vec<u64>> {
        match self.backend {
            Backend::Sqlite => self.transact(list, |counts| Ok(counts.to_vec())).await,
            Backend::Postgres => tx::chained(&self.pool, list).await,
        }
    }

    /// Runs `list` all or nothing, as one transaction of its own (`tx.rs`): `Ok(counts)`,
    /// committed, when every [`tx::Need::Row`] changed its row; `Err(counts)`, with nothing
    /// written, when one changed none (the statements after it did not run). On SQLite in
    /// the writer; on PostgreSQL as one statement on the pool, a loss included: no
    /// `BEGIN`/`COMMIT` round trips.
    async fn run_all(&self, list: Vec<tx::Statement>) -> sqlx::Result<Result<Vec<u64>, Vec<u64>>> {
        if self.backend == Backend::Postgres {
            return tx::chained_all(&self.pool, list).await;
        }
        enum Stop {
            Lost(Vec<u64>),
            Err(sqlx::Error),
        }
        impl From<sqlx::Error> for Stop {
            fn from(e: sqlx::Error) -> Self {
                Self::Err(e)
            }
        }
        let rows: Vec<bool> = list.iter().map(tx::Statement::gates).collect();
        let decide = move |c: &[u64]| match rows.iter().zip(c).all(|(&row, &n)| !row || n > 0) {
            true => Ok(c.to_vec()),
            false => Err(Stop::Lost(c.to_vec())),
        };
        match self.transact(list, decide).await {
            Ok(counts) => Ok(Ok(counts)),
            Err(Stop::Lost(counts)) => Ok(Err(counts)),
            Err(Stop::Err(e)) => Err(e),
        }
    }

    /// Deletes at most `limit` rows of `table` where `cond` holds for `$1 = at`, in one write
    /// transaction, by `ctid`/`rowid`: no lookup by key, and no generic plan turns a batch
    /// into a scan of the table (docs/benchmarks.md, "Cleanup"). Bounded, so a large backlog
    /// is many short transactions, not one long one.
    pub(crate) async fn delete_batch(
        &self,
        (table, cond): (&'static str, &'static str),
        at: i64,
        limit: i64,
    ) -> sqlx::Result<u64> {
        let row = match self.backend {
            Backend::Postgres => "ctid",
            Backend::Sqlite => "rowid",
        };
        let sql = format!(
            "DELETE FROM {table} WHERE {row} IN (SELECT {row} FROM {table} WHERE {cond} LIMIT $2)"
        );
        let delete = self.write(async move |tx| {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(at).bind(limit);
            Ok::<_, sqlx::Error>(q.execute(&mut *tx).await?.rows_affected())
        });
        delete.await
    }

    /// True when the store answers.
    pub(crate) async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    async fn migrate(&self) -> sqlx::Result<()> {
        let backend = self.backend;
        self.write(async move |tx| {
                start_lock(tx, backend, PG_MIGRATION_LOCK).await?;
                // The compatibility table is kept beside the list rather than as a column of
                // it, so that the list keeps the shape every earlier release reads and writes.
                sqlx::raw_sql(
                    "CREATE TABLE IF NOT EXISTS payonce_migrations (
                        version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL);
                     CREATE TABLE IF NOT EXISTS payonce_schema_compat (
                        version BIGINT PRIMARY KEY, compatible_from BIGINT NOT NULL)",
                )
                .execute(&mut *tx)
                .await?;
                for m in MIGRATIONS {
                    sqlx::query(
                        "INSERT INTO payonce_schema_compat (version, compatible_from) \
                         VALUES ($1, $2) ON CONFLICT (version) DO NOTHING",
                    )
                    .bind(m.version)
                    .bind(m.compatible_from())
                    .execute(&mut *tx)
                    .await?;
                    let done: Option<(i64,)> =
                        sqlx::query_as("SELECT version FROM payonce_migrations WHERE version = $1")
                            .bind(m.version)
                            .fetch_optional(&mut *tx)
                            .await?;
                    if done.is_some() {
                        continue;
                    }
                    let sql = backend.dialect(m.sql);
                    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO payonce_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    )
                    .bind(m.version)
                    .bind(m.name)
                    .bind(crate::clock::Clock::now_ms(&crate::clock::SystemClock))
                    .execute(&mut *tx)
                    .await?;
                    tracing::info!(version = m.version, name = m.name, "migration applied");
                }
                Ok(())
            })
        .await
    }
}

/// The instant a retention condition's `$1` stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Horizon {
    /// The job's now: expired keys.
    Now,
    /// The start of the dispute window (`Policy::audit_before`).
    AuditWindow,
}

/// Retention, table by table, in the order the job deletes: which rows go (a condition on
/// `$1`) and what `$1` is. The expired keys first: their condition is the rules'
/// (`attempts::EXPIRED`). The journal is not here: on PostgreSQL it goes by whole days
/// (`journal::retire`, after these).
pub(crate) const RETENTION: &[(&str, &str, Horizon)] = &[
    ("attempts", attempts::EXPIRED, Horizon::Now),
    ("audit_log", "at < $1", Horizon::AuditWindow),
    // Unhandled ones too (a key no attempt ever owned): the provider gave up long ago.
    ("webhook_events", "received_at < $1", Horizon::AuditWindow),
    (
        "jobs",
        "done_at IS NOT NULL AND done_at < $1",
        Horizon::AuditWindow,
    ),
    (
        "refunds",
        "status <> 'processing' AND expires_at IS NOT NULL AND expires_at < $1",
        Horizon::Now,
    ),
];

/// On PostgreSQL, the transaction-scoped advisory lock `key`, so that instances starting
/// together take turns; SQLite's one writer already serializes.
async fn start_lock(tx: &mut AnyConnection, backend: Backend, key: i64) -> sqlx::Result<()> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT 1 FROM pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The file of a `sqlite:` URL; `None` for any other URL, and for an in-memory database
/// (one per pool connection: keys would be forgotten).
pub(crate) fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

/// Recognizes the backend and, for SQLite, creates the file's directory and asks for the
/// file to be created (`mode=rwc`).
fn normalize_url(url: &str) -> Result<(Backend, String), StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((Backend::Postgres, url.to_owned()));
    }
    let path = sqlite_path(url).ok_or(StoreError::UnsupportedUrl)?;
    if let Some(dir) = std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)?;
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = if query.contains("mode=") {
        query.to_owned()
    } else if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok((Backend::Sqlite, format!("sqlite://{path}?{query}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary serves its own schema and a newer one only when every newer migration
    /// declared it compatible; an unknown declaration counts as incompatible.
    #[test]
    fn a_schema_is_judged_by_the_newest_migrations_declarations() {
        let own = |n: i64| (1..=n).map(|v| (v, Some(v))).collect::<Vec<_>>();
        assert_eq!(judge(11, &[]), Schema::Behind { at: 0 });
        assert_eq!(judge(11, &own(10)), Schema::Behind { at: 10 });
        assert_eq!(judge(11, &own(11)), Schema::Current);
        let expand = [own(11), vec![(12, Some(11)), (13, Some(10))]].concat();
        assert_eq!(judge(11, &expand), Schema::NewerCompatible { at: 13 });
        let contract = [own(11), vec![(12, Some(11)), (13, Some(13))]].concat();
        let want = Schema::NewerIncompatible { at: 13, needs: 13 };
        assert_eq!(judge(11, &contract), want);
        let undeclared = [own(11), vec![(12, None)]].concat();
        let want = Schema::NewerIncompatible { at: 12, needs: 12 };
        assert_eq!(judge(11, &undeclared), want);
        assert_eq!(schema_version(), MIGRATIONS.last().unwrap().version);
        assert!(MIGRATIONS.windows(2).all(|w| w[0].version < w[1].version));
        let journal = MIGRATIONS.iter().find(|m| m.name == "journal").unwrap();
        assert_eq!(journal.compatible_from(), 12, "an added table only");
        let by_day = MIGRATIONS.iter().find(|m| m.version == 15).unwrap();
        assert_eq!(
            by_day.compatible_from(),
            12,
            "schema 14 still writes through it"
        );
    }

    #[test]
    fn every_migration_is_complete_sql_in_both_dialects() {
        for m in MIGRATIONS {
            for backend in [Backend::Sqlite, Backend::Postgres] {
                let sql = backend.dialect(m.sql);
                assert!(
                    !sql.contains("{{"),
                    "{} left a placeholder for {backend:?}",
                    m.name
                );
            }
        }
        let pg = Backend::Postgres.dialect(MIGRATIONS[0].sql);
        assert!(pg.contains("GENERATED ALWAYS AS IDENTITY") && !pg.contains("AUTOINCREMENT"));
    }
}
