//! `--net gateway-only`: the agent reaches the gateway (through the forwarded address inside its
//! own network namespace) and nothing else on the host's loopback. The gateway here is a tiny
//! loopback HTTP server standing in for `stopline serve`.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Duration;
use util::Home;

#[test]
fn a_gateway_only_agent_reaches_the_gateway_and_nothing_else() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    let outside_port = outside.local_addr().unwrap().port();
    outside.set_nonblocking(true).unwrap();
    let run = run_id("net");
    let card = write_card(&home, &card(&run, "agent-n"));
    let out = open_dir("stopline-run-net-");
    let script = format!(
        r#"
echo "$STOPLINE_URL" > "$OUT/url"
cat /proc/net/dev > "$OUT/interfaces"
curl -s -m 5 -o "$OUT/gateway.body" -w '%{{http_code}}' "$STOPLINE_URL/healthz" > "$OUT/gateway.code"
curl -s -m 5 -o /dev/null "http://127.0.0.1:{outside_port}/" ; echo $? > "$OUT/outside.exit"
exit 0
"#
    );
    let hits_before = gateway.hits.load(Ordering::SeqCst);
    let running = start_run_env(
        &home,
        &card,
        &[
            "--unconfined",
            "--net",
            "gateway-only",
            "--gateway",
            &gateway.url(),
        ],
        out.path(),
        &script,
        &[("OUT", out.path().to_str().unwrap())],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        read(out.path(), "url").unwrap(),
        format!("http://127.0.0.1:{}", gateway.addr.port())
    );
    assert_eq!(read(out.path(), "gateway.code").as_deref(), Some("200"));
    assert!(read(out.path(), "gateway.body")
        .unwrap()
        .contains("test-gateway"));
    // The run's own /healthz probe and the agent's request both reached the gateway.
    assert!(gateway.hits.load(Ordering::SeqCst) >= hits_before + 2);
    let curl_exit: i32 = read(out.path(), "outside.exit").unwrap().parse().unwrap();
    assert_ne!(
        curl_exit, 0,
        "the agent reached a server outside the gateway"
    );
    assert!(
        outside.accept().is_err(),
        "the outside server saw a connection"
    );
    let interfaces = read(out.path(), "interfaces").unwrap();
    let names: Vec<&str> = interfaces
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, vec!["lo"], "{interfaces}");
    let worker = registration(&home, &run, "agent-n").unwrap();
    assert_eq!(worker["net"], "gateway-only");
}

/// Kills the gateway process when the test ends, however it ends.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn with_the_real_gateway_the_agent_authenticates_through_the_namespace_and_the_config_hash_is_recorded(
) {
    let home = Home::new();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let _serve = Serve(
        home.command(&["serve", "--listen", &listen])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        "stopline serve to be healthy",
        Duration::from_secs(30),
        || {
            let addr = listen.parse().unwrap();
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
            let output = std::process::Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    &format!("http://{listen}/healthz"),
                ])
                .output()
                .ok()?;
            (output.stdout == b"200").then_some(())
        },
    );
    let run = run_id("serve");
    let card = write_card(&home, &card(&run, "agent-s"));
    let out = open_dir("stopline-run-serve-");
    let script = r#"
curl -s -m 5 -o "$OUT/status.body" -w '%{http_code}' -H "Authorization: Bearer $STOPLINE_TOKEN" "$STOPLINE_URL/v1/status" > "$OUT/status.code"
curl -s -m 5 -o /dev/null -w '%{http_code}' "$STOPLINE_URL/v1/status" > "$OUT/anonymous.code"
"#;
    let running = start_run_env(
        &home,
        &card,
        &[
            "--unconfined",
            "--net",
            "gateway-only",
            "--gateway",
            &listen,
        ],
        out.path(),
        script,
        &[("OUT", out.path().to_str().unwrap())],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(out.path(), "status.code").as_deref(), Some("200"));
    let status: serde_json::Value =
        serde_json::from_str(&read(out.path(), "status.body").unwrap()).unwrap();
    assert!(status["phase"].is_string(), "{status}");
    assert_eq!(read(out.path(), "anonymous.code").as_deref(), Some("401"));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.file(&format!("runs/{run}/run.json"))).unwrap())
            .unwrap();
    assert_eq!(record["gateway"]["config_hash_source"], "registration");
    let hash = record["gateway"]["config_sha256"].as_str().unwrap();
    assert!(
        hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );
}
