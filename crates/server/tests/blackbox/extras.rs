//! Checkout extras (`extras` in the pay body): the names the server knows are bound into the
//! attempt's fingerprint; any other name is refused before anything is claimed or charged.

use crate::common::{id_of, key, Backend, Checkout, HttpApi, Resp, TestApp};
use crate::on_both_backends;
use payonce_protocol::{AttemptStatus, ErrorCode};
use serde_json::{json, Value};

on_both_backends!(
    extras_are_bound_into_the_fingerprint,
    unknown_or_malformed_extras_are_a_400_that_claims_nothing,
);

async fn pay_with(app: &TestApp, token: &str, id: &str, k: &str, extras: Value) -> Resp {
    let mut body = json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" });
    if !extras.is_null() {
        body["extras"] = extras;
    }
    app.send(
        app.http
            .post(app.url(&format!("/orders/{id}/pay")))
            .bearer_auth(token)
            .header("Idempotency-Key", k)
            .json(&body),
    )
    .await
}

async fn extras_are_bound_into_the_fingerprint(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let chosen = json!({ "couponCode": "SPRING", "shippingOptionId": "express" });

    let paid = pay_with(&app, &t, &id, &k, chosen.clone()).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    // The same extras in another order: the same intention, replayed.
    let same = json!({ "shippingOptionId": "express", "couponCode": "SPRING" });
    let r = pay_with(&app, &t, &id, &k, same).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(r.body, paid.body);
    // Other extras, fewer extras, none at all: another intention under the same key.
    for other in [
        json!({ "couponCode": "SPRING", "shippingOptionId": "standard" }),
        json!({ "couponCode": "SPRING" }),
        Value::Null,
    ] {
        let r = pay_with(&app, &t, &id, &k, other.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (422, ErrorCode::KeyReusedWithDifferentDetails),
            "{other}: {}",
            r.text()
        );
        assert_eq!(r.attempt_status(), AttemptStatus::Succeeded);
    }
    assert_eq!(app.ledger(&id).await.len(), 1, "one charge");

    // A key first used without extras does not accept them later either.
    let id2 = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k2 = key();
    assert_eq!(pay_with(&app, &t, &id2, &k2, Value::Null).await.status, 200);
    let r = pay_with(&app, &t, &id2, &k2, json!({ "couponCode": "SPRING" })).await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(app.ledger(&id2).await.len(), 1);
}

async fn unknown_or_malformed_extras_are_a_400_that_claims_nothing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let long = "x".repeat(129);
    for (extras, names) in [
        (json!({ "giftWrap": "yes" }), "giftWrap"),
        (json!({ "couponCode": "SPRING", "tip": "5" }), "tip"),
        (json!({ "couponCode": "" }), "couponCode"),
        (json!({ "couponCode": long }), "couponCode"),
        (json!({ "couponCode": "a\u{7}b" }), "couponCode"),
    ] {
        let r = pay_with(&app, &t, &id, &k, extras.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, ErrorCode::InvalidRequest),
            "{extras}"
        );
        assert!(r.is_problem());
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
        assert!(
            detail.contains(names),
            "the problem names {names}: {detail}"
        );
    }
    // Not strings: refused by the body's own decoding.
    for extras in [json!({ "couponCode": 5 }), json!(["couponCode"])] {
        let r = pay_with(&app, &t, &id, &k, extras.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, ErrorCode::InvalidRequest),
            "{extras}"
        );
    }
    // Nothing was claimed: the key is still new and pays once.
    assert!(app.ledger(&id).await.is_empty());
    let r = pay_with(&app, &t, &id, &k, json!({ "couponCode": "SPRING" })).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_eq!(app.ledger(&id).await.len(), 1);
}
