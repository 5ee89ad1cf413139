//! `payonce-chaos`: does "charged once" survive random faults? A seeded chaos run, then an
//! audit.
//!
//! Many simulated customers, each following the SDK's own pure core (`payonce::core`: key
//! plan, answer classification, full-jitter backoff, retry budget, deadline), pay many orders
//! against three `payonce-server` instances sharing one PostgreSQL database and one Redis
//! database, with one standalone mock provider. Meanwhile a fault schedule drawn from the
//! seed kills instances (plainly, or by arming a named failpoint so the process aborts at
//! that step), flushes Redis and kills the provider; customers' requests ask the server to
//! drop its answer or to crash right after the charge, time out on slow providers, and meet
//! a provider that fails transiently; the provider duplicates, delays and reorders webhooks.
//! Some customers cancel, change their cart, pay from a second tab, reload the page, or
//! pay with another card after a decline.
//!
//! Then the faults stop, every instance runs clean, customers whose outcome is still open
//! come back, and the background jobs reconcile. The audit compares the provider's ledger,
//! the database and each customer's view and prints intents, charges, double charges, lost
//! charges, unresolved attempts, emails per paid order and stock errors. Any violation
//! prints the seed and the history of the order. Exit status: 0 clean, 1 violations,
//! 2 the run itself could not be set up.
//!
//! A seed fixes every customer's script and the fault schedule, not the interleaving (real
//! processes, real time): a failing seed replays the same script and faults, which makes
//! the same class of failure likely, not certain.
//!
//! # Layout
//! - `main.rs`: options, the run's phases, the report.
//! - `cluster.rs`: the processes (provider, instances), the balancer, the supervisor.
//! - `faults.rs`: the fault schedule (pure, drawn from the seed) and its injector.
//! - `customer.rs`: a customer's script (pure, drawn from the seed) and its driver.
//! - `audit.rs`: the comparison (pure, unit-tested) and what it reads from the stores.
//! - `stripe.rs`: `--provider stripe`: localstripe behind a fault proxy, its cards, its
//!   list of intents as the ledger.
//! - `upgrade.rs`: `--upgrade-from`: a rolling upgrade from the previous release during the
//!   load phase (scripts/rolling-upgrade.sh builds that release).

mod audit;
mod cluster;
mod customer;
mod faults;
mod stripe;
mod upgrade;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a run could not be carried out (not a finding of the audit).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChaosError {
    #[error("cannot start {0}: {1} (build it first: cargo build -p payonce-server)")]
    Spawn(String, std::io::Error),
    #[error("setup: {0}")]
    Setup(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("sql: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Chaos audit of payonce: seeded faults, many customers, then ledger vs database vs views.
#[derive(Debug, Parser)]
#[command(name = "payonce-chaos")]
pub(crate) struct Args {
    /// Seed of every customer's script and of the fault schedule. Default: drawn and printed.
    #[arg(long)]
    seed: Option<u64>,
    /// Payment intents (orders a customer sets out to pay).
    #[arg(long, default_value_t = 300)]
    intents: usize,
    /// Customers paying at the same time.
    #[arg(long, default_value_t = 48)]
    concurrency: usize,
    /// API instances.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Mean milliseconds between two scheduled faults.
    #[arg(long, default_value_t = 700)]
    fault_every_ms: u64,
    /// No faults at all (a control run: the same customers on a quiet system).
    #[arg(long)]
    no_faults: bool,
    /// How long customers and background jobs get to settle after the faults stop.
    #[arg(long, default_value_t = 90)]
    settle_secs: u64,
    /// The payonce-server binary. Default: next to this one.
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// A PostgreSQL URL whose server lets us create a database per run.
    #[arg(
        long,
        env = "PAYONCE_CHAOS_PG_URL",
        default_value = "postgres://root@127.0.0.1:5432/test"
    )]
    pg_url: String,
    /// Redis server; the run uses (and flushes) database `--redis-db` on it.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Redis database index used (and flushed) by the run. The server's black-box tests use
    /// 11 to 15, one per test.
    #[arg(long, default_value_t = 10)]
    redis_db: u8,
    /// Keep the PostgreSQL database and the logs after the run (printed).
    #[arg(long)]
    keep: bool,
    /// The payment provider: `mock` (the mock provider, its webhook chaos) or `stripe`
    /// (localstripe behind a fault proxy: `src/stripe.rs`).
    #[arg(long, value_enum, default_value_t = ProviderArg::Mock)]
    provider: ProviderArg,
    /// The localstripe binary for `--provider stripe`. Default: `PAYONCE_TEST_LOCALSTRIPE`,
    /// else `.venv-localstripe/bin/localstripe` in the repository (scripts/bootstrap.sh).
    #[arg(long)]
    localstripe: Option<PathBuf>,
    /// A rolling upgrade (`src/upgrade.rs`): the instances start on this payonce-server (the
    /// previous release), this release's `migrate` runs while they serve, then they are
    /// replaced one at a time by `--server-bin`. The audit also counts every answer of 500
    /// or more that is not a 503 with `Retry-After`, and every failed step.
    #[arg(long)]
    upgrade_from: Option<PathBuf>,
}

/// `--provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProviderArg {
    Mock,
    Stripe,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payonce-chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("payonce-chaos: ERROR: {e}");
            ExitCode::from(2)
        }
    }
}

/// The run; `Ok(clean)`.
async fn run(args: Args) -> Result<bool, ChaosError> {
    let seed = args.seed.unwrap_or_else(rand::random);
    let t0 = Instant::now();
    println!(
        "payonce-chaos: seed {seed}, {} intents, {} customers at once, {} instances, faults {}",
        args.intents,
        args.concurrency,
        args.instances,
        if args.no_faults {
            "off".to_owned()
        } else {
            format!("every ~{} ms", args.fault_every_ms)
        }
    );
    let stripe_flag = if args.provider == ProviderArg::Stripe {
        " --provider stripe"
    } else {
        ""
    };
    let upgrade_flag = match &args.upgrade_from {
        Some(bin) => format!(" --upgrade-from {}", bin.display()),
        None => String::new(),
    };
    println!("payonce-chaos: replay with: payonce-chaos --seed {seed} --intents {} --concurrency {} --instances {} --fault-every-ms {}{}{stripe_flag}{upgrade_flag}",
        args.intents, args.concurrency, args.instances, args.fault_every_ms,
        if args.no_faults { " --no-faults" } else { "" });
    let stripe = match args.provider {
        ProviderArg::Mock => None,
        ProviderArg::Stripe => {
            let bin = args
                .localstripe
                .clone()
                .unwrap_or_else(stripe::default_binary);
            Some(Arc::new(stripe::StripeSide::start(&bin).await?))
        }
    };

    let server_bin = match &args.server_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("payonce-server"))
            .ok_or_else(|| ChaosError::Setup("no directory for the server binary".into()))?,
    };
    let cluster = Arc::new(
        cluster::Cluster::start(cluster::ClusterConfig {
            server_bin,
            pg_admin_url: args.pg_url.clone(),
            redis_url: format!("{}/{}", args.redis_url.trim_end_matches('/'), args.redis_db),
            instances: args.instances.max(1),
            seed,
            stripe: stripe.clone(),
            upgrade_from: args.upgrade_from.clone(),
        })
        .await?,
    );
    cluster.run_background();
    println!(
        "payonce-chaos: cluster up in {:.1} s: provider :{}, instances {:?}, balancer :{}, database {}",
        t0.elapsed().as_secs_f64(),
        cluster.provider_port,
        cluster.instance_ports(),
        cluster.lb_port,
        cluster.db_name
    );

    // Interrupted (Ctrl-C, SIGTERM): still stop the processes and drop the database.
    let result = tokio::select! {
        r = exercise(&args, seed, &cluster) => r,
        _ = interrupted() => Err(ChaosError::Setup("interrupted".into())),
    };
    cluster.stop().await;
    if args.keep {
        cluster.keep();
        println!(
            "payonce-chaos: kept database {} and logs in {}",
            cluster.db_name,
            cluster.dir.display()
        );
    } else {
        cluster.remove().await;
    }
    println!("payonce-chaos: done in {:.1} s", t0.elapsed().as_secs_f64());
    result
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Load under faults, settle, audit.
async fn exercise(
    args: &Args,
    seed: u64,
    cluster: &Arc<cluster::Cluster>,
) -> Result<bool, ChaosError> {
    let stripe = cluster.stripe();
    let ctx = Arc::new(customer::Ctx::new(cluster.api_url(), seed, stripe.clone())?);
    let stock_before = audit::read_stock(&cluster.db).await?;

    // --- load under faults -------------------------------------------------------------------
    let t_load = Instant::now();
    let injector = (!args.no_faults).then(|| {
        faults::Injector::start(
            cluster.clone(),
            faults::Schedule::new(seed, args.instances.max(1), args.fault_every_ms),
        )
    });
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.concurrency.max(1) {
        let (ctx, next, finished, n) = (ctx.clone(), next.clone(), finished.clone(), args.intents);
        workers.spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                done.push(customer::run_intent(&ctx, w, i).await);
                finished.fetch_add(1, Ordering::Relaxed);
            }
            done
        });
    }
    // A line every 30 s, so a long run shows it is moving.
    let progress = {
        let (finished, n) = (finished.clone(), args.intents);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                println!(
                    "payonce-chaos: {:.0} s: {} of {n} intents done",
                    t_load.elapsed().as_secs_f64(),
                    finished.load(Ordering::Relaxed)
                );
            }
        })
    };
    let upgrade = args.upgrade_from.is_some().then(|| {
        tokio::spawn(upgrade::drive(
            cluster.clone(),
            finished.clone(),
            args.intents,
            t_load,
        ))
    });
    let mut intents = Vec::with_capacity(args.intents);
    while let Some(r) = workers.join_next().await {
        intents.extend(r.map_err(|e| ChaosError::Setup(format!("a customer task panicked: {e}")))?);
    }
    let upgrade = match upgrade {
        Some(h) => Some(
            h.await
                .map_err(|e| ChaosError::Setup(format!("the upgrade task panicked: {e}")))?,
        ),
        None => None,
    };
    progress.abort();
    let fault_log = match injector {
        Some(i) => i.stop().await,
        None => Vec::new(),
    };
    let load_secs = t_load.elapsed().as_secs_f64();
    println!(
        "payonce-chaos: load phase {load_secs:.1} s: {} intents, {} faults scheduled",
        intents.len(),
        fault_log.len()
    );

    // --- settle: faults off, every process clean, open outcomes come back -------------------
    let t_settle = Instant::now();
    cluster.all_clean().await?;
    let settle_deadline = Instant::now() + Duration::from_secs(args.settle_secs);
    let mut open = Vec::new();
    let mut settled = Vec::new();
    for intent in intents {
        if intent.is_open() {
            open.push(intent);
        } else {
            settled.push(intent);
        }
    }
    let reopened = open.len();
    let mut set = tokio::task::JoinSet::new();
    for intent in open {
        let ctx = ctx.clone();
        set.spawn(async move { customer::come_back(&ctx, intent, settle_deadline).await });
    }
    while let Some(r) = set.join_next().await {
        settled.push(r.map_err(|e| ChaosError::Setup(format!("a customer task panicked: {e}")))?);
    }
    let quiet = audit::wait_quiet(&cluster.db, settle_deadline).await?;
    println!(
        "payonce-chaos: settle phase {:.1} s: {reopened} customers came back for an open outcome; store {}",
        t_settle.elapsed().as_secs_f64(),
        if quiet { "quiet (no processing attempt, no pending email)" } else { "NOT quiet at the deadline" }
    );

    // --- audit -------------------------------------------------------------------------------
    let stats = cluster.stats();
    let crashes = stats.killed
        + stats.upgrade_cuts
        + stats.crash_after_charge
        + stats.failpoint_crashes.iter().map(|(_, n)| n).sum::<u64>();
    let facts = audit::Facts::read(
        &cluster.db,
        &ctx.http,
        &cluster.provider_url(),
        stock_before,
        stripe.as_deref(),
        (&cluster.sink.messages(), crashes),
    )
    .await?;
    let mut report = audit::audit(&facts, &settled);
    let stats = cluster.stats();
    if let Some(u) = upgrade {
        let mut failed = u.failed;
        // An instance that keeps failing to start exits many times: once per kind of exit.
        let mut exits: Vec<(&String, usize)> = Vec::new();
        for e in &stats.other_exits {
            match exits.iter_mut().find(|(x, _)| *x == e) {
                Some((_, n)) => *n += 1,
                None => exits.push((e, 1)),
            }
        }
        failed.extend(
            exits
                .iter()
                .map(|(e, n)| format!("an instance exited by itself: {e} ({n} times)")),
        );
        let (to_old, to_new) = (
            cluster.lb_to_old.load(Ordering::Relaxed),
            cluster.lb_to_new.load(Ordering::Relaxed),
        );
        report.add_upgrade(
            format!(
                "{} steps, {} failed; connections to the previous release {to_old}, to this one {to_new}",
                u.log.len(),
                failed.len()
            ),
            ctx.bad_server_errors(),
            failed,
        );
    }
    println!();
    println!(
        "faults: {}",
        faults::summary(&fault_log, &stats, &ctx.counters())
    );
    println!("{}", report.render());
    if !report.clean() {
        println!("VIOLATIONS (seed {seed}):");
        for v in &report.violations {
            println!("{}", v.render(&facts, &settled));
        }
    }
    Ok(report.clean())
}
