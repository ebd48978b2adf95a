//! `stopline mcp proxy` (the stdio governor, no gateway) with `--control etcd://…`: a stop
//! engaged on another host through etcd refuses the proxied server's calls on this host, its
//! lifting lets them through again, and while etcd cannot be read noncritical calls are refused
//! `distributed_unavailable` until it answers. The Python `mcp` stdio client, the Node reference
//! server, a real etcd on loopback.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod mcp_support;
mod util;

use mcp_support::*;
use serde_json::json;
use std::time::Duration;
use util::Home;

/// A host: its own home (every command below names the same etcd).
fn host() -> Home {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    home
}

fn echo(client: &mut Driver) -> serde_json::Value {
    client.call("echo", json!({"message": "hi"}))
}

/// The refusal code of a refused call, `None` for one that went through (no assertion, for
/// polling across a change).
fn refused(result: &serde_json::Value) -> Option<String> {
    (result["ok"] == false).then(|| result["data"]["code"].as_str().unwrap_or("?").to_string())
}

#[test]
fn a_stop_through_etcd_reaches_the_stdio_proxy_and_an_outage_closes_noncritical_calls() {
    let mut etcd = cluster::Cluster::start(1);
    let url = etcd.url("/mcp-stdio");
    let here = host();
    let there = host();
    let issued = here.run(&["--control", &url, "token", "issue", "--agent", "worker"]);
    issued.assert_ok();
    let token = issued.json()["token"].as_str().unwrap().to_string();
    let mut client = stdio_proxy(&here, &["--control", &url], &token);
    assert_eq!(echo(&mut client)["text"][0], "Echo: hi");

    // A halt engaged on the other host, through etcd only.
    there
        .run(&[
            "--control",
            &url,
            "engage",
            "--scope",
            "agent:worker",
            "--level",
            "halt-all",
            "--reason",
            "from another host",
            "--by",
            "tester",
        ])
        .assert_ok();
    assert_eq!(here.entries("latches"), Vec::<String>::new());
    assert_eq!(refusal_code(&echo(&mut client)), "break_glass_contained");
    there
        .run(&[
            "--control",
            &url,
            "disengage",
            "--scope",
            "agent:worker",
            "--reason",
            "resume",
            "--by",
            "operator",
        ])
        .assert_ok();
    assert_eq!(echo(&mut client)["text"][0], "Echo: hi");

    // etcd goes away: a call that cannot be judged against it is refused, not waved through.
    etcd.kill(0);
    assert!(
        eventually(Duration::from_secs(15), || refused(&echo(&mut client))
            .as_deref()
            == Some("distributed_unavailable")),
        "calls kept going while etcd was down"
    );
    etcd.restart(0);
    assert!(
        eventually(Duration::from_secs(20), || echo(&mut client)["text"][0]
            == "Echo: hi"),
        "calls did not resume when etcd answered"
    );
}
