//! The [`AuthUser`] extractor: a Bearer JWT (`src/auth/jwt.rs`), or a session token
//! (`src/auth/session.rs`) as a Bearer token or the session cookie. `now` is the server's clock.

pub(crate) mod jwt;
pub(crate) mod session;

use crate::clock::Clock;
use crate::error::AppError;
use crate::secret::Secret;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use payonce_protocol::headers::SESSION_COOKIE;
use payonce_protocol::ErrorCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) use crate::auth::session::valid_user_id;

/// What the extractors read: the verifiers of the flags and the clock. A sub-state: the
/// extractors work on any state it is taken from (`FromRef`, `src/state.rs`).
#[derive(Clone)]
pub(crate) struct AuthState {
    /// Session tokens; `None`: `--no-session-tokens`.
    pub(crate) sessions: Option<Arc<session::Sessions>>,
    /// Bearer JWT verification, when keys are configured.
    pub(crate) jwt: Option<Arc<jwt::JwtVerifier>>,
    /// The operator API's token; `None`: `/admin/` is closed.
    pub(crate) operator_token: Option<Arc<Secret>>,
    /// Dev mode only: the operator token `GET /dev/operator` hands to the demo
    /// (`src/config/dev.rs`); always `None` in a production build.
    pub(crate) dev_operator_token: Option<Arc<Secret>>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub(crate) struct AuthUser(pub String);

/// The system clock in unix seconds, for the tools that mint tokens outside a server
/// (`mint-jwt`).
#[cfg_attr(not(feature = "dev"), allow(dead_code))]
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

impl<S: Send + Sync> FromRequestParts<S> for AuthUser
where
    AuthState: FromRef<S>,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AuthState::from_ref(state);
        let now = u64::try_from(state.clock.now_ms() / 1000).unwrap_or(0);
        // An Authorization header wins over the cookie, and a bad one is not rescued by a
        // good cookie: the caller said who it is, and that claim failed.
        let token = match bearer(parts) {
            // A JWT (three dot-separated parts) goes to the JWT verifier only; dev session
            // tokens have four parts and start with `v1.`, so the two never overlap.
            Some(Ok(t)) if t.split('.').count() == 3 => {
                let Some(jwt) = &state.jwt else {
                    return Err(unauthenticated("JWT authentication is not configured"));
                };
                return jwt_user(jwt, t, now)
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
        let Some(sessions) = &state.sessions else {
            return Err(unauthenticated(
                "session tokens are turned off on this server (--no-session-tokens)",
            ));
        };
        sessions
            .verify(token, now)
            .map(AuthUser)
            .ok_or_else(|| unauthenticated("the session token is invalid or expired"))
    }
}

/// An operator of the operator API (`/admin/…`): the caller sent the operator token
/// (`--operator-token-file`), or a valid JWT whose role claim names `--jwt-operator-role`.
/// A customer's valid session or JWT is refused with 403 `OPERATOR_REQUIRED`, anything
/// else with 401, in every build.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operator;

impl<S: Send + Sync> FromRequestParts<S> for Operator
where
    AuthState: FromRef<S>,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = AuthState::from_ref(state);
        let tokens = [&auth.operator_token, &auth.dev_operator_token];
        for token in tokens.into_iter().flatten() {
            if crate::metrics::authorized(&parts.headers, token.expose()) {
                return Ok(Operator);
            }
        }
        if let (Some(Ok(t)), Some(jwt)) = (bearer(parts), &auth.jwt) {
            let now = u64::try_from(auth.clock.now_ms() / 1000).unwrap_or(0);
            if t.split('.').count() == 3 && jwt.is_operator(t, now) {
                return Ok(Operator);
            }
        }
        match AuthUser::from_request_parts(parts, state).await {
            Ok(_) => Err(AppError::code(ErrorCode::OperatorRequired)),
            Err(_) => Err(unauthenticated(
                "/admin/ needs Authorization: Bearer <the operator token>",
            )),
        }
    }
}

/// The user of a valid JWT whose user claim passes the user-id rule.
fn jwt_user(jwt: &crate::auth::jwt::JwtVerifier, token: &str, now: u64) -> Option<String> {
    jwt.verify(token, now).filter(|u| valid_user_id(u))
}

fn unauthenticated(detail: &str) -> AppError {
    AppError::detail(ErrorCode::Unauthenticated, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_user_must_pass_the_user_id_rule() {
        let secret = "jwt-secret-0123456789abcdef0123456789";
        let flags = crate::auth::jwt::JwtArgs {
            hs256_secrets: vec![secret.parse().unwrap()],
            public_keys: Vec::new(),
            jwks: None,
            jwks_reload_secs: 0,
            issuer: "iss".into(),
            audience: "aud".into(),
            max_lifetime_secs: 600,
            leeway_secs: 0,
            user_claim: "sub".into(),
            operator_role: None,
            role_claim: "role".into(),
        };
        let v = crate::auth::jwt::JwtVerifier::new(&flags).unwrap().unwrap();
        let mint = |user: &str| {
            crate::auth::jwt::mint_hs256(secret.as_bytes(), "iss", "aud", user, 1_000, 60).unwrap()
        };
        assert_eq!(
            jwt_user(&v, &mint("alice"), 1_000).as_deref(),
            Some("alice")
        );
        assert_eq!(jwt_user(&v, &mint("alice/../bob"), 1_000), None);
        assert_eq!(jwt_user(&v, &mint(""), 1_000), None);
    }
}
