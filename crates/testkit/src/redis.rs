//! Redis namespaces: a database number of the machine's Redis per test (emptied first, so a
//! `FLUSHDB` never touches another test), or a private `redis-server` a test may kill.

use redis::aio::MultiplexedConnection;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How to start Redis, for the failure message.
pub const HOW_TO_START: &str =
    "start it with: redis-server --daemonize yes (apt-get install redis-server)";

/// The machine's Redis for the server tests: `PAYONCE_TEST_REDIS_URL`, else the default port.
pub fn test_base_url() -> String {
    std::env::var("PAYONCE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A connection to `url`, given up after `within`.
pub async fn connect(url: &str, within: Duration) -> Result<MultiplexedConnection, String> {
    connect_with(url, None, within).await
}

/// Like [`connect`], trusting only `ca` (PEM) for a `rediss://` URL when it is given.
async fn connect_with(
    url: &str,
    ca: Option<Vec<u8>>,
    within: Duration,
) -> Result<MultiplexedConnection, String> {
    let client = match ca {
        Some(root_cert) => {
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            };
            redis::Client::build_with_tls(url, certs)
        }
        None => redis::Client::open(url),
    }
    .map_err(|e| e.to_string())?;
    tokio::time::timeout(within, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())
}

/// Empties the database `url` names; returns the connection.
pub async fn flushed(url: &str, within: Duration) -> Result<MultiplexedConnection, String> {
    let mut conn = connect(url, within).await?;
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| format!("FLUSHDB: {e}"))?;
    Ok(conn)
}

/// A test's own database number `db` on the machine's Redis, emptied, and a connection to
/// look inside it. `None` when Redis is unreachable and skipping is allowed.
pub async fn shared_db(db: u8) -> Option<(String, MultiplexedConnection)> {
    let url = format!("{}/{db}", test_base_url());
    match flushed(&url, Duration::from_secs(5)).await {
        Ok(c) => Some((url, c)),
        Err(e) if e.starts_with("FLUSHDB") => panic!("{e}"),
        Err(e) => missing(&format!("redis unreachable at {url} ({e})")),
    }
}

fn missing<T>(what: &str) -> Option<T> {
    crate::unavailable(what, HOW_TO_START, "Redis tests")
}

/// A redis-server of the test's own, on a free port, without persistence: killing it is
/// losing Redis, without touching the machine's.
pub struct PrivateRedis {
    child: Child,
    pub port: u16,
    /// The CA (PEM) of a TLS-only server.
    ca: Option<Vec<u8>>,
}

impl PrivateRedis {
    /// Starts one on `port` (a free one when `None`); `PAYONCE_TEST_REDIS_SERVER` names the
    /// binary. `None` when it cannot run and skipping is allowed.
    pub async fn start(port: Option<u16>) -> Option<Self> {
        let port = port.unwrap_or_else(crate::tls::free_port);
        let args = ["--port".to_owned(), port.to_string()];
        let me = Self::spawn(&args, port, None)?;
        me.wait_up(format!("redis://127.0.0.1:{port}/0"), None)
            .await;
        Some(me)
    }

    /// Starts one that listens on a TLS port only (`--port 0`), with the `certs` server
    /// certificate; [`PrivateRedis::url`] is then `rediss://`.
    pub async fn start_tls(certs: &crate::tls::Certs) -> Option<Self> {
        let port = crate::tls::free_port();
        let path = |p: &std::path::Path| p.display().to_string();
        let args = [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&certs.cert),
            "--tls-key-file".to_owned(),
            path(&certs.key),
            "--tls-ca-cert-file".to_owned(),
            path(&certs.ca),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let me = Self::spawn(&args, port, Some(std::fs::read(&certs.ca).expect("CA")))?;
        me.wait_up(me.url(), me.ca.clone()).await;
        Some(me)
    }

    fn spawn(args: &[String], port: u16, ca: Option<Vec<u8>>) -> Option<Self> {
        let bin =
            std::env::var("PAYONCE_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(args)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => Some(Self { child, port, ca }),
            Err(e) => missing(&format!("cannot run {bin} ({e})")),
        }
    }

    async fn wait_up(&self, url: String, ca: Option<Vec<u8>>) {
        let up = crate::eventually(
            Duration::from_secs(5),
            Duration::from_millis(25),
            || async {
                let mut c = connect_with(&url, ca.clone(), Duration::from_secs(5))
                    .await
                    .ok()?;
                redis::cmd("PING").query_async::<String>(&mut c).await.ok()
            },
        )
        .await;
        assert!(
            up.is_some(),
            "private redis-server on port {} never answered PING (TLS: {})",
            self.port,
            self.ca.is_some()
        );
    }

    /// A connection to this server (trusting its CA when it speaks TLS).
    pub async fn connection(&self) -> MultiplexedConnection {
        connect_with(&self.url(), self.ca.clone(), Duration::from_secs(5))
            .await
            .expect("connect to the private redis-server")
    }

    pub fn url(&self) -> String {
        let scheme = if self.ca.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
