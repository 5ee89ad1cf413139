//! `payonce-model`: runs the check of the test command (`scripts/test.sh`, suite `model`)
//! and prints states explored, depth, time and the invariants held; exits 1 on a violation.

use payonce_model::check::{self, Search, INVARIANTS, LIVENESS};
use payonce_model::model::{Bounds, Model};
use std::time::Instant;

fn main() {
    let mut depth = 30;
    let mut states = 3_000_000;
    let mut live = 7;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), v) {
            ("--depth", Some(v)) => depth = v,
            ("--states", Some(v)) => states = v,
            ("--liveness-every", Some(v)) => live = v,
            _ => {
                eprintln!("usage: payonce-model [--depth N] [--states N] [--liveness-every N]");
                std::process::exit(2);
            }
        }
    }
    let model = Model {
        bounds: Bounds::FULL,
        flaw: None,
    };
    println!("payonce model: bounds {:?}", model.bounds);
    println!("search: breadth first to depth {depth}, at most {states} states, liveness from every state with fingerprint % {live} == 0");
    let t = Instant::now();
    let r = check::run(
        &model,
        Search {
            max_depth: depth,
            max_states: states,
            liveness_every: live as u64,
            liveness_steps: 400,
        },
    );
    let secs = t.elapsed().as_secs_f64();
    println!(
        "explored {} distinct states, {} transitions, depth {} ({}), {} liveness runs, {secs:.1} s",
        r.states,
        r.transitions,
        r.depth,
        if r.complete {
            "every reachable state"
        } else {
            "bounded: the depth or state limit was reached"
        },
        r.liveness_runs
    );
    match r.violation {
        None => {
            for inv in INVARIANTS {
                println!("  held in every state: {inv}");
            }
            println!("  held from every checked state: {LIVENESS}");
        }
        Some((name, trace)) => {
            println!("VIOLATED: {name}\n{}", check::render(&model, &trace));
            std::process::exit(1);
        }
    }
}
