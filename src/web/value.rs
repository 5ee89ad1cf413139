//! JavaScript values in and out through serde-wasm-bindgen (the design card's boundary): the
//! options, checkouts, server answers, stored attempts and tab messages the SDK reads, and
//! the outcomes and pending attempts it hands back, all with serde derives (the SDK's own in
//! `core` and here, the wire ones in `payonce_protocol`). JSON text goes through the
//! browser's `JSON`.
//!
//! A value that does not fit is `None`: serde-wasm-bindgen's error is dropped without being
//! formatted, and the caller turns it into its own typed error or documented fallback.
//!
//! serde-wasm-bindgen reads a struct field by field, so `deny_unknown_fields` has no effect
//! on a JS object: [`keys_within`] is the explicit check where unknown members must be
//! refused (the checkout, the retry options).

use js_sys::{Object, Reflect, JSON};
use serde::de::DeserializeOwned;
use serde::Serialize;
use wasm_bindgen::{JsCast, JsValue};

/// `v` read as `T`; `None` when it does not fit.
pub(crate) fn from_js<T: DeserializeOwned>(v: &JsValue) -> Option<T> {
    serde_wasm_bindgen::from_value(v.clone()).ok()
}

/// `v` as a plain JS value (absent members are left out by the derives'
/// `skip_serializing_if`). The SDK's values always serialize (integers within 2^53); the
/// `undefined` fallback only keeps the error path free of formatting.
pub(crate) fn to_js<T: Serialize + ?Sized>(v: &T) -> JsValue {
    serde_wasm_bindgen::to_value(v).unwrap_or(JsValue::UNDEFINED)
}

/// `v` as JSON text, via the browser's `JSON.stringify`.
pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T) -> String {
    JSON::stringify(&to_js(v))
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_default()
}

/// `o[k]`, or `undefined` when `o` is not an object.
pub(crate) fn get(o: &JsValue, k: &str) -> JsValue {
    if !o.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
}

/// A plain object with the given members (for browser dictionaries holding JS objects, such
/// as a fetch init with its `AbortSignal`, which serde has no business with).
pub(crate) fn object(members: &[(&str, &JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in members {
        let _ = Reflect::set(&o, &JsValue::from_str(k), v);
    }
    o.into()
}

/// False when `v` is an object with an own key outside `allowed` (a typo such as `maxDelay`
/// must not be silently ignored). Anything else passes; serde judges its type.
pub(crate) fn keys_within(v: &JsValue, allowed: &[&str]) -> bool {
    if !v.is_object() {
        return true;
    }
    let keys = Object::keys::<JsValue>(v.unchecked_ref());
    keys.iter()
        .all(|k| k.as_string().is_some_and(|k| allowed.contains(&k.as_str())))
}
