//! One `(user, key)` attempt as the store holds it. The store converts each row to a
//! [`Record`] once, refusing rows that fit no variant, so nothing downstream guesses.

use crate::ids::{AttemptId, OrderId};
use payonce_protocol::AttemptStatus;
use serde::{Deserialize, Serialize};

/// What an attempt was made from: the request's fingerprint and the order's version and
/// amount at claim time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terms {
    /// The caller.
    pub user: String,
    /// The order paid.
    pub order_id: OrderId,
    /// [`crate::fingerprint`] of the request that claimed it.
    pub fingerprint: String,
    /// The order's version at claim time.
    pub order_version: i64,
    /// The amount charged for that version.
    pub amount: i64,
    /// Its currency.
    pub currency: String,
}

/// A stored answer: replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// HTTP status.
    #[serde(rename = "responseStatus")]
    pub status: u16,
    /// Exact body bytes.
    pub body: String,
}

/// A claimed attempt: the charge may be under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processing {
    /// Attempt id.
    pub id: AttemptId,
    /// What it charges.
    pub terms: Terms,
    /// The payment method.
    pub payment_method_id: String,
    /// The provider's idempotency key, saved before any call.
    pub provider_key: String,
    /// A two-phase provider's id of the payment object created for this attempt, saved
    /// before it is confirmed (`crate::pay::Phases::Two`); `None` before, and always for a
    /// one-phase provider.
    pub provider_ref: Option<String>,
    /// Unix ms the lease ends; `None` or past: nobody holds it.
    pub locked_until: Option<i64>,
    /// Unix ms the attempt was claimed (its deadline for a customer's action counts from
    /// here: [`crate::Policy::action_deadline`]).
    pub created_at: i64,
}

/// A finished attempt with its stored answer, which never changes (a refund changes
/// `status` to `refunded`, not the answer). Serialized flat (the Redis copy,
/// `crates/server/src/replay/mod.rs`): the stored body is one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Final {
    /// Attempt id (absent in copies written before it was kept).
    #[serde(default)]
    pub id: AttemptId,
    /// What it was made from.
    #[serde(flatten)]
    pub terms: Terms,
    /// `succeeded`, `declined`, `failed` or `refunded`.
    pub status: AttemptStatus,
    /// The answer to replay.
    #[serde(flatten)]
    pub answer: Answer,
    /// Unix ms after which the key may be deleted and become new again (absent in older
    /// copies: 0, already expired, so nothing keeps them).
    #[serde(default)]
    pub expires_at: i64,
}

/// A cancel that arrived before any pay: it holds the key's slot, so a late pay never
/// charges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// Attempt id.
    pub id: AttemptId,
    /// The caller.
    pub user: String,
    /// The order it was cancelled for.
    pub order_id: OrderId,
    /// The order's version when cancelled: a late pay can only charge at this version
    /// (`None`: written before tombstones kept it; it then stands for every version).
    pub order_version: Option<i64>,
    /// Unix ms after which it may be deleted, once its order is no longer payable at
    /// its version ([`crate::policy::deletable`]).
    pub expires_at: i64,
}

/// An attempt, by state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Claimed, outcome unknown.
    Processing(Processing),
    /// Settled, with its answer.
    Final(Final),
    /// Cancelled before any pay.
    Tombstone(Tombstone),
}

impl Record {
    /// The status as the wire and the store spell it.
    pub fn status(&self) -> AttemptStatus {
        match self {
            Self::Processing(_) => AttemptStatus::Processing,
            Self::Final(f) => f.status,
            Self::Tombstone(_) => AttemptStatus::Cancelled,
        }
    }

    /// Attempt id.
    pub fn id(&self) -> &AttemptId {
        match self {
            Self::Processing(p) => &p.id,
            Self::Final(f) => &f.id,
            Self::Tombstone(t) => &t.id,
        }
    }

    /// The caller.
    pub fn user(&self) -> &str {
        match self {
            Self::Processing(p) => &p.terms.user,
            Self::Final(f) => &f.terms.user,
            Self::Tombstone(t) => &t.user,
        }
    }

    /// The order.
    pub fn order_id(&self) -> &OrderId {
        match self {
            Self::Processing(p) => &p.terms.order_id,
            Self::Final(f) => &f.terms.order_id,
            Self::Tombstone(t) => &t.order_id,
        }
    }

    /// True once settled or cancelled.
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Processing(_))
    }
}
