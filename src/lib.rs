//! payonce: the browser side of "the customer is charged once".
//!
//! # Layout
//! - [`core`]: the pure decision core, no web-sys: the stored attempt and which key a Pay click
//!   uses ([`core::attempt`]), what an answer means ([`core::classify`]), backoff with full
//!   jitter, `Retry-After`, the retry budget and the deadline ([`core::retry`]), and the SDK's
//!   error codes ([`core::error`]). Tested natively with unit and property tests.
//! - `web` (wasm32 only): the thin I/O layer and the JavaScript API (`PayonceClient`,
//!   `PayonceError`): sessionStorage with an in-memory fallback, fetch with per-request
//!   timeouts, Web Locks, BroadcastChannel, `online` waits and abort signals.
#![deny(missing_docs)]

use wasm_bindgen::prelude::*;

pub mod core;
#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::{PayonceClient, PayonceError};

/// The SDK version, for support reports and the release smoke test.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
