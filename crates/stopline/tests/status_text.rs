//! `stopline status` in text, on a real pseudo-terminal as a person sees it: the phase explained
//! per scope (one stopped agent does not read as the whole machine stopped), what `state` means,
//! the latch with who, why and its age, the gateways and what they acknowledged, unresolved
//! operations with the command that reconciles them, and budgets near their limit.

mod gw;
mod util;

use gw::{within, Gateway};
use serde_json::json;
use std::time::Duration;
use util::Home;

const REASON: &str = "exfiltration attempt";

fn engage(home: &Home, scope: &str, level: &str) {
    home.run(&[
        "engage",
        "--scope",
        scope,
        "--level",
        level,
        "--reason",
        REASON,
        "--by",
        "safety-monitor",
    ])
    .assert_ok();
}

#[test]
fn one_stopped_agent_reads_as_that_agent_stopped_not_the_machine() {
    let home = Home::new();
    engage(&home, "agent:researcher", "emergency");
    let status = home.run_text_on_pty(&["status"], &[]);
    status.assert_ok();
    let text = &status.stdout;
    assert!(
        !text.trim_start().starts_with('{'),
        "text, not JSON: {text}"
    );
    assert!(text.starts_with("phase: FROZEN_SAFE — "), "{text}");
    assert!(
        text.contains("agent:researcher (emergency): the agent researcher and every sub-agent it delegated to"),
        "{text}"
    );
    assert!(text.contains("the machine itself is not stopped"), "{text}");
    assert!(!text.contains("WHOLE MACHINE"), "{text}");
    assert!(
        !text.to_lowercase().contains("machine is stopped"),
        "{text}"
    );
    assert!(
        text.contains("state: RUNNING — the machine-wide control state"),
        "{text}"
    );
    assert!(text.contains("by safety-monitor  engaged "), "{text}");
    assert!(text.contains(&format!("reason: {REASON:?}")), "{text}");
    assert!(
        text.contains("stopline recover plan --scope agent:researcher"),
        "{text}"
    );
    assert!(text.contains("gateways: none live"), "{text}");
    assert!(text.contains("unresolved operations: none"), "{text}");

    // The whole machine, when it is.
    engage(&home, "machine", "halt-all");
    let text = home.run_text_on_pty(&["status"], &[]).stdout;
    assert!(
        text.contains("the WHOLE MACHINE is stopped (halt-all)"),
        "{text}"
    );
    assert!(
        !text.contains("the machine itself is not stopped"),
        "{text}"
    );
}

#[test]
fn status_names_gateways_acknowledgements_unresolved_operations_and_budgets_near_their_limit() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "operators = [\"operator\"]\n");
    // A token whose wall clock is nearly spent, seen by the gateway (a delegation registers it).
    let worker = home.token(&["--agent", "worker", "--budget", "wall_clock_s=2"]);
    let reply = gateway.post("/v1/delegate", Some(&worker), &json!({"agent": "helper"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    // A tool call in doubt: its stdio proxy killed while the tool server holds the call.
    let coder = home.token(&["--agent", "coder"]);
    let call = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "notes.txt"}}}"#;
    let mut proxy = home
        .command(&[
            "mcp", "proxy", "--token", &coder, "--name", "files", "--", "sleep", "5",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mcp proxy");
    {
        use std::io::Write;
        let mut stdin = proxy.stdin.take().unwrap();
        writeln!(stdin, "{call}").unwrap();
        within(Duration::from_secs(20), || {
            let ops = home.run(&["ops", "list", "--unresolved"]).json();
            (!ops["operations"].as_array()?.is_empty()).then_some(())
        })
        .expect("the call is prepared");
        proxy.kill().unwrap();
        proxy.wait().unwrap();
    }
    let op = home.run(&["ops", "list", "--unresolved"]).json()["operations"][0]["op"]
        .as_str()
        .unwrap()
        .to_string();
    engage(&home, "agent:coder", "emergency");
    let text = within(Duration::from_secs(20), || {
        std::thread::sleep(Duration::from_millis(200));
        let text = home.run_text_on_pty(&["status"], &[]).stdout;
        (text.contains("acknowledged every latch (1)")
            && text.contains("budgets near their limit ("))
        .then_some(text)
    })
    .unwrap_or_else(|| home.run_text_on_pty(&["status"], &[]).stdout);
    assert!(text.contains("gateways (1 live):"), "{text}");
    assert!(
        text.contains(&format!(
            "at {}: acknowledged every latch (1)",
            gateway.addr
        )),
        "{text}"
    );
    assert!(text.contains("unresolved operations (1):"), "{text}");
    assert!(
        text.contains(&format!(
            "reconcile: stopline ops reconcile {op} --outcome committed|failed|abandoned"
        )),
        "{text}"
    );
    assert!(
        text.contains("(blocks coder and its sub-agents on this target)"),
        "{text}"
    );
    assert!(text.contains("agent worker token "), "{text}");
    assert!(text.contains("wall_clock_s used "), "{text}");
    assert!(text.starts_with("phase: RECONCILING — "), "{text}");
    assert!(text.contains("the machine itself is not stopped"), "{text}");
}
