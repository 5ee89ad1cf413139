//! `GET /catalog`.

use crate::config::Config;
use crate::error::AppResult;
use crate::store::{catalog, Store};
use axum::extract::State;
use axum::Json;
use payonce_protocol::CatalogItem;
use std::sync::Arc;

/// `GET /catalog`.
pub(crate) async fn list(
    State(store): State<Store>,
    State(config): State<Arc<Config>>,
) -> AppResult<Json<Vec<CatalogItem>>> {
    crate::catalog::ensure_installed(&store, config.catalog.as_ref()).await?;
    Ok(Json(catalog::list_catalog(store.pool()).await?))
}
