//! localstripe (PyPI `localstripe`, a stateful Stripe emulator; GPL-3, a test tool we run,
//! never ship) on a free port per test, started `--from-scratch` so it keeps nothing between
//! runs. `scripts/bootstrap.sh` installs it into `.venv-localstripe/` at the repository root,
//! where [`Localstripe::start`] finds it (or `PAYONCE_TEST_LOCALSTRIPE` names the binary).
//!
//! Its list of PaymentIntents is the ledger the Stripe tests count charges from. It ignores
//! `Idempotency-Key` (two creates with one key make two intents), which is why the tests
//! hold: the server must be safe without provider deduplication.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What to do when it is missing, for the failure message.
pub const HOW_TO_INSTALL: &str =
    "install it with: scripts/bootstrap.sh (localstripe into .venv-localstripe)";

/// A secret key localstripe accepts (any `sk_…` does); the tests grep logs for it.
pub const SECRET_KEY: &str = "sk_test_payonce0localstripe0secret";

/// Test cards (numbers go to localstripe only, never to payonce).
pub mod cards {
    /// Approved.
    pub const APPROVE: &str = "4242424242424242";
    /// Declined when charged (`card_declined`).
    pub const DECLINE: &str = "4000000000000341";
    /// Requires 3-D Secure.
    pub const THREE_DS: &str = "4000002500003155";
}

/// A running localstripe, killed on drop.
pub struct Localstripe {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    http: reqwest::Client,
}

/// The binary: `PAYONCE_TEST_LOCALSTRIPE`, else the repository's venv, else `PATH`.
fn binary() -> PathBuf {
    if let Ok(bin) = std::env::var("PAYONCE_TEST_LOCALSTRIPE") {
        return bin.into();
    }
    let venv =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-localstripe/bin/localstripe");
    if venv.exists() {
        return venv;
    }
    "localstripe".into()
}

/// localstripe lists PaymentIntents without Stripe's `created` filter: when the venv's
/// python3 sits beside the binary, it runs `localstripe_list.py`, which adds it and starts
/// localstripe as is; else the binary itself (the filter then answers 400).
fn command(bin: &std::path::Path) -> Command {
    let python = bin.with_file_name("python3");
    if !python.exists() {
        return Command::new(bin);
    }
    let mut cmd = Command::new(python);
    cmd.args(["-c", include_str!("localstripe_list.py")]);
    cmd
}

/// How many localstripes may be starting at once in one test process. Each start is a
/// Python interpreter importing aiohttp (about a second of CPU): the Stripe suites start one
/// per test, and a dozen starting together on a 2-core machine already busy with the other
/// tests took longer than any fixed wait (a fresh-clone CI run failed on one). Starting them
/// two at a time keeps each start about as fast as alone; tokio's semaphore works across the
/// tests' separate runtimes.
static STARTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// How long one start may take once it is its turn.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl Localstripe {
    /// Starts one and waits until it answers. `None` when it cannot run and skipping is
    /// allowed ([`crate::unavailable`]; under `CI=true` a failure).
    pub async fn start() -> Option<Self> {
        let _turn = STARTING.acquire().await.expect("never closed");
        let port = crate::tls::free_port();
        let bin = binary();
        let child = command(&bin)
            .args(["--port", &port.to_string(), "--from-scratch"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let what = format!("cannot run {} ({e})", bin.display());
                return crate::unavailable(&what, HOW_TO_INSTALL, "Stripe tests");
            }
        };
        let me = Self {
            child,
            port,
            http: reqwest::Client::new(),
        };
        let up = crate::eventually(START_TIMEOUT, Duration::from_millis(50), || async {
            let res = me.get("/v1/payment_intents?limit=1").await.ok()?;
            Some(res)
        })
        .await;
        assert!(
            up.is_some(),
            "localstripe did not answer on port {port} within {} s",
            START_TIMEOUT.as_secs()
        );
        Some(me)
    }

    /// Its base URL (the server's `--provider-url`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let res = self
            .http
            .get(format!("{}{path}", self.url()))
            .bearer_auth(SECRET_KEY)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let body: Value = res.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("GET {path}: {status} {body}"));
        }
        Ok(body)
    }

    async fn post(&self, path: &str, form: &str) -> Result<Value, String> {
        let res = self
            .http
            .post(format!("{}{path}", self.url()))
            .bearer_auth(SECRET_KEY)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_owned())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let body: Value = res.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("POST {path}: {status} {body}"));
        }
        Ok(body)
    }

    /// A card PaymentMethod made at localstripe (as Stripe.js would in a browser): its id.
    pub async fn payment_method(&self, number: &str) -> String {
        let form = format!(
            "type=card&card%5Bnumber%5D={number}&card%5Bexp_month%5D=12&card%5Bexp_year%5D=2034&card%5Bcvc%5D=123"
        );
        let pm = self
            .post("/v1/payment_methods", &form)
            .await
            .expect("payment method");
        pm["id"].as_str().expect("pm id").to_owned()
    }

    /// Every PaymentIntent whose metadata names `order_id` (the ledger of the order).
    pub async fn intents_of(&self, order_id: &str) -> Vec<Value> {
        let list = self
            .get("/v1/payment_intents?limit=100")
            .await
            .expect("intent list");
        let all = list["data"].as_array().cloned().unwrap_or_default();
        assert!(
            all.len() < 100,
            "more intents than one page: a test must use a fresh localstripe"
        );
        all.into_iter()
            .filter(|i| i["metadata"]["order_id"].as_str() == Some(order_id))
            .collect()
    }

    /// How many of the order's intents succeeded: the charges the customer sees.
    pub async fn succeeded_for(&self, order_id: &str) -> usize {
        let intents = self.intents_of(order_id).await;
        intents
            .iter()
            .filter(|i| i["status"] == "succeeded")
            .count()
    }

    /// The refunds of a PaymentIntent.
    pub async fn refunds_of(&self, intent_id: &str) -> Vec<Value> {
        let list = self
            .get(&format!("/v1/refunds?payment_intent={intent_id}&limit=100"))
            .await
            .expect("refund list");
        list["data"].as_array().cloned().unwrap_or_default()
    }

    /// A refund made at Stripe directly, as in its dashboard: `amount` of the intent (`None`:
    /// all of it), carrying no key of payonce's. Its id.
    pub async fn dashboard_refund(&self, intent_id: &str, amount: Option<i64>) -> String {
        // Ids and amounts need no form escaping.
        let mut form = format!("payment_intent={intent_id}");
        if let Some(a) = amount {
            form.push_str(&format!("&amount={a}"));
        }
        let res = self
            .http
            .post(format!("{}/v1/refunds", self.url()))
            .bearer_auth(SECRET_KEY)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .expect("dashboard refund");
        assert!(
            res.status().is_success(),
            "dashboard refund: {}",
            res.status()
        );
        let refund: Value = res.json().await.expect("refund");
        refund["id"].as_str().expect("refund id").to_owned()
    }

    /// Sets a refund's `status` (`pending`, `failed`, `succeeded`), as Stripe moves a refund
    /// after it was made (localstripe makes every refund `succeeded` at once).
    pub async fn set_refund_status(&self, refund_id: &str, status: &str) {
        let res = self
            .http
            .post(format!("{}/v1/refunds/{refund_id}", self.url()))
            .bearer_auth(SECRET_KEY)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("status={status}"))
            .send()
            .await
            .expect("update refund");
        assert!(res.status().is_success(), "update refund: {}", res.status());
    }

    /// Confirms PaymentIntent `intent_id` with PaymentMethod `pm` straight at localstripe,
    /// outside payonce: what Stripe.js's "try another card" (`confirmCardPayment` with the
    /// page's client secret and a new card) does. localstripe takes no `payment_method` on a
    /// confirm, nor a new card with only the client secret, so the card is set on the intent
    /// with the secret key, then the intent confirmed. `Err`: localstripe refused (the intent
    /// is canceled, say), with its answer.
    pub async fn confirm_with(&self, intent_id: &str, pm: &str) -> Result<Value, String> {
        let path = format!("/v1/payment_intents/{intent_id}");
        self.post(&path, &format!("payment_method={pm}")).await?;
        self.post(&format!("{path}/confirm"), "").await
    }

    /// Completes (or fails) the 3-D Secure step of an intent, as its Stripe.js stand-in does.
    pub async fn authenticate(&self, intent_id: &str, client_secret: &str, success: bool) {
        let res = self
            .http
            .post(format!(
                "{}/v1/payment_intents/{intent_id}/_authenticate?success={success}",
                self.url()
            ))
            .json(&serde_json::json!({"key": "pk_test_payonce", "client_secret": client_secret}))
            .send()
            .await
            .expect("authenticate");
        assert!(res.status().is_success(), "authenticate: {}", res.status());
    }
}

impl Drop for Localstripe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
