use wasm_bindgen::prelude::*;

/// A newtype that represents Serde errors as JavaScript exceptions.
#[derive(Debug)]
pub struct Error(JsValue);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        #[wasm_bindgen]
        extern "C" {
            #[wasm_bindgen(js_name = String)]
            pub fn to_string(value: &JsValue) -> String;
        }

        to_string(&self.0).fmt(f)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// Creates a JavaScript `Error` with a given message.
    ///
    /// payonce: the message is dropped, not formatted, and this is always inlined. payonce never
    /// reads these errors (src/web/value.rs turns them into its own typed errors), and
    /// formatting them linked serde's `invalid type: floating point ...` texts and with them
    /// Rust's float formatting: 12.8 KB of the module's gzip size. Inlining matters as much:
    /// without it every caller still builds the `fmt::Arguments` in memory, and the function
    /// pointers stored there keep the formatting code alive.
    #[inline(always)]
    pub fn new<T: std::fmt::Display>(msg: T) -> Self {
        let _ = msg;
        Error(JsValue::UNDEFINED)
    }
}

impl serde::ser::Error for Error {
    #[inline(always)] // payonce: see Error::new
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::new(msg)
    }
}

impl serde::de::Error for Error {
    #[inline(always)] // payonce: see Error::new
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::new(msg)
    }
}

/// This conversion is needed for `?` to just work when using wasm-bindgen
/// imports that return JavaScript exceptions as `Result<T, JsValue>`.
impl From<JsValue> for Error {
    fn from(error: JsValue) -> Error {
        Error(error)
    }
}

// This conversion is needed for `?` to just work in wasm-bindgen exports
// that return `Result<T, JsValue>` to throw JavaScript exceptions.
impl From<Error> for JsValue {
    fn from(error: Error) -> JsValue {
        error.0
    }
}
