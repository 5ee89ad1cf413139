//! `kill -9` while concurrent pays are being committed together (on SQLite, batches of the
//! one writer, `src/store/sqlite_writer.rs`): 16 clients pay orders with one key sent twice
//! at once and a second key racing it, the server is killed with SIGKILL mid-run, and the
//! crash must leave every answered pay in the store, every charge the provider made owned
//! by a stored claim, and no order claimed twice. A restarted server then settles what was
//! in flight: one charge per order at most, every charged order paid once.

use crate::common::{
    client, id_of, key, order_state_of, spawn, Backend, Checkout, HttpApi, Opts, TestApp, TestDb,
};
use crate::on_both_backends;
use payonce_protocol::OrderStatus;
use payonce_testkit::eventually;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

on_both_backends!(kill_during_a_batch_loses_no_committed_claim);

const CLIENTS: usize = 16;
const ORDERS_PER_CLIENT: usize = 10;

/// A temp dir for the provider's state file.
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn kill_during_a_batch_loses_no_committed_claim(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let dir = TempDir(
        std::env::temp_dir().join(format!("payonce-kill-{}", uuid::Uuid::new_v4().simple())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let state_file = dir.0.join("provider.json");
    let opts = Opts {
        lease_ms: 1_500,
        in_progress_wait_ms: 0,
        extra: vec![
            "--provider-addr".into(),
            "127.0.0.1:0".into(),
            "--provider-state".into(),
            state_file.display().to_string(),
        ],
        ..Opts::default()
    };
    let first = spawn(&opts.args(&db.url), true);
    let app = Arc::new(TestApp {
        api: first.api(),
        provider: first.provider(),
        http: client(),
        _procs: vec![],
        db: None,
    });
    let pool = db.pool().await;
    sqlx::query("UPDATE catalog SET stock = 1000000")
        .execute(&pool)
        .await
        .unwrap();
    let mut work = Vec::new();
    for c in 0..CLIENTS {
        let t = app.session(&format!("kill-{c}")).await;
        for _ in 0..ORDERS_PER_CLIENT {
            let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
            work.push((c, t.clone(), id, key(), key()));
        }
    }

    // Pays: per order, its key twice at once and a second key racing it. The kill comes
    // the moment a client holds the answer that makes a third of the orders paid, with the
    // other clients' pays in flight: an answer given before its batch's commit would be
    // lost with it.
    let answered = Arc::new(AtomicUsize::new(0));
    let paid = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(std::sync::Mutex::new(first));
    let third = work.len() / 3;
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let mine: Vec<_> = work.iter().filter(|w| w.0 == c).cloned().collect();
        let (app, answered, paid, first) =
            (app.clone(), answered.clone(), paid.clone(), first.clone());
        clients.push(tokio::spawn(async move {
            let mut acked = Vec::new(); // (order, key, charge id) of every 200
            for (_, t, id, k1, k2) in mine {
                let pay = |k: String| {
                    let req = app.request(app.pay_request(&t, &id, Some(&k), 1, "pm_card_approve"));
                    async move { (k, req.send().await) }
                };
                let (a, b, c) = tokio::join!(pay(k1.clone()), pay(k1), pay(k2));
                let mut alive = true;
                for (k, r) in [a, b, c] {
                    let Ok(r) = r else {
                        alive = false; // the server is gone
                        continue;
                    };
                    let status = r.status().as_u16();
                    let body: serde_json::Value = r.json().await.unwrap_or_default();
                    if status == 200 {
                        let charge = body["payment"]["chargeId"].as_str().unwrap().to_owned();
                        acked.push((id.clone(), k, charge));
                        if paid.fetch_add(1, Ordering::SeqCst) + 1 == third {
                            first.lock().unwrap().kill(); // SIGKILL
                        }
                    } else {
                        assert!([409, 503].contains(&status), "{status} {body}");
                    }
                }
                answered.fetch_add(1, Ordering::SeqCst);
                if !alive {
                    break;
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for c in clients {
        acked.extend(c.await.unwrap());
    }
    let answered = answered.load(Ordering::SeqCst);
    assert!(answered < work.len(), "killed while pays were in flight");
    assert!(!acked.is_empty(), "some pays were answered before the kill");

    // --- what the kill left: every answered pay stored, every charge claimed ------------
    let orders_of: HashMap<_, _> = work.iter().map(|w| (w.2.clone(), w)).collect();
    for (order, k, charge) in &acked {
        let (status, stored): (String, Option<String>) = sqlx::query_as(
            "SELECT a.status, p.charge_id FROM attempts a LEFT JOIN payments p ON p.attempt_id = a.id
             WHERE a.idem_key = $1 AND a.order_id = $2",
        )
        .bind(k)
        .bind(order)
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|e| panic!("{order}: an answered pay is not in the store: {e}"));
        assert_eq!(
            (status.as_str(), stored.as_ref()),
            ("succeeded", Some(charge))
        );
    }
    let ledger = crate::common::provider_state(&state_file).charges;
    for charge in &ledger {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE provider_key = $1")
            .bind(&charge.provider_key)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 1, "charge {} has no stored claim", charge.id);
    }
    let (twice,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM (SELECT order_id FROM attempts WHERE status IN ('processing', 'succeeded')
         GROUP BY order_id HAVING COUNT(*) > 1) t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(twice, 0, "an order claimed twice");

    // --- a restart settles what was in flight -------------------------------------------
    let second = spawn(
        &Opts {
            jobs_interval_ms: 100,
            ..opts.clone()
        }
        .args(&db.url),
        true,
    );
    let app = TestApp {
        api: second.api(),
        provider: second.provider(),
        http: client(),
        _procs: vec![second],
        db: None,
    };
    let settled = eventually(Duration::from_secs(60), Duration::from_millis(100), || {
        let pool = &pool;
        async move {
            let (n,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM attempts WHERE status = 'processing'")
                    .fetch_one(pool)
                    .await
                    .unwrap();
            (n == 0).then_some(())
        }
    });
    settled
        .await
        .expect("the outbox worker settles every claim");
    for (order, w) in &orders_of {
        let charges = app.ledger(order).await;
        assert!(charges.len() <= 1, "{order}: charged {}", charges.len());
        let o = app.get_order(&w.1, order).await.json();
        let paid = order_state_of(&o).0 == OrderStatus::Paid;
        assert_eq!(paid, !charges.is_empty(), "{order}: paid iff charged: {o}");
        if paid {
            assert_eq!(o["payment"]["chargeId"], charges[0]["id"], "{order}");
        }
        assert_eq!(o["paymentInProgress"], false, "{order}");
    }
    let (payments, paid): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM payments), (SELECT COUNT(*) FROM orders WHERE status = 'paid')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(payments, paid, "one payment per paid order");
    pool.close().await;
}
