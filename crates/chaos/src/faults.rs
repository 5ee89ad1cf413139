//! The fault schedule: which fault comes next and after how long, drawn from the seed
//! ([`Schedule`], pure), and the task that applies it to the cluster ([`Injector`]).
//!
//! Faults of the processes live here; faults of single requests (the server drops its
//! answer, crashes right after the charge; the customer's own timeout) are drawn by each
//! customer's script (`customer.rs`); provider slowness, timeouts and transient failures come
//! with the test payment method a customer pays with; webhook duplicates, delays and
//! reordering are the provider's own `--webhook-chaos`.

use crate::cluster::{Cluster, Stats};
use crate::customer::Counters;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's failpoints (`payonce-server --failpoint NAME`, dev mode only): the process
/// aborts when it reaches that step. Spelled here because they are command-line names of
/// the server's dev mode, not wire names; the server refuses to start with an unknown one,
/// which the supervisor reports as an unexpected exit, so a drift cannot pass silently.
pub(crate) const FAILPOINTS: &[&str] = &[
    "after-claim",
    "after-charge",
    "before-settle-commit",
    "after-save",
    "webhook",
    "outbox",
    "email",
];

/// One fault of the processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// SIGKILL an instance; the supervisor restarts it.
    Kill { instance: usize },
    /// Restart an instance with a failpoint armed: it aborts at the first request (or job)
    /// that reaches that step, then comes back clean.
    Failpoint { instance: usize, name: &'static str },
    /// Empty Redis: every claim and cached answer of the fast path is gone.
    FlushRedis,
    /// SIGKILL the provider and keep it down for a while (its ledger survives on disk).
    ProviderDown { ms: u64 },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill { instance } => write!(f, "kill api{instance}"),
            Fault::Failpoint { instance, name } => write!(f, "failpoint {name} on api{instance}"),
            Fault::FlushRedis => write!(f, "flush redis"),
            Fault::ProviderDown { ms } => write!(f, "provider down {ms} ms"),
        }
    }
}

/// The seeded sequence of faults.
pub(crate) struct Schedule {
    rng: StdRng,
    instances: usize,
    mean_ms: u64,
}

impl Schedule {
    pub(crate) fn new(seed: u64, instances: usize, mean_ms: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed ^ 0xfa17),
            instances: instances.max(1),
            mean_ms: mean_ms.max(1),
        }
    }

    /// The wait before the next fault (exponential around the mean: faults come in bursts
    /// and lulls, not on a metronome) and the fault.
    pub(crate) fn next(&mut self) -> (Duration, Fault) {
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let wait = (-(self.mean_ms as f64) * u.ln()).min(self.mean_ms as f64 * 5.0);
        let instance = self.rng.gen_range(0..self.instances);
        let fault = match self.rng.gen_range(0..100) {
            0..=29 => Fault::Kill { instance },
            30..=64 => Fault::Failpoint {
                instance,
                name: FAILPOINTS[self.rng.gen_range(0..FAILPOINTS.len())],
            },
            65..=84 => Fault::FlushRedis,
            _ => Fault::ProviderDown {
                ms: self.rng.gen_range(300..3000),
            },
        };
        (Duration::from_millis(wait as u64), fault)
    }
}

/// Applies a [`Schedule`] until stopped.
pub(crate) struct Injector {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<Vec<(f64, Fault)>>,
}

impl Injector {
    pub(crate) fn start(cluster: Arc<Cluster>, mut schedule: Schedule) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut log = Vec::new();
            loop {
                let (wait, fault) = schedule.next();
                tokio::select! {
                    _ = stopped.notified() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
                match &fault {
                    Fault::Kill { instance } => cluster.kill_instance(*instance, None),
                    Fault::Failpoint { instance, name } => {
                        cluster.kill_instance(*instance, Some(name))
                    }
                    Fault::FlushRedis => {
                        if let Err(e) = cluster.flush_redis().await {
                            eprintln!("payonce-chaos: flush redis: {e}");
                        }
                    }
                    Fault::ProviderDown { ms } => cluster.kill_provider(Duration::from_millis(*ms)),
                }
                log.push((t0.elapsed().as_secs_f64(), fault));
            }
            log
        });
        Self { stop, task }
    }

    /// Stops the schedule; the faults applied, with their times.
    pub(crate) async fn stop(self) -> Vec<(f64, Fault)> {
        self.stop.notify_one();
        self.task.await.unwrap_or_default()
    }
}

/// One line about the faults that were applied and what they did.
pub(crate) fn summary(log: &[(f64, Fault)], stats: &Stats, c: &Counters) -> String {
    let count = |p: fn(&Fault) -> bool| log.iter().filter(|(_, f)| p(f)).count();
    let mut s = format!(
        "{} scheduled: {} kills, {} failpoints armed, {} redis flushes, {} provider outages",
        log.len(),
        count(|f| matches!(f, Fault::Kill { .. })),
        count(|f| matches!(f, Fault::Failpoint { .. })),
        count(|f| matches!(f, Fault::FlushRedis)),
        count(|f| matches!(f, Fault::ProviderDown { .. })),
    );
    let _ = write!(
        s,
        "\n  instance exits: {} killed, {} crash-after-charge, failpoint aborts: ",
        stats.killed, stats.crash_after_charge
    );
    if stats.failpoint_crashes.is_empty() {
        s.push_str("none");
    }
    let mut fps = stats.failpoint_crashes.clone();
    fps.sort();
    for (i, (name, n)) in fps.iter().enumerate() {
        let _ = write!(s, "{}{name} {n}", if i > 0 { ", " } else { "" });
    }
    let _ = write!(
        s,
        "; provider kills {}; restarts {}; unexpected exits {}",
        stats.provider_kills,
        stats.restarts,
        stats.other_exits.len(),
    );
    if stats.upgrade_stops > 0 {
        let _ = write!(
            s,
            "; stops of the upgrade {} ({} that may cut a job round)",
            stats.upgrade_stops, stats.upgrade_cuts
        );
    }
    let _ = write!(
        s,
        "\n  requests: {} pays, {} cancels, {} without an answer ({} our timeouts), {} asked to drop the answer, {} asked to crash after the charge, {} page reloads, {} answers of 500 or more",
        c.pays, c.cancels, c.no_answer, c.timeouts, c.drop_asked, c.crash_asked, c.reloads, c.server_errors
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_the_schedule_and_every_kind_of_fault_occurs() {
        let draw = |seed| {
            let mut s = Schedule::new(seed, 3, 1000);
            (0..400).map(|_| s.next()).collect::<Vec<_>>()
        };
        let a = draw(42);
        assert_eq!(a, draw(42), "same seed, same schedule");
        assert_ne!(a, draw(43), "another seed, another schedule");
        let faults: Vec<&Fault> = a.iter().map(|(_, f)| f).collect();
        assert!(faults.iter().any(|f| matches!(f, Fault::Kill { .. })));
        assert!(faults.iter().any(|f| matches!(f, Fault::FlushRedis)));
        assert!(faults
            .iter()
            .any(|f| matches!(f, Fault::ProviderDown { .. })));
        for name in FAILPOINTS {
            assert!(
                faults
                    .iter()
                    .any(|f| matches!(f, Fault::Failpoint { name: n, .. } if n == name)),
                "failpoint {name} is never drawn"
            );
        }
        for i in 0..3 {
            assert!(faults
                .iter()
                .any(|f| matches!(f, Fault::Kill { instance } if *instance == i)));
        }
        let mean = a.iter().map(|(w, _)| w.as_millis() as f64).sum::<f64>() / a.len() as f64;
        assert!((700.0..1300.0).contains(&mean), "mean wait {mean} ms");
    }
}
