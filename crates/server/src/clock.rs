//! The clock every rule reads `now` from: the system clock in production, a manual one in
//! tests, so leases, retention and `Retry-After` are tested by moving time, not by sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the store's time unit.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now_ms(&self) -> i64;
}

/// Sleeps until `clock` reads `until` (Unix ms), as far as the clock said when the sleep
/// began: the system clock gets there by itself; a manual clock moves only when a test moves
/// it, so after this the caller reads the clock again and the rules decide on what it reads
/// (a waiting pay looks at its key again, and waits on while the clock has not reached the
/// machine's deadline).
pub(crate) async fn sleep_until(clock: &dyn Clock, until: i64) {
    let left = until.saturating_sub(clock.now_ms());
    if let Ok(ms @ 1..) = u64::try_from(left) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self(AtomicI64::new(now_ms))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
