//! Plans: the rows and audit entries one transaction writes, returned as values. The server
//! executes a plan as conditional statements (`crates/server/src/store/`); these functions
//! only decide what the rows say.

use crate::ids::{AttemptId, LeaseToken, OrderId, PaymentId};
use crate::pay_key::{fingerprint, provider_key, Details};
use crate::policy::Policy;
use crate::record::{Answer, Processing, Record, Terms};
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{
    ActionRequiredProblem, AttemptStatus, CancelResponse, ErrorCode, Extras, IdempotencyKey,
    OrderLine, OrderStatus, PayResponse, Payment, Problem,
};

/// One audit row: who changed what from which state to which, and why. The state names
/// are the trail's vocabulary (`crates/chaos` reads it back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// The user, `system`, or `provider-webhook`.
    pub actor: String,
    /// `order`, `attempt` or `payment`.
    pub entity: &'static str,
    /// Its id.
    pub entity_id: String,
    /// The state before; `None` for a new entity.
    pub from: Option<String>,
    /// The state after.
    pub to: String,
    /// Why.
    pub reason: String,
}

/// A state as the audit trail stores it (`from_state`, `to_state`): the wire's status names
/// (`payonce_protocol`), and the few states only the trail tells apart. Its `Display` is the
/// one spelling of the stored text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditState {
    /// An attempt, or a payment, in this status (`processing`, `succeeded`, …).
    Attempt(AttemptStatus),
    /// A processing attempt flagged for manual review.
    Review,
    /// An attempt that ended in this status, flagged for manual review: the provider
    /// charged the payment object it had left behind ([`Leftover::Charged`]).
    Flagged(AttemptStatus),
    /// An order in this status (`unpaid`, `paid`, `refunded`).
    Order(OrderStatus),
    /// An unpaid order a processing attempt has locked.
    UnpaidActive,
    /// An unpaid order at this cart version (created at 1, one more per cart change).
    Cart(i64),
}

impl std::fmt::Display for AuditState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Attempt(s) => f.write_str(s.as_str()),
            Self::Review => f.write_str("processing (needs review)"),
            Self::Flagged(s) => write!(f, "{} (needs review)", s.as_str()),
            Self::Order(s) => f.write_str(s.as_str()),
            Self::UnpaidActive => f.write_str("unpaid (payment active)"),
            Self::Cart(version) => write!(f, "unpaid v{version}"),
        }
    }
}

impl AuditEntry {
    /// An entry: `entity` `id` went `from` (`None`: it is new) `to`, because of `reason`.
    pub fn change(
        actor: &str,
        entity: &'static str,
        id: &str,
        from: Option<AuditState>,
        to: AuditState,
        reason: &str,
    ) -> Self {
        Self {
            actor: actor.to_owned(),
            entity,
            entity_id: id.to_owned(),
            from: from.map(|s| s.to_string()),
            to: to.to_string(),
            reason: reason.to_owned(),
        }
    }
}

use AuditEntry as Entry;

/// Order states in the audit trail.
const UNPAID: AuditState = AuditState::Order(OrderStatus::Unpaid);
const UNPAID_ACTIVE: AuditState = AuditState::UnpaidActive;
/// The attempt state of every claim, take-over and settle.
const PROCESSING: AuditState = AuditState::Attempt(AttemptStatus::Processing);

/// The order as a claim needs it.
#[derive(Debug, Clone, Copy)]
pub struct OrderTerms<'a> {
    /// Order id.
    pub id: &'a OrderId,
    /// Version read by rule 1.
    pub version: i64,
    /// Amount for that version.
    pub amount: i64,
    /// Currency.
    pub currency: &'a str,
    /// Lines (the stock to reserve).
    pub lines: &'a [OrderLine],
}

/// Everything needed to charge and settle one claimed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The processing attempt.
    pub attempt: Processing,
    /// Who the audit trail names for this claim's changes.
    pub actor: String,
    /// The lease this claim holds.
    pub lease_token: LeaseToken,
    /// The order's lines at the attempt's version (the order is locked, so they cannot
    /// have changed): the stock to give back if nothing is charged.
    pub lines: Vec<OrderLine>,
}

impl Claim {
    /// A claim on a processing record (a take-over or a webhook); `None` for any other.
    pub fn of(
        record: &Record,
        lines: &[OrderLine],
        actor: &str,
        lease_token: LeaseToken,
    ) -> Option<Self> {
        match record {
            Record::Processing(p) => Some(Self {
                attempt: p.clone(),
                actor: actor.to_owned(),
                lease_token,
                lines: lines.to_vec(),
            }),
            _ => None,
        }
    }
}

/// The claim transaction (rule 3): the attempt row (with its provider key: the durable
/// "charge this" the outbox worker drives), the stock to reserve in SKU order, the audit rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPlan {
    /// The claim; its attempt is the row to insert.
    pub claim: Claim,
    /// Lines in SKU order: every transaction that touches several catalog rows locks them in
    /// this one order, so two orders sharing SKUs never deadlock on PostgreSQL.
    pub stock: Vec<OrderLine>,
    /// Audit rows of the claim.
    pub audit: Vec<AuditEntry>,
}

/// Plans the claim of a new key, or refuses it: the request must name the version rule 1
/// read, so the amount charged is the amount the customer saw (the order lock re-checks it
/// atomically).
#[allow(clippy::too_many_arguments)]
pub fn plan_claim(
    user: &str,
    key: &IdempotencyKey,
    order: OrderTerms<'_>,
    order_version: u64,
    payment_method_id: &str,
    extras: &Extras,
    attempt_id: AttemptId,
    lease_token: LeaseToken,
    now: i64,
    policy: &Policy,
) -> Result<ClaimPlan, Box<Problem>> {
    if i64::try_from(order_version).ok() != Some(order.version) {
        return Err(Box::new(order_changed(order.version)));
    }
    let fingerprint = fingerprint(&Details {
        user,
        order_id: order.id,
        order_version: order.version,
        amount: order.amount,
        currency: order.currency,
        payment_method_id,
        extras,
    });
    let note = format!("pay accepted for order version {}", order.version);
    let audit = vec![
        Entry::change(user, "attempt", &attempt_id, None, PROCESSING, &note),
        Entry::change(
            user,
            "order",
            order.id,
            Some(UNPAID),
            UNPAID_ACTIVE,
            "attempt claimed; cart locked; stock reserved",
        ),
    ];
    let attempt = Processing {
        id: attempt_id,
        terms: Terms {
            user: user.to_owned(),
            order_id: order.id.clone(),
            fingerprint,
            order_version: order.version,
            amount: order.amount,
            currency: order.currency.to_owned(),
        },
        payment_method_id: payment_method_id.to_owned(),
        provider_key: provider_key(user, key, order.id),
        provider_ref: None,
        locked_until: Some(policy.lease_until(now)),
        created_at: now,
    };
    let mut stock = order.lines.to_vec();
    stock.sort_by(|a, b| a.sku.cmp(&b.sku));
    Ok(ClaimPlan {
        claim: Claim {
            attempt,
            actor: user.to_owned(),
            lease_token,
            lines: order.lines.to_vec(),
        },
        stock,
        audit,
    })
}

/// 409 `ORDER_CHANGED` naming the current version.
pub fn order_changed(current: i64) -> Problem {
    let mut p = Problem::new(ErrorCode::OrderChanged);
    p.current_version = u64::try_from(current).ok();
    p
}

/// Why the order refused a claim, from its version and whether it is paid, as read after the
/// refusal (`None`: gone): it is paid (`ORDER_ALREADY_PAID`, to which the caller adds the
/// order's payment: "paid elsewhere" is an answer, not "busy"), it moved to another version,
/// or another attempt holds it. A blocker that finished between the statement and the read is
/// still a refusal: the client retries with its key and gets a fresh decision.
pub fn order_conflict(current: Option<(i64, bool)>, expected_version: i64) -> Problem {
    match current {
        Some((_, true)) => Problem::new(ErrorCode::OrderAlreadyPaid),
        Some((v, false)) if v != expected_version => order_changed(v),
        Some(_) => Problem::new(ErrorCode::PaymentAlreadyActive),
        None => Problem::new(ErrorCode::OrderNotFound),
    }
}

/// A claim refused by an order held for review (a payment succeeded at the provider for an
/// attempt of it that had ended uncharged, [`Leftover::Charged`]): no new key may pay it
/// until a person resolves it, or the customer would be charged twice. A paid order still
/// answers `ORDER_ALREADY_PAID`.
pub fn order_refusal(current: Option<(i64, bool)>, expected_version: i64, held: bool) -> Problem {
    match current {
        Some((_, false)) if held => Problem::new(ErrorCode::OrderUnderReview).with_detail(
            "a payment of this order succeeded at the provider after its attempt had ended \
             without a charge; the order is held until it is reviewed",
        ),
        _ => order_conflict(current, expected_version),
    }
}

/// What a charge call (or a lookup) proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Money moved.
    Succeeded(Charge),
    /// The provider declined; no money moved.
    Declined(Charge),
    /// The provider refused the request itself: nothing was charged.
    Rejected(String),
    /// Timeout, 5xx, network error, or an unreadable answer: outcome unknown.
    Unknown(String),
    /// The charge waits for the customer (3-D Secure) at `next_action_url`: no outcome
    /// yet, but a known state, so nothing to review and nothing to re-drive.
    ActionRequired(Charge),
    /// The payment that waited for the customer was cancelled at the provider (past the
    /// attempt's deadline): nothing was charged, and nothing ever will be.
    Expired,
    /// The customer cancelled the attempt while its payment waited for them, and the
    /// provider cancelled that payment: nothing was charged.
    Withdrawn,
    /// Past the deadline the provider was asked to cancel the payment that waits for the
    /// customer, and answered without cancelling it (or without it): a person decides.
    Uncancelled(String),
}

impl Outcome {
    /// What an existing charge means for its attempt.
    pub fn of(charge: Charge) -> Self {
        match charge.status {
            ChargeStatus::Declined => Self::Declined(charge),
            ChargeStatus::Succeeded | ChargeStatus::Refunded => Self::Succeeded(charge),
            ChargeStatus::RequiresAction => Self::ActionRequired(charge),
            ChargeStatus::Canceled => Self::Expired,
        }
    }
}

/// What the provider's answer to "cancel the payment that waits for the customer" proves
/// (`lookup`: the payment as the provider holds it after the call). Cancelled: expired.
/// Ended by the customer first: that outcome. No answer: unknown (asked again on the next
/// round). Still waiting, or no such payment: the cancel did not take; never guess.
pub fn after_cancel(lookup: Lookup) -> Outcome {
    match lookup {
        Lookup::Found(charge) if charge.status != ChargeStatus::RequiresAction => {
            Outcome::of(charge)
        }
        Lookup::Unknown(why) => Outcome::Unknown(why),
        Lookup::Found(_) => Outcome::Uncancelled("the payment still waits for the customer".into()),
        Lookup::NotFound | Lookup::Unconfirmed => {
            Outcome::Uncancelled("the provider has no such payment waiting".into())
        }
    }
}

/// What the provider holds for a payment object that did not charge (declined, or refused)
/// once asked to cancel it, or for one whose attempt settled without a charge once a success
/// was reported for it: nothing confirmable may outlive its attempt, and a charge that
/// happened anyway is never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// Cancelled: it can never charge.
    Cancelled,
    /// It succeeded: the customer confirmed it outside the checkout (Stripe.js's "try
    /// another card" with the page's client secret) before the cancel took.
    Charged(Charge),
    /// Not cancelled: a new payment method can still confirm it.
    Confirmable(String),
    /// The provider could not tell.
    Unknown(String),
}

/// Sorts the provider's answer about such a payment object ([`Leftover`]). Only `canceled`
/// is done with; a declined one (Stripe's `requires_payment_method`) is exactly what a new
/// card can still confirm.
pub fn leftover(lookup: Lookup) -> Leftover {
    match lookup {
        Lookup::Found(charge) => match charge.status {
            ChargeStatus::Succeeded | ChargeStatus::Refunded => Leftover::Charged(charge),
            ChargeStatus::Canceled => Leftover::Cancelled,
            ChargeStatus::Declined | ChargeStatus::RequiresAction => {
                Leftover::Confirmable(format!("payment {} can still be confirmed", charge.id))
            }
        },
        // One phase: the provider holds nothing under the key that could charge later.
        Lookup::NotFound => Leftover::Cancelled,
        Lookup::Unconfirmed => Leftover::Confirmable("the payment is unconfirmed".into()),
        Lookup::Unknown(why) => Leftover::Unknown(why),
    }
}

/// What the provider's answer, after the cancel of a declined (or refused) payment object
/// the attempt saved, means for the attempt settling `uncharged` ([`Leftover`]): cancelled →
/// that outcome stands; charged meanwhile (the customer confirmed it with another card) →
/// settle that charge; otherwise nothing is known yet: the attempt stays processing, and
/// whoever drives it next (a retry, the jobs) cancels again before it settles.
pub fn after_leftover_cancel(lookup: Lookup, uncharged: Outcome) -> Outcome {
    match leftover(lookup) {
        Leftover::Cancelled => uncharged,
        Leftover::Charged(charge) => Outcome::of(charge),
        Leftover::Confirmable(why) | Leftover::Unknown(why) => Outcome::Unknown(format!(
            "the uncharged payment is not cancelled at the provider yet: {why}"
        )),
    }
}

/// What a success the provider reports for an attempt settled without a charge (`status`)
/// comes to, read back from the provider (`lookup`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stray {
    /// The provider holds no charge: the event changes nothing.
    Nothing,
    /// The provider could not tell: the event must be delivered again.
    Unknown(String),
    /// Money moved for an attempt whose answer said nothing was charged: flag the attempt
    /// for review and hold its order (its new keys are refused, [`order_refusal`]), with
    /// this audit row; the caller logs and counts it.
    Flag {
        /// The provider's payment that succeeded.
        charge: Box<Charge>,
        /// The review flag's audit row, naming the payment.
        audit: Box<AuditEntry>,
    },
}

/// Plans [`Stray`] for attempt `attempt_id`, settled as `status`.
pub fn plan_stray(attempt_id: &str, status: AttemptStatus, lookup: Lookup) -> Stray {
    match leftover(lookup) {
        Leftover::Charged(charge) => {
            let reason = format!(
                "provider payment {} succeeded ({} {}) after this attempt ended {} without a \
                 charge: flagged for manual review; the order refuses new keys until resolved",
                charge.id,
                charge.amount,
                charge.currency,
                status.as_str()
            );
            let audit = Entry::change(
                "system",
                "attempt",
                attempt_id,
                Some(AuditState::Attempt(status)),
                AuditState::Flagged(status),
                &reason,
            );
            Stray::Flag {
                charge: Box::new(charge),
                audit: Box::new(audit),
            }
        }
        Leftover::Unknown(why) => Stray::Unknown(why),
        Leftover::Cancelled | Leftover::Confirmable(_) => Stray::Nothing,
    }
}

/// What a lookup by provider key proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A charge exists for the key.
    Found(Charge),
    /// The provider has never seen the key: re-driving with it is safe.
    NotFound,
    /// A two-phase provider holds the payment object whose id is saved on the attempt, never
    /// confirmed: nothing was charged; confirming that saved id is safe.
    Unconfirmed,
    /// The provider could not tell.
    Unknown(String),
}

/// Rule 5 on what the provider says about an abandoned attempt's provider key: settle from
/// a charge it has; re-drive with the same key only when it has none; stay processing when
/// it cannot tell (never charge blindly).
pub fn reconcile(lookup: Lookup) -> Result<Outcome, Redrive> {
    match lookup {
        Lookup::Found(charge) => Ok(Outcome::of(charge)),
        Lookup::NotFound | Lookup::Unconfirmed => Err(Redrive),
        Lookup::Unknown(why) => Ok(Outcome::Unknown(why)),
    }
}

/// The provider has no charge for the key: charge again with the same provider key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redrive;

/// A webhook is a hint: only a charge the provider itself reports settles anything, and
/// "no such charge" is nothing to apply (never a re-drive: the claimant may be mid-call).
/// `None`: the provider could not be asked; the event must be delivered again.
pub fn apply_hint(lookup: Lookup) -> Option<Option<Outcome>> {
    match lookup {
        Lookup::Found(charge) => Some(Some(Outcome::of(charge))),
        Lookup::NotFound | Lookup::Unconfirmed => Some(None),
        Lookup::Unknown(_) => None,
    }
}

/// The final row of a settled attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// The final status.
    pub status: AttemptStatus,
    /// The answer to store and replay.
    pub answer: Answer,
    /// The provider's charge, when money moved.
    pub charge_id: Option<String>,
    /// When the key may be deleted.
    pub expires_at: i64,
}

/// The settle transaction (rule 4) for an outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlePlan {
    /// Finish the attempt succeeded, insert the payment, mark the order paid, enqueue the
    /// confirmation email.
    Charged {
        /// The attempt's final row.
        finish: Finish,
        /// The payment row.
        payment: Payment,
        /// Audit rows.
        audit: Vec<AuditEntry>,
    },
    /// Finish the attempt without a charge, unlock the order, give the stock back (SKU
    /// order).
    Uncharged {
        /// The attempt's final row.
        finish: Finish,
        /// Lines to give back, in SKU order.
        release: Vec<OrderLine>,
        /// Audit rows.
        audit: Vec<AuditEntry>,
    },
    /// Nothing is known: end our lease early (nobody is talking to the provider about it
    /// any more, so the next retry asks it at once) and answer 202 with `Retry-After`.
    Unknown {
        /// The 202 answer (never stored).
        answer: Answer,
    },
    /// The customer must act first: the attempt stays processing (order locked, stock
    /// reserved), our lease ends early as for `Unknown` (the next retry asks the provider
    /// at once), and the answer is 402 `ACTION_REQUIRED` with the provider's page in `next`.
    ActionRequired {
        /// The 402 answer (never stored: it changes once the customer acted).
        answer: Answer,
    },
    /// The provider reports a succeeded charge under our key for another order, amount or
    /// currency than the attempt's: money moved, but not the money this order asked for,
    /// so the order is not marked paid. The attempt is flagged for manual review (once,
    /// with `audit`), stays processing with its order locked, our lease ends early, and the
    /// answer is the 202 of `Unknown`.
    Review {
        /// The 202 answer (never stored).
        answer: Answer,
        /// The review flag's audit row.
        audit: AuditEntry,
    },
}

/// Plans the settle of `claim` with `outcome`. `payment_id` names the payment if one is made.
pub fn plan_settle(
    claim: &Claim,
    outcome: Outcome,
    payment_id: PaymentId,
    now: i64,
    policy: &Policy,
) -> SettlePlan {
    let a = &claim.attempt;
    let expires_at = policy.expires_at(now);
    let uncharged =
        |status, code, detail: &str| plan_uncharged(claim, (status, code), detail, expires_at);
    match outcome {
        Outcome::Succeeded(charge) if !charges_the_terms(&charge, &a.terms) => SettlePlan::Review {
            answer: processing_answer(a),
            audit: mismatch_entry(&a.id, &charge),
        },
        Outcome::Succeeded(charge) => plan_charged(claim, charge, payment_id, expires_at),
        Outcome::Declined(charge) => {
            let detail = match &charge.decline_code {
                Some(code) => format!("the card was declined ({code})"),
                None => "the card was declined".to_owned(),
            };
            uncharged(AttemptStatus::Declined, ErrorCode::PaymentDeclined, &detail)
        }
        Outcome::Rejected(_) => uncharged(
            AttemptStatus::Failed,
            ErrorCode::PaymentFailed,
            "the provider refused the charge",
        ),
        Outcome::Expired => uncharged(
            AttemptStatus::Expired,
            ErrorCode::ActionExpired,
            "the customer did not complete the payment's action (3-D Secure) in time; \
             the provider cancelled it and nothing was charged",
        ),
        Outcome::Withdrawn => uncharged(
            AttemptStatus::Cancelled,
            ErrorCode::AttemptCancelled,
            "cancelled by the customer while the payment waited for their action; the \
             provider cancelled it and nothing was charged",
        ),
        Outcome::Uncancelled(why) => SettlePlan::Review {
            answer: processing_answer(a),
            audit: flagged(
                &a.id,
                &format!(
                    "the provider was asked to cancel the payment waiting for the customer and \
                     did not ({why}): flagged for manual review, order still locked"
                ),
            ),
        },
        Outcome::ActionRequired(Charge {
            next_action_url,
            client_secret,
            ..
        }) if next_action_url.is_some() || client_secret.is_some() => SettlePlan::ActionRequired {
            answer: action_answer(next_action_url, client_secret),
        },
        // A provider that wants an action but names no page: as good as no answer.
        Outcome::Unknown(_) | Outcome::ActionRequired(_) => SettlePlan::Unknown {
            answer: processing_answer(a),
        },
    }
}

/// The settle's audit rows: `claim`'s attempt leaves processing for `status` (`why`); its
/// order moves `from` → `to` (`order_why`).
fn settle_entries(
    claim: &Claim,
    (status, why): (AttemptStatus, &str),
    (from, to): (AuditState, AuditState),
    order_why: &str,
) -> Vec<AuditEntry> {
    let (actor, a) = (&claim.actor, &claim.attempt);
    let status = AuditState::Attempt(status);
    vec![
        Entry::change(actor, "attempt", &a.id, Some(PROCESSING), status, why),
        Entry::change(actor, "order", &a.terms.order_id, Some(from), to, order_why),
    ]
}

/// [`SettlePlan::Charged`]: the payment `payment_id` of `charge`, the 200 answer naming it.
fn plan_charged(
    claim: &Claim,
    charge: Charge,
    payment_id: PaymentId,
    expires_at: i64,
) -> SettlePlan {
    let a = &claim.attempt;
    let payment = Payment {
        id: payment_id.into(),
        order_id: a.terms.order_id.to_string(),
        amount: charge.amount,
        currency: charge.currency.clone(),
        payment_method_id: a.payment_method_id.clone(),
        charge_id: charge.id.clone(),
        status: AttemptStatus::Succeeded,
    };
    let body = json(&PayResponse {
        status: AttemptStatus::Succeeded,
        order_id: a.terms.order_id.to_string(),
        payment: Some(payment.clone()),
    });
    let reason = format!("provider charge {} succeeded", charge.id);
    SettlePlan::Charged {
        finish: Finish {
            status: AttemptStatus::Succeeded,
            answer: Answer { status: 200, body },
            charge_id: Some(charge.id),
            expires_at,
        },
        payment,
        audit: settle_entries(
            claim,
            (AttemptStatus::Succeeded, &reason),
            (UNPAID, AuditState::Order(OrderStatus::Paid)),
            &reason,
        ),
    }
}

/// [`SettlePlan::Uncharged`]: the attempt ends `status` with the problem `code` and
/// `detail`, its order's lines given back in SKU order.
fn plan_uncharged(
    claim: &Claim,
    (status, code): (AttemptStatus, ErrorCode),
    detail: &str,
    expires_at: i64,
) -> SettlePlan {
    let mut problem = Problem::new(code).with_detail(detail);
    problem.attempt_status = Some(status);
    let mut release = claim.lines.clone();
    release.sort_by(|x, y| x.sku.cmp(&y.sku));
    SettlePlan::Uncharged {
        finish: Finish {
            status,
            answer: Answer {
                status: problem.status,
                body: problem_body(&problem),
            },
            charge_id: None,
            expires_at,
        },
        release,
        audit: settle_entries(
            claim,
            (status, detail),
            (UNPAID_ACTIVE, UNPAID),
            "attempt ended without a charge; cart unlocked; stock released",
        ),
    }
}

/// The 202 `processing` answer of an attempt that stays open (never stored).
fn processing_answer(a: &Processing) -> Answer {
    Answer {
        status: 202,
        body: json(&PayResponse {
            status: AttemptStatus::Processing,
            order_id: a.terms.order_id.to_string(),
            payment: None,
        }),
    }
}

/// The 402 `ACTION_REQUIRED` answer: the provider's page (`url`), else Stripe's client
/// secret for the SDK to confirm with.
fn action_answer(url: Option<String>, secret: Option<String>) -> Answer {
    let next = match (url, secret) {
        (Some(url), _) => ActionRequiredProblem::redirect(url),
        (None, secret) => ActionRequiredProblem::stripe(secret.unwrap_or_default()),
    };
    let body = serde_json::to_string(&next)
        .unwrap_or_else(|_| problem_body(&Problem::new(ErrorCode::Internal)));
    Answer { status: 402, body }
}

/// True when `charge` is the one the attempt asked for: its order, amount and currency.
pub fn charges_the_terms(charge: &Charge, terms: &Terms) -> bool {
    charge.order_id == terms.order_id.as_str()
        && charge.amount == terms.amount
        && charge.currency == terms.currency
}

/// The audit row of a charge that differs from its attempt, flagged for review.
fn mismatch_entry(attempt_id: &str, charge: &Charge) -> AuditEntry {
    let reason = format!(
        "provider charge {} is for order {}, {} {}, not this attempt's: flagged for manual review, order not marked paid",
        charge.id, charge.order_id, charge.amount, charge.currency
    );
    flagged(attempt_id, &reason)
}

/// The audit row of an attempt flagged for manual review, saying why.
fn flagged(attempt_id: &str, reason: &str) -> AuditEntry {
    Entry::change(
        "system",
        "attempt",
        attempt_id,
        Some(PROCESSING),
        AuditState::Review,
        reason,
    )
}

/// The exact bytes of a problem body. Stored answers are built with this too, so a replay
/// and the first answer cannot differ.
pub fn problem_body(problem: &Problem) -> String {
    serde_json::to_string(problem).unwrap_or_else(|_| {
        r#"{"type":"/problems/internal","title":"Internal server error","status":500,"code":"INTERNAL"}"#.to_owned()
    })
}

/// Serializing a struct of strings and integers cannot fail; an empty object if it ever did.
pub(crate) fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".to_owned())
}

/// The audit row of a take-over: `who` (a retry, the outbox worker, the reconciliation job)
/// took the expired lease and asks the provider.
pub fn take_over_entry(actor: &str, attempt_id: &str, who: &str) -> AuditEntry {
    let reason = format!("lease expired; {who} asks the provider about the provider key");
    Entry::change(
        actor,
        "attempt",
        attempt_id,
        Some(PROCESSING),
        PROCESSING,
        &reason,
    )
}

/// The audit row of a manual-review flag.
pub fn review_entry(attempt_id: &str) -> AuditEntry {
    flagged(attempt_id,
        "reconciliation: the provider cannot tell this attempt's outcome; flagged for manual review, never charged blindly")
}

/// The tombstone a cancel of an unknown key inserts, bound to the order's version as the
/// cancel read it, and its audit row.
pub fn plan_tombstone(
    user: &str,
    order_id: &OrderId,
    order_version: i64,
    id: AttemptId,
    now: i64,
    policy: &Policy,
) -> (crate::Tombstone, AuditEntry) {
    let audit = Entry::change(
        user,
        "attempt",
        &id,
        None,
        AuditState::Attempt(AttemptStatus::Cancelled),
        "cancel before any pay: tombstone",
    );
    let t = crate::Tombstone {
        id,
        user: user.to_owned(),
        order_id: order_id.clone(),
        order_version: Some(order_version),
        expires_at: policy.expires_at(now),
    };
    (t, audit)
}

/// The cancel table (crates/server/README.md) for a key whose slot is taken: its status,
/// and whether the answer carries the payment (a succeeded or refunded attempt). A key of
/// another order is misuse: 422.
pub fn cancel_answer(
    record: &Record,
    order_id: &str,
) -> Result<(AttemptStatus, bool), Box<Problem>> {
    if record.order_id().as_str() != order_id {
        let mut p = Problem::new(ErrorCode::KeyReusedWithDifferentDetails)
            .with_detail("this key belongs to another order");
        p.attempt_status = Some(record.status());
        return Err(Box::new(p));
    }
    let status = record.status();
    Ok((
        status,
        matches!(status, AttemptStatus::Succeeded | AttemptStatus::Refunded),
    ))
}

/// A cancel of a key the store does not hold, on a paid (or refunded) order: its record may
/// be past retention, so the provider's word on its provider key decides. A succeeded
/// charge: the key paid (with the order's payment if it is that charge's). No charge or a
/// declined one: `cancelled`, true as the paid order refuses every claim. Cannot tell:
/// `processing`, the client keeps its key. (On an unpaid order an unknown key never
/// charged: a succeeded charge marks its order paid with its final record.)
pub fn cancel_forgotten(lookup: Lookup, payment: Option<Payment>) -> CancelResponse {
    let (status, payment) = match lookup {
        Lookup::Found(c) if matches!(Outcome::of(c.clone()), Outcome::Succeeded(_)) => {
            let payment = payment.filter(|p| p.charge_id == c.id);
            let status = payment
                .as_ref()
                .map_or(AttemptStatus::Succeeded, |p| p.status);
            (status, payment)
        }
        Lookup::Found(_) | Lookup::NotFound | Lookup::Unconfirmed => {
            (AttemptStatus::Cancelled, None)
        }
        Lookup::Unknown(_) => (AttemptStatus::Processing, None),
    };
    CancelResponse { status, payment }
}

/// The same table answered from the store when it knows the provider key that paid the
/// order (`paid_with`): the key cancelled (`provider_key`) is that one, so it paid; or it is
/// another, which never charged this paid order (its one charge was made under the paying
/// key). `None` when the store cannot tell: the provider decides ([`cancel_forgotten`]),
/// after the rate limit.
pub fn cancel_from_store(
    provider_key: &str,
    paid_with: Option<&str>,
    payment: Option<Payment>,
) -> Option<CancelResponse> {
    let paid_with = paid_with?;
    let payment = payment.filter(|_| paid_with == provider_key);
    let status = payment
        .as_ref()
        .map_or(AttemptStatus::Cancelled, |p| p.status);
    Some(CancelResponse { status, payment })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(status: ChargeStatus) -> Charge {
        Charge {
            id: "pi_1".into(),
            provider_key: "pk".into(),
            amount: 2_500,
            currency: "USD".into(),
            payment_method_id: "pm_1".into(),
            order_id: "ord_1".into(),
            status,
            created_at: 0,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
        }
    }

    /// A success for an attempt settled uncharged is flagged with the payment named; no
    /// charge is nothing; no answer is asked again. A held unpaid order refuses new keys
    /// with its own code; a paid one still answers `ORDER_ALREADY_PAID`.
    #[test]
    fn a_stray_success_is_flagged_and_holds_the_order() {
        let declined = AttemptStatus::Declined;
        match plan_stray(
            "att_1",
            declined,
            Lookup::Found(intent(ChargeStatus::Succeeded)),
        ) {
            Stray::Flag { charge, audit } => {
                assert_eq!(charge.id, "pi_1");
                assert!(audit.reason.contains("pi_1"), "{}", audit.reason);
                assert_eq!(
                    (audit.from.as_deref(), audit.to.as_str()),
                    (Some("declined"), "declined (needs review)")
                );
            }
            s => panic!("{s:?}"),
        }
        for nothing in [
            Lookup::Found(intent(ChargeStatus::Canceled)),
            Lookup::Found(intent(ChargeStatus::Declined)),
            Lookup::NotFound,
        ] {
            assert_eq!(plan_stray("att_1", declined, nothing), Stray::Nothing);
        }
        let down = plan_stray("att_1", declined, Lookup::Unknown("down".into()));
        assert!(matches!(down, Stray::Unknown(_)), "{down:?}");
        assert_eq!(
            order_refusal(Some((1, false)), 1, true).code,
            ErrorCode::OrderUnderReview
        );
        assert_eq!(
            order_refusal(Some((1, true)), 1, true).code,
            ErrorCode::OrderAlreadyPaid
        );
        assert_eq!(
            order_refusal(Some((1, false)), 1, false).code,
            ErrorCode::PaymentAlreadyActive
        );
    }

    /// The stored texts are what `crates/chaos` and the black-box tests read back.
    #[test]
    fn audit_states_keep_their_stored_text() {
        let texts = [
            (PROCESSING, "processing"),
            (AuditState::Attempt(AttemptStatus::Cancelled), "cancelled"),
            (AuditState::Review, "processing (needs review)"),
            (UNPAID, "unpaid"),
            (AuditState::Order(OrderStatus::Paid), "paid"),
            (UNPAID_ACTIVE, "unpaid (payment active)"),
            (AuditState::Cart(3), "unpaid v3"),
            (
                AuditState::Flagged(AttemptStatus::Declined),
                "declined (needs review)",
            ),
        ];
        for (state, text) in texts {
            assert_eq!(state.to_string(), text);
        }
    }
}
