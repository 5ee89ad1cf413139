//! payonce: the browser side of "the customer is charged once". What it needs from the
//! backend is written in `docs/protocol.md` (normative; `payonce-conformance` checks a backend
//! against it), and what it does with each answer is the table of [`core::classify`].
//!
//! # Layout
//! - [`core`]: the pure decision core, no web-sys: the stored attempt and which key a Pay click
//!   uses ([`core::attempt`]), what an answer means ([`core::classify`]), backoff with full
//!   jitter, `Retry-After`, the retry budget and the deadline ([`core::retry`]), the SDK's
//!   error codes ([`core::error`]), and the pay loop itself as a sans-IO state machine
//!   ([`core::flow`]). Tested natively with unit and property tests.
//! - `web` (wasm32 only): the thin I/O layer and the JavaScript API (`PayonceClient`,
//!   `PayonceError`), which performs the flow's effects: sessionStorage with an in-memory fallback, fetch with per-request
//!   timeouts, Web Locks, BroadcastChannel, `online` waits and abort signals.
//!
//! # Decisions worth knowing
//! - A key is minted only on a Pay click with no unresolved attempt for the order (this tab's,
//!   or one another tab of the browser is sending: that one is adopted, see below), and saved in
//!   sessionStorage (`payonce:attempt:<orderId>`) before the request leaves. It is removed only
//!   on a final answer. The outcomes of `pay`:
//!
//!   | outcome | when | key |
//!   |---|---|---|
//!   | `paid`, `byThisAttempt: true` | 200 `succeeded` for this key (an adopted attempt's replayed 200 says `false`: the other tab charged) | removed |
//!   | `paid`, `byThisAttempt: false` | 409 `ORDER_ALREADY_PAID`: another key paid the order; `payment` is its receipt | removed |
//!   | `declined` | 402 `PAYMENT_DECLINED` / `PAYMENT_FAILED` | removed |
//!   | `cancelled` | 409 `ATTEMPT_CANCELLED` | removed |
//!   | `orderChanged` | 409 `ORDER_CHANGED` | removed |
//!   | `busy` | 409 `PAYMENT_ALREADY_ACTIVE`: another attempt runs; the key is tombstoned with a cancel first | removed by the cancel |
//!   | `actionRequired` | 402 `ACTION_REQUIRED` (3-D Secure: the same key finishes it) | kept |
//!   | `pending` | no final answer within the call's bounds | kept |
//!   | error `SERVER_REJECTED` | a refusal that claimed no key (401, ...: `core::classify::claims_no_key`) to the key's first request | removed |
//!   | error `SERVER_REJECTED`, `PROTOCOL_MISMATCH`, `NETWORK_OR_CORS`, ... | other refusals (`KEY_REUSED_WITH_DIFFERENT_DETAILS`, a 401 to a key sent before, ...), answers that do not fit the protocol, a diagnosed CORS refusal | kept |
//!
//!   `cancel()` resolves a kept key (the server tombstones a key it never saw; a cancel
//!   answered `ORDER_NOT_FOUND` or `KEY_REUSED_WITH_DIFFERENT_DETAILS` resolves it as
//!   `notFound`).
//! - One pay call sends at most `maxAttempts` requests, polls included, and waits at least the
//!   base delay (jittered) between any two, whatever `Retry-After` says.
//! - Receipts from other tabs are hints: used only for the same base URL and checkout, and only
//!   after one confirming request with the receipt's key (a replay).
//! - Tabs of one browser pay an order one at a time (a Web Lock per order). A tab that finds
//!   another tab paying the order says so (status `waitingForOtherTab`, event `tabWait`), reads
//!   that tab's attempt from the lock it holds while sending (`web::tabs`), and when its turn
//!   comes adopts it (event `tabAdopt`): same key, same checkout, so its outcome is the other
//!   tab's (a replay), or, if that tab is gone, it finishes the attempt itself.
//! - Other details for an order with an unresolved attempt reject with `SNAPSHOT_CONFLICT`.
//! - A stored entry that does not decode never crashes the SDK: if a key can still be read from
//!   it, pay rejects with `UNREADABLE_ATTEMPT` until `cancel()` resolves it; if not, it is
//!   replaced and reported (`onWarning("UNREADABLE_ENTRY")`).
//! - Storage that throws moves attempts to memory (`storageMode === "memory"`, warning
//!   `STORAGE_UNAVAILABLE`); unresolved attempts still block other details on this page.
//! - The foundations: wasm-bindgen, web-sys and js-sys for the browser,
//!   serde with serde-wasm-bindgen reading checkout snapshots at the JS boundary
//!   (`web::value`; the server's answers are read, and what the SDK writes is built, member
//!   by member), uuid (v4 keys built from
//!   `crypto.getRandomValues` bytes, no features) for idempotency keys, gloo-timers for
//!   every timer and wait. JSON text goes through the browser's `JSON` (no serde_json in the
//!   module). The wasm32 allocator is talc, not the default dlmalloc (2.6 KB gzip smaller,
//!   measured on the release package).
#![deny(missing_docs)]

use wasm_bindgen::prelude::*;

pub mod core;
#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::{PayonceClient, PayonceError};

/// The SDK version, for support reports and the release smoke test.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

// talc instead of the default dlmalloc: a maintained allocator, 2.6 KB gzip smaller in the
// release module (70953 vs 73541 B with serde-wasm-bindgen, measured). Single-threaded wasm only, as the SDK is.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOC: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// What the READMEs and the `.d.ts` text (`src/web/mod.rs`) say of the client's options holds
/// for the code: an app built from them must reach the endpoints the SDK requests.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod documented_options {
    use payonce_protocol::body::paths;

    const NPM_README: &str = include_str!("../npm/README.md");
    const README: &str = include_str!("../README.md");
    const TYPES: &str = include_str!("web/mod.rs");

    #[test]
    fn the_default_cancel_endpoint_is_written_as_the_sdk_requests_it() {
        let id = "${encodeURIComponent(orderId)}";
        let cancel = ["${baseUrl}", &paths::cancel(id)].concat();
        let pay = ["${baseUrl}", &paths::pay(id)].concat();
        for (file, text) in [("npm/README.md", NPM_README), ("src/web/mod.rs", TYPES)] {
            assert!(
                text.contains(&pay),
                "{file} states the default pay URL {pay}"
            );
            assert!(
                text.contains(&cancel),
                "{file} states the default cancel URL {cancel}"
            );
        }
        for (file, text) in [
            ("npm/README.md", NPM_README),
            ("README.md", README),
            ("src/web/mod.rs", TYPES),
        ] {
            assert!(
                !text.contains("`.../cancel`"),
                "{file} abbreviates the cancel URL to a path the SDK does not request"
            );
        }
    }

    /// The README's TypeScript recipes are the blocks tools/ts-check compiles (with the package
    /// imported from `pkg/` instead of `payonce`): a recipe that does not compile fails there.
    #[test]
    fn the_readme_recipes_are_the_ones_tsc_compiles() {
        for (heading, file, compiled) in [
            (
                "### 3-D Secure",
                "tools/ts-check/recipe-3ds.ts",
                include_str!("../tools/ts-check/recipe-3ds.ts"),
            ),
            (
                "### Your own backend",
                "tools/ts-check/recipe-bearer.ts",
                include_str!("../tools/ts-check/recipe-bearer.ts"),
            ),
        ] {
            let section = NPM_README
                .split(heading)
                .nth(1)
                .expect("npm/README.md has the recipe's section");
            let block = section
                .split("```ts\n")
                .nth(1)
                .and_then(|b| b.split("```").next())
                .expect("the section has a ts block");
            let block = block.replace("from \"payonce\"", "from \"../../pkg/payonce.js\"");
            let between = compiled
                .split("// README block start\n")
                .nth(1)
                .and_then(|b| b.split("// README block end").next())
                .expect("the file marks the README's block");
            assert_eq!(
                between, block,
                "{file} differs from npm/README.md's {heading} block"
            );
        }
    }

    /// The option names of npm/README.md's options table (`retry.baseDelayMs` as `retry`).
    fn table_options() -> Vec<&'static str> {
        let table = NPM_README
            .split("| option | default | what it does |")
            .nth(1)
            .expect("npm/README.md has the options table");
        table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('`').nth(1))
            .map(|name| name.split('.').next().unwrap_or(name))
            .collect()
    }

    #[test]
    fn the_readme_names_as_client_options_only_what_create_takes() {
        let at = README
            .find("option with its default")
            .expect("README.md lists the client options");
        let list = &README[at..];
        let list = &list[list.find('(').unwrap_or(0) + 1..];
        let list = &list[..list.find([';', ')']).unwrap_or(list.len())];
        let named: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
        assert!(named.len() >= 5, "{named:?}");
        let table = table_options();
        for name in named {
            assert!(
                table.contains(&name),
                "README.md lists `{name}` as a client option; npm/README.md's table of what \
                 create takes does not have it"
            );
        }
    }
}
