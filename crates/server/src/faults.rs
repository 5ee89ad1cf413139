//! The named steps a dev build can abort at (`--failpoint NAME`) and the hooks that abort
//! there ([`failpoint`], the dev fault header's). They live on the lowest floor
//! (`tests/blackbox/layout.rs`) so that the operations and the edge call them without
//! reaching up to dev mode; in a build without the `dev` feature every hook is a no-op.

use std::fmt;

/// A step the process can be made to abort at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failpoint {
    /// After the claim committed (attempt + outbox row), before the provider is called.
    AfterClaim,
    /// After the provider answered (it may have charged), before the outcome is stored.
    AfterCharge,
    /// Two phases: the provider created the payment object and named it; its id is not saved.
    AfterCreate,
    /// Two phases: the object's id is saved on the attempt; it is not confirmed yet.
    AfterSaveRef,
    /// Two phases: the provider answered the confirm (it may have charged), before the
    /// outcome is stored.
    AfterConfirm,
    /// Inside the settle transaction, just before its commit (the commit never happens).
    BeforeSettleCommit,
    /// After the outcome is stored, before the client is answered.
    AfterSave,
    /// Inside the webhook handler: the event is recorded as received, not yet applied.
    Webhook,
    /// Inside the outbox worker: it took over an abandoned attempt, before it asks the
    /// provider.
    Outbox,
    /// Inside the email job: the mailer answered (with SMTP, the relay took the message),
    /// the receipt not settled yet.
    Email,
}

/// Every failpoint and its name on the command line, in the order `--help` and the
/// unknown-name error list them: the one spelling of each name.
pub(crate) const NAMES: [(Failpoint, &str); 10] = [
    (Failpoint::AfterClaim, "after-claim"),
    (Failpoint::AfterCharge, "after-charge"),
    (Failpoint::AfterCreate, "after-create"),
    (Failpoint::AfterSaveRef, "after-save-ref"),
    (Failpoint::AfterConfirm, "after-confirm"),
    (Failpoint::BeforeSettleCommit, "before-settle-commit"),
    (Failpoint::AfterSave, "after-save"),
    (Failpoint::Webhook, "webhook"),
    (Failpoint::Outbox, "outbox"),
    (Failpoint::Email, "email"),
];

impl Failpoint {
    /// The failpoint called `name`; `None` for a name nobody checks.
    #[cfg(feature = "dev")]
    pub(crate) fn parse(name: &str) -> Option<Self> {
        NAMES.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }

    /// Its name on the command line.
    pub(crate) fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("", |(_, n)| n)
    }
}

impl fmt::Display for Failpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The hooks of a dev build: fault injection, only under `--dev`.
///
/// - The `Payonce-Dev-Fault` request header (checked by [`crate::http::extract::DevFaultHeader`],
///   refused without `--dev`): `drop-response` processes the request fully, then drops the
///   connection without an answer (the lost response a client must survive); `crash-after-charge`
///   aborts the whole process right after the provider charged, before the outcome is saved.
/// - Named failpoints ([`failpoint`]): `--failpoint NAME` (repeatable) or
///   `PAYONCE_FAILPOINTS=a,b` make the process `abort()` when it reaches that step: no
///   destructors, no flush, no graceful shutdown, as close to a power cut as a test can get
///   while the database survives. The server refuses to start with failpoints unless
///   `--dev` (see `src/dev/mod.rs`). A plain flag instead of the `fail` crate: one more
///   dependency for a set-once list of names was not worth it, and the names are the
///   contract the crash tests rely on.
#[cfg(feature = "dev")]
mod hooks {
    use super::Failpoint;
    use axum::body::{Body, Bytes};
    use axum::response::Response;
    use payonce_protocol::body::DevFault;
    use std::future::Future;
    use std::sync::OnceLock;

    /// The armed failpoints, set once at start.
    static ARMED: OnceLock<Vec<Failpoint>> = OnceLock::new();

    /// Arms `points` for the life of the process (the first call wins).
    pub(crate) fn arm(points: &[Failpoint]) {
        if !points.is_empty() {
            let names: Vec<_> = points.iter().map(|p| p.name()).collect();
            tracing::warn!(failpoints = ?names, "dev failpoints armed: the process aborts at these steps");
        }
        let _ = ARMED.set(points.to_vec());
    }

    /// A named failpoint: aborts the process if `point` is armed.
    #[inline]
    pub(crate) fn failpoint(point: Failpoint) {
        if ARMED.get().is_some_and(|a| a.contains(&point)) {
            crash(point.name());
        }
    }

    /// Aborts the process at once, like a crash.
    fn crash(why: &str) -> ! {
        eprintln!("payonce-server: dev fault: aborting at {why}");
        std::process::abort()
    }

    /// For `Payonce-Dev-Fault: drop-response`: a response whose body fails on its first poll.
    /// hyper then closes the connection before it has flushed anything, so the client sees the
    /// connection drop and no answer at all.
    pub(crate) fn dropped_response(fault: Option<DevFault>) -> Option<Response> {
        if fault != Some(DevFault::DropResponse) {
            return None;
        }
        let stream = futures_util::stream::once(async {
            Err::<Bytes, std::io::Error>(std::io::Error::other("dev fault: drop-response"))
        });
        Some(Response::new(Body::from_stream(stream)))
    }

    /// Runs a pay task under the request's dev fault (`crash-after-charge` arms [`after_charge`]).
    pub(crate) async fn with_fault<F: Future>(fault: Option<DevFault>, task: F) -> F::Output {
        CRASH_AFTER_CHARGE
            .scope(fault == Some(DevFault::CrashAfterCharge), task)
            .await
    }

    /// Right after the provider answered a charge: the `crash-after-charge` header.
    pub(crate) fn after_charge() {
        if CRASH_AFTER_CHARGE.try_with(|c| *c).unwrap_or(false) {
            crash("crash-after-charge (dev fault header)");
        }
    }

    tokio::task_local! {
        /// Set for the pay task of a request carrying `Payonce-Dev-Fault: crash-after-charge`
        /// (dev mode only): the process aborts right after the provider call returns.
        static CRASH_AFTER_CHARGE: bool;
    }
}

/// Without the `dev` feature every hook is a no-op the compiler removes.
#[cfg(not(feature = "dev"))]
mod hooks {
    use super::Failpoint;
    use axum::response::Response;
    use payonce_protocol::body::DevFault;
    use std::future::Future;

    pub(crate) fn arm(_: &[Failpoint]) {}

    #[inline(always)]
    pub(crate) fn failpoint(_: Failpoint) {}

    #[inline(always)]
    pub(crate) fn after_charge() {}

    pub(crate) fn dropped_response(_: Option<DevFault>) -> Option<Response> {
        None
    }

    pub(crate) fn with_fault<F: Future>(_: Option<DevFault>, task: F) -> F {
        task
    }
}

pub(crate) use hooks::{after_charge, arm, dropped_response, failpoint, with_fault};

#[cfg(test)]
mod tests {
    use super::*;

    // Names parse only where failpoints can be armed (a dev build).
    #[cfg(feature = "dev")]
    #[test]
    fn every_failpoint_has_one_name_that_parses_back() {
        for (point, name) in NAMES {
            assert_eq!(Failpoint::parse(name), Some(point));
            assert_eq!(point.to_string(), name);
        }
        let mut names: Vec<_> = NAMES.iter().map(|(_, n)| n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert_eq!(Failpoint::parse("after-lunch"), None);
    }

    /// The server README's failpoint list is this one: an operator reading it can arm each.
    #[test]
    fn the_readme_names_every_failpoint() {
        let readme = include_str!("../README.md");
        let list = &readme[readme
            .find("- **Failpoints**")
            .expect("the failpoints item")..];
        let list = &list[..list.find("\n- **").unwrap_or(list.len())];
        let missing: Vec<&str> = NAMES
            .iter()
            .map(|(_, n)| *n)
            .filter(|n| !list.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "failpoints missing from the README: {missing:?}"
        );
    }
}
