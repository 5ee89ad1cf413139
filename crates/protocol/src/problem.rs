//! RFC 9457 problem details and the stable error codes.
//!
//! Every error payonce returns is a [`Problem`] served as `application/problem+json`, with
//! a `code` member from [`ErrorCode`]. Clients match on `code`, never on `title`/`detail`.

use crate::body::Payment;
use crate::status::AttemptStatus;
use serde::{Deserialize, Serialize};

/// The values of a problem's `reason` member, per code (`docs/protocol.md` §4).
pub mod reason {
    /// `WEBHOOK_SIGNATURE_INVALID`: the request has no signature header.
    pub const MISSING: &str = "missing";
    /// `WEBHOOK_SIGNATURE_INVALID` when the server holds no usable secret to check the
    /// signature with (`crate::signature::verify`: shorter than its minimum).
    pub const NOT_CONFIGURED: &str = "not_configured";
    /// Every `reason` of 400 `WEBHOOK_SIGNATURE_INVALID`: the two above and the signature
    /// check's own (`crate::signature::SignatureError::reason`, held to this list by its tests).
    pub const WEBHOOK_SIGNATURE: &[&str] = &[
        MISSING,
        "malformed",
        "bad_timestamp",
        "no_signature",
        "outside_tolerance",
        "mismatch",
        NOT_CONFIGURED,
    ];
}

/// Media type of a problem body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = ($wire:literal, $status:literal, $title:literal) ),+ $(,)?) => {
        /// A stable error code. The wire spelling is SCREAMING_SNAKE_CASE.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $( $(#[$doc])* #[serde(rename = $wire)] $variant, )+
        }

        impl ErrorCode {
            /// Every code, for exhaustive tests and documentation.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $wire),+ }
            }

            /// The HTTP status this code is always served with.
            pub fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status),+ }
            }

            /// A short human-readable summary that does not change between occurrences.
            pub fn title(self) -> &'static str {
                match self { $(ErrorCode::$variant => $title),+ }
            }

            /// Parses the wire spelling.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|c| c.as_str() == s)
            }
        }
    };
}

codes! {
    /// The pay request has no `Idempotency-Key` header.
    IdempotencyKeyMissing = ("IDEMPOTENCY_KEY_MISSING", 400, "Idempotency-Key header is required"),
    /// The `Idempotency-Key` header is malformed (see [`crate::key`]).
    IdempotencyKeyInvalid = ("IDEMPOTENCY_KEY_INVALID", 400, "Idempotency-Key header is malformed"),
    /// The body or a parameter is malformed, has wrong types or unknown fields.
    InvalidRequest = ("INVALID_REQUEST", 400, "The request is malformed"),
    /// The order's total (unit prices × quantities, minus the coupon) does not fit in an
    /// amount: at most 2^53 - 1 minor units, so a JavaScript number holds it exactly.
    AmountTooLarge = ("AMOUNT_TOO_LARGE", 400, "The order total is too large"),
    /// A webhook's signature is missing, wrong or outside the tolerance window.
    WebhookSignatureInvalid = ("WEBHOOK_SIGNATURE_INVALID", 400, "Webhook signature is invalid"),
    /// No valid session token or cookie.
    Unauthenticated = ("UNAUTHENTICATED", 401, "Authentication is required"),
    /// The card was declined (or the attempt failed without a charge). Nothing was charged.
    PaymentDeclined = ("PAYMENT_DECLINED", 402, "The payment was declined"),
    /// The attempt ended without a charge (e.g. the provider never received it). Nothing was charged.
    PaymentFailed = ("PAYMENT_FAILED", 402, "The payment failed without a charge"),
    /// The customer must act before the charge can complete (e.g. 3-D Secure). The problem's
    /// `next` member is an opaque JSON value for the app (e.g. `{"type":"redirect","url":…}`);
    /// the attempt stays open under its key, and the same key finishes it after the action.
    ActionRequired = ("ACTION_REQUIRED", 402, "The customer must complete an action to pay"),
    /// The customer did not complete the action (3-D Secure) before the server's deadline:
    /// the provider cancelled the payment, nothing was charged, the attempt ended `expired`
    /// and the order is free; the next Pay uses a new key.
    ActionExpired = ("ACTION_EXPIRED", 402, "The payment expired waiting for the customer"),
    /// The operation needs dev mode, which this server is not running in.
    DevModeRequired = ("DEV_MODE_REQUIRED", 403, "This endpoint exists only in dev mode"),
    /// An operator endpoint (`/admin/…`) called with a customer's session or token: only
    /// the operator credential (`--operator-token-file`) reaches it.
    OperatorRequired = ("OPERATOR_REQUIRED", 403, "This endpoint needs the operator credential"),
    /// The order does not exist or belongs to someone else.
    OrderNotFound = ("ORDER_NOT_FOUND", 404, "Order not found"),
    /// The payment does not exist or belongs to someone else.
    PaymentNotFound = ("PAYMENT_NOT_FOUND", 404, "Payment not found"),
    /// No such route.
    NotFound = ("NOT_FOUND", 404, "Not found"),
    /// The route exists but not with this method.
    MethodNotAllowed = ("METHOD_NOT_ALLOWED", 405, "Method not allowed"),
    /// The request did not finish within the server's request timeout: its outcome is
    /// unknown (a pay goes on in the background), retry with the same key.
    RequestTimeout = ("REQUEST_TIMEOUT", 408, "The request took too long"),
    /// The key is still being processed by another request: retry after `Retry-After`.
    InProgress = ("IN_PROGRESS", 409, "A request with this key is in progress"),
    /// The key was cancelled (tombstone): this attempt can never charge.
    AttemptCancelled = ("ATTEMPT_CANCELLED", 409, "This payment attempt was cancelled"),
    /// The request's `orderVersion` is not the order's current version.
    OrderChanged = ("ORDER_CHANGED", 409, "The order changed; review it and pay again"),
    /// Another attempt of the order is active (processing, or waiting for the customer). A
    /// paid order is `ORDER_ALREADY_PAID`.
    PaymentAlreadyActive = ("PAYMENT_ALREADY_ACTIVE", 409, "Another payment attempt is active for this order"),
    /// The cart cannot change while a payment attempt is active.
    PaymentInProgress = ("PAYMENT_IN_PROGRESS", 409, "A payment is in progress for this order"),
    /// The order is already paid: it cannot be edited, and a new key cannot pay it (the
    /// problem's `payment` is the order's payment).
    OrderAlreadyPaid = ("ORDER_ALREADY_PAID", 409, "The order is already paid"),
    /// A payment of this order succeeded at the provider for an attempt that had ended
    /// without a charge (its customer confirmed the provider's payment outside the
    /// checkout): the order is held for a person to review, and no new key may pay it
    /// meanwhile, so it is never charged twice. Not retryable by the client.
    OrderUnderReview = ("ORDER_UNDER_REVIEW", 409, "The order is held for a payment review"),
    /// Not enough stock for an item of the order.
    OutOfStock = ("OUT_OF_STOCK", 409, "An item is out of stock"),
    /// The payment cannot be refunded in its current state.
    RefundNotAllowed = ("REFUND_NOT_ALLOWED", 409, "The payment cannot be refunded"),
    /// The body is larger than the server accepts.
    PayloadTooLarge = ("PAYLOAD_TOO_LARGE", 413, "The request body is too large"),
    /// The request URI (path and query) is longer than the server accepts.
    UriTooLong = ("URI_TOO_LONG", 414, "The request URI is too long"),
    /// The body is not `application/json`.
    UnsupportedMediaType = ("UNSUPPORTED_MEDIA_TYPE", 415, "Content-Type must be application/json"),
    /// The key was used before with different details (order, version, amount, method).
    KeyReusedWithDifferentDetails = ("KEY_REUSED_WITH_DIFFERENT_DETAILS", 422, "The idempotency key was used with different details"),
    /// Too many requests: retry after `Retry-After`.
    RateLimited = ("RATE_LIMITED", 429, "Too many requests"),
    /// The request's headers are larger, or more, than the server accepts.
    HeadersTooLarge = ("HEADERS_TOO_LARGE", 431, "The request headers are too large"),
    /// An unexpected server error. The detail is logged, never sent.
    Internal = ("INTERNAL", 500, "Internal server error"),
    /// The store is unreachable: the outcome of this request is unknown, retry with the same key.
    StoreUnavailable = ("STORE_UNAVAILABLE", 503, "The store is unavailable"),
    /// The payment provider could not be reached or could not confirm what a webhook event
    /// says: nothing was applied, deliver the event again after `Retry-After`.
    ProviderUnavailable = ("PROVIDER_UNAVAILABLE", 503, "The payment provider is unavailable"),
    /// An operator's resolve of a review flag (`POST /admin/reviews/{order_id}/resolve`,
    /// docs/operating.md): the provider still cannot tell what happened to the flagged
    /// payment (or holds one that could still be confirmed), so nothing was settled and the
    /// flag stays. Never answered to a customer.
    ReviewUnresolved = ("REVIEW_UNRESOLVED", 409, "The provider cannot settle this review yet"),
}

impl ErrorCode {
    /// The problem `type` URI reference for this code (relative to the API base).
    pub fn type_uri(self) -> String {
        format!(
            "/problems/{}",
            self.as_str().to_ascii_lowercase().replace('_', "-")
        )
    }
}

/// An RFC 9457 problem with payonce's extension members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// URI reference identifying the problem type (see [`ErrorCode::type_uri`]).
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Short summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// Explanation specific to this occurrence. Never contains internal error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The stable code clients match on.
    pub code: ErrorCode,
    /// Seconds to wait before retrying (mirrors the `Retry-After` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// On `ORDER_CHANGED`: the order's current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<u64>,
    /// On 402, 409 and 422 about a key: the attempt's stored status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_status: Option<AttemptStatus>,
    /// On `IDEMPOTENCY_KEY_INVALID`: the [`crate::KeyError::reason`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On `OUT_OF_STOCK`: the SKU that ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// On `ORDER_ALREADY_PAID` answering a pay: the order's payment, the receipt a replay of
    /// the key that paid carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
}

/// The `next` member of a 402 `ACTION_REQUIRED` problem as the companion server sends it:
/// what the customer must do before the same key can finish the attempt. To the SDK it is
/// opaque (handed to the app untouched); another backend may send another shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NextAction {
    /// What kind of action.
    #[serde(rename = "type")]
    pub kind: NextActionKind,
    /// Where the customer goes (for `redirect`): the provider's page, e.g. the bank's
    /// 3-D Secure challenge. Absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// For `stripe`: the PaymentIntent's client secret, for Stripe.js
    /// (`stripe.confirmCardPayment(clientSecret)` or `handleNextAction`) in the customer's
    /// browser. Meant for that browser only: never logged, never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
}

/// [`NextAction::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NextActionKind {
    /// Open `url` (same tab, or a popup); come back and pay again with the same key.
    Redirect,
    /// Hand `clientSecret` to Stripe.js, which runs the 3-D Secure step; then pay again
    /// with the same key.
    Stripe,
}

/// The body of a 402 `ACTION_REQUIRED`: a [`Problem`] and its `next` member. A type of its
/// own rather than a member of [`Problem`], so that decoding any other problem never
/// depends on the shape of `next`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRequiredProblem {
    /// The problem (code `ACTION_REQUIRED`, `attemptStatus` `processing`).
    #[serde(flatten)]
    pub problem: Problem,
    /// What the customer must do.
    pub next: NextAction,
}

impl ActionRequiredProblem {
    /// `ACTION_REQUIRED` for an attempt that stays `processing`, sending the customer to
    /// `url`.
    pub fn redirect(url: impl Into<String>) -> Self {
        Self::with(
            "the customer must confirm the payment (e.g. 3-D Secure) at next.url; then pay again with the same Idempotency-Key",
            NextAction {
                kind: NextActionKind::Redirect,
                url: Some(url.into()),
                client_secret: None,
            },
        )
    }

    /// `ACTION_REQUIRED` for an attempt that stays `processing`, whose Stripe PaymentIntent
    /// Stripe.js finishes with `client_secret`.
    pub fn stripe(client_secret: impl Into<String>) -> Self {
        Self::with(
            "the customer must confirm the payment (3-D Secure) with Stripe.js and next.clientSecret; then pay again with the same Idempotency-Key",
            NextAction {
                kind: NextActionKind::Stripe,
                url: None,
                client_secret: Some(client_secret.into()),
            },
        )
    }

    fn with(detail: &str, next: NextAction) -> Self {
        let mut problem = Problem::new(ErrorCode::ActionRequired).with_detail(detail);
        problem.attempt_status = Some(AttemptStatus::Processing);
        Self { problem, next }
    }
}

impl Problem {
    /// A problem for `code` with its standard title and status.
    pub fn new(code: ErrorCode) -> Self {
        Self {
            type_uri: code.type_uri(),
            title: code.title().to_owned(),
            status: code.http_status(),
            detail: None,
            code,
            retry_after: None,
            current_version: None,
            attempt_status: None,
            reason: None,
            sku: None,
            payment: None,
        }
    }

    /// Sets `detail`.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets `retryAfter`.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}
