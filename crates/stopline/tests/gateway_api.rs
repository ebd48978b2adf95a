//! The gateway's HTTP API: fixed refusal statuses and bodies, engage with a stale token,
//! queueing under HALT_NONCRITICAL, a corrupt latch closing the gate within one refresh,
//! acknowledgements and uncovered gateways, and the breakers fed through the API.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{model_config, Gateway, Upstream};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use util::Home;

#[test]
fn refusals_have_their_fixed_status_and_json_body() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let token = home.token(&["--agent", "w"]);
    let body = json!({"model": "m", "messages": []});
    for bad in [None, Some("garbage"), Some("stl1.e30.AAAA")] {
        let r = gateway.post("/v1/chat/completions", bad, &body);
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "token_invalid"),
            "{bad:?}: {}",
            r.body
        );
        assert!(r.json()["error"]["message"].is_string());
    }
    let forged = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(
        gateway.post("/v1/status", Some(&forged), &json!({})).status,
        405
    );
    assert_eq!(gateway.get("/v1/status", Some(&forged)).status, 401);
    assert_eq!(gateway.get("/v1/status", Some(&token)).status, 200);
    for route in ["/v1/recover", "/v1/drain"] {
        for t in [None, Some(token.as_str())] {
            let r = gateway.post(route, t, &json!({"scope": "machine", "reason": "x"}));
            assert_eq!(
                (r.status, r.code().as_str()),
                (403, "owner_control_required"),
                "{route}"
            );
        }
    }
    let check = gateway.post(
        "/v1/check",
        Some("garbage"),
        &json!({"class": "noncritical", "action": "tool_call"}),
    );
    assert_eq!(check.status, 200);
    assert_eq!(
        (
            check.json()["decision"].clone(),
            check.json()["code"].clone()
        ),
        (json!("block"), json!("token_invalid"))
    );
    let check = gateway.post(
        "/v1/check",
        Some(&token),
        &json!({"class": "critical", "action": "model", "target": "model:m"}),
    );
    assert_eq!(check.json()["decision"], "allow", "{}", check.body);
    assert_eq!(gateway.get("/healthz", None).status, 200);
    let metrics = gateway.get("/metrics", None);
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("stopline_decisions_total"),
        "{}",
        metrics.body
    );
    assert!(metrics.body.contains("stopline_view_age_ms"));
    let page = gateway.get("/", None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/v1/engage") && !page.body.contains("/v1/recover"));
}

/// The gateway's watcher puts a new latch in its view at once (latches first), before the
/// engage has advanced the epoch; the engage is parked right there (a failpoint), and the
/// watcher is then held before its locked read (another). The acknowledgement the engage asks
/// for once its epoch advance is durable must come from a read that holds that advance too:
/// from the first call after the receipt, a token minted before the emergency is refused as
/// stale (`stale_control_epoch`), never only by the latch (`break_glass_contained`).
#[test]
fn an_acknowledged_emergency_refuses_pre_stop_tokens_as_stale_from_the_first_call() {
    let home = Home::new();
    let seams = tempfile::tempdir().unwrap();
    let (park, hold) = (seams.path().join("park"), seams.path().join("hold"));
    let gateway = Gateway::start_with_env(
        &home,
        "reload_interval_ms = 60000",
        &[(
            "STOPLINE_FAILPOINTS",
            &format!("gateway.watch.appeared=hold_if:{}", hold.display()),
        )],
    );
    let token = home.token(&["--agent", "w"]);
    let check = || {
        gateway
            .post("/v1/check", Some(&token), &json!({"class": "noncritical"}))
            .json()["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(check(), "");
    std::fs::write(&park, "").unwrap();
    std::fs::write(&hold, "").unwrap();
    let engage = home
        .command(&[
            "--json",
            "engage",
            "--scope",
            "agent:w",
            "--level",
            "emergency",
            "--reason",
            "race",
            "--by",
            "tester",
        ])
        .env(
            "STOPLINE_FAILPOINTS",
            format!("engage.staging.remove=stop_if:{}", park.display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    gw::within(Duration::from_secs(20), || {
        (check() == "break_glass_contained").then_some(())
    })
    .expect("the watcher put the parked engage's latch in the view");
    std::fs::remove_file(&park).unwrap();
    let pid = rustix::process::Pid::from_raw(engage.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let out = engage.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let receipt: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        receipt["acknowledged_by"].as_array().map(Vec::len),
        Some(1),
        "{receipt}"
    );
    let first = check();
    std::fs::remove_file(&hold).unwrap();
    assert_eq!(first, "stale_control_epoch");
}

#[test]
fn engage_through_the_api_accepts_a_stale_token_and_waits_for_the_acknowledgement() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let token = home.token(&["--agent", "w"]);
    home.engage("agent:w", "emergency");
    let stale = gateway.post("/v1/check", Some(&token), &json!({"class": "noncritical"}));
    assert_eq!(stale.json()["code"], "stale_control_epoch");
    let r = gateway.post(
        "/v1/engage",
        Some(&token),
        &json!({"scope": "machine", "level": "halt-all", "reason": "stale but signed"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let receipt = r.json();
    assert_eq!(receipt["engaged"], true);
    assert_eq!(
        receipt["acknowledged_by"].as_array().unwrap().len(),
        1,
        "{receipt}"
    );
    assert_eq!(receipt["latch"]["session"]["bound"], "w");
    let blank = gateway.post(
        "/v1/engage",
        Some(&token),
        &json!({"scope": "machine", "reason": " "}),
    );
    assert_eq!(
        (blank.status, blank.code().as_str()),
        (400, "reason_required")
    );
    let status = home.status();
    assert_eq!(status["uncovered_servers"], json!([]), "{status}");
    // A stopped agent never lifts its own stop; a monitor token may lift a halt.
    let lift = gateway.post(
        "/v1/disengage",
        Some(&token),
        &json!({"scope": "machine", "reason": "mine"}),
    );
    assert_eq!(lift.status, 403, "{}", lift.body);
    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let lift = gateway.post(
        "/v1/disengage",
        Some(&monitor),
        &json!({"scope": "machine", "reason": "checked"}),
    );
    assert_eq!(lift.status, 200, "{}", lift.body);
}

#[test]
fn noncritical_work_is_held_under_halt_noncritical_then_readmitted_or_timed_out() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(
        &home,
        &format!("queue_timeout_s = 1\n{}", model_config(&upstream)),
    );
    let token = home.token(&["--agent", "q"]);
    let call = || {
        gateway.post(
            "/v1/chat/completions",
            Some(&token),
            &Gateway::chat_body("gpt-test"),
        )
    };
    home.engage("agent:q", "halt-noncritical");
    let started = Instant::now();
    let r = call();
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "queued_timeout"),
        "{}",
        r.body
    );
    assert!(r.header("retry-after").is_some());
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(upstream.executed().is_empty());

    // Held, then re-admitted when the halt is lifted.
    let r = std::thread::scope(|scope| {
        let held = scope.spawn(call);
        std::thread::sleep(Duration::from_millis(300));
        let lift = home.run(&[
            "disengage",
            "--scope",
            "agent:q",
            "--reason",
            "resume",
            "--by",
            "operator",
        ]);
        lift.assert_ok();
        held.join().unwrap()
    });
    assert_eq!(
        r.status, 200,
        "re-admitted after the halt lifted: {}",
        r.body
    );
    assert_eq!(upstream.executed().len(), 1);

    // Held, then failed at once by an escalation.
    home.engage("agent:q", "halt-noncritical");
    let r = std::thread::scope(|scope| {
        let held = scope.spawn(|| {
            let started = Instant::now();
            (call(), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(200));
        home.engage("agent:q", "halt-all");
        held.join().unwrap()
    });
    assert_eq!(
        (r.0.status, r.0.code().as_str()),
        (403, "break_glass_contained"),
        "{}",
        r.0.body
    );
    assert!(
        r.1 < Duration::from_millis(900),
        "failed before the queue timeout: {:?}",
        r.1
    );
    let ops = home.run(&["ops", "list"]).json();
    let refused = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["outcome"] == "refused")
        .count();
    assert_eq!(
        refused, 2,
        "held calls were persisted as prepared operations, then refused: {ops}"
    );
}

#[test]
fn a_corrupt_latch_dropped_into_latches_closes_the_gate_within_one_refresh() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "reload_interval_ms = 500");
    let token = home.token(&["--agent", "w"]);
    let check = || {
        gateway
            .post(
                "/v1/check",
                Some(&token),
                &json!({"class": "noncritical", "action": "tool_call"}),
            )
            .json()
    };
    assert_eq!(check()["decision"], "allow");
    let dropped = Instant::now();
    util::write(&home.file("latches/latch_corrupt.json"), b"{not a latch");
    let closed = gw::within(Duration::from_millis(500), || {
        let r = check();
        (r["decision"] == "block").then_some((r, dropped.elapsed()))
    });
    let (receipt, after) = closed.expect("closed within one refresh interval");
    assert_eq!(receipt["code"], "break_glass_contained", "{receipt}");
    assert_eq!(receipt["mode"], "EMERGENCY");
    assert!(after <= Duration::from_millis(500), "{after:?}");
}

#[test]
fn engage_names_gateways_that_do_not_acknowledge_and_status_counts_them_uncovered() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "ack_timeout_ms = 150");
    let me = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let closed_port = gw::free_port();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let fake = |id: &str, protocol: u32| {
        json!({"id": id, "pid": me, "start_time": start, "protocol": protocol, "listen": "127.0.0.1:1",
               "ack_addr": format!("127.0.0.1:{closed_port}"), "heartbeat_ms": now_ms + 60_000})
    };
    util::write(
        &home.file("servers/deaf.json"),
        fake("deaf", 1).to_string().as_bytes(),
    );
    util::write(
        &home.file("servers/old.json"),
        fake("old", 0).to_string().as_bytes(),
    );
    let receipt = home.engage("agent:x", "halt-all");
    let acked: Vec<String> = serde_json::from_value(receipt["acknowledged_by"].clone()).unwrap();
    let unacked: Vec<String> = serde_json::from_value(receipt["unacknowledged"].clone()).unwrap();
    assert_eq!(acked.len(), 1, "the real gateway acknowledged: {receipt}");
    assert!(acked[0].starts_with("gateway-"));
    assert_eq!(unacked.len(), 2, "{receipt}");
    assert!(unacked.contains(&"deaf".to_string()) && unacked.contains(&"old".to_string()));
    let status = home.status();
    assert_eq!(status["phase"], "KILLING", "{status}");
    let uncovered = status["uncovered_servers"].as_array().unwrap();
    assert_eq!(uncovered.len(), 2, "{status}");
    assert!(uncovered
        .iter()
        .any(|s| s["id"] == "old" && s["older_protocol"] == true));
    assert!(!uncovered
        .iter()
        .any(|s| s["id"].as_str().unwrap().starts_with("gateway-")));
    drop(gateway);
}

#[test]
fn breakers_trip_on_unauthorized_calls_and_anomaly_scores() {
    let home = Home::new();
    let gateway = Gateway::start(
        &home,
        "[breakers]\nunauthorized_calls = 2\nanomaly_score = 0.8\n",
    );
    let agent = home.token(&["--agent", "sneaky"]);
    for _ in 0..2 {
        let r = gateway.post("/v1/recover", Some(&agent), &json!({}));
        assert_eq!(r.status, 403);
    }
    let latches = |by: &str| {
        gw::within(Duration::from_secs(30), || {
            let status = home.status();
            status["latches"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["by"] == by)
                .cloned()
        })
    };
    let latch = latches("breaker:unauthorized_calls").expect("tripped");
    assert_eq!(
        (latch["scope"].as_str(), latch["level"].as_str()),
        (Some("agent:sneaky"), Some("halt-all"))
    );

    let monitor = home.token(&["--agent", "safety-monitor", "--role", "monitor"]);
    let other = home.token(&["--agent", "bystander"]);
    let r = gateway.post(
        "/v1/anomaly",
        Some(&other),
        &json!({"agent": "drifter", "score": 0.99}),
    );
    assert_eq!(
        r.status, 403,
        "only a monitor reports anomalies: {}",
        r.body
    );
    let r = gateway.post(
        "/v1/anomaly",
        Some(&monitor),
        &json!({"agent": "drifter", "score": 0.5}),
    );
    assert_eq!((r.status, r.json()["tripped"].clone()), (200, json!(false)));
    let r = gateway.post(
        "/v1/anomaly",
        Some(&monitor),
        &json!({"agent": "drifter", "score": 0.85}),
    );
    assert_eq!(r.json()["tripped"], true, "{}", r.body);
    let latch = latches("breaker:anomaly_score").expect("tripped");
    assert_eq!(latch["scope"], "agent:drifter");
    let evidence = gw::within(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(home.file("evidence/log.jsonl")).ok()?;
        text.contains("anomaly_score").then_some(text)
    });
    assert!(evidence.is_some());
    home.valid_evidence();
}

/// The threads a stop runs on — the view watcher, which swaps the latched view in and
/// wakes the calls it concerns, and the acknowledgement thread, whose read of the control state
/// an engage waits on — run above the request load: nice −10 when the gateway may raise them
/// (these tests run as root, as the gateway does here), its runtime's workers at the process's
/// own. Without the privilege it keeps one priority for all and says so in its log.
#[test]
fn the_stops_threads_run_above_the_request_load() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let pid = gateway.proc.0.id();
    let threads = || -> Vec<(String, i64)> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let comm = std::fs::read_to_string(task.join("comm")).ok()?;
                let stat = std::fs::read_to_string(task.join("stat")).ok()?;
                // After the `(comm)` field: state is field 3, nice field 19.
                let nice = stat.rsplit_once(')')?.1.split_whitespace().nth(16)?;
                Some((comm.trim().to_string(), nice.parse().ok()?))
            })
            .collect()
    };
    let nice_of = |prefix: &str| -> Vec<i64> {
        threads()
            .into_iter()
            .filter(|(comm, _)| comm.starts_with(prefix))
            .map(|(_, nice)| nice)
            .collect()
    };
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    // The process's own priority is its main thread's; the test may itself run niced.
    let own = threads()
        .into_iter()
        .find(|(comm, _)| comm == "stopline")
        .map(|(_, nice)| nice)
        .expect("the gateway's main thread");
    let raised = if root { -10 } else { own };
    for stop_thread in ["stopline-view-w", "stopline-ack"] {
        assert_eq!(
            nice_of(stop_thread),
            vec![raised],
            "{stop_thread}: {:?}",
            threads()
        );
    }
    let workers = nice_of("stopline-gw");
    assert!(
        !workers.is_empty() && workers.iter().all(|nice| *nice == own),
        "the runtime's workers keep the process's priority: {:?}",
        threads()
    );
    if !root {
        let log = std::fs::read_to_string(home.dir.path().join("gateway.log")).unwrap();
        assert!(log.contains("raising them needs CAP_SYS_NICE"), "{log}");
    }
}

#[test]
fn a_label_stop_through_the_api_refuses_every_carrier_and_its_delegates_at_the_gateway() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let carrier = home.token(&["--agent", "red-a", "--label", "task=ctf-17"]);
    let plain = home.token(&["--agent", "plain"]);
    // /v1/delegate: a child of the unlabelled parent that adds the label; one of the carrier
    // that would change it is refused.
    let adds = gateway.post(
        "/v1/delegate",
        Some(&plain),
        &json!({"agent": "scout", "labels": {"task": "ctf-17"}}),
    );
    assert_eq!(adds.status, 200, "{}", adds.body);
    let scout = adds.json()["token"].as_str().unwrap().to_string();
    let changes = gateway.post(
        "/v1/delegate",
        Some(&carrier),
        &json!({"agent": "x", "labels": {"task": "ctf-18"}}),
    );
    assert_eq!(
        (changes.status, changes.code().as_str()),
        (400, "bad_request"),
        "{}",
        changes.body
    );
    let r = gateway.post(
        "/v1/engage",
        Some(&plain),
        &json!({"scope": "label:task=ctf-17", "reason": "stop the task"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["latch"]["scope"], "label:task=ctf-17");
    for token in [&carrier, &scout] {
        let check = gateway.post("/v1/check", Some(token), &json!({"class": "noncritical"}));
        assert_eq!(check.json()["decision"], "block", "{}", check.body);
        assert_eq!(
            check.json()["code"],
            "stale_control_epoch",
            "{}",
            check.body
        );
    }
    let check = gateway.post("/v1/check", Some(&plain), &json!({"class": "noncritical"}));
    assert_eq!(check.json()["decision"], "allow", "{}", check.body);
}
