//! Browser primitives the pay loop awaits: abortable waits, the `online` event, Web Locks and
//! fetch with a per-request timeout. Every wait here ends at once when the caller's signal
//! aborts.
//!
//! Everything awaited is a JS promise, raced in JS (`Promise.race`) and awaited through one
//! non-generic [`Abort::guard`]: generic Rust combinators (a `race` of two futures, timer
//! futures) were monomorphised into every caller's state machine and made the pay loop the
//! largest function in the module. Timers are gloo-timers' `Timeout`s (cancelled on drop)
//! that resolve a promise; a timer that loses a race just resolves a promise nobody awaits
//! any more.

use crate::core::classify::Reply;
use crate::core::error::{SdkError, TransportStep};
use crate::web::value;
use gloo_timers::callback::Timeout;
use js_sys::{Array, Function, Promise, Reflect};
use payonce_protocol::{ErrorCode, Problem};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, AbortSignal, Response};

#[wasm_bindgen]
extern "C" {
    /// `navigator.locks` (bound by hand: web-sys marks the Web Locks API unstable).
    type LockManager;
    #[wasm_bindgen(method)]
    fn request(this: &LockManager, name: &str, callback: &Function) -> Promise;
    #[wasm_bindgen(method, js_name = request)]
    fn request_with(
        this: &LockManager,
        name: &str,
        options: &JsValue,
        callback: &Function,
    ) -> Promise;
    #[wasm_bindgen(method)]
    fn query(this: &LockManager) -> Promise;

    /// `Promise.race(list)`.
    #[wasm_bindgen(js_namespace = Promise, js_name = race)]
    fn race(list: &Array) -> Promise;

    /// `crypto.getRandomValues(bytes)`: the browser's (and Node's) CSPRNG, bound by hand so
    /// the module carries no second randomness stack (uuid's `v4`/`js` features pull in
    /// getrandom and its own bindings).
    #[wasm_bindgen(catch, js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(bytes: &mut [u8]) -> Result<JsValue, JsValue>;
}

/// `Promise.race([a, b])`.
fn race2(a: &Promise, b: &Promise) -> Promise {
    race(&Array::of2(a, b))
}

/// Calls `f()` after `ms` milliseconds unless the returned `Timeout` is dropped (or
/// cancelled) first.
pub(crate) fn timer(f: Function, ms: u64) -> Timeout {
    // setTimeout fires at once for delays past 2^31 - 1 ms (gloo passes them on as i32):
    // clamp (about 24 days).
    Timeout::new(ms.min(i32::MAX as u64) as u32, move || {
        let _ = f.call0(&JsValue::NULL);
    })
}

/// A promise and the function that resolves it.
pub(crate) fn deferred() -> (Promise, Function) {
    let (p, resolve, _) = deferred3();
    (p, resolve)
}

/// A promise with its resolve and reject functions.
pub(crate) fn deferred3() -> (Promise, Function, Function) {
    let mut fns = None;
    let p = Promise::new(&mut |res, rej| fns = Some((res, rej)));
    // The executor runs synchronously inside `new Promise`, so `fns` is set; the fallback
    // (calling `undefined`, which only throws into an ignored `Err`) is never used.
    let (res, rej) = fns.unwrap_or_else(|| {
        let none: Function = JsValue::UNDEFINED.unchecked_into();
        (none.clone(), none)
    });
    (p, res, rej)
}

/// A promise resolved the first time `target` fires `event`.
fn once_event(target: &web_sys::EventTarget, event: &str) -> Promise {
    let (p, resolve) = deferred();
    // `{ once: true }` as a plain object: no AddEventListenerOptions bindings needed.
    let opts: web_sys::AddEventListenerOptions =
        value::object(&[("once", &JsValue::TRUE)]).unchecked_into();
    let _ = target
        .add_event_listener_with_callback_and_add_event_listener_options(event, &resolve, &opts);
    p
}

/// The caller's abort signal, if any.
pub(crate) struct Abort {
    signal: Option<AbortSignal>,
    /// Resolves when the signal fires.
    fired: Option<Promise>,
}

impl Abort {
    pub(crate) fn new(signal: Option<AbortSignal>) -> Self {
        let fired = signal.as_ref().map(|s| once_event(s, "abort"));
        Self { signal, fired }
    }

    pub(crate) fn is_none(&self) -> bool {
        self.signal.is_none()
    }

    pub(crate) fn aborted(&self) -> bool {
        self.signal.as_ref().is_some_and(|s| s.aborted())
    }

    /// Awaits `p` unless the signal aborts first: `Err(Aborted)`, else how `p` settled.
    pub(crate) async fn guard(&self, p: Promise) -> Result<Result<JsValue, JsValue>, SdkError> {
        if self.aborted() {
            return Err(SdkError::Aborted);
        }
        let p = match &self.fired {
            Some(fired) => race2(&p, fired),
            None => p,
        };
        let settled = JsFuture::from(p).await;
        if self.aborted() {
            return Err(SdkError::Aborted);
        }
        Ok(settled)
    }
}

/// A promise resolved (with `undefined`) after `ms` milliseconds, and its timer: keep the
/// timer while the promise is awaited; dropping it (an abort, a race lost) cancels it.
pub(crate) fn sleep(ms: u64) -> (Promise, Timeout) {
    let (p, resolve) = deferred();
    (p, timer(resolve, ms))
}

/// True when the browser says it is offline.
pub(crate) fn offline() -> bool {
    web_sys::window().is_some_and(|w| !w.navigator().on_line())
}

/// Waits for the `online` event, at most `max_ms`, unless the signal aborts. True if the
/// network came back.
pub(crate) async fn wait_online(max_ms: u64, abort: &Abort) -> Result<bool, SdkError> {
    let Some(w) = web_sys::window() else {
        return Ok(true);
    };
    // The event resolves with an Event, the timer with `undefined`.
    let (slept, _timer) = sleep(max_ms);
    let online = abort
        .guard(race2(&once_event(&w, "online"), &slept))
        .await?;
    Ok(online.is_ok_and(|v| !v.is_undefined()) || !offline())
}

/// A fresh random v4 UUID from `crypto.getRandomValues`, hyphenated, lower case; `None`
/// without a usable `crypto` (never in a browser or Node 20).
pub(crate) fn random_uuid() -> Option<String> {
    let mut bytes = [0u8; 16];
    get_random_values(&mut bytes).ok()?;
    // `encode_lower` into a stack buffer: `to_string` would link Rust's formatting machinery.
    let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
    Some(
        id.hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer())
            .to_owned(),
    )
}

/// Holds a Web Lock until dropped.
pub(crate) struct LockGuard(Function);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.call1(&JsValue::NULL, &JsValue::UNDEFINED);
    }
}

/// `navigator.locks`, if the browser has Web Locks.
fn lock_manager() -> Option<LockManager> {
    let locks = Reflect::get(&web_sys::window()?.navigator(), &"locks".into()).ok()?;
    (!locks.is_undefined() && !locks.is_null()).then(|| locks.unchecked_into())
}

/// Takes the Web Lock `name` if it is free right now (`ifAvailable`, nothing queued), in one
/// step: between a "is it free?" probe and a request another tab could take it, and this tab
/// would then queue without knowing it waits. `Ok(Some(guard))`: taken; `Ok(None)`: another
/// tab holds it; `Err(())`: no Web Locks (or the request failed).
pub(crate) async fn try_lock(name: &str) -> Result<Option<LockGuard>, ()> {
    let locks = lock_manager().ok_or(())?;
    let (held, release) = deferred();
    let (answered, answer) = deferred();
    // Granted at once (with the lock, kept until `held` resolves) or not at all (`null`).
    let callback = Closure::once_into_js(move |lock: JsValue| -> JsValue {
        let granted = !lock.is_null();
        let _ = answer.call1(&JsValue::NULL, &granted.into());
        if granted {
            held.into()
        } else {
            JsValue::UNDEFINED
        }
    });
    // Dropped unused when the lock was not granted: resolving a promise nobody holds.
    let guard = LockGuard(release);
    let options = value::object(&[("ifAvailable", &JsValue::TRUE)]);
    let request = locks.request_with(name, &options, callback.unchecked_ref());
    match JsFuture::from(race2(&answered, &request)).await {
        Ok(v) if v.is_truthy() => Ok(Some(guard)),
        Ok(v) if v.is_falsy() && !v.is_undefined() => Ok(None),
        _ => Err(()),
    }
}

/// The names of the Web Locks held right now by every tab of the origin (empty without Web
/// Locks).
pub(crate) async fn held_locks() -> Vec<String> {
    let Some(locks) = lock_manager() else {
        return Vec::new();
    };
    let Ok(snapshot) = JsFuture::from(locks.query()).await else {
        return Vec::new();
    };
    let held = value::get(&snapshot, "held");
    let held: &Array = match held.dyn_ref() {
        Some(a) => a,
        None => return Vec::new(),
    };
    held.iter()
        .filter_map(|l| value::get(&l, "name").as_string())
        .collect()
}

/// Takes the Web Lock `name` (exclusive, across every tab of the origin). `None` when the
/// browser has no Web Locks: the server's key and order rules still hold, only the cross-tab
/// queueing is lost.
pub(crate) async fn lock(name: &str, abort: &Abort) -> Result<Option<LockGuard>, SdkError> {
    let Some(locks) = lock_manager() else {
        return Ok(None);
    };
    let (held, release) = deferred();
    let (granted, grant) = deferred();
    let callback = Closure::once_into_js(move |_lock: JsValue| -> Promise {
        let _ = grant.call1(&JsValue::NULL, &JsValue::UNDEFINED);
        held
    });
    // The guard exists before we wait: if the caller aborts while queued, dropping it resolves
    // `held`, so the lock is released the moment it is granted.
    let guard = LockGuard(release);
    let request = locks.request(name, callback.unchecked_ref());
    // `request` settles only after the lock is released, unless the request itself fails
    // (e.g. an opaque origin): then go on without the lock instead of waiting forever.
    match abort.guard(race2(&granted, &request)).await? {
        Ok(_) => Ok(Some(guard)),
        Err(_) => Ok(None),
    }
}

/// How requests leave, as the app configured it (`ClientOptions.fetch`, `headers`,
/// `credentials`). What a request carries (the key, the body) is never the app's to change.
pub(crate) struct Transport {
    /// The app's `fetch`, else the global one.
    pub fetch: Option<Function>,
    /// `undefined`, a `HeadersInit`, or a function returning one (or a promise of one), called
    /// before every request.
    pub headers: JsValue,
    /// `RequestInit.credentials`.
    pub credentials: JsValue,
}

/// One HTTP request's parts. Every request is a JSON POST (`Content-Type` and
/// `X-Request-Id` are set here).
pub(crate) struct Call<'a> {
    pub url: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a str,
    pub timeout_ms: u32,
    pub transport: &'a Transport,
    /// This request's own id (one per request), sent as `X-Request-Id`.
    pub request_id: &'a str,
    /// Called once, when the request is handed to `fetch` (the `request` event): not when the
    /// app's `headers` failed first, nor when its `fetch` threw at once.
    pub leaving: &'a dyn Fn(),
}

/// A request that ends the call: the caller aborted, or the app's `headers` or `fetch`
/// failed (the request never left; `cause` is the app's error).
pub(crate) struct Unsent {
    pub error: SdkError,
    /// The app's thrown or rejected value (`undefined` for an abort).
    pub cause: JsValue,
}

impl From<SdkError> for Unsent {
    fn from(error: SdkError) -> Self {
        Self {
            error,
            cause: JsValue::UNDEFINED,
        }
    }
}

impl Unsent {
    fn app(step: TransportStep, cause: JsValue) -> Self {
        Self {
            error: SdkError::TransportFailed(step),
            cause,
        }
    }

    /// The rejection value: a `PayonceError` with the app's error as its `cause`.
    pub(crate) fn into_js(self) -> JsValue {
        crate::web::error::to_js_caused(&self.error, JsValue::UNDEFINED, self.cause)
    }
}

/// What a thrown or rejected value says, for the events: `"TypeError: Failed to fetch"`, at
/// most 200 characters.
pub(crate) fn describe(v: &JsValue) -> String {
    let text = match v.as_string() {
        Some(s) => s,
        None => v
            .dyn_ref::<js_sys::Error>()
            .map_or_else(|| "unknown error".into(), |e| e.to_string().into()),
    };
    match value::char_at(&text, 200) {
        Some(at) => text.get(..at).unwrap_or_default().to_owned(),
        None => text,
    }
}

/// Whether the server behind `url` answers this page at all: a plain `GET` (a CORS "simple"
/// request: no body, no credentials, no headers of ours, so no preflight and nothing it could
/// pay; the companion server answers it 405) through the global `fetch`, at most
/// `timeout_ms`. `true` when an HTTP answer of any status could be read: the server is up and
/// its CORS answer admits this page, so requests that fail without an answer are refused by
/// the browser for what they add (`credentials`, headers). `false` on a network failure, a
/// timeout, or a server whose CORS admits nothing from this page (then nothing tells the two
/// apart). Not `mode: "no-cors"`: browsers block an opaque error answer (Opaque Response
/// Blocking) with a network error, so it cannot tell them apart either.
pub(crate) async fn answers(url: &str, timeout_ms: u32) -> bool {
    let Some(fetch) = fetch_fn(&Transport {
        fetch: None,
        headers: JsValue::UNDEFINED,
        credentials: JsValue::UNDEFINED,
    }) else {
        return false;
    };
    let Ok(controller) = AbortController::new() else {
        return false;
    };
    let init = value::object(&[
        ("credentials", &"omit".into()),
        ("cache", &"no-store".into()),
        ("signal", &controller.signal().into()),
    ]);
    let Ok(sent) = fetch.call2(&JsValue::NULL, &url.into(), &init) else {
        return false;
    };
    let (slept, _timer) = sleep(timeout_ms.into());
    let answered = JsFuture::from(race2(&Promise::resolve(&sent), &slept)).await;
    controller.abort();
    // The timer resolves with `undefined`, a fetch with a Response.
    answered.is_ok_and(|r| r.is_object())
}

/// True for what `fetch` itself rejects with when no answer came: a `TypeError` (a network
/// failure, a CORS refusal) or an abort or timeout `DOMException`. Anything else came from the
/// app's own `fetch`.
fn fetch_failure(e: &JsValue) -> bool {
    let name = value::get(e, "name").as_string();
    e.is_instance_of::<js_sys::TypeError>()
        || matches!(
            name.as_deref(),
            Some("AbortError" | "TimeoutError" | "NetworkError")
        )
}

/// The app's headers for one request (its function called now, its promise awaited), with
/// ours set over them: `Content-Type`, the request id, the key. `Err` when the app's headers
/// function threw, rejected or gave something that is not a `HeadersInit`: the request
/// cannot leave.
async fn request_headers(call: &Call<'_>, abort: &Abort) -> Result<web_sys::Headers, Unsent> {
    let failed = |e| Unsent::app(TransportStep::Headers, e);
    let mut init = call.transport.headers.clone();
    if let Some(f) = init.dyn_ref::<Function>() {
        init = f.call0(&JsValue::NULL).map_err(failed)?;
        if init.is_instance_of::<Promise>() {
            init = abort.guard(init.unchecked_into()).await?.map_err(failed)?;
        }
    }
    let headers = if init.is_undefined() || init.is_null() {
        web_sys::Headers::new()
    } else {
        web_sys::Headers::new_with_str_sequence_sequence(&init)
    };
    let headers = headers.map_err(failed)?;
    let ours = [
        ("Content-Type", "application/json"),
        (payonce_protocol::headers::REQUEST_ID, call.request_id),
    ];
    for (k, v) in ours.iter().chain(call.headers) {
        // `set` replaces whatever the app put under the same name, in any letter case.
        let _ = headers.set(k, v);
    }
    Ok(headers)
}

/// The app's `fetch`, else the global one (a window, a worker, Node).
fn fetch_fn(t: &Transport) -> Option<Function> {
    t.fetch.clone().or_else(|| {
        Reflect::get(&js_sys::global(), &"fetch".into())
            .ok()
            .and_then(|f| f.dyn_into().ok())
    })
}

/// An answer as received, with what the app may want to see of it.
pub(crate) struct Answer {
    /// The status and the JSON-decoded body (in `ok`, whatever the status): [`decode`] reads
    /// it as the endpoint's answer.
    pub reply: Reply<JsValue>,
    /// The body as received (JSON-decoded, or the text when it is not JSON; `undefined`
    /// without one): what an error shows the app.
    pub body: JsValue,
    /// What the answer's headers said, or why no answer came.
    pub seen: Seen,
}

/// What the events report of an exchange beyond the reply.
#[derive(Default)]
pub(crate) struct Seen {
    /// The server said the body is a stored result replayed for a known key.
    pub replayed: bool,
    /// The server's `X-Request-Id` (cross-origin only when the server exposes it).
    pub request_id: Option<String>,
    /// No HTTP answer: what `fetch` rejected with (`"TypeError: Failed to fetch"`); `None`
    /// when our own timeout stopped it.
    pub error: Option<String>,
}

/// POSTs JSON through the app's transport with a per-request timeout and the caller's abort.
/// Fails only on abort or when the app's `headers` or `fetch` failed ([`Unsent`]). Not
/// generic over the answer's type: one copy of the request in the module, read by the caller
/// with [`decode`].
pub(crate) async fn post(call: Call<'_>, abort: &Abort) -> Result<Answer, Unsent> {
    let (reply, seen) = exchange(call, abort).await?;
    let body = match &reply {
        Reply::Http { ok: Some(b), .. } => b.clone(),
        _ => JsValue::UNDEFINED,
    };
    Ok(Answer { reply, body, seen })
}

/// A problem body. One whose `code` is missing or unknown is no problem at all (the status
/// alone then decides); a malformed optional member is dropped rather than losing the code
/// (both optional members are, as when they were one serde struct). Only the members the SDK
/// decides on are read (the server's [`Problem`] has more, all ignored here), one by one: a
/// derived struct for them cost more in the module.
fn problem(v: &JsValue) -> Option<Problem> {
    let code = value::get(v, "code").as_string()?;
    let int = |k| value::member(v, k, value::Kind::Int(value::MAX_SAFE)).map(|n| n.as_f64());
    let (retry_after, current_version) = match (int("retryAfter"), int("currentVersion")) {
        (Ok(r), Ok(c)) => (r.map(|n| n as u64), c.map(|n| n as u64)),
        _ => (None, None),
    };
    // Looked up in [`ErrorCode::ALL`]: smaller in the module than the list's derived
    // `Deserialize`.
    let code = *ErrorCode::ALL.iter().find(|c| c.as_str() == code)?;
    // The order's receipt on `ORDER_ALREADY_PAID` (a pay that another key paid).
    let payment = Some(value::get(v, "payment"))
        .filter(|p| p.is_object())
        .and_then(|p| value::payment_in(&p));
    Some(Problem {
        type_uri: String::new(),
        title: String::new(),
        status: code.http_status(),
        detail: None,
        code,
        retry_after,
        current_version,
        attempt_status: None,
        reason: None,
        sku: None,
        payment,
    })
}

/// Decodes the body: 2xx with `read` (the endpoint's answer, read member by member in
/// [`value`]), anything else as a problem.
pub(crate) fn decode<T>(raw: &Reply<JsValue>, read: fn(&JsValue) -> Option<T>) -> Reply<T> {
    match raw {
        Reply::NoAnswer { timed_out } => Reply::NoAnswer {
            timed_out: *timed_out,
        },
        Reply::Http {
            status,
            retry_after,
            ok: body,
            ..
        } => {
            let success = (200..300).contains(status);
            let body = body.as_ref();
            Reply::Http {
                status: *status,
                retry_after: retry_after.clone(),
                ok: body.filter(|_| success).and_then(read),
                problem: body.filter(|_| !success).and_then(problem),
            }
        }
    }
}

/// At most 2,000 characters of a body that is not JSON (an HTML error page): enough to tell
/// what answered.
fn cut(text: String) -> String {
    // `get`, not `truncate`: the latter's char-boundary assertion is a panic with its message.
    match value::char_at(&text, 2_000) {
        Some(at) => text.get(..at).unwrap_or_default().to_owned(),
        None => text,
    }
}

/// The request itself, not generic over the answer type (one copy in the module). The raw
/// JSON body, whatever the status, travels in `ok`.
async fn exchange(call: Call<'_>, abort: &Abort) -> Result<(Reply<JsValue>, Seen), Unsent> {
    let fetch = fetch_fn(call.transport).ok_or(SdkError::Unsupported("no fetch"))?;
    let controller =
        AbortController::new().map_err(|_| SdkError::Unsupported("no AbortController"))?;
    let headers = request_headers(&call, abort).await?;
    // A plain `RequestInit` dictionary: no web-sys setter bindings needed.
    let init = value::object(&[
        ("method", &"POST".into()),
        ("credentials", &call.transport.credentials),
        ("headers", &headers.into()),
        ("body", &call.body.into()),
        ("signal", &controller.signal().into()),
    ]);
    // Our timeout aborts our own controller: fetch, or the body read, then rejects.
    let stop = Reflect::get(&controller, &"abort".into())
        .map(|f| {
            let f: Function = f.unchecked_into();
            // `abort(undefined)`: the default AbortError reason (one `bind` binding for all).
            f.bind1(&controller, &JsValue::UNDEFINED)
                .unchecked_into::<Function>()
        })
        .map_err(|_| SdkError::Unsupported("no AbortController"))?;
    let deadline = timer(stop, call.timeout_ms.into());
    let timed_out = || controller.signal().aborted();
    let answer = async {
        // A fetch that throws instead of rejecting is a request that never left.
        let sent = fetch
            .call2(&JsValue::NULL, &call.url.into(), &init)
            .map_err(|e| Unsent::app(TransportStep::Fetch, e))?;
        (call.leaving)();
        // Raced with our own timeout: an app's `fetch` that ignores the signal still ends.
        let stopped = once_event(&controller.signal(), "abort");
        let resp = match abort
            .guard(race2(&Promise::resolve(&sent), &stopped))
            .await?
        {
            Ok(_) if timed_out() => return Ok(Err(None)),
            Ok(resp) => resp,
            Err(_) if timed_out() => return Ok(Err(None)),
            Err(e) if fetch_failure(&e) => return Ok(Err(Some(describe(&e)))),
            Err(e) => return Err(Unsent::app(TransportStep::Fetch, e)),
        };
        let resp: Response = resp.unchecked_into();
        let header = |name| resp.headers().get(name).ok().flatten();
        let retry_after = header(payonce_protocol::headers::RETRY_AFTER);
        let seen = Seen {
            replayed: header(payonce_protocol::headers::IDEMPOTENT_REPLAYED).as_deref()
                == Some("true"),
            request_id: header(payonce_protocol::headers::REQUEST_ID),
            error: None,
        };
        // A body that is not JSON is kept as its text (it decodes to nothing; the status still
        // counts). A body our timeout cut off is no answer, as a request that never came back.
        let body = match resp.text() {
            Ok(p) => match abort.guard(p).await? {
                Ok(text) => {
                    let t = text.as_string().unwrap_or_default();
                    Some(js_sys::JSON::parse(&t).unwrap_or_else(|_| cut(t).into()))
                }
                Err(_) if timed_out() => return Ok(Err(None)),
                Err(_) => None,
            },
            Err(_) => None,
        };
        Ok(Ok((resp.status(), retry_after, body, seen)))
    }
    .await;
    drop(deadline);
    match answer {
        Ok(Ok((status, retry_after, body, seen))) => Ok((
            Reply::Http {
                status,
                retry_after,
                ok: body,
                problem: None,
            },
            seen,
        )),
        Ok(Err(error)) => Ok((
            Reply::NoAnswer {
                timed_out: timed_out(),
            },
            Seen {
                error,
                ..Seen::default()
            },
        )),
        // The caller aborted: stop the request on the wire too.
        Err(e) => {
            controller.abort();
            Err(e)
        }
    }
}
