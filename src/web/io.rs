//! Browser primitives the pay loop awaits: abortable waits, the `online` event, Web Locks and
//! fetch with a per-request timeout. Every wait here ends at once when the caller's signal
//! aborts; dropping a future cancels its timer or request.

use crate::core::classify::Reply;
use crate::core::error::SdkError;
use crate::web::jsv::{self, Bad};
use gloo_timers::future::TimeoutFuture;
use js_sys::{Function, Promise, Reflect};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, AbortSignal, RequestCredentials, RequestInit, Response};

#[wasm_bindgen]
extern "C" {
    /// `navigator.locks` (bound by hand: web-sys marks the Web Locks API unstable).
    type LockManager;
    #[wasm_bindgen(method)]
    fn request(this: &LockManager, name: &str, callback: &Function) -> Promise;
}

/// Polls two futures; the first to finish wins and the other is dropped (cancelled).
pub(crate) async fn race<A: Future, B: Future>(a: A, b: B) -> Result<A::Output, B::Output> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        b.as_mut().poll(cx).map(Err)
    })
    .await
}

/// A promise and the function that resolves it.
pub(crate) fn deferred() -> (Promise, Function) {
    let mut resolve = None;
    let p = Promise::new(&mut |res, _rej| resolve = Some(res));
    // The executor runs synchronously inside `new Promise`, so `resolve` is set.
    (p, resolve.unwrap_or_else(|| Function::new_no_args("")))
}

/// A promise with its resolve and reject functions.
pub(crate) fn deferred3() -> (Promise, Function, Function) {
    let mut fns = None;
    let p = Promise::new(&mut |res, rej| fns = Some((res, rej)));
    let (res, rej) = fns.unwrap_or_else(|| (Function::new_no_args(""), Function::new_no_args("")));
    (p, res, rej)
}

/// A promise resolved the first time `target` fires `event`.
fn once_event(target: &web_sys::EventTarget, event: &str) -> Promise {
    let (p, resolve) = deferred();
    let opts = web_sys::AddEventListenerOptions::new();
    opts.set_once(true);
    let _ = target
        .add_event_listener_with_callback_and_add_event_listener_options(event, &resolve, &opts);
    p
}

/// The caller's abort signal, if any, as something to race against.
pub(crate) struct Abort {
    signal: Option<AbortSignal>,
    fired: Option<JsFuture>,
}

impl Abort {
    pub(crate) fn new(signal: Option<AbortSignal>) -> Self {
        let fired = signal
            .as_ref()
            .map(|s| JsFuture::from(once_event(s, "abort")));
        Self { signal, fired }
    }

    pub(crate) fn is_none(&self) -> bool {
        self.signal.is_none()
    }

    pub(crate) fn aborted(&self) -> bool {
        self.signal.as_ref().is_some_and(|s| s.aborted())
    }

    /// Runs `f` unless the signal aborts first.
    pub(crate) async fn guard<F: Future>(&mut self, f: F) -> Result<F::Output, SdkError> {
        if self.aborted() {
            return Err(SdkError::Aborted);
        }
        match self.fired.as_mut() {
            None => Ok(f.await),
            Some(fired) => race(f, fired).await.map_err(|_| SdkError::Aborted),
        }
    }
}

/// Waits `ms` milliseconds.
pub(crate) async fn sleep(ms: u64) {
    TimeoutFuture::new(ms.min(u32::MAX as u64) as u32).await;
}

fn window() -> Result<web_sys::Window, SdkError> {
    web_sys::window().ok_or(SdkError::Unsupported("no window"))
}

/// True when the browser says it is offline.
pub(crate) fn offline() -> bool {
    web_sys::window().is_some_and(|w| !w.navigator().on_line())
}

/// Waits for the `online` event, at most `max_ms`. True if the network came back.
pub(crate) async fn wait_online(max_ms: u64) -> bool {
    let Some(w) = web_sys::window() else {
        return true;
    };
    let online = JsFuture::from(once_event(&w, "online"));
    race(online, sleep(max_ms)).await.is_ok() || !offline()
}

/// A fresh random key from `crypto.randomUUID()` (secure contexts only).
pub(crate) fn random_uuid() -> Result<String, SdkError> {
    let c = window()?
        .crypto()
        .map_err(|_| SdkError::Unsupported("no crypto"))?;
    // `randomUUID` is missing outside secure contexts; calling it would throw.
    if !Reflect::has(&c, &"randomUUID".into()).unwrap_or(false) {
        return Err(SdkError::Unsupported(
            "crypto.randomUUID needs a secure context",
        ));
    }
    Ok(c.random_uuid())
}

/// Holds a Web Lock until dropped.
pub(crate) struct LockGuard(Function);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.call0(&JsValue::NULL);
    }
}

/// Takes the Web Lock `name` (exclusive, across every tab of the origin). `None` when the
/// browser has no Web Locks: the server's key and order rules still hold, only the cross-tab
/// queueing is lost.
pub(crate) async fn lock(name: &str, abort: &mut Abort) -> Result<Option<LockGuard>, SdkError> {
    let Some(w) = web_sys::window() else {
        return Ok(None);
    };
    let locks = Reflect::get(&w.navigator(), &"locks".into()).unwrap_or(JsValue::UNDEFINED);
    if locks.is_undefined() || locks.is_null() {
        return Ok(None);
    }
    let locks: LockManager = locks.unchecked_into();
    let (held, release) = deferred();
    let (granted, grant) = deferred();
    let callback = Closure::once_into_js(move |_lock: JsValue| -> Promise {
        let _ = grant.call0(&JsValue::NULL);
        held
    });
    // The guard exists before we wait: if the caller aborts while queued, dropping it resolves
    // `held`, so the lock is released the moment it is granted.
    let guard = LockGuard(release);
    let request = JsFuture::from(locks.request(name, callback.unchecked_ref()));
    // `request` settles only after the lock is released, unless the request itself fails
    // (e.g. an opaque origin): then go on without the lock instead of waiting forever.
    match abort.guard(race(JsFuture::from(granted), request)).await? {
        Ok(_) => Ok(Some(guard)),
        Err(_) => Ok(None),
    }
}

/// One HTTP request's parts.
pub(crate) struct Call<'a> {
    pub url: String,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: String,
    pub timeout_ms: u32,
}

/// POSTs JSON with credentials, a per-request timeout and the caller's abort, and decodes the
/// answer: 2xx with `ok`, anything else as a problem. Never fails except on abort.
pub(crate) async fn post<T>(
    call: Call<'_>,
    abort: &mut Abort,
    ok: fn(&JsValue) -> Result<T, Bad>,
) -> Result<Reply<T>, SdkError> {
    Ok(decode(exchange(call, abort).await?, ok))
}

/// Decodes the body: 2xx with `ok`, anything else as a problem.
fn decode<T>(raw: Reply<JsValue>, ok: fn(&JsValue) -> Result<T, Bad>) -> Reply<T> {
    match raw {
        Reply::NoAnswer { timed_out } => Reply::NoAnswer { timed_out },
        Reply::Http {
            status,
            retry_after,
            ok: body,
            ..
        } => {
            let success = (200..300).contains(&status);
            let body = body.as_ref();
            Reply::Http {
                status,
                retry_after,
                ok: body.filter(|_| success).and_then(|b| ok(b).ok()),
                problem: body.filter(|_| !success).and_then(|b| jsv::problem(b).ok()),
            }
        }
    }
}

/// The request itself, not generic over the answer type (one copy in the module). The raw
/// JSON body, whatever the status, travels in `ok`.
async fn exchange(call: Call<'_>, abort: &mut Abort) -> Result<Reply<JsValue>, SdkError> {
    let w = window()?;
    let controller =
        AbortController::new().map_err(|_| SdkError::Unsupported("no AbortController"))?;
    let headers = js_sys::Object::new();
    for (k, v) in call.headers {
        let _ = Reflect::set(&headers, &(*k).into(), &(*v).into());
    }
    let init = RequestInit::new();
    init.set_method("POST");
    init.set_credentials(RequestCredentials::Include);
    init.set_headers(&headers);
    init.set_body(&call.body.into());
    init.set_signal(Some(&controller.signal()));
    let exchange = async {
        let resp: Response = JsFuture::from(w.fetch_with_str_and_init(&call.url, &init))
            .await?
            .unchecked_into();
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(payonce_protocol::headers::RETRY_AFTER)
            .ok()
            .flatten();
        // A body that is not JSON (or is cut off) decodes to nothing; the status still counts.
        let body = match resp.json() {
            Ok(p) => JsFuture::from(p).await.ok(),
            Err(_) => None,
        };
        Ok::<_, JsValue>(Reply::Http {
            status,
            retry_after,
            ok: body,
            problem: None,
        })
    };
    let outcome = abort
        .guard(race(exchange, sleep(call.timeout_ms.into())))
        .await;
    // Whatever ended the exchange early, stop the request on the wire too.
    let reply = match outcome {
        Ok(Ok(Ok(reply))) => reply,
        Ok(Ok(Err(_network))) => Reply::NoAnswer { timed_out: false },
        Ok(Err(())) => {
            controller.abort();
            Reply::NoAnswer { timed_out: true }
        }
        Err(e) => {
            controller.abort();
            return Err(e);
        }
    };
    Ok(reply)
}
