//! The server's refund flow as a sans-IO state machine ([`ServerRefund`]), in the shape of
//! the pay machine ([`crate::pay`]): no clock, no store, no provider, no randomness of its
//! own. The caller (`crates/server/src/ops/refunds.rs`) starts it from the request, performs
//! each [`Effect`] [`ServerRefund::poll`] asks for and feeds the result back with the
//! matching `on_*` call, until [`Effect::Done`]. Time (`now`) and the source of new ids (an
//! [`IdSource`]) are arguments of `poll`. The rows it writes are plans built here ([`plan_refund`],
//! [`settle_refund`], [`mark_refunded`]); the store only executes them.
//!
//! ```text
//!  refund ─▶ ReadKey ─▶ decide (keyed) ─┬─ final ─▶ Done(replay)    mismatch ─▶ Done(422)
//!              ▲                        ├─ new, payment not succeeded ─▶ Done(409)
//!              │                        ├─ new ─▶ Claim ─┬─ won ─────────────┐
//!              ├───────── key taken ◀───┼────────────────┤                   │
//!              │                        │                └─ payment taken ─▶ Done(409)
//!              │                        └─ processing ─▶ TakeLease ◀─────────┘  (also resume)
//!              │                                            ├─ held elsewhere ─▶ Done(IN_PROGRESS)
//!              │                                            ▼ taken
//!              │                ┌──────────────────────▶ ListRefunds ── standing ─┐
//!              │                │ refused                  ├─ refunded ─────────▶ Settle
//!              │                │                          ├─ ours failed ─▶ Settle(failed)
//!              │                │                          ├─ pending, or unknown ─▶ Release ─▶ Done(IN_PROGRESS)
//!              │                │                          └─ remainder n ─▶ Refund(n)
//!              │                │                         (after a refusal: Settle(failed))
//!              │             Refund(n) ─┬─ succeeded ─▶ Settle     failed ─▶ Settle(failed)
//!              │                        ├─ pending ─▶ Release ─▶ Done(IN_PROGRESS)
//!              │                        └─ unknown ─▶ HoldLease(now + lease) ─▶ Done(IN_PROGRESS)
//!              └── Release ◀── lost (someone else settled first) ◀── Settle ─▶ Done(fresh)
//! ```
//!
//! What the provider holds decides, never a hope that it deduplicates (docs/providers.md,
//! "Refunds"): before any call the machine lists the charge's refunds, and [`standing`]
//! reads them by amount and by our refund key (sent with each refund, Stripe's
//! `metadata[refund_key]`): ours, or refunds that cover the payment, are this refund;
//! otherwise only the remainder is refunded. A refund is `refunded` only once the provider
//! says it succeeded; a pending one keeps the key processing until a retry, the refund
//! job (`crates/server/src/ops/jobs`) or a provider event ([`ServerRefund::resume`]) reads
//! it again. A call whose answer is unknown may still land: the lease is kept until
//! `now + lease` ([`Effect::HoldLease`]; the lease is longer than the provider timeout, a
//! start check), so no second call goes out meanwhile, and the next one refunds only what
//! the provider's list then shows unrefunded.
//!
//! The decisions it composes stay where they are: the keyed rule ([`crate::keyed::decide`],
//! with the refund's fingerprint over the caller and the payment) and the lease arithmetic
//! ([`Policy`]).

use crate::ids::{AttemptId, IdSource, LeaseToken, OrderId, PaymentId, RefundId};
use crate::keyed::{self, NextAction, Stored, REFUND};
use crate::plan::{self, AuditEntry, AuditState};
use crate::policy::Policy;
use crate::record::Answer;
use payonce_protocol::{
    AttemptStatus, ErrorCode, IdempotencyKey, OrderStatus, Payment, Problem, RefundResponse,
};

/// What the client sent with a refund, and the payment it names as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The caller.
    pub user: String,
    /// Its refund key.
    pub key: IdempotencyKey,
    /// The caller's payment to refund.
    pub payment: Payment,
    /// The attempt that made the payment (it becomes `refunded` with it).
    pub attempt_id: AttemptId,
}

/// Where a refund key stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundState {
    /// Claimed; the provider may have been called.
    Processing,
    /// The provider refunded the charge: the 200 answer to replay.
    Refunded(Answer),
    /// The provider refused and nothing was refunded: the 409 answer to replay.
    Failed(Answer),
}

/// One `(user, refund key)` row as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRecord {
    /// Refund id.
    pub id: RefundId,
    /// The payment it refunds.
    pub payment_id: PaymentId,
    /// The provider's idempotency key, saved before any call.
    pub provider_refund_key: String,
    /// Its state.
    pub state: RefundState,
}

impl RefundRecord {
    /// The row as the keyed rule sees it, with its `fingerprint`. A processing refund shows
    /// no lease: the lease only orders provider calls ([`Effect::TakeLease`]), so a retry
    /// meanwhile is answered at once instead of waiting.
    fn stored<'a>(&'a self, fingerprint: &'a str) -> Stored<'a> {
        let (status, answer) = match &self.state {
            RefundState::Processing => {
                return Stored::Processing {
                    fingerprint,
                    locked_until: None,
                }
            }
            RefundState::Refunded(a) => (AttemptStatus::Refunded, a),
            RefundState::Failed(a) => (AttemptStatus::Failed, a),
        };
        Stored::Final {
            fingerprint,
            status,
            answer,
        }
    }
}

/// The claim of a new refund key: a processing row under the unique slots `(user, key)`
/// and "one refund per payment that is not failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundClaimPlan {
    /// Refund id.
    pub id: RefundId,
    /// The caller.
    pub user: String,
    /// Its refund key.
    pub key: IdempotencyKey,
    /// The payment refunded.
    pub payment_id: PaymentId,
    /// The provider refund key ([`REFUND`]'s, over the user, the key and the payment), saved
    /// before any call so every retry reaches the provider as the same refund.
    pub provider_refund_key: String,
}

/// Plans the claim of `req`'s refund key under the new refund `id`.
pub fn plan_refund(req: &Request, id: RefundId) -> RefundClaimPlan {
    RefundClaimPlan {
        id,
        user: req.user.clone(),
        key: req.key.clone(),
        payment_id: PaymentId::from_stored(req.payment.id.clone()),
        provider_refund_key: REFUND.provider_key(&req.user, &req.key, &req.payment.id),
    }
}

/// What the claim's insert came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Inserted: the refund is ours.
    Won,
    /// The caller's `(user, key)` slot was taken meanwhile: decide again with its row.
    KeyTaken,
    /// The payment's one refund slot belongs to another key.
    PaymentTaken,
}

/// The lease of a processing refund for one provider call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The refund.
    pub refund_id: RefundId,
    /// Its provider refund key.
    pub provider_refund_key: String,
    /// The lease's token.
    pub token: LeaseToken,
    /// The lease's end.
    pub until: i64,
}

/// A refund's state at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStatus {
    /// The money went back.
    Succeeded,
    /// Accepted, not final yet (Stripe's `pending`, `requires_action`): it may still
    /// succeed or fail.
    Pending,
    /// Failed or canceled: nothing moved.
    Failed,
}

/// One refund as the provider answers a refund call or lists a charge's refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRefund {
    /// The provider's refund id.
    pub id: String,
    /// The amount it refunds, in minor units.
    pub amount: i64,
    /// Its state.
    pub status: RefundStatus,
    /// The provider refund key payonce sent with it (saved on the refund row before the
    /// call); `None`: made elsewhere (the dashboard), or a provider that keeps no key.
    pub refund_key: Option<String>,
}

/// What a refund call proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The provider made the refund, in the state it answers.
    Created(ProviderRefund),
    /// The provider refuses (declined, or nothing left to refund): nothing moved by this call.
    NotAllowed(String),
    /// Timeout, 5xx, network error: unknown; the call may still land.
    Unknown(String),
}

/// What a charge's refunds at the provider come to for one refund key ([`standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Refunded: ours succeeded, or succeeded refunds cover the payment. The refund to record.
    Refunded(ProviderRefund),
    /// Ours, or refunds that cover the payment only with pending ones, are not final yet.
    Pending,
    /// Ours failed and nothing else covers the payment: this key refunded nothing.
    Failed,
    /// Refund this much: the payment less every refund that did not fail.
    Remainder(i64),
}

/// The rule that decides a refund by what the provider holds (module docs): a refund that
/// did not fail carrying `key` is ours; refunds that did not fail and add up to `amount`
/// (the dashboard's too) are the payment's refund; one of ours that failed, with nothing
/// covering the payment, is a failed refund; anything else leaves a remainder to refund.
pub fn standing(refunds: &[ProviderRefund], key: &str, amount: i64) -> Standing {
    let ours = |r: &&ProviderRefund| r.refund_key.as_deref() == Some(key);
    let live = |r: &&ProviderRefund| r.status != RefundStatus::Failed;
    let succeeded = |r: &&ProviderRefund| r.status == RefundStatus::Succeeded;
    if let Some(r) = refunds.iter().filter(ours).find(succeeded) {
        return Standing::Refunded(r.clone());
    }
    if refunds.iter().filter(ours).any(|r| live(&r)) {
        return Standing::Pending;
    }
    let moved: i64 = refunds.iter().filter(live).map(|r| r.amount).sum();
    if moved >= amount {
        return match refunds.iter().filter(live).all(|r| succeeded(&r)) {
            true => refunds
                .iter()
                .find(succeeded)
                .map_or(Standing::Pending, |r| Standing::Refunded(r.clone())),
            false => Standing::Pending,
        };
    }
    if refunds.iter().any(|r| ours(&r)) {
        return Standing::Failed;
    }
    Standing::Remainder(amount - moved)
}

/// A payment, its order and its attempt becoming `refunded`, in one transaction
/// conditional on the payment still being `succeeded`; the audit rows are written only
/// when it moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkRefunded {
    /// The payment.
    pub payment_id: PaymentId,
    /// Its order.
    pub order_id: OrderId,
    /// Its attempt.
    pub attempt_id: AttemptId,
    /// The payment's and the order's audit rows.
    pub audit: Vec<AuditEntry>,
}

/// Plans `payment` (made by `attempt_id`) becoming refunded, with `actor` and `reason` in
/// its audit rows: the refund's settle (`system`) and a provider's refund event
/// (`provider-webhook`) write the same rows.
pub fn mark_refunded(
    actor: &str,
    payment: &Payment,
    attempt_id: &AttemptId,
    reason: &str,
) -> MarkRefunded {
    let audit = [
        (
            "payment",
            payment.id.as_str(),
            AuditState::Attempt(AttemptStatus::Succeeded),
            AuditState::Attempt(AttemptStatus::Refunded),
        ),
        (
            "order",
            payment.order_id.as_str(),
            AuditState::Order(OrderStatus::Paid),
            AuditState::Order(OrderStatus::Refunded),
        ),
    ]
    .map(|(entity, id, from, to)| AuditEntry::change(actor, entity, id, Some(from), to, reason));
    MarkRefunded {
        payment_id: PaymentId::from_stored(payment.id.clone()),
        order_id: OrderId::from_stored(payment.order_id.clone()),
        attempt_id: attempt_id.clone(),
        audit: audit.to_vec(),
    }
}

/// The settle transaction of a processing refund, conditional on it still processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleRefund {
    /// The provider refunded the charge (this call, or elsewhere): the row ends `succeeded`
    /// with the provider's refund id and the 200 answer, and the payment moves.
    Refunded {
        /// Refund id.
        id: RefundId,
        /// The provider's refund id.
        provider_refund_id: String,
        /// The answer to store and replay.
        answer: Answer,
        /// When the key may be deleted.
        expires_at: i64,
        /// The payment, its order and its attempt.
        mark: MarkRefunded,
    },
    /// The provider refused and nothing was refunded: the row ends `failed` with the 409
    /// answer, which frees the payment's refund slot for a new key.
    Failed {
        /// Refund id.
        id: RefundId,
        /// The answer to store and replay.
        answer: Answer,
        /// When the key may be deleted.
        expires_at: i64,
        /// The payment's audit row (it stays `succeeded`).
        audit: AuditEntry,
    },
}

impl SettleRefund {
    /// The answer it stores.
    pub fn answer(&self) -> &Answer {
        match self {
            Self::Refunded { answer, .. } | Self::Failed { answer, .. } => answer,
        }
    }
}

/// Plans the settle of refund `id` of `req`'s payment at `now`: `refund`, the provider's
/// succeeded refund this key records; `None`, the provider refused or failed it and this
/// key refunded nothing.
pub fn settle_refund(
    req: &Request,
    id: &RefundId,
    refund: Option<&ProviderRefund>,
    now: i64,
    policy: &Policy,
) -> SettleRefund {
    let (p, expires_at) = (&req.payment, policy.expires_at(now));
    let Some(refund) = refund else {
        let problem = Problem::new(ErrorCode::RefundNotAllowed)
            .with_detail("the provider refused or failed this refund; nothing was refunded by it");
        let why = format!("refund {id} refused or failed at the provider; nothing refunded");
        return SettleRefund::Failed {
            id: id.clone(),
            answer: Answer {
                status: problem.status,
                body: plan::problem_body(&problem),
            },
            expires_at,
            audit: AuditEntry::change(
                "system",
                "payment",
                &p.id,
                Some(AuditState::Attempt(AttemptStatus::Succeeded)),
                AuditState::Attempt(AttemptStatus::Succeeded),
                &why,
            ),
        };
    };
    let body = RefundResponse {
        payment: Payment {
            status: AttemptStatus::Refunded,
            ..p.clone()
        },
        refund_id: refund.id.clone(),
    };
    let reason = format!("provider refund {} of charge {}", refund.id, p.charge_id);
    SettleRefund::Refunded {
        id: id.clone(),
        provider_refund_id: refund.id.clone(),
        answer: Answer {
            status: 200,
            body: plan::json(&body),
        },
        expires_at,
        mark: mark_refunded("system", p, &req.attempt_id, &reason),
    }
}

/// How a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The key's stored answer, replayed (`Idempotent-Replayed: true`).
    Replay(Answer),
    /// This request refunded the payment: the 200 answer it stored.
    Refunded(Answer),
    /// The provider refused and nothing was refunded: the 409 answer this request stored.
    Failed(Answer),
    /// 409 `REFUND_NOT_ALLOWED`, nothing stored: the payment is not refundable, or another
    /// key refunds it.
    NotAllowed(Box<Problem>),
    /// The key was used for another payment (422), nothing done.
    Mismatch(Box<Problem>),
    /// Another request holds the lease, a call's answer is unknown (the lease is held past
    /// it), or the provider's refund is pending: 409 `IN_PROGRESS`, the refund stays
    /// processing; a retry reads the provider's refunds again.
    InProgress,
}

/// The next thing the caller performs, then reports with the matching `on_*` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect<'a> {
    /// Read `user`'s refund row for `key` → [`ServerRefund::on_record`].
    ReadKey {
        /// The caller.
        user: &'a str,
        /// The refund key.
        key: &'a IdempotencyKey,
    },
    /// Insert the processing row → [`ServerRefund::on_claim`].
    Claim {
        /// The row.
        plan: &'a RefundClaimPlan,
        /// Plan time.
        now: i64,
    },
    /// Take the processing refund's lease (exactly one contender wins) →
    /// [`ServerRefund::on_leased`].
    TakeLease {
        /// The lease.
        lease: &'a Lease,
        /// Plan time.
        now: i64,
    },
    /// List the charge's refunds at the provider, failed ones too →
    /// [`ServerRefund::on_refunds`].
    ListRefunds {
        /// The lease held.
        lease: &'a Lease,
        /// The payment's charge.
        charge_id: &'a str,
    },
    /// Call the provider's refund of `amount` of `charge_id`, carrying the lease's provider
    /// refund key, no transaction open → [`ServerRefund::on_refund`].
    Refund {
        /// The lease held.
        lease: &'a Lease,
        /// The payment's charge.
        charge_id: &'a str,
        /// What is left to refund, in minor units.
        amount: i64,
    },
    /// Keep the lease until `until` (the call's answer is unknown and it may still land):
    /// no call for this refund before then → [`ServerRefund::on_held`].
    HoldLease {
        /// The lease held.
        lease: &'a Lease,
        /// Its new end.
        until: i64,
    },
    /// Run the settle transaction → [`ServerRefund::on_settled`]. Should it fail, end
    /// `lease` first, so a retry may read the provider again at once.
    Settle {
        /// The rows.
        plan: &'a SettleRefund,
        /// The lease held.
        lease: &'a Lease,
        /// Plan time.
        now: i64,
    },
    /// End the lease early (no call in flight, or someone else settled first) →
    /// [`ServerRefund::on_released`].
    Release(&'a Lease),
    /// Finished.
    Done(&'a End),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Read,
    Claim,
    Claiming(RefundClaimPlan),
    /// Take the lease of refund `(id, provider refund key)`.
    Lease(RefundId, String),
    Leasing(Lease),
    /// List the charge's refunds; `true` after the provider refused a call.
    List(Lease, bool),
    Refund(Lease, i64),
    Hold(Lease),
    Holding(Lease, i64),
    Settle(Lease, Option<ProviderRefund>),
    Settling(Lease, SettleRefund),
    /// End the lease, then end (`Some`) or read again (`None`).
    Release(Lease, Option<End>),
    Done(End),
}

/// One refund request (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRefund {
    req: Request,
    /// The request's fingerprint: the caller and the payment.
    fingerprint: String,
    policy: Policy,
    phase: Phase,
}

impl ServerRefund {
    /// A refund request; its first effect reads the key.
    pub fn new(req: Request, policy: Policy) -> Self {
        let fingerprint = REFUND.fingerprint(&[&req.user, &req.payment.id]);
        Self {
            req,
            fingerprint,
            policy,
            phase: Phase::Read,
        }
    }

    /// The processing refund `record` of `req`'s key driven without a request (the refund
    /// job, a provider's refund event): its first effect takes the lease; a lease held
    /// elsewhere ends [`End::InProgress`].
    pub fn resume(req: Request, record: &RefundRecord, policy: Policy) -> Self {
        let mut m = Self::new(req, policy);
        m.phase = match record.state {
            RefundState::Processing => {
                Phase::Lease(record.id.clone(), record.provider_refund_key.clone())
            }
            _ => Phase::Done(End::InProgress),
        };
        m
    }

    /// The end, once there is one.
    pub fn end(&self) -> Option<&End> {
        match &self.phase {
            Phase::Done(end) => Some(end),
            _ => None,
        }
    }

    /// The next effect at `now`. Plans are made here, with ids from `ids`; asking again
    /// before the matching `on_*` call returns the same effect.
    pub fn poll(&mut self, now: i64, ids: &dyn IdSource) -> Effect<'_> {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Claim => Phase::Claiming(plan_refund(&self.req, RefundId::mint(ids))),
            Phase::Lease(refund_id, provider_refund_key) => Phase::Leasing(Lease {
                refund_id,
                provider_refund_key,
                token: LeaseToken::mint(ids),
                until: self.policy.lease_until(now),
            }),
            // The unknown call may land until its timeout, shorter than a lease (a start
            // check): a lease from now outlasts it.
            Phase::Hold(lease) => Phase::Holding(lease, self.policy.lease_until(now)),
            Phase::Settle(lease, refund) => {
                let plan = settle_refund(
                    &self.req,
                    &lease.refund_id,
                    refund.as_ref(),
                    now,
                    &self.policy,
                );
                Phase::Settling(lease, plan)
            }
            other => other,
        };
        let charge_id = &self.req.payment.charge_id;
        match &self.phase {
            Phase::Read => Effect::ReadKey {
                user: &self.req.user,
                key: &self.req.key,
            },
            Phase::Claiming(plan) => Effect::Claim { plan, now },
            Phase::Leasing(lease) => Effect::TakeLease { lease, now },
            Phase::List(lease, _) => Effect::ListRefunds { lease, charge_id },
            Phase::Refund(lease, amount) => Effect::Refund {
                lease,
                charge_id,
                amount: *amount,
            },
            Phase::Holding(lease, until) => Effect::HoldLease {
                lease,
                until: *until,
            },
            Phase::Settling(lease, plan) => Effect::Settle { plan, lease, now },
            Phase::Release(lease, _) => Effect::Release(lease),
            Phase::Done(end) => Effect::Done(end),
            Phase::Claim | Phase::Lease(..) | Phase::Hold(_) | Phase::Settle(..) => {
                unreachable!("planned above")
            }
        }
    }

    /// The caller's row for the key, read at `now` (the keyed rule).
    pub fn on_record(&mut self, record: Option<RefundRecord>, now: i64) {
        if self.phase != Phase::Read {
            return;
        }
        let Request { user, payment, .. } = &self.req;
        let stored_fp = record
            .as_ref()
            .map(|r| REFUND.fingerprint(&[user, &r.payment_id]));
        let stored = record
            .as_ref()
            .zip(stored_fp.as_deref())
            .map(|(r, fp)| r.stored(fp));
        let next = keyed::decide(
            stored,
            Some(&self.fingerprint),
            user,
            &payment.id,
            now,
            false,
        );
        self.phase = match next {
            NextAction::Mismatch(_) => Phase::Done(End::Mismatch(Box::new(
                Problem::new(ErrorCode::KeyReusedWithDifferentDetails)
                    .with_detail("this refund key was used for another payment"),
            ))),
            NextAction::Replay(answer) => Phase::Done(End::Replay(answer)),
            NextAction::StartProcessing if payment.status != AttemptStatus::Succeeded => {
                Phase::Done(not_allowed("the payment is not in a refundable state"))
            }
            NextAction::StartProcessing => Phase::Claim,
            // Processing (a refund row has no lease the rule sees, and no tombstone).
            _ => match record {
                Some(r) => Phase::Lease(r.id, r.provider_refund_key),
                None => Phase::Read,
            },
        };
    }

    /// What the claim's insert came to.
    pub fn on_claim(&mut self, claimed: Claimed) {
        let Phase::Claiming(plan) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match claimed {
            Claimed::Won => Phase::Lease(plan.id, plan.provider_refund_key),
            Claimed::KeyTaken => Phase::Read,
            Claimed::PaymentTaken => Phase::Done(not_allowed(
                "this payment is already refunded or being refunded",
            )),
        };
    }

    /// Whether the lease was taken (false: another request is calling the provider for
    /// this refund right now, or a call whose answer was lost may still land).
    pub fn on_leased(&mut self, taken: bool) {
        let Phase::Leasing(lease) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match taken {
            true => Phase::List(lease, false),
            false => Phase::Done(End::InProgress),
        };
    }

    /// The charge's refunds as the provider lists them, failed ones too (`Err`: it could
    /// not tell), read by [`standing`].
    pub fn on_refunds(&mut self, refunds: Result<Vec<ProviderRefund>, String>) {
        let Phase::List(lease, refused) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        let Ok(refunds) = refunds else {
            self.phase = Phase::Release(lease, Some(End::InProgress));
            return;
        };
        let key = lease.provider_refund_key.clone();
        self.phase = match standing(&refunds, &key, self.req.payment.amount) {
            Standing::Refunded(r) => Phase::Settle(lease, Some(r)),
            Standing::Pending => Phase::Release(lease, Some(End::InProgress)),
            Standing::Failed => Phase::Settle(lease, None),
            // Refused, and the list does not explain it: nothing was refunded by this key.
            Standing::Remainder(_) if refused => Phase::Settle(lease, None),
            Standing::Remainder(amount) => Phase::Refund(lease, amount),
        };
    }

    /// What the refund call proved.
    pub fn on_refund(&mut self, outcome: RefundOutcome) {
        let Phase::Refund(lease, _) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match outcome {
            RefundOutcome::Created(r) => match r.status {
                RefundStatus::Succeeded => Phase::Settle(lease, Some(r)),
                RefundStatus::Pending => Phase::Release(lease, Some(End::InProgress)),
                RefundStatus::Failed => Phase::Settle(lease, None),
            },
            RefundOutcome::NotAllowed(_) => Phase::List(lease, true),
            RefundOutcome::Unknown(_) => Phase::Hold(lease),
        };
    }

    /// The lease now ends at the held deadline.
    pub fn on_held(&mut self) {
        if let Phase::Holding(..) = self.phase {
            self.phase = Phase::Done(End::InProgress);
        }
    }

    /// Whether the settle transaction finished the refund (false: someone else did first;
    /// their answer is read and replayed).
    pub fn on_settled(&mut self, settled: bool) {
        let Phase::Settling(lease, plan) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match (settled, plan) {
            (true, SettleRefund::Refunded { answer, .. }) => Phase::Done(End::Refunded(answer)),
            (true, SettleRefund::Failed { answer, .. }) => Phase::Done(End::Failed(answer)),
            (false, _) => Phase::Release(lease, None),
        };
    }

    /// The lease was ended.
    pub fn on_released(&mut self) {
        let Phase::Release(_, next) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = next.map_or(Phase::Read, Phase::Done);
    }
}

/// 409 `REFUND_NOT_ALLOWED` saying why, nothing stored.
fn not_allowed(detail: &str) -> End {
    End::NotAllowed(Box::new(
        Problem::new(ErrorCode::RefundNotAllowed).with_detail(detail),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Sequence;

    const NOW: i64 = 1_000_000;

    /// The `n`-th id a test's [`Sequence`] mints (every id of a run counts once).
    fn nth<T>(mint: fn(&dyn IdSource) -> T, n: u64) -> T {
        mint(&Sequence::starting_at(n))
    }

    fn policy() -> Policy {
        Policy {
            lease_ms: 1_000,
            key_retention_ms: 5_000,
            reconcile_after_ms: 1_000,
            audit_retention_ms: 10_000,
            action_deadline_ms: 60_000,
            in_progress_wait_ms: 500,
            wait_poll_ms: 25,
        }
    }

    fn payment(id: &str, status: AttemptStatus) -> Payment {
        Payment {
            id: id.into(),
            order_id: "ord_1".into(),
            amount: 1_500,
            currency: "EUR".into(),
            payment_method_id: "pm_card_approve".into(),
            charge_id: "ch_1".into(),
            status,
        }
    }

    fn request(payment_id: &str) -> Request {
        Request {
            user: "u1".into(),
            key: IdempotencyKey::parse("0123456789abcdef0123456789abcdef").expect("valid"),
            payment: payment(payment_id, AttemptStatus::Succeeded),
            attempt_id: AttemptId::from_stored("att_1"),
        }
    }

    /// A succeeded refund of the whole payment made elsewhere (no key of ours).
    fn refund(id: &str) -> ProviderRefund {
        ProviderRefund {
            id: id.into(),
            amount: 1_500,
            status: RefundStatus::Succeeded,
            refund_key: None,
        }
    }

    /// A refund of `amount` in `status` carrying the caller's provider refund key for pay_1.
    fn ours(id: &str, amount: i64, status: RefundStatus) -> ProviderRefund {
        let req = request("pay_1");
        ProviderRefund {
            id: id.into(),
            amount,
            status,
            refund_key: Some(REFUND.provider_key(&req.user, &req.key, "pay_1")),
        }
    }

    fn key() -> String {
        let req = request("pay_1");
        REFUND.provider_key(&req.user, &req.key, "pay_1")
    }

    /// The caller's row for `payment_id` in `state`.
    fn record(payment_id: &str, state: RefundState) -> RefundRecord {
        let req = request(payment_id);
        RefundRecord {
            id: RefundId::from_stored("rfd_9"),
            payment_id: PaymentId::from_stored(payment_id),
            provider_refund_key: REFUND.provider_key(&req.user, &req.key, payment_id),
            state,
        }
    }

    /// A machine that read the caller's processing row and holds its lease (taken with
    /// `ids`), about to list the charge's refunds.
    fn leased(ids: &Sequence) -> ServerRefund {
        let mut m = ServerRefund::new(request("pay_1"), policy());
        m.on_record(Some(record("pay_1", RefundState::Processing)), NOW);
        assert!(matches!(m.poll(NOW, ids), Effect::TakeLease { .. }));
        m.on_leased(true);
        m
    }

    /// [`leased`], the provider listing nothing: about to refund the whole payment.
    fn calling(ids: &Sequence) -> ServerRefund {
        let mut m = leased(ids);
        assert!(matches!(m.poll(NOW, ids), Effect::ListRefunds { .. }));
        m.on_refunds(Ok(vec![]));
        assert!(matches!(
            m.poll(NOW, ids),
            Effect::Refund { amount: 1_500, .. }
        ));
        m
    }

    fn problem(end: Option<&End>) -> (u16, ErrorCode, Option<String>) {
        match end {
            Some(End::NotAllowed(p) | End::Mismatch(p)) => (p.status, p.code, p.detail.clone()),
            e => panic!("{e:?}"),
        }
    }

    /// Row 1 of the table (`crates/server/src/ops/refunds.rs`): the key used for another
    /// payment is a 422, whatever that refund's state; nothing is written or called.
    #[test]
    fn a_key_used_for_another_payment_is_a_422() {
        let answer = Answer {
            status: 200,
            body: "{}".into(),
        };
        for state in [RefundState::Processing, RefundState::Refunded(answer)] {
            let mut m = ServerRefund::new(request("pay_2"), policy());
            assert!(matches!(
                m.poll(NOW, &Sequence::starting_at(1)),
                Effect::ReadKey { .. }
            ));
            m.on_record(Some(record("pay_1", state)), NOW);
            let (status, code, detail) = problem(m.end());
            assert_eq!(
                (status, code),
                (422, ErrorCode::KeyReusedWithDifferentDetails)
            );
            assert_eq!(
                detail.as_deref(),
                Some("this refund key was used for another payment")
            );
        }
    }

    /// Row 2: a final key replays its stored answer, a refund's or a refusal's.
    #[test]
    fn a_final_key_replays_its_stored_answer() {
        let answer = Answer {
            status: 409,
            body: "refused".into(),
        };
        for state in [
            RefundState::Refunded(answer.clone()),
            RefundState::Failed(answer.clone()),
        ] {
            let mut m = ServerRefund::new(request("pay_1"), policy());
            m.on_record(Some(record("pay_1", state)), NOW);
            assert_eq!(
                m.poll(NOW, &Sequence::starting_at(1)),
                Effect::Done(&End::Replay(answer.clone()))
            );
        }
    }

    /// Row 3: a processing key takes its lease and calls the provider again with its saved
    /// refund key; a lease held by another request is 409 `IN_PROGRESS`.
    #[test]
    fn a_processing_key_is_called_again_under_its_lease() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerRefund::new(request("pay_1"), policy());
        let row = record("pay_1", RefundState::Processing);
        m.on_record(Some(row.clone()), NOW);
        match m.poll(NOW, &ids) {
            Effect::TakeLease { lease, now } => {
                assert_eq!(now, NOW);
                assert_eq!(lease.refund_id, "rfd_9");
                assert_eq!(lease.token, nth(LeaseToken::mint, 1));
                assert_eq!(lease.until, NOW + 1_000);
            }
            e => panic!("{e:?}"),
        }
        m.on_leased(true);
        match m.poll(NOW, &ids) {
            Effect::ListRefunds { charge_id, .. } => assert_eq!(charge_id, "ch_1"),
            e => panic!("{e:?}"),
        }
        m.on_refunds(Ok(vec![]));
        match m.poll(NOW, &ids) {
            Effect::Refund {
                lease,
                charge_id,
                amount,
            } => {
                assert_eq!(lease.provider_refund_key, row.provider_refund_key);
                assert_eq!((charge_id, amount), ("ch_1", 1_500));
            }
            e => panic!("{e:?}"),
        }
        let mut busy = ServerRefund::new(request("pay_1"), policy());
        busy.on_record(Some(row), NOW);
        busy.poll(NOW, &ids);
        busy.on_leased(false);
        assert_eq!(busy.end(), Some(&End::InProgress));
    }

    /// Row 4: a new key on a succeeded payment is claimed under a new id and the provider
    /// refund key of (user, key, payment), then leased, called and settled: the row ends
    /// `succeeded`, the payment, order and attempt `refunded`, audited by `system`.
    #[test]
    fn a_new_key_is_claimed_called_and_settled() {
        let ids = Sequence::starting_at(1);
        let req = request("pay_1");
        let mut m = ServerRefund::new(req.clone(), policy());
        m.on_record(None, NOW);
        let key = match m.poll(NOW, &ids) {
            Effect::Claim { plan, now } => {
                assert_eq!(
                    (plan.id.as_str(), now),
                    (nth(RefundId::mint, 1).as_str(), NOW)
                );
                assert_eq!(plan.payment_id, "pay_1");
                assert_eq!(
                    plan.provider_refund_key,
                    REFUND.provider_key("u1", &req.key, "pay_1")
                );
                plan.provider_refund_key.clone()
            }
            e => panic!("{e:?}"),
        };
        m.on_claim(Claimed::Won);
        match m.poll(NOW, &ids) {
            Effect::TakeLease { lease, .. } => {
                assert_eq!(
                    (lease.refund_id.as_str(), lease.provider_refund_key.as_str()),
                    (nth(RefundId::mint, 1).as_str(), key.as_str())
                );
            }
            e => panic!("{e:?}"),
        }
        m.on_leased(true);
        assert!(matches!(m.poll(NOW, &ids), Effect::ListRefunds { .. }));
        m.on_refunds(Ok(vec![]));
        assert!(matches!(m.poll(NOW, &ids), Effect::Refund { .. }));
        m.on_refund(RefundOutcome::Created(ours(
            "re_1",
            1_500,
            RefundStatus::Succeeded,
        )));
        let later = NOW + 10;
        let answer = match m.poll(later, &ids) {
            Effect::Settle {
                plan:
                    SettleRefund::Refunded {
                        id,
                        provider_refund_id,
                        answer,
                        expires_at,
                        mark,
                    },
                now,
                ..
            } => {
                assert_eq!(
                    (id.as_str(), provider_refund_id.as_str()),
                    (nth(RefundId::mint, 1).as_str(), "re_1")
                );
                assert_eq!((now, *expires_at), (later, later + 5_000));
                assert_eq!(answer.status, 200);
                let body: RefundResponse = serde_json::from_str(&answer.body).expect("json");
                assert_eq!(body.refund_id, "re_1");
                assert_eq!(body.payment.status, AttemptStatus::Refunded);
                assert_eq!(mark.attempt_id, "att_1");
                let rows: Vec<_> = mark
                    .audit
                    .iter()
                    .map(|e| (e.actor.as_str(), e.entity, e.from.as_deref(), e.to.as_str()))
                    .collect();
                assert_eq!(
                    rows,
                    [
                        ("system", "payment", Some("succeeded"), "refunded"),
                        ("system", "order", Some("paid"), "refunded")
                    ]
                );
                assert_eq!(mark.audit[0].reason, "provider refund re_1 of charge ch_1");
                answer.clone()
            }
            e => panic!("{e:?}"),
        };
        m.on_settled(true);
        assert_eq!(m.end(), Some(&End::Refunded(answer)));
    }

    /// Row 4, raced: the key's slot taken meanwhile reads the key again.
    #[test]
    fn a_key_claimed_meanwhile_is_read_again() {
        let mut m = ServerRefund::new(request("pay_1"), policy());
        m.on_record(None, NOW);
        m.poll(NOW, &Sequence::starting_at(1));
        m.on_claim(Claimed::KeyTaken);
        assert!(matches!(
            m.poll(NOW, &Sequence::starting_at(1)),
            Effect::ReadKey { .. }
        ));
    }

    /// Row 5: a new key on a payment that is not succeeded, or whose one refund slot another
    /// key holds, is 409 `REFUND_NOT_ALLOWED`, nothing stored.
    #[test]
    fn a_new_key_otherwise_is_not_allowed() {
        let mut req = request("pay_1");
        req.payment.status = AttemptStatus::Refunded;
        let mut m = ServerRefund::new(req, policy());
        m.on_record(None, NOW);
        let (status, code, detail) = problem(m.end());
        assert_eq!((status, code), (409, ErrorCode::RefundNotAllowed));
        assert_eq!(
            detail.as_deref(),
            Some("the payment is not in a refundable state")
        );

        let mut m = ServerRefund::new(request("pay_1"), policy());
        m.on_record(None, NOW);
        m.poll(NOW, &Sequence::starting_at(1));
        m.on_claim(Claimed::PaymentTaken);
        let (_, code, detail) = problem(m.end());
        assert_eq!(code, ErrorCode::RefundNotAllowed);
        assert_eq!(
            detail.as_deref(),
            Some("this payment is already refunded or being refunded")
        );
    }

    /// A list the provider cannot give ends the lease early (no call is in flight) and
    /// answers 409 `IN_PROGRESS`; the refund stays processing.
    #[test]
    fn an_unknown_list_releases_the_lease_and_is_in_progress() {
        let ids = Sequence::starting_at(1);
        let mut m = leased(&ids);
        m.poll(NOW, &ids);
        m.on_refunds(Err("down".into()));
        match m.poll(NOW, &ids) {
            Effect::Release(lease) => assert_eq!(lease.token, nth(LeaseToken::mint, 1)),
            e => panic!("{e:?}"),
        }
        m.on_released();
        assert_eq!(m.end(), Some(&End::InProgress));
    }

    /// A call whose answer is unknown may still land: the lease is kept until a lease from
    /// the moment the answer was lost (longer than the call's timeout), never released, and
    /// the answer is 409 `IN_PROGRESS`.
    #[test]
    fn an_unknown_answer_holds_the_lease_past_the_call() {
        let ids = Sequence::starting_at(1);
        let mut m = calling(&ids);
        m.on_refund(RefundOutcome::Unknown("timeout".into()));
        let later = NOW + 1_200;
        match m.poll(later, &ids) {
            Effect::HoldLease { lease, until } => {
                assert_eq!(lease.token, nth(LeaseToken::mint, 1));
                assert_eq!(until, later + 1_000);
            }
            e => panic!("{e:?}"),
        }
        m.on_held();
        assert_eq!(m.end(), Some(&End::InProgress));
    }

    /// A refund the provider accepts as pending is not a refund yet: the lease ends, the key
    /// stays processing (409 `IN_PROGRESS`); a later read settles it.
    #[test]
    fn a_pending_refund_stays_processing() {
        let ids = Sequence::starting_at(1);
        let mut m = calling(&ids);
        m.on_refund(RefundOutcome::Created(ours(
            "re_1",
            1_500,
            RefundStatus::Pending,
        )));
        assert!(matches!(m.poll(NOW, &ids), Effect::Release(_)));
        m.on_released();
        assert_eq!(m.end(), Some(&End::InProgress));
    }

    /// What the provider lists decides before any call: ours succeeded settles it, ours
    /// pending waits, ours failed fails the key, a partial refund made elsewhere leaves the
    /// remainder to refund.
    #[test]
    fn the_list_decides_before_any_call() {
        let cases = [
            (vec![ours("re_1", 1_500, RefundStatus::Succeeded)], "settle"),
            (vec![ours("re_1", 1_500, RefundStatus::Pending)], "release"),
            (vec![ours("re_1", 1_500, RefundStatus::Failed)], "fail"),
            (vec![refund("re_dash")], "settle"),
        ];
        for (list, want) in cases {
            let ids = Sequence::starting_at(1);
            let mut m = leased(&ids);
            m.poll(NOW, &ids);
            m.on_refunds(Ok(list.clone()));
            let got = match m.poll(NOW, &ids) {
                Effect::Settle {
                    plan: SettleRefund::Refunded { .. },
                    ..
                } => "settle",
                Effect::Settle {
                    plan: SettleRefund::Failed { .. },
                    ..
                } => "fail",
                Effect::Release(_) => "release",
                e => panic!("{e:?}"),
            };
            assert_eq!(got, want, "{list:?}");
        }
        let ids = Sequence::starting_at(1);
        let mut m = leased(&ids);
        m.poll(NOW, &ids);
        let partial = ProviderRefund {
            amount: 600,
            ..refund("re_dash")
        };
        m.on_refunds(Ok(vec![partial]));
        assert!(matches!(
            m.poll(NOW, &ids),
            Effect::Refund { amount: 900, .. }
        ));
    }

    /// [`standing`], the rule itself: by our key first, then by amount; failed refunds count
    /// for nothing.
    #[test]
    fn standing_reads_refunds_by_key_and_amount() {
        let k = key();
        let part = |id: &str, amount, status| ProviderRefund {
            id: id.into(),
            amount,
            status,
            refund_key: None,
        };
        use RefundStatus::{Failed, Pending, Succeeded};
        let cases: Vec<(Vec<ProviderRefund>, Standing)> = vec![
            (vec![], Standing::Remainder(1_500)),
            (
                vec![part("re_d", 1_000, Succeeded)],
                Standing::Remainder(500),
            ),
            (
                vec![part("re_d", 1_500, Failed)],
                Standing::Remainder(1_500),
            ),
            (
                vec![part("re_d", 1_000, Succeeded), part("re_e", 500, Succeeded)],
                Standing::Refunded(part("re_d", 1_000, Succeeded)),
            ),
            (
                vec![part("re_d", 1_000, Succeeded), part("re_e", 500, Pending)],
                Standing::Pending,
            ),
            (
                vec![part("re_d", 1_000, Succeeded), ours("re_1", 500, Succeeded)],
                Standing::Refunded(ours("re_1", 500, Succeeded)),
            ),
            (
                vec![part("re_d", 1_000, Succeeded), ours("re_1", 500, Pending)],
                Standing::Pending,
            ),
            (vec![ours("re_1", 1_500, Failed)], Standing::Failed),
            (
                vec![ours("re_1", 1_500, Failed), part("re_d", 1_500, Succeeded)],
                Standing::Refunded(part("re_d", 1_500, Succeeded)),
            ),
            (
                vec![ours("re_1", 1_500, Failed), ours("re_2", 1_500, Succeeded)],
                Standing::Refunded(ours("re_2", 1_500, Succeeded)),
            ),
        ];
        for (list, want) in cases {
            assert_eq!(standing(&list, &k, 1_500), want, "{list:?}");
        }
        // Another key's refund is not ours: it counts by amount only.
        let other = ProviderRefund {
            refund_key: Some("someone-else".into()),
            ..part("re_x", 700, Succeeded)
        };
        assert_eq!(standing(&[other], &k, 1_500), Standing::Remainder(800));
    }

    /// The refund job and provider events resume a processing row at its lease; a row that
    /// is final already is left alone.
    #[test]
    fn a_processing_row_is_resumed_at_its_lease() {
        let row = record("pay_1", RefundState::Processing);
        let mut m = ServerRefund::resume(request("pay_1"), &row, policy());
        match m.poll(NOW, &Sequence::starting_at(1)) {
            Effect::TakeLease { lease, .. } => assert_eq!(lease.refund_id, "rfd_9"),
            e => panic!("{e:?}"),
        }
        let answer = Answer {
            status: 200,
            body: "{}".into(),
        };
        let done = record("pay_1", RefundState::Refunded(answer));
        let m = ServerRefund::resume(request("pay_1"), &done, policy());
        assert_eq!(m.end(), Some(&End::InProgress));
    }

    /// A refusal is decided by the provider's list read again: a refund made elsewhere that
    /// covers the payment is recorded as this one; nothing ends the key `failed` with the
    /// 409 to replay, its audit row on the payment.
    #[test]
    fn a_refusal_is_decided_by_the_providers_list() {
        let ids = Sequence::starting_at(1);
        let mut m = calling(&ids);
        m.on_refund(RefundOutcome::NotAllowed("already refunded".into()));
        assert!(matches!(m.poll(NOW, &ids), Effect::ListRefunds { .. }));
        m.on_refunds(Ok(vec![refund("re_dash")]));
        match m.poll(NOW, &ids) {
            Effect::Settle {
                plan:
                    SettleRefund::Refunded {
                        provider_refund_id, ..
                    },
                ..
            } => assert_eq!(provider_refund_id, "re_dash"),
            e => panic!("{e:?}"),
        }

        let mut m = calling(&ids);
        m.on_refund(RefundOutcome::NotAllowed("declined".into()));
        m.poll(NOW, &ids);
        m.on_refunds(Ok(vec![]));
        let answer = match m.poll(NOW, &ids) {
            Effect::Settle {
                plan:
                    SettleRefund::Failed {
                        id,
                        answer,
                        audit,
                        expires_at,
                    },
                ..
            } => {
                assert_eq!((id.as_str(), *expires_at), ("rfd_9", NOW + 5_000));
                assert_eq!(answer.status, 409);
                let p: Problem = serde_json::from_str(&answer.body).expect("problem");
                assert_eq!(p.code, ErrorCode::RefundNotAllowed);
                assert_eq!((audit.entity, audit.to.as_str()), ("payment", "succeeded"));
                assert_eq!(
                    audit.reason,
                    "refund rfd_9 refused or failed at the provider; nothing refunded"
                );
                answer.clone()
            }
            e => panic!("{e:?}"),
        };
        m.on_settled(true);
        assert_eq!(m.end(), Some(&End::Failed(answer)));
    }

    /// A settle lost to another request ends the lease and reads the key again, whose
    /// stored answer is then replayed.
    #[test]
    fn a_settle_lost_releases_and_replays() {
        let ids = Sequence::starting_at(1);
        let mut m = calling(&ids);
        m.on_refund(RefundOutcome::Created(ours(
            "re_1",
            1_500,
            RefundStatus::Succeeded,
        )));
        let Effect::Settle { plan, .. } = m.poll(NOW, &ids) else {
            panic!("settle")
        };
        let stored = plan.answer().clone();
        m.on_settled(false);
        assert!(matches!(m.poll(NOW, &ids), Effect::Release(_)));
        m.on_released();
        assert!(matches!(m.poll(NOW, &ids), Effect::ReadKey { .. }));
        m.on_record(
            Some(record("pay_1", RefundState::Refunded(stored.clone()))),
            NOW,
        );
        assert_eq!(m.end(), Some(&End::Replay(stored)));
    }

    /// A provider's refund event marks the payment refunded with the same rows as a settle,
    /// under its own actor and reason.
    #[test]
    fn a_providers_refund_marks_the_same_rows() {
        let p = payment("pay_1", AttemptStatus::Succeeded);
        let mark = mark_refunded(
            "provider-webhook",
            &p,
            &AttemptId::from_stored("att_1"),
            "dashboard",
        );
        assert_eq!(
            (mark.payment_id.as_str(), mark.order_id.as_str()),
            ("pay_1", "ord_1")
        );
        assert!(mark
            .audit
            .iter()
            .all(|e| e.actor == "provider-webhook" && e.reason == "dashboard"));
        assert_eq!(mark.audit.len(), 2);
    }
}
