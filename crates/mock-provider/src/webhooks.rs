//! At-least-once webhook delivery with optional chaos.
//!
//! Events go through one dispatcher task (so that reordering can hold one back), then each
//! delivery runs in its own task: optional random delay, signed POST, retries with jittered
//! exponential backoff on a non-2xx or a connection error, up to [`WebhookRetry`]'s bound.
//! A 2xx marks the event delivered in the store; events still undelivered when the process
//! stops are sent again by the next process that opens the same state file.

use crate::signature::sign;
use crate::store::{now_millis, Store};
use crate::{WebhookChaos, WebhookRetry};
use payonce_protocol::headers::WEBHOOK_SIGNATURE;
use payonce_protocol::provider::WebhookEvent;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a "before the response" delivery may hold up the charge answer.
const BEFORE_RESPONSE_LIMIT: Duration = Duration::from_secs(5);

pub(crate) struct Webhooks {
    ctx: Arc<Ctx>,
    /// Started lazily inside a runtime: `MockProvider::new` may run outside one.
    dispatcher: OnceLock<mpsc::UnboundedSender<WebhookEvent>>,
}

struct Ctx {
    url: String,
    secret: String,
    chaos: WebhookChaos,
    retry: WebhookRetry,
    client: reqwest::Client,
    store: Arc<Store>,
    /// Seeded, so a run's chaos (which events duplicate, how long each waits) repeats.
    /// A std mutex: draws are instant and never cross an await.
    rng: Mutex<StdRng>,
}

impl Webhooks {
    pub(crate) fn new(
        url: String,
        secret: String,
        chaos: WebhookChaos,
        retry: WebhookRetry,
        seed: u64,
        store: Arc<Store>,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(retry.request_timeout)
            .build()?;
        Ok(Self {
            ctx: Arc::new(Ctx {
                url,
                secret,
                chaos,
                retry,
                client,
                store,
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
            }),
            dispatcher: OnceLock::new(),
        })
    }

    /// Starts the dispatcher if we are inside a runtime and it is not running yet; on first
    /// start, queues the events a previous process left undelivered.
    pub(crate) fn start(&self) -> Option<&mpsc::UnboundedSender<WebhookEvent>> {
        if let Some(tx) = self.dispatcher.get() {
            return Some(tx);
        }
        tokio::runtime::Handle::try_current().ok()?;
        let mut fresh = false;
        let tx = self.dispatcher.get_or_init(|| {
            fresh = true;
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(dispatch(self.ctx.clone(), rx));
            tx
        });
        if fresh {
            for event in self.ctx.store.undelivered() {
                let _ = tx.send(event);
            }
        }
        Some(tx)
    }

    /// Queues `event` for delivery (plus a chaos duplicate, maybe).
    pub(crate) fn enqueue(&self, event: WebhookEvent) {
        if let Some(tx) = self.start() {
            // The receiver lives as long as the runtime; a send error means it is shutting
            // down, and the event stays undelivered in the store for the next process.
            let _ = tx.send(event);
        }
    }

    /// Delivers `event` once right now (bounded wait), before the caller answers its own
    /// request; retries and chaos duplicates continue in the background.
    pub(crate) async fn deliver_before_response(&self, event: WebhookEvent) {
        self.start();
        let ctx = self.ctx.clone();
        // Draw before awaiting, so the draws keep the order of the events.
        if ctx.roll_duplicate() {
            let delay = ctx.extra_delay();
            tokio::spawn(deliver(ctx.clone(), event.clone(), 0, delay));
        }
        let body = encode(&event);
        let ok = tokio::time::timeout(BEFORE_RESPONSE_LIMIT, try_once(&ctx, &event, &body))
            .await
            .unwrap_or(false);
        if !ok {
            tokio::spawn(deliver(ctx, event, 1, Duration::ZERO));
        }
    }

    pub(crate) fn before_response(&self) -> bool {
        self.ctx.chaos.deliver_before_response
    }
}

impl Ctx {
    fn roll_duplicate(&self) -> bool {
        let p = self.chaos.duplicate_probability.clamp(0.0, 1.0);
        p > 0.0 && self.rng().gen_bool(p)
    }

    fn extra_delay(&self) -> Duration {
        let max = self.chaos.max_extra_delay;
        if max.is_zero() {
            return Duration::ZERO;
        }
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(self.rng().gen_range(0..=ms))
    }

    /// "Equal jitter": half the exponential step fixed, half random, so retries of many
    /// events do not arrive in lockstep.
    fn backoff(&self, attempt: u32) -> Duration {
        let step = self
            .retry
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.retry.max_backoff);
        let half = step / 2;
        let ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(self.rng().gen_range(0..=ms))
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, StdRng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The dispatcher: with `reorder`, each event is held until the next one arrives (or the
/// reorder window passes), and the later one is sent first.
async fn dispatch(ctx: Arc<Ctx>, mut rx: mpsc::UnboundedReceiver<WebhookEvent>) {
    let mut held: Option<WebhookEvent> = None;
    loop {
        let next = match &held {
            Some(_) => match tokio::time::timeout(ctx.chaos.reorder_window, rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    if let Some(h) = held.take() {
                        launch(&ctx, h);
                    }
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(event) = next else {
            if let Some(h) = held.take() {
                launch(&ctx, h);
            }
            return;
        };
        match held.take() {
            Some(earlier) => {
                // Send the later event's first attempt before the earlier one starts.
                let ctx2 = ctx.clone();
                let later = event;
                tokio::spawn(async move {
                    deliver_first_then_background(&ctx2, later).await;
                    launch(&ctx2, earlier);
                });
            }
            None if ctx.chaos.reorder => held = Some(event),
            None => launch(&ctx, event),
        }
    }
}

/// Starts a delivery task, and a duplicate one if the dice say so. All chaos draws for an
/// event happen here, in the dispatcher's event order, so one seed gives one outcome.
fn launch(ctx: &Arc<Ctx>, event: WebhookEvent) {
    if ctx.roll_duplicate() {
        let delay = ctx.extra_delay();
        tokio::spawn(deliver(ctx.clone(), event.clone(), 0, delay));
    }
    let delay = ctx.extra_delay();
    tokio::spawn(deliver(ctx.clone(), event, 0, delay));
}

async fn deliver_first_then_background(ctx: &Arc<Ctx>, event: WebhookEvent) {
    let body = encode(&event);
    if !try_once(ctx, &event, &body).await {
        tokio::spawn(deliver(ctx.clone(), event, 1, Duration::ZERO));
    }
}

/// Delivers `event` after `delay`, with retries; `done` attempts were already made.
async fn deliver(ctx: Arc<Ctx>, event: WebhookEvent, mut done: u32, delay: Duration) {
    let body = encode(&event);
    tokio::time::sleep(delay).await;
    while done < ctx.retry.max_attempts {
        if done > 0 {
            tokio::time::sleep(ctx.backoff(done)).await;
        }
        if try_once(&ctx, &event, &body).await {
            return;
        }
        done += 1;
    }
    tracing::warn!(event = %event.id, attempts = done, "webhook delivery gave up");
}

/// One signed POST. True on a 2xx (and then the event is marked delivered).
async fn try_once(ctx: &Ctx, event: &WebhookEvent, body: &[u8]) -> bool {
    let signature = sign(&ctx.secret, now_millis() / 1000, body);
    let result = ctx
        .client
        .post(&ctx.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(WEBHOOK_SIGNATURE, signature)
        .body(body.to_vec())
        .send()
        .await;
    match result {
        Ok(resp) if resp.status().is_success() => {
            if let Err(e) = ctx.store.mark_delivered(&event.id) {
                tracing::warn!(event = %event.id, error = %e, "could not record webhook delivery");
            }
            true
        }
        Ok(resp) => {
            tracing::debug!(event = %event.id, status = %resp.status(), "webhook rejected");
            false
        }
        Err(e) => {
            tracing::debug!(event = %event.id, error = %e, "webhook not delivered");
            false
        }
    }
}

/// The event's JSON. Serialized once per delivery so every retry of it is byte-identical.
fn encode(event: &WebhookEvent) -> Vec<u8> {
    // Serializing plain structs with string keys cannot fail.
    serde_json::to_vec(event).unwrap_or_default()
}
