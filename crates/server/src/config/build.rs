//! The runtime [`Config`] built from the flags once `checks.rs` passed them: the files they
//! name read (keys, tokens, the CA bundle, the catalog), the mailer, the session keys and the
//! JWT verifier built, the defaults of `--dev` applied. The state over it (store, provider,
//! Redis) is `src/state.rs`.

use super::checks::*;
use super::flags::{LinkArgs, ServerArgs};
use crate::secret::{Secret, SecretUrl};
use std::time::Duration;

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
    /// Dev mode only: an operator token minted at start, which `GET /dev/operator` hands to
    /// the demo (`src/dev/mod.rs`); always `None` in a production build
    /// (`src/config/dev_off.rs`).
    pub(crate) dev_operator_token: Option<Secret>,
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
    pub(crate) cors: Cors,
    /// Where receipts go (`--mailer`), checked.
    pub(crate) mailer: crate::mailer::Mailer,
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

impl Config {
    /// Validates the flags (`checks.rs`), then reads what they name and builds the settings.
    pub fn from_args(args: &ServerArgs) -> Result<Self, ConfigError> {
        let dev = super::dev::settings(&args.dev)?;
        let (sessions, mailer) = checked(args, dev.dev)?;
        lease_check(args)?;
        let webhook_secret = webhook_secret(args, dev.default_webhook_secret)?;
        let catalog = args.catalog.as_deref().map(crate::catalog::load_file);
        let catalog = catalog.transpose()?;
        let tls_ca = args.tls_ca_file.as_deref().map(read_ca).transpose()?;
        let edge = Edge::from_args(args)?;
        let jwt = crate::auth::jwt::JwtVerifier::new(&args.jwt).map_err(ConfigError::Jwt)?;
        let provider = args.provider.unwrap_or(crate::provider::ProviderKind::Mock);
        let stripe = stripe_secrets(args, provider, dev.dev)?;
        let provider_api_key = match provider {
            crate::provider::ProviderKind::Stripe => stripe.key,
            crate::provider::ProviderKind::Mock => provider_api_key(&args.links)?,
        };
        let cors = Cors::from_args(&args.cors).map_err(ConfigError::Cors)?;
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
            rates: rates(args),
            policy: policy(args),
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
            dev_operator_token: dev.operator_token,
            provider_api_key,
            provider,
            stripe_webhook_secret: stripe.webhook_secret,
            stripe_mode: stripe.mode,
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

/// The session keys and the mailer, once every start-up refusal of the flags has passed:
/// the problems of the URLs, of a start outside `--dev`, of the sessions and of the mailer
/// are all named at once.
type Checked = (
    Option<std::sync::Arc<crate::auth::session::Sessions>>,
    crate::mailer::Mailer,
);

/// See [`Checked`].
fn checked(args: &ServerArgs, dev: bool) -> Result<Checked, ConfigError> {
    let mut problems = scheme_problems(args);
    if !dev {
        problems.extend(production_problems(args));
        problems.extend(link_problems(args));
    }
    let j = &args.jwt;
    let jwt_keys = !j.hs256_secrets.is_empty() || !j.public_keys.is_empty() || j.jwks.is_some();
    use crate::auth::session::{SessionConfig, Sessions};
    let sessions = Sessions::from_args(&args.sessions, dev, jwt_keys, MIN_SECRET);
    let sessions = match sessions {
        Ok(SessionConfig::On(s)) => Some(std::sync::Arc::new(s)),
        Ok(SessionConfig::Off) => None,
        Ok(SessionConfig::WeakDevSecret) => return Err(ConfigError::WeakSecret),
        Err(lines) => {
            problems.extend(lines);
            None
        }
    };
    let mailer = crate::mailer::Mailer::from_args(&args.mail, dev, args.lease_ms);
    let mailer = mailer.map_err(|lines| problems.extend(lines)).ok();
    match (problems.is_empty(), mailer) {
        (true, Some(mailer)) => Ok((sessions, mailer)),
        _ => Err(ConfigError::Unsafe(problems)),
    }
}

/// Stripe's key, webhook secret and mode, read from their files or values and checked
/// (`stripe_problems`); with the mock provider only what was given, and no mode.
struct StripeSecrets {
    key: Option<Secret>,
    webhook_secret: Option<Secret>,
    mode: Option<crate::provider::StripeMode>,
}

/// See [`StripeSecrets`].
fn stripe_secrets(
    args: &ServerArgs,
    provider: crate::provider::ProviderKind,
    dev: bool,
) -> Result<StripeSecrets, ConfigError> {
    let l = &args.links;
    let key = secret_of(
        [
            "--stripe-secret-key-file",
            "PAYONCE_STRIPE_SECRET_KEY (--stripe-secret-key)",
        ],
        l.stripe_secret_key_file.as_deref(),
        l.stripe_secret_key.as_ref(),
    )?;
    let webhook_secret = secret_of(
        [
            "--stripe-webhook-secret-file",
            "PAYONCE_STRIPE_WEBHOOK_SECRET (--stripe-webhook-secret)",
        ],
        l.stripe_webhook_secret_file.as_deref(),
        l.stripe_webhook_secret.as_ref(),
    )?;
    let mode = match provider {
        crate::provider::ProviderKind::Stripe => {
            let (k, whsec) = (key.as_deref(), webhook_secret.as_deref());
            let (mode, problems) = stripe_problems(dev, l.allow_test_mode, k, whsec);
            if !problems.is_empty() {
                return Err(ConfigError::Unsafe(problems));
            }
            Some(mode)
        }
        crate::provider::ProviderKind::Mock => None,
    };
    Ok(StripeSecrets {
        key,
        webhook_secret,
        mode,
    })
}

/// The per-user rate limits of the flags, one quota per bucket (`None`: no limit).
fn rates(a: &ServerArgs) -> Vec<(payonce_rules::policy::Bucket, Option<governor::Quota>)> {
    use payonce_rules::policy::Bucket::*;
    let q = crate::limits::quota;
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
}

/// Leases, retention, the action deadline and the in-progress wait of the flags.
fn policy(args: &ServerArgs) -> payonce_rules::Policy {
    payonce_rules::Policy::new(
        Duration::from_millis(args.lease_ms),
        Duration::from_secs(args.key_retention_secs),
        Duration::from_millis(args.reconcile_after_ms),
        Duration::from_secs(args.audit_retention_days.saturating_mul(86_400)),
        Duration::from_secs(args.action_deadline_secs),
        Duration::from_millis(args.in_progress_wait_ms),
    )
}
