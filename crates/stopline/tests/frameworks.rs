//! The agent frameworks of docs/wiring-agents.md, each the real package (`.venv-frameworks`,
//! `requirements-frameworks.txt`) wired exactly as the guide shows, stopped mid-run: a real
//! `stopline serve` over a throwaway home, its `[model]` a loopback model that answers every
//! request with a call of the tool `echo` (so the agent loops), its `[mcp.everything]` the Node
//! reference server (stdio, started by the gateway). The model holds the agent's third request;
//! the test engages a stop of the agent, releases the request, and then no further model request
//! reaches the model, no further tool call reaches the tool server (the gateway's operations
//! journal), and the run ends with the exception the guide names (by class, from Python).
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod mcp_support;
mod util;

use gw::{frameworks_python, model_config, py_script, within, Gateway, Proc, Upstream};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::Home;

/// The model request that is held while the stop is engaged (two tool calls ran before it).
const HOLD_AT: u32 = 3;

/// What ended the agent's run, as `py/frameworks/outcome.py` prints it.
struct Ended {
    outcome: Value,
    stderr: String,
}

/// The model's log without the tool lists, for failure messages.
fn brief(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| format!("#{} {} {}", l["n"], l["last_role"], l["t"]))
        .collect()
}

/// The operations the gateway recorded on `target`, with their outcomes.
fn ops_on(home: &Home, target: &str) -> Vec<Value> {
    let r = home.run(&["ops", "list"]);
    r.assert_ok();
    r.json()["operations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|op| op["target"] == target)
        .collect()
}

/// Run `script` as agent `agent` until the model holds its third request, engage a stop of the
/// agent (`level`: None for the default, emergency), release the request, and check that
/// nothing reached the model or the tool server after the engage.
fn stop_mid_run(script: &str, agent: &str, level: Option<&str>) -> Ended {
    let python = frameworks_python();
    let home = Home::new();
    let held = home.dir.path().join("held");
    let release = home.dir.path().join("release");
    let model = Upstream::start_tool_loop(&home, HOLD_AT, &held, &release);
    let everything = mcp_support::everything();
    let config = format!(
        "{}\n[mcp.everything]\ncommand = [\"node\", \"{}\", \"stdio\"]\n",
        model_config(&model),
        everything.display()
    );
    let gateway = Gateway::start(&home, &config);
    let token = home.token(&["--agent", agent]);

    let out_path = home.dir.path().join("agent.out");
    let err_path = home.dir.path().join("agent.err");
    let child = Command::new(python)
        .arg(py_script(&format!("frameworks/{script}")))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("STOPLINE_GATEWAY", gateway.url())
        .env("STOPLINE_TOKEN", &token)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start the agent");
    let mut agent_proc = Proc(child);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();

    // The handshake: the model writes `held` once the third request is in and waiting.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !held.exists() {
        if let Some(status) = agent_proc.0.try_wait().unwrap() {
            panic!(
                "the agent ended ({status}) before its third model request:\n{}\n{}\nmodel: {:?}",
                read(&out_path),
                read(&err_path),
                brief(&model.log_lines())
            );
        }
        assert!(
            Instant::now() < deadline,
            "the model never got a third request:\n{}\nmodel: {:?}",
            read(&err_path),
            brief(&model.log_lines())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = model.log_lines();
    assert_eq!(before.len(), HOLD_AT as usize, "{:?}", brief(&before));
    // The agent looped through the tool: every request after the first carries a tool result.
    for request in &before[1..] {
        assert_eq!(request["last_role"], "tool", "{:?}", brief(&before));
        assert!(
            request["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "echo"),
            "{request}"
        );
    }
    // Both tool calls ran through the gateway; each operation's outcome is recorded as its
    // exchange ends (bounded wait, not a sleep: it returns as soon as both are committed).
    let mut tool_calls = Vec::new();
    let committed = within(Duration::from_secs(10), || {
        tool_calls = ops_on(&home, "mcp:everything:echo");
        tool_calls
            .iter()
            .all(|op| op["outcome"] == "committed")
            .then_some(())
    });
    assert!(committed.is_some(), "{tool_calls:?}");
    assert_eq!(tool_calls.len(), HOLD_AT as usize - 1, "{tool_calls:?}");

    let scope = format!("agent:{agent}");
    let mut engage = vec![
        "engage",
        "--scope",
        scope.as_str(),
        "--reason",
        "stop it mid-run",
        "--by",
        "tester",
    ];
    if let Some(level) = level {
        engage.extend_from_slice(&["--level", level]);
    }
    home.run(&engage).assert_ok();
    // The held request is released only once the gateway's own view holds the stop. The engage
    // waits for the gateway's acknowledgement `ack_timeout_ms` at most (250 ms) and then
    // returns with `gateways_unacknowledged` rather than wait on; on a loaded machine the
    // gateway can take longer, and a release before its view holds the stop would pass the
    // held answer on as if nothing had been engaged. Its `/v1/check` reads the same view.
    let holds = within(Duration::from_secs(30), || {
        let r = gateway.post("/v1/check", Some(&token), &json!({"class": "noncritical"}));
        r.json()["code"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(String::from)
    });
    assert!(holds.is_some(), "the gateway's view never held the stop");
    std::fs::write(&release, "").unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = agent_proc.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent still runs after the stop:\n{}\nmodel: {:?}",
            read(&err_path),
            brief(&model.log_lines())
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = read(&out_path);
    let stderr = read(&err_path);
    assert!(status.success(), "the agent crashed: {stdout}\n{stderr}");
    let outcome: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the agent printed no outcome: {stdout}\n{stderr}"));

    // Zero calls after the engage: the model saw no request after the held one, the tool server
    // no call after the two before it.
    let after: Vec<Value> = model
        .log_lines()
        .into_iter()
        .filter(|l| l.get("cut").is_none())
        .collect();
    assert_eq!(
        after.len(),
        HOLD_AT as usize,
        "a model request reached the model after the stop: {:?}\n{outcome}",
        brief(&after)
    );
    let tool_calls = ops_on(&home, "mcp:everything:echo");
    assert_eq!(
        tool_calls.len(),
        HOLD_AT as usize - 1,
        "a tool call reached the tool server after the stop: {tool_calls:?}\n{outcome}"
    );
    let ops = home.run(&["ops", "list"]);
    let mcp_calls = ops.json()["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["target"].as_str().unwrap_or("").starts_with("mcp:"))
        .count();
    assert_eq!(mcp_calls, HOLD_AT as usize - 1, "{}", ops.stdout);
    assert_eq!(outcome["ok"], false, "the run ended normally: {outcome}");
    drop(gateway);
    Ended { outcome, stderr }
}

/// The run ended with `class` (by name) from `module`.
fn assert_raised(ended: &Ended, module: &str, class: &str) {
    let o = &ended.outcome;
    assert_eq!(
        (o["module"].as_str(), o["exception"].as_str()),
        (Some(module), Some(class)),
        "{o}\n{}",
        ended.stderr
    );
}

/// Stop `script`'s agent mid-run at the default level (an emergency): the run ends with
/// `class` from `module`, raised from the gateway's refusal of the held model request (an
/// `openai.PermissionDeniedError` along its causes, HTTP 403, `break_glass_contained`).
fn stopped_mid_run_raises(script: &str, agent: &str, module: &str, class: &str) {
    let ended = stop_mid_run(script, agent, None);
    assert_raised(&ended, module, class);
    let o = &ended.outcome;
    let causes = o["causes"].as_array().unwrap();
    assert!(causes.iter().any(|c| c == "PermissionDeniedError"), "{o}");
    assert_eq!(o["status"], 403, "{o}");
    assert_eq!(o["code"], "break_glass_contained", "{o}");
}

/// Halt `script`'s agent (halt-all) while its model request is held: the held reply (a tool
/// call) passes, the tool call is refused, and the run ends with `class` from `module`, raised
/// from the MCP client's protocol error (`McpError` along its causes, no HTTP status): the
/// gateway answers a refused request with its JSON-RPC error and HTTP 200, so the framework
/// sees the stop's code and text ("stopped by …; do not retry"), not a transport failure.
fn halted_at_a_tool_call_raises(script: &str, agent: &str, module: &str, class: &str) {
    let ended = stop_mid_run(script, agent, Some("halt-all"));
    assert_raised(&ended, module, class);
    let o = &ended.outcome;
    let causes = o["causes"].as_array().unwrap();
    assert!(causes.iter().any(|c| c == "McpError"), "{o}");
    assert_eq!(o["status"], Value::Null, "not an HTTP error: {o}");
    assert_eq!(o["code"], "break_glass_contained", "{o}");
    let message = o["message"].as_str().unwrap();
    assert!(
        message.contains("stopped by tester") && message.contains("do not retry"),
        "the latch's text reaches the agent: {o}"
    );
}

#[test]
fn openai_agents_sdk_stopped_mid_run_raises_permission_denied() {
    stopped_mid_run_raises(
        "openai_agents_agent.py",
        "fw-agents",
        "openai",
        "PermissionDeniedError",
    );
}

#[test]
fn openai_agents_sdk_halted_at_a_tool_call_raises_user_error_with_the_stop() {
    // The Agents SDK wraps the tool's McpError in its UserError ("Error running tool echo: …").
    halted_at_a_tool_call_raises(
        "openai_agents_agent.py",
        "fw-agents",
        "agents.exceptions",
        "UserError",
    );
}

#[test]
fn pydantic_ai_stopped_mid_run_raises_model_authentication_error() {
    stopped_mid_run_raises(
        "pydantic_ai_agent.py",
        "fw-pydantic",
        "pydantic_ai.exceptions",
        "ModelAuthenticationError",
    );
}

#[test]
fn pydantic_ai_halted_at_a_tool_call_raises_mcp_error() {
    halted_at_a_tool_call_raises(
        "pydantic_ai_agent.py",
        "fw-pydantic",
        "mcp.shared.exceptions",
        "McpError",
    );
}

#[test]
fn langgraph_stopped_mid_run_raises_permission_denied() {
    // langchain-openai's subclass of openai.PermissionDeniedError.
    stopped_mid_run_raises(
        "langgraph_agent.py",
        "fw-langgraph",
        "langchain_openai.chat_models.base",
        "OpenAIPermissionDeniedError",
    );
}

#[test]
fn langgraph_halted_at_a_tool_call_raises_mcp_error() {
    halted_at_a_tool_call_raises(
        "langgraph_agent.py",
        "fw-langgraph",
        "mcp.shared.exceptions",
        "McpError",
    );
}

/// The wiring each guide section shows is the wiring the test above runs: every line between
/// `# --- wiring` and `# --- end of wiring ---` of a script, and its imports, are in the guide.
#[test]
fn the_guides_show_the_wiring_the_tests_run() {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wiring-agents.md"),
    )
    .unwrap();
    let guide_lines: Vec<&str> = guide.lines().map(str::trim_end).collect();
    for script in [
        "openai_agents_agent.py",
        "pydantic_ai_agent.py",
        "langgraph_agent.py",
    ] {
        let text = std::fs::read_to_string(py_script(&format!("frameworks/{script}"))).unwrap();
        let start = text.find("# --- wiring").expect("a wiring section");
        let end = text.find("# --- end of wiring ---").expect("its end");
        let wiring = text[start..end].lines().skip(1);
        let imports = text[..start]
            .lines()
            .filter(|l| l.starts_with("from ") || l.starts_with("import "))
            .filter(|l| !l.contains("outcome"));
        for line in imports.chain(wiring).map(str::trim_end) {
            if line.is_empty() {
                continue;
            }
            assert!(
                guide_lines.contains(&line),
                "docs/wiring-agents.md does not show this line of {script}: {line}"
            );
        }
    }
}
