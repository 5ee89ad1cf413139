//! The payonce server's decisions as pure code: no I/O, no async, no wall clock. The server
//! (`crates/server`) reads rows, asks the provider and the limiter, and hands what it learnt
//! to these functions; they answer with the next action or a plan of rows to write, which
//! the server executes in one transaction.
//!
//! - [`pay`]: the pay flow itself, [`pay::ServerPay`]: the sans-IO machine the server's
//!   request path, jobs and webhook handler and the model checker all drive.
//! - [`cancel`]: the cancel flow, [`cancel::ServerCancel`]: a sans-IO machine of the same
//!   shape (the tombstone, the token spent before any provider call, the lookup, the answer).
//! - [`decision`]: each machine decision as the journal names it (claim won or lost and
//!   why, the settle plan, a review flag).
//! - [`ids`]: the ids the server mints, one type each, from an injected [`ids::IdSource`].
//! - [`refund`]: the refund flow, [`refund::ServerRefund`]: a sans-IO machine of the same
//!   shape, with its plans (the claim, the settle, a payment becoming refunded).
//! - [`record`]: an attempt as the store holds it, one variant per state, so a final attempt
//!   without its stored answer cannot be represented.
//! - [`keyed`]: the idempotency mechanism pay and refund share: an operation's fingerprint
//!   and provider keys, and the one rule for a stored key ([`keyed::decide`]).
//! - [`pay_key`]: the pay fingerprint, and rule 2 on a pay record ([`pay_key::decide`]).
//! - [`plan`]: the claim, settle and tombstone plans (rows and audit entries), the
//!   reconcile decision from what the provider says, and the cancel table.
//! - [`erase`]: what erasing a user's personal data removes and keeps, and its audit row.
//! - [`review`]: an operator's resolve of an ended attempt flagged for review (its stray
//!   payment refunded, never adopted), and the audit rows of clearing the flag.
//! - [`sweep`]: the provider sweep's rule: a payment object the provider lists against what
//!   the store knows of its key (cancel, flag for review, or leave it to its attempt).
//! - [`policy`]: lease, retention and `Retry-After` arithmetic, and which rate-limit bucket
//!   a request spends.
//! - [`receipt`]: the receipt email's job: a relay's answer sorted, the backoff of a
//!   transient failure, and the deterministic `Message-ID`.

#![deny(missing_docs)]

pub mod cancel;
pub mod decision;
pub mod erase;
pub mod ids;
pub mod keyed;
pub mod pay;
pub mod pay_key;
pub mod plan;
pub mod policy;
pub mod receipt;
pub mod record;
pub mod refund;
pub mod review;
pub mod sweep;

pub use pay::ServerPay;
pub use pay_key::{decide, fingerprint, provider_key, provider_refund_key, NextAction, PayRequest};
pub use policy::Policy;
pub use record::{Answer, Final, Processing, Record, Terms, Tombstone};
