//! `POST /webhooks/stripe`: the `Stripe-Signature`, the body, the ids; then
//! `src/ops/stripe_webhooks.rs`. A server that does not run with `--provider stripe` has no
//! secret to check the signature with: 400 `WEBHOOK_SIGNATURE_INVALID`, reason `not_configured`
//! (`payonce_protocol::problem::reason`).

use crate::error::{AppError, AppResult};
use crate::http::extract::Id;
use crate::metrics;
use crate::ops::stripe_webhooks;
use crate::provider::{ProviderKind, WebhookRefused};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use payonce_protocol::problem::reason;
use payonce_protocol::ErrorCode;

fn signature_invalid(reason: &str) -> AppError {
    metrics::webhook_event(metrics::WebhookResult::BadSignature);
    AppError::webhook_signature_invalid(reason)
}

/// The handler. Answers 200 for every authentic event it has handled, now or before, or has
/// no use for, so Stripe stops redelivering it.
pub(crate) async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> AppResult<StatusCode> {
    let secret = state
        .config
        .stripe_webhook_secret
        .as_ref()
        .filter(|_| state.config.provider == ProviderKind::Stripe);
    let Some(secret) = secret else {
        // Nothing could verify a Stripe signature here: refused like a wrong one.
        return Err(signature_invalid(reason::NOT_CONFIGURED));
    };
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => AppError::code(ErrorCode::PayloadTooLarge),
        _ => AppError::detail(ErrorCode::InvalidRequest, "the body could not be read"),
    })?;
    // The adapter checks `Stripe-Signature` (payonce_protocol::signature) and reads the event.
    let now = state.clock.now_ms();
    let hint = state
        .provider
        .webhook(secret, &headers, &body, now)
        .map_err(|e| match e {
            WebhookRefused::Signature(reason) => signature_invalid(&reason),
            WebhookRefused::Unreadable(why) => AppError::detail(
                ErrorCode::InvalidRequest,
                format!("not a Stripe event: {why}"),
            ),
        })?;
    // The ids are the only strings of the event that reach the store.
    Id::parse(&hint.event_id, "the event id")?;
    Id::parse(&hint.intent, "the PaymentIntent id")?;
    stripe_webhooks::receive(state, hint).await?;
    Ok(StatusCode::OK)
}
