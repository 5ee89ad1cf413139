//! Everything a dev build adds (the `dev` cargo feature; `src/dev_off.rs` stands in for
//! this module without it, so a production build links none of it): the `--dev` flag, the
//! embedded mock provider and the `mock-provider` subcommand, `POST /dev/sessions`,
//! `GET /dev/config`, `GET /dev/mailbox`, `GET /dev/operator` (a dev operator token), the `Payonce-Dev-Fault` header and failpoints.

mod mailbox;
mod sessions;

pub use crate::config::dev::{Command, DevArgs};

use crate::config::ServerArgs;
use crate::state::{AppState, RunError};
use axum::routing::{get, post};
use axum::Router;
use payonce_mock_provider::{MockProvider, ProviderConfig};
use payonce_protocol::body::paths;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Runs a subcommand until SIGINT/SIGTERM.
pub(crate) async fn run_command(command: Command) -> Result<(), RunError> {
    let (addr, config) = match command {
        Command::MockProvider {
            addr,
            webhook_url,
            webhook_secret,
            state_file,
            webhook_chaos,
        } => {
            let config = ProviderConfig {
                webhook_url,
                webhook_secret: webhook_secret.expose().to_owned(),
                webhook_chaos,
                state_file,
                ..ProviderConfig::default()
            };
            (addr, config)
        }
        Command::MintJwt {
            secret,
            issuer,
            audience,
            user,
            ttl_secs,
        } => return mint_jwt(&secret, &issuer, &audience, &user, ttl_secs),
    };
    let (handle, _) = start_provider(addr, config).await?;
    tokio::select! {
        r = handle => r.map_err(|e| RunError::Provider(e.to_string()))?,
        () = crate::listen::shutdown_signal() => {}
    }
    Ok(())
}

/// `mint-jwt`: prints a token for `user` signed with the first of the secrets.
fn mint_jwt(
    secret: &str,
    issuer: &str,
    audience: &str,
    user: &str,
    ttl_secs: u64,
) -> Result<(), RunError> {
    if !crate::auth::valid_user_id(user) {
        return Err(RunError::Provider(format!("invalid user id {user:?}")));
    }
    let secret = secret.split(',').next().unwrap_or_default();
    let token = crate::auth::jwt::mint_hs256(
        secret.as_bytes(),
        issuer,
        audience,
        user,
        crate::auth::now_secs(),
        ttl_secs,
    )
    .map_err(RunError::Provider)?;
    println!("{token}");
    Ok(())
}

/// Starts the mock provider on its own listener and prints its line.
async fn start_provider(
    addr: SocketAddr,
    config: ProviderConfig,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr), RunError> {
    let provider = MockProvider::new(config).map_err(|e| RunError::Provider(e.to_string()))?;
    let (listener, local) = crate::listen::bind(addr).await?;
    println!("payonce: provider listening on http://{local}");
    let handle = tokio::spawn(async move {
        if let Err(e) = provider.serve(listener).await {
            tracing::error!(error = %e, "mock provider stopped");
        }
    });
    Ok((handle, local))
}

/// The provider's URL: `--provider-url`, or with `--dev` and none, the embedded provider's,
/// started here and posting webhooks to the API at `api` (outside dev the config check has
/// made sure the flag is set).
pub(crate) async fn provider_url(
    args: &ServerArgs,
    webhook_secret: &str,
    api: SocketAddr,
) -> Result<String, RunError> {
    let d = &args.dev;
    if args.provider_url.is_some() || !d.dev {
        return Ok(args.provider_url.as_deref().unwrap_or_default().to_owned());
    }
    let webhook_url = (!d.no_provider_webhooks).then(|| format!("http://{api}{}", paths::WEBHOOKS));
    // The embedded provider keeps its ledger in a file by default, so a crash of this
    // process (the provider's host) does not make it forget what it charged: a restart must
    // find the charge by provider key, never charge again.
    let state_file = if d.provider_memory_only {
        None
    } else {
        d.provider_state
            .clone()
            .or_else(|| default_provider_state(args.database()))
    };
    let config = ProviderConfig {
        webhook_url,
        webhook_secret: webhook_secret.to_owned(),
        webhook_chaos: d.provider_webhook_chaos.clone(),
        state_file,
        ..ProviderConfig::default()
    };
    let (handle, provider) = start_provider(d.provider_addr, config).await?;
    drop(handle); // runs for the life of the process
    Ok(format!("http://{provider}"))
}

/// `provider.json` beside a SQLite database file; `None` for PostgreSQL (several API
/// processes then share a standalone provider, which has its own `--state-file`).
fn default_provider_state(database_url: &str) -> Option<PathBuf> {
    let file = std::path::Path::new(crate::store::sqlite_path(database_url)?);
    Some(file.with_file_name("provider.json"))
}

/// The dev routes; each answers 403 `DEV_MODE_REQUIRED` unless the server runs with
/// `--dev`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(paths::DEV_SESSIONS, post(sessions::create_session))
        .route(paths::DEV_CONFIG, get(sessions::config))
        .route(paths::DEV_MAILBOX, get(mailbox::handler))
        .route(
            payonce_protocol::admin::paths::DEV_OPERATOR,
            get(sessions::operator),
        )
}

#[cfg(test)]
mod tests {
    use crate::config::dev::DevFlagError;
    use crate::config::{Cli, Config, ConfigError, ServerArgs};
    use clap::Parser;

    fn args(extra: &[&str]) -> ServerArgs {
        let argv = std::iter::once("payonce-server").chain(extra.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").server
    }

    #[test]
    fn dev_mode_needs_no_production_flags_but_refuses_a_short_secret() {
        let c = Config::from_args(&args(&["--dev"])).unwrap();
        assert!(c.dev);
        assert_eq!(
            c.webhook_secret.expose(),
            payonce_mock_provider::DEFAULT_WEBHOOK_SECRET
        );
        assert!(matches!(
            Config::from_args(&args(&["--dev", "--session-secret", "short"])),
            Err(ConfigError::WeakSecret)
        ));
    }

    #[test]
    fn failpoints_need_dev_mode_and_known_names() {
        assert!(matches!(
            Config::from_args(&args(&["--failpoint", "after-claim"])),
            Err(ConfigError::Dev(DevFlagError::FailpointsNeedDev))
        ));
        assert!(matches!(
            Config::from_args(&args(&["--dev", "--failpoint", "after-lunch"])),
            Err(ConfigError::Dev(DevFlagError::UnknownFailpoint(_)))
        ));
        let c = Config::from_args(&args(&["--dev", "--failpoint", "after-claim,email"])).unwrap();
        use crate::faults::Failpoint;
        assert_eq!(c.failpoints, [Failpoint::AfterClaim, Failpoint::Email]);
    }

    #[test]
    fn provider_addr_and_provider_url_conflict() {
        let argv = [
            "payonce-server",
            "--provider-addr",
            "127.0.0.1:1",
            "--provider-url",
            "http://x",
        ];
        assert!(Cli::try_parse_from(argv).is_err());
        assert!(Cli::try_parse_from(["payonce-server", "--provider-url", "http://x"]).is_ok());
    }

    #[test]
    fn a_memory_only_provider_has_no_state_file_to_name() {
        assert!(args(&["--provider-memory-only"]).dev.provider_memory_only);
        let argv = [
            "payonce-server",
            "--provider-memory-only",
            "--provider-state",
            "/tmp/p.json",
        ];
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
