//! The OpenAPI document. It is hand-written and kept in the repository
//! (`crates/server/openapi.json`), embedded at build time and served verbatim; a test checks
//! that every route of [`crate::ROUTES`] is in it.

use axum::http::header;
use axum::response::IntoResponse;

/// The document, as kept in the repository.
pub const DOCUMENT: &str = include_str!("../openapi.json");

/// `GET /openapi.json`.
pub(crate) async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
