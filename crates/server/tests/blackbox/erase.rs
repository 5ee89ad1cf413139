//! `payonce-server erase-user USER` (docs/deploy.md, "Erasing a user"): afterwards no text
//! column of any table holds the user's address or the email address written in it (the
//! test reads every text column the schema has, so a column added later is read too), the
//! other users' data is untouched, and the user's paid order still replays its answer and
//! refunds.

use crate::common::{id_of, key, Backend, Checkout, Opts, TestApp, TestDb};
use crate::on_both_backends;
use payonce_protocol::provider::methods;
use serde_json::json;
use sqlx::{AnyPool, Row};

on_both_backends!(erasure_leaves_no_address_or_email_and_paid_orders_replay_and_refund);

const ADDRESS: &str = "12 Rue des Erasures, 75001 Paris";
const EMAIL: &str = "ann.erasure@example.com";
const OTHER: &str = "7 Kept Street, Leeds, ben.kept@example.com";

/// Every text column of every table of the schema, as `(table, column)`.
async fn text_columns(pool: &AnyPool, backend: Backend) -> Vec<(String, String)> {
    match backend {
        Backend::Postgres => {
            let rows = sqlx::query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND data_type IN ('text', 'character varying')",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            rows.iter().map(|r| (r.get(0), r.get(1))).collect()
        }
        Backend::Sqlite => {
            let tables = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table'")
                .fetch_all(pool)
                .await
                .unwrap();
            let mut out = Vec::new();
            for t in tables {
                let table: String = t.get(0);
                let pragma = format!("SELECT name, type FROM pragma_table_info('{table}')");
                let cols = sqlx::query(sqlx::AssertSqlSafe(pragma))
                    .fetch_all(pool)
                    .await
                    .unwrap();
                for c in cols {
                    let (name, ty): (String, String) = (c.get(0), c.get(1));
                    if ty.eq_ignore_ascii_case("TEXT") {
                        out.push((table.clone(), name));
                    }
                }
            }
            out
        }
    }
}

/// The `(table, column)`s holding `needle` anywhere in their text.
async fn holding(pool: &AnyPool, columns: &[(String, String)], needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (table, column) in columns {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE {column} LIKE '%' || $1 || '%'");
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(needle)
            .fetch_one(pool)
            .await
            .unwrap();
        if n > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

async fn erasure_leaves_no_address_or_email_and_paid_orders_replay_and_refund(backend: Backend) {
    let opts = Opts {
        jobs_interval_ms: 100,
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let (ann, ben) = (app.session("ann").await, app.session("ben").await);
    let body = |address: &str| json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }], "address": address });
    let r = app
        .create_order_raw(&ann, body(&format!("{ADDRESS}, {EMAIL}")))
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let paid = id_of(&r.json());
    let r = app.create_order_raw(&ann, body(ADDRESS)).await;
    let unpaid = id_of(&r.json());
    let r = app.create_order_raw(&ben, body(OTHER)).await;
    let bens = id_of(&r.json());
    let k = key();
    let first = app.pay(&ann, &paid, Some(&k), 1, methods::APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    app.wait_for_mails(&ann, &paid, 1).await;
    let r = app
        .pay(&ben, &bens, Some(&key()), 1, methods::APPROVE)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    app.wait_for_mails(&ben, &bens, 1).await;

    let db = app.db.as_ref().unwrap();
    let pool = db.pool().await;
    let columns = text_columns(&pool, backend).await;
    assert!(columns.len() > 20, "{columns:?}");
    // The check can fail: before the erasure both are found.
    assert!(!holding(&pool, &columns, ADDRESS).await.is_empty());
    assert!(!holding(&pool, &columns, EMAIL).await.is_empty());

    let out = erase(db, "ann");
    assert!(
        out.contains("erased user ann: 2 order addresses, 1 mails"),
        "{out}"
    );

    for needle in [ADDRESS, EMAIL, "Rue des Erasures"] {
        let left = holding(&pool, &columns, needle).await;
        assert!(left.is_empty(), "{needle} is still in {left:?}");
    }
    assert!(app.mailbox(&ann, &paid).await.is_empty());
    assert!(app.get_order(&ann, &unpaid).await.json()["address"].is_null());
    // Ben's data stays.
    assert_eq!(holding(&pool, &columns, OTHER).await, ["orders.address"]);
    assert_eq!(app.mailbox(&ben, &bens).await.len(), 1);
    let audit = "SELECT COUNT(*) FROM audit_log WHERE entity = 'user' AND entity_id = 'ann'";
    let (n,): (i64,) = sqlx::query_as(audit).fetch_one(&pool).await.unwrap();
    assert_eq!(n, 1);

    // The paid order replays byte for byte and refunds.
    let again = app.pay(&ann, &paid, Some(&k), 1, methods::APPROVE).await;
    assert_eq!((again.status, again.text()), (first.status, first.text()));
    let payment = first.json()["payment"]["id"].as_str().unwrap().to_owned();
    let r = app.refund(&ann, &payment, Some(&key())).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["payment"]["status"], "refunded");
    assert_eq!(app.ledger(&paid).await.len(), 1);
}

/// `payonce-server erase-user USER --database-url …`: its stdout.
fn erase(db: &TestDb, user: &str) -> String {
    let out = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref())
        .args(["erase-user", user, "--database-url", &db.url])
        .output()
        .expect("run erase-user");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "erase-user failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
