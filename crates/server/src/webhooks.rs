//! `POST /webhooks/provider`: the provider's signed, at-least-once event stream.
//!
//! An event is only a hint that an attempt may be settled. The handler checks the
//! `Payonce-Signature` (HMAC with the shared secret, timestamp within a tolerance), skips event
//! ids it has handled, and settles the attempt that owns the charge's provider key from what
//! the provider itself answers for that key ([`pay::settle_from_webhook`]). Duplicates,
//! delays and reordering are harmless: settling is a conditional update on a processing row.

use crate::error::{AppError, AppResult};
use crate::pay;
use crate::store::attempts as db;
use crate::store::orders::get_order;
use crate::{now_ms, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use payonce_protocol::headers::WEBHOOK_SIGNATURE;
use payonce_protocol::provider::{EventType, WebhookEvent};
use payonce_protocol::ErrorCode;
use std::time::Duration;

/// How far a signature's timestamp may be from our clock: bounds how long a captured
/// delivery can be replayed, while allowing the provider's retries with backoff.
const TOLERANCE: Duration = Duration::from_secs(300);

fn signature_invalid(reason: &str) -> AppError {
    AppError::with(ErrorCode::WebhookSignatureInvalid, |p| {
        p.reason = Some(reason.to_owned())
    })
}

/// The handler. Answers 200 for every authentic event, handled now or before, so the
/// provider stops redelivering it.
pub(crate) async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> AppResult<StatusCode> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => AppError::code(ErrorCode::PayloadTooLarge),
        _ => AppError::detail(ErrorCode::InvalidRequest, "the body could not be read"),
    })?;
    let header = headers
        .get(WEBHOOK_SIGNATURE)
        .ok_or_else(|| signature_invalid("missing"))?
        .to_str()
        .map_err(|_| signature_invalid("malformed"))?;
    payonce_mock_provider::verify(
        &state.config.webhook_secret,
        header,
        &body,
        now_ms() / 1000,
        TOLERANCE,
    )
    .map_err(|e| signature_invalid(e.reason()))?;
    let event: WebhookEvent = serde_json::from_slice(&body).map_err(|e| {
        AppError::detail(
            ErrorCode::InvalidRequest,
            format!("not a webhook event: {e}"),
        )
    })?;
    if db::webhook_seen(state.store.pool(), &event.id).await? {
        return Ok(StatusCode::OK);
    }
    // In its own task, like pay: a provider that hangs up must not abort a settle.
    let task = tokio::spawn(async move {
        handle(&state, &event).await?;
        let kind = match event.event_type {
            EventType::ChargeSucceeded => "charge.succeeded",
            EventType::ChargeDeclined => "charge.declined",
            EventType::ChargeRefunded => "charge.refunded",
        };
        db::record_webhook(
            state.store.pool(),
            &event.id,
            kind,
            &event.charge.provider_key,
            now_ms(),
        )
        .await?;
        Ok::<_, AppError>(())
    });
    task.await
        .map_err(|e| AppError::internal(format!("webhook task failed: {e}")))??;
    Ok(StatusCode::OK)
}

async fn handle(state: &AppState, event: &WebhookEvent) -> AppResult<()> {
    if event.event_type == EventType::ChargeRefunded {
        // Refunds are started by us and settled by their own call; nothing to do here yet.
        return Ok(());
    }
    let Some(row) =
        db::find_by_provider_key(state.store.pool(), &event.charge.provider_key).await?
    else {
        tracing::warn!(event = %event.id, "webhook for a provider key we never used");
        return Ok(());
    };
    if row.status.is_final() {
        return Ok(());
    }
    let Some(order) = get_order(state.store.pool(), &row.order_id, &row.user_id).await? else {
        return Err(AppError::internal(format!(
            "attempt {} has no order",
            row.id
        )));
    };
    if pay::settle_from_webhook(state, &row, &order).await? {
        tracing::info!(event = %event.id, attempt = %row.id, "attempt settled by webhook");
    }
    Ok(())
}
