//! Prometheus metrics at `GET /metrics`, in the Prometheus text format (version 0.0.4),
//! through `prometheus-client`.
//!
//! Counters are process-global so a background job can count without threading a handle
//! through; each process exposes its own (Prometheus sums across instances). Every label
//! value is an enum, so a typo is a compile error and a family's label values are listed
//! once, here. The gauges are computed at scrape time.

use crate::replay::redis::RedisCache;
use crate::store::Store;
use payonce_protocol::{AttemptStatus, ErrorCode};
use prometheus_client::encoding::LabelValueEncoder;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::sync::LazyLock;

/// Label value enums spell their wire text once, in `as_str`.
macro_rules! label_values {
    ($( $(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? } )+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum $name { $($variant),+ }

        impl $name {
            /// Every value: each series is created at zero, so it is scraped before its
            /// first increment.
            const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub(crate) fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                e.write_str(self.as_str())
            }
        }
    )+};
}

label_values! {
    /// Where a replayed pay answer was read.
    ReplaySource { Memory => "memory", Redis => "redis", Database => "database" }
    /// One step of the Redis fast path.
    RedisLookup {
        Claimed => "claimed", Replay => "replay", Mismatch => "mismatch",
        Processing => "processing", Miss => "miss", Skipped => "skipped", Error => "error",
    }
    /// One provider webhook delivery.
    WebhookResult {
        Applied => "applied", Duplicate => "duplicate", BadSignature => "bad_signature",
        UnknownProviderKey => "unknown_provider_key", NoEffect => "no_effect",
        Unconfirmed => "unconfirmed",
    }
    /// One attempt handled by the reconciliation job.
    ReconcileResult { Settled => "settled", ManualReview => "manual_review" }
    /// One run of the confirmation email job.
    EmailResult { Sent => "sent", AlreadySent => "already_sent" }
    /// One refund request.
    RefundResult {
        Refunded => "refunded", Replayed => "replayed", NotAllowed => "not_allowed",
        InProgress => "in_progress",
    }
    /// One outbox row.
    OutboxResult { ExecutedInline => "executed_inline", Drained => "drained", Inconclusive => "inconclusive" }
}

/// What a pay answer said: an attempt status, a problem code, or a body that names neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PayOutcome {
    Attempt(AttemptStatus),
    Problem(ErrorCode),
    Unknown,
}

impl EncodeLabelValue for PayOutcome {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        e.write_str(match self {
            Self::Attempt(s) => s.as_str(),
            Self::Problem(c) => c.as_str(),
            Self::Unknown => "unknown",
        })
    }
}

// Label sets: fields in alphabetical order, which is the order they are rendered in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PayLabels {
    outcome: PayOutcome,
    status: u16,
}
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CodeLabel {
    code: PayOutcome,
}
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabel {
    source: ReplaySource,
}
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BucketLabel {
    bucket: BucketValue,
}

pub(crate) use payonce_rules::policy::Bucket;

/// Which pay rate-limit bucket refused a request, spelled by the rules (`Bucket::label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BucketValue(Bucket);

impl EncodeLabelValue for BucketValue {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        e.write_str(self.0.label())
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AgeLabel {
    older_than_seconds: i64,
}

/// A family labelled `result`.
type Results<R> = Family<[(&'static str, R); 1], Counter>;

struct Counters {
    registry: Registry,
    pay_requests: Family<PayLabels, Counter>,
    pay_replays: Family<SourceLabel, Counter>,
    pay_conflicts: Family<CodeLabel, Counter>,
    pay_key_mismatches: Counter,
    pay_rate_limited: Family<BucketLabel, Counter>,
    redis_lookups: Results<RedisLookup>,
    webhook_events: Results<WebhookResult>,
    reconciliation: Results<ReconcileResult>,
    emails: Results<EmailResult>,
    refunds: Results<RefundResult>,
    outbox: Results<OutboxResult>,
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| {
    let c = Counters {
        registry: Registry::default(),
        pay_requests: Family::default(),
        pay_replays: Family::default(),
        pay_conflicts: Family::default(),
        pay_key_mismatches: Counter::default(),
        pay_rate_limited: Family::default(),
        redis_lookups: Family::default(),
        webhook_events: Family::default(),
        reconciliation: Family::default(),
        emails: Family::default(),
        refunds: Family::default(),
        outbox: Family::default(),
    };
    // The registry holds clones (families and counters share their values through an Arc).
    let mut r = Registry::default();
    // Help texts without a final period: the encoder adds one.
    r.register(
        "payonce_pay_requests",
        "Pay requests by HTTP status and outcome (attempt status or problem code)",
        c.pay_requests.clone(),
    );
    r.register(
        "payonce_pay_replays",
        "Pay answers replayed from a stored result, by where it was read (memory, redis or database)",
        c.pay_replays.clone(),
    );
    r.register(
        "payonce_pay_conflicts",
        "Pay requests answered 409, by problem code",
        c.pay_conflicts.clone(),
    );
    r.register(
        "payonce_pay_key_mismatches",
        "Pay requests answered 422 KEY_REUSED_WITH_DIFFERENT_DETAILS",
        c.pay_key_mismatches.clone(),
    );
    r.register(
        "payonce_pay_rate_limited",
        "Pay requests answered 429 RATE_LIMITED, by bucket",
        c.pay_rate_limited.clone(),
    );
    r.register(
        "payonce_redis_lookups",
        "Redis fast path steps by result (claimed, replay, mismatch, processing, miss, skipped, error)",
        c.redis_lookups.clone(),
    );
    r.register(
        "payonce_webhook_events",
        "Provider webhook deliveries by result (e.g. applied, duplicate, bad_signature)",
        c.webhook_events.clone(),
    );
    r.register(
        "payonce_reconciliation",
        "Reconciliation job results per attempt (settled, manual_review)",
        c.reconciliation.clone(),
    );
    r.register(
        "payonce_emails",
        "Confirmation email job runs by result (sent, already_sent)",
        c.emails.clone(),
    );
    r.register(
        "payonce_refunds",
        "Refund requests by result (e.g. refunded, replayed, not_allowed)",
        c.refunds.clone(),
    );
    r.register(
        "payonce_outbox",
        "Outbox rows by result (executed_inline, drained, inconclusive)",
        c.outbox.clone(),
    );
    // Every series the labels allow, at zero (the status × outcome product only where an
    // answer of that status can have that outcome).
    for &outcome in &[AttemptStatus::Succeeded, AttemptStatus::Processing] {
        let status = if outcome == AttemptStatus::Succeeded {
            200
        } else {
            202
        };
        let outcome = PayOutcome::Attempt(outcome);
        let _ = c.pay_requests.get_or_create(&PayLabels { outcome, status });
    }
    for &code in ErrorCode::ALL.iter().filter(|c| c.http_status() == 409) {
        let code = PayOutcome::Problem(code);
        let _ = c.pay_conflicts.get_or_create(&CodeLabel { code });
    }
    for &source in ReplaySource::ALL {
        let _ = c.pay_replays.get_or_create(&SourceLabel { source });
    }
    for bucket in Bucket::ALL {
        let bucket = BucketValue(bucket);
        let _ = c.pay_rate_limited.get_or_create(&BucketLabel { bucket });
    }
    zeros(&c.redis_lookups, RedisLookup::ALL);
    zeros(&c.webhook_events, WebhookResult::ALL);
    zeros(&c.reconciliation, ReconcileResult::ALL);
    zeros(&c.emails, EmailResult::ALL);
    zeros(&c.refunds, RefundResult::ALL);
    zeros(&c.outbox, OutboxResult::ALL);
    Counters { registry: r, ..c }
});

fn zeros<R: EncodeLabelValue + Copy + std::hash::Hash + Eq>(family: &Results<R>, all: &[R]) {
    for &result in all {
        let _ = family.get_or_create(&[("result", result)]);
    }
}

/// One pay answer: its HTTP status and outcome; `replayed_from` where the stored answer
/// came from when it is a replay.
pub(crate) fn pay_outcome(status: u16, outcome: PayOutcome, replayed_from: Option<ReplaySource>) {
    let c = &*COUNTERS;
    c.pay_requests
        .get_or_create(&PayLabels { outcome, status })
        .inc();
    if let Some(source) = replayed_from {
        c.pay_replays.get_or_create(&SourceLabel { source }).inc();
    }
    match status {
        409 => {
            c.pay_conflicts
                .get_or_create(&CodeLabel { code: outcome })
                .inc();
        }
        422 => {
            c.pay_key_mismatches.inc();
        }
        _ => {}
    }
}

/// A pay request refused by the rate limit.
pub(crate) fn rate_limited(bucket: Bucket) {
    COUNTERS
        .pay_rate_limited
        .get_or_create(&BucketLabel {
            bucket: BucketValue(bucket),
        })
        .inc();
}

fn count<R: EncodeLabelValue + Clone + std::hash::Hash + Eq>(family: &Results<R>, result: R) {
    family.get_or_create(&[("result", result)]).inc();
}

/// One step of the Redis fast path.
pub(crate) fn redis_lookup(result: RedisLookup) {
    count(&COUNTERS.redis_lookups, result);
}

/// One webhook delivery handled.
pub(crate) fn webhook_event(result: WebhookResult) {
    count(&COUNTERS.webhook_events, result);
}

/// The reconciliation job settled (or flagged) one attempt.
pub(crate) fn reconciliation(result: ReconcileResult) {
    count(&COUNTERS.reconciliation, result);
}

/// One run of the confirmation email job.
pub(crate) fn email(result: EmailResult) {
    count(&COUNTERS.emails, result);
}

/// One refund request.
pub(crate) fn refund(result: RefundResult) {
    count(&COUNTERS.refunds, result);
}

/// One outbox row handled.
pub(crate) fn outbox(result: OutboxResult) {
    count(&COUNTERS.outbox, result);
}

/// Age thresholds (seconds) of the "attempts stuck in processing" gauge.
const STUCK_AGES: &[i64] = &[0, 60, 300, 3600];

/// Attempts in `processing` whose creation is older than each of [`STUCK_AGES`], computed
/// from the store at scrape time (every process sees the same database).
async fn stuck_attempts(store: &Store, now: i64) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let mut out = Vec::with_capacity(STUCK_AGES.len());
    for &age in STUCK_AGES {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM attempts WHERE status = 'processing' AND created_at <= $1",
        )
        .bind(now - age * 1000)
        .fetch_one(store.pool())
        .await?;
        out.push((age, n));
    }
    Ok(out)
}

/// The scrape-time gauges, in a registry of their own (the Redis one exists only with
/// `--redis-url`).
async fn gauges(store: &Store, redis: Option<&RedisCache>, now: i64) -> Registry {
    let mut r = Registry::default();
    let processing = Family::<AgeLabel, Gauge>::default();
    r.register(
        "payonce_attempts_processing",
        "Attempts still processing whose creation is older than older_than_seconds (0: all)",
        processing.clone(),
    );
    match stuck_attempts(store, now).await {
        Ok(rows) => {
            for (age, n) in rows {
                processing
                    .get_or_create(&AgeLabel {
                        older_than_seconds: age,
                    })
                    .set(n);
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot count processing attempts"),
    }
    if let Some(redis) = redis {
        let up = Gauge::<i64>::default();
        up.set(i64::from(redis.is_up()));
        r.register(
            "payonce_redis_up",
            "1 when the Redis fast path is configured and usable, 0 when degraded to the database, absent without --redis-url",
            up,
        );
    }
    r
}

fn render(registries: &[&Registry]) -> String {
    let mut out = String::with_capacity(4096);
    for r in registries {
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, r);
    }
    out
}

/// The exposition text of every counter and the scrape-time gauges (served by
/// `src/http/metrics.rs`).
pub(crate) async fn text(store: &Store, redis: Option<&RedisCache>, now: i64) -> String {
    let gauges = gauges(store, redis, now).await;
    render(&[&COUNTERS.registry, &gauges])
}

/// The exposition format's content type.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

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
        let out = render(&[&COUNTERS.registry]);
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
        assert!(out.contains("payonce_pay_conflicts_total{code=\"IN_PROGRESS\"} "));
        assert!(out.contains("payonce_pay_replays_total{source=\"redis\"} "));
        assert!(out.contains("payonce_pay_rate_limited_total{bucket=\"new_attempts\"} "));
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }
}
