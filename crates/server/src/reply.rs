//! The one way a stored or fresh answer of a keyed operation leaves: exact body bytes, the
//! content type its status implies, `Idempotent-Replayed: true` on a replay.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use payonce_protocol::headers::{IDEMPOTENT_REPLAYED, RETRY_AFTER};
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_rules::Answer;

/// An answer of a keyed operation (pay, refund) that is not an error: what was (or will be)
/// stored, plus headers. Fresh and replayed answers leave through the same [`Reply::into_response`].
pub(crate) struct Reply {
    pub(crate) answer: Answer,
    pub(crate) replayed: bool,
    pub(crate) retry_after: Option<u64>,
    /// The attempt stays processing although the status is not 202 (402 `ACTION_REQUIRED`):
    /// never final, never cached as the key's answer.
    pub(crate) open: bool,
}

impl Reply {
    /// A stored final answer, replayed.
    pub(crate) fn replay(answer: Answer) -> Self {
        Self {
            replayed: true,
            ..Self::fresh(answer)
        }
    }

    pub(crate) fn fresh(answer: Answer) -> Self {
        Self {
            answer,
            replayed: false,
            retry_after: None,
            open: false,
        }
    }

    /// An answer about an attempt that stays processing (402 `ACTION_REQUIRED`).
    pub(crate) fn open(answer: Answer) -> Self {
        Self {
            open: true,
            ..Self::fresh(answer)
        }
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> u16 {
        self.answer.status
    }

    /// True unless the answer is "still processing" (202, or an open 402
    /// `ACTION_REQUIRED`).
    pub(crate) fn is_final(&self) -> bool {
        !self.open && self.answer.status != 202
    }

    pub(crate) fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let content_type = if self.answer.status >= 400 {
            PROBLEM_CONTENT_TYPE
        } else {
            "application/json"
        };
        let mut res = Response::new(self.answer.body.into());
        *res.status_mut() = status;
        let h = res.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if self.replayed {
            h.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        if let Some(secs) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}
