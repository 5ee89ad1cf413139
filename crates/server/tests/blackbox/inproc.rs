//! In-process servers: `app(state)` driven with `oneshot` on a fresh database, reading a
//! manual clock, so the rules a clock decides (leases, retention, reconciliation) are tested
//! by moving time instead of sleeping. [`InProc`] is a `payonce_testkit::checkout::Checkout`
//! like a process's `TestApp`: the same fixtures, answered by the router instead of a socket.
//! Process-spawning tests (`crash.rs`, the three-process ones) stay for what needs a
//! process: crashes, failpoints, several instances.

use crate::common::{
    client, key, spawn, Backend, Checkout, HttpApi, Opts, Req, Resp, TestApp, TestDb, SECRET,
};
use crate::on_both_backends;
use axum::body::Body;
use axum::http::Request;
use clap::Parser;
use payonce_protocol::{AttemptStatus, ErrorCode, OrderStatus};
use payonce_server::clock::{Clock, ManualClock, SystemClock};
use payonce_server::{app, AppState, Cli, Config, Store};
use payonce_testkit::checkout::metric_value;
use payonce_testkit::wait_for;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// One in-process server.
pub struct InProc {
    pub state: AppState,
    pub clock: Arc<ManualClock>,
    router: axum::Router,
    pub provider: String,
    pub http: reqwest::Client,
}

/// A mock provider on its own listener in this process.
pub async fn provider() -> String {
    let p = payonce_mock_provider::MockProvider::new(Default::default()).expect("provider");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(p.serve(listener));
    url
}

/// A counting proxy in front of `upstream`: every request is forwarded as it came; the
/// counter holds how many were charge lookups by provider key (`GET /charges/by-key/…`).
pub async fn counting_proxy(upstream: &str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::extract::State;
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let lookups = Arc::new(AtomicUsize::new(0));
    let state = (
        upstream.to_owned(),
        lookups.clone(),
        crate::common::client(),
    );
    type Up = (String, Arc<AtomicUsize>, reqwest::Client);
    async fn forward(
        State((up, n, http)): State<Up>,
        req: Request<Body>,
    ) -> axum::response::Response {
        let (parts, body) = req.into_parts();
        if parts.method == "GET" && parts.uri.path().starts_with("/charges/by-key/") {
            n.fetch_add(1, Ordering::SeqCst);
        }
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = http.request(parts.method, format!("{up}{target}"));
        for (name, value) in parts.headers.iter().filter(|(n, _)| *n != "host") {
            out = out.header(name, value);
        }
        let Ok(res) = out.body(body).send().await else {
            return axum::http::StatusCode::BAD_GATEWAY.into_response();
        };
        let (status, headers) = (res.status(), res.headers().clone());
        let bytes = res.bytes().await.unwrap_or_default();
        (status, headers, bytes).into_response()
    }
    let router = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, lookups)
}

impl InProc {
    /// A server on `db` reaching `provider`, with the test flags plus `extra`, its clock
    /// reading the system time now.
    pub async fn start(db: &TestDb, provider: &str, extra: &[&str]) -> InProc {
        let mut argv = vec!["payonce-server".to_owned(), "--dev".into()];
        argv.extend(["--session-secret".into(), SECRET.into()]);
        argv.extend(extra.iter().map(|s| s.to_string()));
        let cli = Cli::try_parse_from(argv).expect("flags");
        let config = Config::from_args(&cli.server).expect("config");
        let store = Store::connect(&db.url).await.expect("store");
        let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
        let state = AppState::new(store, provider, config)
            .expect("state")
            .with_clock(clock.clone());
        InProc {
            router: app(state.clone(), None),
            state,
            clock,
            provider: provider.to_owned(),
            http: crate::common::client(),
        }
    }

    /// `method path` with this bearer token (always sent, empty too), idempotency key and
    /// JSON body.
    pub async fn send(
        &self,
        method: &'static str,
        path: &str,
        token: &str,
        key: Option<&str>,
        body: Value,
    ) -> Resp {
        let req = Req::new(method, path).bearer(token).key(key).json(body);
        self.call(req).await
    }

    /// One raw request through the router, its whole answer read.
    pub async fn route(&self, req: Request<Body>) -> Resp {
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        Resp {
            status,
            headers,
            body,
        }
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(i64::try_from(d.as_millis()).unwrap());
    }
}

impl Checkout for InProc {
    fn http_client(&self) -> &reqwest::Client {
        &self.http
    }
    fn provider_url(&self) -> &str {
        &self.provider
    }
    async fn call(&self, req: Req) -> Resp {
        let mut out = Request::builder().method(req.method).uri(&req.path);
        for (name, value) in &req.headers {
            out = out.header(name, value);
        }
        let body = match req.body {
            Some(body) => {
                out = out.header("content-type", "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        self.route(out.body(body).unwrap()).await
    }
}

on_both_backends!(
    a_crashed_lease_is_taken_over_when_the_clock_passes_it,
    the_outbox_worker_settles_abandoned_attempts_from_the_provider,
    finished_keys_expire_with_the_clock_but_processing_ones_never,
    audit_rows_are_kept_for_the_dispute_window_then_deleted,
    an_attempt_the_provider_cannot_settle_is_flagged_for_review_once,
    metrics_need_their_token_and_read_the_store_once_per_max_age,
    a_job_round_goes_on_past_a_row_that_fails,
    a_charge_for_other_terms_is_flagged_for_review_never_paid,
    abandoned_challenges_do_not_starve_a_crashed_attempt,
    retried_challenges_do_not_starve_a_crashed_attempt,
    an_abandoned_challenge_expires_at_its_deadline_and_frees_the_order,
    a_cancel_ends_a_challenge_the_customer_left,
    ids_come_from_the_injected_source,
    a_wait_on_a_key_in_flight_ends_at_the_clocks_deadline,
);

/// Every id is minted by the state's id source (`src/ids.rs`), injected like the clock: with
/// a sequence, the ids of an order, its pay, its confirmation job and its mail are the
/// sequence's numbers, in the stored form (the prefix, `_`, 32 hex digits).
async fn ids_come_from_the_injected_source(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let mut s = InProc::start(&db, &provider, &[]).await;
    let ids = Arc::new(payonce_server::ids::Sequence::starting_at(1));
    s.state = s.state.with_ids(ids);
    s.router = app(s.state.clone(), None);
    let t = s.session("alice").await;
    let order = s.order(&t).await;
    assert_eq!(order, format!("ord_{:032x}", 1));
    let r = s.pay(&t, &order, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    payonce_server::run_jobs(&s.state).await;
    let pool = db.pool().await;
    let mut minted = vec![r.json()["payment"]["id"].as_str().unwrap().to_owned()];
    for sql in [
        "SELECT id FROM attempts",
        "SELECT id FROM jobs",
        "SELECT id FROM mailbox",
    ] {
        let (id,): (String,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
        minted.push(id);
    }
    let numbers: Vec<u128> = minted
        .iter()
        .zip(["pay", "att", "job", "mail"])
        .map(|(id, prefix)| {
            let hex = id.strip_prefix(&format!("{prefix}_")).expect(id);
            assert_eq!(hex.len(), 32, "{id}");
            u128::from_str_radix(hex, 16).expect(id)
        })
        .collect();
    assert!(numbers.iter().all(|n| (2..20).contains(n)), "{minted:?}");
}

/// 22 customers abandon their 3-D Secure challenge (each attempt stays processing, waiting
/// for them, as it must); then a pay with `pm_card_timeout` is charged and its process gives
/// up on it. The job lists take the 20 oldest rows, but skip the ones that only wait for the
/// customer until their next check: the crashed attempt is settled within two job rounds,
/// and the challenges are still looked at later (never flagged, still waiting).
async fn abandoned_challenges_do_not_starve_a_crashed_attempt(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let flags = ["--provider-timeout-ms", "300", "--lease-ms", "2000"];
    let s = InProc::start(&db, &provider, &flags).await;
    let t = s.session("alice").await;
    let mut waiting = Vec::new();
    for _ in 0..22 {
        let id = s.order(&t).await;
        let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_3ds").await;
        assert_eq!(r.status, 402, "{}", r.text());
        waiting.push(id);
        s.advance(Duration::from_millis(10));
    }
    let crashed = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &crashed, Some(&key()), 1, "pm_card_timeout")
            .await
            .status,
        202
    );
    s.advance(Duration::from_secs(3));
    for _ in 0..2 {
        payonce_server::run_jobs(&s.state).await;
    }
    assert_eq!(
        s.order_status(&t, &crashed).await,
        OrderStatus::Paid,
        "settled behind the challenges"
    );
    assert_eq!(s.ledger(&crashed).await.len(), 1);
    s.advance(Duration::from_secs(600));
    payonce_server::run_jobs(&s.state).await;
    let pool = db.pool().await;
    let (open, flagged): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(needs_review_at) FROM attempts WHERE status = 'processing'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (open, flagged),
        (22, 0),
        "still waiting for their customers, none flagged"
    );
    let (later,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE next_check_at > $1")
        .bind(s.clock.now_ms())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        later >= 20,
        "a later round looked at them again and put them off: {later}"
    );
}

/// 22 customers left their 3-D Secure challenge, and their pages retry the pay every few
/// seconds (each retry answers 402 `ACTION_REQUIRED` again, as it must); a pay with
/// `pm_card_timeout` behind them is charged and its process gives up on it. A retry puts
/// the jobs' next look at the challenge off, never forward to now: the job lists (the 20
/// oldest due rows) reach the crashed attempt while the challenges are retried every round.
async fn retried_challenges_do_not_starve_a_crashed_attempt(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let flags = ["--provider-timeout-ms", "300", "--lease-ms", "2000"];
    let s = InProc::start(&db, &provider, &flags).await;
    let t = s.session("alice").await;
    let mut waiting = Vec::new();
    for _ in 0..22 {
        let (id, k) = (s.order(&t).await, key());
        let r = s.pay(&t, &id, Some(&k), 1, "pm_card_3ds").await;
        assert_eq!(r.status, 402, "{}", r.text());
        waiting.push((id, k));
        s.advance(Duration::from_millis(10));
    }
    let crashed = s.order(&t).await;
    let r = s
        .pay(&t, &crashed, Some(&key()), 1, "pm_card_timeout")
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
    for round in 0..2 {
        // Past every lease: each retry asks the provider again.
        s.advance(Duration::from_secs(3));
        for (id, k) in &waiting {
            let r = s.pay(&t, id, Some(k), 1, "pm_card_3ds").await;
            assert_eq!(
                (r.status, r.code()),
                (402, ErrorCode::ActionRequired),
                "round {round}: {}",
                r.text()
            );
        }
        s.advance(Duration::from_secs(3));
        payonce_server::run_jobs(&s.state).await;
    }
    assert_eq!(
        s.order_status(&t, &crashed).await,
        OrderStatus::Paid,
        "settled behind 22 retried challenges"
    );
    assert_eq!(s.ledger(&crashed).await.len(), 1);
}

/// A customer abandons the 3-D Secure challenge. Before the deadline (`--action-deadline-secs
/// 60`) the attempt waits; at it the jobs have the provider cancel the charge, the attempt
/// ends `expired` with 402 `ACTION_EXPIRED` (replayed to the old key), the tee's stock comes
/// back and the order takes a new key: one charge in the provider's ledger, the new key's.
async fn an_abandoned_challenge_expires_at_its_deadline_and_frees_the_order(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &["--action-deadline-secs", "60"]).await;
    let pool = db.pool().await;
    let stock = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT stock FROM catalog WHERE sku = 'tee-classic'")
            .fetch_one(&pool)
            .await
            .unwrap();
        n
    };
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let before = stock().await;
    let k1 = key();
    let r = s.pay(&t, &id, Some(&k1), 1, "pm_card_3ds").await;
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::ActionRequired),
        "{}",
        r.text()
    );
    assert_eq!(
        stock().await,
        before - 1,
        "reserved while the customer acts"
    );

    // 59 s in: the challenge still waits; the order is busy for any other key.
    s.advance(Duration::from_secs(30));
    payonce_server::run_jobs(&s.state).await;
    s.advance(Duration::from_secs(29));
    payonce_server::run_jobs(&s.state).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(
        (r.status, r.code()),
        (409, ErrorCode::PaymentAlreadyActive),
        "{}",
        r.text()
    );
    let charges = s.ledger(&id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0]["status"], "requires_action");

    // Past the deadline: one job round cancels it at the provider and ends the attempt.
    s.advance(Duration::from_secs(2));
    payonce_server::run_jobs(&s.state).await;
    let (status,): (String,) = sqlx::query_as("SELECT status FROM attempts WHERE idem_key = $1")
        .bind(&k1)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "expired");
    let charges = s.ledger(&id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        charges[0]["status"], "canceled",
        "cancelled at the provider"
    );
    assert_eq!(stock().await, before, "the stock came back");
    let again = s.pay(&t, &id, Some(&k1), 1, "pm_card_3ds").await;
    assert_eq!(
        (again.status, again.code()),
        (402, ErrorCode::ActionExpired),
        "{}",
        again.text()
    );
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(again.attempt_status(), AttemptStatus::Expired);

    // The order is free: a new key pays once.
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Paid);
    let charges = s.ledger(&id).await;
    let succeeded: Vec<_> = charges
        .iter()
        .filter(|c| c["status"] == "succeeded")
        .collect();
    assert_eq!((charges.len(), succeeded.len()), (2, 1), "{charges:?}");
}

/// The customer leaves the 3-D Secure challenge and presses "change my cart" (the SDK's
/// `cancel`): the charge is cancelled at the provider, the attempt ends `cancelled`, the
/// stock comes back, the key is refused from then on (409 `ATTEMPT_CANCELLED`, replayed
/// alike from the store and the replay cache) and a new key pays the order once.
async fn a_cancel_ends_a_challenge_the_customer_left(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &[]).await;
    let pool = db.pool().await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let r = s.pay(&t, &id, Some(&k), 1, "pm_card_3ds").await;
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::ActionRequired),
        "{}",
        r.text()
    );
    let path = format!("/orders/{id}/payment-attempts/cancel");
    let r = s.send("POST", &path, &t, None, json!({ "key": k })).await;
    assert_eq!(
        (r.status, r.attempt_status()),
        (200, AttemptStatus::Cancelled),
        "{}",
        r.text()
    );
    let charges = s.ledger(&id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        charges[0]["status"], "canceled",
        "cancelled at the provider"
    );
    let (status, open): (String, i64) = sqlx::query_as(
        "SELECT a.status, (SELECT COUNT(*) FROM attempts p WHERE p.order_id = a.order_id
           AND p.status = 'processing') FROM attempts a WHERE a.idem_key = $1",
    )
    .bind(&k)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), open), ("cancelled", 0));
    let first = s.pay(&t, &id, Some(&k), 1, "pm_card_3ds").await;
    assert_eq!(
        (first.status, first.code()),
        (409, ErrorCode::AttemptCancelled),
        "{}",
        first.text()
    );
    let again = s.pay(&t, &id, Some(&k), 1, "pm_card_3ds").await;
    assert_eq!(again.body, first.body, "the same answer every time");
    let r = s.send("POST", &path, &t, None, json!({ "key": k })).await;
    assert_eq!(
        r.attempt_status(),
        AttemptStatus::Cancelled,
        "a second cancel says the same"
    );
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let charges = s.ledger(&id).await;
    let succeeded = charges
        .iter()
        .filter(|c| c["status"] == "succeeded")
        .count();
    assert_eq!((charges.len(), succeeded), (2, 1), "{charges:?}");
}

/// A processing attempt as a crash leaves it (lease over: the outbox worker's), written
/// straight into the tables, created at `at`, for `order` at `amount`, under `provider_key`.
async fn insert_abandoned(
    pool: &sqlx::AnyPool,
    order: &str,
    amount: i64,
    provider_key: &str,
    at: i64,
) {
    let id = format!("att_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(
        "INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
           order_version, amount, currency, payment_method_id, provider_key, locked_until,
           created_at, updated_at)
         VALUES ($1, 'alice', $2, $3, 'processing', 'fp', 1, $4, 'USD', 'pm_card_approve', $5,
           $6, $6, $6)",
    )
    .bind(&id)
    .bind(key())
    .bind(order)
    .bind(amount)
    .bind(provider_key)
    .bind(at)
    .execute(pool)
    .await
    .unwrap();
}

/// A charge made at the provider directly, under `provider_key`, for `order`.
async fn charge_directly(s: &InProc, provider_key: &str, order: &str, amount: i64) {
    let body = json!({ "amount": amount, "currency": "USD",
        "paymentMethodId": "pm_card_approve", "orderId": order });
    let r = s
        .http
        .post(format!("{}/charges", s.provider))
        .header("Idempotency-Key", provider_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// The oldest row of the outbox fails every time (its order is not locked for it, which
/// the settle refuses as an internal error); a crashed `pm_card_timeout` attempt behind it
/// is still settled in the same round: each row's failure is logged and the round goes on.
async fn a_job_round_goes_on_past_a_row_that_fails(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &["--provider-timeout-ms", "300"]).await;
    let t = s.session("alice").await;
    let (bad, crashed) = (s.order(&t).await, s.order(&t).await);
    let pk = format!("pk_bad_{}", uuid::Uuid::new_v4().simple());
    charge_directly(&s, &pk, &bad, 2500).await;
    insert_abandoned(&db.pool().await, &bad, 2500, &pk, 1).await;
    assert_eq!(
        s.pay(&t, &crashed, Some(&key()), 1, "pm_card_timeout")
            .await
            .status,
        202
    );
    s.advance(Duration::from_secs(3));
    payonce_server::run_jobs(&s.state).await;
    assert_eq!(
        s.order_status(&t, &crashed).await,
        OrderStatus::Paid,
        "settled behind the failing row"
    );
    assert_eq!(s.order_status(&t, &bad).await, OrderStatus::Unpaid);
}

/// The provider answers a lookup with a succeeded charge for another order than the
/// attempt's (a provider key that meets an old charge): the order is not marked paid, no
/// payment is written, the attempt is flagged for manual review once and leaves the job
/// lists, and the round goes on.
async fn a_charge_for_other_terms_is_flagged_for_review_never_paid(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &["--provider-timeout-ms", "300"]).await;
    let t = s.session("alice").await;
    let (old, id) = (s.order(&t).await, s.order(&t).await);
    let pk = format!("pk_old_{}", uuid::Uuid::new_v4().simple());
    charge_directly(&s, &pk, &old, 2500).await;
    let pool = db.pool().await;
    insert_abandoned(&pool, &id, 2500, &pk, 1).await;
    sqlx::query("UPDATE orders SET active_attempt = (SELECT id FROM attempts WHERE order_id = $1) WHERE id = $1")
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..3 {
        payonce_server::run_jobs(&s.state).await;
        s.advance(Duration::from_secs(3));
    }
    assert_eq!(
        s.order_status(&t, &id).await,
        OrderStatus::Unpaid,
        "never marked paid"
    );
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
            n
        }
    };
    assert_eq!(count("SELECT COUNT(*) FROM payments").await, 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM attempts WHERE needs_review_at IS NOT NULL").await,
        1
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM audit_log WHERE to_state = 'processing (needs review)'").await,
        1,
        "flagged once"
    );
}

/// Reconciliation with a provider that is not there: once the clock passes the reconcile
/// window the attempt is flagged for manual review, and however many later rounds (and
/// windows) pass, it is flagged once, audited once, never charged, its order still locked.
async fn an_attempt_the_provider_cannot_settle_is_flagged_for_review_once(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let s = InProc::start(
        &db,
        "http://127.0.0.1:9",
        &[
            "--provider-timeout-ms",
            "300",
            "--reconcile-after-ms",
            "60000",
        ],
    )
    .await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &id, Some(&key()), 1, "pm_card_approve")
            .await
            .status,
        202
    );
    let pool = db.pool().await;
    let count = |sql: &'static str| {
        let (pool, id) = (pool.clone(), id.clone());
        async move {
            let (n,): (i64,) = sqlx::query_as(sql).bind(id).fetch_one(&pool).await.unwrap();
            n
        }
    };
    let flagged =
        "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL";
    let audited = "SELECT COUNT(*) FROM audit_log a JOIN attempts t ON t.id = a.entity_id
                   WHERE t.order_id = $1 AND a.to_state = 'processing (needs review)'";
    payonce_server::run_jobs(&s.state).await;
    assert_eq!(
        count(flagged).await,
        0,
        "inside the reconcile window: not yet"
    );
    s.advance(Duration::from_millis(60_001));
    payonce_server::run_jobs(&s.state).await;
    assert_eq!(
        count(flagged).await,
        1,
        "past the window: flagged for review"
    );
    for _ in 0..5 {
        s.advance(Duration::from_secs(61));
        payonce_server::run_jobs(&s.state).await;
    }
    assert_eq!(count(flagged).await, 1, "still flagged");
    assert_eq!(
        count(audited).await,
        1,
        "one audit row, however many rounds"
    );
    assert_eq!(
        s.order_status(&t, &id).await,
        OrderStatus::Unpaid,
        "nothing decided without the provider"
    );
}

/// Rule 5 after a crash: the killed process left the attempt processing with a live lease
/// and a charge at the provider. A retry is told to wait while the clock is inside the
/// lease; once the clock passes it, the retry asks the provider and settles from the charge.
async fn a_crashed_lease_is_taken_over_when_the_clock_passes_it(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let opts = Opts {
        provider_timeout_ms: 5_000,
        lease_ms: 6_000,
        in_progress_wait_ms: 0,
        ..Opts::default()
    };
    let mut args = opts.args(&db.url);
    args.extend(["--provider-url".into(), provider.clone()]);
    let mut first = spawn(&args, true);
    let app = TestApp {
        api: first.api(),
        provider: provider.clone(),
        http: client(),
        _procs: Vec::new(),
        db: None,
    };
    let t = app.session("alice").await;
    let id = app.order(&t).await;
    let k = key();
    // The slow method is charged at once and answers after 4 s: kill the server meanwhile.
    let pay = app.request(app.pay_request(&t, &id, Some(&k), 1, "pm_card_slow"));
    let inflight = tokio::spawn(pay.send());
    wait_for(
        "the slow charge at the provider",
        Duration::from_secs(2),
        || async { (!app.ledger(&id).await.is_empty()).then_some(()) },
    )
    .await;
    first.kill();
    assert!(
        inflight.await.unwrap().is_err(),
        "the crashed server cannot answer"
    );
    assert_eq!(app.ledger(&id).await.len(), 1, "charged before the crash");

    let second = InProc::start(
        &db,
        &provider,
        &[
            "--lease-ms",
            "6000",
            "--provider-timeout-ms",
            "5000",
            "--in-progress-wait-ms",
            "0",
        ],
    )
    .await;
    let r = second.pay(&t, &id, Some(&k), 1, "pm_card_slow").await;
    assert_eq!(
        (r.status, r.code()),
        (409, ErrorCode::InProgress),
        "the lease is live: never charged again"
    );
    second.advance(Duration::from_millis(6_001));
    let r = second.pay(&t, &id, Some(&k), 1, "pm_card_slow").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let charges = second.ledger(&id).await;
    assert_eq!(
        charges.len(),
        1,
        "settled from the existing charge, never charged again"
    );
    assert_eq!(r.json()["payment"]["chargeId"], charges[0]["id"]);
    assert_eq!(second.order_status(&t, &id).await, OrderStatus::Paid);
}

/// The in-progress wait is timed by the pay machine on the injected clock, not by the
/// shell's own: a duplicate of a key in flight, with a wait of 30 s, answers 409
/// `IN_PROGRESS` as soon as the test moves the clock past its deadline, while its twin's
/// slow charge (4 s) is still at the provider; the twin then settles with the one charge.
async fn a_wait_on_a_key_in_flight_ends_at_the_clocks_deadline(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let flags = [
        "--provider-timeout-ms",
        "5000",
        "--lease-ms",
        "86400000",
        "--in-progress-wait-ms",
        "30000",
    ];
    let s = InProc::start(&db, &provider, &flags).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let first = s.pay(&t, &id, Some(&k), 1, "pm_card_slow");
    let twin = async {
        // The first request holds the key once its charge is at the provider.
        wait_for(
            "the slow charge at the provider",
            Duration::from_secs(3),
            || async { (!s.ledger(&id).await.is_empty()).then_some(()) },
        )
        .await;
        let twin = s.pay(&t, &id, Some(&k), 1, "pm_card_slow");
        // Past any deadline the twin may have fixed: a minute per turn, each turn a look.
        let clock = async {
            for _ in 0..1_000 {
                s.advance(Duration::from_secs(60));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            r = twin => Some(r),
            () = clock => None,
        }
    };
    let (first, twin) = tokio::join!(first, twin);
    let twin = twin.expect("the twin answered");
    assert_eq!(
        (twin.status, twin.code()),
        (409, ErrorCode::InProgress),
        "{}",
        twin.text()
    );
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(s.ledger(&id).await.len(), 1, "one charge");
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Paid);
}

/// The client gives up after a 202 and never retries: the outbox worker finds the abandoned
/// attempt once its lease is over and settles it from the provider (the timeout method's
/// charge exists; the transient one's first call never charged, so it is re-driven with the
/// same provider key). Once each: the audit trail names the job.
async fn the_outbox_worker_settles_abandoned_attempts_from_the_provider(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(
        &db,
        &provider,
        &["--provider-timeout-ms", "300", "--lease-ms", "2000"],
    )
    .await;
    let t = s.session("alice").await;
    for method in ["pm_card_timeout", "pm_card_transient"] {
        let id = s.order(&t).await;
        assert_eq!(
            s.pay(&t, &id, Some(&key()), 1, method).await.status,
            202,
            "{method}"
        );
        payonce_server::run_jobs(&s.state).await;
        assert_eq!(
            s.order_status(&t, &id).await,
            OrderStatus::Paid,
            "{method}: settled by the worker"
        );
        assert_eq!(s.ledger(&id).await.len(), 1, "{method}: charged once");
        payonce_server::run_jobs(&s.state).await;
        assert_eq!(s.ledger(&id).await.len(), 1, "{method}: still once");
    }
    let pool = db.pool().await;
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM audit_log WHERE actor = 'system' AND to_state = 'succeeded'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(n, 2, "the audit trail names the job");
}

/// Retention: finished keys and tombstones are deleted once the clock passes their expiry
/// (and not a millisecond before); processing attempts never, however late.
async fn finished_keys_expire_with_the_clock_but_processing_ones_never(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(
        &db,
        &provider,
        &[
            "--key-retention-secs",
            "60",
            "--provider-timeout-ms",
            "300",
            "--lease-ms",
            "2000",
        ],
    )
    .await;
    let t = s.session("alice").await;
    let declined = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &declined, Some(&key()), 1, "pm_card_decline")
            .await
            .status,
        402
    );
    let paid = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &paid, Some(&key()), 1, "pm_card_approve")
            .await
            .status,
        200
    );
    for id in [&declined, &paid] {
        let cancel = json!({ "key": key() });
        let path = format!("/orders/{id}/payment-attempts/cancel");
        let r = s.send("POST", &path, &t, None, cancel).await;
        assert_eq!(r.attempt_status(), AttemptStatus::Cancelled);
    }
    // The timeout method's attempt stays processing (the jobs never run here).
    let busy = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &busy, Some(&key()), 1, "pm_card_timeout")
            .await
            .status,
        202
    );
    let pool = db.pool().await;
    let statuses = || async {
        let rows: Vec<(String,)> = sqlx::query_as("SELECT status FROM attempts ORDER BY status")
            .fetch_all(&pool)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.0).collect::<Vec<_>>()
    };
    s.advance(Duration::from_secs(59));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        [
            "cancelled",
            "cancelled",
            "declined",
            "processing",
            "succeeded"
        ],
        "within retention"
    );
    s.advance(Duration::from_secs(2));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        ["cancelled", "processing"],
        "finished keys expired, and the paid order's tombstone; the payable one's stays"
    );
    let cart = json!({ "items": [{ "sku": "tee-classic", "quantity": 2 }] });
    let r = s
        .send("PATCH", &format!("/orders/{declined}/cart"), &t, None, cart)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        ["processing"],
        "its order changed: no pay can meet the tombstone any more"
    );
    s.advance(Duration::from_secs(365 * 86_400));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        ["processing"],
        "processing attempts are never deleted"
    );
}

/// With `--metrics-token`, `/metrics` answers only that bearer token (401 problem otherwise),
/// and the stuck-attempts gauge is read from the store at most once per its max age on the
/// clock (10 s, `GAUGE_MAX_AGE_MS` in src/metrics.rs): a new stuck attempt shows only once
/// the cached figure is that old, however often it is scraped meanwhile; each age threshold
/// counts only the attempts at least that old.
async fn metrics_need_their_token_and_read_the_store_once_per_max_age(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let token = "metrics-scrape-token-0123456789";
    let flags = ["--metrics-token", token, "--provider-timeout-ms", "200"];
    let s = InProc::start(&db, &provider().await, &flags).await;
    for wrong in ["", "metrics-scrape-token-012345678", SECRET] {
        let r = s.send("GET", "/metrics", wrong, None, Value::Null).await;
        assert_eq!(r.status, 401, "token {wrong:?}: {}", r.text());
        assert_eq!(r.code(), ErrorCode::Unauthenticated);
    }
    let gauges = || async {
        let r = s.send("GET", "/metrics", token, None, Value::Null).await;
        assert_eq!(r.status, 200, "{}", r.text());
        ["0", "60", "300", "3600"].map(|age| {
            let series = format!(r#"payonce_attempts_processing{{older_than_seconds="{age}"}}"#);
            metric_value(&r.text(), &series).expect("the gauge is there")
        })
    };
    let gauge = || async { gauges().await[0] };
    assert_eq!(gauges().await, [0.0; 4]);
    let t = s.session("alice").await;
    let order = s.order(&t).await;
    let r = s.pay(&t, &order, Some(&key()), 1, "pm_card_timeout").await;
    assert_eq!(r.status, 202, "the provider never answers: {}", r.text());
    s.clock.advance(9_999);
    assert_eq!(gauge().await, 0.0, "the figure read 9.999 s ago is served");
    s.clock.advance(1);
    assert_eq!(gauge().await, 1.0, "10 s old: read again");
    s.clock.advance(50_000);
    assert_eq!(gauges().await, [1.0, 1.0, 0.0, 0.0], "60 s old");
}

/// Only new keys spend the new-attempt bucket, per user; a refused key waits exactly
/// `Retry-After` on the clock and then goes through once; a runaway loop of replays meets the
/// looser per-request bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_keys_are_rate_limited_per_user_and_retries_are_not() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let provider = provider().await;
    let flags = [
        "--new-attempts-burst",
        "2",
        "--new-attempts-per-min",
        "60",
        "--pay-rate-burst",
        "20",
        "--pay-rate-per-min",
        "60",
    ];
    let s = InProc::start(&db, &provider, &flags).await;
    let (alice, bob) = (s.session("alice").await, s.session("bob").await);
    let mut orders = Vec::new();
    for _ in 0..3 {
        orders.push(s.order(&alice).await);
    }
    let keys = [key(), key(), key()];
    for i in 0..2 {
        let r = s
            .pay(&alice, &orders[i], Some(&keys[i]), 1, "pm_card_approve")
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The third new key within the burst is refused before anything is claimed or charged.
    let limited = s
        .pay(&alice, &orders[2], Some(&keys[2]), 1, "pm_card_approve")
        .await;
    assert_eq!(
        (limited.status, limited.code()),
        (429, ErrorCode::RateLimited),
        "{}",
        limited.text()
    );
    assert!(limited.is_problem());
    let retry_after: u64 = limited
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(s.ledger(&orders[2]).await.is_empty());
    // Retries of a known key are not new attempts: they replay.
    for _ in 0..5 {
        let r = s
            .pay(&alice, &orders[0], Some(&keys[0]), 1, "pm_card_approve")
            .await;
        assert_eq!(
            (r.status, r.header("idempotent-replayed").as_deref()),
            (200, Some("true"))
        );
    }
    // Another user has a bucket of their own.
    let bobs = s.order(&bob).await;
    assert_eq!(
        s.pay(&bob, &bobs, Some(&key()), 1, "pm_card_approve")
            .await
            .status,
        200
    );
    // Just before Retry-After the key is still refused; at it, it goes through, once.
    s.advance(Duration::from_millis(retry_after * 1000 - 100));
    assert_eq!(
        s.pay(&alice, &orders[2], Some(&keys[2]), 1, "pm_card_approve")
            .await
            .status,
        429
    );
    s.advance(Duration::from_millis(100));
    let r = s
        .pay(&alice, &orders[2], Some(&keys[2]), 1, "pm_card_approve")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.ledger(&orders[2]).await.len(), 1);
    // A runaway loop of replays hits the looser per-request bucket.
    let mut refused = 0;
    for _ in 0..30 {
        let r = s
            .pay(&alice, &orders[0], Some(&keys[0]), 1, "pm_card_approve")
            .await;
        if r.status == 429 {
            assert_eq!(r.code(), ErrorCode::RateLimited);
            refused += 1;
        }
    }
    assert!(
        refused > 0,
        "30 requests at one instant exceed a burst of 20"
    );
    let new_attempts = s
        .metric(r#"payonce_pay_rate_limited_total{bucket="new_attempts"}"#)
        .await;
    assert!(new_attempts >= 2.0, "{new_attempts}");
    assert!(
        s.metric(r#"payonce_pay_rate_limited_total{bucket="requests"}"#)
            .await
            >= f64::from(refused)
    );
    assert_eq!(s.ledger(&orders[0]).await.len(), 1);
}

/// Audit rows (and handled webhook events) are kept for `--audit-retention-days`, the dispute
/// window, and deleted once the clock passes it; every answer announces the key retention.
async fn audit_rows_are_kept_for_the_dispute_window_then_deleted(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &["--audit-retention-days", "180"]).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_decline").await;
    assert_eq!(
        r.header("idempotency-key-retention").as_deref(),
        Some("86400")
    );
    let pool = db.pool().await;
    let audit_rows = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM audit_log")
            .fetch_one(&pool)
            .await
            .unwrap();
        n
    };
    let written = audit_rows().await;
    assert!(written > 0);
    s.advance(Duration::from_secs(180 * 86_400 - 1));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        audit_rows().await,
        written,
        "kept within the dispute window"
    );
    s.advance(Duration::from_secs(2));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(audit_rows().await, 0, "deleted after it");
}

/// A 429 `RATE_LIMITED` problem; its `Retry-After` in seconds.
fn limited(r: &Resp) -> u64 {
    assert_eq!(
        (r.status, r.code()),
        (429, ErrorCode::RateLimited),
        "{}",
        r.text()
    );
    assert!(r.is_problem());
    r.header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap()
}

/// Order creation and cancels that write a tombstone spend per-user buckets; a cancel that
/// finds the key's attempt spends nothing; a refused cancel leaves no tombstone, so the key
/// can still pay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_and_tombstones_are_rate_limited_per_user() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let provider = provider().await;
    let flags = ["--orders-per-min", "3", "--tombstones-per-min", "2"];
    let s = InProc::start(&db, &provider, &flags).await;
    let (alice, bob) = (s.session("alice").await, s.session("bob").await);
    let orders = [
        s.order(&alice).await,
        s.order(&alice).await,
        s.order(&alice).await,
    ];
    let items = json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] });
    let r = s.send("POST", "/orders", &alice, None, items.clone()).await;
    let wait = limited(&r);
    assert!((1..=20).contains(&wait), "one order per 20 s: {wait}");
    s.order(&bob).await; // bob's bucket is his own
    s.advance(Duration::from_secs(wait));
    s.order(&alice).await;

    let path = format!("/orders/{}/payment-attempts/cancel", orders[0]);
    let cancel = |k: &str| s.send("POST", &path, &alice, None, json!({ "key": k }));
    for _ in 0..2 {
        let r = cancel(&key()).await;
        assert_eq!(r.attempt_status(), AttemptStatus::Cancelled, "{}", r.text());
    }
    let k = key();
    limited(&cancel(&k).await);
    // No tombstone was written for the refused cancel: the key still pays, once.
    let r = s
        .pay(&alice, &orders[0], Some(&k), 1, "pm_card_approve")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.ledger(&orders[0]).await.len(), 1);
    // A cancel that finds the attempt writes nothing and is not limited.
    for _ in 0..5 {
        let r = cancel(&k).await;
        assert_eq!(r.attempt_status(), AttemptStatus::Succeeded, "{}", r.text());
    }
    limited(&cancel(&key()).await);
}

/// Unknown coupon codes spend a per-user bucket; once it is empty every code is refused, a
/// valid one too (else 429 against a price would still tell codes apart), until the clock
/// brings a token back. Valid codes never spend one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coupon_guessing_is_throttled_and_valid_codes_spend_nothing() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let provider = provider().await;
    let s = InProc::start(&db, &provider, &["--coupon-misses-per-min", "2"]).await;
    let (carol, dave) = (s.session("carol").await, s.session("dave").await);
    let id = s.order(&carol).await;
    let path = format!("/orders/{id}/cart");
    let coupon = |t: &str, code: &str| {
        let (t, code) = (t.to_owned(), code.to_owned());
        let path = path.clone();
        let s = &s;
        async move {
            s.send("PATCH", &path, &t, None, json!({ "coupon": code }))
                .await
        }
    };
    for code in ["SAVE10", "HALFOFF", "SAVE10", "HALFOFF", "SAVE10"] {
        let r = coupon(&carol, code).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for code in ["GUESS1", "GUESS2"] {
        let r = coupon(&carol, code).await;
        assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));
    }
    let wait = limited(&coupon(&carol, "GUESS3").await);
    assert_eq!(wait, 30, "a token per 30 s");
    limited(&coupon(&carol, "HALFOFF").await);
    let r = s
        .send("GET", &format!("/orders/{id}"), &carol, None, Value::Null)
        .await;
    assert_eq!(
        r.json()["coupon"],
        "SAVE10",
        "the refused code changed nothing"
    );
    // The order's own coupon is no guess: its cart still changes.
    let two = json!({ "items": [{ "sku": "tee-classic", "quantity": 2 }] });
    let r = s.send("PATCH", &path, &carol, None, two).await;
    assert_eq!(
        (r.status, &r.json()["coupon"]),
        (200, &json!("SAVE10")),
        "{}",
        r.text()
    );
    // Another user guesses on his own budget (his order: a 404 would spend nothing).
    let other = s.order(&dave).await;
    let r = s
        .send(
            "PATCH",
            &format!("/orders/{other}/cart"),
            &dave,
            None,
            json!({ "coupon": "GUESS1" }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    s.advance(Duration::from_secs(wait));
    let r = coupon(&carol, "HALFOFF").await;
    assert_eq!((r.status, &r.json()["coupon"]), (200, &json!("HALFOFF")));
    assert_eq!(
        coupon(&carol, "GUESS4").await.status,
        400,
        "the token that came back"
    );
    limited(&coupon(&carol, "GUESS5").await);
}

/// Every pay and refund answer carries `Idempotency-Key-Retention`, the refusals before any
/// rule ran too: 400 bad key, 401, 404 another user's order, 413, 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pay_answer_carries_the_key_retention() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let provider = provider().await;
    let flags = [
        "--key-retention-secs",
        "7200",
        "--pay-rate-burst",
        "6",
        "--pay-rate-per-min",
        "1",
    ];
    let s = InProc::start(&db, &provider, &flags).await;
    let (alice, bob) = (s.session("alice").await, s.session("bob").await);
    let id = s.order(&alice).await;
    let pay = format!("/orders/{id}/pay");
    let body = json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" });
    let big = json!({ "orderVersion": 1, "paymentMethodId": "x".repeat(20_000) });
    let answers = [
        (
            400,
            s.send("POST", &pay, &alice, Some("short"), body.clone())
                .await,
        ),
        (
            401,
            s.send("POST", &pay, "nope", Some(&key()), body.clone())
                .await,
        ),
        (
            404,
            s.send("POST", &pay, &bob, Some(&key()), body.clone()).await,
        ),
        (413, s.send("POST", &pay, &alice, Some(&key()), big).await),
        (
            404,
            s.send(
                "POST",
                "/payments/pay_nope/refund",
                &alice,
                Some(&key()),
                Value::Null,
            )
            .await,
        ),
    ];
    for (status, r) in &answers {
        assert_eq!(r.status, *status, "{}", r.text());
        assert!(r.is_problem(), "{status}");
        assert_eq!(
            r.header("idempotency-key-retention").as_deref(),
            Some("7200"),
            "{status}"
        );
    }
    let k = key();
    let mut last = s.pay(&alice, &id, Some(&k), 1, "pm_card_approve").await;
    while last.status != 429 {
        assert_eq!(last.status, 200, "{}", last.text());
        last = s.pay(&alice, &id, Some(&k), 1, "pm_card_approve").await;
    }
    limited(&last);
    assert_eq!(
        last.header("idempotency-key-retention").as_deref(),
        Some("7200")
    );
    // Other routes do not announce it.
    let r = s
        .send("GET", &format!("/orders/{id}"), &alice, None, Value::Null)
        .await;
    assert_eq!(r.header("idempotency-key-retention"), None);
}

/// What the edge refuses is an RFC 9457 problem with a stable code: a target past 8 KiB
/// (414), more than 100 headers or 32 KiB of them (431), a request past the request
/// timeout (408: here a body that never ends, with a longer body timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_refusals_are_problems() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let provider = provider().await;
    let flags = [
        "--provider-timeout-ms",
        "50",
        "--in-progress-wait-ms",
        "50",
        "--request-timeout-ms",
        "150",
        "--body-timeout-ms",
        "60000",
    ];
    let s = InProc::start(&db, &provider, &flags).await;
    let send = |req: Request<Body>| s.route(req);
    let get = |uri: String| Request::get(uri);
    let long = format!("/catalog?q={}", "a".repeat(8 * 1024));
    let many = (0..101).fold(get("/catalog".into()), |r, i| {
        r.header(format!("x-h{i}"), "v")
    });
    let large = get("/catalog".into()).header("x-big", "v".repeat(33 * 1024));
    let ok = (0..90).fold(get("/catalog".into()), |r, i| {
        r.header(format!("x-h{i}"), "v")
    });
    let never = Body::from_stream(futures_util::stream::pending::<
        Result<Vec<u8>, std::io::Error>,
    >());
    let slow = Request::post("/dev/sessions").header("content-type", "application/json");
    for (want, code, req) in [
        (
            414,
            Some(ErrorCode::UriTooLong),
            get(long).body(Body::empty()).unwrap(),
        ),
        (
            431,
            Some(ErrorCode::HeadersTooLarge),
            many.body(Body::empty()).unwrap(),
        ),
        (
            431,
            Some(ErrorCode::HeadersTooLarge),
            large.body(Body::empty()).unwrap(),
        ),
        (
            408,
            Some(ErrorCode::RequestTimeout),
            slow.body(never).unwrap(),
        ),
        (200, None, ok.body(Body::empty()).unwrap()),
    ] {
        let r = send(req).await;
        assert_eq!(r.status, want, "{}", r.text());
        if let Some(code) = code {
            assert!(r.is_problem(), "{want}");
            assert_eq!(r.code(), code);
        }
    }
}
