//! What the journal says each machine decision was (docs/operating.md, "The journal"): its
//! kind, its outcome and why, named from the plan or the ending the machines chose. The
//! server only writes it, in the transaction of the change it explains
//! (crates/server/src/store/journal.rs); the names are the operator API's
//! (`payonce_protocol::admin`).

use crate::pay::{End, TakeOver};
use crate::plan::{AuditEntry, SettlePlan};
use crate::refund::{MarkRefunded, SettleRefund};
use payonce_protocol::admin::{decision, lost, refund, settle};
use payonce_protocol::{AttemptStatus, ErrorCode};

/// One decision as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `payonce_protocol::admin::decision`.
    pub kind: &'static str,
    /// Which plan or ending (`admin::settle`, `admin::lost`, `admin::email`), if the kind
    /// has several.
    pub outcome: Option<&'static str>,
    /// Why, in words (the audit trail's reason, or what the machine saw).
    pub why: String,
}

impl Decision {
    /// A decision of `kind` ending in `outcome`, because of `why`.
    pub fn new(kind: &'static str, outcome: Option<&'static str>, why: &str) -> Self {
        Self {
            kind,
            outcome,
            why: why.to_owned(),
        }
    }

    /// A decision whose reason is the first of its audit rows (the attempt's).
    fn audited(kind: &'static str, outcome: Option<&'static str>, audit: &[AuditEntry]) -> Self {
        let why = audit.first().map_or("", |a| a.reason.as_str());
        Self::new(kind, outcome, why)
    }
}

/// The claim of a new key committed (its audit row says at which version).
pub fn claim_won(audit: &[AuditEntry]) -> Decision {
    Decision::audited(decision::CLAIM_WON, None, audit)
}

/// The settle plan the machine chose, as the journal names it.
pub fn of_settle(plan: &SettlePlan) -> Decision {
    match plan {
        SettlePlan::Charged { audit, .. } => {
            Decision::audited(decision::SETTLE, Some(settle::PAID), audit)
        }
        SettlePlan::Uncharged { finish, audit, .. } => {
            let outcome = match finish.status {
                AttemptStatus::Declined => settle::DECLINED,
                AttemptStatus::Expired => settle::EXPIRED,
                _ => settle::UNCHARGED,
            };
            Decision::audited(decision::SETTLE, Some(outcome), audit)
        }
        SettlePlan::Unknown { .. } => released(),
        SettlePlan::ActionRequired { .. } => check_later(),
        SettlePlan::Review { audit, .. } => {
            Decision::audited(decision::REVIEW_FLAG, None, std::slice::from_ref(audit))
        }
    }
}

/// Nobody is talking to the provider about the attempt any more (its outcome is unknown, or
/// it waits for the customer): the lease ends early, the attempt stays processing.
pub fn released() -> Decision {
    Decision::new(
        decision::SETTLE,
        Some(settle::RELEASED),
        "no call in flight: the lease ends early; the attempt stays processing",
    )
}

/// The receipt email of a paid order queued with the charge's settle.
pub fn email_queued() -> Decision {
    Decision::new(
        decision::EMAIL_QUEUED,
        None,
        "the receipt email is queued with the payment",
    )
}

/// The charge waits for the customer: the jobs look at it again later.
pub fn check_later() -> Decision {
    Decision::new(
        decision::SETTLE,
        Some(settle::CHECK_LATER),
        "the charge waits for the customer; the jobs look again later",
    )
}

/// Why a pay ended without claiming its key; `None` when it claimed it (or a job's or a
/// webhook's ending).
pub fn claim_lost(end: &End) -> Option<Decision> {
    let (outcome, why) = match end {
        End::Replay { replayed: true, .. } => return Some(replayed()),
        End::Mismatch(_) => (lost::FINGERPRINT, "the key was used with other details"),
        End::Cancelled => (lost::TOMBSTONE, "a cancel's tombstone holds the key"),
        End::InProgress => (lost::IN_PROGRESS, "another request holds the key's lease"),
        End::Refused(problem) => return Some(refused(problem.code)),
        _ => return None,
    };
    Some(Decision::new(decision::CLAIM_LOST, Some(outcome), why))
}

/// The key is final: its stored answer was replayed (also before the rules ran, from the
/// replay cache or the key's row).
pub fn replayed() -> Decision {
    Decision::new(
        decision::CLAIM_LOST,
        Some(lost::REPLAY),
        "the key is final: its stored answer replayed",
    )
}

/// Why the order refused a claim, from the problem it was answered with
/// ([`crate::plan::order_refusal`], the stock).
pub fn refused(code: ErrorCode) -> Decision {
    let outcome = match code {
        ErrorCode::OrderChanged => lost::ORDER_VERSION,
        ErrorCode::PaymentAlreadyActive => lost::ANOTHER_ATTEMPT_ACTIVE,
        ErrorCode::OrderAlreadyPaid => lost::PAID,
        ErrorCode::OrderUnderReview => lost::UNDER_REVIEW,
        ErrorCode::OutOfStock => lost::OUT_OF_STOCK,
        _ => lost::REFUSED,
    };
    Decision::new(decision::CLAIM_LOST, Some(outcome), code.as_str())
}

/// The expired lease of a processing attempt taken over (its audit row says by whom).
pub fn lease_taken_over(take: &TakeOver) -> Decision {
    Decision::audited(
        decision::LEASE_TAKEN_OVER,
        None,
        std::slice::from_ref(&take.entry),
    )
}

/// An attempt flagged for a person, with the reason its audit row gives.
pub fn review_flag(entry: &AuditEntry) -> Decision {
    Decision::audited(decision::REVIEW_FLAG, None, std::slice::from_ref(entry))
}

/// A cancel's tombstone took the key (its audit row says why).
pub fn tombstone(entry: &AuditEntry) -> Decision {
    Decision::audited(decision::TOMBSTONE, None, std::slice::from_ref(entry))
}

/// A refund's lease taken for one provider call.
pub fn refund_lease() -> Decision {
    Decision::new(
        decision::REFUND_LEASE,
        None,
        "the refund's lease taken for one provider call",
    )
}

/// A processing refund settled as `plan` says.
pub fn refund_settle(plan: &SettleRefund) -> Decision {
    match plan {
        SettleRefund::Refunded { mark, .. } => Decision::audited(
            decision::REFUND_SETTLE,
            Some(refund::SUCCEEDED),
            &mark.audit,
        ),
        SettleRefund::Failed { audit, .. } => Decision::audited(
            decision::REFUND_SETTLE,
            Some(refund::FAILED),
            std::slice::from_ref(audit),
        ),
    }
}

/// A payment marked refunded for a refund made at the provider (its dashboard).
pub fn refunded_at_provider(mark: &MarkRefunded) -> Decision {
    Decision::audited(
        decision::REFUND_SETTLE,
        Some(refund::AT_PROVIDER),
        &mark.audit,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_protocol::Problem;

    #[test]
    fn a_lost_claim_names_why_and_a_won_one_is_not_lost() {
        let lost_of = |end: End| claim_lost(&end).map(|d| d.outcome);
        assert_eq!(lost_of(End::InProgress), Some(Some(lost::IN_PROGRESS)));
        assert_eq!(lost_of(End::Cancelled), Some(Some(lost::TOMBSTONE)));
        let refusal = End::Refused(Box::new(Problem::new(ErrorCode::OrderChanged)));
        assert_eq!(lost_of(refusal), Some(Some(lost::ORDER_VERSION)));
        assert_eq!(lost_of(End::Skipped), None);
        assert_eq!(
            refused(ErrorCode::OrderAlreadyPaid).outcome,
            Some(lost::PAID)
        );
    }
}
