//! The audit: what the provider's ledger, the database and the customers say, compared.
//! [`Facts`] is what is read (over HTTP from the provider, over SQL from the run's
//! database); [`audit`] is the comparison, pure and unit-tested below.
//!
//! The rules (each broken one is a [`Violation`] naming the order):
//! - **double charge**: more than one charge that moved money for one order;
//! - **lost charge**: money moved but the order is not recorded as paid with that charge;
//! - **payment without a charge**: the order is recorded as paid, the ledger has no such
//!   charge;
//! - **unresolved**: an attempt still `processing`, or flagged for manual review, after the
//!   faults stopped and the jobs had time to reconcile;
//! - **customer left without an outcome**: a customer's page still shows nothing final;
//! - **customer view contradicted**: a receipt for an order that is not paid (or another
//!   payment), or a final "not charged" for an order that is paid; two tabs of one customer
//!   that disagree;
//! - **emails**: receipts as the run's SMTP sink received them, by the payment their
//!   `Message-ID` names: a paid order without one, an unpaid order with any, or more
//!   duplicates than process crashes (a duplicate is a crash between the relay's 250 and
//!   the commit, sent again with the same `Message-ID`);
//! - **stock**: per SKU, stock taken ≠ quantities in paid orders, or stock below zero.
//!
//! With `--upgrade-from` (main.rs adds them, see [`Report::add_upgrade`]), also:
//! - **server error**: an answer of 500 or more that is not a 503 with `Retry-After`;
//! - **upgrade**: a step of the rolling upgrade failed (this release's `migrate`, the
//!   previous release restarting on the migrated schema, a replacement starting), or an
//!   instance exited by itself.

use crate::customer::{Intent, View};
use crate::ChaosError;
use payonce_protocol::provider::{paths as provider_paths, Charge, ChargeStatus, Ledger};
use payonce_protocol::{AttemptStatus, OrderLine, OrderStatus};
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// An order as stored.
#[derive(Debug, Clone)]
pub(crate) struct OrderRow {
    pub id: String,
    pub status: OrderStatus,
    pub payment_id: Option<String>,
    pub items: Vec<OrderLine>,
}

/// A payment as stored.
#[derive(Debug, Clone)]
pub(crate) struct PaymentRow {
    pub id: String,
    pub order_id: String,
    pub charge_id: String,
}

/// An attempt as stored (for the unresolved rule and the histories).
#[derive(Debug, Clone)]
pub(crate) struct AttemptRow {
    pub id: String,
    pub order_id: String,
    pub key: String,
    pub status: AttemptStatus,
    pub needs_review: bool,
    pub created_at: i64,
}

/// Everything the audit reads.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub charges: Vec<Charge>,
    pub orders: Vec<OrderRow>,
    pub payments: Vec<PaymentRow>,
    pub attempts: Vec<AttemptRow>,
    /// Receipts the SMTP sink received, per order (by the payment their `Message-ID`
    /// names; a payment nobody stored counts under its own id).
    pub mails: HashMap<String, u64>,
    /// Instance processes that died during the run (killed, aborted at a failpoint or on
    /// the crash fault, or stopped by the upgrade in a way that may cut a job round:
    /// `Stats::upgrade_cuts` in cluster.rs): the most duplicate receipts the run may have.
    pub crashes: u64,
    pub stock_before: Vec<(String, i64)>,
    pub stock_after: Vec<(String, i64)>,
    /// Audit-trail lines by entity id (order or attempt).
    pub trail: HashMap<String, Vec<String>>,
}

/// The payment a raw receipt is about: its `Message-ID` is `<receipt.{payment}@{domain}>`
/// (`payonce_rules::receipt::message_id`).
fn receipt_payment(message: &str) -> Option<&str> {
    let id = message
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix("Message-ID: "))?;
    id.strip_prefix("<receipt.")?
        .split_once('@')
        .map(|(p, _)| p)
}

/// Stock per SKU.
pub(crate) async fn read_stock(db: &sqlx::PgPool) -> Result<Vec<(String, i64)>, ChaosError> {
    let rows = sqlx::query("SELECT sku, stock FROM catalog ORDER BY sku")
        .fetch_all(db)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("sku")?, r.try_get("stock")?)))
        .collect()
}

/// Waits until no attempt is processing and no email job is pending (or the deadline),
/// then a little longer for webhooks still on their way (delayed duplicates). True if quiet.
pub(crate) async fn wait_quiet(db: &sqlx::PgPool, deadline: Instant) -> Result<bool, ChaosError> {
    loop {
        let busy: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM attempts WHERE status = 'processing')
                  + (SELECT count(*) FROM jobs WHERE done_at IS NULL)",
        )
        .fetch_one(db)
        .await?;
        if busy == 0 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Facts {
    pub(crate) async fn read(
        db: &sqlx::PgPool,
        http: &reqwest::Client,
        provider_url: &str,
        stock_before: Vec<(String, i64)>,
        stripe: Option<&crate::stripe::StripeSide>,
        (receipts, crashes): (&[String], u64),
    ) -> Result<Facts, ChaosError> {
        let charges = match stripe {
            Some(stripe) => stripe.ledger().await?,
            None => {
                let ledger: Ledger = http
                    .get(format!("{provider_url}{}", provider_paths::LEDGER))
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                ledger.charges
            }
        };
        let mut f = Facts {
            charges,
            stock_before,
            stock_after: read_stock(db).await?,
            crashes,
            ..Facts::default()
        };
        for r in sqlx::query("SELECT id, status, payment_id, items FROM orders")
            .fetch_all(db)
            .await?
        {
            let items: String = r.try_get("items")?;
            let status: String = r.try_get("status")?;
            f.orders.push(OrderRow {
                id: r.try_get("id")?,
                status: OrderStatus::parse(&status)
                    .ok_or_else(|| ChaosError::Setup(format!("unknown order status {status:?}")))?,
                payment_id: r.try_get("payment_id")?,
                items: serde_json::from_str(&items).map_err(|e| {
                    ChaosError::Setup(format!("an order's items do not decode: {e}"))
                })?,
            });
        }
        for r in sqlx::query("SELECT id, order_id, charge_id FROM payments")
            .fetch_all(db)
            .await?
        {
            f.payments.push(PaymentRow {
                id: r.try_get("id")?,
                order_id: r.try_get("order_id")?,
                charge_id: r.try_get("charge_id")?,
            });
        }
        let order_of: HashMap<&str, &str> = f
            .payments
            .iter()
            .map(|p| (p.id.as_str(), p.order_id.as_str()))
            .collect();
        let mut mails: HashMap<String, u64> = HashMap::new();
        for m in receipts {
            let payment = receipt_payment(m).unwrap_or("(no receipt Message-ID)");
            let order = order_of.get(payment).copied().unwrap_or(payment);
            *mails.entry(order.to_owned()).or_default() += 1;
        }
        f.mails = mails;
        for r in sqlx::query(
            "SELECT id, order_id, idem_key, status, needs_review_at IS NOT NULL AS review, created_at
             FROM attempts ORDER BY created_at",
        )
        .fetch_all(db)
        .await?
        {
            let status: String = r.try_get("status")?;
            f.attempts.push(AttemptRow {
                id: r.try_get("id")?,
                order_id: r.try_get("order_id")?,
                key: r.try_get("idem_key")?,
                status: AttemptStatus::parse(&status).ok_or_else(|| {
                    ChaosError::Setup(format!("unknown attempt status {status:?}"))
                })?,
                needs_review: r.try_get("review")?,
                created_at: r.try_get("created_at")?,
            });
        }
        for r in sqlx::query(
            "SELECT at, actor, entity, entity_id, from_state, to_state, reason FROM audit_log ORDER BY id",
        )
        .fetch_all(db)
        .await?
        {
            let id: String = r.try_get("entity_id")?;
            let from: Option<String> = r.try_get("from_state")?;
            let line = format!(
                "at={} {} {} {} -> {} ({})",
                r.try_get::<i64, _>("at")?,
                r.try_get::<String, _>("actor")?,
                r.try_get::<String, _>("entity")?,
                from.unwrap_or_else(|| "-".into()),
                r.try_get::<String, _>("to_state")?,
                r.try_get::<String, _>("reason")?,
            );
            f.trail.entry(id).or_default().push(line);
        }
        Ok(f)
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub kind: Kind,
    /// The order (or, for stock, the SKU).
    pub subject: String,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    DoubleCharge,
    LostCharge,
    PaymentWithoutCharge,
    Unresolved,
    CustomerWithoutOutcome,
    ViewContradicted,
    Emails,
    Stock,
    ServerError,
    Upgrade,
}

/// The audit's figures and findings.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub intents: usize,
    pub orders: usize,
    pub paid_orders: usize,
    pub charges: usize,
    pub declined_charges: usize,
    pub attempts: usize,
    /// Attempts flagged for manual review that settled afterwards.
    pub reviewed_then_settled: usize,
    /// Paid orders by number of receipts.
    pub mails_per_paid: BTreeMap<u64, usize>,
    /// Receipts beyond the first of their order (each a crash between the relay's 250
    /// and the commit).
    pub duplicate_receipts: u64,
    /// [`Facts::crashes`].
    pub crashes: u64,
    /// Intents by test payment method (the provider's behaviour) and by plan.
    pub methods: BTreeMap<&'static str, usize>,
    pub plans: BTreeMap<&'static str, usize>,
    /// Intents whose page reloaded at least once.
    pub reloading: usize,
    /// Final views by what they showed.
    pub views: BTreeMap<String, usize>,
    pub violations: Vec<Violation>,
    /// `--upgrade-from`: what the upgrade did (one line).
    pub upgrade: Option<String>,
    /// `--upgrade-from`: answers of 500 or more that were not a 503 with `Retry-After` (a
    /// violation per route and answer).
    pub bad_server_answers: u64,
}

/// The attempt's audit trail says it was flagged for manual review at some point (the
/// server's reconciliation writes that state when the provider cannot tell).
fn flagged_once(f: &Facts, attempt_id: &str) -> bool {
    f.trail
        .get(attempt_id)
        .is_some_and(|lines| lines.iter().any(|l| l.contains("(needs review)")))
}

fn moved_money(c: &Charge) -> bool {
    matches!(c.status, ChargeStatus::Succeeded | ChargeStatus::Refunded)
}

fn is_paid(o: &OrderRow) -> bool {
    matches!(o.status, OrderStatus::Paid | OrderStatus::Refunded)
}

/// The comparison.
pub(crate) fn audit(f: &Facts, intents: &[Intent]) -> Report {
    let mut r = Report {
        intents: intents.len(),
        orders: f.orders.len(),
        attempts: f.attempts.len(),
        ..Report::default()
    };
    let mut bad = |kind, subject: &str, detail: String| {
        r.violations.push(Violation {
            kind,
            subject: subject.to_owned(),
            detail,
        })
    };
    let orders: HashMap<&str, &OrderRow> = f.orders.iter().map(|o| (o.id.as_str(), o)).collect();
    let payment_of: HashMap<&str, &PaymentRow> = f
        .payments
        .iter()
        .map(|p| (p.order_id.as_str(), p))
        .collect();
    let mut money: BTreeMap<&str, Vec<&Charge>> = BTreeMap::new();
    for c in f.charges.iter().filter(|c| moved_money(c)) {
        money.entry(c.order_id.as_str()).or_default().push(c);
    }

    for (order, charges) in &money {
        if charges.len() > 1 {
            let ids: Vec<&str> = charges.iter().map(|c| c.id.as_str()).collect();
            bad(
                Kind::DoubleCharge,
                order,
                format!("{} charges moved money: {ids:?}", charges.len()),
            );
        }
        for c in charges {
            let recorded = orders.get(order).is_some_and(|o| is_paid(o))
                && payment_of.get(order).is_some_and(|p| p.charge_id == c.id);
            if !recorded {
                bad(
                    Kind::LostCharge,
                    order,
                    format!(
                        "charge {} ({} {}) is not recorded: order {}, payment {:?}",
                        c.id,
                        c.amount,
                        c.currency,
                        orders.get(order).map_or("missing", |o| o.status.as_str()),
                        payment_of.get(order).map(|p| &p.charge_id)
                    ),
                );
            }
        }
    }
    for o in &f.orders {
        if !is_paid(o) {
            continue;
        }
        r.paid_orders += 1;
        let charged = payment_of.get(o.id.as_str()).is_some_and(|p| {
            money
                .get(o.id.as_str())
                .is_some_and(|cs| cs.iter().any(|c| c.id == p.charge_id))
        });
        if !charged {
            bad(
                Kind::PaymentWithoutCharge,
                &o.id,
                format!(
                    "order {} with payment {:?} but no such charge in the ledger",
                    o.status.as_str(),
                    o.payment_id
                ),
            );
        }
        let mails = f.mails.get(&o.id).copied().unwrap_or(0);
        *r.mails_per_paid.entry(mails).or_default() += 1;
        r.duplicate_receipts += mails.saturating_sub(1);
        if mails == 0 {
            bad(Kind::Emails, &o.id, "paid order without a receipt".into());
        }
    }
    r.crashes = f.crashes;
    if r.duplicate_receipts > f.crashes {
        bad(
            Kind::Emails,
            "receipts",
            format!(
                "{} duplicate receipts but {} crashes: a duplicate without a crash between the relay's 250 and the commit",
                r.duplicate_receipts, f.crashes
            ),
        );
    }
    for (order, n) in &f.mails {
        if *n > 0 && !orders.get(order.as_str()).is_some_and(|o| is_paid(o)) {
            bad(
                Kind::Emails,
                order,
                format!("{n} receipts for an order that is not paid"),
            );
        }
    }
    r.charges = money.values().map(Vec::len).sum();
    r.declined_charges = f.charges.iter().filter(|c| !moved_money(c)).count();

    for a in &f.attempts {
        if a.status == AttemptStatus::Processing {
            bad(
                Kind::Unresolved,
                &a.order_id,
                format!(
                    "attempt {} is processing{}",
                    a.id,
                    if a.needs_review {
                        ", flagged for review"
                    } else {
                        ""
                    }
                ),
            );
        } else if a.needs_review {
            // Settled, yet still in the operators' review queue: the server clears the flag
            // when an attempt settles.
            bad(
                Kind::Unresolved,
                &a.order_id,
                format!(
                    "attempt {} is {} but still flagged for review",
                    a.id,
                    a.status.as_str()
                ),
            );
        } else if flagged_once(f, &a.id) {
            // Flagged while the provider could not tell (it was down), settled since by a
            // webhook or a retry.
            r.reviewed_then_settled += 1;
        }
    }

    // Stock: what left the shelf is what paid orders hold.
    let mut sold: HashMap<&str, i64> = HashMap::new();
    for o in f.orders.iter().filter(|o| is_paid(o)) {
        for l in &o.items {
            *sold.entry(l.sku.as_str()).or_default() += i64::from(l.quantity);
        }
    }
    let after: HashMap<&str, i64> = f
        .stock_after
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    for (sku, before) in &f.stock_before {
        let now = after.get(sku.as_str()).copied().unwrap_or(i64::MIN);
        let taken = before - now;
        let paid = sold.get(sku.as_str()).copied().unwrap_or(0);
        if now < 0 || taken != paid {
            bad(
                Kind::Stock,
                sku,
                format!("stock {before} -> {now} (taken {taken}), paid orders hold {paid}"),
            );
        }
    }

    for intent in intents {
        *r.methods.entry(intent.script.method).or_default() += 1;
        *r.plans.entry(intent.script.plan.name()).or_default() += 1;
        r.reloading += usize::from(!intent.script.reloads.is_empty());
        let order = intent
            .order_id
            .as_deref()
            .and_then(|id| orders.get(id).copied());
        for (tab, view) in intent.views.iter().enumerate() {
            let key = match view {
                View::Paid { .. } => "paid".to_owned(),
                View::NotPaid { why, .. } => format!("not paid: {why}"),
                View::Open(_) => "open".to_owned(),
            };
            *r.views.entry(key).or_default() += 1;
            let subject = intent.order_id.as_deref().unwrap_or(&intent.user);
            match view {
                View::Open(why) => bad(
                    Kind::CustomerWithoutOutcome,
                    subject,
                    format!("tab{} still shows no outcome: {why}", tab + 1),
                ),
                View::Paid { payment_id } => {
                    let ok = order.is_some_and(|o| {
                        is_paid(o)
                            && payment_id
                                .as_ref()
                                .is_none_or(|p| o.payment_id.as_ref() == Some(p))
                    });
                    if !ok {
                        bad(
                            Kind::ViewContradicted,
                            subject,
                            format!(
                                "tab{} shows a receipt ({payment_id:?}) but the order is {:?} with payment {:?}",
                                tab + 1,
                                order.map(|o| o.status.as_str()),
                                order.and_then(|o| o.payment_id.as_ref())
                            ),
                        );
                    }
                }
                View::NotPaid { why, key } => {
                    // "Not charged" is about that attempt: it must never have charged.
                    let charged = key.as_ref().and_then(|k| {
                        f.attempts.iter().find(|a| {
                            Some(&a.order_id) == intent.order_id.as_ref()
                                && &a.key == k
                                && a.status.charged()
                        })
                    });
                    if let Some(a) = charged {
                        bad(
                            Kind::ViewContradicted,
                            subject,
                            format!(
                                "tab{} shows \"not charged\" ({why}) for attempt {} that charged",
                                tab + 1,
                                a.id
                            ),
                        );
                    }
                }
            }
        }
        // A customer all of whose tabs say "not charged" must not have paid the order.
        let all_unpaid = !intent.views.is_empty()
            && intent
                .views
                .iter()
                .all(|v| matches!(v, View::NotPaid { .. }));
        if all_unpaid && order.is_some_and(is_paid) {
            bad(
                Kind::ViewContradicted,
                intent.order_id.as_deref().unwrap_or(&intent.user),
                format!(
                    "every tab shows \"not charged\" but the order is paid: {:?}",
                    intent.views
                ),
            );
        }
    }
    r.violations
        .sort_by(|a, b| (a.kind, &a.subject).cmp(&(b.kind, &b.subject)));
    r
}

impl Report {
    /// `--upgrade-from`: its summary line, the server errors a client must never see and the
    /// upgrade's failed steps, as violations.
    pub(crate) fn add_upgrade(
        &mut self,
        summary: String,
        bad_server_errors: Vec<String>,
        failed_steps: Vec<String>,
    ) {
        self.upgrade = Some(summary);
        self.bad_server_answers = bad_server_errors
            .iter()
            .filter_map(|l| l.split_once(' ')?.0.parse::<u64>().ok())
            .sum();
        for e in bad_server_errors {
            self.violations.push(Violation {
                kind: Kind::ServerError,
                subject: "answer".into(),
                detail: e,
            });
        }
        for e in failed_steps {
            self.violations.push(Violation {
                kind: Kind::Upgrade,
                subject: "upgrade".into(),
                detail: e,
            });
        }
    }

    pub(crate) fn clean(&self) -> bool {
        self.violations.is_empty()
    }

    fn count(&self, k: Kind) -> usize {
        self.violations.iter().filter(|v| v.kind == k).count()
    }

    /// The audit's table.
    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        let mut line = |label: &str, value: String| {
            let _ = writeln!(s, "{label:<34} {value}");
        };
        line("intents", self.intents.to_string());
        let list = |m: &BTreeMap<&str, usize>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        line("  by payment method", list(&self.methods));
        line(
            "  by plan",
            format!("{}; page reloads in {}", list(&self.plans), self.reloading),
        );
        line(
            "orders / paid",
            format!(
                "{} / {} ({} attempts)",
                self.orders, self.paid_orders, self.attempts
            ),
        );
        line(
            "charges (ledger)",
            format!(
                "{} moved money, {} declined",
                self.charges, self.declined_charges
            ),
        );
        line("double charges", self.count(Kind::DoubleCharge).to_string());
        line(
            "lost charges",
            format!(
                "{} (charged, not recorded as paid)",
                self.count(Kind::LostCharge)
            ),
        );
        line(
            "payments without a charge",
            self.count(Kind::PaymentWithoutCharge).to_string(),
        );
        line(
            "unresolved attempts",
            format!(
                "{} (still processing after reconciliation; {} flagged for review while the provider was down, settled since)",
                self.count(Kind::Unresolved),
                self.reviewed_then_settled
            ),
        );
        line(
            "customers left without an outcome",
            self.count(Kind::CustomerWithoutOutcome).to_string(),
        );
        line(
            "customer views contradicted",
            self.count(Kind::ViewContradicted).to_string(),
        );
        let mails: Vec<String> = self
            .mails_per_paid
            .iter()
            .map(|(n, orders)| format!("{n} receipt(s) × {orders} orders"))
            .collect();
        line(
            "emails per paid order",
            if mails.is_empty() {
                "no paid order".into()
            } else {
                mails.join(", ")
            },
        );
        line(
            "duplicate receipts",
            format!(
                "{} (each a crash between the relay's 250 and the commit; {} crashes)",
                self.duplicate_receipts, self.crashes
            ),
        );
        line("email errors", self.count(Kind::Emails).to_string());
        line("stock errors", self.count(Kind::Stock).to_string());
        if let Some(u) = &self.upgrade {
            line("upgrade", u.clone());
            line(
                "5xx other than 503 + Retry-After",
                format!(
                    "{} answers ({} routes and answers)",
                    self.bad_server_answers,
                    self.count(Kind::ServerError)
                ),
            );
            line(
                "upgrade steps failed",
                self.count(Kind::Upgrade).to_string(),
            );
        }
        let views: Vec<String> = self.views.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line("customer views (per tab)", views.join(", "));
        line(
            "RESULT",
            if self.clean() {
                "clean: 0 violations".into()
            } else {
                format!("{} VIOLATIONS", self.violations.len())
            },
        );
        s
    }
}

impl Violation {
    /// The violation and the history of its order: the customer's, the attempts, the
    /// ledger, the audit trail.
    pub(crate) fn render(&self, f: &Facts, intents: &[Intent]) -> String {
        let mut s = format!("- {:?} {}: {}\n", self.kind, self.subject, self.detail);
        if let Some(intent) = intents
            .iter()
            .find(|i| i.order_id.as_deref() == Some(&self.subject) || i.user == self.subject)
        {
            let _ = writeln!(s, "  customer {} (intent {}):", intent.user, intent.index);
            for l in intent.history.lines() {
                let _ = writeln!(s, "    {l}");
            }
        }
        for a in f.attempts.iter().filter(|a| a.order_id == self.subject) {
            let _ = writeln!(
                s,
                "  attempt {} key {} status {} created {}{}",
                a.id,
                &a.key[..a.key.len().min(8)],
                a.status.as_str(),
                a.created_at,
                if a.needs_review { " (review)" } else { "" }
            );
            for l in f.trail.get(&a.id).into_iter().flatten() {
                let _ = writeln!(s, "    {l}");
            }
        }
        for l in f.trail.get(&self.subject).into_iter().flatten() {
            let _ = writeln!(s, "  order trail: {l}");
        }
        for c in f.charges.iter().filter(|c| c.order_id == self.subject) {
            let _ = writeln!(
                s,
                "  ledger: charge {} key {} {:?} {} {} at {}",
                c.id, c.provider_key, c.status, c.amount, c.currency, c.created_at
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::customer::Script;

    fn charge(id: &str, order: &str, status: ChargeStatus) -> Charge {
        Charge {
            id: id.into(),
            provider_key: format!("pk_{id}"),
            amount: 2500,
            currency: "USD".into(),
            payment_method_id: "pm_card_approve".into(),
            order_id: order.into(),
            status,
            created_at: 0,
            next_action_url: None,
            decline_code: None,
            client_secret: None,
        }
    }
    fn line(sku: &str, quantity: u32) -> OrderLine {
        OrderLine {
            sku: sku.into(),
            name: sku.into(),
            quantity,
            unit_price: 2500,
            line_total: 2500 * i64::from(quantity),
        }
    }
    fn order(id: &str, paid: bool) -> OrderRow {
        OrderRow {
            id: id.into(),
            status: if paid {
                OrderStatus::Paid
            } else {
                OrderStatus::Unpaid
            },
            payment_id: paid.then(|| format!("pay_{id}")),
            items: vec![line("tee", 2)],
        }
    }
    fn payment(order: &str, charge: &str) -> PaymentRow {
        PaymentRow {
            id: format!("pay_{order}"),
            order_id: order.into(),
            charge_id: charge.into(),
        }
    }
    /// One paid order (o1, charge c1, one mail, 2 tees sold) and one declined (o2): clean.
    fn healthy() -> Facts {
        Facts {
            charges: vec![
                charge("c1", "o1", ChargeStatus::Succeeded),
                charge("c2", "o2", ChargeStatus::Declined),
            ],
            orders: vec![order("o1", true), order("o2", false)],
            payments: vec![payment("o1", "c1")],
            attempts: vec![],
            mails: HashMap::from([("o1".to_owned(), 1)]),
            crashes: 0,
            stock_before: vec![("tee".into(), 10)],
            stock_after: vec![("tee".into(), 8)],
            trail: HashMap::new(),
        }
    }
    fn intent(order: &str, views: Vec<View>) -> Intent {
        Intent::for_audit(order, Script::draw(1, 0), views)
    }
    fn kinds(r: &Report) -> Vec<Kind> {
        r.violations.iter().map(|v| v.kind).collect()
    }

    #[test]
    fn a_consistent_run_is_clean_and_counted() {
        let views = vec![
            intent(
                "o1",
                vec![View::Paid {
                    payment_id: Some("pay_o1".into()),
                }],
            ),
            intent(
                "o2",
                vec![View::NotPaid {
                    why: "PAYMENT_DECLINED".into(),
                    key: None,
                }],
            ),
        ];
        let r = audit(&healthy(), &views);
        assert!(r.clean(), "{:?}", r.violations);
        assert_eq!(
            (r.intents, r.paid_orders, r.charges, r.declined_charges),
            (2, 1, 1, 1)
        );
        assert_eq!(r.mails_per_paid, BTreeMap::from([(1, 1)]));
        assert!(r.render().contains("clean: 0 violations"));
    }

    #[test]
    fn a_second_charge_for_one_order_is_a_double_charge_and_a_lost_one() {
        let mut f = healthy();
        f.charges.push(charge("c3", "o1", ChargeStatus::Succeeded));
        let r = audit(&f, &[]);
        assert_eq!(kinds(&r), [Kind::DoubleCharge, Kind::LostCharge]);
        assert!(r.violations[1].detail.contains("c3"));
        // A refunded second charge still moved money once.
        f.charges[2].status = ChargeStatus::Refunded;
        assert_eq!(
            kinds(&audit(&f, &[])),
            [Kind::DoubleCharge, Kind::LostCharge]
        );
    }

    #[test]
    fn a_charge_for_an_unpaid_order_is_lost_and_a_payment_without_charge_is_caught() {
        let mut f = healthy();
        f.charges.push(charge("c9", "o2", ChargeStatus::Succeeded));
        assert_eq!(kinds(&audit(&f, &[])), [Kind::LostCharge]);

        let mut f = healthy();
        f.charges.remove(0);
        let r = audit(&f, &[]);
        assert_eq!(kinds(&r), [Kind::PaymentWithoutCharge]);
    }

    #[test]
    fn processing_attempts_and_stale_review_flags_are_unresolved() {
        let mut f = healthy();
        let a = |status: AttemptStatus, review| AttemptRow {
            id: format!("att_{}", status.as_str()),
            order_id: "o2".into(),
            key: "k".repeat(20),
            status,
            needs_review: review,
            created_at: 0,
        };
        f.attempts = vec![
            a(AttemptStatus::Processing, false),
            a(AttemptStatus::Processing, true),
            a(AttemptStatus::Declined, true),
            a(AttemptStatus::Succeeded, false),
        ];
        // The succeeded one was flagged once, and settled since (the flag cleared).
        f.trail.insert(
            "att_succeeded".into(),
            vec![
                "at=1 system attempt processing -> processing (needs review) (provider down)"
                    .into(),
            ],
        );
        let r = audit(&f, &[]);
        assert_eq!(
            kinds(&r),
            [Kind::Unresolved, Kind::Unresolved, Kind::Unresolved],
            "two processing, one settled but still flagged"
        );
        assert_eq!(r.reviewed_then_settled, 1);
    }

    #[test]
    fn receipts_at_least_one_per_paid_order_duplicates_only_from_crashes() {
        let mut f = healthy();
        f.mails.insert("o1".into(), 2);
        f.mails.insert("o2".into(), 1);
        let r = audit(&f, &[]);
        // o1's duplicate without a crash, o2's receipt though it is unpaid.
        assert_eq!(kinds(&r), [Kind::Emails, Kind::Emails]);
        assert_eq!(r.mails_per_paid, BTreeMap::from([(2, 1)]));
        f.crashes = 1;
        assert_eq!(
            kinds(&audit(&f, &[])),
            [Kind::Emails],
            "a crash explains o1's"
        );
        f.mails.remove("o1");
        let r = audit(&f, &[]);
        assert!(r.violations.iter().any(|v| v.subject == "o1"), "no receipt");
    }

    #[test]
    fn a_receipt_is_counted_for_the_payment_its_message_id_names() {
        let m = "From: x\r\nMessage-ID: <receipt.pay_7@shop.test>\r\n\r\nbody";
        assert_eq!(receipt_payment(m), Some("pay_7"));
        assert_eq!(receipt_payment("Message-ID: <abc@x>\n\n"), None);
    }

    #[test]
    fn stock_taken_must_match_paid_quantities_and_never_go_negative() {
        let mut f = healthy();
        f.stock_after = vec![("tee".into(), 7)];
        assert_eq!(kinds(&audit(&f, &[])), [Kind::Stock]);
        let mut f = healthy();
        f.stock_before = vec![("tee".into(), 1)];
        f.stock_after = vec![("tee".into(), -1)];
        assert_eq!(kinds(&audit(&f, &[])), [Kind::Stock]);
    }

    #[test]
    fn customer_views_must_match_the_store() {
        let mut f = healthy();
        f.attempts = vec![AttemptRow {
            id: "att_1".into(),
            order_id: "o1".into(),
            key: "key-of-o1-paid-attempt".into(),
            status: AttemptStatus::Succeeded,
            needs_review: false,
            created_at: 0,
        }];
        let not_paid = |why: &str, key: Option<&str>| View::NotPaid {
            why: why.into(),
            key: key.map(str::to_owned),
        };
        // A receipt for the unpaid order, a receipt naming another payment, "not charged"
        // for an attempt that succeeded, and a page with no outcome.
        let views = vec![
            intent("o2", vec![View::Paid { payment_id: None }]),
            intent(
                "o1",
                vec![View::Paid {
                    payment_id: Some("pay_other".into()),
                }],
            ),
            intent(
                "o1",
                vec![
                    View::Paid { payment_id: None },
                    not_paid("cancelled", Some("key-of-o1-paid-attempt")),
                ],
            ),
            intent("o2", vec![View::Open("pending".into())]),
        ];
        let r = audit(&f, &views);
        assert_eq!(
            kinds(&r),
            [
                Kind::CustomerWithoutOutcome,
                Kind::ViewContradicted,
                Kind::ViewContradicted,
                Kind::ViewContradicted
            ],
            "{:?}",
            r.violations
        );

        // A declined first attempt then a paid one from another tab: both true, no finding.
        // But a customer told "not charged" everywhere whose order is paid is one.
        let ok = vec![intent(
            "o1",
            vec![
                View::Paid { payment_id: None },
                not_paid("PAYMENT_DECLINED", Some("other-key")),
            ],
        )];
        assert!(audit(&f, &ok).clean());
        let told_unpaid = vec![intent("o1", vec![not_paid("OUT_OF_STOCK", None)])];
        let r = audit(&f, &told_unpaid);
        assert_eq!(kinds(&r), [Kind::ViewContradicted]);
        assert!(r.violations[0].detail.contains("every tab"));
    }
}
