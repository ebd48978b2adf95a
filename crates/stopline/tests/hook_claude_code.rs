//! `stopline hook claude-code`: exit 0 lets the tool call run, exit 2 blocks it with the reason
//! on stderr — and every failure of the hook itself (garbage input, an unreachable or silent
//! gateway, a corrupt configuration) is an exit 2 too, because any other exit fails open.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod mcp_support;
mod util;

use mcp_support::gateway;
use serde_json::json;
use std::time::{Duration, Instant};
use util::{Home, Run};

fn hook(home: &Home, stdin: &[u8], env: &[(&str, &str)]) -> Run {
    home.run_piped(&["hook", "claude-code"], stdin, env)
}

fn event(home: &Home, tool: &str, input: serde_json::Value) -> Vec<u8> {
    let cwd = home.dir.path().canonicalize().unwrap();
    let event = json!({"session_id": "s1", "transcript_path": "/dev/null", "cwd": cwd, "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input});
    serde_json::to_vec(&event).unwrap()
}

#[test]
fn allowed_calls_exit_0_and_stopped_calls_exit_2_with_the_reason() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let token = home.token(&["--agent", "coder"]);
    let bash = event(&home, "Bash", json!({"command": "ls"}));
    let r = hook(&home, &bash, &[("STOPLINE_TOKEN", &token)]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    home.engage("agent:coder", "halt-all");
    let r = hook(&home, &bash, &[("STOPLINE_TOKEN", &token)]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("break_glass_contained") && r.stderr.contains("Bash"),
        "{}",
        r.stderr
    );
    // Without a token the identity is unprovable: every agent latch covers it.
    let r = hook(&home, &bash, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn a_project_stop_blocks_calls_made_in_that_project() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let project = home.dir.path().canonicalize().unwrap();
    let write = event(
        &home,
        "Write",
        json!({"file_path": "notes.txt", "content": "x"}),
    );
    assert_eq!(hook(&home, &write, &[]).code, 0);
    home.engage(&format!("project:{}", project.display()), "emergency");
    let r = hook(&home, &write, &[]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("break_glass_contained"), "{}", r.stderr);
}

#[test]
fn an_unresolved_operation_blocks_its_mcp_tool() {
    let home = Home::new();
    let ops = home.file("ops");
    std::fs::create_dir_all(&ops).unwrap();
    // A gateway that died mid-call (pid above pid_max): its operation is in doubt.
    let journal = "{\"op\":\"op_1\",\"phase\":\"prepared\",\"ts\":\"2026-01-01T00:00:00.000Z\",\"ts_ms\":1,\"target\":\"mcp:everything:write-file\",\"agent\":\"coder\"}\n";
    std::fs::write(ops.join("gateway-4194304-1.jsonl"), journal).unwrap();
    let token = home.token(&["--agent", "coder"]);
    let r = hook(
        &home,
        &event(&home, "mcp__everything__write-file", json!({})),
        &[("STOPLINE_TOKEN", &token)],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("unresolved_operation"), "{}", r.stderr);
    assert_eq!(
        hook(
            &home,
            &event(&home, "mcp__everything__echo", json!({})),
            &[("STOPLINE_TOKEN", &token)]
        )
        .code,
        0
    );
}

#[test]
fn every_failure_of_the_hook_itself_exits_2() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    for garbage in [&b"not json"[..], b"", b"{\"tool_input\":{}}", b"[1,2]"] {
        let r = hook(&home, garbage, &[]);
        assert_eq!(
            r.code,
            2,
            "{:?}: {}",
            String::from_utf8_lossy(garbage),
            r.stderr
        );
        assert!(!r.stderr.is_empty());
    }
    let bash = event(&home, "Bash", json!({"command": "ls"}));
    // Unreachable gateway.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = hook(
        &home,
        &bash,
        &[
            ("STOPLINE_URL", &format!("http://127.0.0.1:{closed}")),
            ("STOPLINE_TOKEN", "t"),
        ],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("gateway_unreachable"), "{}", r.stderr);
    // A gateway that accepts and never answers: the hook's own timeout ends it with exit 2.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let r = hook(
        &home,
        &bash,
        &[
            ("STOPLINE_URL", &silent_url),
            ("STOPLINE_HOOK_TIMEOUT_MS", "700"),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "timed out by itself"
    );
    drop(silent);
    // A corrupt configuration is a block, not exit 1.
    std::fs::write(home.file("config.toml"), "operators = [").unwrap();
    let r = hook(&home, &bash, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn through_the_gateway_allowed_is_0_and_stopped_is_2() {
    let home = Home::new();
    let (_gateway, url) = gateway(&home, "");
    let token = home.token(&["--agent", "coder"]);
    let bash = event(&home, "Bash", json!({"command": "ls"}));
    let env = [
        ("STOPLINE_URL", url.as_str()),
        ("STOPLINE_TOKEN", token.as_str()),
    ];
    let r = hook(&home, &bash, &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    home.engage("agent:coder", "emergency");
    let r = hook(&home, &bash, &env);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("stale_control_epoch"), "{}", r.stderr);
}

#[test]
fn through_the_gateway_a_project_stop_blocks_calls_made_in_that_project() {
    let home = Home::new();
    let (_gateway, url) = gateway(&home, "");
    // The token says nothing of the project: only the event's cwd and paths place the call.
    let token = home.token(&["--agent", "coder"]);
    let env = [
        ("STOPLINE_URL", url.as_str()),
        ("STOPLINE_TOKEN", token.as_str()),
    ];
    let project = tempfile::Builder::new()
        .prefix("stopline-hook-project-")
        .tempdir()
        .unwrap();
    let project_root = project.path().canonicalize().unwrap();
    let bash = event(&home, "Bash", json!({"command": "ls"}));
    let write_inside = event(
        &home,
        "Write",
        json!({"file_path": project_root.join("notes.txt"), "content": "x"}),
    );
    let read_inside = event(&home, "Grep", json!({"pattern": "x", "path": project_root}));
    for call in [&bash, &write_inside, &read_inside] {
        let r = hook(&home, call, &env);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    home.engage(&format!("project:{}", project_root.display()), "halt-all");
    for call in [&write_inside, &read_inside] {
        let r = hook(&home, call, &env);
        assert_eq!(
            r.code, 2,
            "a call inside the halted project ran: {}",
            r.stderr
        );
        assert!(r.stderr.contains("break_glass_contained"), "{}", r.stderr);
    }
    // Bash with the halted project as its working directory.
    let cwd = project_root.display().to_string();
    let bash_inside = serde_json::to_vec(&json!({"session_id": "s1", "cwd": cwd,
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}))
    .unwrap();
    let r = hook(&home, &bash_inside, &env);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // Outside the project the same agent goes on.
    let r = hook(&home, &bash, &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
}
