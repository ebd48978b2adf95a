//! Agent text made inert for a terminal (docs/reference.md §6 "Agent text is inert on a terminal").
//!
//! A model name, a tool name, a target or a reason comes from an agent; printed raw, an `ESC`
//! sequence in it clears the operator's screen, retitles the window or hides the line above it,
//! and a `CR` or `LF` forges a line. Every text output passes such strings through [`inert`],
//! which writes each control character (C0, `DEL`, C1) as its Rust escape (`\u{1b}`, `\r`, …)
//! and leaves everything else as it is. JSON output needs none of this: serde escapes it.

use std::borrow::Cow;

/// `text` with every control character escaped (borrowed when it has none).
pub fn inert(text: &str) -> Cow<'_, str> {
    inert_except(text, |_| false)
}

/// [`inert`], but the characters `keep` accepts pass through as they are (the log writer keeps
/// the `ESC` of its own colours: the log formatter already escaped an agent's).
pub fn inert_except(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let escapes = |c: char| c.is_control() && !keep(c);
    if !text.chars().any(escapes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escapes(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_nothing_else_changes() {
        let hostile = "gpt\u{1b}[2J\u{1b}]0;owned\u{7}\r\nx\u{9b}1m é";
        let shown = inert(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert_eq!(
            shown,
            "gpt\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\r\\nx\\u{9b}1m é"
        );
        assert!(matches!(inert("plain: text"), Cow::Borrowed("plain: text")));
        assert_eq!(inert_except("a\u{1b}b\r", |c| c == '\u{1b}'), "a\u{1b}b\\r");
    }
}
