//! Stands in for `src/dev/` in a build without the `dev` feature: the same names, and none
//! of the machinery. `--dev`, `--failpoint` and `mock-provider` are refused with one line
//! each; the dev routes answer 403 `DEV_MODE_REQUIRED` as they do in a dev build without
//! `--dev`; every fault hook is a no-op.

use crate::config::{ConfigError, ServerArgs};
use crate::error::AppError;
use crate::state::{AppState, RunError};
use args::DevFlagError;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use payonce_protocol::body::{paths, DevFault};
use payonce_protocol::ErrorCode;
use std::future::Future;
use std::net::SocketAddr;

pub use args::{Command, DevArgs};

/// The flags a production build still parses, only to refuse them with one clear line.
pub(crate) mod args {
    use clap::{Args, Subcommand};

    /// Why the dev flags are refused.
    #[derive(Debug, thiserror::Error)]
    pub enum DevFlagError {
        /// A dev-only flag or subcommand given to a build without the `dev` feature.
        #[error("{0} needs a dev build of payonce-server (cargo build -p payonce-server --features dev)")]
        NotADevBuild(&'static str),
    }

    /// Parsed only to be refused with a clear line instead of clap's "unexpected argument".
    #[derive(Debug, Clone, Args)]
    pub struct DevArgs {
        #[arg(long, hide = true)]
        dev: bool,
        #[arg(
            long = "failpoint",
            env = "PAYONCE_FAILPOINTS",
            value_delimiter = ',',
            hide = true
        )]
        failpoints: Vec<String>,
    }

    /// Subcommands: none in a production build (`mock-provider` is parsed only to be refused).
    #[derive(Debug, Subcommand)]
    pub enum Command {
        /// Refused: the mock provider is in dev builds only.
        #[command(hide = true)]
        MockProvider {
            /// Whatever followed, ignored.
            #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
            rest: Vec<String>,
        },
    }

    pub(crate) struct DevSettings {
        pub dev: bool,
        pub failpoints: Vec<crate::faults::Failpoint>,
        pub flaw: Option<payonce_rules::pay::Flaw>,
        pub default_webhook_secret: Option<&'static str>,
    }

    pub(crate) fn settings(args: &DevArgs) -> Result<DevSettings, DevFlagError> {
        if args.dev {
            return Err(DevFlagError::NotADevBuild("--dev"));
        }
        if args.failpoints.iter().any(|f| !f.trim().is_empty()) {
            return Err(DevFlagError::NotADevBuild(
                "--failpoint / PAYONCE_FAILPOINTS",
            ));
        }
        Ok(DevSettings {
            dev: false,
            failpoints: Vec::new(),
            flaw: None,
            default_webhook_secret: None,
        })
    }
}

pub(crate) fn arm(_: &[crate::faults::Failpoint]) {}

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
}

#[inline(always)]
pub(crate) fn failpoint(_: crate::faults::Failpoint) {}

#[inline(always)]
pub(crate) fn after_charge() {}

pub(crate) fn dropped_response(_: Option<DevFault>) -> Option<Response> {
    None
}

pub(crate) fn with_fault<F: Future>(_: Option<DevFault>, task: F) -> F {
    task
}
