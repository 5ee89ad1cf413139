//! The idempotency key newtype.
//!
//! # Rules
//! A key arrives either as a raw token (`6f13d95a-e6c1-4bf2-9459-99b502098dc1`) or as an
//! RFC 8941 structured-field string (`"6f13d95a-…"`), which is how
//! draft-ietf-httpapi-idempotency-key-header spells it. After removing the quotes:
//! - length between [`IdempotencyKey::MIN_LEN`] (16) and [`IdempotencyKey::MAX_LEN`] (255)
//!   bytes: short enough to index, long enough that a key is not a guessable counter;
//! - characters `A-Z a-z 0-9` and `- _ . : ~ + / =` only (URL-safe, base64 and UUID
//!   alphabets), so a key can never smuggle quotes, spaces or control bytes into logs.
//!
//! Any UUID (hyphenated, simple or braced-free urn suffix) passes. Parsing never trims
//! whitespace silently: `" abc"` is rejected, because two spellings of one key must not exist.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A validated idempotency key. Holding one means it satisfies the rules above.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

/// Why a string is not an idempotency key. Each variant has a stable reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The value is empty (or an empty quoted string).
    #[error("the idempotency key is empty")]
    Empty,
    /// Fewer than [`IdempotencyKey::MIN_LEN`] bytes.
    #[error("the idempotency key is {len} bytes; at least {min} are required", min = IdempotencyKey::MIN_LEN)]
    TooShort {
        /// Length found.
        len: usize,
    },
    /// More than [`IdempotencyKey::MAX_LEN`] bytes.
    #[error("the idempotency key is {len} bytes; at most {max} are allowed", max = IdempotencyKey::MAX_LEN)]
    TooLong {
        /// Length found.
        len: usize,
    },
    /// A character outside the allowed alphabet.
    #[error("the idempotency key has a character that is not allowed at byte {at}")]
    InvalidChar {
        /// Byte offset (inside the quotes, if quoted).
        at: usize,
    },
    /// Starts with `"` but is not a well-formed RFC 8941 string.
    #[error("the idempotency key is not a well-formed quoted string")]
    BadQuoting,
}

impl KeyError {
    /// One error of each kind, for exhaustive tests and documentation of the reasons.
    pub const ALL: [KeyError; 5] = [
        Self::Empty,
        Self::TooShort { len: 0 },
        Self::TooLong { len: 0 },
        Self::InvalidChar { at: 0 },
        Self::BadQuoting,
    ];

    /// A stable machine-readable reason, used as a problem extension member.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooShort { .. } => "too_short",
            Self::TooLong { .. } => "too_long",
            Self::InvalidChar { .. } => "invalid_char",
            Self::BadQuoting => "bad_quoting",
        }
    }
}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~' | b'+' | b'/' | b'=')
}

impl IdempotencyKey {
    /// Minimum length in bytes.
    pub const MIN_LEN: usize = 16;
    /// Maximum length in bytes.
    pub const MAX_LEN: usize = 255;

    /// Parses a header value: a raw token or an RFC 8941 quoted string.
    pub fn parse(value: &str) -> Result<Self, KeyError> {
        let inner = if let Some(rest) = value.strip_prefix('"') {
            // RFC 8941 sf-string: DQUOTE *chars DQUOTE where chars may be escaped with `\`.
            // Our alphabet has neither `"` nor `\`, so any escape is already invalid; what
            // remains is checking the closing quote is the last byte.
            match rest.strip_suffix('"') {
                Some(inner) if !inner.contains('"') && !inner.contains('\\') => inner,
                _ => return Err(KeyError::BadQuoting),
            }
        } else {
            value
        };
        Self::validate(inner)?;
        Ok(Self(inner.to_owned()))
    }

    fn validate(s: &str) -> Result<(), KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some(at) = s.bytes().position(|b| !allowed(b)) {
            return Err(KeyError::InvalidChar { at });
        }
        match s.len() {
            len if len < Self::MIN_LEN => Err(KeyError::TooShort { len }),
            len if len > Self::MAX_LEN => Err(KeyError::TooLong { len }),
            _ => Ok(()),
        }
    }

    /// The key as sent on the wire (unquoted).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<IdempotencyKey> for String {
    fn from(k: IdempotencyKey) -> String {
        k.0
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// Debug shows only a prefix: keys end up in logs, and a full key is a replay token.
impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({}…)", &self.0[..8.min(self.0.len())])
    }
}
