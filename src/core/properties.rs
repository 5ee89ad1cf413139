//! Property tests across the core: the rules the whole SDK stands on.

use crate::core::attempt::{after_verdict, plan_pay, Attempt, AttemptState, Entry, PayPlan};
use crate::core::classify::{classify_pay, Final, Reply, Verdict};
use crate::core::flow::{Effect, FlowConfig, PayEnd, PayFlow};
use crate::core::retry::{BudgetConfig, RetryBudget, RetryPolicy};
use payonce_protocol::{
    AttemptStatus, CheckoutSnapshot, ErrorCode, IdempotencyKey, PayResponse, Payment, Problem,
};
use proptest::prelude::*;

fn snapshot() -> impl Strategy<Value = CheckoutSnapshot> {
    ("ord_[a-c]", 0u64..4, "pm_[ab]").prop_map(|(order_id, order_version, payment_method_id)| {
        CheckoutSnapshot {
            order_id,
            order_version,
            payment_method_id,
            extras: Default::default(),
        }
    })
}

fn attempt() -> impl Strategy<Value = Attempt> {
    ("[a-f0-9]{32}", snapshot(), 0u32..5).prop_map(|(k, snapshot, sends)| Attempt {
        key: IdempotencyKey::parse(&k).unwrap(),
        snapshot,
        state: AttemptState::Sent,
        created_at: 1,
        sends,
    })
}

fn payment() -> Payment {
    Payment {
        id: "pay_1".into(),
        order_id: "ord_a".into(),
        amount: 100,
        currency: "USD".into(),
        payment_method_id: "pm_a".into(),
        charge_id: "ch_1".into(),
        status: AttemptStatus::Succeeded,
    }
}

/// Any answer a server, a proxy or the network can produce.
fn reply() -> impl Strategy<Value = Reply<PayResponse>> {
    let code = proptest::sample::select(ErrorCode::ALL.to_vec());
    let status = prop_oneof![
        Just(200u16),
        Just(202),
        Just(402),
        Just(409),
        Just(422),
        Just(503),
        100u16..600
    ];
    let body_status = proptest::sample::select(AttemptStatus::ALL.to_vec());
    prop_oneof![
        any::<bool>().prop_map(|timed_out| Reply::NoAnswer { timed_out }),
        (
            status,
            proptest::option::of(code),
            proptest::option::of(body_status),
            proptest::option::of("[0-9 a-z]{0,4}")
        )
            .prop_map(|(status, code, body_status, retry_after)| Reply::Http {
                status,
                retry_after,
                ok: body_status.map(|s| PayResponse {
                    status: s,
                    order_id: "ord_a".into(),
                    payment: s.charged().then(payment),
                }),
                problem: code.map(Problem::new),
            }),
    ]
}

proptest! {
    /// A final outcome always removes the key; an unknown outcome or a refusal never does.
    #[test]
    fn only_final_outcomes_remove_the_key(a in attempt(), r in reply()) {
        let v = classify_pay(&r);
        let after = after_verdict(a.clone(), &v);
        match &v {
            Verdict::Final(_) => prop_assert!(after.is_none()),
            Verdict::Retry { .. } => {
                let kept = after.expect("an unknown outcome must keep the key");
                prop_assert_eq!(&kept.key, &a.key);
                prop_assert_eq!(kept.state, AttemptState::Unknown);
            }
            // Busy: kept until the cancel that tombstones it says what became of it.
            Verdict::Rejected { .. } | Verdict::Mismatch { .. } | Verdict::ActionRequired | Verdict::Busy => {
                prop_assert_eq!(after, Some(a))
            }
        }
    }

    /// No answer, a timeout or a 5xx is never mistaken for a final outcome.
    #[test]
    fn unknown_outcomes_are_never_final(r in reply()) {
        let v = classify_pay(&r);
        let unknown = match &r {
            Reply::NoAnswer { .. } => true,
            Reply::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429 || *status == 202,
        };
        if unknown {
            prop_assert!(matches!(v, Verdict::Retry { .. }), "{:?} -> {:?}", r, v);
        }
        if let Verdict::Final(Final::Paid { by_this_attempt, .. }) = v {
            // Paid by this key: a 200; paid by another key: 409 ORDER_ALREADY_PAID only.
            let status = if by_this_attempt { 200 } else { 409 };
            let from = matches!(r, Reply::Http { status: s, .. } if s == status);
            prop_assert!(from, "paid (byThisAttempt {}) without a {}", by_this_attempt, status);
        }
    }

    /// A changed snapshot never silently gets the old key, and the same snapshot always does.
    #[test]
    fn keys_follow_the_snapshot(a in attempt(), checkout in snapshot()) {
        match plan_pay(&Entry::Valid(a.clone()), &checkout) {
            PayPlan::Reuse(b) => {
                prop_assert_eq!(&checkout, &a.snapshot);
                prop_assert_eq!(b.key, a.key);
            }
            PayPlan::Conflict { existing } => {
                prop_assert_ne!(&checkout, &a.snapshot);
                prop_assert_eq!(existing, a.snapshot);
            }
            other => prop_assert!(false, "a stored attempt must never mint: {:?}", other),
        }
    }

    /// Replaying answers in any order: once a final one arrives the key is gone, before it the
    /// same key is always the one kept.
    #[test]
    fn a_key_survives_exactly_until_a_final_answer(a in attempt(), replies in proptest::collection::vec(reply(), 1..20)) {
        let mut stored = Some(a.clone());
        for r in &replies {
            let Some(cur) = stored.take() else { break };
            let v = classify_pay(r);
            stored = after_verdict(cur, &v);
            prop_assert_eq!(stored.is_none(), v.removes_key());
            if let Some(s) = &stored {
                prop_assert_eq!(&s.key, &a.key);
            }
        }
    }
}

/// What one driven pay call did, effect by effect.
#[derive(Debug, Default)]
struct Trace {
    sends: u32,
    waits: Vec<u64>,
    end: Option<PayEnd>,
}

/// Drives one pay call to its end the way the web layer does, feeding `replies` in order (then
/// "no answer" once they run out), advancing the clock by the waits and `gaps`, with the
/// network up or down per step. Checks, at every effect, the promises the loop makes about
/// its key; returns what happened for the caller's own checks.
fn drive(
    policy: RetryPolicy,
    deadline_ms: u64,
    replies: &[Reply<PayResponse>],
    gaps: &[u64],
    online: &[bool],
    units: &[f64],
) -> Result<Trace, TestCaseError> {
    let key = IdempotencyKey::parse("6f13d95a-e6c1-4bf2-9459-99b502098dc1").unwrap();
    let snap = CheckoutSnapshot {
        order_id: "ord_a".into(),
        order_version: 1,
        payment_method_id: "pm_a".into(),
        extras: Default::default(),
    };
    let config = FlowConfig {
        policy,
        deadline_ms,
        long_wait_ms: 10_000,
    };
    let mut flow = PayFlow::start(&Entry::Missing, snap, config, 0.0, || Some(key.clone()))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut budget = RetryBudget::new(BudgetConfig::default());
    let (mut now, mut step, mut saved, mut removed) = (0.0f64, 0usize, false, false);
    let mut t = Trace::default();
    let mut last_final = false;
    let mut released = false;
    let mut last_status = None;
    for _ in 0..10_000 {
        let up = online
            .get(step % online.len().max(1))
            .copied()
            .unwrap_or(true);
        let Some(effect) = flow.poll(now, up) else {
            return Err(TestCaseError::fail("the flow stalled before Done"));
        };
        match effect {
            Effect::Save { attempt, new } => {
                prop_assert!(!removed, "a removed key came back");
                prop_assert_eq!(&attempt.key, &key);
                saved |= new;
            }
            Effect::Remove(k) => {
                prop_assert_eq!(&k, &key);
                prop_assert!(last_final, "the key was removed before a final answer");
                removed = true;
            }
            Effect::Send { attempt } => {
                prop_assert!(saved, "a request left before its key was saved");
                prop_assert!(!removed, "a request left with a removed key");
                t.sends += 1;
                prop_assert_eq!(attempt, t.sends);
                prop_assert_eq!(&flow.attempt().key, &key, "every send carries the same key");
                let reply = replies
                    .get(step)
                    .cloned()
                    .unwrap_or(Reply::NoAnswer { timed_out: false });
                let verdict = classify_pay(&reply);
                // A refusal that claimed no key, to the key's first request, releases it
                // (`attempt::released`): no other request with it ever left.
                released = t.sends == 1
                    && matches!(verdict, Verdict::Rejected { status, code }
                        if crate::core::classify::claims_no_key(status, code));
                last_final = matches!(verdict, Verdict::Final(_)) || released;
                now += gaps.get(step).copied().unwrap_or(1) as f64;
                let u = units.get(step).copied().unwrap_or(0.5);
                step += 1;
                flow.on_reply(&reply, now, &mut budget, &mut || u);
            }
            Effect::Wait { ms, .. } => {
                prop_assert!(
                    now + (ms as f64) < deadline_ms as f64,
                    "a wait passed the deadline"
                );
                t.waits.push(ms);
                now += ms as f64;
                flow.on_waited();
            }
            Effect::WaitOnline { max_ms } => {
                let back = online
                    .get(step % online.len().max(1))
                    .copied()
                    .unwrap_or(true);
                now += if back { 1.0 } else { max_ms as f64 };
                step += 1;
                flow.on_network(back);
            }
            Effect::Done(end) => {
                prop_assert_eq!(
                    matches!(end, PayEnd::Final(_)) || released,
                    removed,
                    "{:?}",
                    end
                );
                prop_assert_eq!(flow.poll(now, true), None, "nothing after Done");
                t.end = Some(end);
                return Ok(t);
            }
            Effect::Status(status) => {
                prop_assert_ne!(
                    last_status,
                    Some(status),
                    "onStatus heard the same status twice"
                );
                last_status = Some(status);
            }
            Effect::Remind { .. } | Effect::Warn(_) => {}
        }
    }
    Err(TestCaseError::fail("the flow never ended"))
}

proptest! {
    /// Whatever the server, the network and the clock do, the pay loop saves the key before
    /// the first request, sends only that key, removes it only after a final answer, never
    /// waits past the deadline, and always ends.
    #[test]
    fn the_pay_loop_keeps_the_key_until_a_final_answer(
        replies in proptest::collection::vec(reply(), 0..30),
        gaps in proptest::collection::vec(0u64..20_000, 30),
        online in proptest::collection::vec(proptest::bool::weighted(0.8), 1..10),
        units in proptest::collection::vec(0.0f64..1.0, 30),
    ) {
        let t = drive(RetryPolicy::default(), 60_000, &replies, &gaps, &online, &units)?;
        prop_assert!(t.end.is_some());
    }

    /// Whatever the answers say (`Retry-After: 0` included), one pay call sends at most
    /// `max_attempts` requests and every wait between them is at least the base delay.
    #[test]
    fn the_pay_loop_never_hot_loops(
        replies in proptest::collection::vec(reply(), 0..40),
        gaps in proptest::collection::vec(0u64..50, 40),
        units in proptest::collection::vec(0.0f64..1.0, 40),
        base in 0u64..1_000, max_attempts in 1u32..12,
    ) {
        let policy = RetryPolicy { base_delay_ms: base, max_attempts, ..RetryPolicy::default() };
        let t = drive(policy, 600_000, &replies, &gaps, &[true], &units)?;
        prop_assert!(t.sends <= max_attempts, "{} sends > maxAttempts {}", t.sends, max_attempts);
        prop_assert!(t.waits.iter().all(|w| *w >= base), "{:?} below {}", t.waits, base);
    }
}
