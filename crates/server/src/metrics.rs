//! `GET /metrics`: Prometheus text (version 0.0.4) through `prometheus-client`.
//!
//! Counters are process-global so a background job can count without threading a handle
//! through; each process exposes its own (Prometheus sums across instances). Callers pass
//! label values as enums, so a typo is a compile error and a family's values are listed
//! once, here. The one gauge that needs the database is cached for [`GAUGE_MAX_AGE_MS`] of
//! the state's clock, so scrapes cost the store at most one query per that period.

use crate::replay::redis::RedisCache;
use axum::http::{header, HeaderMap};
use payonce_protocol::{AttemptStatus, ErrorCode};
use prometheus_client::encoding::prometheus_text::encode;
pub(crate) use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;
use subtle::ConstantTimeEq;

pub(crate) use payonce_rules::policy::Bucket;

/// Label value enums spell their wire text once, in `as_str`; `=> count(family)` also
/// makes `count`, which counts one value in the `result` label of `family`.
macro_rules! label_values {
    ($( $(#[$doc:meta])* $name:ident $(=> $count:ident($family:ident))? {
        $($variant:ident => $text:literal),+ $(,)?
    } )+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum $name { $($variant),+ }

        impl $name {
            /// Every value: each series exists at zero before its first increment.
            const NAMES: &'static [&'static str] = &[$($text),+];

            pub(crate) fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        $(
            pub(crate) fn $count(result: $name) {
                inc(&METRICS.$family, &[("result", result.as_str())]);
            }
        )?
    )+};
}

label_values! {
    /// Where a replayed pay answer was read.
    ReplaySource { Memory => "memory", Redis => "redis", Database => "database" }
    /// One step of the Redis fast path.
    RedisLookup => redis_lookup(redis_lookups) {
        Claimed => "claimed", Replay => "replay", Mismatch => "mismatch",
        Processing => "processing", Miss => "miss", Skipped => "skipped", Error => "error",
    }
    /// One provider webhook delivery handled.
    WebhookResult => webhook_event(webhook_events) {
        Applied => "applied", Duplicate => "duplicate", BadSignature => "bad_signature",
        UnknownProviderKey => "unknown_provider_key", NoEffect => "no_effect",
        Unconfirmed => "unconfirmed",
    }
    /// One attempt settled (or flagged) by the reconciliation job.
    ReconcileResult => reconciliation(reconciliation) {
        Settled => "settled", ManualReview => "manual_review",
    }
    /// One run of the receipt email job: delivered, already settled by another run, due
    /// again after a transient failure, failed for good, or not sent (no address, or
    /// `--mailer none`).
    EmailResult => email(emails) {
        Sent => "sent", AlreadySent => "already_sent", Retried => "retried", Failed => "failed",
        NoAddress => "no_address", NotSent => "not_sent",
    }
    /// One refund request.
    RefundResult => refund(refunds) {
        Refunded => "refunded", Replayed => "replayed", NotAllowed => "not_allowed",
        InProgress => "in_progress",
    }
    /// One outbox row handled.
    OutboxResult => outbox(outbox) {
        ExecutedInline => "executed_inline", Drained => "drained", Inconclusive => "inconclusive",
    }
    /// A declined two-phase payment cancelled before its attempt settles, or a success for
    /// an attempt settled uncharged (src/ops/leftovers.rs): `cancelled`; `charged_meanwhile`
    /// (the customer confirmed it first: settled as charged); `retried` (not cancelled yet:
    /// the attempt stays processing); `flagged` (it charged after the attempt settled: the
    /// attempt flagged, its order held for review).
    LeftoverResult => leftover(leftover_payments) {
        Cancelled => "cancelled", ChargedMeanwhile => "charged_meanwhile", Retried => "retried",
        Flagged => "flagged",
    }
}

/// What a pay answer said: an attempt status, a problem code, or a body that names neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PayOutcome {
    Attempt(AttemptStatus),
    Problem(ErrorCode),
    Unknown,
}

impl PayOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Attempt(s) => s.as_str(),
            Self::Problem(c) => c.as_str(),
            Self::Unknown => "unknown",
        }
    }
}

/// Label sets in render order (alphabetical).
type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;

struct Metrics {
    pay_requests: Counters,
    pay_replays: Counters,
    pay_conflicts: Counters,
    pay_key_mismatches: Counter,
    pay_rate_limited: Counters,
    redis_lookups: Counters,
    webhook_events: Counters,
    reconciliation: Counters,
    emails: Counters,
    refunds: Counters,
    outbox: Counters,
    leftover_payments: Counters,
    registry: Registry,
}

/// Registers a new metric under `name` (the registry keeps a clone sharing its values).
/// Help texts have no final period: the encoder adds one.
fn reg<M: prometheus_client::registry::Metric + Clone + Default>(
    r: &mut Registry,
    name: &str,
    help: &str,
) -> M {
    let m = M::default();
    r.register(name, help, m.clone());
    m
}

fn inc_by(family: &Counters, labels: &[(&'static str, &str)], by: u64) {
    let labels = labels.iter().map(|&(k, v)| (k, v.to_owned())).collect();
    family.get_or_create(&labels).inc_by(by);
}

fn inc(family: &Counters, labels: &[(&'static str, &str)]) {
    inc_by(family, labels, 1);
}

/// Every series the labels allow, at zero.
fn zeros(family: &Counters, label: &'static str, values: &[&str]) {
    for v in values {
        inc_by(family, &[(label, v)], 0);
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut r = Registry::default();
    let m = Metrics {
        pay_requests: reg(&mut r, "payonce_pay_requests", "Pay requests by HTTP status and outcome (attempt status or problem code)"),
        pay_replays: reg(&mut r, "payonce_pay_replays", "Pay answers replayed from a stored result, by where it was read (memory, redis or database)"),
        pay_conflicts: reg(&mut r, "payonce_pay_conflicts", "Pay requests answered 409, by problem code"),
        pay_key_mismatches: reg(&mut r, "payonce_pay_key_mismatches", "Pay requests answered 422 KEY_REUSED_WITH_DIFFERENT_DETAILS"),
        pay_rate_limited: reg(&mut r, "payonce_pay_rate_limited", "Pay requests answered 429 RATE_LIMITED, by bucket"),
        redis_lookups: reg(&mut r, "payonce_redis_lookups", "Redis fast path steps by result (claimed, replay, mismatch, processing, miss, skipped, error)"),
        webhook_events: reg(&mut r, "payonce_webhook_events", "Provider webhook deliveries by result (e.g. applied, duplicate, bad_signature)"),
        reconciliation: reg(&mut r, "payonce_reconciliation", "Reconciliation job results per attempt (settled, manual_review)"),
        emails: reg(&mut r, "payonce_emails", "Receipt email job runs by result (sent, already_sent, retried, failed, no_address, not_sent)"),
        refunds: reg(&mut r, "payonce_refunds", "Refund requests by result (e.g. refunded, replayed, not_allowed)"),
        outbox: reg(&mut r, "payonce_outbox", "Outbox rows by result (executed_inline, drained, inconclusive)"),
        leftover_payments: reg(&mut r, "payonce_leftover_payments", "Uncharged payment objects cancelled before their attempt settles, and successes for attempts settled uncharged, by result (cancelled, charged_meanwhile, retried, flagged)"),
        registry: r,
    };
    // The status × outcome product only where an answer of that status has that outcome.
    for (status, s) in [
        ("200", AttemptStatus::Succeeded),
        ("202", AttemptStatus::Processing),
    ] {
        inc_by(
            &m.pay_requests,
            &[("outcome", s.as_str()), ("status", status)],
            0,
        );
    }
    let conflicts = ErrorCode::ALL.iter().filter(|c| c.http_status() == 409);
    zeros(
        &m.pay_conflicts,
        "code",
        &conflicts.map(|c| c.as_str()).collect::<Vec<_>>(),
    );
    zeros(&m.pay_replays, "source", ReplaySource::NAMES);
    zeros(
        &m.pay_rate_limited,
        "bucket",
        &Bucket::ALL.map(Bucket::label),
    );
    for (family, values) in [
        (&m.redis_lookups, RedisLookup::NAMES),
        (&m.webhook_events, WebhookResult::NAMES),
        (&m.reconciliation, ReconcileResult::NAMES),
        (&m.emails, EmailResult::NAMES),
        (&m.refunds, RefundResult::NAMES),
        (&m.outbox, OutboxResult::NAMES),
        (&m.leftover_payments, LeftoverResult::NAMES),
    ] {
        zeros(family, "result", values);
    }
    m
});

/// One pay answer: its HTTP status and outcome; `replayed_from` where the stored answer
/// came from when it is a replay.
pub(crate) fn pay_outcome(status: u16, outcome: PayOutcome, replayed_from: Option<ReplaySource>) {
    let m = &*METRICS;
    let (outcome, status_text) = (outcome.as_str(), status.to_string());
    inc(
        &m.pay_requests,
        &[("outcome", outcome), ("status", &status_text)],
    );
    if let Some(source) = replayed_from {
        inc(&m.pay_replays, &[("source", source.as_str())]);
    }
    match status {
        409 => inc(&m.pay_conflicts, &[("code", outcome)]),
        422 => {
            m.pay_key_mismatches.inc();
        }
        _ => {}
    }
}

/// A pay request refused by the rate limit.
pub(crate) fn rate_limited(bucket: Bucket) {
    inc(&METRICS.pay_rate_limited, &[("bucket", bucket.label())]);
}

/// Age thresholds (seconds) of the "attempts stuck in processing" gauge.
const STUCK_AGES: [i64; 4] = [0, 60, 300, 3600];

/// How old the stuck-attempts figures may be when scraped. A scrape after that reads the
/// store once more; scrapes in between (or at once) share the figures, so no scrape
/// interval or number of scrapers can load the database.
pub(crate) const GAUGE_MAX_AGE_MS: i64 = 10_000;

/// How long a receipt may wait for its delivery before the "receipts waiting" gauge counts
/// it: longer than a few of its retries (`payonce_rules::receipt::retry_at`).
pub(crate) const RECEIPT_LATE_SECS: i64 = 900;

/// The database figures of the gauges, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Attempts in `processing` created at least each of [`STUCK_AGES`] ago.
    pub(crate) processing: [i64; 4],
    /// Receipts not settled whose job is older than [`RECEIPT_LATE_SECS`].
    pub(crate) receipts_waiting: i64,
}

/// The figures and when (state clock, ms) they were read.
pub(crate) type GaugeCache = tokio::sync::Mutex<Option<(i64, Figures)>>;

/// The gauges' figures (the same for every process on the database), from the cache while
/// it is young enough; else from `read`, which counts processing attempts created at or
/// before each instant of its first argument (the store's `attempts::processing_before`)
/// and pending receipts created at or before its second (`jobs::waiting_since`).
async fn figures<E: std::fmt::Display>(
    cache: &GaugeCache,
    now: i64,
    read: impl AsyncFnOnce([i64; 4], i64) -> Result<Figures, E>,
) -> Option<Figures> {
    let mut cache = cache.lock().await;
    if let Some((at, figures)) = *cache {
        if now - at < GAUGE_MAX_AGE_MS {
            return Some(figures);
        }
    }
    let late = now - RECEIPT_LATE_SECS * 1000;
    match read(STUCK_AGES.map(|age| now - age * 1000), late).await {
        Ok(figures) => {
            *cache = Some((now, figures));
            Some(figures)
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot count processing attempts and receipts");
            None
        }
    }
}

/// True when `headers` carry `Authorization: Bearer <token>`. Both sides are hashed first so
/// the comparison takes the same time whatever the length or the first wrong byte.
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let (given, want) = (Sha256::digest(given.trim()), Sha256::digest(token));
    bool::from(given.as_slice().ct_eq(want.as_slice()))
}

/// The exposition text: every counter, and the gauges (served by `src/http/metrics.rs`).
pub(crate) async fn text<E: std::fmt::Display>(
    read: impl AsyncFnOnce([i64; 4], i64) -> Result<Figures, E>,
    cache: &GaugeCache,
    redis: Option<&RedisCache>,
    now: i64,
) -> String {
    let mut gauges = Registry::default();
    let processing: Family<Labels, Gauge> = reg(
        &mut gauges,
        "payonce_attempts_processing",
        "Attempts still processing whose creation is older than older_than_seconds (0: all)",
    );
    let waiting: Family<Labels, Gauge> = reg(
        &mut gauges,
        "payonce_receipts_waiting",
        "Receipt emails not delivered nor given up whose job is older than older_than_seconds",
    );
    if let Some(figures) = figures(cache, now, read).await {
        for (age, n) in STUCK_AGES.into_iter().zip(figures.processing) {
            processing
                .get_or_create(&vec![("older_than_seconds", age.to_string())])
                .set(n);
        }
        waiting
            .get_or_create(&vec![("older_than_seconds", RECEIPT_LATE_SECS.to_string())])
            .set(figures.receipts_waiting);
    }
    if let Some(redis) = redis {
        let up: Gauge = reg(&mut gauges, "payonce_redis_up", "1 when the Redis fast path is configured and usable, 0 when degraded to the database, absent without --redis-url");
        up.set(i64::from(redis.is_up()));
    }
    render(&[&METRICS.registry, &gauges])
}

fn render(registries: &[&Registry]) -> String {
    let mut out = String::with_capacity(4096);
    for r in registries {
        // Writing to a String cannot fail.
        let _ = encode(&mut out, r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_help_type_and_labels() {
        pay_outcome(409, PayOutcome::Problem(ErrorCode::InProgress), None);
        pay_outcome(
            200,
            PayOutcome::Attempt(AttemptStatus::Succeeded),
            Some(ReplaySource::Redis),
        );
        rate_limited(Bucket::NewAttempts);
        let out = render(&[&METRICS.registry]);
        assert!(
            out.contains("payonce_outbox_total{result=\"drained\"} "),
            "at zero: {out}"
        );
        assert!(
            out.contains("# TYPE payonce_pay_requests_total counter"),
            "{out}"
        );
        assert!(out.contains(
            "# HELP payonce_pay_requests_total Pay requests by HTTP status and outcome (attempt status or problem code).\n"
        ));
        assert!(out.contains("payonce_pay_requests_total{outcome=\"IN_PROGRESS\",status=\"409\"} "));
        assert!(out.contains("payonce_pay_requests_total{outcome=\"succeeded\",status=\"200\"} "));
        assert!(out.contains("payonce_pay_requests_total{outcome=\"processing\",status=\"202\"} "));
        assert!(out.contains("payonce_pay_conflicts_total{code=\"IN_PROGRESS\"} "));
        assert!(out.contains("payonce_pay_replays_total{source=\"redis\"} "));
        assert!(out.contains("payonce_pay_rate_limited_total{bucket=\"new_attempts\"} "));
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn the_token_is_compared_whole() {
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, "s3cret-token"));
        for (value, ok) in [
            ("Bearer s3cret-token", true),
            ("Bearer s3cret-toke", false),
            ("Bearer s3cret-token2", false),
            ("s3cret-token", false),
            ("Basic s3cret-token", false),
        ] {
            h.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(authorized(&h, "s3cret-token"), ok, "{value}");
        }
    }
}
