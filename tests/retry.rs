//! Retry safety in the browser, against canned answers: `window.fetch` is replaced by a stub
//! that answers every pay request of an order with the same status and body, and counts the
//! requests. The four answers that once turned `pay` into a hot loop (202, 409 `IN_PROGRESS`,
//! 429, 503, each with `Retry-After: 0`) must end the call after at most `maxAttempts`
//! requests, each wait at least the base delay.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Installs (once) a `fetch` that answers from `window.__payonceCanned[orderId]` and counts
/// requests per order in `window.__payonceCalls`.
fn install_canned_fetch() {
    run_js(
        "if (!window.__payonceCanned) { \
           window.__payonceCanned = {}; window.__payonceCalls = {}; \
           window.fetch = async (url) => { \
             const order = decodeURIComponent(String(url).split('/orders/')[1].split('/')[0]); \
             window.__payonceCalls[order] = (window.__payonceCalls[order] || 0) + 1; \
             const c = window.__payonceCanned[order]; \
             return new Response(JSON.stringify(c.body), { status: c.status, \
               headers: { 'Content-Type': 'application/json', 'Retry-After': '0' } }); \
           }; \
         }",
    );
}

fn can(order: &str, status: u16, body: &str) {
    install_canned_fetch();
    run_js(&format!(
        "window.__payonceCanned[{order:?}] = {{ status: {status}, body: {body} }};"
    ));
}

fn calls(order: &str) -> f64 {
    run_js(&format!("return window.__payonceCalls[{order:?}] || 0;"))
        .as_f64()
        .unwrap_or(0.0)
}

const MAX_ATTEMPTS: f64 = 3.0;
const BASE_MS: f64 = 100.0;

async fn hot_loop_case(order: &str, status: u16, body: &str) {
    can(order, status, body);
    let c = PayonceClient::create(js(
        r#"{"baseUrl":"http://canned.invalid","requestTimeoutMs":5000,"retry":{"baseDelayMs":100,"maxDelayMs":200,"maxAttempts":3},"deadlineMs":5000}"#,
    ))
    .expect("client");
    let t0 = js_sys::Date::now();
    let out = settle(c.pay(
        js(&format!(
            r#"{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"pm_card_approve"}}"#
        )),
        None,
    ))
    .await
    .expect("pay resolves");
    let took = js_sys::Date::now() - t0;
    let sent = calls(order);
    assert!(
        sent <= MAX_ATTEMPTS,
        "{status} with Retry-After: 0 sent {sent} requests (maxAttempts {MAX_ATTEMPTS})"
    );
    assert_eq!(
        sent, MAX_ATTEMPTS,
        "the budget of requests is used, not more"
    );
    assert_eq!(
        (s(&out, "kind"), s(&out, "reason")),
        ("pending".into(), "attempts".into())
    );
    assert!(
        took >= (MAX_ATTEMPTS - 1.0) * BASE_MS,
        "{took} ms for {sent} requests: a wait was shorter than the base delay"
    );
    let e = stored(order).expect("the key is kept");
    assert_eq!(n(&e, "sends"), MAX_ATTEMPTS);
}

#[wasm_bindgen_test]
async fn a_202_with_retry_after_0_is_bounded_by_max_attempts() {
    hot_loop_case(
        "ord_hot_202",
        202,
        r#"{"status":"processing","orderId":"ord_hot_202"}"#,
    )
    .await;
}

#[wasm_bindgen_test]
async fn a_409_in_progress_with_retry_after_0_is_bounded_by_max_attempts() {
    hot_loop_case(
        "ord_hot_409",
        409,
        r#"{"type":"/problems/in-progress","title":"t","status":409,"code":"IN_PROGRESS","retryAfter":0}"#,
    )
    .await;
}

#[wasm_bindgen_test]
async fn a_429_with_retry_after_0_is_bounded_by_max_attempts() {
    hot_loop_case(
        "ord_hot_429",
        429,
        r#"{"type":"/problems/rate-limited","title":"t","status":429,"code":"RATE_LIMITED","retryAfter":0}"#,
    )
    .await;
}

#[wasm_bindgen_test]
async fn a_503_with_retry_after_0_is_bounded_by_max_attempts() {
    hot_loop_case(
        "ord_hot_503",
        503,
        r#"{"type":"/problems/store-unavailable","title":"t","status":503,"code":"STORE_UNAVAILABLE","retryAfter":0}"#,
    )
    .await;
}

#[wasm_bindgen_test]
async fn the_default_policy_is_bounded_too() {
    can(
        "ord_hot_default",
        202,
        r#"{"status":"processing","orderId":"ord_hot_default"}"#,
    );
    // Default retry policy (maxAttempts 8, base 500 ms); only the deadline is shortened.
    let c = PayonceClient::create(js(
        r#"{"baseUrl":"http://canned.invalid","deadlineMs":60000}"#,
    ))
    .unwrap();
    let out = settle(c.pay(
        js(r#"{"orderId":"ord_hot_default","orderVersion":1,"paymentMethodId":"pm"}"#),
        None,
    ))
    .await
    .unwrap();
    assert_eq!(s(&out, "reason"), "attempts");
    assert_eq!(calls("ord_hot_default"), 8.0, "the documented default");
}
