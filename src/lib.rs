//! payonce: the browser side of "the customer is charged once". What it needs from the
//! backend is written in `docs/protocol.md` (normative; `payonce-conformance` checks a backend
//! against it), and what it does with each answer is the table of [`core::classify`].
//!
//! # Layout
//! - [`core`]: the pure decision core, no web-sys: the stored attempt and which key a Pay click
//!   uses ([`core::attempt`]), what an answer means ([`core::classify`]), backoff with full
//!   jitter, `Retry-After`, the retry budget and the deadline ([`core::retry`]), the SDK's
//!   error codes ([`core::error`]), and the pay loop itself as a sans-IO state machine
//!   ([`core::flow`]). Tested natively with unit and property tests.
//! - `web` (wasm32 only): the thin I/O layer and the JavaScript API (`PayonceClient`,
//!   `PayonceError`), which performs the flow's effects: sessionStorage with an in-memory fallback, fetch with per-request
//!   timeouts, Web Locks, BroadcastChannel, `online` waits and abort signals.
//!
//! # Decisions worth knowing
//! - A key is minted only on a Pay click with no unresolved attempt for the order, and saved in
//!   sessionStorage (`payonce:attempt:<orderId>`) before the request leaves. It is removed only
//!   on a final answer: paid, declined/failed, cancelled, or `ORDER_CHANGED`. Every other answer,
//!   including refusals such as `KEY_REUSED_WITH_DIFFERENT_DETAILS` or `PAYMENT_ALREADY_ACTIVE`,
//!   `ACTION_REQUIRED` (3-D Secure: the same key finishes it) and answers that do not fit the
//!   protocol (`PROTOCOL_MISMATCH`), keeps it; `cancel()` resolves such a key (the server
//!   tombstones a key it never saw; a cancel answered `ORDER_NOT_FOUND` or
//!   `KEY_REUSED_WITH_DIFFERENT_DETAILS` resolves it as `notFound`).
//! - One pay call sends at most `maxAttempts` requests, polls included, and waits at least the
//!   base delay (jittered) between any two, whatever `Retry-After` says.
//! - Receipts from other tabs are hints: used only for the same base URL and checkout, and only
//!   after one confirming request with the receipt's key (a replay).
//! - Other details for an order with an unresolved attempt reject with `SNAPSHOT_CONFLICT`.
//! - A stored entry that does not decode never crashes the SDK: if a key can still be read from
//!   it, pay rejects with `UNREADABLE_ATTEMPT` until `cancel()` resolves it; if not, it is
//!   replaced and reported (`onWarning("UNREADABLE_ENTRY")`).
//! - Storage that throws moves attempts to memory (`storageMode === "memory"`, warning
//!   `STORAGE_UNAVAILABLE`); unresolved attempts still block other details on this page.
//! - The foundations: wasm-bindgen, web-sys and js-sys for the browser,
//!   serde with serde-wasm-bindgen at the JS boundary (options, checkouts, answers, stored
//!   attempts, outcomes; `web::value`), uuid (v4, `js`) for idempotency keys, gloo-timers for
//!   every timer and wait. JSON text goes through the browser's `JSON` (no serde_json in the
//!   module). The wasm32 allocator is talc, not the default dlmalloc (2.6 KB gzip smaller,
//!   measured on the release package).
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

// talc instead of the default dlmalloc: a maintained allocator, 2.6 KB gzip smaller in the
// release module (70953 vs 73541 B with serde-wasm-bindgen, measured). Single-threaded wasm only, as the SDK is.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOC: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();
