//! The operator's day with the real binary: an alert for every latch change (engaged,
//! disengaged, recovered) from the gateway that sees it, retried when the hook fails, and from
//! a CLI engage when no gateway runs, without the engage waiting for it; and configuration
//! reload by `stopline reload` and `SIGHUP`, validated first, live where it can be.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{model_config, Gateway, Upstream};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use util::Home;

/// `[breakers] alert_command` appending each record to `<dir>/alerts.jsonl`. It fails its very
/// first run (`<dir>/failed-once` marks it), and each run waits until `<dir>/release` exists.
fn alert_hook(dir: &Path) -> String {
    let script = format!(
        "d={dir}; while [ ! -e $d/release ]; do sleep 0.02; done; \
         if [ ! -e $d/failed-once ]; then : > $d/failed-once; exit 1; fi; \
         cat >> $d/alerts.jsonl; echo >> $d/alerts.jsonl",
        dir = dir.display()
    );
    format!(
        "[breakers]\nalert_command = [\"/bin/sh\", \"-c\", {}]\n",
        toml_string(&script)
    )
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

fn alerts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `change` alert of `latch`, once it arrives, checked against its schema.
fn alert_for(dir: &Path, change: &str, latch: &str) -> Value {
    let alert = gw::within(Duration::from_secs(30), || {
        alerts(dir)
            .into_iter()
            .find(|a| a["change"] == change && a["latch"] == latch)
    })
    .unwrap_or_else(|| panic!("no {change} alert for {latch}: {:?}", alerts(dir)));
    util::validate("latch-alert.v1.json", &alert);
    alert
}

fn hook_dir(home: &Home) -> PathBuf {
    let dir = home.dir.path().join("hook");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_latch_change_is_alerted_by_the_gateway_and_a_failed_hook_is_retried() {
    let home = Home::new();
    let dir = hook_dir(&home);
    std::fs::write(dir.join("release"), "").unwrap();
    let _gateway = Gateway::start(&home, &alert_hook(&dir));

    let halt = home.engage("agent:x", "halt-all");
    let halt_id = halt["latch"]["id"].as_str().unwrap().to_string();
    let engaged = alert_for(&dir, "engaged", &halt_id);
    assert_eq!(engaged["schema"], "latch-alert.v1", "{engaged}");
    assert_eq!(engaged["alert_id"], format!("engaged:{halt_id}"));
    assert_eq!(engaged["scope"], "agent:x");
    assert_eq!(engaged["level"], "halt-all");
    assert_eq!(engaged["reason"], "test stop");
    assert!(
        engaged["sender"].as_str().unwrap().starts_with("gateway:"),
        "{engaged}"
    );
    assert!(
        dir.join("failed-once").exists(),
        "the first try failed and the record still arrived: it was retried"
    );

    home.run(&[
        "disengage",
        "--scope",
        "agent:x",
        "--reason",
        "done",
        "--by",
        "operator",
    ])
    .assert_ok();
    alert_for(&dir, "disengaged", &halt_id);

    let emergency = home.engage("machine", "emergency");
    let emergency_id = emergency["latch"]["id"].as_str().unwrap().to_string();
    alert_for(&dir, "engaged", &emergency_id);
    let plan = home.run_on_pty(
        &[
            "recover",
            "plan",
            "--scope",
            "machine",
            "--reason",
            "all clear",
            "--by",
            "operator",
        ],
        &[],
    );
    plan.assert_ok();
    let plan = plan.json()["plan"].as_str().unwrap().to_string();
    home.run_on_pty(
        &["recover", "apply", "--plan", &plan, "--by", "operator"],
        &[],
    )
    .assert_ok();
    let recovered = alert_for(&dir, "recovered", &emergency_id);
    assert_eq!(recovered["level"], "emergency", "{recovered}");

    // A gateway ran throughout: the CLI handed nothing off, so each change came once.
    let all = alerts(&dir);
    let mut ids: Vec<&str> = all
        .iter()
        .map(|a| a["alert_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "one record per change: {all:?}");
    assert!(all
        .iter()
        .all(|a| a["sender"].as_str().unwrap().starts_with("gateway:")));
}

#[test]
fn a_cli_engage_with_no_gateway_alerts_itself_without_waiting_for_the_hook() {
    let home = Home::new();
    let dir = hook_dir(&home);
    // The hook's first run fails, so the detached delivery must retry; none is released yet.
    std::fs::create_dir_all(home.path()).unwrap();
    std::fs::write(home.file("config.toml"), alert_hook(&dir)).unwrap();

    // The hook blocks until released: an engage that waited for it would never return here.
    let engaged = home.engage("agent:y", "halt-all");
    let id = engaged["latch"]["id"].as_str().unwrap().to_string();
    assert!(
        alerts(&dir).is_empty(),
        "nothing delivered before the release"
    );
    std::fs::write(dir.join("release"), "").unwrap();
    let alert = alert_for(&dir, "engaged", &id);
    assert!(
        alert["sender"].as_str().unwrap().starts_with("cli:"),
        "{alert}"
    );
    assert_eq!(alert["alert_id"], format!("engaged:{id}"));
    assert!(
        dir.join("failed-once").exists(),
        "delivered after a failed try"
    );

    home.run(&[
        "disengage",
        "--scope",
        "agent:y",
        "--reason",
        "done",
        "--by",
        "operator",
    ])
    .assert_ok();
    alert_for(&dir, "disengaged", &id);
}

fn log_text(home: &Home) -> String {
    std::fs::read_to_string(home.dir.path().join("gateway.log")).unwrap_or_default()
}

#[test]
fn reload_takes_prices_live_names_what_needs_a_restart_and_keeps_the_old_config_when_broken() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let token = home.token(&["--agent", "w", "--budget", "spend_usd=1"]);
    let call = || {
        gateway.post(
            "/v1/chat/completions",
            Some(&token),
            &Gateway::chat_body("gpt-new"),
        )
    };
    assert_eq!(call().code(), "price_missing");

    // The operator prices the model and, in the same edit, moves the listener.
    let config = home.file("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let priced = format!(
        "{}\n[prices.\"gpt-new\"]\ninput = 1.0\noutput = 2.0\n",
        text.replace(&gateway.addr, "127.0.0.1:1")
    );
    std::fs::write(&config, &priced).unwrap();
    let reloaded = home.run(&["reload"]);
    reloaded.assert_ok();
    assert_eq!(reloaded.json()["signalled"].as_array().unwrap().len(), 1);
    let ok = gw::within(Duration::from_secs(10), || {
        let reply = call();
        (reply.status == 200).then_some(reply)
    });
    assert!(
        ok.is_some(),
        "the new price is in force: {}",
        log_text(&home)
    );
    gw::within(Duration::from_secs(10), || {
        let log = log_text(&home);
        (log.contains("needs_restart") && log.contains("listen")).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the log names listen as needing a restart: {}",
            log_text(&home)
        )
    });
    assert_eq!(
        gateway.get("/healthz", None).status,
        200,
        "still on its old listener"
    );

    // A broken file: `stopline reload` refuses it and signals nobody...
    std::fs::write(&config, format!("{priced}\nlisten = [\n")).unwrap();
    let refused = home.run(&["reload"]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert_eq!(refused.code_str(), "config_invalid", "{}", refused.stdout);
    // ...and a SIGHUP sent by hand keeps the configuration in force, saying why.
    let pid = gateway.proc.0.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    gw::within(Duration::from_secs(10), || {
        log_text(&home)
            .contains("config reload refused")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the refused reload is logged: {}", log_text(&home)));
    assert_eq!(
        call().status,
        200,
        "the old configuration is still in force"
    );

    // Back to the gateway's own listener: everything in the file is in force, and the
    // registration names that file's hash (what `stopline run` records of its gateway).
    let whole = priced.replace("127.0.0.1:1", &gateway.addr);
    std::fs::write(&config, &whole).unwrap();
    home.run(&["reload"]).assert_ok();
    let sha = std::process::Command::new("sha256sum")
        .arg(&config)
        .output()
        .unwrap();
    let sha = String::from_utf8_lossy(&sha.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    gw::within(Duration::from_secs(10), || {
        home.entries("servers").iter().find_map(|name| {
            let text = std::fs::read_to_string(home.file(&format!("servers/{name}"))).ok()?;
            let record: Value = serde_json::from_str(&text).ok()?;
            (record["config_hash"] == sha.as_str()).then_some(())
        })
    })
    .unwrap_or_else(|| panic!("the registration names the reloaded file's hash {sha}"));
}
