//! The MCP proxy of the gateway, with real parts: the Python `mcp` Streamable HTTP client,
//! `stopline serve`, and the Node reference server `server-everything` (or a counting server).
//! A stop reaches the very next call with its code in the JSON-RPC error data; a token minted
//! before an emergency stays dead after the owner recovers; a budget holds under concurrency.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod mcp_support;
mod util;

use mcp_support::*;
use serde_json::{json, Value};
use util::Home;

/// The Node reference server over HTTP behind a gateway as `[mcp.everything]` (`extra`: more
/// lines of that section). Fields drop in order: the gateway ends before the server.
struct Everything {
    _gateway: Proc,
    _server: Proc,
    /// The gateway's route to the server, `<gateway>/mcp/everything`.
    endpoint: String,
}

fn everything_behind_a_gateway(home: &Home, extra: &str) -> Everything {
    let (server, port) = everything_http();
    let (gateway, url) = gateway(
        home,
        &format!("[mcp.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\n{extra}"),
    );
    Everything {
        _gateway: gateway,
        _server: server,
        endpoint: format!("{url}/mcp/everything"),
    }
}

fn ops(home: &Home) -> Vec<Value> {
    let r = home.run(&["ops", "list"]);
    r.assert_ok();
    r.json()["operations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn python_client_through_the_gateway_is_stopped_and_stays_stopped_after_recovery() {
    let home = Home::new();
    let everything = everything_behind_a_gateway(&home, "");
    let endpoint = everything.endpoint.as_str();
    let before = home.token(&["--agent", "worker"]);
    let bystander = home.token(&["--agent", "bystander"]);
    let mut client = Driver::start(&["http", endpoint, &before], &[]);
    let mut other = Driver::start(&["http", endpoint, &bystander], &[]);

    let tools = client.list();
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "echo"),
        "{tools}"
    );
    let echo = client.call("echo", json!({"message": "hello"}));
    assert_eq!(echo["text"][0], "Echo: hello", "{echo}");
    // Every tool call is a destination operation, prepared before and committed after: the
    // reference server marks echo `readOnlyHint: true`, but an untrusted hint spares nothing.
    let effect = client.call("toggle-simulated-logging", json!({}));
    assert_eq!(effect["ok"], true, "{effect}");
    for tool in ["toggle-simulated-logging", "echo"] {
        let recorded: Vec<Value> = ops(&home)
            .into_iter()
            .filter(|op| op["target"] == format!("mcp:everything:{tool}"))
            .collect();
        assert_eq!(recorded.len(), 1, "{tool}: {recorded:?}");
        assert_eq!(recorded[0]["outcome"], "committed", "{tool}");
    }
    assert!(
        ops(&home).iter().all(|op| op["outcome"] == "committed"),
        "every call has its outcome"
    );

    // A halt: the very next call is refused with the stop's code; the bystander is not.
    home.engage("agent:worker", "halt-all");
    // The SDK's protocol error (MCPError), not a transport failure: the refusal is the call's
    // JSON-RPC error, with the latch's text for the model to read.
    let halted = client.call("echo", json!({"message": "x"}));
    assert_eq!(refusal_code(&halted), "break_glass_contained");
    let text = halted["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("stopped by") && text.contains("do not retry"),
        "{halted}"
    );
    assert_eq!(
        other.call("echo", json!({"message": "still here"}))["ok"],
        true
    );

    // An emergency revokes the token itself.
    home.engage("agent:worker", "emergency");
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "stale_control_epoch"
    );
    assert_eq!(refusal_code(&client.list()), "stale_control_epoch");

    recover(&home, "agent:worker");
    // The session and the token from before the stop stay dead after the recovery ...
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "stale_control_epoch"
    );
    // ... while a token minted after the recovery works.
    let after = home.token(&["--agent", "worker"]);
    let mut fresh = Driver::start(&["http", endpoint, &after], &[]);
    assert_eq!(
        fresh.call("echo", json!({"message": "back"}))["text"][0],
        "Echo: back"
    );
}

#[test]
fn a_stale_token_cannot_even_open_a_session() {
    let home = Home::new();
    let everything = everything_behind_a_gateway(&home, "");
    let before = home.token(&["--agent", "worker"]);
    home.engage("agent:worker", "emergency");
    recover(&home, "agent:worker");
    let mut python = std::process::Command::new(python());
    python
        .arg(script("mcp_driver.py"))
        .args(["http", &everything.endpoint, &before]);
    let output = python
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "initialize must be refused");
    assert!(stderr.contains("stale_control_epoch"), "{stderr}");
}

#[test]
fn thirty_two_concurrent_calls_against_a_budget_of_ten_reach_the_destination_at_most_ten_times() {
    let home = Home::new();
    let (_counter, port, count_file) = counting_server(home.dir.path());
    let (_gateway, url) = gateway(
        &home,
        &format!("[mcp.counter]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
    );
    let token = home.token(&["--agent", "spender", "--budget", "tool_calls=10"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/counter"), &token], &[]);
    // The client validates results against the tool list: fetch it before the budget runs out.
    assert_eq!(client.list()["tools"], json!(["count"]));
    let burst = client.send(json!({"op": "burst", "tool": "count", "n": 32}));
    let results = burst["results"].as_array().unwrap();
    let succeeded = results.iter().filter(|r| r["ok"] == true).count();
    let executed = std::fs::read_to_string(&count_file)
        .unwrap()
        .lines()
        .count();
    assert!(
        executed <= 10,
        "the destination executed {executed} calls: {burst}"
    );
    assert_eq!(
        succeeded, executed,
        "every success is an execution and nothing else ran: {burst}"
    );
    let codes: Vec<String> = results
        .iter()
        .filter(|r| r["ok"] == false)
        .map(refusal_code)
        .collect();
    assert!(codes.iter().any(|c| c == "budget_exhausted"), "{codes:?}");
    let stop_codes = ["budget_exhausted", "breaker_open", "break_glass_contained"];
    assert!(
        codes.iter().all(|c| stop_codes.contains(&c.as_str())),
        "{codes:?}"
    );

    // The breaker tripped: an agent latch by the breaker, and the evidence says why. The trip
    // is engaged by a task of its own, which may land after the burst's last answer on a busy
    // machine: wait for it (bounded) rather than race it.
    let mut latches = Vec::new();
    let tripped = eventually(std::time::Duration::from_secs(10), || {
        latches = home.status()["latches"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        latches.iter().any(|l| l["scope"] == "agent:spender")
    });
    assert!(tripped, "no breaker latch: {latches:?}");
    let trip = latches
        .iter()
        .find(|l| l["scope"] == "agent:spender")
        .expect("the breaker latch");
    assert!(
        trip["by"].as_str().unwrap().starts_with("breaker:"),
        "{trip}"
    );
    // The trip writes its evidence right after the latch.
    let has_record = || {
        std::fs::read_to_string(home.file("evidence/log.jsonl"))
            .is_ok_and(|e| e.contains("\"spender\""))
    };
    assert!(
        eventually(std::time::Duration::from_secs(5), has_record),
        "no evidence record"
    );
    let evidence = std::fs::read_to_string(home.file("evidence/log.jsonl")).expect("evidence log");
    let record: Value = evidence
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["agent"] == "spender")
        .unwrap_or_else(|| panic!("no evidence record: {evidence}"));
    assert_eq!(
        (record["kind"].as_str(), record["trigger"].as_str()),
        (Some("budget_exhausted"), Some("tool_calls")),
        "{record}"
    );
    assert_eq!(record["schema"], "evidence-record.v1");
    home.valid_evidence();
    assert_eq!(record["threshold"], 10.0);
    assert_eq!(
        record["latch"].as_str().map(|l| format!("{l}.json")),
        trip["file"].as_str().map(String::from),
        "{record}"
    );
    // Every executed call was a committed destination operation.
    let committed = ops(&home)
        .iter()
        .filter(|op| op["target"] == "mcp:counter:count" && op["outcome"] == "committed")
        .count();
    assert_eq!(committed, executed);
}

#[test]
fn tools_outside_allowed_tools_are_refused_and_never_forwarded() {
    let home = Home::new();
    let (_counter, port, count_file) = counting_server(home.dir.path());
    let (_gateway, url) = gateway(
        &home,
        &format!(
            "[mcp.counter]\nurl = \"http://127.0.0.1:{port}/mcp\"\nallowed_tools = [\"echo\"]\n"
        ),
    );
    let token = home.token(&["--agent", "curious"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/counter"), &token], &[]);
    assert_eq!(
        refusal_code(&client.call("count", json!({}))),
        "tool_not_allowed"
    );
    assert_eq!(
        std::fs::read_to_string(&count_file).unwrap(),
        "",
        "nothing reached the destination"
    );
}

#[test]
fn a_stdio_upstream_started_by_the_gateway_is_governed_per_session() {
    let home = Home::new();
    let everything = everything();
    let config = format!(
        "[mcp.local]\ncommand = [\"node\", \"{}\", \"stdio\"]\nwarm_spare = false\n",
        everything.display()
    );
    let (gateway_proc, url) = gateway(&home, &config);
    let token = home.token(&["--agent", "worker"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    assert!(client.list()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "echo"));
    assert_eq!(
        client.call("echo", json!({"message": "via stdio"}))["text"][0],
        "Echo: via stdio"
    );
    let servers: Vec<u32> = children_of(gateway_proc.pid());
    assert_eq!(servers.len(), 1, "one child for the session: {servers:?}");
    home.engage("agent:worker", "halt-all");
    // The SDK's protocol error (MCPError), not a transport failure: the refusal is the call's
    // JSON-RPC error, with the latch's text for the model to read.
    let halted = client.call("echo", json!({"message": "x"}));
    assert_eq!(refusal_code(&halted), "break_glass_contained");
    let text = halted["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("stopped by") && text.contains("do not retry"),
        "{halted}"
    );
    // Ending the session (the client's DELETE on close) stops its server by pid.
    assert_eq!(client.send(json!({"op": "quit"}))["ok"], true);
    assert!(
        eventually(std::time::Duration::from_secs(10), || !alive(servers[0])),
        "the session's server still runs"
    );
}

#[test]
fn a_client_killed_mid_call_to_a_read_only_hinted_tool_leaves_a_recorded_outcome() {
    let home = Home::new();
    let everything = everything_behind_a_gateway(&home, "");
    let endpoint = everything.endpoint.as_str();
    let token = home.token(&["--agent", "worker"]);
    let mut client = Driver::start(&["http", endpoint, &token], &[]);
    assert_eq!(client.list()["ok"], true);
    // The reference server's long-running tool says `readOnlyHint: true`; it is still recorded,
    // and a client that dies mid-call leaves its outcome, not a doubt.
    client.send_and_die(
        json!({"op": "call", "tool": "trigger-long-running-operation", "args": {"duration": 2, "steps": 2}}),
        std::time::Duration::from_millis(700),
    );
    let target = "mcp:everything:trigger-long-running-operation";
    let committed = eventually(std::time::Duration::from_secs(30), || {
        let ops: Vec<Value> = ops(&home)
            .into_iter()
            .filter(|o| o["target"] == target)
            .collect();
        ops.len() == 1 && ops[0]["outcome"] == "committed"
    });
    assert!(committed, "{}", home.run(&["ops", "list"]).stdout);
    let mut again = Driver::start(&["http", endpoint, &token], &[]);
    let done = again.call(
        "trigger-long-running-operation",
        json!({"duration": 0.2, "steps": 1}),
    );
    assert_eq!(done["ok"], true, "nobody is blocked: {done}");
}

#[test]
fn trusted_read_only_hints_spare_the_record() {
    let home = Home::new();
    let everything = everything_behind_a_gateway(&home, "trust_read_only_hints = true\n");
    let token = home.token(&["--agent", "worker"]);
    let mut client = Driver::start(&["http", &everything.endpoint, &token], &[]);
    assert_eq!(
        client.list()["ok"],
        true,
        "the hints are learnt from tools/list"
    );
    assert_eq!(client.call("echo", json!({"message": "hi"}))["ok"], true);
    assert_eq!(
        client.call("toggle-simulated-logging", json!({}))["ok"],
        true
    );
    let targets: Vec<Value> = ops(&home)
        .into_iter()
        .map(|o| o["target"].clone())
        .collect();
    assert_eq!(
        targets,
        [json!("mcp:everything:toggle-simulated-logging")],
        "only the tool without the hint is recorded"
    );
}
