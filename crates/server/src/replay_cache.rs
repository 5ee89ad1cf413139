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
//! Bounded: at capacity the oldest entry goes first (FIFO; a replay storm is for recent keys).

use crate::store::attempts::AttemptRow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

type Key = (String, String);

/// The cache; `capacity` 0 turns it off.
pub(crate) struct ReplayCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    rows: HashMap<Key, Arc<AttemptRow>>,
    /// Insertion order, for eviction.
    order: VecDeque<Key>,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Plain map operations cannot leave it half-updated in a way that matters.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The final row of `(user, key)` if kept and not expired at `now` (unix ms).
    pub(crate) fn get(&self, user: &str, key: &str, now: i64) -> Option<Arc<AttemptRow>> {
        if self.capacity == 0 {
            return None;
        }
        let mut inner = self.lock();
        let k = (user.to_owned(), key.to_owned());
        let row = inner.rows.get(&k)?;
        if row.expires_at.is_some_and(|t| now < t) {
            return Some(row.clone());
        }
        // Expired: its key may be deleted and used anew. (Its place in `order` goes when it
        // comes to the front.)
        inner.rows.remove(&k);
        None
    }

    /// Keeps `row`, the final row of `(user, key)`; anything else is ignored.
    pub(crate) fn put(&self, user: &str, key: &str, row: &AttemptRow) {
        if self.capacity == 0 || !row.status.is_final() || row.fingerprint.is_none() {
            return;
        }
        if row.expires_at.is_none() || row.user_id != user {
            return;
        }
        let mut inner = self.lock();
        let k = (user.to_owned(), key.to_owned());
        if inner
            .rows
            .insert(k.clone(), Arc::new(row.clone()))
            .is_none()
        {
            inner.order.push_back(k);
        }
        while inner.rows.len() > self.capacity {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            inner.rows.remove(&oldest);
        }
        // Entries removed on expiry leave their keys in `order`; keep it bounded too.
        while inner.order.len() > self.capacity.saturating_mul(2) {
            if let Some(k) = inner.order.pop_front() {
                inner.rows.remove(&k);
            }
        }
    }

    /// Entries kept (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().rows.len()
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
    fn is_bounded_oldest_first_and_off_at_zero() {
        let c = ReplayCache::new(2);
        for k in ["a", "b", "c"] {
            c.put("u", k, &row("u", AttemptStatus::Declined, Some(i64::MAX)));
        }
        assert_eq!(c.len(), 2);
        assert!(c.get("u", "a", 0).is_none());
        assert!(c.get("u", "c", 0).is_some());
        let off = ReplayCache::new(0);
        off.put(
            "u",
            "a",
            &row("u", AttemptStatus::Succeeded, Some(i64::MAX)),
        );
        assert!(off.get("u", "a", 0).is_none());
    }
}
