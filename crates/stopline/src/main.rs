//! The `stopline` binary: parse arguments, wire the crates, print receipts, map exit codes.
//!
//! No control logic lives here. Every verb is a function of `stopline-control`; this file and
//! its siblings only turn arguments into calls and receipts into output (JSON with `--json`).
//! Exit codes: 0 success, 1 refused, 2 usage; `check`: 0 allow, 3 queue, 4 block.

mod alerts;
mod assurance;
mod commands;
mod conformance;
mod gates;
mod logs;
mod manual;
mod output;
mod owner;
mod scheduled;
mod stop;
mod tokens;
mod wiring;

use clap::Parser;

/// mimalloc, not glibc's malloc: under a drill's load a fifth of the gateway's CPU was glibc's
/// allocator (free lists shared across threads, `malloc_consolidate`), on the stop's path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
// The definition lives in the library target so `cargo xtask dist` can generate completions and
// the man page from it; `crate::cli` stays the path the binary's modules use.
use stopline::cli;

fn main() {
    quiet_on_closed_output();
    let args = cli::Cli::parse();
    logs::init(&args);
    let code = commands::run(args);
    std::process::exit(code);
}

/// A closed standard output ends any command quietly (docs/reference.md §5). `output.rs` never panics on
/// one; this is the backstop for a print anywhere else (a library's progress line, clap's own
/// help): the panic a broken pipe raises ends the process with exit 1 and no message or
/// backtrace. Every other panic is reported as before.
fn quiet_on_closed_output() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if payload.contains("failed printing to std") && payload.contains("Broken pipe") {
            std::process::exit(1);
        }
        previous(info);
    }));
}
