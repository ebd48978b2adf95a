//! Output forms: `--json` is one line when stdout is a pipe and pretty on a terminal,
//! the same JSON either way; without `--json` every command prints text, never a JSON dump.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::Gateway;
use serde_json::{json, Value};
use util::{Home, Run};

/// Run without `--json`, stdout a pipe.
fn text(home: &Home, args: &[&str]) -> Run {
    home.command(args).output().expect("run stopline").into()
}

#[test]
fn json_is_one_line_on_a_pipe_and_pretty_on_a_terminal() {
    let home = Home::new();
    home.engage("agent:researcher", "halt-all");
    let token = home.token(&["--agent", "researcher"]);
    for args in [
        vec!["status"],
        vec!["ops", "list"],
        vec!["evidence", "verify"],
        vec!["token", "verify", &token],
        vec!["check", "--class", "noncritical", "--agent", "researcher"],
        vec![
            "disengage",
            "--scope",
            "agent:nobody",
            "--reason",
            "r",
            "--by",
            "operator",
        ],
    ] {
        let piped = home.run(&args);
        assert_eq!(
            piped.stdout.trim_end().lines().count(),
            1,
            "{args:?} on a pipe: {}",
            piped.stdout
        );
        let on_pty = home.run_on_pty(&args, &[]);
        assert!(
            on_pty.stdout.trim_end().lines().count() > 1,
            "{args:?} on a terminal: {}",
            on_pty.stdout
        );
        let (a, b): (Value, Value) = (piped.json(), on_pty.json());
        if args[0] != "status" {
            // (status reads the clock into nothing it prints; the rest must match exactly)
            assert_eq!(a, b, "{args:?}");
        } else {
            assert_eq!(a["latches"], b["latches"], "{args:?}");
        }
    }
    // A refusal's body follows the same rule.
    let refused = home.run(&["engage", "--scope", "nonsense", "--reason", "r"]);
    assert_eq!(refused.code, 1);
    assert_eq!(
        refused.stdout.trim_end().lines().count(),
        1,
        "{}",
        refused.stdout
    );
    assert_eq!(refused.code_str(), "scope_invalid");
}

#[test]
fn every_command_prints_text_without_json() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "monitors = [\"safety-monitor\"]\n");
    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let tripped = gateway.post(
        "/v1/anomaly",
        Some(&monitor),
        &json!({"agent": "reviewer", "score": 0.97}),
    );
    assert_eq!(tripped.status, 200, "{}", tripped.body);
    let listed = gw::within(std::time::Duration::from_secs(10), || {
        let r = text(&home, &["evidence", "list"]);
        r.stdout.starts_with("#1 ").then_some(r)
    })
    .expect("the trip's record is listed");
    let line = listed.stdout.lines().next().unwrap();
    assert!(
        line.contains("evidence-record.v1 (breaker): agent=reviewer breaker=anomaly_score"),
        "{line}"
    );
    assert!(!line.contains('{'), "text, not JSON: {line}");

    let ops = text(&home, &["ops", "list", "--unresolved"]);
    assert_eq!(ops.stdout.trim(), "no operations match", "{}", ops.stdout);

    // A torn WAL tail, repaired at the owner console.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(home.file("breakglass.wal.jsonl"))
        .unwrap()
        .write_all(br#"{"seq": 99, "kind": "torn"#)
        .unwrap();
    let repaired = home.run_text_on_pty(
        &[
            "recover",
            "repair",
            "--reason",
            "torn tail",
            "--by",
            "operator",
        ],
        &[],
    );
    assert_eq!(repaired.code, 0, "{}\n{}", repaired.stdout, repaired.stderr);
    assert!(
        repaired
            .stdout
            .starts_with("repaired: truncated the WAL's torn last line (25 bytes); epoch "),
        "{}",
        repaired.stdout
    );
    assert!(
        repaired.stdout.contains("recovery-evidence/"),
        "{}",
        repaired.stdout
    );

    let bench = text(&home, &["bench", "admission", "--iterations", "1"]);
    assert_eq!(bench.code, 0, "{}", bench.stderr);
    assert!(
        bench.stdout.starts_with("admission:\n  allowed: "),
        "{}",
        bench.stdout
    );
    assert!(
        bench.stdout.contains("\n  decision_p50_ns: "),
        "{}",
        bench.stdout
    );
}
