//! The cancel flow (`POST /orders/{id}/payment-attempts/cancel`, the cancel table of
//! docs/protocol.md, section 9) as a sans-IO machine, [`ServerCancel`], of the pay and refund
//! machines' shape: the server polls it for the next [`Effect`], performs it and hands back
//! what it learnt.
//!
//! The tombstone and a late pay race for one unique slot: whichever inserts first wins, so a
//! pay that arrives after the cancel can never charge. The first tombstone is inserted only
//! while the order is unpaid (a charge under the key that settled before it shows as a paid
//! order), and spends a tombstone token before its commit. On a paid order the payment's
//! provider key decides ([`plan::cancel_from_store`]); only when the store does not know it
//! is the provider asked ([`plan::cancel_forgotten`]), and a token is spent before that
//! lookup, so a loop of fresh keys cannot spend the merchant's provider quota. A key whose
//! slot is taken is answered from its record; a processing attempt nobody holds is first
//! cancelled as a retry would ask the provider (`crate::pay::ServerPay::cancel`).

use crate::ids::{AttemptId, IdSource, OrderId, PaymentId};
use crate::keyed::PAY;
use crate::pay_key::provider_key;
use crate::plan::{self, AuditEntry, Lookup};
use crate::policy::Policy;
use crate::record::{Record, Tombstone};
use payonce_protocol::{AttemptStatus, CancelResponse, IdempotencyKey, Payment, Problem};

/// How a tombstone's transaction ended, as the store reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tombstoned {
    /// Committed: the key is cancelled.
    Inserted,
    /// The key's slot is taken (an attempt or a tombstone holds it): nothing was written.
    KeyTaken,
    /// The order is no longer payable (paid or refunded): nothing was written.
    OrderPaid {
        /// The order's payment, as read after the rollback.
        payment_id: Option<PaymentId>,
    },
}

/// What the cancel asks the server to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Insert the tombstone with its audit row, in one transaction. `unless_paid`: only
    /// while the order is unpaid; `spend`: take a tombstone token before the commit (a
    /// refusal rolls it back and ends the cancel with that refusal). Answer with
    /// [`ServerCancel::on_tombstone`].
    Tombstone {
        /// The tombstone.
        tombstone: Tombstone,
        /// Its audit row.
        entry: AuditEntry,
        /// Only while the order is unpaid.
        unless_paid: bool,
        /// Spend a tombstone token before the commit.
        spend: bool,
    },
    /// Read payment `payment_id` of the paid order and the provider key that paid it
    /// (none of either without an id). Answer with [`ServerCancel::on_paid`].
    ReadPaid {
        /// The order's payment.
        payment_id: Option<PaymentId>,
    },
    /// Spend a tombstone token before the provider is asked (a refusal ends the cancel
    /// with it). Answer with [`ServerCancel::on_spent`].
    Spend,
    /// Ask the provider about `provider_key`, never charging. Answer with
    /// [`ServerCancel::on_lookup`].
    Lookup {
        /// A payment without its key is older than the column, and so is the key that paid
        /// it: the key's unscoped provider key.
        provider_key: String,
    },
    /// Read the key's record (its slot is taken: it cannot be freed, so it is there).
    /// Answer with [`ServerCancel::on_record`].
    ReadKey,
    /// Nobody holds the processing attempt's lease: drive the pay machine's cancel of it
    /// (`crate::pay::ServerPay::cancel`). Answer with [`ServerCancel::on_waiting_cancelled`].
    CancelWaiting(Record),
    /// Read the payment of attempt `attempt_id`. Answer with [`ServerCancel::on_payment`].
    ReadPayment {
        /// The attempt.
        attempt_id: AttemptId,
    },
    /// The answer.
    Done(Result<CancelResponse, Box<Problem>>),
}

#[derive(Debug, Clone)]
enum Phase {
    Insert,
    ReadPaid(Option<PaymentId>),
    Spend(Option<Payment>),
    Lookup(Option<Payment>),
    Keep(CancelResponse, bool),
    ReadKey,
    CancelWaiting(Record, AttemptStatus, bool),
    ReadPayment(AttemptId, AttemptStatus),
    Done(Result<CancelResponse, Box<Problem>>),
}

/// One cancel of the caller's key on an order already checked to be theirs.
#[derive(Debug, Clone)]
pub struct ServerCancel {
    order_id: OrderId,
    provider_key: String,
    legacy_key: String,
    tombstone: Tombstone,
    entry: AuditEntry,
    phase: Phase,
}

impl ServerCancel {
    /// The cancel of `key` by `user` on order `order_id` at `order_version`, as read at
    /// `now`; the tombstone's attempt id is minted from `ids`.
    pub fn new(
        user: &str,
        key: &IdempotencyKey,
        (order_id, order_version): (&OrderId, i64),
        ids: &dyn IdSource,
        now: i64,
        policy: &Policy,
    ) -> Self {
        let id = AttemptId::mint(ids);
        let (tombstone, entry) =
            plan::plan_tombstone(user, order_id, order_version, id, now, policy);
        Self {
            order_id: order_id.clone(),
            provider_key: provider_key(user, key, order_id),
            legacy_key: PAY.legacy_provider_key(user, key),
            tombstone,
            entry,
            phase: Phase::Insert,
        }
    }

    /// The next effect; [`Effect::Done`] once the cancel has its answer.
    pub fn poll(&self) -> Effect {
        let tombstone = |unless_paid, spend| Effect::Tombstone {
            tombstone: self.tombstone.clone(),
            entry: self.entry.clone(),
            unless_paid,
            spend,
        };
        match &self.phase {
            Phase::Insert => tombstone(true, true),
            Phase::ReadPaid(id) => Effect::ReadPaid {
                payment_id: id.clone(),
            },
            Phase::Spend(_) => Effect::Spend,
            Phase::Lookup(_) => Effect::Lookup {
                provider_key: self.legacy_key.clone(),
            },
            Phase::Keep(_, spend) => tombstone(false, *spend),
            Phase::ReadKey => Effect::ReadKey,
            Phase::CancelWaiting(record, ..) => Effect::CancelWaiting(record.clone()),
            Phase::ReadPayment(id, _) => Effect::ReadPayment {
                attempt_id: id.clone(),
            },
            Phase::Done(answer) => Effect::Done(answer.clone()),
        }
    }

    /// How the tombstone's transaction ended.
    pub fn on_tombstone(&mut self, t: Tombstoned) {
        self.phase = match (&self.phase, t) {
            // Never charged, and the paid order refuses it: the tombstone makes a late
            // pay's answer ATTEMPT_CANCELLED, as for any cancelled key, whatever became of it.
            (Phase::Keep(answer, _), _) => Phase::Done(Ok(answer.clone())),
            (_, Tombstoned::Inserted) => Phase::Done(Ok(CancelResponse {
                status: AttemptStatus::Cancelled,
                payment: None,
            })),
            (_, Tombstoned::KeyTaken) => Phase::ReadKey,
            (_, Tombstoned::OrderPaid { payment_id }) => Phase::ReadPaid(payment_id),
        };
    }

    /// The provider key that paid the order, and its payment, as read.
    pub fn on_paid(&mut self, paid_with: Option<&str>, payment: Option<Payment>) {
        self.phase = match plan::cancel_from_store(&self.provider_key, paid_with, payment.clone()) {
            Some(answer) => Self::keep(answer, true),
            None => Phase::Spend(payment),
        };
    }

    /// The tombstone token was spent.
    pub fn on_spent(&mut self) {
        if let Phase::Spend(payment) = &self.phase {
            self.phase = Phase::Lookup(payment.clone());
        }
    }

    /// What the provider holds under the key's unscoped provider key.
    pub fn on_lookup(&mut self, lookup: Lookup) {
        if let Phase::Lookup(payment) = &self.phase {
            let answer = plan::cancel_forgotten(lookup, payment.clone());
            self.phase = Self::keep(answer, false);
        }
    }

    /// A paid order's answer: a cancelled one keeps a tombstone (`spend`: no token was
    /// spent for the lookup before it).
    fn keep(answer: CancelResponse, spend: bool) -> Phase {
        match answer.status {
            AttemptStatus::Cancelled => Phase::Keep(answer, spend),
            _ => Phase::Done(Ok(answer)),
        }
    }

    /// The key's record, read at `now`.
    pub fn on_record(&mut self, record: Record, now: i64) {
        self.phase = match plan::cancel_answer(&record, &self.order_id) {
            Err(problem) => Phase::Done(Err(problem)),
            Ok((status, with_payment)) => match &record {
                // Nobody holds the lease: ask the provider as a retry would, never charging.
                Record::Processing(p) if p.locked_until.is_none_or(|t| t <= now) => {
                    Phase::CancelWaiting(record, status, with_payment)
                }
                _ => Self::answer(record.id(), status, with_payment),
            },
        };
    }

    /// The status the pay machine's cancel settled the attempt at (`None`: it stayed
    /// processing, or someone else settled it and the record read before stands).
    pub fn on_waiting_cancelled(&mut self, settled: Option<AttemptStatus>) {
        if let Phase::CancelWaiting(record, status, with_payment) = &self.phase {
            self.phase = match settled {
                Some(s) => Self::answer(record.id(), s, s == AttemptStatus::Succeeded),
                None => Self::answer(record.id(), *status, *with_payment),
            };
        }
    }

    fn answer(attempt_id: &AttemptId, status: AttemptStatus, with_payment: bool) -> Phase {
        match with_payment {
            true => Phase::ReadPayment(attempt_id.clone(), status),
            false => Phase::Done(Ok(CancelResponse {
                status,
                payment: None,
            })),
        }
    }

    /// The attempt's payment, as read.
    pub fn on_payment(&mut self, payment: Option<Payment>) {
        if let Phase::ReadPayment(_, status) = &self.phase {
            self.phase = Phase::Done(Ok(CancelResponse {
                status: *status,
                payment,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Sequence;

    const NOW: i64 = 1_000_000;

    fn cancel() -> ServerCancel {
        let policy = Policy {
            lease_ms: 1_000,
            key_retention_ms: 5_000,
            reconcile_after_ms: 1_000,
            audit_retention_ms: 10_000,
            action_deadline_ms: 60_000,
            in_progress_wait_ms: 500,
            wait_poll_ms: crate::policy::WAIT_POLL_MS,
        };
        let key = IdempotencyKey::parse("0123456789abcdef0123456789abcdef").expect("valid");
        ServerCancel::new(
            "u1",
            &key,
            (&OrderId::from_stored("ord_1"), 3),
            &Sequence::starting_at(1),
            NOW,
            &policy,
        )
    }

    fn insert(m: &ServerCancel) -> (bool, bool) {
        match m.poll() {
            Effect::Tombstone {
                tombstone,
                unless_paid,
                spend,
                ..
            } => {
                assert_eq!(tombstone.order_version, Some(3));
                (unless_paid, spend)
            }
            other => panic!("expected the tombstone, got {other:?}"),
        }
    }

    fn cancelled() -> Effect {
        Effect::Done(Ok(CancelResponse {
            status: AttemptStatus::Cancelled,
            payment: None,
        }))
    }

    #[test]
    fn a_new_key_is_cancelled_by_a_tombstone_that_spends_a_token_unless_the_order_is_paid() {
        let mut m = cancel();
        assert_eq!(insert(&m), (true, true));
        m.on_tombstone(Tombstoned::Inserted);
        assert_eq!(m.poll(), cancelled());
    }

    #[test]
    fn on_a_paid_order_the_token_is_spent_before_the_provider_is_asked() {
        let mut m = cancel();
        m.on_tombstone(Tombstoned::OrderPaid {
            payment_id: Some(PaymentId::from_stored("pay_1")),
        });
        let read = Effect::ReadPaid {
            payment_id: Some(PaymentId::from_stored("pay_1")),
        };
        assert_eq!(m.poll(), read);
        // The store does not know which key paid: the provider decides, after a token.
        m.on_paid(None, None);
        assert_eq!(m.poll(), Effect::Spend);
        m.on_lookup(Lookup::NotFound); // before the token: ignored
        assert_eq!(m.poll(), Effect::Spend);
        m.on_spent();
        let legacy = match m.poll() {
            Effect::Lookup { provider_key } => provider_key,
            other => panic!("expected the lookup, got {other:?}"),
        };
        assert!(legacy.starts_with("pk_"));
        m.on_lookup(Lookup::NotFound);
        // Never charged: a tombstone, whatever the order, without a second token.
        assert_eq!(insert(&m), (false, false));
        m.on_tombstone(Tombstoned::KeyTaken);
        assert_eq!(m.poll(), cancelled());
    }

    #[test]
    fn a_paid_order_the_store_knows_is_answered_without_the_provider() {
        let mut m = cancel();
        m.on_tombstone(Tombstoned::OrderPaid { payment_id: None });
        // Another key paid the order: this one never charged.
        m.on_paid(Some("pk_another"), None);
        assert_eq!(insert(&m), (false, true));
        m.on_tombstone(Tombstoned::Inserted);
        assert_eq!(m.poll(), cancelled());
    }

    #[test]
    fn a_taken_key_is_answered_from_its_record() {
        let mut m = cancel();
        m.on_tombstone(Tombstoned::KeyTaken);
        assert_eq!(m.poll(), Effect::ReadKey);
        let tombstone = Record::Tombstone(Tombstone {
            id: AttemptId::from_stored("att_0"),
            user: "u1".into(),
            order_id: OrderId::from_stored("ord_1"),
            order_version: Some(2),
            expires_at: NOW,
        });
        m.on_record(tombstone.clone(), NOW);
        assert_eq!(m.poll(), cancelled());

        let mut other = cancel();
        other.on_tombstone(Tombstoned::KeyTaken);
        let Record::Tombstone(mut t) = tombstone else {
            unreachable!()
        };
        t.order_id = OrderId::from_stored("ord_2");
        other.on_record(Record::Tombstone(t), NOW);
        assert!(matches!(other.poll(), Effect::Done(Err(_))));
    }
}
