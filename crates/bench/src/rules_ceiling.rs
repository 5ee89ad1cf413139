//! PostgreSQL's ceiling for one pay as the schema is designed: every row and index entry the
//! server's pay writes (crates/server/src/store/pay.rs, the migrations in
//! crates/server/migrations), with no payonce code in between and in the fewest round trips:
//! - claim, one statement: the attempt (five index entries on `attempts`: its expiry index
//!   is partial), the order's lock, the stock line, two audit rows (one index on
//!   `audit_log`); the processing attempt is the outbox;
//! - settle, one statement: the attempt finished, the payment, the confirmation-email job,
//!   the order paid, two audit rows.
//!
//! Each is a data-modifying CTE whose steps run only after the one before returned its row;
//! a statement is atomic, so the claim needs no `BEGIN`/`COMMIT` around it: when a step after
//! the attempt insert does not pass, a failing cast aborts the statement (nothing is written).
//! So a pay is two round trips and two commits (the server's: `BEGIN`, claim, `COMMIT`, then
//! the settle, besides its reads). Statements are prepared once per connection (sqlx's cache)
//! on a pool of one connection per client. The reads a pay makes (the order and its key
//! before the claim) are not here, as in the minimal flow of `ceiling.rs`.

use crate::load::{self, Sample};
use crate::BenchError;
use sqlx::PgPool;
use std::sync::Arc;

/// The server's schema, in its order; `{{ID_PRIMARY_KEY}}` and the `{{POSTGRES}}` lines as
/// the server reads them on PostgreSQL (`Backend::dialect`, crates/server/src/store/mod.rs).
const MIGRATIONS: [&str; 11] = [
    include_str!("../../server/migrations/0001_init.sql"),
    include_str!("../../server/migrations/0002_webhook_events.sql"),
    include_str!("../../server/migrations/0003_outbox_jobs_refunds.sql"),
    include_str!("../../server/migrations/0004_attempts_by_time.sql"),
    include_str!("../../server/migrations/0005_catalog_source.sql"),
    include_str!("../../server/migrations/0006_retention_by_time.sql"),
    include_str!("../../server/migrations/0007_provider_refs.sql"),
    include_str!("../../server/migrations/0008_provider_keys_failed_refunds.sql"),
    include_str!("../../server/migrations/0009_pay_rows.sql"),
    include_str!("../../server/migrations/0010_expired_attempts.sql"),
    include_str!("../../server/migrations/0011_attempt_is_the_outbox.sql"),
];

/// The SKUs of the server's phase (one unit of one each).
const SKUS: [&str; 4] = ["hoodie-zip", "mug-enamel", "sticker-pack", "tee-classic"];

const CLAIM: &str = "
WITH ins AS (INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
    order_version, amount, currency, payment_method_id, provider_key, locked_until,
    lease_token, created_at, updated_at)
  VALUES ($1, $2, $3, $4, 'processing', $5, 1, $6, 'USD', 'pm_card_approve', $7, $8, $9, $10, $10)
  ON CONFLICT DO NOTHING RETURNING 1),
lk AS (UPDATE orders SET active_attempt = $1, updated_at = $10 WHERE id = $4 AND user_id = $2
  AND version = 1 AND status = 'unpaid' AND active_attempt IS NULL
  AND EXISTS (SELECT 1 FROM ins) RETURNING 1),
s0 AS (UPDATE catalog SET stock = stock - 1 WHERE sku = $11 AND stock >= 1
  AND EXISTS (SELECT 1 FROM lk) RETURNING 1),
au AS (INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
  SELECT $10, $2, x.entity, x.entity_id, x.from_state, x.to_state, x.reason
  FROM (VALUES ('attempt', $1::text, NULL::text, 'processing', 'pay accepted for order version 1'),
               ('order', $4::text, 'unpaid', 'unpaid (payment active)',
                'attempt claimed; cart locked; stock reserved'))
    AS x(entity, entity_id, from_state, to_state, reason)
  WHERE EXISTS (SELECT 1 FROM s0))
SELECT CASE WHEN (SELECT count(*) FROM s0) = 1 THEN 1::int8
  ELSE CAST((SELECT 'claim step did not pass' FROM ins) AS BIGINT) END";

const SETTLE: &str = "
WITH fin AS (UPDATE attempts SET status = 'succeeded', response_status = 200,
    response_body = $3, charge_id = $4, locked_until = NULL, lease_token = NULL,
    updated_at = $5, expires_at = $6, needs_review_at = NULL
  WHERE id = $1 AND status = 'processing' RETURNING 1),
py AS (INSERT INTO payments (id, order_id, attempt_id, amount, currency, payment_method_id,
    charge_id, status, created_at, provider_key)
  SELECT $7, $2, $1, $8, 'USD', 'pm_card_approve', $4, 'succeeded', $5, $12
  WHERE EXISTS (SELECT 1 FROM fin)),
jb AS (INSERT INTO jobs (id, kind, order_id, created_at)
  SELECT $9, 'confirmation_email', $2, $5 WHERE EXISTS (SELECT 1 FROM fin)
  ON CONFLICT (kind, order_id) DO NOTHING),
paid AS (UPDATE orders SET status = 'paid', active_attempt = NULL, payment_id = $7,
    updated_at = $5
  WHERE id = $2 AND active_attempt = $1 AND status = 'unpaid'
  AND EXISTS (SELECT 1 FROM fin) RETURNING 1),
au AS (INSERT INTO audit_log (at, actor, entity, entity_id, from_state, to_state, reason)
  SELECT $5, $10, x.entity, x.entity_id, x.from_state, x.to_state, x.reason
  FROM (VALUES ('attempt', $1::text, 'processing', 'succeeded', $11::text),
               ('order', $2::text, 'unpaid', 'paid', $11::text))
    AS x(entity, entity_id, from_state, to_state, reason)
  WHERE EXISTS (SELECT 1 FROM fin))
SELECT (SELECT count(*) FROM fin) + (SELECT count(*) FROM paid)";

/// Runs `pays` pays with `clients` concurrent clients on `url`, a database of its own (the
/// server's tables are created in it).
pub(crate) async fn measure(url: &str, clients: usize, pays: usize) -> Result<Sample, BenchError> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(clients as u32)
        .connect(url)
        .await?;
    for m in MIGRATIONS {
        let sql = m.replace("{{POSTGRES}}", "").replace(
            "{{ID_PRIMARY_KEY}}",
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await?;
    }
    // Untimed setup: one unpaid order per pay, one customer each, one unit of one SKU (the
    // server's phase); stock that never runs out.
    sqlx::query("UPDATE catalog SET stock = 1000000000")
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO orders (id, user_id, status, version, items, subtotal, discount, amount,
           currency, created_at, updated_at)
         SELECT 'o' || i, 'u' || i, 'unpaid', 1,
           '[{\"sku\":\"' || ($2::text[])[(1 + i % 4)::int] || '\",\"quantity\":1}]', 2500, 0, 2500,
           'USD', 0, 0
         FROM generate_series(0, $1 - 1) AS i",
    )
    .bind(i64::try_from(pays).unwrap_or(i64::MAX))
    .bind(&SKUS[..])
    .execute(&pool)
    .await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    let pool = Arc::new(pool);
    let p = pool.clone();
    let sample = load::by_count(clients, pays, move |_, i| {
        let p = p.clone();
        async move { pay(&p, i).await.map_err(|e| e.to_string()) }
    })
    .await;
    let paid: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orders o JOIN payments p ON p.order_id = o.id
         JOIN jobs j ON j.order_id = o.id
         JOIN attempts a ON a.id = p.attempt_id
         WHERE o.status = 'paid' AND a.status = 'succeeded'",
    )
    .fetch_one(&*pool)
    .await?;
    if usize::try_from(paid).ok() != Some(pays - sample.errors) {
        return Err(BenchError::Setup(format!(
            "rules ceiling: {paid} orders paid after {pays} pays with {} errors",
            sample.errors
        )));
    }
    pool.close().await;
    Ok(sample)
}

/// One pay of order `i` by its customer with a new key: claim, then settle.
async fn pay(pool: &PgPool, i: usize) -> Result<(), BenchError> {
    let (order, user, key) = (
        format!("o{i}"),
        format!("u{i}"),
        uuid::Uuid::new_v4().to_string(),
    );
    let id = format!("att_{}", uuid::Uuid::new_v4().simple());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    // Values of the server's sizes: a SHA-256 hex fingerprint and provider key.
    let (fingerprint, provider_key) = (
        format!("{:0>64}", uuid::Uuid::new_v4().simple()),
        format!("pk_{:0>64}", uuid::Uuid::new_v4().simple()),
    );
    let claimed: i64 = sqlx::query_scalar(CLAIM)
        .bind(&id)
        .bind(&user)
        .bind(&key)
        .bind(&order)
        .bind(&fingerprint)
        .bind(2500_i64)
        .bind(&provider_key)
        .bind(now + 30_000)
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(now)
        .bind(SKUS[i % SKUS.len()])
        .fetch_one(pool)
        .await?;
    if claimed != 1 {
        return Err(BenchError::Setup(format!(
            "rules ceiling: claim of {order} lost"
        )));
    }
    let (payment, charge) = (
        format!("pay_{}", uuid::Uuid::new_v4().simple()),
        format!("ch_{}", uuid::Uuid::new_v4().simple()),
    );
    let body = format!(
        r#"{{"status":"succeeded","orderId":"{order}","payment":{{"id":"{payment}","orderId":"{order}","amount":2500,"currency":"USD","paymentMethodId":"pm_card_approve","chargeId":"{charge}","status":"succeeded"}}}}"#
    );
    let settled: i64 = sqlx::query_scalar(SETTLE)
        .bind(&id)
        .bind(&order)
        .bind(body)
        .bind(&charge)
        .bind(now)
        .bind(now + 86_400_000)
        .bind(&payment)
        .bind(2500_i64)
        .bind(format!("job_{}", uuid::Uuid::new_v4().simple()))
        .bind(&user)
        .bind(format!("provider charge {charge} succeeded"))
        .bind(&provider_key)
        .fetch_one(pool)
        .await?;
    if settled != 2 {
        return Err(BenchError::Setup(format!(
            "rules ceiling: settle of {order} lost"
        )));
    }
    Ok(())
}
