//! The JavaScript API: `PayonceClient` and `PayonceError`. This layer only does I/O; every
//! decision is made by [`crate::core`].
//!
//! # Layout
//! - `mod.rs`: the facade, option parsing, and the driver that performs the core's pay flow
//!   ([`crate::core::flow`]) effect by effect.
//! - [`store`]: sessionStorage / memory entries.
//! - [`io`]: fetch with timeout, abortable waits, `online`, Web Locks, all as JS promises.
//! - [`tabs`]: BroadcastChannel receipts and duplicate-tab detection.
//! - [`value`]: JS values in and out (serde-wasm-bindgen reads checkout snapshots; the rest
//!   is read and built member by member).

mod error;
mod io;
mod store;
mod tabs;
mod value;

use crate::core::attempt::{self, Entry};
use crate::core::classify::{classify_cancel, classify_pay_for, CancelOutcome, Final, Reply};
use crate::core::error::{SdkError, Warning};
use crate::core::flow::{Effect, FlowConfig, PayEnd, PayFlow, PayStatus};
use crate::core::receipt::{self, Claim, Receipt};
use crate::core::retry::{
    BudgetConfig, PendingReason, RetryBudget, RetryPolicy, Timings, DEFAULT_DEADLINE_MS,
    DEFAULT_LONG_WAIT_MS, DEFAULT_REQUEST_TIMEOUT_MS,
};
pub use error::PayonceError;
use io::{Abort, Call};
use js_sys::{Function, Promise, Reflect};
use payonce_protocol::body::{paths, DevFault};
use payonce_protocol::{headers, CheckoutSnapshot, IdempotencyKey};
use std::cell::RefCell;
use std::rc::Rc;
use store::Store;
use value::Kind;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** What a key pays for: a change of any field is a new intention (a new key). */
export interface Checkout {
  orderId: string;
  /** The server's order version the customer saw. */
  orderVersion: number;
  paymentMethodId: string;
  /**
   * Extra intention fields (default none), e.g. `{ shippingOptionId: "ship_express", couponCode: "SAVE10" }`:
   * sent as the pay body's `extras`, stored with the attempt, and part of the match (other
   * extras while an attempt is open reject with SNAPSHOT_CONFLICT). String values only.
   */
  extras?: Record<string, string>;
}
export interface Payment {
  id: string;
  orderId: string;
  /** Minor units (cents). */
  amount: number;
  currency: string;
  paymentMethodId: string;
  chargeId: string;
  status: "succeeded" | "refunded";
}
/**
 * The result of `pay`. `pending` and `actionRequired` keep the key (the server may still be
 * charging, or waits for the customer); every other outcome is final and removes it (`busy`
 * through a cancel that tombstones it; only a cancel without an answer keeps it).
 */
export type PayOutcome =
  /**
   * Charged once. `byThisAttempt` is true only for the call whose request charged: false when
   * another key paid the order (the server's `ORDER_ALREADY_PAID`: another device, or an
   * attempt this tab never held), or when this call only confirmed another call's payment (a
   * receipt from another tab, or another tab's attempt it adopted, answered as a replay). Of
   * two tabs paying one order, one says true. Show the receipt either way; count the purchase
   * on true.
   */
  | { kind: "paid"; payment: Payment; byThisAttempt: boolean }
  /**
   * The customer must act first (e.g. 3-D Secure). `next` is the backend's payload, passed on
   * untouched: `isNextAction(next)` narrows it to the companion server's shapes
   * (`NextAction`: `{ type: "redirect", url }` or `{ type: "stripe", clientSecret }` for
   * `stripe.confirmCardPayment`). After the action, `pay` with the same checkout (or
   * `resume(orderId)`) sends the same key and finishes the attempt.
   */
  | { kind: "actionRequired"; next: unknown }
  | { kind: "declined"; code: "PAYMENT_DECLINED" | "PAYMENT_FAILED" }
  | { kind: "orderChanged"; currentVersion?: number }
  | { kind: "cancelled" }
  /**
   * The customer did not complete the action (3-D Secure) before the server's deadline (the
   * server's `ACTION_EXPIRED`): the provider cancelled the payment, nothing was charged and
   * the order is free. Say so; the next `pay` makes a new key.
   */
  | { kind: "expired" }
  | { kind: "pending"; reason: "deadline" | "attempts" | "budget" }
  /**
   * Another attempt for the order is running (another device: the server's
   * `PAYMENT_ALREADY_ACTIVE`). This call's key was refused and tombstoned with a cancel, so it
   * can never charge; nothing of it is kept. Show "being paid elsewhere" and read the order
   * again later (a later `pay` makes a new key).
   */
  | { kind: "busy" };
/** `next` of an `actionRequired` outcome from the companion server's mock provider: open `url` (the 3-D Secure challenge), then pay again. */
export interface RedirectNext {
  type: "redirect";
  /** The provider's page, absolute. */
  url: string;
}
/** `next` with the companion server's `--provider stripe`: hand `clientSecret` to Stripe.js (`stripe.confirmCardPayment`), then pay again. */
export interface StripeNext {
  type: "stripe";
  /** The PaymentIntent's client secret: for Stripe.js in this browser only; never log it. */
  clientSecret: string;
}
/** The shapes of `next` the companion server sends (docs/protocol.md, section 4); `isNextAction` tells them from another backend's. */
export type NextAction = RedirectNext | StripeNext;
/**
 * The result of `cancel`. `processing` and `unknown` keep the key. `notFound`: the server does
 * not know this key for this order (the order is not this user's or is gone, or the key
 * belongs to another order); nothing can be charged with it, so the key is removed.
 */
export type CancelOutcome =
  | { kind: "none" }
  | { kind: "notFound"; problemCode: "ORDER_NOT_FOUND" | "KEY_REUSED_WITH_DIFFERENT_DETAILS" }
  | { kind: "cancelled" }
  | { kind: "declined" }
  | { kind: "failed" }
  | { kind: "expired" }
  | { kind: "paid"; payment?: Payment }
  | { kind: "processing" }
  | { kind: "unknown" };
/**
 * `waitingForOtherTab`: another tab of this browser is paying the same order; this call waits
 * for it and then takes over that tab's attempt (its key and outcome) instead of making a
 * second one.
 */
export type PayStatus = "processing" | "checkingStatus" | "takingLonger" | "waitingForNetwork" | "waitingForOtherTab";
/**
 * How `pay` retries with the same key. Every member is optional; the defaults are shown.
 * Every wait is at least `baseDelayMs` and jittered, whatever the server's `Retry-After` says.
 */
export interface RetryOptions {
  /**
   * The least wait before any retry, in ms (default 500, at least 100). The n-th backoff (0-based) is drawn
   * from [baseDelayMs, min(maxDelayMs, baseDelayMs * 2^(n+1))); a `Retry-After` below it is
   * raised to it.
   */
  baseDelayMs?: number;
  /** Cap of the backoff, in ms (default 5000, at least `baseDelayMs`); after a request timeout the wait is drawn from [baseDelayMs, maxDelayMs). */
  maxDelayMs?: number;
  /**
   * Most requests one `pay` call sends, every one counted: the first, retries, polls of an
   * attempt in progress (202 / 409 IN_PROGRESS) and answers to 429/503 (default 8). Then `pay`
   * resolves `{ kind: "pending", reason: "attempts" }` and the key is kept.
   */
  maxAttempts?: number;
  /** Cap of a server's `Retry-After`, jitter included, in ms (default 10000; a wait is never shorter than `baseDelayMs` anyway). */
  maxRetryAfterMs?: number;
  /**
   * The client's retry budget, shared by its `pay` calls (defaults: capacity 500, retryCost 5,
   * timeoutCost 10, successRefill 1). A retry after no answer, a 5xx or a 429/503 costs
   * `retryCost`, one after our own timeout `timeoutCost`, a poll of an attempt in progress
   * nothing; a final answer refills `successRefill`. Empty: `pending` with reason "budget".
   */
  budget?: { capacity?: number; retryCost?: number; timeoutCost?: number; successRefill?: number };
}
/**
 * What `onWarning` hears (with a message for people). `NETWORK_OR_CORS`: the first two
 * requests of a `pay` call both failed at the network level, no HTTP answer (a CORS refusal,
 * e.g. `Access-Control-Allow-Origin: *` with `credentials: "include"`, or an unreachable
 * server); said at once, the message names `credentials` and the CORS headers to check. Then
 * the SDK asks whether the server answers this page at all: a plain GET of the pay URL (no
 * body, no credentials, no headers: a CORS simple request, nothing it could pay), through the
 * global `fetch`, at most 3 s. If an answer of any status can be read, the server is up and
 * the browser refuses only what the SDK's requests add (`credentials`, headers): `pay`
 * rejects at once with the error `NETWORK_OR_CORS` (key kept). If not (a network failure, the
 * server down, or a server whose CORS admits nothing from this page), the call goes on
 * retrying (it resolves `pending` if nothing answers), key kept.
 */
export type PayonceWarningCode =
  | "STORAGE_UNAVAILABLE"
  | "UNREADABLE_ENTRY"
  | "DUPLICATED_TAB"
  | "NETWORK_OR_CORS";
export interface ClientOptions {
  /**
   * The payonce API origin, e.g. "https://api.example.com". Required: the default endpoints
   * are under it.
   */
  baseUrl: string;
  /**
   * The `fetch` every request goes through (default: the global `fetch`), called as
   * `fetch(url, init)`; a test double, an instrumented fetch, or Node's. A rejection with a
   * `TypeError` or a `DOMException` (what `fetch` itself rejects with) is a request without an
   * answer, retried with the same key; a throw, or a rejection with anything else, is the app's
   * own failure: `pay` ends at once with `TRANSPORT_FAILED` (its error as `cause`), the stored
   * attempt as it was before that request.
   */
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
  /**
   * Headers added to every request (default: none): an object, or a function (sync or async)
   * called before every request, e.g. a Bearer token that refreshes or a CSRF token. The SDK
   * sets `Content-Type`, `Idempotency-Key` and `X-Request-Id` over them: the key is never the
   * app's to change. A function that throws or rejects (a failed token refresh) ends `pay` at
   * once with `TRANSPORT_FAILED` (its error as `cause`); the request never leaves. With a
   * Bearer token and no cookie, set `credentials: "omit"` too.
   */
  headers?: HeadersInit | (() => HeadersInit | Promise<HeadersInit>);
  /**
   * `RequestInit.credentials` of every request (default "include": the session cookie goes
   * along). A backend that authenticates with `headers` (a Bearer token) and takes no cookie
   * wants "omit": a cross-origin one that answers `Access-Control-Allow-Origin: *` refuses
   * "include" (`NETWORK_OR_CORS`).
   */
  credentials?: "include" | "same-origin" | "omit";
  /**
   * The URLs of an order's pay and cancel endpoints (defaults: `${baseUrl}/orders/${encodeURIComponent(orderId)}/pay`
   * and `${baseUrl}/orders/${encodeURIComponent(orderId)}/payment-attempts/cancel`). Each gets the order id as given; encode it yourself. The request bodies,
   * the key and how answers are read stay the SDK's.
   */
  endpoints?: { pay?: (orderId: string) => string; cancel?: (orderId: string) => string };
  /** Per-request timeout, in ms (default 15000, at least 1000). A timed-out request is retried with the same key. */
  requestTimeoutMs?: number;
  /** Backoff, attempts and budget (see `RetryOptions` for every default). */
  retry?: RetryOptions;
  /** Total time one `pay` keeps asking before it returns `pending` (reason "deadline"), in ms (default 60000, at least `requestTimeoutMs`). */
  deadlineMs?: number;
  /** When `onStatus` hears "takingLonger", in ms after `pay` started (default 10000). */
  longWaitMs?: number;
  /** Where attempts are kept (default "session": sessionStorage, falling back to memory if it throws). */
  storage?: "session" | "memory";
  /** Hears what does not fail a call, with a message for people (default: none). */
  onWarning?: (code: PayonceWarningCode, message: string) => void;
  /** Hears every request, answer, wait and outcome (default: none). See `PayonceEvent`. */
  onEvent?: (event: PayonceEvent) => void;
  /** Logs the same events with `console.debug("[payonce]", event)` (default false). */
  debug?: boolean;
}
/**
 * What `onEvent` hears (and `debug: true` logs with `console.debug`). Every event has `at`
 * (epoch ms). A request's events carry its `requestId`, the `X-Request-Id` the SDK sent (one
 * per request), to match with the server's logs.
 */
export type PayonceEvent = { at: number } & (
  /** The request was handed to `fetch`. */
  | { type: "request"; endpoint: "pay" | "cancel"; orderId: string; key: string; attempt: number; requestId: string; url: string }
  | {
      type: "answer";
      endpoint: "pay" | "cancel";
      orderId: string;
      key: string;
      attempt: number;
      requestId: string;
      /** Absent when no HTTP answer came (`failure` says why). */
      status?: number;
      /** The `Retry-After` received, as sent (cross-origin only when the server exposes it). */
      retryAfter?: string;
      /** The server's `X-Request-Id` (cross-origin only when the server exposes it). */
      serverRequestId?: string;
      /** No HTTP answer: whether our timeout fired. */
      timedOut?: boolean;
      /** No HTTP answer: our timeout, or a network failure (a CORS refusal looks the same). */
      failure?: "timeout" | "network";
      /** A network failure: what `fetch` rejected with, e.g. "TypeError: Failed to fetch". */
      error?: string;
      /** The server replayed a stored answer for this key (`Idempotent-Replayed: true`). */
      replayed: boolean;
      problemCode?: string;
      elapsedMs: number;
    }
  /**
   * The request ends the call without an answer: the app's `headers` or `fetch` threw or
   * rejected (it never left: no `request` event for a failed `headers`), or the caller aborted.
   */
  | {
      type: "requestFailed";
      endpoint: "pay" | "cancel";
      orderId: string;
      key: string;
      attempt: number;
      requestId: string;
      reason: "headers" | "fetch" | "aborted" | "unsupported";
      /** The app's error, as text. */
      error?: string;
    }
  | {
      type: "wait";
      endpoint: "pay";
      orderId: string;
      key: string;
      ms: number;
      why: "inProgress" | "noAnswer" | "timedOut" | "serverTrouble" | "paced" | "offline";
    }
  /** What `onWarning` hears, as an event. */
  | { type: "warning"; code: PayonceWarningCode; message: string }
  | { type: "outcome"; orderId: string; key?: string; outcome?: PayOutcome; error?: PayonceError }
  /** Another tab is paying this order: this call waits for it. */
  | { type: "tabWait"; orderId: string }
  /** This call takes over the other tab's attempt for the order: its key, its checkout, its outcome. */
  | { type: "tabAdopt"; orderId: string; key: string }
);
export interface PayOptions {
  /** Aborts waits and requests at once; the attempt and its key are kept. */
  signal?: AbortSignal;
  /** Hears the call's status, only when it changes (never the same status twice in a row). */
  onStatus?: (status: PayStatus) => void;
  /** Dev servers only: asks the server to inject this fault into the first request. */
  devFault?: "drop-response";
}
export type PendingAttempt =
  | {
      state: "saved" | "sent" | "unknown";
      orderId: string;
      orderVersion: number;
      paymentMethodId: string;
      key: string;
      createdAt: number;
      sends: number;
      extras?: Record<string, string>;
    }
  | { state: "unreadable"; orderId: string; key?: string };
/**
 * What every failed call rejects (or `create` throws) with: a real `Error` (`instanceof Error`,
 * a stack, `name` "PayonceError"). Match on `code`, never on `message`. `JSON.stringify` shows
 * name, code, message, status, problemCode and detail.
 */
export class PayonceError extends Error {
  readonly name: "PayonceError";
  /** The stable code. */
  readonly code: PayonceErrorCode;
  /** The HTTP status, when a server answer caused the error. */
  readonly status?: number;
  /** The server's problem `code`, known to this SDK or not. */
  readonly problemCode?: string;
  /** The server's problem `detail`, when it sent one. */
  readonly detail?: string;
  /** The raw (JSON-decoded) answer body, when a server answer caused the error. */
  readonly body?: unknown;
  /** `TRANSPORT_FAILED`: what the app's `headers` or `fetch` threw or rejected with. */
  readonly cause?: unknown;
  toJSON(): { name: "PayonceError"; code: PayonceErrorCode; message: string; status?: number; problemCode?: string; detail?: string };
}
export type PayonceErrorCode =
  | "INVALID_CONFIG"
  | "INVALID_CHECKOUT"
  | "SNAPSHOT_CONFLICT"
  | "UNREADABLE_ATTEMPT"
  | "KEY_REUSED_WITH_DIFFERENT_DETAILS"
  /**
   * The server refused the request (`status`, `problemCode`). A refusal that claimed no key
   * (any 401, e.g. an expired session; 400, 404 `ORDER_NOT_FOUND`, `OUT_OF_STOCK`, 413, 414,
   * 415, 431) to the key's first request releases the attempt: the next `pay`, with any
   * checkout, makes a new key. Otherwise the key is kept: `pay` again with the same checkout
   * (e.g. after signing in again), or `cancel(orderId)` to pay with other details.
   */
  | "SERVER_REJECTED"
  /** The answer does not fit the protocol (a 2xx that is not a payonce answer, a payment for another order); key kept, `body` shows it. */
  | "PROTOCOL_MISMATCH"
  | "ABORTED"
  | "UNSUPPORTED"
  /** The app's `headers` or `fetch` threw or rejected: the request never left; `cause` is the app's error, the stored attempt is as it was. */
  | "TRANSPORT_FAILED"
  /** The first two requests failed without an answer while the server answers this page (a plain GET without credentials got an answer): the browser refused the SDK's requests (the message names what to check; `credentials` first). Key kept. */
  | "NETWORK_OR_CORS"
  | "NOT_INITIALIZED";
"#;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = debug)]
    fn console_debug(tag: &str, event: &JsValue);
}

/// `onEvent` and `debug`: every request, answer, wait and outcome, as it happens.
struct Observer {
    on_event: Option<Function>,
    debug: bool,
}

/// Which request an event is about.
struct Req<'a> {
    endpoint: &'a str,
    order_id: &'a str,
    key: &'a str,
    /// How many requests the call has sent, this one included.
    attempt: u32,
    /// The request's own id, sent as `X-Request-Id`.
    id: &'a str,
}

impl Observer {
    /// Hands the event `build` makes, stamped with `at` (epoch ms), to `onEvent` and (with
    /// `debug`) to `console.debug`; builds nothing when nobody listens.
    fn emit(&self, build: impl FnOnce() -> JsValue) {
        if self.on_event.is_none() && !self.debug {
            return;
        }
        let event = build();
        let _ = Reflect::set(&event, &"at".into(), &js_sys::Date::now().into());
        if let Some(f) = &self.on_event {
            let _ = f.call1(&JsValue::NULL, &event);
        }
        if self.debug {
            console_debug("[payonce]", &event);
        }
    }

    /// `{ type, orderId, ...members }`: every event but the request-bound ones goes through
    /// here (new event types too).
    fn event(&self, kind: &str, order_id: &str, members: &[(&str, &JsValue)]) {
        self.emit(|| {
            let o = value::object(&[("type", &kind.into()), ("orderId", &order_id.into())]);
            for (k, v) in members {
                let _ = Reflect::set(&o, &JsValue::from_str(k), v);
            }
            o
        });
    }

    /// `{ type, endpoint, orderId, key, attempt, requestId, ...members }`.
    fn about(&self, kind: &str, r: &Req, members: &[(&str, &JsValue)]) {
        let mut all: Vec<(&str, &JsValue)> = Vec::with_capacity(members.len() + 4);
        let (endpoint, key, attempt, id) = (
            r.endpoint.into(),
            r.key.into(),
            r.attempt.into(),
            r.id.into(),
        );
        all.extend([
            ("endpoint", &endpoint),
            ("key", &key),
            ("attempt", &attempt),
            ("requestId", &id),
        ]);
        all.extend_from_slice(members);
        self.event(kind, r.order_id, &all);
    }

    /// `{ type: "request", ..., url }`: the request was handed to `fetch`.
    fn request(&self, r: &Req, url: &str) {
        self.about("request", r, &[("url", &url.into())]);
    }

    /// `{ type: "requestFailed", ..., reason, error? }`: the request got no answer and the call
    /// ends: the app's `headers` or `fetch` failed (it never left), or the caller aborted.
    fn request_failed(&self, r: &Req, unsent: &io::Unsent) {
        let reason = match unsent.error {
            SdkError::TransportFailed(step) => step.as_str(),
            SdkError::Aborted => "aborted",
            _ => "unsupported",
        };
        let error = Some(&unsent.cause)
            .filter(|c| !c.is_undefined())
            .map_or(JsValue::UNDEFINED, |c| io::describe(c).into());
        self.about(
            "requestFailed",
            r,
            &[("reason", &reason.into()), ("error", &error)],
        );
    }

    /// `{ type: "wait", orderId, endpoint, key, ms, why }`.
    fn wait(&self, order_id: &str, key: &str, ms: u64, why: &str) {
        self.event(
            "wait",
            order_id,
            &[
                ("endpoint", &"pay".into()),
                ("key", &key.into()),
                ("ms", &(ms as f64).into()),
                ("why", &why.into()),
            ],
        );
    }

    /// `{ type: "tabWait" | "tabAdopt", orderId, key? }`: waiting for another tab's pay call
    /// of the order; taking over its attempt (`key`).
    fn tab(&self, kind: &str, order_id: &str, key: Option<&str>) {
        self.emit(|| {
            value::object(&[
                ("type", &kind.into()),
                ("orderId", &order_id.into()),
                ("key", &key.map_or(JsValue::UNDEFINED, JsValue::from)),
            ])
        });
    }

    /// `{ type: "outcome", orderId, key?, outcome | error }`.
    fn outcome(&self, order_id: &str, key: Option<&str>, result: &Result<JsValue, JsValue>) {
        let (name, v) = match result {
            Ok(v) => ("outcome", v),
            Err(e) => ("error", e),
        };
        let key = key.map_or(JsValue::UNDEFINED, JsValue::from);
        self.event("outcome", order_id, &[("key", &key), (name, v)]);
    }

    /// `{ type: "answer", ..., status?, retryAfter?, serverRequestId?, timedOut?, failure?,
    /// error?, replayed, problemCode?, elapsedMs }`.
    fn answer(&self, r: &Req, answer: &io::Answer, elapsed_ms: f64) {
        let text = |v: Option<&str>| v.map_or(JsValue::UNDEFINED, JsValue::from);
        let none = JsValue::UNDEFINED;
        let (status, retry_after, timed_out, failure) = match &answer.reply {
            Reply::Http {
                status,
                retry_after,
                ..
            } => (
                JsValue::from(*status),
                text(retry_after.as_deref()),
                none.clone(),
                none.clone(),
            ),
            Reply::NoAnswer { timed_out } => (
                none.clone(),
                none.clone(),
                JsValue::from(*timed_out),
                (if *timed_out { "timeout" } else { "network" }).into(),
            ),
        };
        let code = value::get(&answer.body, "code");
        let code = if code.is_string() { code } else { none };
        let seen = &answer.seen;
        self.about(
            "answer",
            r,
            &[
                ("status", &status),
                ("retryAfter", &retry_after),
                ("serverRequestId", &text(seen.request_id.as_deref())),
                ("timedOut", &timed_out),
                ("failure", &failure),
                ("error", &text(seen.error.as_deref())),
                ("replayed", &seen.replayed.into()),
                ("problemCode", &code),
                ("elapsedMs", &elapsed_ms.into()),
            ],
        );
    }
}

struct Inner {
    base_url: String,
    request_timeout_ms: u32,
    deadline_ms: u64,
    long_wait_ms: u64,
    policy: RetryPolicy,
    budget: RefCell<RetryBudget>,
    store: Store,
    on_warning: Option<Function>,
    transport: io::Transport,
    observer: Observer,
    /// `endpoints.pay` / `endpoints.cancel`: the app's URL for an order id.
    pay_endpoint: Option<Function>,
    cancel_endpoint: Option<Function>,
    /// Pay calls running in this client, by order: a double click joins the running call.
    inflight: RefCell<Vec<(CheckoutSnapshot, Promise)>>,
}

impl Inner {
    /// The URL of `order_id`'s pay or cancel endpoint: the app's `endpoints` function, else
    /// `baseUrl` + the protocol's path (the order id percent-encoded).
    fn url(
        &self,
        custom: Option<&Function>,
        path: fn(&str) -> String,
        order_id: &str,
    ) -> Result<String, SdkError> {
        let Some(f) = custom else {
            return Ok([&self.base_url, &path(&encode(order_id))[..]].concat());
        };
        f.call1(&JsValue::NULL, &order_id.into())
            .ok()
            .and_then(|u| u.as_string())
            .ok_or_else(|| {
                SdkError::InvalidConfig("an endpoints function did not return a URL string".into())
            })
    }

    /// `onWarning(code, message)`, and the `{ type: "warning", code, message }` event.
    fn warn(&self, w: Warning) {
        let (code, message) = (w.code().into(), w.message().into());
        if let Some(f) = &self.on_warning {
            let _ = f.call2(&JsValue::NULL, &code, &message);
        }
        self.observer.emit(|| {
            value::object(&[
                ("type", &"warning".into()),
                ("code", &code),
                ("message", &message),
            ])
        });
    }
    fn note(&self, fell: store::FellBack) {
        if fell.0 {
            self.warn(Warning::StorageUnavailable);
        }
    }
}

/// The payonce client: one per page (or per test). Create it with `PayonceClient.create`;
/// call `free()` when done with it (a test, a Node process): the last client freed closes the
/// page's BroadcastChannel, so nothing of the SDK keeps the event loop alive.
#[wasm_bindgen]
pub struct PayonceClient {
    inner: Rc<Inner>,
    tabs_token: u32,
}

/// `free()` (or the end of a Rust scope): the client leaves the page's tab coordination, and
/// the last one closes the BroadcastChannel. Calls still running finish; their timers end
/// with them.
impl Drop for PayonceClient {
    fn drop(&mut self) {
        tabs::leave(self.tabs_token);
    }
}

/// The members `ClientOptions` reads, each with what it must be: any other is refused by name.
const OPTION_FIELDS: [(&str, Kind); 13] = [
    ("baseUrl", Kind::Text),
    ("fetch", Kind::Function),
    ("headers", Kind::ObjectOrFunction),
    (
        "credentials",
        Kind::OneOf(&["include", "same-origin", "omit"]),
    ),
    ("endpoints", Kind::Object),
    ("requestTimeoutMs", Kind::Int(value::MAX_U32)),
    ("retry", Kind::Object),
    ("deadlineMs", Kind::Int(value::MAX_SAFE)),
    ("longWaitMs", Kind::Int(value::MAX_SAFE)),
    ("storage", STORAGE),
    ("onWarning", Kind::Function),
    ("onEvent", Kind::Function),
    ("debug", Kind::Flag),
];

/// `ClientOptions.storage`.
const STORAGE: Kind = Kind::OneOf(&["session", "memory"]);

/// The members of `ClientOptions.endpoints`.
const ENDPOINT_FIELDS: [(&str, Kind); 2] = [("pay", Kind::Function), ("cancel", Kind::Function)];

/// The members `RetryOptions` reads: any other is a typo and refused.
const RETRY_FIELDS: [(&str, Kind); 5] = [
    ("baseDelayMs", Kind::Int(value::MAX_SAFE)),
    ("maxDelayMs", Kind::Int(value::MAX_SAFE)),
    ("maxAttempts", Kind::Int(value::MAX_U32)),
    ("maxRetryAfterMs", Kind::Int(value::MAX_SAFE)),
    ("budget", Kind::Object),
];

const BUDGET_FIELDS: [(&str, Kind); 4] = [
    ("capacity", Kind::Int(value::MAX_U32)),
    ("retryCost", Kind::Int(value::MAX_U32)),
    ("timeoutCost", Kind::Int(value::MAX_U32)),
    ("successRefill", Kind::Int(value::MAX_U32)),
];

/// The members of a `Checkout` (all required): any other is refused.
const CHECKOUT_FIELDS: [(&str, Kind); 4] = [
    ("orderId", Kind::Text),
    ("orderVersion", Kind::Int(value::MAX_SAFE)),
    ("paymentMethodId", Kind::Text),
    ("extras", Kind::Object),
];

/// `ClientOptions.retry` over the default policy. The options are read member by member
/// ([`value::member`]), not with a serde derive per options struct: each derive brought its
/// own `deserialize_struct` and field visitor (docs/size.md). `Err`: a member is not of its
/// kind (only an inherited one can be: [`value::check`] has checked the own ones).
fn retry_policy(retry: &JsValue) -> Result<RetryPolicy, ()> {
    let d = RetryPolicy::default();
    let budget = value::member(retry, "budget", Kind::Object)?;
    let int = |o: &JsValue, k: &str, max: f64| -> Result<Option<f64>, ()> {
        Ok(value::member(o, k, Kind::Int(max))?.as_f64())
    };
    let ms = |k: &str, default: u64| -> Result<u64, ()> {
        Ok(int(retry, k, value::MAX_SAFE)?.map_or(default, |n| n as u64))
    };
    let tokens = |k: &str, default: u32| -> Result<u32, ()> {
        Ok(int(&budget, k, value::MAX_U32)?.map_or(default, |n| n as u32))
    };
    Ok(RetryPolicy {
        base_delay_ms: ms("baseDelayMs", d.base_delay_ms)?,
        max_delay_ms: ms("maxDelayMs", d.max_delay_ms)?,
        max_attempts: int(retry, "maxAttempts", value::MAX_U32)?
            .map_or(d.max_attempts, |n| n as u32),
        max_retry_after_ms: ms("maxRetryAfterMs", d.max_retry_after_ms)?,
        budget: BudgetConfig {
            capacity: tokens("capacity", d.budget.capacity)?,
            retry_cost: tokens("retryCost", d.budget.retry_cost)?,
            timeout_cost: tokens("timeoutCost", d.budget.timeout_cost)?,
            success_refill: tokens("successRefill", d.budget.success_refill)?,
        },
    })
}

fn callback(obj: &JsValue, name: &str) -> Option<Function> {
    Reflect::get(obj, &name.into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
}

#[wasm_bindgen]
impl PayonceClient {
    /// Creates a client. Throws `PayonceError` (`INVALID_CONFIG`) on unusable options.
    pub fn create(
        #[wasm_bindgen(unchecked_param_type = "ClientOptions")] options: JsValue,
    ) -> Result<PayonceClient, JsValue> {
        let invalid = |why: String| -> JsValue { SdkError::InvalidConfig(why).into() };
        value::check(&options, "", &OPTION_FIELDS, &["baseUrl"]).map_err(invalid)?;
        let retry = value::get(&options, "retry");
        if !retry.is_undefined() && !retry.is_null() {
            value::check(&retry, "retry.", &RETRY_FIELDS, &[]).map_err(invalid)?;
            let budget = value::get(&retry, "budget");
            if !budget.is_undefined() && !budget.is_null() {
                value::check(&budget, "retry.budget.", &BUDGET_FIELDS, &[]).map_err(invalid)?;
            }
        }
        let endpoints = value::get(&options, "endpoints");
        if !endpoints.is_undefined() && !endpoints.is_null() {
            value::check(&endpoints, "endpoints.", &ENDPOINT_FIELDS, &[]).map_err(invalid)?;
        }
        let mismatch = |()| invalid("the options do not match ClientOptions".into());
        let member = |k: &str, kind: Kind| value::member(&options, k, kind).map_err(mismatch);
        let base_url = member("baseUrl", Kind::Text)?
            .as_string()
            .unwrap_or_default();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(
                ["baseUrl must be an http(s) URL, got \"", &base_url, "\""].concat(),
            ));
        }
        let policy = retry_policy(&member("retry", Kind::Object)?).map_err(mismatch)?;
        let request_timeout_ms = member("requestTimeoutMs", Kind::Int(value::MAX_U32))?
            .as_f64()
            .map_or(DEFAULT_REQUEST_TIMEOUT_MS, |n| n as u32);
        let deadline_ms = member("deadlineMs", Kind::Int(value::MAX_SAFE))?
            .as_f64()
            .map_or(DEFAULT_DEADLINE_MS, |n| n as u64);
        let long_wait_ms = member("longWaitMs", Kind::Int(value::MAX_SAFE))?
            .as_f64()
            .map_or(DEFAULT_LONG_WAIT_MS, |n| n as u64);
        let timings = Timings {
            request_timeout_ms: request_timeout_ms.into(),
            deadline_ms,
            policy,
        };
        timings.check().map_err(invalid)?;
        let memory = member("storage", STORAGE)?.as_string().as_deref() == Some("memory");
        let on_warning = callback(&options, "onWarning");
        let observer = Observer {
            on_event: callback(&options, "onEvent"),
            debug: value::get(&options, "debug").as_bool() == Some(true),
        };
        let credentials = value::get(&options, "credentials");
        let transport = io::Transport {
            fetch: callback(&options, "fetch"),
            headers: value::get(&options, "headers"),
            credentials: if credentials.is_string() {
                credentials
            } else {
                "include".into()
            },
        };
        let (store, fell) = Store::new(!memory);
        let inner = Inner {
            base_url: base_url.trim_end_matches('/').to_owned(),
            request_timeout_ms,
            deadline_ms,
            long_wait_ms,
            policy,
            budget: RefCell::new(RetryBudget::new(policy.budget)),
            store,
            on_warning,
            transport,
            observer,
            pay_endpoint: callback(&endpoints, "pay"),
            cancel_endpoint: callback(&endpoints, "cancel"),
            inflight: RefCell::new(Vec::new()),
        };
        inner.note(fell);
        let tabs_token = tabs::join(inner.on_warning.clone());
        Ok(PayonceClient {
            inner: Rc::new(inner),
            tabs_token,
        })
    }

    /// Pays for `checkout` exactly once, retrying with the same key until a final answer, the
    /// deadline, or the retry budget. A second call for the same checkout while one runs
    /// returns the same promise (double click); another checkout for an order with an
    /// unresolved attempt rejects with `SNAPSHOT_CONFLICT`.
    #[wasm_bindgen(unchecked_return_type = "Promise<PayOutcome>")]
    pub fn pay(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Checkout")] checkout: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "PayOptions")] options: Option<
            js_sys::Object,
        >,
    ) -> Promise {
        let required = ["orderId", "orderVersion", "paymentMethodId"];
        let checked = value::check(&checkout, "", &CHECKOUT_FIELDS, &required)
            .and_then(|()| value::all_text(&value::get(&checkout, "extras"), "extras."));
        if let Err(why) = checked {
            return rejected(SdkError::InvalidCheckout(why));
        }
        match value::from_js::<CheckoutSnapshot>(&checkout) {
            Some(c) if !c.order_id.is_empty() => start_pay(&self.inner, c, options),
            Some(_) => rejected(SdkError::InvalidCheckout("orderId is empty".into())),
            None => rejected(SdkError::InvalidCheckout(
                "the checkout does not match Checkout".into(),
            )),
        }
    }

    /// Continues the unresolved attempt stored for `orderId` (after a reload or a bfcache
    /// restore) with its own key and snapshot. Resolves `undefined` when there is none.
    #[wasm_bindgen(unchecked_return_type = "Promise<PayOutcome | undefined>")]
    pub fn resume(
        &self,
        #[wasm_bindgen(js_name = orderId)] order_id: String,
        #[wasm_bindgen(unchecked_optional_param_type = "PayOptions")] options: Option<
            js_sys::Object,
        >,
    ) -> Promise {
        match self.inner.store.get(&order_id) {
            Entry::Missing => Promise::resolve(&JsValue::UNDEFINED),
            Entry::Valid(a) => start_pay(&self.inner, a.snapshot, options),
            Entry::Unreadable { .. } => rejected(SdkError::UnreadableAttempt),
        }
    }

    /// Cancels the unresolved attempt for `orderId` (the cancel endpoint, `docs/protocol.md`). The server
    /// tombstones a key it never saw, so a late request with it can never charge. The key is
    /// removed only when the answer is final.
    #[wasm_bindgen(unchecked_return_type = "Promise<CancelOutcome>")]
    pub fn cancel(&self, #[wasm_bindgen(js_name = orderId)] order_id: String) -> Promise {
        let inner = self.inner.clone();
        spawn_promise(async move { Ok::<_, JsValue>(cancel_js(&cancel(&inner, &order_id).await)) })
    }

    /// The unresolved attempt stored for `orderId`, if any.
    #[wasm_bindgen(js_name = pendingAttempt, unchecked_return_type = "PendingAttempt | undefined")]
    pub fn pending_attempt(&self, #[wasm_bindgen(js_name = orderId)] order_id: String) -> JsValue {
        // Built member by member, not with a serde derive: smaller in the module, and the
        // members come in the same order with the same absences (`PendingAttempt`).
        let number = |n: u64| JsValue::from_f64(n as f64);
        match self.inner.store.get(&order_id) {
            Entry::Missing => JsValue::UNDEFINED,
            Entry::Valid(a) => {
                let extras = Some(&a.snapshot.extras)
                    .filter(|e| !e.is_empty())
                    .map(value::extras);
                let mut members = vec![
                    ("state", a.state.as_str().into()),
                    ("orderId", order_id.as_str().into()),
                    ("orderVersion", number(a.snapshot.order_version)),
                    (
                        "paymentMethodId",
                        a.snapshot.payment_method_id.as_str().into(),
                    ),
                    ("key", a.key.as_str().into()),
                    ("createdAt", number(a.created_at)),
                    ("sends", a.sends.into()),
                ];
                members.extend(extras.map(|e| ("extras", e)));
                value::object_owned(&members)
            }
            Entry::Unreadable { key } => {
                let mut members = vec![
                    ("state", "unreadable".into()),
                    ("orderId", order_id.as_str().into()),
                ];
                members.extend(key.map(|k| ("key", k.as_str().into())));
                value::object_owned(&members)
            }
        }
    }

    /// Forgets every stored attempt and known receipt (call on logout: keys belong to the
    /// signed-in user). Returns how many attempts were removed.
    #[wasm_bindgen(js_name = clearAll)]
    pub fn clear_all(&self) -> u32 {
        tabs::forget_all();
        self.inner.store.clear_all()
    }

    /// Where attempts are kept right now: `"memory"` after a storage failure or by choice.
    #[wasm_bindgen(getter, js_name = storageMode, unchecked_return_type = "\"session\" | \"memory\"")]
    pub fn storage_mode(&self) -> JsValue {
        if self.inner.store.in_memory() {
            "memory"
        } else {
            "session"
        }
        .into()
    }

    /// True when this tab was detected as a duplicate that inherited another tab's storage.
    #[wasm_bindgen(getter, js_name = duplicatedTab)]
    pub fn duplicated_tab(&self) -> bool {
        tabs::duplicated()
    }

    /// How many retry-budget tokens are left (for dashboards and tests).
    #[wasm_bindgen(getter, js_name = retryTokens)]
    pub fn retry_tokens(&self) -> u32 {
        self.inner.budget.borrow().tokens()
    }
}

fn rejected(e: SdkError) -> Promise {
    Promise::reject(&e.into())
}

/// Per-call options from JavaScript.
struct PayCall {
    abort: Abort,
    on_status: Option<Function>,
    dev_fault: Option<DevFault>,
}

impl PayCall {
    fn from_js(o: Option<&js_sys::Object>) -> Self {
        let get = |name: &str| {
            o.and_then(|o| Reflect::get(o, &name.into()).ok())
                .filter(|v| !v.is_undefined())
        };
        let signal = get("signal").and_then(|s| s.dyn_into::<web_sys::AbortSignal>().ok());
        Self {
            abort: Abort::new(signal),
            on_status: o.and_then(|o| callback(o, "onStatus")),
            dev_fault: get("devFault")
                .and_then(|v| v.as_string())
                .and_then(|s| DevFault::parse(&s)),
        }
    }
    fn status(&self, s: &str) {
        if let Some(f) = &self.on_status {
            let _ = f.call1(&JsValue::NULL, &s.into());
        }
    }
}

fn start_pay(
    inner: &Rc<Inner>,
    checkout: CheckoutSnapshot,
    options: Option<js_sys::Object>,
) -> Promise {
    let order_id = checkout.order_id.clone();
    let running = inner
        .inflight
        .borrow()
        .iter()
        .find(|(c, _)| c.order_id == order_id)
        .cloned();
    if let Some((snapshot, promise)) = running {
        if snapshot != checkout {
            return rejected(SdkError::SnapshotConflict);
        }
        // Same intention while a call runs (double click): share its outcome, but honour
        // this caller's own signal.
        let call = PayCall::from_js(options.as_ref());
        if call.abort.is_none() {
            return promise;
        }
        return spawn_promise(async move {
            match call.abort.guard(promise).await {
                Ok(shared) => shared,
                Err(e) => Err(e.into()),
            }
        });
    }
    let call = PayCall::from_js(options.as_ref());
    let registered = checkout.clone();
    let inner2 = inner.clone();
    let promise = spawn_promise(async move {
        let result = pay(&inner2, checkout, call).await;
        inner2
            .inflight
            .borrow_mut()
            .retain(|(c, _)| c.order_id != order_id);
        result
    });
    // Registered before the work first runs (spawned tasks start on a later microtask).
    inner
        .inflight
        .borrow_mut()
        .push((registered, promise.clone()));
    promise
}

/// Runs `f` as a task and settles the returned promise with its result.
fn spawn_promise<F, E>(f: F) -> Promise
where
    F: std::future::Future<Output = Result<JsValue, E>> + 'static,
    E: Into<JsValue>,
{
    let (promise, resolve, reject) = io::deferred3();
    spawn_local(async move {
        let _ = match f.await {
            Ok(v) => resolve.call1(&JsValue::NULL, &v),
            Err(e) => reject.call1(&JsValue::NULL, &e.into()),
        };
    });
    promise
}

/// A final outcome as the `PayOutcome` union member: `{ kind, ...members }`, the shape of
/// [`Final`]'s serde derive (`src/core/classify.rs` tests it), built member by member. The
/// outcomes, the cancel outcomes and the receipts were the only values serialized with a
/// `Payment` in them: hand-built, the module carries no serializer for `Final`,
/// `CancelOutcome`, `Receipt` or `Payment`.
fn outcome_js(f: &Final) -> JsValue {
    let kind = ("kind", JsValue::from_str(f.kind()));
    match f {
        Final::Paid {
            payment,
            by_this_attempt,
        } => value::object_owned(&[
            kind,
            ("payment", value::payment(payment)),
            ("byThisAttempt", (*by_this_attempt).into()),
        ]),
        Final::Declined { code } => value::object_owned(&[kind, ("code", code.as_str().into())]),
        Final::OrderChanged {
            current_version: Some(v),
        } => value::object_owned(&[kind, ("currentVersion", JsValue::from_f64(*v as f64))]),
        _ => value::object_owned(&[kind]),
    }
}

/// A cancel outcome as the `CancelOutcome` union member (the shape of its serde derive).
fn cancel_js(c: &CancelOutcome) -> JsValue {
    let kind = ("kind", JsValue::from_str(c.kind()));
    match c {
        CancelOutcome::Paid { payment: Some(p) } => {
            value::object_owned(&[kind, ("payment", value::payment(p))])
        }
        CancelOutcome::NotFound { code } => {
            value::object_owned(&[kind, ("problemCode", code.as_str().into())])
        }
        _ => value::object_owned(&[kind]),
    }
}

/// `{ kind: "pending", reason }`: the call stopped asking, the key is kept.
fn pending(reason: PendingReason) -> JsValue {
    value::object_owned(&[
        ("kind", "pending".into()),
        ("reason", reason.as_str().into()),
    ])
}

/// Performs the core's pay flow ([`crate::core::flow`]): storage, statuses, requests, waits.
async fn pay(inner: &Inner, checkout: CheckoutSnapshot, call: PayCall) -> Result<JsValue, JsValue> {
    let order_id = checkout.order_id.clone();
    // One payment per order at a time across every tab: a second tab waits here, then finds
    // the first one's receipt, its stored attempt, or the attempt the first tab was sending.
    let (_lock, seen) = order_lock(inner, &order_id, &call).await?;
    let pay_url = inner.url(inner.pay_endpoint.as_ref(), paths::pay, &order_id)?;
    let config = FlowConfig {
        policy: inner.policy,
        deadline_ms: inner.deadline_ms,
        long_wait_ms: inner.long_wait_ms,
    };
    let entry = inner.store.get(&order_id);
    let seen = seen.map(|c| (c.key, c.snapshot));
    // The attempt seen while waiting is adopted before any receipt is looked at: the other
    // tab's receipt for it is that attempt's outcome, which the adopted flow's first request
    // (a replay for its key) confirms the same way, and this call says `tabAdopt` every time.
    let adopted = attempt::adopt(&entry, seen, js_sys::Date::now() as u64);
    if adopted.is_none() {
        if let Some(r) = tabs::receipt(&inner.base_url, &checkout) {
            let confirmed = confirm_receipt(inner, &r, &pay_url, &call.abort).await;
            if let Some(paid) = confirmed.map_err(io::Unsent::into_js)? {
                return Ok(paid);
            }
        }
    }
    let mut flow = match adopted {
        Some(theirs) => {
            inner
                .observer
                .tab("tabAdopt", &order_id, Some(theirs.key.as_str()));
            PayFlow::start_adopted(theirs, config, js_sys::Date::now())
        }
        None => PayFlow::start(&entry, checkout, config, js_sys::Date::now(), || {
            IdempotencyKey::parse(&io::random_uuid()?).ok()
        })?,
    };
    // Shown to the other tabs while this call sends the attempt (src/web/tabs.rs); released
    // before the order's lock (locals drop in reverse order).
    let claim = Claim {
        base_url: inner.base_url.clone(),
        key: flow.attempt().key.clone(),
        snapshot: flow.attempt().snapshot.clone(),
    };
    let _claim = io::lock(&tabs::claim_lock(&claim), &call.abort).await?;
    let body = value::pay_body(&flow.attempt().snapshot);
    let mut reminder = None;
    let mut last_body = JsValue::UNDEFINED;
    // The app's error when its `headers` or `fetch` failed: the rejection's `cause`.
    let mut cause = JsValue::UNDEFINED;
    loop {
        let Some(effect) = flow.poll(js_sys::Date::now(), !io::offline()) else {
            // Never: the flow always asks for something until it is done.
            return Ok(pending(PendingReason::Deadline));
        };
        match effect {
            Effect::Warn(w) => {
                inner.warn(w);
                // Two network failures in a row: a CORS refusal if the server answers this
                // page's plain GET (`io::answers`), and then retrying cannot help
                // (src/core/flow.rs, `on_cors_refused`).
                if w == Warning::NetworkOrCors
                    && !io::offline()
                    && io::answers(&pay_url, CORS_PROBE_MS).await
                {
                    flow.on_cors_refused();
                }
            }
            Effect::Save { attempt, new: true } => inner.note(inner.store.put(&attempt)),
            Effect::Save { attempt, .. } => inner.note(inner.store.update(&attempt)),
            Effect::Remove(key) => inner.store.remove(&order_id, Some(&key)),
            Effect::Status(s) => call.status(s.as_str()),
            Effect::Remind { after_ms, status } => {
                reminder = call.on_status.as_ref().map(|f| {
                    let fire: Function = f
                        .bind1(&JsValue::NULL, &status.as_str().into())
                        .unchecked_into();
                    io::timer(fire, after_ms)
                });
            }
            Effect::Send { attempt } => {
                let key = flow.attempt().key.as_str().to_owned();
                let idem = (headers::IDEMPOTENCY_KEY, key.as_str());
                let fault = call.dev_fault.filter(|_| attempt == 1);
                let with_fault;
                let hdrs: &[(&str, &str)] = match fault {
                    Some(f) => {
                        with_fault = [idem, (headers::DEV_FAULT, f.as_str())];
                        &with_fault
                    }
                    None => std::slice::from_ref(&idem),
                };
                let out = Out {
                    endpoint: "pay",
                    order_id: &order_id,
                    key: &key,
                    attempt,
                    url: &pay_url,
                    headers: hdrs,
                    body: &body,
                };
                let answer = match send(inner, &out, &call.abort).await {
                    Ok(answer) => answer,
                    Err(unsent) => {
                        let SdkError::TransportFailed(step) = unsent.error else {
                            return Err(unsent.into_js());
                        };
                        // The flow puts the attempt back and ends the call (`Done` below).
                        (cause, last_body) = (unsent.cause, JsValue::UNDEFINED);
                        flow.on_not_sent(step);
                        continue;
                    }
                };
                let mut budget = inner.budget.borrow_mut();
                flow.on_answer(
                    &io::decode(&answer.reply, value::pay_response),
                    answer.seen.replayed,
                    js_sys::Date::now(),
                    &mut budget,
                    &mut js_sys::Math::random,
                );
                last_body = answer.body;
            }
            Effect::Wait { ms, why } => {
                let key = flow.attempt().key.as_str();
                inner.observer.wait(&order_id, key, ms, why.as_str());
                let (slept, _timer) = io::sleep(ms);
                let _ = call.abort.guard(slept).await?;
                flow.on_waited();
            }
            Effect::WaitOnline { max_ms } => {
                let key = flow.attempt().key.as_str();
                inner.observer.wait(&order_id, key, max_ms, "offline");
                let back = io::wait_online(max_ms, &call.abort).await?;
                flow.on_network(back);
            }
            Effect::Done(end) => {
                drop(reminder);
                let result = match end {
                    PayEnd::Final(f) => {
                        if let Final::Paid { payment, .. } = &f {
                            tabs::announce_paid(Receipt {
                                base_url: inner.base_url.clone(),
                                key: flow.attempt().key.clone(),
                                snapshot: flow.attempt().snapshot.clone(),
                                payment: payment.clone(),
                            });
                        }
                        Ok(outcome_js(&f))
                    }
                    // Tombstone the refused key (src/core/flow.rs): only a charge of an
                    // earlier copy of it (the cancel finds it paid) makes this call paid.
                    PayEnd::Busy => Ok(match cancel(inner, &order_id).await {
                        CancelOutcome::Paid { payment: Some(p) } => outcome_js(&Final::Paid {
                            payment: p,
                            by_this_attempt: true,
                        }),
                        _ => value::object(&[("kind", &"busy".into())]),
                    }),
                    PayEnd::Failed(e) => Err(error::to_js_caused(&e, last_body, cause)),
                    PayEnd::Pending(reason) => Ok(pending(reason)),
                    // The problem's `next` member, passed through untouched.
                    PayEnd::ActionRequired => Ok(value::object(&[
                        ("kind", &"actionRequired".into()),
                        ("next", &value::get(&last_body, "next")),
                    ])),
                };
                inner
                    .observer
                    .outcome(&order_id, Some(flow.attempt().key.as_str()), &result);
                return result;
            }
        }
    }
}

/// How often, and how many times, a tab waiting for another tab's pay call looks for that call's
/// claim (a bound: after 10 s it just waits for its turn, and pays as if it had seen nothing).
const CLAIM_POLL_MS: u64 = 50;
const CLAIM_POLLS: u32 = 200;

/// The longest the plain GET behind a `NETWORK_OR_CORS` diagnosis may take: a server
/// that does not answer within it counts as unreachable (a network failure: keep retrying).
const CORS_PROBE_MS: u32 = 3_000;

/// Takes the order's Web Lock. When another tab holds it, says so at once (status
/// `waitingForOtherTab`, event `tabWait`) and looks at the held locks until it sees that tab's
/// claim or the lock is free, then queues for it. The claim seen is the attempt this call
/// adopts (`None`: none seen). The first take is `ifAvailable` and keeps the lock when it
/// gets it, so a tab never queues behind another without having said that it waits.
async fn order_lock(
    inner: &Inner,
    order_id: &str,
    call: &PayCall,
) -> Result<(Option<io::LockGuard>, Option<Claim>), SdkError> {
    let name = ["payonce:", order_id].concat();
    let mut seen = None;
    match io::try_lock(&name).await {
        Ok(Some(guard)) => return Ok((Some(guard), None)),
        // No Web Locks: the server's key and order rules still hold.
        Err(()) => return Ok((None, None)),
        Ok(None) => {}
    }
    {
        call.status(PayStatus::WaitingForOtherTab.as_str());
        inner.observer.tab("tabWait", order_id, None);
        for _ in 0..CLAIM_POLLS {
            let held = io::held_locks().await;
            seen = tabs::claim_in(&held, &inner.base_url, order_id);
            if seen.is_some() || !held.contains(&name) {
                break;
            }
            let (slept, _timer) = io::sleep(CLAIM_POLL_MS);
            let _ = call.abort.guard(slept).await?;
        }
    }
    Ok((io::lock(&name, &call.abort).await?, seen))
}

/// Asks the server about another tab's receipt: one pay request with the receipt's key and
/// checkout. For a key that paid this is a replay of the stored answer (it cannot charge
/// again); only a paid answer for this order makes the outcome `paid`. `None`: the hint does
/// not hold, pay as if it had not been heard.
async fn confirm_receipt(
    inner: &Inner,
    r: &Receipt,
    url: &str,
    abort: &Abort,
) -> Result<Option<JsValue>, io::Unsent> {
    let order_id = &r.snapshot.order_id;
    let key = r.key.as_str();
    let body = value::pay_body(&r.snapshot);
    let out = Out {
        endpoint: "pay",
        order_id,
        key,
        attempt: 1,
        url,
        headers: &[(headers::IDEMPOTENCY_KEY, key)],
        body: &body,
    };
    let answer = send(inner, &out, abort).await?;
    let reply = io::decode(&answer.reply, value::pay_response);
    // Another call's payment (another tab's, or an earlier call's): this call charged nothing.
    let paid = receipt::confirmed(classify_pay_for(&reply, order_id)).map(|payment| {
        outcome_js(&Final::Paid {
            payment,
            by_this_attempt: false,
        })
    });
    if let Some(v) = &paid {
        inner.observer.outcome(order_id, Some(key), &Ok(v.clone()));
    }
    Ok(paid)
}

/// One request to send: what the events say of it, and what goes on the wire.
struct Out<'a> {
    endpoint: &'a str,
    order_id: &'a str,
    key: &'a str,
    /// How many requests the call has sent, this one included.
    attempt: u32,
    url: &'a str,
    headers: &'a [(&'a str, &'a str)],
    body: &'a str,
}

/// Sends one request with its events (`request`, then `answer` or `requestFailed`). The pay
/// loop, a receipt's confirmation and a cancel all send through here: one copy of the
/// request's future in the module instead of one inlined into each caller (docs/size.md).
async fn send(inner: &Inner, out: &Out<'_>, abort: &Abort) -> Result<io::Answer, io::Unsent> {
    let request_id = io::random_uuid().unwrap_or_default();
    let req = Req {
        endpoint: out.endpoint,
        order_id: out.order_id,
        key: out.key,
        attempt: out.attempt,
        id: &request_id,
    };
    let sent_at = js_sys::Date::now();
    let posted = io::post(
        Call {
            url: out.url,
            headers: out.headers,
            body: out.body,
            timeout_ms: inner.request_timeout_ms,
            transport: &inner.transport,
            request_id: &request_id,
            leaving: &|| inner.observer.request(&req, out.url),
        },
        abort,
    )
    .await;
    match &posted {
        Ok(answer) => inner
            .observer
            .answer(&req, answer, js_sys::Date::now() - sent_at),
        Err(unsent) => inner.observer.request_failed(&req, unsent),
    }
    posted
}

/// Path segments are percent-encoded: an order id is data, never path syntax.
fn encode(segment: &str) -> String {
    js_sys::encode_uri_component(segment).into()
}

async fn cancel(inner: &Inner, order_id: &str) -> CancelOutcome {
    let entry = inner.store.get(order_id);
    let Some(key) = entry.key().cloned() else {
        if let Entry::Unreadable { .. } = entry {
            // Nothing readable to cancel: the entry can only get in the way.
            inner.store.remove(order_id, None);
            inner.warn(Warning::UnreadableEntry);
        }
        return CancelOutcome::None;
    };
    let Ok(url) = inner.url(inner.cancel_endpoint.as_ref(), paths::cancel, order_id) else {
        return CancelOutcome::Unknown;
    };
    // `CancelRequest`'s JSON.
    let body = value::json(&value::object(&[("key", &key.as_str().into())]));
    let out = Out {
        endpoint: "cancel",
        order_id,
        key: key.as_str(),
        attempt: 1,
        url: &url,
        headers: &[],
        body: &body,
    };
    let outcome = match send(inner, &out, &Abort::new(None)).await {
        Ok(answer) => classify_cancel(&io::decode(&answer.reply, value::cancel_response)),
        Err(_) => CancelOutcome::Unknown,
    };
    if outcome.removes_key() {
        inner.store.remove(order_id, Some(&key));
    }
    if let (CancelOutcome::Paid { payment: Some(p) }, Entry::Valid(a)) = (&outcome, &entry) {
        tabs::announce_paid(Receipt {
            base_url: inner.base_url.clone(),
            key: a.key.clone(),
            snapshot: a.snapshot.clone(),
            payment: p.clone(),
        });
    }
    outcome
}
