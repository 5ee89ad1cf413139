//! The black-box harness: spawns the real `payonce-server` binary on port 0 with a fresh
//! SQLite file or a fresh PostgreSQL database, parses its "listening on" lines, and talks
//! HTTP through [`TestApp`], one helper per endpoint.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Connection};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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
/// test and dropped afterwards.
pub struct TestDb {
    pub url: String,
    pg_name: Option<String>,
    dir: Option<PathBuf>,
}

fn pg_admin_url() -> String {
    std::env::var("PAYONCE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".to_owned())
}

impl TestDb {
    /// A fresh database, or `None` when PostgreSQL is unreachable and skipping is allowed.
    pub async fn create(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir()
                    .join(format!("payonce-test-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&dir).expect("temp dir");
                let url = format!("sqlite://{}", dir.join("payonce.db").display());
                Some(Self {
                    url,
                    pg_name: None,
                    dir: Some(dir),
                })
            }
            Backend::Postgres => {
                let admin = pg_admin_url();
                let connect = tokio::time::timeout(
                    Duration::from_secs(10),
                    sqlx::PgConnection::connect(&admin),
                )
                .await;
                let mut conn = match connect {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return pg_unreachable(&admin, &e.to_string()),
                    Err(_) => return pg_unreachable(&admin, "connect timed out"),
                };
                let name = format!("payonce_test_{}", uuid::Uuid::new_v4().simple());
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("CREATE DATABASE");
                let _ = conn.close().await;
                let base = admin
                    .rsplit_once('/')
                    .map(|(b, _)| b.to_owned())
                    .unwrap_or(admin);
                Some(Self {
                    url: format!("{base}/{name}"),
                    pg_name: Some(name),
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

/// PostgreSQL is down. Under CI that is a failure; locally it is a loud skip only when
/// PAYONCE_ALLOW_SKIP=1, and a failure otherwise (a silent skip would read as a pass).
fn pg_unreachable<T>(url: &str, why: &str) -> Option<T> {
    let how =
        "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("postgres unreachable at {url} ({why}); CI requires it: {how}");
    }
    eprintln!("SKIPPED: postgres unreachable at {url} ({why}); {how}");
    if std::env::var("PAYONCE_ALLOW_SKIP").as_deref() == Ok("1") {
        return None;
    }
    panic!("postgres unreachable at {url} ({why}); set PAYONCE_ALLOW_SKIP=1 to skip PostgreSQL tests: {how}");
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(name) = self.pg_name.take() {
            // Drop runs inside the test's runtime; a runtime of our own on another thread
            // does the async cleanup without blocking it.
            let admin = pg_admin_url();
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async move {
                    let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await
                    .ok()
                })
            })
            .join();
        }
    }
}

/// One spawned process, killed on drop.
pub struct Proc {
    child: Child,
    pub api: Option<String>,
    pub provider: Option<String>,
}

impl Proc {
    /// Spawns `payonce-server args…` and waits for its listening lines.
    pub fn spawn(args: &[String], want_api: bool) -> Proc {
        let stderr = if std::env::var("PAYONCE_TEST_LOG").is_ok() {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        Self::spawn_with_stderr(args, want_api, stderr)
    }

    /// Like [`Proc::spawn`], with the server's log (stderr) written to `log`, for tests that
    /// assert what the server says.
    pub fn spawn_logged(args: &[String], want_api: bool, log: &std::path::Path) -> Proc {
        let file = std::fs::File::create(log).expect("log file");
        Self::spawn_with_stderr(args, want_api, Stdio::from(file))
    }

    fn spawn_with_stderr(args: &[String], want_api: bool, stderr: Stdio) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payonce-server"))
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("PAYONCE_PROVIDER_URL")
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn payonce-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut proc = Proc {
            child,
            api: None,
            provider: None,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while (want_api && proc.api.is_none()) || (!want_api && proc.provider.is_none()) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(_) => {
                    let status = proc.child.try_wait().ok().flatten();
                    panic!("payonce-server did not print its listening line (exit: {status:?}, args: {args:?})");
                }
            };
            if let Some(url) = line.strip_prefix("payonce: api listening on ") {
                proc.api = Some(url.to_owned());
            } else if let Some(url) = line.strip_prefix("payonce: provider listening on ") {
                proc.provider = Some(url.to_owned());
            }
        }
        proc
    }

    /// Waits (up to `within`) for the process to exit by itself, e.g. aborted at a
    /// failpoint. `None`: still running.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the process at once (a crash, as far as the store can tell).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    /// The problem `code`, if the body is a problem.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn is_problem(&self) -> bool {
        self.header("content-type").as_deref() == Some("application/problem+json")
    }
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
            let provider = Proc::spawn(&mock_provider_args(), false);
            let url = provider.provider.clone().expect("provider url");
            args.extend(["--provider-url".into(), url, "--webhook-secret".into()]);
            args.push(WEBHOOK_SECRET.into());
            procs.push(provider);
        }
        let proc = Proc::spawn(&args, true);
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

    // --- one helper per endpoint ---------------------------------------------------------

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let res = req.send().await.expect("request failed");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.bytes().await.expect("body").to_vec();
        Resp {
            status,
            headers,
            body,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api)
    }

    /// `POST /dev/sessions`; returns the bearer token.
    pub async fn session(&self, user: &str) -> String {
        let r = self
            .send(
                self.http
                    .post(self.url("/dev/sessions"))
                    .json(&json!({ "userId": user })),
            )
            .await;
        assert_eq!(r.status, 200, "dev session: {}", r.text());
        r.json()["token"].as_str().expect("token").to_owned()
    }

    pub async fn catalog(&self) -> Value {
        let r = self.send(self.http.get(self.url("/catalog"))).await;
        assert_eq!(r.status, 200);
        r.json()
    }

    pub async fn stock(&self, sku: &str) -> i64 {
        let catalog = self.catalog().await;
        catalog
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["sku"] == sku)
            .expect("sku")["stock"]
            .as_i64()
            .unwrap()
    }

    pub async fn create_order_raw(&self, token: &str, body: Value) -> Resp {
        self.send(
            self.http
                .post(self.url("/orders"))
                .bearer_auth(token)
                .json(&body),
        )
        .await
    }

    /// Creates an order; returns its JSON.
    pub async fn create_order(&self, token: &str, items: &[(&str, u32)]) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|(s, q)| json!({ "sku": s, "quantity": q }))
            .collect();
        let r = self
            .create_order_raw(token, json!({ "items": items }))
            .await;
        assert_eq!(r.status, 201, "create order: {}", r.text());
        r.json()
    }

    pub async fn get_order(&self, token: &str, id: &str) -> Resp {
        self.send(
            self.http
                .get(self.url(&format!("/orders/{id}")))
                .bearer_auth(token),
        )
        .await
    }

    pub async fn patch_cart(&self, token: &str, id: &str, body: Value) -> Resp {
        self.send(
            self.http
                .patch(self.url(&format!("/orders/{id}/cart")))
                .bearer_auth(token)
                .json(&body),
        )
        .await
    }

    pub fn pay_request(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(self.url(&format!("/orders/{id}/pay")))
            .bearer_auth(token)
            .json(&json!({ "orderVersion": version, "paymentMethodId": method }));
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req
    }

    pub async fn pay(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> Resp {
        self.send(self.pay_request(token, id, key, version, method))
            .await
    }

    pub async fn cancel(&self, token: &str, id: &str, key: &str) -> Resp {
        self.send(
            self.http
                .post(self.url(&format!("/orders/{id}/payment-attempts/cancel")))
                .bearer_auth(token)
                .json(&json!({ "key": key })),
        )
        .await
    }

    /// The provider's ledger for one order: the ground truth for "charged once".
    pub async fn ledger(&self, order_id: &str) -> Vec<Value> {
        ledger(&self.http, &self.provider, order_id).await
    }

    /// Waits until the order shows an active payment (an attempt is processing).
    pub async fn wait_until_active(&self, token: &str, id: &str) {
        for _ in 0..200 {
            if self.get_order(token, id).await.json()["paymentInProgress"] == true {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("order {id} never showed an active payment");
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

pub async fn ledger(http: &reqwest::Client, provider: &str, order_id: &str) -> Vec<Value> {
    let r = http
        .get(format!("{provider}/ledger?orderId={order_id}"))
        .send()
        .await
        .expect("ledger");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("ledger json");
    v["charges"].as_array().cloned().unwrap_or_default()
}

/// A fresh idempotency key.
pub fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub fn id_of(order: &Value) -> String {
    order["id"].as_str().expect("order id").to_owned()
}

/// The charges and refunds a mock provider's state file holds, read through the provider
/// crate (the file's format is its business). A missing file is an empty ledger.
pub fn provider_state(path: &std::path::Path) -> payonce_mock_provider::StateFileContents {
    payonce_mock_provider::read_state_file(path).expect("the provider's state file reads")
}
