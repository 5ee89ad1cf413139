//! The provider sweep (`payonce-server sweep --since T`, src/ops/sweep.rs) and a restore
//! (docs/deploy.md, "Restoring"). The orphans are made as in production: a create answer
//! the fault proxy drops (localstripe ignores `Idempotency-Key`, so the re-drive makes a
//! second intent and the first is never saved), and that intent then confirmed at
//! localstripe directly, as a page holding its client secret could. A restore puts back a
//! backup taken before some pays; the sweep from the backup's time finds their payments,
//! and the retries of the lost keys charge nothing again. Every count of charges is the
//! provider's own list (localstripe's intents, the mock's ledger).

use crate::common::{
    backup, key, mock_provider_args, restore, spawn, sweep, unix_now, Backend, Checkout, HttpApi,
    Opts, Proc, Req, TestDb, WEBHOOK_SECRET,
};
use crate::on_both_backends;
use crate::stripe_edges::StripeApp;
use payonce_protocol::provider::methods;
use payonce_protocol::{ErrorCode, OrderStatus};
use payonce_testkit::checkout::Resp;
use payonce_testkit::localstripe::cards;
use serde_json::Value;
use std::time::Duration;

on_both_backends!(
    after_a_restore_the_sweep_keeps_lost_keys_from_charging_twice_on_localstripe,
    after_a_restore_the_sweep_keeps_lost_keys_from_charging_twice_on_the_mock,
    the_sweep_job_cancels_the_intent_a_lost_create_answer_left,
    the_sweep_cancels_the_intent_a_lost_create_answer_left,
    the_sweep_flags_our_intent_confirmed_outside_payonce,
);

const CREATE: &str = "/v1/payment_intents";

const SWEEP_AUDIT: &str =
    "SELECT COUNT(*) FROM audit_log WHERE actor = 'provider-sweep' AND entity_id = $1";
const HELD: &str = "SELECT COUNT(*) FROM orders WHERE id = $1 AND review_at IS NOT NULL";
/// The journal's review flags of an order (docs/operating.md, "The journal").
const FLAG_JOURNALED: &str =
    "SELECT COUNT(*) FROM journal WHERE kind = 'review_flag' AND order_id = $1";

/// The summary line of a sweep's report.
fn summary(report: &str) -> &str {
    report.lines().last().unwrap_or_default()
}

/// The report's line about object `id`.
fn line_of<'a>(report: &'a str, id: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.contains(id))
        .unwrap_or_else(|| panic!("no line about {id} in:\n{report}"))
}

/// A paid order whose first intent (its create answer lost) was never saved: (app, token,
/// order, the orphan intent's id, the payment method).
async fn with_orphan(backend: Backend) -> Option<(StripeApp, String, String, String, String)> {
    let app = StripeApp::start(backend, true, false).await?;
    let (t, id) = app.order("erin").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    app.to_stripe.drop_answers("POST", CREATE, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    // 202 while the lost create is unresolved; 200 when the outbox worker settled it within
    // the request's in-progress wait (a loaded machine): an orphan is left either way.
    assert!(matches!(r.status, 200 | 202), "{}", r.text());
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    let intents = app.ls.intents_of(&id).await;
    let orphans: Vec<&Value> = intents
        .iter()
        .filter(|i| i["status"] == "requires_confirmation")
        .collect();
    assert_eq!(orphans.len(), 1, "{intents:?}");
    let orphan = orphans[0]["id"].as_str().unwrap().to_owned();
    Some((app, t, id, orphan, pm))
}

/// The intent a lost create answer left (nobody saved it, nobody will confirm it) is
/// cancelled at localstripe, with an audit row; the paid order is untouched, and a second
/// sweep finds nothing more to do.
async fn the_sweep_cancels_the_intent_a_lost_create_answer_left(backend: Backend) {
    let since = unix_now() - 1;
    let Some((app, t, id, orphan, _)) = with_orphan(backend).await else {
        return;
    };
    let report = sweep(&app.args, since).await;
    assert!(
        line_of(&report, &orphan).ends_with(": cancelled"),
        "{report}"
    );
    assert!(summary(&report).contains(" 1 cancelled"), "{report}");
    let intents = app.ls.intents_of(&id).await;
    let status = |pi: &str| {
        let i = intents.iter().find(|i| i["id"] == pi).unwrap();
        i["status"].as_str().unwrap().to_owned()
    };
    assert_eq!(status(&orphan), "canceled");
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
    assert_eq!(app.count(SWEEP_AUDIT, &orphan).await, 1);
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    assert_eq!(app.count(HELD, &id).await, 0);

    let again = sweep(&app.args, since).await;
    assert!(summary(&again).contains(" 0 cancelled"), "{again}");
    assert_eq!(app.count(SWEEP_AUDIT, &orphan).await, 1);
}

/// The same orphan confirmed at localstripe (a page holding its client secret): a second
/// charge the store does not account for. It is flagged (audit row, order held), never
/// refunded nor recorded as a payment; a second sweep writes nothing more.
async fn the_sweep_flags_our_intent_confirmed_outside_payonce(backend: Backend) {
    let since = unix_now() - 1;
    let Some((app, _t, id, orphan, pm)) = with_orphan(backend).await else {
        return;
    };
    let confirmed = app.ls.confirm_with(&orphan, &pm).await.expect("confirm");
    assert_eq!(confirmed["status"], "succeeded", "{confirmed}");
    let report = sweep(&app.args, since).await;
    assert!(line_of(&report, &orphan).ends_with(": flagged"), "{report}");
    assert!(
        summary(&report).contains(" 1 flagged for review"),
        "{report}"
    );
    assert_eq!(app.count(SWEEP_AUDIT, &orphan).await, 1);
    assert_eq!(app.count(HELD, &id).await, 1);
    assert_eq!(app.count(FLAG_JOURNALED, &id).await, 1);
    assert_eq!(app.ls.succeeded_for(&id).await, 2, "nothing cancelled");
    assert!(
        app.ls.refunds_of(&orphan).await.is_empty(),
        "never refunded"
    );
    let payments = "SELECT COUNT(*) FROM payments WHERE order_id = $1";
    assert_eq!(app.count(payments, &id).await, 1, "never recorded as paid");

    let again = sweep(&app.args, since).await;
    assert!(
        line_of(&again, &orphan).ends_with(": flagged before"),
        "{again}"
    );
    assert_eq!(app.count(SWEEP_AUDIT, &orphan).await, 1);
    assert_eq!(app.count(FLAG_JOURNALED, &id).await, 1, "flagged once");
}

/// The job (`--sweep-interval-secs 1`) does what the command does, in the server.
async fn the_sweep_job_cancels_the_intent_a_lost_create_answer_left(backend: Backend) {
    let Some(app) =
        StripeApp::start_with(backend, true, false, &["--sweep-interval-secs", "1"]).await
    else {
        return;
    };
    let (t, id) = app.order("erin").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    app.to_stripe.drop_answers("POST", CREATE, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    // 202 while the lost create is unresolved; 200 when the outbox worker settled it within
    // the request's in-progress wait (a loaded machine): an orphan is left either way.
    assert!(matches!(r.status, 200 | 202), "{}", r.text());
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    let intents = app.ls.intents_of(&id).await;
    let orphan = intents.iter().find(|i| i["status"] != "succeeded").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let what = "the orphan intent cancelled by the job";
    payonce_testkit::wait_for(what, Duration::from_secs(20), || async {
        let audited = app.count(SWEEP_AUDIT, &orphan).await == 1;
        (audited && app.intent_status(&id, &orphan).await == "canceled").then_some(())
    })
    .await;
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
}

/// How many orders a restore test pays after its backup.
const LOST: usize = 3;

/// A backup taken after the orders were made and before they were paid is restored; the
/// sweep from the backup's time flags every payment the store lost; a retry of each lost
/// key is 409 `ORDER_UNDER_REVIEW` and charges nothing: localstripe holds one succeeded
/// intent per order. (Without the sweep each retry makes and confirms a second intent:
/// localstripe deduplicates nothing.)
async fn after_a_restore_the_sweep_keeps_lost_keys_from_charging_twice_on_localstripe(
    backend: Backend,
) {
    let Some(mut app) = StripeApp::start(backend, false, false).await else {
        return;
    };
    let pm = app.ls.payment_method(cards::APPROVE).await;
    let mut orders = Vec::new();
    for user in ["ann", "ben", "cat"].iter().take(LOST) {
        orders.push(app.order(user).await);
    }
    let since = unix_now() - 1;
    let backup = backup(&app.db).await;
    let mut keys = Vec::new();
    for (t, id) in &orders {
        let k = key();
        let r = app.pay(t, id, Some(&k), 1, &pm).await;
        assert_eq!(r.status, 200, "{}", r.text());
        keys.push(k);
    }
    app.restart_after(|db| restore(db, &backup));
    for (t, id) in &orders {
        assert_eq!(
            app.order_status(t, id).await,
            OrderStatus::Unpaid,
            "restored"
        );
    }

    let report = sweep(&app.args, since).await;
    assert!(
        summary(&report).contains(&format!(" {LOST} flagged for review")),
        "{report}"
    );
    for ((t, id), k) in orders.iter().zip(&keys) {
        let r = app.pay(t, id, Some(k), 1, &pm).await;
        assert_under_review(&r);
        assert_eq!(app.ls.succeeded_for(id).await, 1, "order {id}");
    }
}

fn assert_under_review(r: &Resp) {
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.code(), ErrorCode::OrderUnderReview, "{}", r.text());
}

/// The mock provider (one process across the restart) and a dev server on SQLite.
struct MockApp {
    provider: Proc,
    server: Proc,
    args: Vec<String>,
    api: String,
    http: reqwest::Client,
    db: TestDb,
}

impl HttpApi for MockApp {
    fn client(&self) -> &reqwest::Client {
        &self.http
    }
    fn api_url(&self) -> &str {
        &self.api
    }
}

impl Checkout for MockApp {
    fn http_client(&self) -> &reqwest::Client {
        &self.http
    }
    fn provider_url(&self) -> &str {
        self.provider.provider.as_deref().unwrap_or_default()
    }
    async fn call(&self, req: Req) -> Resp {
        self.send(self.request(req)).await
    }
}

/// The restore of the test above on the mock provider (a SQLite copy, or `pg_dump` and
/// `pg_restore`): its ledger holds one charge per
/// order after the retries, and a 3-D Secure charge whose attempt the restore lost is
/// cancelled. (The mock deduplicates provider keys, and a retry's provider
/// key is the lost attempt's, so this one holds without the sweep too; the sweep still
/// flags what the store lost, and the retries find the held order.)
async fn after_a_restore_the_sweep_keeps_lost_keys_from_charging_twice_on_the_mock(
    backend: Backend,
) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = spawn(&mock_provider_args(), false);
    let mut args = Opts::default().args(&db.url);
    args.extend(
        [
            "--provider-url",
            provider.provider.as_deref().unwrap(),
            "--webhook-secret",
            WEBHOOK_SECRET,
        ]
        .map(String::from),
    );
    let server = spawn(&args, true);
    let mut app = MockApp {
        api: server.api(),
        provider,
        server,
        args,
        http: payonce_testkit::checkout::client(),
        db,
    };
    let mut orders = Vec::new();
    for user in ["ann", "ben", "cat"].iter().take(LOST) {
        let t = app.session(user).await;
        let id = crate::common::id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        orders.push((t, id));
    }
    let t3ds = app.session("dee").await;
    let waiting = crate::common::id_of(&app.create_order(&t3ds, &[("tee-classic", 1)]).await);
    let since = unix_now() - 1;
    let backup = backup(&app.db).await;
    let method = methods::APPROVE;
    let mut keys = Vec::new();
    for (t, id) in &orders {
        let k = key();
        let r = app.pay(t, id, Some(&k), 1, method).await;
        assert_eq!(r.status, 200, "{}", r.text());
        keys.push(k);
    }
    // A 3-D Secure charge waiting for its customer, whose attempt the restore loses.
    let r = app
        .pay(&t3ds, &waiting, Some(&key()), 1, methods::THREE_DS)
        .await;
    assert_eq!(r.code(), ErrorCode::ActionRequired, "{}", r.text());
    app.server.kill();
    restore(&app.db, &backup);
    app.server = spawn(&app.args, true);
    app.api = app.server.api();

    let report = sweep(&app.args, since).await;
    assert!(
        summary(&report).contains(&format!(" {LOST} flagged for review")),
        "{report}"
    );
    // Nothing will ever complete the waiting charge: cancelled, so no page can.
    assert!(summary(&report).contains(" 1 cancelled"), "{report}");
    let charges = app.ledger(&waiting).await;
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0]["status"], "canceled", "{charges:?}");
    for ((t, id), k) in orders.iter().zip(&keys) {
        let r = app.pay(t, id, Some(k), 1, method).await;
        assert_under_review(&r);
        assert_eq!(app.ledger(id).await.len(), 1, "order {id}");
    }
}
