//! Extractors for the cross-cutting inputs: JSON bodies, path ids, the `Idempotency-Key`
//! header and the dev fault header. Every rejection is an [`AppError`] problem with a stable
//! code, never axum's plain-text default.

use crate::config::Config;
use crate::error::AppError;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header::CONTENT_TYPE, StatusCode};
use axum::Json;
use payonce_protocol::body::DevFault;
use payonce_protocol::headers::{DEV_FAULT, IDEMPOTENCY_KEY};
use payonce_protocol::{ErrorCode, IdempotencyKey, KeyError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// A JSON body. Syntax errors, wrong types and unknown fields are 400 `INVALID_REQUEST`, a
/// missing `Content-Type: application/json` is 415 (the size limit is `refuse_oversized`'s).
/// Every body of this API is an object, and so is every structure in one: serde also reads a
/// struct from an array of its members in order (`[1,"pm_card_approve"]` as a pay body), so
/// that form is refused here ([`objects_only`]).
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Serialize, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        // `refuse_oversized` read it already (held in memory, so this cannot fail).
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        // The usual content type parses here (`Json` only for the message of a refusal); any
        // other goes through `Json`'s own check.
        let json = if parts
            .headers
            .get(CONTENT_TYPE)
            .is_some_and(|v| v == "application/json")
        {
            serde_json::from_slice(&bytes)
                .map(Json)
                .or_else(|_| Json::<T>::from_bytes(&bytes))
        } else {
            let req = Request::from_parts(parts, Body::from(bytes.clone()));
            Json::<T>::from_request(req, state).await
        };
        let unsupported =
            matches!(&json, Err(r) if r.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let sent = serde_json::from_slice::<Value>(&bytes);
        if let (false, Ok(sent)) = (unsupported, &sent) {
            if !sent.is_object() {
                return Err(not_an_object("the body"));
            }
        }
        let Json(value) = json.map_err(json_rejection)?;
        if let Ok(sent) = &sent {
            objects_only(sent, &value)?;
        }
        if holds_nul(&bytes) {
            return Err(nul_refused());
        }
        Ok(Self(value))
    }
}

/// Refuses `sent` unless each structure of `parsed` was sent as an object: `parsed`
/// written back is an object exactly where the type is a struct (or a map), so wherever it
/// is one and `sent` is not, serde read a struct from an array. Members the type leaves out
/// when writing (empty options) are skipped; they were parsed, so they are of the right type.
fn objects_only<T: Serialize>(sent: &Value, parsed: &T) -> Result<(), AppError> {
    fn walk(sent: &Value, back: &Value, at: &mut String) -> Result<(), AppError> {
        match (back, sent) {
            (Value::Object(b), Value::Object(s)) => {
                for (name, b) in b {
                    if let Some(s) = s.get(name) {
                        let len = at.len();
                        at.push_str(&format!(".{name}"));
                        walk(s, b, at)?;
                        at.truncate(len);
                    }
                }
                Ok(())
            }
            (Value::Object(_), _) => Err(not_an_object(&format!("`{at}`"))),
            (Value::Array(b), Value::Array(s)) => {
                for (i, (s, b)) in s.iter().zip(b).enumerate() {
                    let len = at.len();
                    at.push_str(&format!("[{i}]"));
                    walk(s, b, at)?;
                    at.truncate(len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    let back = serde_json::to_value(parsed).map_err(AppError::Reserialize)?;
    walk(sent, &back, &mut String::from("body"))
}

/// A body, or a structure in one, that is valid JSON but not an object.
fn not_an_object(what: &str) -> AppError {
    AppError::detail(
        ErrorCode::InvalidRequest,
        format!("{what} must be a JSON object (`{{...}}`) of the members the API documents, not an array or a scalar"),
    )
}

/// True when a valid JSON text holds a string with U+0000 (it can only be spelled `\u0000`:
/// a raw control byte is not valid JSON). In valid JSON a backslash only appears inside a
/// string and always starts an escape, so skipping each escape keeps `\\u0000` (an escaped
/// backslash, then text) from counting.
pub(crate) fn holds_nul(json: &[u8]) -> bool {
    let mut i = 0;
    while i < json.len() {
        if json[i] == b'\\' {
            if json.get(i + 1..i + 6) == Some(b"u0000".as_slice()) {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// PostgreSQL text cannot hold U+0000 (SQLite can): refused at the edge, the same on both.
pub(crate) fn nul_refused() -> AppError {
    AppError::detail(
        ErrorCode::InvalidRequest,
        "strings must not contain U+0000 (NUL)",
    )
}

fn json_rejection(rejection: JsonRejection) -> AppError {
    match rejection.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => AppError::code(ErrorCode::UnsupportedMediaType),
        // serde's message names the field and the expectation ("unknown field `amount`",
        // "invalid type: string, expected u64"); it holds no server internals, and it is the
        // most useful thing a client developer can read.
        _ => AppError::detail(ErrorCode::InvalidRequest, rejection.body_text()),
    }
}

/// An id from outside: a path segment, a query parameter, a webhook's event id or provider
/// key. Ids are opaque, but none this server or the provider makes is longer than
/// [`Id::MAX_LEN`] or holds a control character, and PostgreSQL text cannot hold U+0000, so
/// anything else is refused (400 `INVALID_REQUEST`) before it reaches the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Id(String);

impl Id {
    /// Longest accepted id.
    pub(crate) const MAX_LEN: usize = 255;

    /// Validates `s`; `what` names it in the problem's detail.
    pub(crate) fn parse(s: &str, what: &str) -> Result<Self, AppError> {
        if s.is_empty() || s.len() > Self::MAX_LEN || s.chars().any(char::is_control) {
            return Err(AppError::detail(
                ErrorCode::InvalidRequest,
                format!(
                    "{what} must be 1..={} bytes without control characters",
                    Self::MAX_LEN
                ),
            ));
        }
        Ok(Self(s.to_owned()))
    }
}

impl std::ops::Deref for Id {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// The `{id}` path parameter, validated as an [`Id`].
pub(crate) struct PathId(pub Id);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e: PathRejection| {
                    AppError::detail(ErrorCode::InvalidRequest, e.body_text())
                })?;
        Id::parse(&id, "the id in the path").map(Self)
    }
}

/// The `Idempotency-Key` header, parsed but not yet judged: the pay rules check ownership of
/// the order first (404) and only then the key (400), so the verdict is kept for the handler.
pub(crate) struct IdemKeyHeader(pub Result<IdempotencyKey, AppError>);

impl<S: Send + Sync> FromRequestParts<S> for IdemKeyHeader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
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
        return Err(AppError::idempotency_key_invalid(
            &KeyError::BadQuoting,
            "more than one Idempotency-Key header",
        ));
    }
    let text = value.to_str().map_err(|_| {
        AppError::idempotency_key_invalid(
            &KeyError::InvalidChar { at: 0 },
            "the header is not visible ASCII",
        )
    })?;
    IdempotencyKey::parse(text).map_err(|e| AppError::idempotency_key_invalid(&e, e.to_string()))
}

/// The dev fault header. Without `--dev` its mere presence is refused (403
/// `DEV_MODE_REQUIRED`): a production server must never drop responses on request.
pub(crate) struct DevFaultHeader(pub Option<DevFault>);

impl<S: Send + Sync> FromRequestParts<S> for DevFaultHeader
where
    std::sync::Arc<Config>: FromRef<S>,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(DEV_FAULT) else {
            return Ok(Self(None));
        };
        if !std::sync::Arc::<Config>::from_ref(state).dev {
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

    #[test]
    fn nul_is_found_only_as_an_escape() {
        assert!(holds_nul(br#"{"a":"x\u0000"}"#));
        assert!(
            !holds_nul(br#"{"a":"x\\u0000"}"#),
            "an escaped backslash, then text"
        );
        assert!(holds_nul(br#"{"a":"\\\u0000"}"#));
        assert!(!holds_nul(br#"{"a":"\u0001"}"#));
    }

    #[test]
    fn structures_sent_as_arrays_are_refused_at_any_depth() {
        use payonce_protocol::body::{CreateOrderRequest, UpdateCartRequest};
        fn refused<T: DeserializeOwned + Serialize>(text: &str) -> Option<String> {
            let sent: Value = serde_json::from_str(text).unwrap();
            let parsed: T = serde_json::from_value(sent.clone()).expect("serde reads it");
            match objects_only(&sent, &parsed) {
                Err(AppError::Client(p)) => p.detail,
                _ => None,
            }
        }
        let line = r#"{"sku":"tee-classic","quantity":2}"#;
        let ok = format!(r#"{{"items":[{line},{line}],"coupon":null}}"#);
        assert_eq!(refused::<CreateOrderRequest>(&ok), None);
        let nested = format!(r#"{{"items":[{line},["tee-classic",2]]}}"#);
        let detail = refused::<CreateOrderRequest>(&nested).expect("refused");
        assert!(
            detail.starts_with("`body.items[1]` must be a JSON object"),
            "{detail}"
        );
        let cart = r#"{"items":[["tee-classic",1]],"address":"1 Main St"}"#;
        assert!(refused::<UpdateCartRequest>(cart).is_some());
        assert_eq!(refused::<UpdateCartRequest>(r#"{"items":null}"#), None);
    }

    #[test]
    fn ids_refuse_control_characters_and_length() {
        assert!(Id::parse("ord_0123", "id").is_ok());
        for bad in ["", "a\0b", "a\nb", &"x".repeat(Id::MAX_LEN + 1)] {
            assert!(Id::parse(bad, "id").is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Any JSON string round-trips through serde_json: `holds_nul` finds U+0000 exactly
        /// when the string has one.
        #[test]
        fn holds_nul_agrees_with_the_decoded_string(s in ".{0,40}") {
            let json = serde_json::to_vec(&serde_json::json!({ "s": s })).unwrap();
            prop_assert_eq!(holds_nul(&json), s.contains('\0'));
        }

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
