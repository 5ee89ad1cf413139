//! An exhaustive model check of the payonce protocol (docs/model.md). The actors of
//! [`model`] make their decisions with the real code: the SDK's pure core through
//! [`sdk`] and the server's rules through [`server`], the two adapters. [`check`] explores
//! every interleaving within [`model::Bounds`] and checks the invariants in every state.

#![deny(missing_docs)]

pub mod check;
pub mod model;
pub mod sdk;
pub mod server;

/// A deliberately broken variant, injected at an adapter or set on the server's machine
/// (`payonce_rules::pay::Flaw`, which only tests set), never an edit to the real code, so
/// the model's own tests show that the checker catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// The claim reads, then writes unconditionally (no unique slot, no conditional order lock).
    ClaimReadThenWrite,
    /// The SDK also drops the key when a request times out.
    RemoveKeyOnTimeout,
    /// A cancel of an unknown key answers `cancelled` without inserting a tombstone.
    NoTombstone,
    /// A take-over charges again under a fresh provider key without asking the provider.
    BlindRecharge,
    /// The server calls the provider before its claim is committed (the machine's
    /// sequencing only: every decision it calls is the real one).
    ChargeBeforeClaim,
    /// The claim plan skips its stale-version check: a confirmation of an older cart is
    /// charged at the order's current amount.
    StaleClaim,
    /// A replay answers with another attempt's stored answer.
    ReplayOtherAnswer,
    /// Retention deletes a tombstone at its expiry even while its order is still payable
    /// at its version (the cleanup before docs/model.md's retention finding was fixed).
    TombstoneExpires,
    /// A cancel of a key the store no longer holds answers `cancelled` without asking the
    /// provider whether the key charged (the cancel before the same fix).
    BlindCancel,
    /// Two phases: the created payment object is confirmed before its id is saved.
    ConfirmUnsaved,
    /// Two phases: a take-over creates and confirms a new object instead of looking up the
    /// saved one.
    Recreate,
    /// Two phases: a declined payment object is settled without being cancelled, so the
    /// customer can still confirm it outside the server.
    LeaveConfirmable,
}
