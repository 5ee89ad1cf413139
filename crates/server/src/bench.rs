//! The raw-store path of the load benchmark (`crates/bench`): what `POST /orders/{id}/pay`
//! does for a new key, statement for statement, without HTTP, auth, the spawned task or the
//! provider round trip. The benchmark runs it beside the real server to show what those
//! layers cost. Not part of the API: nothing in the server calls it.

use crate::error::AppError;
use crate::orders::load_owned;
use crate::pay;
use crate::state::AppState;
use crate::store::attempts as db;
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{IdempotencyKey, PayRequest};
use payonce_rules::plan::Outcome;
use payonce_rules::NextAction;

/// Why a raw pay did not end in a stored success.
#[derive(Debug, thiserror::Error)]
#[error("raw pay: {0}")]
pub struct RawPayError(String);

impl From<AppError> for RawPayError {
    fn from(e: AppError) -> Self {
        Self(e.to_string())
    }
}

/// Pays `order_id` (at its current version) for `user` under the new `key`: the order read,
/// the key lookup and rule 2, the claim transaction, then the settle transaction of an
/// approved charge, as if the provider had answered at once. The charge id is made up.
pub async fn raw_pay(
    state: &AppState,
    user: &str,
    order_id: &str,
    key: &str,
    payment_method_id: &str,
) -> Result<(), RawPayError> {
    let key = IdempotencyKey::parse(key).map_err(|e| RawPayError(e.to_string()))?;
    let order = load_owned(state, order_id, user).await?;
    let record = db::find(state.store.pool(), user, key.as_str())
        .await
        .map_err(AppError::from)?;
    let req = PayRequest {
        order_version: u64::try_from(order.version).unwrap_or(0),
        payment_method_id: payment_method_id.to_owned(),
        extras: Default::default(),
    };
    let r = pay::request(user, &order.id, &req, Some(&order));
    let now = state.clock.now_ms();
    if payonce_rules::decide(record.as_ref(), &r, now, true) != NextAction::StartProcessing {
        return Err(RawPayError("the key is not new".into()));
    }
    let Some(claim) = pay::claim(state, user, &order, &key, &req, false).await? else {
        return Err(RawPayError("the claim was lost".into()));
    };
    let charge = Charge {
        id: format!("ch_raw_{}", uuid::Uuid::new_v4().simple()),
        provider_key: claim.attempt.provider_key.clone(),
        amount: order.amount,
        currency: order.currency.clone(),
        payment_method_id: payment_method_id.to_owned(),
        order_id: order.id.clone(),
        status: ChargeStatus::Succeeded,
        created_at: now,
        next_action_url: None,
    };
    match pay::settle(state, &claim, Outcome::Succeeded(charge)).await? {
        Some(_) => Ok(()),
        None => Err(RawPayError("someone else settled the attempt".into())),
    }
}
