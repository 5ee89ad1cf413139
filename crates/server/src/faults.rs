//! Fault injection, dev mode only.
//!
//! - The `Payonce-Dev-Fault: drop-response` request header (checked by
//!   [`crate::extract::DevFaultHeader`], refused without `--dev`): the request is processed
//!   fully, then the connection is dropped without an answer: the lost response of the seed.
//! - Named failpoints ([`failpoint`]) mark the places where a crash matters most. They do
//!   nothing today; they are the extension point for crash tests (e.g. with the `fail`
//!   crate), so a later change only fills in [`failpoint`].

use axum::body::{Body, Bytes};
use axum::response::Response;

/// After the claim committed, before the provider is called.
pub(crate) const AFTER_CLAIM: &str = "pay.after_claim";
/// After the provider answered, before the outcome is stored.
pub(crate) const AFTER_PROVIDER_CALL: &str = "pay.after_provider_call";
/// Inside the settle transaction, just before its commit.
pub(crate) const BEFORE_SETTLE_COMMIT: &str = "pay.before_settle_commit";

/// A named failpoint. Currently a no-op.
#[inline]
pub(crate) fn failpoint(name: &'static str) {
    tracing::trace!(failpoint = name);
}

/// A response whose body fails on its first poll. hyper then closes the connection before
/// it has flushed anything, so the client sees the connection drop and no answer at all.
pub(crate) fn dropped_response() -> Response {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("dev fault: drop-response"))
    });
    Response::new(Body::from_stream(stream))
}
