//! `POST /orders/{id}/pay`, the jobs' abandoned attempts and the webhook settle: the I/O
//! shell of the pay machine [`payonce_rules::pay::ServerPay`] (crates/server/README.md).
//! The machine decides every step, in order (rule 2, the claim, the charge, the lookup, the
//! settle); [`interpret`] performs each effect it asks for (a read, a transaction, a provider
//! call, a wait) and feeds the result back. The two transactions are [`exec_claim`] and
//! [`exec_settle`]; the provider is never called inside a transaction.
//!
//! 1. Authenticate; the order must be the caller's (404). Then the key: missing or
//!    malformed is a 400.
//! 2. Look the key up in the caller's scope before anything else: different details → 422;
//!    final → replay the stored answer byte for byte; processing → wait a little for it,
//!    then 409 IN_PROGRESS; tombstone → 409 ATTEMPT_CANCELLED.
//! 3. A new key is claimed in one transaction ([`exec_claim`]): version, order lock, stock,
//!    and the insert under the unique constraint, all conditional statements.
//! 4. The provider is called with the saved provider key, no transaction open, and the
//!    result is settled in one transaction ([`exec_settle`]).
//! 5. A processing key whose lease expired is taken over and settled from what the provider
//!    says about its provider key; only "no such charge" re-drives it. The jobs
//!    ([`ServerPay::abandoned`], src/ops/jobs/mod.rs) and webhooks ([`ServerPay::webhook`]) run
//!    the same machine from that step.
//! 6. Every change is written to the audit trail and the journal (its decision,
//!    `payonce_rules::decision`) in the same transaction; a claim that lost is journaled
//!    with the request's entries.
//!
//! A retry of a finished attempt is answered before rule 1 from its record alone
//! ([`payonce_rules::pay_key::replay_of`]: one `SELECT`, or none when Redis or memory holds the
//! answer), but only when rule 1 and rule 2 could give no other answer.

use crate::error::{AppError, AppResult};
use crate::faults::failpoint;
use crate::faults::Failpoint;
use crate::journal;
use crate::metrics::ReplaySource;
use crate::provider::{ChargeOutcome, Lookup};
use crate::replay::marker;
use crate::reply::Reply;
use crate::state::OpsState;
use crate::store;
use crate::store::attempts as db;
use crate::store::journal::About;
use crate::store::orders::OrderRow;
use crate::store::pay::ClaimOutcome;
use payonce_protocol::provider::ChargeRequest;
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, PayRequest};
use payonce_rules::decision;
use payonce_rules::ids::LeaseToken;
use payonce_rules::pay::{self, Claimed, Effect, End, Marked, ServerPay, TakeOver, Unmark};
use payonce_rules::plan::{self, Claim, ClaimPlan, SettlePlan};
use payonce_rules::policy::{next_customer_check, Bucket};
use payonce_rules::{Processing, Record};
/// Effects one flow may ask for: each turn of a request either ends or observes progress
/// by someone else (a row appeared, a lease was taken, an attempt settled); the bound only
/// guards against a livelock bug.
const MAX_EFFECTS: usize = 100_000;

/// The machine's view of the order as read.
pub(crate) fn order_of(order: &OrderRow) -> pay::Order {
    pay::Order {
        id: order.id.clone(),
        version: order.version,
        amount: order.amount,
        currency: order.currency.clone(),
        lines: order.items.clone(),
    }
}

/// Rules 2 to 5 for one request, behind the Redis claim marker when Redis is on
/// (src/replay/marker.rs). A key in flight is waited on for `--in-progress-wait-ms`, a
/// deadline the machine keeps (`Policy::wait_ends`). The answer, and where a replayed one
/// came from.
///
/// `first`: the caller's record as read with the order (`Some(None)`: no record), used for
/// the first decision instead of a second lookup; `None` to look it up here. A record read a
/// moment earlier is as good as a fresh one: final records and tombstones never change (until
/// deleted at the end of retention), a missing one is claimed under the unique index (a lost
/// slot decides again), and every decision taken on a processing record is a conditional
/// write (take-over) or a wait, which looks again when the row moved meanwhile.
pub(crate) async fn pay(
    state: &OpsState,
    user: &str,
    order: &OrderRow,
    key: &IdempotencyKey,
    req: &PayRequest,
    first: Option<Option<Record>>,
) -> (AppResult<Reply>, ReplaySource) {
    let request = pay::Request {
        user: user.to_owned(),
        key: key.clone(),
        order_version: req.order_version,
        payment_method_id: req.payment_method_id.clone(),
        extras: req.extras.clone(),
    };
    let (order, policy) = (order_of(order), state.policy);
    let order = &order;
    let m = match &state.redis {
        Some(_) => ServerPay::pay_marked(request, order.clone(), first, policy),
        None => ServerPay::pay(request, order.clone(), first, state.clock.now_ms(), policy),
    };
    let mut m = configured(state, m);
    let reply = match drive(state, &mut m, None).await {
        Ok(end) => {
            if let Some(lost) = decision::claim_lost(&end) {
                let about = About {
                    user: Some(user),
                    order_id: Some(&order.id),
                    key: Some(key.as_str()),
                    ..About::default()
                };
                journal::decided(&lost, &about).await;
            }
            reply(state, user, key, end).await
        }
        Err(e) => Err(e),
    };
    let source = match m.replayed_from_marker() {
        true => ReplaySource::Redis,
        false => ReplaySource::Database,
    };
    (reply, source)
}

/// The answer of a pay flow's end.
async fn reply(state: &OpsState, user: &str, key: &IdempotencyKey, end: End) -> AppResult<Reply> {
    match end {
        End::Replay { answer, replayed } => {
            let mut a = Reply::replay(answer);
            a.replayed = replayed;
            Ok(a)
        }
        End::Settled(stored) => {
            // The final row this request just stored enters the replay cache
            // (src/replay/memory.rs), so even the first retry of the key needs no round trip.
            state
                .replays
                .put(user, key.as_str(), &Record::Final(stored.clone()));
            Ok(Reply::fresh(stored.answer))
        }
        End::Unknown(answer) => {
            let mut answer = Reply::fresh(answer);
            answer.retry_after = Some(state.config.retry_after_secs);
            Ok(answer)
        }
        // Like Unknown: the next retry (or job, or webhook) asks the provider again, under
        // the same provider key, and gets this answer until the customer acted.
        End::ActionRequired(answer) => {
            // The customer is at the challenge now: the jobs need not look for a while. The
            // jobs' own schedule, never `now`: a retry of an abandoned challenge would make
            // it due at once, and a page of them retried every round would fill each round's
            // work list again. The schedule only moves later with `now`, and never past the
            // deadline, so the check that expires the challenge still runs on time.
            let attempt = db::find(state.store.pool(), user, key.as_str()).await?;
            if let Some(Record::Processing(p)) = attempt {
                let now = state.clock.now_ms();
                let at = next_customer_check(p.created_at, now, &state.policy);
                store::pay::check_later(&state.store, &p, at, now).await?;
            }
            Ok(Reply::open(answer))
        }
        End::Mismatch(status) => Err(AppError::key_reused(status)),
        End::Cancelled => Err(AppError::attempt_cancelled()),
        End::InProgress => Err(AppError::in_progress(state.config.retry_after_secs)),
        End::Refused(problem) => Err(problem.into()),
        End::Skipped | End::Unconfirmed => Err(AppError::internal("a pay ended as a job")),
    }
}

/// The jobs' driver of an abandoned attempt (src/ops/jobs/mod.rs): the machine from the
/// take-over, `worker` named in the audit trail; `outbox`: the outbox worker's failpoint
/// after the take-over.
pub(crate) async fn abandoned(
    state: &OpsState,
    row: &Record,
    order: &OrderRow,
    worker: &'static str,
    outbox: bool,
) -> AppResult<End> {
    let m = ServerPay::abandoned(row, order_of(order), worker, state.policy);
    let point = outbox.then_some(Failpoint::Outbox);
    interpret(state, m, point).await
}

/// A customer's cancel of `row` while its payment may wait for them (src/ops/cancel.rs): the
/// machine from the take-over; a payment waiting for the customer is cancelled at the
/// provider and the attempt ends `cancelled`.
pub(crate) async fn cancel_waiting(
    state: &OpsState,
    row: &Record,
    order: &OrderRow,
    user: &str,
) -> AppResult<End> {
    let m = ServerPay::cancel(row, order_of(order), user, state.policy);
    interpret(state, m, None).await
}

/// Performs `m`'s effects until it ends. `taken`: the failpoint right after a take-over (the
/// outbox worker's).
pub(crate) async fn interpret(
    state: &OpsState,
    m: ServerPay,
    taken: Option<Failpoint>,
) -> AppResult<End> {
    drive(state, &mut configured(state, m), taken).await
}

/// `m` as this server runs it: its provider's phases, and a flaw only a dev build sets.
fn configured(state: &OpsState, m: ServerPay) -> ServerPay {
    m.with_phases(state.provider.phases())
        .with_flaw(state.config.flaw)
}

/// [`interpret`] on a machine the caller keeps. A flow stopped by an error (the store
/// failed) still deletes the claim marker it set, so duplicates need not wait it out.
async fn drive(state: &OpsState, m: &mut ServerPay, taken: Option<Failpoint>) -> AppResult<End> {
    let own = state.redis.as_ref().map(|_| marker::new_marker());
    let r = steps(state, m, taken, own.as_deref()).await;
    if let (Err(_), Some((user, key)), Some(redis), Some(own)) =
        (&r, m.marker_held(), &state.redis, &own)
    {
        marker::unmark(redis, state, user, key, own, Unmark::Release).await;
    }
    r
}

/// Performs the machine's effects one at a time (the I/O), handing each one's result back
/// ([`Input::feed`]), until it ends.
async fn steps(
    state: &OpsState,
    m: &mut ServerPay,
    taken: Option<Failpoint>,
    own: Option<&str>,
) -> AppResult<End> {
    for _ in 0..MAX_EFFECTS {
        let input = match m.poll(state.clock.now_ms(), &*state.ids) {
            Effect::Done(end) => return Ok(end.clone()),
            Effect::Mark { user, key } => Input::Marked(match (&state.redis, own) {
                (Some(redis), Some(own)) => marker::mark(redis, state, user, key, own).await,
                _ => Marked::Failed,
            }),
            Effect::MarkWait { user, key, until } => {
                crate::clock::sleep_until(&*state.clock, until).await;
                Input::Marked(match &state.redis {
                    Some(redis) => marker::look(redis, user, key).await,
                    None => Marked::Failed,
                })
            }
            Effect::Unmark { unmark, user, key } => {
                if let (Some(redis), Some(own)) = (&state.redis, own) {
                    marker::unmark(redis, state, user, key, own, unmark).await;
                }
                Input::Unmarked
            }
            Effect::ReadKey { user, key } => {
                Input::Record(db::find(state.store.pool(), user, key.as_str()).await?)
            }
            Effect::Wait { until } => {
                // Until the machine's next look: the record is read again then, so a key
                // settled meanwhile ends the wait, and the machine's deadline bounds it.
                crate::clock::sleep_until(&*state.clock, until).await;
                Input::Waited
            }
            Effect::Claim { plan, key, now } => Input::Claimed(claim(state, plan, key, now).await?),
            Effect::TakeOver { take, now } => {
                Input::Taken(take_over(state, take, now, taken).await?)
            }
            Effect::Charge(claim) => Input::Charged(charge(state, claim).await),
            Effect::Create(claim) => Input::Created(create(state, claim).await),
            Effect::SaveRef {
                claim,
                provider_ref,
                now,
            } => Input::RefSaved(save_ref(state, claim, provider_ref, now).await?),
            Effect::Confirm(claim) => Input::Charged(confirm(state, claim).await),
            Effect::Lookup(claim) => Input::Looked(lookup(state, claim).await),
            Effect::CancelAction(claim) => {
                Input::ActionCancelled(cancel_action(state, claim).await)
            }
            Effect::Settle { claim, plan, now } => Input::Settled(match plan {
                SettlePlan::Review { audit, .. } => flag_mismatch(state, claim, audit, now).await?,
                _ => exec_settle(state, &claim.attempt, plan, now).await?,
            }),
            Effect::CancelLeftover(claim) => Input::Leftover(
                crate::ops::leftovers::cancel(&state.provider, &claim.attempt).await,
            ),
            Effect::Release { claim, now } => {
                Input::Released(!release_unless_settled(state, claim, now).await?)
            }
        };
        input.feed(m, state.clock.now_ms());
    }
    Err(AppError::in_progress(state.config.retry_after_secs))
}

/// What one effect of the pay machine came back with, for the machine's matching `on_…`.
enum Input {
    Marked(Marked),
    Unmarked,
    Record(Option<Record>),
    Waited,
    Claimed(Claimed),
    Taken(bool),
    Charged(ChargeOutcome),
    Created(pay::Created),
    RefSaved(bool),
    Looked(Lookup),
    ActionCancelled(Lookup),
    Settled(bool),
    Leftover(Lookup),
    /// True when the attempt was settled meanwhile (a webhook's answer stands).
    Released(bool),
}

impl Input {
    /// Hands the result to `m`, read at `now`.
    fn feed(self, m: &mut ServerPay, now: i64) {
        match self {
            Self::Marked(seen) => {
                if let Some(verdict) = m.on_marked(seen, now) {
                    marker::count(verdict);
                }
            }
            Self::Unmarked => m.on_unmarked(),
            Self::Record(record) => m.on_record(record, now),
            Self::Waited => m.on_waited(),
            Self::Claimed(claimed) => m.on_claim(claimed),
            Self::Taken(won) => m.on_taken(won),
            Self::Charged(outcome) => m.on_charge(outcome),
            Self::Created(created) => m.on_created(created),
            Self::RefSaved(saved) => m.on_ref_saved(saved),
            Self::Looked(lookup) => m.on_lookup(lookup),
            Self::ActionCancelled(lookup) => m.on_action_cancelled(lookup),
            Self::Settled(settled) => m.on_settled(settled),
            Self::Leftover(lookup) => m.on_leftover(lookup),
            Self::Released(settled) => m.on_released(settled),
        }
    }
}

/// Rule 3's claim, spending the new-attempt token when it wins.
async fn claim(
    state: &OpsState,
    plan: &ClaimPlan,
    key: &IdempotencyKey,
    now: i64,
) -> AppResult<Claimed> {
    let claimed = exec_claim(state, plan, key, now, true).await?;
    if claimed == Claimed::Won {
        failpoint(Failpoint::AfterClaim);
        // The claim's outbox row, executed inline by this request.
        crate::metrics::outbox(crate::metrics::OutboxResult::ExecutedInline);
    }
    Ok(claimed)
}

/// Takes over the expired lease of a processing attempt (exactly one contender wins) and
/// records why; `taken`, the worker's failpoint, fires when this one won.
async fn take_over(
    state: &OpsState,
    take: &TakeOver,
    now: i64,
    taken: Option<Failpoint>,
) -> AppResult<bool> {
    let won = store::pay::take_over(&state.store, take, now).await?;
    if let Some(point) = taken.filter(|_| won) {
        failpoint(point);
    }
    Ok(won)
}

/// Two phases, second half: confirm the saved payment object.
async fn confirm(state: &OpsState, claim: &Claim) -> ChargeOutcome {
    let a = &claim.attempt;
    let saved = a.provider_ref.as_deref().unwrap_or_default();
    let outcome = state.provider.confirm(saved, &a.provider_key).await;
    failpoint(Failpoint::AfterConfirm);
    log_outcome(a, &outcome);
    outcome
}

/// Asks the provider what became of the claim's charge.
async fn lookup(state: &OpsState, claim: &Claim) -> Lookup {
    let a = &claim.attempt;
    let lookup = state
        .provider
        .lookup(&a.provider_key, a.provider_ref.as_deref())
        .await;
    if let Ok(outcome) = plan::reconcile(lookup.clone()) {
        log_outcome(a, &outcome);
    }
    lookup
}

/// Cancels the payment that waited for the customer past its deadline.
async fn cancel_action(state: &OpsState, claim: &Claim) -> Lookup {
    let a = &claim.attempt;
    tracing::info!(attempt = %a.id, "the customer's action passed its deadline; cancelling the payment");
    state
        .provider
        .cancel_action(&a.provider_key, a.provider_ref.as_deref())
        .await
}

/// The charge with the saved provider key, no transaction open.
async fn charge(state: &OpsState, claim: &Claim) -> ChargeOutcome {
    let a = &claim.attempt;
    let outcome = state
        .provider
        .charge(&a.provider_key, &charge_request(a))
        .await;
    crate::faults::after_charge();
    failpoint(Failpoint::AfterCharge);
    log_outcome(a, &outcome);
    outcome
}

/// Two phases, first half: create the payment object under the saved provider key; nothing
/// is charged yet.
async fn create(state: &OpsState, claim: &Claim) -> pay::Created {
    let a = &claim.attempt;
    let created = state
        .provider
        .create(&a.provider_key, &charge_request(a), &a.id)
        .await;
    match &created {
        pay::Created::Id(id) => {
            tracing::info!(attempt = %a.id, provider_ref = %id, "payment object created");
            failpoint(Failpoint::AfterCreate);
        }
        pay::Created::Refused(why) => {
            tracing::warn!(attempt = %a.id, %why, "provider refused to create the payment")
        }
        pay::Created::Unknown(why) => {
            tracing::warn!(attempt = %a.id, %why, "create outcome unknown; nothing will confirm it; attempt stays processing")
        }
    }
    created
}

/// Saves the created object's id on the attempt, in its own write, while the lease holds.
async fn save_ref(
    state: &OpsState,
    claim: &Claim,
    provider_ref: &str,
    now: i64,
) -> AppResult<bool> {
    let saved = store::pay::save_ref(&state.store, claim, provider_ref, now).await?;
    if saved {
        failpoint(Failpoint::AfterSaveRef);
    }
    Ok(saved)
}

/// What a payment charges: the server's amount and currency, never the client's.
fn charge_request(a: &Processing) -> ChargeRequest {
    ChargeRequest {
        amount: a.terms.amount,
        currency: a.terms.currency.clone(),
        payment_method_id: a.payment_method_id.clone(),
        order_id: a.terms.order_id.to_string(),
    }
}

/// What the provider said, in the log.
fn log_outcome(a: &Processing, outcome: &ChargeOutcome) {
    match outcome {
        ChargeOutcome::Succeeded(c) if !plan::charges_the_terms(c, &a.terms) => {
            // The provider charged something else under our key: the settle flags it for
            // review (`plan::plan_settle`), and we shout.
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
        ChargeOutcome::Expired => {
            tracing::info!(attempt = %a.id, "the payment waiting for the customer was cancelled; nothing charged")
        }
        ChargeOutcome::Withdrawn => {
            tracing::info!(attempt = %a.id, "cancelled by the customer while the payment waited for them; nothing charged")
        }
        ChargeOutcome::Uncancelled(why) => {
            tracing::error!(attempt = %a.id, %why, "the provider did not cancel an abandoned payment; flagged for review")
        }
        ChargeOutcome::Succeeded(_) => {}
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
    state: &OpsState,
    record: &Record,
    order: &OrderRow,
) -> AppResult<Option<bool>> {
    // A token nobody holds: this path never releases or takes a lease.
    let token = LeaseToken::mint(&*state.ids);
    let m = ServerPay::webhook(record, order_of(order), token, state.policy);
    Ok(match interpret(state, m, None).await? {
        End::Unconfirmed => None,
        End::Skipped => Some(false),
        _ => Some(true),
    })
}

/// Rule 3, in one write transaction. Every check is a conditional statement whose row
/// count decides; the reads only choose which error to report. `SlotTaken`: the key
/// appeared meanwhile (another request claimed or cancelled it): decide again.
///
/// `spend`: spend a new-attempt token (`src/limits.rs`) only when the claim wins, so
/// duplicates racing for one new key (which lose the `(user, key)` slot and replay) never
/// pay for it: when one is there, after the commit; otherwise the claim takes it before its
/// commit, and a refusal rolls it back ([`store::pay::Token`]).
pub(crate) async fn exec_claim(
    state: &OpsState,
    plan: &ClaimPlan,
    key: &IdempotencyKey,
    now: i64,
    spend: bool,
) -> AppResult<Claimed> {
    let t = &plan.claim.attempt.terms;
    let limits = spend.then(|| state.limits.clone());
    let ready = limits
        .as_ref()
        .is_none_or(|l| l.ready(Bucket::NewAttempts, &t.user));
    let spender = t.user.clone();
    let token = store::pay::Token {
        ready,
        before_commit: move || match limits {
            Some(limits) => limits.check(Bucket::NewAttempts, &spender), // refused: rolled back
            None => Ok(()),
        },
        after_commit: || {
            if spend {
                state.limits.spend(Bucket::NewAttempts, &t.user);
            }
        },
    };
    match store::pay::claim(&state.store, plan, key.as_str(), now, token).await? {
        ClaimOutcome::Claimed => Ok(Claimed::Won),
        ClaimOutcome::KeyTaken => Ok(Claimed::SlotTaken),
        ClaimOutcome::OrderConflict { current, held } => {
            // A paid order answers with its payment: the receipt a replay of the key that
            // paid carries (docs/protocol.md §7).
            let payment = current.as_ref().and_then(|(_, paid)| paid.clone());
            let current = current.map(|(version, paid)| (version, paid.is_some()));
            let mut problem = plan::order_refusal(current, t.order_version, held);
            problem.payment = payment;
            claim_lost(plan, key, problem.code).await;
            Err(problem.into())
        }
        ClaimOutcome::OutOfStock { sku } => {
            claim_lost(plan, key, ErrorCode::OutOfStock).await;
            Err(AppError::out_of_stock(sku))
        }
    }
}

/// Journals why the claim of `plan` was rolled back: the code it is answered with.
async fn claim_lost(plan: &ClaimPlan, key: &IdempotencyKey, code: ErrorCode) {
    let a = &plan.claim.attempt;
    let about = About {
        user: Some(&a.terms.user),
        order_id: Some(&a.terms.order_id),
        key: Some(key.as_str()),
        ..About::default()
    };
    journal::decided(&decision::refused(code), &about).await;
}

/// Ends `claim`'s lease early (nobody is talking to the provider about the attempt any
/// more). False when a webhook settled the attempt meanwhile: its stored answer stands.
async fn release_unless_settled(state: &OpsState, claim: &Claim, now: i64) -> AppResult<bool> {
    store::pay::release(&state.store, claim, now).await?;
    let record = db::find_by_id(state.store.pool(), &claim.attempt.id).await?;
    Ok(!record.is_some_and(|r| r.is_final()))
}

/// A charge under the attempt's key that is not the attempt's (another order, amount or
/// currency: [`plan::charges_the_terms`]): flagged for review once, with its audit row, and
/// the lease ended; never marked paid. False when the attempt was settled meanwhile.
async fn flag_mismatch(
    state: &OpsState,
    claim: &Claim,
    entry: &plan::AuditEntry,
    now: i64,
) -> AppResult<bool> {
    if store::pay::flag_mismatch(&state.store, claim, entry, now).await? {
        let a = &claim.attempt;
        tracing::error!(attempt = %a.id, order = %a.terms.order_id, "the provider's charge differs from the attempt; flagged for manual review");
        crate::metrics::reconciliation(crate::metrics::ReconcileResult::ManualReview);
    }
    let record = db::find_by_id(state.store.pool(), &claim.attempt.id).await?;
    Ok(record.is_some_and(|r| !r.is_final()))
}

/// Rule 4's transaction: executes the settle plan (`Charged` or `Uncharged`). False:
/// someone else settled the attempt first.
pub(crate) async fn exec_settle(
    state: &OpsState,
    a: &Processing,
    plan: &SettlePlan,
    now: i64,
) -> AppResult<bool> {
    let finish = match plan {
        SettlePlan::Charged { finish, .. } | SettlePlan::Uncharged { finish, .. } => finish,
        SettlePlan::Unknown { .. }
        | SettlePlan::ActionRequired { .. }
        | SettlePlan::Review { .. } => return Ok(false),
    };
    if finish.status == AttemptStatus::Succeeded {
        failpoint(Failpoint::BeforeSettleCommit);
    }
    Ok(store::pay::settle(&state.store, a, plan, &*state.ids, now).await?)
}
