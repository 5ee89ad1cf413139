//! The payment provider, reached only over HTTP(S) with a timeout.
//!
//! Every answer is sorted into what it proves. Only a clear answer settles an attempt: a
//! charge (succeeded or declined), or a 400 that says the provider refused the request
//! outright. A timeout, a 5xx, a 409/422 or anything unexpected proves nothing, so the
//! attempt stays `processing` and is never charged blindly.

use payonce_protocol::headers::IDEMPOTENCY_KEY;
use payonce_protocol::provider::{paths, Charge, ChargeRequest, ChargeStatus, Refund};
use reqwest::StatusCode;
use std::time::Duration;

pub(crate) use payonce_rules::plan::{Lookup, Outcome as ChargeOutcome};

/// What a refund call proved.
#[derive(Debug)]
pub(crate) enum RefundOutcome {
    /// Refunded (now, or earlier under the same refund key).
    Refunded(Refund),
    /// The provider refuses (declined, or refunded under another key): nothing moved.
    NotAllowed(String),
    /// Timeout, 5xx, network error: unknown; calling again with the same key is safe.
    Unknown(String),
}

/// HTTP client for the provider.
#[derive(Clone)]
pub(crate) struct ProviderClient {
    http: reqwest::Client,
    base: String,
}

impl ProviderClient {
    /// A client of `base`, trusting the `ca` certificates (PEM) beside the system's roots.
    pub(crate) fn new(
        base: &str,
        timeout: Duration,
        ca: Option<&[u8]>,
    ) -> Result<Self, reqwest::Error> {
        let mut http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout);
        if let Some(pem) = ca {
            http = http.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem)?);
        }
        Ok(Self {
            http: http.build()?,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// One request at start, for the handshake: any HTTP answer will do; a provider that
    /// is down only warns (pays answer 202 until it is back), a failed TLS handshake is
    /// the error.
    pub(crate) async fn probe(&self) -> Result<(), String> {
        let Err(e) = self.http.get(&self.base).send().await else {
            return Ok(());
        };
        if let Some(why) = crate::error::tls_failure(&e) {
            return Err(why);
        }
        tracing::warn!(error = %e, "provider unreachable at start");
        Ok(())
    }

    /// `POST /charges` with the saved provider key.
    pub(crate) async fn charge(&self, provider_key: &str, req: &ChargeRequest) -> ChargeOutcome {
        let url = format!("{}{}", self.base, paths::CHARGES);
        let res = match self
            .http
            .post(url)
            .header(IDEMPOTENCY_KEY, provider_key)
            .json(req)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return ChargeOutcome::Unknown(format!("charge call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() || status == StatusCode::PAYMENT_REQUIRED {
            return match res.json::<Charge>().await {
                Ok(c) if c.status == ChargeStatus::Declined => ChargeOutcome::Declined(c),
                // Recorded, no outcome yet: the customer must act at `nextActionUrl` first.
                Ok(c) if c.status == ChargeStatus::RequiresAction => {
                    ChargeOutcome::ActionRequired(c)
                }
                Ok(c) if status.is_success() => ChargeOutcome::Succeeded(c),
                Ok(c) => ChargeOutcome::Unknown(format!("402 with a {:?} charge", c.status)),
                Err(e) => ChargeOutcome::Unknown(format!("unreadable charge ({status}): {e}")),
            };
        }
        if status == StatusCode::BAD_REQUEST {
            let detail = res.text().await.unwrap_or_default();
            return ChargeOutcome::Rejected(detail);
        }
        ChargeOutcome::Unknown(format!("provider answered {status}"))
    }

    /// `GET /charges/by-key/{providerKey}`.
    pub(crate) async fn charge_by_key(&self, provider_key: &str) -> Lookup {
        let url = format!("{}{}", self.base, paths::charge_by_key(provider_key));
        let res = match self.http.get(url).send().await {
            Ok(r) => r,
            Err(e) => return Lookup::Unknown(format!("lookup failed: {e}")),
        };
        match res.status() {
            StatusCode::OK => match res.json::<Charge>().await {
                Ok(c) => Lookup::Found(c),
                Err(e) => Lookup::Unknown(format!("unreadable charge: {e}")),
            },
            StatusCode::NOT_FOUND => Lookup::NotFound,
            other => Lookup::Unknown(format!("lookup answered {other}")),
        }
    }

    /// `POST /charges/{id}/refunds` with the saved provider refund key (a full refund).
    pub(crate) async fn refund(&self, charge_id: &str, refund_key: &str) -> RefundOutcome {
        let url = format!("{}{}", self.base, paths::refunds(charge_id));
        let res = match self
            .http
            .post(url)
            .header(IDEMPOTENCY_KEY, refund_key)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return RefundOutcome::Unknown(format!("refund call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<Refund>().await {
                Ok(r) => RefundOutcome::Refunded(r),
                Err(e) => RefundOutcome::Unknown(format!("unreadable refund: {e}")),
            };
        }
        if status == StatusCode::CONFLICT {
            return RefundOutcome::NotAllowed(res.text().await.unwrap_or_default());
        }
        RefundOutcome::Unknown(format!("provider answered {status}"))
    }
}
