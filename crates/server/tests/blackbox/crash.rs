//! Kill the server at every step that matters, restart it on the same database and the same
//! provider ledger, let the same client retry and the jobs run, then audit: exactly one
//! charge in the provider's ledger, the attempt final, the order paid once, stock taken
//! once, one confirmation email. On SQLite and PostgreSQL.
//!
//! The process aborts itself at a named failpoint (`--failpoint NAME`, dev only) or on the
//! `Payonce-Dev-Fault: crash-after-charge` header: `abort()`, no graceful anything. The
//! embedded provider keeps its ledger in `--provider-state`, so it survives the crash of
//! the process that hosts it, and resends the webhooks it could not deliver.

use crate::common::{client, id_of, key, spawn, Backend, Checkout, HttpApi, Opts, TestApp, TestDb};
use crate::on_both_backends;
use payonce_protocol::{ErrorCode, OrderStatus};
use payonce_testkit::{eventually, wait_for};
use std::path::PathBuf;
use std::time::Duration;

on_both_backends!(
    crash_after_claim,
    crash_after_charge,
    crash_before_settle_commit,
    crash_after_save,
    crash_inside_webhook_handler,
    crash_inside_outbox_worker,
    crash_inside_email_job,
    crash_after_charge_dev_fault_header,
    crash_after_a_decline_unlocks_without_charge_or_mail,
);

async fn crash_after_claim(b: Backend) {
    scenario(b, Crash::Failpoint("after-claim"), "pm_card_approve").await
}
async fn crash_after_charge(b: Backend) {
    scenario(b, Crash::Failpoint("after-charge"), "pm_card_approve").await
}
async fn crash_before_settle_commit(b: Backend) {
    scenario(
        b,
        Crash::Failpoint("before-settle-commit"),
        "pm_card_approve",
    )
    .await
}
async fn crash_after_save(b: Backend) {
    scenario(b, Crash::Failpoint("after-save"), "pm_card_approve").await
}
async fn crash_inside_webhook_handler(b: Backend) {
    scenario(b, Crash::Failpoint("webhook"), "pm_card_approve").await
}
/// The transient method's first call is a 503 (nothing charged, 202 to the client): the
/// outbox worker then takes the abandoned row over and crashes while holding it.
async fn crash_inside_outbox_worker(b: Backend) {
    scenario(b, Crash::Failpoint("outbox"), "pm_card_transient").await
}
async fn crash_inside_email_job(b: Backend) {
    scenario(b, Crash::Failpoint("email"), "pm_card_approve").await
}
async fn crash_after_charge_dev_fault_header(b: Backend) {
    scenario(b, Crash::Header, "pm_card_approve").await
}

#[derive(Clone, Copy, Debug)]
enum Crash {
    Failpoint(&'static str),
    /// `Payonce-Dev-Fault: crash-after-charge`.
    Header,
}

/// A temp dir for the provider's state file (PostgreSQL tests have no SQLite dir).
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn scenario(backend: Backend, crash: Crash, method: &str) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let dir = TempDir(
        std::env::temp_dir().join(format!("payonce-crash-{}", uuid::Uuid::new_v4().simple())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let state_file = dir.0.join("provider.json");
    let webhook_case = matches!(crash, Crash::Failpoint("webhook"));
    let mut extra = vec![
        "--provider-addr".into(),
        "127.0.0.1:0".into(),
        "--provider-state".into(),
        state_file.display().to_string(),
    ];
    if webhook_case {
        // Early delivery: the provider calls us before it answers our charge call, so the
        // handler crashes while the attempt is still processing.
        extra.extend(["--provider-webhook-chaos".into(), "early".into()]);
    }
    let opts = Opts {
        jobs_interval_ms: 100,
        lease_ms: 1_500,
        provider_timeout_ms: 1_000,
        in_progress_wait_ms: 0,
        webhooks: webhook_case,
        extra,
        ..Opts::default()
    };
    let args = opts.args(&db.url);
    let mut first_args = args.clone();
    if let Crash::Failpoint(name) = crash {
        first_args.extend(["--failpoint".into(), name.into()]);
    }

    // --- the first process: pay, and die at the step ------------------------------------
    let mut first = spawn(&first_args, true);
    let app = TestApp {
        api: first.api.clone().unwrap(),
        provider: first.provider.clone().unwrap(),
        http: client(),
        _procs: vec![],
        db: None,
    };
    let t = app.session("alice").await;
    let stock_before = app.stock("tee-classic").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let mut req = app.pay_request(&t, &id, Some(&k), 1, method);
    if matches!(crash, Crash::Header) {
        req = req.header("Payonce-Dev-Fault", "crash-after-charge");
    }
    // The answer may or may not arrive (the email and outbox crashes happen after it).
    let _ = app.request(req).send().await;
    let status = first.wait_exit(Duration::from_secs(20)).await;
    let status = status.unwrap_or_else(|| panic!("{crash:?}: the server never crashed"));
    assert!(
        !status.success(),
        "{crash:?}: aborted, not a clean exit: {status:?}"
    );

    // What the crash left behind proves where it happened.
    {
        let pool = db.pool().await;
        let row: Option<(String,)> =
            sqlx::query_as("SELECT status FROM attempts WHERE idem_key = $1")
                .bind(&k)
                .fetch_optional(&pool)
                .await
                .unwrap();
        let (pending,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE status = 'processing'")
                .fetch_one(&pool)
                .await
                .unwrap();
        let saved = matches!(crash, Crash::Failpoint("after-save" | "email"));
        let want = if saved { "succeeded" } else { "processing" };
        assert_eq!(
            row,
            Some((want.to_owned(),)),
            "{crash:?}: the attempt after the crash"
        );
        assert_eq!(
            pending,
            i64::from(!saved),
            "{crash:?}: processing attempts (the outbox) after the crash"
        );
        if webhook_case {
            let (all, handled): (i64, i64) =
                sqlx::query_as("SELECT COUNT(*), COUNT(handled_at) FROM webhook_events")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            assert_eq!(
                (all, handled),
                (1, 0),
                "recorded on arrival, crashed before applying"
            );
        }
        pool.close().await;
        // The provider's ledger as its state file holds it: charged before the crash unless
        // the crash came before the call (or the call was the transient 503).
        // (No file at all: the provider never changed its state.)
        let charged = crate::common::provider_state(&state_file)
            .charges
            .iter()
            .filter(|c| c.order_id == id)
            .count();
        let before_call = matches!(crash, Crash::Failpoint("after-claim" | "outbox"));
        assert_eq!(
            charged,
            usize::from(!before_call),
            "{crash:?}: charges at the crash"
        );
    }

    // --- the second process on the same database and provider ledger ---------------------
    let second = spawn(&args, true);
    let app = TestApp {
        api: second.api.clone().unwrap(),
        provider: second.provider.clone().unwrap(),
        http: client(),
        _procs: vec![second],
        db: Some(db),
    };
    // The same client retries with the same key until it learns the outcome.
    let retry = eventually(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async {
            let r = app.pay(&t, &id, Some(&k), 1, method).await;
            assert!(
                [200, 202, 409].contains(&r.status),
                "{crash:?}: a retry is told to wait, never charged blindly: {} {}",
                r.status,
                r.text()
            );
            (r.status == 200).then_some(r)
        },
    );
    let paid = retry
        .await
        .unwrap_or_else(|| panic!("{crash:?}: the retry never got its receipt"));

    // The confirmation email: the job runs after the restart (or was sent before it), and
    // once its job is acknowledged no round sends it again.
    let mails = app.wait_for_mails(&t, &id, 1).await;
    let pool = app.db_pool().await;
    wait_job_done(&pool, &id).await;
    assert_eq!(app.mailbox(&t, &id).await.len(), 1, "{crash:?}: one email");
    assert_eq!(mails[0]["orderId"], id.as_str());

    // --- the audit ---------------------------------------------------------------------
    let charges = app.ledger(&id).await;
    assert_eq!(
        charges.len(),
        1,
        "{crash:?}: exactly one charge: {charges:?}"
    );
    assert_eq!(charges[0]["status"], "succeeded");
    assert_eq!(paid.json()["payment"]["chargeId"], charges[0]["id"]);
    assert_eq!(
        app.order_state(&t, &id).await,
        (OrderStatus::Paid, false),
        "{crash:?}"
    );
    assert_eq!(
        app.stock("tee-classic").await,
        stock_before - 1,
        "{crash:?}: stock taken once"
    );
    let (status,): (String,) = sqlx::query_as("SELECT status FROM attempts WHERE idem_key = $1")
        .bind(&k)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "succeeded", "{crash:?}: the attempt is final");
    let (payments,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM payments WHERE order_id = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(payments, 1, "{crash:?}: paid once");
    let (paid_rows,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM audit_log WHERE entity = 'order' AND entity_id = $1 AND to_state = 'paid'",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(paid_rows, 1, "{crash:?}: one unpaid → paid transition");
    let (pending,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE status = 'processing'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(pending, 0, "{crash:?}: the outbox is drained");
    if webhook_case {
        // The event the handler crashed on was recorded but not handled; the restarted
        // provider delivers it again and this time it is handled (not taken for a duplicate).
        let events = "SELECT COUNT(*), COUNT(handled_at) FROM webhook_events";
        wait_for(
            "every webhook event handled",
            Duration::from_secs(10),
            || async {
                let (all, handled): (i64, i64) =
                    sqlx::query_as(events).fetch_one(&pool).await.unwrap();
                (all > 0 && all == handled).then_some(())
            },
        )
        .await;
    }
    if matches!(crash, Crash::Failpoint("email")) {
        // The crash came between the mailer's answer and the settle: the job was delivered
        // again, and that delivery wrote the one mailbox row (the dev mailer's send is the
        // settle's own row; with SMTP it is the same message again: tests/blackbox/mail.rs).
        let (deliveries,): (i64,) = wait_job_done(&pool, &id).await;
        assert!(
            deliveries >= 2,
            "the email job was redelivered ({deliveries})"
        );
    }
}

async fn wait_job_done(pool: &sqlx::AnyPool, order: &str) -> (i64,) {
    let sql = "SELECT deliveries FROM jobs WHERE order_id = $1 AND done_at IS NOT NULL";
    eventually(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            sqlx::query_as(sql)
                .bind(order)
                .fetch_optional(pool)
                .await
                .unwrap()
        },
    )
    .await
    .expect("the email job was never acknowledged")
}

/// The provider declined, then the server died before saving that: after the restart the
/// decline is learned from the provider (not charged again, not "paid"), the order unlocks,
/// the reserved stock comes back, and no confirmation is sent.
async fn crash_after_a_decline_unlocks_without_charge_or_mail(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let dir = TempDir(
        std::env::temp_dir().join(format!("payonce-crash-{}", uuid::Uuid::new_v4().simple())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let opts = Opts {
        jobs_interval_ms: 100,
        lease_ms: 1_500,
        provider_timeout_ms: 1_000,
        in_progress_wait_ms: 0,
        extra: vec![
            "--provider-addr".into(),
            "127.0.0.1:0".into(),
            "--provider-state".into(),
            dir.0.join("provider.json").display().to_string(),
        ],
        ..Opts::default()
    };
    let args = opts.args(&db.url);
    let mut first_args = args.clone();
    first_args.extend(["--failpoint".into(), "after-charge".into()]);
    let mut first = spawn(&first_args, true);
    let app = TestApp {
        api: first.api.clone().unwrap(),
        provider: first.provider.clone().unwrap(),
        http: client(),
        _procs: vec![],
        db: None,
    };
    let t = app.session("alice").await;
    let stock_before = app.stock("tee-classic").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let _ = app
        .request(app.pay_request(&t, &id, Some(&k), 1, "pm_card_decline"))
        .send()
        .await;
    assert!(
        first.wait_exit(Duration::from_secs(20)).await.is_some(),
        "crashed"
    );

    let second = spawn(&args, true);
    let app = TestApp {
        api: second.api.clone().unwrap(),
        provider: second.provider.clone().unwrap(),
        http: client(),
        _procs: vec![second],
        db: Some(db),
    };
    // No client retry: the outbox worker settles it once the lease is over.
    app.wait_status(&t, &id, OrderStatus::Unpaid).await;
    let r = app.pay(&t, &id, Some(&k), 1, "pm_card_decline").await;
    assert_eq!((r.status, r.code()), (402, ErrorCode::PaymentDeclined));
    let charges = app.ledger(&id).await;
    assert_eq!(
        (charges.len(), charges[0]["status"].as_str()),
        (1, Some("declined"))
    );
    assert_eq!(
        app.stock("tee-classic").await,
        stock_before,
        "the reserved unit came back"
    );
    // An email is only ever sent from a job row, which a settle writes in its own
    // transaction: none for this order, so none can come later.
    let (jobs,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM jobs WHERE order_id = $1")
        .bind(&id)
        .fetch_one(&app.db_pool().await)
        .await
        .unwrap();
    assert_eq!(jobs, 0, "no confirmation queued for a decline");
    assert!(
        app.mailbox(&t, &id).await.is_empty(),
        "no confirmation for a decline"
    );
}
