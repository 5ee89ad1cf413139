//! The mock payment provider's HTTP API and its webhook events.
//!
//! It behaves like a real PSP: `POST /charges` is deduplicated on its own `Idempotency-Key`
//! header (the *provider key* the server derives and saves before calling), charges can be
//! looked up by provider key, refunds are idempotent too, and `GET /ledger` lists every
//! charge: the ground truth for "charged once".

use serde::{Deserialize, Serialize};

/// Provider paths.
pub mod paths {
    /// `POST` a charge (with `Idempotency-Key`).
    pub const CHARGES: &str = "/charges";
    /// `GET` the ledger (optionally `?orderId=`).
    pub const LEDGER: &str = "/ledger";
    /// `GET /charges/by-key/{providerKey}`.
    pub fn charge_by_key(provider_key: &str) -> String {
        format!("/charges/by-key/{provider_key}")
    }
    /// `POST /charges/{chargeId}/refunds` (with `Idempotency-Key`).
    pub fn refunds(charge_id: &str) -> String {
        format!("/charges/{charge_id}/refunds")
    }
    /// `POST` (dev) resend every webhook event of `?orderId=` again: deliberate duplicates.
    pub const DEV_REDELIVER_WEBHOOKS: &str = "/dev/webhooks/redeliver";
    /// `POST` (dev) forget every charge, refund and event.
    pub const DEV_RESET: &str = "/dev/reset";
}

/// Test payment methods, in the spirit of Stripe's test cards.
pub mod methods {
    /// Approved at once.
    pub const APPROVE: &str = "pm_card_approve";
    /// Declined at once.
    pub const DECLINE: &str = "pm_card_decline";
    /// Approved after 4 s (longer than a typical client timeout).
    pub const SLOW: &str = "pm_card_slow";
    /// Charged, but the provider never answers in time (the caller times out).
    pub const TIMEOUT: &str = "pm_card_timeout";
    /// Answers 503 the first time for a provider key, then approves.
    pub const TRANSIENT_5XX: &str = "pm_card_transient";
    /// All test methods.
    pub const ALL: [&str; 5] = [APPROVE, DECLINE, SLOW, TIMEOUT, TRANSIENT_5XX];
}

/// Outcome of a charge at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChargeStatus {
    /// Money moved.
    Succeeded,
    /// Declined; no money moved.
    Declined,
    /// Succeeded, then refunded.
    Refunded,
}

/// `POST /charges` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChargeRequest {
    /// Amount in minor units (> 0).
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// Test payment method.
    pub payment_method_id: String,
    /// The merchant's order id (metadata; the ledger can filter on it).
    pub order_id: String,
}

/// A charge as the provider stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    /// Provider charge id.
    pub id: String,
    /// The idempotency key it was created with.
    pub provider_key: String,
    /// Amount.
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// Payment method.
    pub payment_method_id: String,
    /// Merchant order id.
    pub order_id: String,
    /// Status.
    pub status: ChargeStatus,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// `GET /ledger` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// Every charge, oldest first.
    pub charges: Vec<Charge>,
}

/// A refund at the provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    /// Refund id.
    pub id: String,
    /// Charge refunded.
    pub charge_id: String,
    /// Amount refunded.
    pub amount: i64,
}

/// Webhook event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// A charge succeeded.
    #[serde(rename = "charge.succeeded")]
    ChargeSucceeded,
    /// A charge was declined.
    #[serde(rename = "charge.declined")]
    ChargeDeclined,
    /// A charge was refunded.
    #[serde(rename = "charge.refunded")]
    ChargeRefunded,
}

/// A webhook event, delivered at least once, possibly duplicated, delayed or reordered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEvent {
    /// Unique event id: the deduplication key.
    pub id: String,
    /// Event type.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Unix seconds when the event was created.
    pub created: i64,
    /// The charge concerned.
    pub charge: Charge,
}

/// `GET /ledger` query: `?orderId=` keeps only that order's charges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LedgerQuery {
    /// Only charges of this merchant order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
}

/// `POST /dev/webhooks/redeliver` query: the order whose events are sent again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedeliverQuery {
    /// Merchant order id.
    pub order_id: String,
}

/// `POST /dev/webhooks/redeliver` answer (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redelivered {
    /// How many events were queued for delivery again.
    pub redelivered: usize,
}
