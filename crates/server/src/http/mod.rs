//! The HTTP edge: the router, the middleware every request passes, and one thin file per
//! endpoint that turns requests into calls of the operations and results into answers.

mod cancel;
mod catalog;
pub(crate) mod extract;
mod metrics;
mod orders;
mod pay;
mod refund;
mod webhooks;

use crate::error::AppError;
use crate::state::AppState;
use crate::store::Backend;
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
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::timeout::{TimeoutBody, TimeoutLayer};

/// Largest request body accepted. Every body of this API is a few hundred bytes; 16 KiB
/// leaves room for a 20-line cart and a long address, and nothing for abuse.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

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
        .route(paths::CATALOG, get(catalog::list))
        .route(paths::ORDERS, post(orders::create))
        .route(&paths::order("{id}"), get(orders::get))
        .route(&paths::cart("{id}"), patch(orders::patch_cart))
        .route(&paths::pay("{id}"), post(pay::handler))
        .route(&paths::cancel("{id}"), post(cancel::handler))
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::OPENAPI, get(crate::openapi::serve))
        .route(paths::WEBHOOKS, post(webhooks::handler))
        .route(paths::METRICS, get(metrics::serve))
        .route(&paths::refund("{id}"), post(refund::handler))
        .merge(crate::dev::routes())
        .method_not_allowed_fallback(method_not_allowed);
    let router = match static_dir {
        Some(dir) => {
            // Symlinks are judged against the folder's real path.
            let root = std::fs::canonicalize(&dir).unwrap_or(dir);
            let files = tower_http::services::ServeDir::new(root.clone())
                .not_found_service(axum::routing::any(not_found).with_state(state.clone()));
            router.fallback(move |req: axum::extract::Request| {
                static_file(root.clone(), files.clone(), req)
            })
        }
        None => router.fallback(not_found),
    };
    let edge = state.config.edge;
    let router = router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_large_bodies))
        .layer(axum::middleware::from_fn(move |req, next| {
            body_timeout(edge.body_timeout, req, next)
        }))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            edge.request_timeout,
        ))
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

/// Bounds each wait for the next piece of the body: a client that declares a body and
/// stops sending fails its read (400 from the extractor) instead of holding the request.
async fn body_timeout(
    limit: Duration,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let req = req.map(|b| axum::body::Body::new(TimeoutBody::new(limit, b)));
    next.run(req).await
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

/// `--static-dir`: a path with a segment starting with `.` (`/.env`, `/.git/config`) or
/// that resolves, through a symlink, outside the folder is 404, as a missing file is;
/// anything else goes to the file service.
async fn static_file(
    root: PathBuf,
    files: tower_http::services::ServeDir<
        tower_http::set_status::SetStatus<axum::routing::MethodRouter>,
    >,
    req: axum::extract::Request,
) -> Response {
    use tower::ServiceExt;
    let Some(rel) = percent_decode(req.uri().path()) else {
        return not_found().await.into_response();
    };
    let hidden = rel.split(['/', '\\']).any(|seg| seg.starts_with('.'));
    if hidden || !inside(&root, &rel).await {
        return not_found().await.into_response();
    }
    match files.oneshot(req).await {
        Ok(res) => res.into_response(),
        Err(never) => match never {},
    }
}

/// True unless `rel` under `root` (or its `index.html`) is a path whose real location,
/// symlinks followed, lies outside `root`. A missing file is "inside": the file service
/// answers its 404.
async fn inside(root: &std::path::Path, rel: &str) -> bool {
    let candidate = root.join(rel.trim_start_matches('/'));
    for path in [candidate.clone(), candidate.join("index.html")] {
        if let Ok(real) = tokio::fs::canonicalize(&path).await {
            if !real.starts_with(root) {
                return false;
            }
        }
    }
    true
}

/// `%XX`-decodes a path the way the file service will; `None` for bad escapes or
/// non-UTF-8.
fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
        fn origins_never_panic(s in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = is_local_origin(&s);
        }
    }
}
