//! Fault injection, dev mode only.
//!
//! - The `Payonce-Dev-Fault` request header (checked by [`crate::http::extract::DevFaultHeader`],
//!   refused without `--dev`): `drop-response` processes the request fully, then drops the
//!   connection without an answer (the lost response of the seed); `crash-after-charge`
//!   aborts the whole process right after the provider charged, before the outcome is saved.
//! - Named failpoints ([`failpoint`]): `--failpoint NAME` (repeatable) or
//!   `PAYONCE_FAILPOINTS=a,b` make the process `abort()` when it reaches that step: no
//!   destructors, no flush, no graceful shutdown, as close to a power cut as a test can get
//!   while the database survives. The server refuses to start with failpoints unless
//!   `--dev` (see [`crate::config`]). A plain flag instead of the `fail` crate: one more
//!   dependency for a set-once list of names was not worth it, and the names are the
//!   contract the crash tests rely on.

use axum::body::{Body, Bytes};
use axum::response::Response;
use std::sync::OnceLock;

/// After the claim committed (attempt + outbox row), before the provider is called.
pub(crate) const AFTER_CLAIM: &str = "after-claim";
/// After the provider answered (it may have charged), before the outcome is stored.
pub(crate) const AFTER_CHARGE: &str = "after-charge";
/// Inside the settle transaction, just before its commit (the commit never happens).
pub(crate) const BEFORE_SETTLE_COMMIT: &str = "before-settle-commit";
/// After the outcome is stored, before the client is answered.
pub(crate) const AFTER_SAVE: &str = "after-save";
/// Inside the webhook handler: the event is recorded as received, not yet applied.
pub(crate) const WEBHOOK: &str = "webhook";
/// Inside the outbox worker: it took over an abandoned attempt, before it asks the provider.
pub(crate) const OUTBOX: &str = "outbox";
/// Inside the email job: the mail is sent and flagged, the job not yet acknowledged.
pub(crate) const EMAIL: &str = "email";

/// Every failpoint name, for validating the flag.
pub const ALL: &[&str] = &[
    AFTER_CLAIM,
    AFTER_CHARGE,
    BEFORE_SETTLE_COMMIT,
    AFTER_SAVE,
    WEBHOOK,
    OUTBOX,
    EMAIL,
];

/// The armed failpoints, set once at start.
static ARMED: OnceLock<Vec<String>> = OnceLock::new();

/// Arms `names` for the life of the process (the first call wins).
pub(crate) fn arm(names: &[String]) {
    if !names.is_empty() {
        tracing::warn!(failpoints = ?names, "dev failpoints armed: the process aborts at these steps");
    }
    let _ = ARMED.set(names.to_vec());
}

/// A named failpoint: aborts the process if `name` is armed.
#[inline]
pub(crate) fn failpoint(name: &'static str) {
    if ARMED.get().is_some_and(|a| a.iter().any(|n| n == name)) {
        crash(name);
    }
}

/// Aborts the process at once, like a crash.
pub(crate) fn crash(why: &str) -> ! {
    eprintln!("payonce-server: dev fault: aborting at {why}");
    std::process::abort()
}

/// A response whose body fails on its first poll. hyper then closes the connection before
/// it has flushed anything, so the client sees the connection drop and no answer at all.
pub(crate) fn dropped_response() -> Response {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("dev fault: drop-response"))
    });
    Response::new(Body::from_stream(stream))
}

tokio::task_local! {
    /// Set for the pay task of a request carrying `Payonce-Dev-Fault: crash-after-charge`
    /// (dev mode only): the process aborts right after the provider call returns.
    pub(crate) static CRASH_AFTER_CHARGE: bool;
}

/// True inside a pay task that asked for `crash-after-charge`.
pub(crate) fn crash_after_charge_requested() -> bool {
    CRASH_AFTER_CHARGE.try_with(|c| *c).unwrap_or(false)
}
