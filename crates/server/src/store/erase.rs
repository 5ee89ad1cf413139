//! Erasing a user's personal data (`payonce_rules::erase`): one transaction of statements
//! (`tx.rs`), the audit row with it.

use super::audit::{self, Entry};
use super::tx::Statement;
use super::Store;

/// What an erasure changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Erased {
    /// Orders whose address was erased.
    pub(crate) addresses: u64,
    /// Mails deleted.
    pub(crate) mails: u64,
}

/// Erases `user`'s order addresses and mails, and appends `entry`, in one transaction.
pub(crate) async fn erase_user(
    store: &Store,
    user: &str,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<Erased> {
    let list = vec![
        Statement::new(
            "UPDATE orders SET address = NULL WHERE user_id = $1 AND address IS NOT NULL",
            vec![user.into()],
        ),
        Statement::new("DELETE FROM mailbox WHERE user_id = $1", vec![user.into()]),
        audit::insert(entry, now),
    ];
    let counts = store.commit(list).await?;
    Ok(Erased {
        addresses: counts[0],
        mails: counts[1],
    })
}
