//! The server's in-progress wait is explored: a duplicate of a request whose key is in flight
//! waits until the pay machine's own deadline (`Effect::Wait { until }`, from `Policy`), the
//! clock moving there while other actors interleave, and every invariant holds throughout.

use payonce_model::check;
use payonce_model::model::{Action, Bounds, Inst, Model, TICK_MS};
use std::collections::{HashSet, VecDeque};

/// One click, one duplicated request, searched to exhaustion: some request waits on the key
/// its twin holds, its wait ends half a tick later (the model's `in_progress_wait_ms`), and
/// no state on the way breaks an invariant.
#[test]
fn a_duplicate_of_a_key_in_flight_waits_until_the_machines_deadline() {
    let model = Model {
        bounds: Bounds {
            dups: 1,
            ..Bounds::NONE
        },
        flaw: None,
    };
    let init = model.init();
    let mut seen = HashSet::from([check::fingerprint(&init)]);
    let mut frontier = VecDeque::from([init]);
    let (mut waits, mut acts) = (0, Vec::new());
    while let Some(s) = frontier.pop_front() {
        acts.clear();
        model.actions(&s, true, &mut acts);
        for a in &acts {
            let Some(n) = model.next(&s, a) else {
                continue;
            };
            assert_eq!(check::violations(&n), Vec::<&str>::new(), "after {a:?}");
            let waits_now = match a {
                Action::Step { inst, .. } => matches!(
                    &s.inst[*inst as usize],
                    Inst::Busy(_, w) if w.flow.next_step() == "Wait"
                ),
                _ => false,
            };
            if waits_now {
                assert_eq!(n.now, s.now + TICK_MS / 2, "the wait ends at its deadline");
                waits += 1;
            }
            if seen.insert(check::fingerprint(&n)) {
                frontier.push_back(n);
            }
        }
    }
    println!("{} states, {waits} waits", seen.len());
    assert!(waits > 0, "no request waited on its key in flight");
}
