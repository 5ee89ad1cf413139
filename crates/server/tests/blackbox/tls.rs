//! TLS to every dependency: PostgreSQL (`sslmode`), Redis (`rediss://`) and the provider
//! (`https://`), on local services the test makes itself (`payonce_testkit::tls`: a CA, a
//! private PostgreSQL with `ssl=on`, a TLS-only `redis-server`, a TLS terminator in front
//! of the mock provider). A server over all three pays once; a wrong CA or a plain-text
//! provider stops the start with a line naming the flag; `sslmode=disable` still connects.

use crate::common::{
    client, id_of, key, mock_provider_args, spawn, Backend, Checkout, Opts, Proc, TestApp, TestDb,
    WEBHOOK_SECRET,
};
use payonce_testkit::eventually;
use payonce_testkit::redis::PrivateRedis;
use payonce_testkit::tls::{terminate, Certs, TlsPg};
use sqlx::{Connection, PgConnection};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const APPROVE: &str = "pm_card_approve";

/// The three TLS services, trusting one CA, and the plain provider behind the terminator.
struct Services {
    certs: Certs,
    pg: TlsPg,
    redis: PrivateRedis,
    provider: Proc,
    https: String,
}

async fn services() -> Option<Services> {
    let certs = Certs::new();
    let pg = TlsPg::start(&certs).await?;
    let redis = PrivateRedis::start_tls(&certs).await?;
    let provider = spawn(&mock_provider_args(), false);
    let https = terminate(&certs, &provider.provider()).await;
    Some(Services {
        certs,
        pg,
        redis,
        provider,
        https,
    })
}

/// A dev server's flags on `db`, reaching the provider at `provider` and Redis at `redis`,
/// trusting `ca`.
fn args(db: &str, provider: &str, redis: &str, ca: &Path) -> Vec<String> {
    let mut a = Opts::default().args(db);
    let ca = ca.display().to_string();
    for (flag, v) in [
        ("--provider-url", provider),
        ("--webhook-secret", WEBHOOK_SECRET),
        ("--redis-url", redis),
        ("--tls-ca-file", &ca),
    ] {
        a.extend([flag.to_owned(), v.to_owned()]);
    }
    a
}

/// Pays one order once (and retries it with the same key); returns the order id.
async fn pay_once(app: &TestApp) -> String {
    let token = app.session("alice").await;
    let id = id_of(&app.create_order(&token, &[("tee-classic", 1)]).await);
    let k = key();
    let first = app.pay(&token, &id, Some(&k), 1, APPROVE).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = app.pay(&token, &id, Some(&k), 1, APPROVE).await;
    assert_eq!(again.json(), first.json(), "the retry replays the charge");
    assert_eq!(app.ledger(&id).await.len(), 1, "charged once");
    id
}

/// Stored payments of `id`, and whether the other client connections to the database
/// use TLS (`pg_stat_ssl`), read over `url`.
async fn stored(url: &str, id: &str) -> (i64, Vec<bool>) {
    let mut c = PgConnection::connect(url).await.expect("connect");
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM payments WHERE order_id = $1")
        .bind(id)
        .fetch_one(&mut c)
        .await
        .expect("count payments");
    let ssl: Vec<(bool,)> = sqlx::query_as(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
    )
    .fetch_all(&mut c)
    .await
    .expect("pg_stat_ssl");
    (n, ssl.into_iter().map(|(s,)| s).collect())
}

fn app(proc: Proc, provider: &str) -> TestApp {
    TestApp {
        api: proc.api(),
        provider: provider.to_owned(),
        http: client(),
        _procs: vec![proc],
        db: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_to_postgres_redis_and_the_provider_a_pay_charges_once() {
    let Some(s) = services().await else { return };
    // verify-full with the CA from --tls-ca-file (no sslrootcert in the URL).
    let db = s.pg.url("sslmode=verify-full");
    let proc = spawn(&args(&db, &s.https, &s.redis.url(), &s.certs.ca), true);
    let app = app(proc, &s.provider.provider());
    let id = pay_once(&app).await;
    let admin = s.pg.url(&format!("sslrootcert={}", s.certs.ca.display()));
    let (payments, ssl) = stored(&format!("{admin}&sslmode=verify-full"), &id).await;
    assert_eq!(payments, 1, "one payment row");
    assert!(
        !ssl.is_empty() && ssl.iter().all(|&s| s),
        "the server's connections use TLS: {ssl:?}"
    );
    let mut redis = s.redis.connection().await;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut redis).await.unwrap();
    assert!(keys > 0, "the fast path wrote to Redis over rediss://");
}

/// Starts the server with `args`; it must exit by itself, soon, with a line naming `flag`.
async fn refused(args: Vec<String>, flag: &str) {
    let log = std::env::temp_dir().join(format!("payonce-tls-{}.log", uuid::Uuid::new_v4()));
    let mut child = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run payonce-server");
    let exit = eventually(Duration::from_secs(30), Duration::from_millis(20), || {
        std::future::ready(child.try_wait().ok().flatten())
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        exit.is_some_and(|s| !s.success()),
        "the start must be refused ({flag}):\n{stderr}"
    );
    let prefix = format!("payonce-server: {flag}: ");
    assert!(
        stderr.lines().any(|l| l.starts_with(&prefix)),
        "a line names {flag}:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_a_plain_text_server_is_refused_at_start() {
    let Some(s) = services().await else { return };
    let wrong = Certs::new();
    let good_db = s.pg.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        s.certs.ca.display()
    ));
    let (https, rediss) = (s.https.as_str(), s.redis.url());
    // A CA that signed none of them: the database is the first one connected.
    let db = s.pg.url("sslmode=verify-ca");
    refused(args(&db, https, &rediss, &wrong.ca), "--database-url").await;
    // The URL's own sslrootcert connects; the provider, then Redis, meet the wrong CA.
    refused(args(&good_db, https, &rediss, &wrong.ca), "--provider-url").await;
    let plain_http = s.provider.provider();
    refused(
        args(&good_db, &plain_http, &rediss, &wrong.ca),
        "--redis-url",
    )
    .await;
    // A plain-text server behind an https:// URL: the mock provider itself.
    let plain_provider = plain_http.replace("http://", "https://");
    refused(
        args(&good_db, &plain_provider, &rediss, &s.certs.ca),
        "--provider-url",
    )
    .await;
    // (A plain-text Redis behind `rediss://` never answers the TLS hello: that is a
    // timeout, which degrades to the database path like any unreachable Redis.)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_still_connects_in_plain_text() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let url = format!("{}?sslmode=disable", db.url);
    let mut a = Opts::default().args(&url);
    a.extend(["--provider-addr".into(), "127.0.0.1:0".into()]);
    let proc = spawn(&a, true);
    let provider = proc.provider();
    let app = app(proc, &provider);
    let id = pay_once(&app).await;
    let (payments, ssl) = stored(&url, &id).await;
    assert_eq!(payments, 1, "one payment row");
    assert!(
        !ssl.is_empty() && ssl.iter().all(|&s| !s),
        "no TLS: {ssl:?}"
    );
}
