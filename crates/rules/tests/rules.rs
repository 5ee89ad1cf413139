//! The rules, table-driven and by property, natively (no server, no database).

use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, OrderLine, Payment};
use payonce_rules::ids::{AttemptId, LeaseToken, OrderId, PaymentId};
use payonce_rules::pay_key::{replay_of, Current, Details};
use payonce_rules::plan::{
    apply_hint, cancel_answer, cancel_forgotten, order_conflict, plan_claim, plan_settle,
    reconcile, Lookup, OrderTerms, Outcome, Redrive, SettlePlan,
};
use payonce_rules::policy::{deletable, retry_after_secs, ttl_ms, Bucket};
use payonce_rules::*;
use proptest::prelude::*;
use std::time::Duration;

const POLICY: Policy = Policy {
    lease_ms: 30_000,
    key_retention_ms: 86_400_000,
    reconcile_after_ms: 120_000,
    audit_retention_ms: 1_000_000,
    action_deadline_ms: 3_600_000,
    in_progress_wait_ms: 2_000,
    wait_poll_ms: 25,
};

fn details<'a>(
    user: &'a str,
    order: &'a str,
    version: i64,
    amount: i64,
    method: &'a str,
) -> Details<'a> {
    Details {
        user,
        order_id: order,
        order_version: version,
        amount,
        currency: "USD",
        payment_method_id: method,
        extras: &NO_EXTRAS,
    }
}

static NO_EXTRAS: std::sync::LazyLock<payonce_protocol::Extras> =
    std::sync::LazyLock::new(Default::default);

fn terms(user: &str, version: i64, amount: i64, method: &str) -> Terms {
    Terms {
        user: user.into(),
        order_id: OrderId::from_stored("o1"),
        fingerprint: fingerprint(&details(user, "o1", version, amount, method)),
        order_version: version,
        amount,
        currency: "USD".into(),
    }
}

fn processing(locked_until: Option<i64>) -> Record {
    Record::Processing(Processing {
        id: AttemptId::from_stored("att"),
        terms: terms("alice", 1, 100, "pm"),
        payment_method_id: "pm".into(),
        provider_key: "pk".into(),
        provider_ref: None,
        locked_until,
        created_at: 0,
    })
}

fn final_(status: AttemptStatus) -> Record {
    Record::Final(Final {
        id: AttemptId::from_stored("att"),
        terms: terms("alice", 1, 100, "pm"),
        status,
        answer: Answer {
            status: 200,
            body: "{}".into(),
        },
        expires_at: 1_000,
    })
}

fn tombstone() -> Record {
    Record::Tombstone(Tombstone {
        id: AttemptId::from_stored("att"),
        user: "alice".into(),
        order_id: OrderId::from_stored("o1"),
        order_version: Some(1),
        expires_at: 1_000,
    })
}

/// The order at version `v` costs 100 at version 1 and 150 at version 2.
fn req<'a>(
    user: &'a str,
    order: &'a str,
    version: u64,
    method: &'a str,
    current: Option<i64>,
) -> PayRequest<'a> {
    PayRequest {
        user,
        order_id: order,
        order_version: version,
        payment_method_id: method,
        extras: &NO_EXTRAS,
        current: current.map(|v| Current {
            version: v,
            amount: if v == 1 { 100 } else { 150 },
            currency: "USD",
        }),
    }
}

#[test]
fn rule_two_table() {
    let replay = NextAction::Replay(Answer {
        status: 200,
        body: "{}".into(),
    });
    let same = req("alice", "o1", 1, "pm", Some(1));
    // (record, request, now, may_wait) -> action, in the README's order.
    let table: Vec<(Option<Record>, PayRequest, i64, bool, NextAction)> = vec![
        (None, same, 0, true, NextAction::StartProcessing),
        (
            Some(final_(AttemptStatus::Succeeded)),
            same,
            0,
            true,
            replay.clone(),
        ),
        (
            Some(final_(AttemptStatus::Declined)),
            same,
            0,
            true,
            replay.clone(),
        ),
        (
            Some(final_(AttemptStatus::Refunded)),
            same,
            0,
            true,
            replay.clone(),
        ),
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("alice", "o1", 1, "pm2", Some(1)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Succeeded),
        ),
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("alice", "o2", 1, "pm", Some(1)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Succeeded),
        ),
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("bob", "o1", 1, "pm", Some(1)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Succeeded),
        ),
        // The cart changed since: the attempt's own version still replays, another does not.
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("alice", "o1", 1, "pm", Some(2)),
            0,
            true,
            replay.clone(),
        ),
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("alice", "o1", 2, "pm", Some(2)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Succeeded),
        ),
        (
            Some(final_(AttemptStatus::Succeeded)),
            req("alice", "o1", 3, "pm", Some(2)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Succeeded),
        ),
        (Some(processing(Some(10))), same, 5, true, NextAction::Wait),
        (
            Some(processing(Some(10))),
            same,
            5,
            false,
            NextAction::InProgress,
        ),
        (
            Some(processing(Some(10))),
            same,
            10,
            true,
            NextAction::Reconcile,
        ),
        (Some(processing(None)), same, 0, true, NextAction::Reconcile),
        (
            Some(processing(Some(10))),
            req("alice", "o1", 1, "pm2", Some(1)),
            5,
            true,
            NextAction::Mismatch(AttemptStatus::Processing),
        ),
        (Some(tombstone()), same, 0, true, NextAction::Cancelled),
        (
            Some(tombstone()),
            req("alice", "o1", 9, "other", Some(9)),
            0,
            true,
            NextAction::Cancelled,
        ),
        (
            Some(tombstone()),
            req("alice", "o2", 1, "pm", Some(1)),
            0,
            true,
            NextAction::Mismatch(AttemptStatus::Cancelled),
        ),
    ];
    for (i, (record, r, now, may_wait, want)) in table.into_iter().enumerate() {
        assert_eq!(decide(record.as_ref(), &r, now, may_wait), want, "row {i}");
    }
}

/// Before the order is read only a replay answers, for the caller's final attempt, the
/// order in the URL and the same details.
#[test]
fn replay_of_a_record_alone() {
    let ok = final_(AttemptStatus::Succeeded);
    assert!(replay_of(&ok, &req("alice", "o1", 1, "pm", None)).is_some());
    for r in [
        req("bob", "o1", 1, "pm", None),
        req("alice", "o2", 1, "pm", None),
        req("alice", "o1", 2, "pm", None),
        req("alice", "o1", 1, "pm2", None),
    ] {
        assert!(replay_of(&ok, &r).is_none(), "{r:?}");
    }
    assert!(replay_of(
        &processing(Some(i64::MAX)),
        &req("alice", "o1", 1, "pm", None)
    )
    .is_none());
    assert!(replay_of(&tombstone(), &req("alice", "o1", 1, "pm", None)).is_none());
}

fn line(sku: &str, q: u32) -> OrderLine {
    OrderLine {
        sku: sku.into(),
        name: sku.into(),
        quantity: q,
        unit_price: 10,
        line_total: 10 * i64::from(q),
    }
}

fn key() -> IdempotencyKey {
    IdempotencyKey::parse("0123456789abcdef").unwrap()
}

#[test]
fn a_claim_plan_reserves_in_sku_order_and_binds_the_request() {
    let lines = [line("b", 1), line("a", 2)];
    let order = OrderTerms {
        id: &OrderId::from_stored("o1"),
        version: 3,
        amount: 40,
        currency: "USD",
        lines: &lines,
    };
    let plan = plan_claim(
        "alice",
        &key(),
        order,
        3,
        "pm",
        &NO_EXTRAS,
        AttemptId::from_stored("att"),
        LeaseToken::from_stored("tok"),
        1_000,
        &POLICY,
    )
    .unwrap();
    assert_eq!(
        plan.stock
            .iter()
            .map(|l| l.sku.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let a = &plan.claim.attempt;
    assert_eq!(a.locked_until, Some(31_000));
    assert_eq!(a.provider_key, provider_key("alice", &key(), "o1"));
    assert_eq!(
        a.terms.fingerprint,
        fingerprint(&Details {
            currency: "USD",
            ..details("alice", "o1", 3, 40, "pm")
        })
    );
    assert_eq!(plan.audit.len(), 2);
    assert_eq!(
        (plan.audit[1].from.as_deref(), plan.audit[1].to.as_str()),
        (Some("unpaid"), "unpaid (payment active)")
    );
    // Another version than the one read is ORDER_CHANGED naming the current one.
    let p = plan_claim(
        "alice",
        &key(),
        order,
        2,
        "pm",
        &NO_EXTRAS,
        AttemptId::from_stored("att"),
        LeaseToken::from_stored("tok"),
        0,
        &POLICY,
    )
    .unwrap_err();
    assert_eq!(
        (p.code, p.current_version),
        (ErrorCode::OrderChanged, Some(3))
    );
}

#[test]
fn order_conflicts() {
    assert_eq!(order_conflict(Some((4, false)), 3).current_version, Some(4));
    assert_eq!(
        order_conflict(Some((3, false)), 3).code,
        ErrorCode::PaymentAlreadyActive
    );
    // Paid is the answer whatever the version: the client shows the receipt, it is not busy.
    for v in [3, 4] {
        assert_eq!(
            order_conflict(Some((v, true)), 3).code,
            ErrorCode::OrderAlreadyPaid
        );
    }
    assert_eq!(order_conflict(None, 3).code, ErrorCode::OrderNotFound);
}

fn charge(status: ChargeStatus) -> Charge {
    Charge {
        id: "ch_1".into(),
        provider_key: "pk".into(),
        amount: 100,
        currency: "USD".into(),
        payment_method_id: "pm".into(),
        order_id: "o1".into(),
        status,
        created_at: 0,
        next_action_url: None,
        decline_code: None,
        client_secret: None,
    }
}

fn claim() -> payonce_rules::plan::Claim {
    payonce_rules::plan::Claim::of(
        &processing(Some(5)),
        &[line("b", 1), line("a", 1)],
        "alice",
        LeaseToken::from_stored("tok"),
    )
    .unwrap()
}

#[test]
fn settle_plans_by_outcome() {
    match plan_settle(
        &claim(),
        Outcome::Succeeded(charge(ChargeStatus::Succeeded)),
        PaymentId::from_stored("pay_1"),
        10,
        &POLICY,
    ) {
        SettlePlan::Charged {
            finish,
            payment,
            audit,
        } => {
            assert_eq!(
                (finish.status, finish.answer.status, finish.expires_at),
                (AttemptStatus::Succeeded, 200, 86_400_010)
            );
            assert_eq!(finish.charge_id.as_deref(), Some("ch_1"));
            assert!(finish.answer.body.contains("\"pay_1\""));
            assert_eq!(payment.charge_id, "ch_1");
            assert_eq!(audit[1].to, "paid");
        }
        other => panic!("{other:?}"),
    }
    for (outcome, status, code) in [
        (
            Outcome::Declined(charge(ChargeStatus::Declined)),
            AttemptStatus::Declined,
            "PAYMENT_DECLINED",
        ),
        (
            Outcome::Rejected("400".into()),
            AttemptStatus::Failed,
            "PAYMENT_FAILED",
        ),
    ] {
        match plan_settle(
            &claim(),
            outcome,
            PaymentId::from_stored("pay_1"),
            10,
            &POLICY,
        ) {
            SettlePlan::Uncharged {
                finish,
                release,
                audit,
            } => {
                assert_eq!((finish.status, finish.answer.status), (status, 402));
                assert!(finish.answer.body.contains(code));
                assert_eq!(release[0].sku, "a", "stock goes back in SKU order");
                assert_eq!(audit[1].to, "unpaid");
            }
            other => panic!("{other:?}"),
        }
    }
    match plan_settle(
        &claim(),
        Outcome::Unknown("timeout".into()),
        PaymentId::from_stored("pay_1"),
        10,
        &POLICY,
    ) {
        SettlePlan::Unknown { answer } => assert_eq!(answer.status, 202),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_charge_waiting_for_the_customer_stays_open_with_its_page_in_next() {
    let waiting = Charge {
        next_action_url: Some("http://127.0.0.1:9/charges/ch_1/action".into()),
        decline_code: None,
        client_secret: None,
        ..charge(ChargeStatus::RequiresAction)
    };
    let outcome = Outcome::of(waiting.clone());
    assert_eq!(outcome, Outcome::ActionRequired(waiting.clone()));
    assert_eq!(
        reconcile(Lookup::Found(waiting.clone())),
        Ok(outcome.clone())
    );
    match plan_settle(
        &claim(),
        outcome,
        PaymentId::from_stored("pay_1"),
        10,
        &POLICY,
    ) {
        SettlePlan::ActionRequired { answer } => {
            assert_eq!(answer.status, 402);
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(body["code"], "ACTION_REQUIRED");
            assert_eq!(body["status"], 402);
            assert_eq!(body["attemptStatus"], "processing");
            assert_eq!(
                body["next"],
                serde_json::json!({"type": "redirect", "url": "http://127.0.0.1:9/charges/ch_1/action"})
            );
        }
        other => panic!("{other:?}"),
    }
    // A provider that asks for an action without a page has told us nothing usable.
    let nameless = charge(ChargeStatus::RequiresAction);
    match plan_settle(
        &claim(),
        Outcome::of(nameless),
        PaymentId::from_stored("pay_1"),
        10,
        &POLICY,
    ) {
        SettlePlan::Unknown { answer } => assert_eq!(answer.status, 202),
        other => panic!("{other:?}"),
    }
}

#[test]
fn reconcile_and_webhook_tables() {
    assert_eq!(
        reconcile(Lookup::Found(charge(ChargeStatus::Succeeded))),
        Ok(Outcome::Succeeded(charge(ChargeStatus::Succeeded)))
    );
    assert_eq!(
        reconcile(Lookup::Found(charge(ChargeStatus::Refunded))),
        Ok(Outcome::Succeeded(charge(ChargeStatus::Refunded)))
    );
    assert_eq!(
        reconcile(Lookup::Found(charge(ChargeStatus::Declined))),
        Ok(Outcome::Declined(charge(ChargeStatus::Declined)))
    );
    assert_eq!(reconcile(Lookup::NotFound), Err(Redrive));
    assert_eq!(
        reconcile(Lookup::Unknown("x".into())),
        Ok(Outcome::Unknown("x".into()))
    );
    assert_eq!(
        apply_hint(Lookup::NotFound),
        Some(None),
        "a hint for no charge applies nothing"
    );
    assert_eq!(
        apply_hint(Lookup::Unknown("x".into())),
        None,
        "deliver again"
    );
}

#[test]
fn cancel_table() {
    assert_eq!(
        cancel_answer(&processing(Some(1)), "o1"),
        Ok((AttemptStatus::Processing, false))
    );
    assert_eq!(
        cancel_answer(&final_(AttemptStatus::Succeeded), "o1"),
        Ok((AttemptStatus::Succeeded, true))
    );
    assert_eq!(
        cancel_answer(&final_(AttemptStatus::Refunded), "o1"),
        Ok((AttemptStatus::Refunded, true))
    );
    assert_eq!(
        cancel_answer(&final_(AttemptStatus::Declined), "o1"),
        Ok((AttemptStatus::Declined, false))
    );
    assert_eq!(
        cancel_answer(&tombstone(), "o1"),
        Ok((AttemptStatus::Cancelled, false))
    );
    let p = cancel_answer(&final_(AttemptStatus::Succeeded), "o2").unwrap_err();
    assert_eq!(
        (p.code, p.attempt_status),
        (
            ErrorCode::KeyReusedWithDifferentDetails,
            Some(AttemptStatus::Succeeded)
        )
    );
}

/// A cancel of a forgotten key on a paid order: the provider's word decides.
#[test]
fn cancel_of_a_forgotten_key() {
    let payment = Payment {
        id: "pay_1".into(),
        order_id: "o1".into(),
        amount: 100,
        currency: "USD".into(),
        payment_method_id: "pm".into(),
        charge_id: "ch_1".into(),
        status: AttemptStatus::Refunded,
    };
    let paid = cancel_forgotten(
        Lookup::Found(charge(ChargeStatus::Succeeded)),
        Some(payment.clone()),
    );
    assert_eq!(
        (paid.status, paid.payment),
        (AttemptStatus::Refunded, Some(payment.clone())),
        "the key paid the order: its payment, as it stands"
    );
    let other = Payment {
        charge_id: "ch_other".into(),
        ..payment.clone()
    };
    let r = cancel_forgotten(Lookup::Found(charge(ChargeStatus::Succeeded)), Some(other));
    assert_eq!(
        (r.status, r.payment),
        (AttemptStatus::Succeeded, None),
        "charged, but not the order's payment: never cancelled"
    );
    for lookup in [
        Lookup::NotFound,
        Lookup::Found(charge(ChargeStatus::Declined)),
    ] {
        let r = cancel_forgotten(lookup, Some(payment.clone()));
        assert_eq!((r.status, r.payment), (AttemptStatus::Cancelled, None));
    }
    let r = cancel_forgotten(Lookup::Unknown("down".into()), Some(payment));
    assert_eq!(
        r.status,
        AttemptStatus::Processing,
        "cannot tell: keep the key"
    );
}

/// Retention: finals at expiry, tombstones once expired and their order no longer payable
/// at their version, processing never.
#[test]
fn what_retention_deletes() {
    let (before, after) = (1_000, 1_001);
    let fin = final_(AttemptStatus::Succeeded);
    assert!(!deletable(&fin, before, None) && deletable(&fin, after, Some(1)));
    assert!(!deletable(&processing(None), i64::MAX, None));
    let t = tombstone();
    assert!(
        !deletable(&t, after, Some(1)),
        "payable at its version: kept"
    );
    assert!(!deletable(&t, before, None), "within retention: kept");
    assert!(deletable(&t, after, Some(2)), "the order changed");
    assert!(deletable(&t, after, None), "paid, refunded or gone");
    let Record::Tombstone(old) = t else {
        unreachable!()
    };
    let legacy = Record::Tombstone(Tombstone {
        order_version: None,
        ..old
    });
    assert!(
        !deletable(&legacy, after, Some(7)),
        "no version: every version"
    );
    assert!(deletable(&legacy, after, None));
}

#[test]
fn time_arithmetic() {
    assert_eq!(POLICY.lease_until(5), 30_005);
    assert_eq!(POLICY.expires_at(i64::MAX), i64::MAX, "saturates");
    assert_eq!(POLICY.reconcile_before(200_000), 80_000);
    assert_eq!(ttl_ms(1_000, 400), Some(600));
    assert_eq!(ttl_ms(1_000, 1_000), None, "an expired key is never copied");
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    assert_eq!(Bucket::NewAttempts.label(), "new_attempts");
}

proptest! {
    #[test]
    fn fingerprints_differ_when_any_detail_differs(
        u in "[a-z]{1,8}", o in "[a-z]{1,8}", v in 1i64..1000, a in 1i64..100_000, m in "[a-z_]{1,8}",
        which in 0usize..5,
    ) {
        let base = fingerprint(&details(&u, &o, v, a, &m));
        prop_assert_eq!(&base, &fingerprint(&details(&u, &o, v, a, &m)));
        let (u2, o2, m2) = (format!("{u}x"), format!("{o}x"), format!("{m}x"));
        let changed = match which {
            0 => details(&u2, &o, v, a, &m),
            1 => details(&u, &o2, v, a, &m),
            2 => details(&u, &o, v + 1, a, &m),
            3 => details(&u, &o, v, a + 1, &m),
            _ => details(&u, &o, v, a, &m2),
        };
        prop_assert_ne!(base, fingerprint(&changed));
    }

    #[test]
    fn provider_keys_are_scoped_by_user_scope_and_domain(k in "[A-Za-z0-9-]{16,64}") {
        let key = IdempotencyKey::parse(&k).unwrap();
        let pk = |user: &str, order: &str| provider_key(user, &key, order);
        prop_assert_ne!(pk("alice", "ord_1"), pk("bob", "ord_1"));
        // The same key on another order after its retention: another charge.
        prop_assert_ne!(pk("alice", "ord_1"), pk("alice", "ord_2"));
        // Length-prefixed fields: moving bytes between user and scope changes the key.
        prop_assert_ne!(pk("alice", "ord_1"), pk("alic", "eord_1"));
        prop_assert_ne!(pk("alice", "ord_1")[3..].to_owned(), provider_refund_key("alice", &key, "ord_1")[3..].to_owned());
        prop_assert_ne!(pk("alice", "ord_1"), payonce_rules::keyed::PAY.legacy_provider_key("alice", &key));
        prop_assert!(IdempotencyKey::parse(&pk("alice", "ord_1")).is_ok());
    }

    /// Whatever the record and the clock: a request with the attempt's exact details never
    /// gets a mismatch, a final record never starts a claim or reconciles, and only a
    /// processing record whose lease is over reconciles.
    #[test]
    fn decide_never_charges_a_known_key_twice(
        kind in 0u8..3, lease in proptest::option::of(0i64..100), now in 0i64..100, may_wait: bool,
        status in proptest::sample::select(vec![AttemptStatus::Succeeded, AttemptStatus::Declined, AttemptStatus::Failed, AttemptStatus::Refunded]),
    ) {
        let record = match kind { 0 => processing(lease), 1 => final_(status), _ => tombstone() };
        let action = decide(Some(&record), &req("alice", "o1", 1, "pm", Some(1)), now, may_wait);
        prop_assert!(!matches!(action, NextAction::StartProcessing | NextAction::Mismatch(_)));
        let expired = lease.is_none_or(|l| l <= now);
        prop_assert_eq!(matches!(action, NextAction::Reconcile), kind == 0 && expired);
        prop_assert_eq!(matches!(action, NextAction::Replay(_)), kind == 1);
    }

    #[test]
    fn ttl_never_outlives_the_key(expires in any::<i64>(), now in any::<i64>()) {
        if let Some(t) = ttl_ms(expires, now) {
            prop_assert!(expires > now && i128::from(t) == i128::from(expires) - i128::from(now) || t == u64::try_from(i64::MAX).unwrap());
        }
    }
}

/// Refunds go through the same rule as pays: the refund's fingerprint is (caller, payment),
/// a processing refund has no lease (it is called again with the same refund key), and the
/// two operations' fingerprints and provider keys never collide.
#[test]
fn the_shared_rule_serves_refunds() {
    use payonce_rules::keyed::{decide as shared, Stored, PAY, REFUND};
    let fp = REFUND.fingerprint(&["alice", "pay_1"]);
    let other = REFUND.fingerprint(&["alice", "pay_2"]);
    let answer = Answer {
        status: 200,
        body: "{}".into(),
    };
    let done = Stored::Final {
        fingerprint: &fp,
        status: AttemptStatus::Refunded,
        answer: &answer,
    };
    let busy = Stored::Processing {
        fingerprint: &fp,
        locked_until: None,
    };
    let table = [
        (None, NextAction::StartProcessing),
        (Some(done), NextAction::Replay(answer.clone())),
        (Some(busy), NextAction::Reconcile),
    ];
    for (stored, want) in table {
        assert_eq!(shared(stored, Some(&fp), "alice", "pay_1", 0, false), want);
    }
    assert_eq!(
        shared(Some(done), Some(&other), "alice", "pay_2", 0, false),
        NextAction::Mismatch(AttemptStatus::Refunded),
        "the key on another payment"
    );
    assert_ne!(PAY.fingerprint(&["alice", "pay_1"]), fp);
    assert_ne!(
        PAY.provider_key("alice", &key(), "pay_1")[3..],
        REFUND.provider_key("alice", &key(), "pay_1")[3..]
    );
    // The pay fingerprint is PAY's over its six fields, byte for byte.
    let d = details("alice", "o1", 2, 100, "pm");
    assert_eq!(
        fingerprint(&d),
        PAY.fingerprint(&["alice", "o1", "2", "100", "USD", "pm"])
    );
}

/// A succeeded charge for another order, amount or currency than the attempt's is flagged
/// for review with the 202 of an unknown outcome; it never becomes a payment.
#[test]
fn a_charge_for_other_terms_is_reviewed_not_paid() {
    let changed: [fn(&mut Charge); 3] = [
        |c| c.order_id = "o2".into(),
        |c| c.amount += 1,
        |c| c.currency = "EUR".into(),
    ];
    for change in changed {
        let mut c = charge(ChargeStatus::Succeeded);
        change(&mut c);
        match plan_settle(
            &claim(),
            Outcome::Succeeded(c),
            PaymentId::from_stored("pay_1"),
            10,
            &POLICY,
        ) {
            SettlePlan::Review { answer, audit } => {
                assert_eq!(answer.status, 202);
                assert_eq!(audit.to, "processing (needs review)");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A paid order's forgotten key is answered from the payment's provider key when the store
/// has it; without it the provider decides.
#[test]
fn cancel_of_a_forgotten_key_from_the_store() {
    use payonce_rules::plan::cancel_from_store;
    let payment = Payment {
        id: "pay_1".into(),
        order_id: "o1".into(),
        amount: 100,
        currency: "USD".into(),
        payment_method_id: "pm".into(),
        charge_id: "ch_1".into(),
        status: AttemptStatus::Succeeded,
    };
    let paid = cancel_from_store("pk_a", Some("pk_a"), Some(payment.clone())).unwrap();
    assert_eq!(
        (paid.status, paid.payment),
        (AttemptStatus::Succeeded, Some(payment.clone()))
    );
    let other = cancel_from_store("pk_b", Some("pk_a"), Some(payment.clone())).unwrap();
    assert_eq!(
        (other.status, other.payment),
        (AttemptStatus::Cancelled, None)
    );
    assert_eq!(cancel_from_store("pk_a", None, Some(payment)), None);
}

/// An attempt waiting for its customer is looked at after half its age, 5 s to 10 min, and
/// never after its deadline.
#[test]
fn customer_checks_back_off_with_age() {
    use payonce_rules::policy::next_customer_check;
    let late = Policy {
        action_deadline_ms: 86_400_000,
        ..POLICY
    };
    assert_eq!(
        next_customer_check(1_000, 1_000, &late),
        6_000,
        "at least 5 s"
    );
    assert_eq!(
        next_customer_check(0, 60_000, &late),
        90_000,
        "half its age"
    );
    assert_eq!(
        next_customer_check(0, 7_200_000, &late),
        7_800_000,
        "at most 10 min"
    );
    // A one-hour deadline: the check at 50 min would be at 75 min; it is at the deadline.
    assert_eq!(next_customer_check(0, 3_000_000, &POLICY), 3_600_000);
    // Past the deadline (a job round that was late): at once, never in the past.
    assert_eq!(next_customer_check(0, 4_000_000, &POLICY), 4_000_000);
}
