//! Rule 2 of `POST /orders/{id}/pay` (crates/server/README.md): what a request does, given
//! the caller's record for its key.

pub use crate::keyed::NextAction;
use crate::keyed::{self, Stored, PAY, REFUND};
use crate::record::{Answer, Record, Terms};
use payonce_protocol::{Extras, IdempotencyKey};

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
    /// The checkout's extras (names the server knows, checked before the rules).
    pub extras: &'a Extras,
}

/// The pay fingerprint: [`PAY`]'s over the caller, the order, its version and amount, the
/// method and the checkout's extras. Without extras it is exactly the fingerprint of a
/// request that never had any (keys stored before extras existed still match).
pub fn fingerprint(d: &Details<'_>) -> String {
    let (version, amount) = (d.order_version.to_string(), d.amount.to_string());
    let mut fields = vec![
        d.user,
        d.order_id,
        &version,
        &amount,
        d.currency,
        d.payment_method_id,
    ];
    let extras = canonical_extras(d.extras);
    if !d.extras.is_empty() {
        fields.push(&extras);
    }
    PAY.fingerprint(&fields)
}

/// Extras in one order-blind spelling: `name=value` lines sorted by name. Unambiguous
/// because names are the server's known ones (no `=`) and values hold no control character
/// (both checked before the rules).
fn canonical_extras(extras: &Extras) -> String {
    let mut pairs: Vec<(&str, &str)> = extras.iter().collect();
    pairs.sort_unstable();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The provider key of a charge of `order_id`.
pub fn provider_key(user: &str, key: &IdempotencyKey, order_id: &str) -> String {
    PAY.provider_key(user, key, order_id)
}

/// The provider key of a refund of `payment_id`.
pub fn provider_refund_key(user: &str, key: &IdempotencyKey, payment_id: &str) -> String {
    REFUND.provider_key(user, key, payment_id)
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
    /// The checkout's extras.
    pub extras: &'a Extras,
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
            extras: self.extras,
        }))
    }
}

impl Record {
    /// The record as the shared rule of every keyed operation sees it.
    pub fn stored(&self) -> Stored<'_> {
        match self {
            Record::Processing(p) => Stored::Processing {
                fingerprint: &p.terms.fingerprint,
                locked_until: p.locked_until,
            },
            Record::Final(f) => Stored::Final {
                fingerprint: &f.terms.fingerprint,
                status: f.status,
                answer: &f.answer,
            },
            Record::Tombstone(t) => Stored::Tombstone {
                user: &t.user,
                scope: &t.order_id,
            },
        }
    }

    fn terms(&self) -> Option<&Terms> {
        match self {
            Record::Processing(p) => Some(&p.terms),
            Record::Final(f) => Some(&f.terms),
            Record::Tombstone(_) => None,
        }
    }
}

/// Rule 2: the shared rule ([`keyed::decide`]) on the pay record, with this request's
/// fingerprint for it. Without the order (`req.current` is `None`) only
/// [`NextAction::Replay`] is an answer; the caller takes the full path for anything else.
pub fn decide(
    record: Option<&Record>,
    req: &PayRequest<'_>,
    now: i64,
    may_wait: bool,
) -> NextAction {
    let fp = record
        .and_then(Record::terms)
        .and_then(|t| req.fingerprint_for(t));
    keyed::decide(
        record.map(Record::stored),
        fp.as_deref(),
        req.user,
        req.order_id,
        now,
        may_wait,
    )
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
