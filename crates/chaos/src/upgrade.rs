//! `--upgrade-from OLD_BIN`: a rolling upgrade during the load phase. The instances start on
//! the previous release (its own `migrate` ran first); at fixed fractions of the intents done,
//! this release's `migrate` runs while they serve, one of them restarts on the previous
//! release (as a supervisor restarts a crashed instance: its start must accept the migrated
//! schema, `compatible_from` in crates/server/src/store/mod.rs), then the instances are
//! replaced one at a time by this release (a graceful stop, a start on the same port). Between
//! the first and the last replacement both releases serve the same database, behind the
//! balancer that spreads new keys and same-key retries over both.

use crate::cluster::Cluster;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One step of the upgrade.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// This release's `payonce-server migrate`.
    Migrate,
    /// Instance `i` crashes and restarts on the previous release.
    RestartOld(usize),
    /// Instance `i` stops and starts on this release.
    Replace(usize),
}

/// The steps and the fraction of the intents done at which each runs.
pub(crate) fn plan(instances: usize) -> Vec<(f64, Step)> {
    let mut steps = vec![(0.2, Step::Migrate), (0.3, Step::RestartOld(0))];
    for i in 0..instances {
        let at = match instances {
            1 => 0.45,
            n => 0.4 + 0.3 * i as f64 / (n - 1) as f64,
        };
        steps.push((at, Step::Replace(i)));
    }
    steps
}

/// What the upgrade did: a line per step, and the steps that failed.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub log: Vec<String>,
    pub failed: Vec<String>,
}

/// Runs the plan as the intents get done (`finished` of `intents`).
pub(crate) async fn drive(
    cluster: Arc<Cluster>,
    finished: Arc<AtomicUsize>,
    intents: usize,
    t0: Instant,
) -> Outcome {
    let mut out = Outcome::default();
    for (at, step) in plan(cluster.instance_ports().len()) {
        let due = (at * intents as f64).ceil() as usize;
        while finished.load(Ordering::Relaxed) < due {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let when = format!(
            "t={:.1}s, {} of {intents} intents done",
            t0.elapsed().as_secs_f64(),
            finished.load(Ordering::Relaxed)
        );
        let result = match step {
            Step::Migrate => cluster
                .migrate_new()
                .await
                .map(|line| format!("this release's migrate while the previous one serves: {line}"))
                .map_err(|e| format!("this release's migrate failed: {e}")),
            Step::RestartOld(i) => cluster
                .restart_instance(i, false, true)
                .await
                .map(|()| format!("api{i} crashed and restarted on the previous release"))
                .map_err(|e| {
                    format!("the previous release did not start on the migrated schema: {e}")
                }),
            Step::Replace(i) => cluster
                .restart_instance(i, true, false)
                .await
                .map(|()| {
                    format!(
                        "api{i} replaced by this release ({} instance(s) left on the previous one)",
                        cluster.old_instances()
                    )
                })
                .map_err(|e| format!("api{i} did not start on this release: {e}")),
        };
        let line = match result {
            Ok(l) => l,
            Err(e) => {
                out.failed.push(format!("{when}: {e}"));
                format!("FAILED: {e}")
            }
        };
        println!("payonce-chaos: upgrade ({when}): {line}");
        out.log.push(format!("{when}: {line}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_migrates_first_and_leaves_a_window_with_both_releases() {
        let steps = plan(3);
        assert_eq!(steps[0].1, Step::Migrate);
        assert_eq!(steps[1].1, Step::RestartOld(0));
        let replaced: Vec<Step> = steps[2..].iter().map(|s| s.1).collect();
        assert_eq!(
            replaced,
            vec![Step::Replace(0), Step::Replace(1), Step::Replace(2)]
        );
        // In order, all within the load phase, and a gap between the first and last
        // replacement (both releases serve).
        assert!(steps.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(steps.iter().all(|s| s.0 > 0.0 && s.0 < 1.0));
        assert!(steps[4].0 - steps[2].0 >= 0.2);
        assert_eq!(plan(1).len(), 3);
    }
}
