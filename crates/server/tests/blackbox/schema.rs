//! The schema as a deployment step (docs/deploy.md, "Upgrading"): outside `--dev` a start
//! checks the schema instead of migrating it, `payonce-server migrate` is the step that
//! migrates, a database migrated by a newer release that declared itself incompatible is
//! refused in one line in every mode, and a start without `--database-url` is refused
//! rather than falling back to a file of its own.

use crate::common::{mock_provider_args, spawn, Backend, Proc, TestDb, SECRET, WEBHOOK_SECRET};
use crate::on_both_backends;
use std::process::{Command, Output};

on_both_backends!(
    a_production_start_refuses_an_unmigrated_schema_until_migrate_ran,
    a_schema_from_a_newer_incompatible_release_is_refused_in_one_line,
);

fn server() -> Command {
    payonce_testkit::server::command(env!("CARGO_BIN_EXE_payonce-server").as_ref())
}

/// `payonce-server migrate` on `db`; the version it reports.
fn migrate(db: &str) -> i64 {
    let out = server()
        .args(["migrate", "--database-url", db])
        .output()
        .expect("run migrate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "migrate failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = stdout.trim().strip_prefix("payonce: schema at version ");
    version
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("migrate printed {stdout:?}"))
}

/// A production start's flags on `db` against the standalone mock provider `provider`.
fn production(db: &str, provider: &Proc, extra: &[&str]) -> Vec<String> {
    let url = provider.provider.clone().expect("provider url");
    let mut args: Vec<String> = [
        "--addr",
        "127.0.0.1:0",
        "--provider",
        "mock",
        "--provider-url",
        &url,
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--mailer",
        "none",
        "--allow-plaintext",
        "database",
        "--database-url",
        db,
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs the server with `args`, which must refuse to start; its `payonce-server:` lines.
fn refused(args: &[String]) -> Vec<String> {
    let Output {
        status,
        stdout,
        stderr,
    } = server().args(args).output().expect("run");
    assert!(!status.success(), "the start must be refused");
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        !stdout.contains("listening"),
        "no listener may start: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&stderr);
    stderr
        .lines()
        .filter(|l| l.starts_with("payonce-server: "))
        .map(str::to_owned)
        .collect()
}

async fn healthz(api: &str) -> u16 {
    let res = reqwest::get(format!("{api}/healthz"))
        .await
        .expect("healthz");
    res.status().as_u16()
}

async fn a_production_start_refuses_an_unmigrated_schema_until_migrate_ran(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let provider = spawn(&mock_provider_args(), false);
    let lines = refused(&production(&db.url, &provider, &[]));
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    assert!(
        lines[0].contains("schema is at version 0") && lines[0].contains("payonce-server migrate"),
        "{lines:?}"
    );
    // Nothing was created by the refused start: the step is the operator's.
    let version = migrate(&db.url);
    assert!(version >= 11, "the binary's migrations: {version}");
    let proc = spawn(&production(&db.url, &provider, &[]), true);
    assert_eq!(healthz(proc.api.as_deref().expect("api")).await, 200);
    // Migrating again is a no-op that reports the same version.
    assert_eq!(migrate(&db.url), version);
}

async fn a_schema_from_a_newer_incompatible_release_is_refused_in_one_line(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let version = migrate(&db.url);
    let next = version + 1;
    // What a newer release's `migrate` records: its migration, and the oldest release that
    // can serve the schema after it (its own version: it removed what this one reads).
    let pool = db.pool().await;
    let record =
        "INSERT INTO payonce_migrations (version, name, applied_at) VALUES ($1, 'next', 0)";
    sqlx::query(record).bind(next).execute(&pool).await.unwrap();
    let compat = "INSERT INTO payonce_schema_compat (version, compatible_from) VALUES ($1, $1)";
    sqlx::query(compat).bind(next).execute(&pool).await.unwrap();
    let provider = spawn(&mock_provider_args(), false);
    for mode in ["check", "auto"] {
        let lines = refused(&production(&db.url, &provider, &["--migrate", mode]));
        assert_eq!(lines.len(), 1, "--migrate {mode}: one line: {lines:?}");
        let want = format!("schema is at version {next}, migrated by a newer payonce-server");
        assert!(lines[0].contains(&want), "--migrate {mode}: {lines:?}");
    }
    let out = server()
        .args(["migrate", "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "migrate must not touch a newer schema either"
    );
    // A newer release that only added declares this one compatible: it serves.
    let declare = "UPDATE payonce_schema_compat SET compatible_from = $1 WHERE version = $2";
    sqlx::query(declare)
        .bind(version)
        .bind(next)
        .execute(&pool)
        .await
        .unwrap();
    let proc = spawn(&production(&db.url, &provider, &[]), true);
    assert_eq!(healthz(proc.api.as_deref().expect("api")).await, 200);
}

/// Two production instances that both forgot the URL would each keep keys in a file of
/// their own: a retry routed to the other would charge again. Refused, naming the flag.
#[test]
fn a_production_start_without_a_database_url_is_refused_naming_it() {
    let mut args = vec![
        "--addr",
        "127.0.0.1:0",
        "--provider",
        "mock",
        "--provider-url",
        "http://127.0.0.1:9",
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
        "--mailer",
        "none",
    ];
    let lines = refused(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("payonce-server: --database-url (DATABASE_URL) is required"),
        "{lines:?}"
    );
    // With --dev the embedded default stays (the demo's file).
    args.truncate(0);
}
