//! Start-up outside `--dev`: a server without its production flags refuses to start and
//! names each missing or unsafe one (plain-text links and credentials in URLs included);
//! with them it starts and serves `/healthz`. The provider's API key travels as a Bearer
//! header, and no credential reaches the log.

use crate::common::{
    mock_provider_args, spawn, spawn_logged, Backend, Opts, TestDb, SECRET, WEBHOOK_SECRET,
};
use std::io::{Read, Write};
use std::process::Command;

/// Runs the binary with `args` and no `PAYONCE_*` / database / Redis variables; it must exit
/// on its own.
/// Like [`run_refused_bare`], naming the mock provider in the environment, as a deployment
/// of it would.
fn run_refused(args: &[&str]) -> (String, String) {
    run_refused_with(args, &[("PAYONCE_PROVIDER", "mock")])
}

/// Runs the server with `args` and nothing from the environment; it must refuse to start.
fn run_refused_bare(args: &[&str]) -> (String, String) {
    run_refused_with(args, &[])
}

fn run_refused_with(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_payonce-server"))
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run payonce-server");
    assert!(!out.status.success(), "the server must refuse to start");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stdout.contains("listening"),
        "no listener may start: {stdout}"
    );
    (stdout, stderr)
}

/// The lines of `stderr` that start with `payonce-server: FLAG`.
fn lines_naming<'a>(stderr: &'a str, flag: &str) -> Vec<&'a str> {
    let prefix = format!("payonce-server: {flag}");
    stderr.lines().filter(|l| l.starts_with(&prefix)).collect()
}

#[test]
fn a_start_without_dev_and_its_flags_names_each_missing_one() {
    let (_, err) = run_refused_bare(&["--database-url", "sqlite://:memory:"]);
    for flag in [
        "--provider (",
        "--provider-url",
        "--webhook-secret",
        "--session-secret",
        "--mailer (",
    ] {
        assert_eq!(
            lines_naming(&err, flag).len(),
            1,
            "{flag} named once:\n{err}"
        );
    }
    // A short secret and unusable URL schemes are refused at start too, all in one go.
    let (_, err) = run_refused(&[
        "--provider-url",
        "ftp://psp.example",
        "--database-url",
        "mysql://db/x",
        "--redis-url",
        "memcached://cache:11211",
        "--webhook-secret",
        "short",
        "--session-secret",
        SECRET,
    ]);
    for flag in [
        "--provider-url",
        "--database-url",
        "--redis-url",
        "--webhook-secret",
    ] {
        assert_eq!(
            lines_naming(&err, flag).len(),
            1,
            "{flag} named once:\n{err}"
        );
    }
    assert!(lines_naming(&err, "--session-secret").is_empty(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_flags_a_server_without_dev_starts_and_is_healthy() {
    let provider = spawn(&mock_provider_args(), false);
    let dir = std::env::temp_dir().join(format!("payonce-startup-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = [
        "--addr",
        "127.0.0.1:0",
        "--database-url",
        &format!("sqlite://{}/p.db", dir.display()),
        // A new file: migrate as the start's step (`schema.rs` tests the default, check).
        "--migrate",
        "auto",
        "--provider-url",
        provider.provider.as_deref().unwrap(),
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--mailer",
        "none",
    ]
    .map(String::from)
    .to_vec();
    let api = spawn(&args, true);
    assert!(
        api.provider.is_none(),
        "no embedded provider outside dev mode"
    );
    let url = format!("{}/healthz", api.api.as_deref().unwrap());
    let r = reqwest::get(&url).await.unwrap();
    assert_eq!(r.status(), 200);
    // Dev sessions stay refused.
    let r = reqwest::Client::new()
        .post(format!("{}/dev/sessions", api.api.as_deref().unwrap()))
        .json(&serde_json::json!({ "userId": "alice" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    drop(api);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The flags a start outside `--dev` needs but the provider and database URLs.
fn production_flags() -> Vec<&'static str> {
    vec![
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--mailer",
        "none",
    ]
}

#[test]
fn plain_text_links_credentials_and_a_day_of_leeway_stop_the_start() {
    let cases = [
        (
            vec!["--provider-url", "http://psp.example"],
            "--provider-url",
            "http://",
        ),
        (
            vec!["--provider-url", "https://acct_1:pw_9@psp.example"],
            "--provider-url",
            "credentials",
        ),
        (
            vec![
                "--provider-url",
                "https://psp.example",
                "--database-url",
                "postgres://127.0.0.1:1/x",
            ],
            "--database-url",
            "sslmode=prefer",
        ),
        (
            vec![
                "--provider-url",
                "https://psp.example",
                "--redis-url",
                "redis://cache.example:6379",
            ],
            "--redis-url",
            "redis://",
        ),
        (
            vec![
                "--provider-url",
                "https://psp.example",
                "--jwt-hs256-secret",
                "jwt-secret-0123456789abcdef0123456789",
                "--jwt-issuer",
                "https://id.example",
                "--jwt-audience",
                "payonce",
                "--jwt-leeway-secs",
                "86400",
            ],
            "--jwt-leeway-secs",
            "at most 300",
        ),
    ];
    for (extra, flag, why) in cases {
        let mut args = production_flags();
        args.extend(extra.iter().copied());
        if !extra.contains(&"--database-url") {
            args.extend(["--database-url", "sqlite://:memory:"]);
        }
        let (_, err) = run_refused(&args);
        let lines = lines_naming(&err, flag);
        assert_eq!(lines.len(), 1, "{extra:?}:\n{err}");
        assert!(lines[0].contains(why) && lines[0].contains("--"), "{err}");
        assert!(!err.contains("pw_9"), "credentials never shown:\n{err}");
    }
}

/// Accepts connections on a free loopback port and answers each request head with a 404,
/// sending the heads it read to the returned channel.
fn recording_provider() -> (String, std::sync::mpsc::Receiver<String>) {
    answering_provider("404 Not Found")
}

/// [`recording_provider`], answering `status` (e.g. `401 Unauthorized`).
fn answering_provider(status: &'static str) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            let answer =
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (url, rx)
}

#[test]
fn the_provider_api_key_is_sent_as_a_bearer_token_and_never_logged() {
    let (provider, heads) = recording_provider();
    let dir = std::env::temp_dir().join(format!("payonce-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = "sk_test_blackbox_0123456789";
    let key_file = dir.join("provider.key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let log = dir.join("server.log");
    let args: Vec<String> = [
        "--addr",
        "127.0.0.1:0",
        "--database-url",
        &format!("sqlite://{}/p.db", dir.display()),
        // A new file: migrate as the start's step (`schema.rs` tests the default, check).
        "--migrate",
        "auto",
        "--provider-url",
        &provider,
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--provider-api-key-file",
        key_file.to_str().unwrap(),
        "--mailer",
        "none",
    ]
    .map(String::from)
    .to_vec();
    let api = spawn_logged(&args, true, &log);
    // The start-up probe is the first request the provider sees.
    let head = heads
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the server asked the provider");
    let auth: Vec<&str> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("authorization:"))
        .collect();
    assert_eq!(auth.len(), 1, "{head}");
    assert_eq!(
        auth[0].split_once(':').unwrap().1.trim(),
        format!("Bearer {key}")
    );
    drop(api);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("payment provider"), "{logged}");
    assert!(!logged.contains(key), "the key is never logged:\n{logged}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// In dev mode userinfo in `--provider-url` is still allowed (reqwest sends it as Basic
/// auth), but the start-up line shows the URL without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_log_shows_the_provider_url_without_credentials() {
    let provider = spawn(&mock_provider_args(), false);
    let Some(db) = TestDb::create(crate::common::Backend::Sqlite).await else {
        return;
    };
    let url = provider
        .provider()
        .replace("http://", "http://acct_1:pw_s3cr3t@");
    let mut args = Opts::default().args(&db.url);
    args.extend(["--provider-url".into(), url, "--webhook-secret".into()]);
    args.push(WEBHOOK_SECRET.into());
    let log = std::env::temp_dir().join(format!("payonce-redact-{}.log", uuid::Uuid::new_v4()));
    let api = spawn_logged(&args, true, &log);
    let r = reqwest::get(format!("{}/healthz", api.api()))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(api);
    let logged = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let line = logged
        .lines()
        .find(|l| l.contains("payment provider"))
        .unwrap_or_else(|| panic!("no provider line:\n{logged}"));
    assert!(line.contains("http://***@127.0.0.1:"), "{line}");
    assert!(
        !logged.contains("pw_s3cr3t") && !logged.contains("acct_1"),
        "{logged}"
    );
}

/// A Stripe start outside `--dev` against `provider` with `key` and `extra` flags (the
/// environment cleared but `env`): `Ok(log)` when the server refused to start, `Err(log)`
/// when it came up (it is stopped then).
fn stripe_start(
    provider: &str,
    key: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("payonce-mode-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("server.log");
    let mut cmd = payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref());
    cmd.env_clear()
        .envs(env.iter().copied())
        .args(["--addr", "127.0.0.1:0", "--provider", "stripe"])
        .args(["--provider-url", provider, "--stripe-secret-key", key])
        .args([
            "--stripe-webhook-secret",
            WEBHOOK_SECRET,
            "--session-secret",
            SECRET,
            "--mailer",
            "none",
        ])
        .args([
            "--database-url",
            &format!("sqlite://{}/p.db", dir.display()),
            "--migrate",
            "auto",
        ])
        .args(extra)
        .stderr(std::fs::File::create(&log).unwrap());
    let started = payonce_testkit::server::Proc::spawn(cmd, true);
    let up = started.is_ok();
    drop(started);
    let logged = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!logged.contains(key), "the key is never logged:\n{logged}");
    if up {
        Err(logged)
    } else {
        Ok(logged)
    }
}

/// A Stripe test key takes test cards as money: outside `--dev` it refuses to start unless
/// `--allow-test-mode` (or its variable) says so, and then it logs the mode, as it does for a
/// live key. Every Stripe request names the API version the adapter is written for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_test_key_outside_dev_needs_allow_test_mode_and_the_mode_is_logged() {
    let Some(ls) = payonce_testkit::localstripe::Localstripe::start().await else {
        return;
    };
    let key = "sk_test_startup_mode_0123456789";
    let refused = stripe_start(&ls.url(), key, &[], &[])
        .unwrap_or_else(|log| panic!("a test key started outside --dev:\n{log}"));
    let lines = lines_naming(&refused, "--stripe-secret-key-file");
    assert_eq!(lines.len(), 1, "{refused}");
    assert!(
        lines[0].contains("test-mode") && lines[0].contains("--allow-test-mode"),
        "{refused}"
    );
    for allow in [
        (vec!["--allow-test-mode"], vec![]),
        (vec![], vec![("PAYONCE_ALLOW_TEST_MODE", "true")]),
    ] {
        let log =
            stripe_start(&ls.url(), key, &allow.0, &allow.1).expect_err("--allow-test-mode starts");
        let mode = log.lines().find(|l| l.contains("Stripe mode"));
        assert!(mode.is_some_and(|l| l.contains("test")), "{log}");
    }
    // A live key at a stub that answers every call (localstripe takes test keys only).
    let (stub, heads) = answering_provider("200 OK");
    let log =
        stripe_start(&stub, "sk_live_startup_0123456789", &[], &[]).expect_err("a live key starts");
    let mode = log.lines().find(|l| l.contains("Stripe mode"));
    assert!(mode.is_some_and(|l| l.contains("live")), "{log}");
    let probe = heads
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap();
    let version: Vec<&str> = probe
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("stripe-version:"))
        .collect();
    assert_eq!(version.len(), 1, "{probe}");
    assert!(
        version[0]
            .split_once(':')
            .unwrap()
            .1
            .trim()
            .starts_with("20"),
        "{probe}"
    );
}

/// A key the provider refuses (401 to the start-up probe) stops the start with one line:
/// otherwise every pay would answer 202 and end in manual review.
#[test]
fn a_stripe_key_the_provider_refuses_stops_the_start() {
    let (stub, _heads) = answering_provider("401 Unauthorized");
    let key = "sk_live_revoked_0123456789";
    let log = stripe_start(&stub, key, &[], &[])
        .unwrap_or_else(|log| panic!("a refused key started:\n{log}"));
    let lines = lines_naming(&log, "--stripe-secret-key-file");
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("refused the key"), "{log}");
}

/// The fenced block right after `marker` in `doc`, without its fences.
fn fenced_after<'a>(doc: &'a str, marker: &str) -> &'a str {
    let rest = &doc[doc
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in the doc"))..];
    let body = &rest[rest.find("```").expect("a fenced block")..];
    let body = &body[body.find('\n').expect("the fence's line") + 1..];
    &body[..body.find("```").expect("the closing fence")]
}

/// docs/deploy.md's production environment file, as the unit beside it runs it (the binary
/// with no argument, every setting from the file): the release setup starts against
/// PostgreSQL, Redis and localstripe, and each setting of the file takes effect (the Stripe
/// key charges, the webhook secret verifies, `/metrics` wants its token, the shop's origin
/// passes CORS with credentials). Only what must point at this machine is replaced: the
/// listen address, the database, Redis, the SMTP relay and the three secret files' paths;
/// the provider URL (Stripe's by default), plain text to the test database and a short jobs
/// interval are the only additions.
/// `PAYONCE_TEST_DEPLOY_BIN` runs another binary, e.g. the production build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_guides_environment_file_and_unit_start_a_server_on_stripe() {
    let doc = include_str!("../../../../docs/deploy.md");
    let unit = fenced_after(doc, "<!-- payonce.service -->");
    let line = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("the unit has no {key}"))
    };
    assert_eq!(
        line("ExecStart="),
        "/usr/local/bin/payonce-server",
        "no argument"
    );
    let env_path = line("EnvironmentFile=");
    assert!(
        doc.contains(&format!("`{env_path}`")),
        "the doc names {env_path}"
    );

    let Some(ls) = payonce_testkit::localstripe::Localstripe::start().await else {
        return;
    };
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let Some((redis_url, _redis)) = payonce_testkit::redis::shared_db(9).await else {
        return;
    };
    const SMTP_PASSWORD: &str = "smtp-deploy-guide-password-0123";
    let Some(sink) =
        payonce_testkit::smtp::SmtpSink::start_with(Some(("payonce", SMTP_PASSWORD))).await
    else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("payonce-env-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    const WHSEC: &str = "whsec_payonce_deploy_guide_0123456789abcdef";
    let mut env: Vec<(String, String)> = Vec::new();
    for l in fenced_after(doc, "<!-- payonce.env -->").lines() {
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        let v = match k {
            "PAYONCE_ADDR" => "127.0.0.1:0".to_owned(),
            "DATABASE_URL" => db.url.clone(),
            "REDIS_URL" => redis_url.clone(),
            "PAYONCE_SMTP_URL" => sink.url(),
            "PAYONCE_SMTP_PASSWORD_FILE" => {
                let file = dir.join(k);
                std::fs::write(&file, SMTP_PASSWORD).unwrap();
                file.display().to_string()
            }
            "PAYONCE_STRIPE_SECRET_KEY_FILE" | "PAYONCE_STRIPE_WEBHOOK_SECRET_FILE" => {
                let secret = if k.contains("WEBHOOK") {
                    WHSEC
                } else {
                    payonce_testkit::localstripe::SECRET_KEY
                };
                let file = dir.join(k);
                std::fs::write(&file, secret).unwrap();
                file.display().to_string()
            }
            _ => v.to_owned(),
        };
        env.push((k.to_owned(), v));
    }
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let (session_secret, metrics_token) =
        (get("PAYONCE_SESSION_SECRET"), get("PAYONCE_METRICS_TOKEN"));
    let origin = get("PAYONCE_CORS_ORIGINS");
    env.push(("PAYONCE_PROVIDER_URL".into(), ls.url()));
    env.push(("PAYONCE_ALLOW_PLAINTEXT".into(), "database".into()));
    // localstripe takes test keys only; the file is for live mode.
    env.push(("PAYONCE_ALLOW_TEST_MODE".into(), "true".into()));
    // The receipt is sent within the test's patience, not at the next 30 s round.
    env.push(("PAYONCE_JOBS_INTERVAL_MS".into(), "200".into()));
    // The production build (`--no-default-features`, release or not) when named.
    let bin = std::env::var("PAYONCE_TEST_DEPLOY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_payonce-server").to_owned());
    // The guide's command: `migrate` with the same environment, then the server (whose
    // start only checks the schema).
    let command = fenced_after(doc, "<!-- payonce.command -->");
    assert!(
        command.contains("\n/usr/local/bin/payonce-server migrate "),
        "{command}"
    );
    let migrate = Command::new(&bin)
        .arg("migrate")
        .env_clear()
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert!(migrate.status.success(), "migrate: {migrate:?}");
    let mut cmd = Command::new(bin);
    cmd.env_clear().envs(env).stdin(std::process::Stdio::null());
    cmd.stderr(std::process::Stdio::null());
    let server = payonce_testkit::server::Proc::spawn(cmd, true).expect("the server starts");
    let api = server.api();
    let http = reqwest::Client::new();

    let r = http.get(format!("{api}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["store"],
        "postgres"
    );
    let r = http.get(format!("{api}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401, "/metrics wants PAYONCE_METRICS_TOKEN");
    let r = http
        .get(format!("{api}/metrics"))
        .bearer_auth(&metrics_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .request(reqwest::Method::OPTIONS, format!("{api}/orders/o/pay"))
        .header("origin", &origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,idempotency-key,x-request-id",
        )
        .send()
        .await
        .unwrap();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        h("access-control-allow-origin").as_deref(),
        Some(origin.as_str())
    );
    assert_eq!(
        h("access-control-allow-credentials").as_deref(),
        Some("true")
    );

    // The Stripe key file: a pay charges at localstripe, once.
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = payonce_server::sign_token(session_secret.as_bytes(), "alice", expires);
    let order: serde_json::Value = http
        .post(format!("{api}/orders"))
        .bearer_auth(&token)
        .json(&serde_json::json!({
            "items": [{ "sku": "tee-classic", "quantity": 1 }],
            "address": "alice@example.com",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = order["id"].as_str().expect("an order").to_owned();
    let pm = ls
        .payment_method(payonce_testkit::localstripe::cards::APPROVE)
        .await;
    let r = http
        .post(format!("{api}/orders/{id}/pay"))
        .bearer_auth(&token)
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&serde_json::json!({ "orderVersion": order["version"], "paymentMethodId": pm }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(ls.succeeded_for(&id).await, 1);

    // The mailer settings and the SMTP password file: the receipt reaches the relay.
    let sent = payonce_testkit::eventually(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(100),
        || async { (sink.messages().len() == 1).then_some(()) },
    )
    .await;
    assert!(sent.is_some(), "the receipt was sent: {}", sink.log());

    // The webhook secret file: a signed event is verified (and, of no use, acknowledged).
    let body = br#"{"id":"evt_guide","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}"#;
    let now = expires as i64 - 3600;
    let r = http
        .post(format!("{api}/webhooks/stripe"))
        .header("content-type", "application/json")
        .header(
            "stripe-signature",
            payonce_protocol::signature::sign(WHSEC, now, body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
