//! The command line: clap's definitions of every flag, subcommand and environment variable,
//! their defaults and help, and nothing else. What the values must be is `checks.rs` (the
//! start-up refusals); what they build is `build.rs` ([`super::Config`]).

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
    /// stopped server's database. `--key` or `--provider-id` instead of an order id prints
    /// the timeline of every order that key or provider object belongs to.
    Timeline {
        /// The order's id.
        #[arg(required_unless_present_any = ["key", "provider_id"],
              conflicts_with_all = ["key", "provider_id"])]
        order_id: Option<String>,
        /// An idempotency key (any user's: a key is unique per user, so it may name several
        /// orders).
        #[arg(long, conflicts_with = "provider_id")]
        key: Option<String>,
        /// A provider object's id (a charge, a PaymentIntent `pi_…`).
        #[arg(long)]
        provider_id: Option<String>,
        /// The database (as the server's `--database-url`).
        #[arg(long, env = "DATABASE_URL")]
        database_url: SecretUrl,
        /// A private CA for TLS to PostgreSQL (as the server's `--tls-ca-file`).
        #[arg(long, env = "PAYONCE_TLS_CA_FILE")]
        tls_ca_file: Option<PathBuf>,
    },
    /// The dev build's subcommands (`src/config/dev.rs`).
    #[command(flatten)]
    Dev(super::dev::Command),
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
    pub cors: CorsArgs,
    /// The dev build's flags (`--dev`, the embedded provider's, `--failpoint`).
    #[command(flatten)]
    pub dev: super::dev::DevArgs,
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
/// links may run without verified TLS outside `--dev` (`checks.rs`, `link_problems`).
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

/// The database of a `--dev` start without `--database-url`. Outside `--dev` there is no
/// default: two instances that each fell back to a file of their own would keep two key
/// stores, and a retry routed to the other one would be a new key there.
pub const DEV_DATABASE_URL: &str = "sqlite://.data/payonce.db";

impl ServerArgs {
    /// `--database-url`, or [`DEV_DATABASE_URL`] (a start outside `--dev` refuses its
    /// absence: `checks.rs`, `production_problems`).
    pub fn database(&self) -> &str {
        self.database_url.as_deref().unwrap_or(DEV_DATABASE_URL)
    }
}

/// The CORS flags (`src/http/cors.rs` builds the layer).
#[derive(Debug, Clone, Args)]
pub struct CorsArgs {
    /// An origin (`https://shop.example`, `http://127.0.0.1:5173`: scheme, host and port
    /// only) whose pages may call the API; repeatable, matched exactly. Without it (and
    /// without `--dev`) the server sends no CORS headers: only same-origin pages can call it.
    #[arg(
        long = "cors-origin",
        env = "PAYONCE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub origins: Vec<String>,
    /// Let those pages send cookies (`Access-Control-Allow-Credentials: true`), as the SDK
    /// does by default (`credentials: "include"`). Without it, give the SDK
    /// `credentials: "omit"` and authenticate with `Authorization`.
    #[arg(long = "cors-credentials", env = "PAYONCE_CORS_CREDENTIALS")]
    pub credentials: bool,
}
