//! Each deliberately broken variant ([`Flaw`]) is caught by the checker with a
//! counterexample, and the same bounds hold with the real code: the catch is the flaw's,
//! not the bounds'.

use payonce_model::check::{self, Search, INVARIANTS};
use payonce_model::model::{Bounds, Model};
use payonce_model::Flaw;

fn search() -> Search {
    Search {
        max_depth: 40,
        max_states: 300_000,
        liveness_every: 0,
        liveness_steps: 0,
    }
}

/// Checks `bounds` with `flaw`: the named invariant breaks; without it, nothing does.
fn caught(flaw: Flaw, bounds: Bounds, invariants: &[&str]) -> usize {
    let bad = Model {
        bounds,
        flaw: Some(flaw),
    };
    let r = check::run(&bad, search());
    let (name, trace) = r
        .violation
        .unwrap_or_else(|| panic!("{flaw:?} not caught in {} states", r.states));
    let rendered = check::render(&bad, &trace);
    println!(
        "{flaw:?}: {name}, {} steps, {} states\n{rendered}",
        trace.len(),
        r.states
    );
    assert!(
        invariants.contains(&name.as_str()),
        "{flaw:?}: {name}\n{rendered}"
    );
    assert!(
        rendered.contains(&name),
        "the trace replays to the violation"
    );
    // The real code under the same bounds, every state up to two steps deeper than the
    // counterexample: no violation, so the catch is the flaw's.
    let good = Model { bounds, flaw: None };
    let depth = trace.len() + 2;
    let r = check::run(
        &good,
        Search {
            max_depth: depth,
            ..search()
        },
    );
    assert!(
        r.violation.is_none(),
        "real code under the same bounds: {:?}",
        r.violation
    );
    assert!(
        !r.capped,
        "the real code's check reached depth {depth} ({} states)",
        r.states
    );
    trace.len()
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn claim_with_read_then_write_is_caught() {
    let b = Bounds {
        tabs: 2,
        ..Bounds::NONE
    };
    caught(Flaw::ClaimReadThenWrite, b, &[INVARIANTS[0], INVARIANTS[6]]);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn removing_the_key_on_a_timeout_is_caught() {
    caught(Flaw::RemoveKeyOnTimeout, Bounds::NONE, &[INVARIANTS[4]]);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_cancel_without_a_tombstone_lets_a_late_pay_charge() {
    let b = Bounds {
        reloads: 1,
        cancels: 1,
        ..Bounds::NONE
    };
    caught(Flaw::NoTombstone, b, &[INVARIANTS[3]]);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_reconcile_that_charges_without_asking_charges_twice() {
    let b = Bounds {
        provider_faults: 1,
        ticks: 1,
        ..Bounds::NONE
    };
    caught(Flaw::BlindRecharge, b, &[INVARIANTS[0]]);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_replay_of_another_attempts_answer_is_caught() {
    let b = Bounds {
        clicks: 2,
        ..Bounds::NONE
    };
    caught(Flaw::ReplayOtherAnswer, b, &[INVARIANTS[5]]);
}

/// A flaw only in the server's order of steps (every decision it calls is the real one):
/// calling the provider before the claim commits lets two tabs' keys both charge the order.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_charge_before_the_claim_commits_is_caught() {
    let b = Bounds {
        tabs: 2,
        ..Bounds::NONE
    };
    caught(Flaw::ChargeBeforeClaim, b, &[INVARIANTS[0]]);
}

/// Without the claim plan's stale-version check, a confirmation of the old cart that
/// arrives after a cart change is charged at the new cart's amount.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn a_claim_without_its_version_check_charges_another_cart() {
    let b = Bounds {
        tabs: 2,
        cart_changes: 1,
        ..Bounds::NONE
    };
    caught(Flaw::StaleClaim, b, &[INVARIANTS[7]]);
}

/// A two-phase provider that never deduplicates (localstripe's behaviour).
fn two_phase() -> Bounds {
    Bounds {
        provider_faults: 1,
        ticks: 1,
        two_phase: true,
        ..Bounds::NONE
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn two_phases_confirming_an_unsaved_id_charges_twice() {
    caught(Flaw::ConfirmUnsaved, two_phase(), &[INVARIANTS[0]]);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn two_phases_re_creating_on_take_over_charges_twice() {
    caught(Flaw::Recreate, two_phase(), &[INVARIANTS[0]]);
}

/// A declined payment object settled without being cancelled: the customer confirms it
/// with another card outside the server, and a succeeded payment belongs to an attempt that
/// answered "declined" (caught as soon as the charge happens, before any webhook could flag
/// it, or by the customer's second payment).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn two_phases_leaving_a_declined_payment_confirmable_is_caught() {
    let b = Bounds {
        two_phase: true,
        outside_confirms: 1,
        ..Bounds::NONE
    };
    caught(
        Flaw::LeaveConfirmable,
        b,
        &[INVARIANTS[8], INVARIANTS[3], INVARIANTS[0]],
    );
}

/// The sequence with the real code: 3-D Secure failed or passed or abandoned past
/// its deadline, a declined payment confirmed outside the server, the jobs and webhooks:
/// no invariant breaks, in every state.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn two_phases_hold_with_challenges_and_outside_confirms() {
    let good = Model {
        bounds: Bounds {
            two_phase: true,
            challenges: 1,
            outside_confirms: 1,
            ticks: 4,
            jobs: 1,
            ..Bounds::NONE
        },
        flaw: None,
    };
    let r = check::run(&good, search());
    assert!(r.violation.is_none(), "{:?}", r.violation);
    println!(
        "two phases, 3-D Secure, outside confirms: {} states",
        r.states
    );
}

/// The real sequencing on a provider that never deduplicates, with a crash, a lost or
/// failed provider answer and the jobs: no invariant breaks, in every state.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "searched in release by the model suite (scripts/test.sh)"
)]
fn two_phases_hold_without_provider_deduplication() {
    let good = Model {
        bounds: Bounds {
            crashes: 1,
            jobs: 1,
            ..two_phase()
        },
        flaw: None,
    };
    let r = check::run(&good, search());
    assert!(r.violation.is_none(), "{:?}", r.violation);
    assert!(!r.capped, "searched every state ({})", r.states);
    println!("two phases: {} states", r.states);
}
