//! The server side of the model: every call the model makes into the server's pure rules
//! (`crates/rules`) goes through this file, so an API change there is a one-file fix here.
//! A pay, a job and a webhook are the server's own machine ([`ServerPay`]), which the model
//! drives against its own store and provider; the flaws of the server's sequencing are the
//! machine's test-only [`pay::Flaw`]s, the others are injected here, never in the rules.

use crate::Flaw;
use payonce_protocol::provider::Charge;
use payonce_protocol::{
    AttemptStatus, CancelResponse, ErrorCode, Extras, IdempotencyKey, Payment, Problem,
};
use payonce_rules::ids::{AttemptId, IdSource, LeaseToken, OrderId, PaymentId};
use payonce_rules::pay;
pub use payonce_rules::pay::{Claimed, Created, Effect, End, Phases, ServerPay};
use payonce_rules::plan;
pub use payonce_rules::plan::{Claim, Lookup, Outcome, SettlePlan};
pub use payonce_rules::{Answer, Final, Policy, Record, Tombstone};

/// The order row as the model's store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderRow {
    /// Order id.
    pub id: OrderId,
    /// Its version (every cart change bumps it).
    pub version: i64,
    /// The processing attempt holding the order's lock (`active_attempt`).
    pub active: Option<AttemptId>,
    /// Paid.
    pub paid: bool,
}

impl OrderRow {
    /// The amount of a version: a cart change always changes it.
    pub fn amount(&self) -> i64 {
        1_000 + 500 * self.version
    }
}

/// The currency every order uses.
pub const CURRENCY: &str = "EUR";

/// The server's time settings in the model: a lease of one clock tick, keys kept for two;
/// a request waits half a tick on its key in flight, in one look (so a wait ends inside the
/// lease it met: the record settled meanwhile, or 409 `IN_PROGRESS`).
pub fn policy(tick_ms: i64) -> Policy {
    Policy {
        lease_ms: tick_ms,
        key_retention_ms: 2 * tick_ms,
        reconcile_after_ms: tick_ms,
        audit_retention_ms: 10 * tick_ms,
        action_deadline_ms: 4 * tick_ms,
        in_progress_wait_ms: tick_ms / 2,
        wait_poll_ms: tick_ms / 2,
    }
}

/// The machine's view of the order as just read (the model's orders have no lines).
pub fn order(row: &OrderRow) -> pay::Order {
    pay::Order {
        id: row.id.clone(),
        version: row.version,
        amount: row.amount(),
        currency: CURRENCY.into(),
        lines: Vec::new(),
    }
}

/// The server's pay flow for a request of `user` with `key` for `version`, the order as
/// read at delivery; the record is read by the flow's first step.
pub fn pay(
    flaw: Option<Flaw>,
    user: &str,
    key: &str,
    version: u64,
    method: &str,
    order: &OrderRow,
    policy: Policy,
) -> ServerPay {
    let req = pay::Request {
        user: user.to_owned(),
        key: IdempotencyKey::parse(key).expect("model keys are valid"),
        order_version: version,
        payment_method_id: method.to_owned(),
        // The model's checkouts carry no extras (shipping option, coupon).
        extras: Extras::default(),
    };
    // Read first: the flow's wait deadline starts at the first `now` it is polled with.
    ServerPay::pay(req, self::order(order), None, 0, policy).with_flaw(flow_flaw(flaw))
}

/// The jobs' flow for an abandoned attempt.
pub fn abandoned(
    flaw: Option<Flaw>,
    record: &Record,
    order: &OrderRow,
    policy: Policy,
) -> ServerPay {
    ServerPay::abandoned(record, self::order(order), "the reconciliation job", policy)
        .with_flaw(flow_flaw(flaw))
}

/// A webhook's flow for a processing attempt.
pub fn webhook(flaw: Option<Flaw>, record: &Record, order: &OrderRow, policy: Policy) -> ServerPay {
    ServerPay::webhook(
        record,
        self::order(order),
        LeaseToken::from_stored("webhook"),
        policy,
    )
    .with_flaw(flow_flaw(flaw))
}

/// The model's id source: every id derived from the key (the number its last characters
/// spell) and, for a lease token, the clock, so equal histories give equal states. An
/// attempt, its payment and a refund share the key's bits (their prefixes tell them apart);
/// a lease taken at another time is another token.
#[derive(Debug, Clone, Copy)]
pub struct KeyIds {
    key: u64,
    now: i64,
}

impl KeyIds {
    /// The ids of `key` at `now`.
    pub fn new(key: &str, now: i64) -> Self {
        let key = key.get(24..).and_then(|s| s.parse().ok()).unwrap_or(0);
        Self { key, now }
    }
}

impl IdSource for KeyIds {
    fn next_bits(&self) -> u128 {
        u128::from(self.key)
    }

    fn bits_for(&self, kind: &str) -> u128 {
        match kind {
            LeaseToken::KIND => u128::from(self.key) << 64 | u128::from(self.now as u64),
            _ => self.next_bits(),
        }
    }
}

/// Why a conditional claim was refused by the order: the order's version and whether it is
/// paid as read after the refusal, against the version the request read.
pub fn order_conflict(current: i64, paid: bool, read: i64) -> Problem {
    plan::order_conflict(Some((current, paid)), read)
}

/// [`order_conflict`] for an order that may be held for review (`held`).
pub fn order_refusal(current: i64, paid: bool, read: i64, held: bool) -> Problem {
    plan::order_refusal(Some((current, paid)), read, held)
}

/// Whether the provider's answer (`lookup`) about a payment of attempt `id`, settled as
/// `status`, is a charge to flag ([`plan::plan_stray`]).
pub fn is_stray(id: &str, status: payonce_protocol::AttemptStatus, lookup: Lookup) -> bool {
    matches!(
        plan::plan_stray(id, status, lookup),
        plan::Stray::Flag { .. }
    )
}

/// When the jobs look again at an attempt whose payment waits for the customer.
pub fn next_customer_check(created_at: i64, now: i64, tick_ms: i64) -> i64 {
    payonce_rules::policy::next_customer_check(created_at, now, &policy(tick_ms))
}

/// What a charge means for its attempt.
pub fn outcome_of(charge: Charge) -> Outcome {
    Outcome::of(charge)
}

/// The tombstone a cancel of an unknown key on the unpaid `order` inserts.
pub fn plan_tombstone(
    user: &str,
    order: &OrderRow,
    key: &str,
    now: i64,
    policy: &Policy,
) -> Tombstone {
    let id = AttemptId::mint(&KeyIds::new(key, now));
    plan::plan_tombstone(user, &order.id, order.version, id, now, policy).0
}

/// A cancel of a key the store does not hold on a paid order: what the provider's answer
/// about its provider key means, with the order's payment.
pub fn cancel_forgotten(lookup: Lookup, payment: Option<Payment>) -> CancelResponse {
    plan::cancel_forgotten(lookup, payment)
}

/// Retention: may the record be deleted now, given the order as it stands;
/// [`Flaw::TombstoneExpires`] deletes a tombstone at its expiry whatever the order.
pub fn deletable(flaw: Option<Flaw>, record: &Record, now: i64, order: &OrderRow) -> bool {
    match (flaw, record) {
        (Some(Flaw::TombstoneExpires), Record::Tombstone(t)) => t.expires_at < now,
        _ => payonce_rules::policy::deletable(record, now, (!order.paid).then_some(order.version)),
    }
}

/// The cancel table for a taken slot; `Err`: the 422 problem.
pub fn cancel_answer(
    record: &Record,
    order_id: &str,
) -> Result<(AttemptStatus, bool), Box<Problem>> {
    plan::cancel_answer(record, order_id)
}

/// The bytes of a problem answer.
pub fn problem_answer(p: &Problem) -> Answer {
    Answer {
        status: p.status,
        body: plan::problem_body(p),
    }
}

/// A problem with the attempt's status, as the pay handler answers 409/422s.
pub fn problem(
    code: ErrorCode,
    status: Option<AttemptStatus>,
    retry_after: Option<u64>,
) -> Problem {
    let mut p = Problem::new(code);
    p.attempt_status = status;
    p.retry_after = retry_after;
    p
}

/// A cancel answer's body.
pub fn cancel_body(status: AttemptStatus, payment: Option<Payment>) -> String {
    serde_json::to_string(&CancelResponse { status, payment }).unwrap_or_default()
}

/// The payment row of a paid order, as the settle of `charge` wrote it (the model keeps
/// no payments table: the order's succeeded charge stands for it).
pub fn payment_of(charge: &Charge) -> Payment {
    Payment {
        id: format!("{}_{}", PaymentId::PREFIX, &charge.id[3..]),
        order_id: charge.order_id.clone(),
        amount: charge.amount,
        currency: charge.currency.clone(),
        payment_method_id: charge.payment_method_id.clone(),
        charge_id: charge.id.clone(),
        status: AttemptStatus::Succeeded,
    }
}

/// The provider key of a charge.
pub fn provider_key(user: &str, key: &IdempotencyKey, order_id: &str) -> String {
    payonce_rules::provider_key(user, key, order_id)
}

// --- flaws, injected at this boundary ------------------------------------------------------

/// The claim is one conditional write (insert-if-absent on `(user, key)` and the order's
/// lock in one transaction); [`Flaw::ClaimReadThenWrite`] checks with the earlier read
/// and then writes unconditionally.
pub fn claim_is_atomic(flaw: Option<Flaw>) -> bool {
    flaw != Some(Flaw::ClaimReadThenWrite)
}

/// A cancel of an unknown key inserts its tombstone; [`Flaw::NoTombstone`] only answers
/// `cancelled`.
pub fn cancel_inserts_tombstone(flaw: Option<Flaw>) -> bool {
    flaw != Some(Flaw::NoTombstone)
}

/// A cancel of a key the store does not hold on a paid order asks the provider
/// ([`cancel_forgotten`]); [`Flaw::BlindCancel`] tombstones it and answers `cancelled`.
pub fn cancel_asks_provider(flaw: Option<Flaw>) -> bool {
    flaw != Some(Flaw::BlindCancel)
}

/// The flaws that live in the server's sequencing are the machine's own
/// ([`pay::Flaw`]); the others are injected at this adapter or in the model's store.
pub fn flow_flaw(flaw: Option<Flaw>) -> Option<pay::Flaw> {
    match flaw? {
        Flaw::BlindRecharge => Some(pay::Flaw::BlindRecharge),
        Flaw::ChargeBeforeClaim => Some(pay::Flaw::ChargeBeforeClaim),
        Flaw::StaleClaim => Some(pay::Flaw::StaleClaim),
        Flaw::ConfirmUnsaved => Some(pay::Flaw::ConfirmUnsaved),
        Flaw::Recreate => Some(pay::Flaw::Recreate),
        Flaw::LeaveConfirmable => Some(pay::Flaw::LeaveConfirmable),
        _ => None,
    }
}

/// The answer a replay sends: the record's own; [`Flaw::ReplayOtherAnswer`] answers from
/// the user's most recent other final record when there is one (a replay cache keyed by
/// user and order instead of by key).
pub fn replay_answer<'a>(flaw: Option<Flaw>, own: &'a Answer, others: &[&'a Final]) -> &'a Answer {
    match (flaw, others.last()) {
        (Some(Flaw::ReplayOtherAnswer), Some(f)) => &f.answer,
        _ => own,
    }
}
