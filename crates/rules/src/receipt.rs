//! The receipt email's decisions: what a relay's answer means for the job, when a
//! transient failure is tried again, and the `Message-ID` a payment's receipt carries.
//!
//! SMTP has no idempotency key. The job is marked sent only after the relay accepted the
//! message (a 2xx), so a crash between that answer and the commit sends it once more:
//! at least once, with duplicates only in that window, each one carrying the same
//! [`message_id`] so a mail system that threads or deduplicates on it sees one message.
//! A 4xx (and a relay that cannot be reached or does not answer in time) is transient:
//! tried again after [`retry_at`], at most [`MAX_TRIES`] times. A 5xx is final: the job
//! ends `failed`, flagged, never tried again.

/// What the relay (or the attempt to reach it) answered for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayAnswer {
    /// 2xx after the message's data: it is the relay's now.
    Accepted,
    /// A 4xx, a connection refused, a timeout: try again later.
    Transient(String),
    /// A 5xx: the relay will never take this message as it is.
    Permanent(String),
}

/// What the receipt job writes after one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptStep {
    /// Delivered to the relay (or the dev mailbox): the job is done, the order flagged.
    Sent,
    /// Not delivered yet: leave the job pending until `at` (ms, the injected clock).
    RetryAt {
        /// When the job is due again.
        at: i64,
        /// Why this run did not deliver it.
        error: String,
    },
    /// Never to be delivered by us: the relay refused it for good, or it kept failing
    /// [`MAX_TRIES`] times. The job ends `failed`; an operator sees it.
    Failed(String),
}

/// How many runs a transient failure gets before the receipt is given up as failed: with
/// [`retry_at`]'s backoff the last one is about a day after the first.
pub const MAX_TRIES: i64 = 30;

/// The first wait after a transient failure; each further one doubles, up to [`MAX_WAIT_MS`].
pub const FIRST_WAIT_MS: i64 = 30_000;

/// The longest wait between two runs of one receipt.
pub const MAX_WAIT_MS: i64 = 3_600_000;

/// The job's next state after its `tries`-th run (1 for the first) answered `answer`.
pub fn after(answer: RelayAnswer, tries: i64, now: i64, spread: u64) -> ReceiptStep {
    match answer {
        RelayAnswer::Accepted => ReceiptStep::Sent,
        RelayAnswer::Permanent(why) => ReceiptStep::Failed(why),
        RelayAnswer::Transient(why) if tries >= MAX_TRIES => {
            ReceiptStep::Failed(format!("gave up after {tries} tries: {why}"))
        }
        RelayAnswer::Transient(error) => ReceiptStep::RetryAt {
            at: retry_at(tries, now, spread),
            error,
        },
    }
}

/// When a receipt whose `tries`-th run failed transiently is due again: [`FIRST_WAIT_MS`]
/// doubled per further try, capped at [`MAX_WAIT_MS`], plus up to a quarter more taken
/// from `spread` (a hash of the job, so the same job always waits the same and many
/// receipts a relay refused at once do not all come back at the same instant).
pub fn retry_at(tries: i64, now: i64, spread: u64) -> i64 {
    let doublings = u32::try_from(tries.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
    let wait = FIRST_WAIT_MS
        .saturating_mul(1 << doublings)
        .min(MAX_WAIT_MS);
    let jitter = i64::try_from(spread % (wait as u64 / 4 + 1)).unwrap_or(0);
    now.saturating_add(wait).saturating_add(jitter)
}

/// The `spread` of [`retry_at`] for job `id`: a hash of it (FNV-1a), the same on every run.
pub fn spread(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A relay's reply code sorted by its class (RFC 5321, 4.2.1): 2xx accepted, 4xx
/// transient, anything else permanent.
pub fn answer_of(code: u16, text: &str) -> RelayAnswer {
    match code / 100 {
        2 => RelayAnswer::Accepted,
        4 => RelayAnswer::Transient(format!("{code} {text}")),
        _ => RelayAnswer::Permanent(format!("{code} {text}")),
    }
}

/// The `Message-ID` of `payment_id`'s receipt, sent from `domain`: the same on every
/// delivery of it, so a duplicate after a crash is the same message (RFC 5322, 3.6.4).
pub fn message_id(payment_id: &str, domain: &str) -> String {
    format!("<receipt.{payment_id}@{domain}>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2xx_is_sent_a_4xx_retried_a_5xx_final() {
        assert_eq!(after(answer_of(250, "ok"), 1, 0, 0), ReceiptStep::Sent);
        let retry = after(answer_of(451, "later"), 1, 1_000, 0);
        assert_eq!(
            retry,
            ReceiptStep::RetryAt {
                at: 1_000 + FIRST_WAIT_MS,
                error: "451 later".into()
            }
        );
        assert_eq!(
            after(answer_of(550, "no"), 1, 0, 0),
            ReceiptStep::Failed("550 no".into())
        );
    }

    #[test]
    fn transient_failures_back_off_then_give_up() {
        let waits: Vec<i64> = (1..=9).map(|t| retry_at(t, 0, 0)).collect();
        assert_eq!(&waits[..3], &[30_000, 60_000, 120_000]);
        assert_eq!(waits[8], MAX_WAIT_MS);
        assert!(retry_at(3, 0, u64::MAX) <= 120_000 + 30_000);
        let last = after(RelayAnswer::Transient("451".into()), MAX_TRIES, 0, 0);
        assert!(matches!(last, ReceiptStep::Failed(_)), "{last:?}");
    }

    #[test]
    fn the_spread_is_a_jobs_own() {
        assert_eq!(spread("job_1"), spread("job_1"));
        assert_ne!(spread("job_1"), spread("job_2"));
    }

    #[test]
    fn the_message_id_is_the_payments() {
        assert_eq!(
            message_id("pay_1", "shop.test"),
            "<receipt.pay_1@shop.test>"
        );
    }
}
