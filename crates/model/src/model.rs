//! The protocol as a state machine: two tabs of one customer, two server instances on one
//! store, a provider with its own idempotency and at-least-once webhooks, a background job,
//! a clock and a lossy network. [`State`] is everything; [`Action`] is one atomic step of
//! one actor; [`Model::next`] applies it. The decisions inside each step are the real ones
//! (`crate::sdk`, `crate::server`); the sequencing of a server step mirrors the I/O shell in
//! `crates/server/src/pay.rs`, `cancel.rs`, `webhooks.rs` and `jobs.rs`.

use crate::sdk::{self, Attempt, Effect, Final as SdkFinal, PayEnd, PayFlow, RetryBudget};
use crate::server::{self as srv, Answer, Claim, Lookup, NextAction, OrderRow, Outcome, Record};
use crate::Flaw;
use payonce_protocol::provider::{Charge, ChargeStatus};
use payonce_protocol::{AttemptStatus, ErrorCode, IdempotencyKey, PayResponse};
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

/// Where a server instance is in one request or job: the step it does next.
#[derive(Debug, Clone)]
pub enum Step {
    /// Read the record and the order, decide (rule 2).
    Decide,
    /// Claim the key (rule 3); `order_free` is what the decide-time read saw of the order.
    Claim {
        /// The order was unlocked and unpaid at the read.
        order_free: bool,
        /// The order's version at the read.
        read_version: i64,
    },
    /// Take an expired lease over.
    TakeOver,
    /// Ask the provider by key (rule 5, or a webhook's check).
    Lookup(Claim, bool),
    /// Call the provider's charge.
    Drive(Claim),
    /// Write the outcome (rule 4).
    Settle(Claim, Outcome),
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
    Busy(Origin, Step),
}

/// One stored attempt slot.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The attempt.
    pub record: Record,
    /// The lease token of whoever holds the lease.
    pub token: Option<String>,
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
    /// Server instances.
    pub inst: [Inst; 2],
    /// The network, as a multiset.
    pub net: Vec<Msg>,
    /// Keys minted.
    pub minted: u8,
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
        PayEnd::Final(SdkFinal::Paid { payment }) => Some(Told::Paid(payment.charge_id.clone())),
        PayEnd::Final(SdkFinal::Declined { .. }) => Some(Told::Declined),
        PayEnd::Final(SdkFinal::Cancelled) => Some(Told::Cancelled),
        PayEnd::Final(SdkFinal::OrderChanged { .. }) => Some(Told::OrderChanged),
        _ => None,
    }
}

impl Model {
    /// The initial state: nothing paid, nothing stored, the order at version 1.
    pub fn init(&self) -> State {
        State {
            now: 1_000_000,
            tabs: [tab0(), tab0()],
            slots: BTreeMap::new(),
            order: OrderRow {
                id: ORDER.into(),
                version: 1,
                active: None,
                paid: false,
            },
            ledger: BTreeMap::new(),
            webhooks: Vec::new(),
            inst: [Inst::Idle, Inst::Idle],
            net: Vec::new(),
            minted: 0,
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
                Inst::Busy(_, step) => {
                    let choices: &[u8] = match step {
                        Step::Drive(_) if faults && s.left.provider_faults > 0 => &[0, 1, 2, 3],
                        Step::Drive(_) => &[0, 1],
                        Step::Lookup(..) if faults && s.left.provider_faults > 0 => &[0, 3],
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
                                if p.locked_until.is_none_or(|u| u <= s.now) {
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
                match slot_of_pk(&s, &pk)
                    .and_then(|sl| srv::claim_of(&sl.record, "provider-webhook", "webhook".into()))
                {
                    Some(claim) => {
                        s.inst[*inst as usize] =
                            Inst::Busy(Origin::Webhook(pk), Step::Lookup(claim, true));
                    }
                    None => ack(&mut s, &pk), // nothing processing for it: no effect
                }
            }
            Action::Redeliver(pk) => {
                s.left.redeliveries -= 1;
                push_sorted(&mut s.webhooks, pk.clone());
            }
            Action::Job { inst, key } => {
                s.left.jobs = s.left.jobs.saturating_sub(1);
                s.inst[*inst as usize] = Inst::Busy(Origin::Job(key.clone()), Step::TakeOver);
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
                    tab.refused = matches!(end, PayEnd::Failed(_));
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
                s.inst[inst] = Inst::Busy(
                    Origin::Pay {
                        tab,
                        page,
                        seq,
                        key,
                        version,
                    },
                    Step::Decide,
                );
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

    /// The cancel handler (crates/server/src/cancel.rs), one transaction.
    fn cancel(&self, s: &mut State, key: &str) -> (u16, String) {
        let policy = srv::policy(TICK_MS);
        match s.slots.get(key) {
            // The tombstone insert and the order read are one transaction: on a paid order
            // it is rolled back, the provider decides, and a tombstone follows if the key
            // never charged (the model takes the three steps as one: the paid order refuses
            // the key's claims in between).
            None if s.order.paid && srv::cancel_asks_provider(self.flaw) => {
                let k = IdempotencyKey::parse(key).expect("model keys are valid");
                let lookup = match s.ledger.get(&srv::provider_key(USER, &k)) {
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

    /// One step of a busy instance.
    fn step(&self, s: &mut State, inst: usize, choice: u8) {
        let Inst::Busy(origin, step) = std::mem::replace(&mut s.inst[inst], Inst::Idle) else {
            return;
        };
        let policy = srv::policy(TICK_MS);
        let now = s.now;
        let next: Option<Step> = match step {
            Step::Decide => {
                let Origin::Pay { key, version, .. } = &origin else {
                    unreachable!("decide is a pay step")
                };
                let record = s.slots.get(key).map(|sl| &sl.record);
                match srv::decide(record, USER, &s.order, *version, METHOD, now) {
                    NextAction::StartProcessing => Some(Step::Claim {
                        order_free: s.order.active.is_none() && !s.order.paid,
                        read_version: s.order.version,
                    }),
                    NextAction::Replay(answer) => {
                        let others: Vec<&srv::Final> = s
                            .slots
                            .iter()
                            .filter(|(k, _)| *k != key)
                            .filter_map(|(_, sl)| match &sl.record {
                                Record::Final(f) => Some(f),
                                _ => None,
                            })
                            .collect();
                        let sent = srv::replay_answer(self.flaw, &answer, &others).clone();
                        self.answer(s, &origin, sent, true);
                        None
                    }
                    NextAction::Mismatch(st) => {
                        let p =
                            srv::problem(ErrorCode::KeyReusedWithDifferentDetails, Some(st), None);
                        self.answer(s, &origin, srv::problem_answer(&p), false);
                        None
                    }
                    NextAction::Cancelled => {
                        let p = srv::problem(
                            ErrorCode::AttemptCancelled,
                            Some(AttemptStatus::Cancelled),
                            None,
                        );
                        self.answer(s, &origin, srv::problem_answer(&p), false);
                        None
                    }
                    NextAction::Wait | NextAction::InProgress => {
                        let p = srv::problem(
                            ErrorCode::InProgress,
                            Some(AttemptStatus::Processing),
                            Some(1),
                        );
                        self.answer(s, &origin, srv::problem_answer(&p), false);
                        None
                    }
                    NextAction::Reconcile => Some(Step::TakeOver),
                }
            }
            Step::Claim {
                order_free,
                read_version,
            } => {
                let Origin::Pay { key, version, .. } = &origin else {
                    unreachable!("claim is a pay step")
                };
                let k = IdempotencyKey::parse(key).expect("model keys are valid");
                let read = OrderRow {
                    version: read_version,
                    ..s.order.clone()
                };
                match srv::plan_claim(
                    USER,
                    &k,
                    &read,
                    *version,
                    METHOD,
                    format!("lease_{}_{now}", &key[24..]),
                    now,
                    &policy,
                ) {
                    Err(p) => {
                        self.answer(s, &origin, srv::problem_answer(&p), false);
                        None
                    }
                    Ok(claim) => {
                        let (slot_free, order_ok) = if srv::claim_is_atomic(self.flaw) {
                            let one_processing = s.slots.values().any(|sl| {
                                matches!(&sl.record, Record::Processing(p) if p.terms.order_id == s.order.id)
                            });
                            (
                                !s.slots.contains_key(key),
                                !one_processing
                                    && s.order.active.is_none()
                                    && !s.order.paid
                                    && s.order.version == read_version,
                            )
                        } else {
                            (true, order_free)
                        };
                        if !slot_free {
                            Some(Step::Decide) // our slot was taken: decide again
                        } else if !order_ok {
                            let p = srv::order_conflict(s.order.version, read_version);
                            self.answer(s, &origin, srv::problem_answer(&p), false);
                            None
                        } else {
                            s.order.active = Some(claim.attempt.id.clone());
                            s.slots.insert(
                                key.clone(),
                                Slot {
                                    record: Record::Processing(claim.attempt.clone()),
                                    token: Some(claim.lease_token.clone()),
                                },
                            );
                            Some(Step::Drive(claim))
                        }
                    }
                }
            }
            Step::TakeOver => {
                let key = match &origin {
                    Origin::Pay { key, .. } | Origin::Job(key) => key.clone(),
                    Origin::Webhook(_) => unreachable!("webhooks never take a lease"),
                };
                let token = format!("lease_{}_{now}", &key[24..]);
                match s.slots.get_mut(&key) {
                    Some(slot) => match &mut slot.record {
                        Record::Processing(p) if p.locked_until.is_none_or(|u| u <= now) => {
                            p.locked_until = Some(policy.lease_until(now));
                            slot.token = Some(token.clone());
                            let mut claim =
                                srv::claim_of(&slot.record, USER, token).expect("processing");
                            if srv::take_over_asks_provider(self.flaw) {
                                Some(Step::Lookup(claim, false))
                            } else {
                                claim.attempt.provider_key =
                                    srv::recharge_key(&claim.attempt.provider_key);
                                Some(Step::Drive(claim))
                            }
                        }
                        _ => again(&origin),
                    },
                    None => again(&origin),
                }
            }
            Step::Lookup(claim, from_webhook) => {
                let lookup = if choice == 3 {
                    s.left.provider_faults -= 1;
                    Lookup::Unknown("provider down".into())
                } else {
                    match s.ledger.get(&claim.attempt.provider_key) {
                        Some(c) => Lookup::Found(c.clone()),
                        None => Lookup::NotFound,
                    }
                };
                if from_webhook {
                    let Origin::Webhook(pk) = &origin else {
                        unreachable!()
                    };
                    match srv::webhook(lookup) {
                        Some(Some(outcome)) => Some(Step::Settle(claim, outcome)),
                        Some(None) => {
                            ack(s, &pk.clone());
                            None
                        }
                        None => None, // not acknowledged: delivered again
                    }
                } else {
                    match srv::reconcile(lookup) {
                        Ok(outcome) => Some(Step::Settle(claim, outcome)),
                        Err(_redrive) => Some(Step::Drive(claim)),
                    }
                }
            }
            Step::Drive(claim) => {
                let pk = claim.attempt.provider_key.clone();
                let outcome = if choice == 3 {
                    s.left.provider_faults -= 1;
                    Outcome::Unknown("provider down".into())
                } else {
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
                            amount: claim.attempt.terms.amount,
                            currency: claim.attempt.terms.currency.clone(),
                            payment_method_id: claim.attempt.payment_method_id.clone(),
                            order_id: claim.attempt.terms.order_id.clone(),
                            status: if choice == 1 {
                                ChargeStatus::Declined
                            } else {
                                ChargeStatus::Succeeded
                            },
                            created_at: now,
                            next_action_url: None,
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
                };
                Some(Step::Settle(claim, outcome))
            }
            Step::Settle(claim, outcome) => {
                let a = &claim.attempt;
                let key = s
                    .slots
                    .iter()
                    .find(|(_, sl)| sl.record.id() == a.id)
                    .map(|(k, _)| k.clone());
                let processing = key
                    .as_ref()
                    .is_some_and(|k| matches!(s.slots[k].record, Record::Processing(_)));
                match srv::plan_settle(&claim, outcome, now, &policy) {
                    // (No model charge requires action; the shell treats both alike.)
                    srv::SettlePlan::Unknown { answer }
                    | srv::SettlePlan::ActionRequired { answer } => {
                        if let Some(k) = &key {
                            let slot = s.slots.get_mut(k).expect("found");
                            if slot.token.as_deref() == Some(claim.lease_token.as_str()) {
                                if let Record::Processing(p) = &mut slot.record {
                                    p.locked_until = None;
                                }
                                slot.token = None;
                            }
                        }
                        if processing {
                            self.answer(s, &origin, answer, false);
                            None
                        } else {
                            done_webhook(s, &origin);
                            again(&origin) // a webhook settled it meanwhile
                        }
                    }
                    plan if !processing => {
                        let _ = plan;
                        done_webhook(s, &origin);
                        again(&origin) // lost the conditional finish: look again
                    }
                    srv::SettlePlan::Charged { finish, .. }
                    | srv::SettlePlan::Uncharged { finish, .. } => {
                        let charged = finish.charge_id.is_some();
                        let k = key.expect("processing");
                        if charged {
                            if s.order.active.as_deref() != Some(a.id.as_str()) || s.order.paid {
                                s.flags.lost_order_lock = true;
                                return; // rolled back (an internal error): stays processing
                            }
                            s.order.paid = true;
                            s.order.active = None;
                        } else if s.order.active.as_deref() == Some(a.id.as_str()) {
                            s.order.active = None;
                        }
                        let answer = finish.answer.clone();
                        s.slots.insert(
                            k,
                            Slot {
                                record: Record::Final(srv::Final {
                                    id: a.id.clone(),
                                    terms: a.terms.clone(),
                                    status: finish.status,
                                    answer: finish.answer,
                                    expires_at: finish.expires_at,
                                }),
                                token: None,
                            },
                        );
                        if let Origin::Webhook(pk) = &origin {
                            ack(s, &pk.clone());
                        }
                        self.answer(s, &origin, answer, false);
                        None
                    }
                }
            }
        };
        if let Some(step) = next {
            s.inst[inst] = Inst::Busy(origin, step);
        }
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

/// A webhook whose attempt someone else settled is handled: acknowledge it.
fn done_webhook(s: &mut State, origin: &Origin) {
    if let Origin::Webhook(pk) = origin {
        ack(s, &pk.clone());
    }
}

/// A pay request decides again; a job or webhook is done.
fn again(origin: &Origin) -> Option<Step> {
    matches!(origin, Origin::Pay { .. }).then_some(Step::Decide)
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
    Some(srv::provider_key(USER, &IdempotencyKey::parse(k).ok()?))
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

fn push_sorted(v: &mut Vec<String>, x: String) {
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
