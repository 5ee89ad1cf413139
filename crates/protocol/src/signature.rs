//! Webhook signatures in Stripe's scheme: `t=<unix secs>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
//!
//! Two headers carry it: the mock provider's `Payonce-Signature`
//! ([`crate::headers::WEBHOOK_SIGNATURE`]) and Stripe's own `Stripe-Signature`
//! ([`crate::headers::STRIPE_SIGNATURE`]), which is this exact format (Stripe's webhook
//! documentation, "Verify signatures manually"). The provider signs with [`sign`] and the
//! merchant server checks with [`verify`]: one rule, one place, so the sides cannot disagree.
//! [`parse`] is the header parser alone, pure and bounded, so it can be fuzzed on its own.
//! No HTTP framework in here on purpose.
//!
//! Why the timestamp is inside the MAC: an attacker who captured one delivery cannot replay
//! it later with a fresh `t`, and the tolerance window bounds how long a capture is useful.
//! Why several `v1` values: while a secret is rolled, Stripe signs each event with every
//! active secret, one `v1` each; a receiver holding either secret must accept it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::Duration;

type HmacSha256 = Hmac<Sha256>;

/// Scheme name of the only signature version.
const SCHEME: &str = "v1";

/// Shortest secret [`verify`] checks with (bytes). HMAC takes any key, the empty one too, so
/// a receiver left without its secret would accept whatever an attacker signs with the same
/// empty key; a short one can be guessed. Stripe's `whsec_…` secrets are 38 bytes; a server
/// outside `--dev` asks for more than this at start (crates/server/src/config/checks.rs).
pub const MIN_SECRET: usize = 16;

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
    /// The receiver's secret is empty or shorter than [`MIN_SECRET`]: anyone could sign with
    /// it (an empty key is a key like any other to HMAC), so nothing is accepted.
    #[error("no usable secret to check the signature with")]
    NotConfigured,
}

impl SignatureError {
    /// Every error, for exhaustive tests (each reason is in
    /// [`crate::problem::reason::WEBHOOK_SIGNATURE`]).
    pub const ALL: [SignatureError; 5] = [
        Self::Malformed,
        Self::BadTimestamp,
        Self::NoSignature,
        Self::OutsideTolerance,
        Self::Mismatch,
    ];

    /// A stable machine-readable reason (for a problem's `reason` member or logs).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::BadTimestamp => "bad_timestamp",
            Self::NoSignature => "no_signature",
            Self::OutsideTolerance => "outside_tolerance",
            Self::Mismatch => "mismatch",
            Self::NotConfigured => "not_configured",
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

/// Most `key=value` elements a header may have: a `t`, one `v1` per active secret (two while
/// a secret is rolled), maybe a `v0`. Longer is not a header a provider wrote, and the cap
/// bounds the work one request can ask for.
pub const MAX_ELEMENTS: usize = 16;

/// A signature header, parsed: what the provider says it signed, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// `t`: when the provider signed, unix seconds.
    pub timestamp: i64,
    /// Every `v1` value that is hex, decoded (at least one). A value that is not hex cannot
    /// match and is skipped, so one bad element does not hide a good one.
    pub signatures: Vec<Vec<u8>>,
}

/// Parses a signature header: comma-separated `key=value` elements, exactly one `t` (an
/// integer), at least one hex `v1`, at most [`MAX_ELEMENTS`]. Unknown schemes are ignored,
/// as Stripe's libraries do. Never panics (property-tested).
pub fn parse(header: &str) -> Result<Header, SignatureError> {
    let mut timestamp: Option<i64> = None;
    let mut signatures: Vec<Vec<u8>> = Vec::new();
    for (n, element) in header.split(',').enumerate() {
        if n == MAX_ELEMENTS {
            return Err(SignatureError::Malformed);
        }
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
    Ok(Header {
        timestamp,
        signatures,
    })
}

/// Checks a signature header (either name, see the module docs) against the raw request
/// `body`.
///
/// `now` is the receiver's clock in unix seconds; the header's `t` must be within
/// `tolerance` of it (either side, clocks drift). Several `v1=` elements are allowed (secret
/// rotation); one matching is enough. The comparison is constant-time (`Mac::verify_slice`).
/// A `secret` shorter than [`MIN_SECRET`] verifies nothing ([`SignatureError::NotConfigured`]).
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    if secret.len() < MIN_SECRET {
        return Err(SignatureError::NotConfigured);
    }
    let Header {
        timestamp,
        signatures,
    } = parse(header)?;
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

    const SECRET: &str = "whsec_test_0123456789";
    const BODY: &[u8] = br#"{"id":"evt_1"}"#;
    const TOL: Duration = Duration::from_secs(300);

    #[test]
    fn every_reason_is_in_the_documented_list() {
        for e in SignatureError::ALL {
            assert!(
                crate::problem::reason::WEBHOOK_SIGNATURE.contains(&e.reason()),
                "{e:?}"
            );
        }
    }

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
            verify("whsec_other_0123456789", &header, BODY, 1000, TOL),
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
    fn an_empty_or_short_secret_verifies_nothing() {
        // HMAC takes the empty key: whoever signs with it would match a receiver that holds it.
        for secret in ["", "whsec_", "0123456789abcde"] {
            let header = sign(secret, 1000, BODY);
            assert_eq!(
                verify(secret, &header, BODY, 1000, TOL),
                Err(SignatureError::NotConfigured),
                "{secret:?}"
            );
            assert_eq!(SignatureError::NotConfigured.reason(), "not_configured");
        }
        let long = "0123456789abcdef";
        assert_eq!(long.len(), MIN_SECRET);
        assert_eq!(verify(long, &sign(long, 1, BODY), BODY, 1, TOL), Ok(()));
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

    #[test]
    fn parses_what_it_signs_and_caps_the_elements() {
        let header = sign(SECRET, 42, BODY);
        let parsed = parse(&header).unwrap();
        assert_eq!(parsed.timestamp, 42);
        assert_eq!(parsed.signatures.len(), 1);
        assert_eq!(parsed.signatures[0].len(), 32);
        let at_cap = format!("t=1{}", ",v1=00".repeat(MAX_ELEMENTS - 1));
        assert_eq!(parse(&at_cap).unwrap().signatures.len(), MAX_ELEMENTS - 1);
        let over = format!("{at_cap},v0=00");
        assert_eq!(parse(&over), Err(SignatureError::Malformed));
    }

    #[test]
    fn a_header_signed_as_stripe_and_localstripe_sign_verifies() {
        // hmac.new(b"whsec_rotated_0123456789", b'1700000000.{"id":"evt_1"}', sha256).hexdigest():
        // what localstripe's webhooks.py computes, checked with Python's hmac module.
        let stripe = "7c41bda633d1832a91d0af6fa23219c0aa8591b2eeb519a016f4d8b4c5831d25";
        let header = format!("t=1700000000,v1={stripe}");
        assert_eq!(
            verify(
                "whsec_rotated_0123456789",
                &header,
                BODY,
                1_700_000_000,
                TOL
            ),
            Ok(())
        );
        // While a secret is rolled Stripe sends one v1 per secret: either secret verifies.
        let old = sign(SECRET, 1_700_000_000, BODY);
        let old = old.split_once(",v1=").unwrap().1;
        let rolled = format!("t=1700000000,v1={old},v1={stripe}");
        for secret in [SECRET, "whsec_rotated_0123456789"] {
            assert_eq!(verify(secret, &rolled, BODY, 1_700_000_000, TOL), Ok(()));
        }
        assert_eq!(
            verify("whsec_other_0123456789", &rolled, BODY, 1_700_000_000, TOL),
            Err(SignatureError::Mismatch)
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Header-shaped strings: the parser's alphabet, so most cases get past the split.
        fn headerish() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop_oneof![
                    Just("t=".to_owned()),
                    Just("v1=".to_owned()),
                    Just("v0=".to_owned()),
                    Just(",".to_owned()),
                    Just(" ".to_owned()),
                    Just("=".to_owned()),
                    "[0-9a-fA-F]{0,70}",
                    "-?[0-9]{1,20}",
                ],
                0..40,
            )
            .prop_map(|parts| parts.concat())
        }

        fn tag() -> impl Strategy<Value = String> {
            prop::collection::vec(any::<u8>(), 32).prop_map(hex::encode)
        }

        proptest! {
            #[test]
            fn the_parser_never_panics_and_keeps_its_promises(
                header in prop_oneof![headerish(), ".{0,300}"],
            ) {
                if let Ok(parsed) = parse(&header) {
                    prop_assert!(!parsed.signatures.is_empty());
                    prop_assert!(parsed.signatures.len() < MAX_ELEMENTS);
                    let ts: Vec<_> = header.split(',').filter_map(|e| e.trim().strip_prefix("t=")).collect();
                    prop_assert_eq!(ts.len(), 1, "{}", header);
                    prop_assert_eq!(ts[0].parse::<i64>().ok(), Some(parsed.timestamp));
                }
                // verify is parse, then arithmetic and a MAC: it cannot panic either.
                let _ = verify(SECRET, &header, BODY, 0, TOL);
                let _ = verify(SECRET, &header, BODY, i64::MAX, TOL);
            }

            #[test]
            fn every_signed_body_verifies_within_the_tolerance_only(
                secret in ".{16,64}",
                body in prop::collection::vec(any::<u8>(), 0..512),
                t in -1_000_000_000i64..4_000_000_000,
                skew in -600i64..600,
            ) {
                let header = sign(&secret, t, &body);
                let got = verify(&secret, &header, &body, t + skew, TOL);
                if skew.unsigned_abs() <= TOL.as_secs() {
                    prop_assert_eq!(got, Ok(()));
                } else {
                    prop_assert_eq!(got, Err(SignatureError::OutsideTolerance));
                }
            }

            #[test]
            fn one_good_v1_among_others_verifies_in_any_position(
                others in prop::collection::vec(prop_oneof![
                    tag().prop_map(|h| format!("v1={h}")),
                    tag().prop_map(|h| format!("v0={h}")),
                    Just("v1=not-hex".to_owned()),
                    Just("scheme=x".to_owned()),
                ], 0..(MAX_ELEMENTS - 2)),
                at in any::<prop::sample::Index>(),
            ) {
                let good = sign(SECRET, 7, BODY);
                let good = good.split_once(',').unwrap().1.to_owned();
                let mut elements = others;
                elements.insert(at.index(elements.len() + 1), good);
                elements.insert(0, "t=7".to_owned());
                prop_assert_eq!(verify(SECRET, &elements.join(","), BODY, 7, TOL), Ok(()));
            }

            #[test]
            fn a_changed_body_secret_or_timestamp_never_verifies(
                body in prop::collection::vec(any::<u8>(), 1..256),
                flip in any::<prop::sample::Index>(),
                bit in 0u8..8,
                secret in "[a-z0-9_]{16,40}",
                forged in tag(),
            ) {
                let header = sign(SECRET, 1000, &body);
                let mut changed = body.clone();
                changed[flip.index(body.len())] ^= 1 << bit;
                prop_assert_eq!(
                    verify(SECRET, &header, &changed, 1000, TOL),
                    Err(SignatureError::Mismatch)
                );
                if secret != SECRET {
                    prop_assert_eq!(
                        verify(&secret, &header, &body, 1000, TOL),
                        Err(SignatureError::Mismatch)
                    );
                }
                let resigned = header.replacen("t=1000", "t=1001", 1);
                prop_assert_eq!(
                    verify(SECRET, &resigned, &body, 1000, TOL),
                    Err(SignatureError::Mismatch)
                );
                let guessed = format!("t=1000,v1={forged}");
                prop_assert_eq!(
                    verify(SECRET, &guessed, &body, 1000, TOL),
                    Err(SignatureError::Mismatch)
                );
            }
        }
    }
}
