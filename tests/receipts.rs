//! Receipts from other tabs are hints: a receipt posted on the `payonce` BroadcastChannel (by a
//! channel of our own, playing another tab) is believed only for the same API and checkout,
//! and only after the server confirms it with one request carrying the receipt's key. The
//! server is an injected `fetch` answering by key.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const API: &str = "https://api.example";
const HINT_KEY: &str = "6f13d95a-e6c1-4bf2-9459-99b502098dc1";

fn payment(order: &str) -> String {
    format!(
        r#"{{"id":"pay_tab","orderId":"{order}","amount":100,"currency":"EUR","paymentMethodId":"pm_card_approve","chargeId":"ch_tab","status":"succeeded"}}"#
    )
}

/// Another tab says it paid `order` through `base` with [`HINT_KEY`].
async fn hear_receipt(base: &str, order: &str) {
    let ch = web_sys::BroadcastChannel::new("payonce").unwrap();
    let m = js(&format!(
        r#"{{"t":"paid","receipt":{{"baseUrl":"{base}","key":"{HINT_KEY}","snapshot":{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"pm_card_approve"}},"payment":{}}}}}"#,
        payment(order)
    ));
    ch.post_message(&m).unwrap();
    tick(50).await;
    ch.close();
}

/// A server that answers the hint's key with `for_hint` (status, body) and every other key
/// with a decline; it logs the key of every request in `window[log]`.
fn server(log: &str, for_hint: (u16, String)) -> JsValue {
    let (status, body) = for_hint;
    run_js(&format!(
        "window.{log} = []; return (url, init) => {{ \
           const key = new Headers(init.headers).get('Idempotency-Key'); window.{log}.push(key); \
           const json = (s, b) => Promise.resolve(new Response(b, {{ status: s, headers: {{ 'Content-Type': 'application/json' }} }})); \
           if (key === '{HINT_KEY}') return json({status}, {body:?}); \
           return json(402, JSON.stringify({{ type: 't', title: 't', status: 402, code: 'PAYMENT_DECLINED' }})); \
         }};"
    ))
}

fn client(fetch: &JsValue) -> PayonceClient {
    PayonceClient::create(with(
        js(&format!(
            r#"{{"baseUrl":"{API}","retry":{{"baseDelayMs":5,"maxDelayMs":10}}}}"#
        )),
        "fetch",
        fetch,
    ))
    .unwrap()
}

fn keys(log: &str) -> Vec<String> {
    js_sys::Array::from(&run_js(&format!("return window.{log};")))
        .iter()
        .map(|k| k.as_string().unwrap_or_default())
        .collect()
}

async fn pay(c: &PayonceClient, order: &str) -> JsValue {
    settle(c.pay(
        js(&format!(
            r#"{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"pm_card_approve"}}"#
        )),
        None,
    ))
    .await
    .expect("pay resolves")
}

fn paid_answer(order: &str) -> (u16, String) {
    (
        200,
        format!(
            r#"{{"status":"succeeded","orderId":"{order}","payment":{}}}"#,
            payment(order)
        ),
    )
}

#[wasm_bindgen_test]
async fn a_receipt_is_confirmed_with_its_own_key_before_it_counts() {
    let fetch = server("__r1", paid_answer("ord_r1"));
    let c = client(&fetch);
    hear_receipt(API, "ord_r1").await;
    let out = pay(&c, "ord_r1").await;
    assert_eq!(s(&out, "kind"), "paid");
    assert_eq!(
        keys("__r1"),
        [HINT_KEY],
        "one request, with the receipt's key (a replay)"
    );
    assert!(stored("ord_r1").is_none(), "no key of our own was minted");
}

#[wasm_bindgen_test]
async fn a_receipt_the_server_does_not_confirm_is_ignored() {
    // The server knows nothing of the hint's key: the receipt was forged or is stale.
    let refused = (
        422,
        r#"{"type":"t","title":"t","status":422,"code":"KEY_REUSED_WITH_DIFFERENT_DETAILS"}"#
            .to_owned(),
    );
    let fetch = server("__r2", refused);
    let c = client(&fetch);
    hear_receipt(API, "ord_r2").await;
    let out = pay(&c, "ord_r2").await;
    assert_eq!(
        s(&out, "kind"),
        "declined",
        "paid for real with our own key: {out:?}"
    );
    let sent = keys("__r2");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], HINT_KEY);
    assert_ne!(sent[1], HINT_KEY, "then our own key");
}

#[wasm_bindgen_test]
async fn a_receipt_from_another_api_or_for_another_checkout_is_not_even_asked_about() {
    let fetch = server("__r3", paid_answer("ord_r3"));
    let c = client(&fetch);
    hear_receipt("https://other-shop.example", "ord_r3").await;
    let out = pay(&c, "ord_r3").await;
    assert_eq!(s(&out, "kind"), "declined");
    assert!(
        !keys("__r3").iter().any(|k| k == HINT_KEY),
        "{:?}",
        keys("__r3")
    );

    // Same API, but the receipt was for version 1 and this checkout is version 2.
    let fetch = server("__r4", paid_answer("ord_r4"));
    let c = client(&fetch);
    hear_receipt(API, "ord_r4").await;
    let out = settle(c.pay(
        js(r#"{"orderId":"ord_r4","orderVersion":2,"paymentMethodId":"pm_card_approve"}"#),
        None,
    ))
    .await
    .unwrap();
    assert_eq!(s(&out, "kind"), "declined");
    assert!(!keys("__r4").iter().any(|k| k == HINT_KEY));
}
