//! The battery's report (docs/reference.md §11): `{"ok","total","failed","binary_sha256","cases":[{"id",
//! "expectation","observation","pass"}]}`, plus timing fields. `ok` is true only when at least
//! one case ran and every case passed: an empty selection qualifies nothing.

use serde_json::{json, Value};
use std::fmt::Write;
use std::time::Duration;

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The stable snake_case id.
    pub id: &'static str,
    /// What must hold.
    pub expectation: &'static str,
    /// What was observed (why it passed, or what happened instead).
    pub observation: String,
    /// Whether the expectation held.
    pub pass: bool,
    /// How long the case took.
    pub elapsed: Duration,
}

/// The whole battery.
#[derive(Debug, Clone)]
pub struct Report {
    /// sha256 (hex) of the binary the cases ran.
    pub binary_sha256: String,
    /// The binary's path.
    pub binary: String,
    /// Every case, in inventory order.
    pub cases: Vec<CaseResult>,
    /// Wall-clock time of the whole battery.
    pub elapsed: Duration,
}

impl Report {
    /// Cases that did not pass.
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.pass).count()
    }

    /// True only when at least one case ran and none failed.
    pub fn ok(&self) -> bool {
        !self.cases.is_empty() && self.failed() == 0
    }

    /// The report as docs/reference.md §11 fixes it (with more fields).
    pub fn json(&self) -> Value {
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|c| {
                json!({"id": c.id, "expectation": c.expectation, "observation": c.observation,
                       "pass": c.pass, "elapsed_ms": c.elapsed.as_millis() as u64})
            })
            .collect();
        json!({
            "ok": self.ok(),
            "total": self.cases.len(),
            "failed": self.failed(),
            "binary_sha256": self.binary_sha256,
            "binary": self.binary,
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "note": "boundary battery against this binary in isolated throwaway homes; refusal is \
                     usually the pass condition; author-controlled release qualification, not \
                     certification",
            "cases": cases,
        })
    }

    /// One line per case, failures with their observation, and a summary.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.cases {
            let _ = writeln!(
                out,
                "[{}] {} ({} ms)\n       expected: {}\n       observed: {}",
                if c.pass { "PASS" } else { "FAIL" },
                c.id,
                c.elapsed.as_millis(),
                c.expectation,
                c.observation
            );
        }
        let _ = writeln!(
            out,
            "{}: {} of {} cases passed in {:.1} s; binary sha256 {}",
            if self.ok() { "ok" } else { "NOT OK" },
            self.cases.len() - self.failed(),
            self.cases.len(),
            self.elapsed.as_secs_f64(),
            self.binary_sha256
        );
        out
    }
}

/// sha256 (hex) of a file's bytes.
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
