//! The command line (clap derive; most flags also read an environment variable) and the
//! runtime [`Config`] built from it.

use crate::secret::{Secret, SecretUrl};
use clap::{Args, Parser};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::auth::jwt::JwtArgs;
pub use crate::auth::session::SessionArgs;

/// payonce companion server: orders, idempotent pay and cancel against a payment provider
/// (`--provider-url`; a dev build with `--dev` embeds a mock one when it is absent).
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

/// What to run instead of the API server.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Apply this binary's database migrations, print where the schema stands, and exit:
    /// the step before starting a new release, whose start (`--migrate check`, the default
    /// without `--dev`) refuses a schema it does not match (docs/deploy.md, "Upgrading").
    Migrate {
        /// The database (as the server's `--database-url`).
        #[arg(long, env = "DATABASE_URL")]
        database_url: SecretUrl,
        /// A private CA for TLS to PostgreSQL (as the server's `--tls-ca-file`).
        #[arg(long, env = "PAYONCE_TLS_CA_FILE")]
        tls_ca_file: Option<PathBuf>,
    },
    /// Compare the provider's payments created since `--since` with the store, with the
    /// server's own flags (given before `sweep`) or environment: cancel the unconfirmed
    /// objects nothing saved, flag for review the payments the store does not account for,
    /// print what it found, and exit (`src/ops/sweep.rs`; docs/deploy.md, "Restoring").
    Sweep {
        /// Unix time in seconds: the objects created then or later are compared (after a
        /// restore: the backup's time, a little before).
        #[arg(long)]
        since: i64,
    },
    /// Erase a user's personal data (order addresses, mails), keep what a dispute or a
    /// replay needs (ids, amounts, times, fingerprints, stored answers), record it in the
    /// audit trail, print what it erased, and exit (docs/deploy.md, "Erasing a user").
    EraseUser {
        /// The user id (as the server's session tokens or JWTs name it).
        user: String,
        /// The database (as the server's `--database-url`).
        #[arg(long, env = "DATABASE_URL")]
        database_url: SecretUrl,
        /// A private CA for TLS to PostgreSQL (as the server's `--tls-ca-file`).
        #[arg(long, env = "PAYONCE_TLS_CA_FILE")]
        tls_ca_file: Option<PathBuf>,
    },
    /// Print an order's timeline (docs/operating.md) from the database as text: its attempts
    /// and keys, then every journal and audit row in time order. Read only; works on a
    /// stopped server's database.
    Timeline {
        /// The order's id.
        order_id: String,
        /// The database (as the server's `--database-url`).
        #[arg(long, env = "DATABASE_URL")]
        database_url: SecretUrl,
        /// A private CA for TLS to PostgreSQL (as the server's `--tls-ca-file`).
        #[arg(long, env = "PAYONCE_TLS_CA_FILE")]
        tls_ca_file: Option<PathBuf>,
    },
    /// The dev build's subcommands (`src/dev/args.rs`).
    #[command(flatten)]
    Dev(crate::dev::args::Command),
}

/// The provider sweep's background job (`src/ops/sweep.rs`).
#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// How often the provider sweep runs (0 disables it): each round compares the payments
    /// the provider lists for the last `--sweep-window-secs` with the store, at most 1,000
    /// of them (a longer list goes on the next round). The first round runs one interval
    /// after the start.
    #[arg(long, env = "PAYONCE_SWEEP_INTERVAL_SECS", default_value_t = 3600)]
    pub sweep_interval_secs: u64,
    /// How far back each round of the provider sweep looks.
    #[arg(long, env = "PAYONCE_SWEEP_WINDOW_SECS", default_value_t = 2 * 86_400,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sweep_window_secs: u64,
}

impl SweepArgs {
    /// The job's period and window; `None`: off.
    pub(crate) fn job(&self) -> Option<(Duration, Duration)> {
        (self.sweep_interval_secs > 0).then(|| {
            (
                Duration::from_secs(self.sweep_interval_secs),
                Duration::from_secs(self.sweep_window_secs),
            )
        })
    }
}

/// Options of the API server.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// API listen address (port 0 picks a free port).
    #[arg(long, env = "PAYONCE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Which payment provider `--provider-url` is: `mock` (crates/mock-provider) or `stripe`
    /// (PaymentIntents; docs/providers.md). Default `mock` with `--dev`; required without it.
    #[arg(long, env = "PAYONCE_PROVIDER", value_enum)]
    pub provider: Option<crate::provider::ProviderKind>,
    /// The payment provider's base URL (`https://…`; `http://…` only to a loopback address
    /// or with `--allow-plaintext provider`). Required outside `--dev` for `mock`; for
    /// `stripe` it defaults to https://api.stripe.com. No credentials in it
    /// (`--provider-api-key-file`, `--stripe-secret-key-file`).
    #[arg(long, env = "PAYONCE_PROVIDER_URL")]
    pub provider_url: Option<SecretUrl>,
    /// `sqlite://PATH` (created if missing) or `postgres://...` (TLS with
    /// `?sslmode=verify-full`, CA with `&sslrootcert=PATH`; a weaker `sslmode` needs
    /// `--allow-plaintext database` outside `--dev`). Required outside `--dev`; with it the
    /// default is `sqlite://.data/payonce.db`.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<SecretUrl>,
    /// What a start does about the database schema: `auto` applies the migrations this
    /// binary has; `check` refuses to start until `payonce-server migrate` has brought the
    /// schema to this binary's version (or a newer one declared compatible with it); `off`
    /// neither migrates nor checks. Default `auto` with `--dev`, `check` without.
    #[arg(long, env = "PAYONCE_MIGRATE", value_enum)]
    pub migrate: Option<crate::store::MigrateMode>,
    /// Serve this directory's files for paths no API route claims (the demo page).
    #[arg(long)]
    pub static_dir: Option<PathBuf>,
    /// Redis fast path (`redis://HOST:PORT/DB`, `rediss://` for TLS): keys are claimed with `SET NX` before the
    /// database claim and final answers cached for replays. The database stays the guard;
    /// an unreachable Redis only degrades to the database path.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<SecretUrl>,
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
    /// Session tokens (`src/auth/session.rs`).
    #[command(flatten)]
    pub sessions: SessionArgs,
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
    pub webhook_secret: Option<Secret>,
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
    /// tell. (The outbox worker drives abandoned attempts sooner; see `src/ops/jobs/mod.rs`.)
    #[arg(long, env = "PAYONCE_RECONCILE_AFTER_MS", default_value_t = 120_000)]
    pub reconcile_after_ms: u64,
    /// How long audit rows (and handled webhook events) are kept: the card dispute window.
    #[arg(long, default_value_t = 180)]
    pub audit_retention_days: u64,
    /// How long an attempt may wait for the customer's action (3-D Secure) from its claim.
    /// Past it the provider is asked to cancel the payment and the attempt ends `expired`
    /// (402 `ACTION_EXPIRED`): stock and the order are released, the next Pay uses a new
    /// key. If the provider does not cancel it, the attempt is flagged for review.
    #[arg(long, env = "PAYONCE_ACTION_DEADLINE_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub action_deadline_secs: u64,
    /// The catalog (SKUs, names, prices, currency, stock, coupons) as a JSON file:
    /// `{"items": [{"sku", "name", "unitPrice", "currency", "stock"}], "coupons": [{"code",
    /// "percentOff"}]}`. Default: the built-in demo catalog. A bad file stops the start.
    #[arg(long, env = "PAYONCE_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Bearer token `GET /metrics` requires (`Authorization: Bearer <token>`). Unset: the
    /// endpoint is open; keep it off the public path then (docs/deploy.md).
    #[arg(long, env = "PAYONCE_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<Secret>,
    /// The provider sweep's background job ([`SweepArgs`]).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// A file holding the operator token the operator API (`/admin/…`) requires
    /// (`Authorization: Bearer <token>`, at least 32 bytes; docs/operating.md). Unset: every
    /// `/admin/` route answers 401. A customer's session or JWT never reaches it (403).
    #[arg(long, env = "PAYONCE_OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<PathBuf>,
    /// Timeouts and limits of the HTTP edge (`src/server.rs`).
    #[command(flatten)]
    pub edge: EdgeArgs,
    /// JWT authentication (`src/auth/jwt.rs`).
    #[command(flatten)]
    pub jwt: JwtArgs,
    /// The provider's credentials and plain-text links.
    #[command(flatten)]
    pub links: LinkArgs,
    /// Pages on other origins that may call the API (`src/http/cors.rs`).
    #[command(flatten)]
    pub cors: crate::http::cors::CorsArgs,
    /// The dev build's flags (`--dev`, the embedded provider's, `--failpoint`).
    #[command(flatten)]
    pub dev: crate::dev::args::DevArgs,
    /// Where receipts go (`src/mailer/`).
    #[command(flatten)]
    pub mail: crate::mailer::MailArgs,
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
    /// Open API connections of one client address at most (at most `--max-connections`);
    /// a further one is closed at once. IPv6 clients count by their /64 (one host usually
    /// holds a whole /64). Default: an eighth of `--max-connections`, so filling every slot
    /// takes eight addresses, and one busy NAT still gets 128 of the default 1,024. Behind
    /// a proxy every client has the proxy's address: raise it to `--max-connections` there
    /// and cap per client at the proxy.
    #[arg(long, env = "PAYONCE_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: Option<usize>,
    /// Longest life of a kept-alive connection: past it the connection's next answer
    /// carries `Connection: close` and an idle one is closed. Each request head restarts
    /// the header timeout, so without it a client sending a small request now and then
    /// would hold its connection for ever.
    #[arg(long, env = "PAYONCE_CONNECTION_MAX_AGE_MS", default_value_t = 120_000)]
    pub connection_max_age_ms: u64,
    /// Requests answered on one connection at most; the last answer carries
    /// `Connection: close`.
    #[arg(
        long,
        env = "PAYONCE_MAX_REQUESTS_PER_CONNECTION",
        default_value_t = 1_000
    )]
    pub max_requests_per_connection: u64,
    /// Time a client has to take an answer once the network stops accepting it (the
    /// client is not reading); past it the connection is closed.
    #[arg(long, env = "PAYONCE_WRITE_TIMEOUT_MS", default_value_t = 10_000)]
    pub write_timeout_ms: u64,
}

/// The links to the provider, the database and Redis: the provider's credentials, and which
/// links may run without verified TLS outside `--dev` ([`link_problems`]).
#[derive(Debug, Clone, Args)]
pub struct LinkArgs {
    /// File holding the provider's API key (surrounding whitespace ignored). It is sent on
    /// every provider request as `Authorization: Bearer <key>`.
    #[arg(
        long,
        env = "PAYONCE_PROVIDER_API_KEY_FILE",
        conflicts_with = "provider_api_key"
    )]
    pub provider_api_key_file: Option<PathBuf>,
    /// The provider's API key itself, as `--provider-api-key-file` (prefer the file or the
    /// environment: a flag's value shows in the process list).
    #[arg(long, env = "PAYONCE_PROVIDER_API_KEY", hide_env_values = true)]
    pub provider_api_key: Option<Secret>,
    /// File holding Stripe's secret key (`sk_test_…`, `sk_live_…` or a restricted `rk_…`;
    /// surrounding whitespace ignored), with `--provider stripe`. Sent as a Bearer token.
    #[arg(
        long,
        env = "PAYONCE_STRIPE_SECRET_KEY_FILE",
        conflicts_with = "stripe_secret_key"
    )]
    pub stripe_secret_key_file: Option<PathBuf>,
    /// Stripe's secret key itself, as `--stripe-secret-key-file` (prefer the file or the
    /// environment: a flag's value shows in the process list).
    #[arg(long, env = "PAYONCE_STRIPE_SECRET_KEY", hide_env_values = true)]
    pub stripe_secret_key: Option<Secret>,
    /// File holding the signing secret of Stripe's webhook endpoint (`whsec_…`).
    #[arg(
        long,
        env = "PAYONCE_STRIPE_WEBHOOK_SECRET_FILE",
        conflicts_with = "stripe_webhook_secret"
    )]
    pub stripe_webhook_secret_file: Option<PathBuf>,
    /// Stripe's webhook signing secret itself, as `--stripe-webhook-secret-file`.
    #[arg(long, env = "PAYONCE_STRIPE_WEBHOOK_SECRET", hide_env_values = true)]
    pub stripe_webhook_secret: Option<Secret>,
    /// Outside `--dev`, let this link run without verified TLS (repeatable, or a comma
    /// list): `provider` (`http://` to a non-loopback host), `database` (PostgreSQL
    /// `sslmode` other than `verify-full`), `redis` (`redis://` to a non-loopback host, or
    /// `rediss://…#insecure`).
    #[arg(
        long = "allow-plaintext",
        env = "PAYONCE_ALLOW_PLAINTEXT",
        value_delimiter = ',',
        value_name = "LINK"
    )]
    pub allow_plaintext: Vec<Link>,
    /// Outside `--dev`, let `--provider stripe` run with a test-mode key (`sk_test_…`,
    /// `rk_test_…`): its payments move no money, so a production start refuses it unless
    /// this says the deployment is a test one (a staging server).
    #[arg(long, env = "PAYONCE_ALLOW_TEST_MODE")]
    pub allow_test_mode: bool,
}

/// A link `--allow-plaintext` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Link {
    /// `--provider-url`.
    Provider,
    /// `--database-url`.
    Database,
    /// `--redis-url`.
    Redis,
}

/// The server's runtime settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) dev: bool,
    /// Leases, retention and the in-progress wait, from the flags.
    pub(crate) policy: payonce_rules::Policy,
    pub(crate) provider_timeout: Duration,
    pub(crate) retry_after_secs: u64,
    /// Session tokens; `None`: `--no-session-tokens`.
    pub(crate) sessions: Option<std::sync::Arc<crate::auth::session::Sessions>>,
    /// How long a finished key is kept (and so replays): announced in
    /// `Idempotency-Key-Retention`.
    pub(crate) key_retention: Duration,
    pub(crate) webhook_secret: Secret,
    /// Period of the background jobs; `None`: off.
    pub(crate) jobs_interval: Option<Duration>,
    /// The Redis fast path, if configured (URL already validated).
    pub(crate) redis_url: Option<SecretUrl>,
    pub(crate) redis_timeout: Duration,
    /// The `--tls-ca-file` certificates (PEM), checked.
    pub(crate) tls_ca: Option<Vec<u8>>,
    pub(crate) replay_cache_entries: usize,
    pub(crate) rates: Vec<(payonce_rules::policy::Bucket, Option<governor::Quota>)>,
    pub(crate) failpoints: Vec<crate::faults::Failpoint>,
    /// A broken variant of the pay machine (`--flaw`, dev builds with `--dev` only).
    pub(crate) flaw: Option<payonce_rules::pay::Flaw>,
    /// The `--catalog` file, checked; `None`: the built-in catalog.
    pub(crate) catalog: Option<crate::catalog::CatalogSource>,
    pub(crate) edge: Edge,
    /// What the start does about the schema (`--migrate`).
    pub(crate) migrate: crate::store::MigrateMode,
    /// Bearer JWT verification, when keys are configured.
    pub(crate) jwt: Option<std::sync::Arc<crate::auth::jwt::JwtVerifier>>,
    /// What `GET /metrics` requires, if anything (never empty).
    pub(crate) metrics_token: Option<Secret>,
    /// The operator API's token (`--operator-token-file`); `None`: `/admin/` is closed.
    pub(crate) operator_token: Option<Secret>,
    /// The provider's API key (`--provider-api-key-file`, or Stripe's secret key), sent as
    /// a Bearer token.
    pub(crate) provider_api_key: Option<Secret>,
    /// Which provider `--provider-url` is.
    pub(crate) provider: crate::provider::ProviderKind,
    /// Stripe's webhook signing secret (`--stripe-webhook-secret-file`).
    pub(crate) stripe_webhook_secret: Option<Secret>,
    /// Stripe's mode, from its key (`None` with the mock provider).
    pub(crate) stripe_mode: Option<crate::provider::StripeMode>,
    /// The `--cors-origin` grants, checked.
    pub(crate) cors: crate::http::cors::Cors,
    /// Where receipts go (`--mailer`), checked.
    pub(crate) mailer: crate::mailer::Mailer,
}

/// [`EdgeArgs`], checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edge {
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_peer: usize,
    pub(crate) write_timeout: Duration,
    pub(crate) lifetime: Lifetime,
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
        let per_peer = e
            .max_connections_per_peer
            .unwrap_or((e.max_connections / 8).max(1));
        let zero = [
            e.header_timeout_ms,
            e.body_timeout_ms,
            e.write_timeout_ms,
            e.connection_max_age_ms,
            e.max_requests_per_connection,
        ];
        if zero.contains(&0) || e.max_connections == 0 || per_peer == 0 {
            return Err(ConfigError::ZeroEdgeLimit);
        }
        Ok(Self {
            header_timeout: Duration::from_millis(e.header_timeout_ms),
            body_timeout: Duration::from_millis(e.body_timeout_ms),
            request_timeout: Duration::from_millis(e.request_timeout_ms),
            max_connections: e.max_connections,
            max_connections_per_peer: per_peer.min(e.max_connections),
            write_timeout: Duration::from_millis(e.write_timeout_ms),
            lifetime: Lifetime {
                max_age: Duration::from_millis(e.connection_max_age_ms),
                max_requests: e.max_requests_per_connection,
            },
        })
    }
}

/// `--connection-max-age-ms` and `--max-requests-per-connection`. hyper's header timeout
/// restarts at each request head, so a client sending a small request every few seconds
/// would otherwise hold its connection (and its permit) for ever: two addresses with 512
/// such connections each held all 1,024 permits and `/healthz` got no answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lifetime {
    pub(crate) max_age: Duration,
    pub(crate) max_requests: u64,
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
    #[error("--session-secret must be at least 16 bytes")]
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
    RedisUrl(#[source] redis::RedisError),
    /// The `--tls-ca-file` cannot be read.
    #[error("--tls-ca-file {}: {source}", path.display())]
    TlsCa {
        /// The file.
        path: std::path::PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The `--tls-ca-file` holds no PEM certificate.
    #[error("--tls-ca-file {}: holds no PEM certificate", .0.display())]
    TlsCaNoPem(std::path::PathBuf),
    /// The `--catalog` file cannot be read, is not valid JSON, or has a bad entry.
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
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
    /// The provider's API key cannot be read or is not a header value.
    #[error("{0}")]
    ProviderApiKey(String),
    /// The `--operator-token-file` cannot be read, or its token is too short.
    #[error("{0}")]
    OperatorToken(String),
    /// A `--cors-origin` that no browser would send.
    #[error("{0}")]
    Cors(String),
    /// A zero timeout or cap would refuse every client.
    #[error("--header-timeout-ms, --body-timeout-ms, --write-timeout-ms, --max-connections, --max-connections-per-peer, --connection-max-age-ms and --max-requests-per-connection must be > 0")]
    ZeroEdgeLimit,
}

/// The database of a `--dev` start without `--database-url`. Outside `--dev` there is no
/// default: two instances that each fell back to a file of their own would keep two key
/// stores, and a retry routed to the other one would be a new key there.
pub const DEV_DATABASE_URL: &str = "sqlite://.data/payonce.db";

impl ServerArgs {
    /// `--database-url`, or [`DEV_DATABASE_URL`] (a start outside `--dev` refuses its
    /// absence: [`production_problems`]).
    pub fn database(&self) -> &str {
        self.database_url.as_deref().unwrap_or(DEV_DATABASE_URL)
    }
}

/// Shortest session and webhook secret outside `--dev`: 256 bits, the HMAC-SHA256 key size.
pub const MIN_SECRET: usize = 32;

/// Every problem of a start outside `--dev`, one line each (empty: safe to start). The
/// embedded mock provider runs only in dev, so a provider must be named; the webhook secret
/// must be explicit and long enough that nobody can guess or brute-force it (the session
/// secrets: `src/auth/session.rs`).
fn production_problems(args: &ServerArgs) -> Vec<String> {
    use crate::provider::ProviderKind;
    let mut problems = Vec::new();
    if args.database_url.is_none() {
        problems.push(
            "--database-url (DATABASE_URL) is required without --dev: sqlite://PATH or \
             postgres://… (instances that share keys must name the same database)"
                .to_owned(),
        );
    }
    if args.provider.is_none() {
        problems.push(
            "--provider (PAYONCE_PROVIDER) is required without --dev: mock or stripe".to_owned(),
        );
    }
    if args.provider != Some(ProviderKind::Stripe) && args.provider_url.is_none() {
        problems.push(
            "--provider-url (PAYONCE_PROVIDER_URL) is required without --dev: the mock provider \
             runs only in a dev build, with --dev or as `mock-provider`"
                .to_owned(),
        );
    }
    if args.provider == Some(ProviderKind::Stripe) {
        let l = &args.links;
        if l.stripe_secret_key_file.is_none() && l.stripe_secret_key.is_none() {
            problems.push(
                "--stripe-secret-key-file (PAYONCE_STRIPE_SECRET_KEY_FILE) or \
                 PAYONCE_STRIPE_SECRET_KEY is required with --provider stripe"
                    .to_owned(),
            );
        }
        if l.stripe_webhook_secret_file.is_none() && l.stripe_webhook_secret.is_none() {
            problems.push(
                "--stripe-webhook-secret-file (PAYONCE_STRIPE_WEBHOOK_SECRET_FILE) or \
                 PAYONCE_STRIPE_WEBHOOK_SECRET is required with --provider stripe"
                    .to_owned(),
            );
        }
    }
    let (flag, env) = ("--webhook-secret", "PAYONCE_WEBHOOK_SECRET");
    // The mock's events are signed with it; Stripe's with its own secret (above).
    if args.provider != Some(ProviderKind::Stripe) {
        match args.webhook_secret.as_deref().map(str::len) {
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

/// Stripe's mode from its secret `key`, and every problem of the Stripe key and webhook
/// secret as read (a file's too), one line each. A test-mode key takes test cards as money:
/// outside `--dev` it needs `--allow-test-mode`, and a key of neither mode is refused there.
/// A webhook secret anyone could guess lets anyone sign events: shorter than
/// [`MIN_SECRET`] outside `--dev`, or than what `signature::verify` checks with in dev, it
/// is refused. (Missing ones: [`production_problems`].)
fn stripe_problems(
    dev: bool,
    allow_test_mode: bool,
    key: Option<&str>,
    whsec: Option<&str>,
) -> (crate::provider::StripeMode, Vec<String>) {
    use crate::provider::StripeMode;
    let mut problems = Vec::new();
    let mode = key.and_then(StripeMode::of_key);
    if !dev {
        let flag = "--stripe-secret-key-file (PAYONCE_STRIPE_SECRET_KEY_FILE)";
        match mode {
            None if key.is_some() => problems.push(format!(
                "{flag}: not a Stripe secret key (sk_live_…, rk_live_…; sk_test_…, rk_test_… \
                 with --allow-test-mode)"
            )),
            Some(StripeMode::Test) if !allow_test_mode => problems.push(format!(
                "{flag} is a test-mode key: test cards would pay orders; use a live key \
                 (sk_live_…, rk_live_…), or say --allow-test-mode (PAYONCE_ALLOW_TEST_MODE)"
            )),
            _ => {}
        }
    }
    let least = if dev {
        payonce_protocol::signature::MIN_SECRET
    } else {
        MIN_SECRET
    };
    if let Some(n) = whsec.map(str::len).filter(|&n| n < least) {
        problems.push(format!(
            "--stripe-webhook-secret-file (PAYONCE_STRIPE_WEBHOOK_SECRET_FILE) is {n} bytes; \
             at least {least} are required (Stripe's whsec_… secrets are 38)"
        ));
    }
    // In dev an unnamed mode is an emulator's key (localstripe takes any sk_…): test.
    (mode.unwrap_or(StripeMode::Test), problems)
}

/// Every URL whose scheme this build cannot use, one line each, checked at start so a bad
/// deployment fails here rather than on its first request.
fn scheme_problems(args: &ServerArgs) -> Vec<String> {
    let check = |flag: &str, url: Option<&str>, schemes: &[&str], usage: &str| {
        let url = url.filter(|u| !schemes.iter().any(|s| u.starts_with(s)))?;
        Some(format!("{flag} scheme {:?}: use {usage}", scheme_of(url)))
    };
    let (db, redis) = (Some(args.database()), args.redis_url.as_deref());
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
    with_ca(args.database(), args.tls_ca_file.as_deref())
}

/// `db`, with `ca` as its `sslrootcert` when it is PostgreSQL and names none.
pub(crate) fn with_ca(db: &str, ca: Option<&std::path::Path>) -> String {
    match (ca, reqwest::Url::parse(db)) {
        (Some(ca), Ok(mut url)) if db.starts_with("postgres") && !db.contains("sslrootcert=") => {
            url.query_pairs_mut()
                .append_pair("sslrootcert", &ca.display().to_string());
            url.into()
        }
        _ => db.to_owned(),
    }
}

/// Every link that would carry credentials in its URL or run without verified TLS outside
/// `--dev` unless `--allow-plaintext` names it, one line each. A man in the middle of a
/// plain provider link can answer "succeeded" for any charge; of a database or Redis link,
/// read and change orders. Loopback never leaves the host, so the provider and Redis may use
/// it in plain text; PostgreSQL's `sslmode` is judged whatever the host, since only
/// `verify-full` checks that the server is the one named (and the default, `prefer`, falls
/// back to plain text without a word).
fn link_problems(args: &ServerArgs) -> Vec<String> {
    let allowed = |link| args.links.allow_plaintext.contains(&link);
    let mut problems = Vec::new();
    let parsed = |url: Option<&str>| url.and_then(|u| reqwest::Url::parse(u).ok());
    if let Some(u) = parsed(args.provider_url.as_deref()) {
        if !u.username().is_empty() || u.password().is_some() {
            problems.push(
                "--provider-url (PAYONCE_PROVIDER_URL) carries credentials, refused without \
                 --dev (they would be logged and sent as Basic auth): give the key with \
                 --provider-api-key-file (PAYONCE_PROVIDER_API_KEY_FILE)"
                    .to_owned(),
            );
        }
        if u.scheme() == "http" && !loopback(&u) && !allowed(Link::Provider) {
            problems.push(format!(
                "--provider-url (PAYONCE_PROVIDER_URL) is plain http:// to {}: use https://, \
                 or say --allow-plaintext provider",
                u.host_str().unwrap_or("?")
            ));
        }
    }
    let db = args.database();
    if db.starts_with("postgres") && !allowed(Link::Database) {
        if let Some(mode) = weak_sslmode(db) {
            problems.push(format!(
                "--database-url (DATABASE_URL) has {mode}: only sslmode=verify-full checks \
                 the server's certificate and name; use it, or say --allow-plaintext database"
            ));
        }
    }
    if let Some(u) = parsed(args.redis_url.as_deref()) {
        let plain = u.scheme() == "redis" && !loopback(&u);
        let unchecked = u.scheme() == "rediss" && u.fragment() == Some("insecure");
        if (plain || unchecked) && !allowed(Link::Redis) {
            let what = if plain {
                "plain redis://"
            } else {
                "rediss://…#insecure (no certificate check)"
            };
            problems.push(format!(
                "--redis-url (REDIS_URL) is {what} to {}: use rediss://, or say \
                 --allow-plaintext redis",
                u.host_str().unwrap_or("?")
            ));
        }
    }
    problems
}

/// Whether `url` names a loopback host (`localhost`, 127.0.0.0/8, `::1`).
fn loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `sslmode` of a PostgreSQL URL when it is weaker than `verify-full` (`None` also for
/// a Unix socket, which has no network to cross), as the driver itself reads the URL
/// (sqlx's `PgConnectOptions`): the URL's mode, `ssl-mode` being the same parameter and the
/// last one winning, else `PGSSLMODE`, else `prefer`. A check that read the query its own
/// way could be walked around (a second `sslmode`, the alias). A mode named more than once
/// is refused whatever the values, as a URL that says two things. A URL the driver cannot
/// read fails the start at its connect.
fn weak_sslmode(db: &str) -> Option<String> {
    use sqlx::postgres::{PgConnectOptions, PgSslMode};
    let url = reqwest::Url::parse(db).ok()?;
    let named: Vec<String> = url
        .query_pairs()
        .filter(|(k, _)| k == "sslmode" || k == "ssl-mode")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if named.len() > 1 {
        return Some(format!("{} (name it once)", named.join(" and ")));
    }
    let driver: PgConnectOptions = db.parse().ok()?;
    if driver.get_socket().is_some() || driver.get_host().starts_with('/') {
        return None;
    }
    let mode = match driver.get_ssl_mode() {
        PgSslMode::VerifyFull => return None,
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
    };
    Some(format!("sslmode={mode}"))
}

/// The provider's API key of `--provider-api-key-file` or `--provider-api-key`, trimmed.
fn provider_api_key(links: &LinkArgs) -> Result<Option<Secret>, ConfigError> {
    let flags = [
        "--provider-api-key-file",
        "--provider-api-key (PAYONCE_PROVIDER_API_KEY)",
    ];
    let (file, value) = (&links.provider_api_key_file, &links.provider_api_key);
    secret_of(flags, file.as_deref(), value.as_ref())
}

/// A secret of a `…-file` flag or of its value flag (`flags`: their names), trimmed; it
/// must be a header value (printable ASCII without spaces).
fn secret_of(
    [file_flag, value_flag]: [&str; 2],
    file: Option<&std::path::Path>,
    value: Option<&Secret>,
) -> Result<Option<Secret>, ConfigError> {
    let bad = |why: String| Err(ConfigError::ProviderApiKey(why));
    let (key, at) = match (file, value) {
        (Some(path), _) => match std::fs::read_to_string(path) {
            Ok(text) => (text, format!("{file_flag} {}", path.display())),
            Err(e) => return bad(format!("{file_flag} {}: {e}", path.display())),
        },
        (None, Some(key)) => (key.expose().to_owned(), value_flag.to_owned()),
        (None, None) => return Ok(None),
    };
    let key = key.trim();
    if key.is_empty() {
        return bad(format!("{at}: the key is empty"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return bad(format!(
            "{at}: the key must be printable ASCII without spaces (an HTTP header value)"
        ));
    }
    Ok(Some(Secret::from(key.to_owned())))
}

/// The operator token from `--operator-token-file` (trimmed), at least
/// [`OPERATOR_TOKEN_MIN`] bytes of printable ASCII.
fn operator_token(file: Option<&std::path::Path>) -> Result<Option<Secret>, ConfigError> {
    let flags = ["--operator-token-file", "--operator-token-file"];
    let token = secret_of(flags, file, None).map_err(|e| match e {
        ConfigError::ProviderApiKey(why) => ConfigError::OperatorToken(why),
        other => other,
    })?;
    match token {
        Some(t) if t.expose().len() < OPERATOR_TOKEN_MIN => Err(ConfigError::OperatorToken(
            format!("--operator-token-file: the token must be at least {OPERATOR_TOKEN_MIN} bytes"),
        )),
        t => Ok(t),
    }
}

/// The shortest operator token accepted: it opens every order's history.
const OPERATOR_TOKEN_MIN: usize = 32;

/// The `--tls-ca-file` contents, if it holds at least one PEM certificate.
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    let pem = std::fs::read(path).map_err(|source| ConfigError::TlsCa {
        path: path.to_owned(),
        source,
    })?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(ConfigError::TlsCaNoPem(path.to_owned())),
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
            problems.extend(link_problems(args));
        }
        let j = &args.jwt;
        let jwt_keys = !j.hs256_secrets.is_empty() || !j.public_keys.is_empty() || j.jwks.is_some();
        use crate::auth::session::{SessionConfig, Sessions};
        let sessions = Sessions::from_args(&args.sessions, dev.dev, jwt_keys, MIN_SECRET);
        let sessions = match sessions {
            Ok(SessionConfig::On(s)) => Some(std::sync::Arc::new(s)),
            Ok(SessionConfig::Off) => None,
            Ok(SessionConfig::WeakDevSecret) => return Err(ConfigError::WeakSecret),
            Err(lines) => {
                problems.extend(lines);
                None
            }
        };
        let mailer = crate::mailer::Mailer::from_args(&args.mail, dev.dev, args.lease_ms);
        let mailer = mailer.map_err(|lines| problems.extend(lines)).ok();
        let (false, Some(mailer)) = (!problems.is_empty(), mailer) else {
            return Err(ConfigError::Unsafe(problems));
        };
        if args.lease_ms <= args.provider_timeout_ms {
            return Err(ConfigError::LeaseTooShort {
                lease: args.lease_ms,
                timeout: args.provider_timeout_ms,
            });
        }
        // Outside dev `production_problems` has made sure it is set; in dev the mock
        // provider's own default pairs with the embedded provider.
        let webhook_secret = args
            .webhook_secret
            .clone()
            .or(dev
                .default_webhook_secret
                .map(|s| Secret::from(s.to_owned())))
            .unwrap_or_default();
        // Outside dev `production_problems` asked for more; in dev too, a secret the
        // signature check would refuse makes every mock event fail: say so at start.
        let least = payonce_protocol::signature::MIN_SECRET;
        if args.provider != Some(crate::provider::ProviderKind::Stripe)
            && webhook_secret.len() < least
        {
            return Err(ConfigError::Unsafe(vec![format!(
                "--webhook-secret (PAYONCE_WEBHOOK_SECRET) is {} bytes; at least {least} are required",
                webhook_secret.len()
            )]));
        }
        let catalog = args.catalog.as_deref().map(crate::catalog::load_file);
        let catalog = catalog.transpose()?;
        let tls_ca = args.tls_ca_file.as_deref().map(read_ca).transpose()?;
        let edge = Edge::from_args(args)?;
        let jwt = crate::auth::jwt::JwtVerifier::new(&args.jwt).map_err(ConfigError::Jwt)?;
        let provider = args.provider.unwrap_or(crate::provider::ProviderKind::Mock);
        let l = &args.links;
        let (stripe_key, stripe_webhook_secret) = (
            secret_of(
                [
                    "--stripe-secret-key-file",
                    "PAYONCE_STRIPE_SECRET_KEY (--stripe-secret-key)",
                ],
                l.stripe_secret_key_file.as_deref(),
                l.stripe_secret_key.as_ref(),
            )?,
            secret_of(
                [
                    "--stripe-webhook-secret-file",
                    "PAYONCE_STRIPE_WEBHOOK_SECRET (--stripe-webhook-secret)",
                ],
                l.stripe_webhook_secret_file.as_deref(),
                l.stripe_webhook_secret.as_ref(),
            )?,
        );
        let stripe_mode = match provider {
            crate::provider::ProviderKind::Stripe => {
                let (key, whsec) = (stripe_key.as_deref(), stripe_webhook_secret.as_deref());
                let (mode, problems) = stripe_problems(dev.dev, l.allow_test_mode, key, whsec);
                if !problems.is_empty() {
                    return Err(ConfigError::Unsafe(problems));
                }
                Some(mode)
            }
            crate::provider::ProviderKind::Mock => None,
        };
        let provider_api_key = match provider {
            crate::provider::ProviderKind::Stripe => stripe_key,
            crate::provider::ProviderKind::Mock => provider_api_key(&args.links)?,
        };
        let cors = crate::http::cors::Cors::from_args(&args.cors).map_err(ConfigError::Cors)?;
        let migrate = args.migrate.unwrap_or(match dev.dev {
            true => crate::store::MigrateMode::Auto,
            false => crate::store::MigrateMode::Check,
        });
        Ok(Self {
            mailer,
            cors,
            edge,
            migrate,
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
                Duration::from_secs(args.action_deadline_secs),
                Duration::from_millis(args.in_progress_wait_ms),
            ),
            provider_timeout: Duration::from_millis(args.provider_timeout_ms),
            retry_after_secs: args.retry_after_secs,
            sessions,
            key_retention: Duration::from_secs(args.key_retention_secs),
            webhook_secret,
            jobs_interval: (args.jobs_interval_ms > 0)
                .then(|| Duration::from_millis(args.jobs_interval_ms)),
            failpoints: dev.failpoints,
            flaw: dev.flaw,
            catalog,
            metrics_token: args.metrics_token.clone().filter(|t| !t.is_empty()),
            operator_token: operator_token(args.operator_token_file.as_deref())?,
            provider_api_key,
            provider,
            stripe_webhook_secret,
            stripe_mode,
        })
    }

    /// The provider's base URL when `--provider-url` is not given: Stripe's API origin for
    /// `stripe`; `None` for `mock` (the dev build embeds one, `src/dev/mod.rs`).
    pub(crate) fn default_provider_url(&self) -> Option<&'static str> {
        match self.provider {
            crate::provider::ProviderKind::Stripe => Some(crate::provider::STRIPE_API),
            crate::provider::ProviderKind::Mock => None,
        }
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

    /// `extra` as the command line, naming the mock provider and a database unless `extra`
    /// names them.
    fn args(extra: &[&str]) -> ServerArgs {
        let mock: &[&str] = match extra.contains(&"--provider") {
            true => &[],
            false => &["--provider", "mock"],
        };
        let db: &[&str] = match extra.contains(&"--database-url") {
            true => &[],
            false => &["--database-url", "sqlite://:memory:"],
        };
        let mailer: &[&str] = match extra.contains(&"--mailer") {
            true => &[],
            false => &["--mailer", "none"],
        };
        raw_args(&[mock, db, mailer, extra].concat())
    }

    fn raw_args(extra: &[&str]) -> ServerArgs {
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

    /// Migrating is a step of its own outside dev (`payonce-server migrate`): a start only
    /// checks the schema unless told otherwise; dev migrates as it starts.
    #[test]
    fn a_start_outside_dev_checks_the_schema_and_dev_migrates_it() {
        use crate::store::MigrateMode;
        let migrate = |a: &ServerArgs| Config::from_args(a).expect("a valid start").migrate;
        assert_eq!(migrate(&prod(&[])), MigrateMode::Check);
        assert_eq!(migrate(&prod(&["--migrate", "auto"])), MigrateMode::Auto);
        assert_eq!(migrate(&raw_args(&["--dev"])), MigrateMode::Auto);
        assert_eq!(
            migrate(&raw_args(&["--dev", "--migrate", "check"])),
            MigrateMode::Check
        );
    }

    /// Outside dev an operator names the provider; Stripe needs its secret key and its
    /// webhook secret (not the mock's `--webhook-secret`), and defaults to Stripe's origin.
    #[test]
    fn the_provider_is_named_outside_dev_and_stripe_needs_its_secrets() {
        let unnamed = raw_args(PROD);
        assert!(problems(&unnamed)
            .iter()
            .any(|p| p.starts_with("--provider (")));
        let stripe = args(&["--provider", "stripe", "--session-secret", &"s".repeat(32)]);
        let lines = problems(&stripe);
        assert!(lines
            .iter()
            .any(|p| p.starts_with("--stripe-secret-key-file")));
        assert!(lines
            .iter()
            .any(|p| p.starts_with("--stripe-webhook-secret-file")));
        assert!(
            !lines.iter().any(|p| p.contains("--provider-url")),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|p| p.contains("--webhook-secret (")),
            "{lines:?}"
        );
        let key = "sk_live_0123456789abcdefghij";
        let full = args(&[
            "--provider",
            "stripe",
            "--session-secret",
            &"s".repeat(32),
            "--stripe-secret-key",
            key,
            "--stripe-webhook-secret",
            "whsec_0123456789abcdef0123456789abcdef",
        ]);
        let c = Config::from_args(&full).expect("a Stripe start");
        assert_eq!(c.default_provider_url(), Some("https://api.stripe.com"));
        assert_eq!(c.provider_api_key.as_deref(), Some(key));
        assert!(
            !format!("{c:?}{full:?}").contains(key),
            "the key in a Debug output"
        );
    }

    /// A Stripe start outside `--dev` with `key`, `whsec` and `extra` flags.
    fn stripe(key: &str, whsec: &str, extra: &[&str]) -> ServerArgs {
        let session = "s".repeat(32);
        let flags = ["--provider", "stripe", "--session-secret", &session];
        let secrets = ["--stripe-secret-key", key, "--stripe-webhook-secret", whsec];
        args(&[&flags[..], &secrets, extra].concat())
    }

    /// Outside `--dev` a test-mode key needs `--allow-test-mode` and a key of no mode is
    /// refused; the mode is read from the key. A short Stripe webhook secret is refused in
    /// dev too (below what the signature check takes).
    #[test]
    fn a_stripe_test_key_needs_allow_test_mode_and_a_short_webhook_secret_is_refused() {
        use crate::provider::StripeMode;
        let whsec = "whsec_0123456789abcdef0123456789abcdef";
        for key in ["sk_test_0123456789", "rk_test_0123456789"] {
            let p = problems(&stripe(key, whsec, &[]));
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(p[0].contains("test-mode") && !p[0].contains(key), "{p:?}");
            let c = Config::from_args(&stripe(key, whsec, &["--allow-test-mode"])).unwrap();
            assert_eq!(c.stripe_mode, Some(StripeMode::Test));
            let c = Config::from_args(&stripe(key, whsec, &["--dev"])).unwrap();
            assert_eq!(c.stripe_mode, Some(StripeMode::Test));
        }
        for key in ["sk_live_0123456789", "rk_live_0123456789"] {
            let c = Config::from_args(&stripe(key, whsec, &[])).unwrap();
            assert_eq!(c.stripe_mode, Some(StripeMode::Live));
        }
        let p = problems(&stripe("pk_live_0123456789", whsec, &["--allow-test-mode"]));
        assert!(
            p.len() == 1 && p[0].contains("not a Stripe secret key"),
            "{p:?}"
        );
        let short = &whsec[..MIN_SECRET - 1];
        let p = problems(&stripe("sk_live_0123456789", short, &[]));
        assert!(
            p.len() == 1 && p[0].starts_with("--stripe-webhook-secret"),
            "{p:?}"
        );
        assert!(Config::from_args(&stripe("sk_test_1", short, &["--dev"])).is_ok());
        let p = problems(&stripe("sk_test_1", "whsec_", &["--dev"]));
        assert!(
            p.len() == 1 && p[0].starts_with("--stripe-webhook-secret"),
            "{p:?}"
        );
        // The mock's secret too, in dev: one the signature check refuses stops the start.
        let p = problems(&args(&["--dev", "--webhook-secret", "short"]));
        assert!(
            p.len() == 1 && p[0].starts_with("--webhook-secret"),
            "{p:?}"
        );
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
    fn the_per_peer_cap_is_an_eighth_of_the_connections_unless_given() {
        let cap = |extra: &[&str]| {
            let c = Config::from_args(&prod(extra)).expect("config");
            c.edge.max_connections_per_peer
        };
        assert_eq!(cap(&[]), 128);
        assert_eq!(cap(&["--max-connections", "64"]), 8);
        assert_eq!(cap(&["--max-connections", "4"]), 1);
        assert_eq!(cap(&["--max-connections-per-peer", "1024"]), 1024);
        assert_eq!(
            cap(&["--max-connections-per-peer", "5000"]),
            1024,
            "at most the total"
        );
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

    /// One problem line per plain-text link outside dev, none with `--allow-plaintext` for
    /// it, none on loopback (but for PostgreSQL, whose `sslmode` is judged on any host).
    #[test]
    fn plain_text_links_are_refused_without_dev_unless_allowed() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            // (flag, value, the line's start when refused)
            (
                "--provider-url",
                "http://psp.example",
                Some("--provider-url"),
            ),
            (
                "--provider-url",
                "http://10.0.0.7:8081",
                Some("--provider-url"),
            ),
            ("--provider-url", "http://127.0.0.1:8081", None),
            ("--provider-url", "http://localhost:8081", None),
            ("--provider-url", "http://[::1]:8081", None),
            ("--provider-url", "https://psp.example", None),
            (
                "--database-url",
                "postgres://db/pay",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgres://127.0.0.1/pay",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgres://db/pay?sslmode=prefer",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgres://db/pay?sslmode=require",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgres://db/pay?sslmode=verify-ca",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgresql://db/pay?sslmode=disable",
                Some("--database-url"),
            ),
            (
                "--database-url",
                "postgres://db/pay?sslmode=verify-full",
                None,
            ),
            (
                "--database-url",
                "postgres:///pay?host=/var/run/postgresql",
                None,
            ),
            ("--database-url", "sqlite://.data/payonce.db", None),
            ("--redis-url", "redis://cache:6379/0", Some("--redis-url")),
            (
                "--redis-url",
                "rediss://cache:6380/0#insecure",
                Some("--redis-url"),
            ),
            ("--redis-url", "redis://127.0.0.1:6379/0", None),
            ("--redis-url", "rediss://cache:6380/0", None),
            ("--redis-url", "unix:///run/redis.sock", None),
        ];
        // The production flags with `flag` set to `value` (a provider on https otherwise).
        let with = |flag: &str, value: &str, extra: &[&str]| {
            let provider: &[&str] = match flag {
                "--provider-url" => &[],
                _ => &["--provider-url", "https://psp.example"],
            };
            args(&[&PROD[2..], provider, &[flag, value], extra].concat())
        };
        for (flag, value, refused) in cases {
            let a = with(flag, value, &[]);
            let lines = link_problems(&a);
            match refused {
                Some(start) => {
                    assert_eq!(lines.len(), 1, "{flag} {value}: {lines:?}");
                    assert!(lines[0].starts_with(start), "{lines:?}");
                    let link = &flag[2..flag.find("-url").unwrap()];
                    let allowed = with(flag, value, &["--allow-plaintext", link]);
                    assert_eq!(link_problems(&allowed), Vec::<String>::new(), "{value}");
                    assert!(matches!(
                        Config::from_args(&a),
                        Err(ConfigError::Unsafe(p)) if p == lines
                    ));
                }
                None => assert_eq!(lines, Vec::<String>::new(), "{flag} {value}"),
            }
        }
        // Several links at once, one comma list allowing them; dev mode asks nothing.
        let all = [
            "--provider-url",
            "http://psp.example",
            "--database-url",
            "postgres://db/pay",
            "--redis-url",
            "redis://cache:6379/0",
        ];
        assert_eq!(link_problems(&args(&[&PROD[2..], &all].concat())).len(), 3);
        let allow = ["--allow-plaintext", "provider,database,redis"];
        let allowed = args(&[&PROD[2..], &all, &allow].concat());
        assert!(link_problems(&allowed).is_empty());
        assert!(Config::from_args(&args(&[&all[..], &["--dev"]].concat())).is_ok());
    }

    /// The driver reads every `sslmode`/`ssl-mode` pair and keeps the last: a URL naming a
    /// mode twice or through the alias is judged as the driver reads it (each refused one
    /// is shown weak by the driver itself), and a repeated one is refused.
    #[test]
    fn a_repeated_or_aliased_sslmode_cannot_walk_around_the_check() {
        use sqlx::postgres::{PgConnectOptions, PgSslMode};
        let refused = [
            "postgres://db/pay?sslmode=verify-full&sslmode=disable",
            "postgres://db/pay?sslmode=verify-full&ssl-mode=disable",
            "postgres://db/pay?ssl-mode=verify-full&sslmode=prefer",
            "postgres://db/pay?ssl%6Dode=verify-full&sslmode=require",
            "postgres://db/pay?ssl-mode=disable",
        ];
        for url in refused {
            let lines = link_problems(&prod(&["--database-url", url]));
            assert_eq!(lines.len(), 1, "{url}: {lines:?}");
            assert!(lines[0].starts_with("--database-url"), "{lines:?}");
            let driver: PgConnectOptions = url.parse().unwrap();
            assert!(driver.get_socket().is_none(), "{url}");
            let weak = !matches!(driver.get_ssl_mode(), PgSslMode::VerifyFull);
            assert!(weak, "{url}");
        }
        let twice = link_problems(&prod(&[
            "--database-url",
            "postgres://db/pay?sslmode=verify-full&ssl-mode=verify-full",
        ]));
        assert!(twice[0].contains("name it once"), "{twice:?}");
        let alias = link_problems(&prod(&["--database-url", refused[4]]));
        assert!(alias[0].contains("sslmode=disable"), "{alias:?}");
        // Accepted: verified TLS through the alias; a socket (the driver keeps the first
        // `host=/…` it reads, whatever host follows).
        for url in [
            "postgres://db/pay?ssl-mode=verify-full",
            "postgres://db/pay?host=db.example&host=/run/postgresql",
            "postgres://db/pay?host=/run/postgresql&host=db.example",
        ] {
            let lines = link_problems(&prod(&["--database-url", url]));
            assert_eq!(lines, Vec::<String>::new(), "{url}");
        }
    }

    #[test]
    fn credentials_in_the_provider_url_are_refused_without_dev() {
        let a = args(
            &[
                &PROD[2..],
                &["--provider-url", "https://sk_live_1:x@psp.example"],
            ]
            .concat(),
        );
        let p = problems(&a);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("--provider-url") && p[0].contains("--provider-api-key-file"));
        assert!(
            !p[0].contains("sk_live_1"),
            "the line never shows them: {p:?}"
        );
        let dev = args(&["--dev", "--provider-url", "https://sk_live_1:x@psp.example"]);
        assert!(Config::from_args(&dev).is_ok());
    }

    #[test]
    fn the_provider_api_key_comes_from_its_file_trimmed() {
        let dir = std::env::temp_dir().join(format!("payonce-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "sk_test_0123\n").unwrap();
        let path = file.to_str().unwrap();
        let c = Config::from_args(&prod(&["--provider-api-key-file", path])).unwrap();
        assert_eq!(c.provider_api_key.as_deref(), Some("sk_test_0123"));
        let c = Config::from_args(&prod(&["--provider-api-key", "sk_test_4567"])).unwrap();
        assert_eq!(c.provider_api_key.as_deref(), Some("sk_test_4567"));
        for bad in ["  \n", "sk test"] {
            std::fs::write(&file, bad).unwrap();
            let e = Config::from_args(&prod(&["--provider-api-key-file", path])).unwrap_err();
            assert!(
                matches!(&e, ConfigError::ProviderApiKey(m) if m.contains(path)),
                "{e}"
            );
        }
        let missing = prod(&["--provider-api-key-file", "/nonexistent/payonce-key"]);
        assert!(Config::from_args(&missing).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--no-session-tokens` with JWT keys needs no `--session-secret`; without it the secret
    /// stays required, and the flag makes no sense without JWTs or beside a secret.
    #[test]
    fn a_jwt_only_start_turns_session_tokens_off() {
        let jwt = [
            "--jwt-hs256-secret",
            "jwt-secret-0123456789abcdef0123456789",
            "--jwt-issuer",
            "https://id.example",
            "--jwt-audience",
            "payonce",
        ];
        let base = &PROD[..4]; // provider and webhook secret, no session secret
        let off = args(&[base, &jwt, &["--no-session-tokens"]].concat());
        let c = Config::from_args(&off).unwrap();
        assert!(c.sessions.is_none() && c.jwt.is_some());
        let p = problems(&args(&[base, &jwt].concat()));
        assert!(
            p.len() == 1
                && p[0].starts_with("--session-secret")
                && p[0].contains("--no-session-tokens"),
            "{p:?}"
        );
        let p = problems(&args(&[base, &["--no-session-tokens"]].concat()));
        assert!(
            p.len() == 1 && p[0].starts_with("--no-session-tokens needs JWT keys"),
            "{p:?}"
        );
        let p = problems(&prod(&[&jwt[..], &["--no-session-tokens"]].concat()));
        assert!(
            p.len() == 1 && p[0].starts_with("--session-secret"),
            "{p:?}"
        );
        let p = problems(&prod(&["--session-max-lifetime-secs", "0"]));
        assert!(
            p.len() == 1 && p[0].starts_with("--session-max-lifetime-secs"),
            "{p:?}"
        );
    }

    #[test]
    fn several_session_secrets_each_need_32_bytes() {
        let old = "old-session-secret-0123456789abcdef";
        let two = args(&[&PROD[..4], &["--session-secret", &format!("{old},short")]].concat());
        let p = problems(&two);
        assert!(
            p.len() == 1 && p[0].starts_with("--session-secret #2"),
            "{p:?}"
        );
        let ok = prod(&["--session-secret", old]);
        assert!(Config::from_args(&ok).is_ok());
    }

    /// No secret of the flags or the config shows in their `Debug` (a `{:?}` in a log line
    /// or a panic message).
    #[test]
    fn debug_output_never_shows_a_secret() {
        let secrets = [
            "whsec_0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef",
            "metrics-token-0123456789",
            "jwt-secret-0123456789abcdef0123456789",
            "sk_live_provider_key_0123",
            "dbpassword123",
            "redispassword123",
        ];
        let a = args(&[
            "--provider-url",
            "https://psp.example",
            "--webhook-secret",
            secrets[0],
            "--session-secret",
            secrets[1],
            "--metrics-token",
            secrets[2],
            "--jwt-hs256-secret",
            secrets[3],
            "--jwt-issuer",
            "iss",
            "--jwt-audience",
            "aud",
            "--provider-api-key",
            secrets[4],
            "--database-url",
            "postgres://app:dbpassword123@db/pay?sslmode=verify-full",
            "--redis-url",
            "rediss://:redispassword123@cache:6380/0",
        ]);
        let c = Config::from_args(&a).unwrap();
        let cli = Cli::try_parse_from(["payonce-server", "--webhook-secret", secrets[0]]).unwrap();
        for shown in [format!("{a:?}"), format!("{c:?}"), format!("{cli:?}")] {
            for secret in secrets {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
        }
        assert!(
            format!("{a:?}").contains("psp.example"),
            "the rest still shows"
        );
    }

    /// Every long flag of the command line, its subcommands' included, with the environment
    /// variable it reads, if any.
    /// (A subcommand may reuse a name, `--addr`, with another variable: each is kept.)
    fn every_flag() -> std::collections::BTreeMap<String, Vec<Option<String>>> {
        type Flags = std::collections::BTreeMap<String, Vec<Option<String>>>;
        fn walk(cmd: &clap::Command, out: &mut Flags) {
            for arg in cmd.get_arguments() {
                if let Some(long) = arg.get_long() {
                    let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                    out.entry(format!("--{long}")).or_default().push(env);
                }
            }
            cmd.get_subcommands().for_each(|sub| walk(sub, out));
        }
        let mut out = std::collections::BTreeMap::new();
        walk(&<Cli as clap::CommandFactory>::command(), &mut out);
        out
    }

    /// The code spans of `doc` (the text between backticks).
    fn code_spans(doc: &str) -> Vec<&str> {
        doc.split('`').skip(1).step_by(2).collect()
    }

    /// What `doc` says about flags and variables that is not so, one line each: a flag or an
    /// environment variable that does not exist, a table row `| `--flag` | `VAR` or — |`
    /// or a "`--flag` (`VAR`)" giving another variable than the flag reads.
    fn doc_drift(doc: &str) -> Vec<String> {
        // Fenced blocks are shell sessions (cargo's flags among them); their server flags
        // are the ones the text and tables also name.
        let mut fenced = false;
        let doc: String = doc
            .lines()
            .filter(|l| {
                fenced ^= l.starts_with("```");
                !fenced && !l.starts_with("```")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let doc = doc.as_str();
        // Cargo's, clap's and the Stripe CLI's (`stripe listen --forward-to`), and the
        // variables only the test harness reads (docs/testing.md).
        const CARGO: &[&str] = &[
            "--no-default-features",
            "--features",
            "--release",
            "--help",
            "--forward-to",
        ];
        let not_flags = |s: &str| s == "PAYONCE_LOG" || s.starts_with("PAYONCE_TEST_");
        let flags = every_flag();
        let envs: std::collections::BTreeSet<&str> = flags
            .values()
            .flatten()
            .flatten()
            .map(String::as_str)
            .collect();
        let mut wrong = Vec::new();
        let is_env = |s: &str| {
            (s.starts_with("PAYONCE_") || s.ends_with("_URL"))
                && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        };
        for span in code_spans(doc) {
            for word in span.split([' ', '=', ',']) {
                let word = word.trim_end_matches([':', ')', '.', ';']);
                let known = flags.contains_key(word) || CARGO.contains(&word);
                if word.starts_with("--") && word.len() > 2 && !known {
                    wrong.push(format!("no flag {word} (in `{span}`)"));
                }
            }
            if is_env(span) && !not_flags(span) && !envs.contains(span) {
                wrong.push(format!("no flag reads {span}"));
            }
        }
        let said = |flag: &str, env: Option<&str>, wrong: &mut Vec<String>| {
            if let Some(real) = flags.get(flag) {
                if !real.iter().any(|r| r.as_deref() == env) {
                    wrong.push(format!("{flag} reads {real:?}, the doc says {env:?}"));
                }
            }
        };
        for line in doc.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if let [_, flag, env, ..] = cells[..] {
                let (flag, env) = (flag.trim_matches('`'), env.trim_matches('`'));
                if flag.starts_with("--") && (env == "—" || is_env(env)) {
                    said(flag, (env != "—").then_some(env), &mut wrong);
                }
            }
        }
        // A table row about a flag that reads a variable names it (a deployment sets either).
        for line in doc.lines().filter(|l| l.starts_with("| `--")) {
            let first = line.split('|').nth(1).unwrap_or("");
            let no_env = line.split('|').nth(2).is_some_and(|c| c.trim() == "—");
            for span in code_spans(first) {
                let flag = span.split(' ').next().unwrap_or("");
                let vars: Vec<&str> = flags
                    .get(flag)
                    .map(|v| v.iter().flatten().map(String::as_str).collect())
                    .unwrap_or_default();
                if !no_env && !vars.is_empty() && !vars.iter().any(|v| line.contains(v)) {
                    wrong.push(format!(
                        "the row of {flag} does not name {}",
                        vars.join(" or ")
                    ));
                }
            }
        }
        for (i, _) in doc.match_indices("` (`") {
            let flag = doc[..i].rsplit('`').next().unwrap_or("");
            let env = doc[i + 4..].split('`').next().unwrap_or("");
            if flag.starts_with("--") && !flag.contains(' ') && is_env(env) {
                said(flag, Some(env), &mut wrong);
            }
        }
        wrong
    }

    /// docs/deploy.md and the server README name only flags that exist, with the variables
    /// they really read (like the protocol crate's `tests/drift.rs` for wire names).
    #[test]
    fn the_deploy_guide_and_the_readme_name_real_flags_and_variables() {
        for (name, doc) in [
            ("docs/deploy.md", include_str!("../../../docs/deploy.md")),
            (
                "docs/providers.md",
                include_str!("../../../docs/providers.md"),
            ),
            (
                "docs/integrate.md",
                include_str!("../../../docs/integrate.md"),
            ),
            ("crates/server/README.md", include_str!("../README.md")),
            (
                "docs/operating.md",
                include_str!("../../../docs/operating.md"),
            ),
        ] {
            let wrong = doc_drift(doc);
            assert!(
                wrong.is_empty(),
                "{name} is wrong about the command line:\n{}",
                wrong.join("\n")
            );
        }
        // The check can fail: a flag that does not exist, a variable it does not read, a
        // table row claiming a variable for a flag that reads none.
        let bad = "`--provider-uri`; `--database-url` (`PAYONCE_DATABASE_URL`)\n\
                   | `--key-retention-secs` | `PAYONCE_KEY_RETENTION_SECS` | 86400 |\n\
                   | `--jwt-issuer` | required with any key |";
        assert_eq!(doc_drift(bad).len(), 6, "{:?}", doc_drift(bad));
        // Every flag a start outside --dev requires is in the guide's table.
        let guide = include_str!("../../../docs/deploy.md");
        for line in problems(&args(&[])) {
            let flag = line.split(' ').next().unwrap();
            assert!(
                guide.contains(&format!("| `{flag}` |")),
                "{flag} missing from deploy.md"
            );
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
        assert!(matches!(
            Config::from_args(&a),
            Err(ConfigError::TlsCaNoPem(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
