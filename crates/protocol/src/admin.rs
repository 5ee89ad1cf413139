//! The operator API (`/admin/…`, docs/operating.md): its paths, its look-up parameters, and
//! the names of the journal's actors and entry kinds that its answers carry. Not part of the
//! customer protocol: the SDK never calls it, so its paths are not in
//! [`crate::body::paths::ALL`].

/// Operator API paths, spelled once.
pub mod paths {
    /// `GET` the page for people (HTML).
    pub const PAGE: &str = "/admin/";
    /// `GET` the review queue: orders held for a person, with reasons and ages.
    pub const REVIEWS: &str = "/admin/reviews";
    /// `GET` journal entries by one of [`super::lookup::ALL`] (`?key=…`).
    pub const LOOKUP: &str = "/admin/lookup";
    /// `GET /admin/orders/{id}/timeline`: the order, its attempts and keys, the journal and
    /// the audit trail in time order.
    pub fn timeline(order_id: &str) -> String {
        format!("/admin/orders/{order_id}/timeline")
    }
    /// `GET /admin/orders/{id}/evidence`: one JSON document for a dispute answer.
    pub fn evidence(order_id: &str) -> String {
        format!("/admin/orders/{order_id}/evidence")
    }
    /// `POST /admin/users/{id}/erase`: erase a user's personal data (docs/deploy.md,
    /// "Erasing a user"), as `payonce-server erase-user` does.
    pub fn erase_user(user: &str) -> String {
        format!("/admin/users/{user}/erase")
    }
    /// `POST /admin/reviews/{order_id}/resolve` with [`super::resolve::NOTE`]: ask the
    /// provider again and settle the order's review flags from its answer.
    pub fn resolve(order_id: &str) -> String {
        format!("/admin/reviews/{order_id}/resolve")
    }
    /// `GET`, dev mode only (`--dev`; a production build has no such route): a dev operator
    /// token for the demo's "what happened?" link (docs/demo.md), `{"token": …}`. Minted at
    /// start, valid for this process only; a customer's session is still refused at `/admin/`.
    pub const DEV_OPERATOR: &str = "/dev/operator";
    /// Every operator path as a template (`{id}` for a path segment).
    pub const ALL: &[&str] = &[
        REVIEWS,
        LOOKUP,
        "/admin/orders/{id}/timeline",
        "/admin/orders/{id}/evidence",
        "/admin/users/{id}/erase",
        "/admin/reviews/{id}/resolve",
    ];
}

/// The query parameters of `GET /admin/lookup`: exactly one per request.
pub mod lookup {
    /// A client's idempotency key (a pay's or a refund's).
    pub const KEY: &str = "key";
    /// A provider object id (Stripe's `pi_…`, a mock charge id, a refund id).
    pub const PROVIDER_ID: &str = "provider_id";
    /// A request id (`X-Request-Id`, the client's or the one the server minted).
    pub const REQUEST_ID: &str = "request_id";
    /// A user id.
    pub const USER: &str = "user";
    /// Every parameter above.
    pub const ALL: &[&str] = &[KEY, PROVIDER_ID, REQUEST_ID, USER];
}

/// The members of the resolve action's body and answer
/// (`POST /admin/reviews/{order_id}/resolve`).
pub mod resolve {
    /// The body's one member: the operator's note, journaled with the outcome.
    pub const NOTE: &str = "note";
    /// Longest note accepted, in bytes.
    pub const NOTE_MAX: usize = 2000;
    /// The answer's order id.
    pub const ORDER_ID: &str = "orderId";
    /// The answer's list of what was done, one object per flag.
    pub const RESOLVED: &str = "resolved";
    /// Each resolved flag's attempt id (absent for an order held without one).
    pub const ATTEMPT_ID: &str = "attemptId";
    /// Each resolved flag's outcome, one of the values below.
    pub const OUTCOME: &str = "outcome";
    /// Why, in words.
    pub const WHY: &str = "why";
    /// In the journal entry: why a flag stays, when one does (the answer is then 409
    /// `REVIEW_UNRESOLVED` with it as the detail).
    pub const UNRESOLVED: &str = "unresolved";
    /// Outcome: the provider charged the processing attempt; the order is paid.
    pub const PAID: &str = "paid";
    /// Outcome: the provider proved nothing was charged; the attempt ended, the order is free.
    pub const RELEASED: &str = "released";
    /// Outcome: the stray payment of an ended attempt was refunded; the hold is lifted.
    pub const REFUNDED: &str = "refunded";
    /// Outcome: the provider holds no money for the ended attempt; the hold is lifted.
    pub const CLEARED: &str = "cleared";
}

/// Who caused a journal entry.
pub mod actor {
    /// A client's request (pay, cancel, refund).
    pub const REQUEST: &str = "request";
    /// A background job (outbox worker, reconciliation, refunds, emails).
    pub const JOB: &str = "job";
    /// A provider's webhook delivery.
    pub const WEBHOOK: &str = "webhook";
    /// An operator, through `/admin/…`.
    pub const OPERATOR: &str = "operator";
    /// Work outside any request, job round or webhook (a command, a start).
    pub const SYSTEM: &str = "system";
}

/// What a journal entry records.
pub mod kind {
    /// `POST /orders/{id}/pay` answered.
    pub const PAY: &str = "pay";
    /// `POST /orders/{id}/payment-attempts/cancel` answered.
    pub const CANCEL: &str = "cancel";
    /// `POST /payments/{id}/refund` answered.
    pub const REFUND: &str = "refund";
    /// One call to the payment provider.
    pub const PROVIDER_CALL: &str = "provider_call";
    /// An operator read something through `/admin/…`.
    pub const OPERATOR_READ: &str = "operator_read";
    /// An operator changed something through `/admin/…` (an erasure).
    pub const OPERATOR_ACTION: &str = "operator_action";
    /// A verified provider webhook and what it came to ([`super::verdict`]).
    pub const WEBHOOK: &str = "webhook";
}

/// The machine decisions the journal keeps, each a journal entry's `kind`, written in the
/// transaction of the state change it explains (or alone when nothing changed: a claim that
/// lost). Its `detail` says why ([`member::WHY`], [`member::OUTCOME`]).
pub mod decision {
    /// A new key's claim committed: attempt processing, order locked, stock reserved, the
    /// attempt's lease taken.
    pub const CLAIM_WON: &str = "claim_won";
    /// A pay ended without claiming: [`super::lost`] says why.
    pub const CLAIM_LOST: &str = "claim_lost";
    /// The expired lease of a processing attempt was taken over (pay rule 5).
    pub const LEASE_TAKEN_OVER: &str = "lease_taken_over";
    /// A settle plan executed: [`super::settle`] names it.
    pub const SETTLE: &str = "settle";
    /// An attempt (and for a stray charge its order) flagged for a person, with the reason.
    pub const REVIEW_FLAG: &str = "review_flag";
    /// A cancel's tombstone took the key.
    pub const TOMBSTONE: &str = "tombstone";
    /// A refund's lease was taken (the request or the refunds job drives it).
    pub const REFUND_LEASE: &str = "refund_lease";
    /// A refund settled (succeeded, failed) or was marked made at the provider.
    pub const REFUND_SETTLE: &str = "refund_settle";
    /// The receipt email of a paid order was queued (with the charge's settle).
    pub const EMAIL_QUEUED: &str = "email_queued";
    /// A receipt job's run ended: [`super::email`] says how.
    pub const EMAIL: &str = "email";
    /// Every decision kind above.
    pub const ALL: &[&str] = &[
        CLAIM_WON,
        CLAIM_LOST,
        LEASE_TAKEN_OVER,
        SETTLE,
        REVIEW_FLAG,
        TOMBSTONE,
        REFUND_LEASE,
        REFUND_SETTLE,
        EMAIL_QUEUED,
        EMAIL,
    ];
}

/// Why a pay did not claim its key ([`decision::CLAIM_LOST`]'s [`member::OUTCOME`]).
pub mod lost {
    /// The key is final: its stored answer was replayed.
    pub const REPLAY: &str = "replay";
    /// Another request holds the key's lease.
    pub const IN_PROGRESS: &str = "in_progress";
    /// The key was used with other details (its fingerprint differs).
    pub const FINGERPRINT: &str = "fingerprint";
    /// The order is at another version than the one the request names.
    pub const ORDER_VERSION: &str = "order_version";
    /// Another attempt holds the order.
    pub const ANOTHER_ATTEMPT_ACTIVE: &str = "another_attempt_active";
    /// The order is paid.
    pub const PAID: &str = "paid";
    /// A cancel's tombstone holds the key.
    pub const TOMBSTONE: &str = "tombstone";
    /// The order is held for review.
    pub const UNDER_REVIEW: &str = "under_review";
    /// A line's stock ran out.
    pub const OUT_OF_STOCK: &str = "out_of_stock";
    /// Refused for another reason: the problem code says which.
    pub const REFUSED: &str = "refused";
}

/// The settle plans ([`decision::SETTLE`]'s [`member::OUTCOME`]).
pub mod settle {
    /// Charged: the order is paid, the receipt queued.
    pub const PAID: &str = "paid";
    /// The provider declined or refused: nothing charged, the order unlocked.
    pub const DECLINED: &str = "declined";
    /// The customer's action passed its deadline: the payment cancelled, nothing charged.
    pub const EXPIRED: &str = "expired";
    /// Ended without a charge otherwise (cancelled by the customer, reconciliation found
    /// none): the order unlocked.
    pub const UNCHARGED: &str = "uncharged";
    /// The outcome is unknown: the lease released early, the attempt stays processing.
    pub const RELEASED: &str = "released";
    /// The charge waits for the customer: the jobs look again later.
    pub const CHECK_LATER: &str = "check_later";
}

/// How a refund settled ([`decision::REFUND_SETTLE`]'s [`member::OUTCOME`]).
pub mod refund {
    /// The provider refunded the charge: the payment, its order and its attempt refunded.
    pub const SUCCEEDED: &str = "succeeded";
    /// The provider refused: nothing refunded, the payment's refund slot freed.
    pub const FAILED: &str = "failed";
    /// Refunded outside payonce (the provider's dashboard): the payment marked refunded.
    pub const AT_PROVIDER: &str = "at_provider";
}

/// How a receipt job's run ended ([`decision::EMAIL`]'s [`member::OUTCOME`]).
pub mod email {
    /// Delivered.
    pub const SENT: &str = "sent";
    /// Not delivered; due again later.
    pub const RETRY: &str = "retry";
    /// Final without a delivery (failed for good, no address, mailer off).
    pub const FAILED: &str = "failed";
}

/// What a verified webhook came to ([`kind::WEBHOOK`]'s [`member::VERDICT`]). A delivery
/// whose signature fails is never journaled.
pub mod verdict {
    /// It changed an attempt, a payment or a refund.
    pub const APPLIED: &str = "applied";
    /// Handled before: not applied again.
    pub const DUPLICATE: &str = "duplicate";
    /// A type payonce does not act on.
    pub const IGNORED: &str = "ignored";
    /// Nothing to apply (settled by someone else, a partial refund, …).
    pub const NO_EFFECT: &str = "no_effect";
    /// No attempt of ours holds what it names.
    pub const UNKNOWN_OBJECT: &str = "unknown_object";
    /// The provider could not confirm it now: it delivers it again.
    pub const UNCONFIRMED: &str = "unconfirmed";
}

/// The provider operations a [`kind::PROVIDER_CALL`] entry names ([`member::OP`]).
pub mod op {
    /// One-phase charge.
    pub const CHARGE: &str = "charge";
    /// Two phases: create the payment object.
    pub const CREATE: &str = "create";
    /// Two phases: confirm the saved object.
    pub const CONFIRM: &str = "confirm";
    /// Look a payment up by provider key or saved id.
    pub const LOOKUP: &str = "lookup";
    /// Cancel a payment that waits for the customer.
    pub const CANCEL: &str = "cancel";
    /// Cancel a payment object that did not charge.
    pub const CANCEL_UNCHARGED: &str = "cancel_uncharged";
    /// Refund a charge.
    pub const REFUND: &str = "refund";
    /// List a charge's refunds.
    pub const REFUNDS_OF: &str = "refunds_of";
}

/// Member names of the operator API's answers that the server composes (the rows inside them
/// carry the columns' names, `crates/server/src/store/journal.rs`).
pub mod answer {
    /// The order (timeline, evidence).
    pub const ORDER: &str = "order";
    /// The order's attempts and tombstones (timeline).
    pub const ATTEMPTS: &str = "attempts";
    /// The order's payment (timeline, evidence).
    pub const PAYMENTS: &str = "payments";
    /// The payment's refunds (timeline, evidence).
    pub const REFUNDS: &str = "refunds";
    /// The mails sent about the order (timeline, evidence).
    pub const MAILS: &str = "mails";
    /// The journal and audit rows in time order (timeline).
    pub const EVENTS: &str = "events";
    /// Where an event comes from: [`SOURCE_JOURNAL`] or [`SOURCE_AUDIT`].
    pub const SOURCE: &str = "source";
    /// An event of the journal.
    pub const SOURCE_JOURNAL: &str = "journal";
    /// An event of the audit trail.
    pub const SOURCE_AUDIT: &str = "audit";
    /// The attempt that paid (evidence).
    pub const CONFIRMED_ATTEMPT: &str = "confirmedAttempt";
    /// The requests of the key that paid (evidence).
    pub const REQUESTS: &str = "requests";
    /// The provider's object ids (evidence).
    pub const PROVIDER_IDS: &str = "providerIds";
    /// The orders the found entries name (look-up).
    pub const ORDERS: &str = "orders";
    /// The entries found (look-up).
    pub const ENTRIES: &str = "entries";
    /// The most entries one look-up returns.
    pub const LIMIT: &str = "limit";
    /// The review queue.
    pub const REVIEWS: &str = "reviews";
    /// A review's latest reason.
    pub const REASON: &str = "reason";
    /// A review's age at the read, in milliseconds.
    pub const AGE_MS: &str = "ageMs";
    /// The user erased.
    pub const USER: &str = "user";
    /// What an erasure changed.
    pub const ERASED: &str = "erased";
    /// Order addresses erased.
    pub const ORDER_ADDRESSES: &str = "orderAddresses";
}

/// Member names of a journal entry's `detail` that the decisions and verdicts write.
pub mod member {
    /// Why (a [`super::lost`] name, or the audit trail's reason).
    pub const WHY: &str = "why";
    /// Which plan or ending ([`super::settle`], [`super::email`]).
    pub const OUTCOME: &str = "outcome";
    /// The attempt a decision is about.
    pub const ATTEMPT_ID: &str = "attemptId";
    /// The refund a decision is about.
    pub const REFUND_ID: &str = "refundId";
    /// A problem code the request was answered with.
    pub const CODE: &str = "code";
    /// A webhook's event id.
    pub const EVENT_ID: &str = "eventId";
    /// A webhook's provider event type.
    pub const TYPE: &str = "type";
    /// A webhook's [`super::verdict`].
    pub const VERDICT: &str = "verdict";
    /// The operation of a provider call ([`super::op`]).
    pub const OP: &str = "op";
    /// Order of entries made in the same millisecond (a process-wide counter).
    pub const SEQ: &str = "seq";
}
