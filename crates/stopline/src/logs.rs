//! Where `tracing` goes: stderr, as text or (`serve --log-format json`) one JSON object a
//! line. What is logged: `STOPLINE_LOG`, else `RUST_LOG`, else `info` for `serve` (its
//! refusals, cuts, trips, acknowledgements and faults are what an operator reads) and errors
//! only for every other command. The Claude Code hook reads `STOPLINE_LOG` alone: its stderr is
//! what the model is shown, and a `RUST_LOG` meant for another program must not fill it.

use crate::cli::{Cli, Command, HookCommand, LogFormat};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Install the subscriber for `cli`'s command.
pub fn init(cli: &Cli) {
    let (default, format) = match &cli.command {
        Command::Serve { log_format, .. } => ("info", *log_format),
        _ => ("error", LogFormat::Text),
    };
    let hook = matches!(cli.command, Command::Hook(HookCommand::ClaudeCode));
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let directives = set("STOPLINE_LOG")
        .or_else(|| if hook { None } else { set("RUST_LOG") })
        .unwrap_or_else(|| default.to_string());
    let filter = EnvFilter::builder().parse_lossy(directives);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
