//! The edges a frontend team meets first: two tabs racing for one order (played by two clients
//! of one page, each with its own memory storage, so only Web Locks and the page's receipts
//! join them, as between tabs), a session that expired (401) before the key's first request,
//! and a CORS refusal against a server that is up (the companion server the suite starts).
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// A server that charges the first key it sees for an order, slowly (`ms`), replays that key's
/// answer (`Idempotent-Replayed: true`) and answers any other key `ORDER_ALREADY_PAID`.
/// `window.__race.charges[order]` counts the charges.
fn slow_server(ms: u32) -> JsValue {
    run_js(&format!(
        "window.__race = {{ charges: {{}} }}; const paid = {{}}; \
         return (url, init) => {{ \
           const key = new Headers(init.headers).get('Idempotency-Key'); \
           const order = decodeURIComponent(url.split('/orders/')[1].split('/')[0]); \
           const payment = {{ id: 'pay_' + order, orderId: order, amount: 100, currency: 'EUR', \
             paymentMethodId: 'pm_card_approve', chargeId: 'ch_' + order, status: 'succeeded' }}; \
           const json = (s, b, h) => new Response(JSON.stringify(b), \
             {{ status: s, headers: {{ 'Content-Type': 'application/json', ...h }} }}); \
           let answer; \
           if (paid[order] === undefined) {{ \
             paid[order] = key; window.__race.charges[order] = (window.__race.charges[order] || 0) + 1; \
             answer = json(200, {{ status: 'succeeded', orderId: order, payment }}); \
           }} else if (paid[order] === key) {{ \
             answer = json(200, {{ status: 'succeeded', orderId: order, payment }}, {{ 'Idempotent-Replayed': 'true' }}); \
           }} else {{ \
             answer = json(409, {{ type: 't', title: 't', status: 409, code: 'ORDER_ALREADY_PAID', payment }}); \
           }} \
           return new Promise((r) => setTimeout(() => r(answer), {ms})); \
         }};"
    ))
}

/// A client of its own "tab": memory storage; every status and tab event it hears is pushed
/// onto `window.__seen` with `who` and the time.
fn tab(who: &str, fetch: &JsValue) -> PayonceClient {
    let on_event = run_js(&format!(
        "window.__seen ??= []; return (e) => {{ if (e.type.startsWith('tab')) \
           window.__seen.push({{ who: '{who}', what: e.type, order: e.orderId, at: Date.now() }}); }};"
    ));
    let o = js(
        r#"{"baseUrl":"https://api.race.example","storage":"memory","retry":{"baseDelayMs":100,"maxDelayMs":200}}"#,
    );
    PayonceClient::create(with(with(o, "fetch", fetch), "onEvent", &on_event)).unwrap()
}

fn on_status(who: &str, order: &str) -> js_sys::Object {
    let f = run_js(&format!(
        "return (s) => window.__seen.push({{ who: '{who}', what: s, order: '{order}', at: Date.now() }});"
    ));
    with(js("{}"), "onStatus", &f).unchecked_into()
}

/// When `who` heard `what` for `order`, if it did.
fn heard(who: &str, what: &str, order: &str) -> Option<f64> {
    js_sys::Array::from(&run_js("return window.__seen;"))
        .iter()
        .find(|e| s(e, "who") == who && s(e, "what") == what && s(e, "order") == order)
        .map(|e| n(&e, "at"))
}

#[wasm_bindgen_test]
async fn two_tabs_racing_charge_once_the_waiting_one_says_so_adopts_and_one_says_it_charged() {
    let fetch = slow_server(100);
    let (a, b) = (tab("a", &fetch), tab("b", &fetch));
    for round in 0..50 {
        let order = format!("ord_race_{round}");
        let checkout = || {
            js(&format!(
                r#"{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"pm_card_approve"}}"#
            ))
        };
        let started = js_sys::Date::now();
        // Both Pay clicks in the same task: neither call has run a step yet.
        let pa = a.pay(checkout(), Some(on_status("a", &order)));
        let pb = b.pay(checkout(), Some(on_status("b", &order)));
        let (oa, ob) = (settle(pa).await.unwrap(), settle(pb).await.unwrap());
        let charges = get(&run_js("return window.__race.charges;"), &order).as_f64();
        assert_eq!(charges, Some(1.0), "round {round}: one charge");
        assert_eq!(
            (s(&oa, "kind"), s(&ob, "kind")),
            ("paid".into(), "paid".into())
        );
        let by = |o: &JsValue| get(o, "byThisAttempt").as_bool().unwrap();
        assert!(
            by(&oa) != by(&ob),
            "round {round}: exactly one tab says it charged: a {} b {}",
            by(&oa),
            by(&ob)
        );
        let waiter = if heard("a", "waitingForOtherTab", &order).is_some() {
            "a"
        } else {
            "b"
        };
        let waited = heard(waiter, "waitingForOtherTab", &order)
            .unwrap_or_else(|| panic!("round {round}: the waiting tab said so"));
        assert!(
            waited - started <= 500.0,
            "round {round}: waiting reported after {} ms",
            waited - started
        );
        assert!(
            heard(waiter, "tabWait", &order).is_some(),
            "round {round}: tabWait"
        );
        assert!(
            heard(waiter, "tabAdopt", &order).is_some(),
            "round {round}: the waiting tab adopted the other's attempt"
        );
        let charged = if waiter == "a" { &ob } else { &oa };
        assert!(
            by(charged),
            "round {round}: the tab whose request charged says so"
        );
    }
}

/// A fetch that answers the first request with `first` (status, problem code) and every later
/// one with a receipt; `window[log]` gets each request's key and payment method.
fn first_refused(log: &str, status: u16, code: &str) -> JsValue {
    run_js(&format!(
        "window.{log} = []; return (url, init) => {{ \
           const body = JSON.parse(init.body); \
           const order = decodeURIComponent(url.split('/orders/')[1].split('/')[0]); \
           window.{log}.push(new Headers(init.headers).get('Idempotency-Key') + ' ' + body.paymentMethodId); \
           const json = (s, b) => Promise.resolve(new Response(JSON.stringify(b), \
             {{ status: s, headers: {{ 'Content-Type': 'application/json' }} }})); \
           if (window.{log}.length === 1) return json({status}, {{ type: 't', title: 't', status: {status}, code: '{code}' }}); \
           return json(200, {{ status: 'succeeded', orderId: order, payment: {{ id: 'pay_x', \
             orderId: order, amount: 1, currency: 'EUR', paymentMethodId: body.paymentMethodId, \
             chargeId: 'ch_x', status: 'succeeded' }} }}); \
         }};"
    ))
}

fn checkout(order: &str, method: &str) -> JsValue {
    js(&format!(
        r#"{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"{method}"}}"#
    ))
}

#[wasm_bindgen_test]
async fn an_expired_session_releases_the_attempt_so_another_card_pays_without_cancel() {
    let fetch = first_refused("__e401", 401, "UNAUTHENTICATED");
    let c = PayonceClient::create(with(
        js(r#"{"baseUrl":"https://api.example"}"#),
        "fetch",
        &fetch,
    ))
    .unwrap();
    let err = settle(c.pay(checkout("ord_e401", "pm_card_approve"), None))
        .await
        .expect_err("refused");
    assert_eq!(error_code(&err), "SERVER_REJECTED");
    assert_eq!(s(&err, "problemCode"), "UNAUTHENTICATED");
    assert!(
        stored("ord_e401").is_none(),
        "a 401 claimed no key: nothing left to block the order"
    );
    // Signed in again, the customer pays with another card: no SNAPSHOT_CONFLICT, no cancel.
    let out = settle(c.pay(checkout("ord_e401", "pm_card_other"), None))
        .await
        .expect("paid");
    assert_eq!(s(&out, "kind"), "paid");
    let log = js_sys::Array::from(&run_js("return window.__e401;"));
    assert_eq!(log.length(), 2);
    let (first, second) = (
        log.get(0).as_string().unwrap(),
        log.get(1).as_string().unwrap(),
    );
    assert!(second.ends_with("pm_card_other"), "{second}");
    assert_ne!(
        first.split(' ').next(),
        second.split(' ').next(),
        "a new key for the new card"
    );
}

#[wasm_bindgen_test]
async fn a_refusal_that_proves_nothing_still_keeps_the_key() {
    let fetch = first_refused("__e422", 422, "KEY_REUSED_WITH_DIFFERENT_DETAILS");
    let c = PayonceClient::create(with(
        js(r#"{"baseUrl":"https://api.example"}"#),
        "fetch",
        &fetch,
    ))
    .unwrap();
    let err = settle(c.pay(checkout("ord_e422", "pm_card_approve"), None))
        .await
        .expect_err("refused");
    assert_eq!(error_code(&err), "KEY_REUSED_WITH_DIFFERENT_DETAILS");
    assert!(stored("ord_e422").is_some(), "kept: only cancel can tell");
}

fn api() -> &'static str {
    match option_env!("PAYONCE_TEST_API") {
        Some(url) => url,
        None => panic!(
            "PAYONCE_TEST_API is not set: run scripts/sdk-browser-tests.sh, which starts the server"
        ),
    }
}

#[wasm_bindgen_test]
async fn a_cors_refusal_by_a_server_that_answers_ends_pay_at_once() {
    // Every request of the SDK fails as a CORS refusal does (a TypeError, no answer), while
    // the server itself is up and answers this page.
    let fetch = run_js(
        "window.__cors = 0; return () => { window.__cors += 1; \
           return Promise.reject(new TypeError('Failed to fetch')); };",
    );
    let (on_warning, warnings) = recorder();
    let o = js(&format!(
        r#"{{"baseUrl":"{}","retry":{{"baseDelayMs":100,"maxDelayMs":200,"maxAttempts":8}}}}"#,
        api()
    ));
    let c =
        PayonceClient::create(with(with(o, "fetch", &fetch), "onWarning", &on_warning)).unwrap();
    let started = js_sys::Date::now();
    let err = settle(c.pay(checkout("ord_cors", "pm_card_approve"), None))
        .await
        .expect_err("ends with the error the warning names");
    let took = js_sys::Date::now() - started;
    assert_eq!(error_code(&err), "NETWORK_OR_CORS");
    assert!(s(&err, "message").contains("credentials"), "what to check");
    assert_eq!(warnings.borrow().as_slice(), ["NETWORK_OR_CORS"]);
    assert_eq!(
        run_js("return window.__cors;").as_f64(),
        Some(2.0),
        "no retries after the diagnosis"
    );
    assert!(took < 3_000.0, "at once, not after the retries: {took} ms");
    assert!(stored("ord_cors").is_some(), "the key is kept");
}
