//! Operations through the gateway's MCP route are in doubt only when their outcome truly cannot
//! be known, and then block only their own agent (docs/reference.md §8). Real parts: `stopline serve`, a
//! loopback MCP upstream that records every frame it receives before acting on it, real
//! sockets, SIGKILL. A client that goes away leaves an outcome, not a doubt; a gateway killed
//! between dispatch and outcome leaves a doubt that blocks only its agent's chain (unless the
//! server says `unresolved_blocks = "everyone"`); frames that cannot be governed never reach
//! the upstream; batch members reach it one by one; `ping` is critical.

mod gw;
mod util;

use gw::{http_with, rpc_messages, FrameUpstream, Gateway, Reply};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;
use util::Home;

/// A gateway whose `[mcp.frames]` is a frame-counting upstream (`extra`: more lines of that
/// section), over a throwaway home, and a token minted there (`token issue` with `token_args`).
/// Fields drop in order: the gateway before its upstream and home (tests borrow its parts, so
/// that order holds).
struct Frames {
    gateway: Gateway,
    upstream: FrameUpstream,
    home: Home,
    token: String,
}

fn frames(extra: &str, token_args: &[&str]) -> Frames {
    let home = Home::new();
    let upstream = FrameUpstream::start(&home);
    let gateway = Gateway::start(&home, &upstream.config(extra));
    let token = home.token(token_args);
    Frames {
        gateway,
        upstream,
        home,
        token,
    }
}

impl Frames {
    fn parts(&self) -> (&Gateway, &FrameUpstream, &Home, &str) {
        (&self.gateway, &self.upstream, &self.home, &self.token)
    }
}

fn post(gateway: &Gateway, token: &str, body: &Value) -> Reply {
    post_to(&gateway.addr, token, body)
}

fn post_to(addr: &str, token: &str, body: &Value) -> Reply {
    http_with(
        addr,
        "POST",
        "/mcp/frames",
        Some(token),
        Some(body),
        &[("Accept", "application/json, text/event-stream")],
    )
}

fn call(id: u64, tool: &str, seconds: f64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {"seconds": seconds}}})
}

/// The refusal code of a single JSON-RPC answer, or "" when it succeeded.
fn code_of(reply: &Reply) -> String {
    rpc_messages(reply)
        .iter()
        .find_map(|m| m["error"]["data"]["code"].as_str().map(String::from))
        .unwrap_or_default()
}

/// `reply` answered its call: HTTP 200 and no refusal (`what` says why it must).
fn assert_answered(reply: &Reply, what: &str) {
    assert_eq!(
        (reply.status, code_of(reply)),
        (200, String::new()),
        "{what}: {}",
        reply.body
    );
}

/// `reply` was refused with `code` (`what` says why it must), its message naming every one of
/// `needles`.
fn assert_refused(reply: &Reply, code: &str, what: &str, needles: &[&str]) {
    assert_eq!(code_of(reply), code, "{what}: {}", reply.body);
    let message = rpc_messages(reply)
        .iter()
        .find_map(|m| m["error"]["data"]["message"].as_str().map(String::from))
        .unwrap_or_default();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} in {message:?}");
    }
}

fn ops(home: &Home, target: &str) -> Vec<Value> {
    let listed = home.run(&["ops", "list"]);
    listed.assert_ok();
    listed.json()["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == target)
        .cloned()
        .collect()
}

/// Send `body` and go away after `after`, without reading the answer (`curl -m 1`).
fn post_and_hang_up(gateway: &Gateway, token: &str, body: &Value, after: Duration) {
    let mut stream = std::net::TcpStream::connect(&gateway.addr).unwrap();
    let body = body.to_string();
    let request = format!(
        "POST /mcp/frames HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        gateway.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    std::thread::sleep(after);
    drop(stream);
}

#[test]
fn a_client_that_hangs_up_mid_call_leaves_an_outcome_and_blocks_nobody() {
    let frames = frames("", &["--agent", "impatient"]);
    let (gateway, upstream, home, token) = frames.parts();
    post_and_hang_up(
        gateway,
        token,
        &call(1, "slow", 2.0),
        Duration::from_millis(500),
    );
    assert_eq!(
        upstream.received("tools/call").len(),
        1,
        "the call reached the upstream"
    );
    let recorded = gw::within(Duration::from_secs(30), || {
        let ops = ops(home, "mcp:frames:slow");
        (ops.len() == 1 && ops[0]["outcome"] == "committed").then_some(ops)
    });
    assert!(
        recorded.is_some(),
        "the gateway finished the exchange and recorded its outcome: {:?} {}",
        upstream.done(),
        home.run(&["ops", "list"]).stdout
    );
    let again = post(gateway, token, &call(2, "slow", 0.0));
    assert_answered(&again, "nobody is blocked");
}

#[test]
fn a_batch_with_a_duplicate_id_is_refused_whole_and_nothing_runs() {
    let frames = frames("", &["--agent", "batcher"]);
    let (gateway, upstream, home, token) = frames.parts();
    let batch = json!([call(7, "count", 0.0), call(7, "count", 0.0)]);
    let reply = post(gateway, token, &batch);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], -32600, "{}", reply.body);
    assert!(
        upstream.frames().is_empty(),
        "nothing reached the upstream: {:?}",
        upstream.frames()
    );
    assert!(ops(home, "mcp:frames:count").is_empty(), "nothing recorded");
}

#[test]
fn a_tools_call_sent_as_a_notification_never_reaches_the_upstream() {
    let frames = frames(
        "allowed_tools = [\"count\"]",
        &["--agent", "sneaky", "--budget", "tool_calls=1"],
    );
    let (gateway, upstream, home, token) = frames.parts();
    for tool in ["count", "count", "count", "count", "slow"] {
        let note = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": tool}});
        let reply = post(gateway, token, &note);
        assert_eq!(reply.status, 400, "{tool}: {}", reply.body);
        let batch = json!([note, {"jsonrpc": "2.0", "method": "notifications/initialized"}]);
        assert_eq!(
            post(gateway, token, &batch).status,
            400,
            "{tool} in a batch"
        );
    }
    assert!(
        upstream.received("tools/call").is_empty(),
        "no tools/call notification was forwarded: {:?}",
        upstream.frames()
    );
    // A real notification passes, and the budget is untouched by the refused ones.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(gateway, token, &note).status, 202);
    assert_eq!(upstream.received("notifications/initialized").len(), 1);
    let counted = post(gateway, token, &call(1, "count", 0.0));
    assert_eq!(code_of(&counted), "", "{}", counted.body);
    assert!(ops(home, "mcp:frames:count").len() == 1);
}

#[test]
fn batch_members_reach_the_upstream_one_by_one_and_come_back_as_a_batch() {
    let frames = frames("", &["--agent", "batcher"]);
    let (gateway, upstream, _, token) = frames.parts();
    let batch = json!([
        call(1, "count", 0.0),
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]);
    let reply = post(gateway, token, &batch);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut ids: Vec<Value> = reply
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    ids.sort_by_key(|v| v.as_i64());
    assert_eq!(ids, [json!(1), json!(2)], "{}", reply.body);
    let frames = upstream.frames();
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert!(
        frames.iter().all(|f| f.is_object()),
        "no batch ever reached the upstream: {frames:?}"
    );
}

#[test]
fn ping_and_notifications_are_critical_and_pass_a_halt_all() {
    let frames = frames("", &["--agent", "halted"]);
    let (gateway, upstream, home, token) = frames.parts();
    home.engage("agent:halted", "halt-all");
    let call = post(gateway, token, &call(1, "count", 0.0));
    assert_eq!(code_of(&call), "break_glass_contained", "{}", call.body);
    let ping = post(
        gateway,
        token,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    );
    assert_answered(&ping, "ping is critical");
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    assert_eq!(post(gateway, token, &note).status, 202);
    assert_eq!(upstream.received("ping").len(), 1);
    assert!(upstream.received("tools/call").is_empty());
}

/// Start a slow call by `lead`, SIGKILL the gateway once the upstream has it, restart the
/// gateway; returns the new gateway and the operation left behind.
fn kill_between_dispatch_and_outcome(home: &Home, config: &str, lead: &str) -> (Gateway, Value) {
    let mut gateway = Gateway::start(home, config);
    let addr = gateway.addr.clone();
    let token = lead.to_string();
    let caller = std::thread::spawn(move || post_to(&addr, &token, &call(1, "slow", 5.0)));
    let frames = gw::within(Duration::from_secs(20), || {
        std::fs::read_to_string(home.dir.path().join("frames.log"))
            .ok()
            .filter(|l| l.contains("tools/call"))
    });
    assert!(frames.is_some(), "the call reached the upstream");
    gateway.proc.0.kill().unwrap();
    gateway.proc.0.wait().unwrap();
    let _ = caller.join();
    let gateway = Gateway::start(home, config);
    let listed = home.run(&["ops", "list", "--unresolved"]);
    let left: Vec<Value> = listed.json()["operations"].as_array().unwrap().clone();
    assert_eq!(left.len(), 1, "{}", listed.stdout);
    (gateway, left[0].clone())
}

#[test]
fn a_gateway_killed_between_dispatch_and_outcome_leaves_an_operation_that_blocks_only_its_agent() {
    let home = Home::new();
    let upstream = FrameUpstream::start(&home);
    let config = upstream.config("");
    let lead = home.token(&["--agent", "lead"]);
    let helper = home.delegate(&lead, "helper");
    let bystander = home.token(&["--agent", "bystander"]);
    let (gateway, op) = kill_between_dispatch_and_outcome(&home, &config, &lead);
    assert_eq!(op["target"], "mcp:frames:slow", "{op}");
    let id = op["op"].as_str().unwrap();
    let free = post(&gateway, &bystander, &call(5, "slow", 0.0));
    assert_answered(&free, "a bystander is not blocked");

    let refused = post(&gateway, &lead, &call(2, "slow", 0.0));
    assert_refused(
        &refused,
        "unresolved_operation",
        "lead is blocked",
        &[id, "agent lead", "stopline ops reconcile"],
    );
    let sub = post(&gateway, &helper, &call(3, "slow", 0.0));
    assert_refused(&sub, "unresolved_operation", "a sub-agent of lead", &[]);
    let other = post(&gateway, &lead, &call(4, "count", 0.0));
    assert_answered(&other, "another target is free");

    // Who it blocks is shown: ops list and status (JSON and text).
    assert_eq!(op["blocks"], "agent:lead", "{op}");
    assert_eq!(op["blocking"], true, "{op}");
    let status = home.status();
    assert_eq!(
        status["unresolved"]["destination"][0]["blocks"], "agent:lead",
        "{status}"
    );
    let text = home.command(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("blocks lead and its sub-agents"), "{text}");
    let listed = home
        .command(&["ops", "list", "--unresolved"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains(id) && listed.contains("blocks lead and its sub-agents"),
        "{listed}"
    );
}

#[test]
fn with_unresolved_blocks_everyone_an_operation_in_doubt_blocks_every_agent() {
    let home = Home::new();
    let upstream = FrameUpstream::start(&home);
    let config = upstream.config("unresolved_blocks = \"everyone\"");
    let lead = home.token(&["--agent", "lead"]);
    let bystander = home.token(&["--agent", "bystander"]);
    let (gateway, op) = kill_between_dispatch_and_outcome(&home, &config, &lead);
    let refused = post(&gateway, &bystander, &call(2, "slow", 0.0));
    assert_refused(
        &refused,
        "unresolved_operation",
        "a bystander is blocked too",
        &[
            op["op"].as_str().unwrap(),
            "every agent",
            "stopline ops reconcile",
        ],
    );
    assert!(
        upstream.received("tools/call").len() == 1,
        "only the first call ran"
    );
    assert_eq!(op["blocks"], "everyone", "{op}");
}

/// `ops list` is in the order the operations were prepared, oldest first, so the
/// quickstart's `tail -n 1` is the latest call (operation ids are random: sorted by id, eight
/// calls came back in time order once in 40320 runs).
#[test]
fn ops_list_is_oldest_first() {
    let frames = frames("", &["--agent", "lister"]);
    let (gateway, _upstream, home, token) = frames.parts();
    for id in 1..=8 {
        assert_answered(
            &post(gateway, token, &call(id, "echo", 0.0)),
            "a plain call",
        );
        // Each call prepared in a later millisecond than the one before.
        let before = ops(home, "mcp:frames:echo").len();
        assert_eq!(before, id as usize, "one operation per call");
        std::thread::sleep(Duration::from_millis(2));
    }
    let listed = home.run(&["ops", "list"]);
    listed.assert_ok();
    let prepared: Vec<i64> = listed.json()["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["prepared_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(prepared.len(), 8, "{prepared:?}");
    let mut sorted = prepared.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        prepared, sorted,
        "oldest first, each call its own millisecond"
    );
}
