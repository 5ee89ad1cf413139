//! The payonce companion server: orders priced by the server, and a pay endpoint that
//! charges the customer once however often the request is retried, duplicated, raced or
//! cancelled. SQLite by default, PostgreSQL for several processes. The decisions are the
//! pure `payonce_rules` crate (`crates/rules`); this crate is the shell around them.
//!
//! # Layout
//! - `http/`: the router and one thin file per endpoint, the extractors (`http/extract.rs`).
//! - `pay`, `refunds`, `cancel`, `orders`, `webhooks`, `stripe_webhooks`: the operations the
//!   endpoints call, executing the rules' plans against the store and the provider.
//! - `replay/`: a finished attempt's answer from memory, then Redis, then the database.
//! - [`store`]: SQL over SQLite or PostgreSQL, one file per table.
//! - `jobs/`: the outbox worker, reconciliation (with manual review), confirmation emails,
//!   cleanup and retention.
//! - `provider/`: the provider port (`mod.rs`) and one adapter per provider (`mock.rs`,
//!   `stripe.rs`), each answer sorted by what it proves (docs/providers.md).
//! - `auth` (the extractor), `session` (session tokens), `jwt`, `catalog`, `limits`,
//!   `metrics`, `faults` (the failpoint names), `error`, [`clock`], [`ids`] (where new ids
//!   come from), [`config`], [`secret`]
//!   (values `Debug` and logs never show).
//! - `dev/` (the `dev` feature): `--dev`, the embedded mock provider, dev sessions, the
//!   dev mailbox, dev faults and failpoints; `dev_off.rs` stands in for it without the feature.
//! - `state` ([`AppState`]), `server` ([`run`]), `listen`: wiring, listeners, graceful shutdown.

#![deny(missing_docs)]

pub mod clock;
pub mod config;
pub mod ids;
pub mod secret;
pub mod store;

mod auth;
mod cancel;
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
mod jobs;
mod jwt;
mod limits;
mod listen;
mod metrics;
mod openapi;
mod orders;
mod pay;
mod provider;
mod refunds;
mod replay;
mod reply;
mod server;
mod session;
mod state;
mod stripe_webhooks;
mod webhooks;

pub use config::{Cli, Config, ServerArgs};
pub use dev::{Command, DevArgs};
pub use http::{app, MAX_BODY_BYTES, ROUTES};
#[doc(hidden)]
pub use jobs::{cleanup as run_cleanup, round as run_jobs};
pub use server::run;
pub use session::{sign_token, SESSION_SECS};
pub use state::{AppState, RunError};
pub use store::{Backend, Store};
