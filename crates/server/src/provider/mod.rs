//! The payment provider port: what the pay machine (`crates/rules/src/pay.rs`) and the
//! refund path need from a provider, and one adapter per provider behind it. The contract
//! every adapter keeps (what each answer proves, what is never retried blindly) is
//! docs/providers.md.
//!
//! Layout:
//! - `mock.rs`: the mock provider (`crates/mock-provider`): one call charges, lookups go by
//!   our provider key, which it deduplicates.
//! - `stripe.rs`: Stripe PaymentIntents in two phases: create (its id saved on the attempt
//!   before anything else), then confirm that saved id; lookups read the saved id.
//!
//! Every answer is sorted into what it proves. Only a clear answer settles an attempt: a
//! charge (succeeded or declined), or a refusal of the request itself. A timeout, a 5xx or
//! anything unexpected proves nothing, so the attempt stays `processing` and is never
//! charged blindly.

mod mock;
mod stripe;

use crate::journal::{self, Said};
use payonce_protocol::admin::op;
use payonce_protocol::headers::STRIPE_VERSION;
use payonce_protocol::provider::ChargeRequest;
use std::time::Duration;

pub(crate) use payonce_rules::pay::{Created, Phases};
pub(crate) use payonce_rules::plan::{Lookup, Outcome as ChargeOutcome};
pub(crate) use payonce_rules::sweep::{Object as Listed, ObjectState};

/// Payment objects listed per page (Stripe's largest page).
pub(crate) const PAGE: usize = 100;
/// Timeout of one list call: no customer waits on it, and a page of [`PAGE`] objects takes
/// longer to answer than the one object of a pay's call (`--provider-timeout-ms`).
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// One page of the provider's payment objects created since some time (the provider
/// sweep, src/ops/sweep.rs).
#[derive(Debug)]
pub(crate) struct Page {
    /// The objects of this page.
    pub(crate) objects: Vec<Listed>,
    /// Where the next page starts (`starting_after`); `None`: this was the last.
    pub(crate) next: Option<String>,
}

/// Stripe's API origin, `--provider-url`'s default with `--provider stripe`.
pub const STRIPE_API: &str = "https://api.stripe.com";

/// Which provider `--provider-url` speaks for (`--provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderKind {
    /// The mock provider (`crates/mock-provider`; embedded by a dev build with `--dev`).
    Mock,
    /// Stripe (its test or live mode, or the localstripe emulator), PaymentIntents API.
    Stripe,
}

/// Stripe's mode: a live key moves money, a test key takes test cards. Read from the secret
/// key's prefix at start (`src/config/checks.rs`), and every intent's `livemode` must match it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StripeMode {
    /// `sk_live_…`, `rk_live_…`.
    Live,
    /// `sk_test_…`, `rk_test_…` (and, in dev, an emulator's key of any shape).
    Test,
}

impl StripeMode {
    /// The mode of a Stripe secret key (`None`: not a key of either mode).
    pub(crate) fn of_key(key: &str) -> Option<Self> {
        let has = |prefixes: [&str; 2]| prefixes.iter().any(|p| key.starts_with(p));
        if has(["sk_live_", "rk_live_"]) {
            Some(Self::Live)
        } else if has(["sk_test_", "rk_test_"]) {
            Some(Self::Test)
        } else {
            None
        }
    }

    /// `live` or `test`, for the start-up line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Test => "test",
        }
    }
}

/// Why the start-up probe stops the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// The TLS handshake failed (wrong CA, a plain-text server).
    Tls(String),
    /// The provider answered 401: it refuses the API key, so every call would fail.
    KeyRefused(u16),
}

/// What a refund call proved, and a refund as the provider holds it: the refund machine's
/// inputs (`payonce_rules::refund`).
pub(crate) use payonce_rules::refund::{ProviderRefund, RefundOutcome, RefundStatus};

/// What a webhook event reports, in payonce's terms: each adapter maps its provider's event
/// types onto these (and drops the ones payonce does not act on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topic {
    /// The payment succeeded.
    Succeeded,
    /// The payment failed (declined).
    Failed,
    /// A refund of the payment was made, succeeded or failed (payonce's, or one made in the
    /// provider's dashboard).
    Refund,
}

/// Which attempt a webhook event is about, and so what an event about none of ours means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// Our provider key (the mock: one phase). The claim commits the key before the provider
    /// is called, so an unknown key may be our commit not visible yet: the event is not
    /// acknowledged, and the provider's redelivery is the queue.
    Key(String),
    /// The provider's payment object saved on the attempt (Stripe's PaymentIntent id). The
    /// adapter saves it in its own write before it confirms, and only a confirmed object
    /// succeeds, fails or is refunded: an unknown one is not ours (another integration on the
    /// same account), and no redelivery would make it ours, so the event is acknowledged.
    Saved(String),
}

impl Subject {
    /// The id the event names.
    pub(crate) fn id(&self) -> &str {
        match self {
            Self::Key(id) | Self::Saved(id) => id,
        }
    }

    /// What the id is, for a problem's detail.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Key(_) => "the provider key",
            Self::Saved(_) => "the payment object id",
        }
    }

    /// Whether an event about an attempt we do not hold should be delivered again (see the
    /// variants).
    pub(crate) fn unknown_may_become_ours(&self) -> bool {
        matches!(self, Self::Key(_))
    }
}

/// A provider webhook, its signature checked and its body read: which of our attempts it is
/// a hint about. Never evidence: the handler reads the outcome back from the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hint {
    /// The provider's event id (deduplicated on it).
    pub(crate) event_id: String,
    /// The provider's event type, as it spells it (stored with the event).
    pub(crate) kind: String,
    /// What it reports; `None`: a type payonce does not act on (acknowledged, not stored).
    pub(crate) topic: Option<Topic>,
    /// The attempt it is about.
    pub(crate) subject: Subject,
}

/// Why a webhook delivery was refused before anything was stored (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WebhookError {
    /// No valid signature (forged, or another secret), or a stale timestamp: the reason
    /// (`payonce_protocol::problem::reason`).
    #[error("signature: {0}")]
    Signature(String),
    /// Signed, but not an event we can read: the detail.
    #[error("unreadable event: {0}")]
    Unreadable(String),
}

/// How far a signature's timestamp may be from our clock: bounds how long a captured
/// delivery can be replayed, while allowing the provider's retries with backoff.
const WEBHOOK_TOLERANCE: Duration = Duration::from_secs(300);

/// Checks the signature in `headers[name]` (`t=…,v1=…`, `payonce_protocol::signature`) over
/// the raw `body` with `secret` at `now_ms`: the one check of both adapters.
fn verify_signature(
    headers: &axum::http::HeaderMap,
    name: &str,
    secret: &str,
    body: &[u8],
    now_ms: i64,
) -> Result<(), WebhookError> {
    use payonce_protocol::problem::reason;
    let header = headers
        .get(name)
        .ok_or_else(|| WebhookError::Signature(reason::MISSING.into()))?
        .to_str()
        .map_err(|_| WebhookError::Signature("malformed".into()))?;
    let now = now_ms / 1000;
    payonce_protocol::signature::verify(secret, header, body, now, WEBHOOK_TOLERANCE)
        .map_err(|e| WebhookError::Signature(e.reason().into()))
}

/// The provider behind `--provider-url`: one adapter per provider, chosen by `--provider`.
#[derive(Clone)]
pub(crate) enum Provider {
    /// The mock provider.
    Mock(mock::MockClient),
    /// Stripe.
    Stripe(stripe::StripeClient),
}

impl Provider {
    /// The adapter of `kind` at `base`, trusting the `ca` certificates (PEM) beside the
    /// system's roots, sending `api_key` (the mock's `--provider-api-key-file`, Stripe's
    /// secret key) on every request as `Authorization: Bearer <key>`, marked sensitive so
    /// that no debug output of reqwest or hyper shows it. (Credentials in `base` itself are
    /// refused outside `--dev`: `src/config/checks.rs`, `link_problems`.)
    /// `mode`: Stripe's, from its key (`src/config/checks.rs`); every Stripe request carries the
    /// API version the adapter is written for (`stripe::API_VERSION`).
    pub(crate) fn new(
        kind: ProviderKind,
        base: &str,
        timeout: Duration,
        ca: Option<&[u8]>,
        (api_key, mode): (Option<&str>, Option<StripeMode>),
    ) -> Result<Self, ClientError> {
        Ok(match kind {
            ProviderKind::Mock => {
                let http = http_client(timeout, ca, api_key, None)?;
                Self::Mock(mock::MockClient::new(base, http))
            }
            ProviderKind::Stripe => {
                let version = (STRIPE_VERSION, stripe::API_VERSION);
                let http = http_client(timeout, ca, api_key, Some(version))?;
                let mode = mode.unwrap_or(StripeMode::Test);
                Self::Stripe(stripe::StripeClient::new(base, http, mode))
            }
        })
    }

    /// How a payment is started: in one call (mock) or two (create, save its id, confirm).
    /// Where the provider's dashboard shows one payment object: this prefix, then its id
    /// (the operator page's links, `assets/admin.html`): Stripe's dashboard in the key's
    /// mode, the mock's own `GET /charges/{id}`.
    pub(crate) fn dashboard(&self) -> String {
        match self {
            Self::Mock(c) => c.dashboard(),
            Self::Stripe(c) => c.dashboard().to_owned(),
        }
    }

    pub(crate) fn phases(&self) -> Phases {
        match self {
            Self::Mock(_) => Phases::One,
            Self::Stripe(_) => Phases::Two,
        }
    }

    /// One request at start, for the handshake: any HTTP answer will do; a provider that
    /// is down only warns (pays answer 202 until it is back), a failed TLS handshake is
    /// the error, and so is (Stripe) a 401: the key is refused, no pay could ever succeed.
    pub(crate) async fn probe(&self) -> Result<(), ProbeError> {
        match self {
            Self::Mock(c) => c.probe().await.map_err(ProbeError::Tls),
            Self::Stripe(c) => c.probe().await,
        }
    }

    /// One-phase start: charge under the saved provider key.
    pub(crate) async fn charge(&self, provider_key: &str, req: &ChargeRequest) -> ChargeOutcome {
        let call = async {
            match self {
                Self::Mock(c) => c.charge(provider_key, req).await,
                Self::Stripe(_) => ChargeOutcome::Rejected("a two-phase provider".into()),
            }
        };
        journal::provider_call(op::CHARGE, Some(provider_key), call, said_charge).await
    }

    /// Two-phase start, first half: create the payment object (nothing is charged yet)
    /// under the saved provider key.
    pub(crate) async fn create(
        &self,
        provider_key: &str,
        req: &ChargeRequest,
        attempt_id: &str,
    ) -> Created {
        let call = async {
            match self {
                Self::Mock(_) => Created::Refused("a one-phase provider".into()),
                Self::Stripe(c) => c.create(provider_key, req, attempt_id).await,
            }
        };
        let said = |c: &Created| {
            let (outcome, object, why) = match c {
                Created::Id(id) => ("created", Some(id.clone()), None),
                Created::Refused(why) => ("refused", None, Some(why.clone())),
                Created::Unknown(why) => ("unknown", None, Some(why.clone())),
            };
            let order_id = Some(req.order_id.clone());
            Said {
                outcome,
                object,
                order_id,
                why,
            }
        };
        journal::provider_call(op::CREATE, Some(provider_key), call, said).await
    }

    /// Two-phase start, second half: confirm the payment object whose id is saved on the
    /// attempt, with its own idempotency key derived from the provider key.
    pub(crate) async fn confirm(&self, provider_ref: &str, provider_key: &str) -> ChargeOutcome {
        let call = async {
            match self {
                Self::Mock(_) => ChargeOutcome::Rejected("a one-phase provider".into()),
                Self::Stripe(c) => c.confirm(provider_ref, provider_key).await,
            }
        };
        journal::provider_call(op::CONFIRM, Some(provider_ref), call, said_charge).await
    }

    /// What the provider has for an attempt: by our provider key (mock) or by the id saved
    /// on it (Stripe; never a search). `provider_ref`: the saved id, if any.
    pub(crate) async fn lookup(&self, provider_key: &str, provider_ref: Option<&str>) -> Lookup {
        let call = async {
            match (self, provider_ref) {
                (Self::Mock(c), _) => c.charge_by_key(provider_key).await,
                (Self::Stripe(c), Some(id)) => c.lookup(id).await,
                // Only a saved id is ever confirmed (crates/rules/src/pay.rs): an attempt
                // without one has charged nothing.
                (Self::Stripe(_), None) => Lookup::NotFound,
            }
        };
        let about = provider_ref.or(Some(provider_key));
        journal::provider_call(op::LOOKUP, about, call, said_lookup).await
    }

    /// Cancels the attempt's payment that still waits for the customer (its deadline
    /// passed): the payment as the provider holds it afterwards, found by our provider key
    /// (mock) or the saved id (Stripe). Cancelling twice changes nothing.
    pub(crate) async fn cancel_action(
        &self,
        provider_key: &str,
        provider_ref: Option<&str>,
    ) -> Lookup {
        let call = async {
            match (self, provider_ref) {
                (Self::Mock(c), _) => c.cancel_action(provider_key).await,
                (Self::Stripe(c), Some(id)) => c.cancel(id, provider_key).await,
                (Self::Stripe(_), None) => Lookup::NotFound,
            }
        };
        let about = provider_ref.or(Some(provider_key));
        journal::provider_call(op::CANCEL, about, call, said_lookup).await
    }

    /// Cancels the attempt's saved payment object that did not charge (declined) before the
    /// attempt settles uncharged, then returns it as the provider holds it. Cancelling twice
    /// changes nothing. One phase: nothing to cancel, the charge by key is the answer.
    pub(crate) async fn cancel_uncharged(
        &self,
        provider_key: &str,
        provider_ref: Option<&str>,
    ) -> Lookup {
        let call = async {
            match (self, provider_ref) {
                (Self::Mock(c), _) => c.charge_by_key(provider_key).await,
                (Self::Stripe(c), Some(id)) => c.cancel_uncharged(id, provider_key).await,
                (Self::Stripe(_), None) => Lookup::NotFound,
            }
        };
        let about = provider_ref.or(Some(provider_key));
        journal::provider_call(op::CANCEL_UNCHARGED, about, call, said_lookup).await
    }

    /// One page of the payment objects created at `since_ms` (Unix ms) or later, after the
    /// object `after` (the previous page's `next`). `Err`: the provider could not tell.
    pub(crate) async fn list_since(
        &self,
        since_ms: i64,
        after: Option<&str>,
    ) -> Result<Page, String> {
        match self {
            Self::Mock(c) => c.list_since(since_ms, after).await,
            Self::Stripe(c) => c.list_since(since_ms, after).await,
        }
    }

    /// Cancels a listed object nothing will confirm (the sweep's [`ObjectState::Unconfirmed`]
    /// ones), under an idempotency key of its own id; then the object as the provider holds
    /// it. Cancelling twice changes nothing.
    pub(crate) async fn cancel_listed(&self, object: &Listed) -> Lookup {
        match self {
            Self::Mock(c) => c.cancel_charge(&object.id).await,
            Self::Stripe(c) => c.cancel_listed(&object.id).await,
        }
    }

    /// A refund of `amount` of `charge_id` (the provider's id of the payment), carrying the
    /// saved refund key.
    pub(crate) async fn refund(
        &self,
        charge_id: &str,
        refund_key: &str,
        amount: i64,
    ) -> RefundOutcome {
        let call = async {
            match self {
                Self::Mock(c) => c.refund(charge_id, refund_key).await,
                Self::Stripe(c) => c.refund(charge_id, refund_key, amount).await,
            }
        };
        let said = |r: &RefundOutcome| match r {
            RefundOutcome::Created(r) => Said {
                outcome: refund_status(r.status),
                object: Some(r.id.clone()),
                ..Said::default()
            },
            RefundOutcome::NotAllowed(why) => said_why("not_allowed", why),
            RefundOutcome::Unknown(why) => said_why("unknown", why),
        };
        journal::provider_call(op::REFUND, Some(charge_id), call, said).await
    }

    /// Every refund the provider holds for `charge_id`, failed ones too: read before each
    /// refund call (crates/rules/src/refund.rs, `standing`) and for a refund event. `Err`:
    /// the provider could not tell.
    pub(crate) async fn refunds_of(&self, charge_id: &str) -> Result<Vec<ProviderRefund>, String> {
        let call = async {
            match self {
                Self::Mock(c) => c.refunds_of(charge_id).await,
                Self::Stripe(c) => c.refunds_of(charge_id).await,
            }
        };
        let said = |r: &Result<Vec<ProviderRefund>, String>| match r {
            Ok(list) => Said {
                outcome: "listed",
                why: Some(format!("{} refunds", list.len())),
                ..Said::default()
            },
            Err(why) => said_why("unknown", why),
        };
        journal::provider_call(op::REFUNDS_OF, Some(charge_id), call, said).await
    }

    /// Checks a delivery's signature with `secret` (this provider's webhook secret) at
    /// `now_ms` and reads what it is a hint about.
    pub(crate) fn webhook(
        &self,
        secret: &str,
        headers: &axum::http::HeaderMap,
        body: &[u8],
        now_ms: i64,
    ) -> Result<Hint, WebhookError> {
        match self {
            Self::Mock(_) => mock::webhook(secret, headers, body, now_ms),
            Self::Stripe(_) => stripe::webhook(secret, headers, body, now_ms),
        }
    }
}

/// What a charge, a confirm or a lookup's charge proved, for the journal.
fn said_charge(o: &ChargeOutcome) -> Said {
    let charge = |outcome, c: &payonce_protocol::provider::Charge| Said {
        outcome,
        object: Some(c.id.clone()),
        order_id: Some(c.order_id.clone()).filter(|o| !o.is_empty()),
        why: None,
    };
    match o {
        ChargeOutcome::Succeeded(c) => charge("succeeded", c),
        ChargeOutcome::Declined(c) => charge("declined", c),
        ChargeOutcome::ActionRequired(c) => charge("action_required", c),
        ChargeOutcome::Rejected(why) => said_why("rejected", why),
        ChargeOutcome::Unknown(why) => said_why("unknown", why),
        ChargeOutcome::Uncancelled(why) => said_why("uncancelled", why),
        ChargeOutcome::Expired => said_why("expired", ""),
        ChargeOutcome::Withdrawn => said_why("withdrawn", ""),
    }
}

fn said_lookup(l: &Lookup) -> Said {
    match l {
        Lookup::Found(c) => Said {
            outcome: match c.status {
                payonce_protocol::provider::ChargeStatus::Succeeded => "found_succeeded",
                _ => "found",
            },
            object: Some(c.id.clone()),
            order_id: Some(c.order_id.clone()).filter(|o| !o.is_empty()),
            why: Some(format!("{:?}", c.status)),
        },
        Lookup::NotFound => said_why("not_found", ""),
        Lookup::Unconfirmed => said_why("unconfirmed", ""),
        Lookup::Unknown(why) => said_why("unknown", why),
    }
}

fn said_why(outcome: &'static str, why: &str) -> Said {
    Said {
        outcome,
        why: Some(why.to_owned()).filter(|w| !w.is_empty()),
        ..Said::default()
    }
}

fn refund_status(s: RefundStatus) -> &'static str {
    match s {
        RefundStatus::Succeeded => "refund_succeeded",
        RefundStatus::Pending => "refund_pending",
        RefundStatus::Failed => "refund_failed",
    }
}

/// Why the provider's HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API key cannot travel in a header (a control character, say).
    #[error("the provider API key is not a header value")]
    ApiKey,
    /// A fixed header's name is not one (a build error of this crate).
    #[error("{0} is not a header name")]
    Header(&'static str),
    /// The CA bundle did not parse, or the TLS client could not be made.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// The HTTP client of an adapter: `timeout` on every call and connect, `ca` (PEM) trusted
/// beside the system's roots, `api_key` as a sensitive Bearer header, `fixed` (a name and its
/// value) on every request.
fn http_client(
    timeout: Duration,
    ca: Option<&[u8]>,
    api_key: Option<&str>,
    fixed: Option<(&'static str, &'static str)>,
) -> Result<reqwest::Client, ClientError> {
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    let mut http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout);
    let mut headers = HeaderMap::new();
    if let Some(key) = api_key {
        let mut value =
            HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| ClientError::ApiKey)?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    if let Some((name, value)) = fixed {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| ClientError::Header(name))?;
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.is_empty() {
        http = http.default_headers(headers);
    }
    if let Some(pem) = ca {
        let certs = reqwest::Certificate::from_pem_bundle(pem)?;
        http = http.tls_certs_merge(certs);
    }
    Ok(http.build()?)
}
