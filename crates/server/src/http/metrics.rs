//! `GET /metrics` (the counters and gauges are `src/metrics.rs`), behind `--metrics-token`
//! when it is set.

use crate::error::AppError;
use crate::metrics;
use crate::state::MetricsState;
use crate::store::attempts::processing_before;
use crate::store::jobs::waiting_since;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use payonce_protocol::ErrorCode;

/// `GET /metrics`.
pub(crate) async fn serve(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.config.metrics_token {
        if !metrics::authorized(&headers, token) {
            let detail = "/metrics needs Authorization: Bearer <--metrics-token>";
            return AppError::detail(ErrorCode::Unauthenticated, detail).into_response();
        }
    }
    let now = state.clock.now_ms();
    let pool = state.store.pool();
    let read = async |before, late| {
        Ok::<_, sqlx::Error>(metrics::Figures {
            processing: processing_before(pool, before).await?,
            receipts_waiting: waiting_since(pool, late).await?,
        })
    };
    let text = metrics::text(read, &state.gauges, state.redis.as_deref(), now).await;
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}
