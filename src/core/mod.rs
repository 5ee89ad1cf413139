//! The pure decision core: which key, what an answer means, whether and when to retry.
//! No web-sys here: everything is tested natively (`cargo test -p payonce`), and a native
//! program (a retry-storm simulation) can drive the same policy.

pub mod attempt;
pub mod classify;
pub mod error;
pub mod retry;

// proptest does not build for wasm32; the core is tested natively.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod properties;
