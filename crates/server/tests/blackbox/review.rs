//! The operator's resolve of a review flag (`POST /admin/reviews/{order_id}/resolve`,
//! docs/operating.md, runbook "a review flag"), in process with a manual clock and the mock
//! provider behind a switch: a charge that landed while its answer and every look-up failed is
//! flagged by reconciliation; resolving it while the provider still cannot tell is 409
//! `REVIEW_UNRESOLVED` and changes nothing; once the provider answers, the same resolve marks
//! the order paid with the one charge the provider holds, and the note is journaled.

use crate::inproc::{provider, InProc};
use crate::journal::{token_file, OPERATOR_TOKEN};
use crate::on_both_backends;
use axum::body::Body;
use axum::http::Request;
use payonce_protocol::admin::{paths as admin, resolve};
use payonce_protocol::body::paths;
use payonce_protocol::ErrorCode;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{key, ledger, Backend, Checkout, Req, TestDb};

on_both_backends!(
    a_flagged_order_is_resolved_from_the_providers_answer_and_journaled,
    a_resolve_needs_the_operator_credential_and_a_note,
    a_dev_server_hands_the_demo_an_operator_token_and_a_customer_still_gets_403,
);

/// A proxy in front of the mock provider that, while `down` is set, forwards a charge but
/// loses its answer (502) and answers every other call 503: the provider "cannot tell".
async fn switch(upstream: &str) -> (String, Arc<AtomicBool>) {
    use axum::extract::State;
    use axum::response::IntoResponse;
    type Up = (String, Arc<AtomicBool>, reqwest::Client);
    let down = Arc::new(AtomicBool::new(true));
    async fn forward(
        State((up, down, http)): State<Up>,
        req: Request<Body>,
    ) -> axum::response::Response {
        let (parts, body) = req.into_parts();
        let is_down = down.load(Ordering::SeqCst) && parts.uri.path() != "/ledger";
        let charge = parts.method == "POST" && parts.uri.path() == "/charges";
        if is_down && !charge {
            return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = http.request(parts.method, format!("{up}{target}"));
        for (name, value) in parts.headers.iter().filter(|(n, _)| *n != "host") {
            out = out.header(name, value);
        }
        let Ok(res) = out.body(body).send().await else {
            return axum::http::StatusCode::BAD_GATEWAY.into_response();
        };
        if is_down {
            // The charge landed; its answer is lost.
            return axum::http::StatusCode::BAD_GATEWAY.into_response();
        }
        let (status, headers) = (res.status(), res.headers().clone());
        let bytes = res.bytes().await.unwrap_or_default();
        (status, headers, bytes).into_response()
    }
    let state = (upstream.to_owned(), down.clone(), crate::common::client());
    let router = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, down)
}

fn resolve_req(order: &str, note: &str) -> Req {
    Req::post(admin::resolve(order).as_str())
        .bearer(OPERATOR_TOKEN)
        .json(json!({ resolve::NOTE: note }))
}

async fn flagged(s: &InProc, order: &str) -> usize {
    let r = s
        .call(Req::get(admin::REVIEWS).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["orderId"] == order)
        .count()
}

async fn a_flagged_order_is_resolved_from_the_providers_answer_and_journaled(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let upstream = provider().await;
    let (url, down) = switch(&upstream).await;
    let (_dir, file) = token_file();
    let flags = [
        "--operator-token-file",
        file.as_str(),
        "--reconcile-after-ms",
        "60000",
    ];
    let s = InProc::start(&db, &url, &flags).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 202, "{}", r.text());
    payonce_server::run_jobs(&s.state).await;
    s.advance(Duration::from_millis(60_001));
    payonce_server::run_jobs(&s.state).await;
    assert_eq!(
        flagged(&s, &id).await,
        1,
        "reconciliation flagged the attempt"
    );
    let http = crate::common::client();
    assert_eq!(
        ledger(&http, &upstream, &id).await.len(),
        1,
        "the charge landed"
    );

    // The provider still cannot tell: nothing changes.
    let r = s.call(resolve_req(&id, "customer called; checking")).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.code(), ErrorCode::ReviewUnresolved);
    assert_eq!(flagged(&s, &id).await, 1, "the flag stays");
    let order = s.call(Req::get(paths::order(&id)).bearer(&t)).await.json();
    assert_eq!(order["status"], "unpaid", "{order:#}");

    // It answers again: the one charge it holds pays the order, nothing is charged again.
    down.store(false, Ordering::SeqCst);
    s.advance(Duration::from_secs(60));
    let r = s
        .call(resolve_req(&id, "provider back; charge <b>confirmed</b>"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(
        body[resolve::RESOLVED][0][resolve::OUTCOME],
        resolve::PAID,
        "{body:#}"
    );
    assert_eq!(flagged(&s, &id).await, 0, "the flag is cleared");
    let order = s.call(Req::get(paths::order(&id)).bearer(&t)).await.json();
    assert_eq!(order["status"], "paid", "{order:#}");
    let charges = ledger(&http, &upstream, &id).await;
    assert_eq!(charges.len(), 1, "one charge: {charges:#?}");
    assert_eq!(charges[0]["status"], "succeeded");

    // Both resolves are in the order's timeline, the operator's, with their notes.
    let r = s
        .call(Req::get(admin::timeline(&id).as_str()).bearer(OPERATOR_TOKEN))
        .await;
    let tl: Value = r.json();
    let actions: Vec<&Value> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "operator" && e["kind"] == "operator_action")
        .collect();
    assert_eq!(actions.len(), 2, "{tl:#}");
    let first = &actions[0]["detail"]["resolve"];
    assert_eq!(first[resolve::NOTE], "customer called; checking");
    assert!(first[resolve::UNRESOLVED].is_string(), "{first:#}");
    let second = &actions[1]["detail"]["resolve"];
    assert_eq!(
        second[resolve::NOTE],
        "provider back; charge <b>confirmed</b>"
    );
    assert_eq!(
        second[resolve::RESOLVED][0][resolve::OUTCOME],
        resolve::PAID
    );
    // The resolve's provider call is journaled as the operator's.
    assert!(
        tl["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "operator" && e["kind"] == "provider_call"),
        "{tl:#}"
    );
}

async fn a_resolve_needs_the_operator_credential_and_a_note(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (_dir, file) = token_file();
    let s = InProc::start(
        &db,
        &provider().await,
        &["--operator-token-file", file.as_str()],
    )
    .await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let path = admin::resolve(&id);
    let body = json!({ resolve::NOTE: "n" });
    let none = s.call(Req::post(path.as_str()).json(body.clone())).await;
    assert_eq!(none.status, 401, "{}", none.text());
    assert_eq!(none.code(), ErrorCode::Unauthenticated);
    let customer = s.call(Req::post(path.as_str()).bearer(&t).json(body)).await;
    assert_eq!(customer.status, 403, "{}", customer.text());
    assert_eq!(customer.code(), ErrorCode::OperatorRequired);
    for bad in [
        json!({}),
        json!({ "note": "" }),
        json!({ "note": 1 }),
        json!({ "note": "n", "x": 1 }),
    ] {
        let r = s
            .call(
                Req::post(path.as_str())
                    .bearer(OPERATOR_TOKEN)
                    .json(bad.clone()),
            )
            .await;
        assert_eq!(r.code(), ErrorCode::InvalidRequest, "{bad}: {}", r.text());
    }
    // An order without a flag: nothing to resolve.
    let r = s.call(resolve_req(&id, "n")).await;
    assert_eq!(r.code(), ErrorCode::ReviewUnresolved, "{}", r.text());
    let r = s.call(resolve_req("ord_missing", "n")).await;
    assert_eq!(r.code(), ErrorCode::OrderNotFound, "{}", r.text());
}

/// In dev mode the demo's "what happened?" page gets a dev operator token from the server
/// (`GET /dev/operator`); it opens `/admin/`, while the customer's session still gets 403.
async fn a_dev_server_hands_the_demo_an_operator_token_and_a_customer_still_gets_403(
    backend: Backend,
) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let s = InProc::start(&db, &provider().await, &[]).await;
    let t = s.session("alice").await;
    let r = s.call(Req::get(admin::DEV_OPERATOR)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let token = r.json()["token"].as_str().unwrap().to_owned();
    let ok = s.call(Req::get(admin::REVIEWS).bearer(&token)).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let customer = s.call(Req::get(admin::REVIEWS).bearer(&t)).await;
    assert_eq!(customer.code(), ErrorCode::OperatorRequired);
    let none = s.call(Req::get(admin::REVIEWS)).await;
    assert_eq!(none.code(), ErrorCode::Unauthenticated);
}
