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
    /// Every operator path as a template (`{id}` for a path segment).
    pub const ALL: &[&str] = &[
        REVIEWS,
        LOOKUP,
        "/admin/orders/{id}/timeline",
        "/admin/orders/{id}/evidence",
        "/admin/users/{id}/erase",
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
}
