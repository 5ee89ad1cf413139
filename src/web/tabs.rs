//! What tabs tell each other over the `payonce` BroadcastChannel:
//! - `{"t":"paid","receipt":{"baseUrl":…,"key":…,"snapshot":…,"payment":…}}`: an order was
//!   paid here ([`Receipt`]). A tab queued on the same order's Web Lock treats it as a hint
//!   (`src/core/receipt.rs`): only for the same API and checkout, and only once the server
//!   confirms it for the hint's key.
//! - `{"t":"hello","tab":id}` / `{"t":"taken","tab":id}`: duplicate-tab detection. Each tab
//!   keeps an id in sessionStorage (`payonce:tab`). A duplicated tab inherits a copy of that
//!   storage, id included; when it says hello, the original answers "taken", and the duplicate
//!   takes a new id and reports `DUPLICATED_TAB` (its inherited attempts keep their keys: the
//!   server deduplicates them and the Web Lock serialises the two tabs' sends).
//!
//! And one thing tabs show each other without a message: while a pay call sends an attempt, it
//! holds a Web Lock named `payonce-claim:` + the [`Claim`] as JSON (API, key, checkout). A tab
//! waiting for the same order's lock reads it from `navigator.locks.query()` and adopts that
//! attempt when its turn comes (`src/core/attempt.rs`, `adopt`). A lock, not a message: the
//! browser answers `query()` from the same lock table that grants the order's lock, so what a
//! tab saw there cannot arrive after its turn, and the claim vanishes with the call or the tab.
//!
//! Receipts live in one page-wide map, so two clients in one page (and tabs) see each other.
//! The channel is open while at least one client lives: the last client's `free()` closes it,
//! so nothing of the SDK keeps an event loop (a Node test runner) alive.

use crate::core::receipt::{Claim, Receipt};
use crate::web::value;
use js_sys::Function;
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey};
use std::cell::{Cell, RefCell};
use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

const CHANNEL: &str = "payonce";
const TAB_ID: &str = "payonce:tab";
const CLAIM: &str = "payonce-claim:";

/// The name of the Web Lock a pay call holds while it sends `claim`'s attempt: the JSON of
/// [`Claim`]'s members (as its serde derive spells them), built member by member like the
/// receipts: the module carries no serializer or struct visitor for `Claim` or `Receipt`.
pub(crate) fn claim_lock(claim: &Claim) -> String {
    let v = value::object_owned(&[
        ("baseUrl", claim.base_url.as_str().into()),
        ("key", claim.key.as_str().into()),
        ("snapshot", value::snapshot(&claim.snapshot)),
    ]);
    [CLAIM, &value::json(&v)].concat()
}

/// The base URL, key and snapshot members of a claim or a receipt; `None` unless all three
/// read.
fn read_attempt(v: &JsValue) -> Option<(String, IdempotencyKey, CheckoutSnapshot)> {
    let base_url = value::get(v, "baseUrl").as_string()?;
    let key = IdempotencyKey::parse(&value::get(v, "key").as_string()?).ok()?;
    let snapshot = value::from_js::<CheckoutSnapshot>(&value::get(v, "snapshot"))?;
    Some((base_url, key, snapshot))
}

/// The claim for `order_id` through `base_url` among the held locks `names`, if any tab
/// (this one included) shows one.
pub(crate) fn claim_in(names: &[String], base_url: &str, order_id: &str) -> Option<Claim> {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(CLAIM))
        .filter_map(|json| read_attempt(&js_sys::JSON::parse(json).ok()?))
        .map(|(base_url, key, snapshot)| Claim {
            base_url,
            key,
            snapshot,
        })
        .find(|c| c.is_for(base_url, order_id))
}

/// A receipt member as [`receipt_js`] writes it; `None` when a member does not read.
fn read_receipt(v: &JsValue) -> Option<Receipt> {
    let (base_url, key, snapshot) = read_attempt(v)?;
    let payment = value::get(v, "payment");
    let payment = value::payment_in(&payment)?;
    Some(Receipt {
        base_url,
        key,
        snapshot,
        payment,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Paid,
    Hello,
    Taken,
}

impl Kind {
    const ALL: [Kind; 3] = [Self::Paid, Self::Hello, Self::Taken];

    fn as_str(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Hello => "hello",
            Self::Taken => "taken",
        }
    }
}

/// One flat shape for every message; absent members are left out. A message that does not
/// read (another version, another app on the channel) is ignored. Read and written member by
/// member (only the receipt through its serde derives): a derive for this envelope cost more
/// in the module than these few lines.
struct Message {
    t: Kind,
    tab: Option<String>,
    receipt: Option<Receipt>,
}

impl Message {
    fn tab(t: Kind, tab: String) -> Self {
        Self {
            t,
            tab: Some(tab),
            receipt: None,
        }
    }

    /// `None` unless `t` is a known kind, `tab` absent or a string, `receipt` absent or a
    /// receipt (`null` counts as absent).
    fn from_js(v: &JsValue) -> Option<Self> {
        let t = value::get(v, "t").as_string()?;
        let t = Kind::ALL.into_iter().find(|k| k.as_str() == t)?;
        let tab = value::member(v, "tab", value::Kind::Text).ok()?.as_string();
        let receipt = value::get(v, "receipt");
        let receipt = if receipt.is_undefined() || receipt.is_null() {
            None
        } else {
            Some(read_receipt(&receipt)?)
        };
        Some(Self { t, tab, receipt })
    }

    fn to_js(&self) -> JsValue {
        let mut members = vec![("t", JsValue::from_str(self.t.as_str()))];
        members.extend(self.tab.as_deref().map(|t| ("tab", t.into())));
        members.extend(self.receipt.as_ref().map(|r| ("receipt", receipt_js(r))));
        value::object_owned(&members)
    }
}

/// The page's `payonce` channel and its listener, open while at least one client lives.
type Open = (BroadcastChannel, Closure<dyn Fn(MessageEvent)>);

struct Tabs {
    channel: RefCell<Option<Open>>,
    tab_id: RefCell<Option<String>>,
    duplicated: Cell<bool>,
    /// Each client's `onWarning`, by the token [`join`] gave it.
    listeners: RefCell<Vec<(u32, Function)>>,
    clients: Cell<u32>,
    next_token: Cell<u32>,
}

// Read with `try_with`, never `with`: `with`'s panic formats an `AccessError` with `Debug`
// (docs/size.md). On wasm32 the access cannot fail; the fallbacks are never used.
thread_local! {
    static PAID: RefCell<Vec<Receipt>> = const { RefCell::new(Vec::new()) };
    static TABS: Tabs = const {
        Tabs {
            channel: RefCell::new(None),
            tab_id: RefCell::new(None),
            duplicated: Cell::new(false),
            listeners: RefCell::new(Vec::new()),
            clients: Cell::new(0),
            next_token: Cell::new(0),
        }
    };
}

impl Tabs {
    /// Opens the channel and says hello with this tab's id (duplicate-tab detection).
    fn open(&self) {
        let Ok(ch) = BroadcastChannel::new(CHANNEL) else {
            return;
        };
        let on_message = Closure::<dyn Fn(MessageEvent)>::new(|e: MessageEvent| {
            if let Some(m) = Message::from_js(&e.data()) {
                let _ = TABS.try_with(|t| t.receive(m));
            }
        });
        ch.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        if self.tab_id.borrow().is_none() {
            *self.tab_id.borrow_mut() = session_tab_id();
        }
        if let Some(id) = self.tab_id.borrow().clone() {
            post(&ch, &Message::tab(Kind::Hello, id));
        }
        *self.channel.borrow_mut() = Some((ch, on_message));
    }

    /// Closes the channel: nothing keeps the event loop (a Node test runner) alive any more.
    fn close(&self) {
        if let Some((ch, _listener)) = self.channel.borrow_mut().take() {
            ch.set_onmessage(None);
            ch.close();
        }
    }

    fn send(&self, m: &Message) {
        if let Some((ch, _)) = &*self.channel.borrow() {
            post(ch, m);
        }
    }

    fn receive(&self, m: Message) {
        let mine = m.tab.is_some() && *self.tab_id.borrow() == m.tab;
        match (m.t, m.receipt) {
            (Kind::Paid, Some(receipt)) => remember_paid(receipt),
            (Kind::Hello, ..) if mine => {
                if let Some(tab) = m.tab {
                    self.send(&Message::tab(Kind::Taken, tab));
                }
            }
            (Kind::Taken, ..) if mine => {
                *self.tab_id.borrow_mut() = new_tab_id();
                self.duplicated.set(true);
                for (_, f) in self.listeners.borrow().iter() {
                    let _ = f.call1(
                        &JsValue::NULL,
                        &crate::core::error::Warning::DuplicatedTab.code().into(),
                    );
                }
            }
            _ => {}
        }
    }
}

/// A receipt as the message's `receipt` member: the members of [`Receipt`]'s serde derive
/// (which reads it back on the other side), the payment built by [`value::payment`].
fn receipt_js(r: &Receipt) -> JsValue {
    value::object_owned(&[
        ("baseUrl", r.base_url.as_str().into()),
        ("key", r.key.as_str().into()),
        ("snapshot", value::snapshot(&r.snapshot)),
        ("payment", value::payment(&r.payment)),
    ])
}

fn post(ch: &BroadcastChannel, m: &Message) {
    let _ = ch.post_message(&m.to_js());
}

/// This tab's id, made on first use.
fn session_tab_id() -> Option<String> {
    let s = web_sys::window()?.session_storage().ok()??;
    match s.get_item(TAB_ID).ok()? {
        Some(id) => Some(id),
        None => new_tab_id(),
    }
}

fn new_tab_id() -> Option<String> {
    let id = crate::web::io::random_uuid()?;
    let s = web_sys::window()?.session_storage().ok()??;
    s.set_item(TAB_ID, &id).ok()?;
    Some(id)
}

/// Joins the page-wide tab coordination (opening the channel for the first client);
/// `on_warning` hears `DUPLICATED_TAB`. The token is for [`leave`].
pub(crate) fn join(on_warning: Option<Function>) -> u32 {
    TABS.try_with(|t| {
        let token = t.next_token.get();
        t.next_token.set(token.wrapping_add(1));
        t.clients.set(t.clients.get() + 1);
        if t.channel.borrow().is_none() {
            t.open();
        }
        if let Some(f) = on_warning {
            if t.duplicated.get() {
                let _ = f.call1(
                    &JsValue::NULL,
                    &crate::core::error::Warning::DuplicatedTab.code().into(),
                );
            }
            t.listeners.borrow_mut().push((token, f));
        }
        token
    })
    .unwrap_or_default()
}

/// A client is gone (`free()`): forget its listener, and close the channel with the last one.
pub(crate) fn leave(token: u32) {
    let _ = TABS.try_with(|t| {
        t.listeners.borrow_mut().retain(|(k, _)| *k != token);
        let left = t.clients.get().saturating_sub(1);
        t.clients.set(left);
        if left == 0 {
            t.close();
        }
    });
}

/// True once this tab was found to be a duplicate.
pub(crate) fn duplicated() -> bool {
    TABS.try_with(|t| t.duplicated.get()).unwrap_or_default()
}

fn remember_paid(r: Receipt) {
    let _ = PAID.try_with(|p| {
        let mut p = p.borrow_mut();
        p.retain(|o| {
            !(o.base_url == r.base_url
                && o.snapshot.order_id == r.snapshot.order_id
                && o.key == r.key)
        });
        p.push(r);
    });
}

/// Records a payment made here and tells the other tabs.
pub(crate) fn announce_paid(receipt: Receipt) {
    let _ = TABS.try_with(|t| {
        t.send(&Message {
            t: Kind::Paid,
            tab: None,
            receipt: Some(receipt.clone()),
        })
    });
    remember_paid(receipt);
}

/// The latest hint that `checkout` was paid through `base_url` (this page or another tab), if
/// one applies. A hint: the caller confirms it with the server.
pub(crate) fn receipt(base_url: &str, checkout: &CheckoutSnapshot) -> Option<Receipt> {
    PAID.try_with(|p| {
        p.borrow()
            .iter()
            .rev()
            .find(|r| r.applies_to(base_url, checkout))
            .cloned()
    })
    .ok()
    .flatten()
}

/// Forgets every receipt (logout).
pub(crate) fn forget_all() {
    let _ = PAID.try_with(|p| p.borrow_mut().clear());
}
