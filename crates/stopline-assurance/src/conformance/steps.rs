//! The steps cases are made of: engage, mint and delegate tokens, check, status, and the owner
//! console's plan/apply on a pseudo-terminal. Each is one run of the binary; a step that must
//! succeed for the case to mean anything fails the case (with what was seen) when it does not.

use super::pty::Terminal;
use super::sandbox::{Out, Sandbox};
use super::{ensure, CaseError};
use serde_json::Value;

/// The operator every case's console steps name (the default configured operator).
pub const OPERATOR: &str = "operator";

impl Sandbox {
    /// `engage --scope S --level L` with a fresh `--by`; must succeed.
    pub fn engage(&self, scope: &str, level: &str) -> Result<Value, CaseError> {
        let by = format!("conformance-{}", std::process::id());
        let out = self.run(&[
            "engage",
            "--scope",
            scope,
            "--level",
            level,
            "--reason",
            "conformance stop",
            "--by",
            &by,
        ])?;
        ensure(out.code == 0 && out.json()["engaged"] == true, || {
            format!("setup: engage {scope} at {level} failed: {}", out.brief())
        })?;
        Ok(out.json())
    }

    /// The file name of an engage receipt's latch.
    pub fn latch_file(receipt: &Value) -> String {
        receipt["latch"]["file"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `token issue ARGS…`; must succeed; the token.
    pub fn token(&self, args: &[&str]) -> Result<String, CaseError> {
        let mut full = vec!["token", "issue"];
        full.extend_from_slice(args);
        let out = self.run(&full)?;
        let token = out.json()["token"].as_str().unwrap_or_default().to_string();
        ensure(out.code == 0 && !token.is_empty(), || {
            format!(
                "setup: token issue {} failed: {}",
                args.join(" "),
                out.brief()
            )
        })?;
        Ok(token)
    }

    /// `token delegate --parent P --agent CHILD`; must succeed; the child token.
    pub fn delegate(&self, parent: &str, child: &str) -> Result<String, CaseError> {
        let out = self.run(&["token", "delegate", "--parent", parent, "--agent", child])?;
        let token = out.json()["token"].as_str().unwrap_or_default().to_string();
        ensure(out.code == 0 && !token.is_empty(), || {
            format!("setup: token delegate {child} failed: {}", out.brief())
        })?;
        Ok(token)
    }

    /// `check ARGS…`: exit code and the receipt.
    pub fn check(&self, args: &[&str]) -> Result<(i32, Value), CaseError> {
        let mut full = vec!["check"];
        full.extend_from_slice(args);
        let out = self.run(&full)?;
        Ok((out.code, out.json()))
    }

    /// `check --class noncritical --token T`.
    pub fn check_token(&self, token: &str) -> Result<(i32, Value), CaseError> {
        self.check(&["--class", "noncritical", "--token", token])
    }

    /// `status`; must succeed.
    pub fn status(&self) -> Result<Value, CaseError> {
        let out = self.run(&["status"])?;
        ensure(out.code == 0 && out.json().is_object(), || {
            format!("status failed: {}", out.brief())
        })?;
        Ok(out.json())
    }

    /// Run `args` on the owner console (a controlling pseudo-terminal, no agent session).
    pub fn console(&self, args: &[&str]) -> Result<Out, CaseError> {
        self.pty(args, &[], Terminal::Controlling)
    }

    /// `recover plan --scope S` on the owner console; must succeed; the plan receipt.
    pub fn plan(&self, scope: &str) -> Result<Value, CaseError> {
        let out = self.console(&[
            "recover",
            "plan",
            "--scope",
            scope,
            "--reason",
            "conformance recovery",
            "--by",
            OPERATOR,
        ])?;
        ensure(out.code == 0 && out.json()["plan"].is_string(), || {
            format!(
                "setup: recover plan {scope} on the console failed: {}",
                out.brief()
            )
        })?;
        Ok(out.json())
    }

    /// `recover apply --plan ID` on the owner console; the run.
    pub fn apply(&self, plan: &Value) -> Result<Out, CaseError> {
        let id = plan["plan"].as_str().unwrap_or_default();
        self.console(&["recover", "apply", "--plan", id, "--by", OPERATOR])
    }
}

/// The decision and code of a check receipt, for observations.
pub fn decision(receipt: &Value) -> String {
    format!(
        "{} {} ({})",
        receipt["decision"].as_str().unwrap_or("?"),
        receipt["code"].as_str().unwrap_or("null"),
        receipt["mode"].as_str().unwrap_or("?")
    )
}

/// Expect a refusal: exit 1 and `code`, on stderr (`error: <code>:`) and in the JSON body.
pub fn refused(out: &Out, code: &str, what: &str) -> Result<(), CaseError> {
    ensure(
        out.code == 1 && out.refusal() == code && out.stderr.contains(&format!("error: {code}:")),
        || format!("{what}: expected exit 1 with {code}, got {}", out.brief()),
    )
}

/// Expect `check` to block (exit 4) with `code`.
pub fn blocked(check: &(i32, Value), code: &str, what: &str) -> Result<(), CaseError> {
    let (exit, receipt) = check;
    ensure(
        *exit == 4 && receipt["decision"] == "block" && receipt["code"] == code,
        || format!("{what}: expected block {code} (exit 4), got exit {exit}: {receipt}"),
    )
}

/// Expect `check` to allow (exit 0).
pub fn allowed(check: &(i32, Value), what: &str) -> Result<(), CaseError> {
    let (exit, receipt) = check;
    ensure(*exit == 0 && receipt["decision"] == "allow", || {
        format!("{what}: expected allow (exit 0), got exit {exit}: {receipt}")
    })
}

/// `token` with one character changed well inside its signature (not the last one, whose low
/// bits are base64 padding a lenient decoder might ignore): a forgery of a real token.
pub fn altered_signature(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let at = (token.rfind('.').unwrap_or(0) + 8).min(bytes.len().saturating_sub(1));
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8_lossy(&bytes).into_owned()
}
