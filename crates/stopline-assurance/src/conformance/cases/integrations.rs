//! Integrations (docs/reference.md §8 MCP proxy, §11): the stdio MCP proxy refuses tools outside
//! `allowed_tools` (the wrapped server being this binary's own `mcp serve`); `mcp serve` offers
//! no recovery; the Claude Code hook blocks under a stop and fails closed on garbage.

use super::{case, slow, Case};
use crate::conformance::sandbox::{Out, Sandbox};
use crate::conformance::{ensure, CaseError, Verdict};
use serde_json::{json, Value};

pub const CASES: &[Case] = &[
    // Slow only because `mcp proxy` takes seconds to exit after its client's EOF.
    slow(
        "tool_not_allowed",
        "the MCP proxy refuses a tools/call outside the server's allowed_tools with tool_not_allowed and forwards an allowed one",
        tool_not_allowed,
    ),
    case(
        "mcp_serve_offers_no_recovery",
        "the stdio MCP server lists exactly engage and status, refuses recover/disengage/drain calls, and the stop stands",
        mcp_serve_offers_no_recovery,
    ),
    case(
        "hook_blocks_under_a_stop_and_fails_closed",
        "the Claude Code hook exits 0 when allowed, 2 under a covering stop, and 2 on garbage input (never a fail-open code)",
        hook_blocks_and_fails_closed,
    ),
];

/// Newline-delimited JSON-RPC: an initialize handshake, then `requests` (ids from 2).
fn session(requests: &[Value]) -> Vec<u8> {
    let mut lines = vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "stopline-conformance", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    lines.extend(requests.iter().cloned());
    lines
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes()
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The response with `id` among the output lines.
fn response(out: &Out, id: u64) -> Result<Value, CaseError> {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"] == id)
        .ok_or_else(|| CaseError::Unexpected(format!("no response {id}: {}", out.brief())))
}

fn tool_not_allowed(s: &Sandbox) -> Verdict {
    s.write("config.toml", b"[mcp.self]\nallowed_tools = [\"status\"]\n")?;
    let token = s.token(&["--agent", "w"])?;
    let home = s.home().display().to_string();
    let bin = s.bin().display().to_string();
    let input = session(&[
        call(
            2,
            "engage",
            json!({"scope": "machine", "reason": "not allowed here"}),
        ),
        call(3, "status", json!({})),
    ]);
    let out = s.run_with(
        &[
            "mcp", "proxy", "--name", "self", "--token", &token, "--", &bin, "--home", &home,
            "mcp", "serve",
        ],
        &[],
        Some(&input),
    )?;
    let refused = response(&out, 2)?;
    let text = refused.to_string();
    ensure(text.contains("tool_not_allowed"), || {
        format!("tools/call engage: {refused}")
    })?;
    let allowed = response(&out, 3)?;
    ensure(
        allowed.get("error").is_none() && allowed["result"]["isError"] != true,
        || format!("tools/call status: {allowed}"),
    )?;
    ensure(s.entries("latches").is_empty(), || {
        "the refused engage reached the server".into()
    })?;
    Ok(
        "engage (not in allowed_tools): refused tool_not_allowed; status: forwarded; no latch"
            .into(),
    )
}

fn mcp_serve_offers_no_recovery(s: &Sandbox) -> Verdict {
    s.engage("agent:rogue", "halt-all")?;
    let mut requests = vec![json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})];
    for (i, tool) in ["recover", "disengage", "drain"].iter().enumerate() {
        requests.push(call(
            10 + i as u64,
            tool,
            json!({"scope": "agent:rogue", "reason": "let me out"}),
        ));
    }
    let out = s.run_with(&["mcp", "serve"], &[], Some(&session(&requests)))?;
    let list = response(&out, 2)?;
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    names.sort();
    ensure(names == ["engage", "status"], || {
        format!("tools offered: {names:?}")
    })?;
    for id in 10..13 {
        let r = response(&out, id)?;
        ensure(
            r.get("error").is_some() || r["result"]["isError"] == true,
            || format!("a recovery tool answered: {r}"),
        )?;
    }
    ensure(s.entries("latches").len() == 1, || {
        "the stop was lifted from an MCP session".into()
    })?;
    Ok(
        "tools: [engage, status]; recover/disengage/drain calls are errors; the latch stands"
            .into(),
    )
}

fn hook(s: &Sandbox, input: &[u8], token: &str) -> Result<Out, CaseError> {
    s.run_with(
        &["hook", "claude-code"],
        &[("STOPLINE_TOKEN", token)],
        Some(input),
    )
}

fn hook_blocks_and_fails_closed(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "coder"])?;
    let event = json!({"session_id": "s1", "transcript_path": "/dev/null", "cwd": s.dir(),
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
    .to_string();
    let before = hook(s, event.as_bytes(), &token)?;
    ensure(before.code == 0, || {
        format!("allowed call: {}", before.brief())
    })?;
    for garbage in [&b"{not json"[..], b"", b"[]"] {
        let out = hook(s, garbage, &token)?;
        ensure(out.code == 2, || {
            format!(
                "garbage {:?}: {}",
                String::from_utf8_lossy(garbage),
                out.brief()
            )
        })?;
    }
    s.engage("agent:coder", "halt-all")?;
    let stopped = hook(s, event.as_bytes(), &token)?;
    ensure(
        stopped.code == 2 && stopped.stderr.contains("break_glass_contained"),
        || format!("under a stop: {}", stopped.brief()),
    )?;
    Ok("allowed: exit 0; garbage/empty/array input: exit 2; under agent halt: exit 2 break_glass_contained".into())
}
