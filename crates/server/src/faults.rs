//! The named steps a dev build can abort at (`--failpoint NAME`). The names live here so
//! every call site reads the same in both builds; the hooks (`crate::dev::failpoint`, ...)
//! are `src/dev/faults.rs` in a build with the `dev` feature, and no-ops in
//! `src/dev_off.rs` without it.

use std::fmt;

/// A step the process can be made to abort at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failpoint {
    /// After the claim committed (attempt + outbox row), before the provider is called.
    AfterClaim,
    /// After the provider answered (it may have charged), before the outcome is stored.
    AfterCharge,
    /// Two phases: the provider created the payment object and named it; its id is not saved.
    AfterCreate,
    /// Two phases: the object's id is saved on the attempt; it is not confirmed yet.
    AfterSaveRef,
    /// Two phases: the provider answered the confirm (it may have charged), before the
    /// outcome is stored.
    AfterConfirm,
    /// Inside the settle transaction, just before its commit (the commit never happens).
    BeforeSettleCommit,
    /// After the outcome is stored, before the client is answered.
    AfterSave,
    /// Inside the webhook handler: the event is recorded as received, not yet applied.
    Webhook,
    /// Inside the outbox worker: it took over an abandoned attempt, before it asks the
    /// provider.
    Outbox,
    /// Inside the email job: the mailer answered (with SMTP, the relay took the message),
    /// the receipt not settled yet.
    Email,
}

/// Every failpoint and its name on the command line, in the order `--help` and the
/// unknown-name error list them: the one spelling of each name.
pub(crate) const NAMES: [(Failpoint, &str); 10] = [
    (Failpoint::AfterClaim, "after-claim"),
    (Failpoint::AfterCharge, "after-charge"),
    (Failpoint::AfterCreate, "after-create"),
    (Failpoint::AfterSaveRef, "after-save-ref"),
    (Failpoint::AfterConfirm, "after-confirm"),
    (Failpoint::BeforeSettleCommit, "before-settle-commit"),
    (Failpoint::AfterSave, "after-save"),
    (Failpoint::Webhook, "webhook"),
    (Failpoint::Outbox, "outbox"),
    (Failpoint::Email, "email"),
];

impl Failpoint {
    /// The failpoint called `name`; `None` for a name nobody checks.
    #[cfg(feature = "dev")]
    pub(crate) fn parse(name: &str) -> Option<Self> {
        NAMES.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }

    /// Its name on the command line.
    pub(crate) fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("", |(_, n)| n)
    }
}

impl fmt::Display for Failpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failpoint_has_one_name_that_parses_back() {
        for (point, name) in NAMES {
            assert_eq!(Failpoint::parse(name), Some(point));
            assert_eq!(point.to_string(), name);
        }
        let mut names: Vec<_> = NAMES.iter().map(|(_, n)| n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert_eq!(Failpoint::parse("after-lunch"), None);
    }

    /// The server README's failpoint list is this one: an operator reading it can arm each.
    #[test]
    fn the_readme_names_every_failpoint() {
        let readme = include_str!("../README.md");
        let list = &readme[readme
            .find("- **Failpoints**")
            .expect("the failpoints item")..];
        let list = &list[..list.find("\n- **").unwrap_or(list.len())];
        let missing: Vec<&str> = NAMES
            .iter()
            .map(|(_, n)| *n)
            .filter(|n| !list.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "failpoints missing from the README: {missing:?}"
        );
    }
}
