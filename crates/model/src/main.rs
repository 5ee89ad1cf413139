//! `payonce-model`: the check of the test command (`scripts/test.sh`, suite `model`). Runs
//! each scenario's bounded breadth-first search and prints states explored, the depth every
//! state was explored to, the time and the properties held; exits 1 on a violation, with
//! its numbered trace.

use payonce_model::check::{self, Search, INVARIANTS, LIVENESS};
use payonce_model::model::{Bounds, Model};
use std::time::Instant;

/// The scenarios: each turns on a few kinds of nondeterminism on top of [`Bounds::NONE`].
pub fn scenarios() -> Vec<(&'static str, Bounds)> {
    let n = Bounds::NONE;
    vec![
        (
            "two tabs, separate storage, a crash, a duplicated request",
            Bounds {
                tabs: 2,
                crashes: 1,
                dups: 1,
                ..n
            },
        ),
        (
            "provider faults, webhooks redelivered, clock, reconciliation job, a crash",
            Bounds {
                provider_faults: 1,
                redeliveries: 1,
                ticks: 2,
                jobs: 1,
                crashes: 1,
                ..n
            },
        ),
        (
            "cancel, reload, cart change, two clicks",
            Bounds {
                clicks: 2,
                cancels: 1,
                reloads: 1,
                cart_changes: 1,
                ..n
            },
        ),
        (
            "a duplicated tab (copied sessionStorage) keeping a key past retention, a cancel, a crash, the job",
            Bounds {
                duplicate_tab: 1,
                crashes: 1,
                ticks: 3,
                jobs: 1,
                cancels: 1,
                ..n
            },
        ),
        (
            "leases expire, keys past retention, two clicks, a cancel, the job",
            Bounds {
                clicks: 2,
                ticks: 3,
                jobs: 1,
                cancels: 1,
                ..n
            },
        ),
        (
            "a two-phase provider without deduplication: 3-D Secure passed, failed or abandoned \
             past its deadline, a declined payment confirmed outside the server, the jobs, a crash",
            Bounds {
                two_phase: true,
                challenges: 1,
                outside_confirms: 1,
                ticks: 4,
                jobs: 2,
                crashes: 1,
                ..n
            },
        ),
        ("everything at once (bounded by states)", Bounds::FULL),
    ]
}

fn main() {
    let mut max_states = 100_000;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, v] = args.as_slice() {
        match (flag.as_str(), v.parse()) {
            ("--states", Ok(v)) => max_states = v,
            _ => {
                eprintln!("usage: payonce-model [--states N]");
                std::process::exit(2);
            }
        }
    }
    let total = Instant::now();
    let mut all = 0;
    for (name, bounds) in scenarios() {
        let model = Model { bounds, flaw: None };
        let t = Instant::now();
        let r = check::run(
            &model,
            Search {
                max_depth: 200,
                max_states,
                liveness_every: 7,
                liveness_steps: 400,
            },
        );
        all += r.states;
        let reach = if r.complete {
            format!("every reachable state (depth {})", r.depth)
        } else {
            format!("every state to depth {}", r.depth.saturating_sub(1))
        };
        println!(
            "scenario: {name}\n  {} states, {} transitions, {reach}, {} liveness runs, {:.1} s",
            r.states,
            r.transitions,
            r.liveness_runs,
            t.elapsed().as_secs_f64()
        );
        if let Some((bad, trace)) = r.violation {
            println!("VIOLATED: {bad}\n{}", check::render(&model, &trace));
            std::process::exit(1);
        }
    }
    println!(
        "model check: {all} states in {:.1} s; held in every state:",
        total.elapsed().as_secs_f64()
    );
    for inv in INVARIANTS {
        println!("  {inv}");
    }
    println!("held from every 7th state (by fingerprint): {LIVENESS}");
}
