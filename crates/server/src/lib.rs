//! The payonce companion server: orders priced by the server, and a pay endpoint that
//! charges the customer once however often the request is retried, duplicated, raced or
//! cancelled. SQLite by default, PostgreSQL for several processes. The decisions are the
//! pure `payonce_rules` crate (`crates/rules`); this crate is the shell around them.
//!
//! # Layout
//! - `http/`: the router and one thin file per endpoint, the extractors (`http/extract.rs`).
//! - `pay`, `refunds`, `cancel`, `orders`, `webhooks`: the operations the endpoints call,
//!   executing the rules' plans against the store and the provider.
//! - `replay/`: a finished attempt's answer from memory, then Redis, then the database.
//! - [`store`]: SQL over SQLite or PostgreSQL, one file per table.
//! - `jobs/`: the outbox worker, reconciliation (with manual review), confirmation emails,
//!   cleanup and retention.
//! - `provider`: the provider over HTTP, each answer sorted by what it proves.
//! - `auth`, `catalog`, `limits`, `metrics`, `faults`, `error`, [`clock`], [`config`].
//! - `state` ([`AppState`]), `server` ([`run`]): wiring, listeners, graceful shutdown.
//! - `bench` (hidden): the raw-store pay path the load benchmark measures against.

#![deny(missing_docs)]

#[doc(hidden)]
pub mod bench;
pub mod clock;
pub mod config;
pub mod store;

mod auth;
mod cancel;
mod catalog;
mod error;
mod faults;
mod http;
mod jobs;
mod jwt;
mod limits;
mod metrics;
mod openapi;
mod orders;
mod pay;
mod provider;
mod refunds;
mod replay;
mod reply;
mod server;
mod state;
mod webhooks;

pub use config::{Cli, Command, Config, ServerArgs};
pub use http::{app, MAX_BODY_BYTES, ROUTES};
#[doc(hidden)]
pub use jobs::{cleanup as run_cleanup, round as run_jobs};
pub use server::run;
pub use state::{AppState, RunError};
pub use store::{Backend, Store};
