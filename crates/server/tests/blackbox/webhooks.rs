//! Provider webhooks: they settle attempts without any client retry, their signatures are
//! checked, a signed event is still only a hint (the provider is asked), and only the
//! configured provider's route exists (the Stripe side: `stripe_edges.rs`).

use crate::common::{id_of, key, order_state_of, Backend, Checkout, HttpApi, Opts, TestApp};
use crate::on_both_backends;
use payonce_protocol::{ErrorCode, OrderStatus};
use payonce_testkit::wait_for;
use serde_json::json;
use std::time::Duration;

on_both_backends!(
    webhooks_settle_attempts_without_any_retry,
    webhook_signatures_are_checked_and_events_are_only_hints,
    a_mock_deployment_has_no_stripe_webhook_route,
);

async fn webhooks_settle_attempts_without_any_retry(backend: Backend) {
    let opts = Opts {
        webhooks: true,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    // The provider charges at once and calls us, but answers our call too late: the webhook
    // is what settles the attempt (the jobs are off and the client never retries).
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, "pm_card_timeout").await;
    assert!([200, 202].contains(&r.status), "{}", r.text());
    // Whether the webhook won the race or not, this was the key's first request: its
    // answer is not a replay, even when it is the stored answer the webhook wrote.
    assert_eq!(r.header("idempotent-replayed"), None, "{}", r.text());
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    assert_eq!(app.ledger(&id).await.len(), 1);
    let again = app.pay(&t, &id, Some(&k), 1, "pm_card_timeout").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(app.ledger(&id).await.len(), 1);
    let pool = app.db_pool().await;
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM audit_log WHERE actor = 'provider-webhook' AND to_state = 'succeeded'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(n, 1, "the audit trail names the webhook");
    let (events,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM webhook_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(events >= 1);

    // A declined charge's webhook leaves the order unpaid and unlocked.
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    assert_eq!(
        app.pay(&t, &id, Some(&key()), 1, "pm_card_decline")
            .await
            .status,
        402
    );
    let handled = "SELECT COUNT(w.handled_at) FROM webhook_events w
                   JOIN attempts a ON a.provider_key = w.provider_key WHERE a.order_id = $1";
    wait_for(
        "the decline's webhook handled",
        Duration::from_secs(5),
        || async {
            let (n,): (i64,) = sqlx::query_as(handled)
                .bind(&id)
                .fetch_one(&pool)
                .await
                .unwrap();
            (n > 0).then_some(())
        },
    )
    .await;
    let o = app.get_order(&t, &id).await.json();
    assert_eq!(order_state_of(&o), (OrderStatus::Unpaid, false));
}

fn signed(body: &[u8]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    payonce_mock_provider::sign(payonce_mock_provider::DEFAULT_WEBHOOK_SECRET, now, body)
}

async fn webhook_signatures_are_checked_and_events_are_only_hints(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    // The transient method's first call is a 503: nothing charged, the attempt stays processing.
    let k = key();
    assert_eq!(
        app.pay(&t, &id, Some(&k), 1, "pm_card_transient")
            .await
            .status,
        202
    );
    let pool = app.db_pool().await;
    let (pk, amount): (String, i64) =
        sqlx::query_as("SELECT provider_key, amount FROM attempts WHERE idem_key = $1")
            .bind(&k)
            .fetch_one(&pool)
            .await
            .unwrap();
    let event = json!({
        "id": "evt_forged_1",
        "type": "charge.succeeded",
        "created": 1,
        "charge": {
            "id": "ch_forged", "providerKey": pk, "amount": amount, "currency": "USD",
            "paymentMethodId": "pm_card_transient", "orderId": id, "status": "succeeded", "createdAt": 1
        }
    });
    let body = serde_json::to_vec(&event).unwrap();
    let url = app.url("/webhooks/provider");
    let post = |sig: Option<String>| {
        let mut req = app
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone());
        if let Some(s) = sig {
            req = req.header("Payonce-Signature", s);
        }
        app.send(req)
    };
    let r = post(None).await;
    assert_eq!(
        (r.status, r.code()),
        (400, ErrorCode::WebhookSignatureInvalid)
    );
    assert_eq!(r.json()["reason"], "missing");
    let r = post(Some(payonce_mock_provider::sign(
        "another-secret",
        1_700_000_000,
        &body,
    )))
    .await;
    assert_eq!(
        (r.status, r.code()),
        (400, ErrorCode::WebhookSignatureInvalid)
    );
    let r = post(Some(signed(b"another body"))).await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (400, Some("mismatch"))
    );

    // Correctly signed, but the provider has no such charge: acknowledged, and nothing paid.
    let r = post(Some(signed(&body))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let o = app.get_order(&t, &id).await.json();
    assert_eq!(order_state_of(&o), (OrderStatus::Unpaid, true));
    // A duplicate is acknowledged too.
    assert_eq!(post(Some(signed(&body))).await.status, 200);
    // The retry settles it for real (one charge, by the same provider key).
    let r = app.pay(&t, &id, Some(&k), 1, "pm_card_transient").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.ledger(&id).await.len(), 1);
}

/// Only the configured provider's webhook route is mounted: a mock deployment answers
/// Stripe's route 404 like any unknown path, for an event signed with any secret, and stores
/// nothing.
async fn a_mock_deployment_has_no_stripe_webhook_route(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let body = serde_json::to_vec(&json!({
        "id": "evt_stripe_on_mock", "type": "payment_intent.succeeded",
        "data": { "object": { "id": "pi_not_ours" } }
    }))
    .unwrap();
    for sig in [signed(&body), String::new()] {
        let req = app
            .http
            .post(app.url("/webhooks/stripe"))
            .header("content-type", "application/json")
            .header("Stripe-Signature", sig)
            .body(body.clone());
        let r = app.send(req).await;
        assert_eq!(
            (r.status, r.code()),
            (404, ErrorCode::NotFound),
            "{}",
            r.text()
        );
    }
    let pool = app.db_pool().await;
    let (events,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM webhook_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        events, 0,
        "an event on an unmounted route reached the store"
    );
}
