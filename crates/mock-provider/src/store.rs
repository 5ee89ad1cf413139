//! The provider's ledger and its own idempotency records, optionally written through to a
//! JSON file.
//!
//! Every decision that must be atomic (claim a provider key, refund once) is one method that
//! takes the lock, decides, mutates, persists and returns an outcome; handlers only map
//! outcomes to HTTP. The lock is a `std::sync::Mutex`, not tokio's: no critical section
//! awaits, they are short, and a std mutex is cheaper and cannot be held across an `.await`
//! by accident (the guard is not `Send`).

use crate::ProviderError;
use payonce_protocol::provider::{
    methods, Charge, ChargeRequest, ChargeStatus, EventType, Refund, WebhookEvent,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// What the provider remembers; this is also the state file's format.
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

/// Outcome of `POST /charges` once the key and body are valid.
#[derive(Debug)]
pub(crate) enum ChargeOutcome {
    /// A new charge; `event` is its webhook event (already recorded).
    Created { charge: Charge, event: WebhookEvent },
    /// The key was seen with the same request: the charge as it is now.
    Replayed(Charge),
    /// First request for a `pm_card_transient` key: nothing recorded, answer 503.
    Transient,
    /// The key was seen with a different request.
    KeyReused,
}

/// Outcome of `POST /charges/{id}/refunds`.
#[derive(Debug)]
pub(crate) enum RefundOutcome {
    Created {
        refund: Refund,
        event: WebhookEvent,
    },
    Replayed(Refund),
    ChargeNotFound,
    /// Declined, or already refunded under another key.
    NotRefundable(ChargeStatus),
    /// The refund key was used for another charge.
    KeyReused,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    file: Option<PathBuf>,
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

    fn push_event(&mut self, event_type: EventType, charge: &Charge) -> WebhookEvent {
        let event = WebhookEvent {
            id: new_id("evt"),
            event_type,
            created: now_millis() / 1000,
            charge: charge.clone(),
        };
        self.state.undelivered.insert(event.id.clone());
        self.state.events.push(event.clone());
        event
    }
}

impl Store {
    /// Opens the store, loading `file` if it exists.
    pub(crate) fn open(file: Option<PathBuf>) -> Result<Self, ProviderError> {
        let state = match &file {
            Some(path) => load(path)?,
            None => State::default(),
        };
        Ok(Self {
            inner: Mutex::new(Inner::new(state)),
            file,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the state half-mutated in a way that
        // matters more than refusing all further requests would, so recover the guard.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `f` and writes the new state through to the file. If the write fails the
    /// in-memory state is rolled back, so memory never claims what the file lost.
    fn commit<T>(
        &self,
        inner: &mut Inner,
        f: impl FnOnce(&mut Inner) -> T,
    ) -> Result<T, ProviderError> {
        let Some(path) = &self.file else {
            return Ok(f(inner));
        };
        let backup = inner.state.clone();
        let out = f(inner);
        if let Err(e) = save(path, &inner.state) {
            inner.state = backup;
            inner.reindex();
            return Err(e);
        }
        Ok(out)
    }

    /// Claims `key` for `request` atomically: of N concurrent calls with one key, exactly
    /// one can create the charge.
    pub(crate) fn charge(
        &self,
        key: &str,
        request: &ChargeRequest,
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
            self.commit(&mut inner, |inner| {
                inner.state.transient_seen.insert(key.to_owned());
            })?;
            return Ok(ChargeOutcome::Transient);
        }
        let status = if request.payment_method_id == methods::DECLINE {
            ChargeStatus::Declined
        } else {
            ChargeStatus::Succeeded
        };
        let charge = Charge {
            id: new_id("ch"),
            provider_key: key.to_owned(),
            amount: request.amount,
            currency: request.currency.clone(),
            payment_method_id: request.payment_method_id.clone(),
            order_id: request.order_id.clone(),
            status,
            created_at: now_millis(),
        };
        self.commit(&mut inner, |inner| {
            let i = inner.state.charges.len();
            inner.state.charges.push(StoredCharge {
                charge: charge.clone(),
                request: request.clone(),
            });
            inner.by_key.insert(charge.provider_key.clone(), i);
            inner.by_id.insert(charge.id.clone(), i);
            let event_type = match status {
                ChargeStatus::Declined => EventType::ChargeDeclined,
                _ => EventType::ChargeSucceeded,
            };
            let event = inner.push_event(event_type, &charge);
            ChargeOutcome::Created { charge, event }
        })
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
        self.commit(&mut inner, |inner| {
            let charge = &mut inner.state.charges[i].charge;
            charge.status = ChargeStatus::Refunded;
            let charge = charge.clone();
            let refund = Refund {
                id: new_id("re"),
                charge_id: charge.id.clone(),
                amount: charge.amount,
            };
            inner.state.refunds.push(StoredRefund {
                idempotency_key: key.to_owned(),
                refund: refund.clone(),
            });
            let event = inner.push_event(EventType::ChargeRefunded, &charge);
            RefundOutcome::Created { refund, event }
        })
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
        self.commit(&mut inner, |inner| {
            inner.state.undelivered.remove(event_id);
        })
    }

    pub(crate) fn reset(&self) -> Result<(), ProviderError> {
        let mut inner = self.lock();
        self.commit(&mut inner, |inner| {
            inner.state = State::default();
            inner.reindex();
        })
    }
}

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
    serde_json::from_slice(&bytes).map_err(|source| ProviderError::StateCorrupt {
        path: path.to_owned(),
        source,
    })
}

/// Writes `state` to a temporary file beside `path` and renames it over `path`, so a crash
/// mid-write leaves the previous complete file, never a torn one. Blocking I/O under the
/// lock on purpose: it keeps file writes in the same order as the mutations (a later state
/// can never be overwritten by an earlier one), and the file is small. No fsync: the
/// guarantee is surviving a process crash (what the restart tests do), not a power cut.
fn save(path: &Path, state: &State) -> Result<(), ProviderError> {
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
    let bytes = serde_json::to_vec(state).map_err(|e| io(std::io::Error::other(e)))?;
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
