//! Process wiring: the store, the embedded provider of a dev build (`src/dev/`), the API listener,
//! the "listening on" lines the tests and scripts parse, and graceful shutdown.

use crate::config::{Cli, Config, ServerArgs};
use crate::http::app;
use crate::listen::{bind, shutdown_signal};
use crate::state::{AppState, RunError};
use crate::store::Store;

/// Runs what the command line asks for until SIGINT/SIGTERM.
pub async fn run(cli: Cli) -> Result<(), RunError> {
    match cli.command {
        Some(command) => crate::dev::run_command(command).await,
        None => run_api(cli.server).await,
    }
}

async fn run_api(args: ServerArgs) -> Result<(), RunError> {
    let config = Config::from_args(&args)?;
    crate::dev::arm(&config.failpoints);
    if args.session_secret.is_none() {
        tracing::warn!("no --session-secret: tokens are signed with a random per-process secret");
    }
    // The API listener is bound first so the embedded provider can be told where to send
    // its webhooks (port 0 allowed); it serves once the store is ready.
    let (listener, local) = bind(args.addr).await?;
    let provider_url = match crate::dev::embedded_provider(
        &args.dev,
        args.provider_url.as_deref(),
        &args.database_url,
        &config.webhook_secret,
        local,
    )
    .await?
    {
        Some(url) => url,
        // `Config::from_args` refuses a start without `--provider-url` outside dev mode.
        None => args.provider_url.clone().unwrap_or_default(),
    };
    let store = Store::connect(&args.database_url).await?;
    let jobs_interval = config.jobs_interval;
    let state = AppState::new(store, &provider_url, config)?;
    tracing::info!(provider = %state.provider_url, "payment provider");
    if let Some(redis) = &state.redis {
        redis.announce().await;
    }
    if let Some(every) = jobs_interval {
        tokio::spawn(crate::jobs::run(state.clone(), every));
    }
    let router = app(state, args.static_dir.clone());
    println!("payonce: api listening on http://{local}");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|source| RunError::Listen {
            addr: local,
            source,
        })
}
