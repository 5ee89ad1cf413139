//! The named steps a dev build can abort at (`--failpoint NAME`). The names live here so
//! every call site reads the same in both builds; the hooks (`crate::dev::failpoint`, ...)
//! are `src/dev/faults.rs` in a build with the `dev` feature, and no-ops in
//! `src/dev_off.rs` without it.

/// After the claim committed (attempt + outbox row), before the provider is called.
pub(crate) const AFTER_CLAIM: &str = "after-claim";
/// After the provider answered (it may have charged), before the outcome is stored.
pub(crate) const AFTER_CHARGE: &str = "after-charge";
/// Two phases: the provider created the payment object and named it; its id is not saved.
pub(crate) const AFTER_CREATE: &str = "after-create";
/// Two phases: the object's id is saved on the attempt; it is not confirmed yet.
pub(crate) const AFTER_SAVE_REF: &str = "after-save-ref";
/// Two phases: the provider answered the confirm (it may have charged), before the outcome
/// is stored.
pub(crate) const AFTER_CONFIRM: &str = "after-confirm";
/// Inside the settle transaction, just before its commit (the commit never happens).
pub(crate) const BEFORE_SETTLE_COMMIT: &str = "before-settle-commit";
/// After the outcome is stored, before the client is answered.
pub(crate) const AFTER_SAVE: &str = "after-save";
/// Inside the webhook handler: the event is recorded as received, not yet applied.
pub(crate) const WEBHOOK: &str = "webhook";
/// Inside the outbox worker: it took over an abandoned attempt, before it asks the provider.
pub(crate) const OUTBOX: &str = "outbox";
/// Inside the email job: the mail is sent and flagged, the job not yet acknowledged.
pub(crate) const EMAIL: &str = "email";
