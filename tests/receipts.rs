//! Receipts from other tabs are hints: a receipt posted on the `payonce` BroadcastChannel (by a
//! channel of our own, playing another tab) is believed only for the same API and checkout,
//! and only after the server confirms it with one request carrying the receipt's key. The
//! server is an injected `fetch` answering by key. And the other half of "tabs agree": a tab
//! that waits for another tab's payment (played by Web Locks held from JavaScript) adopts the
//! attempt that tab shows; a server's "paid by another key" and "busy" are outcomes.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
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
            r#"{{"baseUrl":"{API}","retry":{{"baseDelayMs":100,"maxDelayMs":100}}}}"#
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

/// A server that answers every pay with `pay` (status, body) and every cancel with a
/// tombstone; it logs `pay <key>` / `cancel <key>` in `window[log]`.
fn refusing_server(log: &str, pay: (u16, String)) -> JsValue {
    let (status, body) = pay;
    run_js(&format!(
        "window.{log} = []; return (url, init) => {{ \
           const json = (s, b) => Promise.resolve(new Response(b, {{ status: s, headers: {{ 'Content-Type': 'application/json' }} }})); \
           if (url.endsWith('/cancel')) {{ \
             window.{log}.push('cancel ' + JSON.parse(init.body).key); \
             return json(200, JSON.stringify({{ status: 'cancelled' }})); \
           }} \
           window.{log}.push('pay ' + new Headers(init.headers).get('Idempotency-Key')); \
           return json({status}, {body:?}); \
         }};"
    ))
}

#[wasm_bindgen_test]
async fn order_already_paid_is_paid_by_another_key_and_the_key_is_removed() {
    let body = format!(
        r#"{{"type":"t","title":"t","status":409,"code":"ORDER_ALREADY_PAID","payment":{}}}"#,
        payment("ord_p1")
    );
    let fetch = refusing_server("__p1", (409, body));
    let c = client(&fetch);
    let out = pay(&c, "ord_p1").await;
    assert_eq!(s(&out, "kind"), "paid", "{out:?}");
    assert_eq!(get(&out, "byThisAttempt"), JsValue::FALSE);
    assert_eq!(s(&get(&out, "payment"), "chargeId"), "ch_tab");
    assert!(stored("ord_p1").is_none(), "the refused key is removed");
    assert_eq!(keys("__p1").len(), 1, "one request: {:?}", keys("__p1"));
}

/// 402 `ACTION_EXPIRED`: the customer left 3-D Secure past the server's deadline and nothing
/// was charged. A final outcome: `expired`, the key removed, the next Pay a new key.
#[wasm_bindgen_test]
async fn action_expired_is_final_expired_and_the_key_is_removed() {
    let expired = (
        402,
        r#"{"type":"t","title":"t","status":402,"code":"ACTION_EXPIRED","attemptStatus":"expired"}"#
            .to_owned(),
    );
    let fetch = refusing_server("__p3", expired);
    let c = client(&fetch);
    let out = pay(&c, "ord_p3").await;
    assert_eq!(s(&out, "kind"), "expired", "{out:?}");
    assert!(stored("ord_p3").is_none(), "the key is removed");
    let first = keys("__p3");
    assert_eq!(first.len(), 1, "final at once, never retried: {first:?}");
    let out = pay(&c, "ord_p3").await;
    assert_eq!(s(&out, "kind"), "expired");
    let sent = keys("__p3");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_ne!(sent[0], sent[1], "the next Pay makes a new key");
}

#[wasm_bindgen_test]
async fn payment_already_active_is_busy_and_the_refused_key_is_tombstoned_never_resent() {
    let busy = (
        409,
        r#"{"type":"t","title":"t","status":409,"code":"PAYMENT_ALREADY_ACTIVE"}"#.to_owned(),
    );
    let fetch = refusing_server("__p2", busy);
    let c = client(&fetch);
    let out = pay(&c, "ord_p2").await;
    assert_eq!(s(&out, "kind"), "busy", "{out:?}");
    let sent = keys("__p2");
    let key = sent[0].strip_prefix("pay ").unwrap().to_owned();
    assert_eq!(
        sent,
        [format!("pay {key}"), format!("cancel {key}")],
        "refused, then tombstoned with a cancel"
    );
    assert!(stored("ord_p2").is_none(), "nothing of it is kept");
    // The next Pay makes a new key: the refused one is never sent again.
    let out = pay(&c, "ord_p2").await;
    assert_eq!(s(&out, "kind"), "busy");
    let sent = keys("__p2");
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert!(
        !sent[2..].iter().any(|k| k.ends_with(&key)),
        "the refused key is never resent: {sent:?}"
    );
}

/// Holds the Web Lock `name` (as another tab would) until the returned function is called.
fn hold_lock(name: &str) -> js_sys::Function {
    run_js(&format!(
        "let release; const held = new Promise((r) => (release = r)); \
         navigator.locks.request({name:?}, () => held); return () => release();"
    ))
    .unchecked_into()
}

#[wasm_bindgen_test]
async fn a_tab_waiting_for_another_tabs_payment_adopts_its_attempt() {
    const OTHER_KEY: &str = "0a7c3c1e-3a4f-4d0e-9a55-2f7f0f6f1b11";
    let api = "https://api.tabs.example";
    // The other tab: it holds the order's lock and shows the attempt it is sending (its key,
    // with another payment method than ours).
    let release_order = hold_lock("payonce:ord_t1");
    let claim = format!(
        r#"payonce-claim:{{"baseUrl":"{api}","key":"{OTHER_KEY}","snapshot":{{"orderId":"ord_t1","orderVersion":1,"paymentMethodId":"pm_card_slow"}}}}"#
    );
    let release_claim = hold_lock(&claim);
    tick(20).await;

    // The server: a replay of the other tab's paid answer for its key, a decline for any other.
    let fetch = run_js(
        "window.__t1 = []; return (url, init) => { \
           const key = new Headers(init.headers).get('Idempotency-Key'); \
           window.__t1.push(key + ' ' + JSON.parse(init.body).paymentMethodId); \
           const json = (s, b) => Promise.resolve(new Response(JSON.stringify(b), { status: s, headers: { 'Content-Type': 'application/json' } })); \
           if (key === '0a7c3c1e-3a4f-4d0e-9a55-2f7f0f6f1b11') return json(200, { status: 'succeeded', orderId: 'ord_t1', payment: { id: 'pay_t1', orderId: 'ord_t1', amount: 100, currency: 'EUR', paymentMethodId: 'pm_card_slow', chargeId: 'ch_t1', status: 'succeeded' } }); \
           return json(402, { type: 't', title: 't', status: 402, code: 'PAYMENT_DECLINED' }); \
         };",
    );
    let events = Rc::new(RefCell::new(Vec::<String>::new()));
    let ev = events.clone();
    let on_event = Closure::<dyn Fn(JsValue)>::new(move |e: JsValue| {
        let t = s(&e, "type");
        if t.starts_with("tab") {
            let key = get(&e, "key").as_string().unwrap_or_default();
            ev.borrow_mut().push(format!("{t} {key}"));
        }
    });
    let c = PayonceClient::create(with(
        with(js(&format!(r#"{{"baseUrl":"{api}"}}"#)), "fetch", &fetch),
        "onEvent",
        on_event.as_ref(),
    ))
    .unwrap();
    let (on_status, statuses) = recorder();
    let paying = c.pay(
        js(r#"{"orderId":"ord_t1","orderVersion":1,"paymentMethodId":"pm_card_approve"}"#),
        Some(with(js("{}"), "onStatus", &on_status).unchecked_into()),
    );
    for _ in 0..50 {
        if !statuses.borrow().is_empty() {
            break;
        }
        tick(20).await;
    }
    assert_eq!(statuses.borrow().as_slice(), ["waitingForOtherTab"]);
    let sent = || js_sys::Array::from(&run_js("return window.__t1;")).length();
    assert_eq!(sent(), 0, "nothing is sent while the other tab pays");

    // The other tab's call ends (its claim first, then the order's lock, as the SDK does).
    release_claim.call0(&JsValue::NULL).unwrap();
    release_order.call0(&JsValue::NULL).unwrap();
    let out = settle(paying).await.expect("pay resolves");
    assert_eq!(s(&out, "kind"), "paid", "{out:?}");
    assert_eq!(s(&get(&out, "payment"), "chargeId"), "ch_t1");
    let log: Vec<String> = js_sys::Array::from(&run_js("return window.__t1;"))
        .iter()
        .map(|k| k.as_string().unwrap_or_default())
        .collect();
    assert_eq!(
        log,
        [format!("{OTHER_KEY} pm_card_slow")],
        "one request, with the other tab's key and checkout: no key of our own"
    );
    assert_eq!(
        events.borrow().as_slice(),
        ["tabWait ".to_owned(), format!("tabAdopt {OTHER_KEY}")]
    );
    assert!(stored("ord_t1").is_none(), "the adopted attempt ended paid");
    drop(on_event);
}
