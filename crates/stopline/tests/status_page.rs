//! The operator's status page at `GET /`, in a real headless Chromium: `stopline serve` on a
//! loopback port with a throwaway home, an agent with budgets that has made model calls, a
//! monitor's anomaly report and a real drill; the browser loads the shell, takes the
//! operator's token, engages a stop through the form and must see the latch appear. The
//! screenshot is kept at `<target>/test-artifacts/status-page.png` (and copied to
//! `docs/status-page.png` when `STOPLINE_UPDATE_DOCS_SCREENSHOT=1`).
//!
//! Needs `/usr/bin/chromium` (Debian `chromium`), `node`, and `playwright-core` in the
//! repository's `node_modules` (`npm ci`); `scripts/setup-test-deps.sh` installs all three. A
//! missing one fails this test, it never skips it.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{Gateway, Upstream};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use util::Home;

const CHROMIUM: &str = "/usr/bin/chromium";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fail (never skip) when the browser toolchain is missing, saying how to install it.
fn require_browser_toolchain() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium (scripts/setup-test-deps.sh does)"
    );
    assert!(
        repo()
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "node_modules/playwright-core is missing: run `npm ci` at the repository root \
         (scripts/setup-test-deps.sh does)"
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is not on PATH: install nodejs"
    );
}

fn artifacts_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp; artifacts live beside it.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Give the page something to show besides the latch: an agent with budgets that made two
/// model calls through the gateway (so its bars are not empty), a delegated sub-agent, a
/// monitor's anomaly score, and one real drill recorded in the evidence log.
fn populate(home: &Home, gateway: &Gateway) {
    let agent = home.token(&[
        "--agent",
        "researcher",
        "--budget",
        "steps=10",
        "--budget",
        "tokens=2000",
        "--budget",
        "spend_usd=0.01",
    ]);
    for _ in 0..2 {
        let reply = gateway.post(
            "/v1/chat/completions",
            Some(&agent),
            &Gateway::chat_body("gpt-test"),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let child = gateway.post(
        "/v1/delegate",
        Some(&agent),
        &json!({"agent": "researcher-helper", "budgets": {"steps": 3}}),
    );
    assert_eq!(child.status, 200, "{}", child.body);
    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let anomaly = gateway.post(
        "/v1/anomaly",
        Some(&monitor),
        &json!({"agent": "researcher", "score": 0.42}),
    );
    assert_eq!(anomaly.status, 200, "{}", anomaly.body);
    // A real drill (its own gateway and throwaway home; it records into this home's evidence).
    let drill = home.run(&[
        "drill",
        "--agents",
        "2",
        "--subagents",
        "1",
        "--harness-version",
        "harness-page",
    ]);
    assert_eq!(drill.code, 0, "{}\n{}", drill.stdout, drill.stderr);
}

#[test]
fn the_page_shell_needs_no_token_but_its_data_routes_do() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let shell = gateway.get("/", None);
    assert_eq!(shell.status, 200);
    assert!(shell.body.contains("id=\"stop-form\""), "{}", shell.body);
    let policy = shell.header("content-security-policy").unwrap_or_default();
    assert!(
        policy.contains("script-src 'sha256-") && !policy.contains("unsafe-inline"),
        "{policy}"
    );
    for route in ["/v1/status", "/v1/budgets", "/v1/drills"] {
        let reply = gateway.get(route, None);
        assert_eq!(reply.status, 401, "{route}: {}", reply.body);
        assert_eq!(reply.code(), "token_invalid", "{route}");
    }
    let token = home.token(&["--agent", "ops-desk", "--role", "operator"]);
    let budgets = gateway.get("/v1/budgets", Some(&token)).json();
    assert_eq!(budgets["thresholds"]["unauthorized_calls"], 5);
    let drills = gateway.get("/v1/drills", Some(&token)).json();
    assert_eq!(
        (drills["total"].clone(), drills["error"].clone()),
        (json!(0), Value::Null)
    );
}

#[test]
fn an_operator_engages_a_stop_from_the_page_and_sees_its_latch() {
    require_browser_toolchain();
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &gw::model_config(&upstream));
    populate(&home, &gateway);

    let operator = home.token(&["--agent", "ops-desk", "--role", "operator"]);
    let token_file = home.dir.path().join("operator.tok");
    std::fs::write(&token_file, &operator).unwrap();
    let screenshot = home.dir.path().join("status-page.png");
    let profile = home.dir.path().join("chromium-profile");
    let reason = "page test: exfiltration attempt";
    let out = Command::new("node")
        .arg(repo().join("crates/stopline/tests/browser/status_page.mjs"))
        .arg(format!("{}/", gateway.url()))
        .arg(&token_file)
        .arg(&screenshot)
        .arg(&profile)
        .args(["agent:researcher", "emergency", reason])
        .current_dir(repo())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.dir.path())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let seen: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the browser script printed no JSON ({e}): {stdout}\n{stderr}"));
    assert!(
        out.status.success(),
        "the browser run failed: {:#}\n{stderr}",
        seen["problems"]
    );

    // What the browser saw.
    assert_eq!(seen["shell_status"], 200);
    assert_eq!(seen["phase_without_token"], "no data");
    assert_eq!(seen["phase_before"], "RUNNING");
    assert_eq!(seen["token_in_session_storage"], true);
    let receipt = seen["receipt"].as_str().unwrap_or_default();
    assert!(
        receipt.contains("ENGAGED agent:researcher at emergency"),
        "{receipt}"
    );
    let row: Vec<&str> = seen["latch_row"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        &row[..4],
        &["agent:researcher", "emergency", "ops-desk", reason]
    );
    assert!(row[5].starts_with("latch_"), "{row:?}");
    assert_ne!(seen["phase_after"], "RUNNING");
    let recovery = seen["recovery_commands"].as_str().unwrap_or_default();
    assert!(
        recovery.contains("stopline recover plan --scope agent:researcher")
            && recovery.contains("--by operator"),
        "{recovery}"
    );
    assert_eq!(seen["agents"], json!(["researcher", "researcher-helper"]));
    assert!(
        seen["budget_bars"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b.as_str().unwrap_or_default().starts_with("steps2 / 10")),
        "{:#}",
        seen["budget_bars"]
    );
    assert_eq!(seen["drills"].as_array().map(Vec::len), Some(1));
    // No recovery control anywhere: the only buttons are the token's and the stop's, and the
    // only POST the page made was the engage.
    assert_eq!(seen["buttons"], json!(["Use token", "Forget", "STOP"]));
    assert_eq!(seen["forms_posting"], json!(["POST /v1/engage"]));

    // What the control plane holds: exactly that latch, engaged by the operator's token.
    let status = home.status();
    let latches = status["latches"].as_array().unwrap();
    assert_eq!(latches.len(), 1, "{status:#}");
    assert_eq!(latches[0]["scope"], "agent:researcher");
    assert_eq!(latches[0]["reason"], reason);
    assert_eq!(latches[0]["file"].as_str(), Some(row[5]));

    // Keep the screenshot.
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    let kept = artifacts_dir().join("status-page.png");
    std::fs::write(&kept, &png).unwrap();
    eprintln!("screenshot: {}", kept.display());
    if std::env::var_os("STOPLINE_UPDATE_DOCS_SCREENSHOT").is_some() {
        std::fs::write(repo().join("docs/status-page.png"), &png).unwrap();
    }
}
