//! Receipt emails against a real SMTP server (`payonce_testkit::smtp`: aiosmtpd running
//! tools/smtp-sink.py), counted by what the relay received: one message per paid order with
//! its amount, a 451 retried on the clock, a 550 final and in the metrics, a relay down and
//! back, a crash between the relay's 250 and the commit, and a start without `--dev` that
//! sends with AUTH and never logs the password.

use crate::common::{id_of, spawn, spawn_logged, Backend, Checkout, Opts, TestApp, TestDb};
use crate::inproc::{provider, InProc};
use crate::on_both_backends;
use payonce_protocol::OrderStatus;
use payonce_testkit::checkout::metric_in;
use payonce_testkit::smtp::SmtpSink;
use payonce_testkit::{eventually, wait_for};
use serde_json::{json, Value};
use std::time::Duration;

on_both_backends!(
    n_paid_orders_get_exactly_n_receipts_each_with_its_amount,
    a_relay_that_answers_451_twice_then_250_delivers_one_message,
    a_relay_that_answers_550_fails_the_receipt_once_and_never_retries,
    a_relay_down_then_back_gets_every_receipt_none_lost,
    a_crash_between_the_relays_250_and_the_commit_resends_the_same_message_once,
    a_graceful_stop_while_the_relay_holds_a_receipt_commits_it_and_sends_it_once,
);

/// The `From` of every test server; its domain names the `Message-ID`s.
const FROM: &str = "shop@payonce.test";

/// The flags that send receipts to `sink` (its timeout below the test servers' lease).
fn smtp_flags(sink: &SmtpSink) -> Vec<String> {
    let url = sink.url();
    let flags = ["--mailer", "smtp", "--smtp-url", &url, "--mail-from", FROM];
    [&flags[..], &["--smtp-timeout-ms", "1000"]]
        .concat()
        .into_iter()
        .map(String::from)
        .collect()
}

/// Creates an order of `qty` tee-classic shipped to `address` and pays it; its id.
async fn paid_order(app: &impl Checkout, token: &str, qty: u32, address: Option<&str>) -> String {
    let mut body = json!({ "items": [{ "sku": "tee-classic", "quantity": qty }] });
    if let Some(a) = address {
        body["address"] = Value::from(a);
    }
    let r = app.create_order_raw(token, body).await;
    assert_eq!(r.status, 201, "create: {}", r.text());
    let id = id_of(&r.json());
    let r = app
        .pay(
            token,
            &id,
            Some(&payonce_testkit::checkout::key()),
            1,
            "pm_card_approve",
        )
        .await;
    assert_eq!(r.status, 200, "pay: {}", r.text());
    assert_eq!(app.order_status(token, &id).await, OrderStatus::Paid);
    id
}

/// `(state, tries)` of each receipt job, by order id.
async fn jobs(pool: &sqlx::AnyPool) -> Vec<(String, String, i64)> {
    sqlx::query_as("SELECT order_id, state, tries FROM jobs ORDER BY order_id")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The order's payment id and amount as stored.
async fn payment_of(pool: &sqlx::AnyPool, order: &str) -> (String, i64) {
    sqlx::query_as("SELECT id, amount FROM payments WHERE order_id = $1")
        .bind(order)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A header's value in a raw message.
fn header<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("{name}: ");
    message
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(&prefix))
}

/// `minor` as the receipt shows it.
fn shown(minor: i64) -> String {
    format!("{}.{:02} ", minor / 100, minor % 100)
}

async fn n_paid_orders_get_exactly_n_receipts_each_with_its_amount(backend: Backend) {
    let Some(sink) = SmtpSink::start().await else {
        return;
    };
    let opts = Opts {
        jobs_interval_ms: 100,
        extra: smtp_flags(&sink),
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(backend, opts).await else {
        return;
    };
    let t = app.session("alice").await;
    let mut orders = Vec::new();
    for qty in 1..=4 {
        let to = format!("buyer{qty}@example.com");
        orders.push((paid_order(&app, &t, qty, Some(&to)).await, to));
    }
    // Paid, but with no mail address to send to: no message, recorded as such.
    let no_address = paid_order(&app, &t, 1, Some("1 Main Street, Springfield")).await;
    let pool = app.db_pool().await;
    wait_for(
        "every receipt job settled",
        Duration::from_secs(30),
        || async {
            let all = jobs(&pool).await;
            (all.len() == 5 && all.iter().all(|(_, s, _)| s != "pending")).then_some(())
        },
    )
    .await;
    let messages = sink.messages();
    assert_eq!(
        messages.len(),
        4,
        "one message per paid order with an address"
    );
    for (order, to) in &orders {
        let (payment, amount) = payment_of(&pool, order).await;
        let id = format!("<receipt.{payment}@payonce.test>");
        let mine: Vec<&String> = messages
            .iter()
            .filter(|m| header(m, "Message-ID") == Some(id.as_str()))
            .collect();
        assert_eq!(mine.len(), 1, "{order}: one message {id}");
        let m = mine[0];
        assert_eq!(header(m, "To"), Some(to.as_str()), "{m}");
        assert!(m.contains(&format!("Total paid: {}", shown(amount))), "{m}");
        assert!(
            m.contains("multipart/alternative") && m.contains("text/html"),
            "{m}"
        );
    }
    let states = jobs(&pool).await;
    let state_of = |o: &str| states.iter().find(|(id, ..)| id == o).unwrap().1.clone();
    assert_eq!(state_of(&no_address), "no_address");
    assert!(orders.iter().all(|(o, _)| state_of(o) == "sent"));
}

/// An in-process server on `backend` sending receipts to `sink`; jobs run when the test
/// calls them, on its clock.
async fn inproc(db: &TestDb, sink: &SmtpSink) -> InProc {
    let flags = smtp_flags(sink);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    InProc::start(db, &provider().await, &flags).await
}

async fn a_relay_that_answers_451_twice_then_250_delivers_one_message(backend: Backend) {
    let (Some(sink), Some(db)) = (SmtpSink::start().await, TestDb::create(backend).await) else {
        return;
    };
    let s = inproc(&db, &sink).await;
    let pool = db.pool().await;
    sink.answer("451 2");
    let t = s.session("alice").await;
    let order = paid_order(&s, &t, 2, Some("alice@example.com")).await;
    let round = || payonce_server::run_jobs(&s.state);
    round().await;
    assert_eq!(jobs(&pool).await[0].1, "pending", "451: tried again later");
    // Not due yet: the clock has not moved, so the relay is not asked again.
    round().await;
    assert_eq!(sink.log().matches("451").count(), 1, "{}", sink.log());
    s.advance(Duration::from_secs(40));
    round().await;
    assert_eq!(sink.log().matches("451").count(), 2, "{}", sink.log());
    assert!(sink.messages().is_empty());
    s.advance(Duration::from_secs(80));
    round().await;
    s.advance(Duration::from_secs(3600));
    round().await;
    let messages = sink.messages();
    assert_eq!(
        messages.len(),
        1,
        "one message after two 451s: {}",
        sink.log()
    );
    let (payment, _) = payment_of(&pool, &order).await;
    assert_eq!(
        header(&messages[0], "Message-ID"),
        Some(format!("<receipt.{payment}@payonce.test>").as_str())
    );
    assert_eq!(jobs(&pool).await[0].1, "sent");
    assert_eq!(jobs(&pool).await[0].2, 3, "three runs");
}

async fn a_relay_that_answers_550_fails_the_receipt_once_and_never_retries(backend: Backend) {
    let (Some(sink), Some(db)) = (SmtpSink::start().await, TestDb::create(backend).await) else {
        return;
    };
    let s = inproc(&db, &sink).await;
    let pool = db.pool().await;
    sink.answer("550");
    let failed = || async {
        let r = s.send("GET", "/metrics", "", None, Value::Null).await;
        metric_in(&r.text(), r#"payonce_emails_total{result="failed"}"#)
    };
    let before = failed().await;
    let t = s.session("alice").await;
    paid_order(&s, &t, 1, Some("alice@example.com")).await;
    for _ in 0..5 {
        payonce_server::run_jobs(&s.state).await;
        s.advance(Duration::from_secs(24 * 3600));
    }
    assert_eq!(
        sink.log().matches("550").count(),
        1,
        "asked once: {}",
        sink.log()
    );
    assert!(sink.messages().is_empty());
    let (state, error): (String, String) = sqlx::query_as("SELECT state, last_error FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "failed");
    assert!(error.starts_with("550"), "{error}");
    assert!(
        failed().await >= before + 1.0,
        "the failure is in the metrics"
    );
}

async fn a_relay_down_then_back_gets_every_receipt_none_lost(backend: Backend) {
    let (Some(mut sink), Some(db)) = (SmtpSink::start().await, TestDb::create(backend).await)
    else {
        return;
    };
    let s = inproc(&db, &sink).await;
    let pool = db.pool().await;
    sink.stop();
    let t = s.session("alice").await;
    for qty in 1..=3 {
        paid_order(&s, &t, qty, Some(&format!("b{qty}@example.com"))).await;
    }
    // The first refusal ends the round: the other receipts wait for the next one.
    payonce_server::run_jobs(&s.state).await;
    let tries: Vec<i64> = jobs(&pool).await.iter().map(|j| j.2).collect();
    assert_eq!(
        tries.iter().sum::<i64>(),
        1,
        "one try per round while down: {tries:?}"
    );
    // A minute and more of refused connections.
    for _ in 0..4 {
        payonce_server::run_jobs(&s.state).await;
        s.advance(Duration::from_secs(20));
    }
    assert!(jobs(&pool).await.iter().all(|(_, st, _)| st == "pending"));
    let waiting = || async {
        let r = s.send("GET", "/metrics", "", None, Value::Null).await;
        metric_in(
            &r.text(),
            r#"payonce_receipts_waiting{older_than_seconds="900"}"#,
        )
    };
    assert_eq!(waiting().await, 0.0, "not late yet");
    s.advance(Duration::from_secs(900));
    assert_eq!(waiting().await, 3.0, "15 minutes without a delivery");
    sink.restart().await;
    payonce_server::run_jobs(&s.state).await;
    assert_eq!(sink.messages().len(), 3, "every receipt delivered");
    assert!(jobs(&pool).await.iter().all(|(_, st, _)| st == "sent"));
    s.advance(Duration::from_secs(11));
    assert_eq!(waiting().await, 0.0, "none waiting once delivered");
}

async fn a_crash_between_the_relays_250_and_the_commit_resends_the_same_message_once(
    backend: Backend,
) {
    let (Some(sink), Some(db)) = (SmtpSink::start().await, TestDb::create(backend).await) else {
        return;
    };
    let opts = Opts {
        jobs_interval_ms: 100,
        lease_ms: 1_500,
        extra: smtp_flags(&sink),
        ..Opts::default()
    };
    let with_provider = |o: &Opts| {
        let mut args = o.args(&db.url);
        args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
        args
    };
    let args = with_provider(&opts);
    // The pay on a server without jobs, so that its answers cannot race the crash.
    let payer = spawn(
        &with_provider(&Opts {
            jobs_interval_ms: 0,
            ..opts.clone()
        }),
        true,
    );
    let app = TestApp {
        api: payer.api.clone().unwrap(),
        provider: payer.provider.clone().unwrap(),
        http: crate::common::client(),
        _procs: vec![],
        db: None,
    };
    let t = app.session("alice").await;
    let order = paid_order(&app, &t, 1, Some("alice@example.com")).await;
    drop(payer);
    let mut crashing = args.clone();
    crashing.extend(["--failpoint".into(), "email".into()]);
    let mut first = spawn(&crashing, true);
    let status = first.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|s| !s.success()),
        "aborted at the failpoint"
    );
    assert_eq!(
        sink.messages().len(),
        1,
        "the relay took it before the crash"
    );
    let pool = db.pool().await;
    assert_eq!(
        jobs(&pool).await[0].1,
        "pending",
        "the crash came before the commit"
    );

    let _second = spawn(&args, true);
    wait_for("the receipt settled", Duration::from_secs(30), || async {
        (jobs(&pool).await[0].1 == "sent").then_some(())
    })
    .await;
    // The commit was lost with the process: the lease ran out and the receipt was sent
    // once more, as the same message.
    let messages = sink.messages();
    assert_eq!(messages.len(), 2, "exactly one more delivery");
    let (payment, _) = payment_of(&pool, &order).await;
    let id = format!("<receipt.{payment}@payonce.test>");
    for m in &messages {
        assert_eq!(
            header(m, "Message-ID"),
            Some(id.as_str()),
            "the same message"
        );
    }
}

/// A rollout's SIGTERM while the relay has the receipt and has not answered yet: the
/// server answers no more requests, but its job round in flight finishes (the relay's 250
/// is committed as sent) before the process ends, so the next instance does not send the
/// receipt again (src/server.rs `finish_rounds`).
async fn a_graceful_stop_while_the_relay_holds_a_receipt_commits_it_and_sends_it_once(
    backend: Backend,
) {
    let (Some(sink), Some(db)) = (SmtpSink::start().await, TestDb::create(backend).await) else {
        return;
    };
    // The relay's answer waits for the test: the client's timeout is far above that wait
    // (and the lease above the timeout, as the server requires).
    let mut extra = smtp_flags(&sink);
    *extra.last_mut().unwrap() = "10000".into();
    let opts = Opts {
        jobs_interval_ms: 100,
        lease_ms: 15_000,
        extra,
        ..Opts::default()
    };
    let mut args = opts.args(&db.url);
    args.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
    let log = sink.dir().join("server.log");
    let mut server = spawn_logged(&args, true, &log);
    let app = TestApp {
        api: server.api.clone().unwrap(),
        provider: server.provider.clone().unwrap(),
        http: crate::common::client(),
        _procs: vec![],
        db: None,
    };
    sink.answer("hold");
    let t = app.session("alice").await;
    paid_order(&app, &t, 1, Some("alice@example.com")).await;
    wait_for(
        "the relay holds the receipt",
        Duration::from_secs(20),
        || async { sink.log().contains("holding").then_some(()) },
    )
    .await;

    server.signal("TERM");
    // Until the server says it waits for its round, or it has ended (the round cut).
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut ended = None;
    for _ in 0..500 {
        if said().contains("waiting for the job rounds in flight") {
            break;
        }
        ended = server.wait_exit(Duration::from_millis(20)).await;
        if ended.is_some() {
            break;
        }
    }
    let pool = db.pool().await;
    assert_eq!(
        jobs(&pool).await[0].1,
        "pending",
        "the relay has not answered yet"
    );

    sink.answer("");
    let status = match ended {
        Some(s) => Some(s),
        None => server.wait_exit(Duration::from_secs(20)).await,
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "a clean exit: {status:?}"
    );
    assert_eq!(
        jobs(&pool).await[0].1,
        "sent",
        "the 250 was committed before the end (the server said: {})",
        said()
    );
    assert_eq!(sink.messages().len(), 1, "one delivery: {}", sink.log());
    let (pays,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM journal WHERE kind = 'pay'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pays, 1, "the pay's journal entry outlived the stop");
}

/// A start without `--dev` (the production configuration) with `--mailer smtp` and AUTH:
/// the receipt arrives, and the password is in no log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_production_start_with_smtp_sends_and_never_logs_the_password() {
    const PASSWORD: &str = "smtp-pw-0123456789-never-logged";
    let Some(sink) = SmtpSink::start_with(Some(("payonce", PASSWORD))).await else {
        return;
    };
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let dir = sink.dir().to_owned();
    let pw_file = dir.join("smtp.password");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    let provider = spawn(&crate::common::mock_provider_args(), false);
    let opts = Opts {
        dev: false,
        jobs_interval_ms: 100,
        extra: smtp_flags(&sink)
            .into_iter()
            .chain(
                [
                    "--smtp-username",
                    "payonce",
                    "--smtp-password-file",
                    pw_file.to_str().unwrap(),
                    "--provider-url",
                    &provider.provider(),
                    "--webhook-secret",
                    crate::common::WEBHOOK_SECRET,
                ]
                .map(String::from),
            )
            .collect(),
        ..Opts::default()
    };
    let log = dir.join("server.log");
    let server = spawn_logged(&opts.args(&db.url), true, &log);
    let app = TestApp {
        api: server.api.clone().unwrap(),
        provider: provider.provider(),
        http: crate::common::client(),
        _procs: vec![],
        db: None,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t = payonce_server::sign_token(crate::common::SECRET.as_bytes(), "carol", now + 600);
    paid_order(&app, &t, 3, Some("carol@example.com")).await;
    let got = eventually(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (sink.messages().len() == 1).then_some(()) },
    )
    .await;
    assert!(got.is_some(), "the relay got the receipt: {}", sink.log());
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logged.contains(PASSWORD),
        "the password is never logged:\n{logged}"
    );
}
