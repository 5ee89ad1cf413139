//! Orders: create, read, and change the cart. The cart rule "no edits while a payment is
//! active or once paid" lives in [`change_cart`]; the database enforces it with a
//! conditional update, the checks before it only pick the right error.

use crate::catalog::{price_cart, MAX_ADDRESS};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{AppError, AppResult};
use crate::ids::IdSource;
use crate::limits::Limits;
use crate::store::audit::Entry;
use crate::store::orders::{self as db, OrderRow};
use crate::store::payments::get_payment;
use crate::store::Store;
use payonce_protocol::{CreateOrderRequest, ErrorCode, Order, OrderStatus, UpdateCartRequest};
use payonce_rules::ids::OrderId;
use payonce_rules::plan::AuditState::Cart;
use payonce_rules::policy::Bucket;
use std::sync::Arc;

/// What the order operations read: the store, the clock, the id source, the per-user rate
/// limits and the catalog (`--catalog`, in the config). A sub-state: the handlers of
/// `src/http/orders.rs` take it, not the whole state.
#[derive(Clone)]
pub(crate) struct Orders {
    pub(crate) store: Store,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdSource>,
    pub(crate) limits: Arc<Limits>,
    pub(crate) config: Arc<Config>,
}

crate::state::sub_state!(Orders {
    store,
    clock,
    ids,
    limits,
    config
});

/// Loads the caller's order or answers 404 (also for someone else's order: its existence is
/// not the caller's business).
pub(crate) async fn load_owned(store: &Store, id: &str, user: &str) -> AppResult<OrderRow> {
    db::get_order(store.pool(), id, user)
        .await?
        .ok_or_else(|| AppError::code(ErrorCode::OrderNotFound))
}

/// The wire view of an order.
pub(crate) async fn view(store: &Store, row: OrderRow) -> AppResult<Order> {
    let payment = match &row.payment_id {
        Some(id) => get_payment(store.pool(), id).await?,
        None => None,
    };
    Ok(Order {
        id: row.id.into(),
        status: row.status,
        version: u64::try_from(row.version).unwrap_or(0),
        items: row.items,
        coupon: row.coupon,
        address: row.address,
        subtotal: row.subtotal,
        discount: row.discount,
        amount: row.amount,
        currency: row.currency,
        payment_in_progress: row.active_attempt.is_some(),
        payment,
    })
}

fn check_address(address: Option<&str>) -> AppResult<()> {
    match address {
        Some(a) if a.chars().count() > MAX_ADDRESS => Err(AppError::detail(
            ErrorCode::InvalidRequest,
            format!("address is longer than {MAX_ADDRESS} characters"),
        )),
        _ => Ok(()),
    }
}

/// Creates an unpaid order at version 1, priced from the catalog.
pub(crate) async fn create(
    state: &Orders,
    user: &str,
    req: &CreateOrderRequest,
) -> AppResult<OrderRow> {
    check_address(req.address.as_deref())?;
    state.limits.check(Bucket::Orders, user)?;
    let catalog = state.config.catalog.as_ref();
    let coupon = req.coupon.as_deref().filter(|c| !c.is_empty());
    let priced = price_cart(
        &state.store,
        catalog,
        Some((&*state.limits, user)),
        &req.items,
        coupon,
    )
    .await?;
    let id = String::from(OrderId::mint(&*state.ids));
    let now = state.clock.now_ms();
    let entry = Entry::change(user, "order", &id, None, Cart(1), "order created");
    let address = req.address.as_deref();
    db::create(&state.store, &id, user, &priced, address, &entry, now).await?;
    load_owned(&state.store, &id, user).await
}

/// An optional member after a cart edit: an empty string removes it, an absent one keeps it.
fn edited<'a>(sent: &'a Option<String>, current: &'a Option<String>) -> Option<&'a str> {
    match sent {
        Some(s) => Some(s.as_str()).filter(|s| !s.is_empty()),
        None => current.as_deref(),
    }
}

/// How many times a cart change retries when a concurrent edit bumped the version under it.
const CART_RETRIES: usize = 5;

/// The cart rule: edits bump the version; refused while an attempt is active
/// (`PAYMENT_IN_PROGRESS`) and once paid (`ORDER_ALREADY_PAID`).
pub(crate) async fn change_cart(
    state: &Orders,
    user: &str,
    id: &str,
    req: &UpdateCartRequest,
) -> AppResult<OrderRow> {
    check_address(req.address.as_deref())?;
    let catalog = state.config.catalog.as_ref();
    for _ in 0..CART_RETRIES {
        let current = load_owned(&state.store, id, user).await?;
        if current.status != OrderStatus::Unpaid {
            return Err(AppError::code(ErrorCode::OrderAlreadyPaid));
        }
        if current.active_attempt.is_some() {
            return Err(AppError::code(ErrorCode::PaymentInProgress));
        }
        let lines = req.items.clone().unwrap_or_else(|| current.cart_lines());
        // The order's own coupon is no guess; a sent one is (`Limits::coupon`).
        let guard = req.coupon.is_some().then_some((&*state.limits, user));
        let coupon = edited(&req.coupon, &current.coupon);
        let address = edited(&req.address, &current.address);
        let priced = price_cart(&state.store, catalog, guard, &lines, coupon).await?;
        let unchanged = priced.lines == current.items
            && priced.coupon == current.coupon
            && address == current.address.as_deref()
            && priced.amount == current.amount;
        if unchanged {
            // Nothing that matters changed: keep the version, so a key bound to it stays valid.
            return Ok(current);
        }
        let now = state.clock.now_ms();
        let (from, to) = (Cart(current.version), Cart(current.version + 1));
        let entry = Entry::change(user, "order", id, Some(from), to, "cart changed");
        let version = current.version;
        let store = &state.store;
        if db::change_cart(store, id, user, version, &priced, address, &entry, now).await? {
            return load_owned(&state.store, id, user).await;
        }
        // The order moved under us (paid, locked, or edited elsewhere): re-read and decide again.
    }
    Err(AppError::detail(
        ErrorCode::OrderChanged,
        "the order kept changing; reload it and try again",
    ))
}
