//! Stands in for `src/dev/` in a build without the `dev` feature: the same names, and none
//! of the machinery. `--dev`, `--failpoint` and `mock-provider` are refused with one line
//! each; the dev routes answer 403 `DEV_MODE_REQUIRED` as they do in a dev build without
//! `--dev`; every fault hook is a no-op.

use crate::config::dev::DevFlagError;
use crate::config::{ConfigError, ServerArgs};
use crate::error::AppError;
use crate::state::{AppState, RunError};
use axum::routing::{get, post};
use axum::Router;
use payonce_protocol::body::paths;
use payonce_protocol::ErrorCode;
use std::net::SocketAddr;

pub use crate::config::dev::{Command, DevArgs};

pub(crate) async fn run_command(_: Command) -> Result<(), RunError> {
    Err(RunError::Config(ConfigError::Dev(
        DevFlagError::NotADevBuild("mock-provider"),
    )))
}

pub(crate) async fn provider_url(
    args: &ServerArgs,
    _: &str,
    _: SocketAddr,
) -> Result<String, RunError> {
    Ok(args.provider_url.as_deref().unwrap_or_default().to_owned())
}

pub(crate) fn routes() -> Router<AppState> {
    async fn refuse() -> AppError {
        AppError::code(ErrorCode::DevModeRequired)
    }
    Router::new()
        .route(paths::DEV_SESSIONS, post(refuse))
        .route(paths::DEV_CONFIG, get(refuse))
        .route(paths::DEV_MAILBOX, get(refuse))
        .route(payonce_protocol::admin::paths::DEV_OPERATOR, get(refuse))
}
