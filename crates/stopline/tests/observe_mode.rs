//! "Observe, then enforce" at the gateway (docs/reference.md §8): a breaker set to `observe`
//! in `[breakers.mode]` that is met writes its evidence record and raises the alert through
//! `alert_command`, engages nothing, and the agent's calls keep flowing; `status` names it.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures

mod gw;
mod util;

use gw::Gateway;
use serde_json::{json, Value};
use std::time::Duration;
use util::Home;

fn alert_config(dir: &std::path::Path) -> String {
    let script = format!(
        "cat >> {0}/alerts.jsonl; echo >> {0}/alerts.jsonl",
        dir.display()
    );
    format!(
        "[breakers]\nunauthorized_calls = 2\nalert_command = [\"/bin/sh\", \"-c\", {}]\n\n[breakers.mode]\nunauthorized_calls = \"observe\"\n",
        serde_json::to_string(&script).unwrap()
    )
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_observed_breaker_records_and_alerts_and_engages_nothing() {
    let home = Home::new();
    let hook = home.dir.path().join("hook");
    std::fs::create_dir_all(&hook).unwrap();
    let gateway = Gateway::start(&home, &alert_config(&hook));
    let agent = home.token(&["--agent", "sneaky"]);
    // Four unauthorized calls: the threshold (2) is met twice, each recorded.
    for _ in 0..4 {
        let r = gateway.post("/v1/recover", Some(&agent), &json!({}));
        assert_eq!(r.status, 403);
    }
    let observed = gw::within(Duration::from_secs(30), || {
        let records: Vec<Value> = home
            .valid_evidence()
            .into_iter()
            .filter(|r| r["breaker"] == "unauthorized_calls" && r["agent"] == "sneaky")
            .collect();
        (records.len() == 2).then_some(records)
    })
    .expect("two evidence records of the observed breaker");
    for record in &observed {
        assert_eq!(
            (record["mode"].as_str(), record["latch"].as_str()),
            (Some("observe"), Some("")),
            "{record}"
        );
    }
    let alert = gw::within(Duration::from_secs(30), || {
        lines(&hook.join("alerts.jsonl"))
            .into_iter()
            .find(|a| a["breaker"] == "unauthorized_calls")
    })
    .expect("the observed breaker raised its alert");
    assert_eq!(alert["mode"], "observe", "{alert}");

    // Nothing was engaged, and the agent's calls keep flowing.
    let status = home.status();
    assert_eq!(status["latches"], json!([]), "{status}");
    assert_eq!(
        status["observe_only"],
        json!(["breakers.unauthorized_calls"])
    );
    // The agent's own view of /v1/status names it too: the breaker observes its calls.
    let own = gateway.get("/v1/status", Some(&agent));
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(
        own.json()["observe_only"],
        json!(["breakers.unauthorized_calls"]),
        "{}",
        own.body
    );
    let check = gateway.post(
        "/v1/check",
        Some(&agent),
        &json!({"class": "critical", "action": "model", "target": "model:m"}),
    );
    assert_eq!(check.json()["decision"], "allow", "{}", check.body);
    assert!(home
        .run(&["status"])
        .stdout
        .contains("breakers.unauthorized_calls"));
}

/// A budget's breaker always enforces: `[breakers.mode] budget_exhausted` is not a key.
#[test]
fn a_budget_breaker_cannot_be_set_to_observe() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    std::fs::write(
        home.file("config.toml"),
        "[breakers.mode]\nbudget_exhausted = \"observe\"\n",
    )
    .unwrap();
    let status = home.run(&["status"]);
    assert_ne!(status.code, 0, "{}", status.stdout);
    let both = format!("{}{}", status.stdout, status.stderr);
    assert!(both.contains("config_invalid"), "{both}");
}
