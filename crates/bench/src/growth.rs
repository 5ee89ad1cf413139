//! Cost as the work grows (PostgreSQL): the same server with 10⁴, 10⁵ and 10⁶ stored attempts
//! (bulk-inserted by one `INSERT … SELECT … generate_series`, not through HTTP), new-key pays
//! and replays at each size; then a server with the cleanup job on, expiring those 10⁶ keys
//! in batches while pays run, against the pays at the same size without it.

use crate::load::{self, Sample};
use crate::phases::{
    client, create_orders, pay, replay_phase, report_errors, server_args, sessions, top_up_stock,
    warm, EMBEDDED_PROVIDER,
};
use crate::proc::{spawn, Backend, Db};
use crate::{BenchError, Opts};
use payonce_protocol::body::paths;
use sqlx::AnyPool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Figures at one size.
#[derive(Debug, Clone)]
pub(crate) struct AtSize {
    pub stored: usize,
    pub pays: Sample,
    pub replays: Sample,
}

/// Pays while the cleanup job deletes the stored keys.
#[derive(Debug, Clone)]
pub(crate) struct Cleanup {
    pub pays: Sample,
    /// Stored keys deleted while the pays ran, and how long the whole cleanup took.
    pub deleted_during: i64,
    pub took: Option<Duration>,
}

/// Everything this part measured.
#[derive(Debug, Clone)]
pub(crate) struct Growth {
    pub sizes: Vec<AtSize>,
    pub cleanup: Option<Cleanup>,
}

/// `(order, user index, key)` of pays, as the other phases use them.
pub(crate) type Pairs = Arc<Vec<(String, usize, String)>>;

pub(crate) async fn growth(opts: &Opts, sizes: &[usize]) -> Result<Growth, BenchError> {
    let db = Db::create(Backend::Postgres, &opts.pg_url).await?;
    let r = growth_on(opts, &db, sizes).await;
    db.remove().await;
    r
}

async fn growth_on(opts: &Opts, db: &Db, sizes: &[usize]) -> Result<Growth, BenchError> {
    let mut args = server_args(&db.url, &[]);
    args.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
    let server = spawn(&opts.server_bin, &args, db.dir.join("growth.log"), true)?;
    let api = server.api();
    top_up_stock(&db.url).await?;
    let clients: Vec<reqwest::Client> = (0..opts.clients)
        .map(|_| client())
        .collect::<Result<_, _>>()?;
    // One batch of orders per size and 25 for the pays during cleanup (so that they last
    // about as long as the cleanup of 10⁶ keys they slow, not its first half second); then
    // two pays per client for each server's warm-up: a fresh server's first pays open its
    // database connections and prepare their statements (docs/benchmarks.md, "Cleanup").
    let (per, warm_up) = (opts.growth_pays, 2 * opts.clients);
    let during_n = 25 * per;
    let n = per * sizes.len() + during_n + 2 * warm_up;
    let tokens = Arc::new(sessions(&clients, &api, n).await?);
    let orders = create_orders(&clients, &api, &tokens, n).await?;
    let pairs = |from: usize, len: usize| -> Pairs {
        Arc::new(
            (from..from + len)
                .map(|j| (orders[j].clone(), j, uuid::Uuid::new_v4().to_string()))
                .collect(),
        )
    };
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await?;
    let clients = Arc::new(clients);
    let mut figures = Growth {
        sizes: Vec::new(),
        cleanup: None,
    };
    let warm_pays = pays(
        opts,
        &clients,
        &api,
        &tokens,
        &pairs(n - 2 * warm_up, warm_up),
    )
    .await;
    report_errors("growth", "warm-up pays", &warm_pays);
    let mut stored = 0;
    for (b, &size) in sizes.iter().enumerate() {
        let t = Instant::now();
        fill(&pool, stored, size).await?;
        stored = size;
        eprintln!(
            "  growth: {size} stored attempts ({:.1} s to fill)",
            t.elapsed().as_secs_f64()
        );
        let p = pairs(b * per, per);
        warm(&clients, &api).await?;
        let pays = pays(opts, &clients, &api, &tokens, &p).await;
        report_errors("growth", "pays", &pays);
        let replays = replay_phase(opts, &clients, &api, &tokens, &p).await;
        report_errors("growth", "replays", &replays);
        figures.sizes.push(AtSize {
            stored: size,
            pays,
            replays,
        });
    }
    drop(server);

    // The same database with the jobs on: every filled key is past its retention.
    let mut args = server_args(&db.url, &[]);
    args.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
    if let Some(i) = args.iter().position(|a| a == "--jobs-interval-ms") {
        args[i + 1] = "200".into();
    }
    let server = spawn(&opts.server_bin, &args, db.dir.join("cleanup.log"), true)?;
    let api = server.api();
    let started = Instant::now();
    warm(&clients, &api).await?;
    let warm_pays = pays(opts, &clients, &api, &tokens, &pairs(n - warm_up, warm_up)).await;
    report_errors("growth", "warm-up pays", &warm_pays);
    let before = filled(&pool).await?;
    let p = pairs(sizes.len() * per, during_n);
    let during = pays(opts, &clients, &api, &tokens, &p).await;
    report_errors("growth", "pays during cleanup", &during);
    let after = filled(&pool).await?;
    let mut took = None;
    while started.elapsed() < Duration::from_secs(300) {
        if filled(&pool).await? == 0 {
            took = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    figures.cleanup = Some(Cleanup {
        pays: during,
        deleted_during: before - after,
        took,
    });
    pool.close().await;
    Ok(figures)
}

/// Inserts filled attempts `from..to`: final, past their retention (the cleanup job deletes
/// them when it runs; the growth server runs no jobs), spread over 10,000 users.
async fn fill(pool: &AnyPool, from: usize, to: usize) -> Result<(), BenchError> {
    sqlx::query(
        "INSERT INTO attempts (id, user_id, idem_key, order_id, status, fingerprint,
           order_version, amount, currency, payment_method_id, provider_key, response_status,
           response_body, created_at, updated_at, expires_at)
         SELECT 'att_fill_' || g, 'fill-u' || (g % 10000), 'fill-key-' || g, 'ord_fill_' || g,
           'succeeded', 'fp', 1, 2500, 'USD', 'pm_card_approve', 'pk_fill_' || g, 200,
           '{\"status\":\"succeeded\"}', 1, 1, 1
         FROM generate_series($1::bigint, $2::bigint) AS g",
    )
    .bind(i64::try_from(from).unwrap_or(0))
    .bind(i64::try_from(to).unwrap_or(0) - 1)
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE attempts").execute(pool).await?;
    Ok(())
}

/// Filled attempts still stored.
async fn filled(pool: &AnyPool) -> Result<i64, BenchError> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM attempts WHERE id LIKE 'att_fill_%'")
            .fetch_one(pool)
            .await?,
    )
}

/// New-key pays of `pairs`, one each.
pub(crate) async fn pays(
    opts: &Opts,
    clients: &Arc<Vec<reqwest::Client>>,
    api: &str,
    tokens: &Arc<Vec<String>>,
    pairs: &Pairs,
) -> Sample {
    let (cl, api, tokens, pairs) = (
        clients.clone(),
        api.to_owned(),
        tokens.clone(),
        pairs.clone(),
    );
    load::by_count(opts.clients, pairs.len(), move |w, i| {
        let (order, user, key) = pairs[i].clone();
        let (http, token, url) = (
            cl[w].clone(),
            tokens[user].clone(),
            format!("{api}{}", paths::pay(&order)),
        );
        async move { pay(&http, url, &token, &key, false).await }
    })
    .await
}
