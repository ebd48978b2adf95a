//! Printing receipts and refusals, in one place, so every command reports the same way.

use serde_json::Value;
use stopline_core::Refusal;

/// Print a receipt: pretty JSON on stdout with `--json`, else a human rendering.
pub fn receipt(json: bool, value: &Value, human: impl FnOnce(&Value) -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        println!("{}", human(value));
    }
}

/// Print a verdict report (pretty JSON with `--json`, else its text as it is) and return its
/// exit code: 0 when it holds, 1 when it does not.
pub fn verdict(json: bool, value: &Value, text: &str, ok: bool) -> i32 {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{text}");
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
    eprintln!("error: {}: {}", refusal.code, refusal.message);
    if json {
        let body = serde_json::json!({"error": {"code": refusal.code, "message": refusal.message}});
        println!("{body}");
    }
    1
}

/// Compact one-line JSON for human output of nested values.
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
