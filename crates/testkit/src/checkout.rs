//! Checkout fixtures: one helper per endpoint a customer's checkout goes through (a dev
//! session, an order, a pay, a cancel, a refund, the metrics) and the provider's ledger,
//! with fully read answers, over either transport ([`Checkout`]): a spawned process
//! ([`HttpApi`]) or an in-process app's router. Answers are read into the protocol's types
//! ([`Resp::code`], [`Resp::attempt_status`]), so tests compare codes, not spellings.

use crate::wait_for;
use payonce_protocol::headers::IDEMPOTENCY_KEY;
use payonce_protocol::{paths, AttemptStatus, ErrorCode, OrderStatus};
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
    /// The problem's `code`; fails the test when the answer is not a problem with a known
    /// code (its status and body in the message).
    pub fn code(&self) -> ErrorCode {
        let code = serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().and_then(ErrorCode::parse));
        code.unwrap_or_else(|| panic!("not a problem ({}): {}", self.status, self.text()))
    }
    /// The body's `attemptStatus` (a problem about an attempt), or else its `status` (a pay
    /// or cancel answer).
    pub fn attempt_status(&self) -> AttemptStatus {
        let v = self.json();
        let s = v["attemptStatus"].as_str().or(v["status"].as_str());
        s.and_then(AttemptStatus::parse)
            .unwrap_or_else(|| panic!("no attempt status ({}): {}", self.status, self.text()))
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

/// One request to the API, built once for either transport: a process gets it over HTTP
/// ([`HttpApi::request`]), an in-process app through its router.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// A JSON body (sent with `content-type: application/json`).
    pub body: Option<Value>,
}

impl Req {
    pub fn new(method: &'static str, path: impl Into<String>) -> Req {
        Req {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: None,
        }
    }
    pub fn get(path: impl Into<String>) -> Req {
        Req::new("GET", path)
    }
    pub fn post(path: impl Into<String>) -> Req {
        Req::new("POST", path)
    }
    pub fn patch(path: impl Into<String>) -> Req {
        Req::new("PATCH", path)
    }
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
    pub fn bearer(self, token: &str) -> Req {
        self.header("authorization", &format!("Bearer {token}"))
    }
    /// The `Idempotency-Key` header, when there is one.
    pub fn key(self, key: Option<&str>) -> Req {
        match key {
            Some(k) => self.header(IDEMPOTENCY_KEY, k),
            None => self,
        }
    }
    pub fn json(mut self, body: Value) -> Req {
        self.body = Some(body);
        self
    }
}

/// Sends `req` and reads the whole answer.
pub async fn fetch(req: reqwest::RequestBuilder) -> Resp {
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

/// The value of one series in a `GET /metrics` text (0 when absent), e.g.
/// `payonce_pay_replays_total{source="redis"}`.
pub fn metric_in(text: &str, series: &str) -> f64 {
    metric_value(text, series).unwrap_or(0.0)
}

/// The value of one series in a `GET /metrics` text, `None` when the series is absent.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("metric value"))
}

/// A running server a test checks out against, whatever the transport: a spawned process
/// over HTTP or the router of an in-process app. Implementors say how one [`Req`] is
/// answered, and where the provider is; every endpoint helper comes with it. The futures
/// are awaited by the test that owns the server, so no `Send` bound is promised.
#[allow(async_fn_in_trait)]
pub trait Checkout {
    /// The client for the provider (always over HTTP).
    fn http_client(&self) -> &reqwest::Client;
    fn provider_url(&self) -> &str;
    /// One request to the API, its answer fully read.
    async fn call(&self, req: Req) -> Resp;

    /// `POST /dev/sessions`; returns the bearer token.
    async fn session(&self, user: &str) -> String {
        let r = self
            .call(Req::post(paths::DEV_SESSIONS).json(json!({ "userId": user })))
            .await;
        assert_eq!(r.status, 200, "dev session: {}", r.text());
        r.json()["token"].as_str().expect("token").to_owned()
    }

    async fn catalog(&self) -> Value {
        let r = self.call(Req::get(paths::CATALOG)).await;
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
        self.call(Req::post(paths::ORDERS).bearer(token).json(body))
            .await
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

    /// An order of one `tee-classic`; returns its id.
    async fn order(&self, token: &str) -> String {
        id_of(&self.create_order(token, &[("tee-classic", 1)]).await)
    }

    async fn get_order(&self, token: &str, id: &str) -> Resp {
        self.call(Req::get(paths::order(id)).bearer(token)).await
    }

    /// The order's status.
    async fn order_status(&self, token: &str, id: &str) -> OrderStatus {
        self.order_state(token, id).await.0
    }

    /// The order's status, and whether a payment is in progress.
    async fn order_state(&self, token: &str, id: &str) -> (OrderStatus, bool) {
        order_state_of(&self.get_order(token, id).await.json())
    }

    /// Waits (up to 15 s) until the order is `want` with no payment in progress; returns
    /// the order's JSON.
    async fn wait_status(&self, token: &str, id: &str, want: OrderStatus) -> Value {
        let what = format!("order {id} {} with no payment in progress", want.as_str());
        wait_for(&what, Duration::from_secs(15), || async {
            let o = self.get_order(token, id).await.json();
            (order_state_of(&o) == (want, false)).then_some(o)
        })
        .await
    }

    /// Waits until the order shows an active payment (an attempt is processing).
    async fn wait_until_active(&self, token: &str, id: &str) {
        let what = format!("order {id} showing an active payment");
        wait_for(&what, Duration::from_secs(4), || async {
            (self.get_order(token, id).await.json()["paymentInProgress"] == true).then_some(())
        })
        .await
    }

    async fn patch_cart(&self, token: &str, id: &str, body: Value) -> Resp {
        self.call(Req::patch(paths::cart(id)).bearer(token).json(body))
            .await
    }

    fn pay_request(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> Req {
        Req::post(paths::pay(id))
            .bearer(token)
            .json(json!({ "orderVersion": version, "paymentMethodId": method }))
            .key(key)
    }

    async fn pay(
        &self,
        token: &str,
        id: &str,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> Resp {
        self.call(self.pay_request(token, id, key, version, method))
            .await
    }

    async fn cancel(&self, token: &str, id: &str, key: &str) -> Resp {
        self.call(
            Req::post(paths::cancel(id))
                .bearer(token)
                .json(json!({ "key": key })),
        )
        .await
    }

    /// `POST /payments/{payment}/refund`.
    async fn refund(&self, token: &str, payment: &str, key: Option<&str>) -> Resp {
        self.call(Req::post(paths::refund(payment)).bearer(token).key(key))
            .await
    }

    /// The text of `GET /metrics`.
    async fn metrics(&self) -> String {
        let r = self.call(Req::get(paths::METRICS)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    }

    /// The value of one series on `GET /metrics` (0 when absent), e.g.
    /// `payonce_pay_replays_total{source="redis"}`.
    async fn metric(&self, series: &str) -> f64 {
        metric_in(&self.metrics().await, series)
    }

    /// The dev mailbox of one order (`GET /dev/mailbox?orderId=`): the confirmations sent.
    async fn mailbox(&self, token: &str, order: &str) -> Vec<Value> {
        let path = format!("{}?orderId={order}", paths::DEV_MAILBOX);
        let r = self.call(Req::get(path).bearer(token)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["mails"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (up to 10 s) until the order has `n` mails; returns them.
    async fn wait_for_mails(&self, token: &str, order: &str, n: usize) -> Vec<Value> {
        let what = format!("{n} mails for order {order}");
        wait_for(&what, Duration::from_secs(10), || async {
            let mails = self.mailbox(token, order).await;
            (mails.len() >= n).then_some(mails)
        })
        .await
    }

    /// The provider's ledger for one order.
    async fn ledger(&self, order_id: &str) -> Vec<Value> {
        ledger(self.http_client(), self.provider_url(), order_id).await
    }
}

/// An order's `status` and `paymentInProgress`.
pub fn order_state_of(order: &Value) -> (OrderStatus, bool) {
    let status = order["status"].as_str().and_then(OrderStatus::parse);
    let busy = order["paymentInProgress"].as_bool();
    match (status, busy) {
        (Some(status), Some(busy)) => (status, busy),
        _ => panic!("not an order: {order}"),
    }
}

/// A server reached over HTTP (a spawned process): the raw requests a test about the wire
/// builds itself go through here, and [`Checkout::call`] is [`HttpApi::request`] sent.
#[allow(async_fn_in_trait)]
pub trait HttpApi {
    fn client(&self) -> &reqwest::Client;
    fn api_url(&self) -> &str;

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api_url())
    }

    /// Sends a request built with reqwest; reads the whole answer.
    async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        fetch(req).await
    }

    /// `req` as a reqwest request to this server.
    fn request(&self, req: Req) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).expect("method");
        let mut out = self.client().request(method, self.url(&req.path));
        for (name, value) in &req.headers {
            out = out.header(name, value);
        }
        match req.body {
            Some(body) => out.json(&body),
            None => out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> Resp {
        Resp {
            status,
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn answers_read_into_the_protocols_types() {
        let problem = resp(
            409,
            r#"{"code":"IN_PROGRESS","attemptStatus":"processing"}"#,
        );
        assert_eq!(problem.code(), ErrorCode::InProgress);
        assert_eq!(problem.attempt_status(), AttemptStatus::Processing);
        let paid = resp(200, r#"{"status":"succeeded","payment":{}}"#);
        assert_eq!(paid.attempt_status(), AttemptStatus::Succeeded);
        let order = json!({ "status": "unpaid", "paymentInProgress": true });
        assert_eq!(order_state_of(&order), (OrderStatus::Unpaid, true));
    }

    #[test]
    #[should_panic(expected = "not a problem (200)")]
    fn a_code_is_only_read_from_a_problem() {
        resp(200, r#"{"status":"succeeded"}"#).code();
    }

    #[test]
    #[should_panic(expected = "not a problem (409)")]
    fn an_unknown_code_is_no_code() {
        resp(409, r#"{"code":"NOT_A_CODE"}"#).code();
    }

    #[test]
    fn a_series_is_read_whole_not_by_prefix() {
        let text = "# TYPE payonce_redis_up gauge\npayonce_redis_up 1\n\
                    payonce_pay_replays_total{source=\"redis\"} 3\n";
        assert_eq!(metric_in(text, "payonce_redis_up"), 1.0);
        assert_eq!(
            metric_in(text, r#"payonce_pay_replays_total{source="redis"}"#),
            3.0
        );
        assert_eq!(
            metric_value(text, "payonce_redis"),
            None,
            "a prefix is no series"
        );
        assert_eq!(metric_in(text, "payonce_absent_total"), 0.0);
    }
}
