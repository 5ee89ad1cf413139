//! `POST /orders/{id}/pay` over HTTP: the extractors, the replay of a finished attempt
//! before anything else, then the rules (`src/ops/pay.rs`) in a task of their own, and the dev
//! faults that act on the answer.

use crate::auth::AuthUser;
use crate::error::{AppError, AppResult};
use crate::faults::failpoint;
use crate::faults::Failpoint;
use crate::http::extract::{ApiJson, DevFaultHeader, IdemKeyHeader, PathId};
use crate::limits::Limits;
use crate::metrics::{self, PayOutcome, RedisLookup, ReplaySource};
use crate::ops::orders::load_owned;
use crate::ops::pay;
use crate::replay::{self, First, Replays};
use crate::reply::Reply;
use crate::state::OpsState;
use crate::store::journal::About;
use crate::store::orders::OrderRow;
use axum::extract::{FromRef, State};
use axum::response::{IntoResponse, Response};
use payonce_protocol::body::DevFault;
use payonce_protocol::IdempotencyKey;
use payonce_protocol::{pay_extras, AttemptStatus, ErrorCode, Extras, PayRequest};
use payonce_rules::policy::Bucket;
use payonce_rules::Record;

/// Longest accepted payment method id.
const MAX_METHOD_LEN: usize = 64;

/// True when a payment method id is acceptable (checked before any rule looks at it).
fn method_is_valid(method: &str) -> bool {
    !method.is_empty()
        && method.len() <= MAX_METHOD_LEN
        && method
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Why the checkout extras are refused (400), or `None`: only names the server knows
/// (`pay_extras::KNOWN`, bound into the fingerprint by the rules), each with a value of 1 to
/// `MAX_VALUE_LEN` bytes without control characters (the fingerprint's spelling relies on it).
fn extras_problem(extras: &Extras) -> Option<String> {
    for (name, value) in extras.iter() {
        if !pay_extras::KNOWN.contains(&name) {
            return Some(format!(
                "unknown checkout extra {name:?}; this server accepts {}",
                pay_extras::KNOWN.join(", ")
            ));
        }
        if value.is_empty()
            || value.len() > pay_extras::MAX_VALUE_LEN
            || value.chars().any(char::is_control)
        {
            return Some(format!(
                "checkout extra {name:?} must be 1..={} bytes without control characters",
                pay_extras::MAX_VALUE_LEN
            ));
        }
    }
    None
}

/// The handler.
pub(crate) async fn handler(
    State(state): State<OpsState>,
    AuthUser(user): AuthUser,
    PathId(order_id): PathId,
    IdemKeyHeader(key): IdemKeyHeader,
    DevFaultHeader(fault): DevFaultHeader,
    ApiJson(req): ApiJson<PayRequest>,
) -> Response {
    crate::journal::learn(|k| {
        k.user = Some(user.clone());
        k.order_id = Some(order_id.to_string());
        k.key = key.as_ref().ok().map(|k| k.as_str().to_owned());
        k.detail
            .insert("orderVersion".into(), req.order_version.into());
    });
    let refused = extras_problem(&req.extras).or_else(|| {
        (!method_is_valid(&req.payment_method_id))
            .then(|| "paymentMethodId must be 1..=64 characters of [A-Za-z0-9_]".to_owned())
    });
    // A retry of a finished attempt is answered from its record (memory, Redis or the key
    // row) alone; anything else goes on to the rules in their order, starting from the
    // record read here, so the full path does not look the key up twice.
    let mut read = None;
    if let (Ok(k), None) = (&key, &refused) {
        let parts = (&Replays::from_ref(&state), &*state.limits);
        match replay_first(parts, &user, &order_id, k, &req).await {
            Ok(r) => read = r,
            Err(replayed) => return respond(replayed, fault),
        }
    }
    // Rule 1: the order must be the caller's, then the key must be there and well formed.
    let (order, first) = match read {
        Some(Ok((order, record))) => (order, Some(record)),
        Some(Err(code)) => return AppError::code(code).into_response(),
        None => match load_owned(&state.store, &order_id, &user).await {
            Ok(o) => (o, None),
            Err(e) => return e.into_response(),
        },
    };
    crate::journal::learn(|k| {
        k.detail.insert("amount".into(), order.amount.into());
        k.detail
            .insert("currency".into(), order.currency.clone().into());
        k.detail
            .insert("currentVersion".into(), order.version.into());
    });
    let key = match key {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    if let Some(why) = refused {
        return AppError::detail(ErrorCode::InvalidRequest, why).into_response();
    }
    // The work runs in its own task: if the client hangs up mid-charge, the attempt is still
    // settled and stored, ready to replay on the retry. Boxed first: the pay's future is
    // large, and `tokio::spawn` moves what it is given several times on its way into the
    // task (7 % of a pay's instructions, docs/benchmarks.md "A PostgreSQL pay, profiled").
    let task = tokio::spawn(Box::pin(crate::journal::carry(crate::faults::with_fault(
        fault,
        answer(state, user, order, key, req, first),
    ))));
    let result = match task.await {
        Ok(r) => r,
        Err(e) => Err(AppError::task("pay")(e)),
    };
    respond(result, fault)
}

/// What the replay path read for the rules (`None`: nothing, they read it themselves;
/// `Some(Err)`: the order is not the caller's), or `Err` with the answer of a finished
/// attempt it replayed, through the per-request rate limit and counted like any other.
async fn replay_first(
    (replays, limits): (&Replays, &Limits),
    user: &str,
    order_id: &str,
    key: &IdempotencyKey,
    req: &PayRequest,
) -> Result<Option<Result<(OrderRow, Option<Record>), ErrorCode>>, AppResult<Reply>> {
    match replay::first(replays, user, order_id, key, req).await {
        First::Answered(answer, source) => {
            let about = About {
                user: Some(user),
                order_id: Some(order_id),
                key: Some(key.as_str()),
                ..About::default()
            };
            crate::journal::decided(&payonce_rules::decision::replayed(), &about).await;
            // Through the per-request rate limit, and counted like any other answer.
            let result = limits.check(Bucket::Requests, user).map(|()| answer);
            if result.is_ok() && source == ReplaySource::Redis {
                metrics::redis_lookup(RedisLookup::Replay);
            }
            count(&result, source);
            Err(result)
        }
        First::Read(r) => Ok(Some(r.ok_or(ErrorCode::OrderNotFound))),
        First::Continue => Ok(None),
    }
}

/// One pay request after authentication and input checks: the rate limit, the rules (behind
/// the Redis claim marker when Redis is on), and the metrics of the answer.
async fn answer(
    state: OpsState,
    user: String,
    order: OrderRow,
    key: IdempotencyKey,
    req: PayRequest,
    first: Option<Option<Record>>,
) -> AppResult<Reply> {
    if let Err(limited) = state.limits.check(Bucket::Requests, &user) {
        let result = Err(limited);
        count(&result, ReplaySource::Database);
        return result;
    }
    let (result, source) = pay::pay(&state, &user, &order, &key, &req, first).await;
    count(&result, source);
    result
}

/// Counts one answer: its status and outcome (`succeeded`, `processing`, or the problem
/// code), and where a replayed answer came from.
fn count(result: &AppResult<Reply>, source: ReplaySource) {
    match result {
        Ok(a) => {
            let outcome = match a.status() {
                200 => PayOutcome::Attempt(AttemptStatus::Succeeded),
                202 => PayOutcome::Attempt(AttemptStatus::Processing),
                _ => serde_json::from_str::<serde_json::Value>(&a.answer.body)
                    .ok()
                    .and_then(|v| v["code"].as_str().and_then(ErrorCode::parse))
                    .map_or(PayOutcome::Unknown, PayOutcome::Problem),
            };
            metrics::pay_outcome(a.status(), outcome, a.replayed.then_some(source));
        }
        Err(e) => {
            let p = e.to_problem();
            metrics::pay_outcome(p.status, PayOutcome::Problem(p.code), None);
        }
    }
}

/// The HTTP answer for a pay result, with the dev faults that act on it.
fn respond(result: AppResult<Reply>, fault: Option<DevFault>) -> Response {
    if matches!(&result, Ok(a) if a.is_final() && !a.replayed) {
        failpoint(Failpoint::AfterSave);
    }
    if let Some(dropped) = crate::faults::dropped_response(fault) {
        return dropped;
    }
    match result {
        Ok(answer) => answer.into_response(),
        Err(e) => e.into_response(),
    }
}
