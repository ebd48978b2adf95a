//! The `stopline` binary: parse arguments, wire the crates, print receipts, map exit codes.
//!
//! No control logic lives here. Every verb is a function of `stopline-control`; this file and
//! its siblings only turn arguments into calls and receipts into output (JSON with `--json`).
//! Exit codes: 0 success, 1 refused, 2 usage; `check`: 0 allow, 3 queue, 4 block.

mod commands;
mod conformance;
mod output;

use clap::Parser;
// The definition lives in the library target so `cargo xtask dist` can generate completions and
// the man page from it; `crate::cli` stays the path the binary's modules use.
use stopline::cli;

fn main() {
    let args = cli::Cli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("STOPLINE_LOG"))
        .with_writer(std::io::stderr)
        .try_init();
    let code = commands::run(args);
    std::process::exit(code);
}
