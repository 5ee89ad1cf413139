//! The provider's own idempotency and ledger, over real HTTP.

mod common;

use common::*;
use payonce_mock_provider::{MockProvider, ProviderConfig};
use payonce_protocol::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use payonce_protocol::provider::{methods, paths, Charge, ChargeStatus, Refund};
use payonce_protocol::ErrorCode;
use std::collections::HashSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_with_one_key_make_one_charge() {
    let p = spawn(fast_config()).await;
    let k = key("race");
    let body = approve("order-race");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (client, url, k, body) = (
            p.client.clone(),
            p.url(paths::CHARGES),
            k.clone(),
            body.clone(),
        );
        tasks.spawn(async move {
            let resp = client
                .post(url)
                .header(IDEMPOTENCY_KEY, k)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let replayed = resp.headers().get(IDEMPOTENT_REPLAYED).is_some();
            let charge: Charge = resp.json().await.unwrap();
            (status, replayed, charge.id)
        });
    }
    let answers = tasks.join_all().await;

    let ledger = p.ledger(Some("order-race")).await;
    assert_eq!(ledger.len(), 1, "exactly one charge at the provider");
    let ids: HashSet<_> = answers.iter().map(|a| a.2.clone()).collect();
    assert_eq!(ids.len(), 1, "every answer names the same charge");
    assert!(ids.contains(&ledger[0].id));
    assert_eq!(answers.iter().filter(|a| a.0 == 201).count(), 1);
    assert!(answers
        .iter()
        .filter(|a| a.0 != 201)
        .all(|a| a.0 == 200 && a.1));
}

#[tokio::test]
async fn replay_returns_the_original_charge_and_a_changed_body_is_422() {
    let p = spawn(fast_config()).await;
    let k = key("replay");
    let first = p.charge(&k, &approve("order-r")).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get(IDEMPOTENT_REPLAYED).is_none());
    let first: Charge = first.json().await.unwrap();
    assert_eq!(first.status, ChargeStatus::Succeeded);
    assert_eq!(first.provider_key, k);

    let again = p.charge(&k, &approve("order-r")).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again.json::<Charge>().await.unwrap(), first);

    let mut changed = approve("order-r");
    changed.amount += 1;
    let resp = p.charge(&k, &changed).await;
    assert_eq!(resp.status(), 422);
    assert_eq!(
        problem(resp).await.code,
        ErrorCode::KeyReusedWithDifferentDetails
    );
    assert_eq!(p.ledger(Some("order-r")).await, vec![first]);
}

#[tokio::test]
async fn a_decline_is_recorded_and_replayed_as_a_decline() {
    let p = spawn(fast_config()).await;
    let k = key("decline");
    let body = request("order-d", methods::DECLINE);
    let resp = p.charge(&k, &body).await;
    assert_eq!(resp.status(), 402);
    let declined: Charge = resp.json().await.unwrap();
    assert_eq!(declined.status, ChargeStatus::Declined);

    let again = p.charge(&k, &body).await;
    assert_eq!(again.status(), 402);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again.json::<Charge>().await.unwrap().id, declined.id);

    let ledger = p.ledger(Some("order-d")).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, ChargeStatus::Declined);
}

#[tokio::test]
async fn transient_fails_once_without_charging_then_approves() {
    let p = spawn(fast_config()).await;
    let k = key("transient");
    let body = request("order-t", methods::TRANSIENT_5XX);
    let resp = p.charge(&k, &body).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(problem(resp).await.code, ErrorCode::StoreUnavailable);
    assert!(
        p.ledger(Some("order-t")).await.is_empty(),
        "503 charged nothing"
    );
    assert_eq!(p.by_key(&k).await.status(), 404);

    let resp = p.charge(&k, &body).await;
    assert_eq!(resp.status(), 201);
    let charge: Charge = resp.json().await.unwrap();
    assert_eq!(charge.status, ChargeStatus::Succeeded);
    assert_eq!(p.charge(&k, &body).await.status(), 200);
    assert_eq!(p.ledger(Some("order-t")).await, vec![charge]);

    // A different key gets its own first failure.
    assert_eq!(p.charge(&key("transient"), &body).await.status(), 503);
}

#[tokio::test]
async fn slow_is_in_the_ledger_before_it_answers() {
    let p = spawn(ProviderConfig {
        slow_delay: Duration::from_secs(2),
        ..fast_config()
    })
    .await;
    let k = key("slow");
    let body = request("order-s", methods::SLOW);
    let call = {
        let (client, url, k, body) = (p.client.clone(), p.url(paths::CHARGES), k.clone(), body);
        tokio::spawn(async move {
            client
                .post(url)
                .header(IDEMPOTENCY_KEY, k)
                .json(&body)
                .send()
                .await
                .unwrap()
        })
    };
    let mut ledger = Vec::new();
    for _ in 0..100 {
        ledger = p.ledger(Some("order-s")).await;
        if !ledger.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ledger.len(), 1, "charged while the answer is still pending");
    assert!(!call.is_finished(), "the slow answer has not arrived yet");
    let resp = call.await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.json::<Charge>().await.unwrap().id, ledger[0].id);
}

#[tokio::test]
async fn timeout_charges_although_the_caller_gave_up_and_a_retry_replays() {
    let p = spawn(fast_config()).await; // timeout_delay 30 s
    let k = key("timeout");
    let body = request("order-to", methods::TIMEOUT);
    let err = p
        .client
        .post(p.url(paths::CHARGES))
        .header(IDEMPOTENCY_KEY, &k)
        .json(&body)
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .expect_err("the provider does not answer in time");
    assert!(err.is_timeout());

    let ledger = p.ledger(Some("order-to")).await;
    assert_eq!(ledger.len(), 1, "the caller was charged without knowing");
    let found = p.by_key(&k).await;
    assert_eq!(found.status(), 200);
    assert_eq!(found.json::<Charge>().await.unwrap(), ledger[0]);

    let retry = p.charge(&k, &body).await;
    assert_eq!(
        retry.status(),
        200,
        "a retry with the same key answers at once"
    );
    assert_eq!(retry.json::<Charge>().await.unwrap().id, ledger[0].id);
    assert_eq!(p.ledger(Some("order-to")).await.len(), 1);
}

#[tokio::test]
async fn lookup_by_provider_key() {
    let p = spawn(fast_config()).await;
    let k = key("lookup");
    let resp = p.by_key(&k).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(problem(resp).await.code, ErrorCode::PaymentNotFound);

    let created: Charge = p
        .charge(&k, &approve("order-l"))
        .await
        .json()
        .await
        .unwrap();
    let found = p.by_key(&k).await;
    assert_eq!(found.status(), 200);
    assert_eq!(found.json::<Charge>().await.unwrap(), created);

    // Keys may contain '/', which travels percent-encoded in the path.
    let slashed = "pk/with/slashes/0001";
    let created: Charge = p
        .charge(slashed, &approve("order-l2"))
        .await
        .json()
        .await
        .unwrap();
    let resp = p
        .client
        .get(p.url("/charges/by-key/pk%2Fwith%2Fslashes%2F0001"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Charge>().await.unwrap(), created);
    // ... and so do raw slashes, as `paths::charge_by_key` spells them.
    let resp = p.by_key(slashed).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Charge>().await.unwrap(), created);
}

#[tokio::test]
async fn refunds_are_idempotent_and_happen_once() {
    let p = spawn(fast_config()).await;
    let charge: Charge = p
        .charge(&key("refund"), &approve("order-rf"))
        .await
        .json()
        .await
        .unwrap();
    let rk = key("refund-key");
    let resp = p.refund(&charge.id, &rk).await;
    assert_eq!(resp.status(), 201);
    let refund: Refund = resp.json().await.unwrap();
    assert_eq!(
        (refund.charge_id.as_str(), refund.amount),
        (charge.id.as_str(), 5000)
    );

    let again = p.refund(&charge.id, &rk).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again.json::<Refund>().await.unwrap(), refund);

    let other = p.refund(&charge.id, &key("refund-key")).await;
    assert_eq!(other.status(), 409);
    assert_eq!(problem(other).await.code, ErrorCode::RefundNotAllowed);

    let ledger = p.ledger(Some("order-rf")).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, ChargeStatus::Refunded);

    // The refund key cannot be reused for another charge.
    let second: Charge = p
        .charge(&key("refund"), &approve("order-rf2"))
        .await
        .json()
        .await
        .unwrap();
    let reused = p.refund(&second.id, &rk).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(
        problem(reused).await.code,
        ErrorCode::KeyReusedWithDifferentDetails
    );
    assert_eq!(
        p.ledger(Some("order-rf2")).await[0].status,
        ChargeStatus::Succeeded
    );
}

#[tokio::test]
async fn declined_and_unknown_charges_cannot_be_refunded() {
    let p = spawn(fast_config()).await;
    let declined: Charge = p
        .charge(&key("d"), &request("order-x", methods::DECLINE))
        .await
        .json()
        .await
        .unwrap();
    let resp = p.refund(&declined.id, &key("rk")).await;
    assert_eq!(resp.status(), 409);
    assert_eq!(problem(resp).await.code, ErrorCode::RefundNotAllowed);

    let resp = p.refund("ch_nope", &key("rk")).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(problem(resp).await.code, ErrorCode::PaymentNotFound);
    assert_eq!(
        p.ledger(Some("order-x")).await[0].status,
        ChargeStatus::Declined
    );
}

#[tokio::test]
async fn ledger_lists_oldest_first_and_filters_by_order() {
    let p = spawn(fast_config()).await;
    let a: Charge = p
        .charge(&key("l"), &approve("A"))
        .await
        .json()
        .await
        .unwrap();
    let b: Charge = p
        .charge(&key("l"), &approve("B"))
        .await
        .json()
        .await
        .unwrap();
    let c: Charge = p
        .charge(&key("l"), &approve("A"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p.ledger(None).await, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(p.ledger(Some("A")).await, vec![a, c]);
    assert_eq!(p.ledger(Some("B")).await, vec![b]);
    assert!(p.ledger(Some("C")).await.is_empty());

    let resp = p.client.get(p.url("/ledger?order=A")).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(problem(resp).await.code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn bad_input_is_a_problem_and_charges_nothing() {
    let p = spawn(fast_config()).await;
    let url = p.url(paths::CHARGES);
    let good = serde_json::to_string(&approve("order-bad")).unwrap();
    // (Idempotency-Key, Content-Type, body, status, code)
    type Case<'a> = (Option<&'a str>, Option<&'a str>, String, u16, ErrorCode);
    let cases: Vec<Case> = vec![
        (
            None,
            Some("application/json"),
            good.clone(),
            400,
            ErrorCode::IdempotencyKeyMissing,
        ),
        (
            Some("short"),
            Some("application/json"),
            good.clone(),
            400,
            ErrorCode::IdempotencyKeyInvalid,
        ),
        (
            Some("has space in it 12345"),
            Some("application/json"),
            good.clone(),
            400,
            ErrorCode::IdempotencyKeyInvalid,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("text/plain"),
            good.clone(),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            Some("pk-valid-key-000001"),
            None,
            good.clone(),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            "{".into(),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("USD", "usd"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("5000", "0"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("5000", "1.5"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("pm_card_approve", "pm_card_visa"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("{", "{\"extra\":1,"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            Some("pk-valid-key-000001"),
            Some("application/json"),
            good.replace("order-bad", ""),
            400,
            ErrorCode::InvalidRequest,
        ),
    ];
    for (k, ct, body, status, code) in cases {
        let mut req = p.client.post(&url).body(body.clone());
        if let Some(k) = k {
            req = req.header(IDEMPOTENCY_KEY, k);
        }
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), status, "{k:?} {ct:?} {body}");
        assert_eq!(problem(resp).await.code, code, "{k:?} {ct:?} {body}");
    }
    assert!(p.ledger(None).await.is_empty());
    assert_eq!(p.by_key("pk-valid-key-000001").await.status(), 404);

    let resp = p.client.get(p.url("/nowhere")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(problem(resp).await.code, ErrorCode::NotFound);
    let resp = p.client.get(p.url(paths::CHARGES)).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(problem(resp).await.code, ErrorCode::MethodNotAllowed);
    let resp = p
        .client
        .post(p.url(&paths::refunds("ch_x")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(problem(resp).await.code, ErrorCode::IdempotencyKeyMissing);
}

#[tokio::test]
async fn the_ledger_survives_a_restart_on_the_same_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nested/provider.json");
    let config = ProviderConfig {
        state_file: Some(file.clone()),
        ..fast_config()
    };
    let k = key("persist");
    let t = key("persist-transient");
    let (charge, refund) = {
        let p = spawn(config.clone()).await;
        let charge: Charge = p
            .charge(&k, &approve("order-p"))
            .await
            .json()
            .await
            .unwrap();
        let refund: Refund = p.refund(&charge.id, &k).await.json().await.unwrap();
        let transient = request("order-p2", methods::TRANSIENT_5XX);
        assert_eq!(p.charge(&t, &transient).await.status(), 503);
        (charge, refund)
    };
    assert!(file.exists());

    // A new provider (as after a process restart) on the same file.
    let p = spawn(config).await;
    let ledger = p.ledger(None).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].id, charge.id);
    assert_eq!(ledger[0].status, ChargeStatus::Refunded);
    let again = p.charge(&k, &approve("order-p")).await;
    assert_eq!(again.status(), 200, "replayed, not charged again");
    assert_eq!(again.json::<Charge>().await.unwrap().id, charge.id);
    let refund_again = p.refund(&charge.id, &k).await;
    assert_eq!(refund_again.status(), 200);
    assert_eq!(refund_again.json::<Refund>().await.unwrap(), refund);
    // The transient key already used its one failure before the restart.
    let resp = p
        .charge(&t, &request("order-p2", methods::TRANSIENT_5XX))
        .await;
    assert_eq!(resp.status(), 201);
    assert_eq!(p.ledger(None).await.len(), 2);
}

#[tokio::test]
async fn a_torn_last_line_of_the_journal_is_dropped_and_the_charges_before_it_survive() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("provider.json");
    let config = ProviderConfig {
        state_file: Some(file.clone()),
        ..fast_config()
    };
    let (a, b) = (key("torn-a"), key("torn-b"));
    let first = {
        let p = spawn(config.clone()).await;
        let first: Charge = p
            .charge(&a, &approve("order-t1"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(p.charge(&b, &approve("order-t2")).await.status(), 201);
        first
    };
    // A crash in the middle of appending a third change leaves half a line.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(br#"{"op":"charge","charge":{"charge":{"id":"ch_tor"#);
    std::fs::write(&file, bytes).unwrap();

    let p = spawn(config.clone()).await;
    let ledger = p.ledger(None).await;
    assert_eq!(
        ledger.len(),
        2,
        "the two answered charges, not the torn one"
    );
    assert_eq!(ledger[0].id, first.id);
    assert_eq!(
        p.charge(&a, &approve("order-t1")).await.status(),
        200,
        "still a replay"
    );
    assert_eq!(
        p.charge(&key("torn-c"), &approve("order-t3"))
            .await
            .status(),
        201
    );
    drop(p);
    // The journal was compacted on open, so the next process reads the third charge too.
    let p = spawn(config).await;
    assert_eq!(p.ledger(None).await.len(), 3);
}

#[tokio::test]
async fn a_corrupt_line_inside_the_journal_is_an_error_not_a_shorter_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("provider.json");
    let config = ProviderConfig {
        state_file: Some(file.clone()),
        ..fast_config()
    };
    {
        let p = spawn(config.clone()).await;
        assert_eq!(
            p.charge(&key("mid-a"), &approve("order-m1")).await.status(),
            201
        );
    }
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}garbage\n{text}")).unwrap();
    let err = MockProvider::new(config).err().expect("refuses to start");
    assert!(matches!(
        err,
        payonce_mock_provider::ProviderError::StateCorrupt { .. }
    ));
}

#[tokio::test]
async fn a_corrupt_state_file_is_an_error_not_an_empty_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("provider.json");
    std::fs::write(&file, b"{not json").unwrap();
    let err = MockProvider::new(ProviderConfig {
        state_file: Some(file),
        ..fast_config()
    })
    .err()
    .expect("refuses to start");
    assert!(matches!(
        err,
        payonce_mock_provider::ProviderError::StateCorrupt { .. }
    ));
}

#[tokio::test]
async fn dev_reset_forgets_everything() {
    let p = spawn(fast_config()).await;
    let k = key("reset");
    p.charge(&k, &approve("order-z")).await;
    let resp = p.client.post(p.url(paths::DEV_RESET)).send().await.unwrap();
    assert_eq!(resp.status(), 204);
    assert!(p.ledger(None).await.is_empty());
    assert_eq!(p.by_key(&k).await.status(), 404);
}

#[tokio::test]
async fn local_dev_pages_may_call_it_from_the_browser() {
    let p = spawn(fast_config()).await;
    let preflight = |origin: &'static str| {
        p.client
            .request(reqwest::Method::OPTIONS, p.url(paths::CHARGES))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,idempotency-key",
            )
            .send()
    };
    let ok = preflight("http://localhost:5173").await.unwrap();
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "http://localhost:5173"
    );
    let allowed = ok.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(allowed.contains("idempotency-key"), "{allowed}");

    let foreign = preflight("https://shop.example").await.unwrap();
    assert!(foreign
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    let resp = p
        .client
        .get(p.url(paths::LEDGER))
        .header("origin", "http://127.0.0.1:4173")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "http://127.0.0.1:4173"
    );
    let exposed = resp.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(exposed.contains("idempotent-replayed"), "{exposed}");
}

/// `GET /ledger?since=&startingAfter=&limit=` (the server's provider sweep): pages of the
/// charges created since a time, oldest first, `hasMore` until the last; an unknown
/// `startingAfter` ends the list rather than starting it again.
#[tokio::test]
async fn the_ledger_pages_charges_since_a_time() {
    let p = spawn(fast_config()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = p
            .charge(&key(&format!("page-{i}")), &approve("order-page"))
            .await;
        ids.push(r.json::<Charge>().await.unwrap().id);
    }
    let page = |query: String| {
        let (client, url) = (
            p.client.clone(),
            p.url(&format!("{}?{query}", paths::LEDGER)),
        );
        async move {
            let r = client.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<payonce_protocol::provider::Ledger>()
                .await
                .unwrap()
        }
    };
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = match &after {
            Some(id) => format!("since=0&limit=2&startingAfter={id}"),
            None => "since=0&limit=2".to_owned(),
        };
        let l = page(q).await;
        assert!(l.charges.len() <= 2);
        seen.extend(l.charges.iter().map(|c| c.id.clone()));
        if !l.has_more {
            break;
        }
        after = l.charges.last().map(|c| c.id.clone());
    }
    assert_eq!(seen, ids);
    let future = page("since=99999999999999".to_owned()).await;
    assert!(future.charges.is_empty() && !future.has_more);
    let unknown = page("startingAfter=ch_unknown".to_owned()).await;
    assert!(unknown.charges.is_empty());
}
