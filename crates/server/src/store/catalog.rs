//! The catalog (prices and stock) and the coupons.

use super::{start_lock, Store};
use payonce_protocol::CatalogItem;
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

/// Arbitrary constant naming the install's advisory lock on PostgreSQL.
const PG_CATALOG_LOCK: i64 = 0x0070_6179_6f63_6174;

/// Replaces the catalog and the coupons (`(code, percent_off)`) with these, unless the
/// catalog that `digest` names was installed before: then nothing changes (stock sold stays
/// sold). True when this call replaced them. One transaction, under a start-up lock:
/// instances starting together with different files would race on the replace.
pub(crate) async fn install(
    store: &Store,
    digest: String,
    items: Vec<CatalogItem>,
    coupons: Vec<(String, i64)>,
    now: i64,
) -> sqlx::Result<bool> {
    let backend = store.backend();
    store
        .write(async move |tx| {
            start_lock(tx, backend, PG_CATALOG_LOCK).await?;
            let fresh = sqlx::query(
                "INSERT INTO catalog_source (digest, installed_at) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING",
            )
            .bind(&digest)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !fresh {
                return Ok(false);
            }
            sqlx::query("DELETE FROM catalog").execute(&mut *tx).await?;
            for it in &items {
                sqlx::query(
                    "INSERT INTO catalog (sku, name, unit_price, currency, stock)
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&it.sku)
                .bind(&it.name)
                .bind(it.unit_price)
                .bind(&it.currency)
                .bind(it.stock)
                .execute(&mut *tx)
                .await?;
            }
            sqlx::query("DELETE FROM coupons").execute(&mut *tx).await?;
            for (code, percent_off) in &coupons {
                sqlx::query("INSERT INTO coupons (code, percent_off) VALUES ($1, $2)")
                    .bind(code)
                    .bind(*percent_off)
                    .execute(&mut *tx)
                    .await?;
            }
            Ok(true)
        })
        .await
}
