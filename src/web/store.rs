//! Where attempts are kept: sessionStorage (survives a reload, dies with the tab, never shared
//! with other tabs, and written before the request is sent), or memory when storage is unavailable.
//!
//! Entry format: key `payonce:attempt:<orderId>`, value the JSON of [`Attempt`] (its members
//! as its serde derives spell them, written and read member by member, through the browser's
//! `JSON`):
//! `{"key":"…","snapshot":{"orderId":"…","orderVersion":3,"paymentMethodId":"pm_…"},
//! "state":"saved"|"sent"|"unknown","createdAt":1764466000000,"sends":1}`.
//!
//! Fallback: any storage call that throws (blocked storage, quota) moves the write to memory,
//! reports `STORAGE_UNAVAILABLE` once, and keeps going. Reads look in memory first, then in
//! sessionStorage, so an attempt saved before the fallback still blocks a second payment.

use crate::core::attempt::{storage_key, Attempt, AttemptState, Entry, STORAGE_PREFIX};
use crate::web::value::{self, Kind};
use payonce_protocol::{CheckoutSnapshot, IdempotencyKey};
use std::cell::{Cell, RefCell};
use wasm_bindgen::JsValue;
use web_sys::Storage;

pub(crate) struct Store {
    session: Option<Storage>,
    memory: RefCell<Vec<(String, String)>>,
    fell_back: Cell<bool>,
}

/// Whether a write moved to memory just now (so the caller reports it once).
pub(crate) struct FellBack(pub bool);

impl Store {
    /// `use_session = false` keeps everything in memory (the `storage: "memory"` option).
    /// Returns the store and whether sessionStorage was wanted but unavailable.
    pub(crate) fn new(use_session: bool) -> (Self, FellBack) {
        let session = if use_session { probe() } else { None };
        let fell = use_session && session.is_none();
        (
            Self {
                session,
                memory: RefCell::new(Vec::new()),
                fell_back: Cell::new(fell),
            },
            FellBack(fell),
        )
    }

    pub(crate) fn in_memory(&self) -> bool {
        self.session.is_none() || self.fell_back.get()
    }

    fn raw(&self, name: &str) -> Option<String> {
        if let Some((_, v)) = self.memory.borrow().iter().find(|(k, _)| k == name) {
            return Some(v.clone());
        }
        self.session
            .as_ref()
            .and_then(|s| s.get_item(name).ok().flatten())
    }

    /// What is stored for an order. A damaged value is an [`Entry::Unreadable`], never a panic.
    pub(crate) fn get(&self, order_id: &str) -> Entry {
        match self.raw(&storage_key(order_id)) {
            None => Entry::Missing,
            Some(text) => decode(&text),
        }
    }

    /// Writes an attempt (before its request is sent).
    pub(crate) fn put(&self, a: &Attempt) -> FellBack {
        let name = storage_key(&a.snapshot.order_id);
        let text = encode(a);
        if !self.fell_back.get() {
            if let Some(s) = &self.session {
                if s.set_item(&name, &text).is_ok() {
                    return FellBack(false);
                }
                self.fell_back.set(true);
                self.remember(name, text);
                return FellBack(true);
            }
        }
        self.remember(name, text);
        FellBack(false)
    }

    fn remember(&self, name: String, text: String) {
        let mut m = self.memory.borrow_mut();
        m.retain(|(k, _)| *k != name);
        m.push((name, text));
    }

    /// Writes `a` back only while the stored entry still holds the same key: a cancel or a
    /// final answer elsewhere may have removed it, and it must not come back.
    pub(crate) fn update(&self, a: &Attempt) -> FellBack {
        match self.get(&a.snapshot.order_id) {
            Entry::Valid(cur) if cur.key == a.key => self.put(a),
            _ => FellBack(false),
        }
    }

    /// Removes the order's entry if it still holds `key` (or any entry, with `None`).
    pub(crate) fn remove(&self, order_id: &str, key: Option<&IdempotencyKey>) {
        let entry = self.get(order_id);
        if let (Some(k), Some(cur)) = (key, entry.key()) {
            if k != cur {
                return;
            }
        }
        let name = storage_key(order_id);
        self.memory.borrow_mut().retain(|(k, _)| *k != name);
        if let Some(s) = &self.session {
            let _ = s.remove_item(&name);
        }
    }

    /// Removes every attempt (logout). Returns how many were removed.
    pub(crate) fn clear_all(&self) -> u32 {
        let mut n = 0;
        {
            let mut m = self.memory.borrow_mut();
            let before = m.len();
            m.retain(|(k, _)| !k.starts_with(STORAGE_PREFIX));
            n += (before - m.len()) as u32;
        }
        if let Some(s) = &self.session {
            // From the last index down, so a removal never shifts a key not yet visited.
            let mut i = s.length().unwrap_or(0);
            while i > 0 {
                i -= 1;
                if let Ok(Some(k)) = s.key(i) {
                    if k.starts_with(STORAGE_PREFIX) && s.remove_item(&k).is_ok() {
                        n += 1;
                    }
                }
            }
        }
        n
    }
}

/// sessionStorage if it exists and accepts a write (Safari's private mode and blocked
/// third-party storage throw on access or on `setItem`).
fn probe() -> Option<Storage> {
    let s = web_sys::window()?.session_storage().ok()??;
    let probe = "payonce:probe";
    s.set_item(probe, "1").ok()?;
    s.remove_item(probe).ok()?;
    Some(s)
}

/// The JSON of [`Attempt`]'s members as its serde derive spells them (the entry format
/// above), written and read member by member: the module then carries no struct serializer or
/// visitor for `Attempt` (the snapshot still goes through its derives).
fn encode(a: &Attempt) -> String {
    let v = value::object_owned(&[
        ("key", a.key.as_str().into()),
        ("snapshot", value::snapshot(&a.snapshot)),
        ("state", a.state.as_str().into()),
        ("createdAt", JsValue::from_f64(a.created_at as f64)),
        ("sends", a.sends.into()),
    ]);
    value::json(&v)
}

/// [`encode`]'s value read back; `None` when a member is missing or of another kind.
fn read(v: &JsValue) -> Option<Attempt> {
    let int = |k, max| value::member(v, k, Kind::Int(max)).ok()?.as_f64();
    Some(Attempt {
        key: IdempotencyKey::parse(&value::get(v, "key").as_string()?).ok()?,
        snapshot: value::from_js::<CheckoutSnapshot>(&value::get(v, "snapshot"))?,
        state: AttemptState::parse(&value::get(v, "state").as_string()?)?,
        created_at: int("createdAt", value::MAX_SAFE)? as u64,
        sends: int("sends", value::MAX_U32)? as u32,
    })
}

fn decode(text: &str) -> Entry {
    let Ok(v) = js_sys::JSON::parse(text) else {
        return Entry::Unreadable { key: None };
    };
    let full = read(&v);
    let salvaged = if full.is_none() {
        // Just the key of a value whose other members do not read: one member, read directly.
        value::get(&v, "key")
            .as_string()
            .and_then(|k| IdempotencyKey::parse(&k).ok())
    } else {
        None
    };
    Entry::from_decoded(full, salvaged)
}
