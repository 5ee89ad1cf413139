//! The protocol as a state machine: two tabs of one customer, two server instances on one
//! store, a provider with its own idempotency and at-least-once webhooks, a background job,
//! a clock and a lossy network. [`State`] is everything; [`Action`] is one atomic step of
//! one actor; [`Model::next`] applies it. The decisions inside each step are the real ones
//! (`crate::sdk`, `crate::server`). A pay, a job's abandoned attempt and a webhook are the
//! server's own machine (`payonce_rules::pay::ServerPay`): one [`Action::Step`] performs
//! one of its effects against the model's store and provider and feeds the result back, so
//! the model checks the server's order of steps, not a copy of it. The cancel handler
//! (`crates/server/src/ops/cancel.rs`) is one transaction, modelled in [`Model::next`].

use crate::sdk::{self, Attempt, Effect, Final as SdkFinal, PayEnd, PayFlow, RetryBudget};
use crate::server::{
    self as srv, Answer, Claim, Claimed, End, Lookup, OrderRow, Outcome, Record, ServerPay,
};
use crate::Flaw;
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, PayResponse, Problem};
use payonce_rules::ids::{AttemptId, LeaseToken, OrderId};
use std::collections::BTreeMap;

/// The one customer.
pub const USER: &str = "u1";
/// The one order.
pub const ORDER: &str = "ord_1";
/// The payment method.
pub const METHOD: &str = "pm_card_approve";
/// One clock tick: the lease length.
pub const TICK_MS: i64 = 2_000;

/// How far the search goes: each budget bounds one kind of nondeterminism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Tabs the customer pays in (1 or 2; a duplicated tab is a second one).
    pub tabs: u8,
    /// Pay clicks per tab.
    pub clicks: u8,
    /// Requests per pay call (the SDK's `max_attempts`).
    pub max_sends: u32,
    /// Server crashes (any step, either instance).
    pub crashes: u8,
    /// Extra deliveries of a request already delivered.
    pub dups: u8,
    /// Clock ticks.
    pub ticks: u8,
    /// Cart changes.
    pub cart_changes: u8,
    /// Cancel clicks.
    pub cancels: u8,
    /// Reloads (a page loses its memory, keeps its sessionStorage).
    pub reloads: u8,
    /// Duplicating tab 0 into tab 1 (sessionStorage copied).
    pub duplicate_tab: u8,
    /// Provider calls that fail or lose their answer.
    pub provider_faults: u8,
    /// Webhook redeliveries after an acknowledgement.
    pub redeliveries: u8,
    /// Background job runs.
    pub jobs: u8,
    /// The provider is two-phase and does not deduplicate (`payonce_rules::pay::Phases::Two`,
    /// as localstripe): every create makes a new payment object, a confirm charges the one it
    /// names, lookups read the id saved on the attempt.
    pub two_phase: bool,
    /// Times the customer confirms a declined two-phase payment object outside the server
    /// (the page's client secret and another card, Stripe.js's "try another card"): it
    /// charges unless the server cancelled it.
    pub outside_confirms: u8,
    /// Two-phase confirms that ask the customer to act first (3-D Secure): the customer then
    /// passes or fails the challenge ([`Action::Authenticate`]), or never acts and the
    /// attempt meets its deadline (`Policy::action_deadline`, four ticks).
    pub challenges: u8,
}

impl Bounds {
    /// One click of one tab and no faults: the base the tests add to.
    pub const NONE: Bounds = Bounds {
        tabs: 1,
        clicks: 1,
        max_sends: 2,
        crashes: 0,
        dups: 0,
        ticks: 0,
        cart_changes: 0,
        cancels: 0,
        reloads: 0,
        duplicate_tab: 0,
        provider_faults: 0,
        redeliveries: 0,
        jobs: 0,
        two_phase: false,
        outside_confirms: 0,
        challenges: 0,
    };

    /// The bounds of the test command's check (docs/model.md).
    pub const FULL: Bounds = Bounds {
        tabs: 2,
        clicks: 2,
        max_sends: 2,
        crashes: 1,
        dups: 1,
        ticks: 3,
        cart_changes: 1,
        cancels: 1,
        reloads: 1,
        duplicate_tab: 1,
        provider_faults: 1,
        redeliveries: 1,
        jobs: 2,
        two_phase: false,
        outside_confirms: 0,
        challenges: 0,
    };
}

/// What a customer was told, per key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Told {
    /// Paid, with this provider charge.
    Paid(String),
    /// Declined or failed.
    Declined,
    /// Cancelled.
    Cancelled,
    /// The order changed.
    OrderChanged,
    /// The payment expired waiting for the customer (nothing charged).
    Expired,
}

/// A message on the network. Requests carry what the SDK sends; answers carry raw HTTP
/// (status, body, `Retry-After`) that the tab decodes as the web layer does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// `POST /orders/{id}/pay`.
    Pay {
        /// From.
        tab: u8,
        /// The page (reload generation) that sent it.
        page: u8,
        /// The flow's send number.
        seq: u32,
        /// Idempotency key.
        key: String,
        /// Snapshot version.
        version: u64,
    },
    /// `POST /orders/{id}/payment-attempts/cancel`.
    Cancel {
        /// From.
        tab: u8,
        /// Page.
        page: u8,
        /// Key.
        key: String,
    },
    /// The answer to a pay.
    PayReply {
        /// To.
        tab: u8,
        /// Page.
        page: u8,
        /// Send number.
        seq: u32,
        /// Key.
        key: String,
        /// HTTP status.
        status: u16,
        /// Body.
        body: String,
    },
    /// The answer to a cancel.
    CancelReply {
        /// To.
        tab: u8,
        /// Page.
        page: u8,
        /// Key.
        key: String,
        /// HTTP status.
        status: u16,
        /// Body.
        body: String,
    },
}

/// One browser tab.
#[derive(Debug, Clone)]
pub struct Tab {
    /// Reload generation: answers to an earlier page are dropped.
    pub page: u8,
    /// sessionStorage's entry for the order.
    pub storage: Option<Attempt>,
    /// The running pay call, if any (lost on reload).
    pub flow: Option<PayFlow>,
    /// The send the flow awaits an answer to.
    pub awaiting: Option<u32>,
    /// The flow asked to wait before its next send.
    pub waiting: bool,
    /// The order version this tab shows.
    pub seen_version: u64,
    /// The page's retry budget.
    pub budget: RetryBudget,
    /// Clicks so far.
    pub clicks: u8,
    /// A cancel in flight, for this key.
    pub cancelling: Option<String>,
    /// The last pay call ended refused (e.g. 409 `PAYMENT_ALREADY_ACTIVE`), key kept: the
    /// customer's way out is Cancel, not another Pay.
    pub refused: bool,
    /// History: keys for which this tab received a final answer (the SDK's classification).
    pub finals: Vec<String>,
    /// History: what the customer was told, per key.
    pub told: Vec<(String, Told)>,
}

/// A server instance's work: the server's own pay machine (`payonce_rules::pay`), and
/// what the flow's last read saw of the order (used only by [`Flaw::ClaimReadThenWrite`]).
#[derive(Debug, Clone)]
pub struct Work {
    /// The flow.
    pub flow: ServerPay,
    /// The order was unlocked and unpaid at the flow's last read of its key.
    pub read_free: bool,
}

impl Work {
    fn new(flow: ServerPay) -> Self {
        Self {
            flow,
            read_free: false,
        }
    }
}

/// Who the work is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A pay request: the answer goes back to this tab.
    Pay {
        /// Tab.
        tab: u8,
        /// Page.
        page: u8,
        /// Send number.
        seq: u32,
        /// Key.
        key: String,
        /// Version.
        version: u64,
    },
    /// A webhook for this provider key.
    Webhook(String),
    /// The reconciliation / outbox job, for this key.
    Job(String),
}

/// A server instance.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // states are cloned whole; boxing buys nothing here
pub enum Inst {
    /// Waiting for work.
    Idle,
    /// Working.
    Busy(Origin, Work),
}

/// One stored attempt slot.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The attempt.
    pub record: Record,
    /// The lease token of whoever holds the lease.
    pub token: Option<LeaseToken>,
    /// When the jobs look at it again: its payment waits for the customer
    /// (`attempts.next_check_at`, `payonce_rules::policy::next_customer_check`).
    pub next_check: Option<i64>,
}

/// Violations found so far (history variables: set by the step that breaks a rule).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Flags {
    /// A key left storage without a final answer for it.
    pub removed_without_final: bool,
    /// A replayed answer differed from the record's.
    pub replay_differs: bool,
    /// A charge was created while its key's tombstone stood.
    pub charge_after_tombstone: bool,
    /// The settle found the order not locked by its attempt.
    pub lost_order_lock: bool,
    /// A charge was asked for with an amount or order version other than those of the
    /// checkout the customer confirmed with its key.
    pub charge_other_terms: bool,
}

/// The whole system.
#[derive(Debug, Clone)]
pub struct State {
    /// Clock, ms.
    pub now: i64,
    /// Tabs.
    pub tabs: [Tab; 2],
    /// The shared store: attempt slots by key (unique), and the order.
    pub slots: BTreeMap<String, Slot>,
    /// The order row.
    pub order: OrderRow,
    /// The provider's ledger, by provider key (its idempotency).
    pub ledger: BTreeMap<String, Charge>,
    /// Webhook deliveries the provider still owes (at least once).
    pub webhooks: Vec<String>,
    /// A two-phase provider's payment objects by id: the provider key they were created
    /// under, and whether they were confirmed (then their charge is in `ledger` under the
    /// object's id).
    pub intents: BTreeMap<String, (String, bool)>,
    /// Attempts flagged for review after they settled without a charge, because a payment
    /// of theirs succeeded anyway (`payonce_rules::plan::Stray`), sorted.
    pub flagged: Vec<AttemptId>,
    /// The order is held for review: the claim refuses new keys (`ORDER_UNDER_REVIEW`).
    pub held: bool,
    /// Server instances.
    pub inst: [Inst; 2],
    /// The network, as a multiset.
    pub net: Vec<Msg>,
    /// Keys minted.
    pub minted: u8,
    /// History: the order version each key was confirmed for (the snapshot it was sent with).
    pub confirmed: BTreeMap<String, u64>,
    /// What is left of each bound.
    pub left: Bounds,
    /// Violations.
    pub flags: Flags,
}

/// One atomic step of one actor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The customer clicks Pay (or resumes) in a tab.
    Click(u8),
    /// The customer clicks Cancel in a tab.
    CancelClick(u8),
    /// A tab's wait before its next send ends.
    Waited(u8),
    /// A tab's per-request timeout fires (its answer is lost or late).
    Timeout(u8),
    /// A tab's cancel call gets no answer.
    CancelTimeout(u8),
    /// A tab reloads.
    Reload(u8),
    /// Tab 0 is duplicated into tab 1 (sessionStorage copied, tab 1's page replaced).
    DuplicateTab,
    /// The customer changes the cart in a tab.
    CartChange(u8),
    /// Network: deliver message `i` (a request to instance `inst`); `dup` keeps a copy.
    Deliver {
        /// Message index.
        i: usize,
        /// Receiving instance (requests only).
        inst: u8,
        /// Deliver again later too.
        dup: bool,
    },
    /// An instance does its next step; `choice` picks the provider's behaviour.
    Step {
        /// Instance.
        inst: u8,
        /// 0: approve, 1: decline, 2: charged but the answer is lost, 3: down.
        choice: u8,
    },
    /// An instance crashes (and restarts with nothing in memory).
    Crash(u8),
    /// The provider delivers webhook `i` to instance `inst`.
    Webhook {
        /// Pending delivery index.
        i: usize,
        /// Instance.
        inst: u8,
    },
    /// The provider delivers an acknowledged event again.
    Redeliver(String),
    /// The background job on `inst` picks the abandoned attempt of `key`.
    Job {
        /// Instance.
        inst: u8,
        /// Key.
        key: String,
    },
    /// Deleting expired keys (retention).
    Expire,
    /// The clock advances one tick.
    Tick,
    /// The customer confirms the declined payment object `id` outside the server, with
    /// another card: it charges (the provider then reports the success).
    OutsideConfirm(String),
    /// The customer passes (`ok`) or fails the 3-D Secure challenge of payment object `id`
    /// (the provider then reports the outcome).
    Authenticate {
        /// The payment object.
        id: String,
        /// Passed.
        ok: bool,
    },
}

/// The model: bounds and an optional injected flaw.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Bounds.
    pub bounds: Bounds,
    /// A deliberately broken variant, or the real code.
    pub flaw: Option<Flaw>,
}

fn tab0() -> Tab {
    Tab {
        page: 0,
        storage: None,
        flow: None,
        awaiting: None,
        waiting: false,
        seen_version: 1,
        budget: sdk::budget(),
        clicks: 0,
        cancelling: None,
        refused: false,
        finals: Vec::new(),
        told: Vec::new(),
    }
}

fn told_of(end: &PayEnd) -> Option<Told> {
    match end {
        PayEnd::Final(SdkFinal::Paid { payment, .. }) => {
            Some(Told::Paid(payment.charge_id.clone()))
        }
        PayEnd::Final(SdkFinal::Declined { .. }) => Some(Told::Declined),
        PayEnd::Final(SdkFinal::Cancelled) => Some(Told::Cancelled),
        PayEnd::Final(SdkFinal::OrderChanged { .. }) => Some(Told::OrderChanged),
        PayEnd::Final(SdkFinal::Expired) => Some(Told::Expired),
        _ => None,
    }
}

/// The order's payment, as the answer of its paying key has it (`ORDER_ALREADY_PAID` carries
/// it, `crates/server/src/ops/pay.rs`); `None` once that key's record is past retention.
fn paid_payment(s: &State) -> Option<payonce_protocol::Payment> {
    s.slots.values().find_map(|sl| match &sl.record {
        Record::Final(f)
            if f.status == AttemptStatus::Succeeded && f.terms.order_id == s.order.id =>
        {
            serde_json::from_str::<PayResponse>(&f.answer.body)
                .ok()?
                .payment
        }
        _ => None,
    })
}

impl Model {
    /// The initial state: nothing paid, nothing stored, the order at version 1.
    pub fn init(&self) -> State {
        State {
            now: 1_000_000,
            tabs: [tab0(), tab0()],
            slots: BTreeMap::new(),
            order: OrderRow {
                id: OrderId::from_stored(ORDER),
                version: 1,
                active: None,
                paid: false,
            },
            ledger: BTreeMap::new(),
            webhooks: Vec::new(),
            intents: BTreeMap::new(),
            flagged: Vec::new(),
            held: false,
            inst: [Inst::Idle, Inst::Idle],
            net: Vec::new(),
            minted: 0,
            confirmed: BTreeMap::new(),
            left: self.bounds,
            flags: Flags::default(),
        }
    }

    /// Every action enabled in `s`. `faults`: false keeps only what a healthy system does
    /// (no crash, loss, duplicate, provider fault, reload, cart change, duplicate tab).
    pub fn actions(&self, s: &State, faults: bool, out: &mut Vec<Action>) {
        for t in 0..2u8 {
            let tab = &s.tabs[t as usize];
            // Tab 1 exists only with two tabs, or once tab 0 has been duplicated into it.
            let opened = t < self.bounds.tabs || tab.page > 0;
            if opened
                && tab.flow.is_none()
                && tab.cancelling.is_none()
                && (tab.clicks < self.bounds.clicks || !faults)
            {
                out.push(Action::Click(t));
            }
            if tab.flow.is_none()
                && tab.cancelling.is_none()
                && tab.storage.is_some()
                && (s.left.cancels > 0 || !faults)
            {
                out.push(Action::CancelClick(t));
            }
            if tab.flow.is_some() && tab.waiting {
                out.push(Action::Waited(t));
            }
            if tab.flow.is_some() && tab.awaiting.is_some() {
                out.push(Action::Timeout(t));
            }
            if tab.cancelling.is_some() {
                out.push(Action::CancelTimeout(t));
            }
            if faults && s.left.reloads > 0 {
                out.push(Action::Reload(t));
            }
            if faults
                && s.left.cart_changes > 0
                && s.order.active.is_none()
                && !s.order.paid
                && tab.flow.is_none()
            {
                out.push(Action::CartChange(t));
            }
        }
        if faults && s.left.duplicate_tab > 0 && s.tabs[1].flow.is_none() && s.tabs[1].clicks == 0 {
            out.push(Action::DuplicateTab);
        }
        for (i, m) in s.net.iter().enumerate() {
            if i > 0 && s.net[i - 1] == *m {
                continue; // the same message twice: one choice
            }
            match m {
                Msg::Pay { .. } | Msg::Cancel { .. } => {
                    for inst in 0..2u8 {
                        if matches!(s.inst[inst as usize], Inst::Idle) {
                            out.push(Action::Deliver {
                                i,
                                inst,
                                dup: false,
                            });
                            if faults && s.left.dups > 0 {
                                out.push(Action::Deliver { i, inst, dup: true });
                            }
                        }
                        if inst == 0 && !faults {
                            break;
                        }
                    }
                }
                _ => out.push(Action::Deliver {
                    i,
                    inst: 0,
                    dup: false,
                }),
            }
        }
        for inst in 0..2u8 {
            match &s.inst[inst as usize] {
                Inst::Busy(_, w) => {
                    let choices: &[u8] = match w.flow.next_step() {
                        "Charge" | "Confirm" if faults && s.left.provider_faults > 0 => {
                            &[0, 1, 2, 3]
                        }
                        "Confirm" if s.left.challenges > 0 => &[0, 1, 4],
                        "Charge" | "Confirm" => &[0, 1],
                        "Lookup" | "CancelLeftover" if faults && s.left.provider_faults > 0 => {
                            &[0, 3]
                        }
                        _ => &[0],
                    };
                    for &choice in choices {
                        out.push(Action::Step { inst, choice });
                    }
                    if faults && s.left.crashes > 0 {
                        out.push(Action::Crash(inst));
                    }
                }
                Inst::Idle if inst == 1 && !faults => {}
                Inst::Idle => {
                    for (i, pk) in s.webhooks.iter().enumerate() {
                        // One handler per event at a time (the event row is recorded on
                        // arrival); a second delivery of it is a redelivery.
                        let handled = s
                            .inst
                            .iter()
                            .any(|x| matches!(x, Inst::Busy(Origin::Webhook(p), _) if p == pk));
                        if !handled && (i == 0 || s.webhooks[i - 1] != *pk) {
                            out.push(Action::Webhook { i, inst });
                        }
                    }
                    if s.left.jobs > 0 || !faults {
                        for (key, slot) in &s.slots {
                            if let Record::Processing(p) = &slot.record {
                                if p.locked_until.is_none_or(|u| u <= s.now)
                                    && slot.next_check.is_none_or(|t| t <= s.now)
                                {
                                    out.push(Action::Job {
                                        inst,
                                        key: key.clone(),
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        if faults && s.left.redeliveries > 0 {
            for pk in s.ledger.keys() {
                if !s.webhooks.contains(pk) {
                    out.push(Action::Redeliver(pk.clone()));
                }
            }
        }
        if s.slots
            .values()
            .any(|sl| srv::deletable(self.flaw, &sl.record, s.now, &s.order))
        {
            out.push(Action::Expire);
        }
        if s.left.ticks > 0 || !faults {
            out.push(Action::Tick);
        }
        for (id, c) in &s.ledger {
            if c.status == ChargeStatus::RequiresAction && faults {
                for ok in [true, false] {
                    out.push(Action::Authenticate { id: id.clone(), ok });
                }
            }
        }
        if faults && s.left.outside_confirms > 0 {
            for (id, c) in &s.ledger {
                if c.status == ChargeStatus::Declined && s.intents.contains_key(id) {
                    out.push(Action::OutsideConfirm(id.clone()));
                }
            }
        }
    }

    /// Applies `a` to `s`. Returns `None` when the action changes nothing.
    pub fn next(&self, s: &State, a: &Action) -> Option<State> {
        let mut s = s.clone();
        match a {
            Action::Click(t) => {
                let t = *t as usize;
                let tab = &mut s.tabs[t];
                tab.clicks = tab.clicks.saturating_add(1);
                let snap = sdk::snapshot(ORDER, tab.seen_version, METHOD);
                let mint = sdk::key(s.minted + 1);
                let flow = match sdk::start(
                    tab.storage.as_ref(),
                    snap,
                    self.bounds.max_sends,
                    s.now,
                    mint,
                ) {
                    Ok(f) => f,
                    Err(_) => return None, // the SDK refuses: the customer must cancel first
                };
                if tab.storage.as_ref().map(|a| &a.key) != Some(&flow.attempt().key) {
                    s.minted += 1;
                }
                tab.flow = Some(flow);
                self.drain(&mut s, t);
            }
            Action::CancelClick(t) => {
                let t = *t as usize;
                s.left.cancels = s.left.cancels.saturating_sub(1);
                let tab = &mut s.tabs[t];
                let key = tab.storage.as_ref()?.key.as_str().to_owned();
                tab.cancelling = Some(key.clone());
                let page = tab.page;
                push(
                    &mut s.net,
                    Msg::Cancel {
                        tab: t as u8,
                        page,
                        key,
                    },
                );
            }
            Action::Waited(t) => {
                let t = *t as usize;
                let tab = &mut s.tabs[t];
                tab.waiting = false;
                tab.flow.as_mut()?.on_waited();
                self.drain(&mut s, t);
            }
            Action::Timeout(t) => {
                let t = *t as usize;
                let tab = &mut s.tabs[t];
                tab.awaiting = None;
                let key = tab.flow.as_ref()?.attempt().key.clone();
                sdk::on_reply(tab.flow.as_mut()?, None, s.now, &mut tab.budget);
                if sdk::flawed_removal(self.flaw, None) {
                    remove_key(&mut s, t, &key);
                }
                self.drain(&mut s, t);
            }
            Action::CancelTimeout(t) => {
                s.tabs[*t as usize].cancelling = None;
            }
            Action::Reload(t) => {
                s.left.reloads -= 1;
                let tab = &mut s.tabs[*t as usize];
                tab.page += 1;
                tab.flow = None;
                tab.awaiting = None;
                tab.waiting = false;
                tab.cancelling = None;
                tab.budget = sdk::budget();
            }
            Action::DuplicateTab => {
                s.left.duplicate_tab -= 1;
                let storage = s.tabs[0].storage.clone();
                let seen = s.tabs[0].seen_version;
                let t1 = &mut s.tabs[1];
                t1.page += 1;
                t1.storage = storage;
                t1.seen_version = seen;
            }
            Action::CartChange(t) => {
                s.left.cart_changes -= 1;
                s.order.version += 1;
                s.tabs[*t as usize].seen_version = s.order.version as u64;
            }
            Action::Deliver { i, inst, dup } => {
                let m = s.net[*i].clone();
                if *dup {
                    s.left.dups -= 1;
                } else {
                    s.net.remove(*i);
                }
                self.deliver(&mut s, m, *inst as usize);
            }
            Action::Step { inst, choice } => self.step(&mut s, *inst as usize, *choice),
            Action::Crash(inst) => {
                s.left.crashes -= 1;
                s.inst[*inst as usize] = Inst::Idle;
            }
            Action::Webhook { i, inst } => {
                let pk = s.webhooks[*i].clone();
                // Recorded on arrival, handled, acknowledged at the end (webhooks.rs); a
                // crash before the end leaves it owed, so the provider delivers it again.
                let policy = srv::policy(TICK_MS);
                match slot_of_pk(&s, &pk) {
                    Some(sl) => {
                        let flow = srv::webhook(self.flaw, &sl.record, &s.order, policy)
                            .with_phases(self.phases());
                        s.inst[*inst as usize] = Inst::Busy(Origin::Webhook(pk), Work::new(flow));
                    }
                    // Nothing processing for it: a success for an attempt that settled without
                    // a charge is flagged (crates/server/src/ops/leftovers.rs); else no effect.
                    None => {
                        stray(&mut s, &pk);
                        ack(&mut s, &pk);
                    }
                }
            }
            Action::Redeliver(pk) => {
                s.left.redeliveries -= 1;
                push_sorted(&mut s.webhooks, pk.clone());
            }
            Action::Job { inst, key } => {
                s.left.jobs = s.left.jobs.saturating_sub(1);
                let record = &s.slots.get(key)?.record;
                let flow = srv::abandoned(self.flaw, record, &s.order, srv::policy(TICK_MS))
                    .with_phases(self.phases());
                s.inst[*inst as usize] = Inst::Busy(Origin::Job(key.clone()), Work::new(flow));
            }
            Action::Expire => {
                let (now, order) = (s.now, s.order.clone());
                s.slots
                    .retain(|_, sl| !srv::deletable(self.flaw, &sl.record, now, &order));
            }
            Action::Tick => {
                s.left.ticks = s.left.ticks.saturating_sub(1);
                s.now += TICK_MS;
            }
            Action::Authenticate { id, ok } => {
                let c = s.ledger.get_mut(id)?;
                c.client_secret = None;
                (c.status, c.decline_code) = match ok {
                    true => (ChargeStatus::Succeeded, None),
                    false => (ChargeStatus::Declined, Some("authentication_failed".into())),
                };
                let pk = c.provider_key.clone();
                push_sorted(&mut s.webhooks, pk);
            }
            Action::OutsideConfirm(id) => {
                s.left.outside_confirms -= 1;
                let c = s.ledger.get_mut(id)?;
                c.status = ChargeStatus::Succeeded;
                c.decline_code = None;
                // The provider reports it (at least once), by the object's provider key.
                let pk = c.provider_key.clone();
                push_sorted(&mut s.webhooks, pk);
            }
        }
        Some(s)
    }

    /// Runs a tab's flow until it blocks, applying its storage effects.
    fn drain(&self, s: &mut State, t: usize) {
        let now = s.now;
        loop {
            let tab = &mut s.tabs[t];
            let Some(flow) = tab.flow.as_mut() else {
                return;
            };
            let Some(e) = sdk::poll(flow, now) else {
                return;
            };
            match e {
                Effect::Save { attempt, new } => {
                    if new || tab.storage.as_ref().map(|a| &a.key) == Some(&attempt.key) {
                        tab.storage = Some(attempt);
                    }
                }
                Effect::Remove(key) => remove_key(s, t, &key),
                Effect::Send { attempt } => {
                    // A fetch's answer goes to that fetch only: the send number is made
                    // unique per pay call of the tab.
                    let attempt = (u32::from(tab.clicks) << 8) | attempt;
                    let a = flow.attempt();
                    let m = Msg::Pay {
                        tab: t as u8,
                        page: tab.page,
                        seq: attempt,
                        key: a.key.as_str().to_owned(),
                        version: a.snapshot.order_version,
                    };
                    tab.awaiting = Some(attempt);
                    let (k, v) = (a.key.as_str(), a.snapshot.order_version);
                    s.confirmed.entry(k.to_owned()).or_insert(v);
                    push(&mut s.net, m);
                    return;
                }
                Effect::Wait { .. } => {
                    tab.waiting = true;
                    return;
                }
                Effect::WaitOnline { .. } => return,
                Effect::Done(end) => {
                    let key = flow.attempt().key.as_str().to_owned();
                    if let Some(told) = told_of(&end) {
                        tab.told.push((key, told));
                    }
                    // Busy: the SDK tombstones the refused key with a cancel; the model lets
                    // the customer's Cancel do it (at any later step, the SDK's among them).
                    tab.refused = matches!(end, PayEnd::Failed(_) | PayEnd::Busy);
                    tab.flow = None;
                    tab.awaiting = None;
                    tab.waiting = false;
                    return;
                }
                Effect::Warn(_) | Effect::Status(_) | Effect::Remind { .. } => {}
            }
        }
    }

    fn deliver(&self, s: &mut State, m: Msg, inst: usize) {
        match m {
            Msg::Pay {
                tab,
                page,
                seq,
                key,
                version,
            } => {
                let policy = srv::policy(TICK_MS);
                let flow = srv::pay(self.flaw, USER, &key, version, METHOD, &s.order, policy)
                    .with_phases(self.phases());
                let origin = Origin::Pay {
                    tab,
                    page,
                    seq,
                    key,
                    version,
                };
                s.inst[inst] = Inst::Busy(origin, Work::new(flow));
            }
            Msg::Cancel { tab, page, key } => {
                let (status, body) = self.cancel(s, &key);
                push(
                    &mut s.net,
                    Msg::CancelReply {
                        tab,
                        page,
                        key,
                        status,
                        body,
                    },
                );
            }
            Msg::PayReply {
                tab,
                page,
                seq,
                key,
                status,
                body,
            } => {
                let t = tab as usize;
                let tb = &mut s.tabs[t];
                if tb.page != page || tb.awaiting != Some(seq) || tb.flow.is_none() {
                    return; // an answer for a page or a send that is gone
                }
                let retry_after = matches!(status, 202 | 409).then_some("1");
                let reply = sdk::decode::<PayResponse>(status, &body, retry_after);
                if sdk::pay_is_final(&reply) {
                    tb.finals.push(key.clone());
                }
                tb.awaiting = None;
                let flow = tb.flow.as_mut().expect("checked");
                sdk::on_reply(flow, Some(&reply), s.now, &mut tb.budget);
                self.drain(s, t);
            }
            Msg::CancelReply {
                tab,
                page,
                key,
                status,
                body,
            } => {
                let t = tab as usize;
                let tb = &mut s.tabs[t];
                if tb.page != page || tb.cancelling.as_deref() != Some(key.as_str()) {
                    return;
                }
                tb.cancelling = None;
                let outcome = sdk::cancel_outcome(status, &body);
                if outcome.removes_key() {
                    tb.finals.push(key.clone());
                    let told = match &outcome {
                        sdk::CancelOutcome::Paid { payment: Some(p) } => {
                            Some(Told::Paid(p.charge_id.clone()))
                        }
                        sdk::CancelOutcome::Paid { payment: None } => None,
                        sdk::CancelOutcome::Cancelled => Some(Told::Cancelled),
                        _ => Some(Told::Declined),
                    };
                    if let Some(told) = told {
                        tb.told.push((key.clone(), told));
                    }
                    let k = IdempotencyKey::parse(&key).expect("model keys are valid");
                    remove_key(s, t, &k);
                }
            }
        }
    }

    /// The cancel handler (crates/server/src/ops/cancel.rs), one transaction.
    fn cancel(&self, s: &mut State, key: &str) -> (u16, String) {
        let policy = srv::policy(TICK_MS);
        match s.slots.get(key) {
            // The tombstone insert and the order read are one transaction: on a paid order
            // it is rolled back, the provider decides, and a tombstone follows if the key
            // never charged (the model takes the three steps as one: the paid order refuses
            // the key's claims in between).
            None if s.order.paid && srv::cancel_asks_provider(self.flaw) => {
                let k = IdempotencyKey::parse(key).expect("model keys are valid");
                let pk = srv::provider_key(USER, &k, &s.order.id);
                // One phase: the provider finds the charge by provider key. Two phases its
                // objects have their own ids: the store's payment row names the provider key
                // that paid (`plan::cancel_from_store`), which this stands for.
                let charge = s.ledger.get(&pk).or_else(|| {
                    s.ledger
                        .values()
                        .find(|c| c.provider_key == pk && c.status == ChargeStatus::Succeeded)
                });
                let lookup = match charge {
                    Some(c) => Lookup::Found(c.clone()),
                    None => Lookup::NotFound,
                };
                let payment = s
                    .ledger
                    .values()
                    .find(|c| c.order_id == s.order.id && c.status == ChargeStatus::Succeeded)
                    .map(srv::payment_of);
                let r = srv::cancel_forgotten(lookup, payment);
                if r.status == AttemptStatus::Cancelled && srv::cancel_inserts_tombstone(self.flaw)
                {
                    let t = srv::plan_tombstone(USER, &s.order, key, s.now, &policy);
                    let record = Record::Tombstone(t);
                    s.slots.insert(
                        key.to_owned(),
                        Slot {
                            record,
                            token: None,
                            next_check: None,
                        },
                    );
                }
                (200, srv::cancel_body(r.status, r.payment))
            }
            None => {
                if srv::cancel_inserts_tombstone(self.flaw) {
                    let t = srv::plan_tombstone(USER, &s.order, key, s.now, &policy);
                    s.slots.insert(
                        key.to_owned(),
                        Slot {
                            record: Record::Tombstone(t),
                            token: None,
                            next_check: None,
                        },
                    );
                }
                (200, srv::cancel_body(AttemptStatus::Cancelled, None))
            }
            Some(slot) => match srv::cancel_answer(&slot.record, ORDER) {
                Ok((status, with_payment)) => {
                    let payment = match (&slot.record, with_payment) {
                        (Record::Final(f), true) => {
                            serde_json::from_str::<PayResponse>(&f.answer.body)
                                .ok()
                                .and_then(|r| r.payment)
                        }
                        _ => None,
                    };
                    (200, srv::cancel_body(status, payment))
                }
                Err(p) => (p.status, srv::problem_answer(&p).body),
            },
        }
    }

    /// One step of a busy instance: one effect of its flow, performed against the model's
    /// store and provider, its result fed back; the flow's end is answered at once.
    fn step(&self, s: &mut State, inst: usize, choice: u8) {
        let Inst::Busy(origin, mut w) = std::mem::replace(&mut s.inst[inst], Inst::Idle) else {
            return;
        };
        let now = s.now;
        let key = match &origin {
            Origin::Pay { key, .. } | Origin::Job(key) => key.clone(),
            Origin::Webhook(pk) => key_of_pk(s, pk),
        };
        match w.flow.poll(now, &srv::KeyIds::new(&key, now)) {
            srv::Effect::ReadKey { .. } => {
                let record = s.slots.get(&key).map(|sl| sl.record.clone());
                // Only the flaw reads the order's lock state to act on it later.
                w.read_free =
                    !srv::claim_is_atomic(self.flaw) && s.order.active.is_none() && !s.order.paid;
                w.flow.on_record(record, now);
            }
            // The instance sleeps on the clock until the machine's `until`: time passes
            // meanwhile for every actor (the other steps interleave before this one).
            srv::Effect::Wait { until } => {
                s.now = s.now.max(until);
                w.flow.on_waited();
            }
            // The model's server has no Redis: its pays start with `ServerPay::pay`, never
            // `pay_marked`, so the marker's effects cannot come (docs/model.md says why).
            srv::Effect::Mark { .. }
            | srv::Effect::MarkWait { .. }
            | srv::Effect::Unmark { .. } => {
                unreachable!("the model's pays have no claim marker")
            }
            srv::Effect::Claim { plan, .. } => {
                let r = self.claim(s, &key, &plan.claim, w.read_free);
                w.flow.on_claim(r);
            }
            srv::Effect::TakeOver { take: t, .. } => {
                let taken = match s.slots.get_mut(&key) {
                    Some(slot) => match &mut slot.record {
                        Record::Processing(p)
                            if p.id == t.attempt_id && p.locked_until.is_none_or(|u| u <= now) =>
                        {
                            p.locked_until = Some(t.until);
                            slot.token = Some(t.token.clone());
                            true
                        }
                        _ => false,
                    },
                    None => false,
                };
                w.flow.on_taken(taken);
            }
            srv::Effect::Lookup(claim) => {
                let lookup = if choice == 3 {
                    s.left.provider_faults -= 1;
                    Lookup::Unknown("provider down".into())
                } else if self.bounds.two_phase {
                    lookup_saved(s, claim.attempt.provider_ref.as_deref())
                } else {
                    match s.ledger.get(&claim.attempt.provider_key) {
                        Some(c) => Lookup::Found(c.clone()),
                        None => Lookup::NotFound,
                    }
                };
                w.flow.on_lookup(lookup);
            }
            // Past its deadline the payment that waits for the customer is cancelled (two
            // phases: its saved object; the one-phase provider never asks the customer to
            // act); what the provider then holds is the answer.
            srv::Effect::CancelAction(claim) => {
                let a = &claim.attempt;
                let id = match self.bounds.two_phase {
                    true => a.provider_ref.clone().unwrap_or_default(),
                    false => a.provider_key.clone(),
                };
                if let Some(c) = s.ledger.get_mut(&id) {
                    if c.status == ChargeStatus::RequiresAction {
                        c.status = ChargeStatus::Canceled;
                        c.client_secret = None;
                    }
                }
                let lookup = match s.ledger.get(&id) {
                    Some(c) => Lookup::Found(c.clone()),
                    None => Lookup::NotFound,
                };
                w.flow.on_action_cancelled(lookup);
            }
            srv::Effect::Charge(claim) => {
                let outcome = self.charge(s, &key, claim, choice);
                w.flow.on_charge(outcome);
            }
            srv::Effect::Settle { claim, plan, .. } => {
                let Some(settled) = settle(s, claim, plan) else {
                    return; // rolled back (an internal error): stays processing
                };
                w.flow.on_settled(settled);
            }
            srv::Effect::Release { claim, .. } => {
                let a = &claim.attempt;
                let slot = s.slots.values_mut().find(|sl| *sl.record.id() == a.id);
                let mut processing = false;
                if let Some(slot) = slot {
                    if slot.token.as_deref() == Some(claim.lease_token.as_str()) {
                        if let Record::Processing(p) = &mut slot.record {
                            p.locked_until = None;
                        }
                        slot.token = None;
                    }
                    processing = matches!(slot.record, Record::Processing(_));
                }
                w.flow.on_released(!processing);
            }
            srv::Effect::Create(claim) => {
                let created = create(s, claim, choice);
                w.flow.on_created(created);
            }
            srv::Effect::SaveRef {
                claim,
                provider_ref,
                ..
            } => {
                let a = &claim.attempt;
                let slot = s.slots.values_mut().find(|sl| *sl.record.id() == a.id);
                let mut saved = false;
                if let Some(slot) = slot {
                    let holds = slot.token.as_deref() == Some(claim.lease_token.as_str());
                    if let Record::Processing(p) = &mut slot.record {
                        if holds && p.provider_ref.is_none() {
                            p.provider_ref = Some(provider_ref.to_owned());
                            saved = true;
                        }
                    }
                }
                w.flow.on_ref_saved(saved);
            }
            srv::Effect::Confirm(claim) => {
                let outcome = confirm(s, claim, choice);
                w.flow.on_charge(outcome);
            }
            srv::Effect::CancelLeftover(claim) => {
                let lookup = if choice == 3 {
                    s.left.provider_faults -= 1;
                    Lookup::Unknown("provider down".into())
                } else {
                    cancel_saved(s, claim.attempt.provider_ref.as_deref())
                };
                w.flow.on_leftover(lookup);
            }
            srv::Effect::Done(_) => {}
        }
        match w.flow.end().cloned() {
            Some(end) => self.end(s, &origin, &key, end),
            None => s.inst[inst] = Inst::Busy(origin, w),
        }
    }

    /// How the model's provider starts a payment.
    fn phases(&self) -> srv::Phases {
        match self.bounds.two_phase {
            true => srv::Phases::Two,
            false => srv::Phases::One,
        }
    }

    /// The claim transaction (one conditional write: the `(user, key)` slot, one processing
    /// attempt per order, the order's lock at the version read); [`Flaw::ClaimReadThenWrite`]
    /// checks with the flow's earlier read and writes unconditionally.
    fn claim(&self, s: &mut State, key: &str, claim: &Claim, read_free: bool) -> Claimed {
        let read_version = claim.attempt.terms.order_version;
        let (slot_free, order_ok) = if srv::claim_is_atomic(self.flaw) {
            let one_processing = s.slots.values().any(
                |sl| matches!(&sl.record, Record::Processing(p) if p.terms.order_id == s.order.id),
            );
            (
                !s.slots.contains_key(key),
                !one_processing
                    && s.order.active.is_none()
                    && !s.order.paid
                    && !s.held
                    && s.order.version == read_version,
            )
        } else {
            (true, read_free)
        };
        if !slot_free {
            return Claimed::SlotTaken;
        }
        if !order_ok {
            let mut p = srv::order_refusal(s.order.version, s.order.paid, read_version, s.held);
            if p.code == ErrorCode::OrderAlreadyPaid {
                p.payment = paid_payment(s);
            }
            return Claimed::Refused(Box::new(p));
        }
        s.order.active = Some(claim.attempt.id.clone());
        let slot = Slot {
            record: Record::Processing(claim.attempt.clone()),
            token: Some(claim.lease_token.clone()),
            next_check: None,
        };
        s.slots.insert(key.to_owned(), slot);
        Claimed::Won
    }

    /// The provider's charge under the claim's provider key (its idempotency: one charge
    /// per key). `choice`: 1 declines, 2 charges but loses the answer, 3 is down. Checks the
    /// charge against the checkout confirmed with `key` and against its tombstone.
    fn charge(&self, s: &mut State, key: &str, claim: &Claim, choice: u8) -> Outcome {
        if choice == 3 {
            s.left.provider_faults -= 1;
            return Outcome::Unknown("provider down".into());
        }
        let a = &claim.attempt;
        let pk = a.provider_key.clone();
        if let Some(&v) = s.confirmed.get(key) {
            let confirmed = OrderRow {
                version: v as i64,
                ..s.order.clone()
            };
            s.flags.charge_other_terms |=
                a.terms.amount != confirmed.amount() || a.terms.order_version != confirmed.version;
        }
        if !s.ledger.contains_key(&pk) {
            let tombstoned = s.slots.values().any(|sl| {
                matches!(&sl.record, Record::Tombstone(_))
                    && sl_key_pk(sl, &s.slots) == Some(pk.clone())
            });
            let charge = Charge {
                id: format!(
                    "ch_{}{}",
                    &pk[3..11],
                    if pk.ends_with("-again") { "_again" } else { "" }
                ),
                provider_key: pk.clone(),
                amount: a.terms.amount,
                currency: a.terms.currency.clone(),
                payment_method_id: a.payment_method_id.clone(),
                order_id: a.terms.order_id.to_string(),
                status: if choice == 1 {
                    ChargeStatus::Declined
                } else {
                    ChargeStatus::Succeeded
                },
                created_at: s.now,
                next_action_url: None,
                decline_code: None,
                client_secret: None,
            };
            s.flags.charge_after_tombstone |= tombstoned;
            s.ledger.insert(pk.clone(), charge);
            push_sorted(&mut s.webhooks, pk.clone());
        }
        if choice == 2 {
            s.left.provider_faults -= 1;
            Outcome::Unknown("timeout".into())
        } else {
            srv::outcome_of(s.ledger[&pk].clone())
        }
    }

    /// A flow ended: a pay request's tab gets its answer, a webhook is acknowledged unless
    /// the provider could not confirm it.
    fn end(&self, s: &mut State, origin: &Origin, key: &str, end: End) {
        // The job found the payment waiting for the customer: it looks again later
        // (crates/server/src/ops/jobs/mod.rs, `check_later`), at the latest at its deadline.
        if let (Origin::Job(_), End::ActionRequired(_)) = (origin, &end) {
            if let Some(slot) = s.slots.get_mut(key) {
                if let Record::Processing(p) = &slot.record {
                    slot.next_check = Some(srv::next_customer_check(p.created_at, s.now, TICK_MS));
                }
            }
        }
        let problem = |code, status, retry| srv::problem_answer(&srv::problem(code, status, retry));
        let (answer, replayed) = match end {
            End::Replay { answer, .. } => {
                let others: Vec<&srv::Final> = s
                    .slots
                    .iter()
                    .filter(|(k, _)| *k != key)
                    .filter_map(|(_, sl)| match &sl.record {
                        Record::Final(f) => Some(f),
                        _ => None,
                    })
                    .collect();
                (
                    srv::replay_answer(self.flaw, &answer, &others).clone(),
                    true,
                )
            }
            End::Settled(f) => (f.answer, false),
            End::Unknown(a) | End::ActionRequired(a) => (a, false),
            End::Mismatch(st) => (
                problem(ErrorCode::KeyReusedWithDifferentDetails, Some(st), None),
                false,
            ),
            End::Cancelled => (
                problem(
                    ErrorCode::AttemptCancelled,
                    Some(AttemptStatus::Cancelled),
                    None,
                ),
                false,
            ),
            End::InProgress => (
                problem(
                    ErrorCode::InProgress,
                    Some(AttemptStatus::Processing),
                    Some(1),
                ),
                false,
            ),
            End::Refused(p) => (refused(&p), false),
            End::Unconfirmed => return, // not acknowledged: delivered again
            End::Skipped => {
                if let Origin::Webhook(pk) = origin {
                    ack(s, &pk.clone());
                }
                return;
            }
        };
        if let Origin::Webhook(pk) = origin {
            ack(s, &pk.clone());
        }
        self.answer(s, origin, answer, replayed);
    }

    /// Sends an answer to a pay request's tab; `replayed` answers are checked against the
    /// record they claim to replay.
    fn answer(&self, s: &mut State, origin: &Origin, answer: Answer, replayed: bool) {
        let Origin::Pay {
            tab,
            page,
            seq,
            key,
            ..
        } = origin
        else {
            return;
        };
        if replayed {
            let same = matches!(s.slots.get(key).map(|sl| &sl.record), Some(Record::Final(f)) if f.answer == answer);
            s.flags.replay_differs |= !same;
        }
        push(
            &mut s.net,
            Msg::PayReply {
                tab: *tab,
                page: *page,
                seq: *seq,
                key: key.clone(),
                status: answer.status,
                body: answer.body,
            },
        );
    }
}

/// The settle transaction of `plan` (rule 4): the conditional finish of a processing
/// attempt, then the order paid (or unlocked). `Some(false)`: someone else settled first;
/// `None`: the order's lock was lost, an internal error that rolls back.
fn settle(s: &mut State, claim: &Claim, plan: &srv::SettlePlan) -> Option<bool> {
    let (srv::SettlePlan::Charged { finish, .. } | srv::SettlePlan::Uncharged { finish, .. }) =
        plan
    else {
        return Some(false);
    };
    let a = &claim.attempt;
    let key = s
        .slots
        .iter()
        .find(|(_, sl)| *sl.record.id() == a.id && matches!(sl.record, Record::Processing(_)))
        .map(|(k, _)| k.clone());
    let Some(k) = key else {
        return Some(false); // lost the conditional finish
    };
    if finish.charge_id.is_some() {
        if s.order.active.as_deref() != Some(a.id.as_str()) || s.order.paid {
            s.flags.lost_order_lock = true;
            return None;
        }
        s.order.paid = true;
        s.order.active = None;
    } else if s.order.active.as_deref() == Some(a.id.as_str()) {
        s.order.active = None;
    }
    let record = Record::Final(srv::Final {
        id: a.id.clone(),
        terms: a.terms.clone(),
        status: finish.status,
        answer: finish.answer.clone(),
        expires_at: finish.expires_at,
    });
    s.slots.insert(
        k,
        Slot {
            record,
            token: None,
            next_check: None,
        },
    );
    Some(true)
}

/// The answer of a refused claim.
fn refused(p: &Problem) -> Answer {
    srv::problem_answer(p)
}

/// The key whose attempt holds provider key `pk` (a webhook's flow names its ids by it).
fn key_of_pk(s: &State, pk: &str) -> String {
    s.slots
        .iter()
        .find(|(_, sl)| matches!(&sl.record, Record::Processing(p) if p.provider_key == pk))
        .map(|(k, _)| k.clone())
        .unwrap_or_default()
}

fn slot_of_pk<'a>(s: &'a State, pk: &str) -> Option<&'a Slot> {
    s.slots
        .values()
        .find(|sl| matches!(&sl.record, Record::Processing(p) if p.provider_key == pk))
}

/// The provider key of a slot's key.
fn sl_key_pk(sl: &Slot, slots: &BTreeMap<String, Slot>) -> Option<String> {
    let (k, _) = slots
        .iter()
        .find(|(_, x)| x.record.id() == sl.record.id())?;
    Some(srv::provider_key(
        USER,
        &IdempotencyKey::parse(k).ok()?,
        sl.record.order_id(),
    ))
}

fn ack(s: &mut State, pk: &str) {
    if let Some(i) = s.webhooks.iter().position(|p| p == pk) {
        s.webhooks.remove(i);
    }
}

fn push(net: &mut Vec<Msg>, m: Msg) {
    let i = net.partition_point(|x| *x <= m);
    net.insert(i, m);
}

fn push_sorted<T: Ord>(v: &mut Vec<T>, x: T) {
    let i = v.partition_point(|y| *y <= x);
    v.insert(i, x);
}

/// Removes a tab's stored key if storage still holds it, checking a final answer came first.
fn remove_key(s: &mut State, t: usize, key: &IdempotencyKey) {
    let tab = &mut s.tabs[t];
    if tab.storage.as_ref().map(|a| &a.key) == Some(key) {
        tab.storage = None;
        if !tab.finals.iter().any(|k| k == key.as_str()) {
            s.flags.removed_without_final = true;
        }
    }
}

/// A two-phase provider's create: a new payment object every time (no deduplication).
/// `choice`: 2 creates it but loses the answer, 3 is down (nothing created).
fn create(s: &mut State, claim: &Claim, choice: u8) -> srv::Created {
    if choice == 3 {
        s.left.provider_faults -= 1;
        return srv::Created::Unknown("provider down".into());
    }
    let id = format!("pi_{}", s.intents.len());
    s.intents
        .insert(id.clone(), (claim.attempt.provider_key.clone(), false));
    if choice == 2 {
        s.left.provider_faults -= 1;
        return srv::Created::Unknown("timeout".into());
    }
    srv::Created::Id(id)
}

/// A two-phase provider's confirm of the object the attempt names: charges it once (a
/// second confirm answers its charge). `choice`: 1 declines, 2 charges but loses the
/// answer, 3 is down, 4 asks the customer to act first (3-D Secure).
fn confirm(s: &mut State, claim: &Claim, choice: u8) -> Outcome {
    if choice == 3 {
        s.left.provider_faults -= 1;
        return Outcome::Unknown("provider down".into());
    }
    let a = &claim.attempt;
    let Some(id) = a.provider_ref.clone() else {
        return Outcome::Rejected("no object named".into());
    };
    let Some((pk, confirmed)) = s.intents.get(&id).cloned() else {
        return Outcome::Unknown("no such object".into());
    };
    if !confirmed {
        s.intents.insert(id.clone(), (pk.clone(), true));
        if choice == 4 {
            s.left.challenges -= 1;
        }
        let charge = Charge {
            id: id.clone(),
            provider_key: pk,
            amount: a.terms.amount,
            currency: a.terms.currency.clone(),
            payment_method_id: a.payment_method_id.clone(),
            order_id: a.terms.order_id.to_string(),
            status: match choice {
                1 => ChargeStatus::Declined,
                4 => ChargeStatus::RequiresAction,
                _ => ChargeStatus::Succeeded,
            },
            created_at: s.now,
            next_action_url: None,
            decline_code: None,
            // The page confirms a challenge with the object's client secret.
            client_secret: (choice == 4).then(|| format!("{id}_secret")),
        };
        s.ledger.insert(id.clone(), charge);
    }
    if choice == 2 {
        s.left.provider_faults -= 1;
        return Outcome::Unknown("timeout".into());
    }
    srv::outcome_of(s.ledger[&id].clone())
}

/// A two-phase cancel of the saved object (`Effect::CancelLeftover`): a declined one is
/// cancelled, any other stays as it is; then the object as the provider holds it.
fn cancel_saved(s: &mut State, saved: Option<&str>) -> Lookup {
    if let Some(c) = saved.and_then(|id| s.ledger.get_mut(id)) {
        if c.status == ChargeStatus::Declined {
            c.status = ChargeStatus::Canceled;
        }
    }
    lookup_saved(s, saved)
}

/// A success event for provider key `pk` whose attempt is no longer processing: the server
/// reads the charge back and, for an attempt settled without a charge, flags it and holds
/// the order (`payonce_rules::plan::plan_stray`, as crates/server/src/ops/leftovers.rs).
fn stray(s: &mut State, pk: &str) {
    let settled = s.slots.values().find_map(|sl| match &sl.record {
        Record::Final(f) if sl_key_pk(sl, &s.slots).as_deref() == Some(pk) => Some(f.clone()),
        _ => None,
    });
    let Some(f) = settled else {
        return;
    };
    if matches!(f.status, AttemptStatus::Succeeded | AttemptStatus::Refunded) {
        return;
    }
    let charged = s
        .ledger
        .values()
        .find(|c| c.provider_key == pk && c.status == ChargeStatus::Succeeded);
    let lookup = charged.map_or(Lookup::NotFound, |c| Lookup::Found(c.clone()));
    if srv::is_stray(&f.id, f.status, lookup) && !s.flagged.contains(&f.id) {
        push_sorted(&mut s.flagged, f.id.clone());
        s.held = true;
    }
}

/// A two-phase lookup by the saved id: none saved, nothing was ever confirmed.
fn lookup_saved(s: &State, saved: Option<&str>) -> Lookup {
    let Some(id) = saved else {
        return Lookup::NotFound;
    };
    match (s.ledger.get(id), s.intents.get(id)) {
        (Some(c), _) => Lookup::Found(c.clone()),
        (None, Some(_)) => Lookup::Unconfirmed,
        (None, None) => Lookup::Unknown("no such object".into()),
    }
}
