//! `--catalog FILE`: a team's own SKUs, prices, currency, stock and coupons instead of the
//! built-in demo catalog; installed once (a restart with the same file keeps the stock sold),
//! replaced by a changed file, and a bad file stops the start with the reason.

use crate::common::{client, id_of, key, spawn, Backend, Checkout, Opts, TestApp, TestDb};
use crate::on_both_backends;
use payonce_protocol::ErrorCode;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

on_both_backends!(
    a_catalog_file_replaces_the_built_in_one_and_survives_restarts,
    a_total_too_large_for_an_amount_is_a_problem_not_a_wrapped_price,
);

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    path
}

fn shop(widget_price: i64, widget_stock: i64) -> Value {
    json!({
        "items": [
            { "sku": "widget", "name": "Widget", "unitPrice": widget_price, "currency": "EUR", "stock": widget_stock },
            { "sku": "gadget", "name": "Gadget", "unitPrice": 999, "currency": "EUR", "stock": 5 }
        ],
        "coupons": [{ "code": "TEAM20", "percentOff": 20 }]
    })
}

async fn start(db: &TestDb, catalog: &Path) -> TestApp {
    let mut args = Opts::default().args(&db.url);
    args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
    args.extend(["--catalog".into(), catalog.display().to_string()]);
    let proc = spawn(&args, true);
    TestApp {
        api: proc.api.clone().expect("api url"),
        provider: proc.provider.clone().expect("provider url"),
        http: client(),
        _procs: vec![proc],
        db: None,
    }
}

async fn a_catalog_file_replaces_the_built_in_one_and_survives_restarts(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let dir =
        std::env::temp_dir().join(format!("payonce-catalog-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = write(&dir, "shop.json", &shop(1234, 2));

    let app = start(&db, &file).await;
    let skus: Vec<Value> = app
        .catalog()
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sku"].clone())
        .collect();
    assert_eq!(
        skus,
        [json!("gadget"), json!("widget")],
        "the file's SKUs and no built-in one"
    );
    let token = app.session("catalog-user").await;
    let r = app
        .create_order_raw(
            &token,
            json!({ "items": [{ "sku": "widget", "quantity": 1 }], "coupon": "TEAM20" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let order = r.json();
    assert_eq!(
        (
            order["amount"].clone(),
            order["discount"].clone(),
            order["currency"].clone()
        ),
        (json!(988), json!(246), json!("EUR")),
        "priced from the file: 1234 less 20 % rounded down"
    );
    let builtin = app
        .create_order_raw(
            &token,
            json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] }),
        )
        .await;
    assert_eq!(
        (builtin.status, builtin.code()),
        (400, ErrorCode::InvalidRequest),
        "the built-in SKU is gone"
    );
    let coupon = app
        .create_order_raw(
            &token,
            json!({ "items": [{ "sku": "widget", "quantity": 1 }], "coupon": "SAVE10" }),
        )
        .await;
    assert_eq!(
        coupon.status,
        400,
        "the built-in coupon is gone: {}",
        coupon.text()
    );
    let paid = app
        .pay(&token, &id_of(&order), Some(&key()), 1, "pm_card_approve")
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let charges = app.ledger(&id_of(&order)).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        (charges[0]["amount"].clone(), charges[0]["currency"].clone()),
        (json!(988), json!("EUR"))
    );
    assert_eq!(app.stock("widget").await, 1);
    drop(app);

    // The same file again (a restart, or another instance): the stock sold stays sold.
    let app = start(&db, &file).await;
    assert_eq!(
        app.stock("widget").await,
        1,
        "a restart with the same file must not restock"
    );
    drop(app);

    // A changed file replaces the catalog, stock included.
    let file = write(&dir, "shop.json", &shop(1500, 7));
    let app = start(&db, &file).await;
    assert_eq!(app.stock("widget").await, 7);
    let token = app.session("catalog-user").await;
    let order = app.create_order(&token, &[("widget", 2)]).await;
    assert_eq!(order["amount"], 3000);
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_catalog_file_stops_the_start_with_the_reason() {
    let dir =
        std::env::temp_dir().join(format!("payonce-catalog-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (json!({ "items": [] }), "items: at least one SKU is needed"),
        (shop(0, 1), "items[0].unitPrice must be > 0"),
        (
            shop(1_000_000_000_001, 1),
            "items[0].unitPrice must be at most 1000000000000",
        ),
        (shop(100, -1), "items[0].stock must be >= 0"),
        (
            json!({ "items": [{ "sku": "a b", "name": "x", "unitPrice": 1, "currency": "EUR", "stock": 1 }] }),
            "items[0].sku",
        ),
        (
            json!({ "items": [{ "sku": "a", "name": "x", "unitPrice": 1, "currency": "euro", "stock": 1 }] }),
            "currency",
        ),
        (
            json!({ "items": [{ "sku": "a", "name": "x", "unitPrice": 1, "currency": "EUR", "stock": 1 }], "coupons": [{ "code": "X", "percentOff": 0 }] }),
            "coupons[0].percentOff",
        ),
        (json!({ "items": [], "extra": 1 }), "unknown field `extra`"),
    ];
    for (i, (file, reason)) in cases.into_iter().enumerate() {
        let path = write(&dir, &format!("bad{i}.json"), &file);
        let db = dir.join(format!("bad{i}.db"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_payonce-server"))
            .args([
                "--dev",
                "--addr",
                "127.0.0.1:0",
                "--provider-addr",
                "127.0.0.1:0",
                "--catalog",
            ])
            .arg(&path)
            .arg("--database-url")
            .arg(format!("sqlite://{}", db.display()))
            .env_remove("DATABASE_URL")
            .output()
            .expect("run payonce-server");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} started");
        assert!(
            stderr.contains(reason) && stderr.contains("--catalog"),
            "case {i}: {stderr}"
        );
        assert!(
            !db.exists(),
            "case {i}: nothing may start before the file is checked"
        );
    }
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_payonce-server"))
        .args(["--dev", "--catalog", "/nonexistent/payonce-catalog.json"])
        .output()
        .expect("run payonce-server");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/payonce-catalog.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A price in the database larger than any file may hold (an operator's own `UPDATE`, an old
/// catalog) times a big quantity overflows `i64`: the order is refused with 400
/// `AMOUNT_TOO_LARGE`, not created at a wrapped (release build) or panicking (debug build)
/// amount, and nothing is stored.
async fn a_total_too_large_for_an_amount_is_a_problem_not_a_wrapped_price(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let pool = app.db.as_ref().expect("own db").pool().await;
    let token = app.session("big-spender").await;
    app.create_order(&token, &[("tee-classic", 1)]).await; // the built-in catalog is in
    sqlx::query("UPDATE catalog SET unit_price = $1 WHERE sku = 'tee-classic'")
        .bind(i64::MAX / 10)
        .execute(&pool)
        .await
        .unwrap();
    let body = json!({ "items": [{ "sku": "tee-classic", "quantity": 100 }] });
    let r = app.create_order_raw(&token, body).await;
    assert_eq!(
        (r.status, r.code()),
        (400, ErrorCode::AmountTooLarge),
        "{}",
        r.text()
    );
    let (orders,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(orders, 1, "only the first order was stored");
}
