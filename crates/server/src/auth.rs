//! Dev sessions and the [`AuthUser`] extractor.
//!
//! A token is `v1.<userId>.<expiresUnixSecs>.<hex HMAC-SHA256(secret, "v1.<userId>.<exp>")>`.
//! User ids use `[A-Za-z0-9_-]`, so the dots cannot be ambiguous. The MAC is checked in
//! constant time (`Mac::verify_slice`); any change to any part of the token is a 401.

use crate::error::AppError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use hmac::{Hmac, KeyInit, Mac};
use payonce_protocol::headers::SESSION_COOKIE;
use payonce_protocol::ErrorCode;
use sha2::Sha256;
use std::time::{SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// How long a dev session lasts.
pub const SESSION_SECS: u64 = 24 * 3600;

/// The authenticated caller.
#[derive(Debug, Clone)]
pub(crate) struct AuthUser(pub String);

/// Why a user id is refused.
pub(crate) fn valid_user_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn mac(secret: &[u8], payload: &str) -> HmacSha256 {
    // HMAC accepts keys of any length; this cannot fail.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(payload.as_bytes());
    m
}

/// Signs a token for `user` valid until `expires` (unix seconds): how a sign-in service that
/// shares `--session-secret` mints the tokens this server accepts.
pub fn sign_token(secret: &[u8], user: &str, expires: u64) -> String {
    let payload = format!("v1.{user}.{expires}");
    let tag = mac(secret, &payload).finalize().into_bytes();
    format!("{payload}.{}", hex::encode(tag))
}

/// Verifies a token; returns the user id. The MAC runs over the token's own bytes and the
/// tag is decoded on the stack: no allocation before the signature is known to be good.
pub(crate) fn verify_token(secret: &[u8], token: &str, now_secs: u64) -> Option<String> {
    let (payload, sig) = token.rsplit_once('.')?;
    let mut parts = payload.split('.');
    let (Some("v1"), Some(user), Some(exp), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if !valid_user_id(user) || exp.len() > 20 || sig.len() != 64 {
        return None;
    }
    let expires: u64 = exp.parse().ok()?;
    // Lower-case only: one spelling per token.
    if !sig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut tag = [0u8; 32];
    hex::decode_to_slice(sig, &mut tag).ok()?;
    mac(secret, payload).verify_slice(&tag).ok()?;
    (expires > now_secs).then(|| user.to_owned())
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn bearer(parts: &Parts) -> Option<Result<&str, ()>> {
    let value = parts.headers.get(header::AUTHORIZATION)?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(()),
    )
}

fn cookie(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v)
}

impl FromRequestParts<AppState> for AuthUser {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // An Authorization header wins over the cookie, and a bad one is not rescued by a
        // good cookie: the caller said who it is, and that claim failed.
        let token = match bearer(parts) {
            // A JWT (three dot-separated parts) goes to the JWT verifier only; dev session
            // tokens have four parts and start with `v1.`, so the two never overlap.
            Some(Ok(t)) if t.split('.').count() == 3 => {
                let Some(jwt) = &state.config.jwt else {
                    return Err(unauthenticated("JWT authentication is not configured"));
                };
                return jwt_user(jwt, t, now_secs())
                    .map(AuthUser)
                    .ok_or_else(|| unauthenticated("the JWT is invalid or expired"));
            }
            Some(Ok(t)) => t,
            Some(Err(())) => {
                return Err(unauthenticated(
                    "the Authorization header is not a Bearer token",
                ))
            }
            None => cookie(parts).ok_or_else(|| unauthenticated("no session token or cookie"))?,
        };
        verify_token(&state.config.session_secret, token, now_secs())
            .map(AuthUser)
            .ok_or_else(|| unauthenticated("the session token is invalid or expired"))
    }
}

/// The user of a valid JWT whose user claim passes the user-id rule.
fn jwt_user(jwt: &crate::jwt::JwtVerifier, token: &str, now: u64) -> Option<String> {
    jwt.verify(token, now).filter(|u| valid_user_id(u))
}

fn unauthenticated(detail: &str) -> AppError {
    AppError::detail(ErrorCode::Unauthenticated, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"0123456789abcdef0123";

    #[test]
    fn a_signed_token_verifies_until_it_expires() {
        let t = sign_token(SECRET, "alice", 1_000);
        assert_eq!(verify_token(SECRET, &t, 999).as_deref(), Some("alice"));
        assert_eq!(verify_token(SECRET, &t, 1_000), None);
        assert_eq!(verify_token(b"another-secret-entirely", &t, 999), None);
    }

    #[test]
    fn changing_the_user_breaks_the_signature() {
        let t = sign_token(SECRET, "alice", 1_000);
        let forged = t.replacen("alice", "bob", 1);
        assert_eq!(verify_token(SECRET, &forged, 1), None);
    }

    #[test]
    fn a_jwt_user_must_pass_the_user_id_rule() {
        let secret = "jwt-secret-0123456789abcdef0123456789";
        let flags = crate::jwt::JwtArgs {
            hs256_secrets: vec![secret.to_owned()],
            public_keys: Vec::new(),
            jwks: None,
            issuer: "iss".into(),
            audience: "aud".into(),
            max_lifetime_secs: 600,
            leeway_secs: 0,
            user_claim: "sub".into(),
        };
        let v = crate::jwt::JwtVerifier::new(&flags).unwrap().unwrap();
        let mint = |user: &str| {
            crate::jwt::mint_hs256(secret.as_bytes(), "iss", "aud", user, 1_000, 60).unwrap()
        };
        assert_eq!(
            jwt_user(&v, &mint("alice"), 1_000).as_deref(),
            Some("alice")
        );
        assert_eq!(jwt_user(&v, &mint("alice/../bob"), 1_000), None);
        assert_eq!(jwt_user(&v, &mint(""), 1_000), None);
    }

    proptest! {
        #[test]
        fn any_single_byte_change_is_rejected(pos in 0usize..200, byte in 0u8..128) {
            let t = sign_token(SECRET, "alice", 5_000);
            let mut bytes = t.clone().into_bytes();
            let i = pos % bytes.len();
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
            if let Ok(s) = String::from_utf8(bytes) {
                prop_assert_eq!(verify_token(SECRET, &s, 1), None);
            }
        }

        #[test]
        fn arbitrary_strings_never_verify_or_panic(s in ".{0,200}") {
            prop_assert_eq!(verify_token(SECRET, &s, 1), None);
        }
    }
}
