//! A server started with JWT keys: a token from `payonce-server mint-jwt` (the same
//! secret, issuer and audience) creates and pays an order end to end; a token signed with
//! another secret, or for another audience, is 401.

use crate::common::{id_of, key, Backend, Checkout, Opts, TestApp};

const SECRET: &str = "jwt-test-secret-0123456789abcdef0123";
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
            SECRET,
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
    let good = mint(SECRET, AUD, "jwt_alice");
    let order = app.create_order(&good, &[("tee-classic", 1)]).await;
    let id = id_of(&order);
    let r = app
        .pay(&good, &id, Some(&key()), 1, "pm_card_approve")
        .await;
    assert_eq!(r.status, 200, "pay with a JWT: {}", r.text());
    assert_eq!(app.ledger(&id).await.len(), 1, "one charge");
    let r = app.get_order(&good, &id).await;
    assert_eq!(r.json()["status"], "paid");

    let wrong_key = mint("another-secret-0123456789abcdef01234", AUD, "jwt_alice");
    let wrong_aud = mint(SECRET, "someone-else", "jwt_alice");
    for bad in [wrong_key, wrong_aud] {
        let r = app.get_order(&bad, &id).await;
        assert_eq!((r.status, r.code().as_str()), (401, "UNAUTHENTICATED"));
        let r = app.pay(&bad, &id, Some(&key()), 1, "pm_card_approve").await;
        assert_eq!(r.status, 401);
    }
    // Another user's valid JWT does not see alice's order.
    let bob = mint(SECRET, AUD, "jwt_bob");
    assert_eq!(app.get_order(&bob, &id).await.status, 404);
    assert_eq!(app.ledger(&id).await.len(), 1, "still one charge");
}
