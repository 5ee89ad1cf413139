//! The kit proves it can fail: one small in-memory backend (axum) that follows
//! `docs/protocol.md` when it has no [`Flaw`], and breaks exactly one rule family with each
//! flaw. With no flaw every rule must pass; with a flaw, the rule it breaks must fail and
//! every failing rule must belong to that flaw's family.
//!
//! One backend with switches, not five copies: each flaw differs from the correct code by
//! the lines under `if flaw == …`, so a failure can only come from that flaw.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use payonce_conformance::config::{HttpCall, Ledger, Methods, OrderSource, UserAuth, Users};
use payonce_conformance::{Config, Report, Verdict};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KEY_RETENTION, RETRY_AFTER};
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_protocol::{
    AttemptStatus, CancelRequest, CancelResponse, ErrorCode, IdempotencyKey, PayRequest,
    PayResponse, Payment, Problem,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One deliberate mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// The claim looks the key and the order up, then writes in a second step.
    ReadThenWrite,
    /// A known key is replayed whatever the request's details.
    NoFingerprint,
    /// A replay is rendered again from the stored result instead of its stored bytes.
    RerenderedReplay,
    /// Cancel of an unknown key answers `cancelled` but stores nothing.
    NoTombstone,
    /// Keys are looked up without the user: one global key space.
    KeysNotPerUser,
    /// A new key on a paid order is answered `PAYMENT_ALREADY_ACTIVE`, as before
    /// `ORDER_ALREADY_PAID` was the answer: "busy" where the order is paid.
    PaidIsBusy,
}

const APPROVE: &str = "pm_ok";
const DECLINE: &str = "pm_no";
const PENDING: &str = "pm_wait";
const PENDING_FOR: Duration = Duration::from_millis(2000);
const AMOUNT: i64 = 500;
/// The longest the first claimer of an order waits in the read-then-write gap for a second
/// one. Generous, so a loaded machine still lands every race of the kit in the gap; a claim
/// nobody races waits all of it, which only slows this flawed backend.
const GAP: Duration = Duration::from_millis(1_000);

#[derive(Clone)]
struct Attempt {
    order: String,
    fingerprint: Option<String>,
    status: AttemptStatus,
    /// The answer once final: status, body bytes, and the result it was rendered from.
    answer: Option<(u16, Vec<u8>, Option<PayResponse>)>,
}

struct Order {
    user: String,
    version: u64,
    /// The order's payment once paid.
    paid: Option<Payment>,
    active: Option<String>,
}

#[derive(Default)]
struct Db {
    orders: HashMap<String, Order>,
    attempts: HashMap<(String, String), Attempt>,
    /// Charges that moved money, by order.
    ledger: Vec<String>,
    next: u64,
    /// Claimers that reached the read-then-write gap, by order.
    joined: HashMap<String, usize>,
}

#[derive(Clone)]
struct App {
    flaw: Flaw,
    db: Arc<Mutex<Db>>,
    /// Wakes the claimers waiting in the read-then-write gap when another one reaches it.
    gap: Arc<tokio::sync::Notify>,
}

fn problem(code: ErrorCode, f: impl FnOnce(&mut Problem)) -> Response {
    let mut p = Problem::new(code);
    f(&mut p);
    let mut res = (
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        serde_json::to_vec(&p).unwrap_or_default(),
    )
        .into_response();
    res.headers_mut().insert(
        "content-type",
        HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
    );
    if let Some(s) = p.retry_after {
        res.headers_mut().insert(RETRY_AFTER, HeaderValue::from(s));
    }
    res
}

fn user_of(h: &HeaderMap) -> Option<String> {
    let v = h.get("authorization")?.to_str().ok()?;
    v.strip_prefix("Bearer ").map(str::to_owned)
}

impl App {
    fn scope(&self, user: &str, key: &str) -> (String, String) {
        if self.flaw == Flaw::KeysNotPerUser {
            (String::new(), key.to_owned())
        } else {
            (user.to_owned(), key.to_owned())
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn create_order(State(app): State<App>, h: HeaderMap) -> Response {
    let Some(user) = user_of(&h) else {
        return problem(ErrorCode::Unauthenticated, |_| {});
    };
    let mut db = app.lock();
    db.next += 1;
    let id = format!("ord_{}", db.next);
    db.orders.insert(
        id.clone(),
        Order {
            user,
            version: 1,
            paid: None,
            active: None,
        },
    );
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "id": id, "version": 1 })),
    )
        .into_response()
}

async fn edit_cart(State(app): State<App>, h: HeaderMap, Path(id): Path<String>) -> Response {
    let user = user_of(&h).unwrap_or_default();
    let mut db = app.lock();
    let Some(order) = db.orders.get_mut(&id).filter(|o| o.user == user) else {
        return problem(ErrorCode::OrderNotFound, |_| {});
    };
    if order.paid.is_some() {
        return problem(ErrorCode::OrderAlreadyPaid, |_| {});
    }
    if order.active.is_some() {
        return problem(ErrorCode::PaymentInProgress, |_| {});
    }
    order.version += 1;
    Json(serde_json::json!({ "id": id, "version": order.version })).into_response()
}

/// What the key lookup (rule 2) decided, or that the key is new.
enum Found {
    New,
    Answer(Response),
}

fn decide(app: &App, row: &Attempt, order: &str, fp: &str) -> Response {
    let mismatch = match &row.fingerprint {
        None => row.order != order,
        Some(stored) => stored != fp,
    };
    if mismatch && app.flaw != Flaw::NoFingerprint {
        return problem(ErrorCode::KeyReusedWithDifferentDetails, |p| {
            p.attempt_status = Some(row.status)
        });
    }
    match (&row.status, &row.answer) {
        (AttemptStatus::Cancelled, _) => problem(ErrorCode::AttemptCancelled, |p| {
            p.attempt_status = Some(row.status)
        }),
        (_, Some((status, bytes, result))) => {
            let bytes = match (app.flaw, result) {
                // Same meaning, other bytes: members in another order.
                (Flaw::RerenderedReplay, Some(r)) => serde_json::to_vec(&serde_json::json!({
                    "payment": r.payment, "orderId": r.order_id, "status": r.status,
                }))
                .unwrap_or_default(),
                _ => bytes.clone(),
            };
            let ct = if *status == 200 {
                "application/json"
            } else {
                PROBLEM_CONTENT_TYPE
            };
            let mut res = (
                StatusCode::from_u16(*status).unwrap_or(StatusCode::OK),
                bytes,
            )
                .into_response();
            res.headers_mut()
                .insert("content-type", HeaderValue::from_static(ct));
            res.headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            res
        }
        _ => problem(ErrorCode::InProgress, |p| p.retry_after = Some(1)),
    }
}

/// A paid order refuses a new key: `ORDER_ALREADY_PAID` with its payment.
fn paid_refusal(app: &App, order: &Order) -> Option<Response> {
    let payment = order.paid.clone()?;
    Some(if app.flaw == Flaw::PaidIsBusy {
        problem(ErrorCode::PaymentAlreadyActive, |_| {})
    } else {
        problem(ErrorCode::OrderAlreadyPaid, |p| p.payment = Some(payment))
    })
}

/// Rules 2 and 3: look the key up, else claim it (atomically, unless the flaw says not).
async fn claim(app: &App, user: &str, key: &str, order_id: &str, req: &PayRequest) -> Found {
    let fp = format!(
        "{order_id}|{}|{AMOUNT}|USD|{}",
        req.order_version, req.payment_method_id
    );
    let slot = app.scope(user, key);
    let refusal = {
        let db = app.lock();
        if let Some(row) = db.attempts.get(&slot) {
            return Found::Answer(decide(app, row, order_id, &fp));
        }
        let order = &db.orders[order_id];
        if let Some(r) = paid_refusal(app, order) {
            Some(r)
        } else if order.version != req.order_version {
            Some(problem(ErrorCode::OrderChanged, |p| {
                p.current_version = Some(order.version)
            }))
        } else if order.active.is_some() {
            Some(problem(ErrorCode::PaymentAlreadyActive, |_| {}))
        } else {
            None
        }
    };
    if let Some(r) = refusal {
        return Found::Answer(r);
    }
    if app.flaw == Flaw::ReadThenWrite {
        read_then_write_gap(app, order_id).await;
    }
    let mut db = app.lock();
    if app.flaw != Flaw::ReadThenWrite {
        // The same checks again under the lock that writes: one atomic step.
        if let Some(row) = db.attempts.get(&slot) {
            return Found::Answer(decide(app, row, order_id, &fp));
        }
        let order = &db.orders[order_id];
        if let Some(r) = paid_refusal(app, order) {
            return Found::Answer(r);
        }
        if order.version != req.order_version || order.active.is_some() {
            return Found::Answer(problem(ErrorCode::PaymentAlreadyActive, |_| {}));
        }
    }
    db.attempts.insert(
        slot,
        Attempt {
            order: order_id.to_owned(),
            fingerprint: Some(fp),
            status: AttemptStatus::Processing,
            answer: None,
        },
    );
    if let Some(o) = db.orders.get_mut(order_id) {
        o.active = Some(key.to_owned());
    }
    Found::New
}

/// The gap between the read and the write, as a database round trip would make it. The
/// first claimer of an order stays in it until a second claimer of that order has read too
/// (or [`GAP`] passed), so a race the kit starts lands in the gap unless the machine stalls
/// for all of it: a fixed few milliseconds let a slow machine serialise the storm and hide
/// the flaw. Later claimers go
/// on at once; the first one is already waiting, so both have read before either writes.
async fn read_then_write_gap(app: &App, order_id: &str) {
    let deadline = tokio::time::Instant::now() + GAP;
    let first = {
        let mut db = app.lock();
        let n = db.joined.entry(order_id.to_owned()).or_default();
        *n += 1;
        *n == 1
    };
    app.gap.notify_waiters();
    if !first {
        return;
    }
    loop {
        // Registered before the count is read, so a claimer joining in between still wakes
        // it; a wake for another order's claimer only makes it look again.
        let woken = app.gap.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if app.lock().joined.get(order_id).is_some_and(|n| *n >= 2) {
            return;
        }
        if tokio::time::timeout_at(deadline, woken).await.is_err() {
            return;
        }
    }
}

async fn pay(
    State(app): State<App>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let mut res = pay_inner(&app, &h, &id, &body).await;
    res.headers_mut()
        .insert(KEY_RETENTION, HeaderValue::from(86_400u32));
    res
}

async fn pay_inner(app: &App, h: &HeaderMap, id: &str, body: &[u8]) -> Response {
    let Some(user) = user_of(h) else {
        return problem(ErrorCode::Unauthenticated, |_| {});
    };
    if app.lock().orders.get(id).is_none_or(|o| o.user != user) {
        return problem(ErrorCode::OrderNotFound, |_| {});
    }
    let Some(raw) = h.get(IDEMPOTENCY_KEY) else {
        return problem(ErrorCode::IdempotencyKeyMissing, |_| {});
    };
    let key = match raw
        .to_str()
        .map_err(|_| ())
        .and_then(|v| IdempotencyKey::parse(v).map_err(|_| ()))
    {
        Ok(k) => k,
        Err(()) => return problem(ErrorCode::IdempotencyKeyInvalid, |_| {}),
    };
    let Ok(req) = serde_json::from_slice::<PayRequest>(body) else {
        return problem(ErrorCode::InvalidRequest, |_| {});
    };
    match claim(app, &user, key.as_str(), id, &req).await {
        Found::Answer(r) => return r,
        Found::New => {}
    }
    // Rule 4: charge (no lock held), then settle.
    let approved = match req.payment_method_id.as_str() {
        DECLINE => false,
        PENDING => {
            tokio::time::sleep(PENDING_FOR).await;
            true
        }
        _ => true,
    };
    let mut db = app.lock();
    let (status, bytes, result, attempt) = if approved {
        db.ledger.push(id.to_owned());
        let n = db.ledger.len();
        let result = PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: id.to_owned(),
            payment: Some(Payment {
                id: format!("pay_{n}"),
                order_id: id.to_owned(),
                amount: AMOUNT,
                currency: "USD".into(),
                payment_method_id: req.payment_method_id.clone(),
                charge_id: format!("ch_{n}"),
                status: AttemptStatus::Succeeded,
            }),
        };
        (
            200,
            serde_json::to_vec(&result).unwrap_or_default(),
            Some(result),
            AttemptStatus::Succeeded,
        )
    } else {
        let p = serde_json::to_vec(&Problem {
            attempt_status: Some(AttemptStatus::Declined),
            ..Problem::new(ErrorCode::PaymentDeclined)
        })
        .unwrap_or_default();
        (402, p, None, AttemptStatus::Declined)
    };
    let payment = result.as_ref().and_then(|r| r.payment.clone());
    if let Some(o) = db.orders.get_mut(id) {
        o.active = None;
        if payment.is_some() {
            o.paid = payment;
        }
    }
    let slot = app.scope(&user, key.as_str());
    if let Some(a) = db.attempts.get_mut(&slot) {
        a.status = attempt;
        a.answer = Some((status, bytes.clone(), result));
    }
    let ct = if status == 200 {
        "application/json"
    } else {
        PROBLEM_CONTENT_TYPE
    };
    let mut res = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        bytes,
    )
        .into_response();
    res.headers_mut()
        .insert("content-type", HeaderValue::from_static(ct));
    res
}

async fn cancel(
    State(app): State<App>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let user = user_of(&h).unwrap_or_default();
    if app.lock().orders.get(&id).is_none_or(|o| o.user != user) {
        return problem(ErrorCode::OrderNotFound, |_| {});
    }
    let Ok(req) = serde_json::from_slice::<CancelRequest>(&body) else {
        return problem(ErrorCode::InvalidRequest, |_| {});
    };
    let slot = app.scope(&user, req.key.as_str());
    let mut db = app.lock();
    let row = match db.attempts.get(&slot) {
        Some(row) => row.clone(),
        None => {
            if app.flaw != Flaw::NoTombstone {
                let tomb = Attempt {
                    order: id,
                    fingerprint: None,
                    status: AttemptStatus::Cancelled,
                    answer: None,
                };
                db.attempts.insert(slot, tomb);
            }
            return Json(CancelResponse {
                status: AttemptStatus::Cancelled,
                payment: None,
            })
            .into_response();
        }
    };
    if row.order != id {
        return problem(ErrorCode::KeyReusedWithDifferentDetails, |p| {
            p.attempt_status = Some(row.status)
        });
    }
    let payment = row.answer.and_then(|(_, _, r)| r).and_then(|r| r.payment);
    Json(CancelResponse {
        status: row.status,
        payment,
    })
    .into_response()
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LedgerQuery {
    order_id: String,
}

async fn ledger(State(app): State<App>, Query(q): Query<LedgerQuery>) -> Response {
    let db = app.lock();
    let charges: Vec<_> = db
        .ledger
        .iter()
        .filter(|o| **o == q.order_id)
        .map(|_| serde_json::json!({ "status": "succeeded" }))
        .collect();
    Json(serde_json::json!({ "charges": charges })).into_response()
}

/// Starts the backend on port 0; returns its base URL.
async fn start(flaw: Flaw) -> String {
    let app = App {
        flaw,
        db: Arc::default(),
        gap: Arc::default(),
    };
    let router = Router::new()
        .route(paths::ORDERS, post(create_order))
        .route(&paths::cart("{id}"), patch(edit_cart))
        .route(&paths::pay("{id}"), post(pay))
        .route(&paths::cancel("{id}"), post(cancel))
        .route("/ledger", get(ledger))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}")
}

fn config(base: &str, with_ledger: bool) -> Config {
    let user = |name: &str| UserAuth {
        header: "Authorization".into(),
        value: Some(format!("Bearer {name}")),
        command: None,
        login: None,
    };
    Config {
        base_url: base.to_owned(),
        also: Vec::new(),
        timeout_ms: 10_000,
        users: Users {
            a: user("alice"),
            b: user("bob"),
        },
        order: OrderSource {
            method: Some("POST".into()),
            path: Some(paths::ORDERS.into()),
            body: Some("{}".into()),
            command: None,
            id_pointer: "/id".into(),
            version_pointer: "/version".into(),
        },
        cart: Some(HttpCall {
            method: "PATCH".into(),
            path: "/orders/{order}/cart".into(),
            body: Some("{}".into()),
        }),
        methods: Methods {
            approve: APPROVE.into(),
            decline: DECLINE.into(),
            pending: PENDING.into(),
            pending_ms: 150,
            settle_ms: 10_000,
        },
        ledger: with_ledger.then(|| Ledger {
            url: Some(format!("{base}/ledger?orderId={{order}}")),
            pointer: "/charges".into(),
            exclude_status: vec!["declined".into()],
            command: None,
        }),
        storm: 50,
        race_rounds: 5,
    }
}

async fn check(flaw: Flaw) -> Report {
    let base = start(flaw).await;
    let cfg = config(&base, true);
    cfg.check().expect("a valid configuration");
    payonce_conformance::run(cfg).await.expect("the kit runs")
}

/// The rule `broken` fails, and every failure is of `family`.
fn fails_only(report: &Report, broken: &str, family: &str) {
    let text = report.render_text();
    eprintln!("{family}: failed {:?}", report.ids(Verdict::Fail));
    assert_eq!(
        report.get(broken).map(|r| r.verdict),
        Some(Verdict::Fail),
        "{broken} must fail:\n{text}"
    );
    for r in report.results.iter().filter(|r| r.verdict == Verdict::Fail) {
        assert!(
            r.families.contains(&family),
            "{} failed but is not a {family} rule:\n{text}",
            r.id
        );
    }
    assert!(report.failed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correct_backend_passes_every_rule() {
    let report = check(Flaw::None).await;
    let text = report.render_text();
    assert_eq!(report.ids(Verdict::Fail), Vec::<&str>::new(), "\n{text}");
    assert_eq!(
        report.ids(Verdict::NotChecked),
        Vec::<&str>::new(),
        "\n{text}"
    );
    assert_eq!(
        report.results.len(),
        payonce_conformance::rules::RULES.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_then_write_claim_fails_the_races() {
    let report = check(Flaw::ReadThenWrite).await;
    // The first claimer of an order waits in the gap for the second, so every race of two
    // claims lands in it (the pending pay's same-key retry too, which is a race, not a
    // probe). Not `cancel.race`: a cancel does not claim, so it fails only in the rounds
    // where the pay reads before the cancel writes (a concurrency rule all the same).
    for rule in ["storm.same-key", "race.two-keys", "race.same-key-retry"] {
        fails_only(&report, rule, "concurrency");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fingerprint_check_fails_the_fingerprint_rules() {
    let report = check(Flaw::NoFingerprint).await;
    fails_only(&report, "key.other-details", "fingerprint");
    fails_only(&report, "key.other-order", "fingerprint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerendered_replay_fails_the_replay_rule() {
    let report = check(Flaw::RerenderedReplay).await;
    fails_only(&report, "key.final", "replay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_for_a_paid_order_fails_the_paid_answer_rule() {
    let report = check(Flaw::PaidIsBusy).await;
    fails_only(&report, "order.paid-answers-paid", "order-lock");
    let text = report.render_text();
    assert!(
        text.contains("which now means only \"another attempt is running\""),
        "the failure says why:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tombstone_fails_the_cancel_rules() {
    let report = check(Flaw::NoTombstone).await;
    fails_only(&report, "key.tombstone", "cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_not_scoped_per_user_fail_the_scope_rule() {
    let report = check(Flaw::KeysNotPerUser).await;
    fails_only(&report, "scope.per-user", "scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ledger_or_cart_those_rules_are_not_checked_with_the_reason() {
    let base = start(Flaw::None).await;
    let mut cfg = config(&base, false);
    cfg.cart = None;
    let report = payonce_conformance::run(cfg).await.expect("the kit runs");
    let text = report.render_text();
    assert!(!report.failed(), "\n{text}");
    let mut not_checked = report.ids(Verdict::NotChecked);
    not_checked.sort_unstable();
    assert_eq!(
        not_checked,
        ["cart.locked", "race.two-keys", "storm.same-key"],
        "\n{text}"
    );
    assert!(text.contains("needs [ledger]"), "\n{text}");
    // The same read-then-write backend is not caught without a ledger by the storm rule...
    let base = start(Flaw::ReadThenWrite).await;
    let report = payonce_conformance::run(config(&base, false))
        .await
        .expect("runs");
    assert_eq!(
        report.get("storm.same-key").map(|r| r.verdict),
        Some(Verdict::NotChecked)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_probes_hold_whichever_request_claims_the_key() {
    // With no gap the two same-key requests race for the claim, so either may be the one
    // charging; the probes must still meet the attempt processing.
    let base = start(Flaw::None).await;
    let mut cfg = config(&base, true);
    cfg.methods.pending_ms = 0;
    for _ in 0..3 {
        let report = payonce_conformance::run(cfg.clone()).await.expect("runs");
        let text = report.render_text();
        for id in [
            "key.processing",
            "order.one-active-attempt",
            "cart.locked",
            "cancel.processing",
            "race.same-key-retry",
        ] {
            assert_eq!(
                report.get(id).map(|r| r.verdict),
                Some(Verdict::Pass),
                "{id}\n{text}"
            );
        }
    }
}
