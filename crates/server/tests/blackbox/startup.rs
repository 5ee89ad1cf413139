//! Start-up outside `--dev`: a server without its production flags refuses to start and
//! names each missing or unsafe one; with them it starts and serves `/healthz`.

use crate::common::{mock_provider_args, spawn, SECRET, WEBHOOK_SECRET};
use std::process::Command;

/// Runs the binary with `args` and no `PAYONCE_*` / database / Redis variables; it must exit
/// on its own.
fn run_refused(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_payonce-server"))
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .env_clear()
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
    let (_, err) = run_refused(&["--database-url", "sqlite://:memory:"]);
    for flag in ["--provider-url", "--webhook-secret", "--session-secret"] {
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
        "--provider-url",
        provider.provider.as_deref().unwrap(),
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--session-secret",
        SECRET,
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
