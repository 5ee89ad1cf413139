//! The SDK's own errors and warnings. Their codes are SDK names, not wire names; a server
//! refusal carries the server's [`ErrorCode`] (from the protocol crate) alongside.

use crate::core::classify::Mismatch;
use payonce_protocol::ErrorCode;

/// Why a call failed. Reaches JavaScript as a `PayonceError` with [`SdkError::code`] and
/// [`SdkError::message`].
///
/// `Display` is written by hand around [`SdkError::message`] rather than derived with
/// thiserror: the Wasm module shows the message, and building it with `concat` keeps Rust's
/// formatting machinery (integer and padding code) out of the module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkError {
    /// `PayonceClient.create` got options it cannot use.
    InvalidConfig(String),
    /// `pay` got a checkout it cannot use.
    InvalidCheckout(String),
    /// `pay` was called with other details while an attempt for the order is unresolved.
    SnapshotConflict,
    /// The stored attempt is damaged but still names a key that may be live.
    UnreadableAttempt,
    /// The server holds this key with other details. The key is kept; cancel resolves it.
    KeyReused,
    /// The server refused the request. The key is kept.
    ServerRejected {
        /// HTTP status.
        status: u16,
        /// The problem code, when the body had one.
        code: Option<ErrorCode>,
    },
    /// The answer does not fit the protocol (a 2xx that is not a payonce answer, an answer for
    /// another order). The key is kept: the money may have moved.
    ProtocolMismatch {
        /// HTTP status of the answer.
        status: u16,
        /// What was wrong.
        why: Mismatch,
    },
    /// The caller's signal aborted the call. The attempt and its key are kept.
    Aborted,
    /// The page has no `window`, `fetch` or `AbortController` (not a browser window, or
    /// not one with `crypto.getRandomValues`).
    Unsupported(&'static str),
    /// The app's `headers` or `fetch` option threw or rejected: the request never left, so
    /// the call ends at once (retrying would only fail the same way) with the stored attempt
    /// as it was before that request. The app's error is the `PayonceError`'s `cause`.
    TransportFailed(TransportStep),
    /// The first two requests failed without an HTTP answer while the server answers this page
    /// (a plain GET of the same URL without credentials got one): the browser refused them
    /// ([`Warning::NetworkOrCors`] names what to check). The call ends at once instead of
    /// retrying what would fail the same way; the key is kept.
    NetworkOrCors,
}

/// Which of the app's transport options failed ([`SdkError::TransportFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportStep {
    /// `ClientOptions.headers` (the function threw, rejected or gave no `HeadersInit`).
    Headers,
    /// `ClientOptions.fetch` threw, or rejected with something `fetch` itself never rejects
    /// with (neither a `TypeError` nor a `DOMException`).
    Fetch,
}

impl TransportStep {
    /// The option's name, as the app wrote it (also the `requestFailed` event's `reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Headers => "headers",
            Self::Fetch => "fetch",
        }
    }
}

impl std::fmt::Display for SdkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for SdkError {}

/// `n` in decimal.
pub(crate) fn decimal(mut n: u64) -> String {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // `skip`, not `digits[at..]`: a slice index links its panic and the message's formatting.
    digits.iter().skip(at).map(|&d| char::from(d)).collect()
}

impl SdkError {
    /// A human-readable explanation (for people; match on [`SdkError::code`]).
    pub fn message(&self) -> String {
        match self {
            Self::InvalidConfig(why) => ["invalid options: ", why].concat(),
            Self::InvalidCheckout(why) => ["invalid checkout: ", why].concat(),
            Self::SnapshotConflict => "an unresolved payment attempt for this order has other \
                details; cancel or finish it first"
                .into(),
            Self::UnreadableAttempt => {
                "the stored payment attempt is unreadable; call cancel() to resolve it".into()
            }
            Self::KeyReused => "the server holds this key with other payment details; call \
                cancel() to resolve it"
                .into(),
            Self::ServerRejected { status, .. } => [
                "the server refused the payment (HTTP ",
                &decimal((*status).into()),
                ")",
            ]
            .concat(),
            Self::ProtocolMismatch { status, why } => [
                "the answer does not fit the payonce protocol: ",
                why.describe(),
                " (HTTP ",
                &decimal((*status).into()),
                "); the key is kept",
            ]
            .concat(),
            Self::Aborted => "aborted; the payment attempt and its key are kept".into(),
            Self::Unsupported(why) => ["unsupported environment: ", why].concat(),
            Self::TransportFailed(step) => [
                "the request was not sent: the app's ",
                step.as_str(),
                " option threw or rejected (see cause); the payment attempt is as it was",
            ]
            .concat(),
            Self::NetworkOrCors => Warning::NetworkOrCors.message(),
        }
    }

    /// The stable code JavaScript matches on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "INVALID_CONFIG",
            Self::InvalidCheckout(_) => "INVALID_CHECKOUT",
            Self::SnapshotConflict => "SNAPSHOT_CONFLICT",
            Self::UnreadableAttempt => "UNREADABLE_ATTEMPT",
            Self::KeyReused => ErrorCode::KeyReusedWithDifferentDetails.as_str(),
            Self::ServerRejected { .. } => "SERVER_REJECTED",
            Self::ProtocolMismatch { .. } => "PROTOCOL_MISMATCH",
            Self::Aborted => "ABORTED",
            Self::Unsupported(_) => "UNSUPPORTED",
            Self::TransportFailed(_) => "TRANSPORT_FAILED",
            Self::NetworkOrCors => Warning::NetworkOrCors.code(),
        }
    }

    /// The server's problem code, for `ServerRejected` and `KeyReused`.
    pub fn problem_code(&self) -> Option<ErrorCode> {
        match self {
            Self::ServerRejected { code, .. } => *code,
            Self::KeyReused => Some(ErrorCode::KeyReusedWithDifferentDetails),
            _ => None,
        }
    }

    /// The HTTP status, when a server answer caused the error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::ServerRejected { status, .. } | Self::ProtocolMismatch { status, .. } => {
                Some(*status)
            }
            Self::KeyReused => Some(ErrorCode::KeyReusedWithDifferentDetails.http_status()),
            _ => None,
        }
    }

    /// The server's problem code as sent, when a server answer caused the error.
    pub fn problem_code_str(&self) -> Option<&str> {
        self.problem_code().map(ErrorCode::as_str)
    }

    /// The error a refusal becomes.
    pub fn rejected(status: u16, code: Option<ErrorCode>) -> Self {
        match code {
            Some(ErrorCode::KeyReusedWithDifferentDetails) => Self::KeyReused,
            code => Self::ServerRejected { status, code },
        }
    }
}

/// Something the app should know that does not fail the call (passed to `onWarning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warning {
    /// sessionStorage threw or is missing: attempts live in memory for this page only, so a
    /// reload loses their keys (the server's one-active-attempt rule still guards the order).
    StorageUnavailable,
    /// A stored entry could not be read and held no usable key; it was replaced.
    UnreadableEntry,
    /// This tab was duplicated and inherited another tab's attempts (same keys; the server
    /// deduplicates them and Web Locks serialise their sends).
    DuplicatedTab,
    /// The first two requests of a pay call both failed at the network level (no HTTP
    /// answer, not our timeout): most likely a CORS refusal (e.g. `Access-Control-Allow-Origin:
    /// *` with credentials) or a wrong or unreachable URL. Said at once, while the call goes on
    /// retrying (it ends `pending` if nothing answers), key kept.
    NetworkOrCors,
}

impl Warning {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::StorageUnavailable => "STORAGE_UNAVAILABLE",
            Self::UnreadableEntry => "UNREADABLE_ENTRY",
            Self::DuplicatedTab => "DUPLICATED_TAB",
            Self::NetworkOrCors => "NETWORK_OR_CORS",
        }
    }

    /// What to check, for people (`onWarning`'s second argument and the `warning` event).
    pub fn message(self) -> String {
        use payonce_protocol::headers::{cors, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
        use payonce_protocol::headers::{REQUEST_ID, RETRY_AFTER};
        match self {
            Self::StorageUnavailable => {
                "sessionStorage is unavailable: attempts are kept in memory for this page".into()
            }
            Self::UnreadableEntry => "a stored attempt could not be read and was replaced".into(),
            Self::DuplicatedTab => {
                "this tab was duplicated and shares another tab's attempts".into()
            }
            Self::NetworkOrCors => [
                "the first two requests got no answer at the network level: the server is \
                 unreachable or the browser refused its CORS answer. Check the URL, then the \
                 answer to this page's origin: ",
                cors::ALLOW_ORIGIN,
                " must name the origin (not \"*\") while `credentials` is \"include\" (the \
                 default) and ",
                cors::ALLOW_CREDENTIALS,
                " must be true, or set `credentials` to \"omit\" or \"same-origin\"; ",
                cors::ALLOW_HEADERS,
                " must list Content-Type, ",
                IDEMPOTENCY_KEY,
                ", ",
                REQUEST_ID,
                " and the app's headers; ",
                cors::EXPOSE_HEADERS,
                " should list ",
                RETRY_AFTER,
                ", ",
                IDEMPOTENT_REPLAYED,
                " and ",
                REQUEST_ID,
            ]
            .concat(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_well_and_display_is_the_message() {
        for (status, text) in [(0, "0"), (7, "7"), (409, "409"), (65_535, "65535")] {
            let e = SdkError::rejected(status, None);
            assert_eq!(
                e.to_string(),
                ["the server refused the payment (HTTP ", text, ")"].concat()
            );
        }
        assert_eq!(
            SdkError::InvalidConfig("baseUrl must be an http(s) URL".into()).to_string(),
            "invalid options: baseUrl must be an http(s) URL"
        );
        assert_eq!(
            SdkError::SnapshotConflict.message(),
            "an unresolved payment attempt for this order has other details; cancel or finish \
             it first"
        );
        assert_eq!(
            SdkError::KeyReused.message(),
            "the server holds this key with other payment details; call cancel() to resolve it"
        );
    }

    #[test]
    fn codes_are_stable_and_server_codes_come_from_the_protocol() {
        assert_eq!(SdkError::SnapshotConflict.code(), "SNAPSHOT_CONFLICT");
        let e = SdkError::rejected(422, Some(ErrorCode::KeyReusedWithDifferentDetails));
        assert_eq!(e.code(), "KEY_REUSED_WITH_DIFFERENT_DETAILS");
        let e = SdkError::rejected(409, Some(ErrorCode::PaymentAlreadyActive));
        assert_eq!(
            (e.code(), e.problem_code()),
            ("SERVER_REJECTED", Some(ErrorCode::PaymentAlreadyActive))
        );
    }
}
