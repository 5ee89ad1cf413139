//! Stands in for `dev.rs` in a build without the `dev` feature: the dev flags a production
//! build still parses, only to refuse them with one clear line.

use clap::{Args, Subcommand};

/// Why the dev flags are refused.
#[derive(Debug, thiserror::Error)]
pub enum DevFlagError {
    /// A dev-only flag or subcommand given to a build without the `dev` feature.
    #[error(
        "{0} needs a dev build of payonce-server (cargo build -p payonce-server --features dev)"
    )]
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
    /// Never in a production build.
    pub operator_token: Option<crate::secret::Secret>,
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
        operator_token: None,
    })
}
