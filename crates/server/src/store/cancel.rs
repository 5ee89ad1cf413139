//! What a cancel writes: the tombstone that takes the key's `(user, key)` slot as
//! `cancelled`, with its audit row, in one transaction built from the rules' plan
//! (`payonce_rules::plan::plan_tombstone`) and run by the backend's executor (`tx.rs`).

use super::attempts;
use super::audit::{self, Entry};
use super::journal::{self as log, About};
use super::orders::get_order;
use super::tx::{Need, Statement};
use super::Store;
use payonce_rules::cancel::Tombstoned;
use payonce_rules::decision;
use payonce_rules::ids::PaymentId;
use payonce_rules::Tombstone;

/// Why a tombstone was rolled back.
enum Abort<E> {
    /// The insert lost: the key's slot is taken or the order is paid.
    Lost,
    /// The caller's `before_commit` refused, or the store failed.
    Err(E),
}

impl<E: From<sqlx::Error>> From<sqlx::Error> for Abort<E> {
    fn from(e: sqlx::Error) -> Self {
        Self::Err(e.into())
    }
}

/// Inserts tombstone `t` for `key` with its audit row `entry`, in one transaction.
/// `unless_paid`: only while `t`'s order is unpaid. `before_commit` runs once the tombstone
/// is inserted and before the commit (a rate-limit token: only a cancel that keeps a
/// tombstone spends one); its error rolls the tombstone back and is returned.
///
/// A tombstone that lost writes nothing, and only then are the rows read that say why (on
/// the pool, after the rollback), as [`super::pay::claim`] does: the slot, which can never
/// be freed, and otherwise the order's payment.
pub(crate) async fn tombstone<E, F>(
    store: &Store,
    t: &Tombstone,
    entry: &Entry,
    key: &str,
    now: i64,
    unless_paid: bool,
    before_commit: F,
) -> Result<Tombstoned, E>
where
    E: From<sqlx::Error> + Send + 'static,
    F: FnOnce() -> Result<(), E> + Send + 'static,
{
    let insert = match unless_paid {
        true => {
            "INSERT INTO attempts (id, user_id, idem_key, order_id, status, order_version,
               created_at, updated_at, expires_at)
             SELECT $1, $2, $3, $4, 'cancelled', $5, $6, $6, $7
             WHERE NOT EXISTS (SELECT 1 FROM orders
               WHERE id = $4 AND user_id = $2 AND status <> 'unpaid')"
        }
        false => {
            "INSERT INTO attempts (id, user_id, idem_key, order_id, status, order_version,
               created_at, updated_at, expires_at)
             SELECT $1, $2, $3, $4, 'cancelled', $5, $6, $6, $7 WHERE true"
        }
    };
    let about = About {
        user: Some(&t.user),
        order_id: Some(&t.order_id),
        key: Some(key),
        attempt_id: Some(&t.id),
        ..About::default()
    };
    let list = vec![
        Statement::new(
            insert,
            vec![
                (&t.id).into(),
                (&t.user).into(),
                key.into(),
                (&t.order_id).into(),
                t.order_version.into(),
                now.into(),
                t.expires_at.into(),
            ],
        )
        .tail("ON CONFLICT (user_id, idem_key) DO NOTHING")
        .need(Need::Row),
        audit::insert(entry, now),
        log::decision(&decision::tombstone(entry), &about, now),
    ];
    let decide = move |c: &[u64]| match c[0] {
        1 => before_commit().map_err(Abort::Err),
        _ => Err(Abort::Lost),
    };
    match store.transact(list, decide).await {
        Ok(()) => return Ok(Tombstoned::Inserted),
        Err(Abort::Err(e)) => return Err(e),
        Err(Abort::Lost) => {}
    }
    let pool = store.pool();
    if attempts::find(pool, &t.user, key).await?.is_some() {
        return Ok(Tombstoned::KeyTaken);
    }
    let order = get_order(pool, &t.order_id, &t.user).await?;
    let payment_id = order.and_then(|o| o.payment_id).map(PaymentId::from_stored);
    Ok(Tombstoned::OrderPaid { payment_id })
}
