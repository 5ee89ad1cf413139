//! Verification of the identity provider's JWTs (`jsonwebtoken`, pure-Rust crypto).
//!
//! A token is accepted only when its signature verifies with one of the configured keys
//! for the algorithm its header names (HS256 with a shared secret, RS256/ES256 with a
//! public key), its `iss` and `aud` are the configured ones, `exp` is present, in the
//! future and at most `max_lifetime` away (and `exp - iat` too when `iat` is given), and
//! the configured claim holds a valid user id. `alg: none` is not an algorithm the crate
//! parses, so such a token never reaches a key. Time is an input (`now`), never read here.
//!
//! A `kid` in a token's header only narrows the keys tried: a key with another `kid` is
//! skipped, a key without one (an HS256 secret, a PEM file, a JWKS entry with no `kid`) is
//! tried whatever the token names. The header is unauthenticated, so it must never widen
//! what verifies; narrowing it further (refusing a named `kid` that no key carries) would buy
//! nothing, since every configured key is trusted for the same issuer and audience, and would
//! lock out identity providers that name a `kid` on HS256 tokens too.
//!
//! The JWKS file is read at start and again on `SIGHUP` and every `--jwt-jwks-reload-secs`
//! ([`JwtVerifier::reload_jwks`]), so a key rotation needs no restart; a file that no longer
//! reads or parses keeps the keys already loaded (and says so in the log).

use crate::secret::Secret;
use clap::Args;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Bearer JWTs from the identity provider. With any key set, `--jwt-issuer` and
/// `--jwt-audience` are required. Several keys may be given at once for rotation.
#[derive(Debug, Clone, Args)]
pub struct JwtArgs {
    /// HS256 shared secret, at least 32 bytes (repeatable, or a comma list).
    #[arg(
        long = "jwt-hs256-secret",
        env = "PAYONCE_JWT_HS256_SECRETS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub hs256_secrets: Vec<Secret>,
    /// RS256 (RSA) or ES256 (P-256) public key, PEM file (repeatable).
    #[arg(
        long = "jwt-public-key",
        env = "PAYONCE_JWT_PUBLIC_KEYS",
        value_delimiter = ','
    )]
    pub public_keys: Vec<PathBuf>,
    /// JWKS file (`{"keys": [...]}`) of RSA / P-256 keys; a token's `kid` picks its key.
    #[arg(long = "jwt-jwks", env = "PAYONCE_JWT_JWKS")]
    pub jwks: Option<PathBuf>,
    /// How often the `--jwt-jwks` file is read again (0: only at start and on `SIGHUP`).
    #[arg(
        long = "jwt-jwks-reload-secs",
        env = "PAYONCE_JWT_JWKS_RELOAD_SECS",
        default_value_t = 300
    )]
    pub jwks_reload_secs: u64,
    /// Required `iss`.
    #[arg(long = "jwt-issuer", env = "PAYONCE_JWT_ISSUER", default_value = "")]
    pub issuer: String,
    /// Required `aud` (one of the token's audiences).
    #[arg(
        long = "jwt-audience",
        env = "PAYONCE_JWT_AUDIENCE",
        default_value = ""
    )]
    pub audience: String,
    /// Longest accepted lifetime: `exp` at most this far from now (and from `iat`).
    #[arg(
        long = "jwt-max-lifetime-secs",
        env = "PAYONCE_JWT_MAX_LIFETIME_SECS",
        default_value_t = 3_600
    )]
    pub max_lifetime_secs: u64,
    /// Clock skew allowed on `exp` and `nbf`, at most 300 (an expired token is accepted
    /// this long).
    #[arg(
        long = "jwt-leeway-secs",
        env = "PAYONCE_JWT_LEEWAY_SECS",
        default_value_t = 30
    )]
    pub leeway_secs: u64,
    /// The claim holding the user id (it must pass the user-id rule: 1-64 of
    /// `[A-Za-z0-9_-]`).
    #[arg(
        long = "jwt-user-claim",
        env = "PAYONCE_JWT_USER_CLAIM",
        default_value = "sub"
    )]
    pub user_claim: String,
    /// A role that makes a valid JWT an operator's (the operator API, `/admin/…`;
    /// docs/operating.md): its `--jwt-role-claim` is this string, or an array holding it.
    /// Unset: no JWT reaches `/admin/`.
    #[arg(long = "jwt-operator-role", env = "PAYONCE_JWT_OPERATOR_ROLE")]
    pub operator_role: Option<String>,
    /// The claim holding the roles (a string or an array of strings).
    #[arg(
        long = "jwt-role-claim",
        env = "PAYONCE_JWT_ROLE_CLAIM",
        default_value = "role"
    )]
    pub role_claim: String,
}

/// One verification key: the algorithm it is for and, from a JWKS, its `kid`.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// The configured issuer, audience, keys and bounds.
pub(crate) struct JwtVerifier {
    /// The HS256 secrets and PEM keys, fixed for the life of the process.
    keys: Vec<Key>,
    /// The `--jwt-jwks` file and its keys as last read.
    jwks: Option<(PathBuf, RwLock<Arc<Vec<Key>>>)>,
    jwks_reload_secs: u64,
    issuer: String,
    audience: String,
    max_lifetime_secs: u64,
    leeway_secs: u64,
    user_claim: String,
    /// `--jwt-operator-role` (empty: none) and `--jwt-role-claim`.
    operator_role: Option<String>,
    role_claim: String,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "JwtVerifier({} keys, jwks {:?}, iss {:?}, aud {:?})",
            self.keys.len(),
            self.jwks.as_ref().map(|(p, _)| p),
            self.issuer,
            self.audience
        )
    }
}

/// Shortest HS256 secret accepted (RFC 7518 §3.2: at least the hash size).
pub(crate) const MIN_HS256_SECRET: usize = 32;

/// Largest `--jwt-leeway-secs`: five minutes covers any clock that is kept in sync at all
/// (it is Kerberos' default skew); more would keep every expired token alive that long.
pub(crate) const MAX_LEEWAY_SECS: u64 = 300;

/// The keys of a JWKS file, or why it cannot be used.
fn read_jwks(path: &Path) -> Result<Vec<Key>, String> {
    let at = format!("--jwt-jwks {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("{at}: {e}"))?;
    let set: JwkSet = serde_json::from_str(&text).map_err(|e| format!("{at}: {e}"))?;
    let mut keys = Vec::with_capacity(set.keys.len());
    for jwk in &set.keys {
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("{at}: {e}"))?;
        let key = asymmetric(key, jwk.common.key_id.clone());
        keys.push(key.ok_or(format!("{at}: only RSA and P-256 keys are accepted"))?);
    }
    Ok(keys)
}

/// The RS256 or ES256 key of a PEM file or JWK (only RSA and P-256 keys are accepted).
fn asymmetric(key: DecodingKey, kid: Option<String>) -> Option<Key> {
    let alg = match key.family() {
        AlgorithmFamily::Rsa => Algorithm::RS256,
        AlgorithmFamily::Ec => Algorithm::ES256,
        _ => return None,
    };
    Some(Key { kid, alg, key })
}

impl JwtVerifier {
    /// Loads and checks every key of the flags; any unreadable or unusable one is an error
    /// naming it. `None`: no key is configured, JWTs are off.
    pub(crate) fn new(args: &JwtArgs) -> Result<Option<Self>, String> {
        if args.hs256_secrets.is_empty() && args.public_keys.is_empty() && args.jwks.is_none() {
            return Ok(None);
        }
        if args.leeway_secs > MAX_LEEWAY_SECS {
            return Err(format!(
                "--jwt-leeway-secs ({}) must be at most {MAX_LEEWAY_SECS}",
                args.leeway_secs
            ));
        }
        let mut keys = Vec::new();
        for (i, s) in args.hs256_secrets.iter().enumerate() {
            let s = s.expose();
            if s.len() < MIN_HS256_SECRET {
                return Err(format!(
                    "--jwt-hs256-secret #{}: at least {MIN_HS256_SECRET} bytes",
                    i + 1
                ));
            }
            let key = DecodingKey::from_secret(s.as_bytes());
            keys.push(Key {
                kid: None,
                alg: Algorithm::HS256,
                key,
            });
        }
        for path in &args.public_keys {
            let at = format!("--jwt-public-key {}", path.display());
            let pem = std::fs::read(path).map_err(|e| format!("{at}: {e}"))?;
            let key = DecodingKey::from_rsa_pem(&pem).or_else(|_| DecodingKey::from_ec_pem(&pem));
            let key = key.ok().and_then(|k| asymmetric(k, None));
            keys.push(key.ok_or(format!("{at}: not an RSA or P-256 public key in PEM"))?);
        }
        let jwks = match &args.jwks {
            Some(path) => Some((path.clone(), read_jwks(path)?)),
            None => None,
        };
        if keys.is_empty() && jwks.as_ref().is_none_or(|(_, k)| k.is_empty()) {
            return Err("JWT verification needs at least one key".into());
        }
        if args.issuer.is_empty() || args.audience.is_empty() {
            return Err("--jwt-issuer and --jwt-audience are required with JWT keys".into());
        }
        Ok(Some(Self {
            keys,
            jwks: jwks.map(|(path, keys)| (path, RwLock::new(Arc::new(keys)))),
            jwks_reload_secs: args.jwks_reload_secs,
            issuer: args.issuer.clone(),
            audience: args.audience.clone(),
            max_lifetime_secs: args.max_lifetime_secs,
            leeway_secs: args.leeway_secs,
            user_claim: args.user_claim.clone(),
            operator_role: args.operator_role.clone().filter(|r| !r.is_empty()),
            role_claim: args.role_claim.clone(),
        }))
    }

    /// Reads the `--jwt-jwks` file again and, if it is usable, verifies with its keys from
    /// now on; otherwise keeps the keys it has. `None`: no JWKS file is configured.
    pub(crate) fn reload_jwks(&self) -> Option<Result<usize, String>> {
        let (path, keys) = self.jwks.as_ref()?;
        Some(read_jwks(path).map(|fresh| {
            let n = fresh.len();
            *keys
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(fresh);
            n
        }))
    }

    /// Whether a `--jwt-jwks` file is configured.
    pub(crate) fn has_jwks(&self) -> bool {
        self.jwks.is_some()
    }

    /// The `--jwt-jwks-reload-secs` period, when a JWKS file is configured and the period is
    /// not 0.
    pub(crate) fn jwks_reload_every(&self) -> Option<std::time::Duration> {
        (self.jwks.is_some() && self.jwks_reload_secs > 0)
            .then(|| std::time::Duration::from_secs(self.jwks_reload_secs))
    }

    /// The user claim of a valid token, or `None`.
    pub(crate) fn verify(&self, token: &str, now_secs: u64) -> Option<String> {
        let claims = self.claims(token, now_secs)?;
        // The caller (`src/auth/mod.rs`) applies the user-id rule.
        claims.get(&self.user_claim)?.as_str().map(str::to_owned)
    }

    /// True when `token` is valid and its role claim names `--jwt-operator-role`.
    pub(crate) fn is_operator(&self, token: &str, now_secs: u64) -> bool {
        let Some(role) = &self.operator_role else {
            return false;
        };
        let Some(claims) = self.claims(token, now_secs) else {
            return false;
        };
        match claims.get(&self.role_claim) {
            Some(serde_json::Value::String(r)) => r == role,
            Some(serde_json::Value::Array(rs)) => rs.iter().any(|r| r.as_str() == Some(role)),
            _ => false,
        }
    }

    /// The claims of a valid token (signature, issuer, audience, times), or `None`.
    fn claims(
        &self,
        token: &str,
        now_secs: u64,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        // Time is checked below against the caller's `now`.
        (validation.validate_exp, validation.validate_nbf) = (false, false);
        // A kid narrows the keys tried, never widens them (module doc); without one, each
        // key of the token's algorithm is tried (rotation: old and new both configured).
        type Claims = serde_json::Map<String, serde_json::Value>;
        let jwks = self.jwks.as_ref().map(|(_, keys)| {
            keys.read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        });
        let claims = self
            .keys
            .iter()
            .chain(jwks.iter().flat_map(|k| k.iter()))
            .filter(|k| k.alg == header.alg)
            .filter(|k| header.kid.is_none() || k.kid.is_none() || header.kid == k.kid)
            .find_map(|k| jsonwebtoken::decode::<Claims>(token, &k.key, &validation).ok())?
            .claims;
        let (leeway, max) = (self.leeway_secs, self.max_lifetime_secs);
        let exp = claims.get("exp")?.as_u64()?;
        if exp.saturating_add(leeway) <= now_secs
            || exp > now_secs.saturating_add(max).saturating_add(leeway)
        {
            return None;
        }
        if let Some(iat) = claims.get("iat") {
            if exp.saturating_sub(iat.as_u64()?) > max {
                return None;
            }
        }
        if let Some(nbf) = claims.get("nbf") {
            if nbf.as_u64()? > now_secs.saturating_add(leeway) {
                return None;
            }
        }
        Some(claims)
    }
}

/// Signs an HS256 token (the dev build's `mint-jwt` and the tests).
#[cfg_attr(not(any(feature = "dev", test)), allow(dead_code))]
pub(crate) fn mint_hs256(
    secret: &[u8],
    issuer: &str,
    audience: &str,
    user: &str,
    now_secs: u64,
    ttl_secs: u64,
) -> Result<String, String> {
    let claims = serde_json::json!({
        "iss": issuer, "aud": audience, "sub": user,
        "iat": now_secs, "exp": now_secs + ttl_secs,
    });
    let key = jsonwebtoken::EncodingKey::from_secret(secret);
    jsonwebtoken::encode(&jsonwebtoken::Header::new(Algorithm::HS256), &claims, &key)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;
    use std::path::Path;

    const ISS: &str = "https://id.example";
    const AUD: &str = "payonce";
    const NOW: u64 = 1_900_000_000;
    const OLD: &str = "old-secret-0123456789abcdef0123456789";
    const NEW: &str = "new-secret-0123456789abcdef0123456789";

    fn claims(exp_in: i64) -> serde_json::Value {
        json!({ "iss": ISS, "aud": AUD, "sub": "alice", "iat": NOW, "exp": NOW as i64 + exp_in })
    }

    fn hs(secret: &str, claims: &serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    /// The flags with these keys, issuer [`ISS`], audience [`AUD`], no leeway.
    fn flags(secrets: &[&str], keys: &[PathBuf], jwks: Option<&Path>) -> JwtArgs {
        JwtArgs {
            hs256_secrets: secrets.iter().map(|s| s.parse().unwrap()).collect(),
            public_keys: keys.to_vec(),
            jwks: jwks.map(Path::to_path_buf),
            jwks_reload_secs: 0,
            issuer: ISS.into(),
            audience: AUD.into(),
            max_lifetime_secs: 3600,
            leeway_secs: 0,
            user_claim: "sub".into(),
            operator_role: None,
            role_claim: "role".into(),
        }
    }

    fn verifier(secrets: &[&str], keys: &[PathBuf], jwks: Option<&Path>) -> JwtVerifier {
        JwtVerifier::new(&flags(secrets, keys, jwks))
            .unwrap()
            .unwrap()
    }

    /// Keys made at test time with the openssl command line (a missing openssl fails).
    struct Keys {
        dir: PathBuf,
    }

    impl Keys {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!("payonce-jwt-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            Self { dir }
        }
        fn openssl(&self, args: &[&str]) -> String {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&self.dir)
                .output()
                .expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        }
        /// (private PEM bytes, public PEM path)
        fn pair(&self, name: &str, rsa: bool) -> (Vec<u8>, PathBuf) {
            let private = format!("{name}.key");
            let public = format!("{name}.pub");
            let opt = if rsa {
                ["RSA", "rsa_keygen_bits:2048"]
            } else {
                ["EC", "ec_paramgen_curve:P-256"]
            };
            self.openssl(&[
                "genpkey",
                "-algorithm",
                opt[0],
                "-pkeyopt",
                opt[1],
                "-out",
                &private,
            ]);
            self.openssl(&["pkey", "-in", &private, "-pubout", "-out", &public]);
            (
                std::fs::read(self.dir.join(&private)).unwrap(),
                self.dir.join(public),
            )
        }
        fn modulus_b64(&self, name: &str) -> String {
            let out = self.openssl(&["rsa", "-in", &format!("{name}.key"), "-noout", "-modulus"]);
            let bytes = hex::decode(out.trim().trim_start_matches("Modulus=")).unwrap();
            b64url(&bytes)
        }
    }

    impl Drop for Keys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn b64url(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b))
                << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn only_a_valid_hs256_token_is_accepted() {
        let v = verifier(&[NEW], &[], None);
        assert_eq!(
            v.verify(&hs(NEW, &claims(600)), NOW).as_deref(),
            Some("alice")
        );
        // expired
        assert_eq!(v.verify(&hs(NEW, &claims(-1)), NOW), None);
        assert_eq!(v.verify(&hs(NEW, &claims(600)), NOW + 600), None);
        // wrong issuer, wrong audience
        let mut c = claims(600);
        c["iss"] = json!("https://evil.example");
        assert_eq!(v.verify(&hs(NEW, &c), NOW), None);
        let mut c = claims(600);
        c["aud"] = json!("someone-else");
        assert_eq!(v.verify(&hs(NEW, &c), NOW), None);
        // wrong key
        assert_eq!(v.verify(&hs(OLD, &claims(600)), NOW), None);
        // no exp at all
        let mut c = claims(600);
        c.as_object_mut().unwrap().remove("exp");
        assert_eq!(v.verify(&hs(NEW, &c), NOW), None);
        // lifetime over the bound: exp too far from now, or from iat
        assert_eq!(v.verify(&hs(NEW, &claims(3601)), NOW), None);
        let mut c = claims(600);
        c["iat"] = json!(NOW - 3600);
        assert_eq!(v.verify(&hs(NEW, &c), NOW), None);
        // garbage
        assert_eq!(v.verify("a.b.c", NOW), None);
    }

    #[test]
    fn alg_none_is_refused() {
        let v = verifier(&[NEW], &[], None);
        let enc = |v: &serde_json::Value| b64url(v.to_string().as_bytes());
        let header = enc(&json!({ "alg": "none", "typ": "JWT" }));
        let body = enc(&claims(600));
        assert_eq!(v.verify(&format!("{header}.{body}."), NOW), None);
        // The same claims with a valid HS256 signature pass: only the alg differs.
        assert!(v.verify(&hs(NEW, &claims(600)), NOW).is_some());
    }

    #[test]
    fn during_a_rotation_old_and_new_keys_are_both_valid() {
        let both = verifier(&[OLD, NEW], &[], None);
        assert_eq!(
            both.verify(&hs(OLD, &claims(60)), NOW).as_deref(),
            Some("alice")
        );
        assert_eq!(
            both.verify(&hs(NEW, &claims(60)), NOW).as_deref(),
            Some("alice")
        );
        let other = "other-secret-0123456789abcdef01234567";
        assert_eq!(both.verify(&hs(other, &claims(60)), NOW), None);
        // After the rotation the old key is gone.
        let after = verifier(&[NEW], &[], None);
        assert_eq!(after.verify(&hs(OLD, &claims(60)), NOW), None);
    }

    #[test]
    fn rs256_and_es256_with_pem_keys_and_a_jwks() {
        let keys = Keys::new();
        let (rsa_priv, rsa_pub) = keys.pair("rsa", true);
        let (ec_priv, ec_pub) = keys.pair("ec", false);
        let (other_priv, _) = keys.pair("other", true);
        let rs = |pem: &[u8], kid: Option<&str>| {
            let mut h = Header::new(Algorithm::RS256);
            h.kid = kid.map(str::to_owned);
            jsonwebtoken::encode(&h, &claims(600), &EncodingKey::from_rsa_pem(pem).unwrap())
                .unwrap()
        };
        let es = jsonwebtoken::encode(
            &Header::new(Algorithm::ES256),
            &claims(600),
            &EncodingKey::from_ec_pem(&ec_priv).unwrap(),
        )
        .unwrap();
        let v = verifier(&[], &[rsa_pub.clone(), ec_pub], None);
        assert_eq!(
            v.verify(&rs(&rsa_priv, None), NOW).as_deref(),
            Some("alice")
        );
        assert_eq!(v.verify(&es, NOW).as_deref(), Some("alice"));
        assert_eq!(v.verify(&rs(&other_priv, None), NOW), None, "wrong RSA key");
        // Algorithm confusion: an HS256 token keyed with the public PEM's bytes.
        let pem = std::fs::read_to_string(&rsa_pub).unwrap();
        assert_eq!(v.verify(&hs(&pem, &claims(600)), NOW), None);
        // JWKS: the kid picks the key.
        let jwks = json!({ "keys": [{
            "kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
            "n": keys.modulus_b64("rsa"), "e": "AQAB",
        }]});
        let path = keys.dir.join("jwks.json");
        std::fs::write(&path, jwks.to_string()).unwrap();
        let v = verifier(&[], &[], Some(&path));
        assert_eq!(
            v.verify(&rs(&rsa_priv, Some("k1")), NOW).as_deref(),
            Some("alice")
        );
        assert_eq!(
            v.verify(&rs(&rsa_priv, Some("k2")), NOW),
            None,
            "unknown kid"
        );
        assert_eq!(v.verify(&rs(&other_priv, Some("k1")), NOW), None);
    }

    /// A JWKS of RSA keys `(kid, name)` made by [`Keys::pair`].
    fn jwks(keys: &Keys, entries: &[(&str, &str)]) -> String {
        let keys: Vec<_> = entries
            .iter()
            .map(|(kid, name)| {
                json!({ "kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                        "n": keys.modulus_b64(name), "e": "AQAB" })
            })
            .collect();
        json!({ "keys": keys }).to_string()
    }

    fn rs_kid(pem: &[u8], kid: &str) -> String {
        let mut h = Header::new(Algorithm::RS256);
        h.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&h, &claims(600), &EncodingKey::from_rsa_pem(pem).unwrap()).unwrap()
    }

    #[test]
    fn a_rotated_jwks_file_is_used_after_a_reload_and_a_broken_one_is_not() {
        let keys = Keys::new();
        let (old_priv, _) = keys.pair("old", true);
        let (new_priv, _) = keys.pair("new", true);
        let path = keys.dir.join("jwks.json");
        std::fs::write(&path, jwks(&keys, &[("old", "old")])).unwrap();
        let v = verifier(&[], &[], Some(&path));
        assert!(v.verify(&rs_kid(&old_priv, "old"), NOW).is_some());
        assert_eq!(v.verify(&rs_kid(&new_priv, "new"), NOW), None, "not yet");
        // The identity provider rotates: the file now holds the new key only.
        std::fs::write(&path, jwks(&keys, &[("new", "new")])).unwrap();
        assert_eq!(v.reload_jwks(), Some(Ok(1)));
        assert_eq!(
            v.verify(&rs_kid(&new_priv, "new"), NOW).as_deref(),
            Some("alice")
        );
        assert_eq!(v.verify(&rs_kid(&old_priv, "old"), NOW), None, "retired");
        // A half-written file keeps the keys loaded before.
        std::fs::write(&path, "{\"keys\": [").unwrap();
        assert!(matches!(v.reload_jwks(), Some(Err(_))));
        assert!(v.verify(&rs_kid(&new_priv, "new"), NOW).is_some());
        assert_eq!(verifier(&[NEW], &[], None).reload_jwks(), None);
    }

    #[test]
    fn a_kid_skips_keys_of_another_kid_but_not_keys_without_one() {
        let keys = Keys::new();
        let (a_priv, a_pub) = keys.pair("a", true);
        let (b_priv, _) = keys.pair("b", true);
        let path = keys.dir.join("jwks.json");
        std::fs::write(&path, jwks(&keys, &[("b", "b")])).unwrap();
        let v = verifier(&[], &[a_pub], Some(&path));
        // The PEM key has no kid: whatever kid the token names, it is tried.
        assert!(v.verify(&rs_kid(&a_priv, "anything"), NOW).is_some());
        // The JWKS key is tried only for its own kid.
        assert!(v.verify(&rs_kid(&b_priv, "b"), NOW).is_some());
        assert_eq!(v.verify(&rs_kid(&b_priv, "c"), NOW), None);
    }

    #[test]
    fn the_leeway_is_bounded_at_start() {
        let at = |leeway_secs| JwtArgs {
            leeway_secs,
            ..flags(&[NEW], &[], None)
        };
        assert!(JwtVerifier::new(&at(MAX_LEEWAY_SECS)).is_ok());
        let e = JwtVerifier::new(&at(MAX_LEEWAY_SECS + 1)).unwrap_err();
        assert!(e.starts_with("--jwt-leeway-secs (301)"), "{e}");
        assert!(JwtVerifier::new(&at(u64::MAX)).is_err());
    }

    #[test]
    fn the_user_id_comes_from_the_configured_claim() {
        let v = JwtArgs {
            user_claim: "uid".into(),
            ..flags(&[NEW], &[], None)
        };
        let v = JwtVerifier::new(&v).unwrap().unwrap();
        let mut c = claims(600);
        c["uid"] = json!("user_42");
        assert_eq!(v.verify(&hs(NEW, &c), NOW).as_deref(), Some("user_42"));
        assert_eq!(v.verify(&hs(NEW, &claims(600)), NOW), None, "no uid claim");
    }

    /// Only a valid token whose role claim names the operator role is an operator's.
    #[test]
    fn the_operator_role_comes_from_the_role_claim() {
        let args = JwtArgs {
            operator_role: Some("payonce-operator".into()),
            ..flags(&[NEW], &[], None)
        };
        let v = JwtVerifier::new(&args).unwrap().unwrap();
        let with = |role: serde_json::Value| {
            let mut c = claims(600);
            c["role"] = role;
            hs(NEW, &c)
        };
        assert!(v.is_operator(&with(json!("payonce-operator")), NOW));
        assert!(v.is_operator(&with(json!(["support", "payonce-operator"])), NOW));
        assert!(!v.is_operator(&with(json!("customer")), NOW));
        assert!(!v.is_operator(&hs(NEW, &claims(600)), NOW), "no role claim");
        assert!(
            !v.is_operator(&with(json!("payonce-operator")), NOW + 601),
            "expired"
        );
        let mut forged = claims(600);
        forged["role"] = json!("payonce-operator");
        assert!(!v.is_operator(&hs(OLD, &forged), NOW), "another key");
        let none = JwtVerifier::new(&flags(&[NEW], &[], None))
            .unwrap()
            .unwrap();
        assert!(
            !none.is_operator(&with(json!("payonce-operator")), NOW),
            "no role set"
        );
    }

    #[test]
    fn weak_secrets_and_missing_issuer_are_refused_at_start() {
        assert!(JwtVerifier::new(&flags(&["short"], &[], None)).is_err());
        let ok = flags(&[NEW], &[], None);
        for bad in [
            JwtArgs {
                issuer: String::new(),
                ..ok.clone()
            },
            JwtArgs {
                audience: String::new(),
                ..ok.clone()
            },
        ] {
            assert!(JwtVerifier::new(&bad).is_err());
        }
        assert!(JwtVerifier::new(&ok).unwrap().is_some());
        assert!(JwtVerifier::new(&flags(&[], &[], None)).unwrap().is_none());
    }
}
