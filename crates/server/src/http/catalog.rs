//! `GET /catalog`.

use crate::error::AppResult;
use crate::state::AppState;
use crate::store::catalog;
use axum::extract::State;
use axum::Json;
use payonce_protocol::CatalogItem;

/// `GET /catalog`.
pub(crate) async fn list(State(state): State<AppState>) -> AppResult<Json<Vec<CatalogItem>>> {
    crate::catalog::ensure_installed(&state.store, state.config.catalog.as_ref()).await?;
    Ok(Json(catalog::list_catalog(state.store.pool()).await?))
}
