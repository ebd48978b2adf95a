//! Printing receipts and refusals, in one place, so every command reports the same way.
//!
//! Nothing here panics on a closed output (SPEC §12.1): `stopline status | head -1` ends
//! quietly. A write that fails because the reader went away is dropped, and the command still
//! ends with its own exit code.

use serde_json::Value;
use std::io::Write;
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

/// Print a receipt: pretty JSON on stdout with `--json`, else a human rendering.
pub fn receipt(json: bool, value: &Value, human: impl FnOnce(&Value) -> String) {
    if json {
        line(&serde_json::to_string_pretty(value).unwrap_or_default());
    } else {
        line(&human(value));
    }
}

/// Print a verdict report (pretty JSON with `--json`, else its text as it is) and return its
/// exit code: 0 when it holds, 1 when it does not.
pub fn verdict(json: bool, value: &Value, text: &str, ok: bool) -> i32 {
    if json {
        line(&serde_json::to_string_pretty(value).unwrap_or_default());
    } else {
        self::text(text);
    }
    if ok {
        0
    } else {
        1
    }
}

/// Print a refusal (stderr `error: <code>: <message>`; with `--json` also the JSON body on
/// stdout) and return exit code 1.
pub fn refusal(json: bool, refusal: &Refusal) -> i32 {
    error_line(&format!("error: {}: {}", refusal.code, refusal.message));
    if json {
        let body = serde_json::json!({"error": {"code": refusal.code, "message": refusal.message}});
        line(&body.to_string());
    }
    1
}

/// Compact one-line JSON for human output of nested values.
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
