//! The configuration file (TOML, or JSON when the file ends in `.json`). `docs/conformance.md`
//! is its reference; every member is documented here too.

use serde::Deserialize;
use std::path::Path;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or JSON, or has an unknown or missing member.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A member has a value the kit cannot use.
    #[error("{0}")]
    Invalid(String),
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Base URL of the backend, e.g. `http://127.0.0.1:8080`.
    pub base_url: String,
    /// More instances of the same backend (same database): requests rotate over
    /// `base_url` and these, so races cross processes.
    #[serde(default)]
    pub also: Vec<String>,
    /// Timeout of one HTTP request, ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How to authenticate as the two users.
    pub users: Users,
    /// How to get a fresh payable order.
    pub order: OrderSource,
    /// How to change an order's cart (optional: without it the cart-lock rule is not checked).
    #[serde(default)]
    pub cart: Option<HttpCall>,
    /// Payment method ids.
    pub methods: Methods,
    /// How to count an order's charges (optional: without it ledger rules are not checked).
    #[serde(default)]
    pub ledger: Option<Ledger>,
    /// Same-key requests of the storm rule.
    #[serde(default = "default_storm")]
    pub storm: usize,
    /// Rounds of the cancel/pay race and of the two-key race.
    #[serde(default = "default_rounds")]
    pub race_rounds: usize,
}

fn default_timeout_ms() -> u64 {
    15_000
}
fn default_storm() -> usize {
    50
}
fn default_rounds() -> usize {
    5
}
fn default_auth_header() -> String {
    "Authorization".into()
}
fn default_id_pointer() -> String {
    "/id".into()
}
fn default_version_pointer() -> String {
    "/version".into()
}
fn default_pending_ms() -> u64 {
    300
}
fn default_settle_ms() -> u64 {
    20_000
}
fn default_ledger_pointer() -> String {
    "/charges".into()
}
fn default_excluded() -> Vec<String> {
    vec!["declined".into()]
}

/// User `a` and user `b`: two distinct users of the backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Users {
    /// The first user.
    pub a: UserAuth,
    /// The second user.
    pub b: UserAuth,
}

/// How to authenticate as one user: the header to send and where its value comes from
/// (exactly one of `value`, `command`, `login`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserAuth {
    /// Header name: `Authorization` (default), `Cookie`, ...
    #[serde(default = "default_auth_header")]
    pub header: String,
    /// A fixed header value, e.g. `Bearer abc`.
    #[serde(default)]
    pub value: Option<String>,
    /// A shell command printing the header value on stdout.
    #[serde(default)]
    pub command: Option<String>,
    /// An HTTP call whose JSON answer holds the value.
    #[serde(default)]
    pub login: Option<Login>,
}

/// An HTTP sign-in: the value is `prefix` + the string at `pointer` of the JSON answer.
// No `deny_unknown_fields`: serde does not support it beside `flatten`.
#[derive(Debug, Clone, Deserialize)]
pub struct Login {
    /// The call (not authenticated).
    #[serde(flatten)]
    pub call: HttpCall,
    /// RFC 6901 JSON pointer of the token in the answer, e.g. `/token`.
    pub pointer: String,
    /// Put before the token, e.g. `Bearer `.
    #[serde(default)]
    pub prefix: String,
}

/// One HTTP call to the backend. `{order}` in `path` or `body` is the order id, `{run}` a
/// random id per run (so sign-ins can make fresh users).
#[derive(Debug, Clone, Deserialize)]
pub struct HttpCall {
    /// Method (default `POST`).
    #[serde(default = "default_method")]
    pub method: String,
    /// Path below the base URL.
    pub path: String,
    /// JSON body, as text.
    #[serde(default)]
    pub body: Option<String>,
}

fn default_method() -> String {
    "POST".into()
}

/// A fresh payable order for a user: an HTTP call made as that user, or a command printing
/// the order JSON (with `PAYONCE_USER` = `a` or `b` and `PAYONCE_AUTH` = the user's header
/// value in its environment).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderSource {
    /// The HTTP call, e.g. `POST /orders` with a cart.
    #[serde(default)]
    pub method: Option<String>,
    /// Its path.
    #[serde(default)]
    pub path: Option<String>,
    /// Its body.
    #[serde(default)]
    pub body: Option<String>,
    /// Or a command printing the order JSON.
    #[serde(default)]
    pub command: Option<String>,
    /// Pointer of the order id in the JSON.
    #[serde(default = "default_id_pointer")]
    pub id_pointer: String,
    /// Pointer of the order version in the JSON.
    #[serde(default = "default_version_pointer")]
    pub version_pointer: String,
}

/// Payment method ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Methods {
    /// Approved at once.
    pub approve: String,
    /// Declined at once.
    pub decline: String,
    /// Stays processing for a while (at least a few seconds), then settles.
    pub pending: String,
    /// How long after sending a pending pay the kit starts probing it, ms.
    #[serde(default = "default_pending_ms")]
    pub pending_ms: u64,
    /// How long the kit retries a pending attempt (same key) until it is final, ms.
    #[serde(default = "default_settle_ms")]
    pub settle_ms: u64,
}

/// Counting an order's charges: a URL answering JSON with an array at `pointer` (items whose
/// `status` is in `exclude_status` do not count), or a command printing a number (with
/// `PAYONCE_ORDER` in its environment).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// Full URL, `{order}` replaced; `GET`.
    #[serde(default)]
    pub url: Option<String>,
    /// Pointer of the charges array.
    #[serde(default = "default_ledger_pointer")]
    pub pointer: String,
    /// Charge statuses that are not money moved.
    #[serde(default = "default_excluded")]
    pub exclude_status: Vec<String>,
    /// Or a command printing the count.
    #[serde(default)]
    pub command: Option<String>,
}

impl Config {
    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let parsed = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| e.to_string())
        } else {
            toml::from_str(&text).map_err(|e| e.to_string())
        };
        let config: Config = parsed.map_err(|message| ConfigError::Parse {
            path: path.display().to_string(),
            message,
        })?;
        config.check()?;
        Ok(config)
    }

    /// The checks serde cannot express.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (name, u) in [("users.a", &self.users.a), ("users.b", &self.users.b)] {
            let n = [u.value.is_some(), u.command.is_some(), u.login.is_some()]
                .iter()
                .filter(|x| **x)
                .count();
            if n != 1 {
                return Err(ConfigError::Invalid(format!(
                    "{name}: give exactly one of value, command, login"
                )));
            }
        }
        let o = &self.order;
        if o.path.is_some() == o.command.is_some() {
            return Err(ConfigError::Invalid(
                "order: give exactly one of path (an HTTP call) or command".into(),
            ));
        }
        if let Some(l) = &self.ledger {
            if l.url.is_some() == l.command.is_some() {
                return Err(ConfigError::Invalid(
                    "ledger: give exactly one of url or command".into(),
                ));
            }
        }
        for url in std::iter::once(&self.base_url).chain(&self.also) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::Invalid(format!(
                    "{url:?} is not an http(s) URL"
                )));
            }
        }
        if self.storm < 2 || self.race_rounds == 0 {
            return Err(ConfigError::Invalid(
                "storm must be at least 2 and race_rounds at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../example.toml");

    #[test]
    fn the_example_parses_with_its_defaults() {
        let c: Config = toml::from_str(EXAMPLE).unwrap();
        c.check().unwrap();
        assert_eq!(c.users.a.header, "Authorization");
        assert_eq!(c.order.id_pointer, "/id");
        assert_eq!(c.storm, 50);
        assert_eq!(c.ledger.unwrap().exclude_status, ["declined"]);
    }

    #[test]
    fn json_works_too_and_bad_files_say_why() {
        let json = r#"{"base_url":"http://x","users":{"a":{"value":"Bearer a"},"b":{"command":"echo b"}},
            "order":{"command":"make-order"},"methods":{"approve":"a","decline":"d","pending":"p"}}"#;
        let c: Config = serde_json::from_str(json).unwrap();
        c.check().unwrap();
        let both = EXAMPLE.replacen("[users.a]\n", "[users.a]\nvalue = \"x\"\n", 1);
        let c: Config = toml::from_str(&both).unwrap();
        assert!(c.check().unwrap_err().to_string().contains("users.a"));
        let typo = EXAMPLE.replace("base_url", "base_uri");
        assert!(toml::from_str::<Config>(&typo).is_err());
    }
}
