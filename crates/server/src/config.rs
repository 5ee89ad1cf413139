//! The command line (clap derive; most flags also read an environment variable) and the
//! runtime [`Config`] built from it.

use clap::{Args, Parser};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::jwt::JwtArgs;

/// payonce companion server: orders, idempotent pay and cancel against a payment provider
/// (`--provider-url`; a dev build with `--dev` embeds a mock one when it is absent).
#[derive(Debug, Parser)]
#[command(name = "payonce-server", version)]
pub struct Cli {
    /// Run only a part of the system.
    #[command(subcommand)]
    pub command: Option<crate::dev::args::Command>,
    /// The API server's options.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Options of the API server.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// API listen address (port 0 picks a free port).
    #[arg(long, env = "PAYONCE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The payment provider's base URL (`https://…`, or `http://…` on a private network).
    /// Required outside `--dev`.
    #[arg(long, env = "PAYONCE_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// `sqlite://PATH` (created if missing) or `postgres://...` (TLS with
    /// `?sslmode=require|verify-ca|verify-full`, CA with `&sslrootcert=PATH`).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://.data/payonce.db"
    )]
    pub database_url: String,
    /// Serve this directory's files for paths no API route claims (the demo page).
    #[arg(long)]
    pub static_dir: Option<PathBuf>,
    /// Redis fast path (`redis://HOST:PORT/DB`, `rediss://` for TLS): keys are claimed with `SET NX` before the
    /// database claim and final answers cached for replays. The database stays the guard;
    /// an unreachable Redis only degrades to the database path.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,
    /// PEM file of CA certificates (a private CA) to trust for TLS to PostgreSQL (as its
    /// `sslrootcert` unless the URL names one), the provider (both beside the system's
    /// roots) and Redis (instead of the system's roots).
    #[arg(long, env = "PAYONCE_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// Timeout of one Redis connect or command; past it the request uses the database.
    #[arg(long, env = "PAYONCE_REDIS_TIMEOUT_MS", default_value_t = 150)]
    pub redis_timeout_ms: u64,
    /// Final attempts kept in this process's memory so their retries are answered with no
    /// database or Redis round trip (0: off). About 1 KB each.
    #[arg(long, env = "PAYONCE_REPLAY_CACHE_ENTRIES", default_value_t = 10_000)]
    pub replay_cache_entries: usize,
    /// Pay requests per user and minute (any request, replays included; 0: no limit).
    #[arg(long, env = "PAYONCE_PAY_RATE_PER_MIN", default_value_t = 600)]
    pub pay_rate_per_min: u32,
    /// Pay requests a user may send at once before the per-minute rate applies.
    #[arg(long, env = "PAYONCE_PAY_RATE_BURST", default_value_t = 600)]
    pub pay_rate_burst: u32,
    /// New payment attempts (pays with a key not seen before) per user and minute
    /// (0: no limit). Retries of a known key never count here.
    #[arg(long, env = "PAYONCE_NEW_ATTEMPTS_PER_MIN", default_value_t = 120)]
    pub new_attempts_per_min: u32,
    /// New payment attempts a user may start at once.
    #[arg(long, env = "PAYONCE_NEW_ATTEMPTS_BURST", default_value_t = 60)]
    pub new_attempts_burst: u32,
    /// Orders a user may create per minute, and at once (0: no limit).
    #[arg(long, env = "PAYONCE_ORDERS_PER_MIN", default_value_t = 120)]
    pub orders_per_min: u32,
    /// Cancels that write a tombstone (the key was never used) a user may send per minute,
    /// and at once (0: no limit). A cancel that finds the key's attempt never counts.
    #[arg(long, env = "PAYONCE_TOMBSTONES_PER_MIN", default_value_t = 120)]
    pub tombstones_per_min: u32,
    /// Unknown coupon codes a user may send per minute, and at once (0: no limit); past it
    /// every coupon code of the user, valid ones too, is 429 until a token is back.
    #[arg(long, env = "PAYONCE_COUPON_MISSES_PER_MIN", default_value_t = 5)]
    pub coupon_misses_per_min: u32,
    /// Secret for HMAC-signing session tokens, at least 32 bytes. Several processes behind
    /// one database must share it. Required outside `--dev`; in dev mode the default is a
    /// random secret per process (tokens die with the process).
    #[arg(long, env = "PAYONCE_SESSION_SECRET", hide_env_values = true)]
    pub session_secret: Option<String>,
    /// How long a claimed attempt is leased to the request that claimed it. A retry that
    /// finds an expired lease asks the provider before anything else. Must exceed the
    /// provider timeout, or a live call could be taken over.
    #[arg(long, env = "PAYONCE_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// Timeout of one call to the provider. Shorter than the 4 s "slow" test method, so a
    /// slow charge answers 202 processing.
    #[arg(long, env = "PAYONCE_PROVIDER_TIMEOUT_MS", default_value_t = 3_000)]
    pub provider_timeout_ms: u64,
    /// How long a request that meets its own key in flight waits for the result before
    /// answering 409 IN_PROGRESS (so a double click gets the same answer twice).
    #[arg(long, env = "PAYONCE_IN_PROGRESS_WAIT_MS", default_value_t = 2_000)]
    pub in_progress_wait_ms: u64,
    /// Secret of the provider's webhook signatures (shared with the provider), at least 32
    /// bytes. Required outside `--dev`; in dev mode the mock provider's default.
    #[arg(long, env = "PAYONCE_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// How often the background job settles stuck attempts and deletes expired keys
    /// (0 disables it).
    #[arg(long, env = "PAYONCE_JOBS_INTERVAL_MS", default_value_t = 30_000)]
    pub jobs_interval_ms: u64,
    /// How long a finished key replays before the cleanup job may delete it.
    #[arg(long, default_value_t = 24 * 3600)]
    pub key_retention_secs: u64,
    /// `Retry-After` seconds on 202 processing and 409 IN_PROGRESS.
    #[arg(long, default_value_t = 1)]
    pub retry_after_secs: u64,
    /// Reconciliation threshold: a processing attempt older than this whose lease has expired
    /// is settled from the provider, and flagged for manual review if the provider cannot
    /// tell. (The outbox worker drives abandoned attempts sooner; see `src/jobs/mod.rs`.)
    #[arg(long, env = "PAYONCE_RECONCILE_AFTER_MS", default_value_t = 120_000)]
    pub reconcile_after_ms: u64,
    /// How long audit rows (and handled webhook events) are kept: the card dispute window.
    #[arg(long, default_value_t = 180)]
    pub audit_retention_days: u64,
    /// The catalog (SKUs, names, prices, currency, stock, coupons) as a JSON file:
    /// `{"items": [{"sku", "name", "unitPrice", "currency", "stock"}], "coupons": [{"code",
    /// "percentOff"}]}`. Default: the built-in demo catalog. A bad file stops the start.
    #[arg(long, env = "PAYONCE_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Bearer token `GET /metrics` requires (`Authorization: Bearer <token>`). Unset: the
    /// endpoint is open; keep it off the public path then (docs/deploy.md).
    #[arg(long, env = "PAYONCE_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Timeouts and limits of the HTTP edge (`src/server.rs`).
    #[command(flatten)]
    pub edge: EdgeArgs,
    /// JWT authentication (`src/jwt.rs`).
    #[command(flatten)]
    pub jwt: JwtArgs,
    /// The dev build's flags (`--dev`, the embedded provider's, `--failpoint`).
    #[command(flatten)]
    pub dev: crate::dev::args::DevArgs,
}

/// Timeouts and the connection cap of the API listener: a client that is slow or silent
/// holds a connection (a file descriptor) only this long, and never more of them than the
/// cap, so it cannot starve `/healthz` or the pay path.
#[derive(Debug, Clone, Args)]
pub struct EdgeArgs {
    /// Time a client has to send a request's whole head (request line and headers). The
    /// same timer runs while a kept-alive connection waits for its next request, so it is
    /// also the idle keep-alive timeout. Past it the connection is closed.
    #[arg(long, env = "PAYONCE_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Longest wait for the next piece of a request body; past it the request fails with
    /// 400 and the connection is closed.
    #[arg(long, env = "PAYONCE_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,
    /// Whole-request bound (body read and handler): answered 408 past it. Must exceed
    /// `--provider-timeout-ms` + `--in-progress-wait-ms`, so a pay is never cut mid-call.
    #[arg(long, env = "PAYONCE_REQUEST_TIMEOUT_MS", default_value_t = 60_000)]
    pub request_timeout_ms: u64,
    /// Open API connections at most; further clients wait in the listen backlog.
    #[arg(long, env = "PAYONCE_MAX_CONNECTIONS", default_value_t = 1_024)]
    pub max_connections: usize,
}

/// The server's runtime settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) dev: bool,
    /// Leases and retention, from the flags.
    pub(crate) policy: payonce_rules::Policy,
    pub(crate) provider_timeout: Duration,
    pub(crate) in_progress_wait: Duration,
    pub(crate) retry_after_secs: u64,
    pub(crate) session_secret: Vec<u8>,
    /// How long a finished key is kept (and so replays): announced in
    /// `Idempotency-Key-Retention`.
    pub(crate) key_retention: Duration,
    pub(crate) webhook_secret: String,
    /// Period of the background jobs; `None`: off.
    pub(crate) jobs_interval: Option<Duration>,
    /// The Redis fast path, if configured (URL already validated).
    pub(crate) redis_url: Option<String>,
    pub(crate) redis_timeout: Duration,
    /// The `--tls-ca-file` certificates (PEM), checked.
    pub(crate) tls_ca: Option<Vec<u8>>,
    pub(crate) replay_cache_entries: usize,
    pub(crate) rates: Vec<(payonce_rules::policy::Bucket, Option<governor::Quota>)>,
    pub(crate) failpoints: Vec<String>,
    /// The `--catalog` file, checked; `None`: the built-in catalog.
    pub(crate) catalog: Option<crate::catalog::CatalogSource>,
    pub(crate) edge: Edge,
    /// Bearer JWT verification, when keys are configured.
    pub(crate) jwt: Option<std::sync::Arc<crate::jwt::JwtVerifier>>,
    /// What `GET /metrics` requires, if anything (never empty).
    pub(crate) metrics_token: Option<String>,
}

/// [`EdgeArgs`], checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edge {
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_connections: usize,
}

impl Edge {
    fn from_args(args: &ServerArgs) -> Result<Self, ConfigError> {
        let e = &args.edge;
        let pay_bound = args
            .provider_timeout_ms
            .saturating_add(args.in_progress_wait_ms);
        if e.request_timeout_ms <= pay_bound {
            return Err(ConfigError::RequestTimeoutTooShort {
                request: e.request_timeout_ms,
                pay: pay_bound,
            });
        }
        if e.header_timeout_ms == 0 || e.body_timeout_ms == 0 || e.max_connections == 0 {
            return Err(ConfigError::ZeroEdgeLimit);
        }
        Ok(Self {
            header_timeout: Duration::from_millis(e.header_timeout_ms),
            body_timeout: Duration::from_millis(e.body_timeout_ms),
            request_timeout: Duration::from_millis(e.request_timeout_ms),
            max_connections: e.max_connections,
        })
    }
}

/// Why the flags do not make a valid configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The lease would end while the leaseholder may still be talking to the provider.
    #[error("--lease-ms ({lease} ms) must be greater than --provider-timeout-ms ({timeout} ms)")]
    LeaseTooShort {
        /// Lease.
        lease: u64,
        /// Provider timeout.
        timeout: u64,
    },
    /// An empty or too short secret would make tokens forgeable.
    #[error("--session-secret must be at least {MIN_DEV_SECRET} bytes")]
    WeakSecret,
    /// A production start with unsafe or missing settings: one line per problem, all of
    /// them at once, so an operator fixes the deployment in one go.
    #[error("{}", .0.join("\n"))]
    Unsafe(Vec<String>),
    /// The dev flags (`src/dev/args.rs`; a production build refuses them all).
    #[error(transparent)]
    Dev(#[from] crate::dev::args::DevFlagError),
    /// `--redis-url` does not parse (unreachable is fine: that only degrades).
    #[error("invalid --redis-url: {0}")]
    RedisUrl(String),
    /// The `--tls-ca-file` cannot be read or holds no PEM certificate.
    #[error("--tls-ca-file {0}")]
    TlsCa(String),
    /// The `--catalog` file cannot be read, is not valid JSON, or has a bad entry.
    #[error("{0}")]
    Catalog(String),
    /// The whole-request timeout would cut a pay while it talks to the provider.
    #[error("--request-timeout-ms ({request} ms) must be greater than --provider-timeout-ms + --in-progress-wait-ms ({pay} ms)")]
    RequestTimeoutTooShort {
        /// Request timeout.
        request: u64,
        /// Provider timeout plus in-progress wait.
        pay: u64,
    },
    /// A JWT key, issuer or audience is missing or unusable.
    #[error("{0}")]
    Jwt(String),
    /// A zero timeout or cap would refuse every client.
    #[error("--header-timeout-ms, --body-timeout-ms and --max-connections must be > 0")]
    ZeroEdgeLimit,
}

/// Shortest session and webhook secret outside `--dev`: 256 bits, the HMAC-SHA256 key size.
pub const MIN_SECRET: usize = 32;
/// Shortest explicit session secret in dev mode.
const MIN_DEV_SECRET: usize = 16;

/// Every problem of a start outside `--dev`, one line each (empty: safe to start). The
/// embedded mock provider runs only in dev, so a provider must be named; both secrets must
/// be explicit and long enough that nobody can guess or brute-force them.
fn production_problems(args: &ServerArgs) -> Vec<String> {
    let mut problems = Vec::new();
    if args.provider_url.is_none() {
        problems.push(
            "--provider-url (PAYONCE_PROVIDER_URL) is required without --dev: the mock provider \
             runs only in a dev build, with --dev or as `mock-provider`"
                .to_owned(),
        );
    }
    for (flag, env, value) in [
        (
            "--webhook-secret",
            "PAYONCE_WEBHOOK_SECRET",
            &args.webhook_secret,
        ),
        (
            "--session-secret",
            "PAYONCE_SESSION_SECRET",
            &args.session_secret,
        ),
    ] {
        match value.as_deref().map(str::len) {
            None | Some(0) => problems.push(format!(
                "{flag} ({env}) is required without --dev (at least {MIN_SECRET} bytes)"
            )),
            Some(n) if n < MIN_SECRET => problems.push(format!(
                "{flag} ({env}) is {n} bytes; at least {MIN_SECRET} are required without --dev"
            )),
            Some(_) => {}
        }
    }
    problems
}

/// Every URL whose scheme this build cannot use, one line each, checked at start so a bad
/// deployment fails here rather than on its first request.
fn scheme_problems(args: &ServerArgs) -> Vec<String> {
    let check = |flag: &str, url: Option<&str>, schemes: &[&str], usage: &str| {
        let url = url.filter(|u| !schemes.iter().any(|s| u.starts_with(s)))?;
        Some(format!("{flag} scheme {:?}: use {usage}", scheme_of(url)))
    };
    let (db, redis) = (Some(args.database_url.as_str()), args.redis_url.as_deref());
    let pg = ["sqlite:", "postgres://", "postgresql://"];
    let rediss = ["redis://", "rediss://", "redis+unix://", "unix://"];
    let https = ["https://", "http://"];
    [
        check(
            "--provider-url",
            args.provider_url.as_deref(),
            &https,
            "https://…",
        ),
        check("--database-url", db, &pg, "sqlite://PATH or postgres://…"),
        check("--redis-url", redis, &rediss, "redis://… or rediss://…"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `--database-url`, with `--tls-ca-file` as its `sslrootcert` when it is PostgreSQL and
/// names none.
pub(crate) fn database_url(args: &ServerArgs) -> String {
    let db = &args.database_url;
    match (&args.tls_ca_file, reqwest::Url::parse(db)) {
        (Some(ca), Ok(mut url)) if db.starts_with("postgres") && !db.contains("sslrootcert=") => {
            url.query_pairs_mut()
                .append_pair("sslrootcert", &ca.display().to_string());
            url.into()
        }
        _ => db.clone(),
    }
}

/// The `--tls-ca-file` contents, if it holds at least one PEM certificate.
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    let bad = |why: String| ConfigError::TlsCa(format!("{}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(bad("holds no PEM certificate".into())),
    }
}

/// The scheme of a URL (never its credentials) for an error line.
fn scheme_of(url: &str) -> &str {
    url.split_once("://").map_or("(none)", |(s, _)| s)
}

impl Config {
    /// Validates the flags.
    pub fn from_args(args: &ServerArgs) -> Result<Self, ConfigError> {
        let dev = crate::dev::args::settings(&args.dev)?;
        let mut problems = scheme_problems(args);
        if !dev.dev {
            problems.extend(production_problems(args));
        }
        if !problems.is_empty() {
            return Err(ConfigError::Unsafe(problems));
        }
        if args.lease_ms <= args.provider_timeout_ms {
            return Err(ConfigError::LeaseTooShort {
                lease: args.lease_ms,
                timeout: args.provider_timeout_ms,
            });
        }
        let session_secret = match &args.session_secret {
            Some(s) if s.len() < MIN_DEV_SECRET => return Err(ConfigError::WeakSecret),
            Some(s) => s.as_bytes().to_vec(),
            None => [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .map(uuid::Uuid::into_bytes)
                .concat(),
        };
        // Outside dev `production_problems` has made sure it is set; in dev the mock
        // provider's own default pairs with the embedded provider.
        let webhook_secret = args
            .webhook_secret
            .clone()
            .or(dev.default_webhook_secret.map(str::to_owned))
            .unwrap_or_default();
        let catalog = args.catalog.as_deref().map(crate::catalog::load_file);
        let catalog = catalog.transpose().map_err(ConfigError::Catalog)?;
        let tls_ca = args.tls_ca_file.as_deref().map(read_ca).transpose()?;
        let edge = Edge::from_args(args)?;
        let jwt = crate::jwt::JwtVerifier::new(&args.jwt).map_err(ConfigError::Jwt)?;
        Ok(Self {
            edge,
            jwt: jwt.map(std::sync::Arc::new),
            dev: dev.dev,
            redis_url: args.redis_url.clone(),
            redis_timeout: Duration::from_millis(args.redis_timeout_ms.max(1)),
            tls_ca,
            replay_cache_entries: args.replay_cache_entries,
            rates: {
                use payonce_rules::policy::Bucket::*;
                let (q, a) = (crate::limits::quota, args);
                vec![
                    (Requests, q(a.pay_rate_burst, a.pay_rate_per_min)),
                    (NewAttempts, q(a.new_attempts_burst, a.new_attempts_per_min)),
                    (Orders, q(a.orders_per_min, a.orders_per_min)),
                    (Tombstones, q(a.tombstones_per_min, a.tombstones_per_min)),
                    (
                        CouponMisses,
                        q(a.coupon_misses_per_min, a.coupon_misses_per_min),
                    ),
                ]
            },
            policy: payonce_rules::Policy::new(
                Duration::from_millis(args.lease_ms),
                Duration::from_secs(args.key_retention_secs),
                Duration::from_millis(args.reconcile_after_ms),
                Duration::from_secs(args.audit_retention_days.saturating_mul(86_400)),
            ),
            provider_timeout: Duration::from_millis(args.provider_timeout_ms),
            in_progress_wait: Duration::from_millis(args.in_progress_wait_ms),
            retry_after_secs: args.retry_after_secs,
            session_secret,
            key_retention: Duration::from_secs(args.key_retention_secs),
            webhook_secret,
            jobs_interval: (args.jobs_interval_ms > 0)
                .then(|| Duration::from_millis(args.jobs_interval_ms)),
            failpoints: dev.failpoints,
            catalog,
            metrics_token: args.metrics_token.clone().filter(|t| !t.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags a start outside `--dev` must have.
    const PROD: &[&str] = &[
        "--provider-url",
        "http://127.0.0.1:1",
        "--webhook-secret",
        "whsec_0123456789abcdef0123456789abcdef",
        "--session-secret",
        "0123456789abcdef0123456789abcdef",
    ];

    fn args(extra: &[&str]) -> ServerArgs {
        let argv = std::iter::once("payonce-server").chain(extra.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").server
    }

    fn prod(extra: &[&str]) -> ServerArgs {
        args(&[PROD, extra].concat())
    }

    fn problems(a: &ServerArgs) -> Vec<String> {
        match Config::from_args(a) {
            Err(ConfigError::Unsafe(p)) => p,
            other => panic!("expected the start to be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_lease_must_outlast_the_provider_timeout() {
        let a = prod(&["--lease-ms", "3000", "--provider-timeout-ms", "3000"]);
        assert!(matches!(
            Config::from_args(&a),
            Err(ConfigError::LeaseTooShort { .. })
        ));
        assert!(Config::from_args(&prod(&[
            "--lease-ms",
            "3001",
            "--provider-timeout-ms",
            "3000"
        ]))
        .is_ok());
    }

    #[test]
    fn a_start_without_dev_names_every_missing_flag_at_once() {
        let p = problems(&args(&[]));
        assert_eq!(p.len(), 3, "{p:?}");
        for flag in ["--provider-url", "--webhook-secret", "--session-secret"] {
            assert_eq!(
                p.iter().filter(|l| l.starts_with(flag)).count(),
                1,
                "{flag}: {p:?}"
            );
        }
        assert!(Config::from_args(&prod(&[])).is_ok());
    }

    #[test]
    fn short_or_empty_secrets_are_refused_without_dev() {
        let short = "x".repeat(MIN_SECRET - 1);
        let p = problems(&args(&[
            "--provider-url",
            "http://127.0.0.1:1",
            "--webhook-secret",
            "",
            "--session-secret",
            &short,
        ]));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("--webhook-secret") && p[0].contains("required"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("--session-secret") && p[1].contains("31 bytes"),
            "{p:?}"
        );
    }

    #[test]
    fn unusable_url_schemes_are_refused_at_start() {
        let p = problems(&args(&[
            "--provider-url",
            "ftp://psp.example",
            "--database-url",
            "mysql://db/x",
            "--redis-url",
            "memcached://cache:11211",
            "--webhook-secret",
            "whsec_0123456789abcdef0123456789abcdef",
            "--session-secret",
            "0123456789abcdef0123456789abcdef",
        ]));
        assert_eq!(p.len(), 3, "{p:?}");
        for (line, (flag, scheme)) in p.iter().zip([
            ("--provider-url", "ftp"),
            ("--database-url", "mysql"),
            ("--redis-url", "memcached"),
        ]) {
            assert!(line.starts_with(flag) && line.contains(scheme), "{p:?}");
        }
    }

    #[test]
    fn tls_urls_are_accepted_and_the_ca_file_becomes_the_sslrootcert() {
        let dir = std::env::temp_dir().join(format!("payonce-ca-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let tls = [
            "--provider-url",
            "https://psp.example",
            "--database-url",
            "postgres://h/db?sslmode=verify-full",
            "--redis-url",
            "rediss://cache:6380/0",
            "--tls-ca-file",
            ca.to_str().unwrap(),
        ];
        let a = args(&[&tls[..], &PROD[2..]].concat());
        assert!(scheme_problems(&a).is_empty());
        let url = reqwest::Url::parse(&database_url(&a)).unwrap();
        let query: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let want = [
            ("sslmode", "verify-full".into()),
            ("sslrootcert", ca.display().to_string()),
        ];
        assert_eq!(query, want.map(|(k, v)| (k.to_owned(), v)));
        // A URL's own sslrootcert wins; a file without a certificate stops the start.
        let own = prod(&["--database-url", "postgres://h/db?sslrootcert=/x.pem"]);
        assert_eq!(database_url(&own), "postgres://h/db?sslrootcert=/x.pem");
        assert!(
            matches!(Config::from_args(&a), Err(ConfigError::TlsCa(m)) if m.contains("no PEM"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
