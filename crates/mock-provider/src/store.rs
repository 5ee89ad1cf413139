//! The provider's ledger and its own idempotency records, optionally written through to a
//! state file.
//!
//! Every decision that must be atomic (claim a provider key, refund once) is one method that
//! takes the lock, decides, persists, mutates and returns an outcome; handlers only map
//! outcomes to HTTP.
//!
//! The state file is a journal: one JSON [`Change`] per line, appended before the change is
//! applied in memory (and so before anyone is answered), replayed on open and then compacted
//! into a single snapshot line. Appending costs the size of one change; rewriting the whole
//! state per change (the first design) made each charge cost the whole ledger, which a chaos
//! run of 10,000 payments turned into the bottleneck. A crash mid-append can only tear the
//! last line: that change was never answered, so it is dropped on replay. The lock is a `std::sync::Mutex`, not tokio's: no critical section
//! awaits, they are short, and a std mutex is cheaper and cannot be held across an `.await`
//! by accident (the guard is not `Send`).

use crate::ProviderError;
use payonce_protocol::provider::{
    methods, paths, ActionOutcome, Charge, ChargeRequest, ChargeStatus, EventType, Refund,
    RefundStatus, WebhookEvent,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// What the provider remembers (a snapshot line of the journal; before the journal, the whole
/// state file, which is still read).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct State {
    /// Oldest first.
    charges: Vec<StoredCharge>,
    refunds: Vec<StoredRefund>,
    /// Provider keys whose first request already got the transient 503.
    transient_seen: BTreeSet<String>,
    /// Every webhook event ever created, oldest first (for redelivery).
    events: Vec<WebhookEvent>,
    /// Event ids not yet acknowledged with a 2xx: resent after a restart (at least once).
    undelivered: BTreeSet<String>,
}

/// A charge with the request that created it: the request is the fingerprint a repeat
/// with the same key is compared against.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredCharge {
    charge: Charge,
    request: ChargeRequest,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRefund {
    idempotency_key: String,
    refund: Refund,
}

/// One line of the journal: a change of [`State`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Change {
    /// The whole state (the first line after a compaction).
    Snapshot { state: State },
    /// A new charge and its webhook event (none while it requires action).
    Charge {
        charge: Box<StoredCharge>,
        event: Option<WebhookEvent>,
    },
    /// A `requires_action` charge ended: completed by the customer (with its webhook event)
    /// or cancelled by the merchant (no event).
    Complete {
        charge_id: String,
        status: ChargeStatus,
        /// None for a merchant's cancel: no event.
        #[serde(default)]
        event: Option<WebhookEvent>,
    },
    /// A `pm_card_transient` key got its one 503.
    TransientSeen { key: String },
    /// A refund of a charge and its webhook event (none while the refund is pending).
    Refund {
        refund: StoredRefund,
        event: Option<WebhookEvent>,
    },
    /// A pending refund ended, and its webhook event.
    RefundEnded {
        refund_id: String,
        status: RefundStatus,
        event: WebhookEvent,
    },
    /// A webhook event was acknowledged.
    Delivered { event_id: String },
    /// `POST /dev/reset`.
    Reset,
}

/// Outcome of `POST /charges` once the key and body are valid.
#[derive(Debug)]
// Returned once per request and matched at once: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ChargeOutcome {
    /// A new charge; `event` is its webhook event (already recorded; none while it
    /// requires action).
    Created {
        charge: Charge,
        event: Option<WebhookEvent>,
    },
    /// The key was seen with the same request: the charge as it is now.
    Replayed(Charge),
    /// First request for a `pm_card_transient` key: nothing recorded, answer 503.
    Transient,
    /// The key was seen with a different request.
    KeyReused,
}

/// Outcome of `POST /charges/{id}/complete`.
#[derive(Debug)]
// Returned once per request and matched at once: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CompleteOutcome {
    /// The action ended now; `event` is the charge's outcome event (already recorded).
    Completed {
        charge: Charge,
        event: WebhookEvent,
    },
    /// The action had already ended (the first completion wins): the charge as it is.
    AlreadyCompleted(Charge),
    ChargeNotFound,
    /// The charge never required action.
    NoActionRequired,
}

/// Outcome of `POST /charges/{id}/refunds`.
#[derive(Debug)]
// Returned once per request and matched at once: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum RefundOutcome {
    /// A new refund; `event` its webhook event (none while it is pending).
    Created {
        refund: Refund,
        event: Option<WebhookEvent>,
    },
    Replayed(Refund),
    ChargeNotFound,
    /// Declined, or already refunded under another key.
    NotRefundable(ChargeStatus),
    /// A charge of `pm_card_refund_refused`: the issuer refuses every refund.
    Refused,
    /// The refund key was used for another charge.
    KeyReused,
}

/// Outcome of ending a pending refund (`POST /dev/refunds/{id}/succeed` or `/fail`).
#[derive(Debug)]
// Returned once per request and matched at once: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum EndRefundOutcome {
    /// Ended now; `event` its webhook event (already recorded).
    Ended { refund: Refund, event: WebhookEvent },
    /// It was not pending (it ended already): as it is.
    NotPending(Refund),
    /// No such refund.
    NotFound,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    /// The journal, opened for appending (`None`: memory only).
    journal: Option<Journal>,
}

struct Journal {
    path: PathBuf,
    file: std::fs::File,
}

struct Inner {
    state: State,
    /// Indexes into `state.charges`, rebuilt on load (not persisted).
    by_key: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
}

impl Inner {
    fn new(state: State) -> Self {
        let mut inner = Self {
            state,
            by_key: HashMap::new(),
            by_id: HashMap::new(),
        };
        inner.reindex();
        inner
    }

    fn reindex(&mut self) {
        self.by_key.clear();
        self.by_id.clear();
        for (i, c) in self.state.charges.iter().enumerate() {
            self.by_key.insert(c.charge.provider_key.clone(), i);
            self.by_id.insert(c.charge.id.clone(), i);
        }
    }

    /// Applies a change that is already in the journal.
    fn apply(&mut self, change: Change) {
        match change {
            Change::Snapshot { state } => {
                self.state = state;
                self.reindex();
            }
            Change::Charge { charge, event } => {
                let i = self.state.charges.len();
                self.by_key.insert(charge.charge.provider_key.clone(), i);
                self.by_id.insert(charge.charge.id.clone(), i);
                self.state.charges.push(*charge);
                if let Some(event) = event {
                    self.push_event(event);
                }
            }
            Change::Complete {
                charge_id,
                status,
                event,
            } => {
                if let Some(&i) = self.by_id.get(&charge_id) {
                    let charge = &mut self.state.charges[i].charge;
                    charge.status = status;
                    charge.next_action_url = None;
                }
                if let Some(event) = event {
                    self.push_event(event);
                }
            }
            Change::TransientSeen { key } => {
                self.state.transient_seen.insert(key);
            }
            Change::Refund { refund, event } => {
                let i = self.by_id.get(&refund.refund.charge_id).copied();
                if let (Some(i), RefundStatus::Succeeded) = (i, refund.refund.status) {
                    self.state.charges[i].charge.status = ChargeStatus::Refunded;
                }
                self.state.refunds.push(refund);
                if let Some(event) = event {
                    self.push_event(event);
                }
            }
            Change::RefundEnded {
                refund_id,
                status,
                event,
            } => {
                let refunds = self.state.refunds.iter_mut();
                if let Some(r) = refunds.map(|r| &mut r.refund).find(|r| r.id == refund_id) {
                    r.status = status;
                    let i = self.by_id.get(&r.charge_id).copied();
                    if let (Some(i), RefundStatus::Succeeded) = (i, status) {
                        self.state.charges[i].charge.status = ChargeStatus::Refunded;
                    }
                }
                self.push_event(event);
            }
            Change::Delivered { event_id } => {
                self.state.undelivered.remove(&event_id);
            }
            Change::Reset => {
                self.state = State::default();
                self.reindex();
            }
        }
    }

    fn push_event(&mut self, event: WebhookEvent) {
        self.state.undelivered.insert(event.id.clone());
        self.state.events.push(event);
    }
}

fn new_event(event_type: EventType, charge: &Charge) -> WebhookEvent {
    WebhookEvent {
        id: new_id("evt"),
        event_type,
        created: now_millis() / 1000,
        charge: charge.clone(),
    }
}

impl Store {
    /// Opens the store: replays `file` if it exists, then compacts it to one snapshot line.
    pub(crate) fn open(file: Option<PathBuf>) -> Result<Self, ProviderError> {
        let Some(path) = file else {
            return Ok(Self {
                inner: Mutex::new(Inner::new(State::default())),
                journal: None,
            });
        };
        let state = load(&path)?;
        let snapshot = Change::Snapshot { state };
        write_compacted(&path, &snapshot)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|source| ProviderError::StateFile {
                path: path.clone(),
                source,
            })?;
        let mut inner = Inner::new(State::default());
        inner.apply(snapshot);
        Ok(Self {
            inner: Mutex::new(inner),
            journal: Some(Journal { path, file }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the state half-mutated in a way that
        // matters more than refusing all further requests would, so recover the guard.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `change` to the journal, then applies it. If the append fails nothing is
    /// applied, so memory never claims what the file lost. Under the lock on purpose: the
    /// journal's order is the order of the mutations.
    fn commit(&self, inner: &mut Inner, change: Change) -> Result<(), ProviderError> {
        if let Some(j) = &self.journal {
            let mut line = serde_json::to_vec(&change).map_err(|e| ProviderError::StateFile {
                path: j.path.clone(),
                source: std::io::Error::other(e),
            })?;
            line.push(b'\n');
            // One write of the whole line on an O_APPEND file. No fsync: the guarantee is
            // surviving a process crash (what the restart tests do), not a power cut.
            (&j.file)
                .write_all(&line)
                .map_err(|source| ProviderError::StateFile {
                    path: j.path.clone(),
                    source,
                })?;
        }
        inner.apply(change);
        Ok(())
    }

    /// Claims `key` for `request` atomically: of N concurrent calls with one key, exactly
    /// one can create the charge. `action_base` is the provider's own origin as the caller
    /// reached it (`http://host:port`): a `pm_card_3ds` charge's completion page is there.
    pub(crate) fn charge(
        &self,
        key: &str,
        request: &ChargeRequest,
        action_base: &str,
    ) -> Result<ChargeOutcome, ProviderError> {
        let mut inner = self.lock();
        if let Some(&i) = inner.by_key.get(key) {
            let stored = &inner.state.charges[i];
            return Ok(if stored.request == *request {
                ChargeOutcome::Replayed(stored.charge.clone())
            } else {
                ChargeOutcome::KeyReused
            });
        }
        if request.payment_method_id == methods::TRANSIENT_5XX
            && !inner.state.transient_seen.contains(key)
        {
            self.commit(
                &mut inner,
                Change::TransientSeen {
                    key: key.to_owned(),
                },
            )?;
            return Ok(ChargeOutcome::Transient);
        }
        let status = match request.payment_method_id.as_str() {
            methods::DECLINE => ChargeStatus::Declined,
            methods::THREE_DS => ChargeStatus::RequiresAction,
            _ => ChargeStatus::Succeeded,
        };
        let id = new_id("ch");
        let next_action_url = (status == ChargeStatus::RequiresAction)
            .then(|| format!("{action_base}{}", paths::charge_action(&id)));
        let charge = Charge {
            id,
            provider_key: key.to_owned(),
            amount: request.amount,
            currency: request.currency.clone(),
            payment_method_id: request.payment_method_id.clone(),
            order_id: request.order_id.clone(),
            status,
            created_at: now_millis(),
            next_action_url,
            decline_code: None,
            client_secret: None,
        };
        // A charge that requires action has no outcome to announce yet: its event is sent
        // when the customer completes it (`complete`).
        let event = match status {
            ChargeStatus::RequiresAction => None,
            ChargeStatus::Declined => Some(new_event(EventType::ChargeDeclined, &charge)),
            _ => Some(new_event(EventType::ChargeSucceeded, &charge)),
        };
        self.commit(
            &mut inner,
            Change::Charge {
                charge: Box::new(StoredCharge {
                    charge: charge.clone(),
                    request: request.clone(),
                }),
                event: event.clone(),
            },
        )?;
        Ok(ChargeOutcome::Created { charge, event })
    }

    /// Ends the action of a `requires_action` charge, once: of N concurrent completions
    /// exactly one decides the outcome and creates its event; the others see it.
    pub(crate) fn complete(
        &self,
        charge_id: &str,
        outcome: ActionOutcome,
    ) -> Result<CompleteOutcome, ProviderError> {
        let mut inner = self.lock();
        let Some(&i) = inner.by_id.get(charge_id) else {
            return Ok(CompleteOutcome::ChargeNotFound);
        };
        let charge = inner.state.charges[i].charge.clone();
        if charge.payment_method_id != methods::THREE_DS {
            return Ok(CompleteOutcome::NoActionRequired);
        }
        if charge.status != ChargeStatus::RequiresAction {
            return Ok(CompleteOutcome::AlreadyCompleted(charge));
        }
        let (status, event_type) = match outcome {
            ActionOutcome::Succeeded => (ChargeStatus::Succeeded, EventType::ChargeSucceeded),
            ActionOutcome::Declined => (ChargeStatus::Declined, EventType::ChargeDeclined),
        };
        let charge = Charge {
            status,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
            ..charge
        };
        let event = new_event(event_type, &charge);
        self.commit(
            &mut inner,
            Change::Complete {
                charge_id: charge.id.clone(),
                status,
                event: Some(event.clone()),
            },
        )?;
        Ok(CompleteOutcome::Completed { charge, event })
    }

    /// The merchant cancels a `requires_action` charge the customer has not ended: it ends
    /// `canceled`, no money moved and no event (the merchant asked). A charge the customer
    /// ended first, or that never required action, is answered as it is. `None`: no such
    /// charge.
    pub(crate) fn cancel(&self, charge_id: &str) -> Result<Option<Charge>, ProviderError> {
        let mut inner = self.lock();
        let Some(&i) = inner.by_id.get(charge_id) else {
            return Ok(None);
        };
        let charge = inner.state.charges[i].charge.clone();
        if charge.status != ChargeStatus::RequiresAction {
            return Ok(Some(charge));
        }
        let charge = Charge {
            status: ChargeStatus::Canceled,
            next_action_url: None,
            client_secret: None,
            ..charge
        };
        self.commit(
            &mut inner,
            Change::Complete {
                charge_id: charge.id.clone(),
                status: ChargeStatus::Canceled,
                event: None,
            },
        )?;
        Ok(Some(charge))
    }

    pub(crate) fn charge_by_id(&self, id: &str) -> Option<Charge> {
        let inner = self.lock();
        let &i = inner.by_id.get(id)?;
        Some(inner.state.charges[i].charge.clone())
    }

    pub(crate) fn charge_by_key(&self, key: &str) -> Option<Charge> {
        let inner = self.lock();
        let &i = inner.by_key.get(key)?;
        Some(inner.state.charges[i].charge.clone())
    }

    /// Every charge, oldest first, optionally only those of one order.
    pub(crate) fn ledger(&self, order_id: Option<&str>) -> Vec<Charge> {
        let inner = self.lock();
        inner
            .state
            .charges
            .iter()
            .filter(|c| order_id.is_none_or(|o| c.charge.order_id == o))
            .map(|c| c.charge.clone())
            .collect()
    }

    /// Refunds `charge_id` in full, once per refund key and once per charge.
    pub(crate) fn refund(
        &self,
        charge_id: &str,
        key: &str,
    ) -> Result<RefundOutcome, ProviderError> {
        let mut inner = self.lock();
        if let Some(r) = inner
            .state
            .refunds
            .iter()
            .find(|r| r.idempotency_key == key)
        {
            return Ok(if r.refund.charge_id == charge_id {
                RefundOutcome::Replayed(r.refund.clone())
            } else {
                RefundOutcome::KeyReused
            });
        }
        let Some(&i) = inner.by_id.get(charge_id) else {
            return Ok(RefundOutcome::ChargeNotFound);
        };
        let status = inner.state.charges[i].charge.status;
        if status != ChargeStatus::Succeeded {
            return Ok(RefundOutcome::NotRefundable(status));
        }
        let method = inner.state.charges[i].charge.payment_method_id.clone();
        if method == methods::REFUND_REFUSED {
            return Ok(RefundOutcome::Refused);
        }
        // One refund per charge that did not fail: a pending one holds the charge too.
        let open = inner.state.refunds.iter().map(|r| &r.refund);
        if open
            .filter(|r| r.charge_id == charge_id)
            .any(|r| r.status != RefundStatus::Failed)
        {
            return Ok(RefundOutcome::NotRefundable(ChargeStatus::Refunded));
        }
        let pending = method == methods::REFUND_PENDING;
        let charge = inner.state.charges[i].charge.clone();
        let refund = Refund {
            id: new_id("re"),
            charge_id: charge.id.clone(),
            amount: charge.amount,
            status: match pending {
                true => RefundStatus::Pending,
                false => RefundStatus::Succeeded,
            },
        };
        let event = (!pending).then(|| {
            let refunded = Charge {
                status: ChargeStatus::Refunded,
                ..charge
            };
            new_event(EventType::ChargeRefunded, &refunded)
        });
        self.commit(
            &mut inner,
            Change::Refund {
                refund: StoredRefund {
                    idempotency_key: key.to_owned(),
                    refund: refund.clone(),
                },
                event: event.clone(),
            },
        )?;
        Ok(RefundOutcome::Created { refund, event })
    }

    /// Ends the pending refund `refund_id` as its bank does: succeeded (the charge becomes
    /// refunded, `refund.updated`) or failed (`refund.failed`).
    pub(crate) fn end_refund(
        &self,
        refund_id: &str,
        succeeded: bool,
    ) -> Result<EndRefundOutcome, ProviderError> {
        let mut inner = self.lock();
        let mut found = inner.state.refunds.iter().map(|r| &r.refund);
        let Some(refund) = found.find(|r| r.id == refund_id).cloned() else {
            return Ok(EndRefundOutcome::NotFound);
        };
        if refund.status != RefundStatus::Pending {
            return Ok(EndRefundOutcome::NotPending(refund));
        }
        let Some(&i) = inner.by_id.get(&refund.charge_id) else {
            return Ok(EndRefundOutcome::NotFound);
        };
        let (status, kind, charge_status) = match succeeded {
            true => (
                RefundStatus::Succeeded,
                EventType::RefundUpdated,
                ChargeStatus::Refunded,
            ),
            false => (
                RefundStatus::Failed,
                EventType::RefundFailed,
                ChargeStatus::Succeeded,
            ),
        };
        let charge = Charge {
            status: charge_status,
            ..inner.state.charges[i].charge.clone()
        };
        let event = new_event(kind, &charge);
        self.commit(
            &mut inner,
            Change::RefundEnded {
                refund_id: refund_id.to_owned(),
                status,
                event: event.clone(),
            },
        )?;
        let refund = Refund { status, ..refund };
        Ok(EndRefundOutcome::Ended { refund, event })
    }

    /// The refunds of charge `charge_id`, oldest first; `None`: no such charge.
    pub(crate) fn refunds_of(&self, charge_id: &str) -> Option<Vec<Refund>> {
        let inner = self.lock();
        inner.by_id.get(charge_id)?;
        let refunds = inner.state.refunds.iter().map(|r| &r.refund);
        Some(
            refunds
                .filter(|r| r.charge_id == charge_id)
                .cloned()
                .collect(),
        )
    }

    /// A refund made in the dashboard: under a key of the provider's own, never one of a
    /// merchant's.
    pub(crate) fn dashboard_refund(&self, charge_id: &str) -> Result<RefundOutcome, ProviderError> {
        self.refund(charge_id, &new_id("dashboard"))
    }

    /// Every event of one order, oldest first.
    pub(crate) fn events_for_order(&self, order_id: &str) -> Vec<WebhookEvent> {
        let inner = self.lock();
        inner
            .state
            .events
            .iter()
            .filter(|e| e.charge.order_id == order_id)
            .cloned()
            .collect()
    }

    /// Events never acknowledged (to resend after a restart), oldest first.
    pub(crate) fn undelivered(&self) -> Vec<WebhookEvent> {
        let inner = self.lock();
        inner
            .state
            .events
            .iter()
            .filter(|e| inner.state.undelivered.contains(&e.id))
            .cloned()
            .collect()
    }

    pub(crate) fn mark_delivered(&self, event_id: &str) -> Result<(), ProviderError> {
        let mut inner = self.lock();
        if !inner.state.undelivered.contains(event_id) {
            return Ok(());
        }
        self.commit(
            &mut inner,
            Change::Delivered {
                event_id: event_id.to_owned(),
            },
        )
    }

    pub(crate) fn reset(&self) -> Result<(), ProviderError> {
        let mut inner = self.lock();
        self.commit(&mut inner, Change::Reset)
    }
}

/// The charges and refunds of the state file at `path`, read without opening a provider
/// (see [`crate::read_state_file`]).
pub(crate) fn read_file(path: &Path) -> Result<(Vec<Charge>, Vec<Refund>), ProviderError> {
    let state = load(path)?;
    Ok((
        state.charges.into_iter().map(|c| c.charge).collect(),
        state.refunds.into_iter().map(|r| r.refund).collect(),
    ))
}

/// Replays the journal at `path` (missing: empty). A state file written before the journal
/// (one JSON document) is read as it is.
fn load(path: &Path) -> Result<State, ProviderError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
        Err(source) => {
            return Err(ProviderError::StateFile {
                path: path.to_owned(),
                source,
            })
        }
    };
    if let Ok(state) = serde_json::from_slice::<State>(&bytes) {
        return Ok(state);
    }
    let corrupt = |source| ProviderError::StateCorrupt {
        path: path.to_owned(),
        source,
    };
    let mut inner = Inner::new(State::default());
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let last = lines.len() - 1;
    let mut applied = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Change>(line) {
            Ok(change) => {
                inner.apply(change);
                applied += 1;
            }
            // Only a final line after a good one can be torn (a crash mid-append; the file
            // then does not end in a newline): that change was never answered, so it did not
            // happen. A file that is nothing but a bad line is not a journal we wrote.
            Err(_) if i == last && applied > 0 => break,
            Err(e) => return Err(corrupt(e)),
        }
    }
    Ok(inner.state)
}

/// Writes `snapshot` as the whole journal: to a temporary file beside `path`, renamed over
/// it, so a crash mid-write leaves the previous complete file, never a torn one.
fn write_compacted(path: &Path, snapshot: &Change) -> Result<(), ProviderError> {
    let io = |source| ProviderError::StateFile {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut bytes = serde_json::to_vec(snapshot).map_err(|e| io(std::io::Error::other(e)))?;
    bytes.push(b'\n');
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A random id like `ch_3f9a…`. From the OS-seeded thread RNG, not the chaos RNG: ids must
/// stay unique across restarts and resets, which a fixed seed would repeat.
fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:024x}", rand::random::<u128>() >> 32)
}
