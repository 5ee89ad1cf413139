//! The Redis claim marker: duplicates of a new key in flight wait on Redis, not on the
//! database. Measured on PostgreSQL (50 simultaneous pays for one new key, crates/server/
//! README.md has the figure), it halves the database transactions of such a storm against
//! the database path's own in-flight wait, for one Redis round trip per new key.
//!
//! 1. `SET idem:{user}:{key} <processing marker> NX PX <lease> GET` claims the key in Redis
//!    in one round trip, before the database claim.
//! 2. Claimed in Redis → the request runs the pay rules anyway (a Redis claim never skips
//!    the database claim: Redis may have been flushed or failed over), then caches the
//!    final answer from the database row, or deletes its marker (compare-and-delete, so a
//!    newer owner's stays).
//! 3. Someone else's final entry replays when the request's details match (`replay_of`);
//!    different details never replay: the rules answer the 422 with the current status.
//! 4. Someone else's marker → poll Redis for the final answer until the in-progress wait
//!    ends, then (or on a miss, an error, or a stale marker) the rules decide.
//! 5. Any Redis failure → the rules. Nothing here can fail a request.

use super::redis::RedisCache;
use super::{get, lookup_label, put, redis_key, remember, Entry};
use crate::error::AppResult;
use crate::metrics::{self, RedisLookup, ReplaySource};
use crate::pay;
use crate::reply::Reply;
use crate::state::AppState;
use crate::store::orders::OrderRow;
use payonce_protocol::{IdempotencyKey, PayRequest};
use payonce_rules::pay::replay_of;
use payonce_rules::Record;
use std::time::Duration;
use tokio::time::Instant;

/// How often a request waiting on another request's marker looks again.
const POLL: Duration = Duration::from_millis(25);

/// Compare-and-delete: removes the key only if it still holds our marker.
const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The pay rules behind the marker. Returns the answer and where a replay came from.
pub(crate) async fn pay(
    redis: &RedisCache,
    state: &AppState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
    req: &PayRequest,
    first: Option<Option<Record>>,
) -> (AppResult<Reply>, ReplaySource) {
    let deadline = Instant::now() + state.config.in_progress_wait;
    let rkey = redis_key(user, key);
    let token = uuid::Uuid::new_v4().to_string();
    // One string member: serialization cannot fail (an unreadable marker would only send
    // the others to the database).
    let marker = serde_json::to_string(&Entry::Processing { token }).unwrap_or_default();
    let lease = u64::try_from(state.policy.lease_ms).unwrap_or(1).max(1);
    let mut set = ::redis::cmd("SET");
    set.arg(&rkey)
        .arg(&marker)
        .arg("NX")
        .arg("PX")
        .arg(lease)
        .arg("GET");
    let existing = match redis.query::<Option<String>>(&set).await {
        Ok(v) => v,
        Err(e) => {
            metrics::redis_lookup(lookup_label(&e));
            let r = pay::run(state, user, order, key, req, deadline, first).await;
            return (r, ReplaySource::Database);
        }
    };
    if existing.is_none() {
        // Ours in Redis. The database claim still decides.
        metrics::redis_lookup(RedisLookup::Claimed);
        let r = pay::run(state, user, order, key, req, deadline, first).await;
        match r.as_ref().ok().filter(|a| a.is_final()).map(|a| &a.settled) {
            // Settled by this request: the final row it stored, no second read.
            Some(Some(stored)) => {
                let record = Record::Final((**stored).clone());
                put(redis, state, &rkey, &record, false).await;
            }
            // Final but stored by someone else (a replay): the database's row.
            Some(None) => remember(state, user, key, false).await,
            None => {
                let mut eval = ::redis::cmd("EVAL");
                eval.arg(RELEASE_SCRIPT).arg(1).arg(&rkey).arg(&marker);
                let _ = redis.query::<i64>(&eval).await;
            }
        }
        return (r, ReplaySource::Database);
    }
    // Someone else's entry: a final answer, or a marker to wait on.
    let mut entry = existing.and_then(|v| serde_json::from_str::<Entry>(&v).ok());
    loop {
        match entry {
            Some(Entry::Final(f)) => {
                let r = pay::request(user, &order.id, req, Some(order));
                if let Some(answer) = replay_of(&Record::Final(f), &r) {
                    metrics::redis_lookup(RedisLookup::Replay);
                    return (Ok(Reply::replay(answer)), ReplaySource::Redis);
                }
                // Different details (or not this user's): never replay; the rules answer
                // (422 with the attempt's current status).
                metrics::redis_lookup(RedisLookup::Mismatch);
                break;
            }
            Some(Entry::Processing { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
                match get(redis, &rkey).await {
                    Ok(Some(e)) => entry = Some(e),
                    Ok(None) => {
                        // Flushed, expired or released: the database knows.
                        metrics::redis_lookup(RedisLookup::Miss);
                        break;
                    }
                    Err(e) => {
                        metrics::redis_lookup(lookup_label(&e));
                        break;
                    }
                }
            }
            Some(Entry::Processing { .. }) => {
                metrics::redis_lookup(RedisLookup::Processing);
                break;
            }
            None => {
                tracing::warn!("unreadable redis entry; using the database");
                metrics::redis_lookup(RedisLookup::Error);
                break;
            }
        }
    }
    // Time may have passed waiting on someone else's marker: look the key up afresh.
    let r = pay::run(state, user, order, key, req, deadline, None).await;
    // The marker's owner caches the answer; a waiter that got a final answer from the
    // database fills the cache too if Redis lost it (a flush, a failover), never over a
    // final entry (which would be the same anyway).
    if matches!(&r, Ok(a) if a.is_final())
        && !matches!(get(redis, &rkey).await, Ok(Some(Entry::Final(_))) | Err(_))
    {
        remember(state, user, key, false).await;
    }
    (r, ReplaySource::Database)
}
