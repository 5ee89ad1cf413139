//! `retry-storm`: 1,000 clients, a 10 s outage, and what each retry strategy does to the
//! recovered server — driven by the SDK's own pure core (`payonce::core`), not a copy of it.
//!
//! Layout
//! - `main.rs`     command line, the table, docs/retry-storm.md
//! - `model.rs`    the discrete-event model (clients, outage, server capacity) and the figures
//! - `strategy.rs` the strategies: no jitter, Stripe, AWS, and the SDK's `Schedule`/`RetryBudget`
//! - `plot.rs`     docs/retry-storm.png (plotters, bitmap backend, a font from crates.io)
//!
//! The model (deterministic from `--seed`)
//! - 1,000 clients, one payment intent each. By default every first request leaves at t = 0,
//!   the instant the server goes down (`--arrival burst`): the crowd that was mid-checkout,
//!   in lock step, which is the case jitter exists for. `--arrival spread:MS` spreads first
//!   requests uniformly over `[0, MS)` instead.
//! - The outage is `[0, 10 s)`: a request that reaches the server then is never answered
//!   (black hole), so the client's own timeout fires — the SDK default of 15 s, used for every
//!   strategy. After the outage the server answers.
//! - Capacity (`--capacity RPS`, 0 = unlimited): the recovered server takes RPS requests per
//!   second (a token bucket holding 100 ms worth) and sheds the rest at once with
//!   `503 + Retry-After: 1` (`--retry-after S`). Taken requests get `200 succeeded` after
//!   100 ms; nothing is charged twice because every retry carries the same key.
//! - Every answer is read by the SDK's `classify_pay`; the strategies (see `strategy.rs`)
//!   share its backoff envelope, its max 8 attempts and its 15 s timeout and differ in jitter,
//!   budget and `Retry-After`. "ours" is `Schedule::after` + `RetryBudget` with
//!   `RetryPolicy::default()` and the core's default 60 s deadline, exactly as `pay` calls them;
//!   the timeout and the deadline are the core's `DEFAULT_*` constants the web layer uses.
//! - Figures: requests that reached the server after recovery, in 1 s buckets aligned to the
//!   recovery instant (100 ms buckets are Poisson noise at these rates: a perfectly smooth
//!   random flow of 200 req/s would already show peak/mean ≈ 1.5 in them). The recovery window
//!   runs from recovery to the end of the last pay call ("drain"); mean = requests in it / its
//!   length. Retries per intent = (requests − intents) / intents.
//! - "previous SDK default" re-enacts the SDK's policy before this simulation's findings were
//!   applied (`strategy::Strategy::PreviousSdk`), so the effect of the change stays visible.

mod model;
mod plot;
mod strategy;

use model::{Arrival, Figures, Run, Scenario};
use payonce::core::retry::RetryPolicy;
use payonce::core::retry::DEFAULT_REQUEST_TIMEOUT_MS;
use std::fmt::Write as _;
use std::process::ExitCode;
use strategy::Strategy;

/// The issue's targets (goals to report, not assertions).
const TARGET_PEAK_TO_MEAN: f64 = 1.5;
const TARGET_RETRIES_PER_INTENT: f64 = 1.2;

struct Args {
    seed: u64,
    scenario: Scenario,
    png: Option<String>,
    md: Option<String>,
}

fn usage() -> &'static str {
    "usage: retry-storm [--seed N] [--clients N] [--outage-s S] [--arrival burst|spread:MS]\n\
     \x20                  [--timeout-ms MS] [--capacity RPS] [--retry-after S]\n\
     \x20                  [--png PATH] [--md PATH] [--no-files]"
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seed: 7,
        scenario: Scenario {
            clients: 1_000,
            arrival: Arrival::Burst,
            outage_ms: 10_000,
            timeout_ms: u64::from(DEFAULT_REQUEST_TIMEOUT_MS),
            capacity_rps: 250,
            retry_after_s: 1,
            latency_ms: 100,
            shed_latency_ms: 10,
        },
        png: Some("docs/retry-storm.png".into()),
        md: Some("docs/retry-storm.md".into()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-files" {
            a.png = None;
            a.md = None;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(usage().into());
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        let s = &mut a.scenario;
        match flag.as_str() {
            "--seed" => a.seed = num(&v)?,
            "--clients" => s.clients = num(&v)? as usize,
            "--outage-s" => s.outage_ms = num(&v)? * 1000,
            "--timeout-ms" => s.timeout_ms = num(&v)?.max(1),
            "--capacity" => {
                s.capacity_rps = u32::try_from(num(&v)?).map_err(|_| "--capacity too large")?
            }
            "--retry-after" => s.retry_after_s = num(&v)?,
            "--arrival" => {
                s.arrival = match v.as_str() {
                    "burst" => Arrival::Burst,
                    _ => match v.strip_prefix("spread:") {
                        Some(ms) => Arrival::Spread(num(ms)?),
                        None => return Err(format!("--arrival: burst or spread:MS, not {v}")),
                    },
                }
            }
            "--png" => a.png = Some(v),
            "--md" => a.md = Some(v),
            _ => return Err(format!("unknown flag {flag}\n{}", usage())),
        }
    }
    Ok(a)
}

/// The strategies, in table order: three anchors, the SDK before the simulation's findings
/// were applied to it, and the SDK as it ships.
fn strategies() -> Vec<Strategy> {
    vec![
        Strategy::NoJitter,
        Strategy::Stripe,
        Strategy::AwsFullJitter,
        Strategy::PreviousSdk,
        Strategy::Sdk {
            label: "ours (SDK default)",
            policy: RetryPolicy::default(),
        },
    ]
}

fn table(rows: &[(String, Figures)]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| strategy | requests | retries/intent | peak req/s (1 s) | mean req/s | peak/mean | busy peak/mean | first req after recovery (s) | drain (s after recovery) | 503s | paid | given up |"
    );
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (label, f) in rows {
        let _ = writeln!(
            t,
            "| {label} | {} | {:.2}{} | {:.0} | {:.0} | {:.2}{} | {:.2} | {:.2} | {:.1} | {} | {} | {} |",
            f.requests,
            f.retries_per_intent,
            mark(f.retries_per_intent <= TARGET_RETRIES_PER_INTENT),
            f.peak_rps,
            f.mean_rps,
            f.peak_to_mean,
            mark(f.peak_to_mean <= TARGET_PEAK_TO_MEAN),
            f.busy_peak_to_mean,
            f.first_after_s,
            f.drain_s,
            f.shed,
            f.paid,
            f.given_up,
        );
    }
    t
}

fn mark(ok: bool) -> &'static str {
    if ok {
        ""
    } else {
        " ✗"
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let sc = args.scenario;
    let runs: Vec<Run> = strategies()
        .into_iter()
        .map(|s| model::run(&sc, s, args.seed))
        .collect();
    let rows: Vec<(String, Figures)> = runs
        .iter()
        .map(|r| (r.strategy.label().to_owned(), model::figures(r, &sc)))
        .collect();
    let t = table(&rows);
    let desc = describe(&sc, args.seed);
    println!("{desc}\n");
    println!("{t}");
    let sens = sensitivity(&sc, args.seed);
    println!("Same seed, one change at a time (AWS, the previous SDK default, the SDK):\n");
    println!("{sens}");
    let figures: Vec<Figures> = rows.into_iter().map(|r| r.1).collect();
    if let Some(png) = &args.png {
        let title = format!("Retry storm: {desc}");
        let title = title.split("; targets").next().unwrap_or(&title);
        if let Err(e) = plot::draw(png, &runs, &figures, &sc, title) {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
        println!("wrote {png}");
    }
    if let Some(md) = &args.md {
        let flags: Vec<String> = std::env::args().skip(1).collect();
        let command = if flags.is_empty() {
            "cargo run --release -p payonce-sim --bin retry-storm".to_owned()
        } else {
            format!(
                "cargo run --release -p payonce-sim --bin retry-storm -- {}",
                flags.join(" ")
            )
        };
        let doc = format!(
            "# Retry storm\n\nWritten by `crates/sim` (`retry-storm`); do not edit by hand. Produced from the repository root by:\n\n```sh\n{command}\n```\n\n{desc}\n\n{t}\n![request rate over time per strategy](retry-storm.png)\n\n## One change at a time\n\n{sens}\n{READING}"
        );
        if let Err(e) = std::fs::write(md, doc) {
            eprintln!("{md}: {e}");
            return ExitCode::FAILURE;
        }
        println!("wrote {md}");
    }
    ExitCode::SUCCESS
}

/// AWS, the previous SDK default and the SDK, in variants of `sc` that change one thing each,
/// so a conclusion can be checked against the scenario it depends on.
fn sensitivity(sc: &Scenario, seed: u64) -> String {
    let variants: [(String, Scenario); 6] = [
        ("as above".into(), *sc),
        (
            "unlimited capacity".into(),
            Scenario {
                capacity_rps: 0,
                ..*sc
            },
        ),
        (
            "capacity 100 req/s".into(),
            Scenario {
                capacity_rps: 100,
                ..*sc
            },
        ),
        (
            "capacity 500 req/s".into(),
            Scenario {
                capacity_rps: 500,
                ..*sc
            },
        ),
        (
            "arrivals spread over the outage".into(),
            Scenario {
                arrival: Arrival::Spread(sc.outage_ms),
                ..*sc
            },
        ),
        (
            "request timeout 5 s".into(),
            Scenario {
                timeout_ms: 5_000,
                ..*sc
            },
        ),
    ];
    let all = strategies();
    let picked = [all[2], all[3], all[4]];
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| scenario | strategy | retries/intent | peak/mean | busy peak/mean | 503s | given up | drain (s) |"
    );
    let _ = writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|");
    for (name, v) in &variants {
        for s in picked {
            let f = model::figures(&model::run(v, s, seed), v);
            let _ = writeln!(
                t,
                "| {name} | {} | {:.2}{} | {:.2}{} | {:.2} | {} | {} | {:.1} |",
                s.label(),
                f.retries_per_intent,
                mark(f.retries_per_intent <= TARGET_RETRIES_PER_INTENT),
                f.peak_to_mean,
                mark(f.peak_to_mean <= TARGET_PEAK_TO_MEAN),
                f.busy_peak_to_mean,
                f.shed,
                f.given_up,
                f.drain_s,
            );
        }
    }
    t
}

/// How to read the tables; fixed text, the figures above carry the numbers.
const READING: &str = "
## Reading the figures

- **peak/mean** is the highest 1 s bucket after recovery over the mean from recovery to the
  drain. While the request timeout (15 s) outlasts the outage (10 s), every client sits on a
  request the dead server swallowed until 5 s after recovery, so the server idles for those
  5 s whatever the backoff does, and this ratio cannot reach 1.5 without spreading retries over
  10 s or more. **busy peak/mean** starts the window at the first request the recovered server
  receives: the storm's own shape.
- A high mean is not a virtue: a strategy that keeps hammering a saturated server has a flat
  rate and many 503s. Read peak/mean together with retries/intent and 503s.
- **given up** are pay calls that returned `pending` (key kept, nothing lost; the app may
  resume them). Every strategy stops after 8 failed sends; for all but ours a 503 counts as
  one. Ours (since the findings below) treats a 429/503 with `Retry-After` as the server
  pacing it: not a failed send, bounded by the 60 s deadline, and charged 5 budget tokens.
- What the SDK changed after the first run of this simulation (the \"previous SDK default\"
  row re-enacts the policy before it, `crates/sim/src/strategy.rs`):
  - *Retry-After jitter*: wait uniformly in `[Retry-After, 2 × Retry-After]` (capped by
    `maxRetryAfterMs` and the deadline) instead of exactly `Retry-After`, so clients shed
    together do not come back together.
  - *timeout window*: after our own request timeout, draw the wait from `[0, 5 s)` (the
    backoff cap) instead of `[0, 0.5 s)`: clients whose requests hung on a dead server time
    out together, and half a second cannot spread a crowd.
  - *paced is not failure*: a 429/503 with `Retry-After` does not count towards the 8
    attempts; it still costs retry-budget tokens, so a server that keeps shedding a client
    drains that client's bucket.
";

fn describe(sc: &Scenario, seed: u64) -> String {
    format!(
        "seed {seed}: {} clients, {}, outage [0, {} s), request timeout {} s, capacity {}, Retry-After {} s on 503; targets peak/mean ≤ {TARGET_PEAK_TO_MEAN}, retries/intent ≤ {TARGET_RETRIES_PER_INTENT} (✗ = missed)",
        sc.clients,
        sc.arrival,
        sc.outage_ms / 1000,
        sc.timeout_ms as f64 / 1000.0,
        if sc.capacity_rps == 0 { "unlimited".to_owned() } else { format!("{} req/s", sc.capacity_rps) },
        sc.retry_after_s,
    )
}
