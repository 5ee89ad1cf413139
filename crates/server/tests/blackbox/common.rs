//! The black-box harness: spawns the real `payonce-server` binary on port 0 with a fresh
//! SQLite file or a fresh PostgreSQL database (through `payonce-testkit`), and talks HTTP
//! through [`TestApp`] and the testkit's checkout fixtures.

pub use payonce_testkit::checkout::{
    assert_agree, client, id_of, key, ledger, order_state_of, Checkout, HttpApi, Req, Resp,
};
use payonce_testkit::pg::PgDb;
pub use payonce_testkit::server::Proc;
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The webhook secret of servers started without `--dev` (and of their provider).
pub const WEBHOOK_SECRET: &str = "whsec_payonce_test_0123456789abcdef0123";

/// A standalone `mock-provider` on a free port, signing with [`WEBHOOK_SECRET`].
pub fn mock_provider_args() -> Vec<String> {
    [
        "mock-provider",
        "--addr",
        "127.0.0.1:0",
        "--webhook-secret",
        WEBHOOK_SECRET,
    ]
    .map(String::from)
    .to_vec()
}

/// The session secret every test process shares (several processes must verify each
/// other's tokens).
pub const SECRET: &str = "payonce-test-secret-0123456789abcdef";

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each named scenario `async fn name(backend: Backend)` once per backend, as
/// `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name($crate::common::Backend::Sqlite).await }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name($crate::common::Backend::Postgres).await }
            )*
        }
    };
}

/// A database for one test: a temp SQLite file, or a PostgreSQL database created for the
/// test and dropped with it.
pub struct TestDb {
    pub url: String,
    _pg: Option<PgDb>,
    dir: Option<PathBuf>,
}

impl TestDb {
    /// A fresh database, or `None` when PostgreSQL is unreachable and skipping is allowed
    /// (`payonce_testkit::unavailable`: under CI=true a failure).
    pub async fn create(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir()
                    .join(format!("payonce-test-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&dir).expect("temp dir");
                let url = format!("sqlite://{}", dir.join("payonce.db").display());
                Some(Self {
                    url,
                    _pg: None,
                    dir: Some(dir),
                })
            }
            Backend::Postgres => {
                let pg = PgDb::for_test().await?;
                Some(Self {
                    url: pg.url.clone(),
                    _pg: Some(pg),
                    dir: None,
                })
            }
        }
    }

    /// A pool on the test database, to assert on stored rows.
    pub async fn pool(&self) -> AnyPool {
        sqlx::any::install_default_drivers();
        AnyPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .expect("connect to test db")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Spawns `payonce-server args…` and waits for its listening lines (its log on stderr
/// when `PAYONCE_TEST_LOG` is set).
pub fn spawn(args: &[String], want_api: bool) -> Proc {
    let stderr = if std::env::var("PAYONCE_TEST_LOG").is_ok() {
        Stdio::inherit()
    } else {
        Stdio::null()
    };
    spawn_with_stderr(args, want_api, stderr)
}

/// Like [`spawn`], with the server's log (stderr) written to `log`, for tests that assert
/// what the server says.
pub fn spawn_logged(args: &[String], want_api: bool, log: &Path) -> Proc {
    let file = std::fs::File::create(log).expect("log file");
    spawn_with_stderr(args, want_api, Stdio::from(file))
}

fn spawn_with_stderr(args: &[String], want_api: bool, stderr: Stdio) -> Proc {
    let mut cmd = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref());
    cmd.args(args).stderr(stderr);
    Proc::spawn(cmd, want_api).unwrap_or_else(|e| panic!("payonce-server: {e} (args: {args:?})"))
}

/// Options for spawning a test server.
#[derive(Clone)]
pub struct Opts {
    pub dev: bool,
    pub lease_ms: u64,
    pub provider_timeout_ms: u64,
    pub in_progress_wait_ms: u64,
    /// Background jobs period; 0 (the test default) keeps attempts exactly where a test
    /// leaves them.
    pub jobs_interval_ms: u64,
    pub key_retention_secs: u64,
    /// Let the embedded provider send webhooks (off by default, so a test's attempt stays
    /// processing until the test settles it).
    pub webhooks: bool,
    /// More flags, appended as given.
    pub extra: Vec<String>,
}

impl Default for Opts {
    fn default() -> Self {
        // Short provider timeout and lease, so "slow" and "timeout" methods and expired
        // leases happen within a test's patience.
        Self {
            dev: true,
            lease_ms: 2_000,
            provider_timeout_ms: 1_000,
            in_progress_wait_ms: 2_000,
            jobs_interval_ms: 0,
            key_retention_secs: 24 * 3600,
            webhooks: false,
            extra: Vec::new(),
        }
    }
}

impl Opts {
    pub fn args(&self, db_url: &str) -> Vec<String> {
        let mut a = vec![
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--database-url".into(),
            db_url.into(),
            "--session-secret".into(),
            SECRET.into(),
            "--lease-ms".into(),
            self.lease_ms.to_string(),
            "--provider-timeout-ms".into(),
            self.provider_timeout_ms.to_string(),
            "--in-progress-wait-ms".into(),
            self.in_progress_wait_ms.to_string(),
            "--jobs-interval-ms".into(),
            self.jobs_interval_ms.to_string(),
            "--key-retention-secs".into(),
            self.key_retention_secs.to_string(),
        ];
        if self.dev {
            a.push("--dev".into());
            // Every dev server of a run with a deliberately wrong pay machine: how the ledger
            // checks of the Stripe tests are shown to fail (docs/testing.md, "Showing a
            // check can fail").
            if let Ok(flaw) = std::env::var("PAYONCE_TEST_FLAW") {
                a.extend(["--flaw".into(), flaw]);
            }
        }
        if !self.dev && !self.extra.iter().any(|a| a == "--migrate") {
            // The test's database is new: a production start checks the schema and would
            // refuse it unmigrated (`schema.rs` tests that default).
            a.extend(["--migrate".into(), "auto".into()]);
        }
        if !self.dev && !self.extra.iter().any(|a| a == "--mailer") {
            // A production start names its mailer; these tests count no receipts (`mail.rs`
            // does, against a real SMTP server).
            a.extend(["--mailer".into(), "none".into()]);
        }
        if !self.webhooks {
            a.push("--no-provider-webhooks".into());
        }
        a.extend(self.extra.iter().cloned());
        a
    }
}

/// A running server (and its provider) on a fresh database.
pub struct TestApp {
    pub api: String,
    pub provider: String,
    pub http: reqwest::Client,
    /// The processes behind it, killed when the app drops.
    pub _procs: Vec<Proc>,
    /// The database, when this app owns it (several apps may share one).
    pub db: Option<TestDb>,
}

impl TestApp {
    /// The server with the embedded provider and default test options.
    pub async fn spawn(backend: Backend) -> Option<TestApp> {
        Self::spawn_with(backend, Opts::default()).await
    }

    pub async fn spawn_with(backend: Backend, opts: Opts) -> Option<TestApp> {
        let db = TestDb::create(backend).await?;
        let mut args = opts.args(&db.url);
        let mut procs = Vec::new();
        if opts.dev {
            args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
        } else {
            // Outside dev mode the server embeds no provider and needs its secrets named.
            let provider = spawn(&mock_provider_args(), false);
            let url = provider.provider.clone().expect("provider url");
            args.extend(["--provider-url".into(), url, "--webhook-secret".into()]);
            args.push(WEBHOOK_SECRET.into());
            procs.push(provider);
        }
        let proc = spawn(&args, true);
        let api = proc.api.clone().expect("api url");
        let provider = match procs.first() {
            Some(p) => p.provider.clone(),
            None => proc.provider.clone(),
        }
        .expect("provider url");
        procs.push(proc);
        Some(TestApp {
            api,
            provider,
            http: client(),
            _procs: procs,
            db: Some(db),
        })
    }

    /// A pool on the app's database, to assert on stored rows.
    pub async fn db_pool(&self) -> AnyPool {
        self.db
            .as_ref()
            .expect("this app owns no database")
            .pool()
            .await
    }
}

impl HttpApi for TestApp {
    fn client(&self) -> &reqwest::Client {
        &self.http
    }
    fn api_url(&self) -> &str {
        &self.api
    }
}

impl Checkout for TestApp {
    fn http_client(&self) -> &reqwest::Client {
        &self.http
    }
    fn provider_url(&self) -> &str {
        &self.provider
    }
    async fn call(&self, req: Req) -> Resp {
        self.send(self.request(req)).await
    }
}

/// The charges and refunds a mock provider's state file holds, read through the provider
/// crate (the file's format is its business). A missing file is an empty ledger.
pub fn provider_state(path: &std::path::Path) -> payonce_mock_provider::StateFileContents {
    payonce_mock_provider::read_state_file(path).expect("the provider's state file reads")
}

/// `payonce-server <args…> sweep --since <since>` (the server's own flags): its report
/// (stdout). Panics when it fails. Waited for off the test's runtime, which may be serving
/// a fault proxy the sweep goes through.
pub async fn sweep(args: &[String], since: i64) -> String {
    let mut cmd = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref());
    cmd.args(args)
        .args(["sweep", "--since", &since.to_string()]);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the sweep's thread")
        .expect("run payonce-server sweep");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sweep failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The SQLite file of a `sqlite://` URL.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    url.strip_prefix("sqlite://").map(PathBuf::from)
}

/// A backup of the database `db` while its server runs (docs/deploy.md, "Restoring"): on
/// SQLite `VACUUM INTO` (a consistent copy), on PostgreSQL `pg_dump -Fc`. The copy's path.
pub async fn backup(db: &TestDb) -> PathBuf {
    let Some(file) = sqlite_file(&db.url) else {
        let to = std::env::temp_dir().join(format!("payonce-{}.dump", uuid::Uuid::new_v4()));
        let out = std::process::Command::new("pg_dump")
            .args(["-Fc", "-f"])
            .arg(&to)
            .arg(&db.url)
            .output()
            .expect("run pg_dump");
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return to;
    };
    let to = file.with_file_name("backup.db");
    let pool = db.pool().await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "VACUUM INTO '{}'",
        to.display()
    )))
    .execute(&pool)
    .await
    .expect("VACUUM INTO");
    pool.close().await;
    to
}

/// Puts `backup` in place of the database `db` (its server stopped): on SQLite the file,
/// and no write-ahead log of the replaced one; on PostgreSQL an emptied schema, then
/// `pg_restore`. Not `pg_restore --clean`: it drops object by object and cannot drop the
/// journal's partitions' inherited keys (migrations/0015_journal_by_day.sql), so a restore
/// into an empty schema is what an operator does too (docs/deploy.md, "Restoring").
pub fn restore(db: &TestDb, backup: &Path) {
    let Some(file) = sqlite_file(&db.url) else {
        let out = std::process::Command::new("psql")
            .args(["-v", "ON_ERROR_STOP=1", "-q", &db.url, "-c"])
            .arg("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = std::process::Command::new("pg_restore")
            .args(["--no-owner", "-d", &db.url])
            .arg(backup)
            .output()
            .expect("run pg_restore");
        assert!(
            out.status.success(),
            "pg_restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    };
    for suffix in ["-wal", "-shm"] {
        let mut side = file.clone().into_os_string();
        side.push(suffix);
        let _ = std::fs::remove_file(side);
    }
    std::fs::copy(backup, &file).expect("restore the backup");
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}
