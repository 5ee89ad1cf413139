//! `payonce-bench`: what the server costs, measured in one run on one machine.
//!
//! It spawns the real `payonce-server` binary (`--dev`, embedded mock provider approving at
//! once) and measures, on SQLite and on PostgreSQL:
//! - new-key pays/s and p50/p99 over HTTP keep-alive, `--clients` concurrent clients, each
//!   pay on an order created in an untimed setup phase;
//! - the store's own ceilings: the minimal durable pay flow, a claim and a settle
//!   transaction, through the same driver (`ceiling.rs`) and, on SQLite, through SQLite's C
//!   library from 1 and from `--clients` threads (`sqlite_direct.rs`); on PostgreSQL also
//!   the rows and indexes one pay writes as designed, in two statements
//!   (`rules_ceiling.rs`); new-key pays as a fraction of them;
//! - on PostgreSQL, new-key pays through a server given `--redis-url`, against those of
//!   PostgreSQL alone in the same run;
//! - replays/s against the same server's no-op endpoint (`GET /dev/config`: no store access)
//!   and `GET /healthz` (one `SELECT 1`), and the ratios; on PostgreSQL also replays through
//!   a server started with `--redis-url` when the build has a Redis fast path (these phases
//!   run with the in-memory replay cache off); replays from memory through a server with
//!   the cache on (the server's default), against that server's no-op;
//! - cost as the work grows (`growth.rs`, PostgreSQL): pays and replays with 10⁴, 10⁵ and
//!   10⁶ stored attempts, and pays while the cleanup job deletes 10⁶ expired keys;
//! - 1,000 concurrent pays with one key over three instances on one PostgreSQL with one
//!   standalone provider: charges in the ledger (must be 1), statuses, p99.
//!
//! The table is printed and written between markers into `docs/benchmarks.md`, with the
//! machine described. A benchmark, never a test: nothing here runs under `cargo test`.
//!
//! # Layout
//! - `main.rs`: options, the run, the report (table, machine, docs file).
//! - `phases.rs`: the measured phases.
//! - `load.rs`: the load generator and its figures (rate, percentiles).
//! - `proc.rs`: spawned processes and per-run databases.
//! - `journal.rs`: the journal's cleanup and its cost against the code before it (run only
//!   when named in `--only`).

mod ceiling;
mod growth;
mod journal;
mod load;
mod perf;
mod phases;
mod proc;
mod rules_ceiling;
mod sqlite_direct;

use clap::Parser;
use phases::{BackendFigures, RedisFigure, StormFigures};
use proc::Backend;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    #[error("cannot start {0}: {1} (build it first: cargo build --release -p payonce-server)")]
    Spawn(String, std::io::Error),
    #[error("setup: {0}")]
    Setup(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("sql: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
}

/// Load benchmark of payonce-server (see docs/benchmarks.md).
#[derive(Debug, Parser)]
#[command(name = "payonce-bench")]
struct Args {
    /// Smoke run: few pays, short phases, one small storm round; docs are not written.
    #[arg(long)]
    quick: bool,
    /// Concurrent clients (one keep-alive connection each).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// New-key pays per backend (the same number again on the store ceiling). Default 2000
    /// (200 with --quick).
    #[arg(long)]
    pays: Option<usize>,
    /// Measured seconds of each timed phase (replays, no-op, healthz). Default 3 (0.5 with
    /// --quick).
    #[arg(long)]
    phase_secs: Option<f64>,
    /// Concurrent same-key requests per storm round. Default 1000 (200 with --quick).
    #[arg(long)]
    storm: Option<usize>,
    /// Storm rounds, a new order each. Default 3 (1 with --quick).
    #[arg(long)]
    storm_rounds: Option<usize>,
    /// The payonce-server binary. Default: next to this one.
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// A PostgreSQL URL whose server lets us create a database per run.
    #[arg(
        long,
        env = "PAYONCE_BENCH_PG_URL",
        default_value = "postgres://root@127.0.0.1:5432/test"
    )]
    pg_url: String,
    /// Redis, for the server's fast path (when the build has one).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Where the results go. Default: docs/benchmarks.md of this repository (not with --quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print only; do not write the docs file.
    #[arg(long)]
    no_write: bool,
    /// New-key pays at each size of the growth part. Default 400 (50 with --quick).
    #[arg(long)]
    growth_pays: Option<usize>,
    /// Run only these parts (for profiling one of them): sqlite, postgres, growth, storm;
    /// and the journal's parts, run only when named here: journal-cleanup, journal-cost
    /// (docs/benchmarks.md, "The journal").
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also give `--redis-url` to the first new-key pay server and the storm servers (then
    /// "pays with Redis / without" compares two servers with Redis).
    #[arg(long)]
    redis_pays: bool,
    /// The server built from the commit before the journal, for `--only journal-cost`.
    /// Default: target/bench-prev/target/release/payonce-server of this repository.
    #[arg(long)]
    prev_server_bin: Option<PathBuf>,
    /// Rounds of `journal-cost`, each both binaries' pay phase on both backends.
    #[arg(long, default_value_t = 3)]
    journal_rounds: usize,
    /// Record a system-wide CPU profile (`perf record -e cpu-clock -a`) of each backend's
    /// HTTP pays and replays from the database into this folder (crates/bench/src/perf.rs).
    #[arg(long)]
    perf: Option<PathBuf>,
}

/// Resolved options the phases use.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub clients: usize,
    pub pays: usize,
    pub phase: Duration,
    pub storm: usize,
    pub storm_rounds: usize,
    pub growth_pays: usize,
    pub server_bin: PathBuf,
    pub pg_url: String,
    pub redis_url: String,
    pub redis_pays: bool,
    pub perf: Option<PathBuf>,
}

/// The targets this benchmark reports against (goals, not assertions).
/// SQLite new-key pays against the direct one-pay-per-transaction ceiling (one thread), and
/// their p99 in milliseconds.
const DIRECT_TARGET: f64 = 1.0;
const DIRECT_P99_TARGET_MS: f64 = 20.0;
/// PostgreSQL new-key pays against the rules ceiling, and the rules ceiling against the
/// minimal one.
const RULES_TARGET: f64 = 0.8;
const RULES_MINIMAL_TARGET: f64 = 0.6;
/// New-key pays with Redis against PostgreSQL alone, and their p99 at most this many times.
const REDIS_PAYS_TARGET: f64 = 0.9;
const REDIS_P99_TARGET: f64 = 1.5;
/// Replays from memory against the same server's no-op; from the database against
/// `/healthz` (one `SELECT 1`: one round trip is what a replay from the database must cost).
const MEMORY_TARGET: f64 = 0.8;
const HEALTHZ_TARGET: f64 = 0.9;

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payonce-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payonce-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), BenchError> {
    let quick = args.quick;
    let server_bin = match args.server_bin.clone() {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("payonce-server"))
            .unwrap_or_else(|| PathBuf::from("payonce-server")),
    };
    let opts = Opts {
        clients: args.clients.max(1),
        pays: args.pays.unwrap_or(if quick { 200 } else { 2000 }).max(1),
        phase: Duration::from_secs_f64(
            args.phase_secs
                .unwrap_or(if quick { 0.5 } else { 3.0 })
                .max(0.1),
        ),
        storm: args.storm.unwrap_or(if quick { 200 } else { 1000 }).max(1),
        storm_rounds: args
            .storm_rounds
            .unwrap_or(if quick { 1 } else { 3 })
            .max(1),
        growth_pays: args
            .growth_pays
            .unwrap_or(if quick { 50 } else { 400 })
            .max(1),
        server_bin,
        pg_url: args.pg_url.clone(),
        redis_url: args.redis_url.clone(),
        redis_pays: args.redis_pays,
        perf: args.perf.clone(),
    };
    let out = match (&args.out, args.no_write, quick) {
        (_, true, _) => None,
        (Some(p), false, _) => Some(p.clone()),
        (None, false, false) => {
            Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks.md"))
        }
        (None, false, true) => None,
    };
    let started = Instant::now();
    let mut machine = Machine::describe();
    println!(
        "payonce-bench: {}",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!("load average at start: {}", machine.load_start);
    if cfg!(debug_assertions) {
        println!("WARNING: a debug build of the benchmark; build with --release for figures");
    }
    let named = |part: &str| args.only.iter().any(|o| o == part);
    let wanted = |part: &str| args.only.is_empty() || named(part);
    let out = if args.only.is_empty() { out } else { None };
    if named("journal-cleanup") || named("journal-cost") {
        return journal_parts(&args, &opts, &machine, started).await;
    }
    // A part that fails is reported and the rest still runs; the docs are then left as they
    // are (a "not run" would replace the last figures without anyone noticing).
    let mut failed = Vec::new();
    let mut backends = Vec::new();
    for b in [Backend::Sqlite, Backend::Postgres] {
        if !wanted(b.key()) {
            continue;
        }
        eprintln!("{}: pays, store ceiling, replays, no-op…", b.name());
        match phases::backend(&opts, b).await {
            Ok(f) => backends.push(f),
            Err(e) => {
                eprintln!("  {} failed: {e}", b.name());
                failed.push(b.key());
            }
        }
    }
    let growth = if wanted("growth") {
        let sizes: &[usize] = if quick {
            &[1_000, 10_000]
        } else {
            &[10_000, 100_000, 1_000_000]
        };
        eprintln!("growth: pays and replays at {sizes:?} stored attempts, then cleanup…");
        growth::growth(&opts, sizes)
            .await
            .inspect_err(|e| {
                eprintln!("  growth failed: {e}");
                failed.push("growth");
            })
            .ok()
    } else {
        None
    };
    let storm = if wanted("storm") {
        eprintln!(
            "storm: {} × {} same-key pays over 3 instances…",
            opts.storm_rounds, opts.storm
        );
        phases::storm(&opts)
            .await
            .inspect_err(|e| {
                eprintln!("  storm failed: {e}");
                failed.push("storm");
            })
            .ok()
    } else {
        None
    };
    machine.load_end = loadavg();
    machine.pg_settings = pg_settings(&opts.pg_url).await;
    let table = render(
        &opts,
        &machine,
        &backends,
        growth.as_ref(),
        storm.as_ref(),
        started.elapsed(),
    );
    println!("\n{table}");
    println!("load average at end: {}", machine.load_end);
    if !failed.is_empty() {
        return Err(BenchError::Setup(format!(
            "parts failed: {}; docs not written",
            failed.join(", ")
        )));
    }
    if let Some(path) = out {
        write_docs(&path, &table)?;
        println!("written to {}", path.display());
    }
    Ok(())
}

/// The journal's parts (`journal.rs`): printed, with the command and the machine's load
/// before and after, for docs/benchmarks.md's "The journal".
async fn journal_parts(
    args: &Args,
    opts: &Opts,
    machine: &Machine,
    started: Instant,
) -> Result<(), BenchError> {
    let named = |part: &str| args.only.iter().any(|o| o == part);
    let mut cleanups = Vec::new();
    let mut costs = Vec::new();
    let prev = args.prev_server_bin.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/bench-prev/target/release/payonce-server")
    });
    for b in [Backend::Sqlite, Backend::Postgres] {
        if named("journal-cost") {
            eprintln!(
                "{}: new-key pays, the journal's build against the one before…",
                b.name()
            );
            costs.push(journal::cost(opts, b, &prev, args.journal_rounds.max(1)).await?);
        }
        if named("journal-cleanup") {
            eprintln!("{}: cleanup of the journal while pays run…", b.name());
            cleanups.push(journal::cleanup(opts, b).await?);
        }
    }
    println!(
        "\nRun {} on {} cores ({}), release build: {}; {} clients, {} pays per phase; took {} s.",
        machine.date,
        machine.nproc,
        machine.cpu,
        machine.source,
        opts.clients,
        opts.pays,
        started.elapsed().as_secs()
    );
    println!(
        "Load average (1/5/15 min) at start {}, at end {}.\n",
        machine.load_start,
        loadavg()
    );
    println!("{}", journal::render(&cleanups, &costs));
    Ok(())
}

/// The machine the figures come from.
struct Machine {
    nproc: usize,
    cpu: String,
    mem: String,
    os: String,
    kernel: String,
    rustc: String,
    /// The source the binaries were built from (`git describe --dirty`).
    source: String,
    date: String,
    load_start: String,
    load_end: String,
    pg_settings: String,
}

impl Machine {
    fn describe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or("unknown".into(), |kb| {
                format!("{:.1} GiB", kb / 1024.0 / 1024.0)
            });
        let os = std::fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map_or("unknown".into(), |v| v.trim_matches('"').to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or("unknown".into(), |s| s.trim().to_owned());
        Self {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            mem,
            os,
            kernel,
            rustc: command_line("rustc", &["--version"]),
            // A build from an exported tree (no .git) names its commit in the environment.
            source: std::env::var("PAYONCE_BENCH_SOURCE").unwrap_or_else(|_| {
                command_line(
                    "git",
                    &[
                        "-C",
                        env!("CARGO_MANIFEST_DIR"),
                        "describe",
                        "--always",
                        "--dirty",
                    ],
                )
            }),
            date: command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            load_start: loadavg(),
            load_end: String::new(),
            pg_settings: String::new(),
        }
    }
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or("unknown".into(), |s| s.trim().to_owned())
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The PostgreSQL settings that decide commit cost.
async fn pg_settings(url: &str) -> String {
    use sqlx::Connection;
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else {
        return "unreachable".into();
    };
    let mut parts = Vec::new();
    for name in [
        "server_version",
        "synchronous_commit",
        "fsync",
        "shared_buffers",
        "max_connections",
    ] {
        let q = sqlx::AssertSqlSafe(format!("SHOW {name}"));
        if let Ok((v,)) = sqlx::query_as::<_, (String,)>(q).fetch_one(&mut conn).await {
            parts.push(format!("{name}={v}"));
        }
    }
    let _ = conn.close().await;
    parts.join(", ")
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// A table cell from a figure only one backend has; `—` for the other.
fn cell<T>(v: Option<&T>, f: impl Fn(&T) -> String) -> String {
    v.map_or_else(|| "—".into(), f)
}

fn verdict(r: f64, target: f64) -> &'static str {
    if r >= target {
        "met"
    } else {
        "MISSED"
    }
}

fn load_high(load: &str, nproc: usize) -> bool {
    load.split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .is_some_and(|l| l > nproc as f64 * 0.5)
}

/// The results as markdown.
fn render(
    opts: &Opts,
    m: &Machine,
    backends: &[BackendFigures],
    growth: Option<&growth::Growth>,
    storm: Option<&StormFigures>,
    took: Duration,
) -> String {
    let mut s = String::new();
    let cmd = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let _ = writeln!(
        s,
        "Run {} on {} cores ({}), {}, {} (kernel {}), {}; release build.",
        m.date, m.nproc, m.cpu, m.mem, m.os, m.kernel, m.rustc
    );
    // The binary lives in `<target dir>/release/`: say which target dir built it, relative to
    // the repository (a reader's machine has none of this one's paths).
    let exe = std::env::current_exe().unwrap_or_default();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    let shown = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
    let target_dir = exe
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| "target".into(), shown);
    let _ = writeln!(
        s,
        "Command: `CARGO_TARGET_DIR={target_dir} cargo build --release -p payonce-server -p payonce-bench && {}{}{}` (took {:.0} s).",
        shown(&exe),
        if cmd.is_empty() { "" } else { " " },
        cmd,
        took.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "Source: commit `{}` of this repository{}.",
        m.source,
        if m.source.ends_with("-dirty") {
            " plus uncommitted changes in the working tree"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "Load average (1/5/15 min) at start {}, at end {}.",
        m.load_start, m.load_end
    );
    // The end figure includes this run's own load; the start figure is the machine's.
    if load_high(&m.load_start, m.nproc) {
        let _ = writeln!(
            s,
            "**Other work was running on the machine when this run started** (1-minute load average above half the cores): absolute figures are low and noisy; ratios within one run are the comparable part."
        );
    }
    let _ = writeln!(
        s,
        "PostgreSQL: {}. SQLite: WAL, synchronous=FULL (sqlx default), file on the local disk.",
        m.pg_settings
    );
    let _ = writeln!(
        s,
        "{} clients, each one keep-alive connection, one request at a time; one customer (dev session) per order; {} new-key pays per backend and as many on the store ceiling; timed phases {:.1} s after a 0.5 s warm-up. The client runs on the same cores as the server.\n",
        opts.clients,
        opts.pays,
        opts.phase.as_secs_f64()
    );

    let _ = writeln!(
        s,
        "| measurement | {} |",
        backends
            .iter()
            .map(|b| b.backend.name())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(s, "|---|{}", "---:|".repeat(backends.len()));
    let row = |s: &mut String, label: &str, f: &dyn Fn(&BackendFigures) -> String| {
        let _ = writeln!(
            s,
            "| {label} | {} |",
            backends.iter().map(f).collect::<Vec<_>>().join(" | ")
        );
    };
    let rate = |x: &load::Sample| format!("{:.0}/s", x.rate());
    let lat = |x: &load::Sample| format!("{:.1} / {:.1} ms", x.ms(0.5), x.ms(0.99));
    row(&mut s, "new-key pays over HTTP", &|b| rate(&b.http_pays));
    row(&mut s, "  p50 / p99", &|b| lat(&b.http_pays));
    row(
        &mut s,
        "minimal ceiling: claim + settle transactions only, same driver (sqlx)",
        &|b| rate(&b.ceiling),
    );
    row(&mut s, "  p50 / p99", &|b| lat(&b.ceiling));
    row(&mut s, "pays / minimal ceiling, same driver", &|b| {
        format!("{:.2}", ratio(b.http_pays.rate(), b.ceiling.rate()))
    });
    row(
        &mut s,
        "direct ceiling: the same flow through SQLite's C library, 1 thread",
        &|b| cell(b.direct.as_ref(), |d| rate(&d.0)),
    );
    row(&mut s, "  p50 / p99", &|b| {
        cell(b.direct.as_ref(), |d| lat(&d.0))
    });
    row(
        &mut s,
        &format!(
            "direct ceiling, {} threads (a connection each, SQLite's busy handler)",
            opts.clients
        ),
        &|b| cell(b.direct.as_ref(), |d| rate(&d.1)),
    );
    row(&mut s, "  p50 / p99", &|b| {
        cell(b.direct.as_ref(), |d| lat(&d.1))
    });
    row(
        &mut s,
        &format!("**pays / direct ceiling (1 thread)** (target ≥ {DIRECT_TARGET}, p99 ≤ {DIRECT_P99_TARGET_MS} ms)"),
        &|b| {
            cell(b.direct.as_ref(), |d| {
                let r = ratio(b.http_pays.rate(), d.0.rate());
                let met = r >= DIRECT_TARGET && b.http_pays.ms(0.99) <= DIRECT_P99_TARGET_MS;
                format!(
                    "**{r:.2}** {} (/ {} threads: {:.2})",
                    if met { "met" } else { "MISSED" },
                    opts.clients,
                    ratio(b.http_pays.rate(), d.1.rate()),
                )
            })
        },
    );
    row(
        &mut s,
        "rules ceiling: the rows and indexes of one pay as designed, 2 statements",
        &|b| cell(b.rules.as_ref(), rate),
    );
    row(&mut s, "  p50 / p99", &|b| cell(b.rules.as_ref(), lat));
    row(
        &mut s,
        &format!("**pays / rules ceiling** (target ≥ {RULES_TARGET})"),
        &|b| {
            cell(b.rules.as_ref(), |r| {
                let x = ratio(b.http_pays.rate(), r.rate());
                format!("**{x:.2}** {}", verdict(x, RULES_TARGET))
            })
        },
    );
    row(
        &mut s,
        &format!("**rules ceiling / minimal ceiling** (target ≥ {RULES_MINIMAL_TARGET})"),
        &|b| {
            cell(b.rules.as_ref(), |r| {
                let x = ratio(r.rate(), b.ceiling.rate());
                format!("**{x:.2}** {}", verdict(x, RULES_MINIMAL_TARGET))
            })
        },
    );
    row(
        &mut s,
        "new-key pays over HTTP, server given `--redis-url` (orders of their own)",
        &|b| cell(b.redis_pays.as_ref(), |r| rate(&r.0)),
    );
    row(&mut s, "  p50 / p99", &|b| {
        cell(b.redis_pays.as_ref(), |r| lat(&r.0))
    });
    row(
        &mut s,
        &format!("**pays with Redis / without** (target ≥ {REDIS_PAYS_TARGET}, p99 within {REDIS_P99_TARGET} ×)"),
        &|b| {
            cell(b.redis_pays.as_ref(), |r| {
                let (x, p99) = (
                    ratio(r.0.rate(), b.http_pays.rate()),
                    ratio(r.0.ms(0.99), b.http_pays.ms(0.99)),
                );
                let met = x >= REDIS_PAYS_TARGET && p99 <= REDIS_P99_TARGET;
                format!(
                    "**{x:.2}**, p99 × {p99:.2} {}; {} charges for {} pays, {} errors",
                    if met { "met" } else { "MISSED" },
                    r.1,
                    r.0.ok,
                    r.0.errors
                )
            })
        },
    );
    row(
        &mut s,
        "replays from memory (the server's default, `--replay-cache-entries`)",
        &|b| rate(&b.memory.0),
    );
    row(&mut s, "  p50 / p99", &|b| lat(&b.memory.0));
    row(&mut s, "no-op on that server", &|b| rate(&b.memory.1));
    row(
        &mut s,
        &format!("**replays from memory / no-op** (target ≥ {MEMORY_TARGET})"),
        &|b| {
            let r = ratio(b.memory.0.rate(), b.memory.1.rate());
            format!("**{r:.2}** {}", verdict(r, MEMORY_TARGET))
        },
    );
    row(&mut s, "replays from the database (cache off)", &|b| {
        rate(&b.replays)
    });
    row(&mut s, "  p50 / p99", &|b| lat(&b.replays));
    row(&mut s, "no-op `GET /dev/config` (no store access)", &|b| {
        rate(&b.noop)
    });
    row(&mut s, "  p50 / p99", &|b| lat(&b.noop));
    row(&mut s, "replays from the database / no-op", &|b| {
        format!("{:.2}", ratio(b.replays.rate(), b.noop.rate()))
    });
    row(&mut s, "`GET /healthz` (one `SELECT 1`)", &|b| {
        rate(&b.healthz)
    });
    row(
        &mut s,
        &format!("**replays from the database / healthz** (target ≥ {HEALTHZ_TARGET})"),
        &|b| {
            let r = ratio(b.replays.rate(), b.healthz.rate());
            format!("**{r:.2}** {}", verdict(r, HEALTHZ_TARGET))
        },
    );
    row(&mut s, "replays from Redis", &|b| match &b.redis {
        None => "—".into(),
        Some(RedisFigure::NotAvailable(why)) => format!("redis: {why}"),
        Some(RedisFigure::Measured(x, sources)) => format!(
            "{} ({:.2} × no-op{})",
            rate(x),
            ratio(x.rate(), b.noop.rate()),
            match sources {
                Some((redis, db)) => format!(
                    "; the server counted {redis} replays from Redis, {db} from the database"
                ),
                None => String::new(),
            }
        ),
    });
    row(
        &mut s,
        "errors (pays / ceiling / replays / memory replays / no-op / healthz)",
        &|b| {
            format!(
                "{} / {} / {} / {} / {} / {}",
                b.http_pays.errors,
                b.ceiling.errors,
                b.replays.errors,
                b.memory.0.errors,
                b.noop.errors,
                b.healthz.errors
            )
        },
    );
    row(&mut s, "charges in the ledger after the pays", &|b| {
        format!("{} of {}", b.ledger_charges, opts.pays)
    });

    if let Some(g) = growth {
        render_growth(&mut s, g);
    }
    if let Some(st) = storm {
        let _ = writeln!(s, "\nSame key, {} concurrent requests × {} rounds (a new order and customer each), round-robin over 3 API processes on one PostgreSQL database, one standalone mock provider, shared `--session-secret`; each request on its own new connection (connect time included):\n", st.requests_per_round, st.rounds);
        let _ = writeln!(
            s,
            "| charges per order (must be 1) | answers | 200 bodies identical | p50 | p99 | max | database transactions per round |"
        );
        let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|");
        let statuses = st
            .statuses
            .iter()
            .map(|(code, n)| {
                if *code == 0 {
                    format!("{n} × no answer")
                } else {
                    format!("{n} × {code}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "| {} | {statuses} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {} |",
            st.charges
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if st.answers_agree { "yes" } else { "NO" },
            st.latency.ms(0.5),
            st.latency.ms(0.99),
            st.latency.max_ms(),
            st.transactions
                .map_or("—".into(), |t| (t / st.rounds as i64).to_string())
        );
    } else {
        let _ = writeln!(s, "\nSame-key storm: not run.");
    }
    s
}

/// Pay p99 at the largest size within this factor of the smallest's.
const GROWTH_TARGET: f64 = 1.5;

fn render_growth(s: &mut String, g: &growth::Growth) {
    let _ = writeln!(s, "\nCost as the work grows (PostgreSQL, the same server and flags; stored attempts bulk-inserted, the cleanup job off):\n");
    let _ = writeln!(
        s,
        "| stored attempts | new-key pays | p50 / p99 | replays from the database | p50 / p99 |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|");
    for z in &g.sizes {
        let _ = writeln!(
            s,
            "| {} | {:.0}/s | {:.1} / {:.1} ms | {:.0}/s | {:.1} / {:.1} ms |",
            z.stored,
            z.pays.rate(),
            z.pays.ms(0.5),
            z.pays.ms(0.99),
            z.replays.rate(),
            z.replays.ms(0.5),
            z.replays.ms(0.99)
        );
    }
    if let (Some(first), Some(last)) = (g.sizes.first(), g.sizes.last()) {
        let (p, r) = (
            ratio(last.pays.ms(0.99), first.pays.ms(0.99)),
            ratio(last.replays.ms(0.99), first.replays.ms(0.99)),
        );
        let _ = writeln!(
            s,
            "\n**p99 at {} / at {} stored attempts** (target ≤ {GROWTH_TARGET}): pays **{p:.2}** {}, replays **{r:.2}** {}.",
            last.stored,
            first.stored,
            if p <= GROWTH_TARGET { "met" } else { "MISSED" },
            if r <= GROWTH_TARGET { "met" } else { "MISSED" },
        );
        if let Some(c) = &g.cleanup {
            let _ = writeln!(
                s,
                "Pays while the cleanup job deleted the {} expired keys (batches of 1,000; {} deleted during the pays, all gone after {}): {:.0}/s, p50 / p99 {:.1} / {:.1} ms, against {:.1} / {:.1} ms without cleanup at that size (**p99 × {:.2}**); errors {} / {}.",
                last.stored,
                c.deleted_during,
                c.took.map_or("more than 300 s".into(), |t| format!("{:.1} s", t.as_secs_f64())),
                c.pays.rate(),
                c.pays.ms(0.5),
                c.pays.ms(0.99),
                last.pays.ms(0.5),
                last.pays.ms(0.99),
                ratio(c.pays.ms(0.99), last.pays.ms(0.99)),
                c.pays.errors,
                last.pays.errors,
            );
        }
    }
}

const BEGIN: &str = "<!-- payonce-bench:begin (generated; edits inside are overwritten) -->";
const END: &str = "<!-- payonce-bench:end -->";

/// Replaces the generated section of the docs file (or creates the file), keeping the
/// hand-written analysis around it.
fn write_docs(path: &Path, table: &str) -> Result<(), BenchError> {
    let section = format!("{BEGIN}\n{table}{END}");
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{section}{}", &old[..b], &old[e + END.len()..]),
        _ => {
            format!("# Benchmarks\n\nProduced by `crates/bench` (`payonce-bench`).\n\n{section}\n")
        }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, new)?;
    Ok(())
}
