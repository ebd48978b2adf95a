//! The gateway's log: `serve` logs every refusing admission decision, stream cut,
//! breaker trip, acknowledgement and control-state fault through `tracing` with the fields
//! `agent`, `route`, `code` and `latency_ms`; `--log-format json` writes one JSON object a
//! line; `RUST_LOG` chooses what is logged; a tool server's stderr lines are prefixed with its
//! name. The real binary, the real reference MCP server and the Python `mcp` client.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod mcp_support;
mod util;

use mcp_support::{eventually, everything, free_port, wait_port, Driver, Proc};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use util::Home;

/// `stopline serve` with `[mcp.local]`: the reference server behind a shell that first says
/// something on stderr. The gateway's stderr goes to `<dir>/gateway.log`.
fn serve(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (Proc, String, PathBuf) {
    let port = free_port();
    std::fs::create_dir_all(home.path()).unwrap();
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\nreload_interval_ms = 200\nmonitors = [\"safety-monitor\"]\n\
         [mcp.local]\ncommand = [\"sh\", \"-c\", \"echo 'the tool server says hello' >&2; exec node {} stdio\"]\n",
        everything().display()
    );
    std::fs::write(home.file("config.toml"), config).unwrap();
    let log = home.dir.path().join("gateway.log");
    let mut full = vec!["serve"];
    full.extend_from_slice(args);
    let mut command = home.command(&full);
    command
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let child = command.spawn().expect("stopline serve");
    wait_port(port, "the gateway");
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        eventually(Duration::from_secs(30), || {
            std::process::Command::new("curl")
                .args(["-sf", &format!("http://127.0.0.1:{port}/healthz")])
                .output()
                .is_ok_and(|o| o.status.success())
        }),
        "the gateway became healthy"
    );
    (
        Proc {
            child,
            name: "gateway",
        },
        url,
        log,
    )
}

fn events(log: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line of the JSON log is not JSON ({e}): {line}"))
        })
        .collect()
}

fn find(log: &PathBuf, what: impl Fn(&Value) -> bool) -> Value {
    let mut found = None;
    eventually(Duration::from_secs(30), || {
        found = events(log).into_iter().find(|e| what(e));
        found.is_some()
    });
    found.unwrap_or_else(|| {
        panic!(
            "no such event in the log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    })
}

fn message(event: &Value) -> &str {
    event["message"].as_str().unwrap_or_default()
}

#[test]
fn the_json_log_names_agent_route_code_and_latency_of_every_refusal_cut_trip_ack_and_fault() {
    let home = Home::new();
    let (_gateway, url, log) = serve(&home, &["--log-format", "json"], &[]);
    let token = home.token(&["--agent", "busy"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    assert_eq!(client.list()["ok"], true);

    // The tool server's stderr, prefixed with its name.
    let said = find(&log, |e| message(e).contains("the tool server says hello"));
    assert_eq!(
        message(&said),
        "[local] the tool server says hello",
        "{said}"
    );
    assert_eq!(said["server"], "local", "{said}");

    // A stream cut: a running call answered at once by an emergency; then its acknowledgement.
    let answer = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            client.call(
                "trigger-long-running-operation",
                json!({"duration": 3, "steps": 3}),
            )
        });
        assert!(
            eventually(Duration::from_secs(30), || home
                .run(&["ops", "list"])
                .json()["operations"]
                .as_array()
                .is_some_and(|ops| ops.iter().any(|o| o["dispatched"] == true))),
            "the call reached the server"
        );
        home.engage("agent:busy", "emergency");
        call.join().unwrap()
    });
    assert_eq!(answer["data"]["code"], "break_glass_contained", "{answer}");
    let cut = find(&log, |e| message(e).starts_with("stream cut"));
    assert_eq!(cut["agent"], "busy", "{cut}");
    assert_eq!(cut["route"], "/mcp/local", "{cut}");
    assert_eq!(cut["code"], "break_glass_contained", "{cut}");
    assert!(
        cut["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{cut}"
    );
    assert_eq!(cut["level"], "WARN", "{cut}");
    let ack = find(&log, |e| message(e) == "latch acknowledged");
    assert!(
        ack["latch"]
            .as_str()
            .is_some_and(|l| l.starts_with("latch_")),
        "{ack}"
    );
    assert!(ack["latency_ms"].is_number(), "{ack}");

    // A refusing admission decision: the stopped agent's next call.
    let refused = client.call("echo", json!({"message": "hi"}));
    assert_eq!(refused["ok"], false, "{refused}");
    let event = find(&log, |e| {
        message(e).starts_with("call refused") && e["operation"] == "mcp:local:echo"
    });
    assert_eq!(event["agent"], "busy", "{event}");
    assert_eq!(event["route"], "/mcp/local", "{event}");
    assert_eq!(event["code"], refused["data"]["code"], "{event}");
    assert!(event["latency_ms"].is_number(), "{event}");

    // A token that does not verify.
    let reply = stopline_testkit_free_post(&url, "/v1/chat/completions", "not-a-token");
    assert_eq!(reply, 401);
    let event = find(&log, |e| message(e).starts_with("caller refused"));
    assert_eq!(event["code"], "token_invalid", "{event}");
    assert_eq!(event["route"], "/v1/chat/completions", "{event}");

    // A breaker trip.
    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let status = curl_post(
        &url,
        "/v1/anomaly",
        &monitor,
        &json!({"agent": "reviewer", "score": 0.97}),
    );
    assert_eq!(status, 200);
    let trip = find(&log, |e| message(e) == "ALERT: breaker tripped");
    assert_eq!(trip["agent"], "reviewer", "{trip}");
    assert_eq!(trip["route"], "/v1/anomaly", "{trip}");
    assert_eq!(trip["kind"], "anomaly_score", "{trip}");

    // A fault in the control state the view reads: a torn WAL tail.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(home.file("breakglass.wal.jsonl"))
        .unwrap()
        .write_all(br#"{"seq": 99, "kind": "torn"#)
        .unwrap();
    let fault = find(&log, |e| message(e).starts_with("control state fault"));
    assert_eq!(fault["code"], "control_wal_corrupt", "{fault}");
    assert_eq!(fault["level"], "ERROR", "{fault}");
    // Every line was one JSON object (events() panics otherwise).
    assert!(events(&log).len() >= 6);
}

#[test]
fn rust_log_chooses_what_the_text_log_shows() {
    let home = Home::new();
    let (_gateway, url, log) = serve(&home, &[], &[("RUST_LOG", "warn,tool_server=info")]);
    let token = home.token(&["--agent", "worker"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    home.engage("agent:worker", "halt-all");
    let refused = client.call("echo", json!({"message": "hi"}));
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        eventually(Duration::from_secs(30), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("[local] the tool server says hello"))),
        "the tool server's line, prefixed: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.trim_start().starts_with('{'),
        "text, not JSON: {text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes in a file: {text}"
    );
    // info-level events are not shown at RUST_LOG=warn (the default would show them).
    assert!(!text.contains("call refused"), "{text}");
    assert!(!text.contains("listening"), "{text}");
}

/// POST `body` with a bearer `token`; the HTTP status.
fn curl_post(url: &str, path: &str, token: &str, body: &Value) -> u16 {
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .arg(format!("{url}{path}"))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

fn stopline_testkit_free_post(url: &str, path: &str, token: &str) -> u16 {
    curl_post(url, path, token, &json!({"model": "m", "messages": []}))
}

/// The series docs/runbook.md lists for Grafana (its "Metrics" table: lines starting
/// ``| `stopline_``), each with its type.
fn listed_series() -> Vec<(String, String)> {
    let runbook = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/runbook.md"),
    )
    .unwrap();
    runbook
        .lines()
        .filter(|l| l.starts_with("| `stopline_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1]
                    .trim_matches('`')
                    .split('{')
                    .next()
                    .unwrap()
                    .to_string(),
                cells[2].to_string(),
            )
        })
        .collect()
}

#[test]
fn every_series_the_guide_lists_is_in_a_live_metrics_scrape() {
    let listed = listed_series();
    assert!(listed.len() >= 12, "{listed:?}");
    let home = Home::new();
    let (_gateway, url, _log) = serve(&home, &[], &[]);
    // Samples for every family: an allowed call on a budget, a refused one, a trip.
    let token = home.token(&["--agent", "worker", "--budget", "tool_calls=10"]);
    let mut client = Driver::start(&["http", &format!("{url}/mcp/local"), &token], &[]);
    assert_eq!(client.call("echo", json!({"message": "hi"}))["ok"], true);
    home.engage("agent:worker", "halt-all");
    assert_eq!(client.call("echo", json!({"message": "hi"}))["ok"], false);
    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let body = json!({"agent": "reviewer", "score": 0.97});
    assert_eq!(curl_post(&url, "/v1/anomaly", &monitor, &body), 200);
    let mut scrape = String::new();
    let all_there = eventually(Duration::from_secs(20), || {
        let out = std::process::Command::new("curl")
            .args(["-sf", &format!("{url}/metrics")])
            .output()
            .expect("curl");
        scrape = String::from_utf8_lossy(&out.stdout).into_owned();
        listed.iter().all(|(name, _)| {
            scrape
                .lines()
                .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        })
    });
    for (name, kind) in &listed {
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .fold(name.as_str(), |n, suffix| {
                n.strip_suffix(suffix).unwrap_or(n)
            });
        assert!(
            scrape.contains(&format!("# TYPE {family} {kind}")),
            "{name} is listed as a {kind}:\n{scrape}"
        );
    }
    assert!(
        all_there,
        "a listed series is missing from:\n{scrape}\nlisted: {listed:?}"
    );
}
