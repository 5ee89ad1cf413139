//! Prometheus metrics at `GET /metrics`, in the text exposition format (version 0.0.4).
//!
//! A tiny hand-rolled registry instead of the `prometheus` crate: a handful of counters with
//! static label values need a mutex-guarded map and a renderer, not a dependency tree.
//! Counters are process-global so a background job can count without threading a handle
//! through; each process exposes its own (Prometheus sums across instances).
//!
//! Hooks for other modules (listed for the job authors in `notes/metrics-hooks.md`):
//! [`webhook_event`], [`reconciliation`], [`email`], [`refund`], [`outbox`].
//! The pay path counts itself through [`pay_outcome`] and [`redis_lookup`].

use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// `(metric name, sorted label pairs)` → value.
type Series = BTreeMap<(&'static str, Vec<(&'static str, String)>), u64>;

static COUNTERS: Mutex<Series> = Mutex::new(BTreeMap::new());

/// Every counter this process may expose: name and help. Rendering goes through this table,
/// so a family is documented once and shown (at zero) before its first increment.
const COUNTER_HELP: &[(&str, &str)] = &[
    (
        "payonce_pay_requests_total",
        "Pay requests by HTTP status and outcome (attempt status or problem code).",
    ),
    (
        "payonce_pay_replays_total",
        "Pay answers replayed from a stored result, by where it was read (memory, redis or database).",
    ),
    (
        "payonce_pay_conflicts_total",
        "Pay requests answered 409, by problem code.",
    ),
    (
        "payonce_pay_key_mismatches_total",
        "Pay requests answered 422 KEY_REUSED_WITH_DIFFERENT_DETAILS.",
    ),
    (
        "payonce_pay_rate_limited_total",
        "Pay requests answered 429 RATE_LIMITED, by bucket.",
    ),
    (
        "payonce_redis_lookups_total",
        "Redis fast path steps by result (claimed, replay, mismatch, processing, miss, skipped, error).",
    ),
    (
        "payonce_webhook_events_total",
        "Provider webhook deliveries by result (e.g. applied, duplicate, parked, bad_signature).",
    ),
    (
        "payonce_reconciliation_total",
        "Reconciliation job results per attempt (e.g. succeeded, declined, redriven, failed, manual_review).",
    ),
    (
        "payonce_emails_total",
        "Confirmation email job runs by result (e.g. sent, already_sent).",
    ),
    (
        "payonce_refunds_total",
        "Refund requests by result (e.g. refunded, replayed, failed).",
    ),
    (
        "payonce_outbox_total",
        "Outbox rows by result (e.g. executed_inline, drained, failed).",
    ),
];

fn inc(name: &'static str, labels: &[(&'static str, &str)]) {
    debug_assert!(COUNTER_HELP.iter().any(|(n, _)| *n == name), "{name}");
    let mut key: Vec<(&'static str, String)> =
        labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    key.sort();
    // A poisoned lock only means another thread panicked mid-increment; the map is still
    // a valid map, so keep counting.
    let mut map = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    *map.entry((name, key)).or_insert(0) += 1;
}

/// One pay answer: its HTTP status and outcome (`succeeded`, `processing`, or the problem
/// code such as `IN_PROGRESS`); `replayed` with where the stored answer came from.
pub(crate) fn pay_outcome(status: u16, outcome: &str, replayed_from: Option<&str>) {
    let status_s = status.to_string();
    inc(
        "payonce_pay_requests_total",
        &[("status", &status_s), ("outcome", outcome)],
    );
    if let Some(source) = replayed_from {
        inc("payonce_pay_replays_total", &[("source", source)]);
    }
    match status {
        409 => inc("payonce_pay_conflicts_total", &[("code", outcome)]),
        422 => inc("payonce_pay_key_mismatches_total", &[]),
        _ => {}
    }
}

/// A pay request refused by the rate limit (`bucket`: `requests` or `new_attempts`).
pub(crate) fn rate_limited(bucket: &'static str) {
    inc("payonce_pay_rate_limited_total", &[("bucket", bucket)]);
}

/// One step of the Redis fast path.
pub(crate) fn redis_lookup(result: &'static str) {
    inc("payonce_redis_lookups_total", &[("result", result)]);
}

/// Hook: one webhook delivery handled, by `result` (`applied`, `duplicate`, `parked`,
/// `bad_signature`, `stale`, …). Call once per delivery.
#[allow(dead_code)] // a hook for the webhook handler
pub(crate) fn webhook_event(result: &'static str) {
    inc("payonce_webhook_events_total", &[("result", result)]);
}

/// Hook: the reconciliation job settled (or flagged) one attempt, by `result`
/// (`succeeded`, `declined`, `redriven`, `failed`, `manual_review`, …).
#[allow(dead_code)] // a hook for the reconciliation job
pub(crate) fn reconciliation(result: &'static str) {
    inc("payonce_reconciliation_total", &[("result", result)]);
}

/// Hook: one run of the confirmation email job, by `result` (`sent`, `already_sent`, …).
#[allow(dead_code)] // a hook for the email job
pub(crate) fn email(result: &'static str) {
    inc("payonce_emails_total", &[("result", result)]);
}

/// Hook: one refund request, by `result` (`refunded`, `replayed`, `failed`, …).
#[allow(dead_code)] // a hook for the refund endpoint
pub(crate) fn refund(result: &'static str) {
    inc("payonce_refunds_total", &[("result", result)]);
}

/// Hook: one outbox row handled, by `result` (`executed_inline`, `drained`, `failed`, …).
#[allow(dead_code)] // a hook for the outbox worker
pub(crate) fn outbox(result: &'static str) {
    inc("payonce_outbox_total", &[("result", result)]);
}

/// Age thresholds (seconds) of the "attempts stuck in processing" gauge.
const STUCK_AGES: &[i64] = &[0, 60, 300, 3600];

/// Label values and text must not break the exposition format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The counters, as exposition text.
fn render_counters(out: &mut String) {
    let map = COUNTERS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (name, help) in COUNTER_HELP {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for ((n, l), v) in map.range((*name, Vec::new())..) {
            if n != name {
                break;
            }
            let _ = writeln!(out, "{name}{} {v}", labels(l));
        }
    }
}

/// Attempts in `processing` whose creation is older than each of [`STUCK_AGES`], computed
/// from the store at scrape time (every process sees the same database).
async fn stuck_attempts(state: &AppState, now: i64) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let mut out = Vec::with_capacity(STUCK_AGES.len());
    for &age in STUCK_AGES {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM attempts WHERE status = 'processing' AND created_at <= $1",
        )
        .bind(now - age * 1000)
        .fetch_one(state.store.pool())
        .await?;
        out.push((age, n));
    }
    Ok(out)
}

/// `GET /metrics`.
pub(crate) async fn serve(State(state): State<AppState>) -> Response {
    let mut out = String::with_capacity(4096);
    render_counters(&mut out);
    let name = "payonce_attempts_processing";
    let _ = writeln!(
        out,
        "# HELP {name} Attempts still processing whose creation is older than older_than_seconds (0: all)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    match stuck_attempts(
        &state,
        crate::clock::Clock::now_ms(&crate::clock::SystemClock),
    )
    .await
    {
        Ok(rows) => {
            for (age, n) in rows {
                let _ = writeln!(out, "{name}{{older_than_seconds=\"{age}\"}} {n}");
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot count processing attempts"),
    }
    let up = "payonce_redis_up";
    let _ = writeln!(
        out,
        "# HELP {up} 1 when the Redis fast path is configured and usable, 0 when degraded to the database, absent without --redis-url."
    );
    let _ = writeln!(out, "# TYPE {up} gauge");
    if let Some(redis) = &state.redis {
        let _ = writeln!(out, "{up} {}", u8::from(redis.is_up()));
    }
    let mut res = (StatusCode::OK, out).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_help_type_and_labels() {
        pay_outcome(409, "IN_PROGRESS", None);
        pay_outcome(200, "succeeded", Some("redis"));
        let mut out = String::new();
        render_counters(&mut out);
        assert!(out.contains("# TYPE payonce_pay_requests_total counter"));
        assert!(out.contains("payonce_pay_requests_total{outcome=\"IN_PROGRESS\",status=\"409\"} "));
        assert!(out.contains("payonce_pay_conflicts_total{code=\"IN_PROGRESS\"} "));
        assert!(out.contains("payonce_pay_replays_total{source=\"redis\"} "));
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
