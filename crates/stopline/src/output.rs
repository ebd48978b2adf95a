//! Printing receipts and refusals, in one place, so every command reports the same way.
//!
//! Nothing here panics on a closed output (SPEC §12.1): `stopline status | head -1` ends
//! quietly. A write that fails because the reader went away is dropped, and the command still
//! ends with its own exit code.

use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use stopline_control::receipts::Receipt;
use stopline_core::Refusal;

/// Write `text` and a newline to stdout; a closed stdout is not an error.
pub fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// Write `text` to stdout as it is; a closed stdout is not an error.
pub fn text(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// Write `text` and a newline to stderr; a closed stderr is not an error.
pub fn error_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Print a receipt: pretty JSON on stdout with `--json`, else its `Display`.
pub fn receipt(json: bool, receipt: &impl Receipt) {
    if json {
        pretty(&receipt.to_json());
    } else {
        line(&receipt.to_string());
    }
}

/// Print `value` as pretty JSON (reports that read the same for people: benchmarks).
pub fn pretty(value: &Value) {
    line(&serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Print a verdict report (pretty JSON with `--json`, else its text as it is) and return its
/// exit code: 0 when it holds, 1 when it does not.
pub fn verdict(json: bool, value: &Value, text: &str, ok: bool) -> i32 {
    if json {
        pretty(value);
    } else {
        self::text(text);
    }
    if ok {
        0
    } else {
        1
    }
}

/// The JSON body of a refusal: `{"error": {"code": …, "message": …}}`.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a Refusal,
}

/// Print a refusal (stderr `error: <code>: <message>`; with `--json` also the JSON body on
/// stdout) and return exit code 1.
pub fn refusal(json: bool, refusal: &Refusal) -> i32 {
    error_line(&format!("error: {}: {}", refusal.code, refusal.message));
    if json {
        let body = serde_json::to_value(ErrorBody { error: refusal }).unwrap_or_default();
        line(&body.to_string());
    }
    1
}
