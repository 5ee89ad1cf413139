//! A mock payment service provider (PSP) that behaves like a real one: its own idempotency
//! on `Idempotency-Key`, its own ledger (the ground truth for "charged once"), idempotent
//! refunds, test payment methods that decline, answer late, time out or fail transiently,
//! and signed webhooks delivered at least once, with optional duplicates, delays and
//! reordering.
//!
//! The merchant server embeds it (`MockProvider::serve` on its own listener) or runs it
//! standalone (`payonce-server mock-provider --addr ...`). Wire names come from
//! [`payonce_protocol::provider`].
//!
//! # Layout
//! - `lib.rs`: [`ProviderConfig`], [`WebhookChaos`] (and its command-line spec),
//!   [`WebhookRetry`], the [`MockProvider`] handle and [`ProviderError`]; `tests.rs` unit-tests
//!   this configuration surface.
//! - [`signature`]: [`sign`] and [`verify`] for the `Payonce-Signature` header (no HTTP in
//!   it; the merchant's webhook handler uses the same code).
//! - `store`: the ledger and the provider's idempotency records; the only place where a
//!   provider key is claimed; write-through to an optional JSON state file.
//! - `http`: the axum routes; maps store outcomes to responses and errors to problems.
//! - `webhooks`: the at-least-once delivery tasks and the chaos.
//!
//! # Behaviour by test payment method
//! | method | ledger | answer |
//! |---|---|---|
//! | `pm_card_approve` | succeeded | 201 at once |
//! | `pm_card_decline` | declined | 402 (body: the declined charge) |
//! | `pm_card_slow` | succeeded at once | 201 after `slow_delay` |
//! | `pm_card_timeout` | succeeded at once | 201 after `timeout_delay` (callers time out) |
//! | `pm_card_transient` | nothing on the first request for a key | 503, then 201 |
//! | `pm_card_3ds` | `requires_action` (no webhook yet), then succeeded/declined on completion | 202 with `nextActionUrl` (the action page); after completion a replay answers 200 / 402 |
//! | `pm_card_refund_refused` | succeeded | 201 at once; every refund of it is 409 `REFUND_NOT_ALLOWED` |
//! | `pm_card_refund_pending` | succeeded | 201 at once; a refund of it is made `pending` (no event) until `POST /dev/refunds/{id}/succeed` or `…/fail` |
//!
//! # HTTP API
//! | request | answers |
//! |---|---|
//! | `POST /charges` + `Idempotency-Key` + [`ChargeRequest`](payonce_protocol::provider::ChargeRequest) | 201 / 200 replay / 402 [`Charge`](payonce_protocol::provider::Charge); 503 `STORE_UNAVAILABLE` (transient, `Retry-After: 1`); 422 `KEY_REUSED_WITH_DIFFERENT_DETAILS`; 400/415 problems |
//! | `GET /charges/by-key/{providerKey}` | 200 `Charge`, 404 `PAYMENT_NOT_FOUND` |
//! | `POST /charges/{id}/refunds` + `Idempotency-Key` (no body) | 201 / 200 replay `Refund`; 409 `REFUND_NOT_ALLOWED`; 404; 422 |
//! | `GET /charges/{id}/refunds` | 200 `RefundList`: the charge's refunds, the dashboard's too; 404 |
//! | `POST /dev/charges/{id}/refund` | 201 `Refund`: a dashboard refund (the provider's own key; `charge.refunded` sent); 409, 404 |
//! | `POST /dev/refunds/{id}/succeed`, `POST /dev/refunds/{id}/fail` | 200 `Refund`: a pending refund ended by its bank (`refund.updated` / `refund.failed` sent); one ended already as it is; 404 |
//! | `GET /charges/{id}/action[?returnUrl=]` | 200 HTML: the customer's challenge page, a button per outcome (`#confirm`, `#fail`) posting its form to `complete`; 404 |
//! | `POST /charges/{id}/complete` + [`CompleteRequest`](payonce_protocol::provider::CompleteRequest) (JSON or form) | JSON: 200 `Charge` (the first completion decides and sends the webhook; a repeat has `Idempotent-Replayed: true`); form: 303 to a local `returnUrl`, else a page that closes its popup; 400 (no action required, bad `returnUrl`), 404 |
//! | `GET /ledger[?orderId=]` | 200 `Ledger`, oldest first |
//! | `POST /dev/webhooks/redeliver?orderId=` | 202 `Redelivered`: that order's events sent again |
//! | `POST /dev/reset` | 204: ledger, keys and events forgotten |
//!
//! A repeat with the same key and body answers at once with the charge as it is now (200,
//! or 402 if declined) and `Idempotent-Replayed: true`; only the request that created the
//! charge waits out the slow/timeout delay.
#![deny(missing_docs)]

mod http;
pub use payonce_protocol::signature;
mod store;
mod webhooks;

pub use signature::{sign, verify, SignatureError};

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a provider's state file holds: every charge (as it is now, oldest first) and every
/// refund. A missing file is an empty ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFileContents {
    /// Charges, oldest first.
    pub charges: Vec<payonce_protocol::provider::Charge>,
    /// Refunds, oldest first.
    pub refunds: Vec<payonce_protocol::provider::Refund>,
}

/// Reads a state file without starting a provider: the ledger of a provider that is not
/// running (it crashed with the process that embedded it, say). The file's format (a
/// journal) stays private to this crate.
pub fn read_state_file(path: &std::path::Path) -> Result<StateFileContents, ProviderError> {
    let (charges, refunds) = store::read_file(path)?;
    Ok(StateFileContents { charges, refunds })
}

/// The webhook secret used when none is configured (dev only).
pub const DEFAULT_WEBHOOK_SECRET: &str = "whsec_payonce_dev";

fn is_http_url(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
}

/// Configuration of a [`MockProvider`].
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Where webhook events are POSTed (e.g. `http://127.0.0.1:8080/webhooks/provider`).
    /// `None`: no webhooks.
    pub webhook_url: Option<String>,
    /// HMAC secret for the `Payonce-Signature` header.
    pub webhook_secret: String,
    /// Duplicates, delays, reordering, early delivery.
    pub webhook_chaos: WebhookChaos,
    /// Retry bound and backoff of webhook delivery.
    pub webhook_retry: WebhookRetry,
    /// How late `pm_card_slow` answers (default 4 s).
    pub slow_delay: Duration,
    /// How late `pm_card_timeout` answers (default 30 s: "never in time").
    pub timeout_delay: Duration,
    /// File the ledger is written through to (a journal: one JSON line appended per change,
    /// compacted on start) and loaded from on start, so a restarted process keeps its
    /// charges. `None`: memory only.
    pub state_file: Option<PathBuf>,
    /// Seed of the chaos RNG, so a run's duplicates and delays repeat.
    pub seed: u64,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            webhook_url: None,
            webhook_secret: DEFAULT_WEBHOOK_SECRET.to_owned(),
            webhook_chaos: WebhookChaos::default(),
            webhook_retry: WebhookRetry::default(),
            slow_delay: Duration::from_secs(4),
            timeout_delay: Duration::from_secs(30),
            state_file: None,
            seed: 0x7061_796f_6e63_6521,
        }
    }
}

/// Misbehaviour of webhook delivery, all off by default.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookChaos {
    /// Probability (0..=1) that an event is delivered a second time, independently.
    pub duplicate_probability: f64,
    /// Each delivery first waits a random time in `0..=max_extra_delay`.
    pub max_extra_delay: Duration,
    /// Hold each event back until the next one arrives (at most `reorder_window`) and send
    /// the later one first.
    pub reorder: bool,
    /// How long `reorder` holds an event waiting for a later one.
    pub reorder_window: Duration,
    /// Deliver the webhook before answering the charge/refund call (an "early" webhook:
    /// the merchant hears the outcome before its own provider call returns).
    pub deliver_before_response: bool,
}

impl Default for WebhookChaos {
    fn default() -> Self {
        Self {
            duplicate_probability: 0.0,
            max_extra_delay: Duration::ZERO,
            reorder: false,
            reorder_window: Duration::from_millis(500),
            deliver_before_response: false,
        }
    }
}

impl WebhookChaos {
    /// A noisy but plausible preset for demos: 30 % duplicates, up to 2 s delays,
    /// reordering, early delivery.
    pub fn realistic() -> Self {
        Self {
            duplicate_probability: 0.3,
            max_extra_delay: Duration::from_secs(2),
            reorder: true,
            reorder_window: Duration::from_millis(500),
            deliver_before_response: true,
        }
    }
}

/// Why a chaos spec (see [`WebhookChaos`]'s `FromStr`) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid webhook chaos item {item:?}: expected off, realistic, dup=P (0..=1), delay-ms=N, reorder, reorder-ms=N or early")]
pub struct ChaosSpecError {
    /// The offending item.
    pub item: String,
}

/// Parses a command-line spec: `off`, `realistic`, or a comma-separated list of
/// `dup=0.3`, `delay-ms=2000`, `reorder`, `reorder-ms=500`, `early` (starting from off).
impl std::str::FromStr for WebhookChaos {
    type Err = ChaosSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        match spec.trim() {
            "off" | "" => return Ok(Self::default()),
            "realistic" => return Ok(Self::realistic()),
            _ => {}
        }
        let mut chaos = Self::default();
        for item in spec.split(',').map(str::trim) {
            let bad = || ChaosSpecError {
                item: item.to_owned(),
            };
            let ms = |v: &str| {
                v.parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| bad())
            };
            match item.split_once('=') {
                None if item == "reorder" => chaos.reorder = true,
                None if item == "early" => chaos.deliver_before_response = true,
                Some(("dup", p)) => {
                    chaos.duplicate_probability = p
                        .parse::<f64>()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(bad)?;
                }
                Some(("delay-ms", v)) => chaos.max_extra_delay = ms(v)?,
                Some(("reorder-ms", v)) => chaos.reorder_window = ms(v)?,
                _ => return Err(bad()),
            }
        }
        Ok(chaos)
    }
}

/// Webhook retry policy: exponential backoff with jitter, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRetry {
    /// Attempts in total, first included (default 8).
    pub max_attempts: u32,
    /// Backoff before the second attempt (default 500 ms), doubling after.
    pub initial_backoff: Duration,
    /// Cap on one backoff (default 20 s; 8 attempts span about a minute).
    pub max_backoff: Duration,
    /// Timeout of one delivery request (default 5 s).
    pub request_timeout: Duration,
}

impl Default for WebhookRetry {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a [`MockProvider`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The state file could not be read or written.
    #[error("state file {path}: {source}")]
    StateFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The state file is not a state this provider wrote.
    #[error("state file {path} is corrupt: {source}")]
    StateCorrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// `webhook_url` is not an absolute `http(s)` URL.
    #[error("webhook URL {0:?} is not an absolute http(s) URL")]
    WebhookUrl(String),
    /// The webhook HTTP client could not be built.
    #[error("webhook client: {0}")]
    WebhookClient(#[from] reqwest::Error),
}

/// The provider: a cheap, clonable handle (an `Arc` inside).
#[derive(Clone)]
pub struct MockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProviderConfig,
    store: Arc<store::Store>,
    webhooks: Option<webhooks::Webhooks>,
}

impl MockProvider {
    /// Opens the provider, loading `config.state_file` if it exists. Events a previous
    /// process left undelivered are sent again once the provider runs inside a runtime.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        let store = Arc::new(store::Store::open(config.state_file.clone())?);
        let webhooks = match &config.webhook_url {
            Some(url) if !is_http_url(url) => return Err(ProviderError::WebhookUrl(url.clone())),
            Some(url) => Some(webhooks::Webhooks::new(
                url.clone(),
                config.webhook_secret.clone(),
                config.webhook_chaos.clone(),
                config.webhook_retry.clone(),
                config.seed,
                store.clone(),
            )?),
            None => None,
        };
        let provider = Self {
            inner: Arc::new(Inner {
                config,
                store,
                webhooks,
            }),
        };
        if let Some(w) = &provider.inner.webhooks {
            w.start();
        }
        Ok(provider)
    }

    /// The provider's HTTP API as a router (for tests with `oneshot`, or to nest).
    pub fn router(&self) -> axum::Router {
        if let Some(w) = &self.inner.webhooks {
            w.start();
        }
        http::router(self.clone())
    }

    /// Serves the API on `listener` until the process ends.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// The configuration in use.
    pub fn config(&self) -> &ProviderConfig {
        &self.inner.config
    }
}
