//! Rule 2 of `POST /orders/{id}/pay` (crates/server/README.md): what a request does, given
//! the caller's record for its key.

use crate::record::{Answer, Record, Terms};
use payonce_protocol::{AttemptStatus, IdempotencyKey};
use sha2::{Digest, Sha256};

/// The endpoint, as bound into every fingerprint: a key used on another endpoint can never
/// match a pay.
const ENDPOINT: &str = "POST /orders/{id}/pay";

/// What the server knows about one pay request, all from its own data except the version
/// and method the client chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details<'a> {
    /// The caller.
    pub user: &'a str,
    /// The order in the URL.
    pub order_id: &'a str,
    /// The version the client paid for.
    pub order_version: i64,
    /// The server's amount for that version.
    pub amount: i64,
    /// Its currency.
    pub currency: &'a str,
    /// The client's payment method.
    pub payment_method_id: &'a str,
}

/// SHA-256 over a length-prefixed encoding of the endpoint and [`Details`]: two different
/// tuples can never encode to the same bytes.
pub fn fingerprint(d: &Details<'_>) -> String {
    let mut h = Sha256::new();
    let version = d.order_version.to_string();
    let amount = d.amount.to_string();
    for field in [
        ENDPOINT,
        d.user,
        d.order_id,
        &version,
        &amount,
        d.currency,
        d.payment_method_id,
    ] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

/// A provider-side key derived from `(user, key)` in `domain`: stable across retries and
/// processes, scoped by user (two users sending the same key never share a charge), and
/// distinct per domain (a refund key never equals a charge key).
fn derive(domain: &[u8], prefix: &str, user: &str, key: &IdempotencyKey) -> String {
    let mut h = Sha256::new();
    h.update(domain);
    h.update(user.as_bytes());
    h.update(b"\0");
    h.update(key.as_str().as_bytes());
    format!("{prefix}{}", &hex::encode(h.finalize())[..40])
}

/// The provider key of a charge.
pub fn provider_key(user: &str, key: &IdempotencyKey) -> String {
    derive(b"payonce.provider-key.v1\0", "pk_", user, key)
}

/// The provider key of a refund.
pub fn provider_refund_key(user: &str, key: &IdempotencyKey) -> String {
    derive(b"payonce.provider-refund-key.v1\0", "rk_", user, key)
}

/// The order as rule 1 read it: its current version and the amount for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current<'a> {
    /// The order's current version.
    pub version: i64,
    /// Its amount.
    pub amount: i64,
    /// Its currency.
    pub currency: &'a str,
}

/// One pay request, as rule 2 sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayRequest<'a> {
    /// The caller.
    pub user: &'a str,
    /// The order in the URL.
    pub order_id: &'a str,
    /// The version the client paid for (as sent).
    pub order_version: u64,
    /// The client's payment method.
    pub payment_method_id: &'a str,
    /// The order, once read; `None` before (the replay of a finished attempt answered from
    /// its record alone, `crates/server/README.md`): the record's own terms then stand in.
    pub current: Option<Current<'a>>,
}

impl PayRequest<'_> {
    /// This request's fingerprint for an attempt made from `terms`. The amount is a function
    /// of (order, version): the current one when the request names the current version,
    /// the attempt's when it names the attempt's version (a version's amount never changes:
    /// every cart change that changes it bumps the version). Any other version cannot be
    /// the attempt's, so there is nothing to compare (`None`: a mismatch).
    pub fn fingerprint_for(&self, terms: &Terms) -> Option<String> {
        let version = i64::try_from(self.order_version).ok()?;
        let (amount, currency) = match self.current {
            Some(c) if c.version == version => (c.amount, c.currency),
            _ if version == terms.order_version => (terms.amount, terms.currency.as_str()),
            _ => return None,
        };
        Some(fingerprint(&Details {
            user: self.user,
            order_id: self.order_id,
            order_version: version,
            amount,
            currency,
            payment_method_id: self.payment_method_id,
        }))
    }
}

/// What to do with a request, given the caller's record for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextAction {
    /// The key is new: claim it (rule 3).
    StartProcessing,
    /// The key was used with other details: 422, nothing charged.
    Mismatch(AttemptStatus),
    /// The attempt is final: replay its stored answer.
    Replay(Answer),
    /// A cancel tombstone holds the key: this attempt can never charge.
    Cancelled,
    /// Someone holds the lease and may be charging: look again shortly.
    Wait,
    /// Someone holds the lease and we waited long enough: 409 IN_PROGRESS.
    InProgress,
    /// Processing, but the lease expired: take it over and ask the provider (rule 5).
    Reconcile,
}

/// Rule 2. `may_wait`: the request still has in-progress wait left. Without the order
/// (`req.current` is `None`) only [`NextAction::Replay`] is an answer; the caller takes the
/// full path for anything else.
pub fn decide(
    record: Option<&Record>,
    req: &PayRequest<'_>,
    now: i64,
    may_wait: bool,
) -> NextAction {
    let Some(record) = record else {
        return NextAction::StartProcessing;
    };
    let terms = match record {
        // A tombstone knows only its order: the same order is cancelled, another is misuse.
        Record::Tombstone(t) if t.order_id != req.order_id || t.user != req.user => {
            return NextAction::Mismatch(AttemptStatus::Cancelled)
        }
        Record::Tombstone(_) => return NextAction::Cancelled,
        Record::Processing(p) => &p.terms,
        Record::Final(f) => &f.terms,
    };
    if req.fingerprint_for(terms).as_deref() != Some(terms.fingerprint.as_str()) {
        return NextAction::Mismatch(record.status());
    }
    match record {
        Record::Final(f) => NextAction::Replay(f.answer.clone()),
        Record::Processing(p) => match p.locked_until {
            Some(until) if until > now && may_wait => NextAction::Wait,
            Some(until) if until > now => NextAction::InProgress,
            _ => NextAction::Reconcile,
        },
        Record::Tombstone(_) => NextAction::Cancelled,
    }
}

/// The stored answer when `record` is the caller's final attempt for this order with this
/// request's details; `None` for anything else, which the full path decides. Every answer
/// given here is one [`decide`] with the order read would give: a record exists only
/// because its order was the caller's when claimed (orders are never deleted or given to
/// another user), and the fingerprint binds user, order, version, amount and method.
pub fn replay_of(record: &Record, req: &PayRequest<'_>) -> Option<Answer> {
    match decide(Some(record), req, 0, false) {
        NextAction::Replay(answer) => Some(answer),
        _ => None,
    }
}
