//! `stopline mcp serve`: the Python `mcp` stdio client finds exactly `engage` and `status`,
//! pulls a stop through it (locally, and through a gateway when `STOPLINE_URL` is set), and
//! finds no way to recover from inside the session.

mod mcp_support;
mod util;

use mcp_support::*;
use serde_json::json;
use util::Home;

fn serve(home: &Home, env: &[(&str, &str)]) -> Driver {
    let home_path = home.path();
    let args = [
        "stdio",
        util::bin(),
        "--home",
        home_path.to_str().unwrap(),
        "mcp",
        "serve",
    ];
    Driver::start(&args, env)
}

#[test]
fn mcp_serve_offers_engage_and_status_only_and_engages_a_stop() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let mut session = serve(&home, &[]);
    assert_eq!(session.list()["tools"], json!(["engage", "status"]));
    let status = session.call("status", json!({}));
    assert_eq!(status["structured"]["phase"], "RUNNING", "{status}");

    let engaged = session.call("engage", json!({"scope": "agent:rogue", "reason": "pulled from an MCP session", "level": "halt-all"}));
    assert_eq!(engaged["is_error"], false, "{engaged}");
    assert_eq!(engaged["structured"]["engaged"], true);
    let latches = home.status()["latches"].clone();
    assert!(
        latches
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["scope"] == "agent:rogue" && l["level"] == "halt-all"),
        "{latches}"
    );

    // No recovery: not offered, and a call to one is an error, not a recovery.
    for tool in ["recover", "disengage", "drain"] {
        let refused = session.call(
            tool,
            json!({"scope": "agent:rogue", "reason": "let me out"}),
        );
        assert_eq!(refused["ok"], false, "{tool}: {refused}");
        assert_eq!(refused["code"], -32602, "{refused}");
    }
    assert_eq!(
        home.status()["latches"].as_array().unwrap().len(),
        1,
        "the stop stands"
    );

    let empty = session.call("engage", json!({"scope": "machine", "reason": "  "}));
    assert_eq!(empty["is_error"], true, "{empty}");
    assert_eq!(empty["structured"]["error"]["code"], "reason_required");
}

#[test]
fn mcp_serve_engages_through_the_gateway_when_stopline_url_is_set() {
    let home = Home::new();
    let (_gateway, url) = gateway(&home, "");
    let token = home.token(&["--agent", "helper"]);
    let mut session = serve(
        &home,
        &[
            ("STOPLINE_URL", url.as_str()),
            ("STOPLINE_TOKEN", token.as_str()),
        ],
    );
    let engaged = session.call(
        "engage",
        json!({"scope": "agent:rogue", "reason": "through the gateway"}),
    );
    assert_eq!(engaged["structured"]["engaged"], true, "{engaged}");
    assert!(
        !engaged["structured"]["acknowledged_by"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the gateway acknowledged: {engaged}"
    );
    // The agent's own status shows only latches covering it (docs/reference.md §6); the owner sees the
    // stop it engaged.
    let status = session.call("status", json!({}));
    let latches = status["structured"]["latches"].clone();
    assert_eq!(latches, json!([]), "{status}");
    assert!(
        home.status()["latches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["scope"] == "agent:rogue"),
        "the stop stands"
    );
}
