//! The idempotency mechanism every keyed operation shares (pay, refund): an [`Operation`]
//! supplies its endpoint (bound into every fingerprint, so a key used on one endpoint never
//! matches another), the domain its provider keys are derived in, and, per request, the
//! fingerprint; [`decide`] then answers from the caller's stored key the same way for all.

use crate::record::Answer;
use payonce_protocol::{AttemptStatus, IdempotencyKey};
use sha2::{Digest, Sha256};

/// One keyed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The endpoint, first in every fingerprint.
    pub endpoint: &'static str,
    /// Domain separator of its provider keys.
    key_domain: &'static [u8],
    /// Domain separator of its unscoped keys ([`Operation::legacy_provider_key`]).
    legacy_domain: &'static [u8],
    /// Prefix of its provider keys.
    key_prefix: &'static str,
}

/// `POST /orders/{id}/pay`: a charge, provider keys `pk_…`.
pub const PAY: Operation = Operation {
    endpoint: "POST /orders/{id}/pay",
    key_domain: b"payonce.provider-key.v2\0",
    legacy_domain: b"payonce.provider-key.v1\0",
    key_prefix: "pk_",
};

/// `POST /payments/{id}/refund`: a refund, provider keys `rk_…`.
pub const REFUND: Operation = Operation {
    endpoint: "POST /payments/{id}/refund",
    key_domain: b"payonce.provider-refund-key.v2\0",
    legacy_domain: b"payonce.provider-refund-key.v1\0",
    key_prefix: "rk_",
};

impl Operation {
    /// SHA-256 over a length-prefixed encoding of the endpoint and `fields`: two different
    /// tuples can never encode to the same bytes.
    pub fn fingerprint(&self, fields: &[&str]) -> String {
        let mut h = Sha256::new();
        for field in std::iter::once(self.endpoint).chain(fields.iter().copied()) {
            h.update((field.len() as u64).to_be_bytes());
            h.update(field.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// The provider-side key of `(user, key)` for `scope` (the order a charge pays, the
    /// payment a refund returns): stable across retries and processes, scoped by user (two
    /// users sending the same key never share a charge or refund) and by scope (a key used
    /// again on another order after its retention gets a charge of its own, never the old
    /// order's), distinct per operation. Saved on the row before any provider call, so a
    /// row keeps the key it was saved with whatever this derivation becomes.
    pub fn provider_key(&self, user: &str, key: &IdempotencyKey, scope: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.key_domain);
        for field in [user, key.as_str(), scope] {
            h.update((field.len() as u64).to_be_bytes());
            h.update(field.as_bytes());
        }
        format!("{}{}", self.key_prefix, &hex::encode(h.finalize())[..40])
    }

    /// The key rows saved before keys were scoped, from `(user, key)` only: used only to
    /// ask the provider about such a row's charge once the row itself is gone.
    pub fn legacy_provider_key(&self, user: &str, key: &IdempotencyKey) -> String {
        let mut h = Sha256::new();
        h.update(self.legacy_domain);
        h.update(user.as_bytes());
        h.update(b"\0");
        h.update(key.as_str().as_bytes());
        format!("{}{}", self.key_prefix, &hex::encode(h.finalize())[..40])
    }
}

/// The caller's stored key, as the shared rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored<'a> {
    /// Claimed, outcome unknown; `locked_until`: the lease, if the operation takes one.
    Processing {
        /// The claiming request's fingerprint.
        fingerprint: &'a str,
        /// Unix ms the lease ends; `None` or past: nobody holds it.
        locked_until: Option<i64>,
    },
    /// Finished, with the answer to replay.
    Final {
        /// The claiming request's fingerprint.
        fingerprint: &'a str,
        /// The current status (for a 422's `attemptStatus`).
        status: AttemptStatus,
        /// The stored answer.
        answer: &'a Answer,
    },
    /// A cancel that arrived first: it knows only whose it is and what it was for.
    Tombstone {
        /// Its user.
        user: &'a str,
        /// Its order.
        scope: &'a str,
    },
}

/// What to do with a request, given the caller's stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextAction {
    /// The key is new: claim it.
    StartProcessing,
    /// The key was used with other details: 422, nothing done.
    Mismatch(AttemptStatus),
    /// The key is final: replay its stored answer.
    Replay(Answer),
    /// A cancel tombstone holds the key: this attempt can never charge.
    Cancelled,
    /// Someone holds the lease and may be calling the provider: look again shortly.
    Wait,
    /// Someone holds the lease and we waited long enough: 409 IN_PROGRESS.
    InProgress,
    /// Processing and nobody holds it: take it over and ask (or call) the provider again
    /// with the same provider key.
    Reconcile,
}

/// The shared rule: a new key is claimed; a known key with another fingerprint is misuse
/// (`request_fp` `None`: the request cannot be the stored one's); a final key replays; a
/// processing one is waited on while leased, taken over once not; a tombstone blocks its
/// own scope and is misuse for another. `may_wait`: the request has in-progress wait left
/// (the pay machine's own deadline, `Policy::wait_ends`).
pub fn decide(
    stored: Option<Stored<'_>>,
    request_fp: Option<&str>,
    user: &str,
    scope: &str,
    now: i64,
    may_wait: bool,
) -> NextAction {
    let (fingerprint, status) = match stored {
        None => return NextAction::StartProcessing,
        Some(Stored::Tombstone { user: u, scope: s }) if u == user && s == scope => {
            return NextAction::Cancelled
        }
        Some(Stored::Tombstone { .. }) => return NextAction::Mismatch(AttemptStatus::Cancelled),
        Some(Stored::Processing { fingerprint, .. }) => (fingerprint, AttemptStatus::Processing),
        Some(Stored::Final {
            fingerprint,
            status,
            ..
        }) => (fingerprint, status),
    };
    if request_fp != Some(fingerprint) {
        return NextAction::Mismatch(status);
    }
    match stored {
        Some(Stored::Final { answer, .. }) => NextAction::Replay(answer.clone()),
        Some(Stored::Processing {
            locked_until: Some(until),
            ..
        }) if until > now => {
            if may_wait {
                NextAction::Wait
            } else {
                NextAction::InProgress
            }
        }
        _ => NextAction::Reconcile,
    }
}
