//! The append-only audit trail: who changed what, when, from which state to which, and why.
//! Written in the same transaction as the change it describes, so the two cannot disagree.

use super::tx::{Arg, Statement};

pub(crate) use payonce_rules::plan::AuditEntry as Entry;

/// The statement that appends `entry` (one of a transaction's, `tx.rs`).
pub(crate) fn insert(entry: &Entry, now: i64) -> Statement {
    Statement::new(
        "INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         SELECT $1, $2, $3, $4, $5, $6, $7 WHERE true",
        vec![now.into()].into_iter().chain(values(entry)).collect(),
    )
}

/// The statements that append `entries`, in their order, all at `now`: two rows per
/// statement (a transaction's attempt and order rows are one step of it). A `VALUES` list's
/// columns are `column1…` on both backends.
pub(crate) fn insert_all(entries: &[Entry], now: i64) -> Vec<Statement> {
    const PAIR: &str =
        "INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
         SELECT $1, column1, column2, column3, column4, column5, column6
         FROM (VALUES ($2, $3, $4, $5, $6, $7), ($8, $9, $10, $11, $12, $13)) AS x
         WHERE true";
    let pair = |two: &[Entry]| {
        let args = std::iter::once(now.into()).chain(two.iter().flat_map(values));
        Statement::new(PAIR, args.collect())
    };
    let chunks = entries.chunks(2);
    chunks
        .map(|c| {
            if c.len() == 2 {
                pair(c)
            } else {
                insert(&c[0], now)
            }
        })
        .collect()
}

/// An entry's values but the time, in the columns' order.
fn values(entry: &Entry) -> Vec<Arg> {
    vec![
        (&entry.actor).into(),
        entry.entity.into(),
        (&entry.entity_id).into(),
        entry.from.as_deref().into(),
        (&entry.to).into(),
        (&entry.reason).into(),
    ]
}
