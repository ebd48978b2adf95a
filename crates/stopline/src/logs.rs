//! Where `tracing` goes: stderr, as text or (`serve --log-format json`) one JSON object a
//! line. What is logged: `STOPLINE_LOG`, else `RUST_LOG`, else `info` for `serve` (its
//! refusals, cuts, trips, acknowledgements and faults are what an operator reads) and errors
//! only for every other command. The Claude Code hook reads `STOPLINE_LOG` alone: its stderr is
//! what the model is shown, and a `RUST_LOG` meant for another program must not fill it.

use crate::cli::{Cli, Command, LogFormat};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Install the subscriber for `cli`'s command.
pub fn init(cli: &Cli) {
    let (default, format) = match &cli.command {
        Command::Serve { log_format, .. } => ("info", *log_format),
        _ => ("error", LogFormat::Text),
    };
    let hook = matches!(cli.command, Command::Hook(_));
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let directives = set("STOPLINE_LOG")
        .or_else(|| if hook { None } else { set("RUST_LOG") })
        .unwrap_or_else(|| default.to_string());
    let filter = EnvFilter::builder().parse_lossy(directives);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.with_writer(|| InertStderr).try_init(),
        LogFormat::Json => builder
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .try_init(),
    };
}

/// Stderr for the text log: each event's line with every control character of what it carries
/// escaped ([`stopline_core::text::inert_except`], docs/reference.md §6), so a tool server's stderr line
/// or an agent's model name cannot move the cursor, clear the screen or forge a log line. The
/// formatter writes one event per `write` and already escapes `ESC` in fields; the `ESC` that
/// remains is its own colouring and the last `\n` ends the line, so both are kept.
struct InertStderr;

impl std::io::Write for InertStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (line, end) = match text.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (&*text, ""),
        };
        let shown = stopline_core::text::inert_except(line, |c| c == '\u{1b}' || c == '\t');
        let mut stderr = std::io::stderr().lock();
        stderr.write_all(shown.as_bytes())?;
        stderr.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
