//! Helpers shared by the browser test binaries: drive the SDK through its JavaScript-facing
//! surface (plain JS values in, promises out), as a page would.
#![allow(dead_code)]

use js_sys::{Function, Promise, Reflect, JSON};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// A JS value from JSON text.
pub fn js(json: &str) -> JsValue {
    JSON::parse(json).expect("test JSON")
}

/// `obj[name]`.
pub fn get(obj: &JsValue, name: &str) -> JsValue {
    Reflect::get(obj, &name.into()).unwrap_or(JsValue::UNDEFINED)
}

/// `obj[name]` as a string (panics with the value if it is not one).
pub fn s(obj: &JsValue, name: &str) -> String {
    let v = get(obj, name);
    v.as_string()
        .unwrap_or_else(|| panic!("{name} is not a string: {v:?}"))
}

/// `obj[name]` as a number.
pub fn n(obj: &JsValue, name: &str) -> f64 {
    let v = get(obj, name);
    v.as_f64()
        .unwrap_or_else(|| panic!("{name} is not a number: {v:?}"))
}

/// Awaits a promise.
pub async fn settle(p: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(p).await
}

/// The `code` of a rejection, after checking it is a `PayonceError`.
pub fn error_code(e: &JsValue) -> String {
    let ctor = get(&get(e, "constructor"), "name").as_string();
    assert_eq!(
        ctor.as_deref(),
        Some("PayonceError"),
        "not a PayonceError: {e:?}"
    );
    s(e, "code")
}

pub fn session() -> web_sys::Storage {
    web_sys::window()
        .unwrap()
        .session_storage()
        .unwrap()
        .unwrap()
}

/// The stored attempt of an order, parsed.
pub fn stored(order_id: &str) -> Option<JsValue> {
    session()
        .get_item(&format!("payonce:attempt:{order_id}"))
        .unwrap()
        .map(|t| js(&t))
}

/// A JS callback that records every string it is called with.
pub fn recorder() -> (Function, Rc<RefCell<Vec<String>>>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s2 = seen.clone();
    let f = Closure::<dyn Fn(JsValue)>::new(move |v: JsValue| {
        s2.borrow_mut().push(v.as_string().unwrap_or_default());
    });
    let func: Function = f.as_ref().clone().into();
    f.forget();
    (func, seen)
}

/// `{ ...base, [name]: value }` for option objects.
pub fn with(base: JsValue, name: &str, value: &JsValue) -> JsValue {
    Reflect::set(&base, &name.into(), value).unwrap();
    base
}

/// Waits `ms` (only to let something else happen in between, never to measure).
pub async fn tick(ms: i32) {
    let p = Promise::new(&mut |res, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&res, ms)
            .unwrap();
    });
    JsFuture::from(p).await.unwrap();
}

/// Runs a snippet of JavaScript (test setup only: e.g. making storage throw).
pub fn run_js(code: &str) -> JsValue {
    Function::new_no_args(code)
        .call0(&JsValue::NULL)
        .expect("test JS")
}
