//! `POST /orders`, `GET /orders/{id}`, `PATCH /orders/{id}/cart`.

use crate::auth::AuthUser;
use crate::error::AppResult;
use crate::http::extract::{ApiJson, PathId};
use crate::ops::orders::{self, load_owned, view, Orders};
use crate::store::Store;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use payonce_protocol::{CreateOrderRequest, Order, UpdateCartRequest};

/// `POST /orders`.
pub(crate) async fn create(
    State(state): State<Orders>,
    AuthUser(user): AuthUser,
    ApiJson(req): ApiJson<CreateOrderRequest>,
) -> AppResult<(StatusCode, Json<Order>)> {
    let row = orders::create(&state, &user, &req).await?;
    Ok((StatusCode::CREATED, Json(view(&state.store, row).await?)))
}

/// `GET /orders/{id}`.
pub(crate) async fn get(
    State(store): State<Store>,
    AuthUser(user): AuthUser,
    PathId(id): PathId,
) -> AppResult<Json<Order>> {
    let row = load_owned(&store, &id, &user).await?;
    Ok(Json(view(&store, row).await?))
}

/// `PATCH /orders/{id}/cart`.
pub(crate) async fn patch_cart(
    State(state): State<Orders>,
    AuthUser(user): AuthUser,
    PathId(id): PathId,
    ApiJson(req): ApiJson<UpdateCartRequest>,
) -> AppResult<Json<Order>> {
    let row = orders::change_cart(&state, &user, &id, &req).await?;
    Ok(Json(view(&state.store, row).await?))
}
