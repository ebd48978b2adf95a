//! Printing receipts and refusals, in one place, so every command reports the same way.
//!
//! Nothing here panics on a closed output (docs/reference.md §5): `stopline status | head -1` ends
//! quietly. A write that fails because the reader went away is dropped, and the command still
//! ends with its own exit code.

use serde::Serialize;
use serde_json::Value;
use std::io::{IsTerminal, Write};
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

/// Print a receipt: JSON with `--json` (see [`json`]), else its `Display`.
pub fn receipt(json: bool, receipt: &impl Receipt) {
    if json {
        self::json(&receipt.to_json());
    } else {
        line(&receipt.to_string());
    }
}

/// Print a verb's result: its receipt (exit 0) or its refusal (exit 1).
pub fn outcome(json: bool, result: Result<impl Receipt, Refusal>) -> i32 {
    match result {
        Ok(done) => {
            receipt(json, &done);
            0
        }
        Err(refused) => refusal(json, &refused),
    }
}

/// Print `value` as JSON: pretty on a terminal, one line when stdout is a pipe or a file (what
/// a script reads line by line). Only the whitespace differs.
pub fn json(value: &Value) {
    if std::io::stdout().is_terminal() {
        line(&serde_json::to_string_pretty(value).unwrap_or_default());
    } else {
        line(&value.to_string());
    }
}

/// Print a report (benchmarks): JSON with `--json`, else its figures as indented `key: value`
/// lines.
pub fn report(json: bool, value: &Value) {
    if json {
        self::json(value);
    } else {
        let mut text = String::new();
        figures(value, 0, &mut text);
        self::text(&text);
    }
}

/// `value` as indented `key: value` lines; a list of records is numbered.
fn figures(value: &Value, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let scalar = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut entry = |key: String, v: &Value| match v {
        Value::Object(_) | Value::Array(_) if !is_flat_list(v) => {
            out.push_str(&format!("{pad}{key}:\n"));
            figures(v, depth + 1, out);
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            out.push_str(&format!("{pad}{key}: {}\n", items.join(", ")));
        }
        _ => out.push_str(&format!("{pad}{key}: {}\n", scalar(v))),
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| entry(k.clone(), v)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| entry(format!("[{}]", i + 1), v)),
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

/// A list with no record or list in it (printed on one line).
fn is_flat_list(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(|v| !v.is_object() && !v.is_array()))
}

/// Print a verdict report (JSON with `--json`, else its text as it is) and return its exit
/// code: 0 when it holds, 1 when it does not.
pub fn verdict(json: bool, value: &Value, text: &str, ok: bool) -> i32 {
    if json {
        self::json(value);
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
/// stdout, as [`json`] prints it) and return exit code 1.
pub fn refusal(json: bool, refusal: &Refusal) -> i32 {
    error_line(&format!("error: {}: {}", refusal.code, refusal.message));
    if json {
        self::json(&serde_json::to_value(ErrorBody { error: refusal }).unwrap_or_default());
    }
    1
}
