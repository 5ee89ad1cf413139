//! In-process servers: `app(state)` driven with `oneshot` on a fresh database, reading a
//! manual clock, so the rules a clock decides (leases, retention, reconciliation) are tested
//! by moving time instead of sleeping. Process-spawning tests (`crash.rs`, the three-process
//! ones) stay for what needs a process: crashes, failpoints, several instances.

use crate::common::{id_of, key, ledger, Backend, Opts, Proc, Resp, TestDb, SECRET};
use crate::on_both_backends;
use axum::body::Body;
use axum::http::Request;
use clap::Parser;
use payonce_server::clock::{Clock, ManualClock, SystemClock};
use payonce_server::{app, AppState, Cli, Config, Store};
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
async fn provider() -> String {
    let p = payonce_mock_provider::MockProvider::new(Default::default()).expect("provider");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(p.serve(listener));
    url
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

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: &str,
        key: Option<&str>,
        body: Value,
    ) -> Resp {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let req = req.body(Body::from(body.to_string())).unwrap();
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

    pub async fn session(&self, user: &str) -> String {
        let r = self
            .send("POST", "/dev/sessions", "", None, json!({ "userId": user }))
            .await;
        r.json()["token"].as_str().expect("token").to_owned()
    }

    pub async fn order(&self, token: &str) -> String {
        let r = self
            .send(
                "POST",
                "/orders",
                token,
                None,
                json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text());
        id_of(&r.json())
    }

    pub async fn pay(&self, token: &str, id: &str, k: &str, method: &str) -> Resp {
        let body = json!({ "orderVersion": 1, "paymentMethodId": method });
        self.send("POST", &format!("/orders/{id}/pay"), token, Some(k), body)
            .await
    }

    pub async fn status(&self, token: &str, id: &str) -> String {
        let r = self
            .send("GET", &format!("/orders/{id}"), token, None, Value::Null)
            .await;
        r.json()["status"].as_str().unwrap().to_owned()
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(i64::try_from(d.as_millis()).unwrap());
    }
}

on_both_backends!(
    a_crashed_lease_is_taken_over_when_the_clock_passes_it,
    the_outbox_worker_settles_abandoned_attempts_from_the_provider,
    finished_keys_expire_with_the_clock_but_processing_ones_never,
);

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
    let mut first = Proc::spawn(&args, true);
    let api = first.api.clone().unwrap();
    let http = crate::common::client();
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut r = http.post(format!("{api}{path}")).json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r
    };
    let t: Value = post("/dev/sessions", None, json!({ "userId": "alice" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = t["token"].as_str().unwrap().to_owned();
    let o: Value = post(
        "/orders",
        Some(&t),
        json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] }),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = id_of(&o);
    let k = key();
    // The slow method is charged at once and answers after 4 s: kill the server meanwhile.
    let pay = post(
        &format!("/orders/{id}/pay"),
        Some(&t),
        json!({ "orderVersion": 1, "paymentMethodId": "pm_card_slow" }),
    )
    .header("Idempotency-Key", &k);
    let inflight = tokio::spawn(pay.send());
    for _ in 0..200 {
        if !ledger(&http, &provider, &id).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    assert!(
        inflight.await.unwrap().is_err(),
        "the crashed server cannot answer"
    );
    assert_eq!(
        ledger(&http, &provider, &id).await.len(),
        1,
        "charged before the crash"
    );

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
    let r = second.pay(&t, &id, &k, "pm_card_slow").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "IN_PROGRESS"),
        "the lease is live: never charged again"
    );
    second.advance(Duration::from_millis(6_001));
    let r = second.pay(&t, &id, &k, "pm_card_slow").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let charges = ledger(&http, &provider, &id).await;
    assert_eq!(
        charges.len(),
        1,
        "settled from the existing charge, never charged again"
    );
    assert_eq!(r.json()["payment"]["chargeId"], charges[0]["id"]);
    assert_eq!(second.status(&t, &id).await, "paid");
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
        assert_eq!(s.pay(&t, &id, &key(), method).await.status, 202, "{method}");
        payonce_server::run_jobs(&s.state).await;
        assert_eq!(
            s.status(&t, &id).await,
            "paid",
            "{method}: settled by the worker"
        );
        assert_eq!(
            ledger(&s.http, &s.provider, &id).await.len(),
            1,
            "{method}: charged once"
        );
        payonce_server::run_jobs(&s.state).await;
        assert_eq!(
            ledger(&s.http, &s.provider, &id).await.len(),
            1,
            "{method}: still once"
        );
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
        s.pay(&t, &declined, &key(), "pm_card_decline").await.status,
        402
    );
    let cancel = json!({ "key": key() });
    let r = s
        .send(
            "POST",
            &format!("/orders/{declined}/payment-attempts/cancel"),
            &t,
            None,
            cancel,
        )
        .await;
    assert_eq!(r.json()["status"], "cancelled");
    // The timeout method's attempt stays processing (the jobs never run here).
    let busy = s.order(&t).await;
    assert_eq!(
        s.pay(&t, &busy, &key(), "pm_card_timeout").await.status,
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
        ["cancelled", "declined", "processing"],
        "within retention"
    );
    s.advance(Duration::from_secs(2));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        ["processing"],
        "finished keys and tombstones expired"
    );
    s.advance(Duration::from_secs(365 * 86_400));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        statuses().await,
        ["processing"],
        "processing attempts are never deleted"
    );
}
