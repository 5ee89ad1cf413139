//! The journal's two costs (docs/benchmarks.md, "The journal"), each measured within one run:
//!
//! - **Cleanup of 10⁶ journal rows** (`--only journal-cleanup`, both backends): one server
//!   with its jobs on; new-key pays without anything to clean, then 10⁶ journal rows past
//!   the retention appear and the next job round removes them while new-key pays run, then
//!   pays without again. The p99 of the pays during the cleanup against that of the pays
//!   without (the two phases without pooled, one before and one after). On SQLite the rows
//!   are inserted between the phases (one transaction) and deleted by the job in bounded
//!   batches; on PostgreSQL they are ten days of 10⁵ rows, each built as a table of its own
//!   beforehand and attached as that day's partition as the pays start, as a server running
//!   then would have made them, and the job drops them whole.
//! - **New-key pays with the journal against the same code before it** (`--only
//!   journal-cost`): the pay phase of `phases.rs` (fresh database, sessions and orders, then
//!   `--pays` timed new-key pays) against this build's server and one built from the commit
//!   before the journal (`--prev-server-bin`), alternately, several rounds, on both backends;
//!   the pooled figures of each and their ratio.

use crate::growth::{pays, Pairs};
use crate::load::Sample;
use crate::phases::{
    client, create_orders, report_errors, server_args, sessions, top_up_stock, warm,
    EMBEDDED_PROVIDER,
};
use crate::proc::{spawn, Backend, Db};
use crate::{BenchError, Opts};
use sqlx::AnyPool;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Journal rows the cleanup part seeds past the retention.
const SEEDED: i64 = 1_000_000;
/// Over this many UTC days (PostgreSQL: one partition each).
const SEED_DAYS: i64 = 10;
const DAY_MS: i64 = 86_400_000;
/// The server's default `--audit-retention-days`.
const RETENTION_DAYS: i64 = 180;
/// How often the cleanup server's jobs run.
const JOBS_MS: &str = "1000";

/// The cleanup part's figures on one backend.
#[derive(Debug, Clone)]
pub(crate) struct Cleanup {
    pub backend: Backend,
    /// The pays without cleanup, before and after, pooled.
    pub without: Sample,
    pub during: Sample,
    /// Seeded rows left when the pays during the cleanup ended, and how long after the
    /// rows appeared none was left.
    pub left_after_pays: i64,
    pub took: Option<Duration>,
}

/// The cleanup part on `backend`.
pub(crate) async fn cleanup(opts: &Opts, backend: Backend) -> Result<Cleanup, BenchError> {
    let db = Db::create(backend, &opts.pg_url).await?;
    let r = cleanup_on(opts, backend, &db).await;
    db.remove().await;
    r
}

async fn cleanup_on(opts: &Opts, backend: Backend, db: &Db) -> Result<Cleanup, BenchError> {
    let mut args = server_args(&db.url, &[]);
    args.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
    if let Some(i) = args.iter().position(|a| a == "--jobs-interval-ms") {
        args[i + 1] = JOBS_MS.into();
    }
    let server = spawn(&opts.server_bin, &args, db.dir.join("cleanup.log"), true)?;
    let api = server.api();
    top_up_stock(&db.url).await?;
    let clients: Vec<reqwest::Client> = (0..opts.clients)
        .map(|_| client())
        .collect::<Result<_, _>>()?;
    // Each phase without cleanup is `per` pays; the pays during it 4 × that, so that they
    // outlast SQLite's deletes for most of their length.
    let (per, warm_up) = (opts.pays, 2 * opts.clients);
    let n = 6 * per + warm_up;
    let tokens = Arc::new(sessions(&clients, &api, n).await?);
    let orders = create_orders(&clients, &api, &tokens, n).await?;
    let pairs = |from: usize, len: usize| -> Pairs {
        Arc::new(
            (from..from + len)
                .map(|j| (orders[j].clone(), j, uuid::Uuid::new_v4().to_string()))
                .collect(),
        )
    };
    let pool = pool(&db.url, backend).await?;
    let clients = Arc::new(clients);
    let now = now_ms();
    // Ten whole days that ended more than the retention ago.
    let first_day = now.div_euclid(DAY_MS) - RETENTION_DAYS - SEED_DAYS - 1;
    let t = Instant::now();
    if backend == Backend::Postgres {
        stage_days(&pool, first_day).await?;
    }
    eprintln!(
        "  {}: journal rows prepared ({:.1} s)",
        backend.name(),
        t.elapsed().as_secs_f64()
    );
    warm(&clients, &api).await?;
    let w = pays(opts, &clients, &api, &tokens, &pairs(6 * per, warm_up)).await;
    report_errors(backend.name(), "warm-up pays", &w);
    let before = pays(opts, &clients, &api, &tokens, &pairs(0, per)).await;
    report_errors(backend.name(), "pays without cleanup", &before);
    if backend == Backend::Sqlite {
        let t = Instant::now();
        seed_sqlite(&pool, first_day).await?;
        eprintln!(
            "  {}: {SEEDED} journal rows inserted ({:.1} s)",
            backend.name(),
            t.elapsed().as_secs_f64()
        );
    }
    let appeared = Instant::now();
    let during = {
        let during_pairs = pairs(per, 4 * per);
        let run = pays(opts, &clients, &api, &tokens, &during_pairs);
        match backend {
            Backend::Postgres => {
                let (s, attached) = tokio::join!(run, attach_days(&pool, first_day));
                attached?;
                s
            }
            Backend::Sqlite => run.await,
        }
    };
    report_errors(backend.name(), "pays during cleanup", &during);
    let left_after_pays = seeded_left(&pool, backend, first_day).await?;
    let mut took = None;
    while appeared.elapsed() < Duration::from_secs(600) {
        if seeded_left(&pool, backend, first_day).await? == 0 {
            took = Some(appeared.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = pays(opts, &clients, &api, &tokens, &pairs(5 * per, per)).await;
    report_errors(backend.name(), "pays without cleanup (after)", &after);
    pool.close().await;
    drop(server);
    Ok(Cleanup {
        backend,
        without: before.merged(after),
        during,
        left_after_pays,
        took,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One connection to the run's database; on SQLite one that waits for the server's writer.
async fn pool(url: &str, backend: Backend) -> Result<AnyPool, BenchError> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    if backend == Backend::Sqlite {
        sqlx::raw_sql("PRAGMA busy_timeout = 15000")
            .execute(&pool)
            .await?;
    }
    Ok(pool)
}

/// The columns a seeded row fills: an answered pay request as `src/http/journal.rs` writes
/// it (`$1`: the row number, `$2`: its time).
const SEED_ROW: &str = "'request', 'pay', 'seed-req-' || g, 'seed-u' || (g % 10000),
    'ord_seed_' || g, 'seed-key-' || g, NULL,
    '{\"status\":200,\"code\":null,\"replayed\":false,\"ms\":12,\"version\":1,\"amount\":2500,\"currency\":\"USD\"}'";

/// PostgreSQL: a table per seeded day, filled and indexed like a partition and with a
/// check constraint of its range (so attaching it needs no scan), not yet attached.
async fn stage_days(pool: &AnyPool, first_day: i64) -> Result<(), BenchError> {
    let per_day = SEEDED / SEED_DAYS;
    for d in 0..SEED_DAYS {
        let (from, to) = ((first_day + d) * DAY_MS, (first_day + d + 1) * DAY_MS);
        let sql = format!(
            "CREATE TABLE journal_seed_{d} (LIKE journal INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                 INCLUDING INDEXES);
             INSERT INTO journal_seed_{d} (id, at, actor, kind, request_id, user_id, order_id,
                 idem_key, provider_id, detail)
             SELECT -g, {from} + (g % {per_day}) * ({DAY_MS} / {per_day}), {SEED_ROW}
             FROM generate_series({lo}::bigint, {hi}::bigint) AS g;
             ALTER TABLE journal_seed_{d} ADD CHECK (at >= {from} AND at < {to});
             ANALYZE journal_seed_{d}",
            lo = d * per_day + 1,
            hi = (d + 1) * per_day,
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// PostgreSQL: the staged days become partitions of `journal`; the next job round drops
/// them.
async fn attach_days(pool: &AnyPool, first_day: i64) -> Result<(), BenchError> {
    // Let the pays get going first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for d in 0..SEED_DAYS {
        let (from, to) = ((first_day + d) * DAY_MS, (first_day + d + 1) * DAY_MS);
        let sql = format!(
            "ALTER TABLE journal ATTACH PARTITION journal_seed_{d} FOR VALUES FROM ({from}) TO ({to})"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// SQLite: the seeded rows, in one transaction (the server's writer waits for it).
async fn seed_sqlite(pool: &AnyPool, first_day: i64) -> Result<(), BenchError> {
    let from = first_day * DAY_MS;
    let step = SEED_DAYS * DAY_MS / SEEDED;
    let sql = format!(
        "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {SEEDED})
         INSERT INTO journal (at, actor, kind, request_id, user_id, order_id, idem_key,
             provider_id, detail)
         SELECT {from} + g * {step}, {SEED_ROW} FROM s"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(pool)
        .await?;
    Ok(())
}

/// Seeded rows still stored (PostgreSQL: in the seeded days still attached or staged, by
/// the statistics of their tables).
async fn seeded_left(pool: &AnyPool, backend: Backend, first_day: i64) -> Result<i64, BenchError> {
    let q = match backend {
        Backend::Sqlite => sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE at < $1")
            .bind((first_day + SEED_DAYS) * DAY_MS),
        Backend::Postgres => sqlx::query_scalar(
            "SELECT COALESCE(SUM(c.reltuples), 0)::bigint FROM pg_class c
             WHERE c.relname LIKE 'journal\\_seed\\_%' AND c.relkind = 'r'",
        ),
    };
    Ok(q.fetch_one(pool).await?)
}

/// One binary's new-key pays in the cost part.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pays {
    pub rounds: Vec<Sample>,
}

impl Pays {
    fn pooled(&self) -> Sample {
        self.rounds
            .iter()
            .cloned()
            .reduce(Sample::merged)
            .unwrap_or_default()
    }
}

/// The cost part's figures on one backend.
#[derive(Debug, Clone)]
pub(crate) struct Cost {
    pub backend: Backend,
    pub now: Pays,
    pub prev: Pays,
}

/// The cost part on `backend`: `rounds` rounds, each the previous binary's pay phase and
/// this one's, their order alternating.
pub(crate) async fn cost(
    opts: &Opts,
    backend: Backend,
    prev_bin: &Path,
    rounds: usize,
) -> Result<Cost, BenchError> {
    let mut figures = Cost {
        backend,
        now: Pays::default(),
        prev: Pays::default(),
    };
    for r in 0..rounds {
        for prev_first in [r % 2 == 1, r % 2 == 0] {
            let (bin, into) = match prev_first {
                true => (prev_bin, &mut figures.prev),
                false => (opts.server_bin.as_path(), &mut figures.now),
            };
            let s = pay_phase(opts, backend, bin).await?;
            eprintln!(
                "  {} round {r}: {} {:.0}/s p99 {:.1} ms",
                backend.name(),
                if prev_first { "before" } else { "journal" },
                s.rate(),
                s.ms(0.99)
            );
            into.rounds.push(s);
        }
    }
    Ok(figures)
}

/// `phases.rs`'s new-key pay phase on a fresh database against `bin`.
async fn pay_phase(opts: &Opts, backend: Backend, bin: &Path) -> Result<Sample, BenchError> {
    let db = Db::create(backend, &opts.pg_url).await?;
    let r = async {
        let mut args = server_args(&db.url, &[]);
        args.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
        let server = spawn(bin, &args, db.dir.join("server.log"), true)?;
        let api = server.api();
        top_up_stock(&db.url).await?;
        let clients: Vec<reqwest::Client> = (0..opts.clients)
            .map(|_| client())
            .collect::<Result<_, _>>()?;
        let warm_up = 2 * opts.clients;
        let n = opts.pays + warm_up;
        let tokens = Arc::new(sessions(&clients, &api, n).await?);
        let orders = create_orders(&clients, &api, &tokens, n).await?;
        let pairs = |from: usize, len: usize| -> Pairs {
            Arc::new(
                (from..from + len)
                    .map(|j| (orders[j].clone(), j, uuid::Uuid::new_v4().to_string()))
                    .collect(),
            )
        };
        let clients = Arc::new(clients);
        warm(&clients, &api).await?;
        let w = pays(opts, &clients, &api, &tokens, &pairs(opts.pays, warm_up)).await;
        report_errors(backend.name(), "warm-up pays", &w);
        let s = pays(opts, &clients, &api, &tokens, &pairs(0, opts.pays)).await;
        report_errors(backend.name(), "pays", &s);
        drop(server);
        Ok::<_, BenchError>(s)
    }
    .await;
    db.remove().await;
    r
}

/// The two parts' figures as markdown.
pub(crate) fn render(cleanups: &[Cleanup], costs: &[Cost]) -> String {
    let mut out = String::new();
    if !cleanups.is_empty() {
        let _ = writeln!(
            out,
            "Cleanup of {SEEDED} journal rows past the retention ({SEED_DAYS} days) while \
             new-key pays run (one server, jobs every {JOBS_MS} ms; target: p99 during ≤ 1.2 × \
             without):\n\n\
             | backend | pays without cleanup (before + after) p50 / p99 | pays during cleanup \
             p50 / p99 | **p99 during / without** | seeded rows left when those pays ended | \
             all gone after |\n|---|---:|---:|---:|---:|---:|"
        );
        for c in cleanups {
            let ratio = c.during.ms(0.99) / c.without.ms(0.99).max(f64::MIN_POSITIVE);
            let _ = writeln!(
                out,
                "| {} | {:.0}/s, {:.1} / {:.1} ms | {:.0}/s, {:.1} / {:.1} ms | **{ratio:.2}** {} \
                 | {} | {} |",
                c.backend.name(),
                c.without.rate(),
                c.without.ms(0.5),
                c.without.ms(0.99),
                c.during.rate(),
                c.during.ms(0.5),
                c.during.ms(0.99),
                if ratio <= 1.2 { "met" } else { "MISSED" },
                c.left_after_pays,
                c.took
                    .map_or("over 600 s".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            );
        }
    }
    if !costs.is_empty() {
        let _ = writeln!(
            out,
            "\nNew-key pays with the journal against the same code before it (each round a \
             fresh database and server per binary, the order alternating; target ≥ 0.9):\n\n\
             | backend | rounds | before the journal: pays/s, p50 / p99 | with it | **with / \
             before** | per round (before → with) |\n|---|---:|---:|---:|---:|---|"
        );
        for c in costs {
            let (p, n) = (c.prev.pooled(), c.now.pooled());
            let ratio = n.rate() / p.rate().max(f64::MIN_POSITIVE);
            let rounds: Vec<String> = c
                .prev
                .rounds
                .iter()
                .zip(&c.now.rounds)
                .map(|(p, n)| format!("{:.0} → {:.0}", p.rate(), n.rate()))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {:.0}/s, {:.1} / {:.1} ms | {:.0}/s, {:.1} / {:.1} ms | **{ratio:.2}** \
                 {} | {} |",
                c.backend.name(),
                c.now.rounds.len(),
                p.rate(),
                p.ms(0.5),
                p.ms(0.99),
                n.rate(),
                n.ms(0.5),
                n.ms(0.99),
                if ratio >= 0.9 { "met" } else { "MISSED" },
                rounds.join(", "),
            );
        }
    }
    out
}
