//! Extractors for the cross-cutting inputs: JSON bodies, path ids, the `Idempotency-Key`
//! header and the dev fault header. Every rejection is an [`AppError`] problem with a stable
//! code, never axum's plain-text default.

use crate::error::AppError;
use crate::AppState;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use payonce_protocol::body::DevFault;
use payonce_protocol::headers::{DEV_FAULT, IDEMPOTENCY_KEY};
use payonce_protocol::{ErrorCode, IdempotencyKey, KeyError};
use serde::de::DeserializeOwned;

/// A JSON body. Syntax errors, wrong types and unknown fields are 400 `INVALID_REQUEST`, a
/// missing `Content-Type: application/json` is 415, a body over the limit is 413.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> AppError {
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => AppError::code(ErrorCode::PayloadTooLarge),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => AppError::code(ErrorCode::UnsupportedMediaType),
        // serde's message names the field and the expectation ("unknown field `amount`",
        // "invalid type: string, expected u64"); it holds no server internals, and it is the
        // most useful thing a client developer can read.
        _ => AppError::detail(ErrorCode::InvalidRequest, rejection.body_text()),
    }
}

/// One path parameter (an order id). Ids are opaque strings; anything that is not a
/// plausible id can never name an order, so it is a 404 like any unknown id.
pub(crate) struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e: PathRejection| {
                    AppError::detail(ErrorCode::InvalidRequest, e.body_text())
                })?;
        Ok(Self(id))
    }
}

/// The `Idempotency-Key` header, parsed but not yet judged: the pay rules check ownership of
/// the order first (404) and only then the key (400), so the verdict is kept for the handler.
pub(crate) struct IdemKeyHeader(pub Result<IdempotencyKey, AppError>);

impl FromRequestParts<AppState> for IdemKeyHeader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Self::Rejection> {
        Ok(Self(parse_key_header(parts)))
    }
}

/// Parses the key header. Two headers (or a comma list) are malformed: which one would we
/// trust?
pub(crate) fn parse_key_header(parts: &Parts) -> Result<IdempotencyKey, AppError> {
    let mut values = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Err(AppError::code(ErrorCode::IdempotencyKeyMissing));
    };
    if values.next().is_some() {
        return Err(key_invalid(
            KeyError::BadQuoting,
            "more than one Idempotency-Key header",
        ));
    }
    let text = value.to_str().map_err(|_| {
        key_invalid(
            KeyError::InvalidChar { at: 0 },
            "the header is not visible ASCII",
        )
    })?;
    IdempotencyKey::parse(text).map_err(|e| key_invalid(e.clone(), e.to_string()))
}

fn key_invalid(e: KeyError, detail: impl Into<String>) -> AppError {
    AppError::with(ErrorCode::IdempotencyKeyInvalid, |p| {
        p.detail = Some(detail.into());
        p.reason = Some(e.reason().to_owned());
    })
}

/// The dev fault header. Without `--dev` its mere presence is refused (403
/// `DEV_MODE_REQUIRED`): a production server must never drop responses on request.
pub(crate) struct DevFaultHeader(pub Option<DevFault>);

impl FromRequestParts<AppState> for DevFaultHeader {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(DEV_FAULT) else {
            return Ok(Self(None));
        };
        if !state.config.dev {
            return Err(AppError::detail(
                ErrorCode::DevModeRequired,
                "fault injection is available only when the server runs with --dev",
            ));
        }
        let fault = value
            .to_str()
            .ok()
            .and_then(DevFault::parse)
            .ok_or_else(|| AppError::detail(ErrorCode::InvalidRequest, "unknown dev fault"))?;
        Ok(Self(Some(fault)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, Request};
    use proptest::prelude::*;

    fn parts_with(values: &[HeaderValue]) -> Parts {
        let mut req = Request::new(());
        for v in values {
            req.headers_mut().append(IDEMPOTENCY_KEY, v.clone());
        }
        req.into_parts().0
    }

    fn code(r: &Result<IdempotencyKey, AppError>) -> Option<ErrorCode> {
        match r {
            Err(AppError::Client(p)) => Some(p.code),
            _ => None,
        }
    }

    #[test]
    fn missing_duplicate_and_quoted_keys() {
        assert_eq!(
            code(&parse_key_header(&parts_with(&[]))),
            Some(ErrorCode::IdempotencyKeyMissing)
        );
        let k = HeaderValue::from_static("0123456789abcdef");
        assert_eq!(
            code(&parse_key_header(&parts_with(&[k.clone(), k.clone()]))),
            Some(ErrorCode::IdempotencyKeyInvalid)
        );
        let quoted = HeaderValue::from_static("\"0123456789abcdef\"");
        assert_eq!(
            parse_key_header(&parts_with(&[quoted])).unwrap(),
            parse_key_header(&parts_with(&[k])).unwrap()
        );
    }

    proptest! {
        /// Any header bytes: never a panic; accepted exactly when the protocol parser accepts
        /// the text, and otherwise a 400 IDEMPOTENCY_KEY_INVALID with a reason.
        #[test]
        fn any_header_value_is_a_key_or_a_400(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let Ok(value) = HeaderValue::from_bytes(&bytes) else { return Ok(()) };
            let result = parse_key_header(&parts_with(std::slice::from_ref(&value)));
            match value.to_str().ok().map(IdempotencyKey::parse) {
                Some(Ok(k)) => prop_assert_eq!(result.unwrap(), k),
                _ => match result {
                    Err(AppError::Client(p)) => {
                        prop_assert_eq!(p.code, ErrorCode::IdempotencyKeyInvalid);
                        prop_assert!(p.reason.is_some());
                    }
                    other => prop_assert!(false, "unexpected {:?}", other.map(|k| k.to_string())),
                },
            }
        }
    }
}
