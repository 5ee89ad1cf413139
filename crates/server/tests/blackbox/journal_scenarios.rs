//! What happened to an order, told by the operator API alone (`GET /admin/orders/{id}/timeline`
//! with the operator token): for each scenario of issue 31 the machines' decisions and the
//! webhooks' verdicts, in the order they happened, each with its actor and request id
//! (docs/operating.md, "The journal"). The lost answer and its replay, a cancel and a refund,
//! and the Stripe two-phase pay are in `journal.rs`.

use crate::common::{id_of, key, spawn, Backend, Checkout, HttpApi, Opts, Req, TestApp, TestDb};
use crate::inproc::{provider, InProc};
use crate::journal::{token_file, OPERATOR_TOKEN};
use crate::on_both_backends;
use payonce_protocol::admin::paths as admin;
use payonce_protocol::admin::{decision, email, kind, lost, refund, settle, verdict};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{REQUEST_ID, WEBHOOK_SIGNATURE};
use payonce_protocol::{ErrorCode, OrderStatus};
use serde_json::{json, Value};
use std::time::Duration;

on_both_backends!(
    a_crash_after_the_charge_is_taken_over_and_reconciled,
    a_challenge_that_expires_at_its_deadline_is_told_step_by_step,
    a_cancel_meeting_its_pay_in_flight_and_a_cancelled_key_are_told,
    a_refund_made_in_the_providers_dashboard_is_told_by_its_webhook,
    a_webhook_delivered_twice_is_applied_once_and_forged_ones_leave_no_row,
);

/// The journal's entries of the order's timeline, in its order.
async fn journal_of(s: &impl Checkout, id: &str) -> Vec<Value> {
    let r = s
        .call(Req::get(admin::timeline(id)).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.json()["events"].as_array().unwrap().clone();
    events
        .into_iter()
        .filter(|e| e["source"] == "journal")
        .collect()
}

/// One step of a story: the entry's kind, its outcome (a decision's) or verdict (a
/// webhook's) or operation (a provider call's), its actor and request id (`-`: none).
type Step = (String, String, String, String);

fn steps(journal: &[Value]) -> Vec<Step> {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    journal
        .iter()
        .map(|e| {
            let d = &e["detail"];
            let what = match e["kind"].as_str() {
                Some(k) if k == kind::WEBHOOK => &d["verdict"],
                Some(k) if k == kind::PROVIDER_CALL => &d["op"],
                Some(k) if decision::ALL.contains(&k) => &d["outcome"],
                _ => &Value::Null,
            };
            (
                text(&e["kind"]),
                text(what),
                text(&e["actor"]),
                text(&e["requestId"]),
            )
        })
        .collect()
}

fn step(kind: &str, what: &str, actor: &str, request: &str) -> Step {
    (kind.into(), what.into(), actor.into(), request.into())
}

/// Asserts that `want` occurs in `story` in this order (other steps may come between).
fn assert_in_order(story: &[Step], want: &[Step]) {
    let mut rest = story.iter();
    for w in want {
        assert!(
            rest.any(|s| s == w),
            "{w:?} missing, or out of order, in {story:#?}"
        );
    }
}

/// The id the server journaled this answer under (the client's, else one it minted).
fn request_id(r: &crate::common::Resp) -> String {
    r.header(REQUEST_ID)
        .expect("every answer names its request")
}

async fn inproc(db: &TestDb, extra: &[&str]) -> (InProc, std::path::PathBuf) {
    let (dir, file) = token_file();
    let mut flags = vec!["--operator-token-file", file.as_str()];
    flags.extend(extra);
    (InProc::start(db, &provider().await, &flags).await, dir)
}

/// The process crashes right after the provider charged (the `after-charge` failpoint): its
/// answer and its request entry are lost, but its claim was journaled with the claim's
/// transaction. Restarted, the same key's retry waits out the lease, takes it over, asks the
/// provider (a lookup by provider key: the reconciliation) and settles the charge it finds.
async fn a_crash_after_the_charge_is_taken_over_and_reconciled(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("payonce-jcrash-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_token_dir, file) = token_file();
    let state_file = dir.join("provider.json").display().to_string();
    let opts = Opts {
        // No job round: the retry is the one that takes over.
        jobs_interval_ms: 0,
        lease_ms: 1_500,
        provider_timeout_ms: 1_000,
        in_progress_wait_ms: 0,
        extra: [
            "--provider-addr",
            "127.0.0.1:0",
            "--provider-state",
            &state_file,
            "--operator-token-file",
            &file,
        ]
        .map(String::from)
        .to_vec(),
        ..Opts::default()
    };
    let args = opts.args(&db.url);
    let mut first_args = args.clone();
    first_args.extend(["--failpoint".into(), "after-charge".into()]);
    let mut first = spawn(&first_args, true);
    let app = |p: &crate::common::Proc| TestApp {
        api: p.api.clone().unwrap(),
        provider: p.provider.clone().unwrap(),
        http: crate::common::client(),
        _procs: vec![],
        db: None,
    };
    let a = app(&first);
    let t = a.session("alice").await;
    let id = id_of(&a.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let req = a
        .pay_request(&t, &id, Some(&k), 1, "pm_card_approve")
        .header(REQUEST_ID, "crashed-pay");
    let _ = a.request(req).send().await;
    let status = first.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| !s.success()), "aborted: {status:?}");

    let second = spawn(&args, true);
    let b = app(&second);
    // The same client retries with the same key until it learns the outcome (the real
    // clock of a process: the lease ends 1.5 s after the crashed claim).
    let mut tries = 0;
    let paid = loop {
        tries += 1;
        let req = b
            .pay_request(&t, &id, Some(&k), 1, "pm_card_approve")
            .header(REQUEST_ID, &format!("retry-{tries}"));
        let r = b.call(req).await;
        if r.status == 200 {
            break r;
        }
        assert!(tries < 150, "the retry never got its receipt: {}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let retry = request_id(&paid);
    let story = steps(&journal_of(&b, &id).await);
    let req = "request";
    assert_in_order(
        &story,
        &[
            step(decision::CLAIM_WON, "-", req, "crashed-pay"),
            step(kind::PAY, "-", req, &retry),
            step(decision::LEASE_TAKEN_OVER, "-", req, &retry),
            step(kind::PROVIDER_CALL, "lookup", req, &retry),
            step(decision::SETTLE, settle::PAID, req, &retry),
            step(decision::EMAIL_QUEUED, "-", req, &retry),
        ],
    );
    // Nothing of the crashed request but its claim: its answer was never written.
    let crashed: Vec<&Step> = story.iter().filter(|s| s.3 == "crashed-pay").collect();
    assert_eq!(crashed.len(), 1, "{story:#?}");
    // No second charge: the lookup found the crashed request's.
    assert!(!story.iter().any(|s| s.1 == "charge" && s.3 == retry));
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 3-D Secure challenge the customer abandons: the pay answers 402 and the jobs are told
/// to look later; past `--action-deadline-secs` a job round takes the attempt over, has the
/// provider cancel the payment and settles it `expired`.
async fn a_challenge_that_expires_at_its_deadline_is_told_step_by_step(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = inproc(&db, &["--action-deadline-secs", "60"]).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_3ds").await;
    assert_eq!(r.code(), ErrorCode::ActionRequired, "{}", r.text());
    let pay = request_id(&r);
    s.advance(Duration::from_secs(61));
    payonce_server::run_jobs(&s.state).await;
    let story = steps(&journal_of(&s, &id).await);
    let (req, job) = ("request", "job");
    assert_in_order(
        &story,
        &[
            step(kind::PAY, "-", req, &pay),
            step(decision::CLAIM_WON, "-", req, &pay),
            step(kind::PROVIDER_CALL, "charge", req, &pay),
            step(decision::SETTLE, settle::CHECK_LATER, req, &pay),
            step(decision::LEASE_TAKEN_OVER, "-", job, "-"),
            step(kind::PROVIDER_CALL, "cancel", job, "-"),
            step(decision::SETTLE, settle::EXPIRED, job, "-"),
        ],
    );
}

/// A cancel that meets its key's pay waiting for the customer takes the attempt over, has
/// the provider cancel the payment and ends it without a charge; a key cancelled first
/// leaves a tombstone, and a pay with it loses its claim to it.
async fn a_cancel_meeting_its_pay_in_flight_and_a_cancelled_key_are_told(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = inproc(&db, &[]).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let r = s.pay(&t, &id, Some(&k), 1, "pm_card_3ds").await;
    assert_eq!(r.code(), ErrorCode::ActionRequired, "{}", r.text());
    let pay = request_id(&r);
    let c = s.cancel(&t, &id, &k).await;
    assert_eq!(c.status, 200, "{}", c.text());
    let cancel = request_id(&c);
    let dropped = key();
    let c = s.cancel(&t, &id, &dropped).await;
    assert_eq!(c.status, 200, "{}", c.text());
    let tomb = request_id(&c);
    let r = s.pay(&t, &id, Some(&dropped), 1, "pm_card_approve").await;
    assert_eq!(r.code(), ErrorCode::AttemptCancelled, "{}", r.text());
    let refused = request_id(&r);
    let story = steps(&journal_of(&s, &id).await);
    let req = "request";
    assert_in_order(
        &story,
        &[
            step(decision::CLAIM_WON, "-", req, &pay),
            step(decision::SETTLE, settle::CHECK_LATER, req, &pay),
            step(kind::CANCEL, "-", req, &cancel),
            step(decision::LEASE_TAKEN_OVER, "-", req, &cancel),
            step(kind::PROVIDER_CALL, "cancel", req, &cancel),
            step(decision::SETTLE, settle::UNCHARGED, req, &cancel),
            step(decision::TOMBSTONE, "-", req, &tomb),
            step(kind::PAY, "-", req, &refused),
            step(decision::CLAIM_LOST, lost::TOMBSTONE, req, &refused),
        ],
    );
}

/// Signs `event` as the mock provider does and delivers it to the in-process server.
async fn deliver(s: &InProc, event: &Value, secret: &str) -> crate::common::Resp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let sig = payonce_mock_provider::sign(secret, now, event.to_string().as_bytes());
    let req = Req::post(paths::WEBHOOKS)
        .header(WEBHOOK_SIGNATURE, &sig)
        .json(event.clone());
    s.call(req).await
}

const SECRET: &str = payonce_mock_provider::DEFAULT_WEBHOOK_SECRET;

/// A job round sends the paid order's receipt. The merchant then refunds the charge in the
/// provider's dashboard; the provider's `charge.refunded` event is applied: the payment
/// marked refunded at the provider, under the webhook's request id.
async fn a_refund_made_in_the_providers_dashboard_is_told_by_its_webhook(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = inproc(&db, &[]).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let pay = request_id(&r);
    // A job round sends the receipt (the dev mailbox).
    payonce_server::run_jobs(&s.state).await;
    let charge = r.json()["payment"]["chargeId"].as_str().unwrap().to_owned();
    let url = format!("{}/dev/charges/{charge}/refund", s.provider);
    let dash = s.http.post(url).send().await.unwrap();
    assert_eq!(dash.status(), 201, "the dashboard refunds");
    let ledger = s.ledger(&id).await;
    let event = json!({
        "id": "evt_dashboard_refund", "type": "charge.refunded", "created": 1,
        "charge": ledger[0],
    });
    let hook = deliver(&s, &event, SECRET).await;
    assert_eq!(hook.status, 200, "{}", hook.text());
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Refunded);
    let hook = request_id(&hook);
    let journal = journal_of(&s, &id).await;
    let story = steps(&journal);
    let (req, wh) = ("request", "webhook");
    assert_in_order(
        &story,
        &[
            step(decision::SETTLE, settle::PAID, req, &pay),
            step(decision::EMAIL_QUEUED, "-", req, &pay),
            step(decision::EMAIL, email::SENT, "job", "-"),
            step(kind::PROVIDER_CALL, "refunds_of", wh, &hook),
            step(decision::REFUND_SETTLE, refund::AT_PROVIDER, wh, &hook),
            step(kind::WEBHOOK, verdict::APPLIED, wh, &hook),
        ],
    );
    let applied = journal.iter().find(|e| e["kind"] == kind::WEBHOOK).unwrap();
    assert_eq!(applied["detail"]["eventId"], "evt_dashboard_refund");
    assert_eq!(applied["detail"]["type"], "charge.refunded");
}

/// A charge whose answer the provider never gave in time (202, the attempt processing) is
/// settled by the provider's `charge.succeeded`; the same event delivered again is a
/// duplicate, acknowledged and applied nowhere. Deliveries whose signature fails are never
/// written: the journal has no row more after them.
async fn a_webhook_delivered_twice_is_applied_once_and_forged_ones_leave_no_row(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = inproc(&db, &["--provider-timeout-ms", "300"]).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_timeout").await;
    assert_eq!(r.status, 202, "{}", r.text());
    let pay = request_id(&r);
    let ledger = payonce_testkit::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let l = s.ledger(&id).await;
            (l.first().is_some_and(|c| c["status"] == "succeeded")).then_some(l)
        },
    )
    .await
    .expect("the provider charged");
    let event = json!({
        "id": "evt_twice", "type": "charge.succeeded", "created": 1, "charge": ledger[0],
    });
    let first = deliver(&s, &event, SECRET).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = deliver(&s, &event, SECRET).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Paid);
    let (first, again) = (request_id(&first), request_id(&again));
    let journal = journal_of(&s, &id).await;
    let story = steps(&journal);
    let (req, wh) = ("request", "webhook");
    assert_in_order(
        &story,
        &[
            step(decision::CLAIM_WON, "-", req, &pay),
            step(decision::SETTLE, settle::RELEASED, req, &pay),
            step(kind::PROVIDER_CALL, "lookup", wh, &first),
            step(decision::SETTLE, settle::PAID, wh, &first),
            step(kind::WEBHOOK, verdict::APPLIED, wh, &first),
            step(kind::WEBHOOK, verdict::DUPLICATE, wh, &again),
        ],
    );
    let settles = story
        .iter()
        .filter(|s| s.0 == decision::SETTLE && s.1 == settle::PAID);
    assert_eq!(settles.count(), 1, "applied once: {story:#?}");

    let rows = || async {
        let pool = db.pool().await;
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM journal")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    };
    let before = rows().await;
    for n in 0..20 {
        let forged = json!({ "id": format!("evt_forged_{n}"), "type": "charge.succeeded",
            "created": 1, "charge": ledger[0] });
        let r = deliver(&s, &forged, "not-the-providers-secret").await;
        assert_eq!(r.code(), ErrorCode::WebhookSignatureInvalid, "{}", r.text());
    }
    assert_eq!(rows().await, before, "a forged delivery grows nothing");
}
