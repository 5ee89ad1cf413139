//! The command line: `payonce-conformance --config FILE [--json]`. Exit status 0 when no
//! rule failed, 1 when one did, 2 when the kit could not run.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Checks a running payments backend against docs/protocol.md.
#[derive(Debug, Parser)]
#[command(name = "payonce-conformance", version)]
struct Args {
    /// The configuration file (TOML, or JSON when it ends in .json); see docs/conformance.md.
    #[arg(long)]
    config: PathBuf,
    /// Print the report as JSON instead of one line per rule.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match payonce_conformance::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("payonce-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match payonce_conformance::run(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("payonce-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("payonce-conformance: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", report.render_text());
    }
    if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
