//! The journal's shell (docs/operating.md, "The journal"): what a request, a job round or an
//! operator read writes into `journal` (`src/store/journal.rs`), and how a provider call
//! finds the request it belongs to.
//!
//! A [`Scope`] is the task-local context of one request or job round: its actor, its
//! request id, what the handler learnt (user, order, key), and the provider-call entries
//! made under it. A request's entries are queued together when it is answered (one
//! transaction, after the pay's own; the answer does not wait for its commit:
//! [`Scope::flush`]), a job's written as they happen. Work moved to a task of its own
//! keeps its scope through [`carry`]; a provider call outside any scope is not journaled.

use crate::clock::Clock;
use crate::store::journal::{self as db, Entry};
use crate::store::Store;
use payonce_protocol::admin::{actor, kind, member};
use payonce_rules::decision::Decision;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Instant;

tokio::task_local! {
    static SCOPE: Arc<Scope>;
    static HTTP: RefCell<Vec<Value>>;
}

/// What the handler learnt about the request, for its entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    pub user: Option<String>,
    pub order_id: Option<String>,
    pub key: Option<String>,
    /// Extra members of the request's detail (version, amount, currency).
    pub detail: serde_json::Map<String, Value>,
}

/// One request's or job round's journal context.
pub(crate) struct Scope {
    actor: &'static str,
    request_id: Option<String>,
    store: Store,
    clock: Arc<dyn Clock>,
    /// Entries wait for [`Scope::flush`] (a request) instead of being written at once.
    buffered: bool,
    known: Mutex<Known>,
    pending: Mutex<Vec<Entry>>,
}

impl Scope {
    /// A request's scope: its entries are written when it is answered.
    pub(crate) fn request(request_id: &str, store: Store, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self::new(
            actor::REQUEST,
            Some(request_id),
            store,
            clock,
            true,
        ))
    }

    /// A job round's or a webhook's scope: each entry is written when it is made.
    pub(crate) fn immediate(
        actor: &'static str,
        request_id: Option<&str>,
        store: Store,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self::new(actor, request_id, store, clock, false))
    }

    fn new(
        actor: &'static str,
        request_id: Option<&str>,
        store: Store,
        clock: Arc<dyn Clock>,
        buffered: bool,
    ) -> Self {
        Self {
            actor,
            request_id: request_id.map(str::to_owned),
            store,
            clock,
            buffered,
            known: Mutex::default(),
            pending: Mutex::default(),
        }
    }

    /// What the handler learnt so far.
    pub(crate) fn known(&self) -> Known {
        self.known.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// Writes `entry`, or keeps it for [`Scope::flush`].
    async fn push(&self, entry: Entry) {
        if self.buffered {
            if let Ok(mut p) = self.pending.lock() {
                p.push(entry);
            }
            return;
        }
        write(&self.store, vec![entry]).await;
    }

    /// Queues `first` (the request's own entry) and the entries kept so far, one
    /// transaction, and returns without waiting for its commit: the answer does not wait for
    /// a disk flush of its own (on SQLite a third in a new-key pay's path, after the claim's
    /// and the settle's; docs/benchmarks.md "The journal"). They commit in the store's next
    /// batch, after every write queued before them and with or before every write queued
    /// after (an operator's read is journaled before it reads, so it sees them); a failure
    /// is logged. A crash in that window loses these entries, never a decision (those are in
    /// the transactions of the changes they explain: docs/operating.md).
    pub(crate) async fn flush(&self, first: Entry) {
        let mut list = vec![first];
        if let Ok(mut p) = self.pending.lock() {
            list.append(&mut p);
        }
        let n = list.len();
        let queued = db::queue(&self.store, &list).await;
        tokio::spawn(async move {
            let committed = match queued {
                Ok(committed) => committed.await,
                Err(e) => Err(e),
            };
            if let Err(e) = committed {
                tracing::warn!(error = %e, entries = n, "journal write failed");
            }
        });
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub(crate) fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    fn who(&self) -> db::Who {
        db::Who {
            actor: self.actor,
            request_id: self.request_id.clone(),
        }
    }
}

/// Entries a request made after it was answered (its client hung up, the request timed out:
/// the pay's task goes on) are written when the last holder lets the scope go.
impl Drop for Scope {
    fn drop(&mut self) {
        let left = self
            .pending
            .get_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        if left.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            rt.spawn(async move { write(&store, left).await });
        }
    }
}

/// Appends `entries`; a failure is logged, never the caller's failure (the journal explains
/// what happened, it never decides it).
async fn write(store: &Store, entries: Vec<Entry>) {
    if let Err(e) = db::append(store, &entries).await {
        tracing::warn!(error = %e, entries = entries.len(), "journal write failed");
    }
}

/// Runs `fut` under `scope`; the decisions the store writes meanwhile name its actor and
/// request id (`store::journal::Who`).
pub(crate) async fn scoped<F: std::future::Future>(scope: Arc<Scope>, fut: F) -> F::Output {
    let who = scope.who();
    SCOPE.scope(scope, db::as_who(who, fut)).await
}

/// `fut` with the current scope, for a task of its own (`tokio::spawn` starts without it).
pub(crate) fn carry<F: std::future::Future>(
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    let scope = SCOPE.try_with(Arc::clone).ok();
    async move {
        match scope {
            Some(s) => {
                let who = s.who();
                SCOPE.scope(s, db::as_who(who, fut)).await
            }
            None => fut.await,
        }
    }
}

/// Adds what the handler learnt to the current request's entry (no scope: nothing).
pub(crate) fn learn(f: impl FnOnce(&mut Known)) {
    let _ = SCOPE.try_with(|s| {
        if let Ok(mut k) = s.known.lock() {
            f(&mut k);
        }
    });
}

/// An HTTP answer the provider adapter received during the current call: its status and the
/// provider's own request id (Stripe's `Request-Id`), if it sent one.
pub(crate) fn http_seen(status: u16, provider_request_id: Option<&str>) {
    let _ = HTTP.try_with(|h| {
        h.borrow_mut()
            .push(json!({ "status": status, "providerRequestId": provider_request_id }));
    });
}

/// What a provider call's answer proved, for its entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Said {
    /// What the answer proved (`succeeded`, `declined`, `unknown`, …: docs/providers.md).
    pub outcome: &'static str,
    /// The provider object the answer names.
    pub object: Option<String>,
    /// The order the answer names (a charge carries it).
    pub order_id: Option<String>,
    /// Why an answer proved nothing or refused.
    pub why: Option<String>,
}

/// Runs provider call `op` (`fut`) and journals it under the current scope: operation,
/// provider object, the HTTP answers with the provider's request ids, latency, and what the
/// answer proved (`said`). `object`: what the call is about when the answer names no object:
/// the saved object id, else our provider key (a one-phase provider is asked by it), so a
/// job's call is found from the attempt it drove.
pub(crate) async fn provider_call<T>(
    op: &'static str,
    object: Option<&str>,
    fut: impl std::future::Future<Output = T>,
    said: impl FnOnce(&T) -> Said,
) -> T {
    let Ok(scope) = SCOPE.try_with(Arc::clone) else {
        return fut.await;
    };
    let (at, seq, started) = (scope.now(), db::next_seq(), Instant::now());
    let (out, http) = HTTP
        .scope(RefCell::new(Vec::new()), async {
            let out = fut.await;
            (out, HTTP.with(|h| h.take()))
        })
        .await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let s = said(&out);
    let known = scope.known();
    let entry = Entry {
        at,
        actor: scope.actor,
        kind: kind::PROVIDER_CALL,
        request_id: scope.request_id.clone(),
        user: known.user,
        order_id: s.order_id.or(known.order_id),
        key: known.key,
        provider_id: s.object.or(object.map(str::to_owned)),
        detail: json!({
            (member::SEQ): seq,
            (member::OP): op,
            (member::OUTCOME): s.outcome,
            (member::WHY): s.why,
            "ms": ms,
            "http": http,
        }),
    };
    scope.push(entry).await;
    out
}

/// Journals decision `d` about `about`, which changed nothing (a claim that lost), under the
/// current scope: with the request's entries when it is answered, or at once.
pub(crate) async fn decided(d: &Decision, about: &db::About<'_>) {
    let Ok(scope) = SCOPE.try_with(Arc::clone) else {
        return;
    };
    let entry = db::decision_entry(d, about, scope.now());
    scope.push(entry).await;
}

/// Journals an operator's read of `route` (with its query) at once.
pub(crate) async fn operator_read(store: &Store, now: i64, request_id: Option<&str>, route: &str) {
    let entry = Entry {
        at: now,
        actor: actor::OPERATOR,
        kind: kind::OPERATOR_READ,
        request_id: request_id.map(str::to_owned),
        detail: json!({ "route": route }),
        ..Entry::default()
    };
    write(store, vec![entry]).await;
}

/// An operator's action through `/admin/…` (`route`), with what it changed (`detail`).
pub(crate) async fn operator_action(
    store: &Store,
    now: i64,
    request_id: Option<&str>,
    route: &str,
    user: &str,
    changed: Value,
) {
    let entry = Entry {
        at: now,
        actor: actor::OPERATOR,
        kind: kind::OPERATOR_ACTION,
        request_id: request_id.map(str::to_owned),
        user: Some(user.to_owned()),
        detail: json!({ "route": route, "changed": changed }),
        ..Entry::default()
    };
    write(store, vec![entry]).await;
}

/// An operator's resolve of order `order`'s review flags through `route`: the note, what
/// the provider's answer settled, and why a flag stays, if one does.
pub(crate) async fn operator_resolve(
    store: &Store,
    now: i64,
    request_id: Option<&str>,
    route: &str,
    (order, user): (&str, &str),
    detail: Value,
) {
    let entry = Entry {
        at: now,
        actor: actor::OPERATOR,
        kind: kind::OPERATOR_ACTION,
        request_id: request_id.map(str::to_owned),
        user: Some(user.to_owned()),
        order_id: Some(order.to_owned()),
        detail: json!({ "route": route, "resolve": detail }),
        ..Entry::default()
    };
    write(store, vec![entry]).await;
}
