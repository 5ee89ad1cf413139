//! payonce SDK (skeleton; the SDK helper replaces this).
use wasm_bindgen::prelude::*;

/// The SDK version, for support reports and the release smoke test.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
