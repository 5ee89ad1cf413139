//! Final attempts kept in this process's memory, so a retry of a finished attempt is answered
//! with no round trip to another process (database, Redis): on two shared cores one such
//! round trip costs more than a whole no-op request (docs/benchmarks.md).
//!
//! Why a copy in memory cannot answer differently from the database, on any instance:
//! - Only **final** rows are kept, and a final row's answer never changes: the stored status
//!   and body are written once when the attempt settles; a refund later changes the row's
//!   status to `refunded` but not the answer a retry replays. Tombstones and processing rows
//!   are never kept.
//! - An entry **expires with its key** (`expires_at`): past it the row may be deleted by the
//!   cleanup job and the key become new again, so the entry is dropped, never served.
//! - It is only a shortcut for `replay_of` (crates/rules/src/pay_key.rs): the same checks (the caller's
//!   own key, the URL's order, the same details) run on the copy; anything else goes on to
//!   Redis and the database as before, and the database stays the only guard of claims.
//!
//! Bounded by `moka` (at capacity it evicts by recency and frequency); expiry is checked on
//! every read against the caller's `now`, so time stays an input.
//! An entry also keeps the method and extras of the first request it replayed to: with the
//! row's terms they are all of a request's fingerprint, so the same order, version, method
//! and extras replay without hashing again; anything else is checked by `replay_of` in full.

use moka::sync::Cache;
use payonce_protocol::Extras;
use payonce_rules::pay_key::{replay_of, PayRequest};
use payonce_rules::{Answer, Record};
use std::sync::{Arc, OnceLock};

type Key = (String, String);
/// A kept final row, and the method and extras of a request it replayed to.
pub(crate) type Kept = (Record, OnceLock<(String, Extras)>);

/// The cache; `capacity` 0 turns it off.
pub(crate) struct ReplayCache {
    rows: Option<Cache<Key, Arc<Kept>>>,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            rows: (capacity > 0).then(|| Cache::new(capacity as u64)),
        }
    }

    /// The final row of `(user, key)` if kept and not expired at `now` (unix ms).
    pub(crate) fn get(&self, user: &str, key: &str, now: i64) -> Option<Arc<Kept>> {
        let rows = self.rows.as_ref()?;
        let k = (user.to_owned(), key.to_owned());
        let row = rows.get(&k)?;
        if matches!(&row.0, Record::Final(f) if now < f.expires_at) {
            return Some(row);
        }
        // Expired: its key may be deleted and used anew.
        rows.invalidate(&k);
        None
    }

    /// Keeps `row`, the final row of `(user, key)`; anything else is ignored.
    pub(crate) fn put(&self, user: &str, key: &str, row: &Record) {
        let Some(rows) = &self.rows else {
            return;
        };
        if !matches!(row, Record::Final(_)) || row.user() != user {
            return;
        }
        let kept = (row.clone(), OnceLock::new());
        rows.insert((user.to_owned(), key.to_owned()), Arc::new(kept));
    }

    /// The stored answer when the kept row of `(req.user, key)` replays to `req` (made
    /// without the order), as `replay_of` decides.
    pub(crate) fn replay(&self, key: &str, now: i64, req: &PayRequest<'_>) -> Option<Answer> {
        let kept = self.get(req.user, key, now)?;
        let (Record::Final(f), seen) = &*kept else {
            return None;
        };
        let details = (req.payment_method_id, req.extras);
        if seen.get().is_some_and(|(m, e)| (m.as_str(), e) == details)
            && (req.current, req.order_id) == (None, f.terms.order_id.as_str())
            && i64::try_from(req.order_version) == Ok(f.terms.order_version)
        {
            return Some(f.answer.clone());
        }
        let answer = replay_of(&kept.0, req)?;
        let _ = seen.set((details.0.to_owned(), details.1.clone()));
        Some(answer)
    }

    /// Entries kept (for tests), after moka's pending evictions ran.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rows.as_ref().map_or(0, |rows| {
            rows.run_pending_tasks();
            rows.entry_count() as usize
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_protocol::AttemptStatus;
    use payonce_rules::{Answer, Final, Processing, Terms, Tombstone};

    fn terms(user: &str) -> Terms {
        Terms {
            user: user.into(),
            order_id: payonce_rules::ids::OrderId::from_stored("o1"),
            fingerprint: "fp".into(),
            order_version: 1,
            amount: 100,
            currency: "USD".into(),
        }
    }

    fn row(user: &str, status: AttemptStatus, expires_at: i64) -> Record {
        Record::Final(Final {
            id: payonce_rules::ids::AttemptId::from_stored("att_1"),
            terms: terms(user),
            status,
            answer: Answer {
                status: 200,
                body: "{}".into(),
            },
            expires_at,
        })
    }

    #[test]
    fn keeps_only_final_rows_of_their_own_user_until_they_expire() {
        let c = ReplayCache::new(10);
        c.put(
            "alice",
            "k1",
            &row("alice", AttemptStatus::Succeeded, 1_000),
        );
        assert_eq!(
            c.get("alice", "k1", 999).map(|r| r.0.id().to_owned()),
            Some(payonce_rules::ids::AttemptId::from_stored("att_1"))
        );
        assert!(c.get("bob", "k1", 0).is_none(), "scoped by user");
        assert!(
            c.get("alice", "k1", 1_000).is_none(),
            "expired with the key"
        );
        assert!(c.get("alice", "k1", 0).is_none(), "and gone");
        let processing = Record::Processing(Processing {
            id: payonce_rules::ids::AttemptId::from_stored("att_2"),
            terms: terms("alice"),
            payment_method_id: "pm".into(),
            provider_key: "pk".into(),
            provider_ref: None,
            locked_until: None,
            created_at: 0,
        });
        c.put("alice", "k2", &processing);
        let tomb = Record::Tombstone(Tombstone {
            id: payonce_rules::ids::AttemptId::from_stored("att_3"),
            user: "alice".into(),
            order_id: payonce_rules::ids::OrderId::from_stored("o1"),
            order_version: Some(1),
            expires_at: 1_000,
        });
        c.put("alice", "k4", &tomb);
        c.put("alice", "k5", &row("bob", AttemptStatus::Succeeded, 1_000));
        assert_eq!(
            c.len(),
            0,
            "no processing row, tombstone or other user's row"
        );
    }

    #[test]
    fn a_replay_with_other_details_than_the_one_seen_is_checked_in_full() {
        let none = Extras::default();
        let mut coupon = Extras::default();
        coupon.set("couponCode".into(), "TEAM20".into());
        let mut kept = row("alice", AttemptStatus::Succeeded, 1_000);
        if let Record::Final(f) = &mut kept {
            f.terms.fingerprint = payonce_rules::fingerprint(&payonce_rules::pay_key::Details {
                user: "alice",
                order_id: "o1",
                order_version: 1,
                amount: 100,
                currency: "USD",
                payment_method_id: "pm_a",
                extras: &none,
            });
        }
        let c = ReplayCache::new(10);
        c.put("alice", "k", &kept);
        let req = |order_id, order_version, payment_method_id, extras| PayRequest {
            user: "alice",
            order_id,
            order_version,
            payment_method_id,
            extras,
            current: None,
        };
        for _ in 0..2 {
            assert!(c.replay("k", 0, &req("o1", 1, "pm_a", &none)).is_some());
        }
        for other in [
            req("o2", 1, "pm_a", &none),
            req("o1", 2, "pm_a", &none),
            req("o1", 1, "pm_b", &none),
            req("o1", 1, "pm_a", &coupon),
            PayRequest {
                user: "bob",
                ..req("o1", 1, "pm_a", &none)
            },
        ] {
            assert!(c.replay("k", 0, &other).is_none(), "{other:?}");
        }
    }

    #[test]
    fn is_bounded_and_off_at_zero() {
        let c = ReplayCache::new(2);
        for k in ["a", "b", "c", "d", "e"] {
            c.put("u", k, &row("u", AttemptStatus::Declined, i64::MAX));
        }
        assert!(c.len() <= 2, "{} entries kept", c.len());
        let off = ReplayCache::new(0);
        off.put("u", "a", &row("u", AttemptStatus::Succeeded, i64::MAX));
        assert!(off.get("u", "a", 0).is_none());
    }
}
