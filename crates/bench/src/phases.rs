//! The measured phases. Per backend: new-key pays over HTTP, the store's ceiling, replays, the no-op endpoint and `/healthz`; on PostgreSQL also replays through a
//! server given `--redis-url`. Then the same-key storm over three instances.

use crate::load::{self, Sample};
use crate::proc::{spawn, Backend, Db, Proc};
use crate::{BenchError, Opts};
use payonce_protocol::body::paths;
use payonce_protocol::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use payonce_protocol::provider::methods::APPROVE;
use payonce_protocol::provider::{paths as provider_paths, Ledger};
use payonce_protocol::PayRequest;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every spawned server shares it (several processes verify each other's tokens).
const SECRET: &str = "payonce-bench-secret-0123456789";

/// Orders are spread over these SKUs, one unit each, so claims do not all queue on one
/// catalog row. Their stock is topped up before the run.
const SKUS: [&str; 4] = ["hoodie-zip", "mug-enamel", "sticker-pack", "tee-classic"];

/// Replays warm up this long before the window opens (and so do the other timed phases).
const WARMUP: Duration = Duration::from_millis(500);

/// What Redis gave, if anything.
#[derive(Debug, Clone)]
pub(crate) enum RedisFigure {
    /// Measured replays/s through a server started with `--redis-url`, and that server's
    /// own count of replays read from Redis and from the database (`GET /metrics`).
    Measured(Sample, Option<(u64, u64)>),
    /// Why there is no figure.
    NotAvailable(String),
}

/// The figures of one backend.
#[derive(Debug, Clone)]
pub(crate) struct BackendFigures {
    pub backend: Backend,
    pub http_pays: Sample,
    /// The minimal durable pay flow on the same store through sqlx (src/ceiling.rs).
    pub ceiling: Sample,
    /// SQLite: the same flow through SQLite's C library (src/sqlite_direct.rs), from one
    /// thread and from `--clients` threads.
    pub direct: Option<(Sample, Sample)>,
    /// PostgreSQL: the rows and indexes of one pay as designed (src/rules_ceiling.rs).
    pub rules: Option<Sample>,
    /// PostgreSQL: new-key pays through a server given `--redis-url`, on orders of their
    /// own, in the same run as `http_pays`; the charges in its provider's ledger.
    pub redis_pays: Option<(Sample, usize)>,
    pub replays: Sample,
    pub noop: Sample,
    pub healthz: Sample,
    pub redis: Option<RedisFigure>,
    /// Replays through a server with the in-memory replay cache on (the server's default),
    /// and that server's no-op.
    pub memory: (Sample, Sample),
    /// Charges in the provider ledger after the HTTP pays (must equal the pays).
    pub ledger_charges: usize,
}

/// The same-key storm's figures.
#[derive(Debug, Clone)]
pub(crate) struct StormFigures {
    pub rounds: usize,
    pub requests_per_round: usize,
    /// Charges in the ledger per round's order (each must be 1).
    pub charges: Vec<usize>,
    /// `(status, count)`, by status.
    pub statuses: Vec<(u16, usize)>,
    /// True when every 200 body of a round is the same bytes.
    pub answers_agree: bool,
    pub latency: Sample,
    /// Commits and rollbacks of the storm's database over all rounds (with each round's
    /// session and order), read after the API processes exited (a backend reports its
    /// statistics when it ends).
    pub transactions: Option<i64>,
}

/// The embedded mock provider, with its ledger in memory on both backends. By default it
/// rewrites its whole ledger as one JSON file (write a temporary file, rename it over the
/// old one) after every charge when the database is SQLite, and never with PostgreSQL: work
/// that grows with the ledger (≈ 0.7 MB and ≈ 3 ms of open/write/rename per pay at 1,000
/// charges, see docs/benchmarks.md), done by a stand-in for a remote service, not by the
/// server. It was most of the gap between SQLite pays over HTTP and the same statements in-process.
pub(crate) const EMBEDDED_PROVIDER: &[&str] =
    &["--provider-addr", "127.0.0.1:0", "--provider-memory-only"];

pub(crate) fn server_args(db_url: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--dev",
        "--addr",
        "127.0.0.1:0",
        "--database-url",
        db_url,
        "--session-secret",
        SECRET,
        // The pay path alone: webhooks would add a second settle attempt per charge, and
        // the background job a periodic scan; neither is in the ceiling.
        "--no-provider-webhooks",
        // Replays read from the database (and Redis) where measured as such; the in-memory
        // replay cache (on by default in the server) is measured by its own server, see
        // `memory_replays`.
        "--replay-cache-entries",
        "0",
        "--jobs-interval-ms",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    a
}

/// `--redis-url` for the pay servers under `--redis-pays`.
fn redis_pays(opts: &Opts) -> Vec<&str> {
    if opts.redis_pays {
        vec!["--redis-url", &opts.redis_url]
    } else {
        Vec::new()
    }
}

/// Commits and rollbacks so far in the database of `db_url`.
async fn transactions(db_url: &str) -> Option<i64> {
    let pool = sqlx::PgPool::connect(db_url).await.ok()?;
    let n = sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await
    .ok();
    pool.close().await;
    n
}

pub(crate) fn client() -> Result<reqwest::Client, BenchError> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?)
}

pub(crate) async fn top_up_stock(db_url: &str) -> Result<(), BenchError> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(db_url)
        .await?;
    sqlx::query("UPDATE catalog SET stock = 1000000000")
        .execute(&pool)
        .await?;
    pool.close().await;
    Ok(())
}

async fn session(http: &reqwest::Client, api: &str, user: &str) -> Result<String, BenchError> {
    let res = http
        .post(format!("{api}{}", paths::DEV_SESSIONS))
        .json(&json!({ "userId": user }))
        .send()
        .await?;
    let v: serde_json::Value = res.json().await?;
    v["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| BenchError::Setup(format!("no token in dev session answer: {v}")))
}

fn user_name(j: usize) -> String {
    format!("bench-u{j}")
}

/// Dev sessions (not timed) for users `0..n`; their tokens, by user.
pub(crate) async fn sessions(
    clients: &[reqwest::Client],
    api: &str,
    n: usize,
) -> Result<Vec<String>, BenchError> {
    let tokens = Arc::new(Mutex::new(vec![String::new(); n]));
    let (cl, api2, tokens2) = (Arc::new(clients.to_vec()), api.to_owned(), tokens.clone());
    let s = load::by_count(clients.len(), n, move |w, j| {
        let (http, api, tokens) = (cl[w].clone(), api2.clone(), tokens2.clone());
        async move {
            let token = session(&http, &api, &user_name(j))
                .await
                .map_err(|e| e.to_string())?;
            if let Ok(mut t) = tokens.lock() {
                t[j] = token;
            }
            Ok(())
        }
    })
    .await;
    if s.errors > 0 {
        return Err(BenchError::Setup(format!(
            "dev sessions: {} errors, first: {}",
            s.errors,
            s.first_error.unwrap_or_default()
        )));
    }
    let tokens = tokens.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(tokens)
}

/// Creates `n` orders over HTTP (not timed); order `j` belongs to user `j % tokens.len()`.
pub(crate) async fn create_orders(
    clients: &[reqwest::Client],
    api: &str,
    tokens: &Arc<Vec<String>>,
    n: usize,
) -> Result<Vec<String>, BenchError> {
    let ids = Arc::new(Mutex::new(vec![String::new(); n]));
    let (cl, api2, tokens2, ids2) = (
        Arc::new(clients.to_vec()),
        api.to_owned(),
        tokens.clone(),
        ids.clone(),
    );
    let s = load::by_count(clients.len(), n, move |w, j| {
        let (http, url, token, ids) = (
            cl[w].clone(),
            format!("{api2}{}", paths::ORDERS),
            tokens2[j % tokens2.len()].clone(),
            ids2.clone(),
        );
        async move {
            let res = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({ "items": [{ "sku": SKUS[j % SKUS.len()], "quantity": 1 }] }))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = res.status().as_u16();
            let v: serde_json::Value = res.json().await.map_err(|e| e.to_string())?;
            let id = v["id"]
                .as_str()
                .filter(|_| status == 201)
                .ok_or_else(|| format!("create order answered {status}: {v}"))?;
            if let Ok(mut ids) = ids.lock() {
                ids[j] = id.to_owned();
            }
            Ok(())
        }
    })
    .await;
    if s.errors > 0 {
        return Err(BenchError::Setup(format!(
            "creating orders: {} errors, first: {}",
            s.errors,
            s.first_error.unwrap_or_default()
        )));
    }
    let ids = ids.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(ids)
}

/// One pay request; `replay` says whether the answer must be a replay.
pub(crate) async fn pay(
    http: &reqwest::Client,
    url: String,
    token: &str,
    key: &str,
    replay: bool,
) -> Result<(), String> {
    let res = http
        .post(url)
        .bearer_auth(token)
        .header(IDEMPOTENCY_KEY, key)
        .json(&approve_v1())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let replayed = res.headers().contains_key(IDEMPOTENT_REPLAYED);
    let body = res.bytes().await.map_err(|e| e.to_string())?;
    if status != 200 || replayed != replay {
        return Err(format!(
            "pay answered {status} (replayed: {replayed}): {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

/// `GET path`, expecting 200.
async fn get_ok(http: &reqwest::Client, url: String) -> Result<(), String> {
    let res = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let body = res.bytes().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!(
            "answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

async fn ledger(
    http: &reqwest::Client,
    provider: &str,
    order: Option<&str>,
) -> Result<usize, BenchError> {
    let mut url = format!("{provider}{}", provider_paths::LEDGER);
    if let Some(o) = order {
        url.push_str("?orderId=");
        url.push_str(o);
    }
    let l: Ledger = http.get(url).send().await?.json().await?;
    Ok(l.charges.len())
}

/// Opens each client's keep-alive connection and the server's store pool before a timed
/// phase: every client at once, a few rounds, because a pool opens connections only when
/// all of its open ones are busy. Without it the first request of each client waits for a
/// new database connection (p99 of 400 pays on a fresh server 157 ms, 33 ms once warm).
pub(crate) async fn warm(clients: &[reqwest::Client], api: &str) -> Result<(), BenchError> {
    let (cl, url) = (
        Arc::new(clients.to_vec()),
        format!("{api}{}", paths::HEALTHZ),
    );
    let s = load::by_count(clients.len(), clients.len() * 8, move |w, _| {
        let (http, url) = (cl[w].clone(), url.clone());
        async move { get_ok(&http, url).await }
    })
    .await;
    s.first_error.map_or(Ok(()), |e| Err(BenchError::Setup(e)))
}

/// Replays of `pairs` (order, user, key), for the measured time.
pub(crate) async fn replay_phase(
    opts: &Opts,
    clients: &Arc<Vec<reqwest::Client>>,
    api: &str,
    tokens: &Arc<Vec<String>>,
    pairs: &Arc<Vec<(String, usize, String)>>,
) -> Sample {
    let (cl, api, tokens, pairs) = (
        clients.clone(),
        api.to_owned(),
        tokens.clone(),
        pairs.clone(),
    );
    load::by_time(opts.clients, WARMUP, opts.phase, move |w, i| {
        let (order, user, key) = pairs[i % pairs.len()].clone();
        let (http, token, url) = (
            cl[w].clone(),
            tokens[user].clone(),
            format!("{api}{}", paths::pay(&order)),
        );
        async move { pay(&http, url, &token, &key, true).await }
    })
    .await
}

/// `GET path` for the measured time.
async fn get_phase(opts: &Opts, clients: &Arc<Vec<reqwest::Client>>, url: String) -> Sample {
    let cl = clients.clone();
    load::by_time(opts.clients, WARMUP, opts.phase, move |w, _| {
        let (http, url) = (cl[w].clone(), url.clone());
        async move { get_ok(&http, url).await }
    })
    .await
}

/// Every figure of one backend, on a fresh database.
pub(crate) async fn backend(opts: &Opts, backend: Backend) -> Result<BackendFigures, BenchError> {
    let db = Db::create(backend, &opts.pg_url).await?;
    let r = backend_on(opts, backend, &db).await;
    db.remove().await;
    r
}

async fn backend_on(opts: &Opts, backend: Backend, db: &Db) -> Result<BackendFigures, BenchError> {
    let name = backend.name();
    let server = spawn(
        &opts.server_bin,
        &{
            let mut a = server_args(&db.url, &redis_pays(opts));
            a.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
            a
        },
        db.dir.join("server.log"),
        true,
    )?;
    let (api, provider) = (server.api(), server.provider());
    top_up_stock(&db.url).await?;

    // Setup, not timed: a session and an order per pay, a fresh key for each.
    let clients: Vec<reqwest::Client> = (0..opts.clients)
        .map(|_| client())
        .collect::<Result<_, _>>()?;
    let n = opts.pays;
    let t = Instant::now();
    // One customer per order, as in a shop: the server's per-user rate limits are for one
    // client's runaway loop, and a benchmark user paying thousands of orders would be one.
    let tokens = Arc::new(sessions(&clients, &api, n).await?);
    // On PostgreSQL a second set for the pays through the Redis server (`redis_replays`),
    // paid by the same customers (order n + j by customer j).
    let sets = if backend == Backend::Postgres { 2 } else { 1 };
    let all_orders = create_orders(&clients, &api, &tokens, sets * n).await?;
    let (orders, redis_orders) = all_orders.split_at(n);
    eprintln!(
        "  {name}: {n} orders created in {:.1} s (setup, not timed)",
        t.elapsed().as_secs_f64()
    );
    // The store's own ceiling: on SQLite a file of its own, on PostgreSQL the run's database.
    let ceiling_url = match backend {
        Backend::Sqlite => format!("sqlite://{}?mode=rwc", db.dir.join("ceiling.db").display()),
        Backend::Postgres => db.url.clone(),
    };
    let ceiling = crate::ceiling::measure(backend, &ceiling_url, opts.clients, n).await?;
    report_errors(name, "store ceiling", &ceiling);
    let (direct, rules) = match backend {
        Backend::Sqlite => {
            let (one, many) = (db.dir.join("direct-1.db"), db.dir.join("direct-n.db"));
            let threads = opts.clients;
            let direct = tokio::task::spawn_blocking(move || {
                Ok::<_, BenchError>((
                    crate::sqlite_direct::measure(&one, 1, n)?,
                    crate::sqlite_direct::measure(&many, threads, n)?,
                ))
            })
            .await
            .map_err(|e| BenchError::Setup(format!("direct SQLite: {e}")))??;
            report_errors(name, "direct ceiling, 1 thread", &direct.0);
            report_errors(name, "direct ceiling, threads", &direct.1);
            (Some(direct), None)
        }
        Backend::Postgres => {
            // A database of its own: the server's tables, without the server's rows.
            let rules_db = Db::create(Backend::Postgres, &opts.pg_url).await?;
            let rules = crate::rules_ceiling::measure(&rules_db.url, opts.clients, n).await;
            rules_db.remove().await;
            let rules = rules?;
            report_errors(name, "rules ceiling", &rules);
            (None, Some(rules))
        }
    };

    // New-key pays over HTTP.
    warm(&clients, &api).await?;
    let clients = Arc::new(clients);
    let pairs: Arc<Vec<(String, usize, String)>> = Arc::new(
        (0..n)
            .map(|j| (orders[j].clone(), j, uuid::Uuid::new_v4().to_string()))
            .collect(),
    );
    let profile = crate::perf::start(opts.perf.as_deref(), &format!("{name}-pays"));
    let http_pays = {
        let (cl, api, tokens, pairs) =
            (clients.clone(), api.clone(), tokens.clone(), pairs.clone());
        load::by_count(opts.clients, n, move |w, i| {
            let (order, user, key) = pairs[i].clone();
            let (http, token, url) = (
                cl[w].clone(),
                tokens[user].clone(),
                format!("{api}{}", paths::pay(&order)),
            );
            async move { pay(&http, url, &token, &key, false).await }
        })
        .await
    };
    profile.stop();
    report_errors(name, "HTTP pays", &http_pays);
    let ledger_charges = ledger(&clients[0], &provider, None).await?;

    let profile = crate::perf::start(opts.perf.as_deref(), &format!("{name}-replays"));
    let replays = replay_phase(opts, &clients, &api, &tokens, &pairs).await;
    profile.stop();
    report_errors(name, "replays", &replays);
    let noop = get_phase(opts, &clients, format!("{api}{}", paths::DEV_CONFIG)).await;
    report_errors(name, "no-op", &noop);
    let healthz = get_phase(opts, &clients, format!("{api}{}", paths::HEALTHZ)).await;
    report_errors(name, "healthz", &healthz);
    drop(server);

    let (redis, redis_pays) = if backend == Backend::Postgres {
        let (figure, pays) = redis_replays(opts, db, &clients, &tokens, &pairs, redis_orders).await;
        (Some(figure), pays)
    } else {
        (None, None)
    };
    let memory = memory_replays(opts, db, &clients, &tokens, &pairs).await?;
    report_errors(name, "memory replays", &memory.0);
    Ok(BackendFigures {
        backend,
        http_pays,
        ceiling,
        direct,
        rules,
        redis_pays,
        replays,
        noop,
        healthz,
        redis,
        memory,
        ledger_charges,
    })
}

/// Replays through a server with the in-memory replay cache on (as deployed by default),
/// on the same database and keys, after one pass over every key (the pass that fills the
/// cache reads each key row once); then that server's no-op, for the ratio.
async fn memory_replays(
    opts: &Opts,
    db: &Db,
    clients: &Arc<Vec<reqwest::Client>>,
    tokens: &Arc<Vec<String>>,
    pairs: &Arc<Vec<(String, usize, String)>>,
) -> Result<(Sample, Sample), BenchError> {
    let mut args = server_args(&db.url, &[]);
    args.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
    // The same flags with the cache on, large enough for every key of the run.
    if let Some(i) = args.iter().position(|a| a == "--replay-cache-entries") {
        args[i + 1] = (pairs.len() * 2).max(10_000).to_string();
    }
    let server = spawn(
        &opts.server_bin,
        &args,
        db.dir.join("server-memory.log"),
        true,
    )?;
    let api = server.api();
    warm(clients, &api).await?;
    for (order, user, key) in pairs.iter() {
        let url = format!("{api}{}", paths::pay(order));
        pay(&clients[0], url, &tokens[*user], key, true)
            .await
            .map_err(|e| BenchError::Setup(format!("replay through the memory server: {e}")))?;
    }
    let replays = replay_phase(opts, clients, &api, tokens, pairs).await;
    let noop = get_phase(opts, clients, format!("{api}{}", paths::DEV_CONFIG)).await;
    report_errors("memory server", "no-op", &noop);
    Ok((replays, noop))
}

/// New-key pays of `orders` (order j by customer j), then replays of `pairs`, through a
/// server given `--redis-url`, on the same database. The server says in its log when it
/// only accepts the flag (the fast path is not in this build).
async fn redis_replays(
    opts: &Opts,
    db: &Db,
    clients: &Arc<Vec<reqwest::Client>>,
    tokens: &Arc<Vec<String>>,
    pairs: &Arc<Vec<(String, usize, String)>>,
    orders: &[String],
) -> (RedisFigure, Option<(Sample, usize)>) {
    match redis_server(opts, db, clients, tokens, pairs, orders).await {
        Ok(r) => r,
        Err(why) => (RedisFigure::NotAvailable(why), None),
    }
}

async fn redis_server(
    opts: &Opts,
    db: &Db,
    clients: &Arc<Vec<reqwest::Client>>,
    tokens: &Arc<Vec<String>>,
    pairs: &Arc<Vec<(String, usize, String)>>,
    orders: &[String],
) -> Result<(RedisFigure, Option<(Sample, usize)>), String> {
    let log = db.dir.join("server-redis.log");
    let args = {
        let mut a = server_args(&db.url, &["--redis-url", &opts.redis_url]);
        a.extend(EMBEDDED_PROVIDER.iter().map(|s| (*s).to_owned()));
        a
    };
    let server = spawn(&opts.server_bin, &args, log.clone(), true)
        .map_err(|e| format!("the server did not start with --redis-url: {e}"))?;
    // Give the startup lines a moment to reach the log file.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if text.contains("keeps keys in the SQL store only") {
        return Err("not available in this build".into());
    }
    let (api, provider) = (server.api(), server.provider());
    warm(clients, &api).await.map_err(|e| e.to_string())?;
    // New-key pays first, as the PostgreSQL-alone pays: every order once, a fresh key each.
    let pays = {
        let (cl, api, tokens, orders) = (
            clients.clone(),
            api.clone(),
            tokens.clone(),
            Arc::new(orders.to_vec()),
        );
        load::by_count(opts.clients, orders.len(), move |w, j| {
            let (http, token, url) = (
                cl[w].clone(),
                tokens[j % tokens.len()].clone(),
                format!("{api}{}", paths::pay(&orders[j])),
            );
            async move { pay(&http, url, &token, &uuid::Uuid::new_v4().to_string(), false).await }
        })
        .await
    };
    report_errors("PostgreSQL", "pays with Redis", &pays);
    let charges = ledger(&clients[0], &provider, None)
        .await
        .map_err(|e| e.to_string())?;
    // One pass over every key first, so answers the fast path caches on first read are
    // cached before the window opens.
    for (order, user, key) in pairs.iter() {
        let url = format!("{api}{}", paths::pay(order));
        pay(&clients[0], url, &tokens[*user], key, true)
            .await
            .map_err(|e| format!("replay through the Redis server failed: {e}"))?;
    }
    let s = replay_phase(opts, clients, &api, tokens, pairs).await;
    report_errors("PostgreSQL", "Redis replays", &s);
    let sources = replay_sources(&clients[0], &api).await;
    Ok((RedisFigure::Measured(s, sources), Some((pays, charges))))
}

/// `payonce_pay_replays_total` by source (redis, database) from the server's `/metrics`;
/// `None` when the build has no such counter.
async fn replay_sources(http: &reqwest::Client, api: &str) -> Option<(u64, u64)> {
    let text = http
        .get(format!("{api}{}", paths::METRICS))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let count = |source: &str| {
        let prefix = format!("payonce_pay_replays_total{{source=\"{source}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match (count("redis"), count("database")) {
        (None, None) => None,
        (r, d) => Some((r.unwrap_or(0), d.unwrap_or(0))),
    }
}

pub(crate) fn report_errors(backend: &str, phase: &str, s: &Sample) {
    if s.errors > 0 {
        eprintln!(
            "  WARNING {backend} {phase}: {} errors (first: {})",
            s.errors,
            s.first_error.as_deref().unwrap_or("?")
        );
    }
}

/// `requests` concurrent pays with one key, spread over three API processes on one
/// PostgreSQL database and one standalone provider; `rounds` times, a new order each time.
pub(crate) async fn storm(opts: &Opts) -> Result<StormFigures, BenchError> {
    let db = Db::create(Backend::Postgres, &opts.pg_url).await?;
    let r = storm_on(opts, &db).await;
    db.remove().await;
    r
}

async fn storm_on(opts: &Opts, db: &Db) -> Result<StormFigures, BenchError> {
    let provider = spawn(
        &opts.server_bin,
        &[
            "mock-provider".into(),
            "--addr".into(),
            "127.0.0.1:0".into(),
        ],
        db.dir.join("provider.log"),
        false,
    )?;
    let provider_url = provider.provider();
    let mut apis = Vec::new();
    for i in 0..3 {
        // Every request of a round has its own connection, all from this one address: past
        // the server's per-address cap (an eighth of `--max-connections` by default) a
        // connection is closed at once, as one client's flood should be.
        let mut extra = vec![
            "--provider-url",
            &provider_url,
            "--max-connections-per-peer",
            "1024",
        ];
        extra.extend(redis_pays(opts));
        let args = server_args(&db.url, &extra);
        apis.push(spawn(
            &opts.server_bin,
            &args,
            db.dir.join(format!("api{i}.log")),
            true,
        )?);
    }
    let urls: Vec<String> = apis.iter().map(Proc::api).collect();
    // One client per instance: each opens as many connections as there are requests in
    // flight, so every request of the storm has its own connection.
    let clients: Vec<reqwest::Client> = (0..3).map(|_| client()).collect::<Result<_, _>>()?;

    let mut figures = StormFigures {
        rounds: opts.storm_rounds,
        requests_per_round: opts.storm,
        charges: Vec::new(),
        statuses: Vec::new(),
        answers_agree: true,
        latency: Sample::default(),
        transactions: None,
    };
    let before = transactions(&db.url).await;
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..opts.storm_rounds {
        // A new customer each round: the per-user request bucket of each process is sized
        // for one user's tabs and retries, and one round already fills a third of it.
        let token = session(&clients[0], &urls[0], &format!("bench-storm-{round}")).await?;
        let res = clients[0]
            .post(format!("{}{}", urls[round % 3], paths::ORDERS))
            .bearer_auth(&token)
            .json(&json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] }))
            .send()
            .await?;
        let v: serde_json::Value = res.json().await?;
        let order = v["id"]
            .as_str()
            .ok_or_else(|| BenchError::Setup(format!("create order: {v}")))?
            .to_owned();
        let key = uuid::Uuid::new_v4().to_string();
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let tasks: Vec<_> = (0..opts.storm)
            .map(|i| {
                let http = clients[i % 3].clone();
                let url = format!("{}{}", urls[i % 3], paths::pay(&order));
                let (token, key, mut go) = (token.clone(), key.clone(), go_rx.clone());
                tokio::spawn(async move {
                    let _ = go.wait_for(|g| *g).await;
                    let t0 = Instant::now();
                    let res = http
                        .post(url)
                        .bearer_auth(token)
                        .header(IDEMPOTENCY_KEY, key)
                        .json(&approve_v1())
                        .send()
                        .await;
                    match res {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                            Some((status, body, t0.elapsed()))
                        }
                        Err(_) => None,
                    }
                })
            })
            .collect();
        // Let every task reach its wait before the start.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = go_tx.send(true);
        let mut first_ok: Option<Vec<u8>> = None;
        for t in tasks {
            match t.await.ok().flatten() {
                Some((status, body, took)) => {
                    *statuses.entry(status).or_default() += 1;
                    latencies.push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
                    if status == 200 {
                        match &first_ok {
                            None => first_ok = Some(body),
                            Some(b) if *b != body => figures.answers_agree = false,
                            Some(_) => {}
                        }
                    }
                }
                None => errors += 1,
            }
        }
        figures
            .charges
            .push(ledger(&clients[0], &provider_url, Some(&order)).await?);
    }
    if errors > 0 {
        *statuses.entry(0).or_default() += errors;
    }
    figures.statuses = statuses.into_iter().collect();
    figures.latency = Sample::from_latencies(latencies, errors, Duration::ZERO);
    drop(apis);
    drop(provider);
    // The exited backends' statistics reach pg_stat_database within a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    figures.transactions = match (before, transactions(&db.url).await) {
        (Some(b), Some(a)) => Some(a - b),
        _ => None,
    };
    Ok(figures)
}

/// The pay body every benchmark order uses (version 1, approving card): the protocol's type,
/// so the wire names stay spelled in one place.
fn approve_v1() -> PayRequest {
    PayRequest {
        order_version: 1,
        payment_method_id: APPROVE.to_owned(),
        extras: Default::default(),
    }
}
