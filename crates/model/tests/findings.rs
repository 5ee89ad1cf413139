//! What the model found in the real code and does not yet hold (docs/model.md,
//! "Findings"). Each test asserts the checker still finds the trace; when the code is
//! fixed the test fails, and it moves to the suite's scenarios.

use payonce_model::check::{self, Search, INVARIANTS};
use payonce_model::model::{Bounds, Model};

/// Past key retention the server forgets a key (tombstone or final record): a request with
/// it that is older than retention (still in flight, or from a tab that kept the key) is a
/// new attempt, so what the customer was told can be contradicted by a later charge.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn past_key_retention_a_told_cancel_can_be_contradicted() {
    let model = Model {
        bounds: Bounds {
            ticks: 3,
            cancels: 1,
            ..Bounds::NONE
        },
        flaw: None,
    };
    let r = check::run(
        &model,
        Search {
            max_depth: 40,
            max_states: 300_000,
            liveness_every: 0,
            liveness_steps: 0,
        },
    );
    let (name, trace) = r.violation.expect("the retention gap is still there");
    println!(
        "{name}, {} steps\n{}",
        trace.len(),
        check::render(&model, &trace)
    );
    assert_eq!(name, INVARIANTS[3]);
    // Within retention (two ticks) the same bounds hold.
    let within = Model {
        bounds: Bounds {
            ticks: 2,
            cancels: 1,
            ..Bounds::NONE
        },
        flaw: None,
    };
    let r = check::run(
        &within,
        Search {
            max_depth: 40,
            max_states: 300_000,
            liveness_every: 0,
            liveness_steps: 0,
        },
    );
    assert!(r.violation.is_none(), "{:?}", r.violation.map(|v| v.0));
    assert!(r.complete, "{} states", r.states);
}
