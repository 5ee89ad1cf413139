//! `free()` closes what the SDK holds open (the page's BroadcastChannel), so nothing of it
//! keeps an event loop alive once every client is gone: a Node test runner can exit. Observed
//! from a channel of our own: while a client lives, the SDK answers a "hello" naming this
//! tab's id with "taken"; once the last client is freed, nobody answers.
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

/// Says hello as a tab with this page's id and returns how many "taken" answers came.
async fn answers_to_hello(probe: &web_sys::BroadcastChannel) -> usize {
    let id = session()
        .get_item("payonce:tab")
        .unwrap()
        .expect("a tab id");
    let heard = Rc::new(RefCell::new(0usize));
    let h = heard.clone();
    let on_message =
        Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            if s(&e.data(), "t") == "taken" {
                *h.borrow_mut() += 1;
            }
        });
    probe.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    probe
        .post_message(&with(
            js(r#"{"t":"hello"}"#),
            "tab",
            &JsValue::from_str(&id),
        ))
        .unwrap();
    tick(150).await;
    probe.set_onmessage(None);
    let n = *heard.borrow();
    n
}

/// Calls the JS `free()` of a client, as an app or a test runner does.
fn free(c: PayonceClient) {
    let js_client: JsValue = c.into();
    let f: js_sys::Function = get(&js_client, "free").unchecked_into();
    f.call0(&js_client).unwrap();
}

fn client() -> PayonceClient {
    PayonceClient::create(js(r#"{"baseUrl":"http://127.0.0.1:1"}"#)).unwrap()
}

#[wasm_bindgen_test]
async fn free_closes_the_channel_once_the_last_client_is_gone() {
    let probe = web_sys::BroadcastChannel::new("payonce").unwrap();
    let (a, b) = (client(), client());
    assert_eq!(
        answers_to_hello(&probe).await,
        1,
        "the page's channel is open"
    );
    free(a);
    assert_eq!(
        answers_to_hello(&probe).await,
        1,
        "still open while a client lives"
    );
    free(b);
    assert_eq!(
        answers_to_hello(&probe).await,
        0,
        "closed with the last client"
    );
    // A new client opens it again.
    let c = client();
    assert_eq!(answers_to_hello(&probe).await, 1);
    drop(c);
    assert_eq!(answers_to_hello(&probe).await, 0);
    probe.close();
}
