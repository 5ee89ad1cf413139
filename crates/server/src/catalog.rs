//! The catalog and the one place prices are computed. Clients send SKUs and quantities;
//! every amount comes from here, never from the browser.

use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::store::catalog as db;
use payonce_protocol::{CartLine, CatalogItem, ErrorCode, OrderLine};
use std::collections::HashSet;

/// Most lines in one cart.
pub(crate) const MAX_LINES: usize = 20;
/// Most units of one line.
pub(crate) const MAX_QUANTITY: u32 = 100;
/// Longest address.
pub(crate) const MAX_ADDRESS: usize = 500;

/// A priced cart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Priced {
    pub lines: Vec<OrderLine>,
    pub coupon: Option<String>,
    pub subtotal: i64,
    pub discount: i64,
    pub amount: i64,
    pub currency: String,
}

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
}

impl From<PricingError> for AppError {
    fn from(e: PricingError) -> Self {
        AppError::detail(ErrorCode::InvalidRequest, e.to_string())
    }
}

/// Prices `lines` against `catalog` with an optional coupon `(code, percentOff)`.
/// The discount rounds down, in the customer's favour never beyond the subtotal.
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
        priced.push(OrderLine {
            sku: item.sku.clone(),
            name: item.name.clone(),
            quantity: line.quantity,
            unit_price: item.unit_price,
            line_total: item.unit_price * i64::from(line.quantity),
        });
    }
    let subtotal: i64 = priced.iter().map(|l| l.line_total).sum();
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

/// Loads what pricing needs and prices. `coupon` is the code as the client sent it.
pub(crate) async fn price_cart(
    state: &AppState,
    lines: &[CartLine],
    coupon: Option<&str>,
) -> AppResult<Priced> {
    let catalog = db::list_catalog(state.store.pool()).await?;
    let coupon = match coupon {
        None => None,
        Some(code) => {
            let pct = db::coupon_percent(state.store.pool(), code)
                .await?
                .ok_or(PricingError::UnknownCoupon)?;
            Some((code.to_owned(), pct))
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
