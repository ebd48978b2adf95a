//! The stdio tool servers the gateway starts (`[mcp.<server>] command`, docs/reference.md §6), tried with
//! the attacks that broke them: the reference server's `get-env` tool, called by an agent
//! through the gateway, shows no provider key (only `PATH`, `HOME`, `LANG` and the configured
//! `env` reach it); the server runs under a uid of its own in a cgroup (and an IPC namespace) of
//! its own; and it ends
//! with its session — when an agent that never said goodbye stops talking (`session_idle_s`) and
//! at an EMERGENCY covering its agent — instead of living on after the agent was killed. With
//! `warm_spare` (the default) a session takes a server started ahead, and every such spare
//! serves one agent only.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod mcp_support;
mod util;

use mcp_support::{alive, children_of, eventually, everything, free_port, Driver, Proc};
use serde_json::{json, Value};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};
use util::Home;

/// `stopline serve` with `[mcp.local]` running the reference server over stdio, the upstream
/// key in its environment (as a real gateway has it).
fn gateway(home: &Home, extra: &str) -> (Proc, String) {
    gateway_with_env(home, extra, &[])
}

/// [`gateway`] with extra environment (e.g. `STOPLINE_FAILPOINTS`).
fn gateway_with_env(home: &Home, extra: &str, env: &[(&str, &str)]) -> (Proc, String) {
    let port = free_port();
    std::fs::create_dir_all(home.path()).unwrap();
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n[mcp.local]\ncommand = [\"node\", \"{}\", \"stdio\"]\n{extra}\n",
        everything().display()
    );
    std::fs::write(home.file("config.toml"), config).unwrap();
    let child = home
        .command(&["serve"])
        .env("UPSTREAM_API_KEY", "sk-upstream-secret")
        .env("OPENAI_API_KEY", "sk-openai-secret")
        .env("LANG", "C.UTF-8")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("stopline serve");
    let proc = Proc {
        child,
        name: "gateway",
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n");
            let mut reply = String::new();
            let _ = std::io::Read::read_to_string(&mut stream, &mut reply);
            if reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200") {
                return (proc, format!("http://127.0.0.1:{port}"));
            }
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn the_server(gateway: &Proc) -> u32 {
    let servers = children_of(gateway.pid());
    assert_eq!(servers.len(), 1, "one server for the session: {servers:?}");
    servers[0]
}

#[test]
fn a_tool_server_gets_no_provider_key_and_runs_as_its_own_uid_in_its_own_group() {
    let home = Home::new();
    let (gateway, url) = gateway(
        &home,
        "env = { SERVER_MODE = \"test\" }\nwarm_spare = false",
    );
    let token = home.token(&["--agent", "worker"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    let reply = client.call("get-env", json!({}));
    let text = reply["text"][0].as_str().unwrap_or_default().to_string();
    let env: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {reply}"));
    let mut names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort();
    assert!(
        !text.contains("sk-upstream-secret") && !text.contains("sk-openai-secret"),
        "{text}"
    );
    assert_eq!(names, ["HOME", "LANG", "PATH", "SERVER_MODE"], "{text}");

    let server = the_server(&gateway);
    let uid = status_uid(server);
    assert!(
        (61184..=65519).contains(&uid),
        "the server runs as uid {uid}"
    );
    let cgroup = std::fs::read_to_string(format!("/proc/{server}/cgroup")).unwrap();
    assert!(cgroup.contains("/stopline-mcp-local-"), "{cgroup}");
    // An IPC namespace of its own: no SysV object of a uid's last holder reaches it (docs/reference.md §6).
    let ipc = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/ipc")).unwrap();
    assert_ne!(
        ipc(server),
        ipc(gateway.pid()),
        "the server shares the gateway's IPC namespace"
    );
    assert_eq!(client.send(json!({"op": "quit"}))["ok"], true);
    assert!(
        eventually(Duration::from_secs(10), || !alive(server)),
        "the session's server still runs"
    );
}

#[test]
fn a_tool_server_ends_when_its_agent_goes_silent() {
    let home = Home::new();
    // The idle bound's end is held (a failpoint) until the test has seen the server: under load
    // 2 s can pass between the session's start and the test's look, and the server was gone
    // before it was looked at ("one server for the session: []").
    let hold = home.dir.path().join("hold-idle-end");
    std::fs::write(&hold, "").unwrap();
    let failpoints = format!("mcp.stdio.idle_end=hold_if:{}", hold.display());
    let (gateway, url) = gateway_with_env(
        &home,
        "session_idle_s = 2\nwarm_spare = false",
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    // An agent killed without ending its session (no DELETE): the idle bound ends the server.
    let token = home.token(&["--agent", "gone"]);
    let client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    let server = the_server(&gateway);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(client.pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    std::fs::remove_file(&hold).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || !alive(server)),
        "the server outlived its silent session"
    );
}

#[test]
fn a_tool_server_ends_at_an_emergency_covering_its_agent() {
    let home = Home::new();
    let (gateway, url) = gateway(&home, "warm_spare = false");
    let token = home.token(&["--agent", "busy"]);
    let bystander_token = home.token(&["--agent", "bystander"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    assert_eq!(
        client.call("echo", json!({"message": "up"}))["text"][0],
        "Echo: up"
    );
    let server = the_server(&gateway);
    let mut bystander = Driver::start(
        &["http", &format!("{url}/mcp/local"), &bystander_token],
        &[],
    );
    home.engage("agent:busy", "emergency");
    assert!(
        eventually(Duration::from_secs(30), || !alive(server)),
        "the server of a stopped agent still runs"
    );
    // Another agent's session and server are untouched.
    assert_eq!(
        bystander.call("echo", json!({"message": "still here"}))["text"][0],
        "Echo: still here"
    );
    assert_eq!(children_of(gateway.pid()).len(), 1);
}

/// docs/reference.md §6: at an emergency the stopped agent's waiting call is answered at once and the
/// gateway-started server is ended at once, its call or not (`cut_outcome_wait_s` is for
/// upstreams the gateway does not own): the call's operation is left in doubt, never committed.
#[test]
fn an_emergency_answers_a_running_call_at_once_and_ends_its_server_leaving_the_call_in_doubt() {
    let home = Home::new();
    let (gateway, url) = gateway(&home, "warm_spare = false");
    let token = home.token(&["--agent", "busy"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    assert_eq!(client.list()["ok"], true);
    let server = the_server(&gateway);
    let target = "mcp:local:trigger-long-running-operation";
    let ops = |home: &Home| -> Vec<Value> {
        home.run(&["ops", "list"]).json()["operations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o["target"] == target)
            .collect()
    };
    let answer = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            client.call(
                "trigger-long-running-operation",
                json!({"duration": 20, "steps": 20}),
            )
        });
        assert!(
            eventually(Duration::from_secs(30), || ops(&home)
                .iter()
                .any(|o| o["dispatched"] == true)),
            "the call reached the server"
        );
        home.engage("agent:busy", "emergency");
        call.join().unwrap()
    });
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["data"]["code"], "break_glass_contained", "{answer}");
    assert!(
        eventually(Duration::from_secs(2), || !alive(server)),
        "the server of a stopped agent ends at once, though its call runs"
    );
    assert!(
        eventually(Duration::from_secs(30), || ops(&home)
            .first()
            .is_some_and(|o| o["in_doubt"] == true && o["outcome"].is_null())),
        "the call was left in doubt: {:?}",
        ops(&home)
    );
}

/// The start time of `pid` (field 22 of `/proc/<pid>/stat`).
fn started_at(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

/// True once `pid` runs the server's own program (before its exec, a child forked by the
/// gateway still has the gateway's uid and command line).
fn execed(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("index.js"))
}

/// The gateway's children once there are `n`, each running the server, oldest first.
fn servers(gateway: &Proc, n: usize) -> Vec<u32> {
    let mut found = Vec::new();
    let there = eventually(Duration::from_secs(30), || {
        found = children_of(gateway.pid());
        found.len() == n && found.iter().all(|pid| execed(*pid))
    });
    assert!(there, "expected {n} tool servers, found {found:?}");
    found.sort_by_key(|pid| started_at(*pid));
    found
}

/// `initialize` on `/mcp/local` as `token`: the session id the gateway answers with.
fn open_session(url: &str, token: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let reply = gw::http_with(
        addr,
        "POST",
        "/mcp/local",
        Some(token),
        Some(&init),
        &[("Accept", "application/json, text/event-stream")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("serverInfo"), "{}", reply.body);
    reply.header("mcp-session-id").unwrap().to_string()
}

/// The group a session's server lives in is named after the session.
fn serves(pid: u32, session: &str) -> bool {
    cgroup_of(pid).contains(&format!("/stopline-mcp-local-{}", &session[..12]))
}

#[test]
fn a_session_takes_the_warm_spare_and_each_agent_gets_a_server_of_its_own() {
    let home = Home::new();
    let (gateway, url) = gateway(&home, "");
    // Before any session, one server is started ahead, in a group and under a uid of its own.
    let spare = servers(&gateway, 1)[0];
    assert!(
        cgroup_of(spare).contains("/stopline-mcp-local-"),
        "{}",
        cgroup_of(spare)
    );
    assert!((61184..=65519).contains(&status_uid(spare)));

    // The first agent's session is that server; a fresh spare is started for the next one.
    let first = open_session(&url, &home.token(&["--agent", "first"]));
    let [a, next] = servers(&gateway, 2)[..] else {
        unreachable!()
    };
    assert_eq!(a, spare, "the session took the server started ahead");
    assert!(serves(a, &first), "{}", cgroup_of(a));
    assert!(!serves(next, &first), "the new spare serves no session yet");

    // The second agent gets that spare, never the first agent's server.
    let second = open_session(&url, &home.token(&["--agent", "second"]));
    assert_ne!(first, second);
    let [a2, b, _spare] = servers(&gateway, 3)[..] else {
        unreachable!()
    };
    assert_eq!((a2, b), (a, next));
    assert!(serves(b, &second) && !serves(b, &first), "{}", cgroup_of(b));
    assert_ne!(
        status_uid(a),
        status_uid(b),
        "each agent's server has a uid of its own"
    );

    // An emergency covering the first agent ends its server only.
    home.engage("agent:first", "emergency");
    assert!(
        eventually(Duration::from_secs(10), || !alive(a)),
        "the stopped agent's server still runs"
    );
    assert!(alive(b), "the other agent's server ended too");
}
