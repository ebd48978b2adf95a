//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! package.json, run by the Node 22 of the npm package `node`: the runner needs `fs.globSync`,
//! which the system's Node 20 lacks) against the MCP reference server of `node_modules`
//! (`@modelcontextprotocol/server-everything`) three ways: directly on its Streamable HTTP
//! endpoint, and through `stopline serve` with the same server as an HTTP upstream
//! (`[mcp.everything] url`) and started by the gateway over stdio (`[mcp.local] command`). Every
//! server scenario of the suite (`--suite all`, pending ones included) runs each way, and every
//! check of every scenario must end the same way through the gateway as directly: a proxy that
//! drops a notification, a sampling or elicitation round trip, a content block or an SSE event
//! turns a check that passes directly into one that fails through it.
//!
//! The reference server of npm is not the suite's own test server (that one lives in the suite's
//! repository, not in its npm package): it lacks the suite's `test_*` tools, prompts and
//! resources and its completion handler, so these scenarios fail directly and must fail the same
//! way through the gateway (same check, same error message): `completion-complete`,
//! `tools-call-{image,audio,embedded-resource,mixed-content,with-logging,with-progress,sampling,
//! elicitation}`, `json-schema-2020-12`, `elicitation-sep1034-defaults`,
//! `elicitation-sep1330-enums`, `server-sse-polling`, `resources-read-{text,binary}`,
//! `resources-templates-read`, `prompts-get-{simple,with-args,embedded-resource,with-image}`.
//! [`PASS_DIRECTLY`] names the scenarios that pass directly, so a broken runner (no scenarios,
//! nothing passing) cannot make the comparison hold vacuously.
//!
//! One scenario differs by design: `dns-rebinding-protection` sends `Host`/`Origin:
//! evil.example.com`. The reference server accepts it (its check fails directly); the gateway
//! refuses an `Origin` outside `allowed_origins` (docs/reference.md §8), so through the gateway
//! every check of that scenario must pass.
//!
//! The runner cannot send a header, and the gateway needs the agent's token: a small forwarder
//! (in this file) adds `Authorization: Bearer <token>` to each request and passes everything else
//! through byte for byte, SSE streams unbuffered. It serves one request per connection
//! (`Connection: close` replaces the client's `Connection`), so no request can reach the
//! gateway without the token.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod mcp_support;
mod util;

use mcp_support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use util::Home;

/// The scenarios the npm reference server passes directly (every check).
const PASS_DIRECTLY: &[&str] = &[
    "server-initialize",
    "logging-set-level",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
];

/// The scenario the gateway passes and the reference server fails: the gateway checks `Origin`.
const GATEWAY_STRICTER: &str = "dns-rebinding-protection";

/// Node 22 from the npm package `node` (package.json), not the system's.
fn node22() -> PathBuf {
    let node = repo().join("node_modules/node/bin/node");
    assert!(
        node.exists(),
        "{} is missing: run npm ci at the repository root",
        node.display()
    );
    let version = Command::new(&node).arg("--version").output().expect("node");
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with("v22."),
        "{} is {version}, not Node 22",
        node.display()
    );
    node
}

/// The suite's runner.
fn runner() -> PathBuf {
    let entry = repo().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        entry.exists(),
        "{} is missing: run npm ci at the repository root",
        entry.display()
    );
    entry
}

/// Every server scenario the runner knows (`conformance list --server`).
fn scenarios() -> Vec<String> {
    let out = Command::new(node22())
        .arg(runner())
        .args(["list", "--server"])
        .output()
        .expect("conformance list");
    assert!(out.status.success(), "conformance list: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.split_whitespace().next().unwrap_or("").to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

/// One check's outcome: its status and its error message (a failure's reason).
type Outcome = (String, String);

/// Run every server scenario against `url`; per scenario, its checks by id.
fn run_suite(
    url: &str,
    scenarios: &[String],
    out: &Path,
) -> BTreeMap<String, BTreeMap<String, Outcome>> {
    std::fs::create_dir_all(out).unwrap();
    let run = Command::new(node22())
        .arg(runner())
        .args(["server", "--suite", "all", "--url", url, "-o"])
        .arg(out)
        .output()
        .expect("conformance server");
    // The runner exits non-zero when a check fails; the results are in `out`.
    let log = String::from_utf8_lossy(&run.stdout).into_owned();
    let dirs: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut results = BTreeMap::new();
    for scenario in scenarios {
        // `server-<scenario>-<timestamp>`, the timestamp `2026-12-07T13-57-16-957Z`.
        let prefix = format!("server-{scenario}-");
        let dir = dirs
            .iter()
            .find(|d| d.strip_prefix(&prefix).is_some_and(|t| t.len() == 24))
            .unwrap_or_else(|| panic!("no result for {scenario} against {url}:\n{log}"));
        let checks: Value =
            serde_json::from_slice(&std::fs::read(out.join(dir).join("checks.json")).unwrap())
                .unwrap();
        let checks = checks
            .as_array()
            .unwrap_or_else(|| panic!("{scenario}: checks.json is not a list: {checks}"))
            .iter()
            .map(|c| {
                let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (text("id"), (text("status"), text("errorMessage")))
            })
            .collect::<BTreeMap<_, _>>();
        assert!(!checks.is_empty(), "{scenario} ran no check against {url}");
        results.insert(scenario.clone(), checks);
    }
    results
}

fn passed(checks: &BTreeMap<String, Outcome>) -> bool {
    checks.values().all(|(status, _)| status == "SUCCESS")
}

/// Listen on a loopback port and forward each connection to `target` with the agent's token.
fn token_forwarder(target: SocketAddr, token: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let token = token.clone();
            std::thread::spawn(move || {
                let _ = forward(client, target, &token);
            });
        }
    });
    port
}

/// One request: its head rewritten (`Authorization` added, `Connection: close`), then the bytes
/// of both directions copied as they come until either side closes.
fn forward(mut client: TcpStream, target: SocketAddr, token: &str) -> io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        let n = client.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let text = std::str::from_utf8(&head[..end]).map_err(io::Error::other)?;
    let mut lines = text.split("\r\n");
    let mut rewritten = format!("{}\r\n", lines.next().unwrap_or_default());
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        if !name.eq_ignore_ascii_case("connection") && !name.eq_ignore_ascii_case("authorization") {
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
    }
    rewritten.push_str(&format!(
        "Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ));
    let mut server = TcpStream::connect(target)?;
    server.write_all(rewritten.as_bytes())?;
    server.write_all(&head[end + 4..])?;
    let (mut from_client, mut to_server) = (client.try_clone()?, server.try_clone()?);
    let upload = std::thread::spawn(move || {
        let _ = io::copy(&mut from_client, &mut to_server);
        let _ = to_server.shutdown(Shutdown::Both);
    });
    let _ = io::copy(&mut server, &mut client);
    let _ = client.shutdown(Shutdown::Both);
    let _ = upload.join();
    Ok(())
}

#[test]
fn the_official_conformance_suite_ends_the_same_through_the_gateway_as_directly() {
    let scenarios = scenarios();
    assert!(
        scenarios.len() > PASS_DIRECTLY.len(),
        "the runner lists too few server scenarios: {scenarios:?}"
    );
    for scenario in PASS_DIRECTLY.iter().chain([&GATEWAY_STRICTER]) {
        assert!(
            scenarios.iter().any(|s| s == scenario),
            "the runner no longer has {scenario}: {scenarios:?}"
        );
    }

    let home = Home::new();
    let results = home.dir.path().join("results");

    let (direct_server, direct_port) = everything_http();
    let direct = run_suite(
        &format!("http://127.0.0.1:{direct_port}/mcp"),
        &scenarios,
        &results.join("direct"),
    );
    drop(direct_server);
    for scenario in PASS_DIRECTLY {
        assert!(
            passed(&direct[*scenario]),
            "{scenario} fails directly against the reference server: {:?}",
            direct[*scenario]
        );
    }
    assert!(
        !passed(&direct[GATEWAY_STRICTER]),
        "the reference server now refuses a foreign Origin itself: {:?}",
        direct[GATEWAY_STRICTER]
    );

    let (upstream, upstream_port) = everything_http();
    let (gateway, url) = gateway(
        &home,
        &format!(
            "[mcp.everything]\nurl = \"http://127.0.0.1:{upstream_port}/mcp\"\n\
             [mcp.local]\ncommand = [\"node\", \"{}\", \"stdio\"]\n",
            everything().display()
        ),
    );
    let target: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let token = home.token(&["--agent", "conformance"]);
    let forwarder = token_forwarder(target, token);

    for route in ["everything", "local"] {
        let through = run_suite(
            &format!("http://127.0.0.1:{forwarder}/mcp/{route}"),
            &scenarios,
            &results.join(route),
        );
        let checks: usize = through.values().map(BTreeMap::len).sum();
        let passing = through.values().filter(|c| passed(c)).count();
        eprintln!(
            "[mcp.{route}]: {} scenarios, {checks} checks, {passing} scenarios pass (directly: {})",
            through.len(),
            direct.values().filter(|c| passed(c)).count()
        );
        let mut differ = Vec::new();
        for scenario in &scenarios {
            let (direct, through) = (&direct[scenario], &through[scenario]);
            if scenario == GATEWAY_STRICTER {
                if !passed(through) {
                    differ.push(format!("{scenario}: {through:?}"));
                }
            } else if direct != through {
                differ.push(format!(
                    "{scenario}:\n  directly: {direct:?}\n  through:  {through:?}"
                ));
            }
        }
        assert!(
            differ.is_empty(),
            "through the gateway ([mcp.{route}]) these scenarios end differently than directly:\n{}",
            differ.join("\n")
        );
    }
    drop(gateway);
    drop(upstream);
}
