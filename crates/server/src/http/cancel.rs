//! `POST /orders/{id}/payment-attempts/cancel` with `{key}` in the body (never the URL, so
//! keys stay out of access logs): the cancel table is `src/ops/cancel.rs`.

use crate::auth::AuthUser;
use crate::error::{AppError, AppResult};
use crate::http::extract::{ApiJson, PathId};
use crate::ops::cancel;
use crate::ops::orders::load_owned;
use crate::state::OpsState;
use axum::extract::State;
use axum::Json;
use payonce_protocol::{CancelRequest, CancelResponse};

/// The handler.
pub(crate) async fn handler(
    State(state): State<OpsState>,
    AuthUser(user): AuthUser,
    PathId(order_id): PathId,
    ApiJson(req): ApiJson<CancelRequest>,
) -> AppResult<Json<CancelResponse>> {
    crate::journal::learn(|k| {
        k.user = Some(user.clone());
        k.order_id = Some(order_id.to_string());
        k.key = Some(req.key.as_str().to_owned());
    });
    let order = load_owned(&state.store, &order_id, &user).await?;
    // In its own task, like pay: a hang-up must not abort a half-written tombstone decision.
    let task = tokio::spawn(crate::journal::carry(async move {
        cancel::cancel(&state, &user, &order, &req.key).await
    }));
    let answer = task.await.map_err(AppError::task("cancel"))??;
    Ok(Json(answer))
}
