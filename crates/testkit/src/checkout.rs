//! Checkout fixtures: one helper per endpoint a customer's checkout goes through (a dev
//! session, an order, a pay, a cancel) and the provider's ledger, with fully read answers.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::time::Duration;

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    /// The problem `code`, if the body is a problem.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn is_problem(&self) -> bool {
        self.header("content-type").as_deref() == Some("application/problem+json")
    }
}

/// All answers to one key must agree: one 200, and every other one the same bytes replayed.
pub fn assert_agree(answers: &[Resp]) {
    let first = &answers[0];
    for r in answers {
        assert_eq!(
            r.status,
            200,
            "every request gets the outcome: {}",
            r.text()
        );
        assert_eq!(r.body, first.body, "every request gets the same bytes");
    }
    let fresh = answers
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(
        fresh, 1,
        "exactly one request did the work; the others replayed it"
    );
}

/// The HTTP client of the fixtures: a request that hangs fails the test after 30 s.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The provider's ledger for one order: the ground truth for "charged once".
pub async fn ledger(http: &reqwest::Client, provider: &str, order_id: &str) -> Vec<Value> {
    let r = http
        .get(format!("{provider}/ledger?orderId={order_id}"))
        .send()
        .await
        .expect("ledger");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("ledger json");
    v["charges"].as_array().cloned().unwrap_or_default()
}

/// A fresh idempotency key.
pub fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub fn id_of(order: &Value) -> String {
    order["id"].as_str().expect("order id").to_owned()
}

/// A running server a test checks out against: implementors name its API, its provider and
/// the client; every endpoint helper comes with it. The futures are awaited by the test
/// that owns the server, so no `Send` bound is promised.
#[allow(async_fn_in_trait)]
pub trait Checkout {
    fn http_client(&self) -> &reqwest::Client;
    fn api_url(&self) -> &str;
    fn provider_url(&self) -> &str;

    async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let res = req.send().await.expect("request failed");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.bytes().await.expect("body").to_vec();
        Resp {
            status,
            headers,
            body,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api_url())
    }

    /// `POST /dev/sessions`; returns the bearer token.
    async fn session(&self, user: &str) -> String {
        let req = self
            .http_client()
            .post(self.url("/dev/sessions"))
            .json(&json!({ "userId": user }));
        let r = self.send(req).await;
        assert_eq!(r.status, 200, "dev session: {}", r.text());
        r.json()["token"].as_str().expect("token").to_owned()
    }

    async fn catalog(&self) -> Value {
        let r = self
            .send(self.http_client().get(self.url("/catalog")))
            .await;
        assert_eq!(r.status, 200);
        r.json()
    }

    async fn stock(&self, sku: &str) -> i64 {
        let catalog = self.catalog().await;
        catalog
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["sku"] == sku)
            .expect("sku")["stock"]
            .as_i64()
            .unwrap()
    }

    async fn create_order_raw(&self, token: &str, body: Value) -> Resp {
        let req = self.http_client().post(self.url("/orders"));
        self.send(req.bearer_auth(token).json(&body)).await
    }

    /// Creates an order; returns its JSON.
    async fn create_order(&self, token: &str, items: &[(&str, u32)]) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|(s, q)| json!({ "sku": s, "quantity": q }))
            .collect();
        let r = self
            .create_order_raw(token, json!({ "items": items }))
            .await;
        assert_eq!(r.status, 201, "create order: {}", r.text());
        r.json()
    }

    async fn get_order(&self, token: &str, id: &str) -> Resp {
        let req = self.http_client().get(self.url(&format!("/orders/{id}")));
        self.send(req.bearer_auth(token)).await
    }

    async fn patch_cart(&self, token: &str, id: &str, body: Value) -> Resp {
        let req = self
            .http_client()
            .patch(self.url(&format!("/orders/{id}/cart")));
        self.send(req.bearer_auth(token).json(&body)).await
    }

    fn pay_request(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .http_client()
            .post(self.url(&format!("/orders/{id}/pay")))
            .bearer_auth(token)
            .json(&json!({ "orderVersion": version, "paymentMethodId": method }));
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req
    }

    async fn pay(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> Resp {
        self.send(self.pay_request(token, id, key, version, method))
            .await
    }

    async fn cancel(&self, token: &str, id: &str, key: &str) -> Resp {
        let req = self
            .http_client()
            .post(self.url(&format!("/orders/{id}/payment-attempts/cancel")));
        self.send(req.bearer_auth(token).json(&json!({ "key": key })))
            .await
    }

    /// The provider's ledger for one order.
    async fn ledger(&self, order_id: &str) -> Vec<Value> {
        ledger(self.http_client(), self.provider_url(), order_id).await
    }

    /// Waits until the order shows an active payment (an attempt is processing).
    async fn wait_until_active(&self, token: &str, id: &str) {
        let active = crate::eventually(
            Duration::from_secs(4),
            Duration::from_millis(20),
            || async {
                (self.get_order(token, id).await.json()["paymentInProgress"] == true).then_some(())
            },
        )
        .await;
        assert!(
            active.is_some(),
            "order {id} never showed an active payment"
        );
    }
}
