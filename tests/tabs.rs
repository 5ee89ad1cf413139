//! Duplicate-tab detection, in its own test binary: it depends on what the page's first
//! client finds in sessionStorage. Another "tab" is played by a BroadcastChannel of our own.
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

#[wasm_bindgen_test]
async fn a_duplicated_tab_is_detected_and_takes_a_new_id() {
    // A duplicated tab starts with a copy of the original's sessionStorage, tab id included.
    session()
        .set_item("payonce:tab", "tab-original-0001")
        .unwrap();
    let original = web_sys::BroadcastChannel::new("payonce").unwrap();
    let hellos = Rc::new(RefCell::new(Vec::<String>::new()));
    let (h, ch) = (hellos.clone(), original.clone());
    let on_message =
        Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            let m = e.data();
            if s(&m, "t") == "hello" {
                h.borrow_mut().push(s(&m, "tab"));
                // The original tab still holds this id: it says so.
                ch.post_message(&with(js(r#"{"t":"taken"}"#), "tab", &get(&m, "tab")))
                    .unwrap();
            }
        });
    original.set_onmessage(Some(on_message.as_ref().unchecked_ref()));

    let (on_warning, warnings) = recorder();
    let c = PayonceClient::create(with(
        js(r#"{"baseUrl":"http://127.0.0.1:1"}"#),
        "onWarning",
        &on_warning,
    ))
    .unwrap();
    for _ in 0..50 {
        if c.duplicated_tab() {
            break;
        }
        tick(20).await;
    }
    assert_eq!(
        hellos.borrow().as_slice(),
        ["tab-original-0001"],
        "the new tab announced its inherited id"
    );
    assert!(c.duplicated_tab());
    assert_eq!(warnings.borrow().as_slice(), ["DUPLICATED_TAB"]);
    let now = session().get_item("payonce:tab").unwrap().unwrap();
    assert_ne!(now, "tab-original-0001", "the duplicate took a new id");

    // And it now answers for its own id like an original would.
    let replies = Rc::new(RefCell::new(Vec::<String>::new()));
    let r = replies.clone();
    let on_reply =
        Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            r.borrow_mut()
                .push(format!("{}:{}", s(&e.data(), "t"), s(&e.data(), "tab")));
        });
    original.set_onmessage(Some(on_reply.as_ref().unchecked_ref()));
    original
        .post_message(&with(
            js(r#"{"t":"hello"}"#),
            "tab",
            &JsValue::from_str(&now),
        ))
        .unwrap();
    for _ in 0..50 {
        if !replies.borrow().is_empty() {
            break;
        }
        tick(20).await;
    }
    assert_eq!(replies.borrow().as_slice(), [format!("taken:{now}")]);
    original.close();
}
