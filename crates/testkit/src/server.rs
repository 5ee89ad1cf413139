//! `payonce-server` processes: spawned on port 0, their URLs read from the "listening on"
//! lines they print, killed when dropped.

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
}

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
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
