//! The catalog (prices and stock) and the coupons.

use payonce_protocol::{CatalogItem, OrderLine};
use sqlx::any::AnyExecutor;

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

/// Reserves `qty` units of `sku` if that many are left.
pub(crate) async fn reserve_stock<'c>(
    e: impl AnyExecutor<'c>,
    line: &OrderLine,
) -> sqlx::Result<bool> {
    let res = sqlx::query("UPDATE catalog SET stock = stock - $1 WHERE sku = $2 AND stock >= $1")
        .bind(i64::from(line.quantity))
        .bind(line.sku.as_str())
        .execute(e)
        .await?;
    Ok(res.rows_affected() == 1)
}

/// Gives reserved units back (the attempt ended without a charge).
pub(crate) async fn release_stock<'c>(
    e: impl AnyExecutor<'c>,
    line: &OrderLine,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE catalog SET stock = stock + $1 WHERE sku = $2")
        .bind(i64::from(line.quantity))
        .bind(line.sku.as_str())
        .execute(e)
        .await?;
    Ok(())
}
