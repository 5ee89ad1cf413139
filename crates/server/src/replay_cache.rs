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
//! - It is only a shortcut for [`crate::pay::replay_from_row`]: the same checks (the caller's
//!   own key, the URL's order, the same details) run on the copy; anything else goes on to
//!   Redis and the database as before, and the database stays the only guard of claims.
//!
//! Bounded by `moka` (at capacity it evicts by recency and frequency); expiry is checked on
//! every read against the caller's `now`, so time stays an input.

use crate::store::attempts::AttemptRow;
use moka::sync::Cache;
use std::sync::Arc;

type Key = (String, String);

/// The cache; `capacity` 0 turns it off.
pub(crate) struct ReplayCache {
    rows: Option<Cache<Key, Arc<AttemptRow>>>,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            rows: (capacity > 0).then(|| Cache::new(capacity as u64)),
        }
    }

    /// The final row of `(user, key)` if kept and not expired at `now` (unix ms).
    pub(crate) fn get(&self, user: &str, key: &str, now: i64) -> Option<Arc<AttemptRow>> {
        let rows = self.rows.as_ref()?;
        let k = (user.to_owned(), key.to_owned());
        let row = rows.get(&k)?;
        if row.expires_at.is_some_and(|t| now < t) {
            return Some(row);
        }
        // Expired: its key may be deleted and used anew.
        rows.invalidate(&k);
        None
    }

    /// Keeps `row`, the final row of `(user, key)`; anything else is ignored.
    pub(crate) fn put(&self, user: &str, key: &str, row: &AttemptRow) {
        let Some(rows) = &self.rows else {
            return;
        };
        if !row.status.is_final() || row.fingerprint.is_none() {
            return;
        }
        if row.expires_at.is_none() || row.user_id != user {
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

    fn row(user: &str, status: AttemptStatus, expires_at: Option<i64>) -> AttemptRow {
        AttemptRow {
            id: "att_1".into(),
            user_id: user.into(),
            order_id: "o1".into(),
            status,
            fingerprint: Some("fp".into()),
            order_version: Some(1),
            amount: Some(100),
            currency: Some("USD".into()),
            payment_method_id: Some("pm".into()),
            provider_key: Some("pk".into()),
            locked_until: None,
            response_status: Some(200),
            response_body: Some("{}".into()),
            expires_at,
        }
    }

    #[test]
    fn keeps_only_final_rows_of_their_own_user_until_they_expire() {
        let c = ReplayCache::new(10);
        c.put(
            "alice",
            "k1",
            &row("alice", AttemptStatus::Succeeded, Some(1_000)),
        );
        assert_eq!(
            c.get("alice", "k1", 999).map(|r| r.id.clone()),
            Some("att_1".into())
        );
        assert!(c.get("bob", "k1", 0).is_none(), "scoped by user");
        assert!(
            c.get("alice", "k1", 1_000).is_none(),
            "expired with the key"
        );
        assert!(c.get("alice", "k1", 0).is_none(), "and gone");

        c.put(
            "alice",
            "k2",
            &row("alice", AttemptStatus::Processing, None),
        );
        c.put(
            "alice",
            "k3",
            &row("alice", AttemptStatus::Processing, Some(1_000)),
        );
        let mut tomb = row("alice", AttemptStatus::Cancelled, Some(1_000));
        tomb.fingerprint = None;
        c.put("alice", "k4", &tomb);
        c.put(
            "alice",
            "k5",
            &row("bob", AttemptStatus::Succeeded, Some(1_000)),
        );
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
            c.put("u", k, &row("u", AttemptStatus::Declined, Some(i64::MAX)));
        }
        assert!(c.len() <= 2, "{} entries kept", c.len());
        let off = ReplayCache::new(0);
        off.put(
            "u",
            "a",
            &row("u", AttemptStatus::Succeeded, Some(i64::MAX)),
        );
        assert!(off.get("u", "a", 0).is_none());
    }
}
