//! The `orders` table: carts, versions, the order lock, paid and email flags.

use super::attempts::{record, AttemptRow, ATTEMPT_COLUMNS};
use super::audit::{self, Entry};
use super::decode_err;
use super::tx::{Arg, Need, Statement};
use super::Store;
use payonce_protocol::{CartLine, OrderLine, OrderStatus};
use payonce_rules::ids::OrderId;
use payonce_rules::Record;
use sqlx::any::{AnyExecutor, AnyRow};
use sqlx::{FromRow, Row};

/// An order as stored.
#[derive(Debug, Clone)]
pub(crate) struct OrderRow {
    pub id: OrderId,
    pub status: OrderStatus,
    pub version: i64,
    pub items: Vec<OrderLine>,
    pub coupon: Option<String>,
    pub address: Option<String>,
    pub subtotal: i64,
    pub discount: i64,
    pub amount: i64,
    pub currency: String,
    pub active_attempt: Option<String>,
    pub payment_id: Option<String>,
}

impl OrderRow {
    /// The cart as the client would send it back.
    pub(crate) fn cart_lines(&self) -> Vec<CartLine> {
        self.items
            .iter()
            .map(|l| CartLine {
                sku: l.sku.clone(),
                quantity: l.quantity,
            })
            .collect()
    }
}

/// The columns [`order_from_row`] reads, for queries that alias `orders` as `o`, named
/// apart from the `attempts` columns that [`get_order_and_key`] reads beside them.
const ORDER_COLUMNS: &str = "o.id AS o_id, o.status AS o_status, o.version AS o_version,
    o.items AS o_items, o.coupon AS o_coupon, o.address AS o_address, o.subtotal AS o_subtotal,
    o.discount AS o_discount, o.amount AS o_amount, o.currency AS o_currency,
    o.active_attempt AS o_active_attempt, o.payment_id AS o_payment_id";

fn order_from_row(row: &AnyRow) -> sqlx::Result<OrderRow> {
    let status: String = row.try_get("o_status")?;
    let items: String = row.try_get("o_items")?;
    Ok(OrderRow {
        id: OrderId::from_stored(row.try_get::<String, _>("o_id")?),
        status: OrderStatus::parse(&status)
            .ok_or_else(|| decode_err(format!("bad order status {status}")))?,
        version: row.try_get("o_version")?,
        items: serde_json::from_str(&items).map_err(|e| decode_err(e.to_string()))?,
        coupon: row.try_get("o_coupon")?,
        address: row.try_get("o_address")?,
        subtotal: row.try_get("o_subtotal")?,
        discount: row.try_get("o_discount")?,
        amount: row.try_get("o_amount")?,
        currency: row.try_get("o_currency")?,
        active_attempt: row.try_get("o_active_attempt")?,
        payment_id: row.try_get("o_payment_id")?,
    })
}

/// The caller's order. Another user's order is `None`, exactly like a missing one.
pub(crate) async fn get_order<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    user: &str,
) -> sqlx::Result<Option<OrderRow>> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {ORDER_COLUMNS} FROM orders o WHERE o.id = $1 AND o.user_id = $2"
    ));
    let row = sqlx::query(sql)
        .bind(id)
        .bind(user)
        .fetch_optional(e)
        .await?;
    row.as_ref().map(order_from_row).transpose()
}

/// The caller's order and, in the same read, the caller's record of `key`; `None` when the
/// order is not the caller's. One round trip where the order read and the key lookup were two.
/// The order is left out (`None`) when the record is final: a replay needs only the row, and
/// its columns are most of what such a read decodes.
pub(crate) async fn get_order_and_key<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    user: &str,
    key: &str,
) -> sqlx::Result<Option<(Option<OrderRow>, Option<Record>)>> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {ORDER_COLUMNS}, {ATTEMPT_COLUMNS} FROM orders k
         LEFT JOIN attempts a ON a.user_id = k.user_id AND a.idem_key = $3
         LEFT JOIN orders o ON o.id = k.id AND (a.id IS NULL OR a.status IN ('processing', 'cancelled'))
         WHERE k.id = $1 AND k.user_id = $2"
    ));
    let row = sqlx::query(sql)
        .bind(id)
        .bind(user)
        .bind(key)
        .fetch_optional(e)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let present = |column| {
        row.try_get::<Option<String>, _>(column)
            .map(|v| v.is_some())
    };
    let record = present("id")?.then(|| AttemptRow::from_row(&row).and_then(record));
    let order = present("o_id")?.then(|| order_from_row(&row));
    Ok(Some((order.transpose()?, record.transpose()?)))
}

/// A priced cart (`crate::catalog::price_cart`), as an order stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Priced {
    pub lines: Vec<OrderLine>,
    pub coupon: Option<String>,
    pub subtotal: i64,
    pub discount: i64,
    pub amount: i64,
    pub currency: String,
}

/// Inserts a new unpaid order at version 1 with its audit row `entry`, in one transaction.
pub(crate) async fn create(
    store: &Store,
    id: &str,
    user: &str,
    priced: &Priced,
    address: Option<&str>,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<()> {
    let mut args = cart_args(priced, address);
    args.extend([id.into(), user.into(), now.into()]);
    let insert = Statement::new(
        "INSERT INTO orders (items, coupon, address, subtotal, discount, amount, currency, id, user_id,
                             status, version, active_attempt, payment_id, created_at, updated_at)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, 'unpaid', 1, NULL, NULL, $10, $10 WHERE true",
        args,
    );
    store
        .commit(vec![insert, audit::insert(entry, now)])
        .await?;
    Ok(())
}

/// Replaces the cart and bumps the version, with its audit row `entry`, in one
/// transaction, only if the order is still at `version`, unpaid and has no active attempt.
/// False when any of that no longer holds; then nothing was written.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn change_cart(
    store: &Store,
    id: &str,
    user: &str,
    version: i64,
    priced: &Priced,
    address: Option<&str>,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<bool> {
    let mut args = cart_args(priced, address);
    args.extend([now.into(), id.into(), user.into(), version.into()]);
    let update = Statement::new(
        "UPDATE orders SET items = $1, coupon = $2, address = $3, subtotal = $4, discount = $5, amount = $6,
                currency = $7, version = version + 1, updated_at = $8
         WHERE id = $9 AND user_id = $10 AND version = $11 AND status = 'unpaid' AND active_attempt IS NULL",
        args,
    )
    .need(Need::Row);
    let counts = store
        .commit(vec![update, audit::insert(entry, now)])
        .await?;
    Ok(counts[0] == 1)
}

/// `$1..=$7`: a priced cart's `items, coupon, address, subtotal, discount, amount,
/// currency`.
fn cart_args(priced: &Priced, address: Option<&str>) -> Vec<Arg> {
    // Vec of plain structs: serialization cannot fail.
    let items = serde_json::to_string(&priced.lines).unwrap_or_else(|_| "[]".to_owned());
    vec![
        Arg::Text(Some(items)),
        priced.coupon.as_deref().into(),
        address.into(),
        priced.subtotal.into(),
        priced.discount.into(),
        priced.amount.into(),
        priced.currency.as_str().into(),
    ]
}

/// Whether order `id` is held for review (`super::pay::flag_stray`).
pub(crate) async fn held_for_review<'c>(e: impl AnyExecutor<'c>, id: &str) -> sqlx::Result<bool> {
    let held: Option<(Option<i64>,)> = sqlx::query_as("SELECT review_at FROM orders WHERE id = $1")
        .bind(id)
        .fetch_optional(e)
        .await?;
    Ok(matches!(held, Some((Some(_),))))
}
