//! `--provider stripe`: the run against localstripe (the Stripe emulator bootstrap.sh installs)
//! instead of the mock provider, every provider fault through a fault proxy between the
//! instances and localstripe (`payonce_testkit::fault_proxy`).
//!
//! What changes against the mock run:
//! - the test methods become localstripe payment methods: the approving and the declining
//!   card; the mock's slow, timeout and transient methods pay with the approving card and arm
//!   the proxy for one confirm: held 1.5 s, its answer lost after localstripe charged, or
//!   refused before it got there;
//! - "provider down" refuses every request at the proxy (localstripe keeps its data in memory
//!   only, so it is never killed);
//! - the ledger is localstripe's list of PaymentIntents (walked page by page: there is no
//!   search), an intent that succeeded being a charge that moved money;
//! - webhooks: localstripe sends each event once, to the balancer's `/webhooks/stripe`; it
//!   has no duplicating or reordering of its own.

use crate::ChaosError;
use payonce_protocol::provider::{methods, Charge, ChargeStatus};
use payonce_testkit::fault_proxy::{Fault, FaultProxy};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// Any `sk_test_…` key works at localstripe.
pub(crate) const SECRET_KEY: &str = "sk_test_payonce_chaos";
/// The webhook signing secret registered at localstripe and given to the instances.
pub(crate) const WEBHOOK_SECRET: &str = "whsec_payonce_chaos_0123456789abcdef";
const CONFIRM: &str = "/v1/payment_intents/*/confirm";
/// Most pages of 100 intents the ledger walks (a run makes a few thousand at most).
const MAX_PAGES: usize = 500;

/// localstripe, its payment methods and the proxy in front of it.
pub(crate) struct StripeSide {
    /// Killed when the run drops it (`kill_on_drop`).
    _child: Child,
    url: String,
    http: reqwest::Client,
    pub proxy: FaultProxy,
    approve: String,
    decline: String,
}

/// The localstripe binary: `PAYONCE_TEST_LOCALSTRIPE`, else the repository's venv.
pub(crate) fn default_binary() -> PathBuf {
    match std::env::var("PAYONCE_TEST_LOCALSTRIPE") {
        Ok(bin) => bin.into(),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.venv-localstripe/bin/localstripe"),
    }
}

impl StripeSide {
    /// Starts localstripe (`--from-scratch`) on a free port, makes the two cards' payment
    /// methods and the proxy.
    pub(crate) async fn start(bin: &std::path::Path) -> Result<StripeSide, ChaosError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--from-scratch"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ChaosError::Spawn(bin.display().to_string(), e))?;
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let up = payonce_testkit::eventually(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || async {
                let r = http
                    .get(format!("{url}/v1/balance"))
                    .basic_auth(SECRET_KEY, Some(""))
                    .send()
                    .await;
                r.ok().filter(|r| r.status().is_success()).map(drop)
            },
        )
        .await;
        if up.is_none() {
            return Err(ChaosError::Setup(format!(
                "localstripe ({}) did not answer on :{port}",
                bin.display()
            )));
        }
        let proxy = FaultProxy::start(&url).await;
        let mut me = StripeSide {
            _child: child,
            url,
            http,
            proxy,
            approve: String::new(),
            decline: String::new(),
        };
        me.approve = me.payment_method("4242424242424242").await?;
        me.decline = me.payment_method("4000000000000341").await?;
        Ok(me)
    }

    async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
    ) -> Result<reqwest::Response, ChaosError> {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .basic_auth(SECRET_KEY, Some(""))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(form))
            .send()
            .await?
            .error_for_status()?;
        Ok(r)
    }

    async fn payment_method(&self, number: &str) -> Result<String, ChaosError> {
        let form = [
            ("type", "card"),
            ("card[number]", number),
            ("card[exp_month]", "12"),
            ("card[exp_year]", "2034"),
            ("card[cvc]", "123"),
        ];
        let pm: Value = self
            .post("/v1/payment_methods", &form)
            .await?
            .json()
            .await?;
        pm["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ChaosError::Setup(format!("localstripe made no payment method: {pm}")))
    }

    /// Sends localstripe's events to `url` (the balancer's `/webhooks/stripe`).
    pub(crate) async fn register_webhook(&self, url: &str) -> Result<(), ChaosError> {
        self.post(
            "/_config/webhooks/chaos",
            &[("url", url), ("secret", WEBHOOK_SECRET)],
        )
        .await
        .map(drop)
    }

    /// The instances' `--provider-url`: the proxy.
    pub(crate) fn provider_url(&self) -> String {
        self.proxy.url.clone()
    }

    /// The localstripe payment method that stands for the mock's test method `method`, after
    /// arming the proxy for the fault that method means (see the module docs).
    pub(crate) fn method(&self, method: &str) -> String {
        let fault = match method {
            methods::SLOW => Some(Fault::Delay(Duration::from_millis(1500))),
            methods::TIMEOUT => Some(Fault::DropAnswer),
            methods::TRANSIENT_5XX => Some(Fault::Refuse),
            _ => None,
        };
        if let Some(fault) = fault {
            self.proxy.arm("POST", CONFIRM, fault, 1);
        }
        match method {
            methods::DECLINE => self.decline.clone(),
            _ => self.approve.clone(),
        }
    }

    /// Refuses every request for `down`, then forwards again.
    pub(crate) fn down_for(&self, down: Duration) {
        self.proxy.set_down(true);
        let shared = self.proxy.handle();
        tokio::spawn(async move {
            tokio::time::sleep(down).await;
            shared.set_down(false);
        });
    }

    /// Every intent localstripe holds, as the audit's charges: a succeeded intent moved money,
    /// any other did not (declined, unconfirmed, waiting).
    pub(crate) async fn ledger(&self) -> Result<Vec<Charge>, ChaosError> {
        let mut charges = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut url = format!("{}/v1/payment_intents?limit=100", self.url);
            if let Some(a) = &after {
                url.push_str(&format!("&starting_after={a}"));
            }
            let page: Value = self
                .http
                .get(url)
                .basic_auth(SECRET_KEY, Some(""))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            charges.extend(data.iter().map(charge_of));
            after = data
                .last()
                .and_then(|i| i["id"].as_str())
                .map(str::to_owned);
            if page["has_more"] != true || after.is_none() {
                return Ok(charges);
            }
        }
        Err(ChaosError::Setup(format!(
            "more than {MAX_PAGES} pages of intents"
        )))
    }
}

/// `application/x-www-form-urlencoded`: everything but unreserved characters escaped.
fn encode(form: &[(&str, &str)]) -> String {
    let esc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let pairs: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
        .collect();
    pairs.join("&")
}

fn charge_of(i: &Value) -> Charge {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Charge {
        id: s(&i["id"]),
        provider_key: s(&i["metadata"]["attempt_id"]),
        amount: i["amount"].as_i64().unwrap_or_default(),
        currency: s(&i["currency"]).to_ascii_uppercase(),
        payment_method_id: s(&i["payment_method"]),
        order_id: s(&i["metadata"]["order_id"]),
        status: if i["status"] == "succeeded" {
            ChargeStatus::Succeeded
        } else {
            ChargeStatus::Declined
        },
        created_at: i["created"].as_i64().unwrap_or_default() * 1000,
        next_action_url: None,
        decline_code: None,
        client_secret: None,
    }
}
