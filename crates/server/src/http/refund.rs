//! `POST /payments/{id}/refund` with its own `Idempotency-Key` (the flow is
//! `crates/rules/src/refund.rs`, performed by `src/ops/refunds.rs`).

use crate::auth::AuthUser;
use crate::error::AppError;
use crate::http::extract::{IdemKeyHeader, PathId};
use crate::ops::refunds;
use crate::reply::Reply;
use crate::state::OpsState;
use crate::store::refunds as db;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use payonce_protocol::ErrorCode;

/// The handler.
pub(crate) async fn handler(
    State(state): State<OpsState>,
    AuthUser(user): AuthUser,
    PathId(payment_id): PathId,
    IdemKeyHeader(key): IdemKeyHeader,
) -> Response {
    crate::journal::learn(|k| k.user = Some(user.clone()));
    let result = async {
        let (payment, attempt_id) = db::owned_payment(state.store.pool(), &user, &payment_id)
            .await?
            .ok_or_else(|| AppError::code(ErrorCode::PaymentNotFound))?;
        crate::journal::learn(|k| {
            k.order_id = Some(payment.order_id.clone());
            k.detail.insert("amount".into(), payment.amount.into());
            k.detail
                .insert("currency".into(), payment.currency.clone().into());
        });
        let key = key?;
        crate::journal::learn(|k| k.key = Some(key.as_str().to_owned()));
        // In its own task, like pay: a hang-up must not abort a half-stored refund.
        let task = tokio::spawn(crate::journal::carry(async move {
            refunds::refund(&state, &user, &key, payment, attempt_id).await
        }));
        task.await.map_err(AppError::task("refund"))?
    }
    .await;
    result.map_or_else(IntoResponse::into_response, Reply::into_response)
}
