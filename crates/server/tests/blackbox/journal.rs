//! The journal and the operator API (docs/operating.md), in process with a manual clock: a
//! lost answer and its replay reconstructed from `/admin/` alone, the operator credential
//! (401 without one, 403 for a customer's), and the journal kept for the dispute window,
//! then deleted.

use crate::common::{
    client, id_of, key, mock_provider_args, spawn, Backend, Checkout, Req, TestApp, TestDb, SECRET,
    WEBHOOK_SECRET,
};
use crate::inproc::{provider, InProc};
use crate::on_both_backends;
use payonce_protocol::admin::paths as admin;
use payonce_protocol::admin::{decision, lost, settle};
use payonce_protocol::body::paths;
use payonce_protocol::headers::REQUEST_ID;
use payonce_protocol::ErrorCode;
use payonce_server::clock::Clock;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

on_both_backends!(
    a_lost_answer_then_a_replay_is_told_by_the_operator_api_alone,
    every_admin_route_refuses_no_credential_and_a_customer_token,
    the_journal_is_kept_for_the_dispute_window_then_deleted,
    a_production_start_keeps_admin_to_the_operator_and_the_command_prints_a_timeline,
    a_review_flag_is_queued_with_its_reason_and_the_jobs_calls_are_in_the_timeline,
    a_jwt_reaches_admin_only_with_the_operator_role,
    a_cancel_and_a_refund_are_journaled_with_their_keys_and_calls,
    an_operator_erases_a_user_through_the_api_and_the_journal_says_so,
    a_day_of_the_journal_past_the_retention_goes_whole_and_recent_days_stay,
    the_journal_written_before_migration_15_is_read_after_it,
);

/// The operator token the tests' servers read from a file.
pub const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789";

/// A file holding [`OPERATOR_TOKEN`], removed with the returned guard's directory.
pub fn token_file() -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("payonce-op-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("operator.token");
    std::fs::write(&file, format!("{OPERATOR_TOKEN}\n")).unwrap();
    let path = file.display().to_string();
    (dir, path)
}

async fn server(db: &TestDb) -> (InProc, PathBuf) {
    let (dir, file) = token_file();
    let flags = ["--operator-token-file", file.as_str()];
    (InProc::start(db, &provider().await, &flags).await, dir)
}

async fn admin_get(s: &InProc, path: &str) -> Value {
    let r = s.call(Req::get(path).bearer(OPERATOR_TOKEN)).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

fn pay_req(t: &str, id: &str, k: &str, request_id: &str) -> Req {
    Req::post(paths::pay(id))
        .bearer(t)
        .key(Some(k))
        .header(REQUEST_ID, request_id)
        .json(json!({ "orderVersion": 1, "paymentMethodId": "pm_card_approve" }))
}

/// The customer's first pay is charged but its answer never reaches the client; the client
/// retries with the same key and gets the replay. An operator with only the order id finds
/// both requests (their ids, key, amount, statuses, the replay flag), the provider's charge
/// between them, and the state changes, in that order; each id looks the same story up.
async fn a_lost_answer_then_a_replay_is_told_by_the_operator_api_alone(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let k = key();
    let first = s.call(pay_req(&t, &id, &k, "lost-answer-1")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header(REQUEST_ID).as_deref(), Some("lost-answer-1"));
    s.advance(Duration::from_secs(5));
    let retry = s.call(pay_req(&t, &id, &k, "lost-answer-2")).await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    let charge = first.json()["payment"]["chargeId"]
        .as_str()
        .unwrap()
        .to_owned();

    let tl = admin_get(&s, &admin::timeline(&id)).await;
    assert_eq!(tl["order"]["id"], id.as_str());
    assert_eq!(tl["order"]["userId"], "alice");
    assert_eq!(tl["order"]["status"], "paid");
    let attempts = tl["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "one key, one attempt: {attempts:?}");
    assert_eq!(attempts[0]["key"], k.as_str());
    assert_eq!(attempts[0]["chargeId"], charge.as_str());
    let journal: Vec<&Value> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "journal")
        .collect();
    let story: Vec<(String, String)> = journal
        .iter()
        .map(|e| {
            let tag = e["requestId"].as_str().unwrap_or("-").to_owned();
            (e["kind"].as_str().unwrap().to_owned(), tag)
        })
        .collect();
    let want = [
        ("pay", "lost-answer-1"),
        (decision::CLAIM_WON, "lost-answer-1"),
        ("provider_call", "lost-answer-1"),
        (decision::SETTLE, "lost-answer-1"),
        (decision::EMAIL_QUEUED, "lost-answer-1"),
        ("pay", "lost-answer-2"),
        (decision::CLAIM_LOST, "lost-answer-2"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(story, want, "{journal:#?}");
    let (pay1, won, call, settled, pay2, lost) = (
        journal[0], journal[1], journal[2], journal[3], journal[5], journal[6],
    );
    // The machine's decisions, each with the request that made it and what it was about.
    assert_eq!(won["actor"], "request");
    assert_eq!(won["key"], k.as_str());
    assert_eq!(won["detail"]["attemptId"], attempts[0]["id"]);
    assert_eq!(settled["detail"]["outcome"], settle::PAID);
    assert_eq!(settled["detail"]["attemptId"], attempts[0]["id"]);
    assert_eq!(lost["detail"]["outcome"], lost::REPLAY);
    assert_eq!(lost["key"], k.as_str());
    assert_eq!(pay1["key"], k.as_str());
    assert_eq!(pay1["user"], "alice");
    assert_eq!(pay1["detail"]["status"], 200);
    assert_eq!(pay1["detail"]["replayed"], false);
    assert_eq!(pay1["detail"]["amount"], tl["order"]["amount"]);
    assert_eq!(pay1["detail"]["orderVersion"], 1);
    assert_eq!(call["detail"]["op"], "charge");
    assert_eq!(call["detail"]["outcome"], "succeeded");
    assert_eq!(call["providerId"], charge.as_str());
    // The mock provider answers a new charge 201.
    assert_eq!(call["detail"]["http"][0]["status"], 201);
    assert_eq!(pay2["detail"]["replayed"], true);
    assert_eq!(pay2["detail"]["status"], 200);
    assert!(pay2["at"].as_i64() >= Some(pay1["at"].as_i64().unwrap() + 5_000));
    // The state changes are there, after the request that made them.
    let audit = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["source"] == "audit" && e["to"] == "paid");
    let audit = audit.expect("the order's change to paid");
    let pos = |e: &Value| tl["events"].as_array().unwrap().iter().position(|x| x == e);
    assert!(pos(pay1) < Some(audit) && Some(audit) < pos(pay2));

    // Each id finds the story again.
    let by_request = admin_get(&s, &format!("{}?request_id=lost-answer-2", admin::LOOKUP)).await;
    assert_eq!(by_request["orders"], json!([id]));
    let by_key = admin_get(&s, &format!("{}?key={k}", admin::LOOKUP)).await;
    // Both requests, the claim, the charge and the replay's lost claim name the key.
    assert_eq!(by_key["entries"].as_array().unwrap().len(), 5);
    let by_charge = admin_get(&s, &format!("{}?provider_id={charge}", admin::LOOKUP)).await;
    assert_eq!(by_charge["orders"], json!([id]));
    let by_user = admin_get(&s, &format!("{}?user=alice", admin::LOOKUP)).await;
    assert_eq!(by_user["orders"], json!([id]));
    // The dispute document: the confirmed key, its amount, both requests, the charge.
    let ev = admin_get(&s, &admin::evidence(&id)).await;
    assert_eq!(ev["confirmedAttempt"]["key"], k.as_str());
    assert_eq!(ev["confirmedAttempt"]["amount"], tl["order"]["amount"]);
    assert_eq!(ev["requests"].as_array().unwrap().len(), 2);
    assert_eq!(ev["providerIds"], json!([charge]));
    // The operator's reads are journaled too.
    let reads = db_count(&db, "SELECT COUNT(*) FROM journal WHERE actor = 'operator'").await;
    assert_eq!(reads, 6);
}

async fn db_count(db: &TestDb, sql: &'static str) -> i64 {
    let pool = db.pool().await;
    let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
    pool.close().await;
    n
}

/// Every operator route: no credential is 401, a customer's valid session is 403 (and so is
/// a customer's JWT: `jwt.rs` covers the extractor they share), the operator token passes;
/// bad look-ups are 400 problems. Nothing is journaled for a refused request.
async fn every_admin_route_refuses_no_credential_and_a_customer_token(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let routes = [
        admin::timeline(&id),
        admin::evidence(&id),
        format!("{}?key=k", admin::LOOKUP),
        admin::REVIEWS.to_owned(),
    ];
    for path in &routes {
        let none = s.call(Req::get(path.as_str())).await;
        assert_eq!(none.status, 401, "{path}: {}", none.text());
        assert_eq!(none.code(), ErrorCode::Unauthenticated);
        let customer = s.call(Req::get(path.as_str()).bearer(&t)).await;
        assert_eq!(customer.status, 403, "{path}: {}", customer.text());
        assert_eq!(customer.code(), ErrorCode::OperatorRequired);
        let wrong = s
            .call(Req::get(path.as_str()).bearer("not-the-token"))
            .await;
        assert_eq!(wrong.status, 401, "{path}");
        admin_get(&s, path).await;
    }
    for bad in ["", "?color=red", "?key=a&user=b", "?key="] {
        let path = format!("{}{bad}", admin::LOOKUP);
        let r = s.call(Req::get(path.as_str()).bearer(OPERATOR_TOKEN)).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), ErrorCode::InvalidRequest);
    }
    let r = s
        .call(Req::get(admin::timeline("ord_missing").as_str()).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(r.code(), ErrorCode::OrderNotFound);
    let reads = db_count(&db, "SELECT COUNT(*) FROM journal").await;
    assert_eq!(
        reads, 5,
        "the operator's five reads that passed, nothing else"
    );
    // The page for people holds no data: it loads without a credential, and its script
    // asks the routes above with the token the operator types.
    let page = s.call(Req::get(admin::PAGE)).await;
    assert_eq!(page.status, 200);
    let html = page.header("content-type").unwrap();
    assert!(html.starts_with("text/html"), "{html}");
    assert!(page.header("content-security-policy").is_some());
    assert!(page.text().contains("/timeline"));
}

/// An order paid 179 days ago still has its whole journal and audit trail; past the
/// retention (`--audit-retention-days`, 180 by default) the cleanup job deletes them.
async fn the_journal_is_kept_for_the_dispute_window_then_deleted(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.call(pay_req(&t, &id, &key(), "paid-long-ago")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = async || {
        let tl = admin_get(&s, &admin::timeline(&id)).await;
        let all = tl["events"].as_array().unwrap().clone();
        let requests = all.iter().filter(|e| e["kind"] == "pay").count();
        let audit = all.iter().filter(|e| e["source"] == "audit").count();
        (requests, audit)
    };
    let before = events().await;
    assert_eq!(before.0, 1);
    assert!(before.1 >= 1, "{before:?}");
    s.advance(Duration::from_secs(179 * 86_400));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(
        events().await,
        before,
        "179 days on, the whole story is kept"
    );
    s.advance(Duration::from_secs(2 * 86_400));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(events().await, (0, 0), "past the retention, deleted");
    let left = db_count(
        &db,
        "SELECT COUNT(*) FROM journal WHERE kind <> 'operator_read'",
    )
    .await;
    assert_eq!(left, 0);
}

/// The journal request entries whose request id is `request_id`.
async fn entries_of(s: &InProc, request_id: &str) -> usize {
    let path = format!("{}?request_id={request_id}", admin::LOOKUP);
    let found = admin_get(s, &path).await;
    found["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "pay")
        .count()
}

/// Which partition holds the journal row of `request_id` (PostgreSQL only), once it is
/// there (a request's entry commits just after its answer: docs/operating.md).
async fn table_of(db: &TestDb, request_id: &str) -> String {
    let pool = db.pool().await;
    let sql = "SELECT tableoid::regclass::text FROM journal WHERE request_id = $1 AND kind = 'pay'";
    let t = payonce_testkit::wait_for("the pay's entry", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, String>(sql)
            .bind(request_id)
            .fetch_optional(&pool)
            .await
            .unwrap()
    })
    .await;
    pool.close().await;
    t
}

/// Retention by whole days (store/journal.rs, "Retention"): with the clock moved 181 days,
/// the first day's pay is gone and one of yesterday stays. On PostgreSQL the first pay was
/// written into its day's partition, made ready by the cleanup round before it, and that
/// partition is dropped whole: no row of it was deleted one by one from the DEFAULT one.
async fn a_day_of_the_journal_past_the_retention_goes_whole_and_recent_days_stay(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    payonce_server::run_cleanup(&s.state).await.unwrap();
    let t = s.session("alice").await;
    let first = s.order(&t).await;
    let r = s.call(pay_req(&t, &first, &key(), "day-0")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let pg = backend == Backend::Postgres;
    let day0 = match pg {
        true => table_of(&db, "day-0").await,
        false => String::new(),
    };
    if pg {
        assert!(day0.starts_with("journal_2"), "a day partition: {day0}");
    }
    for _ in 0..180 {
        // A job round a day, as a running server's would be (many more, in fact).
        s.advance(Duration::from_secs(86_400));
        payonce_server::run_cleanup(&s.state).await.unwrap();
    }
    let t = s.session("alice").await;
    let recent = s.order(&t).await;
    let r = s.call(pay_req(&t, &recent, &key(), "day-180")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(entries_of(&s, "day-0").await, 1, "180 days on, kept");
    s.advance(Duration::from_secs(86_400));
    payonce_server::run_cleanup(&s.state).await.unwrap();
    assert_eq!(entries_of(&s, "day-0").await, 0, "past the retention, gone");
    assert_eq!(entries_of(&s, "day-180").await, 1, "a recent day stays");
    if pg {
        let gone = format!("SELECT COUNT(*) FROM pg_class WHERE relname = '{day0}'");
        let pool = db.pool().await;
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(gone))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 0, "{day0} dropped");
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM journal_default")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 0, "nothing fell into the DEFAULT partition");
        // A schema-14 release's cleanup (its `Store::delete_batch`), still serving during a
        // rolling upgrade: on a partitioned table its ctids match rows of every day, so the
        // migration's guard skips its deletes and the recent day stays.
        let v14 = "DELETE FROM journal WHERE ctid IN
            (SELECT ctid FROM journal WHERE at < $1 LIMIT $2)";
        let horizon = s.clock.now_ms();
        let r = sqlx::query(v14).bind(horizon).bind(1000_i64);
        assert_eq!(r.execute(&pool).await.unwrap().rows_affected(), 0);
        pool.close().await;
        let recent_day = table_of(&db, "day-180").await;
        assert!(recent_day.starts_with("journal_2"), "{recent_day}");
    }
}

/// A database journaled by a schema-14 server: the table as migrations/0014_journal.sql
/// made it, holding a pay's entries, and migration 15 not yet applied. A server of this
/// release migrates it (on PostgreSQL into day partitions) and the operator finds every
/// entry again.
async fn the_journal_written_before_migration_15_is_read_after_it(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, dir) = server(&db).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.call(pay_req(&t, &id, &key(), "before-15")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let tl = admin_get(&s, &admin::timeline(&id)).await;
    let before: Vec<Value> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "journal")
        .cloned()
        .collect();
    assert!(
        before.len() >= 2,
        "the pay and its provider call: {before:?}"
    );
    drop(s);
    // Back to schema 14: the same rows in the table 0014 created, 15 not recorded.
    let id_key = match backend {
        Backend::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        Backend::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    };
    let v14 = include_str!("../../migrations/0014_journal.sql")
        .replace("{{ID_PRIMARY_KEY}}", id_key)
        .replace("CREATE TABLE journal ", "CREATE TABLE journal14 ")
        .replace("CREATE INDEX journal_", "CREATE INDEX journal14_")
        .replace(" ON journal ", " ON journal14 ");
    let columns = "at, actor, kind, request_id, user_id, order_id, idem_key, provider_id, detail";
    let pool = db.pool().await;
    let mut steps = vec![v14];
    steps.push(format!(
        "INSERT INTO journal14 ({columns}) SELECT {columns} FROM journal ORDER BY id"
    ));
    steps.push("DROP TABLE journal".into());
    if backend == Backend::Postgres {
        steps.push("DROP FUNCTION journal_delete_guard()".into());
        steps.push("ALTER TABLE journal14 RENAME CONSTRAINT journal14_pkey TO journal_pkey".into());
    }
    steps.push("ALTER TABLE journal14 RENAME TO journal".into());
    steps.push("DELETE FROM payonce_migrations WHERE version = 15".into());
    if backend == Backend::Postgres {
        // The index names 0014 gave, as the migration expects them.
        for name in ["time", "order", "request", "key", "provider", "user"] {
            steps.push(format!(
                "ALTER INDEX journal14_by_{name} RENAME TO journal_by_{name}"
            ));
        }
    }
    // One connection, one script: the steps see each other's changes.
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(steps.join(";\n")))
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    pool.close().await;
    drop(dir);
    let (s, _dir) = server(&db).await;
    let tl = admin_get(&s, &admin::timeline(&id)).await;
    let after: Vec<Value> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "journal")
        .cloned()
        .collect();
    // The operator's timeline read (journaled after the first read) is there too.
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "every entry kept, in order"
    );
    if backend == Backend::Postgres {
        let table = table_of(&db, "before-15").await;
        assert!(
            table.starts_with("journal_2"),
            "moved into its day: {table}"
        );
    }
    // New entries continue after the copied ones.
    let t = s.session("alice").await;
    let next = s.order(&t).await;
    let r = s.call(pay_req(&t, &next, &key(), "after-15")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(entries_of(&s, "after-15").await, 1);
}

/// A proxy in front of `upstream` that adds `Request-Id: req_<n>` to every answer, as Stripe
/// does (localstripe sends none).
pub async fn request_id_proxy(upstream: &str) -> String {
    use axum::body::Body;
    use axum::extract::State;
    use axum::http::Request;
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    type Up = (String, Arc<AtomicUsize>, reqwest::Client);
    async fn forward(
        State((up, n, http)): State<Up>,
        req: Request<Body>,
    ) -> axum::response::Response {
        let (parts, body) = req.into_parts();
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
        let (status, mut headers) = (res.status(), res.headers().clone());
        let id = format!("req_{}", n.fetch_add(1, Ordering::SeqCst));
        headers.insert(
            payonce_protocol::headers::STRIPE_REQUEST_ID,
            id.parse().unwrap(),
        );
        let bytes = res.bytes().await.unwrap_or_default();
        (status, headers, bytes).into_response()
    }
    let state: Up = (
        upstream.to_owned(),
        Arc::new(AtomicUsize::new(0)),
        crate::common::client(),
    );
    let router = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// The binary, for its subcommands.
fn binary() -> std::process::Command {
    payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref())
}

/// A start outside `--dev`, as a deployment runs it: `/admin/` answers 401 without a
/// credential and 403 to a customer's session token there too; the operator token reads the
/// timeline; and `payonce-server timeline ORDER_ID` prints it from the database alone.
async fn a_production_start_keeps_admin_to_the_operator_and_the_command_prints_a_timeline(
    backend: Backend,
) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = spawn(&mock_provider_args(), false);
    let migrated = binary()
        .args(["migrate", "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(migrated.status.success(), "{migrated:?}");
    let (_dir, file) = token_file();
    let provider_url = provider.provider.clone().unwrap();
    let args: Vec<String> = [
        "--addr",
        "127.0.0.1:0",
        "--provider",
        "mock",
        "--provider-url",
        &provider_url,
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--allow-plaintext",
        "database",
        "--database-url",
        &db.url,
        "--operator-token-file",
        &file,
        // A production start names its mailer (docs/deploy.md, "Receipt emails").
        "--mailer",
        "none",
    ]
    .map(String::from)
    .to_vec();
    let proc = spawn(&args, true);
    let app = TestApp {
        api: proc.api.clone().unwrap(),
        provider: provider_url.clone(),
        http: client(),
        _procs: vec![],
        db: None,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t = payonce_server::sign_token(SECRET.as_bytes(), "alice", now + 600);
    let id = id_of(&app.create_order(&t, &[("tee-classic", 1)]).await);
    let k = key();
    let paid = app.pay(&t, &id, Some(&k), 1, "pm_card_approve").await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let path = admin::timeline(&id);
    let none = app.call(Req::get(path.as_str())).await;
    assert_eq!(
        (none.status, none.code()),
        (401, ErrorCode::Unauthenticated)
    );
    let customer = app.call(Req::get(path.as_str()).bearer(&t)).await;
    assert_eq!(
        (customer.status, customer.code()),
        (403, ErrorCode::OperatorRequired)
    );
    let tl = app
        .call(Req::get(path.as_str()).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(tl.status, 200, "{}", tl.text());

    let out = binary()
        .args(["timeline", &id, "--database-url", &db.url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let charge = paid.json()["payment"]["chargeId"]
        .as_str()
        .unwrap()
        .to_owned();
    for want in [
        id.as_str(),
        "alice",
        k.as_str(),
        "request pay",
        "provider_call",
        &charge,
    ] {
        assert!(text.contains(want), "{want} not in:\n{text}");
    }
    let unknown = binary()
        .args(["timeline", "ord_missing", "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    // The same timeline by the key the customer used and by the provider's charge id.
    for by in [["--key", k.as_str()], ["--provider-id", charge.as_str()]] {
        let out = binary()
            .args(["timeline", by[0], by[1], "--database-url", &db.url])
            .output()
            .unwrap();
        let by_text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{by:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(by_text, text, "{by:?} prints the order's timeline");
    }
    for by in [["--key", "k-nobody-used"], ["--provider-id", "pi_missing"]] {
        let out = binary()
            .args(["timeline", by[0], by[1], "--database-url", &db.url])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{by:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(by[1]), "{by:?}: {err}");
    }
}

/// The provider never answers: the pay is 202, the jobs ask the provider again and, past the
/// reconcile window, flag the attempt for review. The review queue lists it with its reason
/// and age; the order's timeline holds the request's call and the jobs' calls (actor `job`),
/// each proving nothing.
async fn a_review_flag_is_queued_with_its_reason_and_the_jobs_calls_are_in_the_timeline(
    backend: Backend,
) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (_dir, file) = token_file();
    let flags = [
        "--operator-token-file",
        file.as_str(),
        "--provider-timeout-ms",
        "300",
        "--reconcile-after-ms",
        "60000",
    ];
    let s = InProc::start(&db, "http://127.0.0.1:9", &flags).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let r = s.pay(&t, &id, Some(&key()), 1, "pm_card_approve").await;
    assert_eq!(r.status, 202, "{}", r.text());
    payonce_server::run_jobs(&s.state).await;
    s.advance(Duration::from_millis(60_001));
    payonce_server::run_jobs(&s.state).await;
    s.advance(Duration::from_secs(30));
    let q = admin_get(&s, admin::REVIEWS).await;
    let flagged: Vec<&Value> = q["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["orderId"] == id.as_str())
        .collect();
    assert_eq!(flagged.len(), 1, "{q:#}");
    assert_eq!(flagged[0]["kind"], "attempt");
    assert!(
        flagged[0]["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{q:#}"
    );
    assert_eq!(flagged[0]["ageMs"], 30_000);
    let tl = admin_get(&s, &admin::timeline(&id)).await;
    let calls: Vec<(&str, &str)> = tl["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "provider_call")
        .map(|e| {
            (
                e["actor"].as_str().unwrap(),
                e["detail"]["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(calls[0], ("request", "unknown"), "{calls:?}");
    assert!(calls.len() >= 2, "{calls:?}");
    assert!(
        calls[1..].iter().all(|c| *c == ("job", "unknown")),
        "{calls:?}"
    );
}

/// With `--jwt-operator-role`, a valid JWT whose `role` claim names it is an operator's; a
/// customer's JWT (no role, another role) is 403, a forged one 401.
async fn a_jwt_reaches_admin_only_with_the_operator_role(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    const KEY: &str = "jwt-secret-for-operators-0123456789abcdef";
    let flags = [
        "--jwt-hs256-secret",
        KEY,
        "--jwt-issuer",
        "https://login.example",
        "--jwt-audience",
        "payonce",
        "--jwt-operator-role",
        "payonce-operator",
    ];
    let s = InProc::start(&db, &provider().await, &flags).await;
    let now = s.clock.now_ms() / 1000;
    let jwt = |key: &str, role: Option<Value>| {
        let mut claims = json!({
            "sub": "support_sam", "iss": "https://login.example", "aud": "payonce",
            "iat": now, "exp": now + 300,
        });
        if let Some(r) = role {
            claims["role"] = r;
        }
        let key = jsonwebtoken::EncodingKey::from_secret(key.as_bytes());
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    let get = async |token: String| {
        let r = s.call(Req::get(admin::REVIEWS).bearer(&token)).await;
        (r.status, (r.status != 200).then(|| r.code()))
    };
    let operator = jwt(KEY, Some(json!(["support", "payonce-operator"])));
    assert_eq!(get(operator).await, (200, None));
    let forbidden = Some(ErrorCode::OperatorRequired);
    assert_eq!(get(jwt(KEY, None)).await, (403, forbidden));
    assert_eq!(
        get(jwt(KEY, Some(json!("customer")))).await,
        (403, forbidden)
    );
    let forged = jwt(
        "another-secret-0123456789abcdef0123456",
        Some(json!("payonce-operator")),
    );
    assert_eq!(get(forged).await, (401, Some(ErrorCode::Unauthenticated)));
}

/// A key cancelled before it was used, a pay with another key, a refund of the payment: the
/// timeline holds the three requests in order, each with its key, and the refund's provider
/// calls about the charge.
async fn a_cancel_and_a_refund_are_journaled_with_their_keys_and_calls(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    let t = s.session("alice").await;
    let id = s.order(&t).await;
    let (dropped, paying, refund) = (key(), key(), key());
    let c = s.cancel(&t, &id, &dropped).await;
    assert_eq!(c.status, 200, "{}", c.text());
    let paid = s.pay(&t, &id, Some(&paying), 1, "pm_card_approve").await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let payment = paid.json()["payment"]["id"].as_str().unwrap().to_owned();
    let charge = paid.json()["payment"]["chargeId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = s.refund(&t, &payment, Some(&refund)).await;
    assert!(r.status < 300, "{}", r.text());
    let tl = admin_get(&s, &admin::timeline(&id)).await;
    let events = tl["events"].as_array().unwrap();
    let requests: Vec<(&str, &str, i64)> = events
        .iter()
        .filter(|e| ["pay", "cancel", "refund"].contains(&e["kind"].as_str().unwrap_or("")))
        .map(|e| {
            let kind = e["kind"].as_str().unwrap();
            (
                kind,
                e["key"].as_str().unwrap(),
                e["detail"]["status"].as_i64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("cancel", dropped.as_str(), 200),
        ("pay", paying.as_str(), 200),
        ("refund", refund.as_str(), r.status.into()),
    ];
    assert_eq!(requests, want);
    // The machines' decisions, in order, each made under the request it answered.
    let request_of = |kind: &str| {
        let e = events.iter().find(|e| e["kind"] == kind).unwrap();
        e["requestId"].as_str().unwrap().to_owned()
    };
    let decisions: Vec<(&str, Option<&str>, String)> = events
        .iter()
        .filter(|e| decision::ALL.contains(&e["kind"].as_str().unwrap_or("")))
        .filter(|e| e["kind"] != decision::EMAIL)
        .map(|e| {
            let kind = e["kind"].as_str().unwrap();
            let by = e["requestId"].as_str().unwrap_or("-").to_owned();
            (kind, e["detail"]["outcome"].as_str(), by)
        })
        .collect();
    let (cancel, pay, refunding) = (
        request_of("cancel"),
        request_of("pay"),
        request_of("refund"),
    );
    let want = [
        (decision::TOMBSTONE, None, cancel),
        (decision::CLAIM_WON, None, pay.clone()),
        (decision::SETTLE, Some(settle::PAID), pay.clone()),
        (decision::EMAIL_QUEUED, None, pay),
        (decision::REFUND_LEASE, None, refunding.clone()),
        (decision::REFUND_SETTLE, Some("succeeded"), refunding),
    ];
    assert_eq!(decisions, want, "{events:#?}");
    let refund_entry = events.iter().find(|e| e["kind"] == "refund").unwrap();
    assert_eq!(refund_entry["detail"]["paymentId"], payment.as_str());
    let refund_calls: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "provider_call" && e["key"] == refund.as_str())
        .map(|e| e["detail"]["op"].as_str().unwrap())
        .collect();
    assert!(refund_calls.contains(&"refund"), "{refund_calls:?}");
    assert!(events
        .iter()
        .filter(|e| e["kind"] == "provider_call" && e["key"] == refund.as_str())
        .all(|e| e["providerId"] == charge.as_str() || e["detail"]["op"] == "refund"));
}

/// `POST /admin/users/{id}/erase` (docs/deploy.md, "Erasing a user"): 401 without a
/// credential, 403 with the customer's own session (nothing erased); the operator's erases the
/// user's order address (the order then answers `address: null`), answers and journals what
/// it changed, and a second erasure changes nothing.
async fn an_operator_erases_a_user_through_the_api_and_the_journal_says_so(backend: Backend) {
    const ADDRESS: &str = "12 Rue des Erasures, 75001 Paris";
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let (s, _dir) = server(&db).await;
    let t = s.session("ann").await;
    let body = json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }], "address": ADDRESS });
    let r = s.call(Req::post(paths::ORDERS).bearer(&t).json(body)).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let id = id_of(&r.json());
    let path = admin::erase_user("ann");

    let none = s.call(Req::post(path.as_str())).await;
    assert_eq!(none.status, 401, "{}", none.text());
    let customer = s.call(Req::post(path.as_str()).bearer(&t)).await;
    assert_eq!(customer.status, 403, "{}", customer.text());
    assert_eq!(customer.code(), ErrorCode::OperatorRequired);
    let order = s.call(Req::get(paths::order(&id)).bearer(&t)).await;
    assert_eq!(
        order.json()["address"],
        ADDRESS,
        "a refused erasure erases nothing"
    );

    let r = s
        .call(Req::post(path.as_str()).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["erased"]["orderAddresses"], 1, "{}", r.text());
    let order = s.call(Req::get(paths::order(&id)).bearer(&t)).await;
    assert!(order.json()["address"].is_null(), "{}", order.text());
    let again = s
        .call(Req::post(path.as_str()).bearer(OPERATOR_TOKEN))
        .await;
    assert_eq!(
        again.json()["erased"]["orderAddresses"],
        0,
        "{}",
        again.text()
    );

    let actions = "SELECT COUNT(*) FROM journal WHERE kind = 'operator_action' AND user_id = 'ann'";
    assert_eq!(db_count(&db, actions).await, 2);
    let audit = "SELECT COUNT(*) FROM audit_log WHERE entity = 'user' AND entity_id = 'ann'";
    assert_eq!(db_count(&db, audit).await, 2);
}
