//! 3-D Secure (`pm_card_3ds`): the provider needs the customer before it charges. The pay
//! answers 402 `ACTION_REQUIRED` with the provider's page in `next`, the attempt stays
//! processing under its key, and the same key (or the webhook, or reconciliation) settles it
//! from the provider once the customer completed it. The ledger is checked every time.

use crate::common::{id_of, key, Backend, Checkout, Opts, Resp, TestApp};
use crate::on_both_backends;
use payonce_protocol::{AttemptStatus, ErrorCode, OrderStatus};
use payonce_testkit::wait_for;
use serde_json::json;
use std::time::Duration;

const THREE_DS: &str = "pm_card_3ds";
const APPROVE: &str = "pm_card_approve";

on_both_backends!(
    three_ds_answers_action_required_and_the_same_key_finishes_it_with_one_charge,
    three_ds_completed_is_settled_by_the_webhook_and_the_key_replays_it,
    three_ds_failed_challenge_is_a_decline_and_a_new_key_may_pay,
    three_ds_waiting_is_not_flagged_for_review_and_reconciliation_settles_it,
);

async fn count(pool: &sqlx::AnyPool, sql: &str, bind: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(bind)
        .fetch_one(pool)
        .await
        .unwrap();
    n
}

/// The provider's completion endpoint, as the action page's button calls it.
async fn complete(app: &TestApp, next_url: &str, outcome: &str) {
    let charge_url = next_url.trim_end_matches("/action");
    let r = app
        .http
        .post(format!("{charge_url}/complete"))
        .json(&json!({ "outcome": outcome }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "completion accepted");
}

/// A 402 ACTION_REQUIRED whose `next` sends the customer to the provider's page; its URL.
fn action_url(app: &TestApp, r: &Resp) -> String {
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::ActionRequired),
        "{}",
        r.text()
    );
    assert!(r.is_problem());
    assert_eq!(r.attempt_status(), AttemptStatus::Processing);
    let body = r.json();
    assert_eq!(body["next"]["type"], "redirect", "{body}");
    let url = body["next"]["url"].as_str().expect("next.url").to_owned();
    assert!(url.starts_with(&app.provider), "the provider's page: {url}");
    assert!(
        r.header("idempotency-key-retention").is_some(),
        "every pay answer carries the retention header"
    );
    assert_eq!(r.header("idempotent-replayed"), None, "not a stored answer");
    url
}

async fn three_ds_answers_action_required_and_the_same_key_finishes_it_with_one_charge(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();

    let first = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
    let url = action_url(&app, &first);
    let ledger = app.ledger(&id).await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0]["status"], "requires_action");
    assert_eq!(ledger[0]["nextActionUrl"], url.as_str());
    assert_eq!(
        app.get_order(&t, &id).await.json()["paymentInProgress"],
        true
    );

    // Retries before the customer acted: the same answer, and no new charge.
    for _ in 0..3 {
        let again = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
        assert_eq!(action_url(&app, &again), url);
    }
    // A second key for the order is refused while the attempt is open.
    let other = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(
        (other.status, other.code()),
        (409, ErrorCode::PaymentAlreadyActive),
        "{}",
        other.text()
    );
    assert_eq!(app.ledger(&id).await.len(), 1, "still one charge");

    complete(&app, &url, "succeeded").await;

    // After completion the same key settles from the provider's answer, then replays it.
    let paid = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert_eq!(paid.attempt_status(), AttemptStatus::Succeeded);
    let body = paid.json();
    let ledger = app.ledger(&id).await;
    assert_eq!(ledger.len(), 1, "exactly one charge: {ledger:?}");
    assert_eq!(ledger[0]["status"], "succeeded");
    assert_eq!(body["payment"]["chargeId"], ledger[0]["id"]);
    let replay = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
    assert_eq!(replay.status, 200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(replay.body, paid.body, "byte for byte");
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    // The paid order refuses a new key with its receipt; the ledger keeps its one charge.
    let late = app.pay(&t, &id, Some(&key()), 1, THREE_DS).await;
    assert_eq!(
        (late.status, late.code()),
        (409, ErrorCode::OrderAlreadyPaid)
    );
    assert_eq!(late.json()["payment"], body["payment"]);
    assert_eq!(app.ledger(&id).await.len(), 1);
}

async fn three_ds_completed_is_settled_by_the_webhook_and_the_key_replays_it(backend: Backend) {
    let Some(app) = TestApp::spawn_with(
        backend,
        Opts {
            webhooks: true,
            ..Opts::default()
        },
    )
    .await
    else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 2)]).await);
    let k = key();
    let url = action_url(&app, &app.pay(&t, &id, Some(&k), 1, THREE_DS).await);

    complete(&app, &url, "succeeded").await;
    // Nobody retries: the provider's webhook on completion settles the attempt.
    let order = app.wait_status(&t, &id, OrderStatus::Paid).await;
    let ledger = app.ledger(&id).await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(order["payment"]["chargeId"], ledger[0]["id"]);
    // The customer's retry with the key gets the stored receipt.
    let r = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(r.json()["payment"]["chargeId"], ledger[0]["id"]);
}

async fn three_ds_failed_challenge_is_a_decline_and_a_new_key_may_pay(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let url = action_url(&app, &app.pay(&t, &id, Some(&k), 1, THREE_DS).await);
    complete(&app, &url, "declined").await;

    let r = app.pay(&t, &id, Some(&k), 1, THREE_DS).await;
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::PaymentDeclined),
        "{}",
        r.text()
    );
    assert_eq!(
        app.get_order(&t, &id).await.json()["paymentInProgress"],
        false
    );
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ledger = app.ledger(&id).await;
    let statuses: Vec<&str> = ledger
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["declined", "succeeded"], "{ledger:?}");
}

async fn three_ds_waiting_is_not_flagged_for_review_and_reconciliation_settles_it(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn_with(
        backend,
        Opts {
            jobs_interval_ms: 100,
            extra: vec!["--reconcile-after-ms".into(), "300".into()],
            ..Opts::default()
        },
    )
    .await
    else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let url = action_url(&app, &app.pay(&t, &id, Some(&k), 1, THREE_DS).await);

    // Reconciliation looks at it while the customer has not acted: the provider says
    // "waiting", which is an answer, not "cannot tell": the jobs put it off to a later
    // check (its `next_check_at` moves on from the one the pay set), no review flag, no
    // second charge.
    let pool = app.db_pool().await;
    let check = "SELECT next_check_at FROM attempts WHERE order_id = $1";
    let next_check = || async {
        let (at,): (Option<i64>,) = sqlx::query_as(check)
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
        at
    };
    let set_by_the_pay = next_check().await;
    wait_for(
        "a job round putting the challenge off",
        Duration::from_secs(10),
        || async { (next_check().await != set_by_the_pay).then_some(()) },
    )
    .await;
    let flagged = count(
        &pool,
        "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL",
        &id,
    )
    .await;
    assert_eq!(
        flagged, 0,
        "a charge waiting for the customer needs no person"
    );
    assert_eq!(app.ledger(&id).await.len(), 1);
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Unpaid);

    // Webhooks are off: only the jobs can settle it.
    complete(&app, &url, "succeeded").await;
    let order = app.wait_status(&t, &id, OrderStatus::Paid).await;
    let ledger = app.ledger(&id).await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(order["payment"]["chargeId"], ledger[0]["id"]);
}
