//! The dev build's flags and subcommand, and what they come to. A leaf: the rest of the
//! crate (the command line in `flags.rs`) reads it, it reads nothing of the crate but
//! the failpoint names and `src/secret.rs`.

use crate::faults::{Failpoint, NAMES};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Every failpoint name, comma-separated, for the error naming an unknown one.
fn known() -> String {
    NAMES.map(|(_, name)| name).join(", ")
}

/// Why the dev flags are refused.
#[derive(Debug, thiserror::Error)]
pub enum DevFlagError {
    /// Failpoints abort the process: never outside dev mode.
    #[error("--failpoint / PAYONCE_FAILPOINTS require --dev")]
    FailpointsNeedDev,
    /// A failpoint name nobody checks would make a crash test pass for the wrong reason.
    #[error("unknown failpoint {0:?} (known: {known})", known = known())]
    UnknownFailpoint(String),
}

/// The dev build's own flags (flattened into `ServerArgs`).
#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Dev mode: the embedded mock provider when `--provider-url` is absent,
    /// `POST /dev/sessions`, fault injection, permissive localhost CORS, and the start-up
    /// checks of production secrets relaxed.
    #[arg(long)]
    pub dev: bool,
    /// Listen address of the embedded mock provider.
    #[arg(
        long,
        default_value = "127.0.0.1:8081",
        conflicts_with = "provider_url"
    )]
    pub provider_addr: SocketAddr,
    /// Do not let the embedded provider send webhooks (attempts then settle only through
    /// retries and the reconciliation job).
    #[arg(long)]
    pub no_provider_webhooks: bool,
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
    /// Dev only: abort the process when it reaches this named step (repeatable, or a comma
    /// list): after-claim, after-charge, after-create, after-save-ref, after-confirm,
    /// before-settle-commit, after-save, webhook, outbox, email. For crash tests; the server
    /// refuses to start with it unless `--dev`.
    #[arg(long = "failpoint", env = "PAYONCE_FAILPOINTS", value_delimiter = ',')]
    pub failpoints: Vec<String>,
    /// Dev only, for the tests that show the Stripe suites can fail: drive the two phases
    /// in a deliberately wrong order (`confirm-unsaved`: confirm the created object before
    /// its id is saved; `recreate`: a take-over creates and confirms a new object instead
    /// of looking up the saved one; `leave-confirmable`: settle a declined payment without
    /// cancelling it first). Never a setting for anything else.
    #[arg(long = "flaw", hide = true, requires = "dev")]
    pub flaw: Option<FlawArg>,
}

/// `--flaw`: a broken variant of the two-phase sequencing (`crates/rules/src/pay.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FlawArg {
    /// [`payonce_rules::pay::Flaw::ConfirmUnsaved`].
    ConfirmUnsaved,
    /// [`payonce_rules::pay::Flaw::Recreate`].
    Recreate,
    /// [`payonce_rules::pay::Flaw::LeaveConfirmable`].
    LeaveConfirmable,
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
        webhook_secret: crate::secret::Secret,
        /// JSON file the ledger is written through to and loaded from, so a restarted
        /// provider keeps its charges and resends undelivered webhooks. Default: memory only.
        #[arg(long)]
        state_file: Option<PathBuf>,
        /// Webhook misbehaviour: `off`, `realistic`, or a list of `dup=P`, `delay-ms=N`,
        /// `reorder`, `reorder-ms=N`, `early`.
        #[arg(long, default_value = "off")]
        webhook_chaos: payonce_mock_provider::WebhookChaos,
    },
    /// Print an HS256 JWT the server accepts with the same secret, issuer and audience (for
    /// trying the API without an identity provider).
    MintJwt {
        /// The shared secret (as given to `--jwt-hs256-secret`).
        #[arg(long, env = "PAYONCE_JWT_HS256_SECRETS", hide_env_values = true)]
        secret: crate::secret::Secret,
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

/// What the dev flags come to: dev mode on or off, and the armed failpoints.
pub(crate) struct DevSettings {
    pub dev: bool,
    pub failpoints: Vec<Failpoint>,
    /// `--flaw`, as the pay machine's flaw.
    pub flaw: Option<payonce_rules::pay::Flaw>,
    /// The webhook secret when none was given: the mock provider's own default, dev only.
    pub default_webhook_secret: Option<&'static str>,
    /// With `--dev`, an operator token for this process (random, never written anywhere),
    /// which `GET /dev/operator` hands to the demo's "what happened?" page.
    pub operator_token: Option<crate::secret::Secret>,
}

/// Validates the dev flags.
pub(crate) fn settings(args: &DevArgs) -> Result<DevSettings, DevFlagError> {
    let failpoints = args
        .failpoints
        .iter()
        .map(|f| f.trim())
        .filter(|f| !f.is_empty())
        .map(|f| Failpoint::parse(f).ok_or_else(|| DevFlagError::UnknownFailpoint(f.to_owned())))
        .collect::<Result<Vec<_>, _>>()?;
    if !failpoints.is_empty() && !args.dev {
        return Err(DevFlagError::FailpointsNeedDev);
    }
    use payonce_rules::pay::Flaw;
    let operator_token = || format!("dev-operator-{}", uuid::Uuid::new_v4().simple());
    Ok(DevSettings {
        dev: args.dev,
        operator_token: args
            .dev
            .then(|| operator_token().parse().unwrap_or_default()),
        failpoints,
        flaw: args.flaw.map(|f| match f {
            FlawArg::ConfirmUnsaved => Flaw::ConfirmUnsaved,
            FlawArg::Recreate => Flaw::Recreate,
            FlawArg::LeaveConfirmable => Flaw::LeaveConfirmable,
        }),
        default_webhook_secret: args
            .dev
            .then_some(payonce_mock_provider::DEFAULT_WEBHOOK_SECRET),
    })
}
