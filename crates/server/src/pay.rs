//! `POST /orders/{id}/pay`: the pay rules of issue #3, in their order.
//!
//! 1. Authenticate; the order must be the caller's (404). Then the key: missing or
//!    malformed is a 400.
//! 2. Look the key up in the caller's scope before anything else ([`decide`]): different
//!    details → 422; final → replay the stored answer byte for byte; processing → wait a
//!    little for it, then 409 IN_PROGRESS; tombstone → 409 ATTEMPT_CANCELLED.
//! 3. A new key is claimed in one transaction ([`claim`]): version, order lock, stock, and
//!    the insert under the unique constraint, all conditional statements.
//! 4. The provider is called with the saved provider key, no transaction open
//!    ([`drive`]), and the result is settled in one transaction ([`settle`]).
//! 5. A processing key whose lease expired is taken over and settled from what the provider
//!    says about its provider key ([`reconcile`]); only "no such charge" re-drives it.
//! 6. Every change is written to the audit trail in the same transaction.
//!
//! A retry of a finished attempt is answered before rule 1 from the key row alone
//! ([`replay_from_row`]: one `SELECT`, or none when Redis holds the answer), but only when
//! rule 1 and rule 2 could give no other answer: the caller's own row, for the order in the
//! URL, with the same details. Everything else takes the rules above in their order.

use crate::auth::AuthUser;
use crate::error::{problem_body, AppError, AppResult};
use crate::extract::{ApiJson, DevFaultHeader, IdemKeyHeader, PathId};
use crate::faults::{self, failpoint};
use crate::orders::load_owned;
use crate::provider_client::{ChargeOutcome, Lookup};
use crate::store::attempts::{self as db, AttemptRow, Final, NewAttempt};
use crate::store::audit::{self, Entry};
use crate::store::orders::{get_order, OrderRow};
use crate::store::queue;
use crate::{now_ms, AppState};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use payonce_protocol::body::DevFault;
use payonce_protocol::headers::{IDEMPOTENT_REPLAYED, KEY_RETENTION, RETRY_AFTER};
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_protocol::provider::{Charge, ChargeRequest, ChargeStatus};
use payonce_protocol::{
    AttemptStatus, ErrorCode, IdempotencyKey, OrderLine, OrderStatus, PayRequest, PayResponse,
    Payment, Problem,
};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::time::Instant;

/// The endpoint, as bound into every fingerprint: a key used on another endpoint (e.g. a
/// future refund) can never match a pay.
const ENDPOINT: &str = "POST /orders/{id}/pay";

/// How often a request waiting for its own key in flight looks again.
const POLL: Duration = Duration::from_millis(25);

/// Longest accepted payment method id.
const MAX_METHOD_LEN: usize = 64;

/// What the server knows about one pay request, all from its own data except the version
/// and method the client chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Details<'a> {
    pub user: &'a str,
    pub order_id: &'a str,
    pub order_version: i64,
    pub amount: i64,
    pub currency: &'a str,
    pub payment_method_id: &'a str,
}

/// SHA-256 over a length-prefixed encoding of the endpoint and [`Details`]: two different
/// tuples can never encode to the same bytes.
pub(crate) fn fingerprint(d: &Details<'_>) -> String {
    let mut h = Sha256::new();
    let version = d.order_version.to_string();
    let amount = d.amount.to_string();
    for field in [
        ENDPOINT,
        d.user,
        d.order_id,
        &version,
        &amount,
        d.currency,
        d.payment_method_id,
    ] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The provider key for `(user, key)`: derived, so it is stable across retries and
/// processes, and scoped by user, so two users who happen to send the same key can never
/// share a charge at the provider.
pub(crate) fn provider_key(user: &str, key: &IdempotencyKey) -> String {
    let mut h = Sha256::new();
    h.update(b"payonce.provider-key.v1\0");
    h.update(user.as_bytes());
    h.update(b"\0");
    h.update(key.as_str().as_bytes());
    format!("pk_{}", &hex::encode(h.finalize())[..40])
}

/// The fingerprint this request would have for the attempt `row`. The amount is a function
/// of (order, version): the current one when the request names the current version, the
/// amount recorded with the attempt when it names the attempt's version. Any other version
/// cannot be the attempt's, so there is nothing to compare (`None` → mismatch).
pub(crate) fn request_fingerprint(
    row: &AttemptRow,
    order: &OrderRow,
    user: &str,
    req: &PayRequest,
) -> Option<String> {
    let version = i64::try_from(req.order_version).ok()?;
    let (amount, currency) = if version == order.version {
        (order.amount, order.currency.as_str())
    } else if Some(version) == row.order_version {
        (row.amount?, row.currency.as_deref()?)
    } else {
        return None;
    };
    Some(fingerprint(&Details {
        user,
        order_id: &order.id,
        order_version: version,
        amount,
        currency,
        payment_method_id: &req.payment_method_id,
    }))
}

/// Rule 2 from the key row alone, before the order is read: the stored answer when `row`
/// is the caller's final attempt for `order_id` and this request has its details; `None`
/// for anything else, which the full path (rule 1 first) then decides.
///
/// Why no order read is needed for this one answer: the row exists only because its order
/// was the caller's when it was claimed (the claim locks the order by user), orders are never
/// deleted or given to another user, and a row for this order id is therefore proof of
/// ownership. The fingerprint is computed from the row's own version, amount and currency:
/// it was made from exactly those at claim time, and only a request naming that version can
/// match it; a version's amount never changes (every cart change that changes the amount
/// bumps the version), so the full path's [`request_fingerprint`] gives the same value for
/// such a request. Every answer given here is one the full path would give.
pub(crate) fn replay_from_row(
    row: &AttemptRow,
    user: &str,
    order_id: &str,
    req: &PayRequest,
) -> Option<PayAnswer> {
    if row.user_id != user || row.order_id != order_id || !row.status.is_final() {
        return None;
    }
    if i64::try_from(req.order_version).ok()? != row.order_version? {
        return None;
    }
    let fp = fingerprint(&Details {
        user,
        order_id,
        order_version: row.order_version?,
        amount: row.amount?,
        currency: row.currency.as_deref()?,
        payment_method_id: &req.payment_method_id,
    });
    match decide(Some(row), Some(&fp), order_id, now_ms(), false) {
        NextAction::Replay { status, body } => Some(PayAnswer::replay(status, body)),
        _ => None,
    }
}

/// What to do with a request, given the caller's row for its key (rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NextAction {
    /// The key is new: claim it (rule 3).
    StartProcessing,
    /// The key was used with other details: 422, nothing charged.
    Mismatch(AttemptStatus),
    /// The attempt is final: replay its stored answer.
    Replay { status: u16, body: String },
    /// A cancel tombstone holds the key: this attempt can never charge.
    Cancelled,
    /// Someone holds the lease and may be charging: look again shortly.
    Wait,
    /// Someone holds the lease and we waited long enough: 409 IN_PROGRESS.
    InProgress,
    /// Processing, but the lease expired: take it over and ask the provider (rule 5).
    Reconcile,
}

/// Rule 2 as a pure function.
pub(crate) fn decide(
    row: Option<&AttemptRow>,
    request_fp: Option<&str>,
    order_id: &str,
    now: i64,
    may_wait: bool,
) -> NextAction {
    let Some(row) = row else {
        return NextAction::StartProcessing;
    };
    match &row.fingerprint {
        // A tombstone knows only its order: the same order is cancelled, another is misuse.
        None if row.order_id != order_id => return NextAction::Mismatch(row.status),
        None => {}
        Some(stored) if Some(stored.as_str()) != request_fp => {
            return NextAction::Mismatch(row.status)
        }
        Some(_) => {}
    }
    match row.status {
        AttemptStatus::Cancelled => NextAction::Cancelled,
        AttemptStatus::Processing => match row.locked_until {
            Some(until) if until > now && may_wait => NextAction::Wait,
            Some(until) if until > now => NextAction::InProgress,
            _ => NextAction::Reconcile,
        },
        _ => match (row.response_status, &row.response_body) {
            (Some(status), Some(body)) => NextAction::Replay {
                status: u16::try_from(status).unwrap_or(500),
                body: body.clone(),
            },
            // A final row always has its answer (one UPDATE writes both); if it ever did
            // not, refusing to guess is the safe answer.
            _ => NextAction::InProgress,
        },
    }
}

/// A pay answer that is not an error: what was (or will be) stored, plus headers.
pub(crate) struct PayAnswer {
    status: u16,
    body: String,
    replayed: bool,
    retry_after: Option<u64>,
}

impl PayAnswer {
    /// A stored final answer, replayed.
    pub(crate) fn replay(status: u16, body: String) -> Self {
        Self {
            status,
            body,
            replayed: true,
            retry_after: None,
        }
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The exact body bytes.
    pub(crate) fn body(&self) -> &str {
        &self.body
    }

    /// True when this is a stored answer sent again.
    pub(crate) fn replayed(&self) -> bool {
        self.replayed
    }

    /// True unless the answer is "still processing".
    pub(crate) fn is_final(&self) -> bool {
        self.status != 202
    }

    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut res = (status, self.body).into_response();
        let h = res.headers_mut();
        let content_type = if self.status >= 400 {
            PROBLEM_CONTENT_TYPE
        } else {
            "application/json"
        };
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if self.replayed {
            h.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        if let Some(secs) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

/// True when a payment method id is acceptable (checked before any rule looks at it).
fn method_is_valid(method: &str) -> bool {
    !method.is_empty()
        && method.len() <= MAX_METHOD_LEN
        && method
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `POST /orders/{id}/pay`.
pub(crate) async fn handler(
    State(state): State<AppState>,
    AuthUser(user): AuthUser,
    PathId(order_id): PathId,
    IdemKeyHeader(key): IdemKeyHeader,
    DevFaultHeader(fault): DevFaultHeader,
    ApiJson(req): ApiJson<PayRequest>,
) -> Response {
    let retention = state.config.key_retention.as_secs();
    let method_ok = method_is_valid(&req.payment_method_id);
    // A retry of a finished attempt is answered from its key row (or its Redis entry)
    // alone; anything else goes on to the rules in their order, starting from the row read
    // here, so the full path does not look the key up twice.
    let mut first_row = None;
    if let (Ok(k), true) = (&key, method_ok) {
        match crate::fast_path::replay_first(&state, &user, &order_id, k, &req).await {
            crate::fast_path::First::Answered(result) => return respond(result, fault, retention),
            crate::fast_path::First::Continue(row) => first_row = row,
        }
    }
    // Rule 1: the order must be the caller's, then the key must be there and well formed.
    let order = match load_owned(&state, &order_id, &user).await {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    let key = match key {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    if !method_ok {
        return AppError::detail(
            ErrorCode::InvalidRequest,
            "paymentMethodId must be 1..=64 characters of [A-Za-z0-9_]",
        )
        .into_response();
    }
    // The work runs in its own task: if the client hangs up mid-charge, the attempt is still
    // settled and stored, ready to replay on the retry.
    let crash = fault == Some(DevFault::CrashAfterCharge);
    // (through the rate limit, the Redis fast path and the metrics: `fast_path`)
    let task = tokio::spawn(faults::CRASH_AFTER_CHARGE.scope(
        crash,
        crate::fast_path::pay(state, user, order, key, req, first_row),
    ));
    let result = match task.await {
        Ok(r) => r,
        Err(e) => Err(AppError::internal(format!("pay task failed: {e}"))),
    };
    respond(result, fault, retention)
}

/// The HTTP answer for a pay result, with the dev faults that act on it.
fn respond(result: AppResult<PayAnswer>, fault: Option<DevFault>, retention: u64) -> Response {
    if matches!(&result, Ok(a) if a.is_final() && !a.replayed) {
        failpoint(faults::AFTER_SAVE);
    }
    if fault == Some(DevFault::DropResponse) {
        return faults::dropped_response();
    }
    let mut res = match result {
        Ok(answer) => answer.into_response(),
        Err(e) => e.into_response(),
    };
    // Every answer of the rules says how long its key replays (seed 000: keep keys at least
    // the client retry window; a client may drop a key once it knows the outcome).
    res.headers_mut()
        .insert(KEY_RETENTION, HeaderValue::from(retention));
    res
}

/// Rules 2 to 5 for one request. A key in flight is waited on until `deadline`.
///
/// `first`: the caller's key row as read just before the order (by [`handler`]), used for
/// the first decision instead of a second lookup; `None` to look it up here. A row read a
/// moment earlier is as good as a fresh one: final rows and tombstones never change (until
/// deleted at the end of retention), and every decision taken on a processing row is a
/// conditional write (take-over) or a wait, which looks again when the row moved meanwhile.
/// (A missing row is never handed on: see [`crate::fast_path::replay_first`].)
pub(crate) async fn run(
    state: AppState,
    user: String,
    order: OrderRow,
    key: IdempotencyKey,
    req: PayRequest,
    deadline: Instant,
    mut first: Option<AttemptRow>,
) -> AppResult<PayAnswer> {
    // Each turn either ends or observes progress by someone else (a row appeared, a lease
    // was taken, an attempt settled); the bound only guards against a livelock bug.
    // Set once this request claimed the key: a stored answer it then finds (a webhook settled
    // the attempt while this request waited on the provider) is this request's own outcome,
    // not a replay, so it must not say `Idempotent-Replayed: true`.
    let mut claimed_here = false;
    for _ in 0..10_000 {
        let row = match first.take() {
            Some(row) => Some(row),
            None => db::find(state.store.pool(), &user, key.as_str()).await?,
        };
        let fp = row
            .as_ref()
            .and_then(|r| request_fingerprint(r, &order, &user, &req));
        let action = decide(
            row.as_ref(),
            fp.as_deref(),
            &order.id,
            now_ms(),
            Instant::now() < deadline,
        );
        match action {
            NextAction::StartProcessing => {
                // Only a new key costs a token of this bucket (see `limits`).
                state.limits.new_attempt(&user)?;
                match claim(&state, &user, &order, &key, &req).await? {
                    Claimed::Won(claim) => {
                        claimed_here = true;
                        failpoint(faults::AFTER_CLAIM);
                        // The claim's outbox row, executed inline by this request.
                        crate::metrics::outbox(crate::metrics::OutboxResult::ExecutedInline);
                        match drive(&state, &claim).await? {
                            Some(answer) => return Ok(answer),
                            None => continue,
                        }
                    }
                    Claimed::Lost => continue,
                }
            }
            NextAction::Replay { status, body } => {
                return Ok(PayAnswer {
                    status,
                    body,
                    replayed: !claimed_here,
                    retry_after: None,
                });
            }
            NextAction::Mismatch(status) => {
                return Err(AppError::with(
                    ErrorCode::KeyReusedWithDifferentDetails,
                    |p| {
                        p.attempt_status = Some(status);
                        p.detail = Some("this key was used before with different order, version, amount or payment method".into());
                    },
                ));
            }
            NextAction::Cancelled => {
                return Err(AppError::attempt(
                    ErrorCode::AttemptCancelled,
                    AttemptStatus::Cancelled,
                ))
            }
            NextAction::Wait => tokio::time::sleep(POLL).await,
            NextAction::InProgress => return Err(in_progress(&state)),
            NextAction::Reconcile => {
                let Some(row) = row else { continue };
                let Some(claim) = take_over(&state, &row, &order, &user, "a retry").await? else {
                    continue; // another retry took it; look again
                };
                match reconcile(&state, &claim).await? {
                    Some(answer) => return Ok(answer),
                    None => continue,
                }
            }
        }
    }
    Err(in_progress(&state))
}

/// Takes over the expired lease of a processing attempt (exactly one contender wins) and
/// records why. `actor` is the user (a retry) or `system` (the reconciliation job).
pub(crate) async fn take_over(
    state: &AppState,
    row: &AttemptRow,
    order: &OrderRow,
    actor: &str,
    who: &str,
) -> AppResult<Option<Claim>> {
    let token = uuid::Uuid::new_v4().to_string();
    let now = now_ms();
    let until = now + lease_ms(state);
    if !db::take_expired_lease(state.store.pool(), &row.id, now, until, &token).await? {
        return Ok(None);
    }
    let claim = Claim::from_row(row, order, actor, token)?;
    let reason = format!("lease expired; {who} asks the provider about the provider key");
    let entry = Entry {
        actor,
        entity: "attempt",
        entity_id: &claim.attempt_id,
        from: Some("processing"),
        to: "processing",
        reason: &reason,
    };
    audit::record(state.store.pool(), &entry, now).await?;
    Ok(Some(claim))
}

fn in_progress(state: &AppState) -> AppError {
    AppError::with(ErrorCode::InProgress, |p| {
        p.attempt_status = Some(AttemptStatus::Processing);
        p.retry_after = Some(state.config.retry_after_secs);
    })
}

fn lease_ms(state: &AppState) -> i64 {
    i64::try_from(state.config.lease.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Everything needed to charge and settle one claimed attempt.
pub(crate) struct Claim {
    attempt_id: String,
    /// Who the audit trail names for this claim's changes.
    actor: String,
    order_id: String,
    amount: i64,
    currency: String,
    payment_method_id: String,
    provider_key: String,
    lease_token: String,
    /// The order's lines at the attempt's version (the order is locked, so they cannot
    /// have changed): the stock to give back if nothing is charged.
    lines: Vec<OrderLine>,
}

impl Claim {
    fn from_row(
        row: &AttemptRow,
        order: &OrderRow,
        actor: &str,
        lease_token: String,
    ) -> AppResult<Self> {
        let missing = || {
            AppError::internal(format!(
                "processing attempt {} lacks its charge details",
                row.id
            ))
        };
        Ok(Self {
            attempt_id: row.id.clone(),
            actor: actor.to_owned(),
            order_id: row.order_id.clone(),
            amount: row.amount.ok_or_else(missing)?,
            currency: row.currency.clone().ok_or_else(missing)?,
            payment_method_id: row.payment_method_id.clone().ok_or_else(missing)?,
            provider_key: row.provider_key.clone().ok_or_else(missing)?,
            lease_token,
            lines: order.items.clone(),
        })
    }
}

pub(crate) enum Claimed {
    Won(Claim),
    /// The key appeared meanwhile (another request claimed or cancelled it): decide again.
    Lost,
}

/// Rule 3, in one write transaction. Every check is a conditional statement whose row
/// count decides; the reads only choose which error to report.
pub(crate) async fn claim(
    state: &AppState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
    req: &PayRequest,
) -> AppResult<Claimed> {
    // The version must be the one we loaded, so the amount we charge is the amount the
    // customer saw; `lock_order` below re-checks it atomically.
    if i64::try_from(req.order_version).ok() != Some(order.version) {
        return Err(order_changed(order.version));
    }
    let attempt_id = format!("att_{}", uuid::Uuid::new_v4().simple());
    let lease_token = uuid::Uuid::new_v4().to_string();
    let pk = provider_key(user, key);
    let details = Details {
        user,
        order_id: &order.id,
        order_version: order.version,
        amount: order.amount,
        currency: &order.currency,
        payment_method_id: &req.payment_method_id,
    };
    let fp = fingerprint(&details);
    let now = now_ms();
    let mut tx = state.store.begin_write().await?;
    let new = NewAttempt {
        id: &attempt_id,
        user,
        key: key.as_str(),
        order_id: &order.id,
        fingerprint: &fp,
        order_version: order.version,
        amount: order.amount,
        currency: &order.currency,
        payment_method_id: &req.payment_method_id,
        provider_key: &pk,
        locked_until: now + lease_ms(state),
        lease_token: &lease_token,
        now,
    };
    if !db::insert_processing(&mut *tx, &new).await? {
        // Which unique slot was taken? Our (user, key): decide again with the row. Otherwise
        // it is "one processing attempt per order": the order is busy.
        let ours = db::find(&mut *tx, user, key.as_str()).await?.is_some();
        let current = get_order(&mut *tx, &order.id, user).await?;
        tx.rollback().await?;
        return if ours {
            Ok(Claimed::Lost)
        } else {
            Err(order_conflict(current.as_ref(), order.version))
        };
    }
    if !db::lock_order(&mut *tx, &order.id, user, order.version, &attempt_id, now).await? {
        let current = get_order(&mut *tx, &order.id, user).await?;
        tx.rollback().await?;
        return Err(order_conflict(current.as_ref(), order.version));
    }
    for line in by_sku(&order.items) {
        if !db::reserve_stock(&mut *tx, line).await? {
            tx.rollback().await?;
            return Err(AppError::with(ErrorCode::OutOfStock, |p| {
                p.sku = Some(line.sku.clone())
            }));
        }
    }
    let version_note = format!("pay accepted for order version {}", order.version);
    let entry = Entry {
        actor: user,
        entity: "attempt",
        entity_id: &attempt_id,
        from: None,
        to: "processing",
        reason: &version_note,
    };
    audit::record(&mut *tx, &entry, now).await?;
    let entry = Entry {
        actor: user,
        entity: "order",
        entity_id: &order.id,
        from: Some("unpaid"),
        to: "unpaid (payment active)",
        reason: "attempt claimed; cart locked; stock reserved",
    };
    audit::record(&mut *tx, &entry, now).await?;
    // The outbox row: "charge this provider key", committed with the claim. This request
    // executes it inline right after the commit; if the process dies first, the outbox
    // worker finds it (src/jobs.rs). The provider is never called inside a transaction.
    queue::insert_outbox(&mut *tx, &attempt_id, &pk, now).await?;
    tx.commit().await?;
    Ok(Claimed::Won(Claim {
        attempt_id,
        actor: user.to_owned(),
        order_id: order.id.clone(),
        amount: order.amount,
        currency: order.currency.clone(),
        payment_method_id: req.payment_method_id.clone(),
        provider_key: pk,
        lease_token,
        lines: order.items.clone(),
    }))
}

/// Lines in SKU order. Every transaction that touches several catalog rows locks them in
/// this one order, so two orders sharing SKUs can never deadlock on PostgreSQL.
fn by_sku(lines: &[OrderLine]) -> Vec<&OrderLine> {
    let mut sorted: Vec<&OrderLine> = lines.iter().collect();
    sorted.sort_by(|a, b| a.sku.cmp(&b.sku));
    sorted
}

fn order_changed(current: i64) -> AppError {
    AppError::with(ErrorCode::OrderChanged, |p| {
        p.current_version = u64::try_from(current).ok()
    })
}

/// Why the order refused a claim: it moved to another version, or it is paid or busy.
fn order_conflict(current: Option<&OrderRow>, expected_version: i64) -> AppError {
    match current {
        Some(o) if o.version != expected_version => order_changed(o.version),
        Some(o) if o.status != OrderStatus::Unpaid || o.active_attempt.is_some() => {
            AppError::code(ErrorCode::PaymentAlreadyActive)
        }
        // The blocker finished between our statement and this read; still refuse rather
        // than loop: the client retries with its key and gets a fresh decision.
        Some(_) => AppError::code(ErrorCode::PaymentAlreadyActive),
        None => AppError::code(ErrorCode::OrderNotFound),
    }
}

/// Rule 4: charge with the saved provider key (no transaction open), then settle.
/// `None`: someone else settled the attempt first; the caller decides again.
async fn drive(state: &AppState, claim: &Claim) -> AppResult<Option<PayAnswer>> {
    let req = ChargeRequest {
        amount: claim.amount,
        currency: claim.currency.clone(),
        payment_method_id: claim.payment_method_id.clone(),
        order_id: claim.order_id.clone(),
    };
    let outcome = state.provider.charge(&claim.provider_key, &req).await;
    if faults::crash_after_charge_requested() {
        faults::crash("crash-after-charge (dev fault header)");
    }
    failpoint(faults::AFTER_CHARGE);
    settle(state, claim, outcome).await
}

/// Rule 5: ask the provider what happened under the provider key, settle from that, and
/// re-drive with the same provider key only when the provider has no charge for it.
pub(crate) async fn reconcile(state: &AppState, claim: &Claim) -> AppResult<Option<PayAnswer>> {
    match state.provider.charge_by_key(&claim.provider_key).await {
        Lookup::Found(charge) => settle(state, claim, outcome_of(charge)).await,
        Lookup::NotFound => drive(state, claim).await,
        Lookup::Unknown(why) => settle(state, claim, ChargeOutcome::Unknown(why)).await,
    }
}

/// What an existing charge means for its attempt.
fn outcome_of(charge: Charge) -> ChargeOutcome {
    match charge.status {
        ChargeStatus::Declined => ChargeOutcome::Declined(charge),
        ChargeStatus::Succeeded | ChargeStatus::Refunded => ChargeOutcome::Succeeded(charge),
        // The customer has not acted yet: no outcome, the attempt stays open.
        ChargeStatus::RequiresAction => {
            ChargeOutcome::Unknown("the charge awaits the customer's action".to_owned())
        }
    }
}

/// A provider webhook says `row`'s charge has an outcome. A webhook is a hint, never the
/// evidence: the outcome is read back from the provider by provider key, so even a correctly
/// signed but made-up event cannot mark an order paid. No lease is taken: the request that
/// claimed the attempt may be mid-call (the provider can call us before it answers it), and
/// settling is a conditional update, so whoever settles first wins and the other replays.
/// Returns `Some(true)` when this call settled the attempt, `Some(false)` when there was
/// nothing to apply (settled by someone else, or the provider has no such charge), `None`
/// when the provider could not be asked (the event must be delivered again).
pub(crate) async fn settle_from_webhook(
    state: &AppState,
    row: &AttemptRow,
    order: &OrderRow,
) -> AppResult<Option<bool>> {
    // A token nobody holds: this path never releases or takes a lease.
    let claim = Claim::from_row(
        row,
        order,
        "provider-webhook",
        uuid::Uuid::new_v4().to_string(),
    )?;
    match state.provider.charge_by_key(&claim.provider_key).await {
        Lookup::Found(charge) => Ok(Some(
            settle(state, &claim, outcome_of(charge)).await?.is_some(),
        )),
        Lookup::NotFound => Ok(Some(false)),
        Lookup::Unknown(_) => Ok(None),
    }
}

/// Stores the outcome (one transaction) and builds the answer.
async fn settle(
    state: &AppState,
    claim: &Claim,
    outcome: ChargeOutcome,
) -> AppResult<Option<PayAnswer>> {
    match outcome {
        ChargeOutcome::Succeeded(charge) => settle_charged(state, claim, &charge).await,
        ChargeOutcome::Declined(charge) => {
            tracing::info!(attempt = %claim.attempt_id, charge = %charge.id, "provider declined");
            settle_uncharged(
                state,
                claim,
                AttemptStatus::Declined,
                ErrorCode::PaymentDeclined,
                "the card was declined",
            )
            .await
        }
        ChargeOutcome::Rejected(why) => {
            tracing::warn!(attempt = %claim.attempt_id, %why, "provider refused the charge request");
            settle_uncharged(
                state,
                claim,
                AttemptStatus::Failed,
                ErrorCode::PaymentFailed,
                "the provider refused the charge",
            )
            .await
        }
        ChargeOutcome::Unknown(why) => {
            // Nobody is talking to the provider about this attempt any more: end our lease
            // so the next retry asks the provider at once (rule 5) instead of waiting.
            tracing::warn!(attempt = %claim.attempt_id, %why, "provider outcome unknown; attempt stays processing");
            db::release_lease(
                state.store.pool(),
                &claim.attempt_id,
                &claim.lease_token,
                now_ms(),
            )
            .await?;
            // A webhook may have settled it while we waited: then its stored answer stands.
            let row = db::find_by_id(state.store.pool(), &claim.attempt_id).await?;
            if row.is_some_and(|r| r.status.is_final()) {
                return Ok(None);
            }
            let body = serde_json::to_string(&PayResponse {
                status: AttemptStatus::Processing,
                order_id: claim.order_id.clone(),
                payment: None,
            })
            .map_err(|e| AppError::internal(e.to_string()))?;
            Ok(Some(PayAnswer {
                status: 202,
                body,
                replayed: false,
                retry_after: Some(state.config.retry_after_secs),
            }))
        }
    }
}

fn expires_at(state: &AppState, now: i64) -> i64 {
    now + i64::try_from(state.config.key_retention.as_millis()).unwrap_or(0)
}

pub(crate) async fn settle_charged(
    state: &AppState,
    claim: &Claim,
    charge: &Charge,
) -> AppResult<Option<PayAnswer>> {
    if charge.amount != claim.amount || charge.currency != claim.currency {
        // The provider charged something else under our key: record what it says it
        // charged (the truth about money), and shout.
        tracing::error!(attempt = %claim.attempt_id, charged = charge.amount, expected = claim.amount, "charge differs from the attempt");
    }
    let payment = Payment {
        id: format!("pay_{}", uuid::Uuid::new_v4().simple()),
        order_id: claim.order_id.clone(),
        amount: charge.amount,
        currency: charge.currency.clone(),
        payment_method_id: claim.payment_method_id.clone(),
        charge_id: charge.id.clone(),
        status: AttemptStatus::Succeeded,
    };
    let body = serde_json::to_string(&PayResponse {
        status: AttemptStatus::Succeeded,
        order_id: claim.order_id.clone(),
        payment: Some(payment.clone()),
    })
    .map_err(|e| AppError::internal(e.to_string()))?;
    let now = now_ms();
    let mut tx = state.store.begin_write().await?;
    let fin = Final {
        status: AttemptStatus::Succeeded,
        response_status: 200,
        response_body: &body,
        charge_id: Some(&charge.id),
    };
    if !db::finish(
        &mut *tx,
        &claim.attempt_id,
        &fin,
        now,
        expires_at(state, now),
    )
    .await?
    {
        tx.rollback().await?;
        return Ok(None);
    }
    db::insert_payment(&mut *tx, &payment, &claim.attempt_id, now).await?;
    if !db::mark_paid(
        &mut *tx,
        &claim.order_id,
        &claim.attempt_id,
        &payment.id,
        now,
    )
    .await?
    {
        // The order lock belongs to this attempt until it settles; losing it is a bug.
        // Roll back so the attempt stays processing and is settled again, never lost.
        tx.rollback().await?;
        return Err(AppError::internal(format!(
            "order {} is not locked by attempt {}",
            claim.order_id, claim.attempt_id
        )));
    }
    let reason = format!("provider charge {} succeeded", charge.id);
    let entry = Entry {
        actor: &claim.actor,
        entity: "attempt",
        entity_id: &claim.attempt_id,
        from: Some("processing"),
        to: "succeeded",
        reason: &reason,
    };
    audit::record(&mut *tx, &entry, now).await?;
    let entry = Entry {
        actor: &claim.actor,
        entity: "order",
        entity_id: &claim.order_id,
        from: Some("unpaid"),
        to: "paid",
        reason: &reason,
    };
    audit::record(&mut *tx, &entry, now).await?;
    queue::outbox_done(&mut *tx, &claim.attempt_id, now).await?;
    // The confirmation email is a job committed with the success: exactly one per paid
    // order, delivered at least once, made idempotent by `confirmation_email_sent`.
    queue::enqueue_email(&mut *tx, &claim.order_id, now).await?;
    failpoint(faults::BEFORE_SETTLE_COMMIT);
    tx.commit().await?;
    Ok(Some(PayAnswer {
        status: 200,
        body,
        replayed: false,
        retry_after: None,
    }))
}

async fn settle_uncharged(
    state: &AppState,
    claim: &Claim,
    status: AttemptStatus,
    code: ErrorCode,
    detail: &str,
) -> AppResult<Option<PayAnswer>> {
    let mut problem = Problem::new(code).with_detail(detail);
    problem.attempt_status = Some(status);
    let body = problem_body(&problem);
    let now = now_ms();
    let mut tx = state.store.begin_write().await?;
    let fin = Final {
        status,
        response_status: problem.status,
        response_body: &body,
        charge_id: None,
    };
    if !db::finish(
        &mut *tx,
        &claim.attempt_id,
        &fin,
        now,
        expires_at(state, now),
    )
    .await?
    {
        tx.rollback().await?;
        return Ok(None);
    }
    db::unlock_order(&mut *tx, &claim.order_id, &claim.attempt_id, now).await?;
    for line in by_sku(&claim.lines) {
        db::release_stock(&mut *tx, line).await?;
    }
    let entry = Entry {
        actor: &claim.actor,
        entity: "attempt",
        entity_id: &claim.attempt_id,
        from: Some("processing"),
        to: status.as_str(),
        reason: detail,
    };
    audit::record(&mut *tx, &entry, now).await?;
    let entry = Entry {
        actor: &claim.actor,
        entity: "order",
        entity_id: &claim.order_id,
        from: Some("unpaid (payment active)"),
        to: "unpaid",
        reason: "attempt ended without a charge; cart unlocked; stock released",
    };
    audit::record(&mut *tx, &entry, now).await?;
    queue::outbox_done(&mut *tx, &claim.attempt_id, now).await?;
    tx.commit().await?;
    Ok(Some(PayAnswer {
        status: problem.status,
        body,
        replayed: false,
        retry_after: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(status: AttemptStatus, fp: Option<&str>, locked_until: Option<i64>) -> AttemptRow {
        AttemptRow {
            id: "att".into(),
            user_id: "alice".into(),
            order_id: "o1".into(),
            status,
            fingerprint: fp.map(str::to_owned),
            order_version: Some(1),
            amount: Some(100),
            currency: Some("USD".into()),
            payment_method_id: Some("pm".into()),
            provider_key: Some("pk".into()),
            locked_until,
            response_status: status.is_final().then_some(200),
            response_body: status.is_final().then(|| "{}".to_owned()),
            expires_at: None,
        }
    }

    #[test]
    fn rule_two_in_order() {
        assert_eq!(
            decide(None, None, "o1", 0, true),
            NextAction::StartProcessing
        );
        let ok = row(AttemptStatus::Succeeded, Some("fp"), None);
        assert_eq!(
            decide(Some(&ok), Some("other"), "o1", 0, true),
            NextAction::Mismatch(AttemptStatus::Succeeded)
        );
        assert_eq!(
            decide(Some(&ok), Some("fp"), "o1", 0, true),
            NextAction::Replay {
                status: 200,
                body: "{}".into()
            }
        );
        let live = row(AttemptStatus::Processing, Some("fp"), Some(10));
        assert_eq!(
            decide(Some(&live), Some("fp"), "o1", 5, true),
            NextAction::Wait
        );
        assert_eq!(
            decide(Some(&live), Some("fp"), "o1", 5, false),
            NextAction::InProgress
        );
        assert_eq!(
            decide(Some(&live), Some("fp"), "o1", 10, true),
            NextAction::Reconcile
        );
        let tomb = row(AttemptStatus::Cancelled, None, None);
        assert_eq!(
            decide(Some(&tomb), Some("fp"), "o1", 0, true),
            NextAction::Cancelled
        );
        assert_eq!(
            decide(Some(&tomb), Some("fp"), "o2", 0, true),
            NextAction::Mismatch(AttemptStatus::Cancelled)
        );
    }

    /// The row-only replay answers only the caller's final attempt for the same order,
    /// version and method, with the stored bytes; everything else is left to the rules.
    #[test]
    fn replay_from_row_needs_user_order_version_and_method() {
        let fp = fingerprint(&details("alice", "o1", 1, 100, "pm"));
        let ok = row(AttemptStatus::Succeeded, Some(&fp), None);
        let req = |version: u64, method: &str| PayRequest {
            order_version: version,
            payment_method_id: method.into(),
        };
        let answer = replay_from_row(&ok, "alice", "o1", &req(1, "pm")).expect("replays");
        assert_eq!((answer.status(), answer.body()), (200, "{}"));
        assert!(answer.replayed());
        assert!(replay_from_row(&ok, "bob", "o1", &req(1, "pm")).is_none());
        assert!(replay_from_row(&ok, "alice", "o2", &req(1, "pm")).is_none());
        assert!(replay_from_row(&ok, "alice", "o1", &req(2, "pm")).is_none());
        assert!(replay_from_row(&ok, "alice", "o1", &req(1, "pm2")).is_none());
        let mut other_amount = ok.clone();
        other_amount.amount = Some(101);
        assert!(replay_from_row(&other_amount, "alice", "o1", &req(1, "pm")).is_none());
        let live = row(AttemptStatus::Processing, Some(&fp), Some(i64::MAX));
        assert!(replay_from_row(&live, "alice", "o1", &req(1, "pm")).is_none());
        let tomb = row(AttemptStatus::Cancelled, None, None);
        assert!(replay_from_row(&tomb, "alice", "o1", &req(1, "pm")).is_none());
    }

    fn details<'a>(
        user: &'a str,
        order: &'a str,
        version: i64,
        amount: i64,
        method: &'a str,
    ) -> Details<'a> {
        Details {
            user,
            order_id: order,
            order_version: version,
            amount,
            currency: "USD",
            payment_method_id: method,
        }
    }

    proptest! {
        #[test]
        fn fingerprints_differ_when_any_detail_differs(
            u in "[a-z]{1,8}", o in "[a-z]{1,8}", v in 1i64..1000, a in 1i64..100_000, m in "[a-z_]{1,8}",
            which in 0usize..5,
        ) {
            let base = fingerprint(&details(&u, &o, v, a, &m));
            prop_assert_eq!(&base, &fingerprint(&details(&u, &o, v, a, &m)));
            let (u2, o2, m2) = (format!("{u}x"), format!("{o}x"), format!("{m}x"));
            let changed = match which {
                0 => details(&u2, &o, v, a, &m),
                1 => details(&u, &o2, v, a, &m),
                2 => details(&u, &o, v + 1, a, &m),
                3 => details(&u, &o, v, a + 1, &m),
                _ => details(&u, &o, v, a, &m2),
            };
            prop_assert_ne!(base, fingerprint(&changed));
        }

        #[test]
        fn provider_keys_are_scoped_by_user(k in "[A-Za-z0-9-]{16,64}") {
            let key = IdempotencyKey::parse(&k).unwrap();
            prop_assert_ne!(provider_key("alice", &key), provider_key("bob", &key));
            prop_assert!(IdempotencyKey::parse(&provider_key("alice", &key)).is_ok());
        }
    }
}
