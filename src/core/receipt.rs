//! Receipts from other tabs are hints, never proof. A tab that paid tells the others (over a
//! BroadcastChannel, `src/web/tabs.rs`) which API, order, key and checkout it paid; another tab
//! paying the same order believes it only when the hint fits its own call exactly (same API
//! base URL, same checkout, a payment for that order) and the server confirms it: one request
//! with the hint's key, which for a paid key is a replay of the stored answer and can never
//! charge again. Anything else and the tab pays as if it had heard nothing.
//!
//! A tab paying an order also shows the others which attempt it is sending ([`Claim`]) for as
//! long as its pay call runs: a tab that waits for the order meanwhile adopts that attempt
//! instead of minting a second key ([`crate::core::attempt::adopt`]).

use crate::core::classify::{Final, Verdict};
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey, Payment};
use serde::{Deserialize, Serialize};

/// What a tab heard: the order paid through `base_url` with `key` for `snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The API the payment went to (`ClientOptions.baseUrl`, normalised).
    pub base_url: String,
    /// The key that paid.
    pub key: IdempotencyKey,
    /// What it paid for.
    pub snapshot: CheckoutSnapshot,
    /// The payment as that tab received it.
    pub payment: Payment,
}

impl Receipt {
    /// True when the hint is about this very call: same API, same checkout, and a payment for
    /// that order.
    pub fn applies_to(&self, base_url: &str, checkout: &CheckoutSnapshot) -> bool {
        self.base_url == base_url
            && self.snapshot == *checkout
            && self.payment.order_id == checkout.order_id
    }
}

/// What a tab paying an order shows the other tabs while its pay call runs: which API, key and
/// checkout it sends (`src/web/tabs.rs` carries it in the name of a Web Lock the tab holds, so
/// it disappears with the call or the tab).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The API the attempt goes to (`ClientOptions.baseUrl`, normalised).
    pub base_url: String,
    /// The attempt's key.
    pub key: IdempotencyKey,
    /// What it pays for.
    pub snapshot: CheckoutSnapshot,
}

impl Claim {
    /// True when the claim is about `order_id` through `base_url`: another checkout of the same
    /// order is still the same order, paid or being paid.
    pub fn is_for(&self, base_url: &str, order_id: &str) -> bool {
        self.base_url == base_url && self.snapshot.order_id == order_id
    }
}

/// The payment the server's answer to the confirming request proves, if it does: only a
/// final paid verdict (already checked to be about this order by the caller's classifier).
pub fn confirmed(verdict: Verdict) -> Option<Payment> {
    match verdict {
        // Only the hint's own key proves the hint: a payment by another key is no confirmation.
        Verdict::Final(Final::Paid {
            payment,
            by_this_attempt: true,
        }) => Some(payment),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_protocol::{AttemptStatus, ErrorCode};

    fn snap(order: &str, v: u64) -> CheckoutSnapshot {
        CheckoutSnapshot {
            order_id: order.into(),
            order_version: v,
            payment_method_id: "pm_card_approve".into(),
            extras: Default::default(),
        }
    }
    fn receipt(base: &str, order: &str, paid_order: &str) -> Receipt {
        Receipt {
            base_url: base.into(),
            key: IdempotencyKey::parse("6f13d95a-e6c1-4bf2-9459-99b502098dc1").unwrap(),
            snapshot: snap(order, 2),
            payment: Payment {
                id: "pay_1".into(),
                order_id: paid_order.into(),
                amount: 1,
                currency: "EUR".into(),
                payment_method_id: "pm_card_approve".into(),
                charge_id: "ch_1".into(),
                status: AttemptStatus::Succeeded,
            },
        }
    }

    #[test]
    fn a_hint_applies_only_to_the_same_api_checkout_and_order() {
        let api = "https://api.example";
        assert!(receipt(api, "ord_1", "ord_1").applies_to(api, &snap("ord_1", 2)));
        assert!(
            !receipt("https://other.example", "ord_1", "ord_1").applies_to(api, &snap("ord_1", 2))
        );
        assert!(!receipt(api, "ord_1", "ord_1").applies_to(api, &snap("ord_1", 3)));
        assert!(!receipt(api, "ord_1", "ord_2").applies_to(api, &snap("ord_1", 2)));
    }

    #[test]
    fn only_a_paid_answer_confirms() {
        let r = receipt("b", "ord_1", "ord_1");
        assert_eq!(
            confirmed(Verdict::Final(Final::Paid {
                payment: r.payment.clone(),
                by_this_attempt: true
            })),
            Some(r.payment)
        );
        assert_eq!(confirmed(Verdict::Final(Final::Cancelled)), None);
        assert_eq!(
            confirmed(Verdict::Rejected {
                status: 422,
                code: Some(ErrorCode::KeyReusedWithDifferentDetails)
            }),
            None
        );
    }
}
