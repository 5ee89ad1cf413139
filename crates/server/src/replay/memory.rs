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
//! - It is only a shortcut for `replay_of` (crates/rules/src/pay.rs): the same checks (the caller's
//!   own key, the URL's order, the same details) run on the copy; anything else goes on to
//!   Redis and the database as before, and the database stays the only guard of claims.
//!
//! Bounded by `moka` (at capacity it evicts by recency and frequency); expiry is checked on
//! every read against the caller's `now`, so time stays an input.

use moka::sync::Cache;
use payonce_rules::Record;
use std::sync::Arc;

type Key = (String, String);

/// The cache; `capacity` 0 turns it off.
pub(crate) struct ReplayCache {
    rows: Option<Cache<Key, Arc<Record>>>,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            rows: (capacity > 0).then(|| Cache::new(capacity as u64)),
        }
    }

    /// The final row of `(user, key)` if kept and not expired at `now` (unix ms).
    pub(crate) fn get(&self, user: &str, key: &str, now: i64) -> Option<Arc<Record>> {
        let rows = self.rows.as_ref()?;
        let k = (user.to_owned(), key.to_owned());
        let row = rows.get(&k)?;
        if matches!(&*row, Record::Final(f) if now < f.expires_at) {
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
        rows.insert((user.to_owned(), key.to_owned()), Arc::new(row.clone()));
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
            order_id: "o1".into(),
            fingerprint: "fp".into(),
            order_version: 1,
            amount: 100,
            currency: "USD".into(),
        }
    }

    fn row(user: &str, status: AttemptStatus, expires_at: i64) -> Record {
        Record::Final(Final {
            id: "att_1".into(),
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
            c.get("alice", "k1", 999).map(|r| r.id().to_owned()),
            Some("att_1".into())
        );
        assert!(c.get("bob", "k1", 0).is_none(), "scoped by user");
        assert!(
            c.get("alice", "k1", 1_000).is_none(),
            "expired with the key"
        );
        assert!(c.get("alice", "k1", 0).is_none(), "and gone");
        let processing = Record::Processing(Processing {
            id: "att_2".into(),
            terms: terms("alice"),
            payment_method_id: "pm".into(),
            provider_key: "pk".into(),
            locked_until: None,
        });
        c.put("alice", "k2", &processing);
        let tomb = Record::Tombstone(Tombstone {
            id: "att_3".into(),
            user: "alice".into(),
            order_id: "o1".into(),
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
