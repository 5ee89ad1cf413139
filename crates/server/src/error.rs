//! One error type for every handler: [`AppError`] turns into an RFC 9457 problem.
//!
//! Client errors carry a [`Problem`] built from a stable [`ErrorCode`]. Server-side
//! failures (store, bugs) are logged with their detail and answered with an opaque body:
//! the client learns the code, never our internals.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use payonce_protocol::headers::RETRY_AFTER;
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_protocol::{AttemptStatus, ErrorCode, KeyError, Problem};
use payonce_rules::plan::problem_body;

/// What rustls said, when `e` comes from a failed TLS handshake (reported as an
/// `InvalidData` I/O error): a certificate or protocol mismatch that no retry fixes.
pub(crate) fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause = Some(e);
    while let Some(err) = cause {
        // An I/O error's `source` skips the error it wraps, and the redis crate keeps its
        // cause behind an `Arc`: both are looked into.
        cause = match (
            err.downcast_ref::<std::io::Error>(),
            err.downcast_ref::<Shared>(),
        ) {
            (Some(io), _) if io.kind() == std::io::ErrorKind::InvalidData => {
                return Some(io.to_string())
            }
            (Some(io), _) => io.get_ref().map(|inner| inner as _),
            (None, Some(shared)) => Some(&**shared as _),
            (None, None) => err.source(),
        };
    }
    None
}

/// The crate's result alias.
pub(crate) type AppResult<T> = Result<T, AppError>;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A problem the client caused or must react to (4xx, and 402/409 outcomes).
    #[error("{}", .0.code.as_str())]
    Client(Box<Problem>),
    /// The store failed. Logged; the client sees `STORE_UNAVAILABLE` or `INTERNAL`.
    #[error("store error: {0}")]
    Store(#[from] sqlx::Error),
    /// A bug or an impossible state. Logged; the client sees `INTERNAL`.
    #[error("internal error: {0}")]
    Internal(String),
    /// The task a request runs its work in (`what`: pay, cancel, webhook, …) panicked or
    /// was cancelled. Logged; the client sees `INTERNAL`.
    #[error("internal error: {what} task failed: {source}")]
    Task {
        /// Whose task.
        what: &'static str,
        /// Why it ended.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A parsed request body did not serialize back (a bug in its type). Logged; the
    /// client sees `INTERNAL`.
    #[error("internal error: a parsed body does not serialize: {0}")]
    Reserialize(#[source] serde_json::Error),
}

impl AppError {
    /// A client problem with the code's standard title and status.
    pub(crate) fn code(code: ErrorCode) -> Self {
        Self::Client(Box::new(Problem::new(code)))
    }

    /// A client problem with a detail line (never internal error text).
    pub(crate) fn detail(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::Client(Box::new(Problem::new(code).with_detail(detail)))
    }

    /// Builds a client problem with extra members set by `f`. Prefer a named constructor
    /// below: each code whose problem carries more than a detail is built in one place.
    fn with(code: ErrorCode, f: impl FnOnce(&mut Problem)) -> Self {
        let mut p = Problem::new(code);
        f(&mut p);
        Self::Client(Box::new(p))
    }

    /// 409 `IN_PROGRESS`: the key's attempt is still processing; retry the same key after
    /// `retry_after` seconds.
    pub(crate) fn in_progress(retry_after: u64) -> Self {
        Self::with(ErrorCode::InProgress, |p| {
            p.attempt_status = Some(AttemptStatus::Processing);
            p.retry_after = Some(retry_after);
        })
    }

    /// 409 `IN_PROGRESS` for a refund key whose refund is still processing: retry the same
    /// key after `retry_after` seconds (a refund has no attempt status to report).
    pub(crate) fn refund_in_progress(retry_after: u64) -> Self {
        Self::with(ErrorCode::InProgress, |p| {
            p.detail = Some("the refund is in progress; retry with the same key".into());
            p.retry_after = Some(retry_after);
        })
    }

    /// 422 `KEY_REUSED_WITH_DIFFERENT_DETAILS`: the key's attempt (in `status`) was made for
    /// other terms.
    pub(crate) fn key_reused(status: AttemptStatus) -> Self {
        Self::with(ErrorCode::KeyReusedWithDifferentDetails, |p| {
            p.attempt_status = Some(status);
            p.detail = Some(
                "this key was used before with different order, version, amount or payment method"
                    .into(),
            );
        })
    }

    /// 409 `ATTEMPT_CANCELLED`: the key was cancelled.
    pub(crate) fn attempt_cancelled() -> Self {
        Self::with(ErrorCode::AttemptCancelled, |p| {
            p.attempt_status = Some(AttemptStatus::Cancelled)
        })
    }

    /// 409 `OUT_OF_STOCK`: too little stock left of `sku`.
    pub(crate) fn out_of_stock(sku: String) -> Self {
        Self::with(ErrorCode::OutOfStock, |p| p.sku = Some(sku))
    }

    /// 400 `IDEMPOTENCY_KEY_INVALID`: the key header was refused, `detail` says how.
    pub(crate) fn idempotency_key_invalid(e: &KeyError, detail: impl Into<String>) -> Self {
        Self::with(ErrorCode::IdempotencyKeyInvalid, |p| {
            p.detail = Some(detail.into());
            p.reason = Some(e.reason().to_owned());
        })
    }

    /// 400 `WEBHOOK_SIGNATURE_INVALID`, with the machine-readable `reason`.
    pub(crate) fn webhook_signature_invalid(reason: &str) -> Self {
        Self::with(ErrorCode::WebhookSignatureInvalid, |p| {
            p.reason = Some(reason.to_owned())
        })
    }

    /// 429 `RATE_LIMITED`: the rate limit named `label` of this user is spent for
    /// `retry_after` seconds.
    pub(crate) fn rate_limited(label: &str, retry_after: u64) -> Self {
        Self::with(ErrorCode::RateLimited, |p| {
            p.retry_after = Some(retry_after);
            p.detail = Some(format!("rate limit `{label}` of this user reached"));
        })
    }

    /// 503 `PROVIDER_UNAVAILABLE` saying why and when to come back: a webhook event the
    /// provider cannot vouch for now (unreachable, or no conclusive answer) is not applied
    /// and is asked again after `retry_after` seconds. Not `STORE_UNAVAILABLE`: the store
    /// is fine, and an operator reading the code looks at the provider.
    pub(crate) fn unavailable(detail: &str, retry_after: u64) -> Self {
        Self::with(ErrorCode::ProviderUnavailable, |p| {
            p.detail = Some(detail.to_owned());
            p.retry_after = Some(retry_after);
        })
    }

    pub(crate) fn internal(msg: impl Into<String>) -> Self {
        Self::Internal(msg.into())
    }

    /// For `map_err` on the join of `what`'s task.
    pub(crate) fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| Self::Task { what, source }
    }

    /// The problem the client will see (opaque for server-side failures).
    pub(crate) fn to_problem(&self) -> Problem {
        match self {
            Self::Client(p) => (**p).clone(),
            Self::Store(e) if store_unreachable(e) => Problem::new(ErrorCode::StoreUnavailable)
                .with_detail("the store is unreachable; retry with the same key"),
            Self::Store(e) if unstorable_text(e) => Problem::new(ErrorCode::InvalidRequest)
                .with_detail("a string holds a character the store cannot keep"),
            Self::Store(_) | Self::Internal(_) | Self::Task { .. } | Self::Reserialize(_) => {
                Problem::new(ErrorCode::Internal)
            }
        }
    }
}

/// Errors meaning "the database could not be reached", as opposed to a query bug. Those are
/// a 503 so a client keeps its key and retries; anything else is a 500.
fn store_unreachable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    )
}

/// PostgreSQL refusing a string's characters (SQLSTATE 22021 `character_not_in_repertoire`,
/// e.g. U+0000, and 22P05 `untranslatable_character`): the input's fault, never a 500. The
/// extractors refuse NUL first (`src/http/extract.rs`); this is the net for any string they miss.
fn unstorable_text(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("22021" | "22P05")))
}

/// Serializes a problem as `application/problem+json` with its status and, when it has one,
/// a `Retry-After` header mirroring `retryAfter`.
pub(crate) fn problem_response(problem: &Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)];
    let retry_after = problem.retry_after.map(|secs| [(RETRY_AFTER, secs)]);
    (status, content_type, retry_after, problem_body(problem)).into_response()
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match &self {
            Self::Client(p) => tracing::debug!(code = p.code.as_str(), "client problem"),
            other => tracing::error!(error = %other, "request failed"),
        }
        problem_response(&self.to_problem())
    }
}

impl From<Problem> for AppError {
    fn from(p: Problem) -> Self {
        Self::Client(Box::new(p))
    }
}

impl From<Box<Problem>> for AppError {
    fn from(p: Box<Problem>) -> Self {
        Self::Client(p)
    }
}
