//! Request and response bodies of the public API. JSON members are camelCase; amounts are
//! integers in the currency's minor unit (cents), never floats.
//!
//! Requests use `deny_unknown_fields`: an unknown member is a 400 `INVALID_REQUEST`.
//! Responses do not, so a newer server can add members without breaking older SDKs.

use crate::key::IdempotencyKey;
use crate::status::{AttemptStatus, OrderStatus};
use serde::{Deserialize, Serialize};

/// Whole numbers as JSON carries them in requests: `41`, and also `41.0` or `4.1e1` (RFC 8259
/// has one number type, and some JSON writers give every number a fraction). A fraction, a
/// negative, or a value past the type's range (or past 2^53, where a float is no longer
/// exact) is refused with the member's usual 400.
pub mod whole {
    use serde::de::{Deserializer, Error, Unexpected, Visitor};
    use std::fmt;

    struct Whole(u64);

    impl Visitor<'_> for Whole {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a whole number from 0 to {}", self.0)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
            match v <= self.0 {
                true => Ok(v),
                false => Err(E::invalid_value(Unexpected::Unsigned(v), &self)),
            }
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
            }
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            if v.fract() == 0.0 && (0.0..EXACT).contains(&v) {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                return self.visit_u64(v as u64);
            }
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }

    /// `#[serde(deserialize_with = "whole::u64")]`.
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Whole(u64::MAX))
    }

    /// `#[serde(deserialize_with = "whole::u32")]`.
    pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let v = d.deserialize_any(Whole(u64::from(u32::MAX)))?;
        Ok(u32::try_from(v).unwrap_or(u32::MAX))
    }
}

/// API paths, spelled once. `{id}` segments are filled by the helpers.
pub mod paths {
    /// `POST` a dev session.
    pub const DEV_SESSIONS: &str = "/dev/sessions";
    /// `GET` the dev configuration (dev mode only): [`super::DevConfig`].
    pub const DEV_CONFIG: &str = "/dev/config";
    /// `GET` the catalog.
    pub const CATALOG: &str = "/catalog";
    /// `POST` an order.
    pub const ORDERS: &str = "/orders";
    /// `GET` health.
    pub const HEALTHZ: &str = "/healthz";
    /// `GET` the OpenAPI document.
    pub const OPENAPI: &str = "/openapi.json";
    /// `POST` provider webhooks.
    pub const WEBHOOKS: &str = "/webhooks/provider";
    /// `POST` Stripe's webhooks (a server run with `--provider stripe`).
    pub const STRIPE_WEBHOOKS: &str = "/webhooks/stripe";
    /// `GET` Prometheus metrics (text exposition format).
    pub const METRICS: &str = "/metrics";
    /// `GET` (dev mode only) the mails sent about one order: `?orderId=`, [`super::Mailbox`].
    pub const DEV_MAILBOX: &str = "/dev/mailbox";
    /// `GET /orders/{id}`.
    pub fn order(order_id: &str) -> String {
        format!("/orders/{order_id}")
    }
    /// `PATCH /orders/{id}/cart`.
    pub fn cart(order_id: &str) -> String {
        format!("/orders/{order_id}/cart")
    }
    /// `POST /orders/{id}/pay`.
    // `concat`, not `format!`: the Wasm SDK links these two, and `format!` would pull Rust's
    // formatting machinery into its module.
    pub fn pay(order_id: &str) -> String {
        [ORDERS, "/", order_id, "/pay"].concat()
    }
    /// `POST /orders/{id}/payment-attempts/cancel`.
    pub fn cancel(order_id: &str) -> String {
        [ORDERS, "/", order_id, "/payment-attempts/cancel"].concat()
    }
    /// `POST /payments/{id}/refund`.
    pub fn refund(payment_id: &str) -> String {
        format!("/payments/{payment_id}/refund")
    }

    /// Every path above as a template (`{id}` for a path segment), for exhaustive checks
    /// (the drift test holds `docs/protocol.md` and the server's `openapi.json` to it).
    pub const ALL: &[&str] = &[
        DEV_SESSIONS,
        DEV_CONFIG,
        CATALOG,
        ORDERS,
        HEALTHZ,
        OPENAPI,
        WEBHOOKS,
        STRIPE_WEBHOOKS,
        METRICS,
        DEV_MAILBOX,
        "/orders/{id}",
        "/orders/{id}/cart",
        "/orders/{id}/pay",
        "/orders/{id}/payment-attempts/cancel",
        "/payments/{id}/refund",
    ];
}

/// What a key is bound to on the client: "pay for exactly this checkout".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckoutSnapshot {
    /// The order being paid.
    pub order_id: String,
    /// The server's order version the customer saw.
    pub order_version: u64,
    /// The chosen payment method id (e.g. `pm_card_approve`), never card data.
    pub payment_method_id: String,
    /// Extra intention fields of the checkout (e.g. `shippingOptionId`, `couponCode`): part of
    /// what the key pays for (a change is a new intention) and sent with the pay request
    /// ([`PayBody::extras`]). Empty (and left out of JSON) for most checkouts.
    #[serde(default, skip_serializing_if = "Extras::is_empty")]
    pub extras: Extras,
}

/// A checkout's extra intention fields: names and string values, at most one value per name.
/// JSON: an object of strings. Two are equal when they hold the same pairs in any order.
///
/// A plain list rather than a `BTreeMap`: the Wasm SDK clones and compares snapshots often, and
/// a map's clone, comparison and serde code cost it about 5 KB gzip for a handful of entries.
#[derive(Debug, Clone, Default, Eq)]
pub struct Extras(Vec<(String, String)>);

impl Extras {
    /// No extras.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name` (replacing an earlier value).
    pub fn set(&mut self, name: String, value: String) {
        self.0.retain(|(k, _)| *k != name);
        self.0.push((name, value));
    }

    /// The pairs, in the order they were set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl PartialEq for Extras {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl std::hash::Hash for Extras {
    // Consistent with the order-blind equality: only what every equal pair of values shares.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.len().hash(state);
    }
}

impl Serialize for Extras {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Extras {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Extras;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Extras, A::Error> {
                let mut e = Extras::default();
                while let Some((k, v)) = a.next_entry::<String, String>()? {
                    e.set(k, v);
                }
                Ok(e)
            }
        }
        d.deserialize_map(Pairs)
    }
}

impl CheckoutSnapshot {
    /// The pay request body for this snapshot (the same JSON as [`Self::pay_body`]).
    pub fn pay_request(&self) -> PayRequest {
        PayRequest {
            order_version: self.order_version,
            payment_method_id: self.payment_method_id.clone(),
            extras: self.extras.clone(),
        }
    }

    /// The pay body the SDK sends: [`PayRequest`]'s members, and `extras` when there are any
    /// (so a checkout without extras sends exactly a [`PayRequest`]).
    pub fn pay_body(&self) -> PayBody<'_> {
        PayBody {
            order_version: self.order_version,
            payment_method_id: &self.payment_method_id,
            extras: &self.extras,
        }
    }
}

/// `POST /orders/{id}/pay` body as the SDK sends it: a [`PayRequest`] plus the checkout's
/// extra intention fields. A server that knows an extra binds it into the attempt's
/// fingerprint; one that does not refuses the body (requests deny unknown members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PayBody<'a> {
    /// As in [`PayRequest`].
    pub order_version: u64,
    /// As in [`PayRequest`].
    pub payment_method_id: &'a str,
    /// [`CheckoutSnapshot::extras`], left out when empty.
    #[serde(skip_serializing_if = "Extras::is_empty")]
    pub extras: &'a Extras,
}

/// `POST /dev/sessions` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevSessionRequest {
    /// The user to sign in as (1..=64 chars of `[A-Za-z0-9_-]`).
    pub user_id: String,
}

/// `POST /dev/sessions` response. The same token is also set as an HttpOnly cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevSessionResponse {
    /// The user signed in.
    pub user_id: String,
    /// Bearer token (HMAC-signed).
    pub token: String,
}

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogItem {
    /// Stock-keeping unit.
    pub sku: String,
    /// Display name.
    pub name: String,
    /// Price per unit in minor units.
    pub unit_price: i64,
    /// ISO 4217 currency.
    pub currency: String,
    /// Units left.
    pub stock: i64,
}

/// A requested line of a cart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CartLine {
    /// Catalog SKU.
    pub sku: String,
    /// Units (1..=100).
    #[serde(deserialize_with = "whole::u32")]
    pub quantity: u32,
}

/// `POST /orders` body. There is deliberately no amount: the server prices the order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateOrderRequest {
    /// Lines (1..=20, distinct SKUs).
    pub items: Vec<CartLine>,
    /// Optional coupon code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupon: Option<String>,
    /// Optional shipping address (free text, ≤ 500 chars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `PATCH /orders/{id}/cart` body: members present replace the current value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateCartRequest {
    /// New lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<CartLine>>,
    /// New coupon (empty string removes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupon: Option<String>,
    /// New address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// A priced line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderLine {
    /// SKU.
    pub sku: String,
    /// Display name.
    pub name: String,
    /// Units.
    pub quantity: u32,
    /// Server price per unit.
    pub unit_price: i64,
    /// `quantity × unitPrice`.
    pub line_total: i64,
}

/// An order as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// Order id.
    pub id: String,
    /// Status.
    pub status: OrderStatus,
    /// Bumped on every change to items, coupon, address or total.
    pub version: u64,
    /// Priced lines.
    pub items: Vec<OrderLine>,
    /// Coupon applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupon: Option<String>,
    /// Shipping address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Sum of line totals.
    pub subtotal: i64,
    /// Coupon discount.
    pub discount: i64,
    /// What will be charged: `subtotal − discount`.
    pub amount: i64,
    /// ISO 4217 currency.
    pub currency: String,
    /// True while a payment attempt is active (the cart is locked).
    pub payment_in_progress: bool,
    /// The payment, once paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
}

/// `POST /orders/{id}/pay` body. The amount is not in it: the server loads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayRequest {
    /// The version the customer saw; a mismatch is 409 `ORDER_CHANGED`.
    #[serde(deserialize_with = "whole::u64")]
    pub order_version: u64,
    /// Payment method id.
    pub payment_method_id: String,
    /// The checkout's extra intention fields ([`CheckoutSnapshot::extras`]). The companion
    /// server accepts the names in [`pay_extras::KNOWN`] and binds them into the attempt's
    /// fingerprint (the same key with other extras is 422); any other name is 400. Absent
    /// (and left out of JSON) when empty.
    #[serde(default, skip_serializing_if = "Extras::is_empty")]
    pub extras: Extras,
}

/// The checkout extras the companion server knows ([`PayRequest::extras`]).
pub mod pay_extras {
    /// The coupon the customer typed at checkout.
    pub const COUPON_CODE: &str = "couponCode";
    /// The shipping option the customer chose.
    pub const SHIPPING_OPTION_ID: &str = "shippingOptionId";
    /// Every accepted name.
    pub const KNOWN: [&str; 2] = [COUPON_CODE, SHIPPING_OPTION_ID];
    /// Longest accepted value, in bytes.
    pub const MAX_VALUE_LEN: usize = 128;
}

/// A recorded payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payment {
    /// Payment id (ours).
    pub id: String,
    /// Order paid.
    pub order_id: String,
    /// Amount charged, minor units.
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// Payment method used.
    pub payment_method_id: String,
    /// The provider's charge id.
    pub charge_id: String,
    /// `succeeded` or `refunded`.
    pub status: AttemptStatus,
}

/// Body of a pay answer that is not a problem: 200 (succeeded) or 202 (processing).
/// A declined or failed attempt is a 402 [`crate::Problem`] with `attemptStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PayResponse {
    /// `succeeded` (200) or `processing` (202).
    pub status: AttemptStatus,
    /// The order.
    pub order_id: String,
    /// The payment, when succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
}

/// `POST /orders/{id}/payment-attempts/cancel` body. The key is in the body, never the URL,
/// so it stays out of access logs and history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelRequest {
    /// The attempt's key.
    pub key: IdempotencyKey,
}

/// Cancel answer: the attempt's status after the call.
/// `cancelled`: no charge can happen with this key. `processing`: wait. Final: as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelResponse {
    /// Status of the attempt.
    pub status: AttemptStatus,
    /// The payment, when the attempt had succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
}

/// `POST /payments/{id}/refund` answer (the request has no body, only `Idempotency-Key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundResponse {
    /// The payment after the refund.
    pub payment: Payment,
    /// The provider's refund id.
    pub refund_id: String,
}

/// Faults a dev-mode server injects on request (header [`crate::headers::DEV_FAULT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevFault {
    /// Process the request fully, then drop the connection without answering.
    DropResponse,
    /// Abort the whole server process right after the provider charged, before the outcome
    /// is saved (a crash mid-payment; the server recovers it on restart).
    CrashAfterCharge,
}

impl DevFault {
    /// Every fault this version knows.
    pub const ALL: [DevFault; 2] = [Self::DropResponse, Self::CrashAfterCharge];

    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DropResponse => "drop-response",
            Self::CrashAfterCharge => "crash-after-charge",
        }
    }
    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// `GET /dev/config` answer (dev mode only): what a demo page needs to show its dev panel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevConfig {
    /// Base URL of the payment provider this server charges (embedded or `--provider-url`).
    pub provider_url: String,
    /// The [`DevFault`]s this server accepts in the `Payonce-Dev-Fault` header.
    pub faults: Vec<DevFault>,
}

/// `GET /dev/mailbox?orderId=` query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MailboxQuery {
    /// The order whose mails to list (the caller's own orders only).
    pub order_id: String,
}

/// One mail the server sent (dev mode records them instead of sending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mail {
    /// The order the mail is about.
    pub order_id: String,
    /// Subject line.
    pub subject: String,
    /// Plain-text body.
    pub body: String,
    /// When it was sent, unix milliseconds.
    pub sent_at: i64,
}

/// `GET /dev/mailbox` answer: oldest first. One confirmation per paid order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mailbox {
    /// The mails.
    pub mails: Vec<Mail>,
}
