//! Process wiring: the embedded (or standalone) mock provider, the store, the API listener,
//! the "listening on" lines the tests and scripts parse, and graceful shutdown.

use crate::config::{Cli, Command, Config, ServerArgs};
use crate::http::app;
use crate::state::{AppState, RunError};
use crate::store::Store;
use payonce_mock_provider::{MockProvider, ProviderConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::net::TcpListener;

/// Runs what the command line asks for until SIGINT/SIGTERM.
pub async fn run(cli: Cli) -> Result<(), RunError> {
    match cli.command {
        Some(Command::MockProvider {
            addr,
            webhook_url,
            webhook_secret,
            state_file,
            webhook_chaos,
        }) => {
            let config = ProviderConfig {
                webhook_url,
                webhook_secret,
                webhook_chaos,
                state_file,
                ..ProviderConfig::default()
            };
            let (handle, _) = start_provider(addr, config).await?;
            tokio::select! {
                r = handle => r.map_err(|e| RunError::Provider(e.to_string()))?,
                () = shutdown_signal() => {}
            }
            Ok(())
        }
        Some(Command::MintJwt {
            secret,
            issuer,
            audience,
            user,
            ttl_secs,
        }) => {
            if !crate::auth::valid_user_id(&user) {
                return Err(RunError::Provider(format!("invalid user id {user:?}")));
            }
            let secret = secret.split(',').next().unwrap_or_default();
            let token = crate::jwt::mint_hs256(
                secret.as_bytes(),
                &issuer,
                &audience,
                &user,
                crate::auth::now_secs(),
                ttl_secs,
            )
            .map_err(RunError::Provider)?;
            println!("{token}");
            Ok(())
        }
        None => run_api(cli.server).await,
    }
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), RunError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| RunError::Listen { addr, source })?;
    Ok((listener, local))
}

/// Starts the mock provider on its own listener and prints its line.
async fn start_provider(
    addr: SocketAddr,
    config: ProviderConfig,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr), RunError> {
    let provider = MockProvider::new(config).map_err(|e| RunError::Provider(e.to_string()))?;
    let (listener, local) = bind(addr).await?;
    println!("payonce: provider listening on http://{local}");
    let handle = tokio::spawn(async move {
        if let Err(e) = provider.serve(listener).await {
            tracing::error!(error = %e, "mock provider stopped");
        }
    });
    Ok((handle, local))
}

async fn run_api(args: ServerArgs) -> Result<(), RunError> {
    let config = Config::from_args(&args)?;
    crate::faults::arm(&config.failpoints);
    if args.session_secret.is_none() {
        tracing::warn!("no --session-secret: tokens are signed with a random per-process secret");
    }
    // The API listener is bound first so the embedded provider can be told where to send
    // its webhooks (port 0 allowed); it serves once the store is ready.
    let (listener, local) = bind(args.addr).await?;
    let provider_url = match &args.provider_url {
        Some(url) => url.clone(),
        None => {
            let webhook_url = (!args.no_provider_webhooks)
                .then(|| format!("http://{local}{}", payonce_protocol::body::paths::WEBHOOKS));
            // The embedded provider keeps its ledger in a file by default, so a crash of this
            // process (the provider's host) does not make it forget what it charged: a
            // restart must find the charge by provider key, never charge again.
            let state_file = if args.provider_memory_only {
                None
            } else {
                args.provider_state
                    .clone()
                    .or_else(|| default_provider_state(&args.database_url))
            };
            let config = ProviderConfig {
                webhook_url,
                webhook_secret: args.webhook_secret.clone(),
                webhook_chaos: args.provider_webhook_chaos.clone(),
                state_file,
                ..ProviderConfig::default()
            };
            let (handle, provider) = start_provider(args.provider_addr, config).await?;
            drop(handle); // runs for the life of the process
            format!("http://{provider}")
        }
    };
    let store = Store::connect(&args.database_url).await?;
    let jobs_interval = config.jobs_interval;
    let state = AppState::new(store, &provider_url, config)?;
    if let Some(redis) = &state.redis {
        redis.announce().await;
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
    http.timer(TokioTimer::new())
        .header_read_timeout(edge.header_timeout)
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

/// `provider.json` beside a SQLite database file; `None` for PostgreSQL (several API
/// processes then share a standalone provider, which has its own `--state-file`).
fn default_provider_state(database_url: &str) -> Option<PathBuf> {
    let rest = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    let dir = std::path::Path::new(path)
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    Some(dir.join("provider.json"))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
