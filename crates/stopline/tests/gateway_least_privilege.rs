//! Least privilege on the gateway's API (docs/reference.md §6): an agent token reads only its own chain
//! in `/v1/budgets` and only the latches covering it in `/v1/status`, while operators and
//! monitors see all; `/v1/delegate` is refused while a latch covers the parent, even a pause;
//! and a client that never finishes its request headers is disconnected.

mod gw;
mod util;

use gw::Gateway;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::Duration;
use util::Home;

fn budget_agents(reply: &Value) -> Vec<String> {
    reply["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent"].as_str().unwrap().to_string())
        .collect()
}

fn latch_scopes(reply: &Value) -> Vec<String> {
    reply["latches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["scope"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn an_agent_reads_only_its_own_chain_and_the_latches_covering_it() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let alice = home.token(&["--agent", "alice", "--budget", "tool_calls=10"]);
    let bob = home.token(&["--agent", "bob", "--budget", "tool_calls=10"]);
    let operator = home.token(&["--agent", "ops", "--role", "operator"]);
    for (token, child) in [(&alice, "alice-sub"), (&bob, "bob-sub")] {
        let minted = gateway.post(
            "/v1/delegate",
            Some(token),
            &json!({"agent": child, "budgets": {"tool_calls": 2}}),
        );
        assert_eq!(minted.status, 200, "{}", minted.body);
    }
    let seen = gateway.get("/v1/budgets", Some(&alice)).json();
    let agents = budget_agents(&seen);
    assert!(agents.contains(&"alice".to_string()), "{seen}");
    assert!(!agents.iter().any(|a| a.starts_with("bob")), "{seen}");
    let all = budget_agents(&gateway.get("/v1/budgets", Some(&operator)).json());
    assert!(
        all.contains(&"alice".into()) && all.contains(&"bob".into()),
        "{all:?}"
    );

    home.engage("agent:bob", "halt-noncritical");
    let seen = gateway.get("/v1/status", Some(&alice)).json();
    assert_eq!(latch_scopes(&seen), Vec::<String>::new(), "{seen}");
    let seen = gateway.get("/v1/status", Some(&bob)).json();
    assert_eq!(latch_scopes(&seen), vec!["agent:bob".to_string()], "{seen}");
    let seen = gateway.get("/v1/status", Some(&operator)).json();
    assert_eq!(latch_scopes(&seen), vec!["agent:bob".to_string()], "{seen}");

    // A paused parent mints no sub-agent; an uncovered one still does.
    let refused = gateway.post("/v1/delegate", Some(&bob), &json!({"agent": "bob-sub-2"}));
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (403, "break_glass_contained"),
        "{}",
        refused.body
    );
    let minted = gateway.post(
        "/v1/delegate",
        Some(&alice),
        &json!({"agent": "alice-sub-2"}),
    );
    assert_eq!(minted.status, 200, "{}", minted.body);
}

#[test]
fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let address = gateway.url().trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .write_all(b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        .unwrap();
    // Far above the 10 s bound; the old gateway kept such a connection open indefinitely.
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    assert!(
        read.is_ok(),
        "the half-sent request was still open after 60 s: {read:?}"
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(!text.contains("200 OK"), "{text}");
}
