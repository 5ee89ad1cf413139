//! What the model found in the real code, now fixed (docs/model.md, "Findings"): each test
//! runs the finding's scenario with the old behaviour injected (it breaks the invariant it
//! broke in the real code then) and with the real code (every invariant holds, every state
//! to two steps past the old counterexample).

use payonce_model::check::{self, Search, INVARIANTS};
use payonce_model::model::{Bounds, Model};
use payonce_model::Flaw;

fn search(max_depth: usize) -> Search {
    Search {
        max_depth,
        max_states: 300_000,
        liveness_every: 0,
        liveness_steps: 0,
    }
}

/// `old` under `bounds` tells the customer "cancelled" (or declined) although charged; the
/// real code under the same bounds breaks nothing.
fn fixed(old: Flaw, bounds: Bounds) {
    let before = Model {
        bounds,
        flaw: Some(old),
    };
    let r = check::run(&before, search(40));
    let (name, trace) = r.violation.expect("the old behaviour breaks an invariant");
    println!(
        "{old:?}: {name}, {} steps, {} states\n{}",
        trace.len(),
        r.states,
        check::render(&before, &trace)
    );
    assert_eq!(name, INVARIANTS[3]);
    let now = Model { bounds, flaw: None };
    let depth = trace.len() + 2;
    let r = check::run(&now, search(depth));
    assert!(r.violation.is_none(), "{:?}", r.violation.map(|v| v.0));
    assert!(!r.capped, "reached depth {depth} ({} states)", r.states);
    println!("real code: {} states, depth {}", r.states, r.depth);
}

/// A pay delayed in the network past key retention, after the customer cancelled: the
/// tombstone stays while its order is payable at its version, so the late pay meets it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_pay_delayed_past_retention_cannot_contradict_a_cancel() {
    let b = Bounds {
        ticks: 3,
        cancels: 1,
        ..Bounds::NONE
    };
    fixed(Flaw::TombstoneExpires, b);
}

/// A tab keeps a charged key past retention (its one request's answer was lost; a
/// duplicated tab's copied storage is the same case, deeper) and cancels it: the server
/// asks the provider and answers with the payment, not "cancelled".
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_key_kept_past_retention_is_answered_with_its_charge() {
    let b = Bounds {
        max_sends: 1,
        ticks: 3,
        cancels: 1,
        ..Bounds::NONE
    };
    fixed(Flaw::BlindCancel, b);
}
