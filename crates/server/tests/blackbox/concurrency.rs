//! Races: the charge-once guarantee under concurrency, in one process and across three.

use crate::common::{
    assert_agree, client, id_of, key, ledger, spawn, Backend, Checkout, Opts, Proc, TestApp, TestDb,
};
use crate::on_both_backends;
use futures_util::future::join_all;
use payonce_protocol::{AttemptStatus, ErrorCode};

const APPROVE: &str = "pm_card_approve";

on_both_backends!(
    fifty_concurrent_pays_with_one_key_charge_once,
    two_keys_for_one_order_charge_once,
    many_orders_sharing_skus_pay_concurrently,
    cancel_racing_pay_never_disagrees,
    duplicates_of_a_new_key_never_spend_new_attempt_tokens,
);

async fn fifty_concurrent_pays_with_one_key_charge_once(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let answers =
        join_all((0..50).map(|_| app.call(app.pay_request(&t, &id, Some(&k), 1, APPROVE)))).await;
    assert_agree(&answers);
    assert_eq!(
        app.ledger(&id).await.len(),
        1,
        "exactly one charge in the provider ledger"
    );
    assert_eq!(app.stock("tee-classic").await, 999);
}

async fn two_keys_for_one_order_charge_once(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    for _ in 0..5 {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let (k1, k2) = (key(), key());
        let (a, b) = tokio::join!(
            app.call(app.pay_request(&t, &id, Some(&k1), 1, APPROVE)),
            app.call(app.pay_request(&t, &id, Some(&k2), 1, APPROVE)),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "{} / {}", a.text(), b.text());
        let (winner, loser) = if a.status == 409 { (&b, &a) } else { (&a, &b) };
        // Still running when the loser claimed: busy; settled already: paid, with the
        // winner's payment as the receipt.
        match loser.code() {
            ErrorCode::PaymentAlreadyActive => {}
            ErrorCode::OrderAlreadyPaid => assert_eq!(
                loser.json()["payment"],
                winner.json()["payment"],
                "{}",
                loser.text()
            ),
            other => panic!("the loser got {other:?}: {}", loser.text()),
        }
        assert_eq!(app.ledger(&id).await.len(), 1);
    }
}

/// 40 simultaneous pays per order, one new key per order, 12 orders: only the request that
/// wins each claim may take a new-attempt token. With exactly 12 tokens (and no refill worth
/// counting), any duplicate that spent one would leave a later order refused with 429.
async fn duplicates_of_a_new_key_never_spend_new_attempt_tokens(backend: Backend) {
    let opts = Opts {
        extra: ["--new-attempts-burst", "12", "--new-attempts-per-min", "1"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    for n in 0..12 {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let k = key();
        let answers =
            join_all((0..40).map(|_| app.call(app.pay_request(&t, &id, Some(&k), 1, APPROVE))))
                .await;
        let limited = answers.iter().filter(|r| r.status == 429).count();
        assert_eq!(
            limited, 0,
            "order {n}: {limited} of 40 duplicates were rate limited"
        );
        assert_agree(&answers);
        assert_eq!(app.ledger(&id).await.len(), 1, "order {n}: one charge");
    }
    // The bucket is spent by exactly the 12 claims: a 13th new key is refused.
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let r = app.pay(&t, &id, Some(&key()), 1, APPROVE).await;
    assert_eq!(
        (r.status, r.code()),
        (429, ErrorCode::RateLimited),
        "{}",
        r.text()
    );
    assert!(app.ledger(&id).await.is_empty());
}

/// Three API processes on one PostgreSQL database, one standalone provider shared by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_one_postgres_charge_once() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let provider = spawn(
        &[
            "mock-provider".into(),
            "--addr".into(),
            "127.0.0.1:0".into(),
        ],
        false,
    );
    let provider_url = provider.provider.clone().unwrap();
    let mut args = Opts::default().args(&db.url);
    args.extend(["--provider-url".into(), provider_url.clone()]);
    // Started together: they also race to migrate the fresh database.
    let procs: Vec<Proc> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| spawn(&args, true))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("spawn"))
            .collect()
    });
    let apis: Vec<String> = procs.iter().map(|p| p.api.clone().unwrap()).collect();
    let apps: Vec<TestApp> = apis
        .iter()
        .map(|api| TestApp {
            api: api.clone(),
            provider: provider_url.clone(),
            http: client(),
            _procs: vec![],
            db: None,
        })
        .collect();
    let t = apps[0].session("alice").await;

    // 50 pays with one key, spread over the three processes.
    let id = id_of(&apps[1].create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let answers = join_all((0..50).map(|i| {
        let app = &apps[i % 3];
        app.call(app.pay_request(&t, &id, Some(&k), 1, APPROVE))
    }))
    .await;
    assert_agree(&answers);
    assert_eq!(ledger(&client(), &provider_url, &id).await.len(), 1);

    // Two keys for one order on two processes.
    for _ in 0..5 {
        let id = id_of(&apps[0].create_order(&t, &[("mug-enamel", 1)]).await);
        let (a, b) = tokio::join!(
            apps[1].call(apps[1].pay_request(&t, &id, Some(&key()), 1, APPROVE)),
            apps[2].call(apps[2].pay_request(&t, &id, Some(&key()), 1, APPROVE)),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "{} / {}", a.text(), b.text());
        assert_eq!(ledger(&client(), &provider_url, &id).await.len(), 1);
    }
    drop(apps);
    drop(procs);
    drop(provider);
    drop(db);
}

async fn many_orders_sharing_skus_pay_concurrently(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    // Lines in opposite orders: stock rows must be locked in one order or PostgreSQL
    // deadlocks and aborts one of the transactions.
    let mut ids = Vec::new();
    for i in 0..20 {
        let items: &[(&str, u32)] = if i % 2 == 0 {
            &[("tee-classic", 1), ("mug-enamel", 2)]
        } else {
            &[("mug-enamel", 2), ("tee-classic", 1)]
        };
        ids.push(id_of(&app.create_order(&t, items).await));
    }
    let answers = join_all(
        ids.iter()
            .map(|id| app.call(app.pay_request(&t, id, Some(&key()), 1, APPROVE))),
    )
    .await;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for id in &ids {
        assert_eq!(app.ledger(id).await.len(), 1);
    }
    assert_eq!(app.stock("tee-classic").await, 1000 - 20);
    assert_eq!(app.stock("mug-enamel").await, 1000 - 40);
}

async fn cancel_racing_pay_never_disagrees(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let t = app.session("alice").await;
    let mut outcomes = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
        let k = key();
        let (pay, cancel) = tokio::join!(
            app.call(app.pay_request(&t, &id, Some(&k), 1, APPROVE)),
            app.cancel(&t, &id, &k),
        );
        let cancelled = cancel.attempt_status() == AttemptStatus::Cancelled;
        let charges = app.ledger(&id).await.len();
        if cancelled {
            // The tombstone won the slot: the pay can never charge.
            assert_eq!((pay.status, pay.code()), (409, ErrorCode::AttemptCancelled));
            assert_eq!(charges, 0);
        } else {
            // The pay won: cancel reports it as it was (in flight or done), never "cancelled".
            assert_eq!(pay.status, 200, "{}", pay.text());
            assert!([AttemptStatus::Processing, AttemptStatus::Succeeded]
                .contains(&cancel.attempt_status()));
            assert_eq!(charges, 1);
        }
        outcomes.insert(cancelled);
    }
    eprintln!(
        "cancel won in some rounds: {}, pay won in some: {}",
        outcomes.contains(&true),
        outcomes.contains(&false)
    );
}
