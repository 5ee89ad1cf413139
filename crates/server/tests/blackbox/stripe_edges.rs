//! The Stripe adapter's edges against localstripe: its webhooks (`POST /webhooks/stripe`)
//! settle a pay whose answer was lost, a forged, stale or re-stamped one is refused, a
//! duplicate counts once, a refund made in Stripe's dashboard is reflected; and a lost
//! provider answer (the fault proxy drops it after localstripe acted) is settled by the jobs
//! with one charge. Every count of charges is localstripe's own list of PaymentIntents, and
//! every refunded amount its list of refunds. The refund tests whose rules a clock decides
//! (a held lease, the refund job) run in process (`crate::inproc`) on a manual clock. A
//! Stripe deployment has no route for the mock provider's events, however they are signed.

use crate::common::{
    id_of, key, spawn, Backend, Checkout, HttpApi, Opts, Proc, Req, TestApp, TestDb,
};
use crate::inproc::InProc;
use crate::on_both_backends;
use payonce_protocol::{ErrorCode, OrderStatus};
use payonce_testkit::checkout::Resp;
use payonce_testkit::fault_proxy::{Fault, FaultProxy, Seen};
use payonce_testkit::localstripe::{cards, Localstripe, SECRET_KEY};
use serde_json::{json, Value};

on_both_backends!(
    a_stripe_webhook_settles_a_pay_whose_answer_was_lost_and_a_duplicate_counts_once,
    forged_stale_and_restamped_stripe_webhooks_are_refused_and_events_are_hints,
    a_refund_made_in_the_stripe_dashboard_is_reflected,
    a_lost_confirm_answer_is_settled_by_the_jobs_with_one_charge,
    a_lost_create_answer_never_confirms_that_intent_and_charges_once,
    a_partial_dashboard_refund_then_a_payonce_refund_returns_the_rest,
    a_refund_call_held_past_the_timeout_lands_once,
    a_pending_refund_that_fails_is_not_refunded_nor_blinds_the_dashboard,
    a_stuck_payonce_refund_does_not_blind_a_dashboard_refund,
    a_stripe_deployment_has_no_mock_webhook_route_and_stores_nothing,
    a_test_mode_payment_on_a_live_key_pays_nothing_and_is_flagged,
    a_stripe_outage_on_the_webhook_path_is_provider_unavailable_and_redelivery_applies,
);

/// The signing secret of the webhook endpoint registered at localstripe.
const WHSEC: &str = "whsec_payonce_stripe_edges_0123456789abcdef";
/// Where the server takes Stripe's events.
const ROUTE: &str = "/webhooks/stripe";
const CONFIRM: &str = "/v1/payment_intents/*/confirm";
const CREATE: &str = "/v1/payment_intents";

/// The server with `--provider stripe` in front of localstripe, a fault proxy on each side:
/// `to_stripe` between the server and localstripe's API, `to_us` between localstripe's
/// webhook deliveries and the server (it keeps each delivery, to send it again).
pub(crate) struct StripeApp {
    api: String,
    http: reqwest::Client,
    pub(crate) ls: Localstripe,
    pub(crate) to_stripe: FaultProxy,
    to_us: FaultProxy,
    server: Proc,
    /// The server's flags, for a restart and `payonce-server sweep` (`crate::sweep`).
    pub(crate) args: Vec<String>,
    pub(crate) db: TestDb,
}

impl HttpApi for StripeApp {
    fn client(&self) -> &reqwest::Client {
        &self.http
    }
    fn api_url(&self) -> &str {
        &self.api
    }
}

impl Checkout for StripeApp {
    fn http_client(&self) -> &reqwest::Client {
        &self.http
    }
    fn provider_url(&self) -> &str {
        ""
    }
    async fn call(&self, req: Req) -> Resp {
        self.send(self.request(req)).await
    }
}

impl StripeApp {
    /// `jobs`: run the background jobs fast (reconciliation after 300 ms); `webhooks`:
    /// register the server's route at localstripe.
    pub(crate) async fn start(backend: Backend, jobs: bool, webhooks: bool) -> Option<StripeApp> {
        Self::start_full(backend, jobs, webhooks, SECRET_KEY, &[]).await
    }

    /// [`StripeApp::start`] with `extra` server flags.
    pub(crate) async fn start_with(
        backend: Backend,
        jobs: bool,
        webhooks: bool,
        extra: &[&str],
    ) -> Option<StripeApp> {
        Self::start_full(backend, jobs, webhooks, SECRET_KEY, extra).await
    }

    /// [`StripeApp::start`] with the secret key `key` (its prefix says the mode).
    async fn start_with_key(
        backend: Backend,
        jobs: bool,
        webhooks: bool,
        key: &str,
    ) -> Option<StripeApp> {
        Self::start_full(backend, jobs, webhooks, key, &[]).await
    }

    async fn start_full(
        backend: Backend,
        jobs: bool,
        webhooks: bool,
        key: &str,
        extra: &[&str],
    ) -> Option<StripeApp> {
        let ls = Localstripe::start().await?;
        let db = TestDb::create(backend).await?;
        let to_stripe = FaultProxy::start(&ls.url()).await;
        let opts = Opts {
            jobs_interval_ms: if jobs { 100 } else { 0 },
            extra: [
                "--provider",
                "stripe",
                "--provider-url",
                &to_stripe.url,
                "--stripe-secret-key",
                key,
                "--stripe-webhook-secret",
                WHSEC,
                "--reconcile-after-ms",
                "300",
            ]
            .map(String::from)
            .into_iter()
            .chain(extra.iter().map(|s| (*s).to_owned()))
            .collect(),
            ..Opts::default()
        };
        let args = opts.args(&db.url);
        let server = spawn(&args, true);
        let api = server.api();
        let to_us = FaultProxy::start(&api).await;
        let http = payonce_testkit::checkout::client();
        if webhooks {
            let url = format!("{}{ROUTE}", to_us.url);
            let r = http
                .post(format!("{}/_config/webhooks/payonce", ls.url()))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form(&[("url", &url), ("secret", WHSEC)]))
                .send()
                .await
                .expect("register the webhook");
            assert!(r.status().is_success(), "register: {}", r.status());
        }
        Some(StripeApp {
            api,
            http,
            ls,
            to_stripe,
            to_us,
            server,
            args,
            db,
        })
    }

    /// Stops the server, runs `between` (a restore), and starts it again with its flags.
    pub(crate) fn restart_after(&mut self, between: impl FnOnce(&TestDb)) {
        self.server.kill();
        between(&self.db);
        self.server = spawn(&self.args, true);
        self.api = self.server.api();
    }

    /// An order of one tee for `user`: (token, order id).
    pub(crate) async fn order(&self, user: &str) -> (String, String) {
        let t = self.session(user).await;
        let id = id_of(&self.create_order(&t, &[("tee-classic", 1)]).await);
        (t, id)
    }

    /// `POST /webhooks/stripe` with `body` and this `Stripe-Signature`.
    async fn deliver(&self, body: &[u8], signature: Option<&str>) -> Resp {
        let mut req = self
            .http
            .post(format!("{}{ROUTE}", self.api))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(s) = signature {
            req = req.header("Stripe-Signature", s);
        }
        self.send(req).await
    }

    /// The one intent localstripe holds for the order.
    pub(crate) async fn only_intent(&self, order: &str) -> Value {
        let intents = self.ls.intents_of(order).await;
        assert_eq!(intents.len(), 1, "{intents:?}");
        intents[0].clone()
    }

    /// The status of intent `pi` of `order` at localstripe.
    pub(crate) async fn intent_status(&self, order: &str, pi: &str) -> String {
        let intents = self.ls.intents_of(order).await;
        let i = intents.iter().find(|i| i["id"] == pi).expect("the intent");
        i["status"].as_str().unwrap_or_default().to_owned()
    }

    pub(crate) async fn count(&self, sql: &'static str, bind: &str) -> i64 {
        let pool = self.db.pool().await;
        let (n,): (i64,) = sqlx::query_as(sql)
            .bind(bind)
            .fetch_one(&pool)
            .await
            .unwrap();
        n
    }
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An event in the shape Stripe sends (what localstripe sends too), about `object`.
fn event(id: &str, kind: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id, "object": "event", "type": kind, "created": unix_now(),
        "api_version": "2017-08-15", "livemode": false, "data": { "object": object }
    }))
    .unwrap()
}

fn intent_event(id: &str, kind: &str, intent: &str) -> Vec<u8> {
    event(
        id,
        kind,
        json!({ "id": intent, "object": "payment_intent" }),
    )
}

fn signed(secret: &str, t: i64, body: &[u8]) -> String {
    payonce_protocol::signature::sign(secret, t, body)
}

/// The deliveries of `kind` localstripe made through `to_us`.
fn deliveries(proxy: &FaultProxy, kind: &str) -> Vec<Seen> {
    let want = format!("\"type\": \"{kind}\"");
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.path == ROUTE && String::from_utf8_lossy(&s.body).contains(&want))
        .collect()
}

const BY_WEBHOOK: &str =
    "SELECT COUNT(*) FROM audit_log WHERE actor = 'provider-webhook' AND to_state = $1";

/// Stripe unreachable while its event arrives: the event is not applied and the answer says
/// whose fault it is (503 `PROVIDER_UNAVAILABLE` with `Retry-After`, not the store's code,
/// so an operator looks at the right dependency); delivered again once Stripe answers, it
/// settles the attempt with the one charge.
async fn a_stripe_outage_on_the_webhook_path_is_provider_unavailable_and_redelivery_applies(
    backend: Backend,
) {
    let Some(app) = StripeApp::start(backend, false, false).await else {
        return;
    };
    let (t, id) = app.order("alice").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    app.to_stripe.drop_answers("POST", CONFIRM, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let intent = app.only_intent(&id).await;
    assert_eq!(intent["status"], "succeeded", "localstripe charged");
    let pi = intent["id"].as_str().unwrap();

    let body = intent_event("evt_during_outage", "payment_intent.succeeded", pi);
    app.to_stripe.set_down(true);
    let r = app
        .deliver(&body, Some(&signed(WHSEC, unix_now(), &body)))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (503, ErrorCode::ProviderUnavailable),
        "{}",
        r.text()
    );
    assert!(r.is_problem());
    assert!(r.header("retry-after").is_some(), "Stripe is told when");
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Unpaid);

    app.to_stripe.set_down(false);
    let r = app
        .deliver(&body, Some(&signed(WHSEC, unix_now(), &body)))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
}

async fn a_stripe_webhook_settles_a_pay_whose_answer_was_lost_and_a_duplicate_counts_once(
    backend: Backend,
) {
    let Some(app) = StripeApp::start(backend, false, true).await else {
        return;
    };
    let (t, id) = app.order("alice").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    // localstripe confirms and charges; the server never hears (the jobs are off and the
    // client does not retry): only the webhook can settle the attempt.
    app.to_stripe.drop_answers("POST", CONFIRM, 1);
    let k = key();
    let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(app.to_stripe.applied("POST", CONFIRM), 1);
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
    assert_eq!(
        app.count(BY_WEBHOOK, "succeeded").await,
        1,
        "the webhook settled it"
    );
    let again = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));

    // The same delivery again, byte for byte (Stripe delivers at least once): acknowledged,
    // stored once, applied once.
    let got = deliveries(&app.to_us, "payment_intent.succeeded");
    assert_eq!(got.len(), 1, "localstripe delivered once");
    let (body, sig) = (&got[0].body, got[0].header("stripe-signature").unwrap());
    let dup = app.deliver(body, Some(sig)).await;
    assert_eq!(dup.status, 200, "{}", dup.text());
    let event_id = serde_json::from_slice::<Value>(body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored = "SELECT COUNT(*) FROM webhook_events WHERE id = $1 AND handled_at IS NOT NULL";
    assert_eq!(app.count(stored, &event_id).await, 1);
    assert_eq!(app.count(BY_WEBHOOK, "succeeded").await, 1, "counted once");
    assert_eq!(app.ls.succeeded_for(&id).await, 1);

    // The captured delivery re-stamped with a fresh `t` (to outlive the tolerance) no
    // longer matches its MAC: refused.
    let old_t = sig.split(',').next().unwrap().to_owned();
    let restamped = sig.replacen(&old_t, &format!("t={}", unix_now() + 1), 1);
    let r = app.deliver(body, Some(&restamped)).await;
    assert_eq!(
        (r.status, r.code()),
        (400, ErrorCode::WebhookSignatureInvalid)
    );
    assert_eq!(r.json()["reason"], "mismatch");
}

async fn forged_stale_and_restamped_stripe_webhooks_are_refused_and_events_are_hints(
    backend: Backend,
) {
    let Some(app) = StripeApp::start(backend, false, false).await else {
        return;
    };
    let (t, id) = app.order("bob").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    // The confirm never reaches localstripe: the intent is created (its id saved) and
    // never charged, the attempt stays processing.
    app.to_stripe.arm("POST", CONFIRM, Fault::Refuse, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let intent = app.only_intent(&id).await;
    let pi = intent["id"].as_str().unwrap();
    assert_eq!(intent["status"], "requires_confirmation");

    let body = intent_event("evt_forged", "payment_intent.succeeded", pi);
    let now = unix_now();
    let cases = [
        (None, "missing"),
        (Some(signed("whsec_someone_else", now, &body)), "mismatch"),
        (Some(signed(WHSEC, now - 301, &body)), "outside_tolerance"),
        (Some(format!("t={now},v1={}", "ab".repeat(32))), "mismatch"),
        (Some("v1=00".to_owned()), "bad_timestamp"),
    ];
    for (sig, reason) in cases {
        let r = app.deliver(&body, sig.as_deref()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, ErrorCode::WebhookSignatureInvalid),
            "{sig:?}"
        );
        assert!(r.is_problem());
        assert_eq!(r.json()["reason"], reason, "{sig:?}");
    }
    assert_eq!(
        app.count(
            "SELECT COUNT(*) FROM webhook_events WHERE id = $1",
            "evt_forged"
        )
        .await,
        0
    );

    // Correctly signed but made up: Stripe is asked, says the intent is not charged, and
    // nothing is settled (not acknowledged: Stripe would deliver it again).
    let r = app.deliver(&body, Some(&signed(WHSEC, now, &body))).await;
    assert!([200, 503].contains(&r.status), "{}", r.text());
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Unpaid);
    assert_eq!(
        app.get_order(&t, &id).await.json()["paymentInProgress"],
        true
    );
    assert_eq!(app.ls.succeeded_for(&id).await, 0);

    // An intent no attempt saved (another integration's), and a type payonce does not use:
    // acknowledged, never an error a provider would redeliver forever.
    let stranger = intent_event("evt_stranger", "payment_intent.succeeded", "pi_not_ours");
    let r = app
        .deliver(&stranger, Some(&signed(WHSEC, now, &stranger)))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let other = event(
        "evt_other",
        "customer.created",
        json!({"id": "cus_1", "object": "customer"}),
    );
    let r = app.deliver(&other, Some(&signed(WHSEC, now, &other))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = app
        .deliver(b"{\"id\":1}", Some(&signed(WHSEC, now, b"{\"id\":1}")))
        .await;
    assert_eq!((r.status, r.code()), (400, ErrorCode::InvalidRequest));

    // A server of the mock provider has no Stripe route: an unknown path.
    let Some(mock) = TestApp::spawn(backend).await else {
        return;
    };
    let r = mock
        .send(
            mock.http
                .post(format!("{}{ROUTE}", mock.api))
                .body(body.clone()),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::NotFound));
}

async fn a_refund_made_in_the_stripe_dashboard_is_reflected(backend: Backend) {
    let Some(app) = StripeApp::start(backend, false, false).await else {
        return;
    };
    let (t, id) = app.order("carol").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    let paid = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let payment = paid.json()["payment"]["id"].as_str().unwrap().to_owned();
    let pi = app.only_intent(&id).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refunded = |n: &str| {
        event(
            n,
            "charge.refunded",
            json!({ "id": "ch_x", "object": "charge", "payment_intent": pi, "refunded": true }),
        )
    };
    // Made up (nothing refunded at Stripe): a hint only, the order stays paid.
    let fake = refunded("evt_fake_refund");
    let r = app
        .deliver(&fake, Some(&signed(WHSEC, unix_now(), &fake)))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Paid);

    // Refunded in the dashboard (localstripe's API, not payonce); localstripe sends no
    // charge.refunded, so the test delivers the one Stripe would.
    let r = app
        .http
        .post(format!("{}/v1/refunds", app.ls.url()))
        .basic_auth(SECRET_KEY, Some(""))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("payment_intent", &pi)]))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "dashboard refund: {}", r.status());
    let real = refunded("evt_real_refund");
    for _ in 0..2 {
        let r = app
            .deliver(&real, Some(&signed(WHSEC, unix_now(), &real)))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Refunded);
    assert_eq!(
        app.count(BY_WEBHOOK, "refunded").await,
        2,
        "payment and order, once"
    );
    // payonce knows: its own refund is refused, and Stripe holds one refund.
    let again = app
        .send(
            app.http
                .post(app.url(&format!("/payments/{payment}/refund")))
                .bearer_auth(&t)
                .header("Idempotency-Key", key()),
        )
        .await;
    assert_eq!(
        (again.status, again.code()),
        (409, ErrorCode::RefundNotAllowed)
    );
    assert_eq!(app.ls.refunds_of(&pi).await.len(), 1);
}

async fn a_lost_confirm_answer_is_settled_by_the_jobs_with_one_charge(backend: Backend) {
    let Some(app) = StripeApp::start(backend, true, false).await else {
        return;
    };
    let (t, id) = app.order("dave").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    app.to_stripe.drop_answers("POST", CONFIRM, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    // No webhook, no retry: reconciliation reads the saved intent and settles it.
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    let intent = app.only_intent(&id).await;
    assert_eq!(intent["status"], "succeeded");
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
    let confirms = app
        .to_stripe
        .seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("/confirm"))
        .count();
    assert_eq!(
        confirms, 1,
        "the intent is looked up, never confirmed again"
    );
}

async fn a_lost_create_answer_never_confirms_that_intent_and_charges_once(backend: Backend) {
    let Some(app) = StripeApp::start(backend, true, false).await else {
        return;
    };
    let (t, id) = app.order("erin").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    // localstripe creates the intent, the server never learns its id. localstripe ignores
    // Idempotency-Key, so the re-drive creates a second intent: the first must never be
    // confirmed (its id was never saved), the second is, once.
    app.to_stripe.drop_answers("POST", CREATE, 1);
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    app.wait_status(&t, &id, OrderStatus::Paid).await;
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
    let intents = app.ls.intents_of(&id).await;
    let unconfirmed: Vec<_> = intents
        .iter()
        .filter(|i| i["status"] != "succeeded")
        .collect();
    assert!(
        unconfirmed.iter().all(|i| ["requires_confirmation", "canceled"].contains(&i["status"].as_str().unwrap())),
        "{intents:?}"
    );
}

/// Localstripe's refunds of `pi`, and the amount those that succeeded return.
async fn refunded_at_stripe(ls: &Localstripe, pi: &str) -> (Vec<Value>, i64) {
    let refunds = ls.refunds_of(pi).await;
    let sum = refunds
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .map(|r| r["amount"].as_i64().unwrap())
        .sum();
    (refunds, sum)
}

/// 40 % of the payment refunded in Stripe's dashboard leaves the payment `succeeded`; a
/// payonce refund then returns the other 60 %, not nothing: Stripe ends up refunding the
/// payment's amount exactly, in two refunds.
async fn a_partial_dashboard_refund_then_a_payonce_refund_returns_the_rest(backend: Backend) {
    let Some(app) = StripeApp::start(backend, false, false).await else {
        return;
    };
    let (t, id) = app.order("fran").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    let paid = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let payment = paid.json()["payment"]["id"].as_str().unwrap().to_owned();
    let intent = app.only_intent(&id).await;
    let (pi, amount) = (
        intent["id"].as_str().unwrap(),
        intent["amount"].as_i64().unwrap(),
    );
    app.ls.dashboard_refund(pi, Some(amount * 2 / 5)).await;

    let rk = key();
    let r = app.refund(&t, &payment, Some(&rk)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["payment"]["status"], "refunded");
    let (refunds, sum) = refunded_at_stripe(&app.ls, pi).await;
    assert_eq!(sum, amount, "the whole payment back: {refunds:?}");
    assert_eq!(refunds.len(), 2, "{refunds:?}");
    let ours = refunds
        .iter()
        .find(|x| x["id"] == r.json()["refundId"])
        .expect("the answer names our refund");
    assert_eq!(ours["amount"].as_i64(), Some(amount - amount * 2 / 5));
    assert_eq!(app.order_status(&t, &id).await, OrderStatus::Refunded);
    // A retry replays; Stripe is not asked to refund again.
    let again = app.refund(&t, &payment, Some(&rk)).await;
    assert_eq!((again.status, again.body.clone()), (200, r.body.clone()));
    assert_eq!(refunded_at_stripe(&app.ls, pi).await.1, amount);
}

/// An in-process server (manual clock) with `--provider stripe` reaching localstripe
/// through `proxy`; jobs run only when the test calls them.
async fn stripe_inproc(db: &TestDb, proxy: &FaultProxy) -> InProc {
    let flags = [
        "--provider",
        "stripe",
        "--stripe-secret-key",
        SECRET_KEY,
        "--stripe-webhook-secret",
        WHSEC,
        "--provider-timeout-ms",
        "1000",
        "--lease-ms",
        "2000",
        "--reconcile-after-ms",
        "300",
    ];
    InProc::start(db, &proxy.url, &flags).await
}

/// Pays a new order of `user` at `s`: (token, order, payment, intent, amount).
async fn paid_inproc(
    s: &InProc,
    ls: &Localstripe,
    user: &str,
) -> (String, String, String, String, i64) {
    let t = s.session(user).await;
    let id = id_of(&s.create_order(&t, &[("tee-classic", 1)]).await);
    let pm = ls.payment_method(cards::APPROVE).await;
    let paid = s.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let payment = paid.json()["payment"]["id"].as_str().unwrap().to_owned();
    let intents = ls.intents_of(&id).await;
    let pi = intents[0]["id"].as_str().unwrap().to_owned();
    let amount = intents[0]["amount"].as_i64().unwrap();
    (t, id, payment, pi, amount)
}

/// `POST /webhooks/stripe` of a `kind` event about refund `refund` of `pi`, signed at the
/// server's clock.
async fn deliver_inproc(s: &InProc, n: &str, kind: &str, object: Value) -> Resp {
    let body = event(n, kind, object);
    use payonce_server::clock::Clock;
    let sig = signed(WHSEC, s.clock.now_ms() / 1000, &body);
    let req = axum::http::Request::post(ROUTE)
        .header("content-type", "application/json")
        .header("Stripe-Signature", sig)
        .body(axum::body::Body::from(body))
        .unwrap();
    s.route(req).await
}

/// A refund call held 3.5 s before it reaches Stripe (the server gives up at 1 s) and a
/// retry meanwhile: the retry sends no second call while the first may still land (its
/// lease is held a whole lease from the lost answer), and once the clock passes that, a
/// retry reads Stripe's refunds, finds ours by its key and settles it. Stripe refunds the
/// payment's amount exactly, once.
async fn a_refund_call_held_past_the_timeout_lands_once(backend: Backend) {
    let Some(ls) = Localstripe::start().await else {
        return;
    };
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let proxy = FaultProxy::start(&ls.url()).await;
    let s = stripe_inproc(&db, &proxy).await;
    let (t, id, payment, pi, amount) = paid_inproc(&s, &ls, "gus").await;
    let hold = Fault::Hold(std::time::Duration::from_millis(3_500));
    proxy.arm("POST", "/v1/refunds", hold, 1);

    let rk = key();
    let first = s.refund(&t, &payment, Some(&rk)).await;
    let retry = s.refund(&t, &payment, Some(&rk)).await;
    // Every call made so far reaches Stripe, the held one too (a real delay, not a rule).
    let landed = std::time::Duration::from_secs(10);
    payonce_testkit::wait_for("the held refund call", landed, || async {
        (proxy.delivered() == proxy.forwarded()).then_some(())
    })
    .await;
    s.advance(std::time::Duration::from_millis(2_500));
    let done = s.refund(&t, &payment, Some(&rk)).await;

    let (refunds, sum) = refunded_at_stripe(&ls, &pi).await;
    assert_eq!(sum, amount, "exactly the payment's amount: {refunds:?}");
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    let posts = proxy
        .seen()
        .iter()
        .filter(|x| x.method == "POST" && x.path.starts_with("/v1/refunds"))
        .count();
    assert_eq!(posts, 1, "one refund call");
    for r in [&first, &retry] {
        assert_eq!(r.status, 409, "{}", r.text());
        assert_eq!(r.code(), ErrorCode::InProgress);
    }
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["refundId"], refunds[0]["id"]);
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Refunded);
}

/// A payonce refund left processing (its call never reached Stripe) does not hide a refund
/// made in the dashboard: `charge.refunded` marks the order refunded, and the payonce
/// refund, read again once its lease passed, records the dashboard's refund instead of
/// refunding a second time.
async fn a_stuck_payonce_refund_does_not_blind_a_dashboard_refund(backend: Backend) {
    let Some(ls) = Localstripe::start().await else {
        return;
    };
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let proxy = FaultProxy::start(&ls.url()).await;
    let s = stripe_inproc(&db, &proxy).await;
    let (t, id, payment, pi, amount) = paid_inproc(&s, &ls, "ivo").await;
    proxy.arm("POST", "/v1/refunds", Fault::Refuse, 1);
    let rk = key();
    let stuck = s.refund(&t, &payment, Some(&rk)).await;
    assert_eq!(stuck.status, 409, "{}", stuck.text());

    let dash = ls.dashboard_refund(&pi, None).await;
    let object =
        json!({ "id": "ch_x", "object": "charge", "payment_intent": pi, "refunded": true });
    let r = deliver_inproc(&s, "evt_dashboard", "charge.refunded", object).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Refunded);

    s.advance(std::time::Duration::from_millis(2_500));
    let done = s.refund(&t, &payment, Some(&rk)).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["refundId"], dash.as_str());
    let (refunds, sum) = refunded_at_stripe(&ls, &pi).await;
    assert_eq!((refunds.len(), sum), (1, amount), "{refunds:?}");
}

/// A refund Stripe holds `pending` is not `refunded`: the key stays processing (409
/// `IN_PROGRESS`) and the refund job leaves it so; when Stripe fails it, `refund.failed`
/// ends the key `failed` (409 `REFUND_NOT_ALLOWED`, replayed) and the order stays paid.
/// That failed payonce refund does not hide a refund then made in the dashboard: its
/// `charge.refunded` marks the order refunded.
async fn a_pending_refund_that_fails_is_not_refunded_nor_blinds_the_dashboard(backend: Backend) {
    let Some(ls) = Localstripe::start().await else {
        return;
    };
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let proxy = FaultProxy::start(&ls.url()).await;
    let s = stripe_inproc(&db, &proxy).await;
    let (t, id, payment, pi, amount) = paid_inproc(&s, &ls, "hana").await;
    // Stripe makes the refund; its answer is lost, and Stripe holds it pending.
    proxy.drop_answers("POST", "/v1/refunds", 1);
    let rk = key();
    let first = s.refund(&t, &payment, Some(&rk)).await;
    assert_eq!(
        (first.status, first.code()),
        (409, ErrorCode::InProgress),
        "{}",
        first.text()
    );
    let refunds = ls.refunds_of(&pi).await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    let re = refunds[0]["id"].as_str().unwrap().to_owned();
    ls.set_refund_status(&re, "pending").await;

    s.advance(std::time::Duration::from_millis(2_500));
    let pending = s.refund(&t, &payment, Some(&rk)).await;
    payonce_server::run_jobs(&s.state).await;
    let after_job = s.order_status(&t, &id).await;
    ls.set_refund_status(&re, "failed").await;
    let object = json!({ "id": re, "object": "refund", "payment_intent": pi, "status": "failed" });
    let r = deliver_inproc(&s, "evt_refund_failed", "refund.failed", object).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let failed = s.refund(&t, &payment, Some(&rk)).await;

    assert_eq!(
        s.order_status(&t, &id).await,
        OrderStatus::Paid,
        "a failed refund is no refund"
    );
    assert_eq!(refunded_at_stripe(&ls, &pi).await.1, 0);
    assert_eq!(after_job, OrderStatus::Paid, "pending is not refunded");
    assert_eq!(pending.status, 409, "{}", pending.text());
    assert_eq!(pending.code(), ErrorCode::InProgress);
    assert_eq!(failed.status, 409, "{}", failed.text());
    assert_eq!(failed.code(), ErrorCode::RefundNotAllowed);
    assert_eq!(
        failed.header("idempotent-replayed").as_deref(),
        Some("true")
    );

    // The dashboard refunds it all: reflected, the failed payonce refund notwithstanding.
    ls.dashboard_refund(&pi, None).await;
    let object =
        json!({ "id": "ch_x", "object": "charge", "payment_intent": pi, "refunded": true });
    let r = deliver_inproc(&s, "evt_dashboard", "charge.refunded", object).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.order_status(&t, &id).await, OrderStatus::Refunded);
    assert_eq!(refunded_at_stripe(&ls, &pi).await.1, amount);
}

/// A production Stripe deployment (no `--dev`) has no mock webhook route: it answers every
/// event there 404 like any unknown path, signed with the empty key or the mock's dev
/// default, before anything is stored or anyone is asked.
async fn a_stripe_deployment_has_no_mock_webhook_route_and_stores_nothing(backend: Backend) {
    let Some(ls) = Localstripe::start().await else {
        return;
    };
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let opts = Opts {
        dev: false,
        webhooks: true,
        extra: [
            "--provider",
            "stripe",
            "--provider-url",
            &ls.url(),
            "--stripe-secret-key",
            SECRET_KEY,
            "--stripe-webhook-secret",
            WHSEC,
            // The test's PostgreSQL has no TLS.
            "--allow-plaintext",
            "database",
        ]
        .map(String::from)
        .to_vec(),
        ..Opts::default()
    };
    let mut cmd = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref());
    // Through the variable: the same test runs against a server without the flag.
    cmd.env("PAYONCE_ALLOW_TEST_MODE", "true")
        .args(opts.args(&db.url))
        .stderr(std::process::Stdio::null());
    let server = Proc::spawn(cmd, true).expect("a Stripe start outside --dev");
    let http = payonce_testkit::checkout::client();
    for (n, secret) in ["", "whsec_payonce_dev"].into_iter().enumerate() {
        let body = serde_json::to_vec(&json!({
            "id": format!("evt_forged_mock_{n}"),
            "type": "charge.succeeded",
            "created": 1,
            "charge": {
                "id": "ch_forged", "providerKey": format!("pk_forged_{n}"), "amount": 2500,
                "currency": "USD", "paymentMethodId": "pm_card_visa", "orderId": "ord_forged",
                "status": "succeeded", "createdAt": 1
            }
        }))
        .unwrap();
        let r = http
            .post(format!("{}/webhooks/provider", server.api()))
            .header("content-type", "application/json")
            .header("Payonce-Signature", signed(secret, unix_now(), &body))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let problem: Value = r.json().await.unwrap_or_default();
        assert_eq!(status, 404, "{secret:?}: {problem}");
        assert_eq!(problem["code"], "NOT_FOUND", "{problem}");
    }
    let pool = db.pool().await;
    let (events,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM webhook_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(events, 0, "a forged event reached the store");
}

/// localstripe's intents are all `livemode: false` (it takes `sk_live_…` keys too): a server
/// holding a live key that meets a succeeded test-mode intent marks nothing paid, and the
/// jobs flag the attempt for review. (A test card is not money on a live server.)
async fn a_test_mode_payment_on_a_live_key_pays_nothing_and_is_flagged(backend: Backend) {
    let live = "sk_live_payonce0mode0mismatch";
    let Some(app) = StripeApp::start_with_key(backend, true, false, live).await else {
        return;
    };
    let (t, id) = app.order("dave").await;
    let pm = app.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &pm).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let intent = app.only_intent(&id).await;
    assert_eq!(
        (&intent["status"], &intent["livemode"]),
        (&json!("succeeded"), &json!(false))
    );
    let flagged =
        "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL";
    payonce_testkit::wait_for(
        "the jobs flagging the attempt",
        std::time::Duration::from_secs(20),
        || async { (app.count(flagged, &id).await == 1).then_some(()) },
    )
    .await;
    let o = app.get_order(&t, &id).await.json();
    assert_eq!(o["status"], "unpaid", "{o}");
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
}
