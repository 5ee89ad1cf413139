//! The server side of the model: every call the model makes into the server's pure rules
//! (`crates/rules`) goes through this file, so an API change there is a one-file fix here.
//! The server-side [`Flaw`]s are injected here, never in the rules.

use crate::Flaw;
use payonce_protocol::provider::Charge;
use payonce_protocol::{
    AttemptStatus, CancelResponse, ErrorCode, Extras, IdempotencyKey, Payment, Problem,
};
use payonce_rules::pay::{Current, PayRequest};
use payonce_rules::plan::{self, OrderTerms};
pub use payonce_rules::plan::{Claim, Lookup, Outcome, SettlePlan};
pub use payonce_rules::{Answer, Final, NextAction, Policy, Record, Tombstone};

/// The order row as the model's store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderRow {
    /// Order id.
    pub id: String,
    /// Its version (every cart change bumps it).
    pub version: i64,
    /// The processing attempt holding the order's lock (`active_attempt`).
    pub active: Option<String>,
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

/// The server's time settings in the model: a lease of one clock tick, keys kept for two.
pub fn policy(tick_ms: i64) -> Policy {
    Policy {
        lease_ms: tick_ms,
        key_retention_ms: 2 * tick_ms,
        reconcile_after_ms: tick_ms,
        audit_retention_ms: 10 * tick_ms,
    }
}

/// Rule 2 on the caller's record for its key, the order as just read.
pub fn decide(
    record: Option<&Record>,
    user: &str,
    order: &OrderRow,
    version: u64,
    method: &str,
    now: i64,
) -> NextAction {
    // The model's checkouts carry no extras (shipping option, coupon).
    let no_extras = Extras::default();
    let req = PayRequest {
        user,
        order_id: &order.id,
        order_version: version,
        payment_method_id: method,
        extras: &no_extras,
        current: Some(Current {
            version: order.version,
            amount: order.amount(),
            currency: CURRENCY,
        }),
    };
    // `may_wait` false: the server's in-progress wait is a loop of the same decision, and
    // the model lets the client do that loop instead (see docs/model.md).
    payonce_rules::decide(record, &req, now, false)
}

/// The claim plan (rule 3) for a new key on the order as read.
#[allow(clippy::too_many_arguments)]
pub fn plan_claim(
    user: &str,
    key: &IdempotencyKey,
    order: &OrderRow,
    version: u64,
    method: &str,
    token: String,
    now: i64,
    policy: &Policy,
) -> Result<Claim, Box<Problem>> {
    let terms = OrderTerms {
        id: &order.id,
        version: order.version,
        amount: order.amount(),
        currency: CURRENCY,
        lines: &[],
    };
    let attempt_id = format!("att_{}", &key.as_str()[24..]);
    let no_extras = Extras::default();
    plan::plan_claim(
        user, key, terms, version, method, &no_extras, attempt_id, token, now, policy,
    )
    .map(|p| p.claim)
}

/// Why a conditional claim was refused by the order: the order's version as read after the
/// refusal, against the one the request read.
pub fn order_conflict(current: i64, read: i64) -> Problem {
    plan::order_conflict(Some(current), read)
}

/// A claim on a processing record, for a take-over or a webhook.
pub fn claim_of(record: &Record, actor: &str, token: String) -> Option<Claim> {
    Claim::of(record, &[], actor, token)
}

/// Rule 5: what to do with what the provider says about an abandoned attempt (`Err`:
/// charge again with the same provider key).
pub fn reconcile(lookup: Lookup) -> Result<Outcome, plan::Redrive> {
    plan::reconcile(lookup)
}

/// What a webhook may apply: `None` the provider could not be asked (redeliver).
pub fn webhook(lookup: Lookup) -> Option<Option<Outcome>> {
    plan::webhook(lookup)
}

/// What a charge means for its attempt.
pub fn outcome_of(charge: Charge) -> Outcome {
    Outcome::of(charge)
}

/// The settle plan (rule 4).
pub fn plan_settle(claim: &Claim, outcome: Outcome, now: i64, policy: &Policy) -> SettlePlan {
    let payment_id = format!("pay_{}", &claim.attempt.id[4..]);
    plan::plan_settle(claim, outcome, payment_id, now, policy)
}

/// The tombstone a cancel of an unknown key on the unpaid `order` inserts.
pub fn plan_tombstone(
    user: &str,
    order: &OrderRow,
    key: &str,
    now: i64,
    policy: &Policy,
) -> Tombstone {
    let id = format!("att_{}", &key[24..]);
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
        id: format!("pay_{}", &charge.id[3..]),
        order_id: charge.order_id.clone(),
        amount: charge.amount,
        currency: charge.currency.clone(),
        payment_method_id: charge.payment_method_id.clone(),
        charge_id: charge.id.clone(),
        status: AttemptStatus::Succeeded,
    }
}

/// The provider key of a charge.
pub fn provider_key(user: &str, key: &IdempotencyKey) -> String {
    payonce_rules::provider_key(user, key)
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

/// A take-over asks the provider by key before anything else (rule 5);
/// [`Flaw::BlindRecharge`] charges again, under a fresh provider key, without asking.
pub fn take_over_asks_provider(flaw: Option<Flaw>) -> bool {
    flaw != Some(Flaw::BlindRecharge)
}

/// The fresh provider key a blind re-charge uses.
pub fn recharge_key(provider_key: &str) -> String {
    format!("{provider_key}-again")
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
