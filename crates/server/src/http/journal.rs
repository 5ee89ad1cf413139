//! The request entries of the journal (docs/operating.md, "The journal"): every pay, cancel
//! and refund request is run under a journal scope (`src/journal.rs`) and, once answered,
//! journaled with its request id, user, order, key, what the handler bound (version,
//! amount, currency), the answer's status and problem code, whether it was a replay, and
//! how long it took; the provider calls it made are written in the same transaction.

use crate::journal::{self, Scope};
use crate::state::AppState;
use crate::store::journal::{next_seq, Entry};
use axum::extract::{MatchedPath, State};
use axum::response::Response;
use payonce_protocol::admin::{actor, kind, member};
use payonce_protocol::body::paths;
use payonce_protocol::headers::IDEMPOTENT_REPLAYED;
use serde_json::{json, Value};
use std::sync::LazyLock;
use std::time::Instant;

/// The request's id as the `request_id` middleware chose it (`src/http/mod.rs`).
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) String);

/// A problem body is a few hundred bytes; past this the code is not read.
const PROBLEM_READ_LIMIT: usize = 64 * 1024;

/// The journaled routes and the kind of their entries.
static JOURNALED: LazyLock<[(String, &'static str); 3]> = LazyLock::new(|| {
    [
        (paths::pay("{id}"), kind::PAY),
        (paths::cancel("{id}"), kind::CANCEL),
        (paths::refund("{id}"), kind::REFUND),
    ]
});

/// The middleware: other routes pass untouched.
pub(crate) async fn request(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let matched = req.extensions().get::<MatchedPath>().map(|p| p.as_str());
    let Some(kind) = JOURNALED
        .iter()
        .find(|(p, _)| Some(p.as_str()) == matched)
        .map(|(_, k)| *k)
    else {
        return webhook_or_other(&state, req, next).await;
    };
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .map_or_else(String::new, |r| r.0.clone());
    // The path's one id: the order's (pay, cancel) or the payment's (refund).
    let path_id = req.uri().path().split('/').nth(2).map(str::to_owned);
    let scope = Scope::request(
        &request_id,
        state.ops.store.clone(),
        state.ops.clock.clone(),
    );
    let (at, seq, started) = (scope.now(), next_seq(), Instant::now());
    let res = journal::scoped(scope.clone(), next.run(req)).await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (res, code) = problem_code(res).await;
    let known = scope.known();
    if known.user.is_none() {
        // Refused before authentication: an unauthenticated client must not be able to
        // grow the store (the answer is still logged, with its request id).
        return res;
    }
    let mut detail = json!({
        (member::SEQ): seq,
        "status": res.status().as_u16(),
        "code": code,
        "replayed": res.headers().contains_key(IDEMPOTENT_REPLAYED),
        "ms": ms,
    });
    if let Value::Object(d) = &mut detail {
        d.extend(known.detail);
        if kind == kind::REFUND {
            d.insert("paymentId".into(), path_id.clone().into());
        }
    }
    let order_id = match kind {
        k if k == kind::REFUND => known.order_id,
        _ => known.order_id.or(path_id),
    };
    let entry = Entry {
        at,
        actor: actor::REQUEST,
        kind,
        request_id: scope.request_id().map(str::to_owned),
        user: known.user,
        order_id,
        // Only a key the handler found well formed: a malformed header is the client's
        // input, which the journal does not copy.
        key: known.key,
        provider_id: None,
        detail,
    };
    scope.flush(entry).await;
    res
}

/// A webhook delivery runs under a scope of its own, so the provider calls it makes are
/// journaled as the webhook's; a delivery itself is not journaled here (a forged one must not
/// grow the store). Any other route passes untouched.
async fn webhook_or_other(
    state: &AppState,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let matched = req.extensions().get::<MatchedPath>().map(|p| p.as_str());
    if !matches!(matched, Some(paths::WEBHOOKS | paths::STRIPE_WEBHOOKS)) {
        return next.run(req).await;
    }
    let id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
    let (store, clock) = (state.ops.store.clone(), state.ops.clock.clone());
    let scope = Scope::immediate(actor::WEBHOOK, id.as_deref(), store, clock);
    journal::scoped(scope, next.run(req)).await
}

/// The problem code of an error answer (its body read and put back), else `None`.
async fn problem_code(res: Response) -> (Response, Option<String>) {
    if res.status().as_u16() < 400 {
        return (res, None);
    }
    let (parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, PROBLEM_READ_LIMIT).await else {
        return (Response::from_parts(parts, axum::body::Body::empty()), None);
    };
    let code = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_owned));
    (Response::from_parts(parts, bytes.into()), code)
}
