//! The payonce companion server: orders priced by the server, and a pay endpoint that
//! charges the customer once however often the request is retried, duplicated, raced or
//! cancelled. SQLite by default, PostgreSQL for several processes. The decisions are the
//! pure `payonce_rules` crate (`crates/rules`); this crate is the shell around them.
//!
//! # Layout
//! - `http/`: the edge: the router and one thin file per endpoint, the extractors
//!   (`http/extract.rs`).
//! - `ops/`: the operations the endpoints and jobs call, each the I/O shell of the rules'
//!   plans and machines: `pay` (the pay machine's interpreter), `refunds`, `cancel`,
//!   `orders`, `webhooks` (every provider's events, one pipeline), `sweep`, `timeline`, and
//!   `jobs/` (the outbox worker, reconciliation with manual review, receipt emails, cleanup
//!   and retention).
//! - Infrastructure, which never calls an operation or the edge (`tests/blackbox/layout.rs`):
//!   [`store`] (SQL over SQLite or PostgreSQL, one file per table; every write a plan it
//!   executes, `store/tx.rs`: the operations never open a transaction), `replay/` (a finished
//!   attempt's answer from memory, then Redis, then the database; the claim marker's Redis
//!   calls), `provider/` (the provider port, `mod.rs`, and one adapter per provider,
//!   `mock.rs` and `stripe.rs`, each answer sorted by what it proves: docs/providers.md),
//!   `mailer/` (the mailer port: the dev mailbox, SMTP through lettre, or none; the
//!   receipt's text and HTML).
//! - `auth/`: the extractor (`mod.rs`), session tokens (`session.rs`), JWTs (`jwt.rs`).
//! - `catalog` (prices from the catalog, the `--catalog` file), `limits`, `metrics`, `faults`
//!   (the failpoint names and their hooks, no-ops without the `dev` feature), `error`, `reply`, [`clock`], [`ids`] (where new ids come from),
//!   [`config`], [`secret`] (values `Debug` and logs never show).
//! - `dev/` (the `dev` feature): the embedded mock provider, dev sessions, the dev mailbox
//!   (its flags are `config/dev.rs`); `dev_off.rs` stands in for it without the feature.
//! - `journal`: the journal's shell (a request's or job's scope, provider-call entries);
//!   its table and reads are `store/journal.rs`, its request entries `http/journal.rs`.
//! - `state` ([`AppState`] and its sub-states: a handler or an operation takes the part it
//!   reads by `FromRef`; the operations take `OpsState`, never the whole state), `server` ([`dispatch`], [`app`]), `listen`: wiring, listeners,
//!   graceful shutdown.
//!
//! Each module stands on a floor and imports only from its own and those below
//! (`FLOORS` in tests/blackbox/layout.rs, lowest first: the base types, the infrastructure,
//! `catalog`, `config` (its flags, its checks, then the rest), `state`, `ops`, `http`, dev
//! mode and `listen`, `server`); no import climbs one.

#![deny(missing_docs)]

pub mod clock;
pub mod config;
pub mod ids;
pub mod secret;
pub mod store;

mod auth;
mod catalog;
// Everything dev mode adds exists only in a dev build; `src/dev_off.rs` gives a production
// build the same names with none of the machinery (server README, "Dev and production
// builds").
#[cfg(feature = "dev")]
mod dev;
#[cfg(not(feature = "dev"))]
#[path = "dev_off.rs"]
mod dev;
mod error;
mod faults;
mod http;
mod journal;
mod limits;
mod listen;
mod mailer;
mod metrics;
mod openapi;
mod ops;
mod provider;
mod replay;
mod reply;
mod server;
mod state;

pub use auth::session::{sign_token, SESSION_SECS};
pub use config::{Cli, Config, ServerArgs};
pub use dev::{Command, DevArgs};
pub use http::{MAX_BODY_BYTES, ROUTES};

/// One round of every background job ([`ops::jobs::round`]), for tests that drive the jobs
/// themselves.
#[doc(hidden)]
pub async fn run_jobs(state: &AppState) {
    ops::jobs::round(&state.ops).await
}

/// One retention round ([`ops::jobs::cleanup`]): the rows it deleted.
#[doc(hidden)]
pub async fn run_cleanup(state: &AppState) -> Result<u64, error::AppError> {
    ops::jobs::cleanup(&state.ops).await
}
pub use server::{app, dispatch};
pub use state::{AppState, RunError};
pub use store::{Backend, Store};
