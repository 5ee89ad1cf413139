//! Browser tests against the real companion server and mock provider (started by
//! `scripts/sdk-browser-tests.sh`, which passes their URLs at compile time in
//! `PAYONCE_TEST_API` and `PAYONCE_TEST_PROVIDER`). The ground truth is the provider's ledger:
//! however the network misbehaves, an order is charged at most once.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use payonce_protocol::provider::{methods, paths as provider_paths, ChargeStatus, Ledger};
use payonce_protocol::{
    body::paths, headers, CartLine, CatalogItem, CreateOrderRequest, DevSessionRequest, Order,
    PayRequest, Problem, UpdateCartRequest,
};
use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// Read at compile time; missing is a test failure (never a skip) with the way out, at run time
// so that the storage tests in the same `wasm-pack test` run still build and run.
fn api() -> &'static str {
    match option_env!("PAYONCE_TEST_API") {
        Some(url) => url,
        None => panic!("PAYONCE_TEST_API is not set: run scripts/sdk-browser-tests.sh, which starts the server"),
    }
}

fn provider() -> &'static str {
    match option_env!("PAYONCE_TEST_PROVIDER") {
        Some(url) => url,
        None => panic!("PAYONCE_TEST_PROVIDER is not set: run scripts/sdk-browser-tests.sh, which starts the server"),
    }
}

/// A credentialed request outside the SDK (test setup and checks). Returns status and body.
async fn http(
    method: &str,
    url: &str,
    body: Option<String>,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    // The mock provider is not the merchant's API: it takes no session (and its CORS does not
    // allow credentials).
    init.set_credentials(if url.starts_with(provider()) {
        web_sys::RequestCredentials::Omit
    } else {
        web_sys::RequestCredentials::Include
    });
    let h = js_sys::Object::new();
    js_sys::Reflect::set(&h, &"Content-Type".into(), &"application/json".into()).unwrap();
    for (k, v) in extra {
        js_sys::Reflect::set(&h, &(*k).into(), &(*v).into()).unwrap();
    }
    init.set_headers(&h);
    if let Some(b) = body {
        init.set_body(&b.into());
    }
    let w = web_sys::window().unwrap();
    let resp: web_sys::Response = JsFuture::from(w.fetch_with_str_and_init(url, &init))
        .await
        .expect("fetch")
        .unchecked_into();
    let text = JsFuture::from(resp.text().unwrap())
        .await
        .unwrap()
        .as_string()
        .unwrap_or_default();
    (resp.status(), text)
}

async fn json<T: DeserializeOwned>(method: &str, url: &str, body: Option<String>) -> T {
    let (status, text) = http(method, url, body, &[]).await;
    assert!(
        (200..300).contains(&status),
        "{method} {url}: {status} {text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"))
}

/// Signs in a fresh user (cookie) and creates an order of one unit of the first SKU.
async fn fresh_order(user: &str) -> Order {
    fresh_order_and_token(user).await.0
}

/// [`fresh_order`], and the user's Bearer token (the sign-in answer carries it too).
async fn fresh_order_and_token(user: &str) -> (Order, String) {
    let suffix = (js_sys::Math::random() * 1e9) as u64;
    let req = DevSessionRequest {
        user_id: format!("{user}-{suffix}"),
    };
    let (status, text) = http(
        "POST",
        &format!("{}{}", api(), paths::DEV_SESSIONS),
        Some(to_json(&req)),
        &[],
    )
    .await;
    assert!((200..300).contains(&status), "dev session: {status} {text}");
    let token = serde_json::from_str::<payonce_protocol::DevSessionResponse>(&text)
        .expect("a sign-in answer")
        .token;
    let catalog: Vec<CatalogItem> =
        json("GET", &format!("{}{}", api(), paths::CATALOG), None).await;
    let sku = catalog
        .iter()
        .find(|i| i.stock > 100)
        .expect("a SKU in stock")
        .sku
        .clone();
    let req = CreateOrderRequest {
        items: vec![CartLine { sku, quantity: 1 }],
        coupon: None,
        address: None,
    };
    let order = json(
        "POST",
        &format!("{}{}", api(), paths::ORDERS),
        Some(to_json(&req)),
    )
    .await;
    (order, token)
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// Charges at the provider for an order: the ground truth.
async fn charges(order_id: &str) -> Vec<ChargeStatus> {
    let url = format!(
        "{}{}?orderId={}",
        provider(),
        provider_paths::LEDGER,
        order_id
    );
    let ledger: Ledger = json("GET", &url, None).await;
    ledger.charges.iter().map(|c| c.status).collect()
}

fn client_options(extra: &str) -> JsValue {
    js(&format!(
        r#"{{"baseUrl":"{}","requestTimeoutMs":8000,"retry":{{"baseDelayMs":100,"maxDelayMs":1000}},"deadlineMs":30000{extra}}}"#,
        api()
    ))
}

fn client(extra: &str) -> PayonceClient {
    PayonceClient::create(client_options(extra)).expect("client")
}

/// An `onEvent` callback and the events it heard.
fn event_log() -> (JsValue, std::rc::Rc<std::cell::RefCell<Vec<JsValue>>>) {
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let s2 = seen.clone();
    let f = Closure::<dyn Fn(JsValue)>::new(move |e: JsValue| s2.borrow_mut().push(e));
    let func: JsValue = f.as_ref().clone();
    f.forget();
    (func, seen)
}

fn checkout(order: &Order, method: &str) -> JsValue {
    js(&format!(
        r#"{{"orderId":"{}","orderVersion":{},"paymentMethodId":"{method}"}}"#,
        order.id, order.version
    ))
}

fn opts(pairs: &[(&str, &JsValue)]) -> Option<js_sys::Object> {
    let o = js("{}");
    for (k, v) in pairs {
        js_sys::Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    Some(o.unchecked_into())
}

fn payment_id(outcome: &JsValue) -> String {
    assert_eq!(s(outcome, "kind"), "paid", "{outcome:?}");
    s(&get(outcome, "payment"), "id")
}

#[wasm_bindgen_test]
async fn a_lost_response_is_retried_with_the_same_key_and_charged_once() {
    let order = fresh_order("lost").await;
    let (on_event, events) = event_log();
    let c = PayonceClient::create(with(client_options(""), "onEvent", &on_event)).unwrap();
    let fault = JsValue::from_str("drop-response");
    let (on_status, statuses) = recorder();
    let out = settle(c.pay(
        checkout(&order, methods::APPROVE),
        opts(&[("devFault", &fault), ("onStatus", &on_status)]),
    ))
    .await
    .unwrap();
    assert!(
        statuses.borrow().iter().any(|s| s == "checkingStatus"),
        "the first answer was lost: {:?}",
        statuses.borrow()
    );
    let payment = get(&out, "payment");
    assert_eq!(s(&out, "kind"), "paid");
    assert_eq!(s(&payment, "orderId"), order.id);
    assert_eq!(
        n(&payment, "amount") as i64,
        order.amount,
        "the server's price"
    );
    assert_eq!(
        charges(&order.id).await,
        [ChargeStatus::Succeeded],
        "charged once"
    );
    assert!(
        stored(&order.id).is_none(),
        "a final outcome removes the key"
    );
    // What onEvent saw: the lost answer, then the server's stored result replayed.
    let answers: Vec<JsValue> = events
        .borrow()
        .iter()
        .filter(|e| s(e, "type") == "answer")
        .cloned()
        .collect();
    let last = answers.last().expect("answers");
    assert_eq!(n(last, "status"), 200.0);
    assert_eq!(
        get(last, "replayed"),
        JsValue::TRUE,
        "the retry got the stored answer"
    );
    assert!(n(last, "attempt") >= 2.0);
    // A support log matches each request to the server's: one id per request, sent as
    // X-Request-Id across origins (the dev server's CORS allows it) and answered back.
    let ids: Vec<String> = events
        .borrow()
        .iter()
        .filter(|e| s(e, "type") == "request")
        .map(|e| s(e, "requestId"))
        .collect();
    assert_eq!(ids.len(), answers.len());
    assert!(ids.iter().all(|id| id.len() == 36), "{ids:?}");
    assert!(
        ids.windows(2).all(|w| w[0] != w[1]),
        "one id per request: {ids:?}"
    );
    assert_eq!(s(last, "requestId"), *ids.last().unwrap());
    assert_eq!(
        s(last, "serverRequestId"),
        s(last, "requestId"),
        "the server logged and answered our id"
    );
    assert!(
        events.borrow().iter().all(|e| n(e, "at") > 1.6e12),
        "`at` on every event"
    );
}

#[wasm_bindgen_test]
async fn a_reload_mid_payment_resumes_with_the_same_key() {
    let order = fresh_order("reload").await;
    let first = client("");
    // The page goes away while the slow charge is under way at the server.
    let ctl = web_sys::AbortController::new().unwrap();
    let signal: JsValue = ctl.signal().into();
    let p = first.pay(
        checkout(&order, methods::SLOW),
        opts(&[("signal", &signal)]),
    );
    tick(500).await;
    ctl.abort();
    let err = settle(p).await.unwrap_err();
    assert_eq!(error_code(&err), "ABORTED");
    let key = s(&stored(&order.id).expect("key survives the reload"), "key");

    let second = client("");
    assert_eq!(s(&second.pending_attempt(order.id.clone()), "key"), key);
    let out = settle(second.resume(order.id.clone(), None)).await.unwrap();
    payment_id(&out);
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
    assert!(stored(&order.id).is_none());
}

#[wasm_bindgen_test]
async fn a_double_click_sends_one_payment() {
    let order = fresh_order("double").await;
    let c = client("");
    let a = c.pay(checkout(&order, methods::APPROVE), None);
    let b = c.pay(checkout(&order, methods::APPROVE), None);
    let (a, b) = (settle(a).await.unwrap(), settle(b).await.unwrap());
    assert_eq!(payment_id(&a), payment_id(&b));
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
}

#[wasm_bindgen_test]
async fn an_attempt_in_progress_is_polled_until_final() {
    let order = fresh_order("slow").await;
    let (on_event, events) = event_log();
    let c = PayonceClient::create(with(client_options(""), "onEvent", &on_event)).unwrap();
    let (on_status, statuses) = recorder();
    let out = settle(c.pay(
        checkout(&order, methods::SLOW),
        opts(&[("onStatus", &on_status)]),
    ))
    .await
    .unwrap();
    payment_id(&out);
    assert_eq!(
        statuses.borrow().as_slice(),
        ["processing"],
        "onStatus hears a status once, not once per poll"
    );
    let answers: Vec<u16> = events
        .borrow()
        .iter()
        .filter(|e| s(e, "type") == "answer")
        .map(|e| n(e, "status") as u16)
        .collect();
    assert!(
        answers.len() >= 2 && answers[..answers.len() - 1].iter().all(|s| *s == 202),
        "the slow charge was polled: {answers:?}"
    );
    assert_eq!(answers.last(), Some(&200));
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
}

#[wasm_bindgen_test]
async fn a_decline_removes_the_key_and_the_next_pay_mints_a_new_one() {
    let order = fresh_order("decline").await;
    let c = client("");
    let out = settle(c.pay(checkout(&order, methods::DECLINE), None))
        .await
        .unwrap();
    assert_eq!(
        (s(&out, "kind"), s(&out, "code")),
        ("declined".into(), "PAYMENT_DECLINED".into())
    );
    assert!(
        stored(&order.id).is_none(),
        "a decline is final: key removed"
    );
    assert!(c.pending_attempt(order.id.clone()).is_undefined());

    let out = settle(c.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap();
    payment_id(&out);
    assert_eq!(
        charges(&order.id).await,
        [ChargeStatus::Declined, ChargeStatus::Succeeded]
    );
}

#[wasm_bindgen_test]
async fn cart_change_after_a_timeout_cancels_tombstones_and_pays_with_a_new_key() {
    let order = fresh_order("cart").await;
    // The first attempt never reaches the server (a dead address, same sessionStorage).
    let lost = PayonceClient::create(js(
        r#"{"baseUrl":"http://127.0.0.1:1","retry":{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":1}}"#,
    ))
    .unwrap();
    let out = settle(lost.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    let k1 = s(&stored(&order.id).unwrap(), "key");

    let c = client("");
    // Changing the cart needs the old attempt resolved first: pay with other details refuses.
    let err = settle(c.pay(checkout(&order, methods::DECLINE), None))
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), "SNAPSHOT_CONFLICT");
    let cancelled = settle(c.cancel(order.id.clone())).await.unwrap();
    assert_eq!(s(&cancelled, "kind"), "cancelled");
    assert!(
        stored(&order.id).is_none(),
        "cancelled is final: key removed"
    );

    let patch = UpdateCartRequest {
        address: Some("1 New Street".into()),
        ..Default::default()
    };
    let changed: Order = json(
        "PATCH",
        &format!("{}{}", api(), paths::cart(&order.id)),
        Some(to_json(&patch)),
    )
    .await;
    assert!(changed.version > order.version);
    let out = settle(c.pay(checkout(&changed, methods::APPROVE), None))
        .await
        .unwrap();
    payment_id(&out);

    // The first request, arriving late, meets the tombstone and cannot charge.
    let late = PayRequest {
        order_version: order.version,
        payment_method_id: methods::APPROVE.into(),
        extras: Default::default(),
    };
    let (status, text) = http(
        "POST",
        &format!("{}{}", api(), paths::pay(&order.id)),
        Some(to_json(&late)),
        &[(headers::IDEMPOTENCY_KEY, &k1)],
    )
    .await;
    let problem: Problem =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text}: {e}"));
    assert_eq!((status, problem.code.as_str()), (409, "ATTEMPT_CANCELLED"));
    assert_eq!(
        charges(&order.id).await,
        [ChargeStatus::Succeeded],
        "one charge"
    );
}

#[wasm_bindgen_test]
async fn a_stale_version_is_order_changed_and_nothing_is_charged() {
    let order = fresh_order("stale").await;
    let patch = UpdateCartRequest {
        address: Some("2 Other Road".into()),
        ..Default::default()
    };
    let changed: Order = json(
        "PATCH",
        &format!("{}{}", api(), paths::cart(&order.id)),
        Some(to_json(&patch)),
    )
    .await;
    let c = client("");
    let out = settle(c.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap();
    assert_eq!(s(&out, "kind"), "orderChanged");
    assert_eq!(n(&out, "currentVersion") as u64, changed.version);
    assert!(
        stored(&order.id).is_none(),
        "the old key was never accepted: removed"
    );
    assert!(charges(&order.id).await.is_empty());
}

#[wasm_bindgen_test]
async fn without_storage_the_memory_fallback_still_pays_once() {
    let order = fresh_order("nostorage").await;
    let (on_warning, warnings) = recorder();
    let c = PayonceClient::create(with(
        js(&format!(r#"{{"baseUrl":"{}","storage":"memory"}}"#, api())),
        "onWarning",
        &on_warning,
    ))
    .unwrap();
    let fault = JsValue::from_str("drop-response");
    let out = settle(c.pay(
        checkout(&order, methods::APPROVE),
        opts(&[("devFault", &fault)]),
    ))
    .await
    .unwrap();
    payment_id(&out);
    assert!(
        warnings.borrow().is_empty(),
        "memory was chosen, not a failure"
    );
    assert!(stored(&order.id).is_none());
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
}

#[wasm_bindgen_test]
async fn two_tabs_paying_one_order_charge_once() {
    let order = fresh_order("tabs").await;
    // Two clients share sessionStorage and Web Locks, as two tabs share locks.
    let (a, b) = (client(""), client(""));
    let pa = a.pay(checkout(&order, methods::SLOW), None);
    let pb = b.pay(checkout(&order, methods::SLOW), None);
    let (ra, rb) = (settle(pa).await.unwrap(), settle(pb).await.unwrap());
    assert_eq!(
        payment_id(&ra),
        payment_id(&rb),
        "the second tab joins the first one's payment"
    );
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
}

#[wasm_bindgen_test]
async fn cancel_without_an_attempt_is_none() {
    let order = fresh_order("none").await;
    let out = settle(client("").cancel(order.id.clone())).await.unwrap();
    assert_eq!(s(&out, "kind"), "none");
}

#[wasm_bindgen_test]
async fn pays_with_a_bearer_token_from_headers_and_no_cookies_through_custom_endpoints() {
    // The user's token, as an identity provider's would be handed to the page.
    let (order, token) = fresh_order_and_token("bearer").await;
    let endpoints = run_js(&format!(
        "return {{ pay: (id) => '{api}/orders/' + encodeURIComponent(id) + '/pay', \
                   cancel: (id) => '{api}/orders/' + encodeURIComponent(id) + '/payment-attempts/cancel' }};",
        api = api()
    ));
    let options = |headers: Option<JsValue>| {
        let o = js(
            r#"{"baseUrl":"https://unused.invalid","credentials":"omit","retry":{"baseDelayMs":100,"maxDelayMs":1000}}"#,
        );
        let o = with(o, "endpoints", &endpoints);
        match headers {
            Some(h) => with(o, "headers", &h),
            None => o,
        }
    };
    // Without the header the cookie stays home (credentials: "omit"): the server does not
    // know who pays.
    let anonymous = PayonceClient::create(options(None)).unwrap();
    let err = settle(anonymous.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap_err();
    assert_eq!(
        (
            error_code(&err),
            n(&err, "status") as u16,
            s(&err, "problemCode")
        ),
        ("SERVER_REJECTED".into(), 401, "UNAUTHENTICATED".into())
    );
    settle(anonymous.cancel(order.id.clone())).await.unwrap();

    let headers = run_js(&format!(
        "return async () => ({{ Authorization: 'Bearer {token}' }});"
    ));
    let c = PayonceClient::create(options(Some(headers))).unwrap();
    let out = settle(c.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap();
    payment_id(&out);
    assert_eq!(charges(&order.id).await, [ChargeStatus::Succeeded]);
}

#[wasm_bindgen_test]
async fn a_cancel_the_server_answers_order_not_found_resolves_the_attempt() {
    let order = fresh_order("gone").await;
    // An unresolved attempt for the order: its request never reached the server.
    let lost = PayonceClient::create(js(
        r#"{"baseUrl":"http://127.0.0.1:1","retry":{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":1}}"#,
    ))
    .unwrap();
    let out = settle(lost.pay(checkout(&order, methods::APPROVE), None))
        .await
        .unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    assert!(stored(&order.id).is_some());
    // Another user signs in on this tab: for them the order does not exist (404), so the
    // server can never charge this key for it.
    let _other = fresh_order("someone-else").await;
    let c = client("");
    let out = settle(c.cancel(order.id.clone())).await.unwrap();
    assert_eq!(
        (s(&out, "kind"), s(&out, "problemCode")),
        ("notFound".into(), "ORDER_NOT_FOUND".into())
    );
    assert!(
        stored(&order.id).is_none(),
        "the attempt no longer blocks the order"
    );
    assert!(charges(&order.id).await.is_empty());
}
