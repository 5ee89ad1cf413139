//! Stripe's PaymentIntents API (its test or live mode, or the localstripe emulator).
//!
//! A payment is two calls, and the pay machine (`crates/rules/src/pay.rs`, `Phases::Two`)
//! writes between them: `POST /v1/payment_intents` creates the intent (nothing is charged;
//! `Idempotency-Key` = the attempt's saved provider key), its id is saved on the attempt in
//! its own write, and only then `POST /v1/payment_intents/{saved id}/confirm` charges it
//! (`Idempotency-Key` = the provider key + [`CONFIRM`]). Lookups read the saved id
//! (`GET /v1/payment_intents/{id}`), never a search. So a create whose answer is lost leaves
//! at worst an intent nobody confirms, whatever the provider does with idempotency keys
//! (Stripe keeps them 24 hours; localstripe ignores them): docs/providers.md.
//!
//! Amounts are the server's, in minor units; Stripe wants the currency in lower case. Card
//! numbers never reach this server: the checkout sends a PaymentMethod id (`pm_…`).
//!
//! Every request names the API version this file reads ([`API_VERSION`] in `Stripe-Version`),
//! so the account's default version cannot rename what an answer says. Every intent read
//! must be in the key's mode (`livemode`): a test intent on a live server (or the reverse)
//! proves nothing about money, so it settles nothing and reconciliation flags it.

use super::{
    ChargeOutcome, Created, Hint, Listed, Lookup, ObjectState, Page, ProbeError, ProviderRefund,
    RefundOutcome, RefundStatus, StripeMode, Subject, Topic, WebhookError, PAGE,
};
use payonce_protocol::headers::{IDEMPOTENCY_KEY, STRIPE_REQUEST_ID, STRIPE_SIGNATURE};
use payonce_protocol::provider::{Charge, ChargeRequest, ChargeStatus};
use reqwest::StatusCode;
use serde::Deserialize;
use std::collections::HashMap;

/// The Stripe API version this adapter is written for: the intent statuses of the table in
/// docs/providers.md (`requires_payment_method`, `requires_action`, 2019-02-11 on), an
/// intent's `payment_method` as an id, explicit `payment_method_types` (so no redirect
/// method needs a `return_url`, 2023-08-16 on), refunds listed by `payment_intent`. Sent on
/// every request (`super::Provider::new`); change it only with this file and its tests.
pub(crate) const API_VERSION: &str = "2024-06-20";

/// Suffix of the confirm call's idempotency key (one key per call: Stripe refuses a key
/// reused with other parameters or on another endpoint).
pub(crate) const CONFIRM: &str = "-confirm";
/// The suffix of a cancel's `Idempotency-Key` (the provider key's own is the create's).
const CANCEL: &str = "-cancel";
/// The suffix of the cancel of a declined intent before its attempt settles: another call
/// than the deadline's cancel of the same intent, so it never gets that one's stored answer
/// (a 400 when the customer acted meanwhile) replayed by Stripe's idempotency layer.
const CANCEL_UNCHARGED: &str = "-cancel-uncharged";
/// The suffix of the provider sweep's cancel, after the intent's own id (the sweep cancels
/// intents no attempt saved, so there may be several under one provider key).
const CANCEL_LISTED: &str = "-sweep-cancel";

/// Metadata names on the intent: which order and attempt it pays, under which key.
const META_ORDER: &str = "order_id";
const META_ATTEMPT: &str = "attempt_id";
const META_KEY: &str = "provider_key";
/// Metadata name on a refund: the provider refund key saved on the refund row before the
/// call, which tells our refund from one made elsewhere (crates/rules/src/refund.rs,
/// `standing`).
const META_REFUND_KEY: &str = "refund_key";

/// HTTP client for Stripe.
#[derive(Clone)]
pub(crate) struct StripeClient {
    http: reqwest::Client,
    base: String,
    /// The key's mode: every intent read must be in it.
    mode: StripeMode,
}

/// A PaymentIntent, the members we read.
#[derive(Debug, Deserialize)]
struct Intent {
    id: String,
    amount: i64,
    currency: String,
    status: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    payment_method: Option<serde_json::Value>,
    #[serde(default)]
    metadata: HashMap<String, String>,
    #[serde(default)]
    last_payment_error: Option<PaymentError>,
    #[serde(default)]
    created: i64,
    /// Whether it is a live intent (absent at an emulator that does not say).
    #[serde(default)]
    livemode: Option<bool>,
}

/// `last_payment_error`: why the last confirm did not charge.
#[derive(Debug, Deserialize)]
struct PaymentError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
}

/// A Refund, the members we read.
#[derive(Debug, Deserialize)]
struct StripeRefund {
    id: String,
    amount: i64,
    status: String,
    #[serde(default)]
    metadata: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct IntentList {
    data: Vec<Intent>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Debug, Deserialize)]
struct RefundList {
    data: Vec<StripeRefund>,
}

impl StripeClient {
    /// A client of `base` (`super::http_client`: timeout, extra CA, the secret key).
    pub(crate) fn new(base: &str, http: reqwest::Client, mode: StripeMode) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            mode,
        }
    }

    /// The dashboard's page of a PaymentIntent in the key's mode, before its id: test-mode
    /// objects live under `/test/`.
    pub(crate) fn dashboard(&self) -> &'static str {
        match self.mode {
            StripeMode::Test => "https://dashboard.stripe.com/test/payments/",
            StripeMode::Live => "https://dashboard.stripe.com/payments/",
        }
    }

    /// The intent, when it is in the key's mode; else why it proves nothing (logged: the
    /// attempt stays processing, reconciliation flags it for review, and no order is marked
    /// paid by a test payment on a live server).
    fn in_mode(&self, i: Intent) -> Result<Intent, String> {
        let live = self.mode == StripeMode::Live;
        match i.livemode {
            Some(l) if l != live => {
                let why = format!(
                    "intent {} has livemode {l}, the key is {}-mode: not settled",
                    i.id,
                    self.mode.name()
                );
                tracing::error!(intent = %i.id, livemode = l, mode = self.mode.name(), "Stripe intent in the other mode: left for review");
                Err(why)
            }
            _ => Ok(i),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Any HTTP answer of the API origin will do but 401, Stripe refusing the key (see
    /// `Provider::probe`).
    pub(crate) async fn probe(&self) -> Result<(), ProbeError> {
        let e = match self
            .http
            .get(self.url("/v1/payment_intents?limit=1"))
            .send()
            .await
        {
            Ok(r) if r.status() == StatusCode::UNAUTHORIZED => {
                return Err(ProbeError::KeyRefused(r.status().as_u16()))
            }
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if let Some(why) = crate::error::tls_failure(&e) {
            return Err(ProbeError::Tls(why));
        }
        tracing::warn!(error = %e, "provider unreachable at start");
        Ok(())
    }

    /// `POST /v1/payment_intents`, unconfirmed, under the saved provider key.
    pub(crate) async fn create(
        &self,
        provider_key: &str,
        req: &ChargeRequest,
        attempt_id: &str,
    ) -> Created {
        let form = form(&[
            ("amount", &req.amount.to_string()),
            ("currency", &req.currency.to_ascii_lowercase()),
            ("payment_method", &req.payment_method_id),
            // Cards only: no redirect-based method, so a confirm needs no `return_url`.
            ("payment_method_types[]", "card"),
            (&format!("metadata[{META_ORDER}]"), &req.order_id),
            (&format!("metadata[{META_ATTEMPT}]"), attempt_id),
            (&format!("metadata[{META_KEY}]"), provider_key),
        ]);
        let res = self
            .http
            .post(self.url("/v1/payment_intents"))
            .header(IDEMPOTENCY_KEY, provider_key)
            .header(reqwest::header::CONTENT_TYPE, FORM)
            .body(form)
            .send()
            .await;
        let res = match res {
            Ok(r) => seen(r),
            Err(e) => return Created::Unknown(format!("create call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<Intent>().await {
                Ok(i) => Created::Id(i.id),
                Err(e) => Created::Unknown(format!("unreadable intent: {e}")),
            };
        }
        // 400 (bad parameters), 402 (card error at create), 404 (no such payment method):
        // Stripe made no intent, so nothing can ever be charged under this attempt.
        if matches!(status.as_u16(), 400 | 402 | 404) {
            return Created::Refused(error_code(res).await);
        }
        Created::Unknown(format!("create answered {status}"))
    }

    /// `POST /v1/payment_intents/{id}/confirm` of the saved intent id. A clear refusal (402
    /// card error, 400 "not confirmable") is read back from the intent itself, so what it
    /// proves is decided in one place ([`outcome_of`]).
    pub(crate) async fn confirm(&self, intent_id: &str, provider_key: &str) -> ChargeOutcome {
        let res = self
            .http
            .post(self.url(&format!("/v1/payment_intents/{intent_id}/confirm")))
            .header(IDEMPOTENCY_KEY, format!("{provider_key}{CONFIRM}"))
            .header(reqwest::header::CONTENT_TYPE, FORM)
            .send()
            .await;
        let res = match res {
            Ok(r) => seen(r),
            Err(e) => return ChargeOutcome::Unknown(format!("confirm call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<Intent>().await.map(|i| self.in_mode(i)) {
                Ok(Ok(i)) => outcome_of(i, provider_key),
                Ok(Err(why)) => ChargeOutcome::Unknown(why),
                Err(e) => ChargeOutcome::Unknown(format!("unreadable intent: {e}")),
            };
        }
        if matches!(
            status,
            StatusCode::PAYMENT_REQUIRED | StatusCode::BAD_REQUEST
        ) {
            return match self.lookup(intent_id).await {
                Lookup::Found(c) => plan_outcome(c),
                Lookup::Unconfirmed => ChargeOutcome::Unknown(format!(
                    "confirm answered {status}; the intent is still unconfirmed"
                )),
                Lookup::NotFound | Lookup::Unknown(_) => {
                    ChargeOutcome::Unknown(format!("confirm answered {status}"))
                }
            };
        }
        ChargeOutcome::Unknown(format!("confirm answered {status}"))
    }

    /// `GET /v1/payment_intents/{id}` of the saved id.
    pub(crate) async fn lookup(&self, intent_id: &str) -> Lookup {
        let url = self.url(&format!("/v1/payment_intents/{intent_id}"));
        let res = match self.http.get(url).send().await {
            Ok(r) => seen(r),
            Err(e) => return Lookup::Unknown(format!("lookup failed: {e}")),
        };
        match res.status() {
            StatusCode::OK => match res.json::<Intent>().await.map(|i| self.in_mode(i)) {
                Ok(Err(why)) => Lookup::Unknown(why),
                Ok(Ok(i)) if i.status == "requires_confirmation" => Lookup::Unconfirmed,
                Ok(Ok(i)) => {
                    let key = i.metadata.get(META_KEY).cloned().unwrap_or_default();
                    match charge_from(i, &key) {
                        Ok(c) => Lookup::Found(c),
                        Err(why) => Lookup::Unknown(why),
                    }
                }
                Err(e) => Lookup::Unknown(format!("unreadable intent: {e}")),
            },
            // We saved this id from Stripe's own answer: "no such intent" is another account
            // or key, never "nothing was charged".
            other => Lookup::Unknown(format!("lookup answered {other}")),
        }
    }

    /// `POST /v1/payment_intents/{id}/cancel` of the saved intent id (its customer abandoned
    /// the action past the deadline), under its own idempotency key; then the intent as it
    /// is. A refusal (400: it succeeded or failed meanwhile) is read back from the intent.
    pub(crate) async fn cancel(&self, intent_id: &str, provider_key: &str) -> Lookup {
        self.cancel_under(intent_id, format!("{provider_key}{CANCEL}"))
            .await
    }

    /// [`StripeClient::cancel`] of a declined intent before its attempt settles uncharged
    /// (nothing confirmable outlives its attempt: docs/providers.md), under its own
    /// idempotency key.
    pub(crate) async fn cancel_uncharged(&self, intent_id: &str, provider_key: &str) -> Lookup {
        self.cancel_under(intent_id, format!("{provider_key}{CANCEL_UNCHARGED}"))
            .await
    }

    /// [`StripeClient::cancel`] of an intent the provider sweep found that no attempt saved
    /// (src/ops/sweep.rs), under an idempotency key of the intent's own id.
    pub(crate) async fn cancel_listed(&self, intent_id: &str) -> Lookup {
        self.cancel_under(intent_id, format!("{intent_id}{CANCEL_LISTED}"))
            .await
    }

    /// `GET /v1/payment_intents?created[gte]=…&limit=100&starting_after=…`: one page of the
    /// intents created at `since_ms` (to the second) or later, newest first. An intent of
    /// the other mode is not listed (it proves nothing about this key's money).
    pub(crate) async fn list_since(
        &self,
        since_ms: i64,
        after: Option<&str>,
    ) -> Result<Page, String> {
        let (since, limit) = (since_ms.div_euclid(1000).to_string(), PAGE.to_string());
        let mut query = vec![("created[gte]", since.as_str()), ("limit", limit.as_str())];
        if let Some(id) = after {
            query.push(("starting_after", id));
        }
        let url = self.url(&format!("/v1/payment_intents?{}", form(&query)));
        let res = self
            .http
            .get(url)
            .timeout(super::LIST_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("list call failed: {e}"))?;
        let status = res.status();
        if !status.is_success() {
            return Err(format!("list answered {status}"));
        }
        let list = res
            .json::<IntentList>()
            .await
            .map_err(|e| format!("unreadable list: {e}"))?;
        let next = list
            .has_more
            .then(|| list.data.last().map(|i| i.id.clone()))
            .flatten();
        let objects = list
            .data
            .into_iter()
            .filter_map(|i| self.in_mode(i).ok())
            .map(listed)
            .collect();
        Ok(Page { objects, next })
    }

    async fn cancel_under(&self, intent_id: &str, idempotency_key: String) -> Lookup {
        let res = self
            .http
            .post(self.url(&format!("/v1/payment_intents/{intent_id}/cancel")))
            .header(IDEMPOTENCY_KEY, idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, FORM)
            .send()
            .await
            .map(seen);
        match res {
            Ok(r) if r.status().is_success() => {}
            Ok(r) if r.status() == StatusCode::BAD_REQUEST => {}
            Ok(r) => return Lookup::Unknown(format!("cancel answered {}", r.status())),
            Err(e) => return Lookup::Unknown(format!("cancel call failed: {e}")),
        }
        self.lookup(intent_id).await
    }

    /// `POST /v1/refunds` of `amount` of the intent `intent_id`, carrying the saved refund
    /// key as `metadata[refund_key]` (how a later list tells this refund from one made
    /// elsewhere). The `Idempotency-Key` is the refund key and the amount: Stripe refuses a
    /// key reused with other parameters, and a retry refunds another amount only when the
    /// list showed the first call did not land. Nothing here relies on Stripe deduplicating:
    /// the refund machine (`crates/rules/src/refund.rs`) lists first and sends no second call
    /// while one may still land.
    pub(crate) async fn refund(
        &self,
        intent_id: &str,
        refund_key: &str,
        amount: i64,
    ) -> RefundOutcome {
        let body = form(&[
            ("payment_intent", intent_id),
            ("amount", &amount.to_string()),
            (&format!("metadata[{META_REFUND_KEY}]"), refund_key),
        ]);
        let res = self
            .http
            .post(self.url("/v1/refunds"))
            .header(IDEMPOTENCY_KEY, format!("{refund_key}-{amount}"))
            .header(reqwest::header::CONTENT_TYPE, FORM)
            .body(body)
            .send()
            .await;
        let res = match res {
            Ok(r) => seen(r),
            Err(e) => return RefundOutcome::Unknown(format!("refund call failed: {e}")),
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<StripeRefund>().await {
                Ok(r) => RefundOutcome::Created(provider_refund(r)),
                Err(e) => RefundOutcome::Unknown(format!("unreadable refund: {e}")),
            };
        }
        // 400: nothing left to refund, a failed charge, or the key reused: the machine reads
        // the list again before it decides.
        if status == StatusCode::BAD_REQUEST {
            return RefundOutcome::NotAllowed(error_code(res).await);
        }
        RefundOutcome::Unknown(format!("refund answered {status}"))
    }

    /// `GET /v1/refunds?payment_intent=…`: every refund of the intent, failed ones too.
    pub(crate) async fn refunds_of(&self, intent_id: &str) -> Result<Vec<ProviderRefund>, String> {
        let url = self.url(&format!("/v1/refunds?payment_intent={intent_id}&limit=100"));
        let res = self
            .http
            .get(url)
            .send()
            .await
            .map(seen)
            .map_err(|e| format!("refund lookup failed: {e}"))?;
        let status = res.status();
        if !status.is_success() {
            return Err(format!("refund lookup answered {status}"));
        }
        let list = res
            .json::<RefundList>()
            .await
            .map_err(|e| format!("unreadable refunds: {e}"))?;
        Ok(list.data.into_iter().map(provider_refund).collect())
    }
}

const FORM: &str = "application/x-www-form-urlencoded";

/// Notes an answer's status and Stripe's `Request-Id` for the journal (`src/journal.rs`).
fn seen(r: reqwest::Response) -> reqwest::Response {
    let id = r
        .headers()
        .get(STRIPE_REQUEST_ID)
        .and_then(|v| v.to_str().ok());
    crate::journal::http_seen(r.status().as_u16(), id);
    r
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

/// Stripe's error code (`error.code`, or its type), never its message (it may echo input).
async fn error_code(res: reqwest::Response) -> String {
    #[derive(Deserialize)]
    struct Body {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        code: Option<String>,
        #[serde(default, rename = "type")]
        kind: Option<String>,
    }
    let status = res.status();
    match res.json::<Body>().await {
        Ok(b) => b.error.code.or(b.error.kind).unwrap_or_default(),
        Err(_) => format!("{status}"),
    }
}

/// What an intent's status proves (docs/providers.md, "Stripe"): `succeeded` → paid;
/// `requires_payment_method` after a failed confirm → declined; `requires_action` → the
/// customer must act (its client secret goes to the checkout); `canceled` → nothing charged
/// (expired); anything else (processing, requires_capture, unconfirmed, …) → unknown: the attempt stays processing and
/// reconciliation asks again.
fn outcome_of(i: Intent, provider_key: &str) -> ChargeOutcome {
    charge_from(i, provider_key).map_or_else(ChargeOutcome::Unknown, plan_outcome)
}

/// The intent as a charge, when its status proves something ([`outcome_of`]); `Err`: why
/// it proves nothing.
fn charge_from(i: Intent, provider_key: &str) -> Result<Charge, String> {
    let status = match (i.status.as_str(), &i.last_payment_error) {
        ("succeeded", _) => ChargeStatus::Succeeded,
        ("requires_payment_method", Some(_)) => ChargeStatus::Declined,
        ("requires_action", _) => ChargeStatus::RequiresAction,
        // Only a saved intent is ever confirmed or cancelled, and we cancel only one whose
        // customer abandoned the action: nothing was charged, nothing ever will be.
        ("canceled", _) => ChargeStatus::Canceled,
        (other, _) => return Err(format!("intent {} is {other}", i.id)),
    };
    let pm = match &i.payment_method {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v["id"].as_str().unwrap_or_default().to_owned(),
        None => String::new(),
    };
    let decline = i
        .last_payment_error
        .as_ref()
        .and_then(|e| e.decline_code.clone().or(e.code.clone()));
    let charge = Charge {
        id: i.id,
        provider_key: provider_key.to_owned(),
        amount: i.amount,
        currency: i.currency.to_ascii_uppercase(),
        payment_method_id: pm,
        order_id: i.metadata.get(META_ORDER).cloned().unwrap_or_default(),
        status,
        created_at: i.created.saturating_mul(1000),
        next_action_url: None,
        decline_code: decline,
        // Only an intent waiting for the customer hands its secret to the browser.
        client_secret: i
            .client_secret
            .filter(|_| status == ChargeStatus::RequiresAction),
    };
    Ok(charge)
}

/// An intent as the sweep reads it: ours when it carries our provider key; the statuses
/// that can still be confirmed (docs/providers.md) are unconfirmed.
fn listed(mut i: Intent) -> Listed {
    let state = match i.status.as_str() {
        "requires_payment_method" | "requires_confirmation" | "requires_action" => {
            ObjectState::Unconfirmed
        }
        "succeeded" => ObjectState::Charged,
        _ => ObjectState::Other,
    };
    Listed {
        provider_key: i.metadata.remove(META_KEY),
        order_id: i.metadata.remove(META_ORDER),
        state,
        status: i.status,
        amount: i.amount,
        currency: i.currency.to_ascii_uppercase(),
        id: i.id,
    }
}

fn plan_outcome(c: Charge) -> ChargeOutcome {
    payonce_rules::plan::Outcome::of(c)
}

/// A Stripe refund as the refund machine reads it: `succeeded` returned the money;
/// `failed` and `canceled` moved nothing; anything else (`pending`, `requires_action`) may
/// still go either way.
fn provider_refund(mut r: StripeRefund) -> ProviderRefund {
    let status = match r.status.as_str() {
        "succeeded" => RefundStatus::Succeeded,
        "failed" | "canceled" => RefundStatus::Failed,
        _ => RefundStatus::Pending,
    };
    ProviderRefund {
        refund_key: r.metadata.remove(META_REFUND_KEY),
        id: r.id,
        amount: r.amount,
        status,
    }
}

/// The event types payonce acts on, as Stripe spells them (every other is acknowledged and
/// ignored): `payment_intent.succeeded` and `payment_intent.payment_failed` settle the
/// intent's attempt; `charge.refunded` (a full or partial refund of the intent's charge),
/// `refund.updated` (a refund's status changed, e.g. pending → succeeded) and `refund.failed`
/// (a refund failed after it was accepted) are refunds.
const TOPICS: [(&str, Topic); 5] = [
    ("payment_intent.succeeded", Topic::Succeeded),
    ("payment_intent.payment_failed", Topic::Failed),
    ("charge.refunded", Topic::Refund),
    ("refund.updated", Topic::Refund),
    ("refund.failed", Topic::Refund),
];

/// What Stripe's event type `kind` reports (`None`: nothing payonce acts on).
fn topic(kind: &str) -> Option<Topic> {
    TOPICS.iter().find(|(k, _)| *k == kind).map(|&(_, t)| t)
}

/// Checks a Stripe webhook (`Stripe-Signature: t=…,v1=…`, the scheme of
/// `payonce_protocol::signature`) and reads which intent it names: the event's object, or
/// the object's `payment_intent` (a charge's, a refund's).
pub(crate) fn webhook(
    secret: &str,
    headers: &axum::http::HeaderMap,
    body: &[u8],
    now_ms: i64,
) -> Result<Hint, WebhookError> {
    super::verify_signature(headers, STRIPE_SIGNATURE, secret, body, now_ms)?;
    #[derive(Deserialize)]
    struct Event {
        id: String,
        #[serde(rename = "type")]
        kind: String,
        data: Data,
    }
    #[derive(Deserialize)]
    struct Data {
        object: Object,
    }
    #[derive(Deserialize)]
    struct Object {
        id: String,
        #[serde(default)]
        payment_intent: Option<String>,
    }
    let e: Event = serde_json::from_slice(body)
        .map_err(|e| WebhookError::Unreadable(format!("not a Stripe event: {e}")))?;
    let intent = e.data.object.payment_intent.unwrap_or(e.data.object.id);
    Ok(Hint {
        event_id: e.id,
        topic: topic(&e.kind),
        kind: e.kind,
        subject: Subject::Saved(intent),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topics_are_stripes_five_types_and_nothing_else() {
        for (kind, t) in TOPICS {
            assert_eq!(topic(kind), Some(t));
        }
        for other in [
            "payment_intent.created",
            "charge.succeeded",
            "",
            "charge.refunded ",
        ] {
            assert_eq!(topic(other), None, "{other:?}");
        }
    }

    fn intent(livemode: Option<bool>) -> Intent {
        let mut v = serde_json::json!({
            "id": "pi_1", "amount": 2500, "currency": "usd", "status": "succeeded",
            "metadata": { "order_id": "ord_1", "provider_key": "pk_1" }
        });
        if let Some(l) = livemode {
            v["livemode"] = l.into();
        }
        serde_json::from_value(v).unwrap()
    }

    /// A succeeded intent of the other mode never reads as a payment: a test card on a live
    /// server (or a live charge on a test one) settles nothing and is left for review.
    #[test]
    fn an_intent_of_the_other_mode_proves_nothing() {
        for (mode, other) in [(StripeMode::Live, false), (StripeMode::Test, true)] {
            let c = StripeClient::new("http://127.0.0.1:1", reqwest::Client::new(), mode);
            let why = c.in_mode(intent(Some(other))).unwrap_err();
            assert!(why.contains("pi_1") && why.contains(mode.name()), "{why}");
            let same = c.in_mode(intent(Some(!other))).unwrap();
            assert!(matches!(
                outcome_of(same, "pk_1"),
                ChargeOutcome::Succeeded(_)
            ));
            // An emulator that does not say: read as the key's mode.
            assert!(c.in_mode(intent(None)).is_ok());
        }
    }
}
