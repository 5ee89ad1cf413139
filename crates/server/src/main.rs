//! `payonce-server`: see `payonce_server::Cli` for the flags.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    // Logs go to stderr; stdout carries only the "listening on" lines scripts parse.
    let level = std::env::var("PAYONCE_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .init();
    let cli = payonce_server::Cli::parse();
    match payonce_server::dispatch(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line per problem (an unsafe configuration names each of them).
            for line in e.to_string().lines() {
                eprintln!("payonce-server: {line}");
            }
            ExitCode::FAILURE
        }
    }
}
