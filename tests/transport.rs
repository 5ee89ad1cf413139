//! Transport options (`fetch`, `headers`, `credentials`, `endpoints`) against an injected
//! `fetch` that records what each request carried and answers from a script: what leaves the
//! SDK is exactly what the app configured, and the key is never the app's to change.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// A fetch that records `{url, credentials, auth, key, type}` per request into `log` and
/// answers 503 first, then a paid 200 for `order`.
fn scripted_fetch(log: &str, order: &str) -> JsValue {
    run_js(&format!(
        "window.{log} = []; \
         return (url, init) => {{ \
           const h = new Headers(init.headers); \
           window.{log}.push({{ url, credentials: init.credentials, auth: h.get('Authorization'), \
             key: h.get('Idempotency-Key'), type: h.get('Content-Type') }}); \
           if (window.{log}.length === 1) return Promise.resolve(new Response('{{}}', {{ status: 503 }})); \
           const payment = {{ id: 'pay_1', orderId: {order:?}, amount: 100, currency: 'EUR', \
             paymentMethodId: 'pm_card_approve', chargeId: 'ch_1', status: 'succeeded' }}; \
           return Promise.resolve(new Response(JSON.stringify({{ status: 'succeeded', orderId: {order:?}, payment }}), \
             {{ status: 200, headers: {{ 'Content-Type': 'application/json' }} }})); \
         }};"
    ))
}

fn log_entries(log: &str) -> Vec<JsValue> {
    js_sys::Array::from(&run_js(&format!("return window.{log};"))).to_vec()
}

#[wasm_bindgen_test]
async fn every_request_goes_through_the_apps_fetch_headers_credentials_and_endpoints() {
    let fetch = scripted_fetch("__tlog1", "ord_t1");
    // An async headers function, called before every request: a Bearer token that refreshes,
    // and an attempt to set the key, which the SDK must not let through.
    let headers = run_js(
        "let n = 0; \
         return async () => ({ Authorization: 'Bearer t' + (++n), 'idempotency-key': 'evil' });",
    );
    let endpoints = run_js(
        "return { pay: (id) => 'https://shop.example/api/checkout/' + id + '/charge', \
                  cancel: (id) => 'https://shop.example/api/checkout/' + id + '/void' };",
    );
    let opts = js(
        r#"{"baseUrl":"https://api.example","credentials":"omit","retry":{"baseDelayMs":5,"maxDelayMs":10}}"#,
    );
    let opts = with(
        with(with(opts, "fetch", &fetch), "headers", &headers),
        "endpoints",
        &endpoints,
    );
    let c = PayonceClient::create(opts).expect("client");
    let out = settle(c.pay(
        js(r#"{"orderId":"ord_t1","orderVersion":1,"paymentMethodId":"pm_card_approve"}"#),
        None,
    ))
    .await
    .expect("paid");
    assert_eq!(s(&out, "kind"), "paid");
    let sent = log_entries("__tlog1");
    assert_eq!(sent.len(), 2, "a 503, then the paid retry");
    let keys: Vec<String> = sent.iter().map(|r| s(r, "key")).collect();
    assert_eq!(keys[0], keys[1], "one key for both");
    assert_eq!(
        keys[0].len(),
        36,
        "the SDK's key, not the app's: {}",
        keys[0]
    );
    for (i, r) in sent.iter().enumerate() {
        assert_eq!(
            s(r, "url"),
            "https://shop.example/api/checkout/ord_t1/charge"
        );
        assert_eq!(s(r, "credentials"), "omit");
        assert_eq!(s(r, "type"), "application/json");
        assert_eq!(
            s(r, "auth"),
            format!("Bearer t{}", i + 1),
            "headers() is called before every request"
        );
    }
}

#[wasm_bindgen_test]
async fn the_defaults_are_the_global_fetch_credentials_include_and_the_protocol_paths() {
    let fetch = scripted_fetch("__tlog2", "ord_t2");
    run_js("window.__savedFetch = window.fetch;");
    let _ = js_sys::Reflect::set(&js_sys::global(), &"fetch".into(), &fetch);
    let c = PayonceClient::create(js(
        r#"{"baseUrl":"https://api.example/","headers":{"X-CSRF-Token":"abc"},"retry":{"baseDelayMs":5,"maxDelayMs":10}}"#,
    ))
    .expect("client");
    let out = settle(c.pay(
        js(r#"{"orderId":"ord/t2","orderVersion":1,"paymentMethodId":"pm_card_approve"}"#),
        None,
    ))
    .await;
    run_js("window.fetch = window.__savedFetch;");
    out.expect("pay resolves");
    let sent = log_entries("__tlog2");
    assert_eq!(
        s(&sent[0], "url"),
        "https://api.example/orders/ord%2Ft2/pay"
    );
    assert_eq!(s(&sent[0], "credentials"), "include");
    assert_eq!(get(&sent[0], "auth"), JsValue::NULL);
}

#[wasm_bindgen_test]
fn transport_options_are_checked_by_name() {
    for (bad, member) in [
        (
            r#"{"baseUrl":"http://x","credentials":"all"}"#,
            "credentials",
        ),
        (r#"{"baseUrl":"http://x","fetch":"window.fetch"}"#, "fetch"),
        (
            r#"{"baseUrl":"http://x","endpoints":{"pay":"/pay"}}"#,
            "endpoints.pay",
        ),
        (
            r#"{"baseUrl":"http://x","endpoints":{"refund":null}}"#,
            "endpoints.refund",
        ),
        (r#"{"baseUrl":"http://x","headers":"Bearer x"}"#, "headers"),
    ] {
        let err = PayonceClient::create(js(bad)).err().expect(bad);
        assert_eq!(error_code(&err), "INVALID_CONFIG");
        assert!(
            s(&err, "message").contains(member),
            "{bad}: {}",
            s(&err, "message")
        );
    }
}
