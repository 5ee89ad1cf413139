//! The checker: an exhaustive breadth-first search over [`State`]s, deduplicated by a
//! 64-bit fingerprint of each state's full `Debug` rendering, with every invariant checked
//! in every state, a bounded liveness check, and the shortest counterexample as a numbered
//! trace. Why not `stateright`: see docs/model.md.

use crate::model::{Action, Inst, Model, Msg, State, Told, USER};
use crate::server::{provider_key, Record};
use payonce_protocol::provider::ChargeStatus;
use payonce_protocol::{AttemptStatus, IdempotencyKey};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::hash::Hasher;

/// The safety invariants, by name.
pub const INVARIANTS: [&str; 9] = [
    "at most one successful charge per order",
    "no charge for an attempt after its tombstone",
    "told paid only if the ledger has the charge",
    "told declined/cancelled/changed only if the attempt has no charge",
    "a key leaves storage only after a final answer",
    "a replayed answer equals the stored one",
    "a settle holds its order's lock",
    "a charge's amount and order version are those confirmed with its key",
    "every succeeded provider payment is the order's payment, in flight, or flagged",
];

/// The liveness property (bounded form).
pub const LIVENESS: &str =
    "once faults stop, every processing attempt becomes final and every tab learns the outcome";

/// The invariants `s` breaks.
pub fn violations(s: &State) -> Vec<&'static str> {
    let mut v = Vec::new();
    let succeeded = |pk: &str| {
        s.ledger
            .values()
            .any(|c| c.provider_key.starts_with(pk) && c.status == ChargeStatus::Succeeded)
    };
    let pk_of = |k: &str| {
        IdempotencyKey::parse(k)
            .map(|k| provider_key(USER, &k, &s.order.id))
            .unwrap_or_default()
    };
    let per_order = s
        .ledger
        .values()
        .filter(|c| c.order_id == s.order.id && c.status == ChargeStatus::Succeeded)
        .count();
    if per_order > 1 {
        v.push(INVARIANTS[0]);
    }
    if s.flags.charge_after_tombstone {
        v.push(INVARIANTS[1]);
    }
    let mut paid_bad = false;
    let mut unpaid_bad = false;
    for tab in &s.tabs {
        for (k, told) in &tab.told {
            match told {
                Told::Paid(id) => {
                    paid_bad |= !s
                        .ledger
                        .values()
                        .any(|c| &c.id == id && c.status == ChargeStatus::Succeeded)
                }
                _ => unpaid_bad |= succeeded(&pk_of(k)),
            }
        }
    }
    if paid_bad {
        v.push(INVARIANTS[2]);
    }
    if unpaid_bad {
        v.push(INVARIANTS[3]);
    }
    if s.flags.removed_without_final {
        v.push(INVARIANTS[4]);
    }
    if s.flags.replay_differs {
        v.push(INVARIANTS[5]);
    }
    if s.flags.lost_order_lock {
        v.push(INVARIANTS[6]);
    }
    if s.flags.charge_other_terms {
        v.push(INVARIANTS[7]);
    }
    // A succeeded payment whose attempt ended without a charge, and is not flagged: money
    // the order does not know of (a processing attempt's is in flight; a paid one's is the
    // order's payment).
    let stray = s
        .ledger
        .values()
        .filter(|c| c.status == ChargeStatus::Succeeded)
        .any(|c| {
            s.slots.iter().any(|(k, sl)| {
                pk_of(k) == c.provider_key
                    && matches!(&sl.record, Record::Final(f)
                        if !matches!(f.status, AttemptStatus::Succeeded | AttemptStatus::Refunded)
                            && !s.flagged.contains(&f.id))
            })
        });
    if stray {
        v.push(INVARIANTS[8]);
    }
    v
}

struct HashWriter(DefaultHasher);
impl std::fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// A state's fingerprint. The two server instances are interchangeable (same code, same
/// store), so a state and its mirror image with the instances swapped share one.
pub fn fingerprint(s: &State) -> u64 {
    let mut w = HashWriter(DefaultHasher::new());
    let mut inst = [format!("{:?}", s.inst[0]), format!("{:?}", s.inst[1])];
    inst.sort();
    let _ = write!(
        w,
        "{:?}{:?}{:?}{:?}{:?}{:?}{inst:?}{:?}{}{:?}{:?}{:?}{:?}{}",
        s.now,
        s.tabs,
        s.slots,
        s.order,
        s.ledger,
        s.webhooks,
        s.net,
        s.minted,
        s.left,
        s.flags,
        s.intents,
        s.flagged,
        s.held
    );
    w.0.finish()
}

/// How a search ended.
#[derive(Debug)]
pub struct Report {
    /// Distinct states reached.
    pub states: usize,
    /// Transitions taken.
    pub transitions: usize,
    /// Deepest level reached.
    pub depth: usize,
    /// The search covered every reachable state (no bound was reached).
    pub complete: bool,
    /// The state limit stopped it (else every state up to `depth` was explored).
    pub capped: bool,
    /// States the liveness run started from.
    pub liveness_runs: usize,
    /// The first violation: its name and the shortest trace to it.
    pub violation: Option<(String, Vec<Action>)>,
}

/// Options of a search.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// Stop after this many levels.
    pub max_depth: usize,
    /// Stop after this many states (the search is then incomplete).
    pub max_states: usize,
    /// Run the liveness check from every `n`-th state (by fingerprint); 0: never.
    pub liveness_every: u64,
    /// Steps a healthy run may take to finish.
    pub liveness_steps: usize,
}

/// Explores `model` breadth first.
pub fn run(model: &Model, opts: Search) -> Report {
    let init = model.init();
    let f0 = fingerprint(&init);
    // fingerprint -> (parent fingerprint, action from the parent)
    let mut seen: HashMap<u64, Option<(u64, Action)>> = HashMap::new();
    seen.insert(f0, None);
    let mut frontier = VecDeque::from([(init, f0, 0usize)]);
    let mut report = Report {
        states: 1,
        transitions: 0,
        depth: 0,
        complete: true,
        capped: false,
        liveness_runs: 0,
        violation: None,
    };
    let trace = |seen: &HashMap<u64, Option<(u64, Action)>>, mut f: u64| {
        let mut acts = Vec::new();
        while let Some(Some((p, a))) = seen.get(&f) {
            acts.push(a.clone());
            f = *p;
        }
        acts.reverse();
        acts
    };
    let mut acts = Vec::new();
    while let Some((s, f, d)) = frontier.pop_front() {
        report.depth = report.depth.max(d);
        if let Some(bad) = violations(&s).first() {
            report.violation = Some((bad.to_string(), trace(&seen, f)));
            return report;
        }
        if opts.liveness_every > 0 && f % opts.liveness_every == 0 {
            report.liveness_runs += 1;
            if let Err(why) = healthy_run(model, &s, opts.liveness_steps) {
                let mut t = trace(&seen, f);
                t.extend(why.1);
                report.violation = Some((format!("{LIVENESS}: {}", why.0), t));
                return report;
            }
        }
        if d >= opts.max_depth {
            report.complete = false;
            continue;
        }
        acts.clear();
        model.actions(&s, true, &mut acts);
        for a in &acts {
            let Some(n) = model.next(&s, a) else { continue };
            report.transitions += 1;
            let nf = fingerprint(&n);
            if seen.contains_key(&nf) {
                continue;
            }
            seen.insert(nf, Some((f, a.clone())));
            report.states += 1;
            if report.states >= opts.max_states {
                report.complete = false;
                report.capped = true;
                frontier.clear();
                break;
            }
            frontier.push_back((n, nf, d + 1));
        }
    }
    report
}

/// Whether `s` is done: nothing processing, nobody working, nothing in flight, every tab
/// settled with its storage empty.
pub fn settled(s: &State) -> bool {
    !s.slots
        .values()
        .any(|sl| matches!(sl.record, Record::Processing(_)))
        && s.inst.iter().all(|i| matches!(i, Inst::Idle))
        && s.net.is_empty()
        && s.tabs
            .iter()
            .all(|t| t.flow.is_none() && t.storage.is_none() && t.cancelling.is_none())
}

/// From `s`, lets the system run without faults (no crash, loss, duplicate, provider
/// fault), the customer resuming or cancelling what storage holds, the clock advancing
/// when nothing else can; it must settle within `steps`, every tab that held a key being
/// told that key's outcome, and break no invariant on the way.
pub fn healthy_run(model: &Model, s: &State, steps: usize) -> Result<(), (String, Vec<Action>)> {
    let held: Vec<Vec<String>> = s
        .tabs
        .iter()
        .map(|t| {
            t.storage
                .iter()
                .map(|a| a.key.as_str().to_owned())
                .chain(t.flow.iter().map(|f| f.attempt().key.as_str().to_owned()))
                .collect()
        })
        .collect();
    let mut s = s.clone();
    let mut path = Vec::new();
    let mut acts = Vec::new();
    for _ in 0..steps {
        if let Some(bad) = violations(&s).first() {
            return Err((format!("broke \"{bad}\""), path));
        }
        if settled(&s) {
            for (t, keys) in held.iter().enumerate() {
                for k in keys {
                    if !s.tabs[t].told.iter().any(|(tk, _)| tk == k) {
                        return Err((format!("tab {t} never learnt the outcome of {k}"), path));
                    }
                }
            }
            return Ok(());
        }
        acts.clear();
        model.actions(&s, false, &mut acts);
        let lease_held = s.slots.values().any(|sl| {
            matches!(&sl.record, Record::Processing(p) if p.locked_until.is_some_and(|u| u > s.now))
        });
        let in_flight = |t: u8| {
            s.net.iter().any(|m| matches!(m, Msg::Pay { tab, .. } | Msg::PayReply { tab, .. } if *tab == t))
                || s.inst.iter().any(|i| matches!(i, Inst::Busy(crate::model::Origin::Pay { tab, .. }, _) if *tab == t))
        };
        let cancel_in_flight = |t: u8| {
            s.net.iter().any(|m| matches!(m, Msg::Cancel { tab, .. } | Msg::CancelReply { tab, .. } if *tab == t))
        };
        // A payment waiting for the customer: resuming only asks again; a healthy customer
        // who does not act lets the clock run to the attempt's deadline.
        let waits_for_customer = s
            .ledger
            .values()
            .any(|c| c.status == ChargeStatus::RequiresAction);
        let rank = |a: &Action| -> u8 {
            match a {
                Action::Step { choice: 0, .. } => 0,
                Action::Deliver { .. } => 1,
                Action::Webhook { .. } => 2,
                Action::Job { .. } => 3,
                Action::Waited(_) => 4,
                Action::Timeout(t) if !in_flight(*t) => 5,
                Action::CancelTimeout(t) if !cancel_in_flight(*t) => 5,
                Action::Tick if lease_held => 6,
                Action::Click(t)
                    if s.tabs[*t as usize].storage.is_some()
                        && !s.tabs[*t as usize].refused
                        && !waits_for_customer =>
                {
                    7
                }
                Action::CancelClick(_) if !waits_for_customer => 8,
                Action::Tick => 9,
                _ => u8::MAX,
            }
        };
        let mut best: Option<(u8, State, Action)> = None;
        for a in &acts {
            let r = rank(a);
            if r == u8::MAX || best.as_ref().is_some_and(|b| b.0 <= r) {
                continue;
            }
            if let Some(n) = model.next(&s, a) {
                best = Some((r, n, a.clone()));
            }
        }
        let Some((_, n, a)) = best else {
            return Err(("stuck: no healthy step is enabled".into(), path));
        };
        path.push(a);
        s = n;
    }
    Err((format!("not settled after {steps} healthy steps"), path))
}

/// The trace of `actions` from the initial state: one numbered line per step, with the
/// actor, the message or step, and what changed.
pub fn render(model: &Model, actions: &[Action]) -> String {
    let mut out = String::new();
    let mut s = model.init();
    for (i, a) in actions.iter().enumerate() {
        let Some(n) = model.next(&s, a) else {
            let _ = writeln!(
                out,
                "{:>3}. {a:?}: not enabled (trace does not replay)",
                i + 1
            );
            break;
        };
        let _ = writeln!(out, "{:>3}. {:<10} {}", i + 1, actor(a), describe(&s, a));
        for change in changes(&s, &n) {
            let _ = writeln!(out, "       {change}");
        }
        s = n;
    }
    let bad = violations(&s);
    let _ = writeln!(out, "     violated: {bad:?}");
    out
}

fn actor(a: &Action) -> String {
    match a {
        Action::Click(t)
        | Action::CancelClick(t)
        | Action::Waited(t)
        | Action::Timeout(t)
        | Action::CancelTimeout(t)
        | Action::Reload(t)
        | Action::CartChange(t) => format!("tab {t}"),
        Action::DuplicateTab => "browser".into(),
        Action::Deliver { .. } => "network".into(),
        Action::Step { inst, .. } | Action::Crash(inst) => format!("server {inst}"),
        Action::Webhook { .. } | Action::Redeliver(_) => "provider".into(),
        Action::OutsideConfirm(_) | Action::Authenticate { .. } => "customer".into(),
        Action::Job { inst, .. } => format!("job@{inst}"),
        Action::Expire => "retention".into(),
        Action::Tick => "clock".into(),
    }
}

fn short(k: &str) -> String {
    k.get(24..)
        .map(|x| format!("K{}", x.trim_start_matches('0')))
        .unwrap_or_else(|| k.into())
}

fn msg(m: &Msg) -> String {
    match m {
        Msg::Pay {
            tab,
            seq,
            key,
            version,
            ..
        } => format!("pay {} v{version} (tab {tab} send {seq})", short(key)),
        Msg::Cancel { tab, key, .. } => format!("cancel {} (tab {tab})", short(key)),
        Msg::PayReply {
            tab,
            key,
            status,
            body,
            ..
        } => {
            format!(
                "{status} for {} to tab {tab}: {}",
                short(key),
                body.chars().take(90).collect::<String>()
            )
        }
        Msg::CancelReply {
            tab,
            key,
            status,
            body,
            ..
        } => {
            format!("cancel {status} for {} to tab {tab}: {body}", short(key))
        }
    }
}

fn describe(s: &State, a: &Action) -> String {
    match a {
        Action::Deliver { i, inst, dup } => {
            let to = match &s.net[*i] {
                Msg::Pay { .. } | Msg::Cancel { .. } => format!(" -> server {inst}"),
                _ => String::new(),
            };
            format!(
                "delivers{} {}{to}",
                if *dup { " (and keeps a copy)" } else { "" },
                msg(&s.net[*i])
            )
        }
        Action::Step { inst, choice } => {
            let what = match &s.inst[*inst as usize] {
                Inst::Busy(_, w) => w.flow.next_step().to_owned(),
                Inst::Idle => "idle".into(),
            };
            let provider = [
                "",
                " (provider declines)",
                " (provider charges, answer lost)",
                " (provider down)",
                " (provider asks the customer to act: 3-D Secure)",
            ];
            format!("step {what}{}", provider[*choice as usize])
        }
        Action::Webhook { i, .. } => format!("delivers the webhook for {}", &s.webhooks[*i][..11]),
        Action::Job { key, .. } => format!("takes the abandoned attempt of {}", short(key)),
        other => format!("{other:?}"),
    }
}

fn changes(a: &State, b: &State) -> Vec<String> {
    let mut out = Vec::new();
    for (k, sl) in &b.slots {
        let before = a.slots.get(k).map(|x| format!("{:?}", x.record));
        if before.as_deref() != Some(&format!("{:?}", sl.record)) {
            let what = match &sl.record {
                Record::Processing(p) => format!("processing (lease until {:?})", p.locked_until),
                Record::Final(f) => format!("{} answer {}", f.status.as_str(), f.answer.status),
                Record::Tombstone(_) => "tombstone".into(),
            };
            out.push(format!("store: {} = {what}", short(k)));
        }
    }
    for k in a.slots.keys() {
        if !b.slots.contains_key(k) {
            out.push(format!("store: {} deleted (retention)", short(k)));
        }
    }
    if a.order != b.order {
        out.push(format!(
            "order: v{} active={:?} paid={}",
            b.order.version, b.order.active, b.order.paid
        ));
    }
    for (pk, c) in &b.ledger {
        if !a.ledger.contains_key(pk) {
            out.push(format!(
                "provider ledger: + {} {:?} for {}",
                c.id, c.status, c.order_id
            ));
        }
    }
    for t in 0..2 {
        let (x, y) = (&a.tabs[t], &b.tabs[t]);
        if x.storage.as_ref().map(|a| &a.key) != y.storage.as_ref().map(|a| &a.key) {
            out.push(format!(
                "tab {t} sessionStorage: {}",
                y.storage
                    .as_ref()
                    .map(|a| short(a.key.as_str()))
                    .unwrap_or_else(|| "empty".into())
            ));
        }
        for (k, told) in y.told.iter().skip(x.told.len()) {
            out.push(format!(
                "tab {t} tells the customer: {told:?} ({})",
                short(k)
            ));
        }
    }
    for m in &b.net {
        if a.net.iter().filter(|x| *x == m).count() < b.net.iter().filter(|x| *x == m).count() {
            out.push(format!("network: + {}", msg(m)));
        }
    }
    out
}
