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
    /// `GET /charges/{chargeId}`: one charge as the provider holds it (the mock's "dashboard"
    /// page of a payment, linked from the operator page).
    pub fn charge(charge_id: &str) -> String {
        format!("/charges/{charge_id}")
    }
    /// `GET /charges/by-key/{providerKey}`.
    pub fn charge_by_key(provider_key: &str) -> String {
        format!("/charges/by-key/{provider_key}")
    }
    /// `POST /charges/{chargeId}/refunds` (with `Idempotency-Key`); `GET` lists the charge's
    /// refunds ([`super::RefundList`]), made through the API or the dashboard.
    pub fn refunds(charge_id: &str) -> String {
        format!("/charges/{charge_id}/refunds")
    }
    /// `POST` (dev) refund a succeeded charge directly, as a merchant does in a PSP's
    /// dashboard: no idempotency key of ours, a `charge.refunded` event like any refund.
    pub fn dev_dashboard_refund(charge_id: &str) -> String {
        format!("/dev/charges/{charge_id}/refund")
    }
    /// `POST` (dev) end a pending refund as its bank does: `succeeded` true returns the
    /// money (`refund.updated`), false fails it (`refund.failed`); the refund as it ends.
    pub fn dev_refund_end(refund_id: &str, succeeded: bool) -> String {
        let end = if succeeded { "succeed" } else { "fail" };
        format!("/dev/refunds/{refund_id}/{end}")
    }
    /// `GET /charges/{chargeId}/action`: the page where the customer completes a charge that
    /// requires action (the challenge of `pm_card_3ds`). [`Charge::next_action_url`] points here.
    pub fn charge_action(charge_id: &str) -> String {
        format!("/charges/{charge_id}/action")
    }
    /// `POST /charges/{chargeId}/complete` with a [`super::CompleteRequest`] (JSON, or the
    /// action page's form): ends the action, succeeded or declined.
    pub fn charge_complete(charge_id: &str) -> String {
        format!("/charges/{charge_id}/complete")
    }
    /// `POST /charges/{chargeId}/cancel`: the merchant cancels a charge that still requires
    /// action (the customer abandoned it); nothing is charged. Answers the charge as it is
    /// after the call: `canceled`, or how the customer ended it first.
    pub fn charge_cancel(charge_id: &str) -> String {
        format!("/charges/{charge_id}/cancel")
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
    /// Requires action (3-D Secure): the charge is recorded as `requires_action` with a
    /// completion page ([`super::Charge::next_action_url`]) and ends only when the customer
    /// completes it there (`POST /charges/{id}/complete`).
    pub const THREE_DS: &str = "pm_card_3ds";
    /// Approved at once; every refund of its charge is refused (409 `REFUND_NOT_ALLOWED`), as
    /// an issuer may refuse one (a closed card account).
    pub const REFUND_REFUSED: &str = "pm_card_refund_refused";
    /// Approved at once; a refund of its charge is made `pending` (no money back yet, no
    /// event) until the dashboard ends it ([`super::paths::dev_refund_end`]), as a bank
    /// transfer refund may take days and may still fail.
    pub const REFUND_PENDING: &str = "pm_card_refund_pending";
    /// The methods that end without the customer (what an unattended load test can use).
    pub const UNATTENDED: [&str; 5] = [APPROVE, DECLINE, SLOW, TIMEOUT, TRANSIENT_5XX];
    /// All test methods.
    pub const ALL: [&str; 8] = [
        APPROVE,
        DECLINE,
        SLOW,
        TIMEOUT,
        TRANSIENT_5XX,
        THREE_DS,
        REFUND_REFUSED,
        REFUND_PENDING,
    ];
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
    /// Waits for the customer (3-D Secure): no money moved yet. Ends `succeeded` or
    /// `declined` when the action is completed.
    #[serde(rename = "requires_action")]
    RequiresAction,
    /// A charge that required action, cancelled by the merchant before the customer ended
    /// it: no money moved, and none ever will.
    Canceled,
}

/// How the customer ended a charge's action (`POST /charges/{id}/complete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionOutcome {
    /// The customer confirmed: the charge succeeds.
    Succeeded,
    /// The customer refused (or failed the challenge): the charge is declined.
    Declined,
}

/// `POST /charges/{id}/complete` body (JSON, or the same member as a form field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompleteRequest {
    /// How the action ended.
    pub outcome: ActionOutcome,
    /// Where the action page sends the browser afterwards (a local `http` origin only);
    /// without it the page says the window can be closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_url: Option<String>,
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
    /// While `requires_action`: the absolute URL of the page where the customer completes
    /// the charge. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action_url: Option<String>,
    /// When `declined`: the provider's reason (Stripe's `decline_code`, e.g.
    /// `insufficient_funds`), shown as the problem's detail. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_code: Option<String>,
    /// While `requires_action` at Stripe: the PaymentIntent's client secret, which the
    /// customer's browser hands to Stripe.js. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
}

/// `GET /ledger` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// Every charge the query asks for, oldest first.
    pub charges: Vec<Charge>,
    /// More charges follow the last one (ask again with `startingAfter` = its id).
    #[serde(default)]
    pub has_more: bool,
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
    /// Where it stands (absent: `succeeded`, a refund made before refunds had a status).
    #[serde(default)]
    pub status: RefundStatus,
}

/// Where a refund at the provider stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefundStatus {
    /// The money went back.
    #[default]
    Succeeded,
    /// Accepted, not final: it may still succeed or fail.
    Pending,
    /// Failed: nothing went back.
    Failed,
}

/// `GET /charges/{chargeId}/refunds` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundList {
    /// The charge's refunds, oldest first (full refunds: at most one that did not fail).
    pub refunds: Vec<Refund>,
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
    /// A pending refund of the charge succeeded.
    #[serde(rename = "refund.updated")]
    RefundUpdated,
    /// A pending refund of the charge failed.
    #[serde(rename = "refund.failed")]
    RefundFailed,
}

impl EventType {
    /// All values, for exhaustive tests.
    pub const ALL: [EventType; 5] = [
        Self::ChargeSucceeded,
        Self::ChargeDeclined,
        Self::ChargeRefunded,
        Self::RefundUpdated,
        Self::RefundFailed,
    ];

    /// The wire spelling (also what the server stores as the event's type).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChargeSucceeded => "charge.succeeded",
            Self::ChargeDeclined => "charge.declined",
            Self::ChargeRefunded => "charge.refunded",
            Self::RefundUpdated => "refund.updated",
            Self::RefundFailed => "refund.failed",
        }
    }
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

/// `GET /ledger` query: `?orderId=` keeps only that order's charges; `?since=` (Unix ms)
/// only those created then or later; `?startingAfter=` (a charge id) and `?limit=` page
/// through them (the provider sweep, `payonce-server sweep`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LedgerQuery {
    /// Only charges of this merchant order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    /// Only charges created at this Unix time in milliseconds or later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// Only charges after this one (in the ledger's order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_after: Option<String>,
    /// At most this many charges (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
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
