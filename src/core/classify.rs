//! What an answer to `POST /orders/{id}/pay` (or to cancel) means for the attempt and its key
//! (a key is removed only once the outcome is known to be final: a retry with it must
//! otherwise stay possible).
//! `docs/protocol.md` §11 is this table as the backend's contract.
//!
//! | answer                                        | verdict                    | key    |
//! |-----------------------------------------------|----------------------------|--------|
//! | 200 `succeeded` + payment                     | final: paid                | remove |
//! | 409 `ORDER_ALREADY_PAID` + payment (paid by another key) | final: paid, `byThisAttempt: false` | remove |
//! | 402 `PAYMENT_DECLINED` / `PAYMENT_FAILED`     | final: declined            | remove |
//! | 409 `ATTEMPT_CANCELLED` (tombstone)           | final: cancelled           | remove |
//! | 409 `ORDER_CHANGED`                           | final: orderChanged        | remove |
//! | 409 `PAYMENT_ALREADY_ACTIVE` (another key runs) | busy: the key is tombstoned with cancel | per the cancel |
//! | 202 `processing`, 409 `IN_PROGRESS`           | retry (server-directed)    | keep   |
//! | 402 `ACTION_REQUIRED` (e.g. 3-D Secure)       | action required            | keep   |
//! | 429 / 503 with `Retry-After`                  | retry (server-paced)       | keep   |
//! | no answer, timeout, 408, 429, 5xx             | retry (unknown outcome)    | keep   |
//! | 200 whose body does not decode, another 2xx, an answer for another order, `ORDER_ALREADY_PAID` without a payment | protocol mismatch | keep |
//! | a refusal that claimed no key ([`claims_no_key`]: 401, 400, 404 `ORDER_NOT_FOUND`, ...) | rejected | remove if it was the key's first request, else keep |
//! | any other answer (422, 403, ...) | rejected | keep |
//!
//! **Busy** (`PAYMENT_ALREADY_ACTIVE`): the server claimed nothing under this key, and another
//! attempt holds the order. Sending the key again can only get the same refusal, or charge a
//! second time once the other attempt ended, so the driver tombstones it with a cancel (a
//! delayed copy of it then never charges) and the call resolves `{ kind: "busy" }`: the app
//! shows "being paid elsewhere" and looks at the order again later.
//!
//! A **protocol mismatch** is an answer that does not fit the protocol at all: a 2xx that is
//! not a pay answer (another backend, a proxy's page, a changed API), or a receipt for another
//! order. Asking again would get the same answer and never end better than `pending`, and the
//! money may have moved, so the call fails at once with `PROTOCOL_MISMATCH` and what was
//! received, and the key is kept for `resume` or `cancel` once the backend is fixed.
//!
//! `ORDER_CHANGED` removes the key although nothing "finished": versions only grow, so a key
//! bound to an old version can never be accepted again (the server never accepted it, so
//! nothing can be charged with it). A refusal that claimed no key ([`claims_no_key`], e.g. a
//! 401 after the session expired) removes it only when that request was the first ever sent
//! with the key ([`crate::core::attempt::released`]): then no request with it can be
//! travelling, and another card can pay at once. Every other refusal keeps the key, because it
//! proves nothing about requests with this key that may still be travelling (a request that
//! timed out may reach the server later). The app resolves such a key with `cancel`, which
//! tombstones it.
//! In particular `KEY_REUSED_WITH_DIFFERENT_DETAILS` keeps it: the server holds an attempt under
//! this key that may be live, and only cancel can tell.
//!
//! A problem `code` is believed only when it comes with its own HTTP status
//! ([`ErrorCode::http_status`]), so a proxy's stray body cannot end an attempt.

use payonce_protocol::{AttemptStatus, CancelResponse, ErrorCode, PayResponse, Payment, Problem};
use serde::Serialize;

/// A decoded HTTP answer. The web layer decodes 2xx bodies as the success type and anything
/// else as a [`Problem`]; a body that does not decode is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
// One Reply lives per answer, moved once into `classify`: boxing the problem would cost the
// wasm module an allocation path for no memory saved (the lint fires on 64-bit hosts only).
#[allow(clippy::large_enum_variant)]
pub enum Reply<T> {
    /// No HTTP answer at all: network error, dropped connection, or our own timeout.
    NoAnswer {
        /// True when our per-request timeout fired (costs more retry budget, as in AWS).
        timed_out: bool,
    },
    /// An HTTP answer.
    Http {
        /// Status code.
        status: u16,
        /// The `Retry-After` header, raw (cross-origin it is visible only if exposed by CORS;
        /// the problem body's `retryAfter` is the fallback).
        retry_after: Option<String>,
        /// The 2xx body, if it decoded.
        ok: Option<T>,
        /// The problem body, if it decoded.
        problem: Option<Problem>,
    },
}

/// A final outcome of a pay call: the attempt is over and its key is removed. JavaScript gets
/// it serialized as `{ kind, ...members }` in camelCase (the `PayOutcome` union).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Final {
    /// Charged once; the receipt.
    Paid {
        /// The payment.
        payment: Payment,
        /// False when another key paid the order (`ORDER_ALREADY_PAID`: another device, or an
        /// attempt this client never held); true when this call's key did.
        by_this_attempt: bool,
    },
    /// Not charged (`PAYMENT_DECLINED`, or `PAYMENT_FAILED` when the attempt ended without a
    /// charge). The next Pay mints a new key.
    Declined {
        /// Which of the two.
        #[serde(serialize_with = "code_str")]
        code: ErrorCode,
    },
    /// The order changed since the customer saw it: reload the checkout and confirm again.
    OrderChanged {
        /// The order's current version, when the server said.
        #[serde(skip_serializing_if = "Option::is_none")]
        current_version: Option<u64>,
    },
    /// The attempt was cancelled (a tombstone): it can never charge.
    Cancelled,
    /// The customer did not complete the provider's action (3-D Secure) before the server's
    /// deadline (`ACTION_EXPIRED`): nothing was charged, the order is free. The next Pay
    /// mints a new key.
    Expired,
}

impl Final {
    /// The `kind` of the `PayOutcome` union member (the serde derive's tag).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Paid { .. } => "paid",
            Self::Declined { .. } => "declined",
            Self::OrderChanged { .. } => "orderChanged",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

/// An [`ErrorCode`] as its wire spelling, through [`ErrorCode::as_str`]: the derived
/// `Serialize` of the whole code list (only ever used here) is larger in the Wasm module.
fn code_str<S: serde::Serializer>(code: &ErrorCode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(code.as_str())
}

/// Why a request is worth repeating with the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCause {
    /// The server holds the attempt as `processing` (202 or 409 `IN_PROGRESS`): poll it.
    InProgress,
    /// No answer; the request may or may not have been processed.
    NoAnswer,
    /// Our per-request timeout fired.
    TimedOut,
    /// 408, 429, 5xx without a usable `Retry-After`, or a 200 whose body did not decode.
    ServerTrouble,
    /// 429 or 503 with `Retry-After` (header or problem `retryAfter`): the server is alive and
    /// says when to come back. It paces us rather than failing us, so it does not count as a
    /// failed send (see [`crate::core::retry::Schedule::after`]).
    Paced,
}

/// Why an answer does not fit the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// A 2xx whose body is not a pay (or cancel) answer.
    UndecodableSuccess,
    /// An answer (or its payment) names another order than the one paid for.
    OtherOrder,
    /// `ORDER_ALREADY_PAID` without the order's payment.
    NoPayment,
}

impl Mismatch {
    /// What was wrong, for people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::UndecodableSuccess => "a success answer whose body is not a payonce answer",
            Self::OtherOrder => "an answer for another order",
            Self::NoPayment => "ORDER_ALREADY_PAID without the order's payment",
        }
    }
}

impl RetryCause {
    /// The spelling of `why` in the JavaScript API's wait events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "inProgress",
            Self::NoAnswer => "noAnswer",
            Self::TimedOut => "timedOut",
            Self::ServerTrouble => "serverTrouble",
            Self::Paced => "paced",
        }
    }
}

/// What to do after an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The attempt is over: remove the key and report.
    Final(Final),
    /// The outcome is unknown or pending: keep the key, wait, send again.
    Retry {
        /// Why.
        cause: RetryCause,
        /// Server-requested wait, in ms, if any.
        retry_after_ms: Option<u64>,
    },
    /// The customer must act (3-D Secure, a bank's page) before the charge can finish: keep
    /// the key (the same key finishes the attempt afterwards) and hand the app the problem's
    /// `next` member.
    ActionRequired,
    /// Another attempt holds the order (`PAYMENT_ALREADY_ACTIVE`); nothing was claimed with
    /// this key. Tombstone it with a cancel, then report `busy`.
    Busy,
    /// The answer does not fit the protocol: keep the key, fail with what was received.
    Mismatch {
        /// HTTP status.
        status: u16,
        /// What was wrong.
        why: Mismatch,
    },
    /// The server refused the request without proving anything about the key: keep the key,
    /// surface the refusal.
    Rejected {
        /// HTTP status (0 never happens here).
        status: u16,
        /// The problem code, when the body decoded.
        code: Option<ErrorCode>,
    },
}

impl Verdict {
    /// True when the stored key must be removed. The one place this is decided.
    pub fn removes_key(&self) -> bool {
        matches!(self, Self::Final(_))
    }
}

/// Parses `Retry-After` as delta-seconds. An HTTP-date is ignored (`None`): our server sends
/// seconds, and a date would need a clock we trust more than the user's.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    let v = value.trim();
    if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

fn retry_after_ms(header: Option<&str>, problem: Option<&Problem>) -> Option<u64> {
    header
        .and_then(parse_retry_after)
        .or_else(|| problem.and_then(|p| p.retry_after))
        .map(|s| s.saturating_mul(1000))
}

/// The problem code, believed only with its own status.
fn code_of(status: u16, problem: Option<&Problem>) -> Option<ErrorCode> {
    problem
        .map(|p| p.code)
        .filter(|c| c.http_status() == status)
}

/// True for a refusal that `docs/protocol.md` (section 5) says claimed no key: the server
/// refused the request before any rule that stores a key ran (authentication, the key's and
/// the body's syntax, the order's existence, stock, the request's size). Any 401 counts, with
/// or without a problem body: authentication is the protocol's first step, and a 401 from
/// something in front of the server means the request never reached it. The other codes count
/// only with their own status ([`code_of`]). Refusals that end the attempt on their own
/// (`ORDER_CHANGED`, `ORDER_ALREADY_PAID`, `PAYMENT_ALREADY_ACTIVE`) and the retried
/// `RATE_LIMITED` are decided elsewhere.
pub fn claims_no_key(status: u16, code: Option<ErrorCode>) -> bool {
    status == 401
        || matches!(
            code,
            Some(
                ErrorCode::IdempotencyKeyMissing
                    | ErrorCode::IdempotencyKeyInvalid
                    | ErrorCode::InvalidRequest
                    | ErrorCode::Unauthenticated
                    | ErrorCode::OrderNotFound
                    | ErrorCode::OutOfStock
                    | ErrorCode::PayloadTooLarge
                    | ErrorCode::UriTooLong
                    | ErrorCode::UnsupportedMediaType
                    | ErrorCode::HeadersTooLarge
            )
        )
}

/// Classifies an answer to a pay request.
pub fn classify_pay(reply: &Reply<PayResponse>) -> Verdict {
    let (status, retry_after, ok, problem) = match reply {
        Reply::NoAnswer { timed_out } => {
            let cause = if *timed_out {
                RetryCause::TimedOut
            } else {
                RetryCause::NoAnswer
            };
            return Verdict::Retry {
                cause,
                retry_after_ms: None,
            };
        }
        Reply::Http {
            status,
            retry_after,
            ok,
            problem,
        } => (*status, retry_after.as_deref(), ok, problem.as_ref()),
    };
    let wait = retry_after_ms(retry_after, problem);
    let retry = |cause| Verdict::Retry {
        cause,
        retry_after_ms: wait,
    };
    let code = code_of(status, problem);
    let mismatch = |why| Verdict::Mismatch { status, why };
    match (status, code) {
        (202, _) => retry(RetryCause::InProgress),
        (200, _) => match ok {
            Some(PayResponse {
                status: AttemptStatus::Succeeded,
                payment: Some(payment),
                ..
            }) => Verdict::Final(Final::Paid {
                payment: payment.clone(),
                by_this_attempt: true,
            }),
            Some(PayResponse {
                status: AttemptStatus::Processing,
                ..
            }) => retry(RetryCause::InProgress),
            // A 200 we cannot read (or a success that is not one): the money may have moved,
            // and asking again would get the same body.
            _ => mismatch(Mismatch::UndecodableSuccess),
        },
        // The protocol answers a pay with 200 or 202 only: any other 2xx is another API.
        (201..=299, _) => mismatch(Mismatch::UndecodableSuccess),
        (402, Some(c @ (ErrorCode::PaymentDeclined | ErrorCode::PaymentFailed))) => {
            Verdict::Final(Final::Declined { code: c })
        }
        (402, Some(ErrorCode::ActionRequired)) => Verdict::ActionRequired,
        (402, Some(ErrorCode::ActionExpired)) => Verdict::Final(Final::Expired),
        (409, Some(ErrorCode::InProgress)) => retry(RetryCause::InProgress),
        (409, Some(ErrorCode::AttemptCancelled)) => Verdict::Final(Final::Cancelled),
        (409, Some(ErrorCode::OrderChanged)) => Verdict::Final(Final::OrderChanged {
            current_version: problem.and_then(|p| p.current_version),
        }),
        (409, Some(ErrorCode::OrderAlreadyPaid)) => match problem.and_then(|p| p.payment.clone()) {
            Some(payment) => Verdict::Final(Final::Paid {
                payment,
                by_this_attempt: false,
            }),
            None => mismatch(Mismatch::NoPayment),
        },
        (409, Some(ErrorCode::PaymentAlreadyActive)) => Verdict::Busy,
        // RFC 9110/6585 give `Retry-After` its "come back then" meaning on 503 and 429 only.
        (429 | 503, _) if wait.is_some() => retry(RetryCause::Paced),
        (408 | 429 | 500..=599, _) => retry(RetryCause::ServerTrouble),
        _ => Verdict::Rejected { status, code },
    }
}

/// [`classify_pay`] for a call paying `order_id`: an answer or a payment that names another
/// order is a [`Mismatch::OtherOrder`], whatever it says (never a receipt for this order).
pub fn classify_pay_for(reply: &Reply<PayResponse>, order_id: &str) -> Verdict {
    if let Reply::Http {
        status,
        ok,
        problem,
        ..
    } = reply
    {
        let other = ok.as_ref().is_some_and(|r| {
            r.order_id != order_id || r.payment.as_ref().is_some_and(|p| p.order_id != order_id)
        }) || problem
            .as_ref()
            .and_then(|p| p.payment.as_ref())
            .is_some_and(|p| p.order_id != order_id);
        if other {
            return Verdict::Mismatch {
                status: *status,
                why: Mismatch::OtherOrder,
            };
        }
    }
    classify_pay(reply)
}

/// What a cancel call found (`POST /orders/{id}/payment-attempts/cancel`, `docs/protocol.md`). JavaScript gets it serialized as
/// `{ kind, payment? }` (the `CancelOutcome` union).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum CancelOutcome {
    /// No attempt was stored for the order: nothing to cancel.
    None,
    /// Cancelled (or tombstoned): the key can never charge. Key removed.
    Cancelled,
    /// The attempt had been declined. Key removed.
    Declined,
    /// The attempt had failed without a charge. Key removed.
    Failed,
    /// The attempt had expired waiting for the customer's action: nothing charged. Key
    /// removed.
    Expired,
    /// The attempt had succeeded (possibly refunded since): show the receipt. Key removed.
    Paid {
        /// The payment, when the server sent it.
        #[serde(skip_serializing_if = "Option::is_none")]
        payment: Option<Payment>,
    },
    /// The server does not know this key for this order (`ORDER_NOT_FOUND`: the order is not
    /// this user's or is gone; `KEY_REUSED_WITH_DIFFERENT_DETAILS`: the key belongs to another
    /// order). Nothing can be charged with it for this order, so the key is removed rather than
    /// blocking the order forever.
    NotFound {
        /// Which of the two the server said.
        #[serde(rename = "problemCode", serialize_with = "code_str")]
        code: ErrorCode,
    },
    /// A charge may be under way: wait. Key kept.
    Processing,
    /// No usable answer (network error, 5xx, refusal): try later. Key kept.
    Unknown,
}

impl CancelOutcome {
    /// The `kind` of the `CancelOutcome` union member (the serde derive's tag).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Cancelled => "cancelled",
            Self::Declined => "declined",
            Self::Failed => "failed",
            Self::Expired => "expired",
            Self::Paid { .. } => "paid",
            Self::NotFound { .. } => "notFound",
            Self::Processing => "processing",
            Self::Unknown => "unknown",
        }
    }

    /// True when the stored key must be removed.
    pub fn removes_key(&self) -> bool {
        !matches!(self, Self::None | Self::Processing | Self::Unknown)
    }
}

/// Classifies an answer to a cancel request.
pub fn classify_cancel(reply: &Reply<CancelResponse>) -> CancelOutcome {
    match reply {
        Reply::Http {
            status: 200,
            ok: Some(r),
            ..
        } => match r.status {
            AttemptStatus::Cancelled => CancelOutcome::Cancelled,
            AttemptStatus::Declined => CancelOutcome::Declined,
            AttemptStatus::Failed => CancelOutcome::Failed,
            AttemptStatus::Expired => CancelOutcome::Expired,
            AttemptStatus::Succeeded | AttemptStatus::Refunded => CancelOutcome::Paid {
                payment: r.payment.clone(),
            },
            AttemptStatus::Processing => CancelOutcome::Processing,
        },
        // Only with the code under its own status: a bare 404 may be a wrong URL in front of a
        // server that still holds the key.
        Reply::Http {
            status, problem, ..
        } => match code_of(*status, problem.as_ref()) {
            Some(code @ (ErrorCode::OrderNotFound | ErrorCode::KeyReusedWithDifferentDetails)) => {
                CancelOutcome::NotFound { code }
            }
            _ => CancelOutcome::Unknown,
        },
        Reply::NoAnswer { .. } => CancelOutcome::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http<T>(status: u16, ok: Option<T>, problem: Option<Problem>) -> Reply<T> {
        Reply::Http {
            status,
            retry_after: None,
            ok,
            problem,
        }
    }
    fn payment() -> Payment {
        Payment {
            id: "pay_1".into(),
            order_id: "ord_1".into(),
            amount: 5000,
            currency: "USD".into(),
            payment_method_id: "pm_card_approve".into(),
            charge_id: "ch_1".into(),
            status: AttemptStatus::Succeeded,
        }
    }

    #[test]
    fn success_is_final_paid() {
        let ok = PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: "ord_1".into(),
            payment: Some(payment()),
        };
        assert_eq!(
            classify_pay(&http(200, Some(ok), None)),
            Verdict::Final(Final::Paid {
                payment: payment(),
                by_this_attempt: true
            })
        );
    }

    #[test]
    fn order_already_paid_is_paid_by_another_key_and_already_active_is_busy() {
        let mut p = Problem::new(ErrorCode::OrderAlreadyPaid);
        p.payment = Some(payment());
        let v = classify_pay_for(&http(409, None, Some(p.clone())), "ord_1");
        assert_eq!(
            v,
            Verdict::Final(Final::Paid {
                payment: payment(),
                by_this_attempt: false
            })
        );
        assert!(v.removes_key());
        // Another order's payment is no receipt for this one; none at all is no answer.
        assert!(matches!(
            classify_pay_for(&http(409, None, Some(p)), "ord_2"),
            Verdict::Mismatch {
                why: Mismatch::OtherOrder,
                ..
            }
        ));
        let bare = Problem::new(ErrorCode::OrderAlreadyPaid);
        assert!(matches!(
            classify_pay(&http(409, None, Some(bare))),
            Verdict::Mismatch {
                why: Mismatch::NoPayment,
                ..
            }
        ));
        let busy = classify_pay(&http(
            409,
            None,
            Some(Problem::new(ErrorCode::PaymentAlreadyActive)),
        ));
        assert_eq!(busy, Verdict::Busy);
        assert!(!busy.removes_key(), "the cancel decides");
    }

    #[test]
    fn declines_and_failures_are_final() {
        for code in [ErrorCode::PaymentDeclined, ErrorCode::PaymentFailed] {
            let v = classify_pay(&http(402, None, Some(Problem::new(code))));
            assert_eq!(v, Verdict::Final(Final::Declined { code }));
            assert!(v.removes_key());
        }
    }

    #[test]
    fn in_progress_and_processing_keep_the_key_and_honour_retry_after() {
        let v = classify_pay(&http(
            409,
            None,
            Some(Problem::new(ErrorCode::InProgress).with_retry_after(2)),
        ));
        assert_eq!(
            v,
            Verdict::Retry {
                cause: RetryCause::InProgress,
                retry_after_ms: Some(2000)
            }
        );
        let v = classify_pay(&Reply::<PayResponse>::Http {
            status: 202,
            retry_after: Some("3".into()),
            ok: None,
            problem: None,
        });
        assert_eq!(
            v,
            Verdict::Retry {
                cause: RetryCause::InProgress,
                retry_after_ms: Some(3000)
            }
        );
        assert!(!v.removes_key());
    }

    #[test]
    fn no_answer_and_server_trouble_keep_the_key() {
        assert!(!classify_pay(&Reply::NoAnswer { timed_out: true }).removes_key());
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(
                matches!(classify_pay(&http(s, None, None)), Verdict::Retry { .. }),
                "{s}"
            );
        }
        // A 200 whose body is unreadable may hide a charge: never drop the key, and do not
        // ask again for the same body: a protocol mismatch.
        let v = classify_pay(&http(200, None, None));
        assert_eq!(
            v,
            Verdict::Mismatch {
                status: 200,
                why: Mismatch::UndecodableSuccess
            }
        );
        assert!(!v.removes_key());
    }

    #[test]
    fn only_a_200_is_a_receipt_another_2xx_is_a_mismatch() {
        let ok = PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: "ord_1".into(),
            payment: Some(payment()),
        };
        assert_eq!(
            classify_pay(&http(201, Some(ok), None)),
            Verdict::Mismatch {
                status: 201,
                why: Mismatch::UndecodableSuccess
            }
        );
    }

    #[test]
    fn shedding_with_retry_after_is_pacing_and_other_trouble_is_not() {
        let with_ra = |status| Reply::<PayResponse>::Http {
            status,
            retry_after: Some("2".into()),
            ok: None,
            problem: None,
        };
        for s in [429, 503] {
            assert_eq!(
                classify_pay(&with_ra(s)),
                Verdict::Retry {
                    cause: RetryCause::Paced,
                    retry_after_ms: Some(2_000)
                },
                "{s}"
            );
            assert_eq!(
                classify_pay(&http(s, None, None)),
                Verdict::Retry {
                    cause: RetryCause::ServerTrouble,
                    retry_after_ms: None
                },
                "{s} without Retry-After is plain trouble"
            );
        }
        // Retry-After means "come back then" only on 429/503: a 500 or 502 with it is trouble.
        for s in [500, 502, 504, 408] {
            assert!(
                matches!(
                    classify_pay(&with_ra(s)),
                    Verdict::Retry {
                        cause: RetryCause::ServerTrouble,
                        ..
                    }
                ),
                "{s}"
            );
        }
        // The problem body's `retryAfter` counts when CORS hides the header.
        let v = classify_pay(&http(
            503,
            None,
            Some(Problem::new(ErrorCode::StoreUnavailable).with_retry_after(3)),
        ));
        assert_eq!(
            v,
            Verdict::Retry {
                cause: RetryCause::Paced,
                retry_after_ms: Some(3_000)
            }
        );
    }

    #[test]
    fn a_payment_for_another_order_is_a_mismatch_never_a_receipt() {
        let mut other = payment();
        other.order_id = "ord_2".into();
        let ok = PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: "ord_1".into(),
            payment: Some(other),
        };
        let r = http(200, Some(ok), None);
        assert!(
            matches!(classify_pay(&r), Verdict::Final(_)),
            "alone it reads as paid"
        );
        assert_eq!(
            classify_pay_for(&r, "ord_1"),
            Verdict::Mismatch {
                status: 200,
                why: Mismatch::OtherOrder
            }
        );
        let ok = PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: "ord_1".into(),
            payment: Some(payment()),
        };
        assert!(matches!(
            classify_pay_for(&http(200, Some(ok), None), "ord_1"),
            Verdict::Final(Final::Paid { .. })
        ));
    }

    #[test]
    fn action_required_keeps_the_key() {
        let v = classify_pay(&http(
            402,
            None,
            Some(Problem::new(ErrorCode::ActionRequired)),
        ));
        assert_eq!(v, Verdict::ActionRequired);
        assert!(!v.removes_key());
    }

    #[test]
    fn order_changed_and_cancelled_are_final() {
        let mut p = Problem::new(ErrorCode::OrderChanged);
        p.current_version = Some(7);
        assert_eq!(
            classify_pay(&http(409, None, Some(p))),
            Verdict::Final(Final::OrderChanged {
                current_version: Some(7)
            })
        );
        assert_eq!(
            classify_pay(&http(
                409,
                None,
                Some(Problem::new(ErrorCode::AttemptCancelled))
            )),
            Verdict::Final(Final::Cancelled)
        );
    }

    #[test]
    fn refusals_keep_the_key() {
        for code in [
            ErrorCode::KeyReusedWithDifferentDetails,
            ErrorCode::Unauthenticated,
            ErrorCode::OutOfStock,
        ] {
            let v = classify_pay(&http(code.http_status(), None, Some(Problem::new(code))));
            assert_eq!(
                v,
                Verdict::Rejected {
                    status: code.http_status(),
                    code: Some(code)
                }
            );
        }
        // A code under the wrong status is not believed.
        let v = classify_pay(&http(
            400,
            None,
            Some(Problem::new(ErrorCode::PaymentDeclined)),
        ));
        assert_eq!(
            v,
            Verdict::Rejected {
                status: 400,
                code: None
            }
        );
    }

    #[test]
    fn the_refusals_that_claimed_no_key_are_those_docs_protocol_md_says() {
        for code in ErrorCode::ALL {
            // The protocol's table (section 5) marks these "no key claimed"; the ones that
            // end the attempt or are retried are decided by `classify_pay` instead.
            let listed = matches!(
                code.as_str(),
                "IDEMPOTENCY_KEY_MISSING"
                    | "IDEMPOTENCY_KEY_INVALID"
                    | "INVALID_REQUEST"
                    | "UNAUTHENTICATED"
                    | "ORDER_NOT_FOUND"
                    | "OUT_OF_STOCK"
                    | "PAYLOAD_TOO_LARGE"
                    | "URI_TOO_LONG"
                    | "UNSUPPORTED_MEDIA_TYPE"
                    | "HEADERS_TOO_LARGE"
            );
            assert_eq!(
                claims_no_key(code.http_status(), Some(*code)),
                listed,
                "{}",
                code.as_str()
            );
        }
        assert!(
            claims_no_key(401, None),
            "a bare 401 never reached the rules"
        );
        assert!(!claims_no_key(400, None), "a bare 400 may be a proxy's");
        assert!(!claims_no_key(404, None), "a bare 404 may be a wrong URL");
    }

    #[test]
    fn retry_after_accepts_only_delta_seconds() {
        assert_eq!(parse_retry_after("5"), Some(5));
        assert_eq!(parse_retry_after(" 12 "), Some(12));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("99999999999999999999"), None);
    }

    #[test]
    fn cancel_answers_map_to_key_actions() {
        let r = |s| {
            http(
                200,
                Some(CancelResponse {
                    status: s,
                    payment: None,
                }),
                None,
            )
        };
        assert_eq!(
            classify_cancel(&r(AttemptStatus::Cancelled)),
            CancelOutcome::Cancelled
        );
        assert!(!classify_cancel(&r(AttemptStatus::Processing)).removes_key());
        assert!(classify_cancel(&r(AttemptStatus::Succeeded)).removes_key());
        assert_eq!(
            classify_cancel(&Reply::NoAnswer { timed_out: false }),
            CancelOutcome::Unknown
        );
        assert!(!CancelOutcome::Unknown.removes_key());
    }

    #[test]
    fn a_cancel_the_server_cannot_place_resolves_the_key_but_a_bare_404_does_not() {
        for code in [
            ErrorCode::OrderNotFound,
            ErrorCode::KeyReusedWithDifferentDetails,
        ] {
            let r = http::<CancelResponse>(code.http_status(), None, Some(Problem::new(code)));
            let o = classify_cancel(&r);
            assert_eq!(o, CancelOutcome::NotFound { code });
            assert!(o.removes_key());
        }
        for (status, problem) in [
            (404, None),
            (404, Some(Problem::new(ErrorCode::NotFound))),
            (422, None),
            (400, Some(Problem::new(ErrorCode::OrderNotFound))),
        ] {
            let o = classify_cancel(&http::<CancelResponse>(status, None, problem));
            assert_eq!(o, CancelOutcome::Unknown, "{status}");
            assert!(!o.removes_key());
        }
        assert_eq!(
            serde_json::to_value(CancelOutcome::NotFound {
                code: ErrorCode::OrderNotFound
            })
            .unwrap(),
            serde_json::json!({"kind": "notFound", "problemCode": "ORDER_NOT_FOUND"})
        );
    }

    #[test]
    fn outcome_kinds_are_the_documented_union_tags() {
        let finals = [
            Final::Paid {
                payment: payment(),
                by_this_attempt: true,
            },
            Final::Declined {
                code: ErrorCode::PaymentDeclined,
            },
            Final::OrderChanged {
                current_version: Some(4),
            },
            Final::Cancelled,
        ];
        // The web layer builds these member by member with `kind()` (src/web/mod.rs,
        // `outcome_js`): the derive's tag and `kind()` agree.
        for f in &finals {
            assert_eq!(serde_json::to_value(f).unwrap()["kind"], f.kind());
        }
        let j = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        let finals: Vec<_> = finals
            .iter()
            .map(|f| serde_json::to_value(f).unwrap())
            .collect();
        assert_eq!(finals[0]["kind"], "paid");
        assert_eq!(finals[0]["payment"]["orderId"], payment().order_id);
        assert_eq!(
            finals[1],
            j(r#"{"code":"PAYMENT_DECLINED","kind":"declined"}"#)
        );
        assert_eq!(
            finals[2],
            j(r#"{"currentVersion":4,"kind":"orderChanged"}"#)
        );
        assert_eq!(finals[3], j(r#"{"kind":"cancelled"}"#));
        let unknown_version = Final::OrderChanged {
            current_version: None,
        };
        assert_eq!(
            serde_json::to_value(unknown_version).unwrap(),
            j(r#"{"kind":"orderChanged"}"#),
            "an absent member is left out"
        );
        let cancels = [
            CancelOutcome::None,
            CancelOutcome::Cancelled,
            CancelOutcome::Declined,
            CancelOutcome::Failed,
            CancelOutcome::Paid { payment: None },
            CancelOutcome::Processing,
            CancelOutcome::Unknown,
        ];
        for c in &cancels {
            assert_eq!(serde_json::to_value(c).unwrap()["kind"], c.kind());
        }
        let kinds: Vec<_> = cancels
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                j(r#"{"kind":"none"}"#),
                j(r#"{"kind":"cancelled"}"#),
                j(r#"{"kind":"declined"}"#),
                j(r#"{"kind":"failed"}"#),
                j(r#"{"kind":"paid"}"#),
                j(r#"{"kind":"processing"}"#),
                j(r#"{"kind":"unknown"}"#)
            ]
        );
    }
}
