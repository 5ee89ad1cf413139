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
use crate::pay::{self, NextAction, PayAnswer};
use crate::redis_cache::{CacheError, RedisCache};
use crate::store::attempts::{self as db, AttemptRow};
use crate::store::orders::OrderRow;
use crate::{now_ms, AppState};
use payonce_protocol::{AttemptStatus, IdempotencyKey, PayRequest};
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
    /// The attempt's final answer, as stored in the database.
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
    },
}

impl Entry {
    /// The cached answer as the attempt row it was copied from, so [`pay::decide`] applies
    /// rule 2 to it exactly as to the database row.
    fn as_row(&self) -> Option<AttemptRow> {
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
        } = self
        else {
            return None;
        };
        Some(AttemptRow {
            id: String::new(),
            user_id: user.clone(),
            order_id: order_id.clone(),
            status: *status,
            fingerprint: Some(fingerprint.clone()),
            order_version: Some(*order_version),
            amount: Some(*amount),
            currency: Some(currency.clone()),
            payment_method_id: None,
            provider_key: None,
            locked_until: None,
            response_status: Some(i64::from(*response_status)),
            response_body: Some(body.clone()),
            expires_at: None,
        })
    }

    /// The entry for a final database row; `None` for anything else (processing rows,
    /// tombstones, rows without an answer are never cached).
    fn from_row(row: &AttemptRow) -> Option<Self> {
        if !row.status.is_final() || row.status == AttemptStatus::Cancelled {
            return None;
        }
        Some(Entry::Final {
            user: row.user_id.clone(),
            order_id: row.order_id.clone(),
            status: row.status,
            fingerprint: row.fingerprint.clone()?,
            order_version: row.order_version?,
            amount: row.amount?,
            currency: row.currency.clone()?,
            response_status: u16::try_from(row.response_status?).ok()?,
            body: row.response_body.clone()?,
        })
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
    first_row: Option<AttemptRow>,
) -> AppResult<PayAnswer> {
    let mut source = "database";
    let result = match state.limits.request(&user) {
        Err(e) => Err(e),
        Ok(()) => match state.redis.clone() {
            None => {
                let deadline = Instant::now() + state.config.in_progress_wait;
                pay::run(state, user, order, key, req, deadline, first_row).await
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
    Continue(Option<AttemptRow>),
}

/// The replay of a finished attempt, before the order is read ([`pay::replay_from_row`]
/// says why that is safe): from Redis when it holds the final answer (no SQL at all), else
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
    // This process replayed it before: no round trip at all (`replay_cache` says why the
    // copy answers exactly as the row would).
    if let Some(row) = state.replays.get(user, key.as_str(), crate::now_ms()) {
        if let Some(answer) = pay::replay_from_row(&row, user, order_id, req) {
            return First::Answered(replayed(state, user, answer, "memory"));
        }
    }
    let mut refill = None;
    if let Some(redis) = &state.redis {
        let rkey = redis_key(user, key);
        let mut get = redis::cmd("GET");
        get.arg(&rkey);
        match redis.query::<Option<String>>(&get).await {
            Ok(Some(value)) => {
                let row = serde_json::from_str::<Entry>(&value)
                    .ok()
                    .and_then(|entry| entry.as_row());
                if let Some(row) = row {
                    if let Some(answer) = pay::replay_from_row(&row, user, order_id, req) {
                        state.replays.put(user, key.as_str(), &row);
                        return First::Answered(replayed(state, user, answer, "redis"));
                    }
                }
            }
            // Flushed or expired: if the database replays it, put it back.
            Ok(None) => refill = Some((redis, rkey)),
            // The breaker is open or Redis failed: the database answers (already counted).
            Err(_) => {}
        }
    }
    let row = match db::find(state.store.pool(), user, key.as_str()).await {
        Ok(row) => row,
        // The full path reads again and answers the error itself.
        Err(_) => return First::Continue(None),
    };
    let Some(answer) = row
        .as_ref()
        .and_then(|r| pay::replay_from_row(r, user, order_id, req))
    else {
        // "No row" is not handed on: read before the order, it is older than the full path's
        // own lookup would be, and a stale "new key" would cost a claim transaction that
        // loses the slot. The full path looks again; a new key pays one more `SELECT` than a
        // replay.
        return First::Continue(row);
    };
    if let Some(r) = &row {
        state.replays.put(user, key.as_str(), r);
    }
    if let (Some((redis, rkey)), Some((value, ttl))) = (refill, row.as_ref().and_then(entry_of)) {
        // NX: a marker or entry written meanwhile is newer than this row's copy.
        let mut set = redis::cmd("SET");
        set.arg(&rkey).arg(value).arg("NX").arg("PX").arg(ttl);
        let _ = redis.query::<Option<String>>(&set).await;
    }
    First::Answered(replayed(state, user, answer, "database"))
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
                _ => serde_json::from_str::<serde_json::Value>(a.body())
                    .ok()
                    .and_then(|v| v["code"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "unknown".to_owned()),
            };
            metrics::pay_outcome(a.status(), &outcome, a.replayed().then_some(source));
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
    first_row: Option<AttemptRow>,
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
            let r = pay::run(state, user, order, key, req, deadline, first_row).await;
            return (r, false);
        }
    };
    let Some(mut value) = existing else {
        // Ours in Redis. The database claim still decides.
        metrics::redis_lookup("claimed");
        let r = pay::run(
            state.clone(),
            user.clone(),
            order,
            key.clone(),
            req,
            deadline,
            first_row,
        )
        .await;
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
                if let Some(answer) = replay(&entry, &user, &order, &req) {
                    metrics::redis_lookup("replay");
                    return (Ok(answer), true);
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
    let r = pay::run(
        state.clone(),
        user.clone(),
        order,
        key.clone(),
        req,
        deadline,
        None,
    )
    .await;
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

/// Rule 2 on a cached final answer: the replay when the request's details match.
fn replay(entry: &Entry, user: &str, order: &OrderRow, req: &PayRequest) -> Option<PayAnswer> {
    let row = entry.as_row()?;
    if row.user_id != user {
        return None;
    }
    let fp = pay::request_fingerprint(&row, order, user, req);
    match pay::decide(Some(&row), fp.as_deref(), &order.id, now_ms(), false) {
        NextAction::Replay { status, body } => Some(PayAnswer::replay(status, body)),
        _ => None,
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

/// The cache entry (JSON) and its time to live (ms) for the stored row of `(user, key)`.
async fn final_entry(state: &AppState, user: &str, key: &IdempotencyKey) -> Option<(String, u64)> {
    let row = db::find(state.store.pool(), user, key.as_str())
        .await
        .ok()??;
    entry_of(&row)
}

/// The cache entry (JSON) and its time to live (ms) for a final row.
fn entry_of(row: &AttemptRow) -> Option<(String, u64)> {
    let entry = Entry::from_row(row)?;
    // The cache must not outlive the database's key: it expires with the row.
    let ttl = u64::try_from(row.expires_at? - now_ms())
        .ok()
        .filter(|t| *t > 0)?;
    Some((serde_json::to_string(&entry).ok()?, ttl))
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

    fn final_entry(user: &str, fp: &str) -> Entry {
        Entry::Final {
            user: user.into(),
            order_id: "o1".into(),
            status: AttemptStatus::Succeeded,
            fingerprint: fp.into(),
            order_version: 1,
            amount: 100,
            currency: "USD".into(),
            response_status: 200,
            body: "{\"status\":\"succeeded\",\"x\":\"\\u00e9 \\\"q\\\"\"}".into(),
        }
    }

    #[test]
    fn entries_round_trip_with_exact_body_bytes() {
        let e = final_entry("alice", "fp");
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), e);
        let row = e.as_row().unwrap();
        assert_eq!(Entry::from_row(&row), Some(e));
        let p = Entry::Processing { token: "t".into() };
        assert!(p.as_row().is_none());
        assert_eq!(
            serde_json::from_str::<Entry>(&serde_json::to_string(&p).unwrap()).unwrap(),
            p
        );
    }

    #[test]
    fn processing_rows_and_tombstones_are_never_cached() {
        let mut row = final_entry("alice", "fp").as_row().unwrap();
        row.status = AttemptStatus::Processing;
        assert_eq!(Entry::from_row(&row), None);
        row.status = AttemptStatus::Cancelled;
        row.fingerprint = None;
        assert_eq!(Entry::from_row(&row), None);
    }

    /// A cached answer replays only for its own user and the same details, through the same
    /// fingerprint rule as the database row.
    #[test]
    fn a_cached_answer_replays_only_for_its_user_and_details() {
        use payonce_protocol::OrderStatus;
        let order = OrderRow {
            id: "o1".into(),
            status: OrderStatus::Paid,
            version: 1,
            items: Vec::new(),
            coupon: None,
            address: None,
            subtotal: 100,
            discount: 0,
            amount: 100,
            currency: "USD".into(),
            active_attempt: None,
            payment_id: None,
        };
        let req = |method: &str| PayRequest {
            order_version: 1,
            payment_method_id: method.into(),
        };
        let fp = pay::fingerprint(&pay::Details {
            user: "alice",
            order_id: "o1",
            order_version: 1,
            amount: 100,
            currency: "USD",
            payment_method_id: "pm_card_approve",
        });
        let entry = final_entry("alice", &fp);
        let Entry::Final { body, .. } = &entry else {
            unreachable!()
        };
        let answer = replay(&entry, "alice", &order, &req("pm_card_approve")).expect("replay");
        assert_eq!((answer.status(), answer.body()), (200, body.as_str()));
        assert!(answer.replayed());
        assert!(replay(&entry, "alice", &order, &req("pm_card_decline")).is_none());
        assert!(replay(&entry, "bob", &order, &req("pm_card_approve")).is_none());
    }

    #[test]
    fn keys_are_scoped_by_user() {
        let k = IdempotencyKey::parse("0123456789abcdef").unwrap();
        assert_eq!(redis_key("alice", &k), "idem:alice:0123456789abcdef");
        assert_ne!(redis_key("alice", &k), redis_key("bob", &k));
    }
}
