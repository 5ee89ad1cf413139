//! The harness shared by the server's black-box tests (`crates/server/tests/blackbox`), the
//! load benchmark (`crates/bench`) and the chaos audit (`crates/chaos`): `payonce-server`
//! processes on port 0 ([`server`]), per-test PostgreSQL databases ([`pg`]), Redis
//! namespaces ([`redis`]), a Stripe emulator ([`localstripe`]), an SMTP server ([`smtp`]),
//! local TLS services ([`tls`]),
//! a fault proxy in front of the provider ([`fault_proxy`]), [`eventually`] and [`wait_for`]
//! for real events, and checkout fixtures over both transports ([`checkout`]). Dev-only:
//! nothing here ships in the server.

pub mod checkout;
pub mod fault_proxy;
pub mod localstripe;
pub mod pg;
pub mod redis;
pub mod server;
pub mod smtp;
pub mod tls;

use std::future::Future;
use std::time::{Duration, Instant};

/// A service a test needs is missing. Under `CI=true` that is a failure; elsewhere a loud
/// skip only when `PAYONCE_ALLOW_SKIP=1`, and a failure otherwise (a silent skip would read
/// as a pass). `what` says what is missing, `how` how to start it, `tests` which tests the
/// skip covers ("PostgreSQL tests").
pub fn unavailable<T>(what: &str, how: &str, tests: &str) -> Option<T> {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what}; CI requires it: {how}");
    }
    eprintln!("SKIPPED: {what}; {how}");
    if std::env::var("PAYONCE_ALLOW_SKIP").as_deref() == Ok("1") {
        return None;
    }
    panic!("{what}; set PAYONCE_ALLOW_SKIP=1 to skip {tests}: {how}");
}

/// Polls `probe` every `poll` until it yields `Some`, for at most `timeout`; `None` when it
/// never did. For events that really happen in another process or task (a port opens, a
/// webhook lands), never for a rule a clock decides: those tests move a clock instead.
pub async fn eventually<T, F, Fut>(timeout: Duration, poll: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(poll).await;
    }
}

/// Like [`eventually`] (polling every 20 ms), for a test that cannot go on without the
/// event: fails the test after `timeout`, naming `what` it waited for.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually(timeout, Duration::from_millis(20), probe)
        .await
        .unwrap_or_else(|| panic!("waited {timeout:?} for {what}, in vain"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn eventually_returns_the_first_value_and_gives_up_at_the_deadline() {
        let calls = AtomicU32::new(0);
        let third = eventually(Duration::from_secs(5), Duration::from_millis(1), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(third, Some(3));
        let start = Instant::now();
        let never: Option<()> = eventually(
            Duration::from_millis(50),
            Duration::from_millis(10),
            || async { None },
        )
        .await;
        assert_eq!(never, None);
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    #[should_panic(expected = "for the thing that never happens, in vain")]
    async fn wait_for_fails_naming_what_it_awaited() {
        let never = || async { None::<()> };
        wait_for(
            "the thing that never happens",
            Duration::from_millis(30),
            never,
        )
        .await;
    }
}
