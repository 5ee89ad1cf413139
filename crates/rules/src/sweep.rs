//! The provider sweep's decision: one payment object the provider lists (created since some
//! time) against what the store knows of the provider key it carries, and what to do about
//! it. The I/O shell (`crates/server/src/ops/sweep.rs`) lists, reads the store, calls this,
//! and performs the answer; nothing here talks to anyone.
//!
//! Two kinds of object need someone, and no request or job of the pay machine will ever
//! reach them, because no attempt points at them:
//!
//! - **An unconfirmed object of ours nobody saved** (a create whose answer was lost: its
//!   retry made another; or an attempt a restored backup forgot): the customer's page may
//!   still hold its client secret and confirm it. It is cancelled ([`Action::Cancel`]).
//! - **A payment that succeeded where the store has no charge** (the attempt is unknown,
//!   ended without a charge, or settled with another payment): money moved that no order
//!   accounts for. It is flagged for review ([`Action::Flag`]): an audit row and the order
//!   held, so its new keys are refused (409 `ORDER_UNDER_REVIEW`) and it is never charged
//!   again. Never refunded nor marked paid here: a person decides.
//!
//! An object whose attempt is still processing is left to that attempt ([`Action::Leave`]):
//! the pay machine settles it (or cancels it before it settles uncharged), and an attempt
//! that has saved no id yet may still save this one.

use crate::plan::{AuditEntry, AuditState};
use payonce_protocol::AttemptStatus;

/// Who the audit trail names for the sweep's rows.
pub const ACTOR: &str = "provider-sweep";

/// What a payment object at the provider is, as far as the sweep cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectState {
    /// Could still be confirmed and charge (Stripe: `requires_payment_method`,
    /// `requires_confirmation`, `requires_action`; the mock: `requires_action`).
    Unconfirmed,
    /// Money moved (succeeded, or succeeded then refunded).
    Charged,
    /// Nothing to do: cancelled, declined for good, or a state that settles by itself
    /// (Stripe's `processing`, `requires_capture`).
    Other,
}

/// One payment object from the provider's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The provider's id (Stripe's `pi_…`, the mock's charge id).
    pub id: String,
    /// The provider key we sent with it (its metadata, or the mock's key); `None`: not an
    /// object payonce made.
    pub provider_key: Option<String>,
    /// The order it says it pays (its metadata), if any.
    pub order_id: Option<String>,
    /// Its state.
    pub state: ObjectState,
    /// The provider's word for its state, for the report.
    pub status: String,
    /// Amount in minor units and currency, for the report and the audit row.
    pub amount: i64,
    /// Currency.
    pub currency: String,
}

/// What the store holds under the object's provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// No attempt has the key (a restored backup that predates it, or not ours).
    Nothing,
    /// A processing attempt; `saved`: the provider object id it saved, if any.
    Processing {
        /// Attempt id.
        attempt: String,
        /// Its order.
        order: String,
        /// The saved provider object id.
        saved: Option<String>,
    },
    /// An attempt that ended.
    Ended {
        /// Attempt id.
        attempt: String,
        /// Its order.
        order: String,
        /// How it ended.
        status: AttemptStatus,
        /// The provider payment it settled with, if it charged.
        charge: Option<String>,
    },
}

/// What the sweep does with one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing: not ours, or the store agrees with the provider.
    Agree,
    /// A processing attempt owns it: the pay machine settles it.
    Leave,
    /// Cancel it at the provider, then record [`Action::Cancel::audit`].
    Cancel {
        /// The audit row of the cancel, written once the provider has cancelled it.
        audit: AuditEntry,
    },
    /// Money moved that the store does not account for: append `audit` (once per object:
    /// a second sweep finds it and writes nothing), hold `order` (if the store has it) and
    /// flag `attempt` (if one ended).
    Flag {
        /// The audit row naming the provider's payment.
        audit: AuditEntry,
        /// The order to hold for review.
        order: Option<String>,
        /// The ended attempt to flag.
        attempt: Option<String>,
    },
}

impl Action {
    /// The report's word for it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Agree => "agrees",
            Self::Leave => "left to its attempt",
            Self::Cancel { .. } => "cancelled",
            Self::Flag { .. } => "flagged",
        }
    }
}

/// The sweep's rule for `object` given what the store has under its key (see the module
/// docs).
pub fn decide(object: &Object, known: &Known) -> Action {
    if object.provider_key.is_none() {
        return Action::Agree;
    }
    match (object.state, known) {
        (ObjectState::Other, _) => Action::Agree,
        (_, Known::Processing { saved: None, .. }) => Action::Leave,
        (_, Known::Processing { saved: Some(s), .. }) if *s == object.id => Action::Leave,
        (ObjectState::Unconfirmed, _) => Action::Cancel {
            audit: cancel_entry(object, known),
        },
        (ObjectState::Charged, Known::Ended { charge, .. })
            if charge.as_deref() == Some(object.id.as_str()) =>
        {
            Action::Agree
        }
        (ObjectState::Charged, _) => flag(object, known),
    }
}

fn cancel_entry(object: &Object, known: &Known) -> AuditEntry {
    let why = match known {
        Known::Nothing => "no attempt of the store has its provider key".to_owned(),
        Known::Processing { attempt, .. } => {
            format!("attempt {attempt} saved another object (a create whose answer was lost)")
        }
        Known::Ended {
            attempt, status, ..
        } => format!("attempt {attempt} ended {}", status.as_str()),
    };
    let reason = format!(
        "provider sweep: unconfirmed payment {} ({} {}, {}) that nothing will confirm: {why}; \
         cancelled at the provider so no page can confirm it",
        object.id, object.amount, object.currency, object.status
    );
    AuditEntry {
        actor: ACTOR.to_owned(),
        entity: "payment",
        entity_id: object.id.clone(),
        from: Some(object.status.clone()),
        to: "canceled".to_owned(),
        reason,
    }
}

fn flag(object: &Object, known: &Known) -> Action {
    let (why, order, attempt) = match known {
        Known::Nothing => (
            "the store has no attempt with its provider key (a restored backup that predates \
             it?)"
                .to_owned(),
            object.order_id.clone(),
            None,
        ),
        Known::Ended {
            attempt,
            order,
            status,
            charge,
        } => {
            let why = match charge {
                Some(c) => format!("attempt {attempt} settled with another payment, {c}"),
                None => format!(
                    "attempt {attempt} ended {} without a charge",
                    status.as_str()
                ),
            };
            (why, Some(order.clone()), Some(attempt.clone()))
        }
        // Left to the attempt by `decide`.
        Known::Processing { attempt, order, .. } => (
            format!("attempt {attempt} is processing another object"),
            Some(order.clone()),
            None,
        ),
    };
    let reason = format!(
        "provider sweep: payment {} succeeded ({} {}) and {why}: flagged for manual review, \
         never refunded nor marked paid by payonce; the order refuses new keys until resolved",
        object.id, object.amount, object.currency
    );
    let audit = AuditEntry::change(
        ACTOR,
        "payment",
        &object.id,
        None,
        AuditState::Flagged(AttemptStatus::Succeeded),
        &reason,
    );
    Action::Flag {
        audit,
        order,
        attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(state: ObjectState) -> Object {
        Object {
            id: "pi_1".into(),
            provider_key: Some("pk_1".into()),
            order_id: Some("ord_1".into()),
            state,
            status: "requires_confirmation".into(),
            amount: 2500,
            currency: "USD".into(),
        }
    }

    fn ended(status: AttemptStatus, charge: Option<&str>) -> Known {
        Known::Ended {
            attempt: "att_1".into(),
            order: "ord_1".into(),
            status,
            charge: charge.map(str::to_owned),
        }
    }

    fn processing(saved: Option<&str>) -> Known {
        Known::Processing {
            attempt: "att_1".into(),
            order: "ord_1".into(),
            saved: saved.map(str::to_owned),
        }
    }

    #[test]
    fn an_unconfirmed_object_nobody_saved_is_cancelled() {
        let o = object(ObjectState::Unconfirmed);
        for known in [
            Known::Nothing,
            processing(Some("pi_2")),
            ended(AttemptStatus::Succeeded, Some("pi_2")),
            ended(AttemptStatus::Declined, None),
        ] {
            let a = decide(&o, &known);
            assert!(matches!(a, Action::Cancel { .. }), "{known:?}: {a:?}");
        }
    }

    #[test]
    fn an_object_a_processing_attempt_owns_or_may_still_save_is_left_to_it() {
        for state in [ObjectState::Unconfirmed, ObjectState::Charged] {
            let o = object(state);
            assert_eq!(decide(&o, &processing(None)), Action::Leave);
            assert_eq!(decide(&o, &processing(Some("pi_1"))), Action::Leave);
        }
    }

    #[test]
    fn a_charge_the_store_does_not_account_for_is_flagged_never_settled() {
        let o = object(ObjectState::Charged);
        let cases = [
            (Known::Nothing, Some("ord_1"), None),
            (
                ended(AttemptStatus::Failed, None),
                Some("ord_1"),
                Some("att_1"),
            ),
            (
                ended(AttemptStatus::Succeeded, Some("pi_2")),
                Some("ord_1"),
                Some("att_1"),
            ),
            (processing(Some("pi_2")), Some("ord_1"), None),
        ];
        for (known, want_order, want_attempt) in cases {
            let Action::Flag {
                audit,
                order,
                attempt,
            } = decide(&o, &known)
            else {
                panic!("{known:?} is not flagged");
            };
            assert_eq!(order.as_deref(), want_order, "{known:?}");
            assert_eq!(attempt.as_deref(), want_attempt, "{known:?}");
            assert_eq!(
                (audit.entity, audit.entity_id.as_str()),
                ("payment", "pi_1")
            );
            assert_eq!(audit.to, "succeeded (needs review)");
        }
    }

    #[test]
    fn agreement_and_objects_not_ours_change_nothing() {
        let charged = object(ObjectState::Charged);
        for status in [AttemptStatus::Succeeded, AttemptStatus::Refunded] {
            assert_eq!(
                decide(&charged, &ended(status, Some("pi_1"))),
                Action::Agree
            );
        }
        let done = object(ObjectState::Other);
        assert_eq!(decide(&done, &Known::Nothing), Action::Agree);
        let foreign = Object {
            provider_key: None,
            ..object(ObjectState::Unconfirmed)
        };
        assert_eq!(decide(&foreign, &Known::Nothing), Action::Agree);
    }
}
