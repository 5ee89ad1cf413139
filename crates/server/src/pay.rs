//! `POST /orders/{id}/pay`: the pay rules in their order (crates/server/README.md). The
//! decisions are `payonce_rules` (rule 2 is [`payonce_rules::decide`], the claim and settle
//! transactions are plans); this file reads, calls the provider and executes the plans.
//!
//! 1. Authenticate; the order must be the caller's (404). Then the key: missing or
//!    malformed is a 400.
//! 2. Look the key up in the caller's scope before anything else: different details → 422;
//!    final → replay the stored answer byte for byte; processing → wait a little for it,
//!    then 409 IN_PROGRESS; tombstone → 409 ATTEMPT_CANCELLED.
//! 3. A new key is claimed in one transaction ([`claim`]): version, order lock, stock, and
//!    the insert under the unique constraint, all conditional statements.
//! 4. The provider is called with the saved provider key, no transaction open
//!    ([`drive`]), and the result is settled in one transaction ([`settle`]).
//! 5. A processing key whose lease expired is taken over and settled from what the provider
//!    says about its provider key ([`reconcile`]); only "no such charge" re-drives it.
//! 6. Every change is written to the audit trail in the same transaction.
//!
//! A retry of a finished attempt is answered before rule 1 from its record alone
//! ([`payonce_rules::pay::replay_of`]: one `SELECT`, or none when Redis or memory holds the
//! answer), but only when rule 1 and rule 2 could give no other answer.

use crate::dev::failpoint;
use crate::error::{AppError, AppResult};
use crate::faults;
use crate::provider::ChargeOutcome;
use crate::reply::Reply;
use crate::state::AppState;
use crate::store::attempts as db;
use crate::store::orders::{self, get_order, OrderRow};
use crate::store::pg::{self, Claimed, Settle};
use crate::store::{audit, catalog, jobs, outbox, payments, Backend};
use payonce_protocol::provider::ChargeRequest;
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, PayRequest};
use payonce_rules::pay::Current;
use payonce_rules::plan::{self, Claim, ClaimPlan, Finish, OrderTerms, SettlePlan};
use payonce_rules::policy::Bucket;
use payonce_rules::{Final, NextAction, Processing, Record};
use sqlx::AnyConnection;
use std::time::Duration;
use tokio::time::Instant;

/// How often a request waiting for its own key in flight looks again.
const POLL: Duration = Duration::from_millis(25);

/// The rules' view of a pay request for `order_id`; `order`: the order once read.
pub(crate) fn request<'a>(
    user: &'a str,
    order_id: &'a str,
    req: &'a PayRequest,
    order: Option<&'a OrderRow>,
) -> payonce_rules::PayRequest<'a> {
    payonce_rules::PayRequest {
        user,
        order_id,
        order_version: req.order_version,
        payment_method_id: &req.payment_method_id,
        extras: &req.extras,
        current: order.map(|o| Current {
            version: o.version,
            amount: o.amount,
            currency: &o.currency,
        }),
    }
}

/// Rules 2 to 5 for one request. A key in flight is waited on until `deadline`.
///
/// `first`: the caller's record as read with the order (`Some(None)`: no record), used for
/// the first decision instead of a second lookup; `None` to look it up here. A record read a
/// moment earlier is as good as a fresh one: final records and tombstones never change (until
/// deleted at the end of retention), a missing one is claimed under the unique index (a lost
/// slot decides again), and every decision taken on a processing record is a conditional
/// write (take-over) or a wait, which looks again when the row moved meanwhile.
pub(crate) async fn run(
    state: &AppState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
    req: &PayRequest,
    deadline: Instant,
    mut first: Option<Option<Record>>,
) -> AppResult<Reply> {
    // Set once this request claimed the key: a stored answer it then finds (a webhook settled
    // the attempt while this request waited on the provider) is this request's own outcome,
    // not a replay, so it must not say `Idempotent-Replayed: true`.
    let mut claimed_here = false;
    // Each turn either ends or observes progress by someone else (a row appeared, a lease
    // was taken, an attempt settled); the bound only guards against a livelock bug.
    for _ in 0..10_000 {
        let record = match first.take() {
            Some(r) => r,
            None => db::find(state.store.pool(), user, key.as_str()).await?,
        };
        let r = request(user, &order.id, req, Some(order));
        let now = state.clock.now_ms();
        match payonce_rules::decide(record.as_ref(), &r, now, Instant::now() < deadline) {
            NextAction::StartProcessing => match claim(state, user, order, key, req, true).await? {
                Some(claim) => {
                    claimed_here = true;
                    failpoint(faults::AFTER_CLAIM);
                    // The claim's outbox row, executed inline by this request.
                    crate::metrics::outbox(crate::metrics::OutboxResult::ExecutedInline);
                    if let Some(answer) = drive(state, &claim).await? {
                        return Ok(keep(state, user, key, answer));
                    }
                }
                None => continue,
            },
            NextAction::Replay(answer) => {
                let mut a = Reply::replay(answer);
                a.replayed = !claimed_here;
                return Ok(a);
            }
            NextAction::Mismatch(status) => {
                return Err(AppError::with(
                    ErrorCode::KeyReusedWithDifferentDetails,
                    |p| {
                        p.attempt_status = Some(status);
                        p.detail = Some("this key was used before with different order, version, amount or payment method".into());
                    },
                ));
            }
            NextAction::Cancelled => {
                return Err(AppError::attempt(
                    ErrorCode::AttemptCancelled,
                    AttemptStatus::Cancelled,
                ))
            }
            NextAction::Wait => tokio::time::sleep(POLL).await,
            NextAction::InProgress => return Err(in_progress(state)),
            NextAction::Reconcile => {
                let Some(record) = record else { continue };
                let Some(claim) = take_over(state, &record, order, user, "a retry").await? else {
                    continue; // another retry took it; look again
                };
                if let Some(answer) = reconcile(state, &claim).await? {
                    return Ok(keep(state, user, key, answer));
                }
            }
        }
    }
    Err(in_progress(state))
}

/// The final row this request just stored enters the replay cache (src/replay/memory.rs),
/// so even the first retry of the key needs no round trip.
fn keep(state: &AppState, user: &str, key: &IdempotencyKey, answer: Reply) -> Reply {
    if let Some(f) = &answer.stored {
        state
            .replays
            .put(user, key.as_str(), &Record::Final(f.clone()));
    }
    answer
}

/// Takes over the expired lease of a processing attempt (exactly one contender wins) and
/// records why. `actor` is the user (a retry) or `system` (the jobs).
pub(crate) async fn take_over(
    state: &AppState,
    record: &Record,
    order: &OrderRow,
    actor: &str,
    who: &str,
) -> AppResult<Option<Claim>> {
    let token = uuid::Uuid::new_v4().to_string();
    let now = state.clock.now_ms();
    let until = state.policy.lease_until(now);
    let (id, lease) = (record.id().to_owned(), token.clone());
    let entry = plan::take_over_entry(actor, record.id(), who);
    let taken = state.store.write(async move |tx| {
        let taken = db::take_expired_lease(&mut *tx, &id, now, until, &lease).await?;
        if taken {
            audit::record(&mut *tx, &entry, now).await?;
        }
        Ok::<_, sqlx::Error>(taken)
    });
    if !taken.await? {
        return Ok(None);
    }
    let claim = Claim::of(record, &order.items, actor, token)
        .ok_or_else(|| AppError::internal("took the lease of an attempt that is not processing"))?;
    Ok(Some(claim))
}

fn in_progress(state: &AppState) -> AppError {
    AppError::with(ErrorCode::InProgress, |p| {
        p.attempt_status = Some(AttemptStatus::Processing);
        p.retry_after = Some(state.config.retry_after_secs);
    })
}

/// Rule 3, in one write transaction. Every check is a conditional statement whose row
/// count decides; the reads only choose which error to report. `None`: the key appeared
/// meanwhile (another request claimed or cancelled it): decide again.
///
/// `spend`: take a new-attempt token (`src/limits.rs`) when the claim wins, after every
/// statement passed and before the commit, so duplicates racing for one new key (which
/// lose the `(user, key)` slot and replay) never pay for it; a refusal rolls it back. The
/// load benchmark's raw path passes `false`: it measures the store, not the limiter.
pub(crate) async fn claim(
    state: &AppState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
    req: &PayRequest,
    spend: bool,
) -> AppResult<Option<Claim>> {
    let now = state.clock.now_ms();
    let terms = OrderTerms {
        id: &order.id,
        version: order.version,
        amount: order.amount,
        currency: &order.currency,
        lines: &order.items,
    };
    let plan = plan::plan_claim(
        user,
        key,
        terms,
        req.order_version,
        &req.payment_method_id,
        &req.extras,
        format!("att_{}", uuid::Uuid::new_v4().simple()),
        uuid::Uuid::new_v4().to_string(),
        now,
        &state.policy,
    )?;
    let (user, key, order) = (user.to_owned(), key.as_str().to_owned(), order.clone());
    let (limits, backend) = (spend.then(|| state.limits.clone()), state.store.backend());
    let claim = state.store.write(async move |tx| {
        let attempt = &plan.claim.attempt;
        let conflict = |current: Option<OrderRow>| {
            AppError::from(plan::order_conflict(
                current.map(|o| o.version),
                order.version,
            ))
        };
        let (token, stock) = (&plan.claim.lease_token, &plan.stock);
        let done = match backend {
            Backend::Postgres => {
                pg::claim(&mut *tx, attempt, &key, token, stock, &plan.audit, now).await?
            }
            Backend::Sqlite => claim_steps(tx, &plan, &key, now).await?,
        };
        if !done.inserted {
            // Which unique slot was taken? Our (user, key): decide again with the record.
            // Otherwise it is "one processing attempt per order": the order is busy.
            if db::find(&mut *tx, &user, &key).await?.is_some() {
                return Ok(None);
            }
            return Err(conflict(get_order(&mut *tx, &order.id, &user).await?));
        }
        if !done.locked {
            return Err(conflict(get_order(&mut *tx, &order.id, &user).await?));
        }
        if let Some(line) = stock.get(done.reserved) {
            return Err(AppError::with(ErrorCode::OutOfStock, |p| {
                p.sku = Some(line.sku.clone())
            }));
        }
        if let Some(limits) = limits {
            limits.check(Bucket::NewAttempts, &user)?; // refused: rolled back
        }
        Ok(Some(plan.claim))
    });
    claim.await
}

/// The claim's statements one at a time (SQLite), up to the first that does not pass. The
/// outbox row says "charge this provider key", committed with the claim: this request
/// executes it inline right after the commit; if the process dies first, the outbox worker
/// finds it (src/jobs/mod.rs). The provider is never called inside a transaction.
async fn claim_steps(
    tx: &mut AnyConnection,
    plan: &ClaimPlan,
    key: &str,
    now: i64,
) -> AppResult<Claimed> {
    let a = &plan.claim.attempt;
    let t = &a.terms;
    let token = &plan.claim.lease_token;
    let mut done = Claimed {
        inserted: db::insert_processing(&mut *tx, a, key, token, now).await?,
        locked: false,
        reserved: 0,
    };
    done.locked = done.inserted
        && orders::lock_order(&mut *tx, &t.order_id, &t.user, t.order_version, &a.id, now).await?;
    if !done.locked {
        return Ok(done);
    }
    for line in &plan.stock {
        if !catalog::reserve_stock(&mut *tx, line).await? {
            return Ok(done);
        }
        done.reserved += 1;
    }
    for entry in &plan.audit {
        audit::record(&mut *tx, entry, now).await?;
    }
    outbox::insert_outbox(&mut *tx, &a.id, &a.provider_key, now).await?;
    Ok(done)
}

/// Rule 4: charge with the saved provider key (no transaction open), then settle.
/// `None`: someone else settled the attempt first; the caller decides again.
async fn drive(state: &AppState, claim: &Claim) -> AppResult<Option<Reply>> {
    let a = &claim.attempt;
    let req = ChargeRequest {
        amount: a.terms.amount,
        currency: a.terms.currency.clone(),
        payment_method_id: a.payment_method_id.clone(),
        order_id: a.terms.order_id.clone(),
    };
    let outcome = state.provider.charge(&a.provider_key, &req).await;
    crate::dev::after_charge();
    failpoint(faults::AFTER_CHARGE);
    settle(state, claim, outcome).await
}

/// Rule 5: ask the provider what happened under the provider key, settle from that, and
/// re-drive with the same provider key only when the provider has no charge for it.
pub(crate) async fn reconcile(state: &AppState, claim: &Claim) -> AppResult<Option<Reply>> {
    let lookup = state
        .provider
        .charge_by_key(&claim.attempt.provider_key)
        .await;
    match plan::reconcile(lookup) {
        Ok(outcome) => settle(state, claim, outcome).await,
        Err(plan::Redrive) => drive(state, claim).await,
    }
}

/// A provider webhook says `record`'s charge has an outcome. A webhook is a hint, never the
/// evidence: the outcome is read back from the provider by provider key, so even a correctly
/// signed but made-up event cannot mark an order paid. No lease is taken: the request that
/// claimed the attempt may be mid-call (the provider can call us before it answers it), and
/// settling is a conditional update, so whoever settles first wins and the other replays.
/// Returns `Some(true)` when this call settled the attempt, `Some(false)` when there was
/// nothing to apply (settled by someone else, or the provider has no such charge), `None`
/// when the provider could not be asked (the event must be delivered again).
pub(crate) async fn settle_from_webhook(
    state: &AppState,
    record: &Record,
    order: &OrderRow,
) -> AppResult<Option<bool>> {
    // A token nobody holds: this path never releases or takes a lease.
    let token = uuid::Uuid::new_v4().to_string();
    let Some(claim) = Claim::of(record, &order.items, "provider-webhook", token) else {
        return Ok(Some(false));
    };
    let lookup = state
        .provider
        .charge_by_key(&claim.attempt.provider_key)
        .await;
    match plan::webhook(lookup) {
        Some(Some(outcome)) => Ok(Some(settle(state, &claim, outcome).await?.is_some())),
        Some(None) => Ok(Some(false)),
        None => Ok(None),
    }
}

/// Ends `claim`'s lease early (nobody is talking to the provider about the attempt any
/// more). False when a webhook settled the attempt meanwhile: its stored answer stands.
async fn release_unless_settled(state: &AppState, claim: &Claim, now: i64) -> AppResult<bool> {
    let a = &claim.attempt;
    let (id, token) = (a.id.clone(), claim.lease_token.clone());
    let release = state
        .store
        .write(async move |tx| db::release_lease(tx, &id, &token, now).await);
    release.await?;
    let record = db::find_by_id(state.store.pool(), &a.id).await?;
    Ok(!record.is_some_and(|r| r.is_final()))
}

/// Executes the settle plan for `outcome` (one transaction) and builds the answer. `None`:
/// someone else settled the attempt first.
pub(crate) async fn settle(
    state: &AppState,
    claim: &Claim,
    outcome: ChargeOutcome,
) -> AppResult<Option<Reply>> {
    let a = &claim.attempt;
    match &outcome {
        ChargeOutcome::Succeeded(c)
            if c.amount != a.terms.amount || c.currency != a.terms.currency =>
        {
            // The provider charged something else under our key: record what it says it
            // charged (the truth about money), and shout.
            tracing::error!(attempt = %a.id, charged = c.amount, expected = a.terms.amount, "charge differs from the attempt");
        }
        ChargeOutcome::Declined(c) => {
            tracing::info!(attempt = %a.id, charge = %c.id, "provider declined")
        }
        ChargeOutcome::Rejected(why) => {
            tracing::warn!(attempt = %a.id, %why, "provider refused the charge request")
        }
        ChargeOutcome::Unknown(why) => {
            tracing::warn!(attempt = %a.id, %why, "provider outcome unknown; attempt stays processing")
        }
        ChargeOutcome::ActionRequired(c) => {
            tracing::info!(attempt = %a.id, charge = %c.id, "the charge waits for the customer; attempt stays processing")
        }
        ChargeOutcome::Succeeded(_) => {}
    }
    let now = state.clock.now_ms();
    let payment_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    let (finish, then, audit_rows) =
        match plan::plan_settle(claim, outcome, payment_id, now, &state.policy) {
            SettlePlan::Unknown { answer } => {
                if !release_unless_settled(state, claim, now).await? {
                    return Ok(None);
                }
                let mut answer = Reply::fresh(answer);
                answer.retry_after = Some(state.config.retry_after_secs);
                return Ok(Some(answer));
            }
            SettlePlan::ActionRequired { answer } => {
                // Like Unknown: the next retry (or job, or webhook) asks the provider again,
                // under the same provider key, and gets this answer until the customer acted.
                if !release_unless_settled(state, claim, now).await? {
                    return Ok(None);
                }
                return Ok(Some(Reply::open(answer)));
            }
            SettlePlan::Charged {
                finish,
                payment,
                audit,
            } => (finish, Settle::Charged(payment), audit),
            SettlePlan::Uncharged {
                finish,
                release,
                audit,
            } => (finish, Settle::Uncharged(release), audit),
        };
    if finish.status == AttemptStatus::Succeeded {
        failpoint(faults::BEFORE_SETTLE_COMMIT);
    }
    let settled = match state.store.backend() {
        Backend::Postgres => {
            pg::settle(state.store.pool(), a, &finish, &then, &audit_rows, now).await?
        }
        Backend::Sqlite => settle_steps(state, a, &finish, &then, &audit_rows, now).await?,
    };
    if !settled {
        return Ok(None);
    }
    let stored = Final {
        id: a.id.clone(),
        terms: a.terms.clone(),
        status: finish.status,
        answer: finish.answer.clone(),
        expires_at: finish.expires_at,
    };
    Ok(Some(Reply {
        stored: Some(stored),
        ..Reply::fresh(finish.answer)
    }))
}

/// The settle's statements in one transaction (SQLite). False: someone else settled the
/// attempt first.
async fn settle_steps(
    state: &AppState,
    a: &Processing,
    finish: &Finish,
    then: &Settle,
    audit_rows: &[audit::Entry],
    now: i64,
) -> AppResult<bool> {
    let (a, finish, then, audit_rows) =
        (a.clone(), finish.clone(), then.clone(), audit_rows.to_vec());
    let settle = state.store.write(async move |tx| {
        let order = &a.terms.order_id;
        if !db::finish(&mut *tx, &a.id, &finish, now).await? {
            return Ok(false);
        }
        match &then {
            Settle::Charged(payment) => {
                payments::insert_payment(&mut *tx, payment, &a.id, now).await?;
                if !orders::mark_paid(&mut *tx, order, &a.id, &payment.id, now).await? {
                    // The order lock belongs to this attempt until it settles; losing it is a
                    // bug. Roll back so the attempt stays processing and is settled again.
                    return Err(AppError::internal(format!(
                        "order {order} is not locked by attempt {}",
                        a.id
                    )));
                }
                // The confirmation email is a job committed with the success: exactly one per
                // paid order, delivered at least once, made idempotent by
                // `confirmation_email_sent`.
                jobs::enqueue_email(&mut *tx, order, now).await?;
            }
            Settle::Uncharged(release) => {
                orders::unlock_order(&mut *tx, order, &a.id, now).await?;
                for line in release {
                    catalog::release_stock(&mut *tx, line).await?;
                }
            }
        }
        for entry in &audit_rows {
            audit::record(&mut *tx, entry, now).await?;
        }
        outbox::outbox_done(&mut *tx, &a.id, now).await?;
        Ok(true)
    });
    settle.await
}
