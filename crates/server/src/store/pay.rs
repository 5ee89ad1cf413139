//! What a pay writes: the claim and the settle transactions, the take-over of an expired
//! lease, the saved provider reference, the lease's early end, the review flags and the
//! jobs' next look, each spelled once as a list of statements built from the rules' plan
//! (`payonce_rules::plan`, `payonce_rules::pay`) and run by the backend's executor
//! (`tx.rs`), each in one transaction. Every statement is conditional, so the row counts
//! decide the races.

use super::audit::{self, Entry};
use super::journal::{self as log, About};
use super::orders::get_order;
use super::tx::{Need, Statement};
use super::{attempts, payments, take_lease, Backend, Leased, Store};
use payonce_protocol::{OrderLine, OrderStatus, Payment};
use payonce_rules::decision;
use payonce_rules::ids::{IdSource, JobId};
use payonce_rules::pay::TakeOver;
use payonce_rules::plan::{Claim, ClaimPlan, Finish, SettlePlan};
use payonce_rules::Processing;

/// How a claim ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    /// Committed: the attempt is processing, the order locked, the stock reserved.
    Claimed,
    /// The caller's `(user, key)` slot was taken meanwhile (another request claimed or
    /// cancelled the key): nothing was written; decide again with the record.
    KeyTaken,
    /// The order could not be locked at the planned version (it changed, was paid, is held
    /// for review, or another attempt holds it): rolled back. Its version now and, when it
    /// is paid or refunded, its payment; `None` if it is gone.
    OrderConflict {
        /// The order's version and payment as read in the transaction.
        current: Option<(i64, Option<Payment>)>,
        /// The order is held for review (migrations/0012_orders_held_for_review.sql).
        held: bool,
    },
    /// This SKU had too little stock left: rolled back.
    OutOfStock {
        /// The first line of the plan that could not be reserved.
        sku: String,
    },
}

/// Why a claim was rolled back.
enum Abort<E> {
    /// A conditional statement lost: the counts say which.
    Lost(Vec<u64>),
    /// The caller's `before_commit` refused, or the store failed.
    Err(E),
}

impl<E: From<sqlx::Error>> From<sqlx::Error> for Abort<E> {
    fn from(e: sqlx::Error) -> Self {
        Self::Err(e.into())
    }
}

/// The new-attempt token a claim spends only when it wins (`src/limits.rs`), so that
/// duplicates racing for one new key, which lose the `(user, key)` slot, never pay for it.
pub(crate) struct Token<F, G> {
    /// A token is there now (none taken): on PostgreSQL the claim then commits in one
    /// statement and spends it after (`after_commit`), rather than holding a transaction
    /// open for the take (`BEGIN` and `COMMIT`: two round trips more).
    pub(crate) ready: bool,
    /// Takes it once every statement passed and before the commit; its error rolls the
    /// claim back and is returned (when none was there, or on SQLite, whose writer runs the
    /// check inside its transaction at no round trip's cost).
    pub(crate) before_commit: F,
    /// Spends the token `ready` found, after the commit (a concurrent take that spent it
    /// meanwhile makes the bucket owe it).
    pub(crate) after_commit: G,
}

/// The claim of a new key (rule 3), in one write transaction: the attempt under the unique
/// indexes, the order lock at the planned version, the stock in the plan's SKU order, the
/// audit rows. The processing attempt is the transactional outbox ("charge this provider
/// key": the request executes it inline after the commit; if the process dies first, the
/// outbox worker finds it by its expired lease, src/ops/jobs/mod.rs). `token` says how the
/// new-attempt token is spent ([`Token`]).
///
/// A claim that lost writes nothing, and only then are the rows read that say why (on the
/// pool, after the rollback): which statement lost was decided in the transaction, the reads
/// only choose what to report, as a read right after a separate transaction would.
pub(crate) async fn claim<E, F, G>(
    store: &Store,
    plan: &ClaimPlan,
    key: &str,
    now: i64,
    token: Token<F, G>,
) -> Result<ClaimOutcome, E>
where
    E: From<sqlx::Error> + Send + 'static,
    F: FnOnce() -> Result<(), E> + Send + 'static,
    G: FnOnce(),
{
    let list = claim_statements(plan, key, now);
    let lines = plan.stock.len();
    let counts = if token.ready && store.backend() == Backend::Postgres {
        // Every statement up to the last stock line needs its row: one lost rolls all back.
        match store.run_all(list).await? {
            Ok(_) => {
                (token.after_commit)();
                return Ok(ClaimOutcome::Claimed);
            }
            Err(counts) => counts,
        }
    } else {
        let before_commit = token.before_commit;
        let decide = move |c: &[u64]| {
            if c.iter().take(2 + lines).all(|&n| n == 1) {
                return before_commit().map_err(Abort::Err);
            }
            Err(Abort::Lost(c.to_vec()))
        };
        match store.transact(list, decide).await {
            Ok(()) => return Ok(ClaimOutcome::Claimed),
            Err(Abort::Lost(counts)) => counts,
            Err(Abort::Err(e)) => return Err(e),
        }
    };
    let (inserted, locked) = (counts[0] == 1, counts[1] == 1);
    let (user, order) = (
        &plan.claim.attempt.terms.user,
        &plan.claim.attempt.terms.order_id,
    );
    let pool = store.pool();
    // Which unique slot was taken? Our (user, key): decide again with the record.
    // Otherwise it is "one processing attempt per order": the order is busy.
    if !inserted && attempts::find(pool, user, key).await?.is_some() {
        return Ok(ClaimOutcome::KeyTaken);
    }
    if !locked {
        let current = match get_order(pool, order, user).await? {
            Some(o) => {
                let paid = o
                    .payment_id
                    .as_deref()
                    .filter(|_| o.status != OrderStatus::Unpaid);
                let payment = match paid {
                    Some(id) => payments::get_payment(pool, id).await?,
                    None => None,
                };
                Some((o.version, payment))
            }
            None => None,
        };
        let held = super::orders::held_for_review(pool, order).await?;
        return Ok(ClaimOutcome::OrderConflict { current, held });
    }
    let reserved = counts[2..2 + lines].iter().take_while(|&&n| n == 1).count();
    let sku = plan.stock[reserved].sku.clone();
    Ok(ClaimOutcome::OutOfStock { sku })
}

/// The claim's statements: `[attempt, order lock, stock…, audit…, journal]`.
fn claim_statements(plan: &ClaimPlan, key: &str, now: i64) -> Vec<Statement> {
    let a = &plan.claim.attempt;
    let t = &a.terms;
    let mut list = vec![
        // Never read-then-write: the unique indexes, `(user, key)` and "one processing
        // attempt per order", decide.
        Statement::new(
            "INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
               order_version, amount, currency, payment_method_id, provider_key, locked_until,
               lease_token, created_at, updated_at)
             SELECT $1, $2, $3, $4, 'processing', $5, $6, $7, $8, $9, $10, $11, $12, $13, $13
             WHERE true",
            vec![
                (&a.id).into(),
                (&t.user).into(),
                key.into(),
                (&t.order_id).into(),
                (&t.fingerprint).into(),
                t.order_version.into(),
                t.amount.into(),
                (&t.currency).into(),
                (&a.payment_method_id).into(),
                (&a.provider_key).into(),
                a.locked_until.into(),
                (&plan.claim.lease_token).into(),
                now.into(),
            ],
        )
        .tail("ON CONFLICT DO NOTHING")
        .need(Need::Row),
        // Only at the expected version, unpaid, not held for review, and with no other
        // active attempt: two claims for one order cannot both pass.
        Statement::new(
            "UPDATE orders SET active_attempt = $1, updated_at = $2
             WHERE id = $3 AND user_id = $4 AND version = $5 AND status = 'unpaid'
               AND active_attempt IS NULL AND review_at IS NULL",
            vec![
                (&a.id).into(),
                now.into(),
                (&t.order_id).into(),
                (&t.user).into(),
                t.order_version.into(),
            ],
        )
        .need(Need::Row),
    ];
    list.extend(plan.stock.iter().map(|line| {
        Statement::new(
            "UPDATE catalog SET stock = stock - $1 WHERE sku = $2 AND stock >= $1",
            vec![i64::from(line.quantity).into(), line.sku.as_str().into()],
        )
        .need(Need::Row)
    }));
    list.extend(audit::insert_all(&plan.audit, now));
    let about = About {
        user: Some(&t.user),
        key: Some(key),
        ..about(a)
    };
    list.push(log::decision(
        &decision::claim_won(&plan.audit),
        &about,
        now,
    ));
    list
}

/// What a decision about attempt `a` is about: its order, its id, its provider key.
fn about(a: &Processing) -> About<'_> {
    About {
        user: Some(&a.terms.user),
        order_id: Some(&a.terms.order_id),
        provider_id: Some(&a.provider_key),
        attempt_id: Some(&a.id),
        ..About::default()
    }
}

/// The settle of `a` (rule 4) with a plan that writes rows (`Charged` or `Uncharged`), in
/// one transaction. False when the attempt was no longer processing (someone settled it
/// first: their answer stands); then nothing was written. A charged attempt whose order it
/// does not lock fails the transaction (a bug: nothing is written, the attempt stays
/// processing and is settled again), as does a plan with nothing to write.
pub(crate) async fn settle(
    store: &Store,
    a: &Processing,
    plan: &SettlePlan,
    ids: &dyn IdSource,
    now: i64,
) -> sqlx::Result<bool> {
    let list = settle_statements(a, plan, ids, now).ok_or_else(|| {
        sqlx::Error::Protocol("a settle plan without rows to write reached the store".into())
    })?;
    let counts = store.commit(list).await?;
    Ok(counts[0] == 1)
}

/// The settle's statements: `[finish, …what the outcome writes, audit…, journal…]`;
/// `None` for a plan that writes nothing (the outcome is not known yet).
fn settle_statements(
    a: &Processing,
    plan: &SettlePlan,
    ids: &dyn IdSource,
    now: i64,
) -> Option<Vec<Statement>> {
    let (finish, rows, audit) = match plan {
        SettlePlan::Charged {
            finish,
            payment,
            audit,
        } => (finish, Vec::from(paid(a, payment, ids, now)), audit),
        SettlePlan::Uncharged {
            finish,
            release,
            audit,
        } => (finish, released(a, release, now), audit),
        SettlePlan::Unknown { .. }
        | SettlePlan::ActionRequired { .. }
        | SettlePlan::Review { .. } => return None,
    };
    let mut list = vec![finish_statement(a, finish, now)];
    list.extend(rows);
    list.extend(audit::insert_all(audit, now));
    list.push(log::decision(&decision::of_settle(plan), &about(a), now));
    if let SettlePlan::Charged { .. } = plan {
        list.push(log::decision(&decision::email_queued(), &about(a), now));
    }
    Some(list)
}

/// The attempt's final row: its status, stored answer and charge; a manual-review flag is
/// cleared (the outcome is known now; the audit trail keeps that it was flagged), so a
/// review queue holds only attempts that still need a person.
fn finish_statement(a: &Processing, finish: &Finish, now: i64) -> Statement {
    Statement::new(
        "UPDATE attempts SET status = $1, response_status = $2, response_body = $3,
           charge_id = $4, locked_until = NULL, lease_token = NULL, updated_at = $5,
           expires_at = $6, needs_review_at = NULL
         WHERE id = $7 AND status = 'processing'",
        vec![
            finish.status.as_str().into(),
            i64::from(finish.answer.status).into(),
            (&finish.answer.body).into(),
            finish.charge_id.as_deref().into(),
            now.into(),
            finish.expires_at.into(),
            (&a.id).into(),
        ],
    )
    .need(Need::Row)
}

/// A charge's rows: the payment, the order paid, the receipt's job.
fn paid(a: &Processing, p: &Payment, ids: &dyn IdSource, now: i64) -> [Statement; 3] {
    let (id, order) = (&a.id, &a.terms.order_id);
    [
        Statement::new(
            "INSERT INTO payments (id, order_id, attempt_id, amount, currency,
               payment_method_id, charge_id, status, created_at, provider_key)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE true",
            vec![
                p.id.as_str().into(),
                p.order_id.as_str().into(),
                id.into(),
                p.amount.into(),
                p.currency.as_str().into(),
                p.payment_method_id.as_str().into(),
                p.charge_id.as_str().into(),
                p.status.as_str().into(),
                now.into(),
                a.provider_key.as_str().into(),
            ],
        ),
        // The order lock belongs to this attempt until it settles; losing it is a bug.
        Statement::new(
            "UPDATE orders SET status = 'paid', active_attempt = NULL, payment_id = $1,
               updated_at = $2
             WHERE id = $3 AND active_attempt = $4 AND status = 'unpaid'",
            vec![p.id.as_str().into(), now.into(), order.into(), id.into()],
        )
        .need(Need::Assert("order not locked by the attempt")),
        // The confirmation email is a job committed with the success: exactly one per
        // paid order (the unique `(kind, order_id)`), delivered at least once, made
        // idempotent by `confirmation_email_sent`.
        Statement::new(
            "INSERT INTO jobs (id, kind, order_id, created_at)
             SELECT $1, 'confirmation_email', $2, $3 WHERE true",
            vec![JobId::mint(ids).as_str().into(), order.into(), now.into()],
        )
        .tail("ON CONFLICT (kind, order_id) DO NOTHING"),
    ]
}

/// No charge: the order's lock released and the reserved stock given back.
fn released(a: &Processing, release: &[OrderLine], now: i64) -> Vec<Statement> {
    let (id, order) = (&a.id, &a.terms.order_id);
    let mut list = vec![Statement::new(
        "UPDATE orders SET active_attempt = NULL, updated_at = $1
         WHERE id = $2 AND active_attempt = $3",
        vec![now.into(), order.into(), id.into()],
    )];
    // In the plan's SKU order, as the claim reserved them: no deadlock.
    list.extend(release.iter().map(|line| {
        Statement::new(
            "UPDATE catalog SET stock = stock + $1 WHERE sku = $2",
            vec![i64::from(line.quantity).into(), line.sku.as_str().into()],
        )
    }));
    list
}

/// Takes over the expired lease of a processing attempt (pay rule 5) and records why, in
/// one transaction: exactly one of several contenders wins (true); the losers write nothing.
pub(crate) async fn take_over(store: &Store, take: &TakeOver, now: i64) -> sqlx::Result<bool> {
    let (id, token) = (&take.attempt_id, &take.token);
    let list = vec![
        take_lease(Leased::Attempts, id, token, now, take.until).need(Need::Row),
        audit::insert(&take.entry, now),
        log::attempt_decision(&decision::lease_taken_over(take), id, now),
    ];
    Ok(store.commit(list).await?[0] == 1)
}

/// Saves the provider's id of the object `claim` created there (a two-phase provider's
/// payment), only while its lease still holds the processing attempt and nothing was saved
/// before: false otherwise, and then the object must not be confirmed.
pub(crate) async fn save_ref(
    store: &Store,
    claim: &Claim,
    provider_ref: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let save = Statement::new(
        "UPDATE attempts SET provider_ref = $1, updated_at = $2
         WHERE id = $3 AND status = 'processing' AND lease_token = $4 AND provider_ref IS NULL",
        vec![
            provider_ref.into(),
            now.into(),
            (&claim.attempt.id).into(),
            (&claim.lease_token).into(),
        ],
    );
    Ok(store.commit(vec![save]).await?[0] == 1)
}

/// The statement that ends `claim`'s lease at `now`, if it still holds the processing
/// attempt.
fn release_statement(claim: &Claim, now: i64) -> Statement {
    Statement::new(
        "UPDATE attempts SET locked_until = $1, updated_at = $1
         WHERE id = $2 AND status = 'processing' AND lease_token = $3",
        vec![
            now.into(),
            (&claim.attempt.id).into(),
            (&claim.lease_token).into(),
        ],
    )
}

/// Ends `claim`'s lease early after an inconclusive provider call: nobody is talking to the
/// provider about the attempt any more, so the next retry may ask it at once.
pub(crate) async fn release(store: &Store, claim: &Claim, now: i64) -> sqlx::Result<()> {
    let list = vec![
        release_statement(claim, now).need(Need::Row),
        log::decision(&decision::released(), &about(&claim.attempt), now),
    ];
    store.commit(list).await?;
    Ok(())
}

/// A charge under `claim`'s provider key that is not the attempt's (`SettlePlan::Review`):
/// in one transaction, the attempt flagged for review once (with `entry`) and the lease
/// ended. True when this call flagged it.
///
/// The flag and the release touch one row, so they are one statement when the flag is new,
/// and the release alone (the statement before it) when it was flagged before: exactly one
/// of the two matches, read from one snapshot (PostgreSQL) or one after the other (SQLite).
pub(crate) async fn flag_mismatch(
    store: &Store,
    claim: &Claim,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<bool> {
    let (id, token) = (&claim.attempt.id, &claim.lease_token);
    let list = vec![
        Statement::new(
            "UPDATE attempts SET locked_until = $1, updated_at = $1
             WHERE id = $2 AND status = 'processing' AND lease_token = $3
               AND needs_review_at IS NOT NULL",
            vec![now.into(), id.into(), token.into()],
        ),
        Statement::new(
            "UPDATE attempts SET needs_review_at = $1,
               locked_until = CASE WHEN lease_token = $3 THEN $1 ELSE locked_until END,
               updated_at = CASE WHEN lease_token = $3 THEN $1 ELSE updated_at END
             WHERE id = $2 AND status = 'processing' AND needs_review_at IS NULL",
            vec![now.into(), id.into(), token.into()],
        )
        .need(Need::Row),
        audit::insert(entry, now),
        log::decision(&decision::review_flag(entry), &about(&claim.attempt), now),
    ];
    Ok(store.commit(list).await?[1] == 1)
}

/// Flags processing attempt `id`, whose outcome the provider cannot tell, for manual review
/// (the reconciliation job), once, with `entry`. True when this call flagged it.
pub(crate) async fn flag_unknown(
    store: &Store,
    id: &str,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<bool> {
    let list = vec![
        Statement::new(
            "UPDATE attempts SET needs_review_at = $1
             WHERE id = $2 AND status = 'processing' AND needs_review_at IS NULL",
            vec![now.into(), id.into()],
        )
        .need(Need::Row),
        audit::insert(entry, now),
        log::attempt_decision(&decision::review_flag(entry), id, now),
    ];
    Ok(store.commit(list).await?[0] == 1)
}

/// Flags attempt `id`, which settled without a charge, for review (a payment of it
/// succeeded at the provider anyway, `payonce_rules::plan::Stray`), once, and holds its
/// order (`order`): the claim refuses the order's new keys while it is held
/// (migrations/0012_orders_held_for_review.sql; a person clears it once the payment is
/// resolved). True when this call flagged it.
pub(crate) async fn flag_stray(
    store: &Store,
    id: &str,
    order: &str,
    entry: &Entry,
    now: i64,
) -> sqlx::Result<bool> {
    let list = vec![
        Statement::new(
            "UPDATE attempts SET needs_review_at = $1
             WHERE id = $2 AND status <> 'processing' AND needs_review_at IS NULL",
            vec![now.into(), id.into()],
        )
        .need(Need::Row),
        Statement::new(
            "UPDATE orders SET review_at = $1 WHERE id = $2 AND review_at IS NULL",
            vec![now.into(), order.into()],
        ),
        audit::insert(entry, now),
        log::attempt_decision(&decision::review_flag(entry), id, now),
    ];
    Ok(store.commit(list).await?[0] == 1)
}

/// The charge of processing attempt `id` waits for the customer: the jobs look at it again
/// at `at` ([`payonce_rules::policy::next_customer_check`]). False when it is no longer
/// processing.
pub(crate) async fn check_later(
    store: &Store,
    a: &Processing,
    at: i64,
    now: i64,
) -> sqlx::Result<bool> {
    let later = Statement::new(
        "UPDATE attempts SET next_check_at = $1 WHERE id = $2 AND status = 'processing'",
        vec![at.into(), a.id.as_str().into()],
    )
    .need(Need::Row);
    let journal = log::decision(&decision::check_later(), &about(a), now);
    Ok(store.commit(vec![later, journal]).await?[0] == 1)
}
