//! The client's record of one payment attempt, and the rule that decides which key a Pay
//! click uses.
//!
//! An attempt lives from the Pay click that mints its key until its outcome is final:
//!
//! ```text
//! (no attempt) --Pay--> saved --request leaves--> sent --no answer / 5xx / 409--> unknown
//!                         ^                                   |                    |
//!                         +------- retry with the SAME key ---+--------------------+
//! any state --final answer (paid, declined, failed, cancelled, order changed)--> removed
//! ```
//!
//! `saved` is written to storage *before* the request is sent, so a crash or
//! reload at any point leaves the key behind for the next Pay to reuse. Final states are never
//! stored: a final outcome removes the record.

use crate::core::classify::Verdict;
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey};
use serde::{Deserialize, Serialize};

/// Where an attempt stands, as far as this client knows. Only non-final states exist here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// The key is minted and stored; no request has left yet.
    Saved,
    /// A request with the key is (or was) in flight.
    Sent,
    /// A request ended without a final answer (timeout, network error, 5xx, in progress).
    Unknown,
}

impl<'de> Deserialize<'de> for AttemptState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        unit_variant(d, &[Self::Saved, Self::Sent, Self::Unknown], Self::as_str)
    }
}

/// A unit enum read as its name, one of `all` as spelled by `name`. Hand-written instead of
/// derived: a derive brings a variant visitor and an enum access per enum into the Wasm
/// module, this only reads a string (docs/size.md).
pub(crate) fn unit_variant<'de, D, T>(
    d: D,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Copy,
{
    let s = String::deserialize(d)?;
    all.iter()
        .copied()
        .find(|v| name(*v) == s)
        .ok_or_else(|| serde::de::Error::custom("unknown variant"))
}

impl AttemptState {
    /// The state spelled `s` (as [`AttemptState::as_str`] spells it), if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Saved, Self::Sent, Self::Unknown]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// The spelling used in storage and in `PendingAttempt.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Saved => "saved",
            Self::Sent => "sent",
            Self::Unknown => "unknown",
        }
    }
}

/// One stored attempt: the JSON value of `payonce:attempt:<orderId>` (members in camelCase,
/// all required; the web layer's store reads and writes it with these serde derives).
///
/// Only the key and the snapshot are stored: never card data or tokens: storage is
/// readable by any script on the origin, and a key alone cannot charge anyone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// The idempotency key, sent on every retry of this attempt.
    pub key: IdempotencyKey,
    /// What the key pays for.
    pub snapshot: CheckoutSnapshot,
    /// Last known state.
    pub state: AttemptState,
    /// When the key was minted (Unix ms), for support and for the app's own UI.
    pub created_at: u64,
    /// How many requests carried the key so far.
    pub sends: u32,
}

impl Attempt {
    /// A fresh attempt for `snapshot`, about to be saved.
    pub fn new(key: IdempotencyKey, snapshot: CheckoutSnapshot, now_ms: u64) -> Self {
        Self {
            key,
            snapshot,
            state: AttemptState::Saved,
            created_at: now_ms,
            sends: 0,
        }
    }

    /// The record after one more request left with the key.
    pub fn sending(mut self) -> Self {
        self.state = AttemptState::Sent;
        self.sends = self.sends.saturating_add(1);
        self
    }
}

/// Storage key of an order's attempt. One entry per order: an order has at most one
/// unresolved attempt on this client.
pub fn storage_key(order_id: &str) -> String {
    // Not `format!`: the Wasm module would link Rust's formatting machinery for it.
    [STORAGE_PREFIX, order_id].concat()
}

/// Prefix of every attempt entry, so `clearAll` (logout) finds them.
pub const STORAGE_PREFIX: &str = "payonce:attempt:";

/// What storage holds for an order, after decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Nothing stored.
    Missing,
    /// A well-formed attempt.
    Valid(Attempt),
    /// Something is stored but does not decode as an attempt. If a key can still be read
    /// from it, that key may be live on the server (the request may have been charged).
    Unreadable {
        /// The salvaged key, if any.
        key: Option<IdempotencyKey>,
    },
}

impl Entry {
    /// Builds an entry from the two decoding tries the storage layer makes: the full record,
    /// then (only if that failed) the key alone, which is enough to cancel the attempt.
    pub fn from_decoded(full: Option<Attempt>, salvaged_key: Option<IdempotencyKey>) -> Self {
        match (full, salvaged_key) {
            (Some(a), _) => Self::Valid(a),
            (None, key) => Self::Unreadable { key },
        }
    }

    /// The key stored for the order, readable or salvaged.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::Missing => None,
            Self::Valid(a) => Some(&a.key),
            Self::Unreadable { key } => key.as_ref(),
        }
    }
}

/// Same intention? Same order, same version, same payment method: a key belongs
/// to one checkout snapshot, so a changed cart or method needs a new key. The order id is compared too so a record filed under the wrong order
/// can never lend its key to another order.
pub fn same_intention(a: &CheckoutSnapshot, b: &CheckoutSnapshot) -> bool {
    a == b
}

/// Which key a Pay click uses: the stored one while the checkout is the same, a new one
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayPlan {
    /// No unresolved attempt: mint a key now (the moment of commitment) and save it first.
    /// `replaces_unreadable` is true when an entry without any readable key is overwritten;
    /// the caller reports it (nothing live can be recovered from it, and the server's
    /// one-active-attempt-per-order rule still guards the order).
    Mint {
        /// An unreadable, keyless entry is being replaced.
        replaces_unreadable: bool,
    },
    /// Same snapshot as the unresolved attempt: a retry, double click or reload. Reuse its key.
    Reuse(Attempt),
    /// The details changed while the old attempt is unresolved: it must be cancelled or
    /// finished first. Never hand the old key to the new details, never mint silently.
    Conflict {
        /// What the unresolved attempt pays for.
        existing: CheckoutSnapshot,
    },
    /// The stored entry is unreadable but still names a key that may be live: resolve it with
    /// cancel (which tombstones or reports it) before a new attempt.
    ResolveUnreadable,
}

/// Decides the key for a Pay click on `checkout`, given what storage holds for its order.
pub fn plan_pay(entry: &Entry, checkout: &CheckoutSnapshot) -> PayPlan {
    match entry {
        Entry::Missing => PayPlan::Mint {
            replaces_unreadable: false,
        },
        Entry::Valid(a) if same_intention(&a.snapshot, checkout) => PayPlan::Reuse(a.clone()),
        Entry::Valid(a) => PayPlan::Conflict {
            existing: a.snapshot.clone(),
        },
        Entry::Unreadable { key: Some(_) } => PayPlan::ResolveUnreadable,
        Entry::Unreadable { key: None } => PayPlan::Mint {
            replaces_unreadable: true,
        },
    }
}

/// The attempt a pay call takes over from another tab (`other`, seen while this tab waited for
/// the order): only where this tab would mint a key (nothing readable stored), so a tab never
/// mints a second key for an order beside an unresolved attempt it can see, and its own stored
/// attempt (reused, or a conflict) keeps priority. The adopted attempt keeps the other tab's
/// key and checkout: its outcome is the order's, whatever this tab's customer chose meanwhile.
pub fn adopt(
    entry: &Entry,
    other: Option<(IdempotencyKey, CheckoutSnapshot)>,
    now_ms: u64,
) -> Option<Attempt> {
    match entry {
        Entry::Missing | Entry::Unreadable { key: None } => other.map(|(key, snapshot)| Attempt {
            // The other tab sent it (or was about to): the outcome is open.
            state: AttemptState::Sent,
            ..Attempt::new(key, snapshot, now_ms)
        }),
        Entry::Valid(_) | Entry::Unreadable { key: Some(_) } => None,
    }
}

/// True when `verdict` releases the attempt although it is a refusal: the server claimed no
/// key ([`crate::core::classify::claims_no_key`]) and `before` (the record as it was before
/// the answered request left) had never been sent, so that request was the only one with the
/// key and nothing can be charged with it. The key is then removed and the next Pay mints
/// one (another card pays without `cancel()`). A key sent before (a timeout, an adopted
/// attempt) stays: an earlier request with it may still reach the server.
pub fn released(before: &Attempt, verdict: &Verdict) -> bool {
    let never_sent = before.state == AttemptState::Saved && before.sends == 0;
    never_sent
        && matches!(verdict, Verdict::Rejected { status, code }
            if crate::core::classify::claims_no_key(*status, *code))
}

/// The stored record after an answer: `None` removes it (the outcome is final), `Some` is
/// what to write back. The one place the client decides to drop a key.
pub fn after_verdict(attempt: Attempt, verdict: &Verdict) -> Option<Attempt> {
    match verdict {
        v if v.removes_key() => None,
        Verdict::Retry { .. } => Some(Attempt {
            state: AttemptState::Unknown,
            ..attempt
        }),
        // A refusal proves nothing about earlier requests with this key: keep what we knew.
        _ => Some(attempt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(v: u64, pm: &str) -> CheckoutSnapshot {
        CheckoutSnapshot {
            order_id: "ord_1".into(),
            order_version: v,
            payment_method_id: pm.into(),
            extras: Default::default(),
        }
    }
    fn key(s: &str) -> IdempotencyKey {
        IdempotencyKey::parse(s).unwrap()
    }

    #[test]
    fn no_entry_mints_a_key() {
        assert_eq!(
            plan_pay(&Entry::Missing, &snap(3, "pm_a")),
            PayPlan::Mint {
                replaces_unreadable: false
            }
        );
    }

    #[test]
    fn same_snapshot_reuses_the_stored_key() {
        let a = Attempt::new(
            key("6f13d95a-e6c1-4bf2-9459-99b502098dc1"),
            snap(3, "pm_a"),
            1,
        );
        assert_eq!(
            plan_pay(&Entry::Valid(a.clone()), &snap(3, "pm_a")),
            PayPlan::Reuse(a)
        );
    }

    #[test]
    fn changed_version_or_method_is_a_conflict_not_a_new_key() {
        let a = Attempt::new(
            key("6f13d95a-e6c1-4bf2-9459-99b502098dc1"),
            snap(3, "pm_a"),
            1,
        );
        for other in [snap(4, "pm_a"), snap(3, "pm_b")] {
            assert_eq!(
                plan_pay(&Entry::Valid(a.clone()), &other),
                PayPlan::Conflict {
                    existing: snap(3, "pm_a")
                }
            );
        }
    }

    #[test]
    fn unreadable_entry_with_a_key_blocks_until_resolved() {
        let e = Entry::Unreadable {
            key: Some(key("6f13d95a-e6c1-4bf2-9459-99b502098dc1")),
        };
        assert_eq!(plan_pay(&e, &snap(1, "pm_a")), PayPlan::ResolveUnreadable);
        let e = Entry::Unreadable { key: None };
        assert_eq!(
            plan_pay(&e, &snap(1, "pm_a")),
            PayPlan::Mint {
                replaces_unreadable: true
            }
        );
    }

    #[test]
    fn another_tabs_attempt_is_adopted_only_where_a_key_would_be_minted() {
        let theirs = (
            key("0a7c3c1e-3a4f-4d0e-9a55-2f7f0f6f1b11"),
            snap(3, "pm_slow"),
        );
        let a = adopt(&Entry::Missing, Some(theirs.clone()), 5).unwrap();
        assert_eq!((&a.key, &a.snapshot), (&theirs.0, &theirs.1));
        assert_eq!(a.state, AttemptState::Sent);
        assert!(adopt(&Entry::Unreadable { key: None }, Some(theirs.clone()), 5).is_some());
        let mine = Attempt::new(
            key("6f13d95a-e6c1-4bf2-9459-99b502098dc1"),
            snap(3, "pm_a"),
            1,
        );
        assert_eq!(adopt(&Entry::Valid(mine), Some(theirs.clone()), 5), None);
        let salvaged = Entry::Unreadable {
            key: Some(key("6f13d95a-e6c1-4bf2-9459-99b502098dc1")),
        };
        assert_eq!(adopt(&salvaged, Some(theirs), 5), None);
        assert_eq!(adopt(&Entry::Missing, None, 5), None);
    }

    #[test]
    fn a_readable_record_wins_and_an_unreadable_one_keeps_only_its_key() {
        let k = key("6f13d95a-e6c1-4bf2-9459-99b502098dc1");
        let a = Attempt::new(k.clone(), snap(3, "pm_a"), 1_700_000).sending();
        assert_eq!(
            Entry::from_decoded(Some(a.clone()), Some(k.clone())),
            Entry::Valid(a)
        );
        // A record damaged by hand or by an older SDK: the key survives, the rest does not.
        let e = Entry::from_decoded(None, Some(k.clone()));
        assert_eq!(e.key(), Some(&k));
        assert_eq!(plan_pay(&e, &snap(3, "pm_a")), PayPlan::ResolveUnreadable);
        // Nothing readable at all: nothing live can be recovered.
        assert_eq!(
            Entry::from_decoded(None, None),
            Entry::Unreadable { key: None }
        );
    }
}
