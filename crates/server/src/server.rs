//! Process wiring: the store, the embedded provider of a dev build (`src/dev/`), the API listener,
//! the "listening on" lines the tests and scripts parse, and graceful shutdown.

use crate::config::{Cli, Config, ServerArgs};
use crate::listen::{bind, drive, shutdown_signal, Budget, PeerCap, WriteDeadline};
use crate::provider::ProbeError;
use crate::state::{AppState, RunError};
use crate::store::Store;
use axum::extract::FromRef;
use tokio::net::TcpListener;

/// The API as a router, dev mode's routes included (each answers 403 `DEV_MODE_REQUIRED`
/// without `--dev`). `static_dir` files are served for paths no route claims.
pub fn app(state: AppState, static_dir: Option<std::path::PathBuf>) -> axum::Router {
    crate::http::router(state, static_dir, crate::dev::routes())
}

/// Runs what the command line asks for until SIGINT/SIGTERM.
pub async fn dispatch(cli: Cli) -> Result<(), RunError> {
    use crate::config::Command;
    match cli.command {
        Some(Command::Migrate {
            database_url,
            tls_ca_file,
        }) => {
            migrate(&crate::config::with_ca(
                &database_url,
                tls_ca_file.as_deref(),
            ))
            .await
        }
        Some(Command::Sweep { since }) => sweep(cli.server, since).await,
        Some(Command::EraseUser {
            user,
            database_url,
            tls_ca_file,
        }) => {
            let url = crate::config::with_ca(&database_url, tls_ca_file.as_deref());
            erase_user(&url, &user).await
        }
        Some(Command::Timeline {
            order_id,
            key,
            provider_id,
            database_url,
            tls_ca_file,
        }) => {
            let url = crate::config::with_ca(&database_url, tls_ca_file.as_deref());
            let of = match (order_id, key, provider_id) {
                (Some(id), _, _) => TimelineOf::Order(id),
                (None, Some(key), _) => TimelineOf::Key(key),
                (None, None, Some(id)) => TimelineOf::ProviderId(id),
                // clap requires one of the three.
                (None, None, None) => return Err(RunError::NoSuchOrder(String::new())),
            };
            timeline(&url, of).await
        }
        Some(Command::Dev(command)) => crate::dev::run_command(command).await,
        None => serve_api(cli.server).await,
    }
}

/// What `payonce-server timeline` was asked about.
enum TimelineOf {
    Order(String),
    Key(String),
    ProviderId(String),
}

/// `payonce-server timeline ORDER_ID` (or `--key KEY`, `--provider-id ID`): the timeline of
/// the order, or of every order the key or the provider object belongs to, on stdout; an
/// unknown order (none found) is an error.
async fn timeline(url: &str, of: TimelineOf) -> Result<(), RunError> {
    use crate::store::journal::By;
    let store = Store::open(url, crate::store::MigrateMode::Check).await?;
    let (orders, asked) = match of {
        TimelineOf::Order(id) => (vec![id.clone()], id),
        TimelineOf::Key(key) => (
            orders_of(&store, By::Key, &key).await?,
            format!("for key {key}"),
        ),
        TimelineOf::ProviderId(id) => (
            orders_of(&store, By::ProviderId, &id).await?,
            format!("for provider object {id}"),
        ),
    };
    let mut found = false;
    for order_id in &orders {
        let t = crate::ops::timeline::timeline(store.pool(), order_id)
            .await
            .map_err(crate::store::StoreError::from)?;
        if let Some(t) = t {
            if found {
                println!();
            }
            print!("{}", crate::ops::timeline::text(&t));
            found = true;
        }
    }
    if found {
        Ok(())
    } else {
        Err(RunError::NoSuchOrder(asked))
    }
}

async fn orders_of(
    store: &Store,
    by: crate::store::journal::By,
    value: &str,
) -> Result<Vec<String>, RunError> {
    Ok(crate::store::journal::orders_of(store.pool(), by, value)
        .await
        .map_err(crate::store::StoreError::from)?)
}

/// `payonce-server migrate`: one line on stdout with the schema's version when done.
async fn migrate(url: &str) -> Result<(), RunError> {
    let schema = Store::migrate_to_current(url).await?;
    let version = crate::store::schema_version();
    match schema {
        crate::store::Schema::NewerCompatible { at } => println!(
            "payonce: schema at version {at}, newer than this binary's {version} and declared compatible with it"
        ),
        _ => println!("payonce: schema at version {version}"),
    }
    Ok(())
}

/// `payonce-server sweep --since T`: the provider sweep once, from `since` (Unix seconds)
/// to now, to the end of the provider's list; its report on stdout, one line per object and
/// the counts last.
async fn sweep(args: ServerArgs, since: i64) -> Result<(), RunError> {
    let config = Config::from_args(&args)?;
    let provider_url = match (args.provider_url.as_deref(), config.default_provider_url()) {
        (Some(url), _) => url.to_owned(),
        (None, Some(default)) => default.to_owned(),
        (None, None) => return Err(RunError::Sweep("--provider-url is required".into())),
    };
    let store = Store::open(&crate::config::database_url(&args), config.migrate).await?;
    let state = AppState::new(store, &provider_url, config)?;
    let since_ms = since.saturating_mul(1000);
    let report = crate::ops::sweep::sweep(&state, since_ms, None, None)
        .await
        .map_err(|e| RunError::Sweep(e.to_string()))?;
    for line in &report.lines {
        println!("payonce: sweep: {line}");
    }
    println!("payonce: sweep since {since}: {}", report.summary());
    Ok(())
}

/// `payonce-server erase-user USER`: one line on stdout with what was erased. The schema
/// must be this binary's (`--migrate check`).
async fn erase_user(url: &str, user: &str) -> Result<(), RunError> {
    use crate::clock::Clock;
    let store = Store::open(url, crate::store::MigrateMode::Check).await?;
    let now = crate::clock::SystemClock.now_ms();
    let entry = payonce_rules::erase::entry(user);
    let erased = crate::store::erase::erase_user(&store, user, &entry, now)
        .await
        .map_err(|e| RunError::Erase(e.to_string()))?;
    println!(
        "payonce: erased user {user}: {} order addresses, {} mails; ids, amounts, times and fingerprints kept",
        erased.addresses, erased.mails
    );
    Ok(())
}

async fn serve_api(args: ServerArgs) -> Result<(), RunError> {
    let config = Config::from_args(&args)?;
    crate::faults::arm(&config.failpoints);
    if args.sessions.secrets.is_empty() && config.sessions.is_some() {
        tracing::warn!("no --session-secret: tokens are signed with a random per-process secret");
    }
    if config.metrics_token.is_none() && !config.dev {
        tracing::warn!(
            "no --metrics-token: /metrics is open; keep it off the public path (docs/deploy.md)"
        );
    }
    // The store before the listener: a start that refuses the schema (or cannot reach the
    // database) exits without ever accepting a connection, so a load balancer's TCP check
    // never routes to an instance that is about to exit (a rolling upgrade restarts them).
    let store = Store::open(&crate::config::database_url(&args), config.migrate).await?;
    // The API listener is bound before the embedded provider starts, so that it can be told
    // where to send its webhooks (port 0 allowed); it serves once the state is ready.
    let (listener, local) = bind(args.addr).await?;
    let provider_url = match config.default_provider_url() {
        Some(default) => args.provider_url.as_deref().unwrap_or(default).to_owned(),
        None => crate::dev::provider_url(&args, &config.webhook_secret, local).await?,
    };
    let jobs_interval = config.jobs_interval;
    let state = AppState::new(store, &provider_url, config)?;
    // Never the URL as given: in dev it may still carry credentials (`src/secret.rs`).
    let shown = crate::secret::redact_url(&state.provider_url);
    tracing::info!(provider = %shown, "payment provider");
    if let Some(mode) = state.ops.config.stripe_mode {
        // The mode only, never the key.
        tracing::info!(mode = mode.name(), "Stripe mode");
    }
    let handshake = |flag| move |detail| RunError::Handshake { flag, detail };
    state.ops.provider.probe().await.map_err(|e| match e {
        ProbeError::Tls(detail) => handshake("--provider-url")(detail),
        ProbeError::KeyRefused(status) => RunError::KeyRefused(status),
    })?;
    if let Some(redis) = &state.ops.redis {
        redis.announce().await.map_err(handshake("--redis-url"))?;
    }
    // The job runner and the sweep end after their round in flight when the server stops.
    let (stop_rounds, rounds_stop) = tokio::sync::watch::channel(());
    let mut rounds = Vec::new();
    if let Some(every) = jobs_interval {
        let jobs =
            crate::ops::jobs::work_every(FromRef::from_ref(&state), every, rounds_stop.clone());
        rounds.push(tokio::spawn(jobs));
    }
    if let Some((every, window)) = args.sweep.job() {
        let sweep =
            crate::ops::sweep::sweep_every(FromRef::from_ref(&state), every, window, rounds_stop);
        rounds.push(tokio::spawn(sweep));
    }
    if let Some(jwt) = state.ops.config.jwt.clone().filter(|j| j.has_jwks()) {
        tokio::spawn(reload_jwks(jwt));
    }
    let edge = state.ops.config.edge;
    let store = state.ops.store.clone();
    let router = app(state, args.static_dir.clone());
    println!("payonce: api listening on http://{local}");
    let signalled = serve(listener, router, edge).await;
    finish_rounds(stop_rounds, rounds, signalled + edge.request_timeout).await;
    // The last answers' journal entries are queued, not yet committed (src/journal.rs
    // `Scope::flush`): the process ends after they are.
    if let Err(e) = crate::store::journal::drain(&store).await {
        tracing::warn!(error = %e, "journal entries not written at the stop");
    }
    Ok(())
}

/// After the last answer: the background rounds in flight finish (a receipt the relay took
/// is marked sent, a settle commits) before the process ends, until `deadline` (the stop
/// signal plus the request timeout: the HTTP drain of the requests in flight and this wait
/// share one bound, which docs/deploy.md's `TimeoutStopSec` covers); a round still running
/// then is cut, and what it left is taken up again by the next instance's jobs (leases,
/// `docs/operating.md`).
async fn finish_rounds(
    stop: tokio::sync::watch::Sender<()>,
    rounds: Vec<tokio::task::JoinHandle<()>>,
    deadline: std::time::Instant,
) {
    if rounds.is_empty() {
        return;
    }
    tracing::info!("stopping: waiting for the job rounds in flight");
    let _ = stop.send(());
    let all = async {
        for r in rounds {
            let _ = r.await;
        }
    };
    match tokio::time::timeout_at(deadline.into(), all).await {
        Ok(()) => tracing::info!("stopped: no job round in flight"),
        Err(_) => tracing::warn!(
            "stopped with a job round still running at the stop's bound (--request-timeout-ms); \
             the next instance takes it up"
        ),
    }
}

/// Reads the `--jwt-jwks` file again on `SIGHUP` and every `--jwt-jwks-reload-secs`, so an
/// identity provider's key rotation needs no restart (only started with a JWKS file: without
/// one, `SIGHUP` keeps its default meaning).
async fn reload_jwks(jwt: std::sync::Arc<crate::auth::jwt::JwtVerifier>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).ok();
    let mut tick = jwt.jwks_reload_every().map(|every| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let why = tokio::select! {
            Some(()) = async { hangup.as_mut()?.recv().await } => "SIGHUP",
            Some(_) = async { Some(tick.as_mut()?.tick().await) } => "interval",
            else => return,
        };
        match jwt.reload_jwks() {
            Some(Ok(keys)) => tracing::info!(keys, why, "--jwt-jwks reloaded"),
            Some(Err(e)) => {
                tracing::warn!(error = %e, why, "--jwt-jwks reload failed; the keys loaded before stay");
            }
            None => return,
        }
    }
}

/// The API's accept loop. Each connection holds a permit of a semaphore of
/// `--max-connections`: at the cap the loop stops accepting (clients wait in the kernel's
/// backlog) instead of running out of file descriptors. So that no client can hold permits
/// for ever, or take them all:
/// - hyper closes a connection whose request head does not arrive within
///   `--header-timeout-ms`, which also bounds an idle kept-alive connection (its timer
///   starts when hyper waits for the next head);
/// - a connection lives at most `--connection-max-age-ms` and answers at most
///   `--max-requests-per-connection` requests, its last answer with `Connection: close`
///   (`listen::Budget`, `listen::drive`): each head restarts the header timeout, so a
///   small request now and then would otherwise keep a connection for ever;
/// - an answer the client does not take within `--write-timeout-ms` closes the connection
///   (`listen::WriteDeadline`): a client that pipelines requests and never reads;
/// - one address (an IPv6 /64) holds at most `--max-connections-per-peer` of them
///   (`listen::PeerCap`, an eighth of the total by default); a connection past it is closed
///   as soon as it is accepted;
/// - hyper's buffer of a connection is [`crate::http::MAX_READ_BUFFER`], not its ~408 KiB
///   default, so 1,024 slow heads cost 64 MiB at most.
///
/// Returns when the last answer went (or the drain's bound passed), with when the stop
/// signal came.
async fn serve(
    listener: TcpListener,
    router: axum::Router,
    edge: crate::config::Edge,
) -> std::time::Instant {
    use hyper_util::rt::TokioTimer;
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(edge.max_connections));
    let peers = PeerCap::new(edge.max_connections_per_peer);
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper answers heads past its own limits itself, bare (no problem body): its header
    // count is raised above ours so `http::refuse_oversized` answers first; its buffer holds
    // a head at our caps with room to spare, and its URI cap (64 KiB) is above ours.
    http.timer(TokioTimer::new())
        .header_read_timeout(edge.header_timeout)
        .max_headers(2 * crate::http::MAX_HEADERS)
        .max_buf_size(crate::http::MAX_READ_BUFFER)
        .keep_alive(true);
    // Each connection holds a receiver: a message asks them all to close gracefully, and
    // `closed()` resolves once every one has ended.
    let (stop, _) = tokio::sync::watch::channel(());
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
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
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
        let Some(slot) = peers.admit(peer.ip()) else {
            tracing::debug!(%peer, "closed: --max-connections-per-peer reached");
            continue;
        };
        let conn = connection(&http, stream, &router, edge, stop.subscribe());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended");
            }
            drop((slot, permit));
        });
    }
    // Requests in flight finish (bounded by the request timeout); idle connections close.
    let signalled = std::time::Instant::now();
    let _ = stop.send(());
    let _ = tokio::time::timeout(edge.request_timeout, stop.closed()).await;
    signalled
}

/// Serves the HTTP/1 connection over an accepted `stream` until it ends (`listen::drive`):
/// its writes under the write deadline, its answers counted against its [`Budget`], the last
/// one marked `Connection: close`.
fn connection(
    http: &hyper::server::conn::http1::Builder,
    stream: tokio::net::TcpStream,
    router: &axum::Router,
    edge: crate::config::Edge,
    stop: tokio::sync::watch::Receiver<()>,
) -> impl std::future::Future<Output = hyper::Result<()>> + Send + 'static {
    use axum::http::{header, HeaderValue};
    use tower::ServiceExt;
    let _ = stream.set_nodelay(true);
    let budget = std::sync::Arc::new(Budget::new(edge.lifetime, std::time::Instant::now()));
    let mark = move |mut res: axum::response::Response| {
        if budget.last_answer(std::time::Instant::now()) {
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        res
    };
    type Req = axum::http::Request<hyper::body::Incoming>;
    let counted = ServiceExt::<Req>::map_response(router.clone(), mark);
    let service = hyper_util::service::TowerToHyperService::new(counted);
    let io = hyper_util::rt::TokioIo::new(WriteDeadline::new(stream, edge.write_timeout));
    drive(http.serve_connection(io, service), edge.lifetime, stop)
}
