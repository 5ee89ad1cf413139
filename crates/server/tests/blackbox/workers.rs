//! What runs besides the pay request: webhooks under chaos, refunds, reconciliation with
//! manual review, retention, and the key-retention header.

use crate::common::{id_of, key, spawn, Backend, Checkout, HttpApi, Opts, TestApp, TestDb};
use crate::on_both_backends;
use payonce_protocol::{ErrorCode, OrderStatus};
use payonce_testkit::wait_for;
use serde_json::json;
use std::time::Duration;

on_both_backends!(
    chaotic_webhooks_never_double_apply,
    a_webhook_for_an_unknown_provider_key_is_not_acknowledged,
    a_refund_retried_ten_times_or_raced_ten_times_refunds_once,
    unreachable_provider_flags_stuck_attempts_for_review_never_charges,
    a_refund_the_provider_refuses_fails_and_frees_the_payment,
    a_refund_made_in_the_providers_dashboard_is_reflected,
    a_pending_refund_is_settled_by_the_providers_events,
);

async fn count(pool: &sqlx::AnyPool, sql: &str, bind: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(bind)
        .fetch_one(pool)
        .await
        .unwrap();
    n
}

async fn chaotic_webhooks_never_double_apply(backend: Backend) {
    let opts = Opts {
        webhooks: true,
        jobs_interval_ms: 100,
        extra: vec![
            "--provider-webhook-chaos".into(),
            "dup=0.6,delay-ms=400,reorder,reorder-ms=200,early".into(),
        ],
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let stock_before = app.stock("mug-enamel").await;
    let methods = [
        "pm_card_approve",
        "pm_card_approve",
        "pm_card_decline",
        "pm_card_timeout",
        "pm_card_slow",
        "pm_card_transient",
    ];
    let mut orders = Vec::new();
    for m in methods {
        let id = id_of(&app.create_order(&t, &[("mug-enamel", 1)]).await);
        let r = app.pay(&t, &id, Some(&key()), 1, m).await;
        assert!([200, 202, 402].contains(&r.status), "{m}: {}", r.text());
        orders.push((id, m));
    }
    // Deliberate duplicates on top of the chaos: every event of every order, twice more.
    for _ in 0..2 {
        for (id, _) in &orders {
            let r = app
                .http
                .post(format!(
                    "{}/dev/webhooks/redeliver?orderId={id}",
                    app.provider
                ))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 202);
        }
    }
    // Everything settles by webhook or by the workers, without a single client retry.
    for (id, m) in &orders {
        let want = if *m == "pm_card_decline" {
            OrderStatus::Unpaid
        } else {
            OrderStatus::Paid
        };
        app.wait_status(&t, id, want).await;
    }
    // A quiet window is the point here: chaos duplicates arrive unannounced up to
    // delay-ms + reorder-ms after their event, and nothing counts the ones still to come;
    // the checks below must hold after they land.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pool = app.db_pool().await;
    let mut paid = 0;
    for (id, m) in &orders {
        assert_eq!(app.ledger(id).await.len(), 1, "{m}: one charge");
        let settled = count(
            &pool,
            "SELECT COUNT(*) FROM audit_log a JOIN attempts t ON t.id = a.entity_id
             WHERE a.entity = 'attempt' AND t.order_id = $1 AND a.from_state = 'processing'
               AND a.to_state IN ('succeeded', 'declined', 'failed')",
            id,
        )
        .await;
        assert_eq!(settled, 1, "{m}: applied exactly once");
        let payments = count(
            &pool,
            "SELECT COUNT(*) FROM payments WHERE order_id = $1",
            id,
        )
        .await;
        let mails = if *m == "pm_card_decline" {
            assert_eq!(payments, 0);
            app.mailbox(&t, id).await
        } else {
            paid += 1;
            assert_eq!(payments, 1, "{m}: one payment");
            app.wait_for_mails(&t, id, 1).await
        };
        assert_eq!(
            mails.len(),
            usize::from(*m != "pm_card_decline"),
            "{m}: mails"
        );
    }
    assert_eq!(
        app.stock("mug-enamel").await,
        stock_before - paid,
        "stock taken once per paid order"
    );
    let (received, handled): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(handled_at) FROM webhook_events")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        handled >= orders.len() as i64,
        "every order's event handled ({handled})"
    );
    assert_eq!(received, handled, "no event left half-handled");
    let dup = app
        .metric(r#"payonce_webhook_events_total{result="duplicate"}"#)
        .await;
    assert!(
        dup >= orders.len() as f64,
        "duplicates were delivered and counted: {dup}"
    );
}

async fn a_webhook_for_an_unknown_provider_key_is_not_acknowledged(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let event = json!({
        "id": "evt_early_1",
        "type": "charge.succeeded",
        "created": 1,
        "charge": {
            "id": "ch_x", "providerKey": "pk_nobody_has_this_key_0000", "amount": 100, "currency": "USD",
            "paymentMethodId": "pm_card_approve", "orderId": "ord_x", "status": "succeeded", "createdAt": 1
        }
    });
    let body = serde_json::to_vec(&event).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let sig =
        payonce_mock_provider::sign(payonce_mock_provider::DEFAULT_WEBHOOK_SECRET, now, &body);
    for _ in 0..2 {
        let r = app
            .send(
                app.http
                    .post(app.url("/webhooks/provider"))
                    .header("content-type", "application/json")
                    .header("Payonce-Signature", &sig)
                    .body(body.clone()),
            )
            .await;
        // Not acknowledged (the provider redelivers), and the second delivery is not
        // mistaken for a handled duplicate.
        assert_eq!(
            (r.status, r.code()),
            (404, ErrorCode::PaymentNotFound),
            "{}",
            r.text()
        );
    }
    let pool = app.db_pool().await;
    let (handled,): (Option<i64>,) =
        sqlx::query_as("SELECT handled_at FROM webhook_events WHERE id = 'evt_early_1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(handled, None);
}

/// The provider's own record of refunds: its state file.
fn provider_refunds(state: &std::path::Path, charge: &str) -> usize {
    crate::common::provider_state(state)
        .refunds
        .iter()
        .filter(|r| r.charge_id == charge)
        .count()
}

async fn a_refund_retried_ten_times_or_raced_ten_times_refunds_once(backend: Backend) {
    let state = std::env::temp_dir().join(format!(
        "payonce-refund-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let opts = Opts {
        extra: vec!["--provider-state".into(), state.display().to_string()],
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let pay = |id: String| {
        let app = &app;
        let t = &t;
        async move {
            let r = app.pay(t, &id, Some(&key()), 1, "pm_card_approve").await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(
                r.header("idempotency-key-retention").as_deref(),
                Some("86400")
            );
            r.json()["payment"].clone()
        }
    };
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let payment = pay(id.clone()).await;
    let pid = payment["id"].as_str().unwrap().to_owned();
    let charge = payment["chargeId"].as_str().unwrap().to_owned();

    // Retried ten times with one key: one refund, ten identical answers.
    let rk = key();
    let first = app.refund(&t, &pid, Some(&rk)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["payment"]["status"], "refunded");
    for _ in 0..9 {
        let r = app.refund(&t, &pid, Some(&rk)).await;
        assert_eq!((r.status, &r.body), (200, &first.body));
        assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    }
    let ledger = app.ledger(&id).await;
    assert_eq!(
        (ledger.len(), ledger[0]["status"].as_str()),
        (1, Some("refunded"))
    );
    assert_eq!(provider_refunds(&state, &charge), 1);
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Refunded);
    // Another key for the same payment, another user, no key, a key of another payment.
    let r = app.refund(&t, &pid, Some(&key())).await;
    assert_eq!((r.status, r.code()), (409, ErrorCode::RefundNotAllowed));
    let bob = app.session("bob").await;
    assert_eq!(
        app.refund(&bob, &pid, Some(&key())).await.code(),
        ErrorCode::PaymentNotFound
    );
    assert_eq!(
        app.refund(&t, &pid, None).await.code(),
        ErrorCode::IdempotencyKeyMissing
    );

    // Raced ten times with one key on another payment: still one refund.
    let id2 = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let payment2 = pay(id2.clone()).await;
    let pid2 = payment2["id"].as_str().unwrap().to_owned();
    let charge2 = payment2["chargeId"].as_str().unwrap().to_owned();
    assert_eq!(
        app.refund(&t, &pid2, Some(&rk)).await.code(),
        ErrorCode::KeyReusedWithDifferentDetails
    );
    let rk2 = key();
    let answers =
        futures_util::future::join_all((0..10).map(|_| app.refund(&t, &pid2, Some(&rk2)))).await;
    let ok: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    for r in &answers {
        assert!(
            r.status == 200 || (r.status == 409 && r.code() == ErrorCode::InProgress),
            "{} {}",
            r.status,
            r.text()
        );
    }
    assert!(!ok.is_empty());
    assert!(
        ok.iter().all(|r| r.body == ok[0].body),
        "one answer for one key"
    );
    assert_eq!(provider_refunds(&state, &charge2), 1);
    let pool = app.db_pool().await;
    let n = count(
        &pool,
        "SELECT COUNT(*) FROM refunds WHERE payment_id = $1",
        &pid2,
    )
    .await;
    assert_eq!(n, 1);
    let refunded = app
        .metric(r#"payonce_refunds_total{result="refunded"}"#)
        .await;
    assert_eq!(refunded, 2.0, "two payments, two refunds");
    let _ = std::fs::remove_file(&state);
}

async fn unreachable_provider_flags_stuck_attempts_for_review_never_charges(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    // A provider that is not there: every call fails, nothing can be learned.
    let opts = Opts {
        jobs_interval_ms: 100,
        extra: vec![
            "--provider-url".into(),
            "http://127.0.0.1:9".into(),
            "--reconcile-after-ms".into(),
            "300".into(),
        ],
        ..Opts::default()
    };
    let proc = spawn(&opts.args(&db.url), true);
    let app = TestApp {
        api: proc.api.clone().unwrap(),
        provider: "http://127.0.0.1:9".into(),
        http: crate::common::client(),
        _procs: vec![proc],
        db: Some(db),
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(r.status, 202, "{}", r.text());
    let pool = app.db_pool().await;
    let flagged =
        "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL";
    wait_for(
        "the attempt flagged for manual review",
        Duration::from_secs(10),
        || async { (count(&pool, flagged, &id).await > 0).then_some(()) },
    )
    .await;
    assert_eq!(
        count(&pool, flagged, &id).await,
        1,
        "flagged for manual review"
    );
    // That later rounds flag it no second time is a rule of the clock, tested by moving one
    // (`inproc.rs`, `an_attempt_the_provider_cannot_settle_is_flagged_for_review_once`).
    let audits = count(
        &pool,
        "SELECT COUNT(*) FROM audit_log a JOIN attempts t ON t.id = a.entity_id
         WHERE t.order_id = $1 AND a.to_state = 'processing (needs review)'",
        &id,
    )
    .await;
    assert_eq!(audits, 1, "one audit row");
    let flagged = app
        .metric(r#"payonce_reconciliation_total{result="manual_review"}"#)
        .await;
    assert_eq!(flagged, 1.0, "the manual-review metric");
    // Still processing, still locked: nothing decided without the provider.
    assert_eq!(app.order_state(&t, &id).await, (OrderStatus::Unpaid, true));

    // The provider is back (the process restarts with one): the customer's retry settles the
    // attempt from it (rule 5: the provider has no charge under the key, so it is driven
    // with the same provider key), charged once, and the review flag is gone with the doubt.
    let TestApp {
        _procs, db, http, ..
    } = app;
    drop(_procs);
    let db = db.expect("the test database");
    let opts = Opts {
        jobs_interval_ms: 100,
        ..Opts::default()
    };
    let mut args = opts.args(&db.url);
    args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
    let proc = spawn(&args, true);
    let app = TestApp {
        api: proc.api.clone().unwrap(),
        provider: proc.provider.clone().unwrap(),
        http,
        _procs: vec![proc],
        db: Some(db),
    };
    let t = app.session("alice").await;
    let r = app.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.ledger(&id).await.len(), 1, "charged once");
    let still_flagged = count(
        &pool,
        "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL",
        &id,
    )
    .await;
    assert_eq!(
        still_flagged, 0,
        "settled, so no longer waiting for a review"
    );
    assert_eq!(app.order_state(&t, &id).await, (OrderStatus::Paid, false));
}

/// `payonce-server mock-provider --state-file`: a restarted standalone provider still knows
/// its charges, so a lookup by provider key after a crash finds the charge instead of "no
/// such charge" (which would make reconciliation charge again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_provider_keeps_its_ledger_across_a_restart() {
    let state = std::env::temp_dir().join(format!(
        "payonce-provider-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let args: Vec<String> = vec![
        "mock-provider".into(),
        "--addr".into(),
        "127.0.0.1:0".into(),
        "--state-file".into(),
        state.display().to_string(),
    ];
    let http = crate::common::client();
    let mut first = spawn(&args, false);
    let url = first.provider.clone().unwrap();
    let body = json!({ "amount": 2500, "currency": "USD", "paymentMethodId": "pm_card_approve", "orderId": "ord_restart" });
    let r = http
        .post(format!("{url}/charges"))
        .header("Idempotency-Key", "pk_restart_test_0000000001")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    first.kill();
    let second = spawn(&args, false);
    let url = second.provider.clone().unwrap();
    let r = http
        .get(format!("{url}/charges/by-key/pk_restart_test_0000000001"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "the charge survived the restart");
    assert_eq!(
        crate::common::ledger(&http, &url, "ord_restart")
            .await
            .len(),
        1
    );
    let _ = std::fs::remove_file(&state);
}

/// The card's issuer refuses every refund (`pm_card_refund_refused`) and nothing was
/// refunded elsewhere: the refund key ends `failed` with a 409 `REFUND_NOT_ALLOWED` that its
/// retries replay (never another provider call), the order stays paid, and the payment's
/// refund slot is free: a new key gets a refund attempt of its own.
async fn a_refund_the_provider_refuses_fails_and_frees_the_payment(backend: Backend) {
    let state = std::env::temp_dir().join(format!(
        "payonce-refund-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let opts = Opts {
        extra: vec!["--provider-state".into(), state.display().to_string()],
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let r = app
        .pay(&t, &id, Some(&key()), 1, "pm_card_refund_refused")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let pid = r.json()["payment"]["id"].as_str().unwrap().to_owned();
    let rk = key();
    let first = app.refund(&t, &pid, Some(&rk)).await;
    assert_eq!(
        (first.status, first.code()),
        (409, ErrorCode::RefundNotAllowed),
        "{}",
        first.text()
    );
    for _ in 0..5 {
        let again = app.refund(&t, &pid, Some(&rk)).await;
        assert_eq!(again.body, first.body);
        assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    }
    let pool = app.db_pool().await;
    let failed = "SELECT COUNT(*) FROM refunds WHERE payment_id = $1 AND status = 'failed'";
    assert_eq!(count(&pool, failed, &pid).await, 1, "the key ended failed");
    let other = app.refund(&t, &pid, Some(&key())).await;
    assert_eq!(other.code(), ErrorCode::RefundNotAllowed);
    assert!(
        other.text().contains("refused"),
        "a refund of its own: {}",
        other.text()
    );
    assert_eq!(
        count(&pool, failed, &pid).await,
        2,
        "the slot was free for it"
    );
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM refunds WHERE payment_id = $1 AND status = 'processing'",
            &pid
        )
        .await,
        0
    );
    let charge = r.json()["payment"]["chargeId"].as_str().unwrap().to_owned();
    assert_eq!(provider_refunds(&state, &charge), 0);
    let _ = std::fs::remove_file(&state);
}

/// The merchant refunds a charge in the provider's dashboard. With webhooks, the
/// `charge.refunded` event marks the order and payment refunded; without, a payonce refund
/// of the payment is refused by the provider, which then lists the dashboard's refund: it
/// is recorded as this refund (200, refunded), never a refund for ever `processing`.
async fn a_refund_made_in_the_providers_dashboard_is_reflected(backend: Backend) {
    for webhooks in [true, false] {
        let opts = Opts {
            webhooks,
            ..Opts::default()
        };
        let Some(app) = TestApp::spawn_with(backend, opts).await else {
            return;
        };
        let t = app.session("alice").await;
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let r = app.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let payment = r.json()["payment"].clone();
        let (pid, charge) = (
            payment["id"].as_str().unwrap().to_owned(),
            payment["chargeId"].as_str().unwrap().to_owned(),
        );
        let url = format!("{}/dev/charges/{charge}/refund", app.provider);
        let dash = app.http.post(url).send().await.unwrap();
        assert_eq!(dash.status(), 201, "the dashboard refunds");
        if webhooks {
            let seen = payonce_testkit::eventually(
                Duration::from_secs(10),
                Duration::from_millis(50),
                || async {
                    (app.order_status(&t, &id).await == OrderStatus::Refunded).then_some(())
                },
            )
            .await;
            assert!(
                seen.is_some(),
                "the charge.refunded event reached the order"
            );
            let r = app.refund(&t, &pid, Some(&key())).await;
            assert_eq!(r.code(), ErrorCode::RefundNotAllowed, "already refunded");
        } else {
            assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
            let r = app.refund(&t, &pid, Some(&key())).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["payment"]["status"], "refunded");
            assert_eq!(app.order_status(&t, &id).await, OrderStatus::Refunded);
        }
        let pool = app.db_pool().await;
        let refunded = "SELECT COUNT(*) FROM payments WHERE id = $1 AND status = 'refunded'";
        assert_eq!(
            count(&pool, refunded, &pid).await,
            1,
            "webhooks: {webhooks}"
        );
    }
}

/// A refund the provider holds pending (`pm_card_refund_pending`) is not `refunded`: the key
/// answers 409 `IN_PROGRESS` and no second refund is made. The provider's `refund.failed`
/// ends the key `failed` (409 `REFUND_NOT_ALLOWED`, replayed) with the order still paid; a
/// new key's refund, pending too, becomes `refunded` when `refund.updated` says it succeeded.
async fn a_pending_refund_is_settled_by_the_providers_events(backend: Backend) {
    let opts = Opts {
        webhooks: true,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("pia").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let r = app
        .pay(&t, &id, Some(&key()), 1, "pm_card_refund_pending")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let pid = r.json()["payment"]["id"].as_str().unwrap().to_owned();
    let charge = r.json()["payment"]["chargeId"].as_str().unwrap().to_owned();
    let refunds = || async {
        let url = format!("{}/charges/{charge}/refunds", app.provider);
        let list: serde_json::Value = app
            .http
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list["refunds"].as_array().cloned().unwrap_or_default()
    };
    let end = |re: String, how: &'static str| {
        let url = format!("{}/dev/refunds/{re}/{how}", app.provider);
        let http = app.http.clone();
        async move { assert!(http.post(url).send().await.unwrap().status().is_success()) }
    };
    let pool = app.db_pool().await;
    // Only the provider's event moves the row here: nothing else calls in between.
    let rows = |status: &'static str| {
        let (pool, pid) = (pool.clone(), pid.clone());
        async move {
            let sql = "SELECT COUNT(*) FROM refunds WHERE payment_id = $1 AND status = $2";
            let (n,): (i64,) = sqlx::query_as(sql)
                .bind(&pid)
                .bind(status)
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    let applied = Duration::from_secs(10);

    let rk = key();
    let pending = app.refund(&t, &pid, Some(&rk)).await;
    let again = app.refund(&t, &pid, Some(&rk)).await;
    let list = refunds().await;
    assert_eq!(list.len(), 1, "one refund at the provider: {list:?}");
    assert_eq!(list[0]["status"], "pending");
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    for r in [&pending, &again] {
        assert_eq!(r.status, 409, "{}", r.text());
        assert_eq!(r.code(), ErrorCode::InProgress);
    }

    end(list[0]["id"].as_str().unwrap().to_owned(), "fail").await;
    wait_for("refund.failed applied", applied, || async {
        (rows("failed").await == 1).then_some(())
    })
    .await;
    let failed = app.refund(&t, &pid, Some(&rk)).await;
    assert_eq!(
        failed.code(),
        ErrorCode::RefundNotAllowed,
        "{}",
        failed.text()
    );
    let replay = app.refund(&t, &pid, Some(&rk)).await;
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);

    let rk2 = key();
    let second = app.refund(&t, &pid, Some(&rk2)).await;
    assert_eq!(second.code(), ErrorCode::InProgress, "{}", second.text());
    let list = refunds().await;
    assert_eq!(list.len(), 2, "{list:?}");
    end(list[1]["id"].as_str().unwrap().to_owned(), "succeed").await;
    wait_for("refund.updated applied", applied, || async {
        (rows("succeeded").await == 1).then_some(())
    })
    .await;
    let done = app.refund(&t, &pid, Some(&rk2)).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(done.json()["refundId"], list[1]["id"]);
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Refunded);
}
