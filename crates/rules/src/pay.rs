//! The server's pay flow as a sans-IO state machine ([`ServerPay`]): no clock, no store, no
//! provider, no randomness of its own. The caller starts it from what it read (a pay request
//! with its order and, if read, its record; an abandoned attempt for the jobs; an attempt a
//! webhook names), performs each [`Effect`] [`ServerPay::poll`] asks for, and feeds the result
//! back with the matching `on_*` call, until [`Effect::Done`]. Time (`now`) and the source of
//! new ids (an [`IdSource`], `crates/rules/src/ids.rs`) are arguments of `poll`. The machine
//! owns its timers as quinn's connections do: a pay request's wait on its key in flight ends
//! at a deadline it fixes from the first `now` it sees ([`Policy::wait_ends`]), and each look
//! is an [`Effect::Wait`] with the time to wake at ([`Policy::next_look`]); the caller only
//! sleeps until then. The server's request path, its jobs, reconciliation and its webhook
//! handler (`crates/server/src/ops/pay.rs`) and the model checker (`crates/model`) all drive
//! this one machine, so the model checks the server's own order of steps.
//!
//! ```text
//!  pay ──▶ ReadKey ──▶ decide (rule 2) ─┬─ new key ──▶ Claim ─┬─ won ──────────▶ Charge ──┐
//!            ▲  ▲                       │                     ├─ slot taken ─▶ ReadKey   │
//!            │  └─ Wait ◀── leased ─────┤                     └─ refused ───▶ Done       │
//!            │                          ├─ final / mismatch / cancelled / busy ─▶ Done   │
//!            │                          └─ lease expired ─▶ TakeOver ─┬─ lost ─▶ ReadKey │
//!  job ─────────────────────────────────────────────────────▶ TakeOver┘                 │
//!            │                                                  │ taken                  │
//!  webhook ──┼───────────────────────────────────────────────▶ Lookup ─ no charge ─▶ Charge
//!            │                                                  │ an outcome             │
//!            │                                                  ▼                        │
//!            │             settle plan (rule 4) ◀───────────────┴────────────────────────┘
//!            │               ├─ charged / uncharged ─▶ Settle ─┬─ done ─────▶ Done(settled)
//!            │               │   review (flag) ─────▶ Settle ──┼─ done ─────▶ Done(open)
//!            │               │                                 └─ lost ─┐
//!            │               └─ unknown / action required ─▶ Release ─┬─ ─▶ Done(open)
//!            └──────────────────── someone else settled first ◀───────┴─┘ (jobs, webhooks: Done)
//! ```
//!
//! With a two-phase provider ([`Phases::Two`], Stripe), every `Charge` above is three
//! steps: `Create` (the payment object, nothing charged) → `SaveRef` (its id on the
//! attempt, in its own write, under the lease) → `Confirm` (that saved id). A take-over
//! confirms a saved id the provider reports unconfirmed, and creates again only when no id
//! was saved: an unsaved object was never confirmed, so a lost create answer leaves at worst
//! an object nobody confirms, never a second charge.
//!
//! Nothing confirmable outlives its attempt: in two phases a declined payment object is one
//! the customer's page could still confirm with another card (it holds the client secret).
//! So before such an attempt settles uncharged, `CancelLeftover` has the provider cancel the
//! saved object and reads it back ([`plan::after_leftover_cancel`]): cancelled → settle
//! uncharged; charged meanwhile → settle that charge; anything else → the attempt stays
//! processing (lease ended) and the next retry or job cancels again. The processing attempt
//! with its saved id is what makes that retry durable.
//!
//! The decisions it composes stay where they are: rule 2 ([`crate::decide`]), the claim and
//! settle plans ([`plan::plan_claim`], [`plan::plan_settle`]), what a lookup means
//! ([`plan::reconcile`], [`plan::apply_hint`]) and the lease arithmetic ([`Policy`]).

use crate::ids::{AttemptId, IdSource, LeaseToken, OrderId, PaymentId};
use crate::keyed::NextAction;
use crate::pay_key::{replay_of, Current, PayRequest};
use crate::plan::{self, AuditEntry, Claim, ClaimPlan, Lookup, OrderTerms, Outcome, SettlePlan};
use crate::policy::Policy;
use crate::record::{Answer, Final, Processing, Record};
use payonce_protocol::{AttemptStatus, Extras, IdempotencyKey, OrderLine, Problem};

/// Why an attempt an operator resolved settled uncharged (`ServerPay::resolve`).
pub const NO_CHARGE: &str =
    "an operator's resolve: the provider has no charge for this attempt's provider key";

/// A deliberately broken variant of the sequencing, set only by the model's tests
/// (`crates/model/tests/flaws.rs`) to show the model catches it; the server never sets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// A take-over charges again under a fresh provider key without asking the provider.
    BlindRecharge,
    /// The provider is called before the claim is committed.
    ChargeBeforeClaim,
    /// Two phases: the created payment object is confirmed before its id is saved (so a
    /// crash after the confirm leaves an attempt whose charge nobody can find).
    ConfirmUnsaved,
    /// Two phases: a take-over creates and confirms a new payment object instead of
    /// looking up the saved one (as if the provider deduplicated every create).
    Recreate,
    /// The claim plan is made for the order's current version, whatever the request named
    /// (the stale-version check of [`plan::plan_claim`] skipped).
    StaleClaim,
    /// Two phases: a declined payment object is settled without being cancelled first, so
    /// the customer can still confirm it outside the server after the attempt ended.
    LeaveConfirmable,
}

/// How a provider starts a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phases {
    /// One call charges under the saved provider key, and the provider deduplicates on it
    /// and answers lookups by it (the mock provider).
    #[default]
    One,
    /// Create a payment object (nothing charged), save its id on the attempt in its own
    /// write, then confirm that saved id; lookups read the saved id (Stripe). Safe whether or
    /// not the provider deduplicates: only a saved id is ever confirmed.
    Two,
}

/// What a two-phase create call proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The object exists under this id; nothing is charged until it is confirmed.
    Id(String),
    /// The provider refused to create it (bad payment method, …): nothing exists, nothing
    /// was charged.
    Refused(String),
    /// Timeout, 5xx, unreadable: an object may exist, but its id is not known, so it is
    /// never confirmed.
    Unknown(String),
}

/// The order as the request read it (rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// Order id.
    pub id: OrderId,
    /// Its version.
    pub version: i64,
    /// The amount for that version.
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// Lines (the stock a claim reserves, a settle gives back).
    pub lines: Vec<OrderLine>,
}

/// What the client sent with a pay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The caller.
    pub user: String,
    /// Its idempotency key.
    pub key: IdempotencyKey,
    /// The version it paid for.
    pub order_version: u64,
    /// Its payment method.
    pub payment_method_id: String,
    /// The checkout's extras.
    pub extras: Extras,
}

/// The conditional take-over of an expired lease (exactly one contender wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    /// The attempt.
    pub attempt_id: AttemptId,
    /// The new lease's token.
    pub token: LeaseToken,
    /// The new lease's end.
    pub until: i64,
    /// Its audit row, written only when the lease is taken.
    pub entry: AuditEntry,
}

/// What the claim transaction came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// Committed: the attempt is ours.
    Won,
    /// Another request holds the key's slot: decide again with its record.
    SlotTaken,
    /// Refused (the order changed, is busy or paid, out of stock, …).
    Refused(Box<Problem>),
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The key's stored answer; `replayed` is false when this request claimed the key
    /// (someone else settled its own attempt while it waited on the provider).
    Replay {
        /// The stored answer.
        answer: Answer,
        /// Answer with `Idempotent-Replayed: true`.
        replayed: bool,
    },
    /// This flow settled the attempt: the final row it stored.
    Settled(Final),
    /// The outcome is unknown: the 202 answer; the attempt stays processing, lease ended.
    Unknown(Answer),
    /// The charge waits for the customer: the 402 answer; the attempt stays processing.
    ActionRequired(Answer),
    /// The key was used with other details (422), with the attempt's status.
    Mismatch(AttemptStatus),
    /// A cancel tombstone holds the key (409).
    Cancelled,
    /// Someone holds the lease and the wait is over (409 `IN_PROGRESS`).
    InProgress,
    /// The claim was refused.
    Refused(Box<Problem>),
    /// Nothing to do (jobs and webhooks): someone else holds the lease or settled first, or
    /// the provider has no charge for a webhook's key.
    Skipped,
    /// A webhook's charge could not be confirmed by the provider: deliver it again.
    Unconfirmed,
}

/// What the claim marker's cache (the server's Redis, crates/server/src/replay/marker.rs)
/// holds for the key, as the caller found it. The marker only ever saves work: the store's
/// unique key still decides every claim, so a flushed or failed cache changes no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marked {
    /// This request's marker was set where nothing was: the key is its to run.
    Ours,
    /// Another request's marker: a duplicate of the key is in flight.
    Theirs,
    /// The key's final record, as the cache holds it.
    Final(Final),
    /// Nothing there: flushed, expired or released.
    Gone,
    /// Something that does not read as an entry.
    Unreadable,
    /// The cache could not be asked (down, or a call failed): the store decides alone.
    Failed,
}

/// What a marker step came to, for the caller's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerVerdict {
    /// The marker is this request's.
    Claimed,
    /// The cached final record answers the request.
    Replay,
    /// The cached final record has other details: the store answers (422).
    Mismatch,
    /// The marker went away while waiting: the store answers.
    Miss,
    /// The wait on another request's marker is over: the store answers.
    Processing,
    /// The entry did not read: the store answers.
    Unreadable,
}

/// What a flow that went through the marker leaves in the cache once it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmark<'a> {
    /// Cache the final record this flow stored (no read back).
    Cache(&'a Final),
    /// Cache the key's final record as the store holds it (someone else stored it);
    /// `unless_cached`: leave a final entry already there (it can only be the same).
    Remember {
        /// Only when the cache lost it (a flush, a failover).
        unless_cached: bool,
    },
    /// Delete this flow's own marker, and only it (compare-and-delete): the key is not
    /// final, the next request decides from the store.
    Release,
}

/// Who a flow was at the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerRole {
    /// Set its marker: caches the answer or releases the marker at the end.
    Owner,
    /// Found someone else's entry and went on to the store: refills a lost final answer.
    Waiter,
}

/// The next thing the caller performs, then reports with the matching `on_*` call. `now`:
/// the time the plan was made at, which its rows are written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect<'a> {
    /// Read `user`'s record for `key` → [`ServerPay::on_record`].
    ReadKey {
        /// The caller.
        user: &'a str,
        /// The key.
        key: &'a IdempotencyKey,
    },
    /// Set `user`'s claim marker for `key` where nothing is, returning what was there →
    /// [`ServerPay::on_marked`].
    Mark {
        /// The caller.
        user: &'a str,
        /// The key.
        key: &'a IdempotencyKey,
    },
    /// Wait until the clock reads `until`, then read the cache's entry for `user`'s `key`
    /// again → [`ServerPay::on_marked`].
    MarkWait {
        /// The caller.
        user: &'a str,
        /// The key.
        key: &'a IdempotencyKey,
        /// When to look again ([`Policy::next_look`]).
        until: i64,
    },
    /// The flow ended (`end`); leave the cache as `unmark` says → [`ServerPay::on_unmarked`].
    Unmark {
        /// What to do.
        unmark: Unmark<'a>,
        /// The caller.
        user: &'a str,
        /// The key.
        key: &'a IdempotencyKey,
    },
    /// Wait until the clock reads `until` (or the key's record changed), then read again →
    /// [`ServerPay::on_waited`].
    Wait {
        /// When to look again ([`Policy::next_look`]): the machine's own deadline for the
        /// request's wait ([`Policy::wait_ends`]) bounds it.
        until: i64,
    },
    /// Run the claim transaction of `key` (rule 3) → [`ServerPay::on_claim`].
    Claim {
        /// The rows.
        plan: &'a ClaimPlan,
        /// The key whose slot it takes.
        key: &'a IdempotencyKey,
        /// Plan time.
        now: i64,
    },
    /// Take the expired lease over → [`ServerPay::on_taken`].
    TakeOver {
        /// The conditional write.
        take: &'a TakeOver,
        /// Plan time.
        now: i64,
    },
    /// Charge under the claim's provider key, no transaction open → [`ServerPay::on_charge`].
    Charge(&'a Claim),
    /// Ask the provider about the claim's provider key (or, in two phases, its saved
    /// payment object id; none saved: nothing was ever confirmed) →
    /// [`ServerPay::on_lookup`].
    Lookup(&'a Claim),
    /// Two phases: create the payment object under the claim's provider key, nothing
    /// charged → [`ServerPay::on_created`].
    Create(&'a Claim),
    /// Two phases: save the created object's id on the attempt, in its own write, while
    /// the claim's lease holds → [`ServerPay::on_ref_saved`].
    SaveRef {
        /// The attempt and its lease.
        claim: &'a Claim,
        /// The provider's id of the object.
        provider_ref: &'a str,
        /// Plan time.
        now: i64,
    },
    /// Two phases: confirm the object whose id is saved on the claim's attempt
    /// (`provider_ref`), with its own idempotency key → [`ServerPay::on_charge`].
    Confirm(&'a Claim),
    /// The claim's payment waits for the customer past the attempt's deadline
    /// ([`Policy::action_deadline`]): ask the provider to cancel it, then report the payment
    /// as the provider holds it afterwards → [`ServerPay::on_action_cancelled`].
    CancelAction(&'a Claim),
    /// Two phases: the claim's saved payment object did not charge (declined), and someone
    /// else could still confirm it (the page holds its client secret): before the attempt
    /// settles uncharged, ask the provider to cancel it, then report the object as the
    /// provider holds it afterwards → [`ServerPay::on_leftover`].
    CancelLeftover(&'a Claim),
    /// Run the settle transaction (rule 4) → [`ServerPay::on_settled`].
    Settle {
        /// The attempt.
        claim: &'a Claim,
        /// The rows (`Charged` or `Uncharged`).
        plan: &'a SettlePlan,
        /// Plan time.
        now: i64,
    },
    /// End the claim's lease early, then say whether the attempt is final meanwhile →
    /// [`ServerPay::on_released`].
    Release {
        /// The attempt and its lease.
        claim: &'a Claim,
        /// Plan time.
        now: i64,
    },
    /// Finished.
    Done(&'a End),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Pay(Box<Request>),
    /// The outbox worker or reconciliation, named for the audit trail.
    Job(&'static str),
    Webhook,
    /// The customer (this user) cancels an attempt whose payment waits for them.
    Cancel(String),
    /// An operator resolves an attempt flagged for review ([`ServerPay::resolve`]).
    Operator,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Open {
    Unknown(Answer),
    ActionRequired(Answer),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Set the marker; then decide with the first record, if one was read.
    Mark(Option<Option<Record>>),
    MarkWait,
    Read,
    Wait,
    Claim,
    ChargeFirst(Box<ClaimPlan>),
    Claiming(Box<ClaimPlan>, Option<Outcome>),
    TakeOver(Box<Processing>),
    TakingOver(Box<Processing>, TakeOver),
    Lookup(Claim),
    Charge(Claim),
    Create(Claim),
    SaveRef(Claim, String),
    Confirm(Claim),
    CancelAction(Claim),
    Settle(Claim, Outcome),
    Settling(Claim, SettlePlan),
    /// About to settle uncharged (this outcome): its payment object is cancelled first.
    CancelLeftover(Claim, Outcome),
    Release(Claim, Open),
    Done(End),
}

/// What a flow that went through the marker as `role` leaves in the cache once it ended with
/// `end`: its owner caches a final answer (the row it stored, or else the store's) or
/// releases its marker; a waiter refills a final answer the cache lost.
fn unmark_of(role: MarkerRole, end: &End) -> Option<Unmark<'_>> {
    match (role, end) {
        (MarkerRole::Owner, End::Settled(stored)) => Some(Unmark::Cache(stored)),
        (MarkerRole::Owner, End::Replay { .. }) => Some(Unmark::Remember {
            unless_cached: false,
        }),
        (MarkerRole::Owner, _) => Some(Unmark::Release),
        (MarkerRole::Waiter, End::Settled(_) | End::Replay { .. }) => Some(Unmark::Remember {
            unless_cached: true,
        }),
        (MarkerRole::Waiter, _) => None,
    }
}

/// One pay flow (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPay {
    origin: Origin,
    order: Order,
    policy: Policy,
    /// Set once this flow claimed the key: a stored answer it then finds is its own outcome.
    claimed_here: bool,
    phase: Phase,
    flaw: Option<Flaw>,
    phases: Phases,
    /// Set once this flow took an expired lease over (for [`Flaw::Recreate`]).
    taken_over: bool,
    /// Set once the flow went through the claim marker; `None` again once unmarked.
    marker: Option<MarkerRole>,
    /// The end is the marker cache's final entry, replayed.
    replayed_from_marker: bool,
    /// The uncharged payment object was cancelled (and read back) by this flow.
    leftover_checked: bool,
    /// When a pay request stops waiting on its key in flight ([`Policy::wait_ends`] of the
    /// first `now` the flow sees): set once, so the wait is the flow's, not the caller's.
    wait_ends: Option<i64>,
}

impl ServerPay {
    /// A pay request for `order` as read. `first`: the caller's record as read with the
    /// order (`Some(None)`: no record), decided on at once at `now`; `None`: read it first.
    pub fn pay(
        req: Request,
        order: Order,
        first: Option<Option<Record>>,
        now: i64,
        policy: Policy,
    ) -> Self {
        let mut m = Self::new(Origin::Pay(Box::new(req)), order, Phase::Read, policy);
        if let Some(record) = first {
            m.on_record(record, now);
        }
        m
    }

    /// A pay request behind the claim marker: the cache is asked first (a duplicate of the
    /// key in flight waits on it, a cached final answer replays), then the flow runs as
    /// [`ServerPay::pay`] would, from `first` when this request set the marker, and its end
    /// is left in the cache ([`Effect::Unmark`]).
    pub fn pay_marked(
        req: Request,
        order: Order,
        first: Option<Option<Record>>,
        policy: Policy,
    ) -> Self {
        Self::new(
            Origin::Pay(Box::new(req)),
            order,
            Phase::Mark(first),
            policy,
        )
    }

    /// The jobs' driver of an abandoned attempt (`worker` names it in the audit trail):
    /// take the lease, ask the provider, settle or re-drive (rule 5).
    pub fn abandoned(record: &Record, order: Order, worker: &'static str, policy: Policy) -> Self {
        let phase = match record {
            Record::Processing(p) => Phase::TakeOver(Box::new(p.clone())),
            _ => Phase::Done(End::Skipped),
        };
        Self::new(Origin::Job(worker), order, phase, policy)
    }

    /// The customer `user` cancels `record` while its payment may wait for their action
    /// (3-D Secure): take the lease, ask the provider; a payment that waits is cancelled there
    /// and the attempt ends `cancelled`, uncharged. Any other outcome the provider reports is
    /// settled as it is; "no charge" or no answer leaves the attempt open (a cancel never
    /// charges, and a charge call of the lease's last holder may still arrive).
    pub fn cancel(record: &Record, order: Order, user: &str, policy: Policy) -> Self {
        let phase = match record {
            Record::Processing(p) => Phase::TakeOver(Box::new(p.clone())),
            _ => Phase::Done(End::Skipped),
        };
        Self::new(Origin::Cancel(user.to_owned()), order, phase, policy)
    }

    /// An operator resolves `record`, a processing attempt flagged for review (the operator
    /// API's resolve action, docs/operating.md): take the lease and ask the provider again, as
    /// the jobs do (rule 5), and settle from its answer. Unlike the jobs it never starts a
    /// charge: a provider that has no charge for the provider key (or only a payment object
    /// nobody confirmed) proves nothing was charged, so the attempt settles uncharged
    /// (a two-phase object is cancelled first, as for any uncharged settle) and its order is
    /// released. A provider that still cannot tell leaves the attempt open and flagged.
    pub fn resolve(record: &Record, order: Order, policy: Policy) -> Self {
        let phase = match record {
            Record::Processing(p) => Phase::TakeOver(Box::new(p.clone())),
            _ => Phase::Done(End::Skipped),
        };
        Self::new(Origin::Operator, order, phase, policy)
    }

    /// A webhook names `record`'s charge: ask the provider and settle from its answer, with
    /// `token`, a lease token nobody holds (this path never takes or releases a lease).
    pub fn webhook(record: &Record, order: Order, token: LeaseToken, policy: Policy) -> Self {
        let phase = match record {
            Record::Processing(p) => {
                Phase::Lookup(Self::claim_of(p, &order, "provider-webhook", token))
            }
            _ => Phase::Done(End::Skipped),
        };
        Self::new(Origin::Webhook, order, phase, policy)
    }

    /// Sets a broken variant (the model's tests only).
    pub fn with_flaw(mut self, flaw: Option<Flaw>) -> Self {
        self.flaw = flaw;
        self
    }

    fn new(origin: Origin, order: Order, phase: Phase, policy: Policy) -> Self {
        Self {
            origin,
            order,
            policy,
            claimed_here: false,
            phase,
            flaw: None,
            phases: Phases::One,
            taken_over: false,
            marker: None,
            replayed_from_marker: false,
            leftover_checked: false,
            wait_ends: None,
        }
    }

    /// When this request stops waiting on its key in flight, counted from the first `now`
    /// the flow sees.
    fn wait_ends(&mut self, now: i64) -> i64 {
        *self.wait_ends.get_or_insert(self.policy.wait_ends(now))
    }

    /// Whether the request may still wait on its key in flight at `now`.
    fn may_wait(&mut self, now: i64) -> bool {
        now < self.wait_ends(now)
    }

    /// How the provider starts a payment (the server's adapter says; default one call).
    pub fn with_phases(mut self, phases: Phases) -> Self {
        self.phases = phases;
        self
    }

    /// The provider call that starts (or resumes) `claim`'s payment: one charge; or, in two
    /// phases, confirm the saved payment object, or create one when none is saved. Only a
    /// saved id is ever confirmed, so a create whose answer was lost leaves at worst an
    /// object nobody confirms: never a second charge, whether or not the provider
    /// deduplicates creates.
    fn start(&self, claim: Claim) -> Phase {
        match (self.phases, &claim.attempt.provider_ref) {
            (Phases::One, _) => Phase::Charge(claim),
            (Phases::Two, Some(_)) => Phase::Confirm(claim),
            (Phases::Two, None) => Phase::Create(claim),
        }
    }

    fn claim_of(p: &Processing, order: &Order, actor: &str, token: LeaseToken) -> Claim {
        Claim {
            attempt: p.clone(),
            actor: actor.to_owned(),
            lease_token: token,
            lines: order.lines.clone(),
        }
    }

    /// The end, once there is one.
    pub fn end(&self) -> Option<&End> {
        match &self.phase {
            Phase::Done(end) => Some(end),
            _ => None,
        }
    }

    /// The name of the next effect (for traces).
    pub fn next_step(&self) -> &'static str {
        match &self.phase {
            Phase::Mark(_) => "Mark",
            Phase::MarkWait => "MarkWait",
            Phase::Done(_) if self.marker.is_some() => "Unmark",
            Phase::Read => "ReadKey",
            Phase::Wait => "Wait",
            Phase::Claim | Phase::Claiming(..) => "Claim",
            Phase::TakeOver(_) | Phase::TakingOver(..) => "TakeOver",
            Phase::Lookup(_) => "Lookup",
            Phase::Charge(_) | Phase::ChargeFirst(_) => "Charge",
            Phase::Create(_) => "Create",
            Phase::SaveRef(..) => "SaveRef",
            Phase::Confirm(_) => "Confirm",
            Phase::CancelAction(_) => "CancelAction",
            Phase::Settle(..) | Phase::Settling(..) | Phase::Release(..) => "Settle",
            Phase::CancelLeftover(..) => "CancelLeftover",
            Phase::Done(_) => "Done",
        }
    }

    /// True while the next effect is a call to the provider (its answer is the caller's).
    pub fn calls_provider(&self) -> bool {
        matches!(
            self.phase,
            Phase::Charge(_)
                | Phase::ChargeFirst(_)
                | Phase::Lookup(_)
                | Phase::Create(_)
                | Phase::Confirm(_)
                | Phase::CancelAction(_)
                | Phase::CancelLeftover(..)
        )
    }

    fn actor(&self) -> &str {
        match &self.origin {
            Origin::Pay(r) => &r.user,
            Origin::Cancel(user) => user,
            Origin::Job(_) => "system",
            Origin::Webhook => "provider-webhook",
            Origin::Operator => "operator",
        }
    }

    /// The next effect at `now`. Plans are made here, with ids from `ids`; asking again
    /// before the matching `on_*` call returns the same effect.
    pub fn poll(&mut self, now: i64, ids: &dyn IdSource) -> Effect<'_> {
        let wait_ends = self.wait_ends(now);
        if let (Phase::Done(end), Some(role)) = (&self.phase, self.marker) {
            if unmark_of(role, end).is_none() {
                self.marker = None;
            }
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Read);
        self.phase = self.plan(phase, now, ids);
        self.ask(now, wait_ends)
    }

    /// `phase` with the plan it is due made (a claim, a take-over, a settle, with ids from
    /// `ids`); any other phase as it is.
    fn plan(&self, phase: Phase, now: i64, ids: &dyn IdSource) -> Phase {
        match phase {
            Phase::Claim => self.plan_claim(now, ids),
            Phase::TakeOver(p) => {
                let t = TakeOver {
                    attempt_id: p.id.clone(),
                    token: LeaseToken::mint(ids),
                    until: self.policy.lease_until(now),
                    entry: plan::take_over_entry(self.actor(), &p.id, self.who()),
                };
                Phase::TakingOver(p, t)
            }
            Phase::Settle(claim, Outcome::ActionRequired(_))
                if matches!(self.origin, Origin::Cancel(_))
                    || (self.origin != Origin::Webhook
                        && now >= self.policy.action_deadline(claim.attempt.created_at)) =>
            {
                // Cancelled by its customer, or abandoned past its deadline: the order must
                // not stay locked for ever.
                Phase::CancelAction(claim)
            }
            Phase::Settle(claim, outcome @ (Outcome::Declined(_) | Outcome::Rejected(_)))
                if self.leaves_confirmable(&claim) =>
            {
                // Nothing confirmable outlives its attempt: cancel the object first.
                Phase::CancelLeftover(claim, outcome)
            }
            Phase::Settle(claim, outcome) => {
                let plan =
                    plan::plan_settle(&claim, outcome, PaymentId::mint(ids), now, &self.policy);
                match plan {
                    SettlePlan::Unknown { answer } => Phase::Release(claim, Open::Unknown(answer)),
                    SettlePlan::ActionRequired { answer } => {
                        Phase::Release(claim, Open::ActionRequired(answer))
                    }
                    plan => Phase::Settling(claim, plan),
                }
            }
            other => other,
        }
    }

    /// The effect the current phase asks for at `now` (`wait_ends`: the request's deadline
    /// for waiting on its key in flight).
    fn ask(&self, now: i64, wait_ends: i64) -> Effect<'_> {
        let req = match &self.origin {
            Origin::Pay(r) => Some(&**r),
            _ => None,
        };
        match (&self.phase, req) {
            (Phase::Mark(_), Some(r)) => Effect::Mark {
                user: &r.user,
                key: &r.key,
            },
            (Phase::MarkWait, Some(r)) => Effect::MarkWait {
                user: &r.user,
                key: &r.key,
                until: self.policy.next_look(now, wait_ends),
            },
            (Phase::Done(end), Some(r)) if self.marker.is_some() => {
                match self.marker.and_then(|role| unmark_of(role, end)) {
                    Some(unmark) => Effect::Unmark {
                        unmark,
                        user: &r.user,
                        key: &r.key,
                    },
                    None => Effect::Done(end),
                }
            }
            (Phase::Read, Some(r)) => Effect::ReadKey {
                user: &r.user,
                key: &r.key,
            },
            (Phase::Claiming(plan, _), Some(r)) => Effect::Claim {
                plan,
                key: &r.key,
                now,
            },
            (Phase::Read | Phase::Claiming(..) | Phase::Mark(_) | Phase::MarkWait, None) => {
                unreachable!("only a pay reads a key")
            }
            (Phase::Wait, _) => Effect::Wait {
                until: self.policy.next_look(now, wait_ends),
            },
            (Phase::ChargeFirst(plan), _) => Effect::Charge(&plan.claim),
            (Phase::TakingOver(_, take), _) => Effect::TakeOver { take, now },
            (Phase::Lookup(claim), _) => Effect::Lookup(claim),
            (Phase::Charge(claim), _) => Effect::Charge(claim),
            (Phase::Create(claim), _) => Effect::Create(claim),
            (Phase::SaveRef(claim, provider_ref), _) => Effect::SaveRef {
                claim,
                provider_ref,
                now,
            },
            (Phase::Confirm(claim), _) => Effect::Confirm(claim),
            (Phase::CancelAction(claim), _) => Effect::CancelAction(claim),
            (Phase::Settling(claim, plan), _) => Effect::Settle { claim, plan, now },
            (Phase::CancelLeftover(claim, _), _) => Effect::CancelLeftover(claim),
            (Phase::Release(claim, _), _) => Effect::Release { claim, now },
            (Phase::Done(end), _) => Effect::Done(end),
            (Phase::Claim | Phase::TakeOver(_) | Phase::Settle(..), _) => {
                unreachable!("planned above")
            }
        }
    }

    /// True when `claim` is about to settle uncharged with a payment object saved at a
    /// two-phase provider that was not cancelled yet by this flow: someone holding its client
    /// secret could still confirm it.
    fn leaves_confirmable(&self, claim: &Claim) -> bool {
        self.phases == Phases::Two
            && claim.attempt.provider_ref.is_some()
            && !self.leftover_checked
            && self.flaw != Some(Flaw::LeaveConfirmable)
    }

    fn who(&self) -> &'static str {
        match &self.origin {
            Origin::Job(worker) => worker,
            Origin::Cancel(_) => "a cancel",
            Origin::Operator => "an operator's resolve",
            _ => "a retry",
        }
    }

    fn plan_claim(&self, now: i64, ids: &dyn IdSource) -> Phase {
        let Origin::Pay(req) = &self.origin else {
            return Phase::Done(End::Skipped);
        };
        let o = &self.order;
        let terms = OrderTerms {
            id: &o.id,
            version: o.version,
            amount: o.amount,
            currency: &o.currency,
            lines: &o.lines,
        };
        let version = match self.flaw {
            Some(Flaw::StaleClaim) => u64::try_from(o.version).unwrap_or(0),
            _ => req.order_version,
        };
        let planned = plan::plan_claim(
            &req.user,
            &req.key,
            terms,
            version,
            &req.payment_method_id,
            &req.extras,
            AttemptId::mint(ids),
            LeaseToken::mint(ids),
            now,
            &self.policy,
        );
        match planned {
            Ok(plan) if self.flaw == Some(Flaw::ChargeBeforeClaim) => {
                Phase::ChargeFirst(Box::new(plan))
            }
            Ok(plan) => Phase::Claiming(Box::new(plan), None),
            Err(p) => Phase::Done(End::Refused(p)),
        }
    }

    /// The caller's record for the key (rule 2) at `now`. A key in flight is waited on
    /// until the flow's own deadline ([`Policy::wait_ends`]).
    pub fn on_record(&mut self, record: Option<Record>, now: i64) {
        let may_wait = self.may_wait(now);
        let Some(r) = self.view() else {
            return;
        };
        self.phase = match crate::decide(record.as_ref(), &r, now, may_wait) {
            NextAction::StartProcessing => Phase::Claim,
            NextAction::Replay(answer) => Phase::Done(End::Replay {
                answer,
                replayed: !self.claimed_here,
            }),
            NextAction::Mismatch(status) => Phase::Done(End::Mismatch(status)),
            NextAction::Cancelled => Phase::Done(End::Cancelled),
            NextAction::Wait => Phase::Wait,
            NextAction::InProgress => Phase::Done(End::InProgress),
            NextAction::Reconcile => match record {
                Some(Record::Processing(p)) => Phase::TakeOver(Box::new(p)),
                _ => Phase::Read,
            },
        };
    }

    /// The rules' view of the pay request, with the order as read; `None` for the jobs.
    fn view(&self) -> Option<PayRequest<'_>> {
        let Origin::Pay(req) = &self.origin else {
            return None;
        };
        let o = &self.order;
        Some(PayRequest {
            user: &req.user,
            order_id: &o.id,
            order_version: req.order_version,
            payment_method_id: &req.payment_method_id,
            extras: &req.extras,
            current: Some(Current {
                version: o.version,
                amount: o.amount,
                currency: &o.currency,
            }),
        })
    }

    /// What the claim marker's cache held for the key at `now` (a key in flight is waited
    /// on until the flow's own deadline, [`Policy::wait_ends`]). Returns what the step came to, for the caller's metrics
    /// (`None` while it keeps waiting, or when the cache failed).
    ///
    /// A final entry answers only a request with its details (`replay_of`, the rule every
    /// copy of an answer is checked by); anything else goes on to the store. Only the
    /// marker's owner decides on the record read before it: a waiter's time has passed, it
    /// reads the key afresh.
    pub fn on_marked(&mut self, seen: Marked, now: i64) -> Option<MarkerVerdict> {
        let may_wait = self.may_wait(now);
        let (first, waited) = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Mark(first) => (first, false),
            Phase::MarkWait => (None, true),
            other => {
                self.phase = other;
                return None;
            }
        };
        let (role, verdict) = match seen {
            Marked::Ours => (Some(MarkerRole::Owner), Some(MarkerVerdict::Claimed)),
            // A waiter still refills a final answer the cache lost.
            Marked::Failed => (waited.then_some(MarkerRole::Waiter), None),
            Marked::Final(f) => {
                let record = Record::Final(f);
                if let Some(answer) = self.view().and_then(|r| replay_of(&record, &r)) {
                    self.phase = Phase::Done(End::Replay {
                        answer,
                        replayed: true,
                    });
                    self.replayed_from_marker = true;
                    return Some(MarkerVerdict::Replay);
                }
                (Some(MarkerRole::Waiter), Some(MarkerVerdict::Mismatch))
            }
            Marked::Theirs if may_wait => {
                self.phase = Phase::MarkWait;
                return None;
            }
            Marked::Theirs => (Some(MarkerRole::Waiter), Some(MarkerVerdict::Processing)),
            Marked::Gone => (Some(MarkerRole::Waiter), Some(MarkerVerdict::Miss)),
            Marked::Unreadable => (Some(MarkerRole::Waiter), Some(MarkerVerdict::Unreadable)),
        };
        self.marker = role;
        match (role, first) {
            (Some(MarkerRole::Owner) | None, Some(record)) => self.on_record(record, now),
            _ => self.phase = Phase::Read,
        }
        verdict
    }

    /// True when the flow ended replaying the marker cache's final entry.
    pub fn replayed_from_marker(&self) -> bool {
        self.replayed_from_marker
    }

    /// The caller and key whose marker this flow set and has not left yet: a flow that
    /// stopped on an error (the store failed) deletes it, so duplicates need not wait it out.
    pub fn marker_held(&self) -> Option<(&str, &IdempotencyKey)> {
        match (&self.origin, self.marker) {
            (Origin::Pay(r), Some(MarkerRole::Owner)) => Some((&r.user, &r.key)),
            _ => None,
        }
    }

    /// The cache was left as [`Effect::Unmark`] said.
    pub fn on_unmarked(&mut self) {
        if matches!(self.phase, Phase::Done(_)) {
            self.marker = None;
        }
    }

    /// The wait ended.
    pub fn on_waited(&mut self) {
        if self.phase == Phase::Wait {
            self.phase = Phase::Read;
        }
    }

    /// What the claim transaction came to.
    pub fn on_claim(&mut self, result: Claimed) {
        let Phase::Claiming(plan, charged) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match result {
            Claimed::Won => {
                self.claimed_here = true;
                match charged {
                    Some(outcome) => Phase::Settle(plan.claim, outcome),
                    None => self.start(plan.claim),
                }
            }
            Claimed::SlotTaken => Phase::Read,
            Claimed::Refused(p) => Phase::Done(End::Refused(p)),
        };
    }

    /// Whether the take-over won the lease.
    pub fn on_taken(&mut self, taken: bool) {
        let Phase::TakingOver(p, t) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        if !taken {
            self.phase = self.lost();
            return;
        }
        self.taken_over = true;
        let actor = self.actor().to_owned();
        let mut claim = Self::claim_of(&p, &self.order, &actor, t.token);
        self.phase = match self.flaw {
            Some(Flaw::BlindRecharge) => {
                claim.attempt.provider_key = format!("{}-again", claim.attempt.provider_key);
                Phase::Charge(claim)
            }
            Some(Flaw::Recreate) if self.phases == Phases::Two => {
                claim.attempt.provider_ref = None;
                Phase::Create(claim)
            }
            _ => Phase::Lookup(claim),
        };
    }

    /// What the charge call (or, in two phases, the confirm call) proved.
    pub fn on_charge(&mut self, outcome: Outcome) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Charge(claim) | Phase::Confirm(claim) => Phase::Settle(claim, outcome),
            Phase::ChargeFirst(plan) => Phase::Claiming(plan, Some(outcome)),
            other => other,
        };
    }

    /// What the provider says about the claim's provider key.
    pub fn on_lookup(&mut self, lookup: Lookup) {
        let Phase::Lookup(claim) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match self.origin {
            Origin::Webhook => match plan::apply_hint(lookup) {
                Some(Some(outcome)) => Phase::Settle(claim, outcome),
                Some(None) => Phase::Done(End::Skipped),
                None => Phase::Done(End::Unconfirmed),
            },
            // A cancel never starts a charge: without one to cancel it leaves the attempt open.
            Origin::Cancel(_) => match plan::reconcile(lookup) {
                Ok(outcome) => Phase::Settle(claim, outcome),
                Err(plan::Redrive) => Phase::Settle(
                    claim,
                    Outcome::Unknown("a cancel found no charge to cancel".into()),
                ),
            },
            // An operator's resolve never starts a charge either: no charge proves none.
            Origin::Operator => match plan::reconcile(lookup) {
                Ok(outcome) => Phase::Settle(claim, outcome),
                Err(plan::Redrive) => Phase::Settle(claim, Outcome::Rejected(NO_CHARGE.into())),
            },
            _ => match plan::reconcile(lookup) {
                Ok(outcome) => Phase::Settle(claim, outcome),
                Err(plan::Redrive) => self.start(claim),
            },
        };
    }

    /// What the create call (two phases) proved. An id is saved before anything else; a
    /// refusal created nothing (the attempt fails, uncharged); an unknown answer may have
    /// created an object whose id we do not know, which is never confirmed: the attempt
    /// stays processing and a take-over creates again.
    pub fn on_created(&mut self, created: Created) {
        let Phase::Create(mut claim) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match created {
            Created::Id(id)
                if self.flaw == Some(Flaw::ConfirmUnsaved)
                    || (self.flaw == Some(Flaw::Recreate) && self.taken_over) =>
            {
                claim.attempt.provider_ref = Some(id);
                Phase::Confirm(claim)
            }
            Created::Id(id) => Phase::SaveRef(claim, id),
            Created::Refused(why) => Phase::Settle(claim, Outcome::Rejected(why)),
            Created::Unknown(why) => Phase::Settle(claim, Outcome::Unknown(why)),
        };
    }

    /// The payment as the provider holds it after the cancel call of
    /// [`Effect::CancelAction`] (see [`plan::after_cancel`]).
    pub fn on_action_cancelled(&mut self, lookup: Lookup) {
        let Phase::CancelAction(claim) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        let outcome = match (plan::after_cancel(lookup), &self.origin) {
            (Outcome::Expired, Origin::Cancel(_)) => Outcome::Withdrawn,
            (outcome, _) => outcome,
        };
        self.phase = Phase::Settle(claim, outcome);
    }

    /// Whether the payment object's id was saved on the attempt (false: the lease was lost
    /// or an id was saved before; then this flow must not confirm anything).
    pub fn on_ref_saved(&mut self, saved: bool) {
        let Phase::SaveRef(mut claim, id) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = if saved {
            claim.attempt.provider_ref = Some(id);
            Phase::Confirm(claim)
        } else {
            self.lost()
        };
    }

    /// Whether the settle transaction finished the attempt (false: someone else did first).
    pub fn on_settled(&mut self, settled: bool) {
        let Phase::Settling(claim, plan) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match plan {
            SettlePlan::Charged { finish, .. } | SettlePlan::Uncharged { finish, .. }
                if settled =>
            {
                let a = claim.attempt;
                Phase::Done(End::Settled(Final {
                    id: a.id,
                    terms: a.terms,
                    status: finish.status,
                    answer: finish.answer,
                    expires_at: finish.expires_at,
                }))
            }
            // Flagged for review, lease ended: open, as for an unknown outcome.
            SettlePlan::Review { answer, .. } if settled => Phase::Done(End::Unknown(answer)),
            _ => self.lost(),
        };
    }

    /// The uncharged payment object as the provider holds it after the cancel call of
    /// [`Effect::CancelLeftover`] (see [`plan::after_leftover_cancel`]); the outcome it
    /// proves is settled as it is, without cancelling again.
    pub fn on_leftover(&mut self, lookup: Lookup) {
        let Phase::CancelLeftover(claim, uncharged) =
            std::mem::replace(&mut self.phase, Phase::Read)
        else {
            return;
        };
        self.leftover_checked = true;
        self.phase = Phase::Settle(claim, plan::after_leftover_cancel(lookup, uncharged));
    }

    /// The lease was ended; `final_meanwhile`: someone else (a webhook) settled the attempt,
    /// whose stored answer stands.
    pub fn on_released(&mut self, final_meanwhile: bool) {
        let Phase::Release(_, open) = std::mem::replace(&mut self.phase, Phase::Read) else {
            return;
        };
        self.phase = match open {
            _ if final_meanwhile => self.lost(),
            Open::Unknown(answer) => Phase::Done(End::Unknown(answer)),
            Open::ActionRequired(answer) => Phase::Done(End::ActionRequired(answer)),
        };
    }

    /// Someone else won: a request decides again, a job or webhook is done.
    fn lost(&self) -> Phase {
        match self.origin {
            Origin::Pay(_) => Phase::Read,
            _ => Phase::Done(End::Skipped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Sequence;
    use payonce_protocol::provider::{Charge, ChargeStatus};
    use payonce_protocol::ErrorCode;

    const NOW: i64 = 1_000_000;

    /// The `n`-th id a test's [`Sequence`] mints (every id of a run counts once).
    fn nth<T>(mint: fn(&dyn IdSource) -> T, n: u64) -> T {
        mint(&Sequence::starting_at(n))
    }

    fn policy() -> Policy {
        Policy {
            lease_ms: 1_000,
            key_retention_ms: 5_000,
            reconcile_after_ms: 1_000,
            audit_retention_ms: 10_000,
            action_deadline_ms: 60_000,
            in_progress_wait_ms: 500,
            wait_poll_ms: 25,
        }
    }

    fn order(version: i64) -> Order {
        Order {
            id: OrderId::from_stored("ord_1"),
            version,
            amount: 1_000 + 500 * version,
            currency: "EUR".into(),
            lines: vec![],
        }
    }

    fn request(version: u64) -> Request {
        Request {
            user: "u1".into(),
            key: IdempotencyKey::parse("0123456789abcdef0123456789abcdef").expect("valid"),
            order_version: version,
            payment_method_id: "pm_card_approve".into(),
            extras: Extras::default(),
        }
    }

    fn charge(claim: &Claim, status: ChargeStatus) -> Charge {
        let a = &claim.attempt;
        Charge {
            id: "ch_1".into(),
            provider_key: a.provider_key.clone(),
            amount: a.terms.amount,
            currency: a.terms.currency.clone(),
            payment_method_id: a.payment_method_id.clone(),
            order_id: a.terms.order_id.to_string(),
            status,
            created_at: NOW,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
        }
    }

    /// A new key: claimed with the caller's ids and `now`, charged, settled, answered.
    #[test]
    fn a_new_key_is_claimed_charged_and_settled() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay(request(2), order(2), Some(None), NOW, policy());
        let claim = match m.poll(NOW, &ids) {
            Effect::Claim { plan, now, .. } => {
                assert_eq!(now, NOW);
                assert_eq!(plan.claim.attempt.id, nth(AttemptId::mint, 1));
                assert_eq!(plan.claim.lease_token, nth(LeaseToken::mint, 2));
                assert_eq!(plan.claim.attempt.locked_until, Some(NOW + 1_000));
                assert_eq!(plan.claim.attempt.terms.amount, 2_000);
                plan.claim.clone()
            }
            e => panic!("{e:?}"),
        };
        m.on_claim(Claimed::Won);
        assert_eq!(m.poll(NOW, &ids), Effect::Charge(&claim));
        m.on_charge(Outcome::Succeeded(charge(&claim, ChargeStatus::Succeeded)));
        let later = NOW + 10;
        match m.poll(later, &ids) {
            Effect::Settle {
                plan: SettlePlan::Charged { payment, .. },
                now,
                ..
            } => {
                assert_eq!(
                    (payment.id.as_str(), now),
                    (nth(PaymentId::mint, 3).as_str(), later)
                );
            }
            e => panic!("{e:?}"),
        }
        m.on_settled(true);
        match m.poll(later, &ids) {
            Effect::Done(End::Settled(f)) => {
                assert_eq!(f.status, AttemptStatus::Succeeded);
                assert_eq!(f.expires_at, later + 5_000);
            }
            e => panic!("{e:?}"),
        }
    }

    /// Runs a marked pay for a new key that this request marked, to its settle; the final
    /// row it stored.
    fn settled_behind_the_marker(ids: &Sequence) -> (ServerPay, Final) {
        let mut m = ServerPay::pay_marked(request(1), order(1), Some(None), policy());
        assert!(matches!(m.poll(NOW, ids), Effect::Mark { .. }));
        assert_eq!(m.on_marked(Marked::Ours, NOW), Some(MarkerVerdict::Claimed));
        // The owner decides on the record read before the marker: no second read.
        let Effect::Claim { plan, .. } = m.poll(NOW, ids) else {
            panic!("claim")
        };
        let claim = plan.claim.clone();
        m.on_claim(Claimed::Won);
        m.on_charge(Outcome::Succeeded(charge(&claim, ChargeStatus::Succeeded)));
        assert!(matches!(m.poll(NOW, ids), Effect::Settle { .. }));
        m.on_settled(true);
        let stored = match m.poll(NOW, ids) {
            Effect::Unmark {
                unmark: Unmark::Cache(f),
                ..
            } => f.clone(),
            e => panic!("{e:?}"),
        };
        (m, stored)
    }

    /// The marker's owner runs the rules from the record it read, caches the row it stored,
    /// then ends.
    #[test]
    fn the_marker_owner_caches_the_row_it_stored() {
        let ids = Sequence::starting_at(1);
        let (mut m, stored) = settled_behind_the_marker(&ids);
        assert_eq!(stored.status, AttemptStatus::Succeeded);
        assert!(m.marker_held().is_some());
        m.on_unmarked();
        assert!(m.marker_held().is_none());
        assert!(matches!(m.poll(NOW, &ids), Effect::Done(End::Settled(_))));
        assert!(!m.replayed_from_marker());
    }

    /// A cached final entry answers a request with its details, and only such a request;
    /// other details go on to the store, which answers the 422, and nothing is cached.
    #[test]
    fn a_cached_final_replays_only_the_same_details() {
        let ids = Sequence::starting_at(1);
        let (_, stored) = settled_behind_the_marker(&ids);
        let mut same = ServerPay::pay_marked(request(1), order(1), None, policy());
        assert!(matches!(same.poll(NOW, &ids), Effect::Mark { .. }));
        let seen = Marked::Final(stored.clone());
        assert_eq!(same.on_marked(seen, NOW), Some(MarkerVerdict::Replay));
        assert!(matches!(
            same.poll(NOW, &ids),
            Effect::Done(End::Replay { replayed: true, .. })
        ));
        assert!(same.replayed_from_marker());

        let mut other = request(1);
        other.payment_method_id = "pm_card_other".into();
        let mut m = ServerPay::pay_marked(other, order(1), Some(None), policy());
        m.poll(NOW, &ids);
        let seen = Marked::Final(stored.clone());
        assert_eq!(m.on_marked(seen, NOW), Some(MarkerVerdict::Mismatch));
        // A waiter reads the key afresh: the record read before the marker is old.
        assert!(matches!(m.poll(NOW, &ids), Effect::ReadKey { .. }));
        m.on_record(Some(Record::Final(stored)), NOW);
        assert!(matches!(m.poll(NOW, &ids), Effect::Done(End::Mismatch(_))));
        assert!(!m.replayed_from_marker());
    }

    /// Another request's marker is waited on while the wait lasts; when it goes away the
    /// store answers, and a final answer the cache lost is refilled.
    #[test]
    fn a_waiter_reads_the_store_once_the_marker_is_gone_and_refills_the_cache() {
        let ids = Sequence::starting_at(1);
        let (_, stored) = settled_behind_the_marker(&ids);
        let mut m = ServerPay::pay_marked(request(1), order(1), Some(None), policy());
        m.poll(NOW, &ids);
        assert_eq!(m.on_marked(Marked::Theirs, NOW), None);
        assert!(matches!(m.poll(NOW, &ids), Effect::MarkWait { .. }));
        assert_eq!(m.on_marked(Marked::Theirs, NOW), None);
        assert!(matches!(m.poll(NOW, &ids), Effect::MarkWait { .. }));
        assert_eq!(m.on_marked(Marked::Gone, NOW), Some(MarkerVerdict::Miss));
        assert!(matches!(m.poll(NOW, &ids), Effect::ReadKey { .. }));
        m.on_record(Some(Record::Final(stored)), NOW);
        assert!(matches!(
            m.poll(NOW, &ids),
            Effect::Unmark {
                unmark: Unmark::Remember {
                    unless_cached: true
                },
                ..
            }
        ));
        // A waiter holds no marker of its own: nothing to release on an error.
        assert!(m.marker_held().is_none());
        m.on_unmarked();
        assert!(matches!(
            m.poll(NOW, &ids),
            Effect::Done(End::Replay { .. })
        ));
    }

    /// The wait on another request's marker ends with the request's own wait: the store
    /// decides (here: a new key for it, claimed).
    #[test]
    fn a_marker_held_past_the_wait_leaves_the_decision_to_the_store() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay_marked(request(1), order(1), None, policy());
        m.poll(NOW, &ids);
        let late = NOW + policy().in_progress_wait_ms;
        assert_eq!(
            m.on_marked(Marked::Theirs, late),
            Some(MarkerVerdict::Processing)
        );
        assert!(matches!(m.poll(late, &ids), Effect::ReadKey { .. }));
        m.on_record(None, late);
        assert!(matches!(m.poll(NOW, &ids), Effect::Claim { .. }));
    }

    /// An owner whose outcome is not final releases its marker; a cache that failed leaves
    /// the flow as it would be without one (nothing to cache, nothing to release).
    #[test]
    fn an_open_outcome_releases_the_marker_and_a_failed_cache_is_no_marker() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay_marked(request(1), order(1), Some(None), policy());
        m.poll(NOW, &ids);
        m.on_marked(Marked::Ours, NOW);
        m.poll(NOW, &ids);
        m.on_claim(Claimed::Won);
        m.on_charge(Outcome::Unknown("timeout".into()));
        assert!(matches!(m.poll(NOW, &ids), Effect::Release { .. }));
        m.on_released(false);
        assert!(matches!(
            m.poll(NOW, &ids),
            Effect::Unmark {
                unmark: Unmark::Release,
                ..
            }
        ));
        m.on_unmarked();
        assert!(matches!(m.poll(NOW, &ids), Effect::Done(End::Unknown(_))));

        let mut m = ServerPay::pay_marked(request(1), order(1), Some(None), policy());
        m.poll(NOW, &ids);
        assert_eq!(m.on_marked(Marked::Failed, NOW), None);
        assert!(matches!(m.poll(NOW, &ids), Effect::Claim { .. }));
        m.on_claim(Claimed::Refused(Box::new(Problem::new(
            ErrorCode::OrderChanged,
        ))));
        assert!(matches!(m.poll(NOW, &ids), Effect::Done(End::Refused(_))));
    }

    /// A request for a version the order no longer has is refused before any write.
    #[test]
    fn a_stale_version_is_refused_without_a_claim() {
        let mut m = ServerPay::pay(request(1), order(2), Some(None), NOW, policy());
        match m.poll(NOW, &Sequence::starting_at(1)) {
            Effect::Done(End::Refused(p)) => assert_eq!(p.code, ErrorCode::OrderChanged),
            e => panic!("{e:?}"),
        }
    }

    /// Losing the key's slot decides again; a webhook's settle found after our own claim
    /// is this request's outcome, not a replay.
    #[test]
    fn a_settle_lost_to_a_webhook_answers_the_stored_answer_as_fresh() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay(request(1), order(1), None, NOW, policy());
        assert!(matches!(m.poll(NOW, &ids), Effect::ReadKey { .. }));
        m.on_record(None, NOW);
        let Effect::Claim { plan, .. } = m.poll(NOW, &ids) else {
            panic!("claim")
        };
        let claim = plan.claim.clone();
        m.on_claim(Claimed::Won);
        m.on_charge(Outcome::Unknown("timeout".into()));
        assert!(matches!(m.poll(NOW, &ids), Effect::Release { .. }));
        m.on_released(true);
        assert!(matches!(m.poll(NOW, &ids), Effect::ReadKey { .. }));
        let stored = match plan::plan_settle(
            &claim,
            Outcome::Succeeded(charge(&claim, ChargeStatus::Succeeded)),
            PaymentId::from_stored("pay_w"),
            NOW,
            &policy(),
        ) {
            SettlePlan::Charged { finish, .. } => finish,
            p => panic!("{p:?}"),
        };
        let record = Record::Final(Final {
            id: claim.attempt.id.clone(),
            terms: claim.attempt.terms.clone(),
            status: stored.status,
            answer: stored.answer.clone(),
            expires_at: stored.expires_at,
        });
        m.on_record(Some(record), NOW);
        assert_eq!(
            m.end(),
            Some(&End::Replay {
                answer: stored.answer,
                replayed: false
            })
        );
    }

    fn processing(locked_until: i64) -> Processing {
        let ids = Sequence::starting_at(10);
        let mut m = ServerPay::pay(request(1), order(1), Some(None), NOW, policy());
        let Effect::Claim { plan, .. } = m.poll(NOW, &ids) else {
            panic!("claim")
        };
        Processing {
            locked_until: Some(locked_until),
            ..plan.claim.attempt.clone()
        }
    }

    /// An expired lease is taken over and the provider asked first; only "no such charge"
    /// charges, under the same provider key.
    #[test]
    fn a_take_over_asks_the_provider_before_charging_again() {
        let p = processing(NOW);
        let record = Record::Processing(p.clone());
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay(request(1), order(1), Some(Some(record)), NOW, policy());
        match m.poll(NOW, &ids) {
            Effect::TakeOver { take, .. } => {
                assert_eq!(
                    (take.attempt_id.as_str(), take.until),
                    (p.id.as_str(), NOW + 1_000)
                );
            }
            e => panic!("{e:?}"),
        }
        m.on_taken(true);
        let Effect::Lookup(claim) = m.poll(NOW, &ids) else {
            panic!("lookup first")
        };
        assert_eq!(claim.attempt.provider_key, p.provider_key);
        m.on_lookup(Lookup::NotFound);
        let Effect::Charge(claim) = m.poll(NOW, &ids) else {
            panic!("re-drive")
        };
        assert_eq!(claim.attempt.provider_key, p.provider_key);
    }

    /// An operator's resolve asks the provider and never charges: no charge settles the
    /// attempt uncharged (failed, the order released); a provider that cannot tell leaves it
    /// open; a charge settles it paid.
    #[test]
    fn an_operators_resolve_never_charges() {
        let record = Record::Processing(processing(NOW));
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::resolve(&record, order(1), policy());
        match m.poll(NOW, &ids) {
            Effect::TakeOver { take, .. } => {
                assert!(
                    take.entry.reason.contains("an operator's resolve"),
                    "{take:?}"
                )
            }
            e => panic!("{e:?}"),
        }
        m.on_taken(true);
        assert!(matches!(m.poll(NOW, &ids), Effect::Lookup(_)));
        m.on_lookup(Lookup::NotFound);
        match m.poll(NOW, &ids) {
            Effect::Settle {
                plan: SettlePlan::Uncharged { finish, .. },
                ..
            } => assert_eq!(finish.status, AttemptStatus::Failed),
            e => panic!("no charge is settled uncharged, never charged: {e:?}"),
        }
        let mut m = ServerPay::resolve(&record, order(1), policy());
        m.poll(NOW, &ids);
        m.on_taken(true);
        m.poll(NOW, &ids);
        m.on_lookup(Lookup::Unknown("down".into()));
        assert!(matches!(m.poll(NOW, &ids), Effect::Release { .. }));
    }

    /// A job that loses the take-over, and a webhook the provider cannot confirm, end
    /// without writing anything.
    #[test]
    fn jobs_and_webhooks_end_when_someone_else_won() {
        let record = Record::Processing(processing(NOW));
        let ids = Sequence::starting_at(1);
        let mut job = ServerPay::abandoned(&record, order(1), "the outbox worker", policy());
        match job.poll(NOW, &ids) {
            Effect::TakeOver { take, .. } => {
                assert!(take.entry.reason.contains("the outbox worker"))
            }
            e => panic!("{e:?}"),
        }
        job.on_taken(false);
        assert_eq!(job.end(), Some(&End::Skipped));
        let mut hook = ServerPay::webhook(
            &record,
            order(1),
            LeaseToken::from_stored("nobody"),
            policy(),
        );
        assert!(matches!(hook.poll(NOW, &ids), Effect::Lookup(_)));
        hook.on_lookup(Lookup::Unknown("down".into()));
        assert_eq!(hook.end(), Some(&End::Unconfirmed));
        let mut hook = ServerPay::webhook(
            &record,
            order(1),
            LeaseToken::from_stored("nobody"),
            policy(),
        );
        hook.on_lookup(Lookup::NotFound);
        assert_eq!(hook.end(), Some(&End::Skipped));
    }

    /// Two phases: create, save the id, confirm that saved id; a take-over of an attempt
    /// with a saved, unconfirmed id confirms it; one without a saved id creates again. The
    /// flaw confirms before saving.
    #[test]
    fn two_phases_confirm_only_a_saved_id() {
        let ids = Sequence::starting_at(1);
        let mut m = ServerPay::pay(request(1), order(1), Some(None), NOW, policy())
            .with_phases(Phases::Two);
        let Effect::Claim { .. } = m.poll(NOW, &ids) else {
            panic!("claim")
        };
        m.on_claim(Claimed::Won);
        assert!(matches!(m.poll(NOW, &ids), Effect::Create(_)));
        m.on_created(Created::Id("pi_1".into()));
        match m.poll(NOW, &ids) {
            Effect::SaveRef { provider_ref, .. } => assert_eq!(provider_ref, "pi_1"),
            e => panic!("{e:?}"),
        }
        m.on_ref_saved(true);
        match m.poll(NOW, &ids) {
            Effect::Confirm(c) => assert_eq!(c.attempt.provider_ref.as_deref(), Some("pi_1")),
            e => panic!("{e:?}"),
        }
        // A lost create answer: nothing to confirm, the attempt stays processing.
        let mut lost = ServerPay::pay(request(1), order(1), Some(None), NOW, policy())
            .with_phases(Phases::Two);
        lost.poll(NOW, &ids);
        lost.on_claim(Claimed::Won);
        lost.poll(NOW, &ids);
        lost.on_created(Created::Unknown("timeout".into()));
        assert!(matches!(lost.poll(NOW, &ids), Effect::Release { .. }));
        // Take-overs: a saved, unconfirmed id is confirmed; no saved id creates again.
        for (saved, lookup) in [
            (Some("pi_1"), Lookup::Unconfirmed),
            (None, Lookup::NotFound),
        ] {
            let p = Processing {
                provider_ref: saved.map(str::to_owned),
                ..processing(NOW)
            };
            let mut job = ServerPay::abandoned(&Record::Processing(p), order(1), "w", policy())
                .with_phases(Phases::Two);
            job.poll(NOW, &ids);
            job.on_taken(true);
            assert!(matches!(job.poll(NOW, &ids), Effect::Lookup(_)));
            job.on_lookup(lookup);
            match (saved, job.poll(NOW, &ids)) {
                (Some(_), Effect::Confirm(c)) => {
                    assert_eq!(c.attempt.provider_ref.as_deref(), saved)
                }
                (None, Effect::Create(_)) => {}
                (_, e) => panic!("{saved:?}: {e:?}"),
            }
        }
        // The flaw: confirmed with nothing saved.
        let mut bad = ServerPay::pay(request(1), order(1), Some(None), NOW, policy())
            .with_phases(Phases::Two)
            .with_flaw(Some(Flaw::ConfirmUnsaved));
        bad.poll(NOW, &ids);
        bad.on_claim(Claimed::Won);
        bad.poll(NOW, &ids);
        bad.on_created(Created::Id("pi_2".into()));
        assert!(matches!(bad.poll(NOW, &ids), Effect::Confirm(_)));
    }

    /// Two phases: a declined payment object is cancelled before the attempt settles:
    /// cancelled → settled declined; charged meanwhile (another card) → settled succeeded;
    /// not cancelled or no answer → stays processing, lease ended. One phase has nothing to
    /// cancel; the flaw settles without cancelling.
    #[test]
    fn a_declined_two_phase_payment_is_cancelled_before_it_settles() {
        let run = |after: Option<Lookup>, phases: Phases, flaw: Option<Flaw>| {
            let ids = Sequence::starting_at(1);
            let p = Processing {
                provider_ref: Some("pi_1".into()),
                ..processing(NOW)
            };
            let mut job = ServerPay::abandoned(&Record::Processing(p), order(1), "w", policy())
                .with_phases(phases)
                .with_flaw(flaw);
            job.poll(NOW, &ids);
            job.on_taken(true);
            let Effect::Lookup(claim) = job.poll(NOW, &ids) else {
                panic!("lookup")
            };
            let declined = charge(claim, ChargeStatus::Declined);
            job.on_lookup(Lookup::Found(declined));
            if let Some(after) = after {
                match job.poll(NOW, &ids) {
                    Effect::CancelLeftover(c) => {
                        assert_eq!(c.attempt.provider_ref.as_deref(), Some("pi_1"))
                    }
                    e => panic!("{e:?}"),
                }
                job.on_leftover(after);
            }
            match job.poll(NOW, &ids) {
                Effect::Settle { plan, .. } => Some(plan.clone()),
                Effect::Release { .. } => None,
                e => panic!("{e:?}"),
            }
        };
        let held = |status| {
            let mut c = charge(&processing_claim(), status);
            c.id = "pi_1".into();
            Lookup::Found(c)
        };
        let status = |plan: Option<SettlePlan>| match plan {
            Some(SettlePlan::Uncharged { finish, .. } | SettlePlan::Charged { finish, .. }) => {
                Some(finish.status)
            }
            p => panic!("{p:?}"),
        };
        let cancelled = run(Some(held(ChargeStatus::Canceled)), Phases::Two, None);
        assert_eq!(status(cancelled), Some(AttemptStatus::Declined));
        let charged = run(Some(held(ChargeStatus::Succeeded)), Phases::Two, None);
        assert_eq!(status(charged), Some(AttemptStatus::Succeeded));
        for open in [held(ChargeStatus::Declined), Lookup::Unknown("down".into())] {
            assert_eq!(run(Some(open), Phases::Two, None), None, "stays processing");
        }
        let one = run(None, Phases::One, None);
        assert_eq!(status(one), Some(AttemptStatus::Declined));
        let flawed = run(None, Phases::Two, Some(Flaw::LeaveConfirmable));
        assert_eq!(status(flawed), Some(AttemptStatus::Declined));
    }

    fn processing_claim() -> Claim {
        let ids = Sequence::starting_at(10);
        let mut m = ServerPay::pay(request(1), order(1), Some(None), NOW, policy());
        let Effect::Claim { plan, .. } = m.poll(NOW, &ids) else {
            panic!("claim")
        };
        plan.claim.clone()
    }

    /// A leased key is waited on until the flow's own deadline, counted from the first
    /// `now` it saw, one poll at a time; then answered in progress.
    #[test]
    fn a_leased_key_is_waited_on_until_the_machines_deadline_then_in_progress() {
        let p = policy();
        let record = Record::Processing(processing(NOW + 10 * p.in_progress_wait_ms));
        let first = Some(Some(record.clone()));
        let mut m = ServerPay::pay(request(1), order(1), first, NOW, p);
        let ends = NOW + p.in_progress_wait_ms;
        let mut now = NOW;
        let mut waits = 0;
        while let Effect::Wait { until } = m.poll(now, &Sequence::starting_at(1)) {
            assert_eq!(until, (now + p.wait_poll_ms).min(ends));
            waits += 1;
            now = until;
            m.on_waited();
            assert!(matches!(
                m.poll(now, &Sequence::starting_at(1)),
                Effect::ReadKey { .. }
            ));
            m.on_record(Some(record.clone()), now);
        }
        assert_eq!(now, ends, "it waited to its deadline, no longer");
        assert_eq!(waits, p.in_progress_wait_ms / p.wait_poll_ms);
        assert_eq!(m.end(), Some(&End::InProgress));
    }

    /// A job finds a payment waiting for the customer: before the attempt's deadline it is
    /// left open (lease released); at the deadline the provider is asked to cancel it, and
    /// what the provider then holds decides: cancelled → `expired`, uncharged, stock back;
    /// ended by the customer first → that outcome; still waiting → flagged for review.
    #[test]
    fn an_abandoned_challenge_is_cancelled_at_its_deadline() {
        let p = processing(NOW);
        let deadline = policy().action_deadline(p.created_at);
        let waiting = |claim: &Claim| Charge {
            next_action_url: Some("https://psp/action".into()),
            ..charge(claim, ChargeStatus::RequiresAction)
        };
        let with_tee = || Order {
            lines: tee(),
            ..order(1)
        };
        let job_at = |now: i64| {
            let ids = Sequence::starting_at(1);
            let mut job =
                ServerPay::abandoned(&Record::Processing(p.clone()), with_tee(), "w", policy());
            job.poll(now, &ids);
            job.on_taken(true);
            let Effect::Lookup(claim) = job.poll(now, &ids) else {
                panic!("lookup first")
            };
            let found = waiting(claim);
            job.on_lookup(Lookup::Found(found));
            job
        };
        let mut early = job_at(deadline - 1);
        assert!(matches!(
            early.poll(deadline - 1, &Sequence::starting_at(1)),
            Effect::Release { .. }
        ));
        early.on_released(false);
        assert!(matches!(early.end(), Some(End::ActionRequired(_))));

        let cases = [
            (ChargeStatus::Canceled, Some(AttemptStatus::Expired)),
            (ChargeStatus::Succeeded, Some(AttemptStatus::Succeeded)),
            (ChargeStatus::RequiresAction, None),
        ];
        for (after, settled) in cases {
            let mut job = job_at(deadline);
            let Effect::CancelAction(claim) = job.poll(deadline, &Sequence::starting_at(1)) else {
                panic!("cancel at the deadline")
            };
            let held = charge(claim, after);
            job.on_action_cancelled(Lookup::Found(held));
            match (job.poll(deadline, &Sequence::starting_at(1)), settled) {
                (
                    Effect::Settle {
                        plan:
                            SettlePlan::Uncharged {
                                finish, release, ..
                            },
                        ..
                    },
                    Some(want),
                ) => {
                    assert_eq!(finish.status, want);
                    assert_eq!(finish.answer.status, 402);
                    assert!(
                        finish.answer.body.contains("ACTION_EXPIRED"),
                        "{}",
                        finish.answer.body
                    );
                    assert_eq!(release, &tee(), "the stock comes back");
                }
                (
                    Effect::Settle {
                        plan: SettlePlan::Charged { finish, .. },
                        ..
                    },
                    Some(want),
                ) => {
                    assert_eq!(finish.status, want)
                }
                (
                    Effect::Settle {
                        plan: SettlePlan::Review { audit, .. },
                        ..
                    },
                    None,
                ) => {
                    assert!(audit.reason.contains("did not"), "{}", audit.reason)
                }
                (e, _) => panic!("{after:?}: {e:?}"),
            }
        }
        // A webhook never cancels: it only settles what the provider reports.
        let mut hook = ServerPay::webhook(
            &Record::Processing(p.clone()),
            order(1),
            LeaseToken::from_stored("t"),
            policy(),
        );
        let Effect::Lookup(claim) = hook.poll(deadline + 1, &Sequence::starting_at(1)) else {
            panic!("lookup")
        };
        let found = waiting(claim);
        hook.on_lookup(Lookup::Found(found));
        assert!(matches!(
            hook.poll(deadline + 1, &Sequence::starting_at(1)),
            Effect::Release { .. }
        ));
    }

    fn tee() -> Vec<OrderLine> {
        vec![OrderLine {
            sku: "tee".into(),
            name: "Tee".into(),
            quantity: 1,
            unit_price: 1_500,
            line_total: 1_500,
        }]
    }
}
