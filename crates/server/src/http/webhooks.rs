//! `POST /webhooks/provider` (the mock) or `POST /webhooks/stripe`: the configured provider's
//! route only ([`route`]; the other answers 404 like any unknown path, so an event signed
//! with any key reaches neither the store nor the provider). The provider's adapter checks
//! the signature and reads the event (`Provider::webhook`), the ids are checked, then
//! `src/ops/webhooks.rs`.

use crate::error::{AppError, AppResult};
use crate::http::extract::Id;
use crate::metrics;
use crate::ops::webhooks;
use crate::provider::{ProviderKind, WebhookError};
use crate::state::OpsState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use payonce_protocol::body::paths;
use payonce_protocol::problem::reason;
use payonce_protocol::ErrorCode;
use payonce_rules::policy::LogGate;
use std::sync::Mutex;

/// The path of `provider`'s events.
pub(crate) fn route(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Mock => paths::WEBHOOKS,
        ProviderKind::Stripe => paths::STRIPE_WEBHOOKS,
    }
}

/// One warning per minute at most about refused deliveries, whoever sends them: a flood of
/// forged events must not grow the log any more than the store.
static REFUSED_LOG: Mutex<LogGate> = Mutex::new(LogGate::new(60_000));

fn signature_invalid(reason: &str, now: i64) -> AppError {
    metrics::webhook_event(metrics::WebhookResult::BadSignature);
    let admitted = REFUSED_LOG.lock().map(|mut gate| gate.admit(now));
    if let Ok(Some(held)) = admitted {
        tracing::warn!(
            reason,
            held_back = held,
            "webhook delivery refused: its signature does not verify (nothing stored; \
             payonce_webhook_events_total{{result=\"bad_signature\"}} counts every one)"
        );
    }
    AppError::webhook_signature_invalid(reason)
}

/// The handler. Answers 200 for every authentic event handled now or before, or of a type
/// payonce does not act on, so the provider stops redelivering it.
pub(crate) async fn handler(
    State(state): State<OpsState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> AppResult<StatusCode> {
    let config = &state.config;
    let secret = match config.provider {
        ProviderKind::Mock => Some(&config.webhook_secret),
        ProviderKind::Stripe => config.stripe_webhook_secret.as_ref(),
    };
    let Some(secret) = secret else {
        // Nothing could verify a signature here: refused like a wrong one.
        return Err(signature_invalid(
            reason::NOT_CONFIGURED,
            state.clock.now_ms(),
        ));
    };
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => AppError::code(ErrorCode::PayloadTooLarge),
        _ => AppError::detail(ErrorCode::InvalidRequest, "the body could not be read"),
    })?;
    let now = state.clock.now_ms();
    let hint = state
        .provider
        .webhook(secret, &headers, &body, now)
        .map_err(|e| match e {
            WebhookError::Signature(reason) => signature_invalid(&reason, now),
            WebhookError::Unreadable(detail) => AppError::detail(ErrorCode::InvalidRequest, detail),
        })?;
    // The ids are the only strings of the event that reach the store.
    Id::parse(&hint.event_id, "the event id")?;
    Id::parse(hint.subject.id(), hint.subject.label())?;
    webhooks::receive(state, hint).await?;
    Ok(StatusCode::OK)
}
