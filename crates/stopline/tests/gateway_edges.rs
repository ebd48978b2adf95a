//! The gateway's edges (docs/reference.md §6), tried with the reported attacks: a delegation chain
//! grown without end (100 `/v1/delegate` calls in 2.6 s, no depth limit) and three children
//! each engaging 32 latches; a model name carrying `ESC[2J` and an OSC title sequence printed
//! raw by `ops list` on the operator's terminal; and an agent token reading every scope that
//! ever had an emergency in `/v1/status`'s `epoch.scopes`; and a gateway-started tool server in
//! the middle of a long call writing on for 30 s after an EMERGENCY on its agent returned.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{mcp_post, mcp_session, model_config, Gateway, Upstream};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use util::Home;

/// `token delegate` `depth` times under `root`: the deepest token.
fn chain_of(home: &Home, root: &str, depth: usize) -> String {
    (1..=depth).fold(root.to_string(), |parent, i| {
        home.delegate(&parent, &format!("d{i}"))
    })
}

#[test]
fn a_delegation_chain_is_at_most_eight_deep_at_the_cli_and_the_gateway() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let root = home.token(&["--agent", "root"]);
    let deepest = chain_of(&home, &root, 8);

    let cli = home.run(&["token", "delegate", "--parent", &deepest, "--agent", "d9"]);
    assert_eq!(cli.code, 1, "{}", cli.stdout);
    assert_eq!(cli.code_str(), "delegate_limit", "{}", cli.stdout);

    let refused = gateway.post("/v1/delegate", Some(&deepest), &json!({"agent": "d9"}));
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (403, "delegate_limit"),
        "{}",
        refused.body
    );
    // One link shallower still delegates.
    let seven = chain_of(&home, &root, 7);
    let minted = gateway.post("/v1/delegate", Some(&seven), &json!({"agent": "d8"}));
    assert_eq!(minted.status, 200, "{}", minted.body);
}

#[test]
fn a_chain_holds_at_most_256_live_delegated_tokens_wherever_in_it_they_are_minted() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let root = home.token(&["--agent", "root"]);
    let other = home.token(&["--agent", "other"]);
    let mut child = String::new();
    for i in 0..256 {
        let minted = gateway.post(
            "/v1/delegate",
            Some(&root),
            &json!({"agent": format!("c{i}")}),
        );
        assert_eq!(minted.status, 200, "{i}: {}", minted.body);
        if i == 0 {
            child = minted.json()["token"].as_str().unwrap().to_string();
        }
    }
    for (who, token) in [("the root", &root), ("a child", &child)] {
        let refused = gateway.post("/v1/delegate", Some(token), &json!({"agent": "one-more"}));
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (403, "delegate_limit"),
            "{who}: {}",
            refused.body
        );
    }
    // Another chain is not counted with it.
    let minted = gateway.post("/v1/delegate", Some(&other), &json!({"agent": "c0"}));
    assert_eq!(minted.status, 200, "{}", minted.body);
}

fn engage_as(home: &Home, token: &str, scope: &str) -> util::Run {
    home.run(&[
        "engage", "--scope", scope, "--level", "halt-all", "--reason", "r", "--token", token,
    ])
}

#[test]
fn three_children_together_cannot_engage_more_than_their_roots_limit() {
    let home = Home::new();
    let root = home.token(&["--agent", "flooder", "--role", "monitor"]);
    let children: Vec<String> = (1..=3)
        .map(|i| home.delegate(&root, &format!("child{i}")))
        .collect();
    // 11 + 11 + 10: the chain's 32.
    let mut n = 0;
    for (child, count) in children.iter().zip([11, 11, 10]) {
        for _ in 0..count {
            let out = engage_as(&home, child, &format!("agent:t{n}"));
            assert_eq!(out.code, 0, "{n}: {}", out.stderr);
            n += 1;
        }
    }
    for (who, token) in [("a child", &children[2]), ("the root", &root)] {
        let out = engage_as(&home, token, "agent:t99");
        assert_eq!(out.code, 1, "{who}: {}", out.stdout);
        assert_eq!(out.code_str(), "engage_limit", "{who}: {}", out.stdout);
    }
    assert_eq!(home.entries("latches").len(), 32);
}

#[test]
fn ops_list_on_a_terminal_shows_an_agents_model_name_inert() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let token = home.token(&["--agent", "painter"]);
    let model = "m\u{1b}[2J\u{1b}]0;owned\u{7}\rx";
    let reply = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body(model),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The name was recorded as it came (JSON carries it escaped).
    let recorded = home.run(&["ops", "list"]).json();
    let targets: Vec<&str> = recorded["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["target"].as_str())
        .collect();
    assert!(
        targets.contains(&format!("model:{model}").as_str()),
        "{recorded}"
    );

    let shown = home.run_text_on_pty(&["ops", "list"], &[]);
    shown.assert_ok();
    let text = format!("{}{}", shown.stdout, shown.stderr);
    assert!(text.contains("model:m"), "{text:?}");
    assert!(
        !text.contains('\u{1b}'),
        "an ESC reached the terminal: {text:?}"
    );
    assert!(
        !text.contains('\u{7}'),
        "a BEL reached the terminal: {text:?}"
    );
    assert!(text.contains("\\u{1b}[2J"), "{text:?}");

    // The gateway's text log names the refused operation with the same name, inert too: no
    // ESC, and no CR that would let it overwrite the line it is on.
    home.engage("agent:painter", "emergency");
    let refused = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body(model),
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    let log_path = home.dir.path().join("gateway.log");
    let logged = gw::within(Duration::from_secs(10), || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("model:m") && l.contains("painter"))
            .then_some(log)
    })
    .expect("the refusal was logged");
    assert!(!logged.contains('\u{1b}'), "an ESC in the log: {logged:?}");
    assert!(!logged.contains('\r'), "a CR in the log: {logged:?}");
    assert!(!logged.contains('\u{7}'), "a BEL in the log: {logged:?}");
}

fn epoch_scopes(status: &Value) -> Vec<String> {
    status["epoch"]["scopes"]
        .as_object()
        .unwrap_or_else(|| panic!("no epoch scopes: {status}"))
        .keys()
        .cloned()
        .collect()
}

#[test]
fn an_agent_sees_only_its_own_chains_epoch_scopes() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let a = home.token(&["--agent", "a"]);
    let operator = home.token(&["--agent", "ops", "--role", "operator"]);
    home.engage("agent:b", "emergency");
    home.engage("agent:a", "emergency");

    let seen = gateway.get("/v1/status", Some(&a)).json();
    let scopes = epoch_scopes(&seen);
    assert!(!scopes.iter().any(|s| s.contains("agent:b")), "{seen}");
    assert!(scopes.iter().any(|s| s.contains("agent:a")), "{seen}");
    // Only the latch covering it, and the view is the agent's (no host warnings).
    let latches: Vec<&str> = seen["latches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["scope"].as_str())
        .collect();
    assert_eq!(latches, ["agent:a"], "{seen}");
    assert!(seen.get("warnings").is_none(), "{seen}");

    let all = gateway.get("/v1/status", Some(&operator)).json();
    assert!(
        epoch_scopes(&all).iter().any(|s| s.contains("agent:b")),
        "{all}"
    );
}

/// A stdio MCP server (no SDK) whose tool `append` appends a line to the file named by its
/// first argument every 50 ms for 30 s, then answers.
const LOOP_SERVER: &str = r#"
import json, sys, time
out = sys.argv[1]
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "loop", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{"name": "append",
              "description": "appends lines", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        end = time.time() + 30
        n = 0
        while time.time() < end:
            with open(out, "a") as f:
                f.write("line %d\n" % n)
            n += 1
            time.sleep(0.05)
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "done"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
"#;

fn lines_in(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn an_emergency_kills_a_busy_tool_server_at_once_and_its_call_is_left_unresolved() {
    let home = Home::new();
    // The server runs under a fresh uid: its script and its output live where it can reach.
    let shared = tempfile::Builder::new()
        .prefix("stopline-loop-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = shared.path().join("loop_server.py");
    std::fs::write(&script, LOOP_SERVER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = shared.path().join("lines.txt");
    let gateway = Gateway::start(
        &home,
        &format!(
            "cut_outcome_wait_s = 30\n[mcp.dest]\ncommand = [\"/usr/bin/python3\", \"{}\", \"{}\"]\nwarm_spare = false\n",
            script.display(),
            out.display()
        ),
    );
    let token = home.token(&["--agent", "busy"]);
    let session = mcp_session(&gateway.addr, &token).expect("a session id");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "append", "arguments": {}}});
    let answer = std::thread::scope(|scope| {
        let running = scope.spawn(|| mcp_post(&gateway.addr, &token, Some(&session), &call));
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines_in(&out) < 3 {
            assert!(Instant::now() < deadline, "the call never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        home.engage("agent:busy", "emergency");
        // 0.5 s after engage returned the server is gone: the file grows no more.
        std::thread::sleep(Duration::from_millis(500));
        let at_half_second = lines_in(&out);
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            lines_in(&out),
            at_half_second,
            "the tool server of a stopped agent still writes"
        );
        running.join().unwrap()
    });
    let messages = answer.rpc_messages();
    assert!(
        messages
            .iter()
            .any(|m| m["id"] == 7 && m["error"]["data"]["code"] == "break_glass_contained"),
        "{}",
        answer.body
    );
    let op = || -> Value {
        let ops = home.run(&["ops", "list"]).json();
        ops["operations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["target"] == "mcp:dest:append")
            .cloned()
            .unwrap_or_else(|| panic!("no operation for the call: {ops}"))
    };
    let left = gw::within(Duration::from_secs(10), || {
        let op = op();
        (op["in_doubt"] == true).then_some(op)
    })
    .unwrap_or_else(|| panic!("the call was not left in doubt: {}", op()));
    assert!(left["outcome"].is_null(), "the call has no outcome: {left}");
}
