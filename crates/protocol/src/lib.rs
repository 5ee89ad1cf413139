//! The payonce wire contract: the one place where header names, error codes, status values
//! and JSON shapes are spelled. The SDK (wasm32) and the server (host) both import it, so the
//! two sides cannot drift apart. What a backend must do with them is written in
//! `docs/protocol.md` (normative); `tests/drift.rs` fails when a name defined here is missing
//! from it or from the companion server's `openapi.json`.
//!
//! # Layout
//! - [`headers`]: HTTP header names and the cookie name.
//! - [`key`]: [`IdempotencyKey`], the validated key newtype, and its parse errors.
//! - [`status`]: attempt, order and outcome status values.
//! - [`body`]: request and response bodies of the public API (camelCase JSON).
//! - [`problem`]: RFC 9457 problem details and the stable [`ErrorCode`]s with their HTTP status.
//! - [`provider`]: the mock payment provider's API and its webhook events.
//!
//! Every body type rejects unknown fields on the way in (`deny_unknown_fields` on requests),
//! so a typo in a client is a clear 400 instead of a silently ignored field.
#![deny(missing_docs)]

pub mod admin;
pub mod body;
pub mod headers;
pub mod key;
pub mod problem;
pub mod provider;
// The webhook signature is wire format too, but only the provider and the server need
// HMAC: the browser SDK builds this crate without it.
#[cfg(feature = "signature")]
pub mod signature;
pub mod status;

pub use body::*;
pub use key::{IdempotencyKey, KeyError};
pub use problem::{ActionRequiredProblem, ErrorCode, NextAction, NextActionKind, Problem};
pub use status::{AttemptStatus, OrderStatus};
