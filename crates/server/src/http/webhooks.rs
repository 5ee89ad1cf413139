//! `POST /webhooks/provider`: the signature, the body, the ids; then `src/ops/webhooks.rs`.
//! Only the mock provider's events come here: a server run with another `--provider` refuses
//! every event before reading it (400 `WEBHOOK_SIGNATURE_INVALID`, reason `not_configured`),
//! as `/webhooks/stripe` does on a mock deployment. Its mock secret is unset there, and an
//! event signed with any key must not reach the store or the provider.

use crate::error::{AppError, AppResult};
use crate::http::extract::Id;
use crate::metrics;
use crate::ops::webhooks;
use crate::provider::ProviderKind;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use payonce_protocol::headers::WEBHOOK_SIGNATURE;
use payonce_protocol::problem::reason;
use payonce_protocol::provider::WebhookEvent;
use payonce_protocol::ErrorCode;
use std::time::Duration;

/// How far a signature's timestamp may be from our clock: bounds how long a captured
/// delivery can be replayed, while allowing the provider's retries with backoff.
const TOLERANCE: Duration = Duration::from_secs(300);

/// The handler. Answers 200 for every authentic event, handled now or before, so the
/// provider stops redelivering it.
pub(crate) async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> AppResult<StatusCode> {
    if state.config.provider != ProviderKind::Mock {
        metrics::webhook_event(metrics::WebhookResult::BadSignature);
        return Err(AppError::webhook_signature_invalid("not_configured"));
    }
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => AppError::code(ErrorCode::PayloadTooLarge),
        _ => AppError::detail(ErrorCode::InvalidRequest, "the body could not be read"),
    })?;
    let header = headers
        .get(WEBHOOK_SIGNATURE)
        .ok_or_else(|| AppError::webhook_signature_invalid(reason::MISSING))?
        .to_str()
        .map_err(|_| AppError::webhook_signature_invalid("malformed"))?;
    payonce_protocol::signature::verify(
        &state.config.webhook_secret,
        header,
        &body,
        state.clock.now_ms() / 1000,
        TOLERANCE,
    )
    .map_err(|e| {
        metrics::webhook_event(metrics::WebhookResult::BadSignature);
        AppError::webhook_signature_invalid(e.reason())
    })?;
    let event: WebhookEvent = serde_json::from_slice(&body).map_err(|e| {
        AppError::detail(
            ErrorCode::InvalidRequest,
            format!("not a webhook event: {e}"),
        )
    })?;
    // The ids are the only strings of the event that reach the store.
    Id::parse(&event.id, "the event id")?;
    Id::parse(&event.charge.provider_key, "the provider key")?;
    webhooks::receive(state, event).await?;
    Ok(StatusCode::OK)
}
