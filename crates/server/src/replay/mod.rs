//! A finished attempt's answer, from the nearest copy that has it: this process's memory
//! (`memory.rs`), then Redis (`--redis-url`, `redis.rs`), then the caller's key row. Every
//! copy is a [`Record`] checked by the same rule (`replay_of`, crates/rules/src/pay_key.rs), so
//! every copy answers as the database would; anything a copy cannot answer goes on to the pay
//! rules (`src/ops/pay.rs`).
//!
//! Redis only ever saves work; the database's `UNIQUE(user_id, idem_key)` stays the one
//! guard of "charged once". A final answer is cached from the database row for the key's
//! remaining retention (never longer: it expires with the key); processing records and
//! tombstones are never cached; any Redis failure means "ask the database". The Redis key
//! carries the user id (`idem:{user}:{key}`; neither may contain `:`), and the entry repeats
//! it, so one user's lookup can never read another's answer. The claim marker that spares
//! duplicates of a key in flight their database polls is `marker.rs`.

pub(crate) mod marker;
pub(crate) mod memory;
pub(crate) mod redis;

use self::redis::{CacheError, RedisCache};
use crate::clock::Clock;
use crate::metrics::{RedisLookup, ReplaySource};
use crate::reply::Reply;
use crate::store::attempts as db;
use crate::store::orders::{get_order_and_key, OrderRow};
use crate::store::Store;
use axum::extract::FromRef;
use payonce_protocol::{IdempotencyKey, PayRequest};
use payonce_rules::pay_key::replay_of;
use payonce_rules::policy::ttl_ms;
use payonce_rules::{Final, Record};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What the replay path reads: the store, the two caches and the clock. A sub-state: the
/// callers hand in any state it is taken from (`FromRef`, `src/state.rs`).
#[derive(Clone)]
pub(crate) struct Replays {
    pub(crate) store: Store,
    /// The Redis fast path, when `--redis-url` is set.
    pub(crate) redis: Option<Arc<RedisCache>>,
    /// Final attempts this process has replayed.
    pub(crate) replays: Arc<memory::ReplayCache>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The lease of a claim (`Policy::lease_ms`): a claim marker lives as long.
    pub(crate) policy: payonce_rules::Policy,
}

/// What Redis holds under `idem:{user}:{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub(crate) enum Entry {
    /// A request claimed the key in Redis and is running the database path.
    Processing {
        /// Unique per request: only its owner deletes it.
        token: String,
    },
    /// The attempt's final record as stored in the database.
    Final(Final),
}

/// The Redis key of `(user, key)`.
pub(crate) fn redis_key(user: &str, key: &IdempotencyKey) -> String {
    format!("idem:{user}:{}", key.as_str())
}

/// The metric label of a Redis step that did not happen.
pub(crate) fn lookup_label(e: &CacheError) -> RedisLookup {
    match e {
        CacheError::Skipped => RedisLookup::Skipped,
        CacheError::Failed(_) | CacheError::Tls(_) => RedisLookup::Error,
    }
}

/// `GET` of an entry (an unreadable one is `None`: the database knows).
pub(crate) async fn get(redis: &RedisCache, rkey: &str) -> Result<Option<Entry>, CacheError> {
    let mut get = ::redis::cmd("GET");
    get.arg(rkey);
    let value = redis.query::<Option<String>>(&get).await?;
    Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
}

/// Caches a final record under `rkey` for the rest of its retention; `nx`: only where
/// nothing is (a marker or entry written meanwhile is newer than this copy).
pub(crate) async fn put(
    redis: &RedisCache,
    state: &Replays,
    rkey: &str,
    record: &Record,
    nx: bool,
) {
    let Record::Final(f) = record else {
        return;
    };
    let (Some(ttl), Ok(value)) = (
        ttl_ms(f.expires_at, state.clock.now_ms()),
        serde_json::to_string(&Entry::Final(f.clone())),
    ) else {
        return;
    };
    let mut set = ::redis::cmd("SET");
    set.arg(rkey).arg(value);
    if nx {
        set.arg("NX");
    }
    set.arg("PX").arg(ttl);
    let _ = redis.query::<Option<String>>(&set).await;
}

/// Caches the stored final record of `(user, key)`, if any; `nx` as in [`put`].
pub(crate) async fn remember(state: &Replays, user: &str, key: &IdempotencyKey, nx: bool) {
    let Some(redis) = &state.redis else { return };
    if let Ok(Some(record)) = db::find(state.store.pool(), user, key.as_str()).await {
        put(redis, state, &redis_key(user, key), &record, nx).await;
    }
}

/// What [`first`] found.
// Built once per request and matched at once, never stored: boxing the order would only add
// an allocation to every first pay.
#[allow(clippy::large_enum_variant)]
pub(crate) enum First {
    /// The request retries a finished attempt: its stored answer, and where it came from
    /// (`memory`, `redis`, `database`) for the metrics.
    Answered(Reply, ReplaySource),
    /// The order and the caller's record of the key (`None`: a new key), read together:
    /// the pay rules start from them. `None`: the order is not the caller's (rule 1: 404).
    Read(Option<(OrderRow, Option<Record>)>),
    /// Nothing the rules can start from (the read failed, or a final row that does not
    /// replay, read without its order): they read again themselves.
    Continue,
}

/// The replay of a finished attempt, before the order is read (`replay_of` says why that is
/// safe). A miss, a failure, a mismatch, a key in flight or a new key all continue to the
/// pay rules, which answer exactly as they would have.
pub(crate) async fn first<S: Sync>(
    state: &S,
    user: &str,
    order_id: &str,
    key: &IdempotencyKey,
    req: &PayRequest,
) -> First
where
    Replays: FromRef<S>,
{
    let state = &Replays::from_ref(state);
    // The order is not read yet: `replay_of` needs only the record and the request.
    let r = payonce_rules::PayRequest {
        user,
        order_id,
        order_version: req.order_version,
        payment_method_id: &req.payment_method_id,
        extras: &req.extras,
        current: None,
    };
    if let Some(answer) = state.replays.replay(key.as_str(), state.clock.now_ms(), &r) {
        return First::Answered(Reply::replay(answer), ReplaySource::Memory);
    }
    let mut refill = None;
    if let Some(redis) = &state.redis {
        let rkey = redis_key(user, key);
        match get(redis, &rkey).await {
            Ok(Some(Entry::Final(f))) => {
                let record = Record::Final(f);
                if let Some(answer) = replay_of(&record, &r) {
                    state.replays.put(user, key.as_str(), &record);
                    return First::Answered(Reply::replay(answer), ReplaySource::Redis);
                }
            }
            // Flushed or expired: if the database replays it, put it back.
            Ok(None) => refill = Some((redis, rkey)),
            // A key in flight, or Redis unusable now: the database answers.
            Ok(Some(Entry::Processing { .. })) | Err(_) => {}
        }
    }
    // One read for the order (rule 1) and the key row (rule 2): a replay needs only the row
    // (the order is not even read when it is final), a new key both, and a row read with the
    // order is as fresh as the rules' own lookup.
    let pool = state.store.pool();
    let Ok(read) = get_order_and_key(pool, order_id, user, key.as_str()).await else {
        return First::Continue;
    };
    let Some((order, rec)) = read else {
        return First::Read(None);
    };
    if let Some(order) = order {
        return First::Read(Some((order, rec)));
    }
    let Some((rec, answer)) = rec.and_then(|rec| replay_of(&rec, &r).map(|a| (rec, a))) else {
        return First::Continue;
    };
    state.replays.put(user, key.as_str(), &rec);
    if let Some((redis, rkey)) = refill {
        put(redis, state, &rkey, &rec, true).await;
    }
    First::Answered(Reply::replay(answer), ReplaySource::Database)
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_protocol::AttemptStatus;
    use payonce_rules::{Answer, Terms};

    #[test]
    fn entries_round_trip_with_exact_body_bytes() {
        let f = Final {
            id: payonce_rules::ids::AttemptId::from_stored("att"),
            terms: Terms {
                user: "alice".into(),
                order_id: payonce_rules::ids::OrderId::from_stored("o1"),
                fingerprint: "fp".into(),
                order_version: 1,
                amount: 100,
                currency: "USD".into(),
            },
            status: AttemptStatus::Succeeded,
            answer: Answer {
                status: 200,
                body: "{\"status\":\"succeeded\",\"x\":\"\\u00e9 \\\"q\\\"\"}".into(),
            },
            expires_at: 5,
        };
        let json = serde_json::to_string(&Entry::Final(f.clone())).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            (value["state"].as_str(), value["body"].as_str()),
            (Some("final"), Some(f.answer.body.as_str()))
        );
        // The typed ids are stored as their text, as before they were typed.
        assert_eq!(
            (value["id"].as_str(), value["orderId"].as_str()),
            (Some("att"), Some("o1"))
        );
        assert_eq!(
            serde_json::from_str::<Entry>(&json).unwrap(),
            Entry::Final(f)
        );
        let p = Entry::Processing { token: "t".into() };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), p);
    }

    #[test]
    fn keys_are_scoped_by_user() {
        let k = IdempotencyKey::parse("0123456789abcdef").unwrap();
        assert_eq!(redis_key("alice", &k), "idem:alice:0123456789abcdef");
        assert_ne!(redis_key("alice", &k), redis_key("bob", &k));
    }
}
