//! `payonce-conformance`: checks a running payments backend over HTTP against
//! `docs/protocol.md`, the contract the payonce SDK relies on, and says PASS, FAIL (with the
//! requests and answers that prove it) or NOT CHECKED (with why) for each rule.
//!
//! # Layout
//! - [`config`]: the configuration file (TOML or JSON): base URL, two users, fresh orders,
//!   payment methods, and optionally the cart edit and the charge ledger.
//! - `client`: the backend over HTTP; every call is kept as evidence.
//! - [`rules`]: the rules, each tied to a section of `docs/protocol.md`, run concurrently.
//! - [`report`]: verdicts as text (one line per rule) or JSON.
//!
//! # How the kit proves it can fail
//! `tests/flawed.rs` runs it against one small in-memory backend with a `Flaw` switch: with
//! no flaw every rule passes; each flaw (a read-then-write claim, no fingerprint, a
//! re-rendered replay, no tombstone, keys not scoped per user) must fail the rule it breaks
//! and only rules of that family. One backend with switches rather than five copies: the
//! flaws then differ from the correct backend by exactly the lines they name, so a failure
//! can only come from the flaw. `examples/express/` is the separate, realistic reference
//! (a real SQL store), which the same kit checks in `scripts/conformance.sh`.
//!
//! Every wire name (paths, headers, codes, statuses, bodies) comes from `payonce-protocol`.
#![deny(missing_docs)]

pub mod config;
pub mod report;
pub mod rules;

mod client;

pub use config::{Config, ConfigError};
pub use report::{Report, RuleResult, Verdict};

use std::sync::Arc;

/// Runs every rule against the configured backend. `Err` only when the kit cannot start
/// (credentials cannot be obtained); everything the backend does wrong is in the report.
pub async fn run(config: Config) -> Result<Report, String> {
    let started = std::time::Instant::now();
    let mut target = vec![config.base_url.clone()];
    target.extend(config.also.iter().cloned());
    let backend = Arc::new(client::Backend::connect(config).await?);
    let results = rules::run_all(backend).await;
    Ok(Report {
        target,
        results,
        duration_ms: started.elapsed().as_millis(),
    })
}
