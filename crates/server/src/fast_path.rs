//! The pay request around the database rules: the rate limit, the optional Redis fast
//! path (`--redis-url`), and the metrics of every answer.
//!
//! # The Redis fast path
//! Redis only ever saves work; the database's `UNIQUE(user_id, idem_key)` stays the one
//! guard of "charged once". So:
//! 1. `SET idem:{user}:{key} <processing marker> NX PX <lease> GET` claims the key in Redis
//!    in one round trip, before the database claim.
//! 2. Claimed in Redis → the request runs the full database path anyway (a Redis claim
//!    never skips the database claim: Redis may have been flushed or failed over). A final
//!    answer is then cached from the database row: status, exact body bytes, fingerprint
//!    and the attempt's version/amount, for the key's remaining retention. A non-final
//!    answer deletes our marker (compare-and-delete, so a newer owner's stays).
//! 3. A cached final answer is checked exactly as the database row would be
//!    ([`pay::decide`] on the same fields): matching details replay the bytes with
//!    `Idempotent-Replayed: true`; different details never replay: the 422 is answered by
//!    the database path (it carries the attempt's current status).
//! 4. Someone else's marker → poll Redis for the final answer until the in-progress wait
//!    ends, then (or on a miss, an error, or a stale marker) the database path decides.
//! 5. Any Redis failure → the database path. Nothing here can fail a request.
//!
//! Before all of that, before the order is even read, [`replay_first`] asks Redis with a
//! plain `GET` and replays a matching final entry with no SQL at all; on a miss it replays
//! from the key row and puts the entry back. Only what it cannot replay reaches step 1.
//!
//! The key carries the user id (`idem:{user}:{key}`; neither may contain `:`), and the entry
//! repeats it, so one user's lookup can never read another's answer.

use crate::error::{AppError, AppResult};
use crate::metrics;
use crate::pay::{self, PayAnswer};
use crate::redis_cache::{CacheError, RedisCache};
use crate::store::attempts as db;
use crate::store::orders::OrderRow;
use crate::AppState;
use payonce_protocol::{AttemptStatus, IdempotencyKey, PayRequest};
use payonce_rules::pay::replay_of;
use payonce_rules::policy::ttl_ms;
use payonce_rules::{Answer, Final, Record, Terms};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::time::Instant;

/// How often a request waiting on another request's Redis marker looks again.
const POLL: Duration = Duration::from_millis(25);

/// Compare-and-delete: removes the key only if it still holds our marker.
const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// What Redis holds under `idem:{user}:{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase", deny_unknown_fields)]
enum Entry {
    /// A request claimed the key in Redis and is running the database path.
    #[serde(rename_all = "camelCase")]
    Processing {
        /// Unique per request: only its owner deletes it.
        token: String,
    },
    /// The attempt's final record, as stored in the database (processing records and
    /// tombstones are never cached), flat so the stored body bytes are one member.
    #[serde(rename_all = "camelCase")]
    Final {
        user: String,
        order_id: String,
        status: AttemptStatus,
        fingerprint: String,
        order_version: i64,
        amount: i64,
        currency: String,
        response_status: u16,
        body: String,
        #[serde(default)]
        id: String,
        /// Absent in an entry written before it was kept: 0, so memory never keeps it.
        #[serde(default)]
        expires_at: i64,
    },
}

impl Entry {
    fn record(self) -> Option<Record> {
        let Entry::Final {
            user,
            order_id,
            status,
            fingerprint,
            order_version,
            amount,
            currency,
            response_status,
            body,
            id,
            expires_at,
        } = self
        else {
            return None;
        };
        let terms = Terms {
            user,
            order_id,
            fingerprint,
            order_version,
            amount,
            currency,
        };
        let answer = Answer {
            status: response_status,
            body,
        };
        Some(Record::Final(Final {
            id,
            terms,
            status,
            answer,
            expires_at,
        }))
    }

    fn of(f: &Final) -> Self {
        let t = f.terms.clone();
        Entry::Final {
            user: t.user,
            order_id: t.order_id,
            status: f.status,
            fingerprint: t.fingerprint,
            order_version: t.order_version,
            amount: t.amount,
            currency: t.currency,
            response_status: f.answer.status,
            body: f.answer.body.clone(),
            id: f.id.clone(),
            expires_at: f.expires_at,
        }
    }
}

/// The Redis key of `(user, key)`.
fn redis_key(user: &str, key: &IdempotencyKey) -> String {
    format!("idem:{user}:{}", key.as_str())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// One pay request after authentication and input checks: rate limit, fast path, the
/// database rules, and its metrics.
pub(crate) async fn pay(
    state: AppState,
    user: String,
    order: OrderRow,
    key: IdempotencyKey,
    req: PayRequest,
    first_row: Option<Record>,
) -> AppResult<PayAnswer> {
    let mut source = "database";
    let result = match state.limits.request(&user) {
        Err(e) => Err(e),
        Ok(()) => match state.redis.clone() {
            None => {
                let deadline = Instant::now() + state.config.in_progress_wait;
                pay::run(&state, &user, &order, &key, &req, deadline, first_row).await
            }
            Some(redis) => {
                let (r, from_redis) =
                    with_redis(&redis, state, user, order, key, req, first_row).await;
                if from_redis {
                    source = "redis";
                }
                r
            }
        },
    };
    record(&result, source);
    result
}

/// What [`replay_first`] found.
// One value per request, moved once into the full path: boxing the row would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum First {
    /// The request retries a finished attempt: its stored answer (or the rate limit's
    /// refusal), complete.
    Answered(AppResult<PayAnswer>),
    /// Anything else: the full path decides, starting from the key row read here when there
    /// was one (`None`: no row, or it could not be read; the full path looks again).
    Continue(Option<Record>),
}

/// The replay of a finished attempt, before the order is read (`replay_of` in
/// crates/rules/src/pay.rs says why that is safe): from Redis when it holds the final answer (no SQL at all), else
/// from the caller's key row (one `SELECT`). A Redis miss, a Redis failure, a mismatch, a
/// key in flight or a new key all continue to the full path, which answers exactly as
/// before; the database stays the only guard of claims.
pub(crate) async fn replay_first(
    state: &AppState,
    user: &str,
    order_id: &str,
    key: &IdempotencyKey,
    req: &PayRequest,
) -> First {
    let r = pay::request(user, order_id, req, None);
    // This process replayed it before: no round trip at all (`replay_cache` says why the
    // copy answers exactly as the record would).
    if let Some(record) = state.replays.get(user, key.as_str(), state.clock.now_ms()) {
        if let Some(answer) = replay_of(&record, &r) {
            return First::Answered(replayed(state, user, PayAnswer::replay(answer), "memory"));
        }
    }
    let mut refill = None;
    if let Some(redis) = &state.redis {
        let rkey = redis_key(user, key);
        let mut get = redis::cmd("GET");
        get.arg(&rkey);
        match redis.query::<Option<String>>(&get).await {
            Ok(Some(value)) => {
                let record = serde_json::from_str::<Entry>(&value)
                    .ok()
                    .and_then(Entry::record);
                if let Some(record) = record {
                    if let Some(answer) = replay_of(&record, &r) {
                        state.replays.put(user, key.as_str(), &record);
                        return First::Answered(replayed(
                            state,
                            user,
                            PayAnswer::replay(answer),
                            "redis",
                        ));
                    }
                }
            }
            // Flushed or expired: if the database replays it, put it back.
            Ok(None) => refill = Some((redis, rkey)),
            // The breaker is open or Redis failed: the database answers (already counted).
            Err(_) => {}
        }
    }
    let record = match db::find(state.store.pool(), user, key.as_str()).await {
        Ok(record) => record,
        // The full path reads again and answers the error itself.
        Err(_) => return First::Continue(None),
    };
    let Some(answer) = record.as_ref().and_then(|rec| replay_of(rec, &r)) else {
        // "No record" is not handed on: read before the order, it is older than the full
        // path's own lookup would be, and a stale "new key" would cost a claim transaction
        // that loses the slot. The full path looks again; a new key pays one more `SELECT`
        // than a replay.
        return First::Continue(record);
    };
    let Some(record) = record else {
        return First::Continue(None);
    };
    state.replays.put(user, key.as_str(), &record);
    if let (Some((redis, rkey)), Some((value, ttl))) = (refill, entry_of(state, &record)) {
        // NX: a marker or entry written meanwhile is newer than this record's copy.
        let mut set = redis::cmd("SET");
        set.arg(&rkey).arg(value).arg("NX").arg("PX").arg(ttl);
        let _ = redis.query::<Option<String>>(&set).await;
    }
    First::Answered(replayed(state, user, PayAnswer::replay(answer), "database"))
}

/// A replay found by [`replay_first`], through the per-request rate limit and counted like
/// any other answer.
fn replayed(state: &AppState, user: &str, answer: PayAnswer, source: &str) -> AppResult<PayAnswer> {
    let result = state.limits.request(user).map(|()| answer);
    if result.is_ok() && source == "redis" {
        metrics::redis_lookup("replay");
    }
    record(&result, source);
    result
}

/// Counts one answer.
fn record(result: &AppResult<PayAnswer>, source: &str) {
    match result {
        Ok(a) => {
            let outcome = match a.status() {
                200 => "succeeded".to_owned(),
                202 => "processing".to_owned(),
                _ => serde_json::from_str::<serde_json::Value>(&a.answer.body)
                    .ok()
                    .and_then(|v| v["code"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "unknown".to_owned()),
            };
            metrics::pay_outcome(a.status(), &outcome, a.replayed.then_some(source));
        }
        Err(e) => {
            let p = e.to_problem();
            metrics::pay_outcome(p.status, p.code.as_str(), None);
        }
    }
}

/// The fast path. Returns the answer and whether it was served from Redis.
async fn with_redis(
    redis: &RedisCache,
    state: AppState,
    user: String,
    order: OrderRow,
    key: IdempotencyKey,
    req: PayRequest,
    first_row: Option<Record>,
) -> (AppResult<PayAnswer>, bool) {
    let deadline = Instant::now() + state.config.in_progress_wait;
    let rkey = redis_key(&user, &key);
    let marker = match serde_json::to_string(&Entry::Processing {
        token: uuid::Uuid::new_v4().to_string(),
    }) {
        Ok(m) => m,
        Err(e) => return (Err(AppError::internal(e.to_string())), false),
    };
    let mut set = redis::cmd("SET");
    set.arg(&rkey)
        .arg(&marker)
        .arg("NX")
        .arg("PX")
        .arg(ms(state.config.lease))
        .arg("GET");
    let existing = match redis.query::<Option<String>>(&set).await {
        Ok(v) => v,
        Err(e) => {
            metrics::redis_lookup(lookup_label(&e));
            let r = pay::run(&state, &user, &order, &key, &req, deadline, first_row).await;
            return (r, false);
        }
    };
    let Some(mut value) = existing else {
        // Ours in Redis. The database claim still decides.
        metrics::redis_lookup("claimed");
        let r = pay::run(&state, &user, &order, &key, &req, deadline, first_row).await;
        match &r {
            Ok(a) if a.is_final() => cache_final(redis, &state, &user, &key, &rkey).await,
            _ => release(redis, &rkey, &marker).await,
        }
        return (r, false);
    };
    // Someone else's entry: a final answer, or a marker to wait on.
    loop {
        match serde_json::from_str::<Entry>(&value) {
            Ok(entry @ Entry::Final { .. }) => {
                let Some(record) = entry.record() else { break };
                if let Some(answer) =
                    replay_of(&record, &pay::request(&user, &order.id, &req, Some(&order)))
                {
                    metrics::redis_lookup("replay");
                    return (Ok(PayAnswer::replay(answer)), true);
                }
                // Different details (or an entry that is not this user's): never replay;
                // the database path answers (422 with the attempt's current status).
                metrics::redis_lookup("mismatch");
                break;
            }
            Ok(Entry::Processing { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
                let mut get = redis::cmd("GET");
                get.arg(&rkey);
                match redis.query::<Option<String>>(&get).await {
                    Ok(Some(v)) => value = v,
                    Ok(None) => {
                        // Flushed, expired or released: the database knows.
                        metrics::redis_lookup("miss");
                        break;
                    }
                    Err(e) => {
                        metrics::redis_lookup(lookup_label(&e));
                        break;
                    }
                }
            }
            Ok(Entry::Processing { .. }) => {
                metrics::redis_lookup("processing");
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "unreadable redis entry; using the database");
                metrics::redis_lookup("error");
                break;
            }
        }
    }
    // Time may have passed waiting on someone else's marker: look the key up afresh.
    let r = pay::run(&state, &user, &order, &key, &req, deadline, None).await;
    // The marker's owner caches the answer; a waiter that got a final answer from the
    // database fills the cache too if Redis lost it (a flush, a failover).
    if let Ok(a) = &r {
        if a.is_final() {
            cache_final_if_absent(redis, &state, &user, &key, &rkey).await;
        }
    }
    (r, false)
}

fn lookup_label(e: &CacheError) -> &'static str {
    match e {
        CacheError::Skipped => "skipped",
        CacheError::Failed(_) => "error",
    }
}

/// Caches the final answer stored for `(user, key)`, for the rest of its retention.
async fn cache_final(
    redis: &RedisCache,
    state: &AppState,
    user: &str,
    key: &IdempotencyKey,
    rkey: &str,
) {
    if let Some((value, ttl)) = final_entry(state, user, key).await {
        let mut set = redis::cmd("SET");
        set.arg(rkey).arg(value).arg("PX").arg(ttl);
        let _ = redis.query::<Option<String>>(&set).await;
    }
}

/// Like [`cache_final`], but only over a missing key or a processing marker (never over a
/// newer final entry, which would be the same anyway).
async fn cache_final_if_absent(
    redis: &RedisCache,
    state: &AppState,
    user: &str,
    key: &IdempotencyKey,
    rkey: &str,
) {
    let mut get = redis::cmd("GET");
    get.arg(rkey);
    match redis.query::<Option<String>>(&get).await {
        Ok(Some(v)) if matches!(serde_json::from_str(&v), Ok(Entry::Final { .. })) => {}
        Ok(_) => cache_final(redis, state, user, key, rkey).await,
        Err(_) => {}
    }
}

/// The cache entry (JSON) and its time to live (ms) for the stored record of `(user, key)`.
async fn final_entry(state: &AppState, user: &str, key: &IdempotencyKey) -> Option<(String, u64)> {
    let record = db::find(state.store.pool(), user, key.as_str())
        .await
        .ok()??;
    entry_of(state, &record)
}

/// The cache entry (JSON) and its time to live (ms) for a final record: the cache must not
/// outlive the database's key, so it expires with it.
fn entry_of(state: &AppState, record: &Record) -> Option<(String, u64)> {
    let Record::Final(f) = record else {
        return None;
    };
    let ttl = ttl_ms(f.expires_at, state.clock.now_ms())?;
    Some((serde_json::to_string(&Entry::of(f)).ok()?, ttl))
}

/// Deletes our processing marker, if it is still ours.
async fn release(redis: &RedisCache, rkey: &str, marker: &str) {
    let mut eval = redis::cmd("EVAL");
    eval.arg(RELEASE_SCRIPT).arg(1).arg(rkey).arg(marker);
    let _ = redis.query::<i64>(&eval).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_exact_body_bytes() {
        let f = Final {
            id: "att".into(),
            terms: Terms {
                user: "alice".into(),
                order_id: "o1".into(),
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
        let json = serde_json::to_string(&Entry::of(&f)).unwrap();
        let back = serde_json::from_str::<Entry>(&json).unwrap();
        assert_eq!(back.record(), Some(Record::Final(f)));
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
