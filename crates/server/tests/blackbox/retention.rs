//! Past key retention, over HTTP on an in-process server with a manual clock: the two
//! traces of docs/model.md's retention finding. A cancelled key stays cancelled while its
//! order could still be paid with it; a charged key is answered with its charge.

use crate::common::{key, Backend, Checkout, TestDb};
use crate::inproc::{counting_proxy, provider, InProc};
use crate::on_both_backends;
use payonce_protocol::{AttemptStatus, ErrorCode, OrderStatus};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;

on_both_backends!(
    a_pay_arriving_after_retention_still_meets_its_cancel,
    a_cancel_after_retention_of_a_charged_key_answers_with_the_payment,
    a_backlog_of_expired_keys_is_deleted_in_batches_sparing_live_rows,
    a_loop_of_cancels_on_a_paid_order_never_spends_the_provider_quota,
    a_key_used_again_on_another_order_after_retention_gets_its_own_charge,
);

const RETENTION: &[&str] = &[
    "--key-retention-secs",
    "60",
    "--provider-timeout-ms",
    "2000",
];

/// The customer cancels a key whose pay is still in the network; key retention passes and
/// cleanup runs; the delayed pay arrives. It meets the tombstone: nothing is charged.
async fn a_pay_arriving_after_retention_still_meets_its_cancel(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let s = InProc::start(&db, &provider().await, RETENTION).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let path = format!("/orders/{id}/payment-attempts/cancel");
    let r = s.send("POST", &path, &t, None, json!({ "key": k })).await;
    assert_eq!(r.attempt_status(), AttemptStatus::Cancelled);
    s.advance(Duration::from_secs(61));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    let r = s.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.code(), ErrorCode::AttemptCancelled);
    assert!(s.ledger(&id).await.is_empty(), "no charge");
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Unpaid);
}

/// A tab kept a charged key (a duplicated tab's copied storage); retention passes and the
/// key's record is cleaned up; the tab cancels, then resends its pay. The cancel answers
/// with the payment, the pay is refused by the paid order: one charge, never "cancelled".
async fn a_cancel_after_retention_of_a_charged_key_answers_with_the_payment(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    // One tombstone per minute: the cancel answered with the payment must not spend it.
    let flags = [RETENTION, &["--tombstones-per-min", "1"]].concat();
    let s = InProc::start(&db, &provider().await, &flags).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let paid = s.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    s.advance(Duration::from_secs(61));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE order_id = $1")
        .bind(&id)
        .fetch_one(&db.pool().await)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the key's record is past retention and deleted");
    let path = format!("/orders/{id}/payment-attempts/cancel");
    let r = s.send("POST", &path, &t, None, json!({ "key": k })).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.attempt_status(), AttemptStatus::Succeeded);
    assert_eq!(r.json()["payment"], paid.json()["payment"]);
    let again = s.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(again.code(), ErrorCode::OrderAlreadyPaid);
    assert_eq!(again.json()["payment"], paid.json()["payment"]);
    assert_eq!(s.ledger(&id).await.len(), 1, "one charge");
    // A key that never charged this paid order is cancelled, not given the payment; it is
    // the first tombstone, so the minute's one token is still there for it.
    let r = s
        .send("POST", &path, &t, None, json!({ "key": key() }))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.attempt_status(), AttemptStatus::Cancelled);
}

/// A backlog larger than one cleanup batch (2,500 expired final keys and 2,500 audit rows
/// past the dispute window, written straight into the tables) is gone after one cleanup,
/// while a processing attempt with an old expiry, a tombstone whose order is still payable
/// and the recent audit rows stay: every batch applies the same rule.
async fn a_backlog_of_expired_keys_is_deleted_in_batches_sparing_live_rows(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let s = InProc::start(&db, &provider().await, RETENTION).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let path = format!("/orders/{id}/payment-attempts/cancel");
    let r = s
        .send("POST", &path, &t, None, json!({ "key": key() }))
        .await;
    assert_eq!(r.attempt_status(), AttemptStatus::Cancelled);
    let pool = db.pool().await;
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2501)
         INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
           order_version, amount, currency, payment_method_id, provider_key, response_status,
           response_body, created_at, updated_at, expires_at)
         SELECT 'att_old_' || n, 'old-user', 'old-key-' || n, 'ord_old_' || n,
           CASE WHEN n = 2501 THEN 'processing' ELSE 'succeeded' END, 'fp', 1, 2500, 'USD',
           'pm_card_approve', 'pk_old_' || n, 200, '{}', 1, 1, 1
         FROM g",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2500)
         INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         SELECT 1, 'system', 'attempt', 'att_old_' || n, 'processing', 'succeeded', 'old'
         FROM g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
            n
        }
    };
    let (old, recent) = (
        "SELECT COUNT(*) FROM audit_log WHERE reason = 'old'",
        "SELECT COUNT(*) FROM audit_log WHERE reason <> 'old'",
    );
    let recent_before = count(recent).await;
    assert!(recent_before > 0, "the cancel wrote its audit row");
    assert_eq!(count(old).await, 2500);
    s.advance(Duration::from_secs(61));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(count(old).await, 0, "old audit rows deleted in batches");
    assert_eq!(count(recent).await, recent_before, "recent audit rows kept");
    let rows: Vec<(String,)> = sqlx::query_as("SELECT status FROM attempts ORDER BY status")
        .fetch_all(&pool)
        .await
        .unwrap();
    let statuses: Vec<_> = rows.into_iter().map(|r| r.0).collect();
    assert_eq!(statuses, ["cancelled", "processing"]);
}

/// A loop of cancels with fresh keys on a paid order, past the retention of the key that
/// paid it: each is answered from the payment's stored provider key, so the provider is
/// never asked; for a payment whose key the store does not hold (one older than the column)
/// the provider is asked, but only after a tombstone token was taken, so the lookups stay
/// within the limit.
async fn a_loop_of_cancels_on_a_paid_order_never_spends_the_provider_quota(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (proxy, lookups) = counting_proxy(&provider().await).await;
    let flags = [RETENTION, &["--tombstones-per-min", "3"]].concat();
    let s = InProc::start(&db, &proxy, &flags).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let paid = s.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    s.advance(Duration::from_secs(61));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    let path = format!("/orders/{id}/payment-attempts/cancel");
    let cancel = |k: String| s.send("POST", &path, &t, None, json!({ "key": k }));
    let r = cancel(k.clone()).await;
    assert_eq!(r.attempt_status(), AttemptStatus::Succeeded, "{}", r.text());
    assert_eq!(r.json()["payment"], paid.json()["payment"]);
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(cancel(key()).await.status);
    }
    assert_eq!(lookups.load(Ordering::SeqCst), 0, "answered from the store");
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        3,
        "{statuses:?}"
    );

    // A payment without its provider key (written before the column existed).
    sqlx::query("UPDATE payments SET provider_key = NULL")
        .execute(&db.pool().await)
        .await
        .unwrap();
    s.advance(Duration::from_secs(60));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(cancel(key()).await.status);
    }
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        3,
        "one lookup per token, none after: {statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429).count(),
        7,
        "{statuses:?}"
    );
    let r = cancel(k).await;
    assert_eq!(r.status, 429, "the paying key's lookup spends a token too");
    assert_eq!(s.ledger(&id).await.len(), 1, "one charge");
}

/// A client reuses a key on a new order once the key's retention is over (its record is
/// deleted): the key is new again, and its provider key is scoped by order, so the new order
/// gets a charge of its own instead of the old order's, and is paid; nothing stays locked.
async fn a_key_used_again_on_another_order_after_retention_gets_its_own_charge(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let s = InProc::start(&db, &provider().await, RETENTION).await;
    let t = s.session("alice").await;
    let (first, k) = (s.order(&t).await, key());
    let r = s.pay(&t, &first, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    s.advance(Duration::from_secs(61));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    let second = s.order(&t).await;
    for _ in 0..2 {
        let r = s.pay(&t, &second, Some(&k), 1, "pm_card_approve").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["payment"]["orderId"], second.as_str());
    }
    let charges = s.ledger(&second).await;
    assert_eq!(charges.len(), 1, "the new order's own charge");
    assert_eq!(s.order_status(&t, &second).await, OrderStatus::Paid);
    assert_eq!(s.ledger(&first).await.len(), 1);
    let (locked,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM orders WHERE active_attempt IS NOT NULL")
            .fetch_one(&db.pool().await)
            .await
            .unwrap();
    assert_eq!(locked, 0, "no order left locked");
}
