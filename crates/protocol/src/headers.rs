//! HTTP header names used by payonce. Spelled here only.

/// Request header carrying the client's idempotency key (draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// Response header set to `true` when the body is a stored result replayed for a known key.
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";
/// Standard `Retry-After` header, in whole seconds.
pub const RETRY_AFTER: &str = "Retry-After";
/// Response header on pay: how many seconds the server keeps a finished key (and so how
/// long a retry with the same key is guaranteed to replay instead of charging again).
pub const KEY_RETENTION: &str = "Idempotency-Key-Retention";
/// Dev-mode only request header asking the server to inject a fault (see
/// [`crate::body::DevFault`]). Ignored (and rejected) unless the server runs in dev mode.
pub const DEV_FAULT: &str = "Payonce-Dev-Fault";
/// Header on provider webhooks: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "t.body")>`.
pub const WEBHOOK_SIGNATURE: &str = "Payonce-Signature";
/// Header on Stripe's webhooks: the same format as [`WEBHOOK_SIGNATURE`], with one `v1` per
/// active signing secret (`crate::signature`).
pub const STRIPE_SIGNATURE: &str = "Stripe-Signature";
/// Header on every request the server sends to Stripe: the API version its adapter is
/// written for (`crates/server/src/provider/stripe.rs`, `API_VERSION`), so an account's
/// default version cannot change what an answer means. A request to the provider, not
/// payonce's own API, so not in [`ALL`].
pub const STRIPE_VERSION: &str = "Stripe-Version";
/// Header on every answer of Stripe's API: Stripe's own id of the request, journaled with
/// each provider call (`crates/server/src/journal.rs`) so that a call can be found in Stripe's
/// dashboard logs. Not payonce's own API, so not in [`ALL`].
pub const STRIPE_REQUEST_ID: &str = "Request-Id";
/// Name of the HttpOnly session cookie set by `POST /dev/sessions`.
pub const SESSION_COOKIE: &str = "payonce_session";
/// Response header naming the request, for matching client reports to server logs.
pub const REQUEST_ID: &str = "X-Request-Id";

/// Every header and cookie name above, for exhaustive checks (the drift test holds
/// `docs/protocol.md` and the server's `openapi.json` to this list).
pub const ALL: &[&str] = &[
    IDEMPOTENCY_KEY,
    IDEMPOTENT_REPLAYED,
    RETRY_AFTER,
    KEY_RETENTION,
    DEV_FAULT,
    WEBHOOK_SIGNATURE,
    STRIPE_SIGNATURE,
    SESSION_COOKIE,
    REQUEST_ID,
];

/// The headers the SDK sets on every request besides `Content-Type`: a cross-origin backend
/// MUST allow them (and `Content-Type`) in `Access-Control-Allow-Headers`, else the browser's
/// preflight fails and no request leaves (`docs/protocol.md` §3).
pub const SDK_SENDS: &[&str] = &[IDEMPOTENCY_KEY, REQUEST_ID];

/// The answer headers the SDK reads: a cross-origin backend SHOULD list them in
/// `Access-Control-Expose-Headers`, else the browser hides them from the SDK (`Retry-After`
/// paces its retries, `Idempotent-Replayed` and `X-Request-Id` reach the app's events).
/// The SDK's reads (`src/web/io.rs`) are held to this list by `crates/protocol/tests/drift.rs`.
pub const SDK_READS: &[&str] = &[RETRY_AFTER, IDEMPOTENT_REPLAYED, REQUEST_ID];

/// The standard CORS answer headers a cross-origin backend sets for the SDK (named in the
/// SDK's `NETWORK_OR_CORS` warning). Not payonce's own names, so not in [`ALL`].
pub mod cors {
    /// The origin allowed to read the answer (the page's origin itself when credentials go
    /// along: `*` is refused then).
    pub const ALLOW_ORIGIN: &str = "Access-Control-Allow-Origin";
    /// `true`: the answer may be read although the request carried credentials.
    pub const ALLOW_CREDENTIALS: &str = "Access-Control-Allow-Credentials";
    /// The request headers a cross-origin request may carry (the preflight's answer).
    pub const ALLOW_HEADERS: &str = "Access-Control-Allow-Headers";
    /// The answer headers the page may read.
    pub const EXPOSE_HEADERS: &str = "Access-Control-Expose-Headers";
}
