//! The evidence log (docs/reference.md §9): hash-chained and anchored, so an edit anywhere — the newest
//! line included — is named by `evidence verify`, refuses `stopline run` (its drills can no
//! longer be proven), and cannot be laundered by a later append chaining over it.

use super::run::{card, refused_run};
use super::{slow, Case};
use crate::conformance::http::Upstream;
use crate::conformance::sandbox::Sandbox;
use crate::conformance::{ensure, harness, Verdict};
use serde_json::json;

pub const CASES: &[Case] = &[
    slow(
        "evidence_tampering_detected",
        "an altered evidence line is named by evidence verify (non-zero exit), and run then refuses drill_required because the drills cannot be proven",
        evidence_tampering_detected,
    ),
    slow(
        "evidence_edit_is_not_laundered_by_a_later_append",
        "a failed drill edited to pass in the newest evidence line refuses run drill_required, and the next append (another drill) is refused rather than chaining the edit in",
        evidence_edit_is_not_laundered,
    ),
];

fn evidence_tampering_detected(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    // Two real evidence records: drills of a version, both passing or not (their outcome does
    // not matter here, only that the binary wrote them).
    s.small_drill(&["--repeat", "2", "--harness-version", "harness-evidence"])?;
    let clean = s.run(&["evidence", "verify"])?;
    ensure(clean.code == 0 && clean.json()["ok"] == true, || {
        format!("verify of an untouched log: {}", clean.brief())
    })?;
    let log = s.file("evidence/log.jsonl");
    let text = std::fs::read_to_string(&log).map_err(harness)?;
    let lines: Vec<&str> = text.lines().collect();
    ensure(lines.len() >= 2, || {
        format!("{} evidence lines", lines.len())
    })?;
    // An edit of the first line breaks the link from the second.
    let first = lines[0].replacen("\"harness-evidence\"", "\"harness-evidenc3\"", 1);
    std::fs::write(&log, format!("{first}\n{}\n", lines[1..].join("\n"))).map_err(harness)?;
    let verify = s.run(&["evidence", "verify"])?;
    let report = verify.json();
    ensure(
        verify.code == 1 && report["ok"] == false && report["first_break"]["line"] == 2,
        || format!("verify of an edited first line: {}", verify.brief()),
    )?;
    // An edit of the last line has no successor to break: the head anchor must catch it.
    let last = lines[lines.len() - 1].replacen("\"harness-evidence\"", "\"harness-evidenc3\"", 1);
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    *edited.last_mut().unwrap_or(&mut String::new()) = last;
    std::fs::write(&log, format!("{}\n", edited.join("\n"))).map_err(harness)?;
    let tail = s.run(&["evidence", "verify"])?;
    ensure(tail.code == 1 && tail.json()["ok"] == false, || {
        format!("verify of an edited last line: {}", tail.brief())
    })?;
    let mut c = card("over-tampered-log", "agent-e");
    c["harness_version"] = json!("harness-evidence");
    refused_run(
        s,
        &c,
        &gateway.url(),
        "drill_required",
        "over a tampered evidence log",
    )?;
    Ok("untouched log verifies; edited first line: verify exit 1 naming line 2; edited last line: exit 1 (head anchor); run over it: drill_required".into())
}

fn evidence_edit_is_not_laundered(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    let drill = |version: &str, target: &str| {
        s.small_drill(&["--target-ms", target, "--harness-version", version])
    };
    let failed = drill("harness-laundry", "0")?;
    ensure(failed.code == 1 && failed.json()["pass"] == false, || {
        format!("the failing drill: {}", failed.brief())
    })?;
    let log = s.file("evidence/log.jsonl");
    let text = std::fs::read_to_string(&log).map_err(harness)?;
    let forged = text.replace("\"pass\":false", "\"pass\":true");
    ensure(forged != text, || {
        "the drill record has no \"pass\":false to forge".into()
    })?;
    std::fs::write(&log, &forged).map_err(harness)?;
    let mut c = card("laundry", "agent-l");
    c["harness_version"] = json!("harness-laundry");
    refused_run(
        s,
        &c,
        &gateway.url(),
        "drill_required",
        "over the forged newest line",
    )?;
    let next = drill("harness-other", "1000")?;
    let after = std::fs::read_to_string(&log).map_err(harness)?;
    ensure(next.code != 0 && after == forged, || {
        format!(
            "the append after the forgery: {}; log grew: {}",
            next.brief(),
            after != forged
        )
    })?;
    let verify = s.run(&["evidence", "verify"])?;
    ensure(verify.code == 1 && verify.json()["ok"] == false, || {
        format!("verify after the refused append: {}", verify.brief())
    })?;
    refused_run(
        s,
        &c,
        &gateway.url(),
        "drill_required",
        "still, after the refused append",
    )?;
    Ok(format!(
        "pass:false forged to pass:true in the newest line: run drill_required; next drill refused ({}); log unchanged; verify exit 1",
        next.refusal()
    ))
}
