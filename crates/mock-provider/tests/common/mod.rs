//! Test helpers: the provider served for real on 127.0.0.1:0, one helper per endpoint, and
//! a tiny webhook receiver that verifies signatures with the crate's own `verify`.
#![allow(dead_code)] // each test binary uses a different subset

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use payonce_mock_provider::{verify, MockProvider, ProviderConfig};
use payonce_protocol::headers::{IDEMPOTENCY_KEY, WEBHOOK_SIGNATURE};
use payonce_protocol::provider::{methods, paths, Charge, ChargeRequest, Ledger, WebhookEvent};
use payonce_protocol::Problem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const SECRET: &str = "whsec_tests_0123456789";

pub struct TestProvider {
    pub base: String,
    pub client: reqwest::Client,
    pub provider: MockProvider,
}

/// Tests must not wait seconds: ms-scale delays unless a test asks otherwise.
pub fn fast_config() -> ProviderConfig {
    let mut config = ProviderConfig {
        webhook_secret: SECRET.to_owned(),
        slow_delay: Duration::from_millis(800),
        timeout_delay: Duration::from_secs(30),
        ..ProviderConfig::default()
    };
    config.webhook_retry.initial_backoff = Duration::from_millis(20);
    config.webhook_retry.max_backoff = Duration::from_millis(100);
    config.webhook_retry.request_timeout = Duration::from_secs(2);
    config
}

pub async fn spawn(config: ProviderConfig) -> TestProvider {
    let provider = MockProvider::new(config).expect("provider opens");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(provider.clone().serve(listener));
    TestProvider {
        base,
        client: reqwest::Client::new(),
        provider,
    }
}

pub fn request(order_id: &str, method: &str) -> ChargeRequest {
    ChargeRequest {
        amount: 5000,
        currency: "USD".to_owned(),
        payment_method_id: method.to_owned(),
        order_id: order_id.to_owned(),
    }
}

pub fn approve(order_id: &str) -> ChargeRequest {
    request(order_id, methods::APPROVE)
}

/// A fresh provider key (16+ chars, allowed alphabet).
pub fn key(label: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("pk-{label}-{:016}", N.fetch_add(1, Ordering::Relaxed))
}

impl TestProvider {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn charge(&self, key: &str, body: &ChargeRequest) -> reqwest::Response {
        self.client
            .post(self.url(paths::CHARGES))
            .header(IDEMPOTENCY_KEY, key)
            .json(body)
            .send()
            .await
            .expect("charge request sent")
    }

    pub async fn refund(&self, charge_id: &str, key: &str) -> reqwest::Response {
        self.client
            .post(self.url(&paths::refunds(charge_id)))
            .header(IDEMPOTENCY_KEY, key)
            .send()
            .await
            .expect("refund request sent")
    }

    pub async fn by_key(&self, key: &str) -> reqwest::Response {
        self.client
            .get(self.url(&paths::charge_by_key(key)))
            .send()
            .await
            .expect("lookup sent")
    }

    pub async fn ledger(&self, order_id: Option<&str>) -> Vec<Charge> {
        let mut req = self.client.get(self.url(paths::LEDGER));
        if let Some(order_id) = order_id {
            req = req.query(&[("orderId", order_id)]);
        }
        let resp = req.send().await.expect("ledger sent");
        assert_eq!(resp.status(), 200);
        resp.json::<Ledger>().await.expect("ledger json").charges
    }
}

/// Reads a problem answer, checking its media type and that `status` matches the code.
pub async fn problem(resp: reqwest::Response) -> Problem {
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()["content-type"],
        "application/problem+json",
        "problem media type"
    );
    let problem: Problem = resp.json().await.expect("problem json");
    assert_eq!(problem.status, status);
    assert_eq!(problem.code.http_status(), status);
    problem
}

/// One received webhook delivery.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event: WebhookEvent,
    pub verified: bool,
}

/// A webhook receiver: answers 500 to the first `fail_first` deliveries, 200 after.
pub struct Receiver {
    pub url: String,
    state: Arc<ReceiverState>,
}

struct ReceiverState {
    fail_first: usize,
    attempts: AtomicUsize,
    accepted: Mutex<Vec<Delivery>>,
}

async fn receive(
    State(state): State<Arc<ReceiverState>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let n = state.attempts.fetch_add(1, Ordering::SeqCst);
    if n < state.fail_first {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let header = headers
        .get(WEBHOOK_SIGNATURE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let verified = verify(SECRET, header, &body, now, Duration::from_secs(300)).is_ok();
    let Ok(event) = serde_json::from_slice::<WebhookEvent>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    state
        .accepted
        .lock()
        .unwrap()
        .push(Delivery { event, verified });
    StatusCode::OK
}

impl Receiver {
    pub async fn start(fail_first: usize) -> Self {
        let state = Arc::new(ReceiverState {
            fail_first,
            attempts: AtomicUsize::new(0),
            accepted: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, state }
    }

    pub fn attempts(&self) -> usize {
        self.state.attempts.load(Ordering::SeqCst)
    }

    pub fn accepted(&self) -> Vec<Delivery> {
        self.state.accepted.lock().unwrap().clone()
    }

    /// Waits (bounded) until at least `n` deliveries were accepted, and returns them.
    pub async fn wait_for(&self, n: usize) -> Vec<Delivery> {
        for _ in 0..500 {
            let got = self.accepted();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("expected {n} webhook deliveries, got {:?}", self.accepted());
    }
}
