//! `payonce-server` processes: spawned on port 0, their URLs read from the "listening on"
//! lines they print, killed when dropped (or stopped as a rollout stops them, when asked).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a process may take to print its listening lines (a cold start migrates).
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

/// `bin` with the variables that would override flags removed: flags say everything, an
/// inherited `DATABASE_URL` must not change what is tested or measured. The provider is
/// the mock (`PAYONCE_PROVIDER=mock`, which a start outside `--dev` needs) unless the
/// arguments say `--provider stripe`.
pub fn command(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("PAYONCE_PROVIDER", "mock")
        .env_remove("PAYONCE_STRIPE_SECRET_KEY")
        .env_remove("PAYONCE_STRIPE_SECRET_KEY_FILE")
        .env_remove("PAYONCE_STRIPE_WEBHOOK_SECRET")
        .env_remove("PAYONCE_STRIPE_WEBHOOK_SECRET_FILE")
        .env_remove("DATABASE_URL")
        .env_remove("PAYONCE_PROVIDER_URL")
        .env_remove("REDIS_URL")
        .env_remove("PGSSLMODE")
        .env_remove("PAYONCE_ALLOW_PLAINTEXT")
        .env_remove("PAYONCE_PROVIDER_API_KEY")
        .env_remove("PAYONCE_PROVIDER_API_KEY_FILE")
        .env_remove("PAYONCE_SESSION_SECRET")
        .env_remove("PAYONCE_MAILER")
        .env_remove("PAYONCE_SMTP_URL")
        .env_remove("PAYONCE_SMTP_PASSWORD")
        .env_remove("PAYONCE_SMTP_PASSWORD_FILE")
        .stdin(Stdio::null());
    cmd
}

/// Why a process did not come up.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start it: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("it did not print its listening line (exit {0:?})")]
    Silent(Option<ExitStatus>),
}

/// One spawned process, killed on drop.
pub struct Proc {
    child: Child,
    pub api: Option<String>,
    pub provider: Option<String>,
    /// Dropped with a graceful stop first ([`Proc::stop_gracefully_on_drop`]).
    graceful: bool,
}

/// How long a graceful stop on drop may take before the process is killed: the server's own
/// bound is its request timeout (docs/operating.md), far below this.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl Proc {
    /// Spawns `cmd` (its stderr already set by the caller) with stdout captured, and waits
    /// for its API listening line (`want_api`) or else its provider's.
    pub fn spawn(mut cmd: Command, want_api: bool) -> Result<Proc, SpawnError> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .map_err(SpawnError::Spawn)?;
        let stdout = child.stdout.take().expect("stdout is piped");
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
            graceful: false,
            api: None,
            provider: None,
        };
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        while (want_api && proc.api.is_none()) || (!want_api && proc.provider.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                return Err(SpawnError::Silent(proc.child.try_wait().ok().flatten()));
            };
            if let Some(url) = line.strip_prefix("payonce: api listening on ") {
                proc.api = Some(url.to_owned());
            } else if let Some(url) = line.strip_prefix("payonce: provider listening on ") {
                proc.provider = Some(url.to_owned());
            }
        }
        Ok(proc)
    }

    /// The process id (to send it a signal).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The API URL ("" for a process without one).
    pub fn api(&self) -> String {
        self.api.clone().unwrap_or_default()
    }

    /// The provider URL ("" for a process without one).
    pub fn provider(&self) -> String {
        self.provider.clone().unwrap_or_default()
    }

    /// Waits (up to `within`) for the process to exit by itself, e.g. aborted at a
    /// failpoint. `None`: still running.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        crate::eventually(within, Duration::from_millis(20), || {
            std::future::ready(self.child.try_wait().ok().flatten())
        })
        .await
    }

    /// Kills the process at once (a crash, as far as the store can tell).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends signal `name` (`"TERM"`, `"HUP"`) to the process (std's `Child` only kills).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{name} {pid}");
    }

    /// Sends SIGTERM, as a rollout does (the server drains, lets its job round finish and
    /// commits the journal entries it queued), and waits up to `within` for the exit.
    /// `None`: still running.
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        self.signal("TERM");
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// On drop, stop it as a rollout does ([`Proc::terminate`]) rather than kill it: for a
    /// test that reads, after its servers are gone, what they committed on their way out
    /// (every journal entry of an answered request).
    pub fn stop_gracefully_on_drop(mut self) -> Self {
        self.graceful = true;
        self
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let running = matches!(self.child.try_wait(), Ok(None));
        if self.graceful && running && self.terminate(STOP_TIMEOUT).is_none() {
            eprintln!(
                "process {} did not stop on SIGTERM; killed",
                self.child.id()
            );
        }
        self.kill();
    }
}
