//! Browser tests that need no server: the API is pointed at a closed port, so every request
//! ends without an answer ("outcome unknown"). They check what the client keeps, where, and
//! when: the key saved before the request, reused after a reload, kept on no answer, never
//! handed to other details, and the fallbacks when storage misbehaves.
#![cfg(target_arch = "wasm32")]

mod common;

use common::*;
use payonce::PayonceClient;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Nothing listens there: every pay request fails at the network level.
const DEAD_API: &str = "http://127.0.0.1:1";

fn client(extra: &str) -> PayonceClient {
    let opts = js(&format!(
        r#"{{"baseUrl":"{DEAD_API}","retry":{{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":2}},"deadlineMs":20000{extra}}}"#
    ));
    PayonceClient::create(opts).expect("client")
}

fn checkout(order: &str, version: u32) -> JsValue {
    js(&format!(
        r#"{{"orderId":"{order}","orderVersion":{version},"paymentMethodId":"pm_card_approve"}}"#
    ))
}

async fn pay(c: &PayonceClient, order: &str, version: u32) -> Result<JsValue, JsValue> {
    settle(c.pay(checkout(order, version), None)).await
}

#[wasm_bindgen_test]
async fn the_key_is_saved_before_the_request_and_kept_when_no_answer_comes() {
    let c = client("");
    // When the SDK says "processing" the request is about to leave: the entry must be there.
    let seen_at_processing = std::rc::Rc::new(std::cell::RefCell::new(None));
    let seen = seen_at_processing.clone();
    let on_status = Closure::<dyn Fn(JsValue)>::new(move |status: JsValue| {
        if status.as_string().as_deref() == Some("processing") && seen.borrow().is_none() {
            *seen.borrow_mut() = Some(stored("ord_save").is_some());
        }
    });
    let opts = with(js("{}"), "onStatus", on_status.as_ref());
    let out = settle(c.pay(checkout("ord_save", 3), Some(opts.unchecked_into())))
        .await
        .expect("pay resolves");
    assert_eq!(s(&out, "kind"), "pending");
    assert_eq!(s(&out, "reason"), "attempts");
    assert_eq!(
        *seen_at_processing.borrow(),
        Some(true),
        "entry written before the request"
    );

    let e = stored("ord_save").expect("key kept after an unknown outcome");
    assert_eq!(s(&e, "key").len(), 36, "a v4 UUID minted by the uuid crate");
    assert_eq!(s(&e, "state"), "unknown");
    assert_eq!(n(&e, "sends"), 2.0, "maxAttempts sends, all with this key");
    let snap = get(&e, "snapshot");
    assert_eq!(
        (s(&snap, "orderId"), n(&snap, "orderVersion")),
        ("ord_save".into(), 3.0)
    );
    assert!(n(&e, "createdAt") > 1.7e12);
}

#[wasm_bindgen_test]
async fn a_reloaded_page_reuses_the_same_key() {
    let first = client("");
    pay(&first, "ord_reload", 1).await.unwrap();
    let key = s(&stored("ord_reload").unwrap(), "key");
    drop(first);

    // A new client is what a reload gets: same sessionStorage, nothing in memory.
    let second = client("");
    let pending = second.pending_attempt("ord_reload".into());
    assert_eq!(s(&pending, "key"), key);
    assert_eq!(s(&pending, "state"), "unknown");
    let out = settle(second.resume("ord_reload".into(), None))
        .await
        .unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    let e = stored("ord_reload").unwrap();
    assert_eq!(s(&e, "key"), key, "the same key, never a new one");
    assert_eq!(n(&e, "sends"), 4.0);
}

#[wasm_bindgen_test]
async fn other_details_while_unresolved_are_a_conflict_and_the_old_key_stays() {
    let c = client("");
    pay(&c, "ord_conflict", 3).await.unwrap();
    let key = s(&stored("ord_conflict").unwrap(), "key");
    let err = pay(&c, "ord_conflict", 4)
        .await
        .expect_err("changed version must not pay");
    assert_eq!(error_code(&err), "SNAPSHOT_CONFLICT");
    let e = stored("ord_conflict").unwrap();
    assert_eq!(
        (s(&e, "key"), n(&get(&e, "snapshot"), "orderVersion")),
        (key, 3.0)
    );
}

#[wasm_bindgen_test]
async fn a_damaged_entry_that_names_a_key_blocks_new_payments() {
    let damaged =
        r#"{"key":"6f13d95a-e6c1-4bf2-9459-99b502098dc1","snapshot":"v3:pm_card_approve"}"#;
    session()
        .set_item("payonce:attempt:ord_damaged", damaged)
        .unwrap();
    let c = client("");
    let err = pay(&c, "ord_damaged", 3)
        .await
        .expect_err("a possibly live key must be resolved first");
    assert_eq!(error_code(&err), "UNREADABLE_ATTEMPT");
    assert_eq!(
        session()
            .get_item("payonce:attempt:ord_damaged")
            .unwrap()
            .as_deref(),
        Some(damaged),
        "not overwritten"
    );
    let p = c.pending_attempt("ord_damaged".into());
    assert_eq!(
        (s(&p, "state"), s(&p, "key")),
        (
            "unreadable".into(),
            "6f13d95a-e6c1-4bf2-9459-99b502098dc1".into()
        )
    );
}

#[wasm_bindgen_test]
async fn keyless_garbage_is_reported_and_replaced() {
    session()
        .set_item("payonce:attempt:ord_garbage", "{not json")
        .unwrap();
    let (on_warning, warnings) = recorder();
    let c = PayonceClient::create(with(
        js(&format!(r#"{{"baseUrl":"{DEAD_API}","retry":{{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":1}}}}"#)),
        "onWarning",
        &on_warning,
    ))
    .unwrap();
    let out = pay(&c, "ord_garbage", 1).await.unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    assert!(
        warnings.borrow().iter().any(|w| w == "UNREADABLE_ENTRY"),
        "{:?}",
        warnings.borrow()
    );
    assert_eq!(s(&stored("ord_garbage").unwrap(), "state"), "unknown");
}

#[wasm_bindgen_test]
async fn memory_storage_never_touches_session_storage() {
    let c = client(r#","storage":"memory""#);
    assert_eq!(c.storage_mode(), "memory");
    pay(&c, "ord_memory", 1).await.unwrap();
    assert!(stored("ord_memory").is_none());
    let p = c.pending_attempt("ord_memory".into());
    assert_eq!(s(&p, "state"), "unknown", "kept in memory instead");
    // The unresolved attempt still blocks other details on this page.
    assert_eq!(
        error_code(&pay(&c, "ord_memory", 2).await.unwrap_err()),
        "SNAPSHOT_CONFLICT"
    );
}

#[wasm_bindgen_test]
async fn storage_that_throws_falls_back_to_memory_and_is_reported() {
    // On the global object the attribute is an own property: keep its descriptor to put back.
    run_js(
        "window.__payonceSaved = Object.getOwnPropertyDescriptor(window, 'sessionStorage') \
           || Object.getOwnPropertyDescriptor(Window.prototype, 'sessionStorage'); \
         Object.defineProperty(window, 'sessionStorage', { configurable: true, \
           get() { throw new DOMException('blocked', 'SecurityError'); } });",
    );
    let (on_warning, warnings) = recorder();
    let created = PayonceClient::create(with(
        js(&format!(
            r#"{{"baseUrl":"{DEAD_API}","retry":{{"baseDelayMs":100,"maxDelayMs":100,"maxAttempts":1}}}}"#
        )),
        "onWarning",
        &on_warning,
    ));
    let out = match &created {
        Ok(c) => Some((c.storage_mode(), pay(c, "ord_blocked", 1).await)),
        Err(_) => None,
    };
    run_js("Object.defineProperty(window, 'sessionStorage', window.__payonceSaved);");
    let c = created.expect("a client even without storage");
    let (mode, out) = out.unwrap();
    assert_eq!(mode, "memory");
    assert_eq!(s(&out.unwrap(), "kind"), "pending");
    assert_eq!(warnings.borrow().as_slice(), ["STORAGE_UNAVAILABLE"]);
    assert_eq!(
        s(&c.pending_attempt("ord_blocked".into()), "state"),
        "unknown"
    );
    assert_eq!(
        error_code(&pay(&c, "ord_blocked", 2).await.unwrap_err()),
        "SNAPSHOT_CONFLICT"
    );
}

#[wasm_bindgen_test]
async fn a_double_click_is_one_flight() {
    let c = client("");
    let a = c.pay(checkout("ord_double", 1), None);
    let b = c.pay(checkout("ord_double", 1), None);
    let (a, b) = (settle(a).await.unwrap(), settle(b).await.unwrap());
    assert_eq!(
        (s(&a, "kind"), s(&b, "kind")),
        ("pending".into(), "pending".into())
    );
    // Two flights would have sent twice as often (the second reusing the key after the first).
    assert_eq!(n(&stored("ord_double").unwrap(), "sends"), 2.0);
}

#[wasm_bindgen_test]
async fn two_clients_sharing_storage_share_one_key() {
    let (a, b) = (client(""), client(""));
    let pa = a.pay(checkout("ord_two", 1), None);
    let pb = b.pay(checkout("ord_two", 1), None);
    settle(pa).await.unwrap();
    let key = s(&stored("ord_two").unwrap(), "key");
    settle(pb).await.unwrap();
    let e = stored("ord_two").unwrap();
    // The second client waited on the Web Lock, then reused the first one's key.
    assert_eq!(s(&e, "key"), key);
    assert_eq!(n(&e, "sends"), 4.0);
}

#[wasm_bindgen_test]
async fn abort_ends_the_wait_at_once_and_keeps_the_key() {
    // Waits of up to a minute: only the signal can end this call quickly.
    let c = PayonceClient::create(js(&format!(
        r#"{{"baseUrl":"{DEAD_API}","retry":{{"baseDelayMs":60000,"maxDelayMs":60000,"maxAttempts":9}},"deadlineMs":600000,"longWaitMs":50}}"#
    )))
    .unwrap();
    let ctl = web_sys::AbortController::new().unwrap();
    let (on_status, statuses) = recorder();
    let opts = with(
        with(js("{}"), "signal", &ctl.signal()),
        "onStatus",
        &on_status,
    );
    let p = c.pay(checkout("ord_abort", 1), Some(opts.unchecked_into()));
    // Wait until the call is in its (jittered, up to a minute) retry wait, past longWaitMs.
    for _ in 0..100 {
        if statuses.borrow().iter().any(|s| s == "takingLonger") {
            break;
        }
        tick(20).await;
    }
    assert!(
        statuses.borrow().iter().any(|s| s == "takingLonger"),
        "{:?}",
        statuses.borrow()
    );
    ctl.abort();
    let err = settle(p).await.expect_err("aborted");
    assert_eq!(error_code(&err), "ABORTED");
    let e = stored("ord_abort").expect("abort keeps the key");
    assert_eq!(
        s(&e, "state"),
        "unknown",
        "the attempt stays unresolved, not final"
    );
}

#[wasm_bindgen_test]
async fn clear_all_forgets_every_attempt() {
    let c = client("");
    pay(&c, "ord_clear_1", 1).await.unwrap();
    pay(&c, "ord_clear_2", 1).await.unwrap();
    session().set_item("unrelated", "stays").unwrap();
    assert!(c.clear_all() >= 2);
    assert!(stored("ord_clear_1").is_none() && stored("ord_clear_2").is_none());
    assert_eq!(
        session().get_item("unrelated").unwrap().as_deref(),
        Some("stays")
    );
}

#[wasm_bindgen_test]
fn bad_options_and_checkouts_are_typed_errors() {
    let err = PayonceClient::create(js(r#"{"baseUrl":"ftp://x"}"#))
        .err()
        .expect("rejected");
    assert_eq!(error_code(&err), "INVALID_CONFIG");
    let err = PayonceClient::create(js(r#"{"retry":{}}"#))
        .err()
        .expect("baseUrl is required");
    assert_eq!(error_code(&err), "INVALID_CONFIG");
    let err = PayonceClient::create(js(r#"{"baseUrl":"http://x","retry":{"maxDelayMs":"5s"}}"#))
        .err()
        .expect("type");
    assert_eq!(error_code(&err), "INVALID_CONFIG");
}

#[wasm_bindgen_test]
async fn a_bad_checkout_is_rejected_without_storing_anything() {
    let c = client("");
    let err = settle(c.pay(
        js(r#"{"orderId":"ord_bad","orderVersion":"three","paymentMethodId":"pm"}"#),
        None,
    ))
    .await
    .unwrap_err();
    assert_eq!(error_code(&err), "INVALID_CHECKOUT");
    assert!(stored("ord_bad").is_none());
}

#[wasm_bindgen_test]
async fn offline_waits_for_the_network_without_sending_or_spending_budget() {
    // Headless Chromium is always online: play the browser's part with a getter and the event.
    run_js(
        "window.__payonceOnline = false; Object.defineProperty(navigator, 'onLine', \
           { configurable: true, get() { return window.__payonceOnline; } });",
    );
    let c = client("");
    let (on_status, statuses) = recorder();
    let tokens = c.retry_tokens();
    let p = c.pay(
        checkout("ord_offline", 1),
        Some(with(js("{}"), "onStatus", &on_status).unchecked_into()),
    );
    tick(300).await;
    assert_eq!(statuses.borrow().as_slice(), ["waitingForNetwork"]);
    let e = stored("ord_offline").expect("saved before waiting");
    assert_eq!(
        (s(&e, "state"), n(&e, "sends")),
        ("saved".into(), 0.0),
        "nothing sent while offline"
    );
    assert_eq!(c.retry_tokens(), tokens, "waiting costs no budget");

    run_js("window.__payonceOnline = true; delete navigator.onLine; window.dispatchEvent(new Event('online'));");
    let out = settle(p).await.unwrap();
    assert_eq!(s(&out, "kind"), "pending");
    assert_eq!(
        n(&stored("ord_offline").unwrap(), "sends"),
        2.0,
        "sent once the network came back"
    );
}

#[wasm_bindgen_test]
fn a_payonce_error_is_a_real_error_that_names_what_is_wrong() {
    let err = PayonceClient::create(js(r#"{"baseUrl":"http://x","retry":{"maxDelayMs":"5s"}}"#))
        .err()
        .expect("rejected");
    assert!(err.is_instance_of::<js_sys::Error>(), "instanceof Error");
    assert!(
        err.has_type::<payonce::PayonceError>(),
        "instanceof PayonceError"
    );
    assert_eq!(s(&err, "name"), "PayonceError");
    assert_eq!(s(&err, "code"), "INVALID_CONFIG");
    let message = s(&err, "message");
    assert!(
        message.contains("retry.maxDelayMs") && message.contains(r#""5s""#),
        "the member and the value: {message}"
    );
    let stack = s(&err, "stack");
    assert!(stack.contains(&message), "a stack: {stack}");
    let json = js_sys::JSON::stringify(&err).unwrap().as_string().unwrap();
    assert!(
        json.contains(r#""code":"INVALID_CONFIG""#)
            && json.contains(r#""message":"invalid options: "#),
        "{json}"
    );
    assert!(!json.contains("__wbg_ptr"), "{json}");

    // Unknown options are refused by name, as unknown checkout members are.
    let err = PayonceClient::create(js(r#"{"baseUrl":"http://x","headerz":{}}"#))
        .err()
        .expect("an unknown option is a typo");
    assert_eq!(error_code(&err), "INVALID_CONFIG");
    assert!(
        s(&err, "message").contains("headerz"),
        "{}",
        s(&err, "message")
    );
    let err = PayonceClient::create(js(r#"{"retry":{}}"#)).err().unwrap();
    assert!(s(&err, "message").contains("baseUrl is required"));
}

#[wasm_bindgen_test]
async fn a_bad_checkout_names_the_member_and_the_value() {
    let c = client("");
    let err = settle(c.pay(
        js(r#"{"orderId":"ord_named","orderVersion":"three","paymentMethodId":"pm"}"#),
        None,
    ))
    .await
    .unwrap_err();
    assert!(err.is_instance_of::<js_sys::Error>());
    assert_eq!(error_code(&err), "INVALID_CHECKOUT");
    let message = s(&err, "message");
    assert!(
        message.contains("orderVersion") && message.contains(r#""three""#),
        "{message}"
    );
    let err = settle(c.pay(
        js(r#"{"orderId":"ord_named","orderVersion":1,"paymentMethodId":"pm","coupon":"X"}"#),
        None,
    ))
    .await
    .unwrap_err();
    assert!(
        s(&err, "message").contains("coupon"),
        "{}",
        s(&err, "message")
    );
}
