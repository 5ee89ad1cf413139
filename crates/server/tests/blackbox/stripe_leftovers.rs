//! Nothing confirmable outlives its attempt (docs/providers.md, "Stripe"): after a failed
//! 3-D Secure challenge the intent goes back to `requires_payment_method`; the page still
//! holds its client secret, and Stripe.js's "try another card" would confirm that same intent
//! with a new card after the server answered 402 and freed the order. The server cancels the
//! saved intent before the attempt settles uncharged; a cancel that fails leaves the attempt
//! processing and the jobs cancel it later; and a success that reaches us anyway for an
//! attempt settled uncharged (a `--flaw leave-confirmable` server) is flagged for review,
//! counted, and refuses the order's new keys (409 `ORDER_UNDER_REVIEW`) instead of charging
//! again.
//!
//! localstripe cannot take a new card with only the client secret as a browser does, so the
//! tests confirm with the secret key ([`Localstripe::confirm_with`]): what payonce sees is
//! the same. Every count of charges is localstripe's own list of PaymentIntents.

use crate::common::{key, Backend, Checkout};
use crate::on_both_backends;
use crate::stripe_edges::StripeApp;
use payonce_protocol::{AttemptStatus, ErrorCode};
use payonce_testkit::checkout::Resp;
use payonce_testkit::fault_proxy::Fault;
use payonce_testkit::localstripe::{cards, Localstripe};
use std::time::Duration;

on_both_backends!(
    a_failed_challenge_cancels_its_intent_and_another_card_cannot_confirm_it,
    a_cancel_that_failed_is_retried_by_the_jobs,
    a_success_for_an_attempt_settled_uncharged_is_flagged_and_refuses_new_keys,
    an_operator_resolve_refunds_the_stray_payment_and_releases_the_order,
);

const CANCEL: &str = "/v1/payment_intents/*/cancel";

/// Flagged attempts of an order.
const FLAGGED: &str =
    "SELECT COUNT(*) FROM attempts WHERE order_id = $1 AND needs_review_at IS NOT NULL";

/// Pays the order with the 3-D Secure card under `k` (402 `ACTION_REQUIRED`) and fails the
/// challenge at localstripe. The intent's id and the payment method.
async fn failed_challenge(app: &StripeApp, t: &str, id: &str, k: &str) -> (String, String) {
    let pm = app.ls.payment_method(cards::THREE_DS).await;
    let r = app.pay(t, id, Some(k), 1, &pm).await;
    assert_eq!(r.code(), ErrorCode::ActionRequired, "{}", r.text());
    let secret = r.json()["next"]["clientSecret"]
        .as_str()
        .expect("clientSecret")
        .to_owned();
    let intent = app.only_intent(id).await["id"].as_str().unwrap().to_owned();
    app.ls.authenticate(&intent, &secret, false).await;
    (intent, pm)
}

/// [`failed_challenge`], then the retry of the key: 402 `PAYMENT_DECLINED`. The intent.
async fn declined_challenge(app: &StripeApp, t: &str, id: &str) -> String {
    let k = key();
    let (intent, pm) = failed_challenge(app, t, id, &k).await;
    let r = app.pay(t, id, Some(&k), 1, &pm).await;
    assert_declined(&r);
    intent
}

fn assert_declined(r: &Resp) {
    assert_eq!(
        (r.status, r.code()),
        (402, ErrorCode::PaymentDeclined),
        "{}",
        r.text()
    );
    assert_eq!(r.attempt_status(), AttemptStatus::Declined);
}

async fn status_of(ls: &Localstripe, order: &str) -> Vec<String> {
    let intents = ls.intents_of(order).await;
    intents
        .iter()
        .map(|i| i["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The issue's sequence: failed challenge, 402, then the page confirms the same intent with
/// a good card. The intent was cancelled when the attempt settled, so that confirm is
/// refused, and the customer's new key pays once.
async fn a_failed_challenge_cancels_its_intent_and_another_card_cannot_confirm_it(b: Backend) {
    let Some(app) = StripeApp::start(b, false, true).await else {
        return;
    };
    let (t, id) = app.order("alice").await;
    let intent = declined_challenge(&app, &t, &id).await;
    let approve = app.ls.payment_method(cards::APPROVE).await;
    let stray = app.ls.confirm_with(&intent, &approve).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &approve).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        app.ls.succeeded_for(&id).await,
        1,
        "one charge for the order: {:?}",
        status_of(&app.ls, &id).await
    );
    assert!(
        stray.is_err(),
        "the declined attempt's intent could still be confirmed: {stray:?}"
    );
    let statuses = status_of(&app.ls, &id).await;
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    assert!(statuses.contains(&"canceled".to_owned()), "{statuses:?}");
    assert_eq!(app.count(FLAGGED, &id).await, 0, "nothing to review");
}

/// The cancel call never reaches localstripe (the fault proxy refuses it once): the attempt
/// is not settled on a cancel that did not happen: it stays processing (202), and the jobs
/// cancel the intent and settle it `declined`; then a new key pays once.
async fn a_cancel_that_failed_is_retried_by_the_jobs(b: Backend) {
    let Some(app) = StripeApp::start(b, true, false).await else {
        return;
    };
    app.to_stripe.arm("POST", CANCEL, Fault::Refuse, 1);
    let (t, id) = app.order("bob").await;
    let k = key();
    let (intent, pm) = failed_challenge(&app, &t, &id, &k).await;
    let first = app.pay(&t, &id, Some(&k), 1, &pm).await;
    assert!(
        first.status == 202 || first.code() == ErrorCode::PaymentDeclined,
        "{}",
        first.text()
    );
    let settled = payonce_testkit::eventually(
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            let r = app.pay(&t, &id, Some(&k), 1, &pm).await;
            (r.status == 402).then_some(r)
        },
    )
    .await
    .expect("the key settles once the intent is cancelled");
    assert_declined(&settled);
    assert_eq!(
        app.to_stripe.applied("POST", CANCEL),
        1,
        "the first was refused"
    );
    // Its own idempotency key, never the deadline's cancel's (whose stored answer Stripe
    // would replay), the same on every retry.
    let keys: Vec<String> = app
        .to_stripe
        .seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("/cancel"))
        .filter_map(|s| s.header("idempotency-key").map(str::to_owned))
        .collect();
    assert!(keys.len() >= 2, "{keys:?}");
    assert!(
        keys.iter()
            .all(|k| k.ends_with("-cancel-uncharged") && *k == keys[0]),
        "{keys:?}"
    );
    assert_eq!(status_of(&app.ls, &id).await, ["canceled"]);
    let stray = app.ls.confirm_with(&intent, &pm).await;
    assert!(
        stray.is_err(),
        "a canceled intent cannot be confirmed: {stray:?}"
    );
    let approve = app.ls.payment_method(cards::APPROVE).await;
    let r = app.pay(&t, &id, Some(&key()), 1, &approve).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(app.ls.succeeded_for(&id).await, 1);
}

/// A server that settles a declined intent without cancelling it (`--flaw
/// leave-confirmable`): the page's confirm with a good card succeeds. Its
/// `payment_intent.succeeded` is not dropped: the attempt is flagged for review with a
/// reason, the metric counts it, and a new key on the order is refused with 409
/// `ORDER_UNDER_REVIEW`: one charge at localstripe, not two.
async fn a_success_for_an_attempt_settled_uncharged_is_flagged_and_refuses_new_keys(b: Backend) {
    let flaw = ["--flaw", "leave-confirmable"];
    let Some(app) = StripeApp::start_with(b, false, true, &flaw).await else {
        return;
    };
    let (t, id) = app.order("carol").await;
    let intent = declined_challenge(&app, &t, &id).await;
    let approve = app.ls.payment_method(cards::APPROVE).await;
    let confirmed = app.ls.confirm_with(&intent, &approve).await;
    assert_eq!(
        confirmed.as_ref().map(|i| i["status"].clone()).ok(),
        Some("succeeded".into()),
        "{confirmed:?}"
    );
    let flagged = payonce_testkit::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (app.count(FLAGGED, &id).await == 1).then_some(()) },
    )
    .await;
    assert!(flagged.is_some(), "the attempt is flagged for review");
    let why = "SELECT COUNT(*) FROM audit_log WHERE entity = 'attempt' AND to_state LIKE '%needs review%' AND reason LIKE '%' || $1 || '%'";
    assert_eq!(
        app.count(why, &intent).await,
        1,
        "an audit row names the intent"
    );
    let series = r#"payonce_leftover_payments_total{result="flagged"}"#;
    assert_eq!(app.metric(series).await, 1.0);
    let r = app.pay(&t, &id, Some(&key()), 1, &approve).await;
    assert_eq!(
        (r.status, r.code()),
        (409, ErrorCode::OrderUnderReview),
        "{}",
        r.text()
    );
    assert_eq!(app.ls.succeeded_for(&id).await, 1, "one charge, not two");
}

/// The flag of the test above, resolved by an operator (`POST /admin/reviews/{id}/resolve`,
/// docs/operating.md, runbook "a review flag"): the stray payment is refunded at localstripe,
/// never adopted; the flag and the hold are cleared, so a new key pays the order: two
/// succeeded intents, one of them refunded in full, the customer charged once in the end. A
/// second resolve finds no flag (409) and refunds nothing more.
async fn an_operator_resolve_refunds_the_stray_payment_and_releases_the_order(b: Backend) {
    use crate::journal::{token_file, OPERATOR_TOKEN};
    use payonce_protocol::admin::{paths as admin, resolve};
    use payonce_testkit::checkout::Req;
    let (_dir, file) = token_file();
    let flags = [
        "--flaw",
        "leave-confirmable",
        "--operator-token-file",
        &file,
    ];
    let Some(app) = StripeApp::start_with(b, false, true, &flags).await else {
        return;
    };
    let (t, id) = app.order("dora").await;
    let intent = declined_challenge(&app, &t, &id).await;
    let approve = app.ls.payment_method(cards::APPROVE).await;
    app.ls
        .confirm_with(&intent, &approve)
        .await
        .expect("confirmed");
    let flagged = payonce_testkit::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (app.count(FLAGGED, &id).await == 1).then_some(()) },
    )
    .await;
    assert!(flagged.is_some(), "the attempt is flagged for review");

    let note = serde_json::json!({ resolve::NOTE: "customer confirmed outside the checkout" });
    let path = admin::resolve(&id);
    let r = app
        .call(
            Req::post(path.as_str())
                .bearer(OPERATOR_TOKEN)
                .json(note.clone()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(
        body[resolve::RESOLVED][0][resolve::OUTCOME],
        resolve::REFUNDED,
        "{body:#}"
    );
    let refunds = app.ls.refunds_of(&intent).await;
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(refunds[0]["status"], "succeeded");
    assert_eq!(app.count(FLAGGED, &id).await, 0, "the flag is cleared");

    let r = app.pay(&t, &id, Some(&key()), 1, &approve).await;
    assert_eq!(r.status, 200, "the order is released: {}", r.text());
    assert_eq!(
        app.ls.succeeded_for(&id).await,
        2,
        "the stray and the new key's"
    );
    let again = app
        .call(Req::post(path.as_str()).bearer(OPERATOR_TOKEN).json(note))
        .await;
    assert_eq!(
        again.code(),
        ErrorCode::ReviewUnresolved,
        "{}",
        again.text()
    );
    assert_eq!(app.ls.refunds_of(&intent).await.len(), 1, "refunded once");
}
