//! The pure decision core: which key, what an answer means, whether and when to retry, and
//! the pay loop that composes them ([`flow`], sans-IO: answers and the time in, effects out).
//! No web-sys here: everything is tested natively (`cargo test -p payonce`), and native
//! programs (the retry-storm simulation, the chaos customers) drive the same loop.

pub mod attempt;
pub mod classify;
pub mod error;
pub mod flow;
pub mod receipt;
pub mod retry;

// proptest does not build for wasm32; the core is tested natively.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod properties;
