//! The rules, each tied to a section of `docs/protocol.md`. Every rule makes its own fresh
//! orders and keys, so rules are independent and run concurrently.

use crate::client::{new_key, Backend, Exchange, OrderRef, User};
use crate::report::{RuleResult, Verdict};
use payonce_protocol::headers::{IDEMPOTENT_REPLAYED, KEY_RETENTION};
use payonce_protocol::{AttemptStatus, CancelResponse, ErrorCode, PayResponse};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A rule: its id, the families it belongs to, and what it checks.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Stable id.
    pub id: &'static str,
    /// Families (what a wrong backend breaks together).
    pub families: &'static [&'static str],
    /// One line, with its section of `docs/protocol.md`.
    pub title: &'static str,
}

const KEYS: &[&str] = &["keys"];
const TABLE: &[&str] = &["key-table"];
const REPLAY: &[&str] = &["replay"];
const FINGERPRINT: &[&str] = &["fingerprint"];
const CANCEL: &[&str] = &["cancel"];
const ORDER: &[&str] = &["order-lock"];
const SCOPE: &[&str] = &["scope"];
const RACES: &[&str] = &["concurrency"];
const CANCEL_RACE: &[&str] = &["cancel", "concurrency"];
const HEADERS: &[&str] = &["headers"];

/// Every rule, in report order.
pub const RULES: &[Rule] = &[
    Rule {
        id: "key.missing",
        families: KEYS,
        title: "a pay without Idempotency-Key is 400 IDEMPOTENCY_KEY_MISSING, not charged (§3)",
    },
    Rule {
        id: "key.malformed",
        families: KEYS,
        title: "malformed keys are 400 IDEMPOTENCY_KEY_INVALID, not charged (§3)",
    },
    Rule {
        id: "key.quoted-form",
        families: KEYS,
        title: "a key as an RFC 8941 string is the same key as its raw form (§3)",
    },
    Rule {
        id: "key.new",
        families: TABLE,
        title: "a new key charges once and answers 200 succeeded, not marked replayed (§7.3-4)",
    },
    Rule {
        id: "key.final",
        families: REPLAY,
        title:
            "a final key replays its stored status and bytes with Idempotent-Replayed: true (§7.2)",
    },
    Rule {
        id: "key.processing",
        families: TABLE,
        title: "a processing key is 409 IN_PROGRESS with Retry-After (§7.2)",
    },
    Rule {
        id: "key.other-details",
        families: FINGERPRINT,
        title: "the same key with other details is 422 KEY_REUSED_WITH_DIFFERENT_DETAILS (§7.2)",
    },
    Rule {
        id: "key.other-order",
        families: FINGERPRINT,
        title: "the same key on another order is 422, that order not charged (§7.2)",
    },
    Rule {
        id: "key.tombstone",
        families: CANCEL,
        title: "a pay after a cancel of its unknown key is 409 ATTEMPT_CANCELLED, not charged (§9)",
    },
    Rule {
        id: "order.version",
        families: ORDER,
        title: "a stale orderVersion is 409 ORDER_CHANGED with currentVersion (§7.3)",
    },
    Rule {
        id: "order.one-active-attempt",
        families: ORDER,
        title: "a second key while an attempt is active is 409 PAYMENT_ALREADY_ACTIVE (§7.3)",
    },
    Rule {
        id: "order.paid-not-recharged",
        families: ORDER,
        title: "a paid order is never charged again (§7)",
    },
    Rule {
        id: "order.paid-answers-paid",
        families: ORDER,
        title:
            "a new key on a paid order is 409 ORDER_ALREADY_PAID with the order's payment (§7.3)",
    },
    Rule {
        id: "cart.locked",
        families: ORDER,
        title: "a cart edit during a payment is 409 PAYMENT_IN_PROGRESS (§2)",
    },
    Rule {
        id: "cancel.table",
        families: CANCEL,
        title: "cancel answers unknown/cancelled/declined/succeeded/other order per the table (§9)",
    },
    Rule {
        id: "cancel.processing",
        families: CANCEL,
        title: "cancel of a processing key answers processing and does not stop it (§9)",
    },
    Rule {
        id: "cancel.race",
        families: CANCEL_RACE,
        title: "a cancel racing its pay: cancelled means never charged (§9)",
    },
    Rule {
        id: "scope.per-user",
        families: SCOPE,
        title: "user B with user A's key never sees A's answer (§6)",
    },
    Rule {
        id: "storm.same-key",
        families: RACES,
        title: "a same-key storm charges once (§7.3)",
    },
    Rule {
        id: "race.two-keys",
        families: RACES,
        title: "two keys racing for one order charge once (§7.3)",
    },
    Rule {
        id: "race.same-key-retry",
        families: RACES,
        title: "a same-key retry while the first pay runs is not processed as new (§7.3)",
    },
    Rule {
        id: "retention.header",
        families: HEADERS,
        title: "every pay answer carries Idempotency-Key-Retention (§3, §8)",
    },
];

/// Why a rule stopped before passing.
#[derive(Debug)]
pub(crate) enum Stop {
    Fail(String),
    NotChecked(String),
}

type Step<T = ()> = Result<T, Stop>;

/// The evidence a rule collects on its way.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    evidence: Vec<String>,
    notes: Vec<String>,
}

impl Trail {
    /// Records an exchange and hands it back.
    fn see(&mut self, ex: Exchange) -> Exchange {
        self.evidence.push(ex.evidence());
        ex
    }

    fn check(&mut self, ok: bool, msg: impl Into<String>) -> Step {
        if ok {
            Ok(())
        } else {
            Err(Stop::Fail(msg.into()))
        }
    }

    fn setup<T>(&mut self, r: Result<T, String>) -> Step<T> {
        r.map_err(|e| Stop::Fail(format!("setup: {e}")))
    }

    fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    /// Checks the charge count when a ledger is configured; notes its absence otherwise.
    async fn charges(&mut self, b: &Backend, order: &str, want: u64) -> Step {
        match b.charges(order).await {
            None => {
                if !self.notes.iter().any(|n| n.starts_with("no ledger")) {
                    self.note("no ledger configured: charge counts not checked");
                }
                Ok(())
            }
            Some(Err(e)) => Err(Stop::Fail(format!("ledger: {e}"))),
            Some(Ok(n)) => {
                self.evidence
                    .push(format!("ledger: order {order} has {n} charge(s)"));
                self.check(
                    n == want,
                    format!("order {order} has {n} charge(s), expected {want}"),
                )
            }
        }
    }

    /// For rules whose whole point is the charge count.
    fn need_ledger(&self, b: &Backend) -> Step {
        if b.has_ledger() {
            Ok(())
        } else {
            Err(Stop::NotChecked(
                "needs [ledger] in the configuration: answers alone cannot prove one charge".into(),
            ))
        }
    }
}

fn replayed(ex: &Exchange) -> bool {
    ex.header(IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

fn succeeded(ex: &Exchange) -> Option<PayResponse> {
    ex.decode::<PayResponse>()
        .filter(|r| ex.status == 200 && r.status == AttemptStatus::Succeeded && r.payment.is_some())
}

/// The payment id of a 200 succeeded answer. Rules other than `key.final` compare answers
/// by what they say (this id), not by their bytes, so a backend that re-renders replays
/// fails that one rule only.
fn payment_id(ex: &Exchange) -> Option<String> {
    succeeded(ex).and_then(|r| r.payment).map(|p| p.id)
}

fn same_payment(a: &Exchange, b: &Exchange) -> bool {
    payment_id(a).is_some() && payment_id(a) == payment_id(b)
}

fn cancel_status(ex: &Exchange) -> Option<AttemptStatus> {
    (ex.status == 200)
        .then(|| ex.decode::<CancelResponse>().map(|r| r.status))
        .flatten()
}

/// Pays a fresh order of `user` with a fresh key and the approving method; 200 expected.
async fn paid_order(b: &Backend, t: &mut Trail, user: User) -> Step<(OrderRef, String, Exchange)> {
    let order = t.setup(b.new_order(user).await)?;
    let key = new_key();
    let ex = t.see(
        b.pay(
            user,
            &order,
            Some(&key),
            order.version,
            &b.config.methods.approve,
        )
        .await,
    );
    t.check(
        succeeded(&ex).is_some(),
        "a new key with the approving method must answer 200 succeeded with a payment",
    )?;
    Ok((order, key, ex))
}

async fn key_missing(b: &Backend, t: &mut Trail) -> Step {
    let order = t.setup(b.new_order(User::A).await)?;
    let ex = t.see(
        b.pay(
            User::A,
            &order,
            None,
            order.version,
            &b.config.methods.approve,
        )
        .await,
    );
    t.check(
        ex.is(400, ErrorCode::IdempotencyKeyMissing),
        "expected 400 IDEMPOTENCY_KEY_MISSING",
    )?;
    t.check(
        ex.is_problem_type(),
        "a problem must be served as application/problem+json",
    )?;
    t.charges(b, &order.id, 0).await
}

async fn key_malformed(b: &Backend, t: &mut Trail) -> Step {
    let order = t.setup(b.new_order(User::A).await)?;
    let long = "k".repeat(256);
    let bad = [
        "short-key",
        long.as_str(),
        "has a space inside the key",
        "semi;colon;separated;key",
        "\"unterminated-quoted-key-0001",
    ];
    for k in bad {
        let ex = t.see(
            b.pay(
                User::A,
                &order,
                Some(k),
                order.version,
                &b.config.methods.approve,
            )
            .await,
        );
        t.check(
            ex.is(400, ErrorCode::IdempotencyKeyInvalid),
            format!("key {k:?}: expected 400 IDEMPOTENCY_KEY_INVALID"),
        )?;
    }
    t.charges(b, &order.id, 0).await
}

async fn key_quoted_form(b: &Backend, t: &mut Trail) -> Step {
    let order = t.setup(b.new_order(User::A).await)?;
    let key = new_key();
    let quoted = format!("\"{key}\"");
    let first = t.see(
        b.pay(
            User::A,
            &order,
            Some(&quoted),
            order.version,
            &b.config.methods.approve,
        )
        .await,
    );
    t.check(
        succeeded(&first).is_some(),
        "a quoted key must be accepted (200 succeeded)",
    )?;
    let raw = t.see(
        b.pay(
            User::A,
            &order,
            Some(&key),
            order.version,
            &b.config.methods.approve,
        )
        .await,
    );
    t.check(
        same_payment(&raw, &first) && replayed(&raw),
        "the raw spelling of the same key must replay the quoted key's answer",
    )?;
    t.charges(b, &order.id, 1).await
}

async fn key_new(b: &Backend, t: &mut Trail) -> Step {
    let (order, _, ex) = paid_order(b, t, User::A).await?;
    let body = succeeded(&ex).and_then(|r| r.payment.map(|p| (r.order_id, p)));
    let (order_id, payment) = body.ok_or_else(|| Stop::Fail("no payment in the answer".into()))?;
    t.check(
        order_id == order.id && payment.order_id == order.id,
        "the answer must name the order paid",
    )?;
    t.check(
        !replayed(&ex),
        "a first answer must not say Idempotent-Replayed: true",
    )?;
    t.charges(b, &order.id, 1).await
}

async fn key_final(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order, key, first) = paid_order(b, t, User::A).await?;
    for _ in 0..2 {
        let again = t.see(
            b.pay(User::A, &order, Some(&key), order.version, &m.approve)
                .await,
        );
        t.check(
            again.status == first.status,
            "a replay must have the stored status",
        )?;
        t.check(
            again.body == first.body,
            "a replay must be the stored bytes, byte for byte",
        )?;
        t.check(
            replayed(&again),
            "a replay must say Idempotent-Replayed: true",
        )?;
    }
    t.charges(b, &order.id, 1).await?;
    // A decline is final too: replayed, and the order is free for a new key.
    let order2 = t.setup(b.new_order(User::A).await)?;
    let kd = new_key();
    let declined = t.see(
        b.pay(User::A, &order2, Some(&kd), order2.version, &m.decline)
            .await,
    );
    t.check(
        declined.is(402, ErrorCode::PaymentDeclined),
        "the declining method must answer 402 PAYMENT_DECLINED",
    )?;
    let again = t.see(
        b.pay(User::A, &order2, Some(&kd), order2.version, &m.decline)
            .await,
    );
    t.check(
        again.status == 402 && again.body == declined.body && replayed(&again),
        "a declined key must replay its 402 byte for byte with Idempotent-Replayed: true",
    )?;
    t.charges(b, &order2.id, 0).await?;
    let fresh = t.see(
        b.pay(
            User::A,
            &order2,
            Some(&new_key()),
            order2.version,
            &m.approve,
        )
        .await,
    );
    t.check(
        succeeded(&fresh).is_some(),
        "after a decline a new key must be able to pay",
    )?;
    t.charges(b, &order2.id, 1).await
}

async fn key_other_details(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order, key, first) = paid_order(b, t, User::A).await?;
    let other_method = t.see(
        b.pay(User::A, &order, Some(&key), order.version, &m.decline)
            .await,
    );
    t.check(
        other_method.is(422, ErrorCode::KeyReusedWithDifferentDetails),
        "the same key with another payment method must be 422 KEY_REUSED_WITH_DIFFERENT_DETAILS",
    )?;
    let other_version = t.see(
        b.pay(User::A, &order, Some(&key), order.version + 1, &m.approve)
            .await,
    );
    t.check(
        other_version.is(422, ErrorCode::KeyReusedWithDifferentDetails),
        "the same key with another orderVersion must be 422 (the key is looked up before the version)",
    )?;
    let same = t.see(
        b.pay(User::A, &order, Some(&key), order.version, &m.approve)
            .await,
    );
    t.check(
        same_payment(&same, &first),
        "the attempt must be unchanged by the refused requests",
    )?;
    t.charges(b, &order.id, 1).await
}

async fn key_other_order(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (_, key, _) = paid_order(b, t, User::A).await?;
    let other = t.setup(b.new_order(User::A).await)?;
    let ex = t.see(
        b.pay(User::A, &other, Some(&key), other.version, &m.approve)
            .await,
    );
    t.check(
        ex.is(422, ErrorCode::KeyReusedWithDifferentDetails),
        "a key of another order must be 422 KEY_REUSED_WITH_DIFFERENT_DETAILS",
    )?;
    t.charges(b, &other.id, 0).await?;
    let fresh = t.see(
        b.pay(User::A, &other, Some(&new_key()), other.version, &m.approve)
            .await,
    );
    t.check(
        succeeded(&fresh).is_some(),
        "the other order must still be payable with its own key",
    )?;
    t.charges(b, &other.id, 1).await
}

async fn key_tombstone(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let order = t.setup(b.new_order(User::A).await)?;
    let key = new_key();
    let c = t.see(b.cancel(User::A, &order.id, &key).await);
    t.check(
        cancel_status(&c) == Some(AttemptStatus::Cancelled),
        "cancel of an unknown key must answer 200 cancelled",
    )?;
    let late = t.see(
        b.pay(User::A, &order, Some(&key), order.version, &m.approve)
            .await,
    );
    t.check(
        late.is(409, ErrorCode::AttemptCancelled),
        "a pay after the cancel must be 409 ATTEMPT_CANCELLED",
    )?;
    t.charges(b, &order.id, 0).await?;
    let fresh = t.see(
        b.pay(User::A, &order, Some(&new_key()), order.version, &m.approve)
            .await,
    );
    t.check(
        succeeded(&fresh).is_some(),
        "a tombstone must not lock the order: a new key pays",
    )?;
    t.charges(b, &order.id, 1).await
}

async fn order_version(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let order = t.setup(b.new_order(User::A).await)?;
    let ex = t.see(
        b.pay(
            User::A,
            &order,
            Some(&new_key()),
            order.version + 1,
            &m.approve,
        )
        .await,
    );
    t.check(
        ex.is(409, ErrorCode::OrderChanged),
        "a version that is not the order's must be 409 ORDER_CHANGED",
    )?;
    let current = ex.problem().and_then(|p| p.current_version);
    t.check(
        current == Some(order.version),
        format!("currentVersion must be {} (got {current:?})", order.version),
    )?;
    t.charges(b, &order.id, 0).await?;
    let fresh = t.see(
        b.pay(User::A, &order, Some(&new_key()), order.version, &m.approve)
            .await,
    );
    t.check(
        succeeded(&fresh).is_some(),
        "the refusal must not lock the order: the right version pays",
    )?;
    t.charges(b, &order.id, 1).await
}

async fn order_paid(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order, key, first) = paid_order(b, t, User::A).await?;
    for method in [&m.approve, &m.decline] {
        let ex = t.see(
            b.pay(User::A, &order, Some(&new_key()), order.version, method)
                .await,
        );
        // Which code is `order.paid-answers-paid`'s to check; here: refused, not charged.
        t.check(
            ex.status == 409,
            "a new key on a paid order must be refused with 409",
        )?;
    }
    let again = t.see(
        b.pay(User::A, &order, Some(&key), order.version, &m.approve)
            .await,
    );
    t.check(
        same_payment(&again, &first),
        "the paying key must still replay its receipt",
    )?;
    t.charges(b, &order.id, 1).await
}

/// A new key on a paid order is told "paid", with the receipt, not "busy": a client can then
/// show the payment instead of waiting for an attempt that is not running.
async fn order_paid_answer(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order, _key, first) = paid_order(b, t, User::A).await?;
    let ex = t.see(
        b.pay(User::A, &order, Some(&new_key()), order.version, &m.approve)
            .await,
    );
    t.check(
        !ex.is(409, ErrorCode::PaymentAlreadyActive),
        "a new key on a paid order answered 409 PAYMENT_ALREADY_ACTIVE, which now means only \
         \"another attempt is running\": a paid order must answer 409 ORDER_ALREADY_PAID with \
         the order's payment (docs/protocol.md §7.3)",
    )?;
    t.check(
        ex.is(409, ErrorCode::OrderAlreadyPaid),
        "a new key on a paid order must be 409 ORDER_ALREADY_PAID",
    )?;
    let paid = first.decode::<PayResponse>().and_then(|r| r.payment);
    let told = ex.problem().and_then(|p| p.payment);
    t.check(
        told.is_some() && told == paid,
        format!(
            "ORDER_ALREADY_PAID must carry the order's payment as its paying key's answer did \
             ({paid:?}); got {told:?}"
        ),
    )?;
    t.charges(b, &order.id, 1).await
}

async fn cancel_table(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let order = t.setup(b.new_order(User::A).await)?;
    let unknown = new_key();
    let c = t.see(b.cancel(User::A, &order.id, &unknown).await);
    t.check(
        cancel_status(&c) == Some(AttemptStatus::Cancelled),
        "unknown key: expected 200 cancelled",
    )?;
    let c = t.see(b.cancel(User::A, &order.id, &unknown).await);
    t.check(
        cancel_status(&c) == Some(AttemptStatus::Cancelled),
        "cancelled key: expected 200 cancelled again",
    )?;
    let kd = new_key();
    let d = t.see(
        b.pay(User::A, &order, Some(&kd), order.version, &m.decline)
            .await,
    );
    t.check(
        d.is(402, ErrorCode::PaymentDeclined),
        "setup: the declining method must answer 402",
    )?;
    let c = t.see(b.cancel(User::A, &order.id, &kd).await);
    t.check(
        cancel_status(&c) == Some(AttemptStatus::Declined),
        "declined key: expected 200 declined",
    )?;
    let ks = new_key();
    let paid = t.see(
        b.pay(User::A, &order, Some(&ks), order.version, &m.approve)
            .await,
    );
    let payment = succeeded(&paid).and_then(|r| r.payment);
    t.check(
        payment.is_some(),
        "setup: the approving method must answer 200 succeeded",
    )?;
    let c = t.see(b.cancel(User::A, &order.id, &ks).await);
    let body = c.decode::<CancelResponse>();
    t.check(
        c.status == 200
            && body.as_ref().is_some_and(|r| {
                r.status == AttemptStatus::Succeeded
                    && r.payment.as_ref().map(|p| &p.id) == payment.as_ref().map(|p| &p.id)
            }),
        "succeeded key: expected 200 succeeded with the payment",
    )?;
    let other = t.setup(b.new_order(User::A).await)?;
    let c = t.see(b.cancel(User::A, &other.id, &ks).await);
    t.check(
        c.is(422, ErrorCode::KeyReusedWithDifferentDetails),
        "a key of another order: expected 422 KEY_REUSED_WITH_DIFFERENT_DETAILS",
    )?;
    t.charges(b, &order.id, 1).await?;
    t.charges(b, &other.id, 0).await
}

async fn cancel_race(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (mut cancelled, mut charged) = (0, 0);
    for _ in 0..b.config.race_rounds {
        let order = t.setup(b.new_order(User::A).await)?;
        let key = new_key();
        let (c, p) = tokio::join!(
            b.cancel(User::A, &order.id, &key),
            b.pay(User::A, &order, Some(&key), order.version, &m.approve)
        );
        let (c, p) = (t.see(c), t.see(p));
        let late = t.see(b.settle(User::A, &order, &key, &m.approve).await);
        match cancel_status(&c) {
            Some(AttemptStatus::Cancelled) => {
                cancelled += 1;
                t.check(
                    p.is(409, ErrorCode::AttemptCancelled),
                    "cancel said cancelled, so its racing pay must be 409 ATTEMPT_CANCELLED",
                )?;
                t.check(
                    late.is(409, ErrorCode::AttemptCancelled),
                    "cancel said cancelled, so a later pay with the key must be 409 ATTEMPT_CANCELLED",
                )?;
                t.charges(b, &order.id, 0).await?;
            }
            Some(AttemptStatus::Processing | AttemptStatus::Succeeded) => {
                charged += 1;
                t.check(
                    succeeded(&late).is_some(),
                    "cancel found the attempt claimed, so the pay must end succeeded",
                )?;
                t.charges(b, &order.id, 1).await?;
            }
            _ => {
                return Err(Stop::Fail(
                    "cancel must answer 200 cancelled, processing or succeeded".into(),
                ))
            }
        }
    }
    t.note(format!(
        "{cancelled} round(s) cancel first, {charged} pay first"
    ));
    Ok(())
}

async fn scope_per_user(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order_a, key, answer_a) = paid_order(b, t, User::A).await?;
    let order_b = t.setup(b.new_order(User::B).await)?;
    let ex = t.see(
        b.pay(User::B, &order_b, Some(&key), order_b.version, &m.approve)
            .await,
    );
    let mine = succeeded(&ex).is_some_and(|r| {
        r.order_id == order_b.id && r.payment.is_some_and(|p| p.order_id == order_b.id)
    });
    t.check(
        mine && !same_payment(&ex, &answer_a) && !replayed(&ex),
        "user B's key is B's own: B's pay must be a new attempt for B's order (200), not A's answer or a refusal",
    )?;
    t.charges(b, &order_b.id, 1).await?;
    let cross = t.see(
        b.pay(User::B, &order_a, Some(&key), order_a.version, &m.approve)
            .await,
    );
    t.check(
        cross.is(404, ErrorCode::OrderNotFound),
        "user B paying user A's order must be 404 ORDER_NOT_FOUND",
    )?;
    let cancel = t.see(b.cancel(User::B, &order_a.id, &key).await);
    t.check(
        cancel.is(404, ErrorCode::OrderNotFound),
        "user B cancelling on user A's order must be 404 ORDER_NOT_FOUND",
    )?;
    let again = t.see(
        b.pay(User::A, &order_a, Some(&key), order_a.version, &m.approve)
            .await,
    );
    t.check(
        same_payment(&again, &answer_a),
        "user A's attempt must be untouched by user B",
    )?;
    t.charges(b, &order_a.id, 1).await
}

/// Statuses a same-key duplicate may get while the first is under way.
fn in_flight_ok(ex: &Exchange) -> bool {
    succeeded(ex).is_some() || ex.status == 202 || ex.is(409, ErrorCode::InProgress)
}

// The storm and the two-key race run as user B (the other rules mostly as user A), so a
// backend's per-user limit on new keys is spread over both users.
async fn storm(b: &Backend, t: &mut Trail) -> Step {
    t.need_ledger(b)?;
    let m = &b.config.methods;
    let order = t.setup(b.new_order(User::B).await)?;
    let key = new_key();
    let answers = {
        let mut set = Vec::with_capacity(b.config.storm);
        for _ in 0..b.config.storm {
            set.push(b.pay(User::B, &order, Some(&key), order.version, &m.approve));
        }
        join_all(set).await
    };
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut payments = std::collections::BTreeSet::new();
    for ex in &answers {
        let label = match ex.code() {
            Some(c) => format!("{} {}", ex.status, c.as_str()),
            None => ex.status.to_string(),
        };
        if !counts.contains_key(&label) || !in_flight_ok(ex) {
            t.see(ex.clone());
        }
        *counts.entry(label).or_default() += 1;
        if let Some(p) = succeeded(ex).and_then(|r| r.payment) {
            payments.insert(p.id);
        }
    }
    t.note(format!("{} requests: {counts:?}", answers.len()));
    t.check(
        answers.iter().all(in_flight_ok),
        "every duplicate must get 200, 202 or 409 IN_PROGRESS",
    )?;
    t.check(
        payments.len() <= 1,
        format!(
            "the storm's 200s name {} different payments",
            payments.len()
        ),
    )?;
    let last = t.see(b.settle(User::B, &order, &key, &m.approve).await);
    t.check(succeeded(&last).is_some(), "the key must end succeeded")?;
    t.charges(b, &order.id, 1).await
}

async fn two_keys(b: &Backend, t: &mut Trail) -> Step {
    t.need_ledger(b)?;
    let m = &b.config.methods;
    for _ in 0..b.config.race_rounds {
        let order = t.setup(b.new_order(User::B).await)?;
        let (k1, k2) = (new_key(), new_key());
        let (p1, p2) = tokio::join!(
            b.pay(User::B, &order, Some(&k1), order.version, &m.approve),
            b.pay(User::B, &order, Some(&k2), order.version, &m.approve)
        );
        let (p1, p2) = (t.see(p1), t.see(p2));
        let won = |ex: &Exchange| succeeded(ex).is_some() || ex.status == 202;
        // The loser meets the winner running, or (when the winner was fast) the order paid.
        let lost = |ex: &Exchange| {
            ex.is(409, ErrorCode::PaymentAlreadyActive) || ex.is(409, ErrorCode::OrderAlreadyPaid)
        };
        t.check(
            (won(&p1) && lost(&p2)) || (won(&p2) && lost(&p1)),
            "one key must win and the other get 409 PAYMENT_ALREADY_ACTIVE (or ORDER_ALREADY_PAID once the winner paid)",
        )?;
        let winner = if won(&p1) { &k1 } else { &k2 };
        let end = t.see(b.settle(User::B, &order, winner, &m.approve).await);
        t.check(
            succeeded(&end).is_some(),
            "the winning key must end succeeded",
        )?;
        t.charges(b, &order.id, 1).await?;
    }
    Ok(())
}

async fn retention(b: &Backend, t: &mut Trail) -> Step {
    let m = &b.config.methods;
    let (order, key, first) = paid_order(b, t, User::A).await?;
    let replay = t.see(
        b.pay(User::A, &order, Some(&key), order.version, &m.approve)
            .await,
    );
    let refused = t.see(
        b.pay(
            User::A,
            &order,
            Some(&new_key()),
            order.version + 1,
            &m.approve,
        )
        .await,
    );
    let mut seen = Vec::new();
    for (what, ex) in [
        ("first answer", &first),
        ("replay", &replay),
        ("refusal", &refused),
    ] {
        let v = ex
            .header(KEY_RETENTION)
            .and_then(|v| v.trim().parse::<u64>().ok());
        t.check(
            v.is_some_and(|s| s >= 1),
            format!("the {what} must carry {KEY_RETENTION} as whole seconds ≥ 1"),
        )?;
        seen.extend(v);
    }
    if seen.iter().any(|s| *s < 86_400) {
        t.note(format!(
            "retention {seen:?} s is below the 86400 s the protocol recommends"
        ));
    }
    Ok(())
}

/// The pending scenario: one attempt held `processing` by the pending method, probed by a
/// same-key retry, a second key, a cart edit and a cancel; then settled. The retry is sent
/// while the first pay may still be claiming the key, so it is a race too: a backend that
/// processes both as new fails `race.same-key-retry` (concurrency), and the four probes are
/// NOT CHECKED, having met no attempt held by one request.
async fn pending(b: &Backend) -> Vec<(&'static str, Trail, Step)> {
    const IDS: [&str; 5] = [
        "key.processing",
        "order.one-active-attempt",
        "cart.locked",
        "cancel.processing",
        "race.same-key-retry",
    ];
    let mut trails: Vec<Trail> = (0..IDS.len()).map(|_| Trail::default()).collect();
    let m = &b.config.methods;
    let order = match b.new_order(User::A).await {
        Ok(o) => o,
        Err(e) => {
            return IDS
                .iter()
                .zip(trails)
                .map(|(id, t)| (*id, t, Err(Stop::Fail(format!("setup: {e}")))))
                .collect()
        }
    };
    let k1 = new_key();
    // Two requests with the key: the pending pay, and the same pay again `pending_ms` later.
    // Whichever answers first decides: a 409 IN_PROGRESS (or a 202) means the other one
    // holds the attempt processing, so the other probes go now, while it still does. (Not
    // "after the retry": if the first pay was slow to arrive, the retry is the one charging,
    // and it answers only when the attempt is final.)
    let p1 = b.pay(User::A, &order, Some(&k1), order.version, &m.pending);
    let p2 = async {
        tokio::time::sleep(Duration::from_millis(m.pending_ms)).await;
        b.pay(User::A, &order, Some(&k1), order.version, &m.pending)
            .await
    };
    tokio::pin!(p1, p2);
    let (early, p1_first) = tokio::select! {
        r = &mut p1 => (r, true),
        r = &mut p2 => (r, false),
    };
    let k2 = new_key();
    let probes = async {
        tokio::join!(
            b.pay(User::A, &order, Some(&k2), order.version, &m.approve),
            b.edit_cart(User::A, &order.id),
            b.cancel(User::A, &order.id, &k1),
        )
    };
    let (late, (other, cart, cancel)) = if p1_first {
        tokio::join!(&mut p2, probes)
    } else {
        tokio::join!(&mut p1, probes)
    };
    let end = b.settle(User::A, &order, &k1, &m.pending).await;
    let charged = b.charges(&order.id).await;
    for t in &mut trails {
        t.see(early.clone());
        t.see(late.clone());
    }
    let met_processing = early.is(409, ErrorCode::InProgress) || early.status == 202;
    let fresh_success = |ex: &Exchange| succeeded(ex).is_some() && !replayed(ex);
    let results: Vec<Step> = if fresh_success(&early) && fresh_success(&late) {
        // A race lost, not a key table or lock answering wrong: the concurrency rule fails,
        // and the probes met no attempt held by one request.
        let why = "both requests with the key were processed as new: no attempt was held \
                   processing to probe (see race.same-key-retry)";
        let mut r: Vec<Step> = (0..4).map(|_| Err(Stop::NotChecked(why.into()))).collect();
        r.push(Err(Stop::Fail(
            "both requests with one key were processed as new (two fresh 200s)".into(),
        )));
        r
    } else if !met_processing {
        let why = format!(
            "the pending method {:?} settled before {} ms: nothing was processing to probe",
            m.pending, m.pending_ms
        );
        (0..IDS.len())
            .map(|_| Err(Stop::NotChecked(why.clone())))
            .collect()
    } else {
        let t = &mut trails;
        // The request that met the key processing: the early one, unless it was a 202 (the
        // holder giving up waiting on the provider), then the other.
        let second = if early.status == 202 { &late } else { &early };
        let r0 = t[0]
            .check(
                second.is(409, ErrorCode::InProgress),
                "a retry of a processing key must be 409 IN_PROGRESS",
            )
            .and_then(|()| {
                t[0].check(
                    second.retry_after().is_some(),
                    "409 IN_PROGRESS must carry Retry-After (seconds)",
                )
            });
        let o = t[1].see(other);
        let r1 = t[1].check(
            o.is(409, ErrorCode::PaymentAlreadyActive),
            "another key while an attempt is active must be 409 PAYMENT_ALREADY_ACTIVE",
        );
        let r2 = match cart {
            None => Err(Stop::NotChecked("needs [cart] in the configuration".into())),
            Some(c) => {
                let c = t[2].see(c);
                t[2].check(
                    c.is(409, ErrorCode::PaymentInProgress),
                    "a cart edit during a payment must be 409 PAYMENT_IN_PROGRESS",
                )
            }
        };
        let c = t[3].see(cancel);
        let r3 = t[3]
            .check(
                cancel_status(&c) == Some(AttemptStatus::Processing),
                "cancel of a processing key must answer 200 processing",
            )
            .and_then(|()| {
                t[3].check(
                    !end.is(409, ErrorCode::AttemptCancelled),
                    "the processing attempt must not become cancelled",
                )
            });
        // The second request met the attempt processing, so it was not processed as new.
        vec![r0, r1, r2, r3, Ok(())]
    };
    let end_ev = end.evidence();
    let ledger = match &charged {
        None => None,
        Some(Ok(n)) => Some(*n),
        Some(Err(_)) => None,
    };
    IDS.iter()
        .zip(trails)
        .zip(results)
        .map(|((id, mut t), r)| {
            t.evidence.push(end_ev.clone());
            let r = r.and_then(|()| match ledger {
                Some(n) if n > 1 => Err(Stop::Fail(format!(
                    "the order has {n} charges, expected at most 1"
                ))),
                Some(n) => {
                    t.evidence
                        .push(format!("ledger: order {} has {n} charge(s)", order.id));
                    Ok(())
                }
                None => Ok(()),
            });
            (*id, t, r)
        })
        .collect()
}

/// Polls futures together (no extra dependency for one `join_all`).
async fn join_all<F: Future<Output = Exchange>>(futures: Vec<F>) -> Vec<Exchange> {
    // The futures borrow the backend, so they are driven here rather than spawned.
    let mut pinned: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<Exchange>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

type Scenario = Pin<Box<dyn Future<Output = Vec<(&'static str, Trail, Step)>> + Send>>;

macro_rules! one {
    ($b:expr, $id:literal, $f:ident) => {{
        let b = Arc::clone(&$b);
        Box::pin(async move {
            let mut t = Trail::default();
            let r = $f(&b, &mut t).await;
            vec![($id, t, r)]
        }) as Scenario
    }};
}

fn scenarios(b: &Arc<Backend>) -> Vec<Scenario> {
    let pb = Arc::clone(b);
    vec![
        one!(b, "key.missing", key_missing),
        one!(b, "key.malformed", key_malformed),
        one!(b, "key.quoted-form", key_quoted_form),
        one!(b, "key.new", key_new),
        one!(b, "key.final", key_final),
        Box::pin(async move { pending(&pb).await }),
        one!(b, "key.other-details", key_other_details),
        one!(b, "key.other-order", key_other_order),
        one!(b, "key.tombstone", key_tombstone),
        one!(b, "order.version", order_version),
        one!(b, "order.paid-not-recharged", order_paid),
        one!(b, "order.paid-answers-paid", order_paid_answer),
        one!(b, "cancel.table", cancel_table),
        one!(b, "cancel.race", cancel_race),
        one!(b, "scope.per-user", scope_per_user),
        one!(b, "storm.same-key", storm),
        one!(b, "race.two-keys", two_keys),
        one!(b, "retention.header", retention),
    ]
}

/// Runs every rule concurrently and returns one result per rule, in [`RULES`] order.
pub(crate) async fn run_all(b: Arc<Backend>) -> Vec<RuleResult> {
    let mut set = tokio::task::JoinSet::new();
    for s in scenarios(&b) {
        set.spawn(s);
    }
    let mut done = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(v) => done.extend(v),
            Err(e) => done.push((
                "",
                Trail::default(),
                Err(Stop::Fail(format!("a rule panicked: {e}"))),
            )),
        }
    }
    RULES
        .iter()
        .map(|rule| {
            let found = done.iter_mut().position(|(id, _, _)| *id == rule.id);
            let (trail, step) = match found {
                Some(i) => {
                    let (_, t, s) = done.swap_remove(i);
                    (t, s)
                }
                None => (
                    Trail::default(),
                    Err(Stop::Fail("the rule did not run (a rule panicked)".into())),
                ),
            };
            let (verdict, mut detail) = match step {
                Ok(()) => (Verdict::Pass, String::new()),
                Err(Stop::Fail(m)) => (Verdict::Fail, m),
                Err(Stop::NotChecked(m)) => (Verdict::NotChecked, m),
            };
            if !trail.notes.is_empty() {
                if !detail.is_empty() {
                    detail.push_str("; ");
                }
                detail.push_str(&trail.notes.join("; "));
            }
            RuleResult {
                id: rule.id,
                families: rule.families,
                title: rule.title,
                verdict,
                detail,
                evidence: trail.evidence,
            }
        })
        .collect()
}
