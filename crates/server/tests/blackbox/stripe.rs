//! `--provider stripe` against localstripe (crates/testkit/src/localstripe.rs), on SQLite
//! and PostgreSQL. localstripe ignores `Idempotency-Key` (two creates with one key make two
//! intents), so these tests hold only if the server never relies on the provider to
//! deduplicate. Every count of charges comes from localstripe's own list of
//! PaymentIntents: that list is the ledger. Payment methods are made at localstripe, as
//! Stripe.js would in a browser: no card number passes through payonce.
//!
//! The deliberately wrong sequencings (`--flaw`, dev builds only; crates/rules/src/pay.rs
//! `Flaw::ConfirmUnsaved`, `Flaw::Recreate`) charge twice here, which shows the ledger
//! checks can fail.

use crate::common::{
    client, id_of, key, spawn_logged, Backend, Checkout, HttpApi, Opts, TestApp, TestDb,
};
use crate::on_both_backends;
use payonce_protocol::{AttemptStatus, ErrorCode, OrderStatus};
use payonce_testkit::localstripe::{cards, Localstripe, SECRET_KEY};
use payonce_testkit::server::Proc;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

on_both_backends!(
    one_pay_is_one_succeeded_intent,
    a_storm_of_fifty_with_one_key_is_one_intent,
    a_decline_then_a_new_key_is_one_charge,
    killed_after_create_restarted_one_charge,
    killed_after_the_id_is_saved_restarted_one_charge,
    killed_after_confirm_restarted_one_charge,
    confirming_an_unsaved_id_charges_twice_and_is_caught,
    re_creating_on_take_over_charges_twice_and_is_caught,
    a_refund_raced_ten_ways_refunds_once,
    three_d_secure_by_stripe_js_then_the_same_key_pays_once,
    an_abandoned_challenge_expires_and_its_intent_is_cancelled,
    a_two_phase_pay_is_journaled_with_its_intent_and_stripe_request_ids,
);

/// A Stripe test run: localstripe, the database, and where each server's log goes. Its
/// logs and its journal are checked for secrets when it ends.
struct Run {
    ls: Localstripe,
    db: TestDb,
    dir: PathBuf,
    logs: usize,
}

impl Drop for Run {
    fn drop(&mut self) {
        // Every Stripe server log, checked before it is removed: no secret key, no card.
        for n in 0..self.logs {
            let log = std::fs::read_to_string(self.dir.join(format!("server{n}.log")))
                .unwrap_or_default();
            if !std::thread::panicking() {
                assert!(log.contains("payment provider"), "a real log: {log}");
                assert_clean(&log);
            }
        }
        if self.logs > 0 && !std::thread::panicking() {
            let rt = tokio::runtime::Handle::current();
            let journal = tokio::task::block_in_place(|| rt.block_on(journal_text(&self.db)));
            assert_clean(&journal);
            assert!(
                !journal.contains("_secret_"),
                "a client secret in the journal: {journal}"
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// No secret key and no card number in a server log. (Not the bare `4242`: random hex ids
/// contain it now and then; the card's digit groups never appear by chance.)
fn assert_clean(log: &str) {
    assert!(
        !log.contains(SECRET_KEY),
        "the Stripe secret key in a server log"
    );
    for card in [cards::APPROVE, "4242 4242", "42424242"] {
        assert!(
            !log.contains(card),
            "a card number ({card}) in a server log"
        );
    }
}

/// Every journal row of `db`, all columns, as one text.
async fn journal_text(db: &TestDb) -> String {
    type Line = (
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
    );
    let pool = db.pool().await;
    let rows: Vec<Line> = sqlx::query_as(
        "SELECT actor, kind, request_id, user_id, order_id, idem_key, provider_id, detail
         FROM journal",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.iter().map(|r| format!("{r:?}\n")).collect()
}

impl Run {
    async fn start(backend: Backend) -> Option<Self> {
        let ls = Localstripe::start().await?;
        let db = TestDb::create(backend).await?;
        let dir =
            std::env::temp_dir().join(format!("payonce-stripe-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stripe.key"), format!("{SECRET_KEY}\n")).unwrap();
        let token = format!("{}\n", crate::journal::OPERATOR_TOKEN);
        std::fs::write(dir.join("operator.token"), token).unwrap();
        Some(Self {
            ls,
            db,
            dir,
            logs: 0,
        })
    }

    /// The server's flags: dev mode (sessions, failpoints), Stripe at localstripe, the
    /// secret key from a file, jobs every 100 ms and short leases so an abandoned attempt
    /// is taken over within a test's patience.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        self.args_at(&self.ls.url(), extra)
    }

    /// [`Run::args`] with Stripe's API at `stripe` (a proxy in front of localstripe).
    fn args_at(&self, stripe: &str, extra: &[&str]) -> Vec<String> {
        let opts = Opts {
            jobs_interval_ms: 100,
            lease_ms: 1_500,
            provider_timeout_ms: 1_000,
            in_progress_wait_ms: 5_000,
            ..Opts::default()
        };
        let mut a = opts.args(&self.db.url);
        let key_file = self.dir.join("stripe.key").display().to_string();
        let token_file = self.dir.join("operator.token").display().to_string();
        a.extend(
            [
                "--operator-token-file",
                &token_file,
                "--provider",
                "stripe",
                "--provider-url",
                stripe,
                "--stripe-secret-key-file",
                &key_file,
                "--stripe-webhook-secret",
                "whsec_payonce_stripe_test_0123456789abcdef",
            ]
            .map(str::to_owned),
        );
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    }

    /// A server with `extra` flags, its log kept for [`assert_clean`].
    fn server(&mut self, extra: &[&str]) -> (Proc, TestApp) {
        let args = self.args(extra);
        self.spawn(&args)
    }

    fn spawn(&mut self, args: &[String]) -> (Proc, TestApp) {
        let log = self.dir.join(format!("server{}.log", self.logs));
        self.logs += 1;
        // Stopped as a rollout stops it, so the journal read when the run ends holds every
        // entry of every answered request (a kill loses those still queued, `Scope::flush`).
        let proc = spawn_logged(args, true, &log).stop_gracefully_on_drop();
        let app = TestApp {
            api: proc.api.clone().unwrap(),
            provider: self.ls.url(),
            http: client(),
            _procs: vec![],
            db: None,
        };
        (proc, app)
    }

    async fn attempt_ref(&self, order: &str) -> Vec<Option<String>> {
        let pool = self.db.pool().await;
        let rows: Vec<(Option<String>,)> = sqlx::query_as(
            "SELECT provider_ref FROM attempts WHERE order_id = $1 ORDER BY created_at",
        )
        .bind(order)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows.into_iter().map(|(r,)| r).collect()
    }
}

async fn order(app: &TestApp, t: &str) -> (String, Value) {
    let o = app.create_order(t, &[("tee-classic", 1)]).await;
    (id_of(&o), o)
}

async fn one_pay_is_one_succeeded_intent(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&[]);
    let t = app.session("alice").await;
    let (id, o) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let payment = &r.json()["payment"];
    let intents = run.ls.intents_of(&id).await;
    assert_eq!(intents.len(), 1, "one intent: {intents:?}");
    let i = &intents[0];
    assert_eq!(i["status"], "succeeded");
    assert_eq!(i["amount"], o["amount"], "the server's amount");
    let currency = o["currency"].as_str().unwrap().to_ascii_lowercase();
    assert_eq!(i["currency"].as_str(), Some(currency.as_str()));
    assert_eq!(i["payment_method"].as_str(), Some(pm.as_str()));
    assert_eq!(payment["chargeId"], i["id"]);
    // The intent id was saved on the attempt, which the intent names back.
    let saved = run.attempt_ref(&id).await;
    assert_eq!(saved, vec![i["id"].as_str().map(str::to_owned)]);
    assert!(i["metadata"]["attempt_id"]
        .as_str()
        .is_some_and(|a| a.starts_with("att_")));
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    let config = app.http.get(app.url("/dev/config")).send().await.unwrap();
    let config = config.text().await.unwrap();
    assert!(config.contains(&run.ls.url()), "{config}");
    assert!(
        !config.contains(SECRET_KEY),
        "the secret key in /dev/config"
    );
}

async fn a_storm_of_fifty_with_one_key_is_one_intent(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&[]);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::APPROVE).await;
    let k = key();
    let answers =
        futures_util::future::join_all((0..50).map(|_| app.pay(&t, &id, Some(&k), 1, &pm))).await;
    for r in &answers {
        assert!(
            r.status == 200 || r.code() == ErrorCode::InProgress,
            "{} {}",
            r.status,
            r.text()
        );
    }
    let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let intents = run.ls.intents_of(&id).await;
    assert_eq!(intents.len(), 1, "one create for one key: {intents:?}");
    assert_eq!(run.ls.succeeded_for(&id).await, 1);
}

async fn a_decline_then_a_new_key_is_one_charge(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&[]);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let bad = run.ls.payment_method(cards::DECLINE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &bad).await;
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::PaymentDeclined),
        "{}",
        r.text()
    );
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap_or("")
            .contains("card_declined"),
        "{}",
        r.text()
    );
    let good = run.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &good).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let intents = run.ls.intents_of(&id).await;
    let statuses: Vec<&str> = intents
        .iter()
        .filter_map(|i| i["status"].as_str())
        .collect();
    assert_eq!(intents.len(), 2, "{statuses:?}");
    assert_eq!(run.ls.succeeded_for(&id).await, 1, "{statuses:?}");
}

/// Pays with the server armed to die at `failpoint` (and `flaw`), restarts it on the same
/// database and localstripe, and waits until the jobs settle the order. Returns the order's
/// intents.
async fn crash_and_restart(
    run: &mut Run,
    failpoint: &str,
    flaw: Option<&str>,
) -> (String, Vec<Value>) {
    let mut armed = vec!["--failpoint", failpoint];
    if let Some(f) = flaw {
        armed.extend(["--flaw", f]);
    }
    let (mut first, app) = run.server(&armed);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::APPROVE).await;
    // The answer never arrives: the process dies first.
    let _ = app
        .request(app.pay_request(&t, &id, Some(&key()), 1, &pm))
        .send()
        .await;
    let exit = first.wait_exit(Duration::from_secs(20)).await;
    assert!(
        exit.is_some_and(|s| !s.success()),
        "{failpoint}: the server aborted"
    );
    let restart: Vec<&str> = flaw.map(|f| vec!["--flaw", f]).unwrap_or_default();
    let (_second, app) = run.server(&restart);
    let t = app.session("alice").await;
    let paid = payonce_testkit::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (app.order_status(&t, &id).await == OrderStatus::Paid).then_some(()) },
    )
    .await;
    assert!(
        paid.is_some(),
        "{failpoint}: the jobs settled the order after the restart"
    );
    (id.clone(), run.ls.intents_of(&id).await)
}

fn succeeded(intents: &[Value]) -> usize {
    intents
        .iter()
        .filter(|i| i["status"] == "succeeded")
        .count()
}

async fn killed_after_create_restarted_one_charge(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_, intents) = crash_and_restart(&mut run, "after-create", None).await;
    // The first intent's id was never saved, so nobody confirms it: it stays unconfirmed.
    assert_eq!(succeeded(&intents), 1, "{intents:?}");
    assert_eq!(intents.len(), 2, "{intents:?}");
    assert!(intents
        .iter()
        .any(|i| i["status"] == "requires_confirmation"));
}

async fn killed_after_the_id_is_saved_restarted_one_charge(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_, intents) = crash_and_restart(&mut run, "after-save-ref", None).await;
    // The saved intent is looked up (unconfirmed) and confirmed: no second create.
    assert_eq!((intents.len(), succeeded(&intents)), (1, 1), "{intents:?}");
}

async fn killed_after_confirm_restarted_one_charge(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (id, intents) = crash_and_restart(&mut run, "after-confirm", None).await;
    assert_eq!((intents.len(), succeeded(&intents)), (1, 1), "{intents:?}");
    let saved = run.attempt_ref(&id).await;
    assert_eq!(saved, vec![intents[0]["id"].as_str().map(str::to_owned)]);
}

/// The wrong order (confirm, then save): the restart finds no saved id, creates and
/// confirms again: two charges, which the ledger shows.
async fn confirming_an_unsaved_id_charges_twice_and_is_caught(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_, intents) = crash_and_restart(&mut run, "after-confirm", Some("confirm-unsaved")).await;
    assert_eq!(
        succeeded(&intents),
        2,
        "the flawed adapter charges twice: {intents:?}"
    );
}

/// A take-over that creates anew instead of reading the saved id: two charges.
async fn re_creating_on_take_over_charges_twice_and_is_caught(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_, intents) = crash_and_restart(&mut run, "after-confirm", Some("recreate")).await;
    assert_eq!(
        succeeded(&intents),
        2,
        "the flawed adapter charges twice: {intents:?}"
    );
}

async fn a_refund_raced_ten_ways_refunds_once(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&[]);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let payment = r.json()["payment"].clone();
    let (pid, intent) = (
        payment["id"].as_str().unwrap(),
        payment["chargeId"].as_str().unwrap(),
    );
    // Ten keys at once, then one key ten times at once.
    let keys: Vec<String> = (0..10).map(|_| key()).collect();
    let answers =
        futures_util::future::join_all(keys.iter().map(|k| app.refund(&t, pid, Some(k)))).await;
    let ok: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        ok.len(),
        1,
        "{:?}",
        answers.iter().map(|r| r.text()).collect::<Vec<_>>()
    );
    for r in answers.iter().filter(|r| r.status != 200) {
        assert_eq!(r.code(), ErrorCode::RefundNotAllowed, "{}", r.text());
    }
    assert_eq!(run.ls.refunds_of(intent).await.len(), 1);
    let (id2, _) = order(&app, &t).await;
    let r = app.pay(&t, &id2, Some(&key()), 1, &pm).await;
    let payment = r.json()["payment"].clone();
    let (pid, intent) = (
        payment["id"].as_str().unwrap(),
        payment["chargeId"].as_str().unwrap(),
    );
    let k = key();
    let answers =
        futures_util::future::join_all((0..10).map(|_| app.refund(&t, pid, Some(&k)))).await;
    for r in &answers {
        assert!(
            r.status == 200 || r.code() == ErrorCode::InProgress,
            "{}",
            r.text()
        );
    }
    assert_eq!(app.refund(&t, pid, Some(&k)).await.status, 200);
    assert_eq!(
        run.ls.refunds_of(intent).await.len(),
        1,
        "one refund at Stripe"
    );
    assert_eq!(app.order_status(&t, &id2).await, OrderStatus::Refunded);
}

/// `requires_action` is 402 `ACTION_REQUIRED` with `next = {type: "stripe", clientSecret}`;
/// once the customer authenticated (what Stripe.js's `confirmCardPayment` does at
/// localstripe), the same key pays, and the ledger has one charge.
async fn three_d_secure_by_stripe_js_then_the_same_key_pays_once(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&[]);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::THREE_DS).await;
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::ActionRequired),
        "{}",
        r.text()
    );
    let next = r.json()["next"].clone();
    assert_eq!(next["type"], "stripe", "{next}");
    let secret = next["clientSecret"]
        .as_str()
        .expect("clientSecret")
        .to_owned();
    let intents = run.ls.intents_of(&id).await;
    assert_eq!(intents.len(), 1);
    let intent = intents[0]["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with(&intent), "the intent's own secret");
    // Before the customer acted, the same key answers the same.
    let again = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(again.code(), ErrorCode::ActionRequired, "{}", again.text());
    run.ls.authenticate(&intent, &secret, true).await;
    let done = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(
        done.json()["payment"]["chargeId"].as_str(),
        Some(intent.as_str())
    );
    let intents = run.ls.intents_of(&id).await;
    assert_eq!((intents.len(), succeeded(&intents)), (1, 1), "{intents:?}");
}

/// The customer never authenticates: past `--action-deadline-secs 1` the jobs cancel the
/// saved intent at localstripe, the attempt ends `expired` (402 `ACTION_EXPIRED` to its key)
/// and a new key pays the freed order once. localstripe's list: one intent canceled, one
/// succeeded.
async fn an_abandoned_challenge_expires_and_its_intent_is_cancelled(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let (_p, app) = run.server(&["--action-deadline-secs", "1"]);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::THREE_DS).await;
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(r.code(), ErrorCode::ActionRequired, "{}", r.text());
    let expired = payonce_testkit::eventually(
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
            (r.code() == ErrorCode::ActionExpired).then_some(r)
        },
    )
    .await
    .expect("the attempt expires after its deadline");
    assert_eq!(expired.status, 402, "{}", expired.text());
    assert_eq!(expired.attempt_status(), AttemptStatus::Expired);
    let intents = run.ls.intents_of(&id).await;
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(intents[0]["status"], "canceled", "cancelled at localstripe");
    let approve = run.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &approve).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let intents = run.ls.intents_of(&id).await;
    assert_eq!((intents.len(), succeeded(&intents)), (2, 1), "{intents:?}");
}

/// A Stripe two-phase pay, told by the operator API: the create and the confirm calls, each
/// with the intent's id, its HTTP status and Stripe's own request id (a proxy in front of
/// localstripe, which sends none, adds `Request-Id` as Stripe does), and the intent id saved
/// on the attempt between them.
async fn a_two_phase_pay_is_journaled_with_its_intent_and_stripe_request_ids(b: Backend) {
    let Some(mut run) = Run::start(b).await else {
        return;
    };
    let proxy = crate::journal::request_id_proxy(&run.ls.url()).await;
    let args = run.args_at(&proxy, &[]);
    let (_p, app) = run.spawn(&args);
    let t = app.session("alice").await;
    let (id, _) = order(&app, &t).await;
    let pm = run.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let intents = run.ls.intents_of(&id).await;
    let intent = intents[0]["id"].as_str().unwrap().to_owned();
    let path = payonce_protocol::admin::paths::timeline(&id);
    let res = app
        .http
        .get(app.url(&path))
        .bearer_auth(crate::journal::OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let tl: Value = res.json().await.unwrap();
    assert_eq!(tl["attempts"][0]["providerRef"], intent.as_str(), "saved");
    let calls: Vec<&Value> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "provider_call")
        .collect();
    let ops: Vec<&str> = calls
        .iter()
        .map(|c| c["detail"]["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["create", "confirm"], "{calls:#?}");
    let outcomes: Vec<&str> = calls
        .iter()
        .map(|c| c["detail"]["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["created", "succeeded"]);
    for c in &calls {
        assert_eq!(c["providerId"], intent.as_str(), "{c}");
        assert_eq!(c["actor"], "request");
        assert_eq!(c["requestId"], r.header("x-request-id").unwrap().as_str());
        assert_eq!(c["detail"]["http"][0]["status"], 200, "{c}");
        let stripe_id = c["detail"]["http"][0]["providerRequestId"]
            .as_str()
            .unwrap_or("");
        assert!(stripe_id.starts_with("req_"), "{c}");
    }
}
