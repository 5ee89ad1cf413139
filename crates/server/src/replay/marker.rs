//! The Redis claim marker: duplicates of a new key in flight wait on Redis, not on the
//! database. Measured on PostgreSQL (50 simultaneous pays for one new key, crates/server/
//! README.md has the figure), it halves the database transactions of such a storm against
//! the database path's own in-flight wait, for one Redis round trip per new key.
//!
//! The policy is a phase of the pay machine (`ServerPay::pay_marked`,
//! crates/rules/src/pay.rs: `Mark`, `MarkWait`, `Unmark`); this file performs its three
//! effects on Redis:
//!
//! 1. [`mark`]: `SET idem:{user}:{key} <processing marker> NX PX <lease> GET` claims the key
//!    in Redis in one round trip, before the database claim. Claimed → the machine runs the
//!    pay rules anyway (a Redis claim never skips the database claim: Redis may have been
//!    flushed or failed over).
//! 2. Someone else's final entry replays when the request's details match (`replay_of`);
//!    different details never replay: the rules answer the 422 with the current status.
//!    Someone else's marker → [`look`] again until the in-progress wait ends, then (or on a
//!    miss, an error, or a stale marker) the rules decide.
//! 3. [`unmark`]: the marker's owner caches the final answer (the row it stored, or the
//!    database's) or deletes its marker (compare-and-delete, so a newer owner's stays); a
//!    waiter that got a final answer from the database refills a cache that lost it.
//!
//! Any Redis failure → the rules. Nothing here can fail a request.

use super::redis::RedisCache;
use super::{get, lookup_label, put, redis_key, remember, Entry, Replays};
use crate::metrics::{self, RedisLookup};
use axum::extract::FromRef;
use payonce_protocol::IdempotencyKey;
use payonce_rules::pay::{Marked, MarkerVerdict, Unmark};
use payonce_rules::Record;

/// Compare-and-delete: removes the key only if it still holds our marker.
const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// This request's marker: a processing entry with a token of its own, so only it deletes it.
pub(crate) fn new_marker() -> String {
    let token = uuid::Uuid::new_v4().to_string();
    // One string member: serialization cannot fail (an unreadable marker would only send
    // the others to the database).
    serde_json::to_string(&Entry::Processing { token }).unwrap_or_default()
}

/// Sets `marker` for `(user, key)` where nothing is, for one lease; what was there.
pub(crate) async fn mark<S>(
    redis: &RedisCache,
    state: &S,
    user: &str,
    key: &IdempotencyKey,
    marker: &str,
) -> Marked
where
    Replays: FromRef<S>,
{
    let lease = u64::try_from(Replays::from_ref(state).policy.lease_ms)
        .unwrap_or(1)
        .max(1);
    let mut set = ::redis::cmd("SET");
    set.arg(redis_key(user, key))
        .arg(marker)
        .arg("NX")
        .arg("PX")
        .arg(lease)
        .arg("GET");
    match redis.query::<Option<String>>(&set).await {
        Ok(None) => Marked::Ours,
        Ok(Some(v)) => seen(serde_json::from_str::<Entry>(&v).ok()),
        Err(e) => {
            metrics::redis_lookup(lookup_label(&e));
            Marked::Failed
        }
    }
}

/// The entry of `(user, key)` now.
pub(crate) async fn look(redis: &RedisCache, user: &str, key: &IdempotencyKey) -> Marked {
    match get(redis, &redis_key(user, key)).await {
        Ok(None) => Marked::Gone,
        Ok(entry) => seen(entry),
        Err(e) => {
            metrics::redis_lookup(lookup_label(&e));
            Marked::Failed
        }
    }
}

fn seen(entry: Option<Entry>) -> Marked {
    match entry {
        Some(Entry::Final(f)) => Marked::Final(f),
        Some(Entry::Processing { .. }) => Marked::Theirs,
        None => {
            tracing::warn!("unreadable redis entry; using the database");
            Marked::Unreadable
        }
    }
}

/// Leaves the cache of `(user, key)` as the machine says once the flow ended; `marker`: this
/// request's own.
pub(crate) async fn unmark<S: Sync>(
    redis: &RedisCache,
    state: &S,
    user: &str,
    key: &IdempotencyKey,
    marker: &str,
    unmark: Unmark<'_>,
) where
    Replays: FromRef<S>,
{
    let state = &Replays::from_ref(state);
    let rkey = redis_key(user, key);
    match unmark {
        // Settled by this request: the final row it stored, no second read.
        Unmark::Cache(stored) => {
            put(redis, state, &rkey, &Record::Final(stored.clone()), false).await
        }
        Unmark::Remember { unless_cached } => {
            // Never over a final entry when refilling (it would be the same anyway).
            if unless_cached
                && matches!(get(redis, &rkey).await, Ok(Some(Entry::Final(_))) | Err(_))
            {
                return;
            }
            remember(state, user, key, false).await;
        }
        Unmark::Release => {
            let mut eval = ::redis::cmd("EVAL");
            eval.arg(RELEASE_SCRIPT).arg(1).arg(&rkey).arg(marker);
            let _ = redis.query::<i64>(&eval).await;
        }
    }
}

/// The metric of a marker step.
pub(crate) fn count(verdict: MarkerVerdict) {
    metrics::redis_lookup(match verdict {
        MarkerVerdict::Claimed => RedisLookup::Claimed,
        MarkerVerdict::Replay => RedisLookup::Replay,
        MarkerVerdict::Mismatch => RedisLookup::Mismatch,
        MarkerVerdict::Miss => RedisLookup::Miss,
        MarkerVerdict::Processing => RedisLookup::Processing,
        MarkerVerdict::Unreadable => RedisLookup::Error,
    });
}
