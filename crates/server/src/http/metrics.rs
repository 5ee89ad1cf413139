//! `GET /metrics` (Prometheus text format; the counters and gauges are `src/metrics.rs`).

use crate::metrics;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// `GET /metrics`.
pub(crate) async fn serve(State(state): State<AppState>) -> Response {
    let now = state.clock.now_ms();
    let out = metrics::text(&state.store, state.redis.as_deref(), now).await;
    let mut res = (StatusCode::OK, out).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(metrics::CONTENT_TYPE),
    );
    res
}
