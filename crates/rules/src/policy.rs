//! Time and rate arithmetic: leases, retention, `Retry-After`, and the rate-limit buckets.
//! Unix milliseconds throughout, always passed in as `now`.

use crate::record::Record;
use std::time::Duration;

/// The server's time settings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long a claim is leased (longer than the provider timeout).
    pub lease_ms: i64,
    /// How long a finished key replays before it may be deleted.
    pub key_retention_ms: i64,
    /// Processing attempts older than this are reconciled.
    pub reconcile_after_ms: i64,
    /// Audit rows and handled webhook events are kept this long (the dispute window).
    pub audit_retention_ms: i64,
    /// How long an attempt may wait for the customer (3-D Secure) from its creation; past
    /// it the provider is asked to cancel the payment and the attempt ends `expired`.
    pub action_deadline_ms: i64,
    /// How long a pay request waits on its key while another request holds it (a double
    /// click then gets the same answer twice), before 409 `IN_PROGRESS`.
    pub in_progress_wait_ms: i64,
    /// How often a waiting request reads its key again (a settled key ends its wait).
    pub wait_poll_ms: i64,
}

/// How often a waiting request reads its key again ([`Policy::wait_poll_ms`]).
pub const WAIT_POLL_MS: i64 = 25;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Policy {
    /// From durations (saturating: an absurd flag cannot overflow the arithmetic).
    pub fn new(
        lease: Duration,
        key_retention: Duration,
        reconcile_after: Duration,
        audit_retention: Duration,
        action_deadline: Duration,
        in_progress_wait: Duration,
    ) -> Self {
        Self {
            lease_ms: ms(lease),
            key_retention_ms: ms(key_retention),
            reconcile_after_ms: ms(reconcile_after),
            audit_retention_ms: ms(audit_retention),
            action_deadline_ms: ms(action_deadline),
            in_progress_wait_ms: ms(in_progress_wait),
            wait_poll_ms: WAIT_POLL_MS,
        }
    }

    /// When a pay request that started at `start` stops waiting on a key in flight.
    pub fn wait_ends(&self, start: i64) -> i64 {
        start.saturating_add(self.in_progress_wait_ms)
    }

    /// When a request that waits until `ends` reads its key again, at `now`: one poll
    /// later, never past `ends`.
    pub fn next_look(&self, now: i64, ends: i64) -> i64 {
        now.saturating_add(self.wait_poll_ms).min(ends).max(now)
    }

    /// When an attempt created at `created_at` stops waiting for the customer.
    pub fn action_deadline(&self, created_at: i64) -> i64 {
        created_at.saturating_add(self.action_deadline_ms)
    }

    /// When a lease taken at `now` ends.
    pub fn lease_until(&self, now: i64) -> i64 {
        now.saturating_add(self.lease_ms)
    }

    /// When a key finished (or cancelled) at `now` may be deleted.
    pub fn expires_at(&self, now: i64) -> i64 {
        now.saturating_add(self.key_retention_ms)
    }

    /// Processing attempts created at or before this are the reconciliation job's.
    pub fn reconcile_before(&self, now: i64) -> i64 {
        now.saturating_sub(self.reconcile_after_ms)
    }

    /// Audit rows older than this may be deleted.
    pub fn audit_before(&self, now: i64) -> i64 {
        now.saturating_sub(self.audit_retention_ms)
    }
}

/// The shortest and longest wait before the jobs look again at an attempt that waits for
/// the customer (3-D Secure).
pub const CUSTOMER_CHECK_MS: (i64, i64) = (5_000, 600_000);

/// When the jobs next look at an attempt created at `created_at` that, at `now`, waits for
/// the customer: after half its age, within [`CUSTOMER_CHECK_MS`]. A challenge the customer
/// abandoned is looked at less and less often, so a page of them cannot fill every job
/// round's work list while newer crashed attempts wait behind them; one completed
/// meanwhile is settled by its webhook or the customer's own retry, never by this check.
/// Never later than the attempt's deadline ([`Policy::action_deadline`]), so the check that
/// ends an abandoned challenge runs when it is due.
pub fn next_customer_check(created_at: i64, now: i64, policy: &Policy) -> i64 {
    let (min, max) = CUSTOMER_CHECK_MS;
    let wait = (now.saturating_sub(created_at) / 2).clamp(min, max);
    now.saturating_add(wait)
        .min(policy.action_deadline(created_at).max(now))
}

/// Retention: may `record` be deleted at `now`? `payable_at`: the version its order can
/// still be paid at (`None`: paid, refunded or gone). Processing: never. Final: once
/// expired (the order then refuses or freshly decides its key). A tombstone: once expired
/// and the order is not payable at its version, so a pay delayed past retention meets the
/// tombstone or the order, never a charge. The store's delete statement
/// (`crates/server/src/store/attempts.rs`) is this rule in SQL.
pub fn deletable(record: &Record, now: i64, payable_at: Option<i64>) -> bool {
    match record {
        Record::Processing(_) => false,
        Record::Final(f) => f.expires_at < now,
        Record::Tombstone(t) => {
            t.expires_at < now && payable_at.is_none_or(|v| t.order_version.unwrap_or(v) != v)
        }
    }
}

/// How long a copy of a key's answer may live (a cache must not outlive the key):
/// `None` when it has expired.
pub fn ttl_ms(expires_at: i64, now: i64) -> Option<u64> {
    u64::try_from(expires_at.saturating_sub(now))
        .ok()
        .filter(|t| *t > 0)
}

/// `Retry-After` for a wait: whole seconds rounded up (a client that waits exactly that long
/// must find a token), at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The per-user rate-limit buckets. Pay has two, because a duplicate is not a new payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// Every pay request, replays included: generous, it only stops a runaway client.
    Requests,
    /// Only the request that wins the claim of a new key (inside the claim transaction,
    /// before its commit): duplicates that lose the key's slot, replays, waits on a key in
    /// flight and 409/422 answers never spend it.
    NewAttempts,
    /// Order creation.
    Orders,
    /// Only a cancel that writes a tombstone (before its commit); one that finds the attempt
    /// writes nothing and spends nothing.
    Tombstones,
    /// Codes that are not a coupon. While it is empty every code is refused, valid ones too:
    /// a 429 for misses next to a price for hits would still tell codes apart.
    CouponMisses,
}

impl Bucket {
    /// The metric label and the name in the 429's detail.
    pub fn label(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::NewAttempts => "new_attempts",
            Self::Orders => "orders",
            Self::Tombstones => "tombstones",
            Self::CouponMisses => "coupon_misses",
        }
    }

    /// The pay buckets (`payonce_pay_rate_limited` counts their refusals).
    pub const ALL: [Self; 2] = [Self::Requests, Self::NewAttempts];
}

/// A log line allowed at a bounded rate: at most one per `every_ms`, the next one saying how
/// many were held back meanwhile. A forged webhook is counted in metrics and logged through
/// one of these, never written to the store (docs/operating.md, "The journal"): an
/// unauthenticated client must grow neither the store nor the log.
#[derive(Debug, Clone)]
pub struct LogGate {
    every_ms: i64,
    last_ms: Option<i64>,
    held: u64,
}

impl LogGate {
    /// A gate that lets one line through per `every_ms` milliseconds.
    pub const fn new(every_ms: i64) -> Self {
        Self {
            every_ms,
            last_ms: None,
            held: 0,
        }
    }

    /// Whether a line may be logged at `now`: `Some(held)`, the lines held back since the
    /// last one, or `None` (this one is held back and counted).
    pub fn admit(&mut self, now: i64) -> Option<u64> {
        match self.last_ms {
            Some(last) if now < last.saturating_add(self.every_ms) => {
                self.held = self.held.saturating_add(1);
                None
            }
            _ => {
                self.last_ms = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LogGate;

    #[test]
    fn a_gate_lets_one_line_through_per_period_and_counts_the_rest() {
        let mut gate = LogGate::new(10_000);
        assert_eq!(gate.admit(1_000), Some(0));
        // A flood within the period: held back, counted.
        for t in 1_001..1_501 {
            assert_eq!(gate.admit(t), None);
        }
        assert_eq!(gate.admit(10_999), None);
        // The period is over: one line, saying how many were held back.
        assert_eq!(gate.admit(11_000), Some(501));
        assert_eq!(gate.admit(11_001), None);
        assert_eq!(gate.admit(30_000), Some(1));
        // A clock that went back does not open the gate.
        assert_eq!(gate.admit(5_000), None);
    }
}
