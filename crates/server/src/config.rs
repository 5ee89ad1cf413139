//! The command line (clap derive; most flags also read an environment variable) and the
//! runtime [`Config`] built from it.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// payonce companion server: orders, idempotent pay and cancel, and (unless
/// `--provider-url` is given) an embedded mock payment provider on its own listener.
#[derive(Debug, Parser)]
#[command(name = "payonce-server", version)]
pub struct Cli {
    /// Run only a part of the system.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The API server's options.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run only the mock payment provider (one provider shared by several API processes).
    MockProvider {
        /// Listen address (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8081")]
        addr: SocketAddr,
        /// Where the provider posts signed webhooks (optional), e.g.
        /// `http://127.0.0.1:8080/webhooks/provider`.
        #[arg(long, env = "PAYONCE_WEBHOOK_URL")]
        webhook_url: Option<String>,
        /// Secret the webhooks are signed with.
        #[arg(long, env = "PAYONCE_WEBHOOK_SECRET", hide_env_values = true,
              default_value = payonce_mock_provider::DEFAULT_WEBHOOK_SECRET)]
        webhook_secret: String,
        /// JSON file the ledger is written through to and loaded from, so a restarted
        /// provider keeps its charges and resends undelivered webhooks. Default: memory only.
        #[arg(long)]
        state_file: Option<PathBuf>,
        /// Webhook misbehaviour: `off`, `realistic`, or a list of `dup=P`, `delay-ms=N`,
        /// `reorder`, `reorder-ms=N`, `early`.
        #[arg(long, default_value = "off")]
        webhook_chaos: payonce_mock_provider::WebhookChaos,
    },
    /// Dev only: print an HS256 JWT the server accepts with the same secret, issuer and
    /// audience (for trying the API without an identity provider).
    MintJwt {
        /// The shared secret (as given to `--jwt-hs256-secret`).
        #[arg(long, env = "PAYONCE_JWT_HS256_SECRETS", hide_env_values = true)]
        secret: String,
        /// `iss`.
        #[arg(long)]
        issuer: String,
        /// `aud`.
        #[arg(long)]
        audience: String,
        /// `sub`: the user id.
        #[arg(long)]
        user: String,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 900)]
        ttl_secs: u64,
    },
}

/// Options of the API server.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// API listen address (port 0 picks a free port).
    #[arg(long, env = "PAYONCE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Listen address of the embedded mock provider.
    #[arg(
        long,
        default_value = "127.0.0.1:8081",
        conflicts_with = "provider_url"
    )]
    pub provider_addr: SocketAddr,
    /// Use an already running provider instead of embedding one.
    #[arg(long, env = "PAYONCE_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// `sqlite://PATH` (created if missing) or `postgres://...`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://.data/payonce.db"
    )]
    pub database_url: String,
    /// Dev mode: `POST /dev/sessions`, fault injection, permissive localhost CORS.
    #[arg(long)]
    pub dev: bool,
    /// Serve this directory's files for paths no API route claims (the demo page).
    #[arg(long)]
    pub static_dir: Option<PathBuf>,
    /// Redis fast path (`redis://HOST:PORT/DB`): keys are claimed with `SET NX` before the
    /// database claim and final answers cached for replays. The database stays the guard;
    /// an unreachable Redis only degrades to the database path.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,
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
    /// Secret for HMAC-signing session tokens. Several processes behind one database must
    /// share it. Default: a random secret per process (tokens die with the process).
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
    /// Secret of the provider's webhook signatures (shared with the provider).
    #[arg(long, env = "PAYONCE_WEBHOOK_SECRET", hide_env_values = true,
          default_value = payonce_mock_provider::DEFAULT_WEBHOOK_SECRET)]
    pub webhook_secret: String,
    /// Do not let the embedded provider send webhooks (attempts then settle only through
    /// retries and the reconciliation job).
    #[arg(long)]
    pub no_provider_webhooks: bool,
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
    /// tell. (The outbox worker drives abandoned attempts sooner; see `src/jobs.rs`.)
    #[arg(long, env = "PAYONCE_RECONCILE_AFTER_MS", default_value_t = 120_000)]
    pub reconcile_after_ms: u64,
    /// How long audit rows (and handled webhook events) are kept: the card dispute window.
    #[arg(long, default_value_t = 180)]
    pub audit_retention_days: u64,
    /// State file of the embedded provider (its ledger survives a restart of this process).
    /// Default: `provider.json` beside the SQLite database; memory only with PostgreSQL.
    #[arg(long, conflicts_with = "provider_url")]
    pub provider_state: Option<PathBuf>,
    /// Keep the embedded provider's ledger in memory only, even beside a SQLite database (a
    /// restart of this process then forgets its charges). For the load benchmark: the
    /// provider stands in for a remote service, and its whole-ledger file rewrite after
    /// every charge is not the server's cost.
    #[arg(long, conflicts_with_all = ["provider_url", "provider_state"])]
    pub provider_memory_only: bool,
    /// Webhook misbehaviour of the embedded provider (see `mock-provider --webhook-chaos`).
    #[arg(long, default_value = "off", conflicts_with = "provider_url")]
    pub provider_webhook_chaos: payonce_mock_provider::WebhookChaos,
    /// The catalog (SKUs, names, prices, currency, stock, coupons) as a JSON file:
    /// `{"items": [{"sku", "name", "unitPrice", "currency", "stock"}], "coupons": [{"code",
    /// "percentOff"}]}`. Default: the built-in demo catalog. A bad file stops the start.
    #[arg(long, env = "PAYONCE_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Dev only: abort the process when it reaches this named step (repeatable, or a comma
    /// list): after-claim, after-charge, before-settle-commit, after-save, webhook, outbox,
    /// email. For crash tests; the server refuses to start with it unless `--dev`.
    #[arg(long = "failpoint", env = "PAYONCE_FAILPOINTS", value_delimiter = ',')]
    pub failpoints: Vec<String>,
    /// Timeouts and limits of the HTTP edge (`src/server.rs`).
    #[command(flatten)]
    pub edge: EdgeArgs,
    /// JWT authentication (`src/jwt.rs`).
    #[command(flatten)]
    pub jwt: JwtArgs,
}

/// Bearer JWTs from the identity provider. With any key set, `--jwt-issuer` and
/// `--jwt-audience` are required. Several keys may be given at once for rotation.
#[derive(Debug, Clone, Args)]
pub struct JwtArgs {
    /// HS256 shared secret, at least 32 bytes (repeatable, or a comma list).
    #[arg(
        long = "jwt-hs256-secret",
        env = "PAYONCE_JWT_HS256_SECRETS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub hs256_secrets: Vec<String>,
    /// RS256 (RSA) or ES256 (P-256) public key, PEM file (repeatable).
    #[arg(
        long = "jwt-public-key",
        env = "PAYONCE_JWT_PUBLIC_KEYS",
        value_delimiter = ','
    )]
    pub public_keys: Vec<PathBuf>,
    /// JWKS file (`{"keys": [...]}`) of RSA / P-256 keys; a token's `kid` picks its key.
    #[arg(long = "jwt-jwks", env = "PAYONCE_JWT_JWKS")]
    pub jwks: Option<PathBuf>,
    /// Required `iss`.
    #[arg(long = "jwt-issuer", env = "PAYONCE_JWT_ISSUER", default_value = "")]
    pub issuer: String,
    /// Required `aud` (one of the token's audiences).
    #[arg(
        long = "jwt-audience",
        env = "PAYONCE_JWT_AUDIENCE",
        default_value = ""
    )]
    pub audience: String,
    /// Longest accepted lifetime: `exp` at most this far from now (and from `iat`).
    #[arg(
        long = "jwt-max-lifetime-secs",
        env = "PAYONCE_JWT_MAX_LIFETIME_SECS",
        default_value_t = 3_600
    )]
    pub max_lifetime_secs: u64,
    /// Clock skew allowed on `exp` and `nbf`.
    #[arg(long = "jwt-leeway-secs", default_value_t = 30)]
    pub leeway_secs: u64,
    /// The claim holding the user id (it must pass the user-id rule: 1-64 of
    /// `[A-Za-z0-9_-]`).
    #[arg(
        long = "jwt-user-claim",
        env = "PAYONCE_JWT_USER_CLAIM",
        default_value = "sub"
    )]
    pub user_claim: String,
}

impl JwtArgs {
    fn any_key(&self) -> bool {
        !self.hs256_secrets.is_empty() || !self.public_keys.is_empty() || self.jwks.is_some()
    }
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
    pub(crate) lease: Duration,
    pub(crate) provider_timeout: Duration,
    pub(crate) in_progress_wait: Duration,
    pub(crate) retry_after_secs: u64,
    pub(crate) session_secret: Vec<u8>,
    /// How long a finished key is kept (and so replays): announced in
    /// `Idempotency-Key-Retention`.
    pub(crate) key_retention: Duration,
    /// Secret of the provider's webhook signatures.
    pub(crate) webhook_secret: String,
    /// Period of the background jobs; `None`: off.
    pub(crate) jobs_interval: Option<Duration>,
    /// The Redis fast path, if configured (URL already validated).
    pub(crate) redis_url: Option<String>,
    /// Bound of one Redis connect or command.
    pub(crate) redis_timeout: Duration,
    /// Capacity of the in-memory replay cache (0: off).
    pub(crate) replay_cache_entries: usize,
    /// Per-user buckets: any pay request, and new attempts.
    pub(crate) pay_rate: Option<crate::limits::Rate>,
    pub(crate) new_attempt_rate: Option<crate::limits::Rate>,
    /// Processing attempts older than this are reconciled (and flagged if still unknown).
    pub(crate) reconcile_after: Duration,
    /// Audit rows older than this are deleted.
    pub(crate) audit_retention: Duration,
    /// Armed failpoints (dev only).
    pub(crate) failpoints: Vec<String>,
    /// The `--catalog` file, checked; `None`: the built-in catalog.
    pub(crate) catalog: Option<crate::catalog::CatalogSource>,
    /// Timeouts and limits of the HTTP edge.
    pub(crate) edge: Edge,
    /// Bearer JWT verification, when keys are configured.
    pub(crate) jwt: Option<std::sync::Arc<crate::jwt::JwtVerifier>>,
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
    #[error("the session secret must be at least 16 bytes")]
    WeakSecret,
    /// `--redis-url` does not parse (unreachable is fine: that only degrades).
    #[error("invalid --redis-url: {0}")]
    RedisUrl(String),
    /// Failpoints abort the process: never outside dev mode.
    #[error("--failpoint / PAYONCE_FAILPOINTS require --dev")]
    FailpointsNeedDev,
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
    /// A failpoint name nobody checks would make a crash test pass for the wrong reason.
    #[error("unknown failpoint {0:?} (known: {known})", known = crate::faults::ALL.join(", "))]
    UnknownFailpoint(String),
}

impl Config {
    /// Validates the flags.
    pub fn from_args(args: &ServerArgs) -> Result<Self, ConfigError> {
        if args.lease_ms <= args.provider_timeout_ms {
            return Err(ConfigError::LeaseTooShort {
                lease: args.lease_ms,
                timeout: args.provider_timeout_ms,
            });
        }
        let failpoints: Vec<String> = args
            .failpoints
            .iter()
            .map(|f| f.trim().to_owned())
            .filter(|f| !f.is_empty())
            .collect();
        if let Some(bad) = failpoints
            .iter()
            .find(|f| !crate::faults::ALL.contains(&f.as_str()))
        {
            return Err(ConfigError::UnknownFailpoint(bad.clone()));
        }
        if !failpoints.is_empty() && !args.dev {
            return Err(ConfigError::FailpointsNeedDev);
        }
        let session_secret = match &args.session_secret {
            Some(s) if s.len() < 16 => return Err(ConfigError::WeakSecret),
            Some(s) => s.as_bytes().to_vec(),
            None => {
                let mut v = uuid::Uuid::new_v4().as_bytes().to_vec();
                v.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
                v
            }
        };
        let catalog = match &args.catalog {
            Some(path) => Some(crate::catalog::load_file(path).map_err(ConfigError::Catalog)?),
            None => None,
        };
        if let Some(url) = &args.redis_url {
            redis::Client::open(url.as_str()).map_err(|e| ConfigError::RedisUrl(e.to_string()))?;
        }
        let edge = Edge::from_args(args)?;
        let jwt = if args.jwt.any_key() {
            let j = &args.jwt;
            let sources = crate::jwt::KeySources {
                hs256_secrets: &j.hs256_secrets,
                public_keys: &j.public_keys,
                jwks: j.jwks.as_deref(),
            };
            Some(std::sync::Arc::new(
                crate::jwt::JwtVerifier::new(
                    &sources,
                    &j.issuer,
                    &j.audience,
                    Duration::from_secs(j.max_lifetime_secs),
                    j.leeway_secs,
                    &j.user_claim,
                )
                .map_err(ConfigError::Jwt)?,
            ))
        } else {
            None
        };
        Ok(Self {
            edge,
            jwt,
            dev: args.dev,
            redis_url: args.redis_url.clone(),
            redis_timeout: Duration::from_millis(args.redis_timeout_ms.max(1)),
            replay_cache_entries: args.replay_cache_entries,
            pay_rate: crate::limits::Rate::new(args.pay_rate_burst, args.pay_rate_per_min),
            new_attempt_rate: crate::limits::Rate::new(
                args.new_attempts_burst,
                args.new_attempts_per_min,
            ),
            lease: Duration::from_millis(args.lease_ms),
            provider_timeout: Duration::from_millis(args.provider_timeout_ms),
            in_progress_wait: Duration::from_millis(args.in_progress_wait_ms),
            retry_after_secs: args.retry_after_secs,
            session_secret,
            key_retention: Duration::from_secs(args.key_retention_secs),
            webhook_secret: args.webhook_secret.clone(),
            jobs_interval: (args.jobs_interval_ms > 0)
                .then(|| Duration::from_millis(args.jobs_interval_ms)),
            reconcile_after: Duration::from_millis(args.reconcile_after_ms),
            audit_retention: Duration::from_secs(args.audit_retention_days.saturating_mul(86_400)),
            failpoints,
            catalog,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ServerArgs {
        let argv = std::iter::once("payonce-server").chain(extra.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").server
    }

    #[test]
    fn a_lease_must_outlast_the_provider_timeout() {
        let a = args(&["--lease-ms", "3000", "--provider-timeout-ms", "3000"]);
        assert!(matches!(
            Config::from_args(&a),
            Err(ConfigError::LeaseTooShort { .. })
        ));
        assert!(Config::from_args(&args(&[
            "--lease-ms",
            "3001",
            "--provider-timeout-ms",
            "3000"
        ]))
        .is_ok());
    }

    #[test]
    fn a_short_session_secret_is_refused() {
        assert!(matches!(
            Config::from_args(&args(&["--session-secret", "short"])),
            Err(ConfigError::WeakSecret)
        ));
    }

    #[test]
    fn failpoints_need_dev_mode_and_known_names() {
        assert!(matches!(
            Config::from_args(&args(&["--failpoint", "after-claim"])),
            Err(ConfigError::FailpointsNeedDev)
        ));
        assert!(matches!(
            Config::from_args(&args(&["--dev", "--failpoint", "after-lunch"])),
            Err(ConfigError::UnknownFailpoint(_))
        ));
        let c = Config::from_args(&args(&["--dev", "--failpoint", "after-claim,email"])).unwrap();
        assert_eq!(c.failpoints, ["after-claim", "email"]);
    }

    #[test]
    fn provider_addr_and_provider_url_conflict() {
        let argv = [
            "payonce-server",
            "--provider-addr",
            "127.0.0.1:1",
            "--provider-url",
            "http://x",
        ];
        assert!(Cli::try_parse_from(argv).is_err());
        assert!(Cli::try_parse_from(["payonce-server", "--provider-url", "http://x"]).is_ok());
    }

    #[test]
    fn a_memory_only_provider_has_no_state_file_to_name() {
        assert!(args(&["--provider-memory-only"]).provider_memory_only);
        let argv = [
            "payonce-server",
            "--provider-memory-only",
            "--provider-state",
            "/tmp/p.json",
        ];
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
