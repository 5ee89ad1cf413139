//! The Redis fast path, the pay rate limit and `GET /metrics`, against the real binary, a
//! real Redis and real SQLite/PostgreSQL.
//!
//! Redis: the machine's server (`PAYONCE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`),
//! one database number per test so a `FLUSHDB` never touches another test; and, where a
//! test kills Redis, a private `redis-server` on a free port (`PAYONCE_TEST_REDIS_SERVER`,
//! default `redis-server`). Unavailable Redis fails the test (under `CI=true` always;
//! locally `PAYONCE_ALLOW_SKIP=1` makes it a loud skip), like PostgreSQL.

use crate::common::{
    assert_agree, client, id_of, key, ledger, spawn, spawn_logged, Backend, Checkout, Opts, Proc,
    Req, Resp, TestApp, TestDb,
};
use crate::on_both_backends;
use futures_util::future::join_all;
use payonce_protocol::{paths, ErrorCode, OrderStatus};
use payonce_testkit::eventually;
use payonce_testkit::redis::{connect, shared_db, PrivateRedis};
use redis::aio::MultiplexedConnection;
use serde_json::Value;
use std::time::Duration;

const APPROVE: &str = "pm_card_approve";
const DECLINE: &str = "pm_card_decline";
const SLOW: &str = "pm_card_slow";
const TIMEOUT: &str = "pm_card_timeout";

/// Database numbers on the shared Redis, one per test.
const DB_REPLAY_SQLITE: u8 = 11;
const DB_REPLAY_POSTGRES: u8 = 12;
const DB_FLUSH: u8 = 13;
const DB_FIRST_SQLITE: u8 = 14;
const DB_FIRST_POSTGRES: u8 = 15;

on_both_backends!(
    redis_replays_are_byte_identical_checked_and_scoped,
    redis_replays_need_no_sql_and_match_after_a_flush,
    memory_replays_need_no_round_trip_and_stay_checked,
);

async fn redis_get(conn: &mut MultiplexedConnection, key: &str) -> Option<Value> {
    let v: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET");
    v.map(|s| serde_json::from_str(&s).expect("entry is JSON"))
}

/// Options for a server on the Redis at `url`.
fn redis_opts(url: &str) -> Opts {
    Opts {
        // A generous Redis timeout: these tests assert what Redis serves, and a loaded test
        // machine must not turn a slow answer into a (correct, but different) database read.
        // The in-memory replay cache in front of Redis is off here: these tests are about
        // Redis and the database (the cache has its own test below).
        extra: vec![
            "--redis-url".into(),
            url.into(),
            "--redis-timeout-ms".into(),
            "2000".into(),
            "--replay-cache-entries".into(),
            "0".into(),
        ],
        ..Opts::default()
    }
}

/// `r` is a replay of `first`: same status, bytes and headers, marked as replayed.
fn assert_replay_of(first: &Resp, r: &Resp) {
    assert_eq!(r.status, first.status, "{}", r.text());
    assert_eq!(r.body, first.body, "byte-identical to the first answer");
    assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(r.header("content-type"), first.header("content-type"));
    assert_eq!(
        r.header("idempotency-key-retention"),
        first.header("idempotency-key-retention")
    );
}

/// Changes the stored answer of `(user, k)` behind the server's back: a replay that still
/// has the original bytes did not read the key row.
async fn change_stored_answer(app: &TestApp, user: &str, k: &str) {
    let pool = app.db_pool().await;
    let changed =
        sqlx::query("UPDATE attempts SET response_body = $1 WHERE user_id = $2 AND idem_key = $3")
            .bind("{\"tampered\":true}")
            .bind(user)
            .bind(k)
            .execute(&pool)
            .await
            .expect("change the stored answer")
            .rows_affected();
    assert_eq!(changed, 1);
}

async fn stored_body(app: &TestApp, user: &str, k: &str) -> String {
    let pool = app.db_pool().await;
    sqlx::query_scalar("SELECT response_body FROM attempts WHERE user_id = $1 AND idem_key = $2")
        .bind(user)
        .bind(k)
        .fetch_one(&pool)
        .await
        .expect("stored answer")
}

async fn redis_replays_are_byte_identical_checked_and_scoped(backend: Backend) {
    let db = match backend {
        Backend::Sqlite => DB_REPLAY_SQLITE,
        Backend::Postgres => DB_REPLAY_POSTGRES,
    };
    let Some((url, mut redis)) = shared_db(db).await else {
        return;
    };
    let Some(app) = TestApp::spawn_with(backend, redis_opts(&url)).await else {
        return;
    };
    let (alice, bob) = (app.session("alice").await, app.session("bob").await);
    let order_a = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let k = key();

    let first = app.pay(&alice, &order_a, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert!(first.header("idempotent-replayed").is_none());
    // Redis holds the final answer under alice's scope, the exact bytes the database stored.
    let entry = redis_get(&mut redis, &format!("idem:alice:{k}"))
        .await
        .expect("final answer cached in redis");
    assert_eq!(entry["state"], "final");
    assert_eq!(entry["body"].as_str().unwrap().as_bytes(), &first.body[..]);
    assert_eq!(
        stored_body(&app, "alice", &k).await.as_bytes(),
        &first.body[..]
    );

    // A replay is served from Redis: same bytes, marked replayed.
    let from_redis = r#"payonce_pay_replays_total{source="redis"}"#;
    let before = app.metric(from_redis).await;
    let replay = app.pay(&alice, &order_a, Some(&k), 1, APPROVE).await;
    assert_eq!(replay.status, 200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(
        replay.body, first.body,
        "byte-identical to the first answer"
    );
    assert_eq!(
        app.metric(from_redis).await,
        before + 1.0,
        "served from redis"
    );

    // Same key, different details: Redis never replays it; 422, nothing charged.
    let mismatch_seen = r#"payonce_redis_lookups_total{result="mismatch"}"#;
    let before = app.metric(mismatch_seen).await;
    let other = app.pay(&alice, &order_a, Some(&k), 1, DECLINE).await;
    assert_eq!(other.status, 422, "{}", other.text());
    assert_eq!(other.code(), ErrorCode::KeyReusedWithDifferentDetails);
    assert_eq!(app.metric(mismatch_seen).await, before + 1.0);
    assert_eq!(app.ledger(&order_a).await.len(), 1);

    // Bob sends alice's key for his own order: his own attempt, never alice's bytes.
    let order_b = id_of(&app.create_order(&bob, &[("mug-enamel", 1)]).await);
    let b = app.pay(&bob, &order_b, Some(&k), 1, APPROVE).await;
    assert_eq!(b.status, 200, "{}", b.text());
    assert!(b.header("idempotent-replayed").is_none(), "a fresh attempt");
    assert_ne!(b.body, first.body);
    assert_eq!(b.json()["orderId"], order_b.as_str());
    assert_eq!(app.ledger(&order_b).await.len(), 1);
    let bob_entry = redis_get(&mut redis, &format!("idem:bob:{k}"))
        .await
        .unwrap();
    assert_eq!(bob_entry["body"].as_str().unwrap().as_bytes(), &b.body[..]);
    // And alice's order stays hers, whatever key bob sends.
    let stolen = app.pay(&bob, &order_a, Some(&k), 1, APPROVE).await;
    assert_eq!(stolen.status, 404);
    assert_eq!(app.ledger(&order_a).await.len(), 1);
}

/// Three API processes on one PostgreSQL database and one standalone provider.
struct Cluster {
    apps: Vec<TestApp>,
    provider_url: String,
    _procs: Vec<Proc>,
    _provider: Proc,
    _db: TestDb,
}

async fn cluster(redis_url: &str) -> Option<Cluster> {
    let db = TestDb::create(Backend::Postgres).await?;
    let provider = spawn(
        &[
            "mock-provider".into(),
            "--addr".into(),
            "127.0.0.1:0".into(),
        ],
        false,
    );
    let provider_url = provider.provider.clone().unwrap();
    // The slow method takes 4 s: the provider timeout and the lease outlast it, and every
    // duplicate waits for the outcome instead of answering 409.
    let opts = Opts {
        lease_ms: 20_000,
        provider_timeout_ms: 8_000,
        in_progress_wait_ms: 15_000,
        ..redis_opts(redis_url)
    };
    let mut args = opts.args(&db.url);
    args.extend(["--provider-url".into(), provider_url.clone()]);
    let procs: Vec<Proc> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| spawn(&args, true))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("spawn"))
            .collect()
    });
    let apps = procs
        .iter()
        .map(|p| TestApp {
            api: p.api.clone().unwrap(),
            provider: provider_url.clone(),
            http: client(),
            _procs: vec![],
            db: None,
        })
        .collect();
    Some(Cluster {
        apps,
        provider_url,
        _procs: procs,
        _provider: provider,
        _db: db,
    })
}

impl Cluster {
    /// 25 same-key pays over the three processes, while `middle` runs once the charge is in
    /// flight; then 25 more. Returns all 50 answers.
    async fn fifty_pays_around<F: std::future::Future<Output = ()>>(
        &self,
        token: &str,
        order: &str,
        k: &str,
        middle: F,
    ) -> Vec<Resp> {
        let wave = |from: usize| {
            join_all((from..from + 25).map(|i| {
                let app = &self.apps[i % 3];
                app.call(app.pay_request(token, order, Some(k), 1, SLOW))
            }))
        };
        let (mut first, second) = tokio::join!(wave(0), async {
            middle.await;
            wave(25).await
        });
        first.extend(second);
        first
    }
}

/// The attempt is still processing: the provider has not answered (the slow method records
/// its charge at once and answers 4 s later), nothing is settled yet.
async fn assert_in_flight(app: &TestApp, token: &str, order: &str) {
    assert_eq!(
        app.order_state(token, order).await,
        (OrderStatus::Unpaid, true),
        "the charge must still be in flight"
    );
}

/// Waits until Redis shows the key claimed (a processing marker): the charge is in flight.
async fn wait_for_marker(conn: &MultiplexedConnection, rkey: &str) {
    let marker = eventually(Duration::from_secs(5), Duration::from_millis(10), || {
        let mut conn = conn.clone();
        async move { redis_get(&mut conn, rkey).await }
    });
    let v = marker
        .await
        .unwrap_or_else(|| panic!("{rkey} was never claimed in redis"));
    assert_eq!(v["state"], "processing", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushed_mid_flight_over_three_processes_charges_once() {
    let Some((url, mut redis)) = shared_db(DB_FLUSH).await else {
        return;
    };
    let Some(c) = cluster(&url).await else {
        return;
    };
    let t = c.apps[0].session("alice").await;
    let order = id_of(&c.apps[1].create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let rkey = format!("idem:alice:{k}");
    let http = client();
    let answers = c
        .fifty_pays_around(&t, &order, &k, async {
            wait_for_marker(&redis, &rkey).await;
            // The point: give the first wave time to reach the processes and wait on the
            // marker before Redis goes; a waiter shows nowhere to wait for, and the checks
            // hold whichever way a request raced.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_in_flight(&c.apps[0], &t, &order).await;
            let _: () = redis::cmd("FLUSHDB").query_async(&mut redis).await.unwrap();
            assert!(redis_get(&mut redis, &rkey).await.is_none(), "flushed");
        })
        .await;
    assert_agree(&answers);
    assert_eq!(
        ledger(&http, &c.provider_url, &order).await.len(),
        1,
        "one charge"
    );
    // Redis has the final answer again, and every process replays the same bytes from it.
    let entry = redis_get(&mut redis, &rkey).await.expect("cache refilled");
    assert_eq!(
        entry["body"].as_str().unwrap().as_bytes(),
        &answers[0].body[..]
    );
    for app in &c.apps {
        let r = app.pay(&t, &order, Some(&k), 1, SLOW).await;
        assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
        assert_eq!(r.body, answers[0].body);
    }
    assert_eq!(ledger(&http, &c.provider_url, &order).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_flight_over_three_processes_charges_once_then_recovers() {
    let Some(mut private) = PrivateRedis::start(None).await else {
        return;
    };
    let port = private.port;
    let url = private.url();
    let Some(c) = cluster(&url).await else {
        return;
    };
    let redis = connect(&url, Duration::from_secs(5))
        .await
        .expect("private redis");
    let t = c.apps[0].session("alice").await;
    let order = id_of(&c.apps[2].create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let rkey = format!("idem:alice:{k}");
    let http = client();
    let answers = c
        .fifty_pays_around(&t, &order, &k, async {
            wait_for_marker(&redis, &rkey).await;
            // The point: give the first wave time to reach the processes and wait on the
            // marker before Redis goes; a waiter shows nowhere to wait for, and the checks
            // hold whichever way a request raced.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_in_flight(&c.apps[0], &t, &order).await;
            private.kill();
        })
        .await;
    assert_agree(&answers);
    assert_eq!(
        ledger(&http, &c.provider_url, &order).await.len(),
        1,
        "one charge"
    );
    for app in &c.apps {
        assert_eq!(
            app.metric("payonce_redis_up").await,
            0.0,
            "degraded, and says so"
        );
    }

    // Redis comes back empty on the same port: the processes reconnect after their
    // backoff, refill the cache from the database, and serve replays from it again.
    let _restarted = PrivateRedis::start(Some(port))
        .await
        .expect("restart redis");
    let from_redis = r#"payonce_pay_replays_total{source="redis"}"#;
    let app = &c.apps[0];
    let before = app.metric(from_redis).await;
    // Each probe is a replay, so it polls at the pace of a patient client.
    let served_from_redis = eventually(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let r = app.pay(&t, &order, Some(&k), 1, SLOW).await;
            assert_eq!(r.body, answers[0].body);
            assert_eq!(r.header("idempotent-replayed").as_deref(), Some("true"));
            (app.metric(from_redis).await > before).then_some(())
        },
    );
    assert!(
        served_from_redis.await.is_some(),
        "replays come from redis again after it restarts"
    );
    assert_eq!(app.metric("payonce_redis_up").await, 1.0);
    assert_eq!(ledger(&http, &c.provider_url, &order).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_at_start_degrades_to_the_database_and_says_so() {
    let db = TestDb::create(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(format!("payonce-log-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("server.log");
    // Port 1 on loopback: nothing listens there.
    let mut args = redis_opts("redis://127.0.0.1:1/0").args(&db.url);
    args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
    let proc = spawn_logged(&args, true, &log);
    let app = TestApp {
        api: proc.api.clone().unwrap(),
        provider: proc.provider.clone().unwrap(),
        http: client(),
        _procs: vec![proc],
        db: Some(db),
    };
    let t = app.session("alice").await;
    let order = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let first = app.pay(&t, &order, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = app.pay(&t, &order, Some(&k), 1, APPROVE).await;
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(app.ledger(&order).await.len(), 1);
    assert_eq!(app.metric("payonce_redis_up").await, 0.0);
    assert_eq!(
        app.metric(r#"payonce_pay_replays_total{source="database"}"#)
            .await,
        1.0
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("redis unreachable at start: DEGRADED"),
        "the log says the fast path is off: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_pays_replays_conflicts_and_mismatches() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let r = app.call(Req::get(paths::METRICS)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(r
        .text()
        .contains("# TYPE payonce_pay_requests_total counter"));
    let ok = r#"payonce_pay_requests_total{outcome="succeeded",status="200"}"#;
    let stuck = r#"payonce_attempts_processing{older_than_seconds="0"}"#;
    assert_eq!(app.metric(ok).await, 0.0);
    assert_eq!(app.metric(stuck).await, 0.0);

    let t = app.session("alice").await;
    let order = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    assert_eq!(app.pay(&t, &order, Some(&k), 1, APPROVE).await.status, 200);
    assert_eq!(app.pay(&t, &order, Some(&k), 1, APPROVE).await.status, 200);
    assert_eq!(app.pay(&t, &order, Some(&k), 1, DECLINE).await.status, 422);
    // A provider that never answers leaves an attempt processing; a second key for that
    // order is a 409.
    let stuck_order = id_of(&app.create_order(&t, &[("mug-enamel", 1)]).await);
    let p = app.pay(&t, &stuck_order, Some(&key()), 1, TIMEOUT).await;
    assert_eq!(p.status, 202, "{}", p.text());
    let busy = app.pay(&t, &stuck_order, Some(&key()), 1, APPROVE).await;
    assert_eq!(busy.status, 409, "{}", busy.text());

    assert_eq!(app.metric(ok).await, 2.0, "the first answer and its replay");
    // The replay came from memory: the answer entered the cache when the attempt settled.
    assert_eq!(
        app.metric(r#"payonce_pay_replays_total{source="memory"}"#)
            .await,
        1.0
    );
    assert_eq!(app.metric("payonce_pay_key_mismatches_total").await, 1.0);
    assert_eq!(
        app.metric(r#"payonce_pay_requests_total{outcome="processing",status="202"}"#)
            .await,
        1.0
    );
    let code = busy.code().as_str();
    assert_eq!(
        app.metric(&format!(r#"payonce_pay_conflicts_total{{code="{code}"}}"#))
            .await,
        1.0
    );
    // The stuck-attempts gauge is cached; inproc.rs tests it on a manual clock.
}

/// A replay is answered from Redis alone when it holds the final answer (checked for user,
/// order and details), from the key row when Redis lost it (and Redis is filled again), and
/// every way gives the same bytes and headers; mismatches are refused as without Redis.
async fn redis_replays_need_no_sql_and_match_after_a_flush(backend: Backend) {
    let db = match backend {
        Backend::Sqlite => DB_FIRST_SQLITE,
        Backend::Postgres => DB_FIRST_POSTGRES,
    };
    let Some((url, mut redis)) = shared_db(db).await else {
        return;
    };
    let Some(app) = TestApp::spawn_with(backend, redis_opts(&url)).await else {
        return;
    };
    let (alice, bob) = (app.session("alice").await, app.session("bob").await);
    let a = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let a2 = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let k = key();
    let rkey = format!("idem:alice:{k}");
    let first = app.pay(&alice, &a, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert!(redis_get(&mut redis, &rkey).await.is_some(), "cached");
    let from_redis = r#"payonce_pay_replays_total{source="redis"}"#;
    let from_db = r#"payonce_pay_replays_total{source="database"}"#;
    let same = |r: &Resp| assert_replay_of(&first, r);

    // Served from Redis, counted as such.
    let (r0, d0) = (app.metric(from_redis).await, app.metric(from_db).await);
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_redis).await, r0 + 1.0);
    assert_eq!(app.metric(from_db).await, d0);

    // Checked like the row would be: other details or another order of alice's are 422, bob
    // sending alice's key for her order is 404, with or without the cached entry.
    for _ in 0..2 {
        for (order, method) in [(&a, DECLINE), (&a2, APPROVE)] {
            let r = app.pay(&alice, order, Some(&k), 1, method).await;
            assert_eq!(
                (r.status, r.code()),
                (422, ErrorCode::KeyReusedWithDifferentDetails),
                "{order} {method}"
            );
            assert_eq!(r.header("idempotent-replayed"), None);
        }
        let r = app.pay(&bob, &a, Some(&k), 1, APPROVE).await;
        assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));
        assert!(redis_get(&mut redis, &format!("idem:bob:{k}"))
            .await
            .is_none());
        let _: () = redis::cmd("FLUSHDB").query_async(&mut redis).await.unwrap();
    }

    // Redis flushed: the key row answers, the same bytes, and Redis holds the entry again.
    let (r0, d0) = (app.metric(from_redis).await, app.metric(from_db).await);
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_db).await, d0 + 1.0, "from the database");
    let entry = redis_get(&mut redis, &rkey).await.expect("filled again");
    assert_eq!(entry["body"].as_str().unwrap().as_bytes(), &first.body[..]);
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_redis).await, r0 + 1.0, "from redis again");

    // Redis answers without the database: with the stored answer changed behind the
    // server's back, a replay still has the original bytes, so it did not read the row.
    change_stored_answer(&app, "alice", &k).await;
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_redis).await, r0 + 2.0);
    assert_eq!(app.ledger(&a).await.len(), 1, "charged once");
    assert!(app.ledger(&a2).await.is_empty());
}

/// With the in-memory replay cache (on by default), a replay this process made once is
/// answered again with no round trip: with the stored answer changed behind the server's
/// back it still gets the original bytes. The copy is checked like the row: other details or
/// another order are 422, another user is 404, and nothing is charged twice.
async fn memory_replays_need_no_round_trip_and_stay_checked(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, Opts::default()).await else {
        return;
    };
    let (alice, bob) = (app.session("alice").await, app.session("bob").await);
    let a = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let a2 = id_of(&app.create_order(&alice, &[("tee-classic", 1)]).await);
    let k = key();
    let first = app.pay(&alice, &a, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let from_memory = r#"payonce_pay_replays_total{source="memory"}"#;
    let from_db = r#"payonce_pay_replays_total{source="database"}"#;
    let same = |r: &Resp| assert_replay_of(&first, r);
    // The answer entered the cache when the attempt settled: even the first replay reads
    // nothing, and neither do the next ones.
    let m0 = app.metric(from_memory).await;
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_memory).await, m0 + 1.0);
    assert_eq!(app.metric(from_db).await, 0.0, "no read");

    // Checked like the row: other details, another order, another user.
    for (order, method) in [(&a, DECLINE), (&a2, APPROVE)] {
        let r = app.pay(&alice, order, Some(&k), 1, method).await;
        assert_eq!(
            (r.status, r.code()),
            (422, ErrorCode::KeyReusedWithDifferentDetails),
            "{order} {method}"
        );
    }
    let r = app.pay(&bob, &a, Some(&k), 1, APPROVE).await;
    assert_eq!((r.status, r.code()), (404, ErrorCode::OrderNotFound));

    // No round trip: the stored answer changed behind the server's back, the replay still
    // has the original bytes.
    change_stored_answer(&app, "alice", &k).await;
    same(&app.pay(&alice, &a, Some(&k), 1, APPROVE).await);
    assert_eq!(app.metric(from_memory).await, m0 + 2.0);
    assert_eq!(app.ledger(&a).await.len(), 1, "charged once");
    assert!(app.ledger(&a2).await.is_empty());
}
