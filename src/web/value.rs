//! JavaScript values in and out (the one JS boundary). One type is read with its serde derive
//! through serde-wasm-bindgen ([`from_js`]): the checkout snapshot (the app's checkout, and
//! the one inside stored attempts, claims and receipts). Everything else is read member by
//! member ([`get`], [`member`]: the client options, the server's answers and problems
//! ([`pay_response`], [`cancel_response`], [`payment_in`]), tab messages, claims, receipts
//! and stored attempts), and everything the SDK writes is built member by member
//! ([`object_owned`], [`snapshot`], [`payment`], [`pay_body`]) in the shape of the types' serde
//! derives: each derive crossing the boundary cost its own serializer or visitor in the module
//! (docs/size.md). JSON text goes through the browser's `JSON`.
//!
//! A value that does not fit is `None`: serde-wasm-bindgen's error is dropped without being
//! formatted, and the caller turns it into its own typed error or documented fallback.
//!
//! serde-wasm-bindgen reads a struct field by field, so `deny_unknown_fields` has no effect
//! on a JS object, and its errors do not say which member was wrong: [`check`] is the explicit
//! check of what the app passes in (options, checkouts), naming the member and the value.

use js_sys::{Object, Reflect, JSON};
use payonce_protocol::{
    AttemptStatus, CancelResponse, CheckoutSnapshot, Extras, PayResponse, Payment,
};
use serde::de::DeserializeOwned;
use wasm_bindgen::{JsCast, JsValue};

/// `v` read as `T`; `None` when it does not fit.
pub(crate) fn from_js<T: DeserializeOwned>(v: &JsValue) -> Option<T> {
    serde_wasm_bindgen::from_value(v.clone()).ok()
}

/// `v` as JSON text, via the browser's `JSON.stringify`.
pub(crate) fn json(v: &JsValue) -> String {
    JSON::stringify(v)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_default()
}

/// A checkout's extras as a plain object of strings (the JSON of [`Extras`]).
pub(crate) fn extras(e: &Extras) -> JsValue {
    let o = Object::new();
    for (k, v) in e.iter() {
        let _ = Reflect::set(&o, &JsValue::from_str(k), &JsValue::from_str(v));
    }
    o.into()
}

/// A checkout snapshot as its serde derive writes it (`orderId`, `orderVersion`,
/// `paymentMethodId`, and `extras` unless empty), built member by member: with the
/// outcomes, receipts, claims and stored attempts built the same way, nothing in the module
/// goes through serde-wasm-bindgen's serializer.
pub(crate) fn snapshot(s: &CheckoutSnapshot) -> JsValue {
    let mut members = vec![
        ("orderId", s.order_id.as_str().into()),
        ("orderVersion", JsValue::from_f64(s.order_version as f64)),
        ("paymentMethodId", s.payment_method_id.as_str().into()),
    ];
    members.extend((!s.extras.is_empty()).then(|| ("extras", extras(&s.extras))));
    object_owned(&members)
}

/// The pay request's body as JSON (`PayBody`: the snapshot without its order id, which is in
/// the URL).
pub(crate) fn pay_body(s: &CheckoutSnapshot) -> String {
    let mut members = vec![
        ("orderVersion", JsValue::from_f64(s.order_version as f64)),
        ("paymentMethodId", s.payment_method_id.as_str().into()),
    ];
    members.extend((!s.extras.is_empty()).then(|| ("extras", extras(&s.extras))));
    json(&object_owned(&members))
}

/// `o[k]`, or `undefined` when `o` is not an object.
pub(crate) fn get(o: &JsValue, k: &str) -> JsValue {
    if !o.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
}

/// `o[k]` when it is a string.
fn text(o: &JsValue, k: &str) -> Option<String> {
    get(o, k).as_string()
}

/// `o[k]` as an [`AttemptStatus`] (its wire spelling).
fn status(o: &JsValue, k: &str) -> Option<AttemptStatus> {
    AttemptStatus::parse(&text(o, k)?)
}

/// A [`Payment`] from a server's answer, member by member (what its serde derive accepts:
/// every member, `amount` an integer); `None` when it does not fit. The answers are read by
/// hand, not through serde-wasm-bindgen: each derive read there brought its own struct visitor
/// and field seeds into the module (docs/size.md).
pub(crate) fn payment_in(v: &JsValue) -> Option<Payment> {
    let amount = get(v, "amount")
        .as_f64()
        .filter(|n| n.fract() == 0.0 && n.abs() <= MAX_SAFE)?;
    Some(Payment {
        id: text(v, "id")?,
        order_id: text(v, "orderId")?,
        amount: amount as i64,
        currency: text(v, "currency")?,
        payment_method_id: text(v, "paymentMethodId")?,
        charge_id: text(v, "chargeId")?,
        status: status(v, "status")?,
    })
}

/// `v.payment`: `Some(None)` when absent (`undefined` or `null`), `None` when present and not
/// a [`Payment`] (the answer does not fit).
fn optional_payment(v: &JsValue) -> Option<Option<Payment>> {
    let p = get(v, "payment");
    if p.is_undefined() || p.is_null() {
        return Some(None);
    }
    payment_in(&p).map(Some)
}

/// A pay answer's 2xx body ([`PayResponse`]).
pub(crate) fn pay_response(v: &JsValue) -> Option<PayResponse> {
    Some(PayResponse {
        status: status(v, "status")?,
        order_id: text(v, "orderId")?,
        payment: optional_payment(v)?,
    })
}

/// A cancel answer's 2xx body ([`CancelResponse`]).
pub(crate) fn cancel_response(v: &JsValue) -> Option<CancelResponse> {
    Some(CancelResponse {
        status: status(v, "status")?,
        payment: optional_payment(v)?,
    })
}

/// A `Payment` as the app reads it (the `Payment` interface; the members of its serde
/// derive, in order), built member by member: nothing else in the module serializes one.
pub(crate) fn payment(p: &payonce_protocol::Payment) -> JsValue {
    object_owned(&[
        ("id", p.id.as_str().into()),
        ("orderId", p.order_id.as_str().into()),
        ("amount", JsValue::from_f64(p.amount as f64)),
        ("currency", p.currency.as_str().into()),
        ("paymentMethodId", p.payment_method_id.as_str().into()),
        ("chargeId", p.charge_id.as_str().into()),
        ("status", p.status.as_str().into()),
    ])
}

/// [`object`] of owned values.
pub(crate) fn object_owned(members: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in members {
        let _ = Reflect::set(&o, &JsValue::from_str(k), v);
    }
    o.into()
}

/// `o[k]` when it is present and of `kind`; `undefined` when it is absent (`undefined` or
/// `null`, as [`check`] counts them, or `o` is not an object); `Err` when it is neither.
pub(crate) fn member(o: &JsValue, k: &str, kind: Kind) -> Result<JsValue, ()> {
    let v = get(o, k);
    if v.is_undefined() || v.is_null() {
        Ok(JsValue::UNDEFINED)
    } else if kind.fits(&v) {
        Ok(v)
    } else {
        Err(())
    }
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

/// What a member the app passes must be.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// A string.
    Text,
    /// A non-negative integer up to this bound.
    Int(f64),
    /// A plain object (not a function, not an array).
    Object,
    /// A function.
    Function,
    /// An object or a function.
    ObjectOrFunction,
    /// `true` or `false`.
    Flag,
    /// One of these strings.
    OneOf(&'static [&'static str]),
}

/// The largest integer a JS number holds exactly.
pub(crate) const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
/// The largest `u32`.
pub(crate) const MAX_U32: f64 = 4_294_967_295.0;

impl Kind {
    fn fits(self, v: &JsValue) -> bool {
        let object = v.is_object() && !v.is_function() && !js_sys::Array::is_array(v);
        match self {
            Self::Text => v.is_string(),
            Self::Int(max) => v
                .as_f64()
                .is_some_and(|n| n >= 0.0 && n <= max && n.fract() == 0.0),
            Self::Object => object,
            Self::Function => v.is_function(),
            Self::ObjectOrFunction => object || v.is_function(),
            Self::Flag => v.as_bool().is_some(),
            Self::OneOf(list) => v.as_string().is_some_and(|s| list.contains(&s.as_str())),
        }
    }

    fn describe(self) -> String {
        match self {
            Self::Text => "a string".into(),
            Self::Int(_) => "a non-negative integer".into(),
            Self::Object => "an object".into(),
            Self::Function => "a function".into(),
            Self::ObjectOrFunction => "an object or a function".into(),
            Self::Flag => "true or false".into(),
            Self::OneOf(list) => {
                let mut s = String::from("one of");
                for (i, v) in list.iter().enumerate() {
                    s.push_str(if i == 0 { " \"" } else { ", \"" });
                    s.push_str(v);
                    s.push('"');
                }
                s
            }
        }
    }
}

/// `v` as the app would read it in a message: JSON, cut to 60 characters.
fn shown(v: &JsValue) -> String {
    if v.is_function() {
        return "a function".into();
    }
    let text = JSON::stringify(v)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| "undefined".into());
    match char_at(&text, 60) {
        // `get`, not `[..at]`: `at` is a char boundary, but indexing links the slice panic and
        // its `{:?}` formatting of the string (char escaping, unicode tables): 4.0 KB gzip.
        Some(at) => [text.get(..at).unwrap_or_default(), "…"].concat(),
        None => text,
    }
}

/// The byte offset of `s`'s character number `n` (0-based), `None` when it has no more than
/// `n` characters: `s.char_indices().nth(n)`'s offset, without std's character counting
/// (`str::count`, 0.8 KB of the module, which `nth` on a `CharIndices` links).
pub(crate) fn char_at(s: &str, n: usize) -> Option<usize> {
    let mut seen = 0;
    for (at, b) in s.bytes().enumerate() {
        // A character starts at every byte that is not a UTF-8 continuation byte (10xxxxxx).
        if b & 0xC0 != 0x80 {
            if seen == n {
                return Some(at);
            }
            seen += 1;
        }
    }
    None
}

/// `Ok` when `v` is absent or every own member of it is a string (the checkout's extras);
/// the error names the member and the value.
pub(crate) fn all_text(v: &JsValue, prefix: &str) -> Result<(), String> {
    if !v.is_object() {
        return Ok(());
    }
    for k in Object::keys::<JsValue>(v.unchecked_ref()).iter() {
        let k = k.as_string().unwrap_or_default();
        let m = get(v, &k);
        if !m.is_string() {
            return Err([prefix, &k, " must be a string, got ", &shown(&m)].concat());
        }
    }
    Ok(())
}

/// Checks what the app passed as `prefix` (`""` at the top, `"retry."` inside): it must be an
/// object; every member must be one of `fields` and of its kind (`null` and `undefined` count
/// as absent); every `required` one present. The error names the member and the value.
pub(crate) fn check(
    v: &JsValue,
    prefix: &str,
    fields: &[(&str, Kind)],
    required: &[&str],
) -> Result<(), String> {
    if !Kind::Object.fits(v) {
        let name = if prefix.is_empty() {
            "the value"
        } else {
            prefix.trim_end_matches('.')
        };
        return Err([name, " must be an object, got ", &shown(v)].concat());
    }
    for k in Object::keys::<JsValue>(v.unchecked_ref()).iter() {
        let k = k.as_string().unwrap_or_default();
        let Some((_, kind)) = fields.iter().find(|(name, _)| *name == k) else {
            return Err(["unknown member ", prefix, &k].concat());
        };
        let m = get(v, &k);
        if !(m.is_undefined() || m.is_null() || kind.fits(&m)) {
            return Err([
                prefix,
                &k,
                " must be ",
                &kind.describe(),
                ", got ",
                &shown(&m),
            ]
            .concat());
        }
    }
    for name in required {
        let m = get(v, name);
        if m.is_undefined() || m.is_null() {
            return Err([prefix, name, " is required"].concat());
        }
    }
    Ok(())
}
