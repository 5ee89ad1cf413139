//! One scenario per pay rule and per cancel row; each runs on SQLite and on PostgreSQL.

use crate::common::{
    id_of, key, ledger, order_state_of, Backend, Checkout, HttpApi, Opts, TestApp,
};
use crate::on_both_backends;
use payonce_protocol::headers::DEV_FAULT;
use payonce_protocol::{AttemptStatus, ErrorCode, OrderStatus};
use serde_json::json;

const APPROVE: &str = "pm_card_approve";
const DECLINE: &str = "pm_card_decline";
const SLOW: &str = "pm_card_slow";
const TIMEOUT: &str = "pm_card_timeout";
const TRANSIENT: &str = "pm_card_transient";

on_both_backends!(
    auth_tokens_are_signed_and_orders_are_private,
    orders_are_priced_by_the_server_and_cart_edits_bump_the_version,
    rule1_order_ownership_then_key_presence_and_shape,
    rule2_same_key_with_different_details_is_422,
    rule2_final_results_replay_byte_for_byte,
    rule2_replays_check_user_order_and_details_before_answering,
    rule2_processing_key_is_409_in_progress_with_retry_after,
    rule2_cancelled_tombstone_blocks_a_late_pay,
    rule3_version_mismatch_is_order_changed_and_leaves_the_key_unused,
    rule3_busy_order_is_payment_already_active_paid_is_order_already_paid,
    rule3_insufficient_stock_is_out_of_stock,
    rule4_success_pays_the_order_and_decrements_stock,
    rule4_decline_unlocks_the_order_and_keeps_stock,
    rule4_provider_timeout_or_5xx_answers_202_processing,
    rule5_transient_failure_is_redriven_with_the_same_provider_key,
    rule6_every_state_change_is_audited,
    cancel_unknown_key_inserts_a_tombstone,
    cancel_answers_processing_while_charging_then_the_charge,
    cancel_final_attempts_answer_their_status,
    keys_are_scoped_per_user,
    dropped_response_is_replayed_on_retry,
);

async fn auth_tokens_are_signed_and_orders_are_private(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.session("alice").await;
    let order = app.create_order(&alice, &[("tee-classic", 1)]).await;
    let id = id_of(&order);

    // No token, a forged token, a tampered token: 401 problems.
    let r = app
        .send(app.http.get(app.url(&format!("/orders/{id}"))))
        .await;
    assert_eq!((r.status, r.code()), (401, ErrorCode::Unauthenticated));
    let tampered = alice.replacen("alice", "bobby", 1);
    for token in [tampered.as_str(), "v1.alice.99999999999.00", "garbage"] {
        let r = app.get_order(token, &id).await;
        assert_eq!(
            (r.status, r.code()),
            (401, ErrorCode::Unauthenticated),
            "{token}"
        );
        assert!(r.is_problem());
    }

    // The cookie set by /dev/sessions works instead of the bearer header.
    let r = app
        .send(
            app.http
                .post(app.url("/dev/sessions"))
                .json(&json!({ "userId": "alice" })),
        )
        .await;
    let cookie = r.header("set-cookie").expect("set-cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    let r = app
        .send(
            app.http
                .get(app.url(&format!("/orders/{id}")))
                .header("cookie", pair),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());

    // Bob cannot see Alice's order: 404, exactly like a missing one.
    let bob = app.session("bob").await;
    let r = app.get_order(&bob, &id).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    let r = app.get_order(&bob, "ord_does_not_exist").await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
}

async fn orders_are_priced_by_the_server_and_cart_edits_bump_the_version(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    // A browser-sent amount is not accepted at all.
    let r = app
        .create_order_raw(
            &t,
            json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }], "amount": 1 }),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));
    let r = app.create_order_raw(&t, json!({ "items": [{ "sku": "tee-classic", "quantity": 2 }, { "sku": "mug-enamel", "quantity": 1 }], "coupon": "SAVE10" })).await;
    assert_eq!(r.status, 201);
    let o = r.json();
    assert_eq!(
        (
            o["subtotal"].as_i64(),
            o["discount"].as_i64(),
            o["amount"].as_i64()
        ),
        (Some(6800), Some(680), Some(6120))
    );
    assert_eq!(o["version"], 1);
    let id = id_of(&o);

    let r = app.patch_cart(&t, &id, json!({ "coupon": "" })).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["version"].as_i64(), r.json()["amount"].as_i64()),
        (Some(2), Some(6800))
    );
    let r = app
        .patch_cart(
            &t,
            &id,
            json!({ "items": [{ "sku": "sticker-pack", "quantity": 3 }], "address": "1 Main St" }),
        )
        .await;
    assert_eq!(
        (r.json()["version"].as_i64(), r.json()["amount"].as_i64()),
        (Some(3), Some(1500))
    );
    let r = app.patch_cart(&t, &id, json!({ "coupon": "NOPE" })).await;
    assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));
    let r = app.get_order(&t, &id).await;
    assert_eq!(
        r.json()["version"],
        3,
        "a refused edit does not bump the version"
    );
}

async fn rule1_order_ownership_then_key_presence_and_shape(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.session("alice").await;
    let bob = app.session("bob").await;
    let id = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);

    // Someone else's order is 404, before the key is even looked at.
    let r = app.pay(&bob, &id, None, 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    let r = app.pay(&bob, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));

    let r = app.pay(&alice, &id, None, 1, APPROVE).await;
    assert_eq!(
        (r.status, r.code()),
        (400, ErrorCode::IdempotencyKeyMissing)
    );
    for (bad, reason) in [
        ("short", "too_short"),
        ("has spaces in it, not allowed", "invalid_char"),
        ("\"unterminated-quoted-key", "bad_quoting"),
    ] {
        let r = app.pay(&alice, &id, Some(bad), 1, APPROVE).await;
        assert_eq!(
            (r.status, r.code()),
            (400, ErrorCode::IdempotencyKeyInvalid),
            "{bad}"
        );
        assert_eq!(r.json()["reason"], reason);
    }
    assert!(app.ledger(&id).await.is_empty(), "nothing may be charged");
}

async fn rule2_same_key_with_different_details_is_422(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let other = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, DECLINE).await;
    assert_eq!((r.status, r.code()), (402, ErrorCode::PaymentDeclined));

    // Another method, another order, another version: 422, nothing charged.
    let r = app.pay(&t, &id, Some(&k), 1, APPROVE).await;
    assert_eq!(
        (r.status, r.code()),
        (422, ErrorCode::KeyReusedWithDifferentDetails)
    );
    let r = app.pay(&t, &other, Some(&k), 1, DECLINE).await;
    assert_eq!(
        (r.status, r.code()),
        (422, ErrorCode::KeyReusedWithDifferentDetails)
    );
    // The cart changes to v2 (the decline unlocked it); the same key for v2 is other details,
    // checked before the version rule; for v1 it is still the same declined attempt.
    assert_eq!(
        app.patch_cart(
            &t,
            &id,
            json!({ "items": [{ "sku": "mug-enamel", "quantity": 2 }] })
        )
        .await
        .status,
        200
    );
    let r = app.pay(&t, &id, Some(&k), 2, DECLINE).await;
    assert_eq!(
        (r.status, r.code()),
        (422, ErrorCode::KeyReusedWithDifferentDetails)
    );
    let r = app.pay(&t, &id, Some(&k), 1, DECLINE).await;
    assert_eq!((r.status, r.code()), (402, ErrorCode::PaymentDeclined));
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    let charges = app.ledger(&id).await;
    assert!(
        charges.iter().all(|c| c["status"] == "declined"),
        "no money moved: {charges:?}"
    );
    assert!(app.ledger(&other).await.is_empty());
}

async fn rule2_final_results_replay_byte_for_byte(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    for (method, status) in [(APPROVE, 200), (DECLINE, 402), ("pm_card_unknown", 402)] {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let k = key();
        let first = app.pay(&t, &id, Some(&k), 1, method).await;
        assert_eq!(first.status, status, "{method}: {}", first.text());
        assert_eq!(first.header("idempotent-replayed"), None);
        for _ in 0..2 {
            let again = app.pay(&t, &id, Some(&k), 1, method).await;
            assert_eq!(again.status, first.status);
            assert_eq!(
                again.body, first.body,
                "{method}: replay must be byte-identical"
            );
            assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
            assert_eq!(again.header("content-type"), first.header("content-type"));
        }
        if status == 402 {
            let expected_code = match method {
                DECLINE => ErrorCode::PaymentDeclined,
                _ => ErrorCode::PaymentFailed,
            };
            assert_eq!(first.code(), expected_code);
        } else {
            assert_eq!(first.attempt_status(), AttemptStatus::Succeeded);
        }
        let succeeded = app
            .ledger(&id)
            .await
            .iter()
            .filter(|c| c["status"] == "succeeded")
            .count();
        assert_eq!(succeeded, usize::from(method == APPROVE), "{method}");
    }
}

/// A retry of a finished attempt is answered from its key row before the order is read; the
/// answer must be the one the full rules give: only the caller's own row, only for the order
/// it names, only with the same details, and the very bytes and headers of the first answer.
async fn rule2_replays_check_user_order_and_details_before_answering(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let (alice, bob) = (app.session("alice").await, app.session("bob").await);
    let a = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let a2 = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let b = id_of(&app.create_order(&bob, &[("mug-enamel", 1)]).await);
    let k = key();
    let first = app.pay(&alice, &a, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let retention = first.header("idempotency-key-retention");
    assert!(retention.is_some(), "every pay answer names its retention");

    for _ in 0..3 {
        let again = app.pay(&alice, &a, Some(&k), 1, APPROVE).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.body, first.body, "byte-identical");
        assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
        assert_eq!(again.header("content-type"), first.header("content-type"));
        assert_eq!(again.header("idempotency-key-retention"), retention);
    }

    // Alice's key on bob's session: bob has no such row, and alice's order is not his.
    let r = app.pay(&bob, &a, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    assert!(!r.text().contains("succeeded"), "never alice's answer");
    // Bob's own order with that key: his own attempt, charged once, then replayed as his.
    let rb = app.pay(&bob, &b, Some(&k), 1, APPROVE).await;
    assert_eq!(rb.status, 200, "{}", rb.text());
    assert_eq!(rb.header("idempotent-replayed"), None, "a fresh attempt");
    assert_eq!(rb.json()["orderId"], b.as_str());
    let rb2 = app.pay(&bob, &b, Some(&k), 1, APPROVE).await;
    assert_eq!(rb2.body, rb.body);
    assert_eq!(rb2.header("idempotent-replayed").as_deref(), Some("true"));
    // Now bob holds a finished row for the key, on his order: still 404 on alice's.
    let r = app.pay(&bob, &a, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    assert_eq!(r.header("idempotent-replayed"), None);

    // The same key with other details, or on another order of alice's: 422, as before.
    for (order, version, method) in [(&a, 1, DECLINE), (&a, 2, APPROVE), (&a2, 1, APPROVE)] {
        let r = app.pay(&alice, order, Some(&k), version, method).await;
        assert_eq!(
            (r.status, r.code()),
            (422, ErrorCode::KeyReusedWithDifferentDetails),
            "{order} v{version} {method}"
        );
        assert_eq!(r.attempt_status(), AttemptStatus::Succeeded);
        assert_eq!(r.header("idempotent-replayed"), None);
        assert_eq!(r.header("idempotency-key-retention"), retention);
    }
    // On an order that does not exist (or is someone else's): 404, as before.
    let r = app.pay(&alice, "ord_missing", Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    let r = app.pay(&alice, &b, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
    // A malformed payment method is a 400 even for a known key, as before.
    let r = app.pay(&alice, &a, Some(&k), 1, "pm card").await;
    assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));

    // A declined attempt still replays for its own version after the cart moved on.
    let d = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let kd = key();
    let declined = app.pay(&alice, &d, Some(&kd), 1, DECLINE).await;
    assert_eq!(declined.status, 402, "{}", declined.text());
    let patched = app
        .patch_cart(
            &alice,
            &d,
            json!({ "items": [{ "sku": "tee-classic", "quantity": 2 }] }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    let again = app.pay(&alice, &d, Some(&kd), 1, DECLINE).await;
    assert_eq!(again.body, declined.body);
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(
        again.header("content-type"),
        declined.header("content-type")
    );
    let r = app.pay(&alice, &d, Some(&kd), 2, DECLINE).await;
    assert_eq!(r.status, 422, "{}", r.text());

    assert_eq!(app.ledger(&a).await.len(), 1, "alice charged once");
    assert_eq!(app.ledger(&b).await.len(), 1, "bob charged once");
    assert!(app.ledger(&a2).await.is_empty());
}

async fn rule2_processing_key_is_409_in_progress_with_retry_after(backend: Backend) {
    let opts = Opts {
        in_progress_wait_ms: 0,
        provider_timeout_ms: 1_500,
        lease_ms: 3_000,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let first = tokio::spawn(
        app.request(app.pay_request(&t, &id, Some(&k), 1, SLOW))
            .send(),
    );
    app.wait_until_active(&t, &id).await;
    let r = app.pay(&t, &id, Some(&k), 1, SLOW).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::InProgress));
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    assert_eq!(r.attempt_status(), AttemptStatus::Processing);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status().as_u16(), 202, "slow provider → processing");
    assert_eq!(app.ledger(&id).await.len(), 1);
}

async fn rule2_cancelled_tombstone_blocks_a_late_pay(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let r = app.cancel(&t, &id, &k).await;
    assert_eq!(
        (r.status, r.attempt_status()),
        (200, AttemptStatus::Cancelled)
    );
    let r = app.pay(&t, &id, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::AttemptCancelled));
    assert!(app.ledger(&id).await.is_empty());
    // The order itself is free: a new key pays it.
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(r.status, 200);
    assert_eq!(app.ledger(&id).await.len(), 1);
}

async fn rule3_version_mismatch_is_order_changed_and_leaves_the_key_unused(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    app.patch_cart(&t, &id, json!({ "coupon": "SAVE10" })).await;
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::OrderChanged));
    assert_eq!(r.json()["currentVersion"], 2);
    assert!(app.ledger(&id).await.is_empty());
    // The key was never accepted (no row was kept), so the confirmed pay may use it.
    let r = app.pay(&t, &id, Some(&k), 2, APPROVE).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["payment"]["amount"], 2250);
}

async fn rule3_busy_order_is_payment_already_active_paid_is_order_already_paid(backend: Backend) {
    let opts = Opts {
        provider_timeout_ms: 1_500,
        lease_ms: 3_000,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    // Busy: another key is processing (a slow charge in flight).
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let first = tokio::spawn(
        app.request(app.pay_request(&t, &id, Some(&key()), 1, SLOW))
            .send(),
    );
    app.wait_until_active(&t, &id).await;
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::PaymentAlreadyActive));
    let r = app.patch_cart(&t, &id, json!({ "coupon": "SAVE10" })).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::PaymentInProgress));
    first.await.unwrap().unwrap();

    // Paid: a new key (say, from another tab) cannot pay it again, nor edit it; it is told the
    // order is paid, with the receipt a replay of the paying key carries (not "busy").
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let paid = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(paid.status, 200);
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::OrderAlreadyPaid));
    assert_eq!(r.json()["payment"], paid.json()["payment"], "{}", r.text());
    assert_eq!(
        r.json()["payment"]["chargeId"],
        app.ledger(&id).await[0]["id"]
    );
    let r = app.patch_cart(&t, &id, json!({ "coupon": "SAVE10" })).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::OrderAlreadyPaid));
    assert_eq!(app.ledger(&id).await.len(), 1);
}

async fn rule3_insufficient_stock_is_out_of_stock(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let u = app.session("bob").await;
    assert_eq!(app.stock("poster-limited").await, 3);
    let a = id_of(&app.create_order(&t, &[("poster-limited", 2)]).await);
    let b = id_of(
        &app.create_order(&u, &[("poster-limited", 2), ("mug-enamel", 1)])
            .await,
    );
    assert_eq!(app.pay(&t, &a, Some(&key()), 1, APPROVE).await.status, 200);
    let r = app.pay(&u, &b, Some(&key()), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::OutOfStock));
    assert_eq!(r.json()["sku"], "poster-limited");
    assert!(app.ledger(&b).await.is_empty());
    assert_eq!(app.stock("poster-limited").await, 1);
    assert_eq!(
        app.stock("mug-enamel").await,
        1000,
        "a refused claim reserves nothing"
    );
}

async fn rule4_success_pays_the_order_and_decrements_stock(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("hoodie-zip", 2)]).await);
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.attempt_status(), AttemptStatus::Succeeded);
    let body = r.json();
    assert_eq!(body["payment"]["amount"], 13000);
    let charges = app.ledger(&id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0]["amount"], 13000);
    assert_eq!(body["payment"]["chargeId"], charges[0]["id"]);
    let o = app.get_order(&t, &id).await.json();
    assert_eq!(order_state_of(&o), (OrderStatus::Paid, false));
    assert_eq!(o["payment"]["id"], body["payment"]["id"]);
    assert_eq!(app.stock("hoodie-zip").await, 498);
    let pool = app.db_pool().await;
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM payments WHERE order_id = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

async fn rule4_decline_unlocks_the_order_and_keeps_stock(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("hoodie-zip", 1)]).await);
    let r = app.pay(&t, &id, Some(&key()), 1, DECLINE).await;
    assert_eq!((r.status, r.code()), (402, ErrorCode::PaymentDeclined));
    assert_eq!(r.attempt_status(), AttemptStatus::Declined);
    let o = app.get_order(&t, &id).await.json();
    assert_eq!(order_state_of(&o), (OrderStatus::Unpaid, false));
    assert_eq!(app.stock("hoodie-zip").await, 500);
    // Unlocked: the cart can change and a new key can pay.
    assert_eq!(
        app.patch_cart(&t, &id, json!({ "coupon": "SAVE10" }))
            .await
            .status,
        200
    );
    assert_eq!(app.pay(&t, &id, Some(&key()), 2, APPROVE).await.status, 200);
    assert_eq!(app.stock("hoodie-zip").await, 499);
}

async fn rule4_provider_timeout_or_5xx_answers_202_processing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    for method in [TIMEOUT, TRANSIENT] {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let r = app.pay(&t, &id, Some(&key()), 1, method).await;
        assert_eq!(r.status, 202, "{method}: {}", r.text());
        assert_eq!(r.attempt_status(), AttemptStatus::Processing);
        assert_eq!(r.header("retry-after").as_deref(), Some("1"));
        let o = app.get_order(&t, &id).await.json();
        assert_eq!(order_state_of(&o), (OrderStatus::Unpaid, true), "{method}");
    }
}

async fn rule5_transient_failure_is_redriven_with_the_same_provider_key(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, TRANSIENT).await;
    assert_eq!(r.status, 202);
    assert!(app.ledger(&id).await.is_empty(), "the 503 charged nothing");
    // The retry asks the provider (no charge under the provider key), then re-drives it.
    let r = app.pay(&t, &id, Some(&k), 1, TRANSIENT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r2 = app.pay(&t, &id, Some(&k), 1, TRANSIENT).await;
    assert_eq!((r2.status, &r2.body), (200, &r.body));
    assert_eq!(app.ledger(&id).await.len(), 1);

    // The timeout method: charged at the provider, answer lost; the retry finds the charge.
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    assert_eq!(app.pay(&t, &id, Some(&k), 1, TIMEOUT).await.status, 202);
    let r = app.pay(&t, &id, Some(&k), 1, TIMEOUT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.ledger(&id).await.len(), 1);
}

async fn rule6_every_state_change_is_audited(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    app.patch_cart(&t, &id, json!({ "coupon": "SAVE10" })).await;
    assert_eq!(app.pay(&t, &id, Some(&key()), 2, DECLINE).await.status, 402);
    assert_eq!(app.pay(&t, &id, Some(&key()), 2, APPROVE).await.status, 200);
    app.cancel(&t, &id, &key()).await;
    let pool = app.db_pool().await;
    let rows: Vec<(String, String, Option<String>, String, String, i64)> = sqlx::query_as(
        "SELECT actor, entity, from_state, to_state, reason, at FROM audit_log ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let trail: Vec<(String, Option<String>, String)> = rows
        .iter()
        .map(|r| (r.1.clone(), r.2.clone(), r.3.clone()))
        .collect();
    let expect = |entity: &str, from: Option<&str>, to: &str| {
        assert!(
            trail
                .iter()
                .any(|(e, f, t)| e == entity && f.as_deref() == from && t == to),
            "missing {entity} {from:?} -> {to} in {trail:?}"
        );
    };
    expect("order", None, "unpaid v1");
    expect("order", Some("unpaid v1"), "unpaid v2");
    expect("attempt", None, "processing");
    expect("attempt", Some("processing"), "declined");
    expect("attempt", Some("processing"), "succeeded");
    expect("order", Some("unpaid"), "paid");
    expect("attempt", None, "cancelled");
    assert!(
        rows.iter()
            .all(|r| r.0 == "alice" && r.5 > 0 && !r.4.is_empty()),
        "who, when and why on every row"
    );
}

async fn cancel_unknown_key_inserts_a_tombstone(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let r = app.cancel(&t, &id, &k).await;
    assert_eq!(
        (r.status, r.attempt_status()),
        (200, AttemptStatus::Cancelled)
    );
    let pool = app.db_pool().await;
    let (status,): (String,) =
        sqlx::query_as("SELECT status FROM attempts WHERE user_id = 'alice' AND idem_key = $1")
            .bind(&k)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(status, "cancelled");
    // Cancel again: same answer; a late pay: refused; nothing charged.
    assert_eq!(
        app.cancel(&t, &id, &k).await.attempt_status(),
        AttemptStatus::Cancelled
    );
    assert_eq!(
        app.pay(&t, &id, Some(&k), 1, APPROVE).await.code(),
        ErrorCode::AttemptCancelled
    );
    assert!(app.ledger(&id).await.is_empty());
    // Bad keys in the body and other users' orders are refused.
    let r = app.cancel(&t, &id, "short").await;
    assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));
    let bob = app.session("bob").await;
    assert_eq!(app.cancel(&bob, &id, &key()).await.status, 404);
}

async fn cancel_answers_processing_while_charging_then_the_charge(backend: Backend) {
    let opts = Opts {
        provider_timeout_ms: 1_500,
        lease_ms: 3_000,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let inflight = tokio::spawn(
        app.request(app.pay_request(&t, &id, Some(&k), 1, SLOW))
            .send(),
    );
    app.wait_until_active(&t, &id).await;
    let r = app.cancel(&t, &id, &k).await;
    assert_eq!(
        (r.status, r.attempt_status()),
        (200, AttemptStatus::Processing)
    );
    let answer = inflight.await.unwrap().unwrap();
    assert_eq!(
        answer.status().as_u16(),
        202,
        "the provider's answer came too late"
    );
    // After the 202 nobody holds the lease: a cancel asks the provider as a retry would. It
    // charged (the slow card's answer was only late), so the cancel cannot undo it: it
    // answers the payment, and the order is paid with the one charge.
    let r = app.cancel(&t, &id, &k).await;
    assert_eq!(r.attempt_status(), AttemptStatus::Succeeded, "{}", r.text());
    assert!(r.json()["payment"]["chargeId"].is_string(), "{}", r.text());
    assert_eq!(ledger(&app.http, &app.provider, &id).await.len(), 1);
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
}

async fn cancel_final_attempts_answer_their_status(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    for (method, status) in [
        (APPROVE, AttemptStatus::Succeeded),
        (DECLINE, AttemptStatus::Declined),
        ("pm_card_unknown", AttemptStatus::Failed),
    ] {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let k = key();
        let paid = app.pay(&t, &id, Some(&k), 1, method).await;
        let r = app.cancel(&t, &id, &k).await;
        assert_eq!((r.status, r.attempt_status()), (200, status), "{method}");
        if status == AttemptStatus::Succeeded {
            assert_eq!(r.json()["payment"], paid.json()["payment"]);
        }
        // Nothing changed: the replay is as before.
        assert_eq!(app.pay(&t, &id, Some(&k), 1, method).await.body, paid.body);
    }
}

async fn keys_are_scoped_per_user(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.session("alice").await;
    let bob = app.session("bob").await;
    let a = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let b = id_of(&app.create_order(&bob, &[("mug-enamel", 1)]).await);
    let k = key();
    let ra = app.pay(&alice, &a, Some(&k), 1, APPROVE).await;
    assert_eq!(ra.status, 200);
    // Bob sends Alice's key for his own order: his own outcome, never her body.
    let rb = app.pay(&bob, &b, Some(&k), 1, DECLINE).await;
    assert_eq!((rb.status, rb.code()), (402, ErrorCode::PaymentDeclined));
    assert_eq!(rb.header("idempotent-replayed"), None);
    assert!(!rb.text().contains(&a), "bob must not see alice's order");
    let rb = app.pay(&bob, &b, Some(&k), 1, DECLINE).await;
    assert_eq!(rb.header("idempotent-replayed").as_deref(), Some("true"));
    // Bob's cancel of that key touches only his own row.
    assert_eq!(
        app.cancel(&bob, &b, &k).await.attempt_status(),
        AttemptStatus::Declined
    );
    assert_eq!(
        app.pay(&alice, &a, Some(&k), 1, APPROVE).await.body,
        ra.body
    );
    assert_eq!(app.ledger(&a).await.len(), 1);
}

async fn dropped_response_is_replayed_on_retry(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let lost = app
        .request(
            app.pay_request(&t, &id, Some(&k), 1, APPROVE)
                .header(DEV_FAULT, "drop-response"),
        )
        .send()
        .await;
    assert!(lost.is_err(), "the response must be lost: {lost:?}");
    let r = app.pay(&t, &id, Some(&k), 1, APPROVE).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(app.ledger(&id).await.len(), 1);
}
