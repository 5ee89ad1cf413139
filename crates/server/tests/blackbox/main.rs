//! Black-box tests of `payonce-server`: the real binary, real SQLite files and a real
//! PostgreSQL server, over HTTP. One binary, so the test suite links once.
//!
//! # Layout
//! - `common`: the harness ([`common::TestApp`], fresh databases, process spawning); the
//!   checkout fixtures, one set for a process and an in-process app, are
//!   `payonce_testkit::checkout`.
//! - `rules`: every pay rule (`docs/protocol.md`) and every cancel row, on both backends.
//! - `concurrency`: 50 concurrent pays, two keys racing, three processes on one PostgreSQL.
//! - `webhooks`: signed provider events settle attempts; forged ones cannot.
//! - `crash`: the server aborted at every failpoint, restarted, audited (charged once, paid
//!   once, stock once, one email).
//! - `workers`: webhook chaos, refunds, reconciliation and manual review, retention.
//! - `fast_path`: the Redis fast path (flushed, killed, unreachable), the rate limit,
//!   `GET /metrics`.
//! - `inproc`: in-process servers (`app(state)`, a manual clock): leases, the outbox
//!   worker, retention, decided by moving the clock instead of sleeping.
//! - `layout`: no file of `src/` imports one that imports it back.
//! - `retention`: past key retention a cancel still holds and a charged key is answered
//!   with its payment (docs/model.md, "Findings").
//! - `extras`: checkout extras bound into the fingerprint; unknown ones refused.
//! - `three_ds`: `pm_card_3ds`: `ACTION_REQUIRED`, the same key before and after the
//!   customer acted, the webhook and reconciliation settling it, one charge.
//! - `input`: malformed input of every kind, the OpenAPI fuzzer, CORS, the OpenAPI document.
//! - `edge`: slow clients (silent, half-sent heads, missing bodies) against the timeouts.
//! - `journal`: the journal and the operator API (`/admin/`): a lost answer and its replay
//!   told by the operator API alone, its credential, the dispute-window retention.
//! - `journal_scenarios`: the machines' decisions and the webhooks' verdicts told by the
//!   operator API alone: a crash after the charge, an expired challenge, a cancel meeting its
//!   pay, a dashboard refund, a webhook delivered twice, forged deliveries.
//! - `review`: the operator's resolve of a review flag: 409 while the provider cannot tell,
//!   then paid from the one charge it holds, the note journaled; its credential and body.
//! - `jwt`: Bearer JWTs (`mint-jwt`) create and pay an order; bad ones are 401.
//! - `tls`: TLS PostgreSQL, `rediss://` and an `https://` provider on local services the
//!   test makes; a wrong CA or a plain-text server is refused at start.
//! - `catalog`: `--catalog FILE` replaces the built-in catalog; a bad file stops the start.
//! - `stripe_edges`: `--provider stripe` against localstripe: Stripe's webhooks (settling,
//!   forged, stale, re-stamped, duplicated, a dashboard refund) and a lost provider answer
//!   settled by the jobs, through the fault proxy (`payonce_testkit::fault_proxy`).
//! - `schema`: `--migrate` and `payonce-server migrate`: a production start refuses an
//!   unmigrated schema, one migrated by a newer incompatible release, and a missing
//!   `--database-url`.
//! - `stripe_leftovers`: nothing confirmable outlives its attempt: a declined intent is
//!   cancelled at localstripe (a failed cancel retried by the jobs), and a success that
//!   arrives for an attempt settled uncharged is flagged and refuses the order's new keys.
//! - `erase`: `payonce-server erase-user` leaves no address or email in any text column;
//!   the user's paid order still replays and refunds.
//! - `sweep`: `payonce-server sweep` cancels the intent a lost create answer left, flags
//!   one confirmed outside payonce, and after a restore keeps the lost keys from charging
//!   twice (localstripe and the mock).
//! - `kill_batch`: SIGKILL while 16 clients' pays are committed together; nothing answered
//!   is lost, no order is claimed or charged twice.
//! - `mail`: receipt emails against a real SMTP server (`payonce_testkit::smtp`): one per
//!   paid order, 451 retried on the clock, 550 final, a relay down and back, a crash between
//!   the relay's 250 and the commit, a production start with AUTH.

mod catalog;
mod common;
mod concurrency;
mod crash;
mod edge;
mod erase;
mod extras;
mod fast_path;
mod inproc;
mod input;
mod journal;
mod journal_scenarios;
mod jwt;
mod kill_batch;
mod layout;
mod mail;
mod retention;
mod review;
mod rules;
mod schema;
mod startup;
mod stripe;
mod stripe_edges;
mod stripe_leftovers;
mod sweep;
mod three_ds;
mod tls;
mod webhooks;
mod workers;
