//! The command line and the runtime [`Config`] built from it, in three steps, each a file
//! on its own floor (`tests/blackbox/layout.rs`):
//! - `flags.rs`: the clap definitions (most flags also read an environment variable), and
//!   `dev.rs` / `dev_off.rs` the dev build's flags;
//! - `checks.rs`: the start-up refusals, pure functions of the parsed flags;
//! - `build.rs`: the [`Config`] (files read, the mailer, sessions and JWT verifier built).

mod build;
mod checks;
#[cfg(feature = "dev")]
pub(crate) mod dev;
#[cfg(not(feature = "dev"))]
#[path = "dev_off.rs"]
pub(crate) mod dev;
mod flags;

pub use build::Config;
pub(crate) use build::{database_url, with_ca};
pub use checks::{ConfigError, MIN_SECRET};
pub(crate) use checks::{Cors, Edge, Lifetime};
pub use flags::{
    Cli, Command, CorsArgs, EdgeArgs, JwtArgs, Link, LinkArgs, ServerArgs, SessionArgs, SweepArgs,
    DEV_DATABASE_URL,
};

/// Command lines for the tests of `config/`.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use clap::Parser;

    /// The flags a start outside `--dev` must have.
    pub(super) const PROD: &[&str] = &[
        "--provider-url",
        "http://127.0.0.1:1",
        "--webhook-secret",
        "whsec_0123456789abcdef0123456789abcdef",
        "--session-secret",
        "0123456789abcdef0123456789abcdef",
    ];

    /// `extra` as the command line, naming the mock provider and a database unless `extra`
    /// names them.
    pub(super) fn args(extra: &[&str]) -> ServerArgs {
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

    pub(super) fn raw_args(extra: &[&str]) -> ServerArgs {
        let argv = std::iter::once("payonce-server").chain(extra.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").server
    }

    pub(super) fn prod(extra: &[&str]) -> ServerArgs {
        args(&[PROD, extra].concat())
    }
}

#[cfg(test)]
mod tests {
    use super::checks::scheme_problems;
    use super::testing::*;
    use super::*;
    use clap::Parser;

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
        // A production build has no dev mode (`--dev` is refused: config/dev_off.rs).
        #[cfg(feature = "dev")]
        {
            assert_eq!(migrate(&raw_args(&["--dev"])), MigrateMode::Auto);
            assert_eq!(
                migrate(&raw_args(&["--dev", "--migrate", "check"])),
                MigrateMode::Check
            );
        }
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
            #[cfg(feature = "dev")]
            {
                let c = Config::from_args(&stripe(key, whsec, &["--dev"])).unwrap();
                assert_eq!(c.stripe_mode, Some(StripeMode::Test));
            }
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
        // In dev (a production build has none: `--dev` is refused, config/dev_off.rs).
        #[cfg(feature = "dev")]
        {
            assert!(Config::from_args(&stripe("sk_test_1", short, &["--dev"])).is_ok());
            let p = problems(&stripe("sk_test_1", "whsec_", &["--dev"]));
            assert!(
                p.len() == 1 && p[0].starts_with("--stripe-webhook-secret"),
                "{p:?}"
            );
            // The mock's secret too: one the signature check refuses stops the start.
            let p = problems(&args(&["--dev", "--webhook-secret", "short"]));
            assert!(
                p.len() == 1 && p[0].starts_with("--webhook-secret"),
                "{p:?}"
            );
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
        // A production build has no dev mode (`--dev` is refused: config/dev_off.rs).
        #[cfg(feature = "dev")]
        {
            let dev = args(&["--dev", "--provider-url", "https://sk_live_1:x@psp.example"]);
            assert!(Config::from_args(&dev).is_ok());
        }
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

    #[cfg(feature = "dev")] // for the docs test below
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

    #[cfg(feature = "dev")] // for the docs test below
    /// The code spans of `doc` (the text between backticks).
    fn code_spans(doc: &str) -> Vec<&str> {
        doc.split('`').skip(1).step_by(2).collect()
    }

    #[cfg(feature = "dev")] // for the docs test below
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
        // Cargo's, clap's, the Stripe CLI's (`stripe listen --forward-to`) and pg_restore's
        // (docs/deploy.md, "Restoring"), and the variables only the test harness reads
        // (docs/testing.md).
        const CARGO: &[&str] = &[
            "--no-default-features",
            "--features",
            "--release",
            "--help",
            "--forward-to",
            "--no-owner",
            "--clean",
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
    /// they really read (like the protocol crate's `tests/drift.rs` for wire names). The
    /// docs name the dev build's flags too, so only a dev build has them all.
    #[cfg(feature = "dev")]
    #[test]
    fn the_deploy_guide_and_the_readme_name_real_flags_and_variables() {
        for (name, doc) in [
            ("docs/deploy.md", include_str!("../../../../docs/deploy.md")),
            (
                "docs/providers.md",
                include_str!("../../../../docs/providers.md"),
            ),
            (
                "docs/integrate.md",
                include_str!("../../../../docs/integrate.md"),
            ),
            ("crates/server/README.md", include_str!("../../README.md")),
            (
                "docs/operating.md",
                include_str!("../../../../docs/operating.md"),
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
        let guide = include_str!("../../../../docs/deploy.md");
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
