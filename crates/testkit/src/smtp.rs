//! A real SMTP server per test: `tools/smtp-sink.py` on aiosmtpd (PyPI), which
//! `scripts/bootstrap.sh` installs into `.venv-smtp/` at the repository root (or
//! `PAYONCE_TEST_SMTP_PYTHON` names a Python that has aiosmtpd). Every message it accepts
//! is one file in its directory: the tests count receipts there, by what a relay received.
//! Its control file makes it answer 451 to the next N messages, or 550 to all.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What to do when it is missing, for the failure message.
pub const HOW_TO_INSTALL: &str = "install it with: scripts/bootstrap.sh (aiosmtpd into .venv-smtp)";

/// A running SMTP sink, killed on drop (its directory removed).
pub struct SmtpSink {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    auth: Option<(String, String)>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python that runs the sink: `PAYONCE_TEST_SMTP_PYTHON`, else the repository's venv.
fn python() -> PathBuf {
    std::env::var("PAYONCE_TEST_SMTP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join(".venv-smtp/bin/python"))
}

impl SmtpSink {
    /// Starts one on a free port. `None` when it cannot run and skipping is allowed
    /// ([`crate::unavailable`]; under `CI=true` a failure).
    pub async fn start() -> Option<Self> {
        Self::start_with(None).await
    }

    /// As [`SmtpSink::start`], requiring AUTH with `user` and `password`.
    pub async fn start_with(auth: Option<(&str, &str)>) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("payonce-smtp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("messages")).expect("sink directory");
        let mut sink = Self {
            child: None,
            port: crate::tls::free_port(),
            dir,
            auth: auth.map(|(u, p)| (u.to_owned(), p.to_owned())),
        };
        sink.up().await?;
        Some(sink)
    }

    /// Starts the process on its port and directory; waits until it accepts connections.
    async fn up(&mut self) -> Option<()> {
        let py = python();
        if !py.exists() {
            let what = format!("no aiosmtpd Python at {}", py.display());
            return crate::unavailable(&what, HOW_TO_INSTALL, "SMTP tests");
        }
        let mut cmd = Command::new(&py);
        cmd.arg(root().join("tools/smtp-sink.py"))
            .args(["--port", &self.port.to_string()])
            .arg("--dir")
            .arg(self.dir.join("messages"))
            .arg("--control")
            .arg(self.dir.join("control"));
        if let Some((user, password)) = &self.auth {
            cmd.args(["--user", user, "--password", password]);
        }
        let log = std::fs::File::create(self.dir.join("sink.log")).expect("sink log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn();
        match child {
            Ok(c) => self.child = Some(c),
            Err(e) => {
                let what = format!("cannot run {} ({e})", py.display());
                return crate::unavailable(&what, HOW_TO_INSTALL, "SMTP tests");
            }
        }
        let addr = format!("127.0.0.1:{}", self.port);
        let up = crate::eventually(Duration::from_secs(30), Duration::from_millis(50), || {
            let addr = addr.clone();
            async move { tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ()) }
        })
        .await;
        assert!(
            up.is_some(),
            "the SMTP sink did not listen on {addr}: {}",
            self.log()
        );
        Some(())
    }

    /// The server's `--smtp-url` (plain SMTP on loopback).
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Every message it accepted, oldest first, as sent (headers and body).
    pub fn messages(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("messages")) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "eml"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).expect("message"))
            .collect()
    }

    /// How it answers the next messages: `"451 N"` (the next N get 451), `"550"` (all get
    /// 550), `"hold"` (the answer waits until the next call; its log says "holding"), `""`
    /// (all get 250).
    pub fn answer(&self, control: &str) {
        std::fs::write(self.dir.join("control"), control).expect("control file");
    }

    /// Stops it (a relay that is down: connections are refused).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, keeping what it received.
    pub async fn restart(&mut self) {
        self.stop();
        self.up().await.expect("the sink ran before");
    }

    /// Its log (what it answered), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sink.log")).unwrap_or_default()
    }

    /// Its directory (messages, control file, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
