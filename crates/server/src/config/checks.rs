//! The start-up refusals: pure functions of the parsed flags (and of what the environment
//! holds, `PGSSLMODE`), each naming every problem it finds in one line, so that an operator
//! fixes a deployment in one go and an unsafe one never serves a request. They read no file
//! and open nothing: `build.rs` does that once they pass.

use super::flags::{CorsArgs, Link, ServerArgs};
use crate::secret::Secret;
use axum::http::HeaderValue;
use std::time::Duration;

/// `EdgeArgs`, checked.
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
    pub(super) fn from_args(args: &ServerArgs) -> Result<Self, ConfigError> {
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
    /// The dev flags (`src/config/dev.rs`; a production build refuses them all).
    #[error(transparent)]
    Dev(#[from] super::dev::DevFlagError),
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

/// Shortest session and webhook secret outside `--dev`: 256 bits, the HMAC-SHA256 key size.
pub const MIN_SECRET: usize = 32;

/// Every problem of a start outside `--dev`, one line each (empty: safe to start). The
/// embedded mock provider runs only in dev, so a provider must be named; the webhook secret
/// must be explicit and long enough that nobody can guess or brute-force it (the session
/// secrets: `src/auth/session.rs`).
pub(super) fn production_problems(args: &ServerArgs) -> Vec<String> {
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
pub(super) fn stripe_problems(
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
pub(super) fn scheme_problems(args: &ServerArgs) -> Vec<String> {
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

/// Every link that would carry credentials in its URL or run without verified TLS outside
/// `--dev` unless `--allow-plaintext` names it, one line each. A man in the middle of a
/// plain provider link can answer "succeeded" for any charge; of a database or Redis link,
/// read and change orders. Loopback never leaves the host, so the provider and Redis may use
/// it in plain text; PostgreSQL's `sslmode` is judged whatever the host, since only
/// `verify-full` checks that the server is the one named (and the default, `prefer`, falls
/// back to plain text without a word).
pub(super) fn link_problems(args: &ServerArgs) -> Vec<String> {
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
pub(super) fn weak_sslmode(db: &str) -> Option<String> {
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

/// The lease must outlast a provider call, or a live call could be taken over.
pub(super) fn lease_check(args: &ServerArgs) -> Result<(), ConfigError> {
    if args.lease_ms <= args.provider_timeout_ms {
        return Err(ConfigError::LeaseTooShort {
            lease: args.lease_ms,
            timeout: args.provider_timeout_ms,
        });
    }
    Ok(())
}

/// The mock provider's webhook secret: `--webhook-secret`, else in dev the mock provider's
/// own default (`dev_default`), which pairs with the embedded provider. Outside dev
/// `production_problems` has made sure it is set and long; in dev too, a secret the
/// signature check would refuse makes every mock event fail: say so at start.
pub(super) fn webhook_secret(
    args: &ServerArgs,
    dev_default: Option<&'static str>,
) -> Result<Secret, ConfigError> {
    let webhook_secret = args
        .webhook_secret
        .clone()
        .or(dev_default.map(|s| Secret::from(s.to_owned())))
        .unwrap_or_default();
    let least = payonce_protocol::signature::MIN_SECRET;
    if args.provider != Some(crate::provider::ProviderKind::Stripe) && webhook_secret.len() < least
    {
        return Err(ConfigError::Unsafe(vec![format!(
            "--webhook-secret (PAYONCE_WEBHOOK_SECRET) is {} bytes; at least {least} are required",
            webhook_secret.len()
        )]));
    }
    Ok(webhook_secret)
}

/// The scheme of a URL (never its credentials) for an error line.
fn scheme_of(url: &str) -> &str {
    url.split_once("://").map_or("(none)", |(s, _)| s)
}

/// [`CorsArgs`], checked (`src/http/cors.rs` builds the layer).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cors {
    pub(crate) origins: Vec<HeaderValue>,
    pub(crate) credentials: bool,
}

impl Cors {
    /// Checks every origin; the error names the first bad one.
    pub(crate) fn from_args(args: &CorsArgs) -> Result<Self, String> {
        let origins = args
            .origins
            .iter()
            .map(|o| origin(o).ok_or_else(|| format!("--cors-origin {o:?}: write an origin as scheme://host[:port] (http or https, no path), e.g. https://shop.example")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            origins,
            credentials: args.credentials,
        })
    }
}

/// `text` when it is an origin exactly as a browser sends it in `Origin` (so an exact match
/// can ever succeed): `http(s)://host[:port]`, lower case, no default port, no path.
pub(super) fn origin(text: &str) -> Option<HeaderValue> {
    let url = reqwest::Url::parse(text).ok()?;
    let serialized = url.origin().ascii_serialization();
    let web = matches!(url.scheme(), "http" | "https");
    (web && serialized == text).then(|| HeaderValue::from_str(text).ok())?
}

#[cfg(test)]
mod tests {
    use super::super::testing::{args, prod, PROD};
    use super::super::Config;
    use super::*;
    use proptest::prelude::*;

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
        // A production build has no dev mode (`--dev` is refused: config/dev_off.rs).
        #[cfg(feature = "dev")]
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
    fn only_origins_a_browser_can_send_are_accepted() {
        for ok in [
            "https://shop.example",
            "http://127.0.0.1:5173",
            "https://a.b.example:8443",
        ] {
            assert!(origin(ok).is_some(), "{ok}");
        }
        for bad in [
            "*",
            "null",
            "shop.example",
            "https://shop.example/",
            "https://shop.example/checkout",
            "https://Shop.example",
            "https://shop.example:443",
            "ftp://shop.example",
            "https://user@shop.example",
        ] {
            assert!(origin(bad).is_none(), "{bad}");
        }
        let args = CorsArgs {
            origins: vec![
                "https://shop.example".into(),
                "https://shop.example/".into(),
            ],
            credentials: false,
        };
        let err = Cors::from_args(&args).unwrap_err();
        assert!(err.contains("\"https://shop.example/\""), "{err}");
    }

    /// The refusals are functions of the flags alone: no file read, nothing opened.
    #[test]
    fn the_lease_stripe_and_webhook_checks_read_the_flags_alone() {
        let lease =
            |l: &str, t: &str| lease_check(&prod(&["--lease-ms", l, "--provider-timeout-ms", t]));
        assert!(matches!(
            lease("3000", "3000"),
            Err(ConfigError::LeaseTooShort {
                lease: 3000,
                timeout: 3000
            })
        ));
        assert!(lease("3001", "3000").is_ok());
        let whsec = "whsec_0123456789abcdef0123456789abcdef";
        let (mode, p) = stripe_problems(false, false, Some("sk_test_1"), Some(whsec));
        assert_eq!(
            (mode, p.len()),
            (crate::provider::StripeMode::Test, 1),
            "{p:?}"
        );
        assert!(p[0].contains("--allow-test-mode"), "{p:?}");
        let (_, p) = stripe_problems(false, true, Some("sk_test_1"), Some("whsec_short"));
        assert!(p.len() == 1 && p[0].contains("at least 32"), "{p:?}");
        assert!(
            stripe_problems(false, false, Some("sk_live_1"), Some(whsec))
                .1
                .is_empty()
        );
        let short = args(&["--webhook-secret", "short"]);
        assert!(matches!(
            webhook_secret(&short, None),
            Err(ConfigError::Unsafe(_))
        ));
        let none = args(&[]);
        let default = "a dev default of at least 32 bytes";
        assert_eq!(
            webhook_secret(&none, Some(default)).unwrap().expose(),
            default
        );
    }

    proptest! {
        #[test]
        fn origins_never_panic(s in "\\PC{0,64}") {
            let _ = origin(&s);
        }
    }
}
