//! A fault proxy: plain HTTP between the server and its payment provider (localstripe in the
//! Stripe suites) that forwards every request and, for the rules a test arms, loses the
//! answer on the way back, refuses the request, holds the answer for a while, or holds the
//! request itself and delivers it late.
//!
//! Why it forwards before it drops: the faults that matter for "charged once" are the ones
//! where the provider *did* act (an intent created, a charge made) and the server never
//! heard. A lost answer is a closed connection with nothing written, what a crashed
//! load balancer or a cut cable looks like to the client; the server must treat it as
//! "unknown", never as "not charged".
//!
//! Rules match a method and a path pattern whose `*` stands for one segment
//! (`POST /v1/payment_intents/*/confirm`); each is used a fixed number of times and counted.
//! [`FaultProxy::set_down`] refuses everything (the provider unreachable), for the chaos audit.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the request, wait for the provider's answer, then close the connection
    /// without writing it: the provider acted, the caller never hears.
    DropAnswer,
    /// Close the connection without forwarding: the provider never sees the request.
    Refuse,
    /// Forward, and hold the answer this long before writing it.
    Delay(Duration),
    /// Hold the request this long, then forward it (even if the caller has given up
    /// meanwhile) and write the answer: a call that reaches the provider late, as a stuck
    /// load balancer or a slow network delivers it.
    Hold(Duration),
}

/// One armed rule.
#[derive(Debug, Clone)]
struct Rule {
    method: String,
    pattern: String,
    fault: Fault,
    left: usize,
    used: usize,
}

/// A request as it came in, and what it met: the proxy's log, from which a test can send a
/// captured request again byte for byte (a replayed webhook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `POST`, `GET`, ….
    pub method: String,
    /// Path and query as sent.
    pub path: String,
    /// Its headers, as sent (names lower-case).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Its body.
    pub body: Bytes,
    /// The fault applied, if any.
    pub fault: Option<Fault>,
}

impl Seen {
    /// The value of header `name` (any case), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        let (_, v) = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        std::str::from_utf8(v).ok()
    }
}

/// Most requests the log keeps (the oldest are forgotten): a chaos run sends thousands.
const SEEN_CAP: usize = 2_000;

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
    down: AtomicBool,
    forwarded: AtomicUsize,
    delivered: AtomicUsize,
}

/// The proxy, listening on `127.0.0.1` on a free port; stopped when dropped.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`: give this to the server as its provider URL.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// Does `path` (its query ignored) match `pattern`, `*` standing for one segment?
pub fn matches(pattern: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    let (mut p, mut s) = (pattern.split('/'), path.split('/'));
    loop {
        match (p.next(), s.next()) {
            (None, None) => return true,
            (Some("*"), Some(seg)) if !seg.is_empty() => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (`http://host:port`, no trailing path).
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let shared = Arc::new(Shared::default());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("proxy client");
        let upstream = upstream.trim_end_matches('/').to_owned();
        let state = (shared.clone(), client, upstream);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (shared, client, upstream) = state.clone();
                        async move { handle(&shared, &client, &upstream, req).await }
                    });
                    // An error here is a connection we closed on purpose (or the caller's).
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultProxy { url, shared, task }
    }

    /// Arms `fault` for the next `times` requests `METHOD pattern` (see the module docs).
    pub fn arm(&self, method: &str, pattern: &str, fault: Fault, times: usize) {
        self.shared.rules.lock().expect("rules").push(Rule {
            method: method.to_ascii_uppercase(),
            pattern: pattern.to_owned(),
            fault,
            left: times,
            used: 0,
        });
    }

    /// Shorthand: lose the provider's answer to the next `times` matching requests.
    pub fn drop_answers(&self, method: &str, pattern: &str, times: usize) {
        self.arm(method, pattern, Fault::DropAnswer, times);
    }

    /// Disarms every rule (their counts stay in [`FaultProxy::applied`]).
    pub fn clear(&self) {
        for r in self.shared.rules.lock().expect("rules").iter_mut() {
            r.left = 0;
        }
    }

    /// Refuses every request while `down` (the provider unreachable), forwards again after.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// A handle that can take the proxy down and up from another task.
    pub fn handle(&self) -> Handle {
        Handle(self.shared.clone())
    }

    /// How many requests a fault was applied to, over every rule armed for `METHOD pattern`.
    pub fn applied(&self, method: &str, pattern: &str) -> usize {
        let rules = self.shared.rules.lock().expect("rules");
        rules
            .iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.pattern == pattern)
            .map(|r| r.used)
            .sum()
    }

    /// How many requests reached the upstream.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// How many forwarded requests the upstream has answered (a held one counts once it
    /// landed, whether or not its caller was still there).
    pub fn delivered(&self) -> usize {
        self.shared.delivered.load(Ordering::SeqCst)
    }

    /// The requests seen so far, oldest first (the last [`SEEN_CAP`]).
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("seen").clone()
    }
}

/// See [`FaultProxy::handle`].
#[derive(Clone)]
pub struct Handle(Arc<Shared>);

impl Handle {
    /// [`FaultProxy::set_down`].
    pub fn set_down(&self, down: bool) {
        self.0.down.store(down, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why the proxy closed a connection without an answer (hyper then writes nothing).
#[derive(Debug, thiserror::Error)]
enum Closed {
    #[error("fault: {0:?}")]
    Fault(Fault),
    #[error("upstream: {0}")]
    Upstream(String),
}

/// The fault for this request, if a rule matches (using it up), or the proxy is down.
fn take_fault(shared: &Shared, method: &str, path: &str) -> Option<Fault> {
    if shared.down.load(Ordering::SeqCst) {
        return Some(Fault::Refuse);
    }
    let mut rules = shared.rules.lock().expect("rules");
    let rule = rules
        .iter_mut()
        .find(|r| r.left > 0 && r.method == method && matches(&r.pattern, path))?;
    rule.left -= 1;
    rule.used += 1;
    Some(rule.fault)
}

async fn handle(
    shared: &Arc<Shared>,
    client: &reqwest::Client,
    upstream: &str,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Closed> {
    let method = req.method().as_str().to_owned();
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let fault = take_fault(shared, &method, &path);
    let (parts, body) = req.into_parts();
    let body = match fault {
        Some(Fault::Refuse) => Bytes::new(),
        _ => body
            .collect()
            .await
            .map_err(|e| Closed::Upstream(e.to_string()))?
            .to_bytes(),
    };
    {
        let mut seen = shared.seen.lock().expect("seen");
        if seen.len() == SEEN_CAP {
            seen.remove(0);
        }
        let headers = parts.headers.iter();
        seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            headers: headers
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect(),
            body: body.clone(),
            fault,
        });
    }
    if fault == Some(Fault::Refuse) {
        return Err(Closed::Fault(Fault::Refuse));
    }
    let mut forward = client.request(parts.method, format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST && name != hyper::header::CONNECTION {
            forward = forward.header(name, value);
        }
    }
    // Its own task: a held request still reaches the provider after its caller hung up
    // (hyper drops this handler with the connection).
    let hold = match fault {
        Some(Fault::Hold(d)) => Some(d),
        _ => None,
    };
    let counts = shared.clone();
    let forwarded = async move {
        if let Some(d) = hold {
            tokio::time::sleep(d).await;
        }
        let answer = forward.body(body).send().await;
        counts.delivered.fetch_add(1, Ordering::SeqCst);
        let answer = answer?;
        let (status, headers) = (answer.status(), answer.headers().clone());
        Ok::<_, reqwest::Error>((status, headers, answer.bytes().await?))
    };
    shared.forwarded.fetch_add(1, Ordering::SeqCst);
    let (status, headers, bytes) = tokio::spawn(forwarded)
        .await
        .map_err(|e| Closed::Upstream(e.to_string()))?
        .map_err(|e| Closed::Upstream(e.to_string()))?;
    match fault {
        Some(Fault::DropAnswer) => return Err(Closed::Fault(Fault::DropAnswer)),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        _ => {}
    }
    let mut out = Response::new(Full::new(bytes));
    *out.status_mut() = status;
    for (name, value) in &headers {
        // hyper frames the body itself (its length is known now).
        if name != hyper::header::TRANSFER_ENCODING
            && name != hyper::header::CONNECTION
            && name != hyper::header::CONTENT_LENGTH
        {
            out.headers_mut().append(name, value.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_segments() {
        let confirm = "/v1/payment_intents/*/confirm";
        assert!(matches(confirm, "/v1/payment_intents/pi_1/confirm"));
        assert!(matches(confirm, "/v1/payment_intents/pi_1/confirm?x=1"));
        assert!(!matches(confirm, "/v1/payment_intents//confirm"));
        assert!(!matches(confirm, "/v1/payment_intents/pi_1"));
        assert!(!matches(confirm, "/v1/payment_intents/pi_1/confirm/x"));
        assert!(matches(
            "/v1/payment_intents",
            "/v1/payment_intents?limit=1"
        ));
        assert!(!matches("/v1/payment_intents", "/v1/payment_intents/pi_1"));
    }

    /// An upstream that counts the requests it answered.
    async fn counting_upstream() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req| {
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        async move {
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from(format!("answer {n}")),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (url, hits)
    }

    #[tokio::test]
    async fn a_dropped_answer_was_still_acted_on_upstream() {
        let (upstream, hits) = counting_upstream().await;
        let proxy = FaultProxy::start(&upstream).await;
        proxy.drop_answers("POST", "/v1/things/*/confirm", 1);
        let http = reqwest::Client::new();
        let lost = http
            .post(format!("{}/v1/things/t1/confirm", proxy.url))
            .body("a=1")
            .send()
            .await;
        assert!(lost.is_err(), "the answer must be lost: {lost:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 1, "but the upstream acted");
        // Used up: the next one passes, on a fresh connection or the same pool.
        let ok = http
            .post(format!("{}/v1/things/t1/confirm", proxy.url))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.text().await.unwrap(), "answer 2");
        assert_eq!(proxy.applied("POST", "/v1/things/*/confirm"), 1);

        proxy.set_down(true);
        assert!(http.get(format!("{}/x", proxy.url)).send().await.is_err());
        assert_eq!(hits.load(Ordering::SeqCst), 2, "refused: never forwarded");
        proxy.set_down(false);
        let back = http.get(format!("{}/x", proxy.url)).send().await.unwrap();
        assert_eq!(back.status(), 200);
        assert_eq!(proxy.forwarded(), 3);
        let seen = proxy.seen();
        assert_eq!(seen.len(), 4);
        assert_eq!(
            (seen[0].body.as_ref(), seen[0].fault),
            (&b"a=1"[..], Some(Fault::DropAnswer))
        );
        assert_eq!(seen[2].fault, Some(Fault::Refuse));
    }
}
