//! Process wiring: the store, the embedded provider of a dev build (`src/dev/`), the API listener,
//! the "listening on" lines the tests and scripts parse, and graceful shutdown.

use crate::config::{Cli, Config, ServerArgs};
use crate::http::app;
use crate::listen::{bind, shutdown_signal};
use crate::state::{AppState, RunError};
use crate::store::Store;
use tokio::net::TcpListener;

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
    if config.metrics_token.is_none() && !config.dev {
        tracing::warn!(
            "no --metrics-token: /metrics is open; keep it off the public path (docs/deploy.md)"
        );
    }
    // The API listener is bound first so the embedded provider can be told where to send
    // its webhooks (port 0 allowed); it serves once the store is ready.
    let (listener, local) = bind(args.addr).await?;
    let provider_url = crate::dev::provider_url(&args, &config.webhook_secret, local).await?;
    let store = Store::connect(&crate::config::database_url(&args)).await?;
    let jobs_interval = config.jobs_interval;
    let state = AppState::new(store, &provider_url, config)?;
    tracing::info!(provider = %state.provider_url, "payment provider");
    let handshake = |flag| move |detail| RunError::Handshake { flag, detail };
    state
        .provider
        .probe()
        .await
        .map_err(handshake("--provider-url"))?;
    if let Some(redis) = &state.redis {
        redis.announce().await.map_err(handshake("--redis-url"))?;
    }
    if let Some(every) = jobs_interval {
        tokio::spawn(crate::jobs::run(state.clone(), every));
    }
    let edge = state.config.edge;
    let router = app(state, args.static_dir.clone());
    println!("payonce: api listening on http://{local}");
    serve(listener, router, edge).await;
    Ok(())
}

/// The API's accept loop. Each connection holds a permit of a semaphore of
/// `--max-connections`: at the cap the loop stops accepting (clients wait in the kernel's
/// backlog) instead of running out of file descriptors. hyper closes a connection whose
/// request head does not arrive within `--header-timeout-ms`, which also bounds an idle
/// kept-alive connection (its timer starts when hyper waits for the next head).
async fn serve(listener: TcpListener, router: axum::Router, edge: crate::config::Edge) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(edge.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper answers heads past its own limits itself, bare (no problem body): its header
    // count is raised above ours so `http::refuse_oversized` answers first; its URI (64 KiB)
    // and head (about 400 KiB) caps are already above ours.
    http.timer(TokioTimer::new())
        .header_read_timeout(edge.header_timeout)
        .max_headers(2 * crate::http::MAX_HEADERS)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break, // never closed
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; the permit is
                    // dropped, the loop retries.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended");
            }
            drop(permit);
        });
    }
    // Requests in flight finish (bounded by the request timeout); idle connections close.
    let _ = tokio::time::timeout(edge.request_timeout, graceful.shutdown()).await;
}
