//! The mock provider's adapter (`crates/mock-provider`: `POST /charges`, lookups by
//! provider key), reached only over HTTP(S) with a timeout.
//!
//! Every answer is sorted into what it proves. Only a clear answer settles an attempt: a
//! charge (succeeded or declined), or a 400 that says the provider refused the request
//! outright. A timeout, a 5xx, a 409/422 or anything unexpected proves nothing, so the
//! attempt stays `processing` and is never charged blindly.

use payonce_protocol::headers::{IDEMPOTENCY_KEY, WEBHOOK_SIGNATURE};
use payonce_protocol::provider::{
    self, paths, Charge, ChargeRequest, ChargeStatus, EventType, Refund, RefundList, WebhookEvent,
};

use reqwest::StatusCode;

use super::{
    ChargeOutcome, Hint, Listed, Lookup, ObjectState, Page, ProviderRefund, RefundOutcome,
    RefundStatus, Subject, Topic, WebhookError, PAGE,
};

/// HTTP client for the mock provider.
#[derive(Clone)]
pub(crate) struct MockClient {
    http: reqwest::Client,
    base: String,
}

impl MockClient {
    /// The mock's page of one charge, before its id (`GET /charges/{id}`).
    pub(crate) fn dashboard(&self) -> String {
        format!("{}{}", self.base, paths::charge(""))
    }

    /// A client of `base` (`super::http_client`: timeout, extra CA, Bearer key).
    pub(crate) fn new(base: &str, http: reqwest::Client) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
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
            Ok(r) => {
                crate::journal::http_seen(r.status().as_u16(), None);
                r
            }
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
            Ok(r) => {
                crate::journal::http_seen(r.status().as_u16(), None);
                r
            }
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

    /// Cancels the charge of `provider_key` while it still waits for the customer
    /// (`POST /charges/{id}/cancel`): the charge as the provider holds it afterwards.
    pub(crate) async fn cancel_action(&self, provider_key: &str) -> Lookup {
        let charge = match self.charge_by_key(provider_key).await {
            Lookup::Found(c) if c.status == ChargeStatus::RequiresAction => c,
            other => return other,
        };
        self.cancel_charge(&charge.id).await
    }

    /// `POST /charges/{id}/cancel`: the charge as the provider holds it afterwards (a
    /// charge no longer waiting for the customer is answered as it is).
    pub(crate) async fn cancel_charge(&self, charge_id: &str) -> Lookup {
        let url = format!("{}{}", self.base, paths::charge_cancel(charge_id));
        let res = match self.http.post(url).send().await {
            Ok(r) => {
                crate::journal::http_seen(r.status().as_u16(), None);
                r
            }
            Err(e) => return Lookup::Unknown(format!("cancel call failed: {e}")),
        };
        match res.status() {
            StatusCode::OK => match res.json::<Charge>().await {
                Ok(c) => Lookup::Found(c),
                Err(e) => Lookup::Unknown(format!("unreadable charge: {e}")),
            },
            other => Lookup::Unknown(format!("cancel answered {other}")),
        }
    }

    /// `GET /ledger?since=…&startingAfter=…&limit=…`: one page of the charges created at
    /// `since_ms` or later.
    pub(crate) async fn list_since(
        &self,
        since_ms: i64,
        after: Option<&str>,
    ) -> Result<Page, String> {
        let url = {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query
                .append_pair("since", &since_ms.to_string())
                .append_pair("limit", &PAGE.to_string());
            if let Some(id) = after {
                query.append_pair("startingAfter", id);
            }
            format!("{}{}?{}", self.base, paths::LEDGER, query.finish())
        };
        let res = self
            .http
            .get(url)
            .timeout(super::LIST_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("ledger call failed: {e}"))?;
        if res.status() != StatusCode::OK {
            return Err(format!("ledger answered {}", res.status()));
        }
        let ledger = res
            .json::<provider::Ledger>()
            .await
            .map_err(|e| format!("unreadable ledger: {e}"))?;
        let next = ledger
            .has_more
            .then(|| ledger.charges.last().map(|c| c.id.clone()))
            .flatten();
        let objects = ledger.charges.into_iter().map(listed).collect();
        Ok(Page { objects, next })
    }

    /// `GET /charges/{id}/refunds`: the charge's refunds, however they were made (ours, or
    /// the merchant's dashboard). `Err`: the provider could not tell. The mock's refunds
    /// are full, and it keeps no key of ours on them: the refund machine reads them by
    /// amount.
    pub(crate) async fn refunds_of(&self, charge_id: &str) -> Result<Vec<ProviderRefund>, String> {
        let url = format!("{}{}", self.base, paths::refunds(charge_id));
        let res = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("refund lookup failed: {e}"))?;
        match res.status() {
            StatusCode::OK => res
                .json::<RefundList>()
                .await
                .map(|l| l.refunds.into_iter().map(provider_refund).collect())
                .map_err(|e| format!("unreadable refunds: {e}")),
            other => Err(format!("refund lookup answered {other}")),
        }
    }

    /// `POST /charges/{id}/refunds` with the saved provider refund key: the mock refunds in
    /// full only, so the amount (the remainder, which for the mock is the whole payment) is
    /// not sent.
    pub(crate) async fn refund(&self, charge_id: &str, refund_key: &str) -> RefundOutcome {
        let url = format!("{}{}", self.base, paths::refunds(charge_id));
        let res = match self
            .http
            .post(url)
            .header(IDEMPOTENCY_KEY, refund_key)
            .send()
            .await
        {
            Ok(r) => {
                crate::journal::http_seen(r.status().as_u16(), None);
                r
            }
            Err(e) => return RefundOutcome::Unknown(format!("refund call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<Refund>().await {
                Ok(r) => RefundOutcome::Created(provider_refund(r)),
                Err(e) => RefundOutcome::Unknown(format!("unreadable refund: {e}")),
            };
        }
        if status == StatusCode::CONFLICT {
            return RefundOutcome::NotAllowed(res.text().await.unwrap_or_default());
        }
        RefundOutcome::Unknown(format!("provider answered {status}"))
    }
}

/// A mock charge as the sweep reads it: every charge carries the provider key it was made
/// under; one waiting for the customer can still charge.
fn listed(c: Charge) -> Listed {
    let state = match c.status {
        ChargeStatus::RequiresAction => ObjectState::Unconfirmed,
        ChargeStatus::Succeeded | ChargeStatus::Refunded => ObjectState::Charged,
        ChargeStatus::Declined | ChargeStatus::Canceled => ObjectState::Other,
    };
    let status = serde_json::to_value(c.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Listed {
        id: c.id,
        provider_key: Some(c.provider_key),
        order_id: Some(c.order_id),
        state,
        status,
        amount: c.amount,
        currency: c.currency,
    }
}

/// A mock refund: full, carrying no key of ours.
fn provider_refund(r: Refund) -> ProviderRefund {
    ProviderRefund {
        id: r.id,
        amount: r.amount,
        status: match r.status {
            provider::RefundStatus::Succeeded => RefundStatus::Succeeded,
            provider::RefundStatus::Pending => RefundStatus::Pending,
            provider::RefundStatus::Failed => RefundStatus::Failed,
        },
        refund_key: None,
    }
}

/// Checks a mock webhook (`Payonce-Signature`, `payonce_protocol::signature`) and reads which
/// provider key it names: the charge's, every event of the mock carries its charge.
pub(crate) fn webhook(
    secret: &str,
    headers: &axum::http::HeaderMap,
    body: &[u8],
    now_ms: i64,
) -> Result<Hint, WebhookError> {
    super::verify_signature(headers, WEBHOOK_SIGNATURE, secret, body, now_ms)?;
    let event: WebhookEvent = serde_json::from_slice(body)
        .map_err(|e| WebhookError::Unreadable(format!("not a webhook event: {e}")))?;
    let topic = match event.event_type {
        EventType::ChargeSucceeded => Topic::Succeeded,
        EventType::ChargeDeclined => Topic::Failed,
        EventType::ChargeRefunded | EventType::RefundUpdated | EventType::RefundFailed => {
            Topic::Refund
        }
    };
    Ok(Hint {
        event_id: event.id,
        kind: event.event_type.as_str().to_owned(),
        topic: Some(topic),
        subject: Subject::Key(event.charge.provider_key),
    })
}
