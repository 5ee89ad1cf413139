//! Status values. Serialized in lowercase (`"processing"`, `"succeeded"`, ...).

use serde::{Deserialize, Serialize};

/// The state of one payment attempt (one idempotency key).
///
/// `processing` is the only non-final state. `cancelled` is also the state of a tombstone
/// inserted by a cancel that arrived before the pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptStatus {
    /// Claimed; the charge may be under way. The outcome is unknown.
    Processing,
    /// The provider approved the charge; the order is paid.
    Succeeded,
    /// The provider declined the charge; nothing was charged.
    Declined,
    /// The attempt ended without a charge (e.g. reconciliation found none).
    Failed,
    /// Cancelled before any charge started (or a tombstone).
    Cancelled,
    /// Charged, then refunded.
    Refunded,
    /// The provider waited for the customer (3-D Secure) past the server's deadline; the
    /// server had the provider cancel the payment, so nothing was charged and the order is
    /// free to pay with a new key.
    Expired,
}

impl AttemptStatus {
    /// All values, for exhaustive tests and docs.
    pub const ALL: [AttemptStatus; 7] = [
        Self::Processing,
        Self::Succeeded,
        Self::Declined,
        Self::Failed,
        Self::Cancelled,
        Self::Refunded,
        Self::Expired,
    ];

    /// The wire spelling (also used as the database value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Declined => "declined",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
            Self::Expired => "expired",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// True once the outcome can no longer change by itself: the client may drop its key.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Processing)
    }

    /// True when money moved (or moved and came back): the order must not be charged again.
    pub fn charged(self) -> bool {
        matches!(self, Self::Succeeded | Self::Refunded)
    }
}

/// The state of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    /// Open: the cart can change (unless an attempt is active) and it can be paid.
    Unpaid,
    /// Paid once; it cannot be paid again nor edited.
    Paid,
    /// Paid, then refunded.
    Refunded,
}

impl OrderStatus {
    /// All values.
    pub const ALL: [OrderStatus; 3] = [Self::Unpaid, Self::Paid, Self::Refunded];

    /// The wire spelling (also used as the database value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unpaid => "unpaid",
            Self::Paid => "paid",
            Self::Refunded => "refunded",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}
