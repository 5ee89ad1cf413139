//! Dev mode's endpoints: `POST /dev/sessions` (sign in as anyone) and `GET /dev/config`.
//! Without `--dev` both are 403 `DEV_MODE_REQUIRED`.

use crate::auth::valid_user_id;
use crate::error::{AppError, AppResult};
use crate::http::extract::ApiJson;
use crate::state::DevState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use payonce_protocol::headers::SESSION_COOKIE;
use payonce_protocol::{DevSessionRequest, DevSessionResponse, ErrorCode};

/// `POST /dev/sessions`: sign in as anyone. Dev mode only.
pub(crate) async fn create_session(
    State(state): State<DevState>,
    ApiJson(req): ApiJson<DevSessionRequest>,
) -> AppResult<impl IntoResponse> {
    if !state.config.dev {
        return Err(AppError::code(ErrorCode::DevModeRequired));
    }
    if !valid_user_id(&req.user_id) {
        return Err(AppError::detail(
            ErrorCode::InvalidRequest,
            "userId must be 1..=64 characters of [A-Za-z0-9_-]",
        ));
    }
    let Some(sessions) = &state.config.sessions else {
        return Err(AppError::detail(
            ErrorCode::InvalidRequest,
            "this server runs with --no-session-tokens: there are no sessions to sign in to",
        ));
    };
    let now = u64::try_from(state.clock.now_ms() / 1000).unwrap_or(0);
    let (token, ttl) = sessions.sign(&req.user_id, now);
    // SameSite=Lax: the demo page on another localhost port is same-site (ports do not make
    // a site), so the cookie still travels with credentialed fetches. No `Secure`: dev runs
    // on plain http://localhost.
    let cookie = format!("{SESSION_COOKIE}={token}; HttpOnly; Path=/; SameSite=Lax; Max-Age={ttl}");
    let body = Json(DevSessionResponse {
        user_id: req.user_id,
        token,
    });
    Ok(([(header::SET_COOKIE, cookie)], body))
}

/// `GET /dev/operator`: the dev operator token minted at start (`super::operator_token`), for
/// the demo's "what happened?" link to `/admin/` (docs/demo.md). Dev mode only: a production
/// build has no such token and no such route; a customer's session at `/admin/` is refused as
/// ever (`crate::auth::Operator`).
pub(crate) async fn operator(
    State(state): State<DevState>,
) -> Result<Json<serde_json::Value>, AppError> {
    match (&state.config.dev_operator_token, state.config.dev) {
        (Some(token), true) => Ok(Json(serde_json::json!({ "token": token.expose() }))),
        _ => Err(AppError::code(ErrorCode::DevModeRequired)),
    }
}

/// `GET /dev/config`: the provider URL and the accepted faults, for a demo page's dev panel.
pub(crate) async fn config(
    State(state): State<DevState>,
) -> Result<Json<payonce_protocol::DevConfig>, AppError> {
    if !state.config.dev {
        return Err(AppError::code(ErrorCode::DevModeRequired));
    }
    Ok(Json(payonce_protocol::DevConfig {
        provider_url: state.provider_url.to_string(),
        faults: payonce_protocol::body::DevFault::ALL.to_vec(),
    }))
}
