//! `POST /orders`, `GET /orders/{id}`, `PATCH /orders/{id}/cart`.

use crate::auth::AuthUser;
use crate::error::AppResult;
use crate::http::extract::{ApiJson, PathId};
use crate::ops::orders::{self, load_owned, view};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use payonce_protocol::{CreateOrderRequest, Order, UpdateCartRequest};

/// `POST /orders`.
pub(crate) async fn create(
    State(state): State<AppState>,
    AuthUser(user): AuthUser,
    ApiJson(req): ApiJson<CreateOrderRequest>,
) -> AppResult<(StatusCode, Json<Order>)> {
    let row = orders::create(&state, &user, &req).await?;
    Ok((StatusCode::CREATED, Json(view(&state, row).await?)))
}

/// `GET /orders/{id}`.
pub(crate) async fn get(
    State(state): State<AppState>,
    AuthUser(user): AuthUser,
    PathId(id): PathId,
) -> AppResult<Json<Order>> {
    let row = load_owned(&state, &id, &user).await?;
    Ok(Json(view(&state, row).await?))
}

/// `PATCH /orders/{id}/cart`.
pub(crate) async fn patch_cart(
    State(state): State<AppState>,
    AuthUser(user): AuthUser,
    PathId(id): PathId,
    ApiJson(req): ApiJson<UpdateCartRequest>,
) -> AppResult<Json<Order>> {
    let row = orders::change_cart(&state, &user, &id, &req).await?;
    Ok(Json(view(&state, row).await?))
}
