//! The state every handler, operation and job shares.

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigError};
use crate::ids::{IdSource, RandomIds};
use crate::store::{Store, StoreError};
use std::net::SocketAddr;
use std::sync::Arc;

/// Why the process could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad flags.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not start.
    #[error("--database-url: {0}")]
    Store(#[from] StoreError),
    /// A listener could not be bound or served.
    #[error("listener {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The embedded provider (dev mode) could not start.
    #[error("provider: {0}")]
    Provider(String),
    /// The provider's HTTP client could not be built (its API key, its CA bundle).
    #[error("provider: {0}")]
    ProviderClient(#[from] crate::provider::ClientError),
    /// A dependency's TLS handshake failed at start (wrong CA, a plain-text server): no
    /// retry fixes that, so the start stops instead of failing requests later.
    #[error("{flag}: TLS handshake failed: {detail}")]
    Handshake {
        /// The flag naming the dependency.
        flag: &'static str,
        /// What the TLS client said.
        detail: String,
    },
    /// `payonce-server erase-user` could not write.
    #[error("erase-user: {0}")]
    Erase(String),
    /// `payonce-server sweep` could not finish (the provider's list, the store).
    #[error("sweep: {0}")]
    Sweep(String),
    /// `payonce-server timeline`: no such order in the database.
    #[error("no order {0} in the database (the id is wrong, or the database is another one)")]
    NoSuchOrder(String),
    /// The provider refused the API key at start (401): no call could succeed, so the
    /// start stops instead of every pay ending in review.
    #[error("--stripe-secret-key-file (PAYONCE_STRIPE_SECRET_KEY_FILE): the provider refused the key (HTTP {0} at start): revoked, mistyped, or for another account")]
    KeyRefused(u16),
}

/// Shared state of the handlers: the operations' state and the edge's own parts.
#[derive(Clone)]
pub struct AppState {
    /// What the operations read ([`OpsState`]).
    pub(crate) ops: OpsState,
    /// The provider's base URL, for `GET /dev/config`.
    pub(crate) provider_url: Arc<str>,
    /// The database figures of `GET /metrics`, read at most once per their max age.
    pub(crate) gauges: Arc<crate::metrics::GaugeCache>,
    /// What the auth extractors read (`src/auth/mod.rs`), built once.
    pub(crate) auth: crate::auth::AuthState,
}

/// What the operations read (`src/ops/`): both ledgers, the rules' inputs (the clock, the
/// id source, the policy), the rate limits, the replay paths and the config; none of the
/// edge's parts (the auth extractors' keys, the metrics' gauges, the provider's URL).
#[derive(Clone)]
pub(crate) struct OpsState {
    pub(crate) store: Store,
    pub(crate) provider: crate::provider::Provider,
    pub(crate) config: Arc<Config>,
    /// The Redis fast path, when `--redis-url` is set.
    pub(crate) redis: Option<Arc<crate::replay::redis::RedisCache>>,
    /// Per-user rate limits of this process.
    pub(crate) limits: Arc<crate::limits::Limits>,
    /// Final attempts this process has replayed, answered from memory next time.
    pub(crate) replays: Arc<crate::replay::memory::ReplayCache>,
    /// Where every rule reads `now` from.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where every new id comes from (`src/ids.rs`).
    pub(crate) ids: Arc<dyn IdSource>,
    /// Leases and retention, from the config.
    pub(crate) policy: payonce_rules::Policy,
}

impl AppState {
    /// State over `store`, reaching the provider at `provider_url`.
    pub fn new(store: Store, provider_url: &str, config: Config) -> Result<Self, RunError> {
        let ca = config.tls_ca.as_deref();
        let key = config.provider_api_key.as_deref();
        let provider = crate::provider::Provider::new(
            config.provider,
            provider_url,
            config.provider_timeout,
            ca,
            (key, config.stripe_mode),
        )?;
        let redis = config.redis_url.as_deref().map(|url| {
            crate::replay::redis::RedisCache::new(url, config.redis_timeout, ca).map(Arc::new)
        });
        let redis = redis.transpose().map_err(ConfigError::RedisUrl)?;
        let auth = crate::auth::AuthState {
            sessions: config.sessions.clone(),
            jwt: config.jwt.clone(),
            operator_token: config.operator_token.clone().map(Arc::new),
            dev_operator_token: config.dev_operator_token.clone().map(Arc::new),
            clock: Arc::new(SystemClock),
        };
        Ok(Self {
            ops: OpsState {
                store,
                provider,
                redis,
                limits: Arc::new(crate::limits::Limits::new(&config.rates)),
                replays: Arc::new(crate::replay::memory::ReplayCache::new(
                    config.replay_cache_entries,
                )),
                clock: Arc::new(SystemClock),
                ids: Arc::new(RandomIds),
                policy: config.policy,
                config: Arc::new(config),
            },
            provider_url: provider_url.into(),
            auth,
            gauges: Arc::default(),
        })
    }

    /// The same state reading `now` from `clock` (tests move a manual clock instead of
    /// sleeping).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        let limiter_clock = crate::limits::LimiterClock::Rules(clock.clone());
        self.ops.limits = Arc::new(crate::limits::Limits::with_clock(
            &self.ops.config.rates,
            &limiter_clock,
        ));
        self.auth.clock = clock.clone();
        self.ops.clock = clock;
        self
    }

    /// The same state minting its ids from `ids` (a [`crate::ids::Sequence`] makes every
    /// id of a test predictable).
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ops.ids = ids;
        self
    }
}

// Sub-states: a handler or an operation that needs one part of the state says so in its
// signature (`State<Store>`, `State<OpsState>`, …) instead of taking all of it.

/// `sub_state!(Sub { fields })`: `impl FromRef` for a sub-state whose fields are the
/// operations' state's fields of the same names (each cloned: handles and `Arc`s), from
/// [`OpsState`] and so from the whole state. `sub_state!(Part = path)`: one part of the
/// whole state as it is.
macro_rules! sub_state {
    ($sub:ty { $($field:ident),+ $(,)? }) => {
        impl axum::extract::FromRef<$crate::state::OpsState> for $sub {
            fn from_ref(s: &$crate::state::OpsState) -> Self {
                Self { $($field: s.$field.clone()),+ }
            }
        }
        impl axum::extract::FromRef<$crate::state::AppState> for $sub {
            fn from_ref(s: &$crate::state::AppState) -> Self {
                axum::extract::FromRef::from_ref(&s.ops)
            }
        }
    };
    ($sub:ty = $($path:ident).+) => {
        impl axum::extract::FromRef<$crate::state::AppState> for $sub {
            fn from_ref(s: &$crate::state::AppState) -> Self {
                s.$($path).+.clone()
            }
        }
    };
}
pub(crate) use sub_state;

sub_state!(OpsState = ops);
sub_state!(Store = ops.store);
sub_state!(Arc<Config> = ops.config);
sub_state!(Arc<dyn Clock> = ops.clock);
// What the auth extractors read (`src/auth/mod.rs`).
sub_state!(crate::auth::AuthState = auth);

// What the replay path reads (`src/replay/mod.rs`).
sub_state!(crate::replay::Replays {
    store,
    redis,
    replays,
    clock,
    policy
});

/// Both ledgers and the clock: the store, the provider and `now`, what an operation that
/// reads the provider and writes what it found needs (`src/ops/leftovers.rs`,
/// `src/ops/sweep.rs`).
#[derive(Clone)]
pub(crate) struct Ledgers {
    pub(crate) store: Store,
    pub(crate) provider: crate::provider::Provider,
    pub(crate) clock: Arc<dyn Clock>,
}

sub_state!(Ledgers {
    store,
    provider,
    clock
});

/// What `GET /metrics` reads: the store's figures, the gauges' cache, Redis's and the clock.
#[derive(Clone)]
pub(crate) struct MetricsState {
    pub(crate) store: Store,
    pub(crate) config: Arc<Config>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) gauges: Arc<crate::metrics::GaugeCache>,
    pub(crate) redis: Option<Arc<crate::replay::redis::RedisCache>>,
}

impl axum::extract::FromRef<AppState> for MetricsState {
    fn from_ref(s: &AppState) -> Self {
        Self {
            store: s.ops.store.clone(),
            config: s.ops.config.clone(),
            clock: s.ops.clock.clone(),
            gauges: s.gauges.clone(),
            redis: s.ops.redis.clone(),
        }
    }
}

/// What dev mode's own endpoints read: the config (is it dev mode, the sessions) and where
/// the embedded provider listens.
#[cfg(feature = "dev")]
#[derive(Clone)]
pub(crate) struct DevState {
    pub(crate) config: Arc<Config>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) provider_url: Arc<str>,
}

#[cfg(feature = "dev")]
impl axum::extract::FromRef<AppState> for DevState {
    fn from_ref(s: &AppState) -> Self {
        Self {
            config: s.ops.config.clone(),
            clock: s.ops.clock.clone(),
            provider_url: s.provider_url.clone(),
        }
    }
}
