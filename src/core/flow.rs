//! The pay loop as a sans-IO state machine: no clock, no storage, no network, no randomness
//! of its own. The caller feeds it what happened (an answer, a wait that ended, the network
//! coming back) together with the current time, and performs the [`Effect`]s it asks for, in
//! order, until [`Effect::Done`]. The browser layer (`src/web/mod.rs`), the chaos customers
//! (`crates/chaos`) and the retry-storm simulation (`crates/sim`) all drive this one loop, and
//! the property tests (`src/core/properties.rs`) drive it with arbitrary answers and times.
//!
//! ```text
//! start ─▶ [Warn] [Save new] Remind ─▶ ready ──online──▶ Save(sent) [Status] Send ─▶ awaiting
//!              ▲                        │ offline                                     │ answer
//!              │                        ▼                                             ▼
//!              │                  Status WaitOnline ── back ──▶ ready        Save | Remove
//!              │                        └── not back ──▶ Done(pending)              │
//!              └──────────── waited ◀── Status Wait ◀── retry ───────────────────────┤
//!                                                                final / refused ─▶ Done
//! ```
//!
//! The rules it composes live next to it: which key ([`crate::core::attempt::plan_pay`]), what
//! an answer means ([`crate::core::classify::classify_pay`]), when a key is dropped
//! ([`crate::core::attempt::after_verdict`]), and how long to wait ([`Schedule`]).

use crate::core::attempt::{after_verdict, plan_pay, released, Attempt, Entry, PayPlan};
use crate::core::classify::{classify_pay_for, Final, Reply, RetryCause, Verdict};
use crate::core::error::{SdkError, TransportStep, Warning};
use crate::core::retry::{Jitter, Next, PendingReason, RetryBudget, RetryPolicy, Schedule};
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey, PayResponse};
use std::collections::VecDeque;

/// What `onStatus` hears while a pay call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayStatus {
    /// A request is on its way, or the server reported the attempt in progress.
    Processing,
    /// The last request ended without a usable answer; asking again with the same key.
    CheckingStatus,
    /// The call has run longer than `longWaitMs`.
    TakingLonger,
    /// The browser is offline; nothing is sent until it is back.
    WaitingForNetwork,
    /// Another tab is paying this order: this call waits for it, then adopts its attempt.
    WaitingForOtherTab,
}

impl PayStatus {
    /// The `PayStatus` string of the JavaScript API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::CheckingStatus => "checkingStatus",
            Self::TakingLonger => "takingLonger",
            Self::WaitingForNetwork => "waitingForNetwork",
            Self::WaitingForOtherTab => "waitingForOtherTab",
        }
    }
}

/// How a pay call ended. The key is kept unless the end is [`PayEnd::Final`] (and
/// [`PayEnd::Busy`] hands it to a cancel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayEnd {
    /// A final answer: the key was removed.
    Final(Final),
    /// The customer must act first (3-D Secure); the key is kept, and `pay` or `resume` with
    /// the same checkout finishes the attempt afterwards.
    ActionRequired,
    /// Another attempt holds the order (`PAYMENT_ALREADY_ACTIVE`) and this key was refused,
    /// kept for now: the driver tombstones it with a cancel (a delayed copy of it can then
    /// never charge; the cancel's outcome removes it) and reports `busy`, so no later call
    /// resends a refused key.
    Busy,
    /// The call fails with this error; the key is kept.
    Failed(SdkError),
    /// The call stopped asking while the outcome is open; the key is kept.
    Pending(PendingReason),
}

/// Something the driver must do for the flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Tell the app (`onWarning`).
    Warn(Warning),
    /// Store the attempt. `new`: it was just minted (write it); otherwise write it back only
    /// while storage still holds the same key (a cancel elsewhere may have removed it).
    Save {
        /// The record to write.
        attempt: Attempt,
        /// Just minted.
        new: bool,
    },
    /// Remove the order's stored attempt if it still holds this key.
    Remove(IdempotencyKey),
    /// Tell the app (`onStatus`). Only a change is handed out: never the same status twice
    /// in a row.
    Status(PayStatus),
    /// Tell the app `status` after `after_ms`, unless the call is over by then.
    Remind {
        /// Milliseconds from now.
        after_ms: u64,
        /// What to say.
        status: PayStatus,
    },
    /// Send the pay request of [`PayFlow::attempt`] (its key and snapshot) and report the
    /// answer with [`PayFlow::on_reply`].
    Send {
        /// How many requests this call has sent, this one included (1 for the first).
        attempt: u32,
    },
    /// Wait, then report [`PayFlow::on_waited`].
    Wait {
        /// Milliseconds.
        ms: u64,
        /// Why another request follows.
        why: RetryCause,
    },
    /// Wait for the network, at most `max_ms`, then report [`PayFlow::on_network`].
    WaitOnline {
        /// The longest wait (what is left before the deadline).
        max_ms: u64,
    },
    /// The call is over.
    Done(PayEnd),
}

/// The settings of one pay call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowConfig {
    /// Backoff, attempts, `Retry-After` cap, budget shape.
    pub policy: RetryPolicy,
    /// Total time the call keeps asking.
    pub deadline_ms: u64,
    /// When the app hears `takingLonger`.
    pub long_wait_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The next request may leave (after an offline check unless `checked`).
    Ready { checked: bool },
    /// Waiting for the driver's input (an answer, a wait, the network).
    Blocked,
    /// [`Effect::Done`] was handed out.
    Over,
}

/// One pay call's loop. See the module documentation.
#[derive(Debug, Clone)]
pub struct PayFlow {
    attempt: Attempt,
    schedule: Schedule,
    phase: Phase,
    sends: u32,
    /// The attempt as it was before the last send: what storage gets back if that request
    /// never left ([`PayFlow::on_not_sent`]).
    before_send: Attempt,
    /// This call minted the key (nothing was stored for the order before it).
    minted: bool,
    /// The attempt is another tab's, taken over ([`PayFlow::start_adopted`]).
    adopted: bool,
    /// True while every answer so far was a network failure (no HTTP answer, not our timeout).
    network_failures_only: bool,
    /// The last status handed out: `onStatus` hears a status only when it changes.
    last_status: Option<PayStatus>,
    out: VecDeque<Effect>,
}

impl PayFlow {
    /// Starts a pay call for `checkout`, given what storage holds for its order. `mint` gives
    /// a fresh key; it is called only when the plan is to mint one. Fails (nothing to do, the
    /// stored attempt untouched) when the order has an unresolved attempt with other details
    /// or a damaged one that still names a key.
    pub fn start(
        entry: &Entry,
        checkout: CheckoutSnapshot,
        config: FlowConfig,
        now_ms: f64,
        mint: impl FnOnce() -> Option<IdempotencyKey>,
    ) -> Result<Self, SdkError> {
        let mut out = VecDeque::new();
        let mut minted = false;
        let attempt = match plan_pay(entry, &checkout) {
            PayPlan::Reuse(a) => a,
            PayPlan::Conflict { .. } => return Err(SdkError::SnapshotConflict),
            PayPlan::ResolveUnreadable => return Err(SdkError::UnreadableAttempt),
            PayPlan::Mint {
                replaces_unreadable,
            } => {
                if replaces_unreadable {
                    out.push_back(Effect::Warn(Warning::UnreadableEntry));
                }
                let key = mint().ok_or(SdkError::Unsupported("no usable random key"))?;
                minted = true;
                let a = Attempt::new(key, checkout, now_ms.max(0.0) as u64);
                // Saved BEFORE the request leaves: a crash or reload from here on leaves the
                // key behind for the next Pay.
                out.push_back(Effect::Save {
                    attempt: a.clone(),
                    new: true,
                });
                a
            }
        };
        Ok(Self::begin(attempt, minted, out, config, now_ms))
    }

    /// Starts a pay call on another tab's attempt ([`crate::core::attempt::adopt`]): saved
    /// first as this tab's own, so a reload here resumes it, then sent with its key.
    pub fn start_adopted(attempt: Attempt, config: FlowConfig, now_ms: f64) -> Self {
        let out = VecDeque::from([Effect::Save {
            attempt: attempt.clone(),
            new: true,
        }]);
        // Saved by this call: a request that never leaves takes it out again, as `start`'s
        // minted key.
        let mut flow = Self::begin(attempt, true, out, config, now_ms);
        flow.adopted = true;
        flow
    }

    fn begin(
        attempt: Attempt,
        minted: bool,
        mut out: VecDeque<Effect>,
        config: FlowConfig,
        now_ms: f64,
    ) -> Self {
        out.push_back(Effect::Remind {
            after_ms: config.long_wait_ms,
            status: PayStatus::TakingLonger,
        });
        Self {
            before_send: attempt.clone(),
            minted,
            adopted: false,
            attempt,
            schedule: Schedule::new(
                config.policy,
                now_ms,
                config.deadline_ms,
                config.long_wait_ms,
            ),
            phase: Phase::Ready { checked: false },
            sends: 0,
            network_failures_only: true,
            last_status: None,
            out,
        }
    }

    /// The attempt as the flow knows it: the key and snapshot every request carries.
    pub fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    /// The next effect, or `None` while the flow waits for an input (or is over). `online`:
    /// whether the browser believes it has a network (`navigator.onLine`).
    pub fn poll(&mut self, now_ms: f64, online: bool) -> Option<Effect> {
        if let Some(e) = self.out.pop_front() {
            return Some(e);
        }
        let Phase::Ready { checked } = self.phase else {
            return None;
        };
        self.phase = Phase::Blocked;
        if !online && !checked {
            self.status(PayStatus::WaitingForNetwork);
            self.out.push_back(Effect::WaitOnline {
                max_ms: self.schedule.remaining_ms(now_ms),
            });
        } else {
            self.before_send = self.attempt.clone();
            self.attempt = self.attempt.clone().sending();
            self.sends += 1;
            self.out.push_back(Effect::Save {
                attempt: self.attempt.clone(),
                new: false,
            });
            if self.sends == 1 {
                self.status(PayStatus::Processing);
            }
            self.out.push_back(Effect::Send {
                attempt: self.sends,
            });
        }
        self.out.pop_front()
    }

    /// The answer to the last [`Effect::Send`]. `budget` is the client's retry budget (shared
    /// by its pay calls); `jitter` draws the random part of the next wait.
    pub fn on_reply(
        &mut self,
        reply: &Reply<PayResponse>,
        now_ms: f64,
        budget: &mut RetryBudget,
        jitter: &mut impl Jitter,
    ) {
        self.on_answer(reply, false, now_ms, budget, jitter);
    }

    /// [`PayFlow::on_reply`] with what the answer's headers said: `replayed` when the server
    /// replayed the stored answer of the key (`Idempotent-Replayed: true`). On an adopted
    /// attempt a replayed receipt is the other tab's charge: `paid` with `byThisAttempt: false`,
    /// so only the tab whose request charged says `true`.
    pub fn on_answer(
        &mut self,
        reply: &Reply<PayResponse>,
        replayed: bool,
        now_ms: f64,
        budget: &mut RetryBudget,
        jitter: &mut impl Jitter,
    ) {
        if self.phase == Phase::Over {
            return;
        }
        let mut verdict = classify_pay_for(reply, &self.attempt.snapshot.order_id);
        if let Verdict::Final(Final::Paid {
            by_this_attempt, ..
        }) = &mut verdict
        {
            *by_this_attempt &= !(self.adopted && replayed);
        }
        self.network_failures_only &= matches!(reply, Reply::NoAnswer { timed_out: false });
        let kept = if released(&self.before_send, &verdict) {
            None
        } else {
            after_verdict(self.attempt.clone(), &verdict)
        };
        match kept {
            None => self.out.push_back(Effect::Remove(self.attempt.key.clone())),
            Some(a) => {
                self.attempt = a;
                self.out.push_back(Effect::Save {
                    attempt: self.attempt.clone(),
                    new: false,
                });
            }
        }
        // The same network failure on the first two tries: most likely a CORS refusal or a
        // wrong URL, not a passing outage. Said now, not when the call gives up (seconds later).
        // After the save: a driver that tells the two apart ([`PayFlow::on_cors_refused`])
        // does it while handling this warning, with the attempt already stored.
        if self.network_failures_only && self.sends == 2 {
            self.out.push_back(Effect::Warn(Warning::NetworkOrCors));
        }
        let end = match verdict {
            Verdict::Final(f) => {
                budget.refill();
                PayEnd::Final(f)
            }
            Verdict::Rejected { status, code } => {
                budget.refill();
                PayEnd::Failed(SdkError::rejected(status, code))
            }
            Verdict::Mismatch { status, why } => {
                PayEnd::Failed(SdkError::ProtocolMismatch { status, why })
            }
            Verdict::ActionRequired => {
                budget.refill();
                PayEnd::ActionRequired
            }
            Verdict::Busy => {
                budget.refill();
                PayEnd::Busy
            }
            Verdict::Retry { cause, .. } => {
                match self.schedule.after(&verdict, now_ms, budget, jitter) {
                    Next::GiveUp(reason) => PayEnd::Pending(reason),
                    Next::Wait { ms } => {
                        self.status(if cause == RetryCause::InProgress {
                            PayStatus::Processing
                        } else {
                            PayStatus::CheckingStatus
                        });
                        self.out.push_back(Effect::Wait { ms, why: cause });
                        return;
                    }
                }
            }
        };
        self.finish(end);
    }

    /// The last [`Effect::Send`] never left: the app's `headers` or `fetch` threw or rejected.
    /// Retrying would fail the same way, so the call ends at once with
    /// [`SdkError::TransportFailed`], and storage gets the attempt back as it was before that
    /// send: removed if this call minted the key and nothing ever left with it, else as it was.
    pub fn on_not_sent(&mut self, step: TransportStep) {
        if self.phase == Phase::Over {
            return;
        }
        self.sends = self.sends.saturating_sub(1);
        self.attempt = self.before_send.clone();
        self.out
            .push_back(if self.minted && self.attempt.sends == 0 {
                Effect::Remove(self.attempt.key.clone())
            } else {
                Effect::Save {
                    attempt: self.attempt.clone(),
                    new: false,
                }
            });
        self.finish(PayEnd::Failed(SdkError::TransportFailed(step)));
    }

    /// The driver found the failures behind [`Warning::NetworkOrCors`] to be a CORS refusal, not
    /// a network failure: the server answers this page (in the browser, a plain GET of the
    /// same URL without credentials or headers got a readable answer) while every request
    /// failed without one. Retrying would
    /// fail the same way until the backend's CORS answer or the `credentials` option changes,
    /// so the call ends now with [`SdkError::NetworkOrCors`] instead of waiting out its
    /// retries. The key is kept (a request may have reached the server before the browser
    /// refused its answer): `resume` or `cancel` once the configuration is fixed. Called while
    /// the warning is handled; a call with no wait queued (it is giving up anyway) is left as it is.
    pub fn on_cors_refused(&mut self) {
        if self.phase != Phase::Blocked || !self.network_failures_only {
            return;
        }
        self.out
            .retain(|e| !matches!(e, Effect::Wait { .. } | Effect::Status(_)));
        self.finish(PayEnd::Failed(SdkError::NetworkOrCors));
    }

    /// The last [`Effect::Wait`] is over: the next request may leave.
    pub fn on_waited(&mut self) {
        if self.phase == Phase::Blocked {
            self.phase = Phase::Ready { checked: false };
        }
    }

    /// The last [`Effect::WaitOnline`] is over; `back`: the network came back in time.
    pub fn on_network(&mut self, back: bool) {
        if self.phase != Phase::Blocked {
            return;
        }
        if back {
            self.phase = Phase::Ready { checked: true };
        } else {
            self.finish(PayEnd::Pending(PendingReason::Deadline));
        }
    }

    /// Queues `Status(s)` unless it is the status last handed out.
    fn status(&mut self, s: PayStatus) {
        if self.last_status != Some(s) {
            self.last_status = Some(s);
            self.out.push_back(Effect::Status(s));
        }
    }

    fn finish(&mut self, end: PayEnd) {
        self.phase = Phase::Over;
        self.out.push_back(Effect::Done(end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::retry::BudgetConfig;
    use payonce_protocol::{AttemptStatus, Payment};

    fn snap() -> CheckoutSnapshot {
        CheckoutSnapshot {
            order_id: "ord_1".into(),
            order_version: 2,
            payment_method_id: "pm_card_approve".into(),
            extras: Default::default(),
        }
    }
    fn key() -> IdempotencyKey {
        IdempotencyKey::parse("6f13d95a-e6c1-4bf2-9459-99b502098dc1").unwrap()
    }
    fn config() -> FlowConfig {
        FlowConfig {
            policy: RetryPolicy::default(),
            deadline_ms: 60_000,
            long_wait_ms: 10_000,
        }
    }
    fn drain(f: &mut PayFlow, now: f64) -> Vec<Effect> {
        std::iter::from_fn(|| f.poll(now, true)).collect()
    }
    fn paid() -> Reply<PayResponse> {
        Reply::Http {
            status: 200,
            retry_after: None,
            ok: Some(PayResponse {
                status: AttemptStatus::Succeeded,
                order_id: "ord_1".into(),
                payment: Some(Payment {
                    id: "pay_1".into(),
                    order_id: "ord_1".into(),
                    amount: 1,
                    currency: "EUR".into(),
                    payment_method_id: "pm_card_approve".into(),
                    charge_id: "ch_1".into(),
                    status: AttemptStatus::Succeeded,
                }),
            }),
            problem: None,
        }
    }

    #[test]
    fn a_new_key_is_saved_before_the_first_send_and_removed_on_paid() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        let first = drain(&mut f, 0.0);
        assert!(matches!(&first[0], Effect::Save { new: true, attempt } if attempt.sends == 0));
        assert!(matches!(first.last(), Some(Effect::Send { attempt: 1 })));
        let mut budget = RetryBudget::new(BudgetConfig::default());
        f.on_reply(
            &Reply::NoAnswer { timed_out: false },
            10.0,
            &mut budget,
            &mut || 0.5,
        );
        let after = drain(&mut f, 10.0);
        assert!(
            matches!(after.last(), Some(Effect::Wait { .. })),
            "{after:?}"
        );
        assert!(!after.iter().any(|e| matches!(e, Effect::Remove(_))));
        f.on_waited();
        assert!(matches!(
            drain(&mut f, 500.0).last(),
            Some(Effect::Send { attempt: 2 })
        ));
        f.on_reply(&paid(), 600.0, &mut budget, &mut || 0.5);
        let end = drain(&mut f, 600.0);
        assert_eq!(end[0], Effect::Remove(key()));
        assert!(matches!(
            &end[1],
            Effect::Done(PayEnd::Final(Final::Paid { .. }))
        ));
        assert_eq!(f.poll(700.0, true), None, "over");
    }

    #[test]
    fn offline_waits_for_the_network_before_sending_and_gives_up_if_it_stays_away() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        let effects: Vec<_> = std::iter::from_fn(|| f.poll(0.0, false)).collect();
        assert!(effects.contains(&Effect::Status(PayStatus::WaitingForNetwork)));
        assert_eq!(effects.last(), Some(&Effect::WaitOnline { max_ms: 60_000 }));
        assert!(!effects.iter().any(|e| matches!(e, Effect::Send { .. })));
        f.on_network(false);
        assert_eq!(
            drain(&mut f, 60_000.0),
            [Effect::Done(PayEnd::Pending(PendingReason::Deadline))]
        );
    }

    #[test]
    fn other_details_for_an_open_attempt_fail_without_effects() {
        let stored = Attempt::new(key(), snap(), 1);
        let other = CheckoutSnapshot {
            order_version: 3,
            ..snap()
        };
        let r = PayFlow::start(&Entry::Valid(stored), other, config(), 0.0, || {
            panic!("no key is minted for a conflict")
        });
        assert_eq!(r.err(), Some(SdkError::SnapshotConflict));
    }

    #[test]
    fn a_request_that_never_left_ends_the_call_and_removes_the_key_this_call_minted() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        assert!(matches!(
            drain(&mut f, 0.0).last(),
            Some(Effect::Send { attempt: 1 })
        ));
        f.on_not_sent(TransportStep::Headers);
        assert_eq!(
            drain(&mut f, 1.0),
            [
                Effect::Remove(key()),
                Effect::Done(PayEnd::Failed(SdkError::TransportFailed(
                    TransportStep::Headers
                )))
            ],
            "nothing left with the key: as before the call, nothing stored, no retry"
        );
        assert_eq!(f.poll(2.0, true), None, "over");
    }

    #[test]
    fn a_request_that_never_left_puts_a_stored_attempt_back_as_it_was() {
        let mut stored = Attempt::new(key(), snap(), 1).sending();
        stored.state = crate::core::attempt::AttemptState::Unknown;
        let mut f = PayFlow::start(&Entry::Valid(stored.clone()), snap(), config(), 0.0, || {
            None
        })
        .unwrap();
        drain(&mut f, 0.0);
        f.on_not_sent(TransportStep::Fetch);
        assert_eq!(
            drain(&mut f, 1.0),
            [
                Effect::Save {
                    attempt: stored,
                    new: false
                },
                Effect::Done(PayEnd::Failed(SdkError::TransportFailed(
                    TransportStep::Fetch
                )))
            ]
        );
    }

    #[test]
    fn after_a_request_left_a_later_one_that_never_left_keeps_the_key_as_sent() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        f.on_reply(
            &Reply::NoAnswer { timed_out: true },
            10.0,
            &mut budget,
            &mut || 0.5,
        );
        drain(&mut f, 10.0);
        f.on_waited();
        drain(&mut f, 600.0);
        f.on_not_sent(TransportStep::Headers);
        let end = drain(&mut f, 601.0);
        assert!(
            matches!(&end[0], Effect::Save { attempt, new: false } if attempt.sends == 1 && attempt.key == key()),
            "the first request may have charged: its key stays: {end:?}"
        );
    }

    #[test]
    fn two_network_failures_in_a_row_warn_at_once_and_the_call_goes_on() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        let failed = Reply::NoAnswer { timed_out: false };
        f.on_reply(&failed, 10.0, &mut budget, &mut || 0.5);
        let first = drain(&mut f, 10.0);
        assert!(
            !first.contains(&Effect::Warn(Warning::NetworkOrCors)),
            "{first:?}"
        );
        f.on_waited();
        drain(&mut f, 600.0);
        f.on_reply(&failed, 610.0, &mut budget, &mut || 0.5);
        let second = drain(&mut f, 610.0);
        assert!(
            second.contains(&Effect::Warn(Warning::NetworkOrCors)),
            "{second:?}"
        );
        assert!(
            matches!(second.last(), Some(Effect::Wait { .. })),
            "still retrying: {second:?}"
        );
        f.on_waited();
        drain(&mut f, 1_500.0);
        f.on_reply(&failed, 1_510.0, &mut budget, &mut || 0.5);
        let third = drain(&mut f, 1_510.0);
        assert!(
            !third.contains(&Effect::Warn(Warning::NetworkOrCors)),
            "once: {third:?}"
        );
    }

    #[test]
    fn a_timeout_or_an_answer_among_the_first_two_tries_is_no_cors_warning() {
        for first in [Reply::NoAnswer { timed_out: true }, unavailable()] {
            let mut f =
                PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
            drain(&mut f, 0.0);
            let mut budget = RetryBudget::new(BudgetConfig::default());
            f.on_reply(&first, 10.0, &mut budget, &mut || 0.5);
            drain(&mut f, 10.0);
            f.on_waited();
            drain(&mut f, 6_000.0);
            f.on_reply(
                &Reply::NoAnswer { timed_out: false },
                6_010.0,
                &mut budget,
                &mut || 0.5,
            );
            let after = drain(&mut f, 6_010.0);
            assert!(
                !after.contains(&Effect::Warn(Warning::NetworkOrCors)),
                "{after:?}"
            );
        }
    }

    fn refused(status: u16, code: Option<payonce_protocol::ErrorCode>) -> Reply<PayResponse> {
        Reply::Http {
            status,
            retry_after: None,
            ok: None,
            problem: code.map(payonce_protocol::Problem::new),
        }
    }

    #[test]
    fn a_refusal_that_claimed_no_key_to_the_first_request_releases_the_attempt() {
        use payonce_protocol::ErrorCode;
        for reply in [
            refused(401, Some(ErrorCode::Unauthenticated)),
            refused(401, None),
            refused(404, Some(ErrorCode::OrderNotFound)),
            refused(409, Some(ErrorCode::OutOfStock)),
        ] {
            let mut f =
                PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
            drain(&mut f, 0.0);
            let mut budget = RetryBudget::new(BudgetConfig::default());
            f.on_reply(&reply, 10.0, &mut budget, &mut || 0.5);
            let end = drain(&mut f, 10.0);
            assert_eq!(end[0], Effect::Remove(key()), "{reply:?}: {end:?}");
            assert!(
                matches!(
                    &end[1],
                    Effect::Done(PayEnd::Failed(SdkError::ServerRejected { .. }))
                ),
                "still the refusal: {end:?}"
            );
        }
    }

    #[test]
    fn a_refusal_that_claimed_no_key_keeps_a_key_sent_before() {
        use payonce_protocol::ErrorCode;
        // The first request timed out (it may still reach the server); the retry gets a 401.
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        f.on_reply(
            &Reply::NoAnswer { timed_out: true },
            10.0,
            &mut budget,
            &mut || 0.5,
        );
        drain(&mut f, 10.0);
        f.on_waited();
        drain(&mut f, 6_000.0);
        f.on_reply(
            &refused(401, Some(ErrorCode::Unauthenticated)),
            6_010.0,
            &mut budget,
            &mut || 0.5,
        );
        let end = drain(&mut f, 6_010.0);
        assert!(
            !end.iter().any(|e| matches!(e, Effect::Remove(_))),
            "{end:?}"
        );
        // A stored attempt resumed after a reload (sent before) is kept too.
        let stored = Attempt::new(key(), snap(), 1).sending();
        let mut f = PayFlow::start(&Entry::Valid(stored), snap(), config(), 0.0, || None).unwrap();
        drain(&mut f, 0.0);
        f.on_reply(&refused(401, None), 10.0, &mut budget, &mut || 0.5);
        let end = drain(&mut f, 10.0);
        assert!(
            !end.iter().any(|e| matches!(e, Effect::Remove(_))),
            "{end:?}"
        );
        // And a refusal that proves nothing keeps even a fresh key.
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        f.on_reply(
            &refused(422, Some(ErrorCode::KeyReusedWithDifferentDetails)),
            10.0,
            &mut budget,
            &mut || 0.5,
        );
        let end = drain(&mut f, 10.0);
        assert!(
            !end.iter().any(|e| matches!(e, Effect::Remove(_))),
            "{end:?}"
        );
    }

    fn paid_by(f: &mut PayFlow, replayed: bool) -> bool {
        drain(f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        f.on_answer(&paid(), replayed, 10.0, &mut budget, &mut || 0.5);
        match drain(f, 10.0).last() {
            Some(Effect::Done(PayEnd::Final(Final::Paid {
                by_this_attempt, ..
            }))) => *by_this_attempt,
            other => panic!("not paid: {other:?}"),
        }
    }

    #[test]
    fn an_adopted_attempt_answered_as_a_replay_was_paid_by_the_other_tab() {
        let theirs = || Attempt::new(key(), snap(), 1);
        let mut adopted = PayFlow::start_adopted(theirs(), config(), 0.0);
        assert!(!paid_by(&mut adopted, true), "the other tab's charge");
        let mut adopted = PayFlow::start_adopted(theirs(), config(), 0.0);
        assert!(
            paid_by(&mut adopted, false),
            "not a replay: this call's request charged (the other tab was gone)"
        );
        let mut own =
            PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        assert!(
            paid_by(&mut own, true),
            "this tab's own key: a replay of its own earlier request"
        );
    }

    #[test]
    fn a_cors_refusal_ends_the_call_at_the_warning_with_the_key_kept() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        let failed = Reply::NoAnswer { timed_out: false };
        f.on_reply(&failed, 10.0, &mut budget, &mut || 0.5);
        drain(&mut f, 10.0);
        f.on_waited();
        drain(&mut f, 600.0);
        f.on_reply(&failed, 610.0, &mut budget, &mut || 0.5);
        let save = f.poll(610.0, true);
        assert!(
            matches!(&save, Some(Effect::Save { attempt, new: false }) if attempt.key == key()),
            "stored first: {save:?}"
        );
        assert_eq!(
            f.poll(610.0, true),
            Some(Effect::Warn(Warning::NetworkOrCors))
        );
        // The driver's probe found the server answering: a CORS refusal.
        f.on_cors_refused();
        assert_eq!(
            drain(&mut f, 620.0),
            [Effect::Done(PayEnd::Failed(SdkError::NetworkOrCors))],
            "no wait, no further request"
        );
    }

    #[test]
    fn a_network_failure_is_never_ended_as_cors_before_the_warning() {
        let mut f = PayFlow::start(&Entry::Missing, snap(), config(), 0.0, || Some(key())).unwrap();
        drain(&mut f, 0.0);
        let mut budget = RetryBudget::new(BudgetConfig::default());
        f.on_reply(
            &Reply::NoAnswer { timed_out: true },
            10.0,
            &mut budget,
            &mut || 0.5,
        );
        f.on_cors_refused();
        assert!(
            matches!(drain(&mut f, 10.0).last(), Some(Effect::Wait { .. })),
            "a timeout is no CORS refusal: still retrying"
        );
    }

    /// A 503: an HTTP answer, retried.
    fn unavailable() -> Reply<PayResponse> {
        Reply::Http {
            status: 503,
            retry_after: None,
            ok: None,
            problem: None,
        }
    }
}
