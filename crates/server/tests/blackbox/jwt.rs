//! A server started with JWT keys: a token from `payonce-server mint-jwt` (the same
//! secret, issuer and audience) creates and pays an order end to end; a token signed with
//! another secret, or for another audience, is 401. With `--no-session-tokens` no session
//! token is accepted, and no `--session-secret` is needed; session tokens expiring past
//! `--session-max-lifetime-secs` are refused. A JWKS file rotated on disk is used after
//! `SIGHUP`, without a restart.

use crate::common::{
    client, id_of, key, mock_provider_args, spawn, Backend, Checkout, Opts, TestApp, TestDb,
    SECRET, WEBHOOK_SECRET,
};
use payonce_protocol::{ErrorCode, OrderStatus};

const SECRET_JWT: &str = "jwt-test-secret-0123456789abcdef0123";
const ISS: &str = "https://id.test";
const AUD: &str = "payonce-test";

fn mint(secret: &str, audience: &str, user: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_payonce-server"))
        .args(["mint-jwt", "--secret", secret, "--issuer", ISS])
        .args(["--audience", audience, "--user", user, "--ttl-secs", "600"])
        .env_remove("PAYONCE_JWT_HS256_SECRETS")
        .output()
        .expect("mint-jwt runs");
    assert!(out.status.success(), "mint-jwt: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pay_with_a_jwt_charges_once_and_bad_jwts_are_refused() {
    let opts = Opts {
        dev: false,
        extra: [
            "--jwt-hs256-secret",
            SECRET_JWT,
            "--jwt-issuer",
            ISS,
            "--jwt-audience",
            AUD,
        ]
        .map(String::from)
        .to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let good = mint(SECRET_JWT, AUD, "jwt_alice");
    let order = app.create_order(&good, &[("tee-classic", 1)]).await;
    let id = id_of(&order);
    let r = app
        .pay(&good, &id, Some(&key()), 1, "pm_card_approve")
        .await;
    assert_eq!(r.status, 200, "pay with a JWT: {}", r.text());
    assert_eq!(app.ledger(&id).await.len(), 1, "one charge");
    assert_eq!(app.order_status(&good, &id).await, OrderStatus::Paid);

    let wrong_key = mint("another-secret-0123456789abcdef01234", AUD, "jwt_alice");
    let wrong_aud = mint(SECRET_JWT, "someone-else", "jwt_alice");
    for bad in [wrong_key, wrong_aud] {
        let r = app.get_order(&bad, &id).await;
        assert_eq!((r.status, r.code()), (401, ErrorCode::Unauthenticated));
        let r = app.pay(&bad, &id, Some(&key()), 1, "pm_card_approve").await;
        assert_eq!(r.status, 401);
    }
    // Another user's valid JWT does not see alice's order.
    let bob = mint(SECRET_JWT, AUD, "jwt_bob");
    assert_eq!(app.get_order(&bob, &id).await.status, 404);
    assert_eq!(app.ledger(&id).await.len(), 1, "still one charge");
}

/// A production start with JWT keys, `--no-session-tokens` and no `--session-secret`: JWTs
/// pay; a session token signed with the secret every other test server uses is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_only_server_needs_no_session_secret_and_refuses_session_tokens() {
    let provider = spawn(&mock_provider_args(), false);
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let args: Vec<String> = [
        "--addr",
        "127.0.0.1:0",
        "--database-url",
        &db.url,
        "--migrate",
        "auto",
        "--provider-url",
        &provider.provider(),
        "--webhook-secret",
        WEBHOOK_SECRET,
        "--mailer",
        "none",
        "--jwt-hs256-secret",
        SECRET_JWT,
        "--jwt-issuer",
        ISS,
        "--jwt-audience",
        AUD,
        "--no-session-tokens",
    ]
    .map(String::from)
    .to_vec();
    let api = spawn(&args, true);
    let app = TestApp {
        api: api.api(),
        provider: provider.provider(),
        http: client(),
        _procs: vec![api, provider],
        db: None,
    };
    let good = mint(SECRET_JWT, AUD, "jwt_carol");
    let id = id_of(&app.create_order(&good, &[("tee-classic", 1)]).await);
    let r = app
        .pay(&good, &id, Some(&key()), 1, "pm_card_approve")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let session = payonce_server::sign_token(SECRET.as_bytes(), "jwt_carol", now() + 600);
    let r = app.get_order(&session, &id).await;
    assert_eq!((r.status, r.code()), (401, ErrorCode::Unauthenticated));
    assert_eq!(app.ledger(&id).await.len(), 1, "one charge");
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A session token whose expiry is further away than `--session-max-lifetime-secs` is 401,
/// however well signed: a leaked secret cannot mint a token for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_token_past_the_lifetime_bound_is_refused() {
    let opts = Opts {
        extra: vec!["--session-max-lifetime-secs".into(), "3600".into()],
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, opts).await else {
        return;
    };
    let sign = |exp| payonce_server::sign_token(SECRET.as_bytes(), "alice", exp);
    let fine = sign(now() + 600);
    let id = id_of(&app.create_order(&fine, &[("tee-classic", 1)]).await);
    assert_eq!(app.get_order(&fine, &id).await.status, 200);
    for too_long in [sign(u64::MAX), sign(now() + 2 * 3600)] {
        let r = app.get_order(&too_long, &id).await;
        assert_eq!((r.status, r.code()), (401, ErrorCode::Unauthenticated));
    }
    // The dev login mints within the bound.
    let dev = app.session("alice").await;
    assert_eq!(app.get_order(&dev, &id).await.status, 200);
}

/// RSA key pairs made by the openssl command line in a temp directory, and the JWKS of them.
struct RsaKeys(std::path::PathBuf);

impl RsaKeys {
    fn new(names: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("payonce-jwks-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let keys = Self(dir);
        for name in names {
            let out = format!("{name}.key");
            keys.openssl(&[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                &out,
            ]);
        }
        keys
    }

    fn openssl(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&self.0)
            .output()
            .expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// A JWKS holding the public half of `name`, with `name` as its kid.
    fn jwks(&self, name: &str) -> String {
        let out = self.openssl(&["rsa", "-in", &format!("{name}.key"), "-noout", "-modulus"]);
        let n = hex::decode(out.trim().trim_start_matches("Modulus=")).unwrap();
        serde_json::json!({ "keys": [{ "kty": "RSA", "kid": name, "alg": "RS256", "use": "sig",
            "n": b64url(&n), "e": "AQAB" }] })
        .to_string()
    }

    /// An RS256 token for `user` signed with `name`, naming it as its kid.
    fn token(&self, name: &str, user: &str) -> String {
        let pem = std::fs::read(self.0.join(format!("{name}.key"))).unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(name.to_owned());
        let claims = serde_json::json!({ "iss": ISS, "aud": AUD, "sub": user, "iat": now(), "exp": now() + 600 });
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap();
        jsonwebtoken::encode(&header, &claims, &key).unwrap()
    }
}

impl Drop for RsaKeys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The identity provider rotates its key: the JWKS file now holds only the new one. After
/// `SIGHUP` the running server accepts the new key's tokens and no longer the old one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_file_rotated_on_disk_is_used_after_sighup() {
    let keys = RsaKeys::new(&["old", "new"]);
    let jwks = keys.0.join("jwks.json");
    std::fs::write(&jwks, keys.jwks("old")).unwrap();
    let opts = Opts {
        extra: [
            "--jwt-jwks",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            ISS,
            "--jwt-audience",
            AUD,
            "--jwt-jwks-reload-secs",
            "0",
        ]
        .map(String::from)
        .to_vec(),
        ..Opts::default()
    };
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, opts).await else {
        return;
    };
    let (old, new) = (
        keys.token("old", "jwks_dave"),
        keys.token("new", "jwks_dave"),
    );
    let items = serde_json::json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] });
    assert_eq!(app.create_order_raw(&old, items.clone()).await.status, 201);
    assert_eq!(app.create_order_raw(&new, items.clone()).await.status, 401);
    std::fs::write(&jwks, keys.jwks("new")).unwrap();
    app._procs.last().expect("the server").signal("HUP");
    // The reload runs on its own task: poll for it (no clock decides it).
    let created = payonce_testkit::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        || async {
            let r = app.create_order_raw(&new, items.clone()).await;
            (r.status == 201).then_some(r)
        },
    )
    .await;
    assert!(created.is_some(), "the new key verifies after SIGHUP");
    assert_eq!(
        app.create_order_raw(&old, items.clone()).await.status,
        401,
        "the old one is gone"
    );
}
