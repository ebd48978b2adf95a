//! `stopline mcp proxy`: the Python `mcp` stdio client starts the proxy, which wraps the Node
//! reference server in stdio mode, against the local control directory (no gateway). A halt
//! refuses calls and lifts; an emergency kills the server by pid and the token stays dead after
//! the owner recovers.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod mcp_support;
mod util;

use mcp_support::*;
use serde_json::json;
use std::time::Duration;
use util::Home;

/// Start the Python client on `stopline mcp proxy` around server-everything (stdio).
fn proxied_client(home: &Home, token: &str) -> Driver {
    stdio_proxy(home, &[], token)
}

/// The wrapped server's pid: the client's child is the proxy, whose child is the server.
fn server_pid(client: &Driver) -> u32 {
    let mut pid = None;
    assert!(eventually(Duration::from_secs(5), || {
        pid = children_of(client.pid())
            .into_iter()
            .flat_map(children_of)
            .next();
        pid.is_some()
    }));
    pid.unwrap()
}

#[test]
fn python_stdio_client_through_the_proxy_is_stopped_and_stays_stopped_after_recovery() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let before = home.token(&["--agent", "worker"]);
    let mut client = proxied_client(&home, &before);
    assert!(client.list()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "echo"));
    assert_eq!(
        client.call("echo", json!({"message": "hi"}))["text"][0],
        "Echo: hi"
    );
    assert_eq!(
        client.call("toggle-simulated-logging", json!({}))["ok"],
        true
    );
    let ops = home.run(&["ops", "list"]).json()["operations"].clone();
    let recorded: Vec<_> = ops
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["target"] == "mcp:everything:toggle-simulated-logging")
        .collect();
    assert_eq!(recorded.len(), 1, "{ops}");
    assert_eq!(recorded[0]["outcome"], "committed");
    let server = server_pid(&client);

    // A halt refuses the next call without stopping the server; lifting it lets calls through.
    home.engage("agent:worker", "halt-all");
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "break_glass_contained"
    );
    assert!(alive(server), "a halt keeps the server");
    let lift = home.run(&[
        "disengage",
        "--scope",
        "agent:worker",
        "--reason",
        "resume",
        "--by",
        "operator",
    ]);
    lift.assert_ok();
    assert_eq!(
        client.call("echo", json!({"message": "again"}))["text"][0],
        "Echo: again"
    );

    // An emergency: the next call is refused and the server is stopped by pid.
    home.engage("agent:worker", "emergency");
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "stale_control_epoch"
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(server)),
        "the server {server} still runs"
    );

    recover(&home, "agent:worker");
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "stale_control_epoch"
    );
    assert_eq!(refusal_code(&client.list()), "stale_control_epoch");
    // A token minted after the recovery gets a working proxy.
    let after = home.token(&["--agent", "worker"]);
    let mut fresh = proxied_client(&home, &after);
    assert_eq!(
        fresh.call("echo", json!({"message": "back"}))["text"][0],
        "Echo: back"
    );
}

#[test]
fn a_forged_token_never_starts_the_server() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let token = home.token(&["--agent", "worker"]);
    let forged = format!("{}x", &token[..token.len() - 1]);
    let token_file = home.dir.path().join("forged");
    std::fs::write(&token_file, forged).unwrap();
    let python = python();
    let everything = everything();
    let output = std::process::Command::new(python)
        .arg(script("mcp_driver.py"))
        .args([
            "stdio",
            util::bin(),
            "--home",
            home.path().to_str().unwrap(),
            "mcp",
            "proxy",
            "--token-file",
        ])
        .arg(&token_file)
        .args(["--", "node", everything.to_str().unwrap(), "stdio"])
        .env_remove("STOPLINE_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("token_invalid"), "{stderr}");
}

#[test]
fn the_proxy_forwards_only_what_it_parsed_and_admitted_re_serialized() {
    use std::io::{BufRead, BufReader, Write};
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    std::fs::write(
        home.file("config.toml"),
        "[mcp.rec]\ncommand = [\"unused\"]\nallowed_tools = [\"allowed\"]\n",
    )
    .unwrap();
    let token = home.token(&["--agent", "worker"]);
    let log = home.dir.path().join("received.log");
    let python = python();
    let proxy = home
        .command(&[
            "mcp",
            "proxy",
            "--name",
            "rec",
            "--token",
            &token,
            "--",
            python.to_str().unwrap(),
            script("recording_server.py").to_str().unwrap(),
            log.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut proxy = Proc {
        child: proxy,
        name: "mcp proxy",
    };
    let mut stdin = proxy.child.stdin.take().unwrap();
    let mut stdout = BufReader::new(proxy.child.stdout.take().unwrap());
    // Send `line` (nothing when empty) and read one reply line.
    let mut exchange = |line: &str| -> serde_json::Value {
        if !line.is_empty() {
            writeln!(stdin, "{line}").unwrap();
        }
        let mut reply = String::new();
        stdout.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}"))
    };
    let init = exchange(
        r#"{ "jsonrpc" : "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}, "smuggled": "x" }"#,
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "recording", "{init}");
    let garbage = exchange("{not json");
    assert_eq!(
        (garbage["error"]["code"].as_i64(), garbage["id"].is_null()),
        (Some(-32700), true),
        "{garbage}"
    );
    let batch = exchange(
        r#"[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"allowed"}},{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"forbidden"}}]"#,
    );
    // The refusal is answered at once; the admitted member's answer follows from the server.
    assert_eq!(batch["id"], 3, "{batch}");
    assert_eq!(
        batch["error"]["data"]["code"], "tool_not_allowed",
        "{batch}"
    );
    let answered = exchange("");
    assert_eq!(
        answered["id"], 2,
        "a member is answered on its own: {answered}"
    );
    // Frames that cannot be governed are answered here and never forwarded (docs/reference.md §8).
    for refused in [
        r#"[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"allowed"}},{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"allowed"}}]"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"allowed"}}"#,
    ] {
        let error = exchange(refused);
        assert_eq!(
            (error["error"]["code"].as_i64(), error["id"].is_null()),
            (Some(-32600), true),
            "{refused}: {error}"
        );
    }
    let pair = exchange(
        r#"[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"allowed"}},{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"allowed"}}]"#,
    );
    let second = exchange("");
    let mut ids = [pair["id"].as_i64(), second["id"].as_i64()];
    ids.sort();
    assert_eq!(ids, [Some(5), Some(6)], "{pair} {second}");
    drop(stdin);
    let _ = proxy.child.wait();
    let received = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = received.lines().collect();
    assert_eq!(
        lines,
        [
            r#"{"id":1,"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
            r#"{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"name":"allowed"}}"#,
            r#"{"id":5,"jsonrpc":"2.0","method":"tools/call","params":{"name":"allowed"}}"#,
            r#"{"id":6,"jsonrpc":"2.0","method":"tools/call","params":{"name":"allowed"}}"#,
        ],
        "the server saw exactly the re-serialized, admitted messages, one by one"
    );
}

#[test]
fn with_stopline_url_the_proxy_asks_the_gateway_and_stops_the_server_on_an_emergency() {
    let home = Home::new();
    let (_gateway, url) = gateway(&home, "");
    let token = home.token(&["--agent", "remote-worker"]);
    let mut client = stdio_proxy_env(&home, &[], &token, &[("STOPLINE_URL", url.as_str())]);
    assert_eq!(
        client.call("echo", json!({"message": "remote"}))["text"][0],
        "Echo: remote"
    );
    let server = server_pid(&client);
    home.engage("agent:remote-worker", "emergency");
    assert!(
        eventually(Duration::from_secs(5), || !alive(server)),
        "the server {server} still runs"
    );
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "x"}))),
        "stale_control_epoch"
    );
}

#[test]
fn a_signalled_proxy_stops_its_server_first() {
    use std::io::{BufRead, BufReader, Write};
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let token = home.token(&["--agent", "worker"]);
    let log = home.dir.path().join("received.log");
    let python = python();
    let child = home
        .command(&[
            "mcp",
            "proxy",
            "--token",
            &token,
            "--",
            python.to_str().unwrap(),
        ])
        .arg(script("recording_server.py"))
        .arg(&log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut proxy = Proc {
        child,
        name: "mcp proxy",
    };
    let mut stdin = proxy.child.stdin.take().unwrap();
    let mut stdout = BufReader::new(proxy.child.stdout.take().unwrap());
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18"}}}}"#).unwrap();
    let mut reply = String::new();
    stdout.read_line(&mut reply).unwrap();
    assert!(reply.contains("recording"), "{reply}");
    let server = children_of(proxy.pid())[0];
    assert!(alive(server));
    let pid = rustix::process::Pid::from_raw(proxy.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = proxy.child.wait().unwrap();
    assert!(!status.success());
    assert!(
        eventually(Duration::from_secs(5), || !alive(server)),
        "the server {server} outlived its proxy"
    );
}

#[test]
fn closing_the_agents_stdin_closes_the_servers_so_it_ends_on_its_own() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let token = home.token(&["--agent", "worker"]);
    let token_file = home.dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let marker = home.dir.path().join("eof");
    // A server that reads to end of input, then records that it saw it and exits 0.
    let server = format!("cat > /dev/null; echo seen > '{}'", marker.display());
    let mut proxy = home
        .command(&[
            "mcp",
            "proxy",
            "--name",
            "eof",
            "--token-file",
            token_file.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &server,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = proxy.stdin.take().unwrap();
        // The first request starts the server.
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
    } // the agent closes its stdin
    let status = proxy.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("seen\n"),
        "the server never saw its input end (it was killed instead)"
    );
}

#[test]
fn an_exhausted_tool_call_budget_trips_the_agents_breaker_by_its_kind_with_a_valid_record() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let token = home.token(&["--agent", "spender", "--budget", "tool_calls=1"]);
    let mut client = proxied_client(&home, &token);
    assert_eq!(
        client.call("echo", json!({"message": "one"}))["text"][0],
        "Echo: one"
    );
    assert_eq!(
        refusal_code(&client.call("echo", json!({"message": "two"}))),
        "budget_exhausted"
    );
    // The latch is named after the breaker kind, as every surface names it (docs/reference.md §8:
    // `breaker:<kind>`), not after the budget that ran out.
    let status = home.status();
    let latch = status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["scope"] == "agent:spender")
        .unwrap_or_else(|| panic!("no breaker latch: {status}"))
        .clone();
    assert_eq!(latch["by"], "breaker:budget_exhausted", "{latch}");
    let records = home.valid_evidence();
    let record = records
        .iter()
        .find(|r| r["agent"] == "spender")
        .unwrap_or_else(|| panic!("no evidence record: {records:?}"));
    assert_eq!(
        (
            record["kind"].as_str(),
            record["breaker"].as_str(),
            record["trigger"].as_str(),
            record["latch"].as_str()
        ),
        (
            Some("budget_exhausted"),
            Some("budget_exhausted"),
            Some("tool_calls"),
            latch["id"].as_str()
        ),
        "{record}"
    );
}
