//! `pm_card_3ds`: a charge that waits for the customer (3-D Secure), completed on the
//! provider's own page, over real HTTP.

mod common;

use common::*;
use payonce_mock_provider::ProviderConfig;
use payonce_protocol::headers::IDEMPOTENT_REPLAYED;
use payonce_protocol::provider::{
    methods, paths, ActionOutcome, Charge, ChargeStatus, CompleteRequest, EventType,
};
use payonce_protocol::ErrorCode;
use std::time::Duration;

fn three_ds(order_id: &str) -> payonce_protocol::provider::ChargeRequest {
    request(order_id, methods::THREE_DS)
}

async fn complete(p: &TestProvider, charge_id: &str, outcome: ActionOutcome) -> reqwest::Response {
    p.client
        .post(p.url(&paths::charge_complete(charge_id)))
        .json(&CompleteRequest {
            outcome,
            return_url: None,
        })
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_3ds_charge_waits_for_the_customer_and_the_same_key_never_charges_twice() {
    let p = spawn(fast_config()).await;
    let k = key("3ds");
    let first = p.charge(&k, &three_ds("order-3ds")).await;
    assert_eq!(first.status(), 202, "recorded, no outcome yet");
    let first: Charge = first.json().await.unwrap();
    assert_eq!(first.status, ChargeStatus::RequiresAction);
    let url = first.next_action_url.clone().expect("a completion URL");
    assert_eq!(url, p.url(&paths::charge_action(&first.id)));

    // A retry with the same key before completion: the same charge, still waiting.
    let again = p.charge(&k, &three_ds("order-3ds")).await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again.json::<Charge>().await.unwrap(), first);
    let by_key: Charge = p.by_key(&k).await.json().await.unwrap();
    assert_eq!(by_key.status, ChargeStatus::RequiresAction);

    // The customer's page: a button per outcome, posting to the completion endpoint.
    let page = p.client.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains(&format!(
        r#"action="{}""#,
        paths::charge_complete(&first.id)
    )));
    assert!(html.contains(r#"value="succeeded""#) && html.contains(r#"value="declined""#));

    let done = complete(&p, &first.id, ActionOutcome::Succeeded).await;
    assert_eq!(done.status(), 200);
    assert!(done.headers().get(IDEMPOTENT_REPLAYED).is_none());
    let done: Charge = done.json().await.unwrap();
    assert_eq!(done.status, ChargeStatus::Succeeded);
    assert_eq!(done.id, first.id);
    assert_eq!(done.next_action_url, None);

    // After completion the same key replays the succeeded charge: still one charge.
    let after = p.charge(&k, &three_ds("order-3ds")).await;
    assert_eq!(after.status(), 200);
    assert_eq!(after.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(after.json::<Charge>().await.unwrap(), done);
    assert_eq!(p.ledger(Some("order-3ds")).await, vec![done.clone()]);

    // The first completion decides: a later "declined" changes nothing.
    let late = complete(&p, &first.id, ActionOutcome::Declined).await;
    assert_eq!(late.status(), 200);
    assert_eq!(late.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(
        late.json::<Charge>().await.unwrap().status,
        ChargeStatus::Succeeded
    );
    assert_eq!(p.ledger(Some("order-3ds")).await, vec![done]);
}

#[tokio::test]
async fn failing_the_challenge_declines_and_nothing_can_be_refunded() {
    let p = spawn(fast_config()).await;
    let k = key("3ds-fail");
    let charge: Charge = p
        .charge(&k, &three_ds("order-3ds-f"))
        .await
        .json()
        .await
        .unwrap();
    // Not refundable while it waits, nor after a decline.
    let resp = p.refund(&charge.id, &key("3ds-re")).await;
    assert_eq!(resp.status(), 409);
    assert_eq!(problem(resp).await.code, ErrorCode::RefundNotAllowed);

    let done = complete(&p, &charge.id, ActionOutcome::Declined).await;
    assert_eq!(done.status(), 200);
    assert_eq!(
        done.json::<Charge>().await.unwrap().status,
        ChargeStatus::Declined
    );
    let replay = p.charge(&k, &three_ds("order-3ds-f")).await;
    assert_eq!(replay.status(), 402, "a replay answers the decline");
    let ledger = p.ledger(Some("order-3ds-f")).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, ChargeStatus::Declined);
    let resp = p.refund(&charge.id, &key("3ds-re2")).await;
    assert_eq!(resp.status(), 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_completions_decide_once_and_send_one_event() {
    let hook = Receiver::start(0).await;
    let p = spawn(ProviderConfig {
        webhook_url: Some(hook.url.clone()),
        ..fast_config()
    })
    .await;
    let charge: Charge = p
        .charge(&key("3ds-race"), &three_ds("order-3ds-race"))
        .await
        .json()
        .await
        .unwrap();
    // Creation announces nothing: there is no outcome yet.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hook.attempts(), 0, "no webhook before completion");

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (client, url) = (p.client.clone(), p.url(&paths::charge_complete(&charge.id)));
        let outcome = if i % 2 == 0 {
            ActionOutcome::Succeeded
        } else {
            ActionOutcome::Declined
        };
        tasks.spawn(async move {
            let resp = client
                .post(url)
                .json(&CompleteRequest {
                    outcome,
                    return_url: None,
                })
                .send()
                .await
                .unwrap();
            let replayed = resp.headers().get(IDEMPOTENT_REPLAYED).is_some();
            (replayed, resp.json::<Charge>().await.unwrap().status)
        });
    }
    let answers = tasks.join_all().await;
    assert_eq!(
        answers.iter().filter(|a| !a.0).count(),
        1,
        "one completion decides"
    );
    let decided = answers.iter().find(|a| !a.0).unwrap().1;
    assert!(answers.iter().all(|a| a.1 == decided), "everyone sees it");

    let got = hook.wait_for(1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got_all = hook.accepted();
    assert_eq!(got_all.len(), 1, "exactly one outcome event: {got_all:?}");
    let expected = match decided {
        ChargeStatus::Succeeded => EventType::ChargeSucceeded,
        _ => EventType::ChargeDeclined,
    };
    assert_eq!(got[0].event.event_type, expected);
    assert!(got[0].verified);
    assert_eq!(got[0].event.charge.id, charge.id);
    assert_eq!(got[0].event.charge.status, decided);
    assert_eq!(p.ledger(Some("order-3ds-race")).await.len(), 1);
}

#[tokio::test]
async fn the_page_form_completes_and_returns_to_a_local_shop_only() {
    let p = spawn(fast_config()).await;
    let charge: Charge = p
        .charge(&key("3ds-form"), &three_ds("order-3ds-form"))
        .await
        .json()
        .await
        .unwrap();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let complete_url = p.url(&paths::charge_complete(&charge.id));

    // A foreign return URL is refused before anything changes.
    let resp = no_redirects
        .post(&complete_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("outcome=succeeded&returnUrl=https%3A%2F%2Fevil.example%2F")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(problem(resp).await.code, ErrorCode::InvalidRequest);
    assert_eq!(
        p.ledger(Some("order-3ds-form")).await[0].status,
        ChargeStatus::RequiresAction
    );

    let resp = no_redirects
        .post(&complete_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("outcome=succeeded&returnUrl=http%3A%2F%2Flocalhost%3A5173%2F%3Forder%3Do1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(
        resp.headers()["location"],
        "http://localhost:5173/?order=o1"
    );
    assert_eq!(
        p.ledger(Some("order-3ds-form")).await[0].status,
        ChargeStatus::Succeeded
    );
    // Without a return URL the page says so (and closes itself when it is a popup).
    let resp = no_redirects
        .post(&complete_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("outcome=succeeded")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("Payment confirmed"));
}

#[tokio::test]
async fn completing_what_needs_no_action_or_does_not_exist_is_a_problem() {
    let p = spawn(fast_config()).await;
    let approved: Charge = p
        .charge(&key("3ds-none"), &approve("order-3ds-none"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(approved.next_action_url, None);
    let resp = complete(&p, &approved.id, ActionOutcome::Declined).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(problem(resp).await.code, ErrorCode::InvalidRequest);
    assert_eq!(
        p.ledger(Some("order-3ds-none")).await[0].status,
        ChargeStatus::Succeeded
    );
    let resp = complete(&p, "ch_nope", ActionOutcome::Succeeded).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(problem(resp).await.code, ErrorCode::PaymentNotFound);
    let resp = p
        .client
        .get(p.url(&paths::charge_action("ch_nope")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = p
        .client
        .post(p.url(&paths::charge_complete(&approved.id)))
        .json(&serde_json::json!({"outcome": "maybe"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn a_waiting_charge_and_its_completion_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = ProviderConfig {
        state_file: Some(dir.path().join("provider.json")),
        ..fast_config()
    };
    let k = key("3ds-restart");
    let charge: Charge = {
        let p = spawn(config.clone()).await;
        p.charge(&k, &three_ds("order-3ds-r"))
            .await
            .json()
            .await
            .unwrap()
    };
    let p = spawn(config.clone()).await;
    let waiting: Charge = p.by_key(&k).await.json().await.unwrap();
    assert_eq!(waiting.status, ChargeStatus::RequiresAction);
    assert_eq!(
        complete(&p, &charge.id, ActionOutcome::Succeeded)
            .await
            .status(),
        200
    );
    let p = spawn(config).await;
    let ledger = p.ledger(Some("order-3ds-r")).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, ChargeStatus::Succeeded);
    assert_eq!(ledger[0].next_action_url, None);
}

/// The shop cancels a charge whose customer abandoned the challenge: it ends `canceled`,
/// nothing moved; a late completion by the customer cannot revive it; cancelling again
/// answers the same; an unknown charge is 404.
#[tokio::test]
async fn the_shop_cancels_an_abandoned_charge_and_it_never_charges() {
    let p = spawn(fast_config()).await;
    let k = key("3ds-cancel");
    let first: Charge = p
        .charge(&k, &three_ds("order-cancel"))
        .await
        .json()
        .await
        .unwrap();
    let cancel = |id: &str| p.client.post(p.url(&paths::charge_cancel(id))).send();
    let r = cancel(&first.id).await.unwrap();
    assert_eq!(r.status(), 200);
    let cancelled: Charge = r.json().await.unwrap();
    assert_eq!(cancelled.status, ChargeStatus::Canceled);
    assert_eq!(cancelled.next_action_url, None);
    let late = complete(&p, &first.id, ActionOutcome::Succeeded).await;
    assert_eq!(late.status(), 200);
    assert_eq!(
        late.json::<Charge>().await.unwrap().status,
        ChargeStatus::Canceled
    );
    let by_key: Charge = p.by_key(&k).await.json().await.unwrap();
    assert_eq!(
        by_key.status,
        ChargeStatus::Canceled,
        "the same charge, never charged"
    );
    let again: Charge = cancel(&first.id).await.unwrap().json().await.unwrap();
    assert_eq!(again.status, ChargeStatus::Canceled);
    assert_eq!(cancel("ch_nope").await.unwrap().status(), 404);
}
