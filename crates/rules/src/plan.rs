//! Plans: the rows and audit entries one transaction writes, returned as values. The server
//! executes a plan as conditional statements (`crates/server/src/store/`); these functions
//! only decide what the rows say.

use crate::pay::{fingerprint, provider_key, Details};
use crate::policy::Policy;
use crate::record::{Answer, Processing, Record, Terms};
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{
    ActionRequiredProblem, AttemptStatus, CancelResponse, ErrorCode, Extras, IdempotencyKey,
    OrderLine, PayResponse, Payment, Problem,
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

impl AuditEntry {
    /// An entry.
    pub fn new(
        actor: &str,
        entity: &'static str,
        id: &str,
        from: Option<&str>,
        to: &str,
        reason: &str,
    ) -> Self {
        Self {
            actor: actor.to_owned(),
            entity,
            entity_id: id.to_owned(),
            from: from.map(str::to_owned),
            to: to.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

use AuditEntry as Entry;

/// Order states in the audit trail.
const UNPAID: &str = "unpaid";
const UNPAID_ACTIVE: &str = "unpaid (payment active)";

/// The order as a claim needs it.
#[derive(Debug, Clone, Copy)]
pub struct OrderTerms<'a> {
    /// Order id.
    pub id: &'a str,
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
    pub lease_token: String,
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
        lease_token: String,
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

/// The claim transaction (rule 3): the attempt row, the stock to reserve in SKU order, the
/// audit rows and the outbox row's provider key.
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
    attempt_id: String,
    lease_token: String,
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
        Entry::new(user, "attempt", &attempt_id, None, "processing", &note),
        Entry::new(
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
            order_id: order.id.to_owned(),
            fingerprint,
            order_version: order.version,
            amount: order.amount,
            currency: order.currency.to_owned(),
        },
        payment_method_id: payment_method_id.to_owned(),
        provider_key: provider_key(user, key),
        locked_until: Some(policy.lease_until(now)),
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

/// Why the order refused a claim, from its version as read after the refusal (`None`: gone):
/// it moved to another version, or it is paid or busy. A blocker that finished between the
/// statement and the read is still a refusal: the client retries with its key and gets a
/// fresh decision.
pub fn order_conflict(current_version: Option<i64>, expected_version: i64) -> Problem {
    match current_version {
        Some(v) if v != expected_version => order_changed(v),
        Some(_) => Problem::new(ErrorCode::PaymentAlreadyActive),
        None => Problem::new(ErrorCode::OrderNotFound),
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
}

impl Outcome {
    /// What an existing charge means for its attempt.
    pub fn of(charge: Charge) -> Self {
        match charge.status {
            ChargeStatus::Declined => Self::Declined(charge),
            ChargeStatus::Succeeded | ChargeStatus::Refunded => Self::Succeeded(charge),
            ChargeStatus::RequiresAction => Self::ActionRequired(charge),
        }
    }
}

/// What a lookup by provider key proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A charge exists for the key.
    Found(Charge),
    /// The provider has never seen the key: re-driving with it is safe.
    NotFound,
    /// The provider could not tell.
    Unknown(String),
}

/// Rule 5 on what the provider says about an abandoned attempt's provider key: settle from
/// a charge it has; re-drive with the same key only when it has none; stay processing when
/// it cannot tell (never charge blindly).
pub fn reconcile(lookup: Lookup) -> Result<Outcome, Redrive> {
    match lookup {
        Lookup::Found(charge) => Ok(Outcome::of(charge)),
        Lookup::NotFound => Err(Redrive),
        Lookup::Unknown(why) => Ok(Outcome::Unknown(why)),
    }
}

/// The provider has no charge for the key: charge again with the same provider key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redrive;

/// A webhook is a hint: only a charge the provider itself reports settles anything, and
/// "no such charge" is nothing to apply (never a re-drive: the claimant may be mid-call).
/// `None`: the provider could not be asked; the event must be delivered again.
pub fn webhook(lookup: Lookup) -> Option<Option<Outcome>> {
    match lookup {
        Lookup::Found(charge) => Some(Some(Outcome::of(charge))),
        Lookup::NotFound => Some(None),
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
    /// confirmation email, close the outbox row.
    Charged {
        /// The attempt's final row.
        finish: Finish,
        /// The payment row.
        payment: Payment,
        /// Audit rows.
        audit: Vec<AuditEntry>,
    },
    /// Finish the attempt without a charge, unlock the order, give the stock back (SKU
    /// order), close the outbox row.
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
}

/// Plans the settle of `claim` with `outcome`. `payment_id` names the payment if one is made.
pub fn plan_settle(
    claim: &Claim,
    outcome: Outcome,
    payment_id: String,
    now: i64,
    policy: &Policy,
) -> SettlePlan {
    let a = &claim.attempt;
    let expires_at = policy.expires_at(now);
    // The attempt leaves processing; the order moves `from` → `to`.
    let audit = |status: &str, why: &str, [from, to, order_why]: [&str; 3]| {
        let (actor, order) = (&claim.actor, &a.terms.order_id);
        vec![
            Entry::new(actor, "attempt", &a.id, Some("processing"), status, why),
            Entry::new(actor, "order", order, Some(from), to, order_why),
        ]
    };
    let uncharged = |status: AttemptStatus, code: ErrorCode, detail: &str| {
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
            audit: audit(
                status.as_str(),
                detail,
                [
                    UNPAID_ACTIVE,
                    UNPAID,
                    "attempt ended without a charge; cart unlocked; stock released",
                ],
            ),
        }
    };
    match outcome {
        Outcome::Succeeded(charge) => {
            let payment = Payment {
                id: payment_id,
                order_id: a.terms.order_id.clone(),
                amount: charge.amount,
                currency: charge.currency.clone(),
                payment_method_id: a.payment_method_id.clone(),
                charge_id: charge.id.clone(),
                status: AttemptStatus::Succeeded,
            };
            let body = json(&PayResponse {
                status: AttemptStatus::Succeeded,
                order_id: a.terms.order_id.clone(),
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
                audit: audit("succeeded", &reason, [UNPAID, "paid", &reason]),
            }
        }
        Outcome::Declined(_) => uncharged(
            AttemptStatus::Declined,
            ErrorCode::PaymentDeclined,
            "the card was declined",
        ),
        Outcome::Rejected(_) => uncharged(
            AttemptStatus::Failed,
            ErrorCode::PaymentFailed,
            "the provider refused the charge",
        ),
        Outcome::ActionRequired(Charge {
            next_action_url: Some(url),
            ..
        }) => {
            let body = serde_json::to_string(&ActionRequiredProblem::redirect(url))
                .unwrap_or_else(|_| problem_body(&Problem::new(ErrorCode::Internal)));
            SettlePlan::ActionRequired {
                answer: Answer { status: 402, body },
            }
        }
        // A provider that wants an action but names no page: as good as no answer.
        Outcome::Unknown(_) | Outcome::ActionRequired(_) => SettlePlan::Unknown {
            answer: Answer {
                status: 202,
                body: json(&PayResponse {
                    status: AttemptStatus::Processing,
                    order_id: a.terms.order_id.clone(),
                    payment: None,
                }),
            },
        },
    }
}

/// The exact bytes of a problem body. Stored answers are built with this too, so a replay
/// and the first answer cannot differ.
pub fn problem_body(problem: &Problem) -> String {
    serde_json::to_string(problem).unwrap_or_else(|_| {
        r#"{"type":"/problems/internal","title":"Internal server error","status":500,"code":"INTERNAL"}"#.to_owned()
    })
}

/// Serializing a struct of strings and integers cannot fail; an empty object if it ever did.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".to_owned())
}

/// The audit row of a take-over: `who` (a retry, the outbox worker, the reconciliation job)
/// took the expired lease and asks the provider.
pub fn take_over_entry(actor: &str, attempt_id: &str, who: &str) -> AuditEntry {
    let reason = format!("lease expired; {who} asks the provider about the provider key");
    Entry::new(
        actor,
        "attempt",
        attempt_id,
        Some("processing"),
        "processing",
        &reason,
    )
}

/// The audit row of a manual-review flag.
pub fn review_entry(attempt_id: &str) -> AuditEntry {
    Entry::new("system", "attempt", attempt_id, Some("processing"), "processing (needs review)",
        "reconciliation: the provider cannot tell this attempt's outcome; flagged for manual review, never charged blindly")
}

/// The tombstone a cancel of an unknown key inserts, bound to the order's version as the
/// cancel read it, and its audit row.
pub fn plan_tombstone(
    user: &str,
    order_id: &str,
    order_version: i64,
    id: String,
    now: i64,
    policy: &Policy,
) -> (crate::Tombstone, AuditEntry) {
    let audit = Entry::new(
        user,
        "attempt",
        &id,
        None,
        "cancelled",
        "cancel before any pay: tombstone",
    );
    let t = crate::Tombstone {
        id,
        user: user.to_owned(),
        order_id: order_id.to_owned(),
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
    if record.order_id() != order_id {
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
        Lookup::Found(_) | Lookup::NotFound => (AttemptStatus::Cancelled, None),
        Lookup::Unknown(_) => (AttemptStatus::Processing, None),
    };
    CancelResponse { status, payment }
}
