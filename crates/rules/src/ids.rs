//! The ids the server mints, one type each, with its prefix spelled once here. The
//! randomness is not ours: every id is made from 128 bits an [`IdSource`] hands over (UUID
//! v4 in the server, `crates/server/src/ids.rs`; a [`Sequence`] where a run must repeat), so
//! the rules stay pure and a test can predict every id. The text is what the store and the
//! wire carry: `att_` and 32 lowercase hex digits (a UUID's "simple" form).
//!
//! The machines (`crates/rules/src/pay.rs`, `refund.rs`) mint from the source they are
//! handed, and records, claims and plans hold these types; the store and the wire turn
//! them into text ([`AttemptId::as_str`], `String::from`) and back
//! ([`AttemptId::from_stored`]) and nowhere else.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where new ids come from: 128 bits per id, never the same twice in one store.
pub trait IdSource: Send + Sync + fmt::Debug {
    /// The bits of the next id.
    fn next_bits(&self) -> u128;

    /// The bits of the next id of kind `kind` (its prefix, or [`LeaseToken::KIND`]). A
    /// random source ignores the kind; a source that derives ids from what it knows (the
    /// model's, `crates/model/src/server.rs`) tells a lease token from the rest by it.
    fn bits_for(&self, kind: &str) -> u128 {
        let _ = kind;
        self.next_bits()
    }
}

/// A deterministic source: 1, 2, 3, … (tests and simulations that replay a run).
#[derive(Debug, Default)]
pub struct Sequence(AtomicU64);

impl Sequence {
    /// A sequence whose first id is made from `first`.
    pub fn starting_at(first: u64) -> Self {
        Self(AtomicU64::new(first))
    }
}

impl IdSource for Sequence {
    fn next_bits(&self) -> u128 {
        u128::from(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// Declares the text of an id type: read back from the store, shown, compared to text.
macro_rules! text_id {
    ($name:ident) => {
        impl $name {
            /// The id as the store or the wire holds it, taken as is: ids minted before this
            /// type (and the fixtures') keep their text. The store's and the wire's
            /// conversion; the rules mint.
            pub fn from_stored(text: impl Into<String>) -> Self {
                Self(text.into())
            }

            /// The id's text, as stored.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

/// Declares an id type: a private `String` in the form `PREFIX_<32 hex>`, minted only
/// through an [`IdSource`] (or read back with `from_stored`). Serialized as its text (the
/// Redis copy of a final attempt, `crates/server/src/replay/mod.rs`); the empty default
/// stands for an id a copy written before it was kept lacks.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident = $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[derive(Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// What every id of this kind starts with, before its `_`.
            pub const PREFIX: &'static str = $prefix;

            /// A new id from `ids`.
            pub fn mint(ids: &dyn IdSource) -> Self {
                Self(format!("{}_{:032x}", Self::PREFIX, ids.bits_for(Self::PREFIX)))
            }
        }

        text_id!($name);
    };
}

prefixed_id!(
    /// An order (`ord_…`).
    OrderId = "ord"
);
prefixed_id!(
    /// A pay attempt, or the tombstone of a cancelled key (`att_…`).
    AttemptId = "att"
);
prefixed_id!(
    /// A payment (`pay_…`).
    PaymentId = "pay"
);
prefixed_id!(
    /// A refund (`rfd_…`).
    RefundId = "rfd"
);
prefixed_id!(
    /// A background job, e.g. the confirmation email (`job_…`).
    JobId = "job"
);
prefixed_id!(
    /// A mail in the dev mailbox (`mail_…`).
    MailId = "mail"
);

/// A lease token: the claim that holds an attempt's lease names itself by it. No prefix; a
/// UUID's hyphenated form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// The kind a source is asked for a token's bits with ([`IdSource::bits_for`]).
    pub const KIND: &'static str = "lease";

    /// A new token from `ids`.
    pub fn mint(ids: &dyn IdSource) -> Self {
        let b = ids.bits_for(Self::KIND);
        Self(format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            b >> 96,
            (b >> 80) & 0xffff,
            (b >> 64) & 0xffff,
            (b >> 48) & 0xffff,
            b & 0xffff_ffff_ffff
        ))
    }
}

text_id!(LeaseToken);

#[cfg(test)]
mod tests {
    use super::*;

    /// The bits of a known UUID, `67e55044-10b1-426f-9247-bb680e5fe0c8`.
    #[derive(Debug)]
    struct Known;
    impl IdSource for Known {
        fn next_bits(&self) -> u128 {
            0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8
        }
    }

    #[test]
    fn the_text_is_a_prefix_and_the_uuids_simple_form() {
        assert_eq!(
            AttemptId::mint(&Known).as_str(),
            "att_67e5504410b1426f9247bb680e5fe0c8"
        );
        assert_eq!(
            String::from(LeaseToken::mint(&Known)),
            "67e55044-10b1-426f-9247-bb680e5fe0c8"
        );
    }

    #[test]
    fn a_sequence_pads_to_the_same_width() {
        let ids = Sequence::starting_at(1);
        assert_eq!(OrderId::mint(&ids).as_str(), format!("ord_{:032x}", 1));
        assert_eq!(MailId::mint(&ids).as_str(), format!("mail_{:032x}", 2));
    }
}
