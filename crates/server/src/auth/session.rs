//! Session tokens: their flags, signing and verification. A leaf (the command line in
//! `src/config/flags.rs` and the extractor in `src/auth/mod.rs` read it; it reads nothing of the crate
//! but [`Secret`]).
//!
//! A token is `v1.<userId>.<expiresUnixSecs>.<hex HMAC-SHA256(secret, "v1.<userId>.<exp>")>`.
//! User ids use `[A-Za-z0-9_-]`, so the dots cannot be ambiguous. The MAC is checked in
//! constant time (`Mac::verify_slice`); any change to any part of the token is a 401. A token
//! verifies when one of the configured secrets signed it (the first one signs: rotation is
//! "add the new one first, drop the old one once its tokens have expired"), and its expiry is
//! in the future but at most `--session-max-lifetime-secs` away, so a leaked secret cannot
//! mint a token that outlives the next rotation by more than that.

use crate::secret::Secret;
use clap::Args;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How long a dev session lasts, and the default `--session-max-lifetime-secs`: a day is
/// what a sign-in service's session usually lasts, and the dev login mints that.
pub const SESSION_SECS: u64 = 24 * 3600;

/// Shortest explicit session secret in dev mode.
const MIN_DEV_SECRET: usize = 16;

/// The session-token flags.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// Secret for HMAC-signing session tokens, at least 32 bytes; repeatable, or a comma
    /// list, for rotation: the first signs, every one verifies. Several processes behind one
    /// database must share them. Required outside `--dev` unless `--no-session-tokens`; in
    /// dev mode the default is a random secret per process (tokens die with the process).
    #[arg(
        long = "session-secret",
        env = "PAYONCE_SESSION_SECRET",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub secrets: Vec<Secret>,
    /// Longest accepted session: a token whose expiry is further than this from the server's
    /// now is refused (mint tokens a little shorter: clock skew counts against it).
    #[arg(
        long = "session-max-lifetime-secs",
        env = "PAYONCE_SESSION_MAX_LIFETIME_SECS",
        default_value_t = SESSION_SECS
    )]
    pub session_max_lifetime_secs: u64,
    /// Accept no session token at all: users authenticate with JWTs only (JWT keys are then
    /// required, and `--session-secret` is not).
    #[arg(long = "no-session-tokens")]
    pub off: bool,
}

/// The configured session secrets and lifetime bound.
pub(crate) struct Sessions {
    /// Never empty; the first signs.
    secrets: Vec<Vec<u8>>,
    max_lifetime_secs: u64,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sessions({} secrets, max {} s)",
            self.secrets.len(),
            self.max_lifetime_secs
        )
    }
}

/// What the session flags come to.
pub(crate) enum SessionConfig {
    /// Session tokens are accepted.
    On(Sessions),
    /// `--no-session-tokens`.
    Off,
    /// A dev start with a secret under [`MIN_DEV_SECRET`] bytes.
    WeakDevSecret,
}

impl Sessions {
    /// Checks the flags: every problem outside dev as one line each (`Err`), the secrets
    /// (random in dev when none is given) otherwise. `jwt`: JWT keys are configured.
    pub(crate) fn from_args(
        a: &SessionArgs,
        dev: bool,
        jwt: bool,
        min_secret: usize,
    ) -> Result<SessionConfig, Vec<String>> {
        let env = "PAYONCE_SESSION_SECRET";
        let mut problems = Vec::new();
        if a.off {
            if !a.secrets.is_empty() {
                problems.push(format!(
                    "--session-secret ({env}) is given with --no-session-tokens: drop one"
                ));
            }
            if !jwt {
                problems.push(
                    "--no-session-tokens needs JWT keys (--jwt-hs256-secret, --jwt-public-key \
                     or --jwt-jwks): nothing else would authenticate a user"
                        .to_owned(),
                );
            }
            return if problems.is_empty() {
                Ok(SessionConfig::Off)
            } else {
                Err(problems)
            };
        }
        if a.session_max_lifetime_secs == 0 {
            problems.push("--session-max-lifetime-secs must be > 0".to_owned());
        }
        if !dev && a.secrets.is_empty() {
            problems.push(format!(
                "--session-secret ({env}) is required without --dev (at least {min_secret} \
                 bytes), or --no-session-tokens with JWT keys"
            ));
        }
        for (i, s) in a.secrets.iter().enumerate() {
            let n = s.expose().len();
            if !dev && n < min_secret {
                problems.push(format!(
                    "--session-secret #{} ({env}) is {n} bytes; at least {min_secret} are \
                     required without --dev",
                    i + 1
                ));
            } else if dev && n < MIN_DEV_SECRET {
                return Ok(SessionConfig::WeakDevSecret);
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let secrets = if a.secrets.is_empty() {
            let random = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()].map(uuid::Uuid::into_bytes);
            vec![random.concat()]
        } else {
            a.secrets
                .iter()
                .map(|s| s.expose().as_bytes().to_vec())
                .collect()
        };
        Ok(SessionConfig::On(Self {
            secrets,
            max_lifetime_secs: a.session_max_lifetime_secs,
        }))
    }

    /// A token for `user` from `now_secs` for a day, or the lifetime bound if shorter (the
    /// dev login).
    #[cfg_attr(not(feature = "dev"), allow(dead_code))]
    pub(crate) fn sign(&self, user: &str, now_secs: u64) -> (String, u64) {
        let ttl = SESSION_SECS.min(self.max_lifetime_secs);
        (sign_token(&self.secrets[0], user, now_secs + ttl), ttl)
    }

    /// The user of a token one of the secrets signed, whose expiry is after `now_secs` and
    /// at most the lifetime bound after it.
    pub(crate) fn verify(&self, token: &str, now_secs: u64) -> Option<String> {
        let latest = now_secs.saturating_add(self.max_lifetime_secs);
        self.secrets.iter().find_map(|s| {
            let (user, expires) = verify_token(s, token)?;
            (expires > now_secs && expires <= latest).then_some(user)
        })
    }
}

/// Whether a user id passes the user-id rule: 1-64 of `[A-Za-z0-9_-]`.
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
/// shares `--session-secret` mints the tokens this server accepts (at most
/// `--session-max-lifetime-secs` ahead).
pub fn sign_token(secret: &[u8], user: &str, expires: u64) -> String {
    let payload = format!("v1.{user}.{expires}");
    let tag = mac(secret, &payload).finalize().into_bytes();
    format!("{payload}.{}", hex::encode(tag))
}

/// The user and expiry of a token `secret` signed (expiry not checked). The MAC runs over
/// the token's own bytes and the tag is decoded on the stack: no allocation before the
/// signature is known to be good.
fn verify_token(secret: &[u8], token: &str) -> Option<(String, u64)> {
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
    Some((user.to_owned(), expires))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"0123456789abcdef0123";
    const OLD: &str = "old-session-secret-0123456789abcdef";
    const NEW: &str = "new-session-secret-0123456789abcdef";

    fn sessions(secrets: &[&str], max: u64) -> Sessions {
        let a = SessionArgs {
            secrets: secrets.iter().map(|s| s.parse().unwrap()).collect(),
            session_max_lifetime_secs: max,
            off: false,
        };
        match Sessions::from_args(&a, false, false, 32) {
            Ok(SessionConfig::On(s)) => s,
            _ => panic!("valid session flags"),
        }
    }

    fn verify(secret: &[u8], token: &str, now: u64) -> Option<String> {
        Sessions {
            secrets: vec![secret.to_vec()],
            max_lifetime_secs: u64::MAX,
        }
        .verify(token, now)
    }

    #[test]
    fn a_signed_token_verifies_until_it_expires() {
        let t = sign_token(SECRET, "alice", 1_000);
        assert_eq!(verify(SECRET, &t, 999).as_deref(), Some("alice"));
        assert_eq!(verify(SECRET, &t, 1_000), None);
        assert_eq!(verify(b"another-secret-entirely", &t, 999), None);
    }

    #[test]
    fn changing_the_user_breaks_the_signature() {
        let t = sign_token(SECRET, "alice", 1_000);
        let forged = t.replacen("alice", "bob", 1);
        assert_eq!(verify(SECRET, &forged, 1), None);
    }

    #[test]
    fn a_token_expiring_past_the_lifetime_bound_is_refused() {
        let s = sessions(&[NEW], 3_600);
        let now = 1_900_000_000;
        let at = |exp: u64| sign_token(NEW.as_bytes(), "alice", exp);
        assert_eq!(s.verify(&at(now + 3_600), now).as_deref(), Some("alice"));
        assert_eq!(s.verify(&at(now + 3_601), now), None, "one second too long");
        assert_eq!(s.verify(&at(u64::MAX), now), None, "a token for ever");
        // The dev login mints within the bound.
        let (t, ttl) = s.sign("alice", now);
        assert_eq!((s.verify(&t, now).as_deref(), ttl), (Some("alice"), 3_600));
    }

    #[test]
    fn during_a_rotation_both_secrets_verify_and_the_first_signs() {
        let both = sessions(&[NEW, OLD], 3_600);
        let now = 1_900_000_000;
        for secret in [OLD, NEW] {
            let t = sign_token(secret.as_bytes(), "alice", now + 60);
            assert_eq!(both.verify(&t, now).as_deref(), Some("alice"), "{secret}");
        }
        let (t, _) = both.sign("alice", now);
        assert_eq!(t, sign_token(NEW.as_bytes(), "alice", now + 3_600));
        let after = sessions(&[NEW], 3_600);
        let old = sign_token(OLD.as_bytes(), "alice", now + 60);
        assert_eq!(after.verify(&old, now), None, "the dropped secret is gone");
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
                prop_assert_eq!(verify(SECRET, &s, 1), None);
            }
        }

        #[test]
        fn arbitrary_strings_never_verify_or_panic(s in ".{0,200}") {
            prop_assert_eq!(verify(SECRET, &s, 1), None);
        }
    }
}
