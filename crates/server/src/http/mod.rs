//! The HTTP edge: the router, the middleware every request passes, and one thin file per
//! endpoint that turns requests into calls of the operations and results into answers.

mod admin;
mod cancel;
mod catalog;
pub(crate) mod cors;
pub(crate) mod extract;
pub(crate) mod journal;
mod metrics;
mod orders;
mod pay;
mod refund;
mod webhooks;

use crate::error::AppError;
use crate::state::AppState;
use crate::store::Store;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{KEY_RETENTION, REQUEST_ID};
use payonce_protocol::ErrorCode;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;

/// Largest request body accepted. Every body of this API is a few hundred bytes; 16 KiB
/// leaves room for a 20-line cart and a long address, and nothing for abuse.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Largest request target (path and query): ids and keys are short.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most header bytes (names and values) and headers of a request: a JWT is a few KiB.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// See [`MAX_HEADER_BYTES`]; hyper's own cap is higher (`src/server.rs`).
pub const MAX_HEADERS: usize = 100;
/// hyper's buffer per connection (`src/server.rs`): a head at our caps (target, headers and
/// their separators, about 41 KiB) fits with room, so ours answer with a problem; a longer
/// head is refused by hyper (a bare 431) as soon as this much of it has arrived.
pub const MAX_READ_BUFFER: usize = 64 * 1024;

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
    ("post", "/webhooks/stripe"),
    ("get", "/metrics"),
    ("post", "/payments/{id}/refund"),
    ("get", "/dev/mailbox"),
    ("get", "/dev/operator"),
    ("get", "/admin/"),
    ("get", "/admin/orders/{id}/timeline"),
    ("get", "/admin/orders/{id}/evidence"),
    ("get", "/admin/lookup"),
    ("get", "/admin/reviews"),
    ("post", "/admin/users/{id}/erase"),
    ("post", "/admin/reviews/{id}/resolve"),
];

/// The API as a router, with `more` routes beside its own (dev mode's: the edge does not
/// reach up to `src/dev/`, `src/server.rs` hands them in). `static_dir` files are served
/// for paths no route claims.
pub(crate) fn router(
    state: AppState,
    static_dir: Option<PathBuf>,
    more: Router<AppState>,
) -> Router {
    let cors = cors::layer(&state.ops.config.cors, state.ops.config.dev);
    let router = Router::new()
        .route(paths::CATALOG, get(catalog::list))
        .route(paths::ORDERS, post(orders::create))
        .route(&paths::order("{id}"), get(orders::get))
        .route(&paths::cart("{id}"), patch(orders::patch_cart))
        .route(&paths::pay("{id}"), post(pay::handler))
        .route(&paths::cancel("{id}"), post(cancel::handler))
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::OPENAPI, get(crate::openapi::serve))
        // The configured provider's events only: the other's route is an unknown path.
        .route(
            webhooks::route(state.ops.config.provider),
            post(webhooks::handler),
        )
        .route(paths::METRICS, get(metrics::serve))
        .route(&paths::refund("{id}"), post(refund::handler))
        .merge(admin::routes())
        .merge(more)
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
    let edge = state.ops.config.edge;
    let retention = HeaderValue::from(state.ops.config.key_retention.as_secs());
    let router = router
        .layer(axum::middleware::from_fn(move |req, next| {
            refuse_oversized(edge.body_timeout, req, next)
        }))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn(move |req, next| {
            bound_and_announce((edge.request_timeout, retention.clone()), req, next)
        }))
        // Outside the request timeout: a pay answered 408 is journaled too.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            journal::request,
        ))
        .layer(axum::middleware::from_fn(request_id))
        .with_state(state);
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Names every request: the client's `X-Request-Id` when it is a plausible id, else a new
/// one. It is on the response and on every log line of the request, so a client's report of
/// an opaque 500 can be matched to the logged detail.
/// The id is also a request extension, for the journal (`http/journal.rs`).
async fn request_id(mut req: axum::extract::Request, next: axum::middleware::Next) -> Response {
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
    req.extensions_mut().insert(journal::RequestId(id.clone()));
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

/// Bounds the whole request: past the limit the answer is 408 `REQUEST_TIMEOUT` (a pay's
/// own task goes on and settles; the client retries with its key). And every answer of a
/// keyed route (pay, refund), refusals before any rule ran included (400, 401, 404, 413,
/// 429), says how long its key replays: a client may drop a key once it knows the outcome,
/// and must keep retrying with it no longer than that. Routing has run: the route is known.
async fn bound_and_announce(
    (limit, retention): (Duration, HeaderValue),
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    static KEYED: LazyLock<[String; 2]> =
        LazyLock::new(|| [paths::pay("{id}"), paths::refund("{id}")]);
    let keyed = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|p| KEYED.iter().any(|k| k == p.as_str()));
    let mut res = tokio::time::timeout(limit, next.run(req))
        .await
        .unwrap_or_else(|_| AppError::code(ErrorCode::RequestTimeout).into_response());
    if keyed {
        res.headers_mut().insert(KEY_RETENTION, retention);
    }
    res
}

/// Bodies past [`MAX_BODY_BYTES`] are read and discarded up to this many bytes before the
/// refusal is sent: closing a socket with unread data makes TCP reset the connection, and a
/// client still writing would see the reset instead of the problem. Past it the read stops.
const DRAIN_LIMIT: usize = 4 * 1024 * 1024;

/// Refuses what hyper accepted but this API does not, as problems: a target over
/// [`MAX_URI_BYTES`] (414), headers over [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`] (431), a
/// body over [`MAX_BODY_BYTES`], declared or streamed (413). Bodies are read here, so
/// handlers get them whole; a client that stops sending one is refused (400) after
/// `body_timeout`. A refusal drains the body (up to [`DRAIN_LIMIT`]) and closes the
/// connection.
async fn refuse_oversized(
    body_timeout: Duration,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use futures_util::StreamExt;
    let (parts, body) = req.into_parts();
    let (h, uri) = (&parts.headers, &parts.uri);
    let head: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
    let declared = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let mut refused = if uri.path_and_query().map_or(0, |p| p.as_str().len()) > MAX_URI_BYTES {
        Some(ErrorCode::UriTooLong)
    } else if h.len() > MAX_HEADERS || head > MAX_HEADER_BYTES {
        Some(ErrorCode::HeadersTooLarge)
    } else {
        declared
            .filter(|&n: &usize| n > MAX_BODY_BYTES)
            .map(|_| ErrorCode::PayloadTooLarge)
    };
    let mut body = body.into_data_stream();
    // A client waiting for `100-continue` has sent no body: nothing to drain.
    let waits = h.contains_key(header::EXPECT) && refused.is_some();
    let (mut kept, mut drained) = (Vec::new(), if waits { DRAIN_LIMIT + 1 } else { 0 });
    while drained <= DRAIN_LIMIT {
        let chunk = match tokio::time::timeout(body_timeout, body.next()).await {
            Ok(Some(chunk)) => chunk.map_err(drop),
            Ok(None) => break,
            Err(_) => Err(()),
        };
        match chunk {
            Ok(c) if refused.is_none() && kept.len() + c.len() <= MAX_BODY_BYTES => {
                kept.extend_from_slice(&c);
            }
            Ok(c) => {
                refused.get_or_insert(ErrorCode::PayloadTooLarge);
                drained += c.len();
            }
            Err(()) if refused.is_none() => {
                return AppError::detail(ErrorCode::InvalidRequest, "the body could not be read")
                    .into_response()
            }
            Err(()) => break,
        }
    }
    let Some(code) = refused else {
        return next
            .run(axum::extract::Request::from_parts(parts, kept.into()))
            .await;
    };
    let mut res = AppError::code(code).into_response();
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

async fn healthz(State(store): State<Store>) -> Response {
    if store.ping().await {
        let backend = store.backend().name();
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
    // Decoded the way the file service decodes it.
    let decoded = percent_encoding::percent_decode_str(req.uri().path()).decode_utf8();
    let Ok(rel) = decoded else {
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

async fn not_found() -> AppError {
    AppError::code(ErrorCode::NotFound)
}

async fn method_not_allowed() -> AppError {
    AppError::code(ErrorCode::MethodNotAllowed)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    AppError::internal("handler panicked").into_response()
}
