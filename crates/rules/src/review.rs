//! An operator's resolve of a review flag (the operator API's
//! `POST /admin/reviews/{order_id}/resolve`, docs/operating.md, runbook "a review flag"),
//! for the flag the pay machine cannot settle: an attempt that *ended* without a charge whose
//! payment succeeded at the provider anyway (`crate::plan::plan_stray`), its order held
//! (`ORDER_UNDER_REVIEW`). A processing attempt flagged for review is resolved by the pay
//! machine itself ([`crate::pay::ServerPay::resolve`]).
//!
//! The provider cannot decide such a flag: its answer is "the money moved", and the store
//! says "this attempt did not pay the order". We refund the stray payment, never adopt it:
//! adopting would mark the order paid by a payment its customer confirmed outside the
//! checkout, at terms (version, amount) the store never bound to it, possibly on an order
//! another attempt already paid; a refund is right in every one of those cases and never
//! charges anyone. The customer may then pay the released order again.

use crate::plan::{AuditEntry, AuditState, Lookup};
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::AttemptStatus;

/// What resolving a flagged ended attempt asks of the provider, from its look-up of the
/// attempt's provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stray {
    /// The payment holds the customer's money: refund all of it (under
    /// [`refund_key`]), then clear the flag.
    Refund(Charge),
    /// No money is held (refunded meanwhile, cancelled, or no payment at all): clear.
    Clear(String),
    /// The provider cannot tell, or holds a payment that could still be confirmed: the flag
    /// stays; the reason goes in the answer.
    Unresolved(String),
}

/// Sorts the provider's answer about a flagged ended attempt's provider key ([`Stray`]).
pub fn stray(lookup: Lookup) -> Stray {
    match lookup {
        Lookup::Found(c) => match c.status {
            ChargeStatus::Succeeded => Stray::Refund(c),
            ChargeStatus::Refunded => Stray::Clear(format!("payment {} is refunded", c.id)),
            ChargeStatus::Canceled => Stray::Clear(format!("payment {} is cancelled", c.id)),
            ChargeStatus::Declined | ChargeStatus::RequiresAction => Stray::Unresolved(format!(
                "payment {} can still be confirmed; cancel it at the provider first",
                c.id
            )),
        },
        Lookup::NotFound => Stray::Clear("the provider holds no payment for this attempt".into()),
        Lookup::Unconfirmed => Stray::Unresolved(
            "the provider holds a payment object nobody confirmed; cancel it first".into(),
        ),
        Lookup::Unknown(why) => Stray::Unresolved(why),
    }
}

/// The provider refund key of the refund of a stray payment made under `provider_key`: one
/// per attempt, so a resolve repeated after a lost answer refunds once.
pub fn refund_key(provider_key: &str) -> String {
    format!("{provider_key}-resolve-refund")
}

/// The audit rows of clearing the review flag of ended attempt `attempt_id` (`status`) and,
/// when it is held, the hold of its order `order_id`, by an operator, for `why`.
pub fn cleared(
    attempt: Option<(&str, AttemptStatus)>,
    order_id: &str,
    held: bool,
    why: &str,
) -> Vec<AuditEntry> {
    let mut entries = Vec::new();
    if let Some((id, status)) = attempt {
        entries.push(AuditEntry::change(
            "operator",
            "attempt",
            id,
            Some(AuditState::Flagged(status)),
            AuditState::Attempt(status),
            &format!("review resolved by an operator: {why}"),
        ));
    }
    if held {
        entries.push(AuditEntry {
            actor: "operator".into(),
            entity: "order",
            entity_id: order_id.to_owned(),
            from: Some("held for review".into()),
            to: "released".into(),
            reason: format!("review resolved by an operator: {why}"),
        });
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(status: ChargeStatus) -> Charge {
        Charge {
            id: "ch_1".into(),
            provider_key: "pk".into(),
            amount: 500,
            currency: "EUR".into(),
            payment_method_id: "pm_card_visa".into(),
            order_id: "o1".into(),
            status,
            created_at: 0,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
        }
    }

    #[test]
    fn only_money_still_held_is_refunded_and_only_a_known_answer_clears() {
        assert!(matches!(
            stray(Lookup::Found(charge(ChargeStatus::Succeeded))),
            Stray::Refund(c) if c.amount == 500
        ));
        for s in [ChargeStatus::Refunded, ChargeStatus::Canceled] {
            assert!(matches!(stray(Lookup::Found(charge(s))), Stray::Clear(_)));
        }
        assert!(matches!(stray(Lookup::NotFound), Stray::Clear(_)));
        for s in [ChargeStatus::Declined, ChargeStatus::RequiresAction] {
            assert!(matches!(
                stray(Lookup::Found(charge(s))),
                Stray::Unresolved(_)
            ));
        }
        assert!(matches!(stray(Lookup::Unconfirmed), Stray::Unresolved(_)));
        assert!(matches!(
            stray(Lookup::Unknown("timeout".into())),
            Stray::Unresolved(_)
        ));
    }

    #[test]
    fn a_repeated_resolve_refunds_under_the_same_key() {
        assert_eq!(refund_key("pk_1"), refund_key("pk_1"));
        assert_ne!(refund_key("pk_1"), "pk_1");
    }
}
