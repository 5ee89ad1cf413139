//! Erasing a user's personal data (`payonce-server erase-user USER`): what goes, what stays,
//! and the audit row that records it. The store executes it (`crates/server/src/store/erase.rs`).
//!
//! Erased: the free text a user typed or was sent: every order's shipping `address` (free
//! text, where addresses and email addresses are), and the user's mails (the mailbox rows:
//! subject, body, recipient).
//!
//! Kept, because a dispute or a replay needs them and they say nothing about the person
//! beyond the opaque user id: order, attempt, payment and refund ids, amounts, currencies,
//! items and times; idempotency keys, their fingerprints (hashes) and stored answers (a
//! retry of a paid key still gets its payment, and a refund still finds it); provider keys
//! and ids (the provider's record of the money); the audit trail.

use crate::plan::AuditEntry;

/// The audit row of an erasure of `user`'s personal data.
pub fn entry(user: &str) -> AuditEntry {
    AuditEntry {
        actor: "operator".to_owned(),
        entity: "user",
        entity_id: user.to_owned(),
        from: None,
        to: "personal data erased".to_owned(),
        reason: "erase-user: order addresses and mails erased; ids, amounts, times, \
                 fingerprints and stored answers kept for disputes and replays"
            .to_owned(),
    }
}
