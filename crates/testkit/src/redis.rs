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
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
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
}

impl PrivateRedis {
    /// Starts one on `port` (a free one when `None`); `PAYONCE_TEST_REDIS_SERVER` names the
    /// binary. `None` when it cannot run and skipping is allowed.
    pub async fn start(port: Option<u16>) -> Option<Self> {
        let port = port.unwrap_or_else(|| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
            l.local_addr().expect("addr").port()
        });
        let bin =
            std::env::var("PAYONCE_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => return missing(&format!("cannot run {bin} ({e})")),
        };
        let me = Self { child, port };
        let url = me.url();
        let up = crate::eventually(
            Duration::from_secs(5),
            Duration::from_millis(25),
            || async {
                let mut c = connect(&url, Duration::from_secs(5)).await.ok()?;
                redis::cmd("PING").query_async::<String>(&mut c).await.ok()
            },
        )
        .await;
        assert!(
            up.is_some(),
            "private redis-server on port {port} never answered PING"
        );
        Some(me)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
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
