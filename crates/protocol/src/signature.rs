//! Webhook signatures: `Payonce-Signature: t=<unix secs>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
//!
//! The provider signs with [`sign`] and the merchant server checks with [`verify`]: one rule,
//! one place, so the two sides cannot disagree. No HTTP framework in here on purpose.
//!
//! Why the timestamp is inside the MAC: an attacker who captured one delivery cannot replay
//! it later with a fresh `t`, and the tolerance window bounds how long a capture is useful.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::Duration;

type HmacSha256 = Hmac<Sha256>;

/// Scheme name of the only signature version.
const SCHEME: &str = "v1";

/// Why a signature header was rejected. Each variant has a stable [`SignatureError::reason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The header is not a comma-separated list of `key=value` pairs.
    #[error("the signature header is malformed")]
    Malformed,
    /// No `t=` element, more than one, or it is not an integer.
    #[error("the signature header has no valid timestamp")]
    BadTimestamp,
    /// No `v1=` element (with a hex value).
    #[error("the signature header has no v1 signature")]
    NoSignature,
    /// The timestamp is further from `now` than the tolerance allows.
    #[error("the signature timestamp is outside the tolerance window")]
    OutsideTolerance,
    /// No `v1` signature matches the body.
    #[error("no signature matches the body")]
    Mismatch,
}

impl SignatureError {
    /// A stable machine-readable reason (for a problem's `reason` member or logs).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::BadTimestamp => "bad_timestamp",
            Self::NoSignature => "no_signature",
            Self::OutsideTolerance => "outside_tolerance",
            Self::Mismatch => "mismatch",
        }
    }
}

fn mac(secret: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length (long keys are hashed), so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `Payonce-Signature` header value for `body` sent at `timestamp` (unix seconds).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = mac(secret, timestamp, body).finalize().into_bytes();
    format!("t={timestamp},{SCHEME}={}", hex::encode(tag))
}

/// Checks a `Payonce-Signature` header against the raw request `body`.
///
/// `now` is the receiver's clock in unix seconds; the header's `t` must be within
/// `tolerance` of it (either side, clocks drift). Several `v1=` elements are allowed (secret
/// rotation); one matching is enough. Unknown schemes are ignored, as Stripe does.
/// The comparison is constant-time.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let mut timestamp: Option<i64> = None;
    let mut signatures: Vec<Vec<u8>> = Vec::new();
    for element in header.split(',') {
        let (key, value) = element
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key {
            "t" => {
                if timestamp.is_some() {
                    return Err(SignatureError::BadTimestamp);
                }
                timestamp = Some(value.parse().map_err(|_| SignatureError::BadTimestamp)?);
            }
            SCHEME => {
                // A non-hex value cannot match; skip it rather than failing, so one bad
                // element does not hide a good one.
                if let Ok(bytes) = hex::decode(value) {
                    signatures.push(bytes);
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::BadTimestamp)?;
    if signatures.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    if now.abs_diff(timestamp) > tolerance.as_secs() {
        return Err(SignatureError::OutsideTolerance);
    }
    let expected = mac(secret, timestamp, body);
    if signatures
        .iter()
        .any(|sig| expected.clone().verify_slice(sig).is_ok())
    {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test";
    const BODY: &[u8] = br#"{"id":"evt_1"}"#;
    const TOL: Duration = Duration::from_secs(300);

    #[test]
    fn signs_in_the_documented_format() {
        let header = sign(SECRET, 1_700_000_000, BODY);
        let (t, v1) = header.split_once(',').unwrap();
        assert_eq!(t, "t=1700000000");
        let hex = v1.strip_prefix("v1=").unwrap();
        assert_eq!(hex.len(), 64);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn known_answer() {
        // HMAC-SHA256("key", "1.{}") computed independently (python hmac module).
        assert_eq!(
            sign("key", 1, b"{}"),
            "t=1,v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224"
        );
    }

    #[test]
    fn round_trip_verifies() {
        let header = sign(SECRET, 1000, BODY);
        assert_eq!(verify(SECRET, &header, BODY, 1000, TOL), Ok(()));
        assert_eq!(verify(SECRET, &header, BODY, 1300, TOL), Ok(()));
        assert_eq!(verify(SECRET, &header, BODY, 700, TOL), Ok(()));
    }

    #[test]
    fn rejects_tampering_wrong_secret_and_stale_timestamps() {
        let header = sign(SECRET, 1000, BODY);
        assert_eq!(
            verify(SECRET, &header, br#"{"id":"evt_2"}"#, 1000, TOL),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("other", &header, BODY, 1000, TOL),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, &header, BODY, 1301, TOL),
            Err(SignatureError::OutsideTolerance)
        );
        // Moving the timestamp breaks the MAC even inside the window.
        let moved = header.replacen("t=1000", "t=1001", 1);
        assert_eq!(
            verify(SECRET, &moved, BODY, 1000, TOL),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn accepts_any_matching_v1_and_ignores_other_schemes() {
        let good = sign(SECRET, 5, BODY);
        let sig = good.split_once(",v1=").unwrap().1;
        let header = format!("t=5,v0=abc,v1=zz,v1={}, v1={sig}", "00".repeat(32));
        assert_eq!(verify(SECRET, &header, BODY, 5, TOL), Ok(()));
    }

    #[test]
    fn malformed_headers_are_typed_errors_not_panics() {
        let cases = [
            ("", SignatureError::Malformed),
            ("garbage", SignatureError::Malformed),
            ("v1=00", SignatureError::BadTimestamp),
            ("t=x,v1=00", SignatureError::BadTimestamp),
            ("t=1,t=1,v1=00", SignatureError::BadTimestamp),
            ("t=1", SignatureError::NoSignature),
            ("t=1,v1=nothex", SignatureError::NoSignature),
            (
                "t=-9223372036854775808,v1=00",
                SignatureError::OutsideTolerance,
            ),
        ];
        for (header, want) in cases {
            assert_eq!(
                verify(SECRET, header, BODY, 1, TOL),
                Err(want),
                "{header:?}"
            );
        }
    }
}
