//! PostgreSQL: each transaction of a pay as one statement, so one round trip each instead of
//! one per step. Every step is the same conditional statement as on SQLite (`attempts.rs`,
//! `orders.rs`, `catalog.rs`, …), written as a data-modifying CTE that runs only when the
//! step before it returned its row (`EXISTS (SELECT 1 FROM <step>)`). A statement is atomic,
//! and each step's `WHERE` is re-checked under its row lock, so the row counts decide exactly
//! as the separate statements did. SQLite has no data-modifying CTEs; it runs the steps one
//! by one, in process, where a statement costs no round trip.

use super::audit::Entry;
use payonce_protocol::{OrderLine, Payment};
use payonce_rules::plan::Finish;
use payonce_rules::Processing;
use sqlx::any::{AnyArguments, AnyExecutor};
use sqlx::{Any, Arguments, Encode, Type};

/// A statement being written: `$n` placeholders numbered as arguments are added.
#[derive(Default)]
struct Sql {
    text: String,
    args: AnyArguments,
}

impl Sql {
    /// Adds an argument; its placeholder.
    fn arg<'a, T: Encode<'a, Any> + Type<Any>>(&mut self, v: T) -> String {
        // Pushing a plain value into the Any buffer cannot fail.
        let _ = self.args.add(v);
        format!("${}", self.args.len())
    }

    /// Appends `, name AS (step WHERE … AND EXISTS (SELECT 1 FROM after))`.
    fn step(&mut self, name: &str, step: &str, after: &str) {
        self.text.push_str(&format!(
            ",\n{name} AS ({step} AND EXISTS (SELECT 1 FROM {after}) RETURNING 1)"
        ));
    }

    /// One stock step per line, in the plan's (SKU) order: each runs after the one before,
    /// so every transaction locks catalog rows in one order and two never deadlock. (A row
    /// is updated once per statement: an order's SKUs are distinct, src/catalog.rs.)
    /// `sign`: `-` reserves (only if that many are left), `+` gives back. Returns the last.
    fn stock(&mut self, lines: &[OrderLine], sign: char, mut after: String) -> String {
        for (i, l) in lines.iter().enumerate() {
            let (qty, sku) = (self.arg(i64::from(l.quantity)), self.arg(l.sku.as_str()));
            let left = if sign == '-' {
                format!(" AND stock >= {qty}")
            } else {
                String::new()
            };
            let step =
                format!("UPDATE catalog SET stock = stock {sign} {qty} WHERE sku = {sku}{left}");
            self.step(&format!("s{i}"), &step, &after);
            after = format!("s{i}");
        }
        after
    }

    /// The audit rows and the outbox step, after `after`.
    fn audit(&mut self, audit: &[Entry], now: &str, after: &str) {
        let rows: Vec<_> = audit
            .iter()
            .map(|e| {
                serde_json::json!({"actor": e.actor, "entity": e.entity, "entity_id": e.entity_id,
                    "from_state": e.from, "to_state": e.to, "reason": e.reason})
            })
            .collect();
        let rows = self.arg(serde_json::Value::from(rows).to_string());
        self.text.push_str(&format!(
            ",\nau AS (INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
             SELECT {now}, x.* FROM json_to_recordset({rows}::json) AS x(actor TEXT, entity TEXT,
               entity_id TEXT, from_state TEXT, to_state TEXT, reason TEXT)
             WHERE EXISTS (SELECT 1 FROM {after}))"
        ));
    }

    /// Runs the statement, ending in `SELECT select`.
    async fn run<'c, T>(self, e: impl AnyExecutor<'c>, select: &str) -> sqlx::Result<T>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> + Send + Unpin,
    {
        let sql = sqlx::AssertSqlSafe(format!("{}\nSELECT {select}", self.text));
        sqlx::query_as_with(sql, self.args).fetch_one(e).await
    }
}

/// What the claim statement did (each step runs only if the one before it passed): the key
/// inserted, the order locked, and how many stock lines were reserved.
pub(crate) struct Claimed {
    pub inserted: bool,
    pub locked: bool,
    pub reserved: usize,
}

/// The claim (`pay::claim`): the insert under the unique indexes, the order lock, the stock
/// lines, the audit rows and the outbox row, in one statement. Inside the caller's
/// transaction, which rolls back when a step did not pass.
pub(crate) async fn claim<'c>(
    e: impl AnyExecutor<'c>,
    a: &Processing,
    key: &str,
    token: &str,
    stock: &[OrderLine],
    audit: &[Entry],
    now: i64,
) -> sqlx::Result<Claimed> {
    let mut q = Sql::default();
    let (id, user, order, version) = (
        q.arg(a.id.as_str()),
        q.arg(a.terms.user.as_str()),
        q.arg(a.terms.order_id.as_str()),
        q.arg(a.terms.order_version),
    );
    let (pk, at) = (q.arg(a.provider_key.as_str()), q.arg(now));
    q.text = format!(
        "WITH ins AS (INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
           order_version, amount, currency, payment_method_id, provider_key, locked_until,
           lease_token, created_at, updated_at)
         VALUES ({id}, {user}, {}, {order}, 'processing', {}, {version}, {}, {}, {}, {pk}, {}, {},
           {at}, {at}) ON CONFLICT DO NOTHING RETURNING 1)",
        q.arg(key),
        q.arg(a.terms.fingerprint.as_str()),
        q.arg(a.terms.amount),
        q.arg(a.terms.currency.as_str()),
        q.arg(a.payment_method_id.as_str()),
        q.arg(a.locked_until),
        q.arg(token),
    );
    q.step(
        "lk",
        &format!(
            "UPDATE orders SET active_attempt = {id}, updated_at = {at} WHERE id = {order}
             AND user_id = {user} AND version = {version} AND status = 'unpaid'
             AND active_attempt IS NULL"
        ),
        "ins",
    );
    let last = q.stock(stock, '-', "lk".into());
    q.audit(audit, &at, &last);
    let obx = q.arg(format!("obx_{}", uuid::Uuid::new_v4().simple()));
    q.text.push_str(&format!(
        ",\nob AS (INSERT INTO outbox (id, attempt_id, kind, provider_key, created_at)
         SELECT {obx}, {id}, 'charge', {pk}, {at} WHERE EXISTS (SELECT 1 FROM {last}))"
    ));
    let reserved: String = (0..stock.len())
        .map(|i| format!(" + (SELECT count(*) FROM s{i})"))
        .collect();
    let select = format!("(SELECT count(*) FROM ins), (SELECT count(*) FROM lk), 0{reserved}");
    let (inserted, locked, reserved): (i64, i64, i64) = q.run(e, &select).await?;
    Ok(Claimed {
        inserted: inserted == 1,
        locked: locked == 1,
        reserved: usize::try_from(reserved).unwrap_or(0),
    })
}

/// How a settle ends besides finishing the attempt and closing its outbox row.
#[derive(Clone)]
pub(crate) enum Settle {
    /// Insert the payment, mark the order paid, enqueue the confirmation email.
    Charged(Payment),
    /// Unlock the order and give these lines back (SKU order).
    Uncharged(Vec<OrderLine>),
}

/// The settle (`pay::settle`) as one statement, outside any transaction. False when the
/// attempt was no longer processing (someone settled it first): then nothing was written.
/// A charged attempt whose order it does not lock fails the statement (a bug: nothing is
/// written, the attempt stays processing and is settled again).
pub(crate) async fn settle<'c>(
    e: impl AnyExecutor<'c>,
    a: &Processing,
    fin: &Finish,
    then: &Settle,
    audit: &[Entry],
    now: i64,
) -> sqlx::Result<bool> {
    let mut q = Sql::default();
    let (id, order, at) = (
        q.arg(a.id.as_str()),
        q.arg(a.terms.order_id.as_str()),
        q.arg(now),
    );
    q.text = format!(
        "WITH fin AS (UPDATE attempts SET status = {}, response_status = {}, response_body = {},
           charge_id = {}, locked_until = NULL, lease_token = NULL, updated_at = {at},
           expires_at = {}, needs_review_at = NULL
         WHERE id = {id} AND status = 'processing' RETURNING 1)",
        q.arg(fin.status.as_str()),
        q.arg(i64::from(fin.answer.status)),
        q.arg(fin.answer.body.as_str()),
        q.arg(fin.charge_id.clone()),
        q.arg(fin.expires_at),
    );
    let mut check = "0".to_owned();
    match then {
        Settle::Charged(p) => {
            let pay = q.arg(p.id.as_str());
            let cols = format!(
                "{}, {}, {}, {}, {}",
                q.arg(p.amount),
                q.arg(p.currency.as_str()),
                q.arg(p.payment_method_id.as_str()),
                q.arg(p.charge_id.as_str()),
                q.arg(p.status.as_str()),
            );
            let job = q.arg(format!("job_{}", uuid::Uuid::new_v4().simple()));
            q.text.push_str(&format!(
                ",\npy AS (INSERT INTO payments (id, order_id, attempt_id, amount, currency,
                   payment_method_id, charge_id, status, created_at)
                 SELECT {pay}, {order}, {id}, {cols}, {at} WHERE EXISTS (SELECT 1 FROM fin)),
                 jb AS (INSERT INTO jobs (id, kind, order_id, created_at)
                 SELECT {job}, 'confirmation_email', {order}, {at} WHERE EXISTS (SELECT 1 FROM fin)
                 ON CONFLICT (kind, order_id) DO NOTHING)"
            ));
            let paid = format!(
                "UPDATE orders SET status = 'paid', active_attempt = NULL, payment_id = {pay},
                 updated_at = {at} WHERE id = {order} AND active_attempt = {id} AND status = 'unpaid'"
            );
            q.step("paid", &paid, "fin");
            // The failing cast aborts the statement; it reads a CTE, so it is never folded.
            check = "(SELECT count(*) FROM fin) - (SELECT count(*) FROM paid)".into();
        }
        Settle::Uncharged(lines) => {
            let unlock = format!(
                "UPDATE orders SET active_attempt = NULL, updated_at = {at}
                 WHERE id = {order} AND active_attempt = {id}"
            );
            q.step("un", &unlock, "fin");
            q.stock(lines, '+', "fin".into());
        }
    }
    q.audit(audit, &at, "fin");
    q.text.push_str(&format!(
        ",\nob AS (UPDATE outbox SET done_at = {at} WHERE attempt_id = {id} AND done_at IS NULL
         AND EXISTS (SELECT 1 FROM fin))"
    ));
    let (done, _): (i64, i64) = q
        .run(
            e,
            &format!(
                "(SELECT count(*) FROM fin), CASE WHEN {check} = 0 THEN 0
                 ELSE CAST((SELECT 'order not locked by the attempt' FROM fin) AS BIGINT) END"
            ),
        )
        .await?;
    Ok(done == 1)
}
