//! An operator resolves an order's review flags (`POST /admin/reviews/{order_id}/resolve`,
//! docs/operating.md, runbook "a review flag"). Nothing is marked paid on a person's word:
//! the provider is asked again, and its answer decides.
//!
//! - A flagged **processing** attempt (the provider could not tell; a charge that differs
//!   from the attempt; a payment the provider did not cancel past its deadline) is driven by
//!   the pay machine from the take-over, as reconciliation drives it
//!   ([`payonce_rules::ServerPay::resolve`]): charged → paid, proven uncharged → ended and its
//!   order released; its settle clears the flag. It never starts a charge.
//! - A flagged **ended** attempt whose payment succeeded anyway (its order held,
//!   `ORDER_UNDER_REVIEW`): the stray payment is refunded at the provider, never adopted
//!   ([`payonce_rules::review`]), then the flag and the hold are cleared
//!   (`src/store/review.rs`).
//!
//! What the provider cannot settle stays flagged: [`Resolved::unresolved`] says why, and the
//! edge answers 409 `REVIEW_UNRESOLVED`.

use crate::error::AppResult;
use crate::ops::pay;
use crate::provider::RefundOutcome;
use crate::state::OpsState;
use crate::store::{self, attempts as db};
use payonce_protocol::admin::resolve as names;
use payonce_protocol::AttemptStatus;
use payonce_rules::pay::End;
use payonce_rules::review::{self, Stray};
use payonce_rules::{Record, ServerPay};

/// One flag's outcome: the attempt (none for an order held without a flagged attempt), one
/// of the `payonce_protocol::admin::resolve` outcomes, and why.
#[derive(Debug, Clone)]
pub(crate) struct Done {
    pub attempt: Option<String>,
    pub outcome: &'static str,
    pub why: String,
}

/// What a resolve came to.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// The order's owner.
    pub user: String,
    /// The flags settled by this call.
    pub done: Vec<Done>,
    /// Why a flag stays, if one does.
    pub unresolved: Option<String>,
}

/// Resolves every review flag of `order_id` (see the module docs); `None`: no such order.
pub(crate) async fn resolve(state: &OpsState, order_id: &str) -> AppResult<Option<Resolved>> {
    let pool = state.store.pool();
    let Some((user, held, flagged)) = store::review::flags(pool, order_id).await? else {
        return Ok(None);
    };
    let mut out = Resolved {
        user: user.clone(),
        ..Resolved::default()
    };
    if flagged.is_empty() && !held {
        out.unresolved = Some("the order has no review flag".into());
        return Ok(Some(out));
    }
    for id in &flagged {
        let step = match db::find_by_id(pool, id).await? {
            Some(row @ Record::Processing(_)) => processing(state, &row, &user).await?,
            Some(Record::Final(f)) => ended(state, order_id, &f.id).await?,
            _ => Err("the flagged attempt is gone".to_owned()),
        };
        match step {
            Ok(done) => out.done.push(done),
            Err(why) => {
                out.unresolved = Some(why);
                return Ok(Some(out));
            }
        }
    }
    if flagged.is_empty() {
        // Held by the provider sweep for a payment no attempt accounts for: its audit row
        // names the payment; nothing here can ask the provider about it.
        out.unresolved = Some(
            "the order is held for a payment no attempt accounts for (see its audit trail); \
             refund it at the provider, then release the order in the database"
                .into(),
        );
    }
    Ok(Some(out))
}

/// A flagged processing attempt, through the pay machine.
async fn processing(state: &OpsState, row: &Record, user: &str) -> AppResult<Result<Done, String>> {
    let Some(order) = store::orders::get_order(state.store.pool(), row.order_id(), user).await?
    else {
        return Ok(Err("the attempt's order is gone".into()));
    };
    let m = ServerPay::resolve(row, pay::order_of(&order), state.policy);
    let attempt = Some(row.id().as_str().to_owned());
    Ok(match pay::interpret(state, m, None).await? {
        End::Settled(f) if f.status == AttemptStatus::Succeeded => Ok(Done {
            attempt,
            outcome: names::PAID,
            why: "the provider charged this attempt: the order is paid".into(),
        }),
        End::Settled(f) => Ok(Done {
            attempt,
            outcome: names::RELEASED,
            why: format!(
                "the provider proved nothing was charged: the attempt ended {}, the order is free",
                f.status.as_str()
            ),
        }),
        End::ActionRequired(_) => Err("the payment still waits for the customer's action".into()),
        End::Unknown(_) => Err(
            "the provider still cannot tell this attempt's outcome (or charged other terms)".into(),
        ),
        // The lease is held elsewhere, or someone settled it first: look again.
        _ => match db::find_by_id(state.store.pool(), row.id()).await? {
            Some(Record::Final(f)) => Ok(Done {
                attempt,
                outcome: match f.status {
                    AttemptStatus::Succeeded => names::PAID,
                    _ => names::RELEASED,
                },
                why: "settled meanwhile by another process".into(),
            }),
            _ => Err("another process is driving this attempt; try again shortly".into()),
        },
    })
}

/// A flagged ended attempt: its stray payment refunded, then the flag (and the hold) cleared.
async fn ended(state: &OpsState, order_id: &str, id: &str) -> AppResult<Result<Done, String>> {
    let pool = state.store.pool();
    let Some((status, provider_key, provider_ref)) = store::review::ended(pool, id).await? else {
        return Ok(Err("the flagged attempt is gone".into()));
    };
    let status = AttemptStatus::parse(&status).unwrap_or(AttemptStatus::Failed);
    let lookup = state
        .provider
        .lookup(&provider_key, provider_ref.as_deref())
        .await;
    let (outcome, why) = match review::stray(lookup) {
        Stray::Unresolved(why) => return Ok(Err(why)),
        Stray::Clear(why) => (names::CLEARED, why),
        Stray::Refund(charge) => {
            let key = review::refund_key(&provider_key);
            match state.provider.refund(&charge.id, &key, charge.amount).await {
                RefundOutcome::Created(r) => (
                    names::REFUNDED,
                    format!(
                        "stray payment {} ({} {}) refunded at the provider (refund {})",
                        charge.id, charge.amount, charge.currency, r.id
                    ),
                ),
                RefundOutcome::NotAllowed(why) | RefundOutcome::Unknown(why) => {
                    return Ok(Err(format!(
                        "the refund of stray payment {} did not go through: {why}",
                        charge.id
                    )))
                }
            }
        }
    };
    // The hold is lifted with the order's last flag (the plan checks it again).
    let lifts = match store::review::flags(pool, order_id).await? {
        Some((_, held, ids)) => held && ids.len() <= 1,
        None => false,
    };
    let entries = review::cleared(Some((id, status)), order_id, lifts, &why);
    let now = state.clock.now_ms();
    store::review::clear(&state.store, order_id, Some(id), &entries, now).await?;
    Ok(Ok(Done {
        attempt: Some(id.to_owned()),
        outcome,
        why,
    }))
}
