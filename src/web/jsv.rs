//! Plain JavaScript values in and out, field by field: the options, checkouts, answers, stored
//! attempts (and, in `web::tabs`, tab messages) the SDK reads, and the outcomes it hands back.
//!
//! Why by hand and not serde: the derived (de)serializers of a dozen types, their field
//! visitors and a serde format were the largest part of the Wasm module (about 15 KB), and
//! general formats pull in Rust's float formatting for their error messages. Each reader here
//! is a few `Reflect.get`s; a value that does not fit is [`Bad`], a unit with no message.
//! JSON text goes through the browser's `JSON`.
//!
//! The shapes (the `.d.ts` in `web/mod.rs` documents the JS-facing ones; the wire ones are
//! `payonce_protocol`'s, spelled by its serde attributes on the server):
//! - readers are as strict as the protocol's serde derives where it matters for a decision
//!   (required members, integer types, known enum spellings, `deny_unknown_fields` on the
//!   checkout and the retry options, so option typos are caught) and lenient elsewhere: a
//!   problem body needs only its `code`; `null` counts as absent.
//! - writers leave out absent members, as `JSON.stringify` and `skip_serializing_if` do.

use crate::core::attempt::{Attempt, AttemptState};
use js_sys::{Array, Object, Reflect};
use payonce_protocol::{
    AttemptStatus, CancelResponse, CheckoutSnapshot, ErrorCode, IdempotencyKey, PayResponse,
    Payment, Problem,
};
use wasm_bindgen::{JsCast, JsValue};

/// "This value does not fit." Deliberately carries no message (see the module doc).
#[derive(Debug)]
pub(crate) struct Bad;

type R<T> = Result<T, Bad>;

/// 2^53 - 1: larger integers do not survive a JS number.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// `o[k]`, or `undefined` when `o` is not an object.
pub(crate) fn get(o: &JsValue, k: &str) -> JsValue {
    if !o.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
}

fn absent(v: &JsValue) -> bool {
    v.is_undefined() || v.is_null()
}

/// A plain object (not an array, not a function).
pub(crate) fn object(v: &JsValue) -> R<()> {
    if v.is_object() && !v.is_function() && !Array::is_array(v) {
        Ok(())
    } else {
        Err(Bad)
    }
}

/// A plain object whose own keys are all in `allowed` (serde's `deny_unknown_fields`).
fn object_of(v: &JsValue, allowed: &[&str]) -> R<()> {
    object(v)?;
    let keys = Object::keys::<JsValue>(v.unchecked_ref());
    for i in 0..keys.length() {
        let k = keys.get(i).as_string().unwrap_or_default();
        if !allowed.contains(&k.as_str()) {
            return Err(Bad);
        }
    }
    Ok(())
}

pub(crate) fn string(v: JsValue) -> R<String> {
    v.as_string().ok_or(Bad)
}

/// An integer in `[min, max]` (both within ±2^53).
fn integer(v: &JsValue, min: f64, max: f64) -> R<f64> {
    match v.as_f64() {
        Some(n) if n.fract() == 0.0 && n >= min && n <= max => Ok(n),
        _ => Err(Bad),
    }
}

fn uint(v: &JsValue, max: u64) -> R<u64> {
    integer(v, 0.0, (max as f64).min(MAX_SAFE)).map(|n| n as u64)
}

/// `o[k]` read by `f`; absent (`undefined` or `null`) is `None`.
pub(crate) fn opt<T>(o: &JsValue, k: &str, f: impl FnOnce(JsValue) -> R<T>) -> R<Option<T>> {
    let v = get(o, k);
    if absent(&v) {
        Ok(None)
    } else {
        f(v).map(Some)
    }
}

pub(crate) fn req_string(o: &JsValue, k: &str) -> R<String> {
    string(get(o, k))
}

fn opt_uint(o: &JsValue, k: &str, max: u64) -> R<Option<u64>> {
    opt(o, k, |v| uint(&v, max))
}

fn status(v: JsValue) -> R<AttemptStatus> {
    AttemptStatus::parse(&string(v)?).ok_or(Bad)
}

fn key(v: JsValue) -> R<IdempotencyKey> {
    IdempotencyKey::parse(&string(v)?).map_err(|_| Bad)
}

/// Builds a plain object member by member; `None` members are left out.
pub(crate) struct Obj(Object);

impl Obj {
    pub(crate) fn new() -> Self {
        Self(Object::new())
    }
    /// Sets `k`, unless `v` is `undefined` (an absent member).
    pub(crate) fn set(self, k: &str, v: JsValue) -> Self {
        if !v.is_undefined() {
            let _ = Reflect::set(&self.0, &JsValue::from_str(k), &v);
        }
        self
    }
    pub(crate) fn str(self, k: &str, v: &str) -> Self {
        self.set(k, JsValue::from_str(v))
    }
    pub(crate) fn num(self, k: &str, v: f64) -> Self {
        self.set(k, JsValue::from_f64(v))
    }
    pub(crate) fn opt_num(self, k: &str, v: Option<f64>) -> Self {
        match v {
            Some(n) => self.num(k, n),
            None => self,
        }
    }
    pub(crate) fn opt_str(self, k: &str, v: Option<&str>) -> Self {
        match v {
            Some(s) => self.str(k, s),
            None => self,
        }
    }
    pub(crate) fn js(self) -> JsValue {
        self.0.into()
    }
    /// As JSON text (via `JSON.stringify`).
    pub(crate) fn json(self) -> String {
        js_sys::JSON::stringify(&self.0)
            .ok()
            .and_then(|s| s.as_string())
            .unwrap_or_default()
    }
}

// --- checkout -------------------------------------------------------------------------------

const CHECKOUT: [&str; 3] = ["orderId", "orderVersion", "paymentMethodId"];

/// A `Checkout` (the protocol's `CheckoutSnapshot`; unknown members are refused).
pub(crate) fn checkout(v: &JsValue) -> R<CheckoutSnapshot> {
    object_of(v, &CHECKOUT)?;
    Ok(CheckoutSnapshot {
        order_id: req_string(v, CHECKOUT[0])?,
        order_version: uint(&get(v, CHECKOUT[1]), u64::MAX)?,
        payment_method_id: req_string(v, CHECKOUT[2])?,
    })
}

fn checkout_js(c: &CheckoutSnapshot) -> Obj {
    Obj::new()
        .str(CHECKOUT[0], &c.order_id)
        .num(CHECKOUT[1], c.order_version as f64)
        .str(CHECKOUT[2], &c.payment_method_id)
}

/// The pay request body (`PayRequest`) as JSON.
pub(crate) fn pay_request_json(c: &CheckoutSnapshot) -> String {
    Obj::new()
        .num(CHECKOUT[1], c.order_version as f64)
        .str(CHECKOUT[2], &c.payment_method_id)
        .json()
}

/// The cancel request body (`CancelRequest`) as JSON.
pub(crate) fn cancel_request_json(k: &IdempotencyKey) -> String {
    Obj::new().str("key", k.as_str()).json()
}

// --- answers --------------------------------------------------------------------------------

/// A `Payment`.
pub(crate) fn payment(v: JsValue) -> R<Payment> {
    object(&v)?;
    Ok(Payment {
        id: req_string(&v, "id")?,
        order_id: req_string(&v, "orderId")?,
        amount: integer(&get(&v, "amount"), -MAX_SAFE, MAX_SAFE)? as i64,
        currency: req_string(&v, "currency")?,
        payment_method_id: req_string(&v, "paymentMethodId")?,
        charge_id: req_string(&v, "chargeId")?,
        status: status(get(&v, "status"))?,
    })
}

/// A `Payment` as the plain object the `.d.ts` describes.
pub(crate) fn payment_js(p: &Payment) -> JsValue {
    Obj::new()
        .str("id", &p.id)
        .str("orderId", &p.order_id)
        .num("amount", p.amount as f64)
        .str("currency", &p.currency)
        .str("paymentMethodId", &p.payment_method_id)
        .str("chargeId", &p.charge_id)
        .str("status", p.status.as_str())
        .js()
}

/// A 2xx pay answer body.
pub(crate) fn pay_response(v: &JsValue) -> R<PayResponse> {
    object(v)?;
    Ok(PayResponse {
        status: status(get(v, "status"))?,
        order_id: req_string(v, "orderId")?,
        payment: opt(v, "payment", payment)?,
    })
}

/// A 2xx cancel answer body.
pub(crate) fn cancel_response(v: &JsValue) -> R<CancelResponse> {
    object(v)?;
    Ok(CancelResponse {
        status: status(get(v, "status"))?,
        payment: opt(v, "payment", payment)?,
    })
}

/// An error answer body: only the members the SDK decides on. A problem whose `code` is
/// missing or unknown is no problem at all (the status alone then decides).
pub(crate) fn problem(v: &JsValue) -> R<Problem> {
    object(v)?;
    let code = req_string(v, "code")?;
    let code = *ErrorCode::ALL
        .iter()
        .find(|c| c.as_str() == code)
        .ok_or(Bad)?;
    Ok(Problem {
        type_uri: String::new(),
        title: String::new(),
        status: code.http_status(),
        detail: None,
        code,
        // A malformed optional member is ignored rather than losing the code.
        retry_after: opt_uint(v, "retryAfter", u64::MAX).ok().flatten(),
        current_version: opt_uint(v, "currentVersion", u64::MAX).ok().flatten(),
        attempt_status: None,
        reason: None,
        sku: None,
    })
}

// --- stored attempts ------------------------------------------------------------------------

/// An attempt as stored (see `web::store` for the format).
pub(crate) fn attempt_json(a: &Attempt) -> String {
    Obj::new()
        .str("key", a.key.as_str())
        .set("snapshot", checkout_js(&a.snapshot).js())
        .str("state", a.state.as_str())
        .num("createdAt", a.created_at as f64)
        .num("sends", a.sends.into())
        .json()
}

/// A stored attempt, all members required (the snapshot exactly a checkout).
pub(crate) fn attempt(v: &JsValue) -> R<Attempt> {
    object(v)?;
    let state = req_string(v, "state")?;
    Ok(Attempt {
        key: key(get(v, "key"))?,
        snapshot: checkout(&get(v, "snapshot"))?,
        state: [
            AttemptState::Saved,
            AttemptState::Sent,
            AttemptState::Unknown,
        ]
        .into_iter()
        .find(|s| s.as_str() == state)
        .ok_or(Bad)?,
        created_at: uint(&get(v, "createdAt"), u64::MAX)?,
        sends: uint(&get(v, "sends"), u32::MAX.into())? as u32,
    })
}

/// Just the key of a stored value whose other members do not read.
pub(crate) fn salvage_key(v: &JsValue) -> R<IdempotencyKey> {
    object(v)?;
    key(get(v, "key"))
}

// --- options --------------------------------------------------------------------------------

/// `ClientOptions.retry`: the core's policy, each member optional (the default fills it).
pub(crate) fn retry_policy(
    v: JsValue,
    mut p: crate::core::retry::RetryPolicy,
) -> R<crate::core::retry::RetryPolicy> {
    const K: [&str; 5] = [
        "baseDelayMs",
        "maxDelayMs",
        "maxAttempts",
        "maxRetryAfterMs",
        "budget",
    ];
    const B: [&str; 4] = ["capacity", "retryCost", "timeoutCost", "successRefill"];
    object_of(&v, &K)?;
    let u32_max = u64::from(u32::MAX);
    let set64 = |slot: &mut u64, k| -> R<()> {
        if let Some(n) = opt_uint(&v, k, u64::MAX)? {
            *slot = n;
        }
        Ok(())
    };
    set64(&mut p.base_delay_ms, K[0])?;
    set64(&mut p.max_delay_ms, K[1])?;
    set64(&mut p.max_retry_after_ms, K[3])?;
    if let Some(n) = opt_uint(&v, K[2], u32_max)? {
        p.max_attempts = n as u32;
    }
    let b = get(&v, K[4]);
    if !absent(&b) {
        object_of(&b, &B)?;
        let c = &mut p.budget;
        for (slot, k) in [
            (&mut c.capacity, B[0]),
            (&mut c.retry_cost, B[1]),
            (&mut c.timeout_cost, B[2]),
            (&mut c.success_refill, B[3]),
        ] {
            if let Some(n) = opt_uint(&b, k, u32_max)? {
                *slot = n as u32;
            }
        }
    }
    Ok(p)
}

/// What `PayonceClient.create` reads from `ClientOptions` (callbacks are read separately).
pub(crate) struct Options {
    pub base_url: String,
    pub request_timeout_ms: Option<u32>,
    pub retry: Option<JsValue>,
    pub deadline_ms: Option<u64>,
    pub long_wait_ms: Option<u64>,
    /// `storage: "memory"`.
    pub memory: bool,
}

pub(crate) fn options(v: &JsValue) -> R<Options> {
    object(v)?;
    let memory = match opt(v, "storage", string)?.as_deref() {
        None | Some("session") => false,
        Some("memory") => true,
        Some(_) => return Err(Bad),
    };
    let retry = get(v, "retry");
    Ok(Options {
        base_url: req_string(v, "baseUrl")?,
        request_timeout_ms: opt_uint(v, "requestTimeoutMs", u32::MAX.into())?.map(|n| n as u32),
        retry: (!absent(&retry)).then_some(retry),
        deadline_ms: opt_uint(v, "deadlineMs", u64::MAX)?,
        long_wait_ms: opt_uint(v, "longWaitMs", u64::MAX)?,
        memory,
    })
}
