//! Customers: a script per intent drawn from the seed ([`Script::draw`], pure), and the
//! driver that acts it out over HTTP while following the SDK's own core.
//!
//! The pay loop ([`Tab::pay`]) is the SDK's own: the core's sans-IO pay flow
//! (`payonce::core::flow::PayFlow`, the one `src/web/mod.rs` drives in the browser), its
//! effects performed here over HTTP (key plan, save before sending, classification, when the
//! key is dropped, backoff, deadline and retry budget are all the flow's). Its
//! "sessionStorage" is the tab's map, which survives a reload of the page and is copied into a
//! duplicated tab.

use crate::ChaosError;
use payonce::core::attempt::{Attempt, Entry};
use payonce::core::classify::{classify_cancel, CancelOutcome, Final, Reply};
use payonce::core::error::SdkError;
use payonce::core::flow::{Effect, FlowConfig, PayEnd, PayFlow};
use payonce::core::retry::{PendingReason, RetryBudget, RetryPolicy};
use payonce_protocol::provider::methods;
use payonce_protocol::{
    headers, paths, CancelRequest, CancelResponse, CartLine, CheckoutSnapshot, CreateOrderRequest,
    DevFault, DevSessionRequest, DevSessionResponse, ErrorCode, IdempotencyKey, Order, PayResponse,
    Problem, UpdateCartRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the customers' apps configure (the SDK's `requestTimeoutMs` and `deadlineMs`):
/// shorter than the SDK defaults so a run is minutes, not hours; the backoff is the default.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(3_000);
const DEADLINE_MS: u64 = 30_000;
const LONG_WAIT_MS: u64 = 10_000;
/// How often a customer whose pay call came back `pending` presses "check again" before
/// leaving the page (it comes back after the faults, see [`come_back`]).
const CHECKS_AGAIN: u32 = 2;

/// SKUs a cart is drawn from: the shop's seeded catalog (migrations). `poster-limited` has
/// three in stock, so customers compete for it.
const SKUS: &[&str] = &["tee-classic", "mug-enamel", "sticker-pack", "hoodie-zip"];
const SCARCE_SKU: &str = "poster-limited";

/// What one customer sets out to do for one order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Script {
    pub items: Vec<CartLine>,
    pub method: &'static str,
    pub plan: Plan,
    /// Milliseconds into a pay call at which the page reloads (at most two).
    pub reloads: Vec<u64>,
    /// After a decline, pay again with a card that works.
    pub other_card_after_decline: bool,
    /// Per request: ask the server to drop its answer (`Payonce-Dev-Fault: drop-response`).
    pub drop_p: f64,
    /// Per first request of a key: ask the server to crash right after the charge.
    pub crash_p: f64,
    /// The seed of this customer's own randomness (jitter, pauses).
    pub rng_seed: u64,
}

/// The shape of an intent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// Click Pay, wait for the outcome.
    Plain,
    /// The tab is duplicated `after_ms` into the pay call; the copy (same sessionStorage, so
    /// the same key) pays too.
    SecondTab { after_ms: u64 },
    /// Click Cancel `after_ms` into the pay call.
    Cancel { after_ms: u64 },
    /// `after_ms` into the pay call, leave it, change the cart, pay the new cart (the SDK
    /// refuses a new key while the old attempt is open: cancel it first).
    CartChange { after_ms: u64, items: Vec<CartLine> },
    /// Another tab changed the cart just before this one's Pay click: the pay carries an old
    /// version, the server answers ORDER_CHANGED, the page reloads the order and pays again.
    StaleVersion { items: Vec<CartLine> },
}

impl Plan {
    /// Its name in the report.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Plan::Plain => "plain",
            Plan::SecondTab { .. } => "second tab",
            Plan::Cancel { .. } => "cancel",
            Plan::CartChange { .. } => "cart change",
            Plan::StaleVersion { .. } => "stale version",
        }
    }
}

impl Script {
    /// The script of intent `index` of a run with `seed`.
    pub(crate) fn draw(seed: u64, index: usize) -> Script {
        let mut rng =
            StdRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let cart = |rng: &mut StdRng| {
            let mut items: Vec<CartLine> = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                let sku = SKUS[rng.gen_range(0..SKUS.len())];
                if !items.iter().any(|l| l.sku == sku) {
                    items.push(CartLine {
                        sku: sku.to_owned(),
                        quantity: rng.gen_range(1..=3),
                    });
                }
            }
            if rng.gen_bool(0.03) {
                items.push(CartLine {
                    sku: SCARCE_SKU.to_owned(),
                    quantity: 1,
                });
            }
            items
        };
        let items = cart(&mut rng);
        let method = match rng.gen_range(0..100) {
            0..=59 => methods::APPROVE,
            60..=69 => methods::DECLINE,
            70..=79 => methods::SLOW,
            80..=84 => methods::TIMEOUT,
            _ => methods::TRANSIENT_5XX,
        };
        let plan = match rng.gen_range(0..100) {
            0..=59 => Plan::Plain,
            60..=67 => Plan::SecondTab {
                after_ms: rng.gen_range(0..1500),
            },
            68..=79 => Plan::Cancel {
                after_ms: rng.gen_range(0..2500),
            },
            80..=91 => Plan::CartChange {
                after_ms: rng.gen_range(0..2500),
                items: cart(&mut rng),
            },
            _ => Plan::StaleVersion {
                items: cart(&mut rng),
            },
        };
        let reloads = match rng.gen_range(0..100) {
            0..=79 => vec![],
            80..=94 => vec![rng.gen_range(50..3000)],
            _ => vec![rng.gen_range(50..1500), rng.gen_range(50..3000)],
        };
        Script {
            items,
            method,
            plan,
            reloads,
            other_card_after_decline: rng.gen_bool(0.5),
            drop_p: 0.06,
            crash_p: 0.01,
            rng_seed: rng.gen(),
        }
    }
}

/// What a customer was finally shown for an order, per tab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// A receipt (the payment id when the answer carried it).
    Paid { payment_id: Option<String> },
    /// A final "not charged by this attempt": declined, cancelled, out of stock... `key` is
    /// the attempt's key when there was one (the audit checks that attempt never charged).
    NotPaid { why: String, key: Option<String> },
    /// Still open (pending, or an answer that proves nothing): the key is kept.
    Open(String),
}

/// Counts over every customer, for the report.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub pays: u64,
    pub cancels: u64,
    pub no_answer: u64,
    pub timeouts: u64,
    pub drop_asked: u64,
    pub crash_asked: u64,
    pub reloads: u64,
    /// Answers with a status of 500 or more.
    pub server_errors: u64,
}

#[derive(Default)]
struct AtomicCounters {
    pays: AtomicU64,
    cancels: AtomicU64,
    no_answer: AtomicU64,
    timeouts: AtomicU64,
    drop_asked: AtomicU64,
    crash_asked: AtomicU64,
    reloads: AtomicU64,
    server_errors: AtomicU64,
}

/// Shared by every customer.
pub(crate) struct Ctx {
    pub http: reqwest::Client,
    api: String,
    seed: u64,
    policy: RetryPolicy,
    counters: AtomicCounters,
    t0: Instant,
    /// `--provider stripe`: the localstripe payment methods the test methods stand for.
    stripe: Option<Arc<crate::stripe::StripeSide>>,
    /// Answers of 500 or more that are not a 503 with `Retry-After` (the only server error
    /// a client may meet: docs/protocol.md), by route and answer: how many, first and last
    /// seconds into the run.
    bad_server_errors: Mutex<std::collections::BTreeMap<String, (u64, f64, f64)>>,
}

impl Ctx {
    pub(crate) fn new(
        api: String,
        seed: u64,
        stripe: Option<Arc<crate::stripe::StripeSide>>,
    ) -> Result<Ctx, ChaosError> {
        Ok(Ctx {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .build()?,
            api,
            seed,
            policy: RetryPolicy::default(),
            counters: AtomicCounters::default(),
            t0: Instant::now(),
            stripe,
            bad_server_errors: Mutex::new(Default::default()),
        })
    }

    /// The payment method id a checkout sends for the test method `m`: itself against the
    /// mock provider, a localstripe card (and a fault armed at the proxy) against Stripe.
    fn method(&self, m: &str) -> String {
        match &self.stripe {
            Some(stripe) => stripe.method(m),
            None => m.to_owned(),
        }
    }

    pub(crate) fn counters(&self) -> Counters {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            pays: g(&c.pays),
            cancels: g(&c.cancels),
            no_answer: g(&c.no_answer),
            timeouts: g(&c.timeouts),
            drop_asked: g(&c.drop_asked),
            crash_asked: g(&c.crash_asked),
            reloads: g(&c.reloads),
            server_errors: g(&c.server_errors),
        }
    }

    /// The answers of 500 or more that were not a 503 with `Retry-After`, a line per route
    /// and answer.
    pub(crate) fn bad_server_errors(&self) -> Vec<String> {
        let Ok(m) = self.bad_server_errors.lock() else {
            return Vec::new();
        };
        m.iter()
            .map(|(what, (n, first, last))| {
                format!("{n} × {what} (first at {first:.1} s, last at {last:.1} s)")
            })
            .collect()
    }

    fn now_ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }

    fn bump(&self, c: fn(&AtomicCounters) -> &AtomicU64) {
        c(&self.counters).fetch_add(1, Ordering::Relaxed);
    }

    /// One request; the answer decoded as the SDK's web layer does (2xx body as `T`,
    /// anything else as a problem; no answer when the connection failed or timed out).
    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Reply<T> {
        let res = match req.timeout(REQUEST_TIMEOUT).send().await {
            Ok(r) => r,
            Err(e) => return self.no_answer(&e),
        };
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(headers::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // The route: ids (segments with a digit) left out, so answers group by route.
        let route = res
            .url()
            .path()
            .split('/')
            .map(|seg| match seg.bytes().any(|b| b.is_ascii_digit()) {
                true => "{id}",
                false => seg,
            })
            .collect::<Vec<_>>()
            .join("/");
        let body = match res.bytes().await {
            Ok(b) => b,
            Err(e) => return self.no_answer(&e),
        };
        let (ok, problem) = if (200..300).contains(&status) {
            (serde_json::from_slice(&body).ok(), None)
        } else {
            (None, serde_json::from_slice::<Problem>(&body).ok())
        };
        if status >= 500 {
            self.bump(|c| &c.server_errors);
            if status != 503 || retry_after.is_none() {
                let code = problem
                    .as_ref()
                    .map_or("(no problem body)", |p| p.code.as_str());
                let what = format!("{route}: {status} {code}, Retry-After {retry_after:?}");
                let t = self.now_ms() / 1000.0;
                if let Ok(mut m) = self.bad_server_errors.lock() {
                    let e = m.entry(what).or_insert((0, t, t));
                    e.0 += 1;
                    e.2 = t;
                }
            }
        }
        Reply::Http {
            status,
            retry_after,
            ok,
            problem,
        }
    }

    fn no_answer<T>(&self, e: &reqwest::Error) -> Reply<T> {
        self.bump(|c| &c.no_answer);
        if e.is_timeout() {
            self.bump(|c| &c.timeouts);
        }
        Reply::NoAnswer {
            timed_out: e.is_timeout(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api)
    }
}

/// A short description of an answer for the history.
fn describe<T>(r: &Reply<T>) -> String {
    match r {
        Reply::NoAnswer { timed_out: true } => "no answer (our timeout)".into(),
        Reply::NoAnswer { timed_out: false } => "no answer".into(),
        Reply::Http {
            status, problem, ..
        } => match problem {
            Some(p) => format!("{status} {}", p.code.as_str()),
            None => status.to_string(),
        },
    }
}

/// An order's history as this customer lived it, shared by its tabs.
#[derive(Clone, Default)]
pub(crate) struct History(Arc<Mutex<Vec<String>>>);

impl History {
    fn push(&self, ctx: &Ctx, line: String) {
        let t = ctx.now_ms() / 1000.0;
        if let Ok(mut h) = self.0.lock() {
            h.push(format!("t={t:8.3}s {line}"));
        }
    }
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

/// The result of one pay call (the SDK's `pay()`).
#[derive(Debug)]
enum Call {
    Final(Final),
    Rejected {
        status: u16,
        code: Option<ErrorCode>,
    },
    Pending(PendingReason),
    /// The SDK refuses to pay other details while an attempt is open.
    Conflict,
}

/// A tab's sessionStorage: order id → stored attempt.
#[derive(Clone, Default)]
pub(crate) struct Storage(Arc<Mutex<HashMap<String, Attempt>>>);

impl Storage {
    fn map(&self) -> HashMap<String, Attempt> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
    fn get(&self, order_id: &str) -> Option<Attempt> {
        self.0.lock().ok()?.get(order_id).cloned()
    }
    fn put(&self, order_id: &str, a: Attempt) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(order_id.to_owned(), a);
        }
    }
    fn remove(&self, order_id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(order_id);
        }
    }
}

/// One browser tab: its sessionStorage (order id → stored attempt), its retry budget (one
/// per client), its randomness.
#[derive(Clone)]
pub(crate) struct Tab {
    name: &'static str,
    token: String,
    /// sessionStorage: shared only so a duplicate can copy it while a call runs.
    storage: Storage,
    budget: RetryBudget,
    rng: StdRng,
    hist: History,
    /// The key of the last pay call (what a final "not charged" is about).
    last_key: Option<String>,
}

impl Tab {
    fn new(
        name: &'static str,
        token: String,
        policy: &RetryPolicy,
        seed: u64,
        hist: History,
    ) -> Tab {
        Tab {
            name,
            token,
            storage: Storage::default(),
            budget: RetryBudget::new(policy.budget),
            rng: StdRng::seed_from_u64(seed),
            hist,
            last_key: None,
        }
    }

    /// A duplicated tab: a copy of the sessionStorage, its own budget and randomness.
    fn duplicate(&self, name: &'static str, policy: &RetryPolicy) -> Tab {
        let mut t = Tab::new(
            name,
            self.token.clone(),
            policy,
            self.rng.clone().gen(),
            self.hist.clone(),
        );
        t.copy_storage_from(&self.storage);
        t
    }

    fn copy_storage_from(&mut self, source: &Storage) {
        self.storage = Storage(Arc::new(Mutex::new(source.map())));
    }

    fn log(&self, ctx: &Ctx, line: String) {
        self.hist.push(ctx, format!("{} {line}", self.name));
    }

    /// The SDK's pay call, minus the browser: the core's pay flow, its effects performed on
    /// this tab's storage and over HTTP.
    async fn pay(&mut self, ctx: &Ctx, snap: &CheckoutSnapshot, script: &Script) -> Call {
        let entry = match self.storage.get(&snap.order_id) {
            Some(a) => Entry::Valid(a),
            None => Entry::Missing,
        };
        let config = FlowConfig {
            policy: ctx.policy,
            deadline_ms: DEADLINE_MS,
            long_wait_ms: LONG_WAIT_MS,
        };
        let mint = || IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).ok();
        let Ok(mut flow) = PayFlow::start(&entry, snap.clone(), config, ctx.now_ms(), mint) else {
            return Call::Conflict;
        };
        self.last_key = Some(flow.attempt().key.as_str().to_owned());
        let url = ctx.url(&paths::pay(&snap.order_id));
        let body = snap.pay_request();
        loop {
            let Some(effect) = flow.poll(ctx.now_ms(), true) else {
                return Call::Pending(PendingReason::Deadline);
            };
            match effect {
                Effect::Save { attempt, new } => {
                    if new {
                        self.log(
                            ctx,
                            format!(
                                "mint key {} for v{} {}",
                                short(attempt.key.as_str()),
                                snap.order_version,
                                snap.payment_method_id
                            ),
                        );
                    }
                    self.storage.put(&snap.order_id, attempt);
                }
                Effect::Remove(_) => self.storage.remove(&snap.order_id),
                Effect::Send { .. } => {
                    let key = flow.attempt().key.clone();
                    let mut req = ctx
                        .http
                        .post(&url)
                        .bearer_auth(&self.token)
                        .header(headers::IDEMPOTENCY_KEY, key.as_str())
                        .json(&body);
                    let mut fault = "";
                    if flow.attempt().sends == 1 && self.rng.gen_bool(script.crash_p) {
                        req = req.header(headers::DEV_FAULT, DevFault::CrashAfterCharge.as_str());
                        ctx.bump(|c| &c.crash_asked);
                        fault = " [asks crash-after-charge]";
                    } else if self.rng.gen_bool(script.drop_p) {
                        req = req.header(headers::DEV_FAULT, DevFault::DropResponse.as_str());
                        ctx.bump(|c| &c.drop_asked);
                        fault = " [asks drop-response]";
                    }
                    ctx.bump(|c| &c.pays);
                    let reply: Reply<PayResponse> = ctx.send(req).await;
                    self.log(
                        ctx,
                        format!(
                            "pay key {} send #{}{fault} -> {}",
                            short(key.as_str()),
                            flow.attempt().sends,
                            describe(&reply)
                        ),
                    );
                    let rng = &mut self.rng;
                    flow.on_reply(&reply, ctx.now_ms(), &mut self.budget, &mut || {
                        rng.gen::<f64>()
                    });
                }
                Effect::Wait { ms, .. } => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    flow.on_waited();
                }
                // The customers' machines never go offline: only the server's faults apply.
                Effect::WaitOnline { .. } => flow.on_network(true),
                Effect::Done(PayEnd::Final(f)) => return Call::Final(f),
                Effect::Done(PayEnd::Failed(e)) => {
                    return match e {
                        SdkError::ServerRejected { status, code } => {
                            Call::Rejected { status, code }
                        }
                        SdkError::KeyReused => Call::Rejected {
                            status: ErrorCode::KeyReusedWithDifferentDetails.http_status(),
                            code: Some(ErrorCode::KeyReusedWithDifferentDetails),
                        },
                        // An answer that does not fit the protocol keeps the key: still open.
                        SdkError::ProtocolMismatch { .. } => Call::Pending(PendingReason::Attempts),
                        _ => Call::Conflict,
                    };
                }
                Effect::Done(PayEnd::Pending(reason)) => return Call::Pending(reason),
                // The SDK tombstones the refused key with a cancel and resolves `busy`; the
                // page then reads the order again: `after_already_active` does both.
                Effect::Done(PayEnd::Busy) => {
                    return Call::Rejected {
                        status: ErrorCode::PaymentAlreadyActive.http_status(),
                        code: Some(ErrorCode::PaymentAlreadyActive),
                    }
                }
                // The shop's cards never ask for 3-D Secure; if one did, the attempt stays open.
                Effect::Done(PayEnd::ActionRequired) => {
                    return Call::Pending(PendingReason::Attempts)
                }
                Effect::Status(_) | Effect::Remind { .. } | Effect::Warn(_) => {}
            }
        }
    }

    /// Pays `snap` to a view: reloads the page at the script's moments, presses "check
    /// again" after a `pending` a few times.
    async fn drive(
        &mut self,
        ctx: &Ctx,
        snap: &CheckoutSnapshot,
        script: &Script,
        reloads: &mut Vec<u64>,
    ) -> View {
        let mut checks = 0;
        loop {
            let call = if reloads.is_empty() {
                self.pay(ctx, snap, script).await
            } else {
                let at = reloads.remove(0);
                match tokio::time::timeout(Duration::from_millis(at), self.pay(ctx, snap, script))
                    .await
                {
                    Ok(c) => c,
                    Err(_) => {
                        ctx.bump(|c| &c.reloads);
                        self.log(
                            ctx,
                            "page reloaded (the request in flight is abandoned)".into(),
                        );
                        let pause = self.rng.gen_range(100..800);
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        continue;
                    }
                }
            };
            match call {
                Call::Pending(reason) if checks < CHECKS_AGAIN => {
                    checks += 1;
                    self.log(ctx, format!("pending ({reason:?}); checks again later"));
                    let pause = self.rng.gen_range(500..3000);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Call::Rejected {
                    code: Some(ErrorCode::PaymentAlreadyActive | ErrorCode::OrderAlreadyPaid),
                    ..
                } => {
                    if let Some(view) = self.after_already_active(ctx, &snap.order_id).await {
                        self.log(ctx, format!("shows {view:?}"));
                        return view;
                    }
                    // The other attempt ended without a charge: this tab may pay (a new key).
                }
                Call::Conflict => {
                    // The SDK refuses new details while an older attempt of the order is
                    // open (e.g. a key kept after OUT_OF_STOCK): the page cancels it first,
                    // as the demo's "Change cart (cancel this attempt)" does.
                    self.log(
                        ctx,
                        "conflict with the stored attempt: cancels it first".into(),
                    );
                    match self.cancel(ctx, &snap.order_id).await {
                        Some(v @ View::Paid { .. }) => return v,
                        Some(_) => {}
                        None => return View::Open("the older attempt is still processing".into()),
                    }
                }
                call => {
                    let view = self.view_of(ctx, call);
                    self.log(ctx, format!("shows {view:?}"));
                    return view;
                }
            }
        }
    }

    /// What the demo page does when its key is refused because the order is paid or being
    /// paid elsewhere (`www/src/main.js`, `showError`): tombstone this tab's refused key with
    /// cancel (a request with it may still be travelling), then reload the order until it is
    /// paid (a receipt) or free again (`None`: pay again).
    async fn after_already_active(&mut self, ctx: &Ctx, order_id: &str) -> Option<View> {
        match self.cancel(ctx, order_id).await {
            Some(v @ View::Paid { .. }) => return Some(v),
            Some(_) => {}
            None => return Some(View::Open("refused key still processing".into())),
        }
        for _ in 0..20 {
            match fetch_order(ctx, &self.token, order_id, &self.hist).await {
                Ok(o) if o.payment.is_some() => {
                    return Some(View::Paid {
                        payment_id: o.payment.map(|p| p.id),
                    })
                }
                Ok(o) if !o.payment_in_progress => return None,
                Ok(_) => {}
                Err(e) => return Some(View::Open(e)),
            }
            let pause = self.rng.gen_range(500..1500);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        Some(View::Open("the order stayed in payment elsewhere".into()))
    }

    fn view_of(&self, _ctx: &Ctx, call: Call) -> View {
        let not_paid = |why: &str| View::NotPaid {
            why: why.to_owned(),
            key: self.last_key.clone(),
        };
        match call {
            Call::Final(Final::Paid { payment, .. }) => View::Paid {
                payment_id: Some(payment.id),
            },
            Call::Final(Final::Declined { code }) => not_paid(code.as_str()),
            Call::Final(Final::Cancelled) => not_paid("cancelled"),
            Call::Final(Final::Expired) => not_paid(ErrorCode::ActionExpired.as_str()),
            Call::Final(Final::OrderChanged { .. }) => not_paid(ErrorCode::OrderChanged.as_str()),
            // Refusals that say the key may still be live keep it: open, not final.
            Call::Rejected {
                code:
                    Some(
                        c @ (ErrorCode::PaymentAlreadyActive
                        | ErrorCode::KeyReusedWithDifferentDetails),
                    ),
                ..
            } => View::Open(c.as_str().to_owned()),
            Call::Rejected { status, code } => not_paid(&format!(
                "refused {status} {}",
                code.map_or("(no code)", |c| c.as_str())
            )),
            Call::Pending(reason) => View::Open(format!("pending ({reason:?})")),
            Call::Conflict => View::Open("conflict with an open attempt".into()),
        }
    }

    /// The SDK's `cancel(orderId)`: cancels the stored key. `Some(view)` when the attempt is
    /// over (cancelled, declined, paid), `None` while it may still charge.
    async fn cancel(&mut self, ctx: &Ctx, order_id: &str) -> Option<View> {
        let Some(stored) = self.storage.get(order_id) else {
            // The last call ended with a final answer, which removed the key.
            self.log(ctx, "cancel: no key stored".into());
            return Some(View::NotPaid {
                why: "nothing to cancel".into(),
                key: None,
            });
        };
        let key = stored.key;
        let not_paid = |why: &str| {
            Some(View::NotPaid {
                why: why.to_owned(),
                key: Some(key.as_str().to_owned()),
            })
        };
        let url = ctx.url(&paths::cancel(order_id));
        for n in 0..6u32 {
            ctx.bump(|c| &c.cancels);
            let req = ctx
                .http
                .post(&url)
                .bearer_auth(&self.token)
                .json(&CancelRequest { key: key.clone() });
            let reply: Reply<CancelResponse> = ctx.send(req).await;
            let outcome = classify_cancel(&reply);
            self.log(
                ctx,
                format!(
                    "cancel key {} -> {} ({outcome:?})",
                    short(key.as_str()),
                    describe(&reply)
                ),
            );
            if outcome.removes_key() {
                self.storage.remove(order_id);
            }
            match outcome {
                CancelOutcome::Cancelled => return not_paid("cancelled"),
                CancelOutcome::Declined => return not_paid(ErrorCode::PaymentDeclined.as_str()),
                CancelOutcome::Failed => return not_paid(ErrorCode::PaymentFailed.as_str()),
                CancelOutcome::Expired => return not_paid(ErrorCode::ActionExpired.as_str()),
                CancelOutcome::Paid { payment } => {
                    return Some(View::Paid {
                        payment_id: payment.map(|p| p.id),
                    })
                }
                CancelOutcome::None => return not_paid("nothing to cancel"),
                CancelOutcome::NotFound { code } => return not_paid(code.as_str()),
                CancelOutcome::Processing | CancelOutcome::Unknown => {
                    let rng = &mut self.rng;
                    let ms = ctx.policy.backoff_ms(n, &mut || rng.gen::<f64>());
                    tokio::time::sleep(Duration::from_millis(ms.max(300))).await;
                }
            }
        }
        None
    }
}

fn short(key: &str) -> &str {
    &key[..key.len().min(8)]
}

/// One intent after its customer is done (or has left the page with an open outcome).
pub(crate) struct Intent {
    pub index: usize,
    pub user: String,
    pub order_id: Option<String>,
    pub script: Script,
    /// The final view of each tab that took part (the first is the main tab).
    pub views: Vec<View>,
    pub history: History,
    /// For each open view: its tab and the snapshot it was paying.
    open: Vec<(usize, Tab, CheckoutSnapshot)>,
}

impl Intent {
    pub(crate) fn is_open(&self) -> bool {
        !self.open.is_empty()
    }
}

/// Retries `f` (a setup request: session, order) until it answers, up to 60 s.
async fn until_ok<T: DeserializeOwned>(
    ctx: &Ctx,
    what: &str,
    hist: &History,
    mut f: impl FnMut() -> reqwest::RequestBuilder,
) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        match ctx.send::<T>(f()).await {
            Reply::Http { ok: Some(v), .. } => return Ok(v),
            r => last = describe(&r),
        }
        hist.push(ctx, format!("{what} -> {last}; again"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(format!("{what}: no success in 60 s (last: {last})"))
}

async fn fetch_order(
    ctx: &Ctx,
    token: &str,
    order_id: &str,
    hist: &History,
) -> Result<Order, String> {
    let url = ctx.url(&paths::order(order_id));
    until_ok(ctx, "get order", hist, || {
        ctx.http.get(&url).bearer_auth(token)
    })
    .await
}

/// Changes the cart; the new order. A cart change refused because the order is paid or a
/// payment runs is an answer too (`Err` with the code).
async fn change_cart(
    ctx: &Ctx,
    tab: &Tab,
    order_id: &str,
    items: &[CartLine],
) -> Result<Order, String> {
    let url = ctx.url(&paths::cart(order_id));
    let body = UpdateCartRequest {
        items: Some(items.to_vec()),
        coupon: None,
        address: None,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply: Reply<Order> = ctx
            .send(ctx.http.patch(&url).bearer_auth(&tab.token).json(&body))
            .await;
        tab.log(ctx, format!("change cart -> {}", describe(&reply)));
        match reply {
            Reply::Http { ok: Some(o), .. } => return Ok(o),
            Reply::Http {
                status,
                problem: Some(p),
                ..
            } if status < 500 && p.code != ErrorCode::PaymentInProgress => {
                return Err(p.code.as_str().to_owned())
            }
            _ if Instant::now() > deadline => return Err("no answer".into()),
            _ => tokio::time::sleep(Duration::from_millis(400)).await,
        }
    }
}

/// Acts out intent `index`.
pub(crate) async fn run_intent(ctx: &Ctx, worker: usize, index: usize) -> Intent {
    let script = Script::draw(ctx.seed, index);
    let hist = History::default();
    let user = format!("chaos-{index}");
    let mut intent = Intent {
        index,
        user: user.clone(),
        order_id: None,
        script: script.clone(),
        views: Vec::new(),
        history: hist.clone(),
        open: Vec::new(),
    };
    hist.push(
        ctx,
        format!("customer {user} (worker {worker}) script {script:?}"),
    );
    let session: Result<DevSessionResponse, _> = until_ok(ctx, "dev session", &hist, || {
        ctx.http
            .post(ctx.url(paths::DEV_SESSIONS))
            .json(&DevSessionRequest {
                user_id: user.clone(),
            })
    })
    .await;
    let token = match session {
        Ok(s) => s.token,
        Err(e) => {
            intent.views.push(View::Open(e));
            return intent;
        }
    };
    // A mail address, so each paid order's receipt goes to the run's SMTP sink.
    let create = CreateOrderRequest {
        items: script.items.clone(),
        coupon: None,
        address: Some(format!("{user}@chaos.payonce.test")),
    };
    let order: Result<Order, _> = until_ok(ctx, "create order", &hist, || {
        ctx.http
            .post(ctx.url(paths::ORDERS))
            .bearer_auth(&token)
            .json(&create)
    })
    .await;
    let order = match order {
        Ok(o) => o,
        Err(e) => {
            intent.views.push(View::Open(e));
            return intent;
        }
    };
    hist.push(
        ctx,
        format!(
            "order {} v{} amount {}",
            order.id, order.version, order.amount
        ),
    );
    intent.order_id = Some(order.id.clone());
    let snap = CheckoutSnapshot {
        order_id: order.id.clone(),
        order_version: order.version,
        payment_method_id: ctx.method(script.method),
        extras: Default::default(),
    };
    let mut tab = Tab::new("tab1", token, &ctx.policy, script.rng_seed, hist.clone());
    let mut reloads = script.reloads.clone();

    let (view, snap) = match &script.plan {
        Plan::Plain => (tab.drive(ctx, &snap, &script, &mut reloads).await, snap),
        Plan::SecondTab { after_ms } => {
            // The duplicate copies sessionStorage as it is `after_ms` into the call (the key
            // was saved before the first request left).
            let source = tab.storage.clone();
            let mut dup = tab.duplicate("tab2", &ctx.policy);
            let second = async {
                tokio::time::sleep(Duration::from_millis(*after_ms)).await;
                dup.copy_storage_from(&source);
                dup.log(ctx, "tab duplicated".into());
                let v = dup.drive(ctx, &snap, &script, &mut Vec::new()).await;
                v
            };
            let (v1, v2) = tokio::join!(tab.drive(ctx, &snap, &script, &mut reloads), second);
            if let View::Open(_) = v2 {
                intent.open.push((1, dup, snap.clone()));
            }
            // Slot 0 (the main tab) is filled below.
            intent.views.push(View::Open(String::new()));
            intent.views.push(v2);
            (v1, snap)
        }
        Plan::Cancel { after_ms } => {
            let raced = tokio::time::timeout(
                Duration::from_millis(*after_ms),
                tab.drive(ctx, &snap, &script, &mut reloads),
            )
            .await;
            match raced {
                Ok(v) => (v, snap),
                Err(_) => {
                    tab.log(ctx, "clicks Cancel".into());
                    match tab.cancel(ctx, &snap.order_id).await {
                        Some(v) => (v, snap),
                        // Still processing: the page waits for the outcome.
                        None => (tab.drive(ctx, &snap, &script, &mut reloads).await, snap),
                    }
                }
            }
        }
        Plan::CartChange { after_ms, items } => {
            let raced = tokio::time::timeout(
                Duration::from_millis(*after_ms),
                tab.drive(ctx, &snap, &script, &mut reloads),
            )
            .await;
            let before = match raced {
                Ok(v) => Some(v),
                Err(_) => {
                    tab.log(ctx, "leaves the pay call to change the cart".into());
                    match tab.cancel(ctx, &snap.order_id).await {
                        Some(v) => Some(v),
                        None => Some(tab.drive(ctx, &snap, &script, &mut reloads).await),
                    }
                }
            };
            match before {
                Some(v @ (View::Paid { .. } | View::Open(_))) => (v, snap),
                _ => match change_cart(ctx, &tab, &snap.order_id, items).await {
                    Ok(o) => {
                        let snap = CheckoutSnapshot {
                            order_version: o.version,
                            ..snap
                        };
                        (tab.drive(ctx, &snap, &script, &mut reloads).await, snap)
                    }
                    Err(code) => (
                        View::NotPaid {
                            why: format!("cart change refused: {code}"),
                            key: None,
                        },
                        snap,
                    ),
                },
            }
        }
        Plan::StaleVersion { items } => {
            let _ = change_cart(ctx, &tab, &snap.order_id, items).await;
            let v = tab.drive(ctx, &snap, &script, &mut reloads).await;
            if matches!(&v, View::NotPaid { why, .. } if why == ErrorCode::OrderChanged.as_str()) {
                match fetch_order(ctx, &tab.token, &snap.order_id, &hist).await {
                    Ok(o) => {
                        let snap = CheckoutSnapshot {
                            order_version: o.version,
                            ..snap
                        };
                        (tab.drive(ctx, &snap, &script, &mut reloads).await, snap)
                    }
                    Err(e) => (View::Open(e), snap),
                }
            } else {
                (v, snap)
            }
        }
    };
    // Declined: another card, a new key (the declined attempt is over).
    let (view, snap) = match view {
        View::NotPaid { ref why, .. }
            if why == ErrorCode::PaymentDeclined.as_str() && script.other_card_after_decline =>
        {
            let snap = CheckoutSnapshot {
                payment_method_id: ctx.method(methods::APPROVE),
                ..snap
            };
            tab.log(ctx, "tries another card".into());
            (tab.drive(ctx, &snap, &script, &mut Vec::new()).await, snap)
        }
        v => (v, snap),
    };
    if let View::Open(_) = view {
        intent.open.push((0, tab, snap));
    }
    if intent.views.is_empty() {
        intent.views.push(view);
    } else {
        intent.views[0] = view;
    }
    intent
}

/// After the faults: a customer with an open outcome comes back to the page, which resumes
/// the stored key (the SDK's resume after a reload) until the outcome is final.
pub(crate) async fn come_back(ctx: &Ctx, mut intent: Intent, deadline: Instant) -> Intent {
    let open = std::mem::take(&mut intent.open);
    for (slot, mut tab, snap) in open {
        tab.log(ctx, "comes back after the faults".into());
        let mut view = intent.views[slot].clone();
        while matches!(view, View::Open(_)) && Instant::now() < deadline {
            view = tab.drive(ctx, &snap, &intent.script, &mut Vec::new()).await;
            if matches!(view, View::Open(_)) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        tab.log(ctx, format!("finally shows {view:?}"));
        intent.views[slot] = view;
    }
    intent
}

#[cfg(test)]
impl Intent {
    /// An intent as the audit sees it (tests only).
    pub(crate) fn for_audit(order: &str, script: Script, views: Vec<View>) -> Intent {
        Intent {
            index: 0,
            user: format!("user-of-{order}"),
            order_id: Some(order.to_owned()),
            script,
            views,
            history: History::default(),
            open: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_every_script_and_the_mix_covers_every_behaviour() {
        let scripts: Vec<Script> = (0..2000).map(|i| Script::draw(7, i)).collect();
        assert_eq!(
            scripts,
            (0..2000).map(|i| Script::draw(7, i)).collect::<Vec<_>>()
        );
        assert_ne!(
            scripts[..50],
            (0..50).map(|i| Script::draw(8, i)).collect::<Vec<_>>()[..]
        );
        let has = |p: &dyn Fn(&Script) -> bool| scripts.iter().filter(|s| p(s)).count();
        assert!(has(&|s| s.plan == Plan::Plain) > 1000);
        assert!(has(&|s| matches!(s.plan, Plan::SecondTab { .. })) > 50);
        assert!(has(&|s| matches!(s.plan, Plan::Cancel { .. })) > 100);
        assert!(has(&|s| matches!(s.plan, Plan::CartChange { .. })) > 100);
        assert!(has(&|s| matches!(s.plan, Plan::StaleVersion { .. })) > 50);
        assert!(has(&|s| !s.reloads.is_empty()) > 200);
        assert!(has(&|s| s.items.iter().any(|l| l.sku == SCARCE_SKU)) > 20);
        for m in methods::UNATTENDED {
            assert!(has(&|s| s.method == m) > 50, "method {m} is too rare");
        }
        // Every cart is sellable: known SKUs, no duplicates, quantities of at least one.
        for s in &scripts {
            assert!(!s.items.is_empty());
            let mut skus: Vec<&str> = s.items.iter().map(|l| l.sku.as_str()).collect();
            skus.sort_unstable();
            skus.dedup();
            assert_eq!(skus.len(), s.items.len());
            assert!(s.items.iter().all(|l| l.quantity >= 1));
        }
    }
}
