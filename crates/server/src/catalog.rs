//! The catalog and the one place prices are computed. Clients send SKUs and quantities;
//! every amount comes from here, never from the browser.
//!
//! The catalog is the built-in one of the migrations unless `--catalog FILE` names a JSON
//! file ([`CatalogFile`]): a team's own SKUs, prices, currency, stock and coupons. The file
//! is read and checked at start-up ([`load_file`]; a bad file stops the server with the
//! reason), and installed by this process before it first reads the catalog
//! ([`ensure_installed`]): every read of the catalog starts in this module, so no request
//! can see the built-in catalog once a file is given. Installing is idempotent across
//! restarts and instances: the file's digest is recorded (`catalog_source`), the same file
//! again changes nothing (stock sold stays sold), and a new or changed file replaces the
//! catalog and the coupons, stock included.

use crate::error::{AppError, AppResult};
use crate::limits::Limits;
use crate::store::catalog as db;
use crate::store::Store;
use payonce_protocol::{CartLine, CatalogItem, ErrorCode, OrderLine};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// Most lines in one cart.
pub(crate) const MAX_LINES: usize = 20;
/// Most units of one line.
pub(crate) const MAX_QUANTITY: u32 = 100;
/// Longest address.
pub(crate) const MAX_ADDRESS: usize = 500;
/// Largest `unitPrice` of a `--catalog` file, in minor units (10 billion of a two-decimal
/// currency). The largest cart, [`MAX_LINES`] × [`MAX_QUANTITY`] of it, is then 2 × 10^15,
/// below 2^53 (so the SDK's JavaScript numbers hold every amount exactly), and its coupon
/// product, × 100, stays far below `i64::MAX`. Prices read from the database are not
/// bounded by this, so [`price`] checks its arithmetic anyway.
pub(crate) const MAX_UNIT_PRICE: i64 = 1_000_000_000_000;

/// A priced cart, as an order stores it.
pub(crate) use crate::store::orders::Priced;

/// Why a cart cannot be priced. Each is a 400 `INVALID_REQUEST` with this text as detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PricingError {
    #[error("an order needs 1..={MAX_LINES} lines")]
    LineCount,
    #[error("sku `{0}` appears more than once")]
    DuplicateSku(String),
    #[error("quantity of `{0}` must be 1..={MAX_QUANTITY}")]
    Quantity(String),
    #[error("unknown sku `{0}`")]
    UnknownSku(String),
    #[error("unknown coupon")]
    UnknownCoupon,
    #[error("all items of an order must share one currency")]
    MixedCurrency,
    #[error("the order total does not fit in an amount (minor units, below 2^53)")]
    TooLarge,
}

/// The largest amount an order may total: 2^53 - 1, JavaScript's largest exact integer, so
/// every amount the server answers is one the SDK reads exactly.
pub(crate) const MAX_AMOUNT: i64 = (1 << 53) - 1;

impl From<PricingError> for AppError {
    fn from(e: PricingError) -> Self {
        let code = match e {
            PricingError::TooLarge => ErrorCode::AmountTooLarge,
            _ => ErrorCode::InvalidRequest,
        };
        AppError::detail(code, e.to_string())
    }
}

/// Prices `lines` against `catalog` with an optional coupon `(code, percentOff)`.
/// The discount rounds down, in the customer's favour never beyond the subtotal. Every
/// product and sum is checked: a total past [`MAX_AMOUNT`] is [`PricingError::TooLarge`],
/// never a wrapped (in a release build) or panicking (in a debug build) number.
pub(crate) fn price(
    lines: &[CartLine],
    catalog: &[CatalogItem],
    coupon: Option<(String, i64)>,
) -> Result<Priced, PricingError> {
    if lines.is_empty() || lines.len() > MAX_LINES {
        return Err(PricingError::LineCount);
    }
    let mut seen = HashSet::new();
    let mut priced = Vec::with_capacity(lines.len());
    let mut currency: Option<&str> = None;
    for line in lines {
        if !seen.insert(line.sku.as_str()) {
            return Err(PricingError::DuplicateSku(line.sku.clone()));
        }
        if !(1..=MAX_QUANTITY).contains(&line.quantity) {
            return Err(PricingError::Quantity(line.sku.clone()));
        }
        let item = catalog
            .iter()
            .find(|i| i.sku == line.sku)
            .ok_or_else(|| PricingError::UnknownSku(line.sku.chars().take(64).collect()))?;
        match currency {
            Some(c) if c != item.currency => return Err(PricingError::MixedCurrency),
            _ => currency = Some(&item.currency),
        }
        let line_total = item
            .unit_price
            .checked_mul(i64::from(line.quantity))
            .filter(|t| *t <= MAX_AMOUNT)
            .ok_or(PricingError::TooLarge)?;
        priced.push(OrderLine {
            sku: item.sku.clone(),
            name: item.name.clone(),
            quantity: line.quantity,
            unit_price: item.unit_price,
            line_total,
        });
    }
    let subtotal = priced
        .iter()
        .try_fold(0i64, |sum, l| sum.checked_add(l.line_total))
        .filter(|t| *t <= MAX_AMOUNT)
        .ok_or(PricingError::TooLarge)?;
    // subtotal <= 2^53 and pct <= 100: the product is below 2^60, no overflow.
    let (coupon, discount) = match coupon {
        Some((code, pct)) => (Some(code), (subtotal * pct.clamp(0, 100)) / 100),
        None => (None, 0),
    };
    Ok(Priced {
        lines: priced,
        coupon,
        subtotal,
        discount,
        amount: subtotal - discount,
        currency: currency.unwrap_or("USD").to_owned(),
    })
}

/// Loads what pricing needs and prices. `coupon` is the code as the client sent it; with
/// `guard`, the code is `user`'s guess and guessing is rate limited (`Limits::coupon`).
pub(crate) async fn price_cart(
    store: &Store,
    source: Option<&CatalogSource>,
    guard: Option<(&Limits, &str)>,
    lines: &[CartLine],
    coupon: Option<&str>,
) -> AppResult<Priced> {
    ensure_installed(store, source).await?;
    let catalog = db::list_catalog(store.pool()).await?;
    let coupon = match coupon {
        None => None,
        Some(code) => {
            let pct = db::coupon_percent(store.pool(), code).await?;
            if let Some((limits, user)) = guard {
                limits.coupon(user, pct.is_some())?;
            }
            Some((code.to_owned(), pct.ok_or(PricingError::UnknownCoupon)?))
        }
    };
    let priced = price(lines, &catalog, coupon)?;
    if priced.amount <= 0 {
        // A 100 % coupon would make a zero charge; there is nothing to pay then, and the
        // provider refuses zero amounts.
        return Err(AppError::detail(
            ErrorCode::InvalidRequest,
            "the order total must be positive",
        ));
    }
    Ok(priced)
}

/// The `--catalog` file: `{"items": [...], "coupons": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CatalogFile {
    /// Every SKU on sale (at least one).
    pub items: Vec<FileItem>,
    /// Coupon codes (optional).
    #[serde(default)]
    pub coupons: Vec<FileCoupon>,
}

/// One SKU of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FileItem {
    pub sku: String,
    pub name: String,
    /// Minor units, > 0.
    pub unit_price: i64,
    /// ISO 4217, three capital letters.
    pub currency: String,
    /// Units on sale, >= 0.
    pub stock: i64,
}

/// One coupon of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FileCoupon {
    /// The code customers type (case-sensitive).
    pub code: String,
    /// 1..=100.
    pub percent_off: i64,
}

/// A checked catalog file, installed at most once by this process.
#[derive(Debug, Clone)]
pub(crate) struct CatalogSource {
    file: Arc<CatalogFile>,
    /// SHA-256 of the file's canonical JSON: the same catalog always has the same digest.
    digest: String,
    installed: Arc<tokio::sync::OnceCell<()>>,
}

fn valid_sku(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What is wrong with a catalog file, if anything. Each message names the entry.
fn check_file(f: &CatalogFile) -> Result<(), String> {
    if f.items.is_empty() {
        return Err("items: at least one SKU is needed".into());
    }
    let mut skus = HashSet::new();
    for (i, it) in f.items.iter().enumerate() {
        let problem = if !valid_sku(&it.sku) {
            format!("sku {:?}: 1..=64 characters of A-Z a-z 0-9 - _", it.sku)
        } else if !skus.insert(it.sku.as_str()) {
            format!("sku {:?} appears twice", it.sku)
        } else if it.name.trim().is_empty() || it.name.chars().count() > 200 {
            "name: 1..=200 characters".into()
        } else if it.unit_price <= 0 {
            "unitPrice must be > 0 (minor units)".into()
        } else if it.unit_price > MAX_UNIT_PRICE {
            format!("unitPrice must be at most {MAX_UNIT_PRICE} (minor units)")
        } else if it.currency.len() != 3 || !it.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            format!(
                "currency {:?}: three capital letters (ISO 4217)",
                it.currency
            )
        } else if it.stock < 0 {
            "stock must be >= 0".into()
        } else {
            continue;
        };
        return Err(format!("items[{i}].{problem}"));
    }
    let mut codes = HashSet::new();
    for (i, c) in f.coupons.iter().enumerate() {
        let problem =
            if c.code.is_empty() || c.code.len() > 64 || c.code.chars().any(char::is_whitespace) {
                "code: 1..=64 characters, no spaces".into()
            } else if !codes.insert(c.code.as_str()) {
                format!("code {:?} appears twice", c.code)
            } else if !(1..=100).contains(&c.percent_off) {
                "percentOff must be 1..=100".into()
            } else {
                continue;
            };
        return Err(format!("coupons[{i}].{problem}"));
    }
    Ok(())
}

/// Reads and checks `--catalog`. The error says which file and what is wrong with it.
pub(crate) fn load_file(path: &Path) -> Result<CatalogSource, CatalogError> {
    let at = || path.to_owned();
    let text = std::fs::read_to_string(path)
        .map_err(|source| CatalogError::Read { path: at(), source })?;
    let json = |source| CatalogError::Json { path: at(), source };
    let file: CatalogFile = serde_json::from_str(&text).map_err(json)?;
    check_file(&file).map_err(|why| CatalogError::Invalid { path: at(), why })?;
    let canonical = serde_json::to_vec(&file).map_err(json)?;
    Ok(CatalogSource {
        file: Arc::new(file),
        digest: hex::encode(Sha256::digest(&canonical)),
        installed: Arc::default(),
    })
}

/// Why the `--catalog` file stops the start; each line names the file.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// It cannot be read.
    #[error("--catalog {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not JSON of a catalog's shape.
    #[error("--catalog {}: {source}", path.display())]
    Json {
        /// The file.
        path: std::path::PathBuf,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// An entry breaks a rule of the catalog (`check_file`).
    #[error("--catalog {}: {why}", path.display())]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// Which rule, where.
        why: String,
    },
}

/// Installs the `--catalog` file, once per process, before the catalog is first read.
pub(crate) async fn ensure_installed(
    store: &Store,
    source: Option<&CatalogSource>,
) -> AppResult<()> {
    if let Some(src) = source {
        src.installed
            .get_or_try_init(|| install(store, src))
            .await?;
    }
    Ok(())
}

async fn install(store: &Store, src: &CatalogSource) -> Result<(), sqlx::Error> {
    let file = &src.file;
    let items = file.items.iter().map(|it| CatalogItem {
        sku: it.sku.clone(),
        name: it.name.clone(),
        unit_price: it.unit_price,
        currency: it.currency.clone(),
        stock: it.stock,
    });
    let coupons = file.coupons.iter().map(|c| (c.code.clone(), c.percent_off));
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let (items, coupons) = (items.collect(), coupons.collect());
    if db::install(store, src.digest.clone(), items, coupons, now).await? {
        tracing::info!(digest = %src.digest, items = file.items.len(), "catalog file installed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn catalog() -> Vec<CatalogItem> {
        vec![
            CatalogItem {
                sku: "a".into(),
                name: "A".into(),
                unit_price: 2500,
                currency: "USD".into(),
                stock: 5,
            },
            CatalogItem {
                sku: "b".into(),
                name: "B".into(),
                unit_price: 999,
                currency: "USD".into(),
                stock: 5,
            },
        ]
    }

    fn line(sku: &str, quantity: u32) -> CartLine {
        CartLine {
            sku: sku.into(),
            quantity,
        }
    }

    #[test]
    fn prices_come_from_the_catalog_and_the_coupon_rounds_down() {
        let p = price(
            &[line("a", 2), line("b", 1)],
            &catalog(),
            Some(("SAVE10".into(), 10)),
        )
        .unwrap();
        assert_eq!(p.subtotal, 5999);
        assert_eq!(p.discount, 599);
        assert_eq!(p.amount, 5400);
    }

    #[test]
    fn bad_carts_are_refused() {
        assert_eq!(price(&[], &catalog(), None), Err(PricingError::LineCount));
        assert_eq!(
            price(&[line("a", 1), line("a", 1)], &catalog(), None),
            Err(PricingError::DuplicateSku("a".into()))
        );
        assert_eq!(
            price(&[line("a", 0)], &catalog(), None),
            Err(PricingError::Quantity("a".into()))
        );
        assert_eq!(
            price(&[line("zz", 1)], &catalog(), None),
            Err(PricingError::UnknownSku("zz".into()))
        );
    }

    #[test]
    fn a_total_past_the_largest_amount_is_refused_not_wrapped() {
        let mut items = catalog();
        items[0].unit_price = i64::MAX / 50;
        items[1].unit_price = MAX_AMOUNT / 2 + 1;
        // One line overflows i64 itself; two lines each in range overflow the sum.
        assert_eq!(
            price(&[line("a", 100)], &items, None),
            Err(PricingError::TooLarge)
        );
        assert_eq!(
            price(&[line("b", 1)], &items, None).map(|p| p.amount),
            Ok(MAX_AMOUNT / 2 + 1)
        );
        assert_eq!(
            price(&[line("b", 2)], &items, None),
            Err(PricingError::TooLarge)
        );
        let e = AppError::from(PricingError::TooLarge).to_problem();
        assert_eq!((e.code, e.status), (ErrorCode::AmountTooLarge, 400));
    }

    #[test]
    fn the_largest_cart_of_the_largest_file_price_fits() {
        let mut items = catalog();
        items[0].unit_price = MAX_UNIT_PRICE;
        let p = price(&[line("a", MAX_QUANTITY)], &items, Some(("C".into(), 100))).unwrap();
        let most = MAX_UNIT_PRICE * i64::from(MAX_QUANTITY) * MAX_LINES as i64;
        assert!(most <= MAX_AMOUNT, "{most}");
        assert_eq!(p.discount, p.subtotal);
    }

    proptest! {
        #[test]
        fn the_total_is_the_sum_of_lines_minus_a_bounded_discount(
            qa in 1u32..=100, qb in 1u32..=100, pct in 0i64..=100,
        ) {
            let p = price(&[line("a", qa), line("b", qb)], &catalog(), Some(("C".into(), pct))).unwrap();
            prop_assert_eq!(p.subtotal, 2500 * i64::from(qa) + 999 * i64::from(qb));
            prop_assert!(p.discount >= 0 && p.discount <= p.subtotal);
            prop_assert_eq!(p.amount, p.subtotal - p.discount);
        }
    }
}
