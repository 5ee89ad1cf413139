//! Bad input of every kind gets a 4xx problem; a proptest fuzzer walks the OpenAPI
//! document's operations and never finds a 5xx; dev CORS; the OpenAPI document itself.

use crate::common::{id_of, key, Backend, Checkout, HttpApi, Opts, TestApp};
use crate::on_both_backends;
use payonce_protocol::ErrorCode;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const OPENAPI: &str = include_str!("../../openapi.json");

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_4xx_problems() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let pay = app.url(&format!("/orders/{id}/pay"));
    let k = key();
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, ErrorCode)> = vec![
        ("syntax", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).header("content-type", "application/json").body("{\"orderVersion\": 1,"), 400, ErrorCode::InvalidRequest),
        ("wrong type", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!({ "orderVersion": "1", "paymentMethodId": "pm_card_approve" })), 400, ErrorCode::InvalidRequest),
        ("negative version", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!({ "orderVersion": -1, "paymentMethodId": "pm_card_approve" })), 400, ErrorCode::InvalidRequest),
        ("unknown field", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve", "amount": 1 })), 400, ErrorCode::InvalidRequest),
        ("missing field", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!({ "orderVersion": 1 })), 400, ErrorCode::InvalidRequest),
        ("bad method id", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!({ "orderVersion": 1, "paymentMethodId": "pm card; DROP" })), 400, ErrorCode::InvalidRequest),
        ("no content type", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).body("{}"), 415, ErrorCode::UnsupportedMediaType),
        ("huge body", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).header("content-type", "application/json").body(format!("{{\"paymentMethodId\":\"{}\"}}", "x".repeat(64 * 1024))), 413, ErrorCode::PayloadTooLarge),
        ("bad key", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", "tiny").json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })), 400, ErrorCode::IdempotencyKeyInvalid),
        ("two keys", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).header("Idempotency-Key", key()).json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })), 400, ErrorCode::IdempotencyKeyInvalid),
        ("bad token", app.http.post(&pay).bearer_auth("v1.alice.1.deadbeef").header("Idempotency-Key", &k).json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })), 401, ErrorCode::Unauthenticated),
        ("basic auth", app.http.post(&pay).header("authorization", "Basic YWxpY2U6eA==").header("Idempotency-Key", &k).json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })), 401, ErrorCode::Unauthenticated),
        ("bad session user", app.http.post(app.url("/dev/sessions")).json(&json!({ "userId": "alice smith" })), 400, ErrorCode::InvalidRequest),
        ("unknown sku", app.http.post(app.url("/orders")).bearer_auth(&t).json(&json!({ "items": [{ "sku": "nope", "quantity": 1 }] })), 400, ErrorCode::InvalidRequest),
        ("zero quantity", app.http.post(app.url("/orders")).bearer_auth(&t).json(&json!({ "items": [{ "sku": "tee-classic", "quantity": 0 }] })), 400, ErrorCode::InvalidRequest),
        ("huge quantity", app.http.post(app.url("/orders")).bearer_auth(&t).json(&json!({ "items": [{ "sku": "tee-classic", "quantity": 4294967296u64 }] })), 400, ErrorCode::InvalidRequest),
        ("no route", app.http.get(app.url("/nope")), 404, ErrorCode::NotFound),
        ("wrong method", app.http.delete(app.url("/orders")), 405, ErrorCode::MethodNotAllowed),
        ("pay body as an array", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).json(&json!([1, "pm_card_approve"])), 400, ErrorCode::InvalidRequest),
        ("order body as an array", app.http.post(app.url("/orders")).bearer_auth(&t).json(&json!([[["tee-classic", 2]], "SAVE10", "1 Main St"])), 400, ErrorCode::InvalidRequest),
        ("cart line as an array", app.http.post(app.url("/orders")).bearer_auth(&t).json(&json!({ "items": [["tee-classic", 2]] })), 400, ErrorCode::InvalidRequest),
        ("cancel body a string", app.http.post(app.url(&format!("/orders/{id}/payment-attempts/cancel"))).bearer_auth(&t).json(&json!(k)), 400, ErrorCode::InvalidRequest),
        ("version with a fraction", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).header("content-type", "application/json").body(r#"{"orderVersion": 1.5, "paymentMethodId": "pm_card_approve"}"#), 400, ErrorCode::InvalidRequest),
        ("quantity with a fraction", app.http.post(app.url("/orders")).bearer_auth(&t).header("content-type", "application/json").body(r#"{"items": [{"sku": "tee-classic", "quantity": 1.5}]}"#), 400, ErrorCode::InvalidRequest),
        ("unknown fault", app.http.post(&pay).bearer_auth(&t).header("Idempotency-Key", &k).header("Payonce-Dev-Fault", "explode").json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })), 400, ErrorCode::InvalidRequest),
    ];
    for (name, req, status, code) in cases {
        let r = app.send(req).await;
        assert!(
            r.header("x-request-id").is_some(),
            "{name}: every answer names its request"
        );
        assert_eq!((r.status, r.code()), (status, code), "{name}: {}", r.text());
        assert!(
            r.is_problem(),
            "{name}: content-type {:?}",
            r.header("content-type")
        );
        assert_eq!(r.json()["status"], status, "{name}");
        // A body that is not an object is told the shape it must have.
        if name.contains("array") || name.contains("a string") {
            let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
            assert!(detail.contains("must be a JSON object"), "{name}: {detail}");
        }
    }
    assert!(
        app.ledger(&id).await.is_empty(),
        "no bad request charged anything"
    );
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&app.db_pool().await)
        .await
        .unwrap();
    assert_eq!(orders, 1, "no bad request created an order");
}

on_both_backends!(a_nul_in_any_string_is_a_400_problem_never_a_500);

/// PostgreSQL text cannot hold U+0000, SQLite can: a NUL must be refused at the edge with the
/// same 400 on both, in every string that reaches the store (body members, path ids, query
/// parameters, webhook ids), and nothing may change.
async fn a_nul_in_any_string_is_a_400_problem_never_a_500(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let order = app.create_order(&t, &[("tee-classic", 1)]).await;
    let id = id_of(&order);
    let pay_body = json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" });
    let tee = json!([{ "sku": "tee-classic", "quantity": 1 }]);
    let event = |event_id: &str, provider_key: &str| {
        let body = serde_json::to_vec(&json!({
            "id": event_id, "type": "charge.succeeded", "created": 1,
            "charge": {
                "id": "ch_1", "providerKey": provider_key, "amount": 2500, "currency": "USD",
                "paymentMethodId": "pm_card_approve", "orderId": id, "status": "succeeded", "createdAt": 1
            }
        }))
        .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let sig =
            payonce_mock_provider::sign(payonce_mock_provider::DEFAULT_WEBHOOK_SECRET, now, &body);
        app.http
            .post(app.url("/webhooks/provider"))
            .header("content-type", "application/json")
            .header("Payonce-Signature", sig)
            .body(body)
    };
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "create coupon",
            app.http
                .post(app.url("/orders"))
                .bearer_auth(&t)
                .json(&json!({ "items": tee, "coupon": "SAVE\u{0}10" })),
        ),
        (
            "create address",
            app.http
                .post(app.url("/orders"))
                .bearer_auth(&t)
                .json(&json!({ "items": tee, "address": "1 Main St\u{0}" })),
        ),
        (
            "cart coupon",
            app.http
                .patch(app.url(&format!("/orders/{id}/cart")))
                .bearer_auth(&t)
                .json(&json!({ "coupon": "\u{0}" })),
        ),
        (
            "cart address",
            app.http
                .patch(app.url(&format!("/orders/{id}/cart")))
                .bearer_auth(&t)
                .json(&json!({ "address": "a\u{0}b" })),
        ),
        (
            "get id",
            app.http.get(app.url("/orders/ord_%00")).bearer_auth(&t),
        ),
        (
            "cart id",
            app.http
                .patch(app.url("/orders/%00/cart"))
                .bearer_auth(&t)
                .json(&json!({ "coupon": "" })),
        ),
        (
            "pay id",
            app.http
                .post(app.url("/orders/ord%00x/pay"))
                .bearer_auth(&t)
                .header("Idempotency-Key", key())
                .json(&pay_body),
        ),
        (
            "cancel id",
            app.http
                .post(app.url("/orders/%00/payment-attempts/cancel"))
                .bearer_auth(&t)
                .json(&json!({ "key": key() })),
        ),
        (
            "refund id",
            app.http
                .post(app.url("/payments/pay_%00/refund"))
                .bearer_auth(&t)
                .header("Idempotency-Key", key()),
        ),
        (
            "mailbox orderId",
            app.http
                .get(app.url("/dev/mailbox?orderId=ord_%00"))
                .bearer_auth(&t),
        ),
        ("webhook event id", event("evt_\u{0}", "pk_1")),
        ("webhook provider key", event("evt_nul_key", "pk_\u{0}")),
    ];
    for (name, req) in cases {
        let r = app.send(req).await;
        assert_eq!(
            (r.status, r.code()),
            (400, ErrorCode::InvalidRequest),
            "{name}: {}",
            r.text()
        );
        assert!(r.is_problem(), "{name}");
    }
    // Nothing changed, and the server still answers normally.
    let now = app.get_order(&t, &id).await;
    assert_eq!(now.status, 200);
    assert_eq!(now.json(), order);
    assert_eq!(
        app.pay(&t, &id, Some(&key()), 1, "pm_card_approve")
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_features_are_refused_without_dev_mode() {
    let Some(app) = TestApp::spawn_with(
        Backend::Sqlite,
        Opts {
            dev: false,
            ..Opts::default()
        },
    )
    .await
    else {
        return;
    };
    let r = app
        .send(
            app.http
                .post(app.url("/dev/sessions"))
                .json(&json!({ "userId": "alice" })),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, ErrorCode::DevModeRequired));
    // A token signed with the shared secret still authenticates; the fault header does not pass.
    let r = app
        .send(
            app.http
                .post(app.url("/orders/x/pay"))
                .header("Payonce-Dev-Fault", "drop-response")
                .header(
                    "authorization",
                    format!("Bearer {}", sign_like_server("alice")),
                )
                .header("Idempotency-Key", key())
                .json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, ErrorCode::DevModeRequired));
    let r = app
        .send(
            app.http
                .post(app.url("/orders/x/pay"))
                .header("Payonce-Dev-Fault", "crash-after-charge")
                .bearer_auth(sign_like_server("alice"))
                .header("Idempotency-Key", key())
                .json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" })),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, ErrorCode::DevModeRequired));
    let r = app
        .send(
            app.http
                .get(app.url("/dev/mailbox?orderId=x"))
                .bearer_auth(sign_like_server("alice")),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, ErrorCode::DevModeRequired));
    // A server asked to arm failpoints without --dev refuses to start at all.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_payonce-server"))
        .args(["--addr", "127.0.0.1:0", "--provider-addr", "127.0.0.1:0"])
        .args([
            "--database-url",
            "sqlite:///nonexistent-dir-never-created/x.db",
        ])
        .args(["--failpoint", "after-claim"])
        .env_remove("PAYONCE_FAILPOINTS")
        .output()
        .expect("run payonce-server");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("require --dev"), "{err}");
    assert!(out.stdout.is_empty(), "no listener was started");
    // No CORS outside dev mode.
    let r = app
        .send(
            app.http
                .request(reqwest::Method::OPTIONS, app.url("/orders"))
                .header("origin", "http://localhost:5173")
                .header("access-control-request-method", "POST"),
        )
        .await;
    assert_eq!(r.header("access-control-allow-origin"), None);
}

/// The server's token format, rebuilt here so a server without dev sessions can be called.
fn sign_like_server(user: &str) -> String {
    use hmac::{KeyInit, Mac};
    // Within the server's --session-max-lifetime-secs (a day by default).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let exp = now.unwrap().as_secs() + 3600;
    let payload = format!("v1.{user}.{exp}");
    let mut mac =
        <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(crate::common::SECRET.as_bytes())
            .unwrap();
    mac.update(payload.as_bytes());
    let tag: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{payload}.{tag}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_cors_allows_localhost_pages_with_credentials() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let origin = "http://localhost:5173";
    let r = app
        .send(
            app.http
                .request(
                    reqwest::Method::OPTIONS,
                    app.url(&format!("/orders/{id}/pay")),
                )
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header(
                    "access-control-request-headers",
                    "content-type,idempotency-key",
                ),
        )
        .await;
    assert!(r.status < 300, "preflight: {} {}", r.status, r.text());
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some(origin)
    );
    assert_eq!(
        r.header("access-control-allow-credentials").as_deref(),
        Some("true")
    );
    let allowed = r
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("idempotency-key") && allowed.contains("content-type"),
        "{allowed}"
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap_or_default()
        .contains("POST"));

    // The actual request: the page can read the replay and retry headers.
    let k = key();
    app.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    let r = app
        .call(
            app.pay_request(&t, &id, Some(&k), 1, "pm_card_approve")
                .header("origin", "http://127.0.0.1:4173"),
        )
        .await;
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("http://127.0.0.1:4173")
    );
    assert_eq!(
        r.header("access-control-allow-credentials").as_deref(),
        Some("true")
    );
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        exposed.contains("idempotent-replayed") && exposed.contains("retry-after"),
        "{exposed}"
    );
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));

    // A foreign origin gets no CORS grant.
    let r = app
        .send(
            app.http
                .request(reqwest::Method::OPTIONS, app.url("/orders"))
                .header("origin", "http://evil.example")
                .header("access-control-request-method", "POST"),
        )
        .await;
    assert_eq!(r.header("access-control-allow-origin"), None);
}

/// `(method, path)` of every operation in the document.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            ops.push((method.clone(), path.clone()));
        }
    }
    ops
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_and_lists_every_route() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let r = app.send(app.http.get(app.url("/openapi.json"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        OPENAPI,
        "the served document is the one in the repository"
    );
    let doc = r.json();
    let ops = operations(&doc);
    for (method, path) in payonce_server::ROUTES {
        assert!(
            ops.contains(&(method.to_string(), path.to_string())),
            "{method} {path} missing from openapi.json"
        );
    }
    // And every documented operation is routed (not a 404/405 fallback), but Stripe's
    // webhook route: mounted only with `--provider stripe` (stripe_edges.rs, startup.rs).
    for (method, path) in &ops {
        if path == "/webhooks/stripe" {
            continue;
        }
        let url = app.url(&path.replace("{id}", "ord_x"));
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = app.send(app.http.request(m, url)).await;
        assert!(
            // (`/metrics` answers text, not JSON: only problems have a code)
            !(r.is_problem()
                && [ErrorCode::NotFound, ErrorCode::MethodNotAllowed].contains(&r.code()))
                || r.status == 200,
            "{method} {path}: {}",
            r.text()
        );
    }
}

// --- the fuzzer ------------------------------------------------------------------------

fn json_value() -> impl Strategy<Value = Value> {
    let names = prop_oneof![
        Just("items".to_owned()),
        Just("sku".to_owned()),
        Just("quantity".to_owned()),
        Just("orderVersion".to_owned()),
        Just("paymentMethodId".to_owned()),
        Just("key".to_owned()),
        Just("coupon".to_owned()),
        Just("address".to_owned()),
        Just("userId".to_owned()),
        "[a-zA-Z]{1,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..5).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        Just(Value::from("tee-classic")),
        Just(Value::from("pm_card_approve")),
        Just(Value::from("SAVE10")),
        ".{0,24}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(names.clone(), inner, 0..4)
                .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects with the API's own members, valid or not, so cases get past the JSON layer and
/// into the rules.
fn shaped_body(preferred: u8) -> impl Strategy<Value = Value> {
    let version = prop_oneof![4 => Just(json!(1)), 1 => Just(json!(2)), 1 => json_value()];
    let method = prop_oneof![
        Just(json!("pm_card_approve")),
        Just(json!("pm_card_decline")),
        Just(json!("pm_card_transient")),
        json_value()
    ];
    let sku = prop_oneof![
        Just(json!("tee-classic")),
        Just(json!("poster-limited")),
        json_value()
    ];
    let quantity = prop_oneof![(1u32..5).prop_map(|q| json!(q)), json_value()];
    let line = (sku, quantity).prop_map(|(s, q)| json!({ "sku": s, "quantity": q }));
    let items = proptest::collection::vec(line, 0..3).prop_map(Value::Array);
    let key = prop_oneof!["[A-Za-z0-9-]{16,40}".prop_map(Value::from), json_value()];
    // Mostly the exact member set of one operation; sometimes any mix.
    let mask = prop_oneof![3 => Just(preferred), 1 => any::<u8>()];
    (version, method, items, key, mask).prop_map(|(v, m, items, k, mask)| {
        let mut o = serde_json::Map::new();
        let members = [
            ("orderVersion", v),
            ("paymentMethodId", m),
            ("items", items),
            ("key", k),
            ("coupon", json!("SAVE10")),
            ("userId", json!("fuzzer")),
        ];
        for (bit, (name, value)) in members.into_iter().enumerate() {
            if mask & (1 << bit) != 0 {
                o.insert(name.to_owned(), value);
            }
        }
        Value::Object(o)
    })
}

#[derive(Debug, Clone)]
enum Body {
    None,
    Json(Value),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Case {
    op: usize,
    id: Option<String>,
    auth: u8,
    key: Option<String>,
    body: Body,
    content_type: Option<&'static str>,
}

/// The member set (bits of [`shaped_body`]) of the operation's own request body.
fn preferred_members(method: &str, path: &str) -> u8 {
    match (method, path) {
        ("post", p) if p.ends_with("/pay") => 0b11,
        ("post", "/orders") => 0b10100,
        ("patch", _) => 0b10100,
        ("post", p) if p.ends_with("/cancel") => 0b1000,
        ("post", "/dev/sessions") => 0b100000,
        _ => 0,
    }
}

/// Valid choices are weighted up so that many cases reach the rules behind the extractors.
fn case(ops: Vec<(String, String)>) -> impl Strategy<Value = Case> {
    // Operations with a request body have the most to get wrong: three times the weight.
    let weighted: Vec<usize> = (0..ops.len())
        .flat_map(|i| {
            let n = if preferred_members(&ops[i].0, &ops[i].1) == 0 {
                1
            } else {
                3
            };
            std::iter::repeat_n(i, n)
        })
        .collect();
    proptest::sample::select(weighted).prop_flat_map(move |op| {
        let preferred = preferred_members(&ops[op].0, &ops[op].1);
        let body = prop_oneof![
            1 => Just(Body::None),
            1 => json_value().prop_map(Body::Json),
            4 => shaped_body(preferred).prop_map(Body::Json),
            1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Body::Bytes),
        ];
        let key = prop_oneof![
            1 => Just(None),
            4 => "[A-Za-z0-9-]{16,40}".prop_map(Some),
            1 => ".{0,30}".prop_map(Some),
            1 => Just(Some(String::new())),
        ];
        let id = prop_oneof![
            4 => Just(None),
            1 => "[A-Za-z0-9_.~-]{1,40}".prop_map(Some),
            1 => Just(Some("%FF%FE".to_owned())),
            1 => Just(Some("..".to_owned())),
        ];
        let auth = prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
        let ct = prop_oneof![
            4 => Just(Some("application/json")),
            1 => Just(None),
            1 => Just(Some("text/plain")),
            1 => Just(Some("application/json; charset=utf-8")),
        ];
        (Just(op), id, auth, key, body, ct).prop_map(|(op, id, auth, key, body, content_type)| {
            Case {
                op,
                id,
                auth,
                key,
                body,
                content_type,
            }
        })
    })
}

#[test]
fn fuzzing_every_documented_operation_finds_no_5xx() {
    let rt = rt();
    let Some(app) = rt.block_on(TestApp::spawn(Backend::Sqlite)) else {
        return;
    };
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let ops = operations(&doc);
    let (token, order) = rt.block_on(async {
        let t = app.session("fuzzer").await;
        let o = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        (t, o)
    });
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    // A fixed seed: the same 1,500 cases on every run, so a failure (or a generator that
    // stops reaching the rules) reproduces instead of flaking.
    let mut runner = TestRunner::new(Config {
        cases: 1500,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x7061_796f_6e63_6531),
        ..Config::default()
    });
    let result = runner.run(&case(ops.clone()), |c| {
        let (method, template) = &ops[c.op];
        // Half the time the real order, so the fuzzer gets past the 404.
        let id = c.id.clone().unwrap_or_else(|| order.clone());
        let url = app.url(&template.replace("{id}", &id));
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut req = app.http.request(m, url);
        req = match c.auth {
            0 => req.bearer_auth(&token),
            1 => req.bearer_auth("v1.fuzzer.1.bad"),
            _ => req,
        };
        if let Some(k) = &c.key {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(k) {
                req = req.header("Idempotency-Key", v);
            }
        }
        if let Some(ct) = c.content_type {
            req = req.header("content-type", ct);
        }
        req = match &c.body {
            Body::None => req,
            Body::Json(v) => req.body(serde_json::to_vec(v).unwrap()),
            Body::Bytes(b) => req.body(b.clone()),
        };
        let r = rt.block_on(app.send(req));
        *statuses.lock().unwrap().entry(r.status).or_default() += 1;
        if r.status >= 500 {
            return Err(TestCaseError::fail(format!(
                "{method} {template}: {} {}",
                r.status,
                r.text()
            )));
        }
        if r.status >= 400 && !r.is_problem() {
            return Err(TestCaseError::fail(format!(
                "{method} {template}: {} is not a problem: {}",
                r.status,
                r.text()
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("fuzzer found a failure: {e}");
    }
    // The fuzzer must reach the rules, not only bounce off the JSON layer.
    let statuses = statuses.into_inner().unwrap();
    let ok = statuses
        .iter()
        .filter(|(s, _)| **s < 300)
        .map(|(_, n)| n)
        .sum::<usize>();
    let deep = [402u16, 409, 422]
        .iter()
        .filter_map(|s| statuses.get(s))
        .sum::<usize>();
    assert!(
        ok >= 50 && deep >= 3,
        "the fuzzer stayed shallow: {statuses:?}"
    );
    eprintln!("fuzzer statuses: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_config_names_the_provider_and_the_faults() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let r = app.send(app.http.get(app.url("/dev/config"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let cfg = r.json();
    assert_eq!(cfg["providerUrl"], app.provider.as_str());
    assert_eq!(
        cfg["faults"],
        json!(["drop-response", "crash-after-charge"])
    );
    // The URL is the provider that really charges: its ledger answers there.
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    assert_eq!(
        app.pay(&t, &id, Some(&key()), 1, "pm_card_approve")
            .await
            .status,
        200
    );
    let charges = crate::common::ledger(&app.http, cfg["providerUrl"].as_str().unwrap(), &id).await;
    assert_eq!(charges.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_dir_serves_the_page_beside_the_api() {
    let dir =
        std::env::temp_dir().join(format!("payonce-static-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>checkout</h1>").unwrap();
    let opts = Opts {
        extra: vec!["--static-dir".into(), dir.display().to_string()],
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, opts).await else {
        return;
    };
    let r = app.send(app.http.get(app.url("/"))).await;
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>checkout</h1>"));
    let r = app.send(app.http.get(app.url("/nope.js"))).await;
    assert_eq!(
        (r.status, r.code()),
        (404, ErrorCode::NotFound),
        "a missing file is a problem too"
    );
    assert_eq!(
        app.send(app.http.get(app.url("/catalog"))).await.status,
        200,
        "API routes win"
    );
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_dir_hides_dotfiles_and_symlinks_out_of_the_folder() {
    let base =
        std::env::temp_dir().join(format!("payonce-static-{}", uuid::Uuid::new_v4().simple()));
    let dir = base.join("site");
    let outside = base.join("secret");
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>checkout</h1>").unwrap();
    std::fs::write(dir.join("assets/app.js"), "ok()").unwrap();
    std::fs::write(dir.join(".env"), "DATABASE_URL=secret").unwrap();
    std::fs::write(dir.join(".git/config"), "[core]").unwrap();
    std::fs::write(outside.join("passwd"), "root:x:0:0").unwrap();
    std::os::unix::fs::symlink(outside.join("passwd"), dir.join("passwd")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("out")).unwrap();
    std::os::unix::fs::symlink(dir.join("assets/app.js"), dir.join("app.js")).unwrap();
    let opts = Opts {
        extra: vec!["--static-dir".into(), dir.display().to_string()],
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    for path in [
        "/.env",
        "/.git/config",
        "/%2egit/config",
        "/assets/../.env",
        "/passwd",
        "/out/passwd",
        "/out/",
    ] {
        let r = app.send(app.http.get(app.url(path))).await;
        assert_eq!((r.status, r.code()), (404, ErrorCode::NotFound), "{path}");
        assert!(
            !r.text().contains("secret") && !r.text().contains("root:"),
            "{path}"
        );
    }
    for (path, body) in [
        ("/", "<h1>checkout</h1>"),
        ("/assets/app.js", "ok()"),
        ("/app.js", "ok()"),
    ] {
        let r = app.send(app.http.get(app.url(path))).await;
        assert_eq!((r.status, r.text().as_str()), (200, body), "{path}");
    }
    drop(app);
    let _ = std::fs::remove_dir_all(&base);
}

/// Outside `--dev`, `--cors-origin` grants exactly the listed origins: the preflight allows
/// exactly the SDK's request headers (no dev fault header), credentials only with
/// `--cors-credentials`, and the answer exposes the headers a client acts on. Another origin,
/// even a local one, gets nothing. (A real browser paying through it: scripts/cors-browser.sh.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_origins_outside_dev_are_granted_exactly() {
    let shop = "https://shop.example";
    for credentials in [false, true] {
        let mut extra = vec!["--cors-origin".into(), shop.into()];
        extra.extend(["--cors-origin".into(), "http://127.0.0.1:5173".into()]);
        if credentials {
            extra.push("--cors-credentials".into());
        }
        let opts = Opts {
            dev: false,
            extra,
            ..Opts::default()
        };
        let app = TestApp::spawn_with(Backend::Sqlite, opts)
            .await
            .expect("app");
        let preflight = |origin: &str| {
            app.http
                .request(reqwest::Method::OPTIONS, app.url("/orders/ord_x/pay"))
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header(
                    "access-control-request-headers",
                    "content-type,idempotency-key,authorization",
                )
        };
        let r = app.send(preflight(shop)).await;
        assert!(r.status < 300, "preflight: {} {}", r.status, r.text());
        assert_eq!(
            r.header("access-control-allow-origin").as_deref(),
            Some(shop)
        );
        assert_eq!(
            r.header("access-control-allow-credentials").as_deref(),
            credentials.then_some("true"),
            "credentials only with --cors-credentials"
        );
        let mut allowed: Vec<String> = r
            .header("access-control-allow-headers")
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        allowed.sort();
        assert_eq!(
            allowed,
            [
                "authorization",
                "content-type",
                "idempotency-key",
                "x-request-id"
            ]
        );
        // The answer itself: the page may read what a client acts on.
        let r = app
            .send(app.http.get(app.url("/catalog")).header("origin", shop))
            .await;
        assert_eq!(
            r.header("access-control-allow-origin").as_deref(),
            Some(shop)
        );
        let mut exposed: Vec<String> = r
            .header("access-control-expose-headers")
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        exposed.sort();
        assert_eq!(
            exposed,
            [
                "idempotency-key-retention",
                "idempotent-replayed",
                "retry-after",
                "x-request-id"
            ]
        );
        for other in [
            "https://shop.example.evil",
            "http://shop.example",
            "http://localhost:5173",
        ] {
            let r = app.send(preflight(other)).await;
            assert_eq!(r.header("access-control-allow-origin"), None, "{other}");
        }
    }
}

/// JSON has one number type: `1.0` and `1e0` are the whole number 1 (some JSON writers give
/// every number a fraction). An order of 2.0 tees paid at version 1.0 is one charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_numbers_written_with_a_fraction_are_whole_numbers() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let t = app.session("alice").await;
    let r = app
        .http
        .post(app.url("/orders"))
        .bearer_auth(&t)
        .header("content-type", "application/json")
        .body(r#"{"items": [{"sku": "tee-classic", "quantity": 2.0}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let order: Value = r.json().await.unwrap();
    assert_eq!(order["items"][0]["quantity"], 2);
    let id = id_of(&order);
    let r = app
        .http
        .post(app.url(&format!("/orders/{id}/pay")))
        .bearer_auth(&t)
        .header("Idempotency-Key", key())
        .header("content-type", "application/json")
        .body(r#"{"orderVersion": 1e0, "paymentMethodId": "pm_card_approve"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(
        crate::common::ledger(&app.http, &app.provider, &id)
            .await
            .len(),
        1
    );
}
