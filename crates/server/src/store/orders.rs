//! Catalog, coupons and orders.

use crate::catalog::Priced;
use payonce_protocol::{CartLine, CatalogItem, OrderLine, OrderStatus};
use sqlx::any::{AnyExecutor, AnyRow};
use sqlx::Row;

/// An order as stored.
#[derive(Debug, Clone)]
pub(crate) struct OrderRow {
    pub id: String,
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

const ORDER_COLUMNS: &str =
    "id, status, version, items, coupon, address, subtotal, discount, amount, currency, active_attempt, payment_id";

fn order_from_row(row: &AnyRow) -> sqlx::Result<OrderRow> {
    let status: String = row.try_get("status")?;
    let items: String = row.try_get("items")?;
    Ok(OrderRow {
        id: row.try_get("id")?,
        status: OrderStatus::parse(&status)
            .ok_or_else(|| decode_err(format!("bad order status {status}")))?,
        version: row.try_get("version")?,
        items: serde_json::from_str(&items).map_err(|e| decode_err(e.to_string()))?,
        coupon: row.try_get("coupon")?,
        address: row.try_get("address")?,
        subtotal: row.try_get("subtotal")?,
        discount: row.try_get("discount")?,
        amount: row.try_get("amount")?,
        currency: row.try_get("currency")?,
        active_attempt: row.try_get("active_attempt")?,
        payment_id: row.try_get("payment_id")?,
    })
}

pub(crate) fn decode_err(msg: String) -> sqlx::Error {
    sqlx::Error::Decode(msg.into())
}

/// The whole catalog, by SKU.
pub(crate) async fn list_catalog<'c>(e: impl AnyExecutor<'c>) -> sqlx::Result<Vec<CatalogItem>> {
    let rows: Vec<(String, String, i64, String, i64)> =
        sqlx::query_as("SELECT sku, name, unit_price, currency, stock FROM catalog ORDER BY sku")
            .fetch_all(e)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(sku, name, unit_price, currency, stock)| CatalogItem {
            sku,
            name,
            unit_price,
            currency,
            stock,
        })
        .collect())
}

/// A coupon's percentage, if the code exists (codes are case-sensitive).
pub(crate) async fn coupon_percent<'c>(
    e: impl AnyExecutor<'c>,
    code: &str,
) -> sqlx::Result<Option<i64>> {
    let row: Option<(i64,)> = sqlx::query_as("SELECT percent_off FROM coupons WHERE code = $1")
        .bind(code)
        .fetch_optional(e)
        .await?;
    Ok(row.map(|r| r.0))
}

/// The caller's order. Another user's order is `None`, exactly like a missing one.
pub(crate) async fn get_order<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    user: &str,
) -> sqlx::Result<Option<OrderRow>> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {ORDER_COLUMNS} FROM orders WHERE id = $1 AND user_id = $2"
    ));
    let row = sqlx::query(sql)
        .bind(id)
        .bind(user)
        .fetch_optional(e)
        .await?;
    row.as_ref().map(order_from_row).transpose()
}

/// Inserts a new unpaid order at version 1.
pub(crate) async fn insert_order<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    user: &str,
    priced: &Priced,
    address: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO orders (id, user_id, status, version, items, coupon, address, subtotal, discount, amount,
                             currency, active_attempt, payment_id, created_at, updated_at)
         VALUES ($1, $2, 'unpaid', 1, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, $10, $10)",
    )
    .bind(id)
    .bind(user)
    .bind(lines_json(&priced.lines))
    .bind(priced.coupon.clone())
    .bind(address.map(str::to_owned))
    .bind(priced.subtotal)
    .bind(priced.discount)
    .bind(priced.amount)
    .bind(priced.currency.clone())
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// Replaces the cart and bumps the version, only if the order is still at `version`, unpaid
/// and has no active attempt. Returns false when any of that no longer holds.
pub(crate) async fn update_cart<'c>(
    e: impl AnyExecutor<'c>,
    id: &str,
    user: &str,
    version: i64,
    priced: &Priced,
    address: Option<&str>,
    now: i64,
) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE orders SET items = $1, coupon = $2, address = $3, subtotal = $4, discount = $5, amount = $6,
                currency = $7, version = version + 1, updated_at = $8
         WHERE id = $9 AND user_id = $10 AND version = $11 AND status = 'unpaid' AND active_attempt IS NULL",
    )
    .bind(lines_json(&priced.lines))
    .bind(priced.coupon.clone())
    .bind(address.map(str::to_owned))
    .bind(priced.subtotal)
    .bind(priced.discount)
    .bind(priced.amount)
    .bind(priced.currency.clone())
    .bind(now)
    .bind(id)
    .bind(user)
    .bind(version)
    .execute(e)
    .await?;
    Ok(res.rows_affected() == 1)
}

fn lines_json(lines: &[OrderLine]) -> String {
    // Vec of plain structs: serialization cannot fail.
    serde_json::to_string(lines).unwrap_or_else(|_| "[]".to_owned())
}
