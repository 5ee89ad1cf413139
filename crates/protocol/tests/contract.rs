//! The wire contract, pinned: spellings, statuses, round trips and key rules.

use payonce_protocol::provider::{Charge, ChargeStatus, EventType, WebhookEvent};
use payonce_protocol::*;
use proptest::prelude::*;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) {
    let json = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, value, "round trip changed the value: {json}");
}

#[test]
fn every_error_code_has_the_documented_status_and_spelling() {
    let expected = [
        ("IDEMPOTENCY_KEY_MISSING", 400),
        ("IDEMPOTENCY_KEY_INVALID", 400),
        ("INVALID_REQUEST", 400),
        ("UNAUTHENTICATED", 401),
        ("ORDER_NOT_FOUND", 404),
        ("PAYMENT_DECLINED", 402),
        ("IN_PROGRESS", 409),
        ("ATTEMPT_CANCELLED", 409),
        ("ORDER_CHANGED", 409),
        ("PAYMENT_ALREADY_ACTIVE", 409),
        ("PAYMENT_IN_PROGRESS", 409),
        ("OUT_OF_STOCK", 409),
        ("KEY_REUSED_WITH_DIFFERENT_DETAILS", 422),
        ("RATE_LIMITED", 429),
        ("STORE_UNAVAILABLE", 503),
    ];
    for (wire, status) in expected {
        let code = ErrorCode::parse(wire).unwrap_or_else(|| panic!("{wire} is missing"));
        assert_eq!(code.http_status(), status, "{wire}");
        assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{wire}\""));
    }
    for &code in ErrorCode::ALL {
        assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        assert!((400..600).contains(&code.http_status()), "{code:?}");
        assert!(code
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'_'));
        round_trip(&code);
        let problem = Problem::new(code);
        assert_eq!(problem.status, code.http_status());
        assert!(problem.type_uri.starts_with("/problems/"));
        round_trip(&problem);
    }
    let mut wires: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    wires.sort();
    wires.dedup();
    assert_eq!(
        wires.len(),
        ErrorCode::ALL.len(),
        "two codes share a spelling"
    );
}

#[test]
fn problem_serializes_rfc9457_members_and_omits_empty_extensions() {
    let p = Problem::new(ErrorCode::OrderChanged).with_detail("v4 is current");
    let v: serde_json::Value = serde_json::to_value(Problem {
        current_version: Some(4),
        ..p
    })
    .unwrap();
    assert_eq!(v["type"], "/problems/order-changed");
    assert_eq!(v["status"], 409);
    assert_eq!(v["code"], "ORDER_CHANGED");
    assert_eq!(v["currentVersion"], 4);
    assert_eq!(v["detail"], "v4 is current");
    assert!(v.get("retryAfter").is_none());
    assert!(v.get("attemptStatus").is_none());
}

#[test]
fn statuses_spell_lowercase_and_only_processing_is_open() {
    for s in AttemptStatus::ALL {
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            format!("\"{}\"", s.as_str())
        );
        assert_eq!(AttemptStatus::parse(s.as_str()), Some(s));
        assert_eq!(s.is_final(), s != AttemptStatus::Processing);
    }
    for s in OrderStatus::ALL {
        assert_eq!(OrderStatus::parse(s.as_str()), Some(s));
        round_trip(&s);
    }
    assert!(AttemptStatus::parse("PROCESSING").is_none());
}

#[test]
fn key_accepts_uuids_raw_and_quoted() {
    for k in [
        "6f13d95a-e6c1-4bf2-9459-99b502098dc1",
        "6f13d95ae6c14bf2945999b502098dc1",
        "\"6f13d95a-e6c1-4bf2-9459-99b502098dc1\"",
    ] {
        let key = IdempotencyKey::parse(k).unwrap();
        assert!(!key.as_str().contains('"'));
    }
    assert_eq!(
        IdempotencyKey::parse("\"abcdefghijklmnop\"").unwrap(),
        IdempotencyKey::parse("abcdefghijklmnop").unwrap(),
        "quoted and raw spellings are the same key"
    );
}

#[test]
fn key_rejections_are_typed() {
    assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
    assert_eq!(IdempotencyKey::parse("\"\""), Err(KeyError::Empty));
    assert_eq!(
        IdempotencyKey::parse("short"),
        Err(KeyError::TooShort { len: 5 })
    );
    assert_eq!(
        IdempotencyKey::parse(&"a".repeat(256)),
        Err(KeyError::TooLong { len: 256 })
    );
    assert!(IdempotencyKey::parse(&"a".repeat(255)).is_ok());
    assert_eq!(
        IdempotencyKey::parse("abcdefgh ijklmnopq"),
        Err(KeyError::InvalidChar { at: 8 })
    );
    assert_eq!(
        IdempotencyKey::parse(" abcdefghijklmnopq"),
        Err(KeyError::InvalidChar { at: 0 })
    );
    assert_eq!(
        IdempotencyKey::parse("\"abcdefghijklmnopq"),
        Err(KeyError::BadQuoting)
    );
    assert_eq!(
        IdempotencyKey::parse("\"abcdefgh\\\"ijklmnopq\""),
        Err(KeyError::BadQuoting)
    );
    assert_eq!(
        IdempotencyKey::parse("abcdefghijklmnopé"),
        Err(KeyError::InvalidChar { at: 16 })
    );
    let reasons: Vec<_> = [
        KeyError::Empty,
        KeyError::TooShort { len: 1 },
        KeyError::TooLong { len: 300 },
        KeyError::InvalidChar { at: 0 },
        KeyError::BadQuoting,
    ]
    .iter()
    .map(KeyError::reason)
    .collect();
    assert_eq!(
        reasons,
        [
            "empty",
            "too_short",
            "too_long",
            "invalid_char",
            "bad_quoting"
        ]
    );
}

#[test]
fn key_deserialization_validates_and_debug_hides_the_key() {
    let err = serde_json::from_str::<CancelRequest>(r#"{"key":"bad key"}"#).unwrap_err();
    assert!(err.to_string().contains("not allowed"), "{err}");
    let ok: CancelRequest =
        serde_json::from_str(r#"{"key":"6f13d95a-e6c1-4bf2-9459-99b502098dc1"}"#).unwrap();
    let debug = format!("{:?}", ok.key);
    assert!(
        !debug.contains("99b502098dc1"),
        "Debug leaks the whole key: {debug}"
    );
}

#[test]
fn requests_reject_unknown_fields_and_wrong_types() {
    assert!(serde_json::from_str::<PayRequest>(
        r#"{"orderVersion":1,"paymentMethodId":"pm","amount":1}"#
    )
    .is_err());
    assert!(
        serde_json::from_str::<PayRequest>(r#"{"orderVersion":"1","paymentMethodId":"pm"}"#)
            .is_err()
    );
    assert!(
        serde_json::from_str::<PayRequest>(r#"{"orderVersion":-1,"paymentMethodId":"pm"}"#)
            .is_err()
    );
    assert!(serde_json::from_str::<CreateOrderRequest>(r#"{"items":[],"total":1}"#).is_err());
    let pay: PayRequest =
        serde_json::from_str(r#"{"orderVersion":3,"paymentMethodId":"pm_123"}"#).unwrap();
    assert_eq!(
        pay,
        PayRequest {
            order_version: 3,
            payment_method_id: "pm_123".into(),
            extras: Default::default(),
        }
    );
}

#[test]
fn webhook_event_shape_is_stable() {
    let event = WebhookEvent {
        id: "evt_1".into(),
        event_type: EventType::ChargeSucceeded,
        created: 1,
        charge: Charge {
            id: "ch_1".into(),
            provider_key: "pk".into(),
            amount: 5000,
            currency: "USD".into(),
            payment_method_id: "pm_card_approve".into(),
            order_id: "o1".into(),
            status: ChargeStatus::Succeeded,
            created_at: 2,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
        },
    };
    let v = serde_json::to_value(&event).unwrap();
    assert_eq!(v["type"], "charge.succeeded");
    for t in EventType::ALL {
        let wire = serde_json::to_string(&t).unwrap();
        assert_eq!(wire, format!("\"{}\"", t.as_str()));
    }
    assert_eq!(v["charge"]["providerKey"], "pk");
    assert_eq!(v["charge"]["status"], "succeeded");
    round_trip(&event);
}

fn key_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[A-Za-z0-9._~:+/=-]{16,255}").unwrap()
}

fn payment() -> impl Strategy<Value = Payment> {
    (
        "[a-z0-9_]{1,20}",
        "[a-z0-9_]{1,20}",
        any::<i64>(),
        "[A-Z]{3}",
        "[a-z_]{1,20}",
        "[a-z0-9_]{1,20}",
        prop::sample::select(AttemptStatus::ALL.to_vec()),
    )
        .prop_map(
            |(id, order_id, amount, currency, pm, charge_id, status)| Payment {
                id,
                order_id,
                amount,
                currency,
                payment_method_id: pm,
                charge_id,
                status,
            },
        )
}

proptest! {
    #[test]
    fn any_valid_key_round_trips_raw_and_quoted(k in key_strategy()) {
        let raw = IdempotencyKey::parse(&k).unwrap();
        let quoted = IdempotencyKey::parse(&format!("\"{k}\"")).unwrap();
        prop_assert_eq!(&raw, &quoted);
        prop_assert_eq!(raw.as_str(), k.as_str());
        let json = serde_json::to_string(&raw).unwrap();
        prop_assert_eq!(serde_json::from_str::<IdempotencyKey>(&json).unwrap(), raw);
    }

    #[test]
    fn key_parser_never_panics_and_accepts_only_the_alphabet(s in ".{0,300}") {
        if let Ok(k) = IdempotencyKey::parse(&s) {
            prop_assert!((IdempotencyKey::MIN_LEN..=IdempotencyKey::MAX_LEN).contains(&k.as_str().len()));
            prop_assert!(k.as_str().bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:~+/=".contains(&b)));
        }
    }

    #[test]
    fn bodies_round_trip(
        order_id in "[a-zA-Z0-9_-]{1,40}",
        version in any::<u64>(),
        pm in "[a-z_]{1,30}",
        payment in payment(),
        status in prop::sample::select(AttemptStatus::ALL.to_vec()),
        order_status in prop::sample::select(OrderStatus::ALL.to_vec()),
        key in key_strategy(),
        qty in 1u32..100,
    ) {
        let snapshot = CheckoutSnapshot { order_id: order_id.clone(), order_version: version, payment_method_id: pm.clone(), extras: Default::default() };
        round_trip(&snapshot);
        round_trip(&snapshot.pay_request());
        round_trip(&PayResponse { status, order_id: order_id.clone(), payment: Some(payment.clone()) });
        round_trip(&PayResponse { status, order_id: order_id.clone(), payment: None });
        round_trip(&CancelRequest { key: IdempotencyKey::parse(&key).unwrap() });
        round_trip(&CancelResponse { status, payment: Some(payment.clone()) });
        round_trip(&RefundResponse { payment: payment.clone(), refund_id: "re_1".into() });
        let line = CartLine { sku: pm.clone(), quantity: qty };
        round_trip(&CreateOrderRequest { items: vec![line.clone()], coupon: Some("SAVE10".into()), address: None });
        round_trip(&UpdateCartRequest { items: Some(vec![line]), coupon: None, address: Some(order_id.clone()) });
        round_trip(&Order {
            id: order_id.clone(), status: order_status, version,
            items: vec![OrderLine { sku: pm.clone(), name: pm.clone(), quantity: qty, unit_price: 100, line_total: 100 * i64::from(qty) }],
            coupon: None, address: None, subtotal: 1, discount: 0, amount: 1, currency: "USD".into(),
            payment_in_progress: status == AttemptStatus::Processing, payment: Some(payment),
        });
        round_trip(&CatalogItem { sku: pm.clone(), name: pm.clone(), unit_price: 1, currency: "USD".into(), stock: 3 });
        round_trip(&DevSessionRequest { user_id: order_id.clone() });
        round_trip(&DevSessionResponse { user_id: order_id, token: pm });
        round_trip(&DevFault::DropResponse);
        prop_assert_eq!(DevFault::parse(DevFault::DropResponse.as_str()), Some(DevFault::DropResponse));
        for f in DevFault::ALL {
            prop_assert_eq!(DevFault::parse(f.as_str()), Some(f));
        }
        round_trip(&DevConfig { provider_url: "http://127.0.0.1:8081".into(), faults: DevFault::ALL.to_vec() });
    }

    #[test]
    fn problems_round_trip_with_any_extensions(
        idx in 0..ErrorCode::ALL.len(), retry in proptest::option::of(any::<u64>()),
        version in proptest::option::of(any::<u64>()), detail in proptest::option::of(".{0,80}"),
    ) {
        let mut p = Problem::new(ErrorCode::ALL[idx]);
        p.retry_after = retry;
        p.current_version = version;
        p.detail = detail;
        round_trip(&p);
    }
}

#[test]
fn checkout_extras_are_an_object_of_strings_compared_in_any_order() {
    let a: CheckoutSnapshot = serde_json::from_str(
        r#"{"orderId":"o","orderVersion":1,"paymentMethodId":"pm","extras":{"couponCode":"SAVE10","shippingOptionId":"ship"}}"#,
    )
    .unwrap();
    let b: CheckoutSnapshot = serde_json::from_str(
        r#"{"orderId":"o","orderVersion":1,"paymentMethodId":"pm","extras":{"shippingOptionId":"ship","couponCode":"SAVE10"}}"#,
    )
    .unwrap();
    assert_eq!(a, b, "the order of the members does not matter");
    assert_eq!(a.extras.get("couponCode"), Some("SAVE10"));
    let mut c = a.clone();
    c.extras.set("couponCode".into(), "OTHER".into());
    assert_ne!(a, c, "another value is another intention");
    let body = serde_json::to_value(a.pay_body()).unwrap();
    assert_eq!(body["extras"]["shippingOptionId"], "ship");
    // Without extras, the body is exactly a PayRequest (and old stored snapshots still read).
    let plain: CheckoutSnapshot =
        serde_json::from_str(r#"{"orderId":"o","orderVersion":1,"paymentMethodId":"pm"}"#).unwrap();
    assert!(plain.extras.is_empty());
    assert_eq!(
        serde_json::to_value(plain.pay_body()).unwrap(),
        serde_json::to_value(plain.pay_request()).unwrap()
    );
}
