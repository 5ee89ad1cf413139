//! Transport options (`fetch`, `headers`, `credentials`, `endpoints`) against an injected
//! `fetch` that records what each request carried and answers from a script: what leaves the
//! SDK is exactly what the app configured, and the key is never the app's to change.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
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
        r#"{"baseUrl":"https://api.example","credentials":"omit","retry":{"baseDelayMs":100,"maxDelayMs":100}}"#,
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
    let fetch = scripted_fetch("__tlog2", "ord/t2");
    run_js("window.__savedFetch = window.fetch;");
    let _ = js_sys::Reflect::set(&js_sys::global(), &"fetch".into(), &fetch);
    let c = PayonceClient::create(js(
        r#"{"baseUrl":"https://api.example/","headers":{"X-CSRF-Token":"abc"},"retry":{"baseDelayMs":100,"maxDelayMs":100}}"#,
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

/// A fetch that answers every request with `status` and the body text `body`, counting
/// requests in `window[counter]`; `body = None` rejects like a CORS refusal does.
fn answering(counter: &str, status: u16, body: Option<&str>) -> JsValue {
    let answer = match body {
        Some(b) => format!(
            "Promise.resolve(new Response({b:?}, {{ status: {status}, headers: {{ 'Content-Type': 'application/json' }} }}))"
        ),
        None => "Promise.reject(new TypeError('Failed to fetch'))".into(),
    };
    run_js(&format!(
        "window.{counter} = 0; return () => {{ window.{counter} += 1; return {answer}; }};"
    ))
}

fn client_with_fetch(fetch: &JsValue, extra: &str) -> PayonceClient {
    let o = js(&format!(
        r#"{{"baseUrl":"https://api.example","retry":{{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":3}}{extra}}}"#
    ));
    PayonceClient::create(with(o, "fetch", fetch)).expect("client")
}

fn count(counter: &str) -> f64 {
    run_js(&format!("return window.{counter};"))
        .as_f64()
        .unwrap()
}

async fn pay_order(c: &PayonceClient, order: &str) -> Result<JsValue, JsValue> {
    settle(c.pay(
        js(&format!(
            r#"{{"orderId":"{order}","orderVersion":1,"paymentMethodId":"pm_card_approve"}}"#
        )),
        None,
    ))
    .await
}

#[wasm_bindgen_test]
async fn a_success_answer_that_is_not_a_payonce_answer_is_a_protocol_mismatch() {
    let fetch = answering("__m1", 200, Some("<html>Welcome to the proxy</html>"));
    let c = client_with_fetch(&fetch, "");
    let err = pay_order(&c, "ord_m1")
        .await
        .expect_err("not paid, not pending");
    assert_eq!(error_code(&err), "PROTOCOL_MISMATCH");
    assert_eq!(n(&err, "status"), 200.0);
    assert!(
        s(&err, "body").contains("Welcome to the proxy"),
        "what was received"
    );
    assert_eq!(count("__m1"), 1.0, "asking again would get the same body");
    assert!(stored("ord_m1").is_some(), "the key is kept");
}

#[wasm_bindgen_test]
async fn a_payment_for_another_order_is_never_a_receipt() {
    let body = r#"{"status":"succeeded","orderId":"ord_m2","payment":{"id":"pay_9","orderId":"ord_OTHER","amount":1,"currency":"EUR","paymentMethodId":"pm","chargeId":"ch_9","status":"succeeded"}}"#;
    let fetch = answering("__m2", 200, Some(body));
    let c = client_with_fetch(&fetch, "");
    let err = pay_order(&c, "ord_m2").await.expect_err("not paid");
    assert_eq!(error_code(&err), "PROTOCOL_MISMATCH");
    assert!(
        s(&err, "message").contains("another order"),
        "{}",
        s(&err, "message")
    );
    assert_eq!(
        s(&get(&get(&err, "body"), "payment"), "orderId"),
        "ord_OTHER"
    );
    assert!(stored("ord_m2").is_some(), "the key is kept");
}

#[wasm_bindgen_test]
async fn an_unknown_problem_code_reaches_the_app_with_status_detail_and_body() {
    let body = r#"{"type":"/problems/teapot","title":"t","status":418,"code":"TEAPOT_BUSY","detail":"short and stout"}"#;
    let fetch = answering("__m3", 418, Some(body));
    let c = client_with_fetch(&fetch, "");
    let err = pay_order(&c, "ord_m3").await.expect_err("refused");
    assert_eq!(error_code(&err), "SERVER_REJECTED");
    assert_eq!(n(&err, "status"), 418.0);
    assert_eq!(s(&err, "problemCode"), "TEAPOT_BUSY");
    assert_eq!(s(&err, "detail"), "short and stout");
    assert_eq!(s(&get(&err, "body"), "title"), "t");
    let json = js_sys::JSON::stringify(&err).unwrap().as_string().unwrap();
    assert!(json.contains("TEAPOT_BUSY"), "{json}");
    assert!(stored("ord_m3").is_some(), "a refusal keeps the key");
}

#[wasm_bindgen_test]
async fn two_network_failures_warn_network_or_cors_at_once_naming_what_to_check() {
    // Every request fails as a CORS refusal does; the warning records how many requests had
    // been made when it came, and its message.
    let fetch = answering("__m4", 0, None);
    let on_warning = run_js(
        "window.__w4 = []; \
         return (code, message) => window.__w4.push({ code, message, sent: window.__m4 });",
    );
    let c = PayonceClient::create(with(
        with(
            js(r#"{"baseUrl":"https://api.example","retry":{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":4}}"#),
            "fetch",
            &fetch,
        ),
        "onWarning",
        &on_warning,
    ))
    .unwrap();
    let out = pay_order(&c, "ord_m4").await.expect("pending");
    assert_eq!(
        (s(&out, "kind"), s(&out, "reason")),
        ("pending".into(), "attempts".into())
    );
    assert_eq!(count("__m4"), 4.0);
    let warnings = js_sys::Array::from(&run_js("return window.__w4;")).to_vec();
    assert_eq!(warnings.len(), 1, "said once");
    assert_eq!(s(&warnings[0], "code"), "NETWORK_OR_CORS");
    assert_eq!(
        n(&warnings[0], "sent"),
        2.0,
        "at once, after the second try"
    );
    let message = s(&warnings[0], "message");
    for named in [
        "credentials",
        "Access-Control-Allow-Origin",
        "Access-Control-Allow-Credentials",
        "Access-Control-Allow-Headers",
        "X-Request-Id",
    ] {
        assert!(message.contains(named), "{named} in: {message}");
    }
    assert!(stored("ord_m4").is_some());
}

/// A JS function that pushes what it is called with onto `window[name]`.
fn collector(name: &str) -> JsValue {
    run_js(&format!(
        "window.{name} = []; return (e) => {{ window.{name}.push(e); }};"
    ))
}

#[wasm_bindgen_test]
async fn on_event_and_debug_tell_every_request_answer_wait_and_outcome() {
    let fetch = scripted_fetch("__tlog3", "ord_ev");
    let on_event = collector("__events");
    // `debug: true` logs the same events to the console.
    run_js("window.__savedDebug = console.debug; window.__logged = []; console.debug = (tag, e) => window.__logged.push([tag, e]);");
    let (on_status, statuses) = recorder();
    let opts = js(
        r#"{"baseUrl":"https://api.example","debug":true,"retry":{"baseDelayMs":100,"maxDelayMs":200}}"#,
    );
    let c = PayonceClient::create(with(with(opts, "fetch", &fetch), "onEvent", &on_event)).unwrap();
    let out = settle(c.pay(
        js(r#"{"orderId":"ord_ev","orderVersion":1,"paymentMethodId":"pm_card_approve"}"#),
        Some(with(js("{}"), "onStatus", &on_status).unchecked_into()),
    ))
    .await;
    run_js("console.debug = window.__savedDebug;");
    out.unwrap();
    let events = js_sys::Array::from(&run_js("return window.__events;")).to_vec();
    let types: Vec<String> = events.iter().map(|e| s(e, "type")).collect();
    assert_eq!(
        types,
        ["request", "answer", "wait", "request", "answer", "outcome"]
    );
    let key = s(&events[0], "key");
    assert_eq!(key.len(), 36);
    assert_eq!(
        (n(&events[0], "attempt"), n(&events[3], "attempt")),
        (1.0, 2.0)
    );
    assert_eq!(
        s(&events[0], "url"),
        "https://api.example/orders/ord_ev/pay"
    );
    assert_eq!(n(&events[1], "status"), 503.0);
    assert!(n(&events[1], "elapsedMs") >= 0.0);
    assert_eq!(get(&events[1], "replayed"), JsValue::FALSE);
    assert_eq!(s(&events[2], "why"), "serverTrouble");
    assert!(n(&events[2], "ms") >= 30.0, "waits at least the base delay");
    assert_eq!(n(&events[4], "status"), 200.0);
    assert_eq!(s(&get(&events[5], "outcome"), "kind"), "paid");
    assert_eq!(s(&events[5], "key"), key);
    let logged = js_sys::Array::from(&run_js("return window.__logged;")).to_vec();
    assert_eq!(logged.len(), events.len(), "debug logs every event");
    assert_eq!(
        js_sys::Array::from(&logged[0])
            .get(0)
            .as_string()
            .as_deref(),
        Some("[payonce]")
    );
    // processing, then checkingStatus after the 503; the retry does not repeat it.
    assert_eq!(
        statuses.borrow().as_slice(),
        ["processing", "checkingStatus"]
    );
}

#[wasm_bindgen_test]
async fn a_cancel_answered_422_key_elsewhere_resolves_but_a_bare_404_keeps_the_key() {
    // An unresolved attempt to cancel: the pay answers 503 until the attempts run out.
    let pay_fetch = answering("__c0", 503, Some("{}"));
    let c = client_with_fetch(&pay_fetch, "");
    let out = pay_order(&c, "ord_c1").await.unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    let out = pay_order(&c, "ord_c2").await.unwrap();
    assert_eq!(s(&out, "kind"), "pending");

    // A bare 404 (a wrong URL in front of the server, say) proves nothing: key kept.
    let c404 = client_with_fetch(&answering("__c1", 404, Some("<html>nope</html>")), "");
    let out = settle(c404.cancel("ord_c1".into())).await.unwrap();
    assert_eq!(s(&out, "kind"), "unknown");
    assert!(stored("ord_c1").is_some());

    // The server says the key belongs to another order: it can never pay this one.
    let body = r#"{"type":"t","title":"t","status":422,"code":"KEY_REUSED_WITH_DIFFERENT_DETAILS","detail":"this key belongs to another order"}"#;
    let c422 = client_with_fetch(&answering("__c2", 422, Some(body)), "");
    let out = settle(c422.cancel("ord_c2".into())).await.unwrap();
    assert_eq!(
        (s(&out, "kind"), s(&out, "problemCode")),
        (
            "notFound".into(),
            "KEY_REUSED_WITH_DIFFERENT_DETAILS".into()
        )
    );
    assert!(stored("ord_c2").is_none(), "resolved, no longer blocking");
}

#[wasm_bindgen_test]
async fn action_required_keeps_the_key_and_the_same_key_finishes_it() {
    // The bank's challenge is pending until the page sets window.__3dsDone.
    let fetch = run_js(
        "window.__3dsDone = false; window.__3dsKeys = []; \
         return (url, init) => { \
           window.__3dsKeys.push(new Headers(init.headers).get('Idempotency-Key')); \
           const json = (s, b) => Promise.resolve(new Response(JSON.stringify(b), { status: s, headers: { 'Content-Type': 'application/json' } })); \
           if (!window.__3dsDone) return json(402, { type: '/problems/action-required', title: 't', status: 402, \
             code: 'ACTION_REQUIRED', next: { type: 'redirect', url: 'https://bank.example/3ds/abc' } }); \
           const payment = { id: 'pay_3ds', orderId: 'ord_3ds', amount: 100, currency: 'EUR', \
             paymentMethodId: 'pm_card_3ds', chargeId: 'ch_3ds', status: 'succeeded' }; \
           return json(200, { status: 'succeeded', orderId: 'ord_3ds', payment }); \
         };",
    );
    let c = client_with_fetch(&fetch, "");
    let checkout =
        || js(r#"{"orderId":"ord_3ds","orderVersion":1,"paymentMethodId":"pm_card_3ds"}"#);
    let out = settle(c.pay(checkout(), None)).await.expect("resolves");
    assert_eq!(s(&out, "kind"), "actionRequired");
    assert_eq!(
        s(&get(&out, "next"), "url"),
        "https://bank.example/3ds/abc",
        "the server's next, untouched"
    );
    let key = s(&stored("ord_3ds").expect("the key is kept"), "key");
    // The customer completes the challenge; the page pays again with the same checkout.
    run_js("window.__3dsDone = true;");
    let out = settle(c.pay(checkout(), None)).await.expect("resolves");
    assert_eq!(s(&out, "kind"), "paid");
    let keys: Vec<String> = js_sys::Array::from(&run_js("return window.__3dsKeys;"))
        .iter()
        .map(|k| k.as_string().unwrap())
        .collect();
    assert_eq!(keys, [key.clone(), key], "one key for the whole attempt");
    assert!(stored("ord_3ds").is_none(), "paid is final");
}

#[wasm_bindgen_test]
async fn checkout_extras_are_sent_stored_and_part_of_the_intention() {
    let fetch = run_js(
        "window.__bodies = []; return (url, init) => { window.__bodies.push(JSON.parse(init.body)); \
           return Promise.resolve(new Response('{}', { status: 503 })); };",
    );
    let c = client_with_fetch(&fetch, "");
    let with_extras = |coupon: &str| {
        js(&format!(
            r#"{{"orderId":"ord_x1","orderVersion":1,"paymentMethodId":"pm_card_approve","extras":{{"shippingOptionId":"ship_express","couponCode":"{coupon}"}}}}"#
        ))
    };
    let out = settle(c.pay(with_extras("SAVE10"), None)).await.unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    let bodies = js_sys::Array::from(&run_js("return window.__bodies;")).to_vec();
    let extras = get(&bodies[0], "extras");
    assert_eq!(
        (s(&extras, "shippingOptionId"), s(&extras, "couponCode")),
        ("ship_express".into(), "SAVE10".into()),
        "sent in the pay body"
    );
    assert_eq!(n(&bodies[0], "orderVersion"), 1.0);
    let e = stored("ord_x1").unwrap();
    assert_eq!(
        s(&get(&get(&e, "snapshot"), "extras"), "couponCode"),
        "SAVE10",
        "stored with the attempt"
    );
    assert_eq!(
        s(
            &get(&c.pending_attempt("ord_x1".into()), "extras"),
            "couponCode"
        ),
        "SAVE10"
    );
    // Another coupon is another intention: refused while this attempt is open.
    let err = settle(c.pay(with_extras("OTHER"), None)).await.unwrap_err();
    assert_eq!(error_code(&err), "SNAPSHOT_CONFLICT");
    // The same extras reuse the key.
    settle(c.pay(with_extras("SAVE10"), None)).await.unwrap();
    let bodies = js_sys::Array::from(&run_js("return window.__bodies;")).to_vec();
    assert_eq!(bodies.len(), 6, "3 + 3 requests, none for the conflict");

    // Without extras the body is exactly the protocol's PayRequest.
    let c2 = client_with_fetch(&fetch, "");
    settle(c2.pay(
        js(r#"{"orderId":"ord_x2","orderVersion":1,"paymentMethodId":"pm_card_approve"}"#),
        None,
    ))
    .await
    .unwrap();
    let bodies = js_sys::Array::from(&run_js("return window.__bodies;")).to_vec();
    let keys = js_sys::Object::keys::<JsValue>(bodies[6].unchecked_ref());
    assert_eq!(keys.length(), 2, "orderVersion and paymentMethodId only");

    // Extras are strings, and a wrong one is named.
    let err = settle(c2.pay(
        js(r#"{"orderId":"ord_x3","orderVersion":1,"paymentMethodId":"pm","extras":{"couponCode":5}}"#),
        None,
    ))
    .await
    .unwrap_err();
    assert_eq!(error_code(&err), "INVALID_CHECKOUT");
    assert!(
        s(&err, "message").contains("extras.couponCode"),
        "{}",
        s(&err, "message")
    );
}

/// A client whose `fetch` is `fetch` and whose `headers` is `headers` (either may be
/// `undefined`), with `onEvent` collecting into `window[events]`.
fn edge_client(fetch: &JsValue, headers: &JsValue, events: &str) -> PayonceClient {
    let o = js(r#"{"baseUrl":"https://api.example","retry":{"baseDelayMs":100,"maxDelayMs":100}}"#);
    let o = with(with(o, "onEvent", &collector(events)), "fetch", fetch);
    let o = if headers.is_undefined() {
        o
    } else {
        with(o, "headers", headers)
    };
    PayonceClient::create(o).unwrap()
}

fn events_of(name: &str) -> Vec<JsValue> {
    js_sys::Array::from(&run_js(&format!("return window.{name};"))).to_vec()
}

#[wasm_bindgen_test]
async fn a_failing_headers_function_ends_pay_at_once_and_nothing_leaves() {
    let fetch = answering("__h1", 503, Some("{}"));
    // A token refresh that fails: the app's own error, which must reach the app as `cause`.
    let headers = run_js(
        "window.__h1err = new Error('token refresh failed'); \
         return async () => { throw window.__h1err; };",
    );
    let c = edge_client(&fetch, &headers, "__h1ev");
    let t0 = js_sys::Date::now();
    let err = pay_order(&c, "ord_h1").await.expect_err("rejects");
    assert!(js_sys::Date::now() - t0 < 1_000.0, "at once, no retries");
    assert_eq!(error_code(&err), "TRANSPORT_FAILED");
    assert!(err.is_instance_of::<js_sys::Error>());
    assert_eq!(
        get(&err, "cause"),
        run_js("return window.__h1err;"),
        "the app's error"
    );
    assert_eq!(count("__h1"), 0.0, "no request left");
    assert!(stored("ord_h1").is_none(), "as before the call: no key");
    let events = events_of("__h1ev");
    let types: Vec<String> = events.iter().map(|e| s(e, "type")).collect();
    assert_eq!(
        types,
        ["requestFailed", "outcome"],
        "no request or answer that never was"
    );
    assert_eq!(s(&events[0], "reason"), "headers");
    assert!(s(&events[0], "error").contains("token refresh failed"));
    assert_eq!(error_code(&get(&events[1], "error")), "TRANSPORT_FAILED");
}

#[wasm_bindgen_test]
async fn a_failing_headers_or_fetch_leaves_a_stored_attempt_exactly_as_it_was() {
    // A first call leaves an unresolved attempt (503 until the attempts run out).
    let c = client_with_fetch(&answering("__h2", 503, Some("{}")), "");
    assert_eq!(
        s(&pay_order(&c, "ord_h2").await.unwrap(), "kind"),
        "pending"
    );
    let before = session()
        .get_item("payonce:attempt:ord_h2")
        .unwrap()
        .expect("stored");
    // headers that throws at once, then a fetch of the app's that rejects with its own error.
    let throwing = run_js("return () => { throw new Error('signed out'); };");
    let rejecting = run_js("return async () => { throw new RangeError('no session'); };");
    for (fetch, headers, step) in [
        (answering("__h2b", 200, Some("{}")), throwing, "headers"),
        (rejecting, JsValue::UNDEFINED, "fetch"),
    ] {
        let c = edge_client(&fetch, &headers, "__h2ev");
        let err = pay_order(&c, "ord_h2").await.expect_err(step);
        assert_eq!(error_code(&err), "TRANSPORT_FAILED", "{step}");
        assert!(
            get(&err, "cause").is_instance_of::<js_sys::Error>(),
            "{step}"
        );
        let after = session().get_item("payonce:attempt:ord_h2").unwrap();
        assert_eq!(
            after.as_deref(),
            Some(before.as_str()),
            "{step}: same key, same record"
        );
        let failed: Vec<JsValue> = events_of("__h2ev")
            .into_iter()
            .filter(|e| s(e, "type") == "requestFailed")
            .collect();
        assert_eq!(failed.len(), 1, "{step}");
        assert_eq!(s(&failed[0], "reason"), step);
    }
    assert_eq!(count("__h2b"), 0.0);
}

#[wasm_bindgen_test]
async fn events_carry_the_time_the_request_ids_retry_after_and_why_no_answer_came() {
    // 1: a network failure; 2: a 503 with Retry-After and the server's request id; 3: paid.
    let fetch = run_js(
        "window.__e5 = []; \
         return (url, init) => { \
           const h = new Headers(init.headers); window.__e5.push(h.get('X-Request-Id')); \
           if (window.__e5.length === 1) return Promise.reject(new TypeError('Failed to fetch')); \
           if (window.__e5.length === 2) return Promise.resolve(new Response('{}', \
             { status: 503, headers: { 'Retry-After': '0', 'X-Request-Id': 'srv-2' } })); \
           const payment = { id: 'pay_1', orderId: 'ord_e5', amount: 100, currency: 'EUR', \
             paymentMethodId: 'pm_card_approve', chargeId: 'ch_1', status: 'succeeded' }; \
           return Promise.resolve(new Response(JSON.stringify({ status: 'succeeded', orderId: 'ord_e5', payment }), \
             { status: 200, headers: { 'Content-Type': 'application/json' } })); \
         };",
    );
    let c = edge_client(&fetch, &JsValue::UNDEFINED, "__e5ev");
    let t0 = js_sys::Date::now();
    assert_eq!(s(&pay_order(&c, "ord_e5").await.unwrap(), "kind"), "paid");
    let t1 = js_sys::Date::now();
    let events = events_of("__e5ev");
    let types: Vec<String> = events.iter().map(|e| s(e, "type")).collect();
    assert_eq!(
        types,
        [
            "request", "answer", "wait", "request", "answer", "wait", "request", "answer",
            "outcome"
        ]
    );
    let mut last = t0;
    for e in &events {
        let at = n(e, "at");
        assert!(at >= last && at <= t1, "`at` in order, epoch ms: {at}");
        last = at;
    }
    let sent: Vec<String> = events_of("__e5")
        .iter()
        .map(|v| v.as_string().unwrap())
        .collect();
    let ids: Vec<String> = [0, 3, 6]
        .iter()
        .map(|&i| s(&events[i], "requestId"))
        .collect();
    assert_eq!(ids, sent, "the X-Request-Id each request carried");
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0].len() == 36,
        "{ids:?}"
    );
    assert_eq!(s(&events[1], "requestId"), ids[0]);
    assert_eq!(s(&events[1], "failure"), "network");
    assert_eq!(s(&events[1], "error"), "TypeError: Failed to fetch");
    assert_eq!(s(&events[4], "retryAfter"), "0");
    assert_eq!(s(&events[4], "serverRequestId"), "srv-2");
    let key = s(&events[0], "key");
    for w in [&events[2], &events[5]] {
        assert_eq!((s(w, "key"), s(w, "endpoint")), (key.clone(), "pay".into()));
    }
}

#[wasm_bindgen_test]
async fn a_request_our_timeout_stopped_says_so() {
    let never = run_js("return () => new Promise(() => {});");
    let o = js(
        r#"{"baseUrl":"https://api.example","requestTimeoutMs":1000,"deadlineMs":1000,"retry":{"maxAttempts":1}}"#,
    );
    let o = with(with(o, "onEvent", &collector("__t5ev")), "fetch", &never);
    let c = PayonceClient::create(o).unwrap();
    assert_eq!(
        s(&pay_order(&c, "ord_t5").await.unwrap(), "kind"),
        "pending"
    );
    let answer = events_of("__t5ev")
        .into_iter()
        .find(|e| s(e, "type") == "answer")
        .unwrap();
    assert_eq!(s(&answer, "failure"), "timeout");
    assert_eq!(get(&answer, "timedOut"), JsValue::TRUE);
}

#[wasm_bindgen_test]
fn unsafe_timings_are_refused_naming_the_option_the_value_and_the_bound() {
    for (bad, says) in [
        (
            r#"{"requestTimeoutMs":0}"#,
            "requestTimeoutMs must be at least 1000, got 0",
        ),
        (
            r#"{"retry":{"baseDelayMs":1}}"#,
            "retry.baseDelayMs must be at least 100, got 1",
        ),
        (
            r#"{"retry":{"baseDelayMs":800,"maxDelayMs":500}}"#,
            "retry.maxDelayMs must be at least retry.baseDelayMs (800), got 500",
        ),
        (
            r#"{"deadlineMs":5000}"#,
            "deadlineMs must be at least requestTimeoutMs (15000), got 5000",
        ),
    ] {
        let o = js(bad);
        let o = with(o, "baseUrl", &"https://api.example".into());
        let err = PayonceClient::create(o).err().expect(bad);
        assert_eq!(error_code(&err), "INVALID_CONFIG", "{bad}");
        assert!(
            s(&err, "message").contains(says),
            "{bad}: {}",
            s(&err, "message")
        );
    }
}
