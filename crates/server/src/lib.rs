//! The payonce companion server: orders priced by the server, and a pay endpoint that
//! charges the customer once however often the request is retried, duplicated, raced or
//! cancelled. SQLite by default, PostgreSQL for several processes.
//!
//! # Layout
//! - [`config`]: the command line and runtime settings.
//! - `error`: `AppError`, the one error type; every error leaves as an RFC 9457 problem.
//! - `extract`: extractors for JSON bodies, path ids, `Idempotency-Key`, the dev fault header.
//! - `auth`: HMAC-signed dev session tokens and the authenticated-user extractor.
//! - `catalog`: the catalog and the one place prices are computed.
//! - `orders`: create, read, change the cart (the cart-lock rule).
//! - `pay`: the pay rules (`NextAction`, claim, drive, reconcile, settle).
//! - `fast_path`: around the pay rules: rate limit, the optional Redis fast path, metrics.
//! - `redis_cache`: the Redis connection behind a circuit breaker.
//! - `limits`: per-user token buckets (429 `RATE_LIMITED`).
//! - `metrics`: counters and `GET /metrics` (Prometheus text format), hooks for the jobs.
//! - `cancel`: the cancel table and tombstones.
//! - `refunds`: `POST /payments/{id}/refund`, once per payment, through the provider.
//! - `mailbox`: `GET /dev/mailbox`, the confirmation mails dev mode records.
//! - `webhooks`: signed provider events, settled from the provider's own answer.
//! - `provider_client`: the provider over HTTP, each answer sorted by what it proves.
//! - [`store`]: SQL over SQLite or PostgreSQL, migrations, audit trail.
//! - `jobs`: the outbox worker, reconciliation (with manual review), confirmation emails
//!   (at least once, sent once), cleanup and retention.
//! - `faults`: dev-mode fault injection and named failpoints.
//! - `openapi`: the hand-written OpenAPI document (`openapi.json` in this crate).
//! - `server` ([`run`]): listeners, the embedded mock provider, graceful shutdown.
//! - `bench` (hidden): the raw-store pay path the load benchmark measures against.

#![deny(missing_docs)]

#[doc(hidden)]
pub mod bench;
pub mod config;
pub mod store;

mod auth;
mod cancel;
mod catalog;
pub mod clock;
mod error;
mod extract;
mod fast_path;
mod faults;
mod http;
mod jobs;
mod limits;
mod mailbox;
mod metrics;
mod openapi;
mod orders;
mod pay;
mod provider_client;
mod redis_cache;
mod refunds;
mod replay_cache;
mod server;
mod webhooks;

pub use config::{Cli, Command, Config, ServerArgs};
use error::AppError;
pub use server::{run, RunError};
pub use store::{Backend, Store};

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{
    DEV_FAULT, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KEY_RETENTION, REQUEST_ID, RETRY_AFTER,
};
use payonce_protocol::ErrorCode;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Largest request body accepted. Every body of this API is a few hundred bytes; 16 KiB
/// leaves room for a 20-line cart and a long address, and nothing for abuse.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub(crate) store: Store,
    pub(crate) provider: provider_client::ProviderClient,
    pub(crate) config: Arc<Config>,
    /// The provider's base URL, for `GET /dev/config`.
    pub(crate) provider_url: Arc<str>,
    /// The Redis fast path, when `--redis-url` is set.
    pub(crate) redis: Option<Arc<redis_cache::RedisCache>>,
    /// Per-user pay rate limits of this process.
    pub(crate) limits: Arc<limits::Limits>,
    /// Final attempts this process has replayed, answered from memory next time.
    pub(crate) replays: Arc<replay_cache::ReplayCache>,
    /// Where every rule reads `now` from.
    pub(crate) clock: Arc<dyn clock::Clock>,
    /// Leases and retention, from the config.
    pub(crate) policy: payonce_rules::Policy,
}

impl AppState {
    /// State over `store`, reaching the provider at `provider_url`.
    pub fn new(store: Store, provider_url: &str, config: Config) -> Result<Self, RunError> {
        let provider = provider_client::ProviderClient::new(provider_url, config.provider_timeout)
            .map_err(|e| RunError::Provider(e.to_string()))?;
        let redis = match &config.redis_url {
            Some(url) => Some(Arc::new(
                redis_cache::RedisCache::new(url, config.redis_timeout)
                    .map_err(|e| RunError::Config(config::ConfigError::RedisUrl(e)))?,
            )),
            None => None,
        };
        let limits = Arc::new(limits::Limits::new(
            config.pay_rate,
            config.new_attempt_rate,
        ));
        let replays = Arc::new(replay_cache::ReplayCache::new(config.replay_cache_entries));
        let policy = payonce_rules::Policy::new(
            config.lease,
            config.key_retention,
            config.reconcile_after,
            config.audit_retention,
        );
        Ok(Self {
            store,
            provider,
            config: Arc::new(config),
            provider_url: provider_url.into(),
            redis,
            limits,
            replays,
            clock: Arc::new(clock::SystemClock),
            policy,
        })
    }

    /// The same state reading `now` from `clock` (tests move a manual clock instead of
    /// sleeping).
    pub fn with_clock(mut self, clock: Arc<dyn clock::Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// Every route as `(method, path template)`. The OpenAPI document must list each one
/// (tested), and the fuzzer walks the document.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/dev/sessions"),
    ("get", "/dev/config"),
    ("get", "/catalog"),
    ("post", "/orders"),
    ("get", "/orders/{id}"),
    ("patch", "/orders/{id}/cart"),
    ("post", "/orders/{id}/pay"),
    ("post", "/orders/{id}/payment-attempts/cancel"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
    ("post", "/webhooks/provider"),
    ("get", "/metrics"),
    ("post", "/payments/{id}/refund"),
    ("get", "/dev/mailbox"),
];

/// The API as a router. `static_dir` files are served for paths no route claims.
pub fn app(state: AppState, static_dir: Option<PathBuf>) -> Router {
    let dev = state.config.dev;
    let router = Router::new()
        .route(paths::DEV_SESSIONS, post(auth::create_dev_session))
        .route(paths::DEV_CONFIG, get(dev_config))
        .route(paths::CATALOG, get(catalog::list))
        .route(paths::ORDERS, post(orders::create))
        .route(&paths::order("{id}"), get(orders::get))
        .route(&paths::cart("{id}"), patch(orders::patch_cart))
        .route(&paths::pay("{id}"), post(http::pay::handler))
        .route(&paths::cancel("{id}"), post(cancel::handler))
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::OPENAPI, get(openapi::serve))
        .route(paths::WEBHOOKS, post(webhooks::handler))
        .route(paths::METRICS, get(metrics::serve))
        .route(&paths::refund("{id}"), post(refunds::handler))
        .route(paths::DEV_MAILBOX, get(mailbox::handler))
        .method_not_allowed_fallback(method_not_allowed);
    let router = match static_dir {
        Some(dir) => router.fallback_service(
            tower_http::services::ServeDir::new(dir)
                .not_found_service(axum::routing::any(not_found).with_state(state.clone())),
        ),
        None => router.fallback(not_found),
    };
    let router = router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_large_bodies))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn(request_id))
        .with_state(state);
    if dev {
        router.layer(dev_cors())
    } else {
        router
    }
}

/// Names every request: the client's `X-Request-Id` when it is a plausible id, else a new
/// one. It is on the response and on every log line of the request, so a client's report of
/// an opaque 500 can be matched to the logged detail.
async fn request_id(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=64).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span =
        tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path());
    let started = std::time::Instant::now();
    let mut res = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| {
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(status = res.status().as_u16(), ms, "answered");
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    res
}

/// Bodies up to this size are read and discarded before a 413 is sent.
const DRAIN_LIMIT: u64 = 1024 * 1024;

/// Answers 413 to a body declared larger than [`MAX_BODY_BYTES`] before any handler runs.
/// The body is drained first (up to [`DRAIN_LIMIT`]): closing a socket with unread data
/// makes TCP reset the connection, and the client would see a reset instead of the problem.
/// Bodies without a declared length are capped by `DefaultBodyLimit` as they stream.
async fn refuse_large_bodies(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(len) if len > MAX_BODY_BYTES as u64 => {
            if len <= DRAIN_LIMIT {
                let _ = axum::body::to_bytes(req.into_body(), DRAIN_LIMIT as usize).await;
            }
            AppError::code(ErrorCode::PayloadTooLarge).into_response()
        }
        _ => next.run(req).await,
    }
}

async fn healthz(State(state): State<AppState>) -> Response {
    if state.store.ping().await {
        let backend = match state.store.backend() {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        Json(serde_json::json!({ "status": "ok", "store": backend })).into_response()
    } else {
        AppError::code(ErrorCode::StoreUnavailable).into_response()
    }
}

/// `GET /dev/config`: the provider URL and the accepted faults, for a demo page's dev panel.
async fn dev_config(
    State(state): State<AppState>,
) -> Result<Json<payonce_protocol::DevConfig>, AppError> {
    if !state.config.dev {
        return Err(AppError::code(ErrorCode::DevModeRequired));
    }
    Ok(Json(payonce_protocol::DevConfig {
        provider_url: state.provider_url.to_string(),
        faults: payonce_protocol::body::DevFault::ALL.to_vec(),
    }))
}

async fn not_found() -> AppError {
    AppError::code(ErrorCode::NotFound)
}

async fn method_not_allowed() -> AppError {
    AppError::code(ErrorCode::MethodNotAllowed)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    AppError::internal("handler panicked").into_response()
}

/// Dev CORS: any `http://localhost[:port]` or `http://127.0.0.1[:port]` page may call the API
/// with credentials, send the idempotency and dev fault headers, and read the headers a
/// client needs to act on (`Idempotent-Replayed`, `Retry-After`). Never on without `--dev`.
fn dev_cors() -> CorsLayer {
    let names = |list: &[&str]| -> Vec<HeaderName> {
        list.iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect()
    };
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|origin: &HeaderValue, _| {
            is_local_origin(origin.as_bytes())
        }))
        .allow_credentials(true)
        .allow_methods([Method::GET, Method::POST, Method::PATCH])
        .allow_headers(
            [header::CONTENT_TYPE, header::AUTHORIZATION]
                .into_iter()
                .chain(names(&[IDEMPOTENCY_KEY, DEV_FAULT]))
                .collect::<Vec<_>>(),
        )
        .expose_headers(names(&[
            IDEMPOTENT_REPLAYED,
            RETRY_AFTER,
            KEY_RETENTION,
            REQUEST_ID,
        ]))
        .max_age(Duration::from_secs(600))
}

/// True for `http://localhost`, `http://127.0.0.1`, with an optional numeric port.
pub(crate) fn is_local_origin(origin: &[u8]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    let Some(rest) = origin
        .strip_prefix("http://localhost")
        .or_else(|| origin.strip_prefix("http://127.0.0.1"))
    else {
        return false;
    };
    match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some(port) => (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// The system clock's milliseconds since the Unix epoch, for what is not a rule (the Redis
/// breaker, migration timestamps).
pub(crate) fn now_ms() -> i64 {
    clock::Clock::now_ms(&clock::SystemClock)
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Parses lower-case hex only: one spelling per value.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn local_origins() {
        for ok in [
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://localhost",
        ] {
            assert!(is_local_origin(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "https://localhost:5173",
            "http://localhost.evil.com",
            "http://127.0.0.1:80x",
            "http://localhost:",
            "null",
        ] {
            assert!(!is_local_origin(bad.as_bytes()), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn hex_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(unhex(&hex(&bytes)), Some(bytes));
        }

        #[test]
        fn unhex_never_panics(s in ".{0,80}") {
            let _ = unhex(&s);
        }

        #[test]
        fn origins_never_panic(s in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = is_local_origin(&s);
        }
    }
}
