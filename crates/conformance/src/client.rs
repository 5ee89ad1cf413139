//! The backend under test over HTTP: the two users' credentials, fresh orders, pay, cancel,
//! cart edits and the charge count, each call kept as an [`Exchange`] that a failing rule
//! prints as its evidence.

use crate::config::{Config, HttpCall, UserAuth};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KEY_RETENTION, RETRY_AFTER};
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_protocol::{CancelRequest, ErrorCode, IdempotencyKey, PayRequest, Problem};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Longest body excerpt in evidence.
const EXCERPT: usize = 240;
/// How long one pay is repeated after 429 `RATE_LIMITED`, at the server's pace (as the SDK
/// does): a backend's per-user limit on new keys may make the kit wait, never fail.
const RATE_LIMIT_PATIENCE: Duration = Duration::from_secs(60);

/// Which configured user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum User {
    A,
    B,
}

impl User {
    fn index(self) -> usize {
        match self {
            User::A => 0,
            User::B => 1,
        }
    }
    fn name(self) -> &'static str {
        match self {
            User::A => "a",
            User::B => "b",
        }
    }
}

/// One request and its answer (status 0: no answer, see `error`).
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub user: Option<User>,
    pub method: String,
    pub path: String,
    pub key: Option<String>,
    pub req_body: Option<String>,
    pub status: u16,
    /// Answer headers, names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub error: Option<String>,
}

impl Exchange {
    /// An answer header (case-insensitive name).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body decoded as `T`.
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The problem, when the body is one whose `code` goes with this status.
    pub(crate) fn problem(&self) -> Option<Problem> {
        self.decode::<Problem>()
            .filter(|p| p.code.http_status() == self.status)
    }

    /// The problem code, believed only with its own status (as the SDK does).
    pub(crate) fn code(&self) -> Option<ErrorCode> {
        self.problem().map(|p| p.code)
    }

    /// True for `status` with `code`, served as a problem.
    pub(crate) fn is(&self, status: u16, code: ErrorCode) -> bool {
        self.status == status && self.code() == Some(code)
    }

    /// True when the content type is the problem media type.
    pub(crate) fn is_problem_type(&self) -> bool {
        self.header("content-type")
            .is_some_and(|c| c.starts_with(PROBLEM_CONTENT_TYPE))
    }

    /// `Retry-After` as delta-seconds.
    pub(crate) fn retry_after(&self) -> Option<u64> {
        let v = self.header(RETRY_AFTER)?.trim();
        (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse().ok())
            .flatten()
    }

    /// One line: the request, the status, the interesting headers and a body excerpt.
    pub(crate) fn evidence(&self) -> String {
        let who = self
            .user
            .map_or(String::new(), |u| format!("[user {}] ", u.name()));
        let key = self.key.as_deref().map_or(String::new(), |k| {
            format!(" {IDEMPOTENCY_KEY}: {}", excerpt(k.as_bytes(), 48))
        });
        let body = self.req_body.as_deref().map_or(String::new(), |b| {
            format!(" {}", excerpt(b.as_bytes(), 120))
        });
        let answer = match &self.error {
            Some(e) => format!("no answer ({e})"),
            None => {
                let hs: Vec<String> = self
                    .headers
                    .iter()
                    .filter(|(n, _)| {
                        INTERESTING
                            .iter()
                            .any(|h| n.as_str().eq_ignore_ascii_case(h))
                    })
                    .map(|(n, v)| format!("{n}: {v}"))
                    .collect();
                let hs = if hs.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", hs.join("; "))
                };
                format!("{}{hs} {}", self.status, excerpt(&self.body, EXCERPT))
            }
        };
        format!("{who}{} {}{key}{body} -> {answer}", self.method, self.path)
    }
}

const INTERESTING: &[&str] = &[IDEMPOTENT_REPLAYED, RETRY_AFTER, KEY_RETENTION];

fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// An order the kit may pay.
#[derive(Debug, Clone)]
pub(crate) struct OrderRef {
    pub id: String,
    pub version: u64,
}

/// The backend, as configured.
pub(crate) struct Backend {
    pub config: Config,
    http: reqwest::Client,
    bases: Vec<String>,
    next: AtomicUsize,
    auth: [(String, String); 2],
    run: String,
}

/// A fresh idempotency key (UUID v4, as the SDK mints them).
pub(crate) fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Backend {
    /// Builds the client and resolves both users' credentials.
    pub(crate) async fn connect(config: Config) -> Result<Backend, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        let mut bases = vec![config.base_url.trim_end_matches('/').to_owned()];
        bases.extend(
            config
                .also
                .iter()
                .map(|u| u.trim_end_matches('/').to_owned()),
        );
        let mut backend = Backend {
            config,
            http,
            bases,
            next: AtomicUsize::new(0),
            auth: Default::default(),
            run: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
        };
        let a = backend
            .resolve(&backend.config.users.a.clone(), "a")
            .await?;
        let b = backend
            .resolve(&backend.config.users.b.clone(), "b")
            .await?;
        if a == b {
            return Err(
                "users a and b resolve to the same credentials: two users are needed".into(),
            );
        }
        backend.auth = [a, b];
        Ok(backend)
    }

    fn fill(&self, text: &str, order: Option<&str>) -> String {
        let t = text.replace("{run}", &self.run);
        match order {
            Some(o) => t.replace("{order}", o),
            None => t,
        }
    }

    async fn resolve(&self, u: &UserAuth, name: &str) -> Result<(String, String), String> {
        let value = if let Some(v) = &u.value {
            v.clone()
        } else if let Some(cmd) = &u.command {
            run_command(&self.fill(cmd, None), &[("PAYONCE_USER", name)]).await?
        } else if let Some(login) = &u.login {
            let ex = self.call(None, &login.call, None).await;
            let token = ex
                .json()
                .and_then(|v| {
                    v.pointer(&login.pointer)
                        .and_then(|t| t.as_str().map(str::to_owned))
                })
                .ok_or_else(|| {
                    format!(
                        "users.{name}.login: no string at {}: {}",
                        login.pointer,
                        ex.evidence()
                    )
                })?;
            format!("{}{token}", login.prefix)
        } else {
            return Err(format!("users.{name}: no credentials"));
        };
        Ok((u.header.clone(), value.trim().to_owned()))
    }

    fn base(&self) -> &str {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
        &self.bases[i]
    }

    /// Sends one request. `key` goes in `Idempotency-Key` exactly as given.
    pub(crate) async fn send(
        &self,
        user: Option<User>,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<String>,
    ) -> Exchange {
        let mut ex = Exchange {
            user,
            method: method.to_owned(),
            path: path.to_owned(),
            key: key.map(str::to_owned),
            req_body: body.clone(),
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
            error: None,
        };
        let m = match reqwest::Method::from_bytes(method.as_bytes()) {
            Ok(m) => m,
            Err(e) => {
                ex.error = Some(format!("bad method: {e}"));
                return ex;
            }
        };
        let mut req = self.http.request(m, format!("{}{path}", self.base()));
        if let Some(u) = user {
            let (name, value) = &self.auth[u.index()];
            req = req.header(name.as_str(), value.as_str());
        }
        if let Some(k) = key {
            req = req.header(IDEMPOTENCY_KEY, k);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        match req.send().await {
            Ok(res) => {
                ex.status = res.status().as_u16();
                ex.headers = res
                    .headers()
                    .iter()
                    .map(|(n, v)| {
                        (
                            n.as_str().to_owned(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect();
                match res.bytes().await {
                    Ok(b) => ex.body = b.to_vec(),
                    Err(e) => ex.error = Some(format!("body: {e}")),
                }
            }
            Err(e) => ex.error = Some(e.to_string()),
        }
        ex
    }

    async fn call(&self, user: Option<User>, call: &HttpCall, order: Option<&str>) -> Exchange {
        let body = call.body.as_deref().map(|b| self.fill(b, order));
        self.send(
            user,
            &call.method,
            &self.fill(&call.path, order),
            None,
            body,
        )
        .await
    }

    /// `POST /orders/{id}/pay`, repeated (same key) after 429 `RATE_LIMITED` as the SDK would.
    pub(crate) async fn pay(
        &self,
        user: User,
        order: &OrderRef,
        key: Option<&str>,
        version: u64,
        method: &str,
    ) -> Exchange {
        let body = PayRequest {
            order_version: version,
            payment_method_id: method.to_owned(),
            extras: Default::default(),
        };
        let body = serde_json::to_string(&body).unwrap_or_default();
        let path = paths::pay(&order.id);
        let mut ex = self
            .send(Some(user), "POST", &path, key, Some(body.clone()))
            .await;
        let give_up = tokio::time::Instant::now() + RATE_LIMIT_PATIENCE;
        while ex.is(429, ErrorCode::RateLimited) && tokio::time::Instant::now() < give_up {
            let wait = ex.retry_after().unwrap_or(1).clamp(1, 5);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            ex = self
                .send(Some(user), "POST", &path, key, Some(body.clone()))
                .await;
        }
        ex
    }

    /// Pays with the same key until the answer is final (not 202 / 409 `IN_PROGRESS` / no
    /// answer / 5xx), for at most `methods.settle_ms`, at the server's pace.
    pub(crate) async fn settle(
        &self,
        user: User,
        order: &OrderRef,
        key: &str,
        method: &str,
    ) -> Exchange {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.methods.settle_ms);
        loop {
            let ex = self
                .pay(user, order, Some(key), order.version, method)
                .await;
            let open = ex.status == 0
                || ex.status == 202
                || ex.status >= 500
                || ex.is(409, ErrorCode::InProgress);
            if !open || tokio::time::Instant::now() >= deadline {
                return ex;
            }
            let wait = ex.retry_after().unwrap_or(1).clamp(1, 2);
            tokio::time::sleep(Duration::from_millis(wait * 500)).await;
        }
    }

    /// `POST /orders/{id}/payment-attempts/cancel` with `{key}`.
    pub(crate) async fn cancel(&self, user: User, order_id: &str, key: &str) -> Exchange {
        let body = match IdempotencyKey::parse(key) {
            Ok(key) => serde_json::to_string(&CancelRequest { key }).unwrap_or_default(),
            Err(e) => format!("invalid key {e}"),
        };
        self.send(
            Some(user),
            "POST",
            &paths::cancel(order_id),
            None,
            Some(body),
        )
        .await
    }

    /// A fresh payable order of `user`.
    pub(crate) async fn new_order(&self, user: User) -> Result<OrderRef, String> {
        let src = &self.config.order;
        let (json, evidence) = if let Some(cmd) = &src.command {
            let auth = &self.auth[user.index()].1;
            let out = run_command(
                &self.fill(cmd, None),
                &[("PAYONCE_USER", user.name()), ("PAYONCE_AUTH", auth)],
            )
            .await?;
            (
                serde_json::from_str(&out).ok(),
                format!("order command printed {}", excerpt(out.as_bytes(), 200)),
            )
        } else {
            let call = HttpCall {
                method: src.method.clone().unwrap_or_else(|| "POST".into()),
                path: src.path.clone().unwrap_or_default(),
                body: src.body.clone(),
            };
            let ex = self.call(Some(user), &call, None).await;
            (ex.json(), ex.evidence())
        };
        let json: serde_json::Value = json.ok_or_else(|| format!("no order JSON: {evidence}"))?;
        let id = json
            .pointer(&src.id_pointer)
            .and_then(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .or_else(|| v.as_u64().map(|n| n.to_string()))
            })
            .ok_or_else(|| format!("no order id at {}: {evidence}", src.id_pointer))?;
        let version = json
            .pointer(&src.version_pointer)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("no order version at {}: {evidence}", src.version_pointer))?;
        Ok(OrderRef { id, version })
    }

    /// Changes the order's cart, when the configuration says how.
    pub(crate) async fn edit_cart(&self, user: User, order_id: &str) -> Option<Exchange> {
        let call = self.config.cart.clone()?;
        Some(self.call(Some(user), &call, Some(order_id)).await)
    }

    /// True when charges can be counted.
    pub(crate) fn has_ledger(&self) -> bool {
        self.config.ledger.is_some()
    }

    /// Charges recorded for the order (money moved), when a ledger is configured.
    pub(crate) async fn charges(&self, order_id: &str) -> Option<Result<u64, String>> {
        let l = self.config.ledger.as_ref()?;
        Some(if let Some(cmd) = &l.command {
            match run_command(
                &self.fill(cmd, Some(order_id)),
                &[("PAYONCE_ORDER", order_id)],
            )
            .await
            {
                Ok(out) => out
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("ledger command printed {out:?}, not a count")),
                Err(e) => Err(e),
            }
        } else {
            let url = self.fill(l.url.as_deref().unwrap_or_default(), Some(order_id));
            match self.http.get(&url).send().await {
                Ok(res) => match res.json::<serde_json::Value>().await {
                    Ok(v) => match v.pointer(&l.pointer).and_then(|a| a.as_array()) {
                        Some(items) => Ok(items
                            .iter()
                            .filter(|c| {
                                !c.get("status")
                                    .and_then(|s| s.as_str())
                                    .is_some_and(|s| l.exclude_status.iter().any(|x| x == s))
                            })
                            .count() as u64),
                        None => Err(format!("ledger {url}: no array at {}", l.pointer)),
                    },
                    Err(e) => Err(format!("ledger {url}: {e}")),
                },
                Err(e) => Err(format!("ledger {url}: {e}")),
            }
        })
    }
}

/// Runs `sh -c cmd` and returns its trimmed stdout; a non-zero exit is an error.
async fn run_command(cmd: &str, env: &[(&str, &str)]) -> Result<String, String> {
    let mut c = tokio::process::Command::new("sh");
    c.arg("-c").arg(cmd).stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), c.output())
        .await
        .map_err(|_| format!("command {cmd:?} took more than 30 s"))?
        .map_err(|e| format!("command {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "command {cmd:?} exited {}: {}",
            out.status,
            excerpt(&out.stderr, 200)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
