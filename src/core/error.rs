//! The SDK's own errors and warnings. Their codes are SDK names, not wire names; a server
//! refusal carries the server's [`ErrorCode`] (from the protocol crate) alongside.

use payonce_protocol::ErrorCode;

/// Why a call failed. Reaches JavaScript as a `PayonceError` with [`SdkError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdkError {
    /// `PayonceClient.create` got options it cannot use.
    #[error("invalid options: {0}")]
    InvalidConfig(String),
    /// `pay` got a checkout it cannot use.
    #[error("invalid checkout: {0}")]
    InvalidCheckout(String),
    /// `pay` was called with other details while an attempt for the order is unresolved.
    #[error(
        "an unresolved payment attempt for this order has other details; cancel or finish it first"
    )]
    SnapshotConflict,
    /// The stored attempt is damaged but still names a key that may be live.
    #[error("the stored payment attempt is unreadable; call cancel() to resolve it")]
    UnreadableAttempt,
    /// The server holds this key with other details. The key is kept; cancel resolves it.
    #[error("the server holds this key with other payment details; call cancel() to resolve it")]
    KeyReused,
    /// The server refused the request. The key is kept.
    #[error("the server refused the payment (HTTP {status})")]
    ServerRejected {
        /// HTTP status.
        status: u16,
        /// The problem code, when the body had one.
        code: Option<ErrorCode>,
    },
    /// The caller's signal aborted the call. The attempt and its key are kept.
    #[error("aborted; the payment attempt and its key are kept")]
    Aborted,
    /// The page has no `window`, `fetch` or `crypto.randomUUID` (not a browser window, or
    /// not a secure context).
    #[error("unsupported environment: {0}")]
    Unsupported(&'static str),
}

impl SdkError {
    /// The stable code JavaScript matches on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "INVALID_CONFIG",
            Self::InvalidCheckout(_) => "INVALID_CHECKOUT",
            Self::SnapshotConflict => "SNAPSHOT_CONFLICT",
            Self::UnreadableAttempt => "UNREADABLE_ATTEMPT",
            Self::KeyReused => ErrorCode::KeyReusedWithDifferentDetails.as_str(),
            Self::ServerRejected { .. } => "SERVER_REJECTED",
            Self::Aborted => "ABORTED",
            Self::Unsupported(_) => "UNSUPPORTED",
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
}

impl Warning {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::StorageUnavailable => "STORAGE_UNAVAILABLE",
            Self::UnreadableEntry => "UNREADABLE_ENTRY",
            Self::DuplicatedTab => "DUPLICATED_TAB",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
