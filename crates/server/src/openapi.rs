//! The OpenAPI document. It is hand-written and kept in the repository
//! (`crates/server/openapi.json`), embedded at build time and served verbatim; a test checks
//! that every route of [`crate::ROUTES`] is in it.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// The document, as kept in the repository.
pub const DOCUMENT: &str = include_str!("../openapi.json");

/// `GET /openapi.json`.
pub(crate) async fn serve() -> Response {
    let mut res = DOCUMENT.into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}
