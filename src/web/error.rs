//! `PayonceError`: the JavaScript class (src/web/error.js, a real `Error` subclass with a
//! stack) built from an [`SdkError`]. The class is imported from the snippet and re-exported
//! from the package, so `instanceof PayonceError` works for apps and `instanceof Error` for
//! error trackers.

use crate::core::error::SdkError;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(module = "/src/web/error.js")]
extern "C" {
    /// The class (`export class PayonceError extends Error`).
    #[wasm_bindgen(extends = js_sys::Error)]
    pub type PayonceError;

    // Only here to re-export the class from the package under its own name: the generated
    // declaration of a re-exported *type* would be `let PayonceError: unknown`, so the class is
    // re-exported through this never-called import, whose declaration can be skipped; the
    // hand-written one is in `src/web/mod.rs`.
    #[allow(dead_code)]
    #[wasm_bindgen(js_name = PayonceError, reexport, skip_typescript)]
    fn reexported_class();

    #[wasm_bindgen(constructor)]
    fn new(
        code: &str,
        message: &str,
        status: JsValue,
        problem_code: JsValue,
        detail: JsValue,
        body: JsValue,
        cause: JsValue,
    ) -> PayonceError;
}

fn text(s: Option<&str>) -> JsValue {
    s.map_or(JsValue::UNDEFINED, JsValue::from_str)
}

/// `e` as a thrown or rejected `PayonceError`; `body`: the raw answer body, when a server
/// answer caused it (`undefined` otherwise). The problem `code` and `detail` are read from the
/// body as sent, so a code this SDK does not know still reaches the app.
pub(crate) fn to_js(e: &SdkError, body: JsValue) -> JsValue {
    to_js_caused(e, body, JsValue::UNDEFINED)
}

/// [`to_js`] with the error's `cause` (the app's own error, for `TRANSPORT_FAILED`).
pub(crate) fn to_js_caused(e: &SdkError, body: JsValue, cause: JsValue) -> JsValue {
    let member = |name: &str| Some(crate::web::value::get(&body, name)).filter(|v| v.is_string());
    let problem_code = member("code").unwrap_or_else(|| text(e.problem_code_str()));
    PayonceError::new(
        e.code(),
        &e.message(),
        e.status().map_or(JsValue::UNDEFINED, JsValue::from),
        problem_code,
        member("detail").unwrap_or(JsValue::UNDEFINED),
        body,
        cause,
    )
    .into()
}

impl From<SdkError> for JsValue {
    fn from(error: SdkError) -> Self {
        to_js(&error, JsValue::UNDEFINED)
    }
}
