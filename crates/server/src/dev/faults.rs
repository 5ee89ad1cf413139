//! Fault injection (a dev build, and only under `--dev`).
//!
//! - The `Payonce-Dev-Fault` request header (checked by [`crate::http::extract::DevFaultHeader`],
//!   refused without `--dev`): `drop-response` processes the request fully, then drops the
//!   connection without an answer (the lost response a client must survive); `crash-after-charge`
//!   aborts the whole process right after the provider charged, before the outcome is saved.
//! - Named failpoints ([`failpoint`]): `--failpoint NAME` (repeatable) or
//!   `PAYONCE_FAILPOINTS=a,b` make the process `abort()` when it reaches that step: no
//!   destructors, no flush, no graceful shutdown, as close to a power cut as a test can get
//!   while the database survives. The server refuses to start with failpoints unless
//!   `--dev` (see `src/dev/mod.rs`). A plain flag instead of the `fail` crate: one more
//!   dependency for a set-once list of names was not worth it, and the names are the
//!   contract the crash tests rely on.

use crate::faults::Failpoint;
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
