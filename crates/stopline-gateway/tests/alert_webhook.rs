//! A breaker trip's alert webhook (`[breakers] alert_webhook`) gets the trip's
//! `evidence-record.v1` as one JSON POST, with the credentials of its URL as `Authorization:
//! Basic`, and a redirect it answers is never followed: the record (and those credentials) go to
//! the one URL the owner configured, nowhere else. The gateway runs in process, its log captured;
//! the webhook and the place it redirects to are recording upstreams on loopback.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_control::config::Config;
use stopline_control::{tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;
use stopline_testkit::upstream::{Answer, Upstream};

/// Everything the gateway logged (the JSON lines of a global subscriber).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Wait (bounded) until `done` holds; panics naming `what` otherwise.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trips_webhook_gets_its_evidence_record_and_a_redirect_is_not_followed() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .init();
    let elsewhere = Upstream::start(|_| Answer::json("{}"));
    let location = elsewhere.url("/hook");
    let hook =
        Upstream::start(move |_| Answer::status(307, "moved").header("location", location.clone()));

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let webhook = format!("http://alert:s%3Acret@{}/hook", hook.addr());
    std::fs::write(
        home.join("config.toml"),
        format!("[breakers]\nunauthorized_calls = 1\nalert_webhook = \"{webhook}\"\n"),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: None,
        access_log: false,
    })
    .await
    .expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs::new("tripper", Role::Agent, 600);
    let token = tokens::issue(&ctx, &args).expect("token").token;
    let caller = gateway.governor.authenticate(Some(&token)).expect("caller");
    gateway
        .governor
        .note_unauthorized(&caller, "tool_not_allowed");

    // The trip's evidence record, and the latch-alert.v1 of the latch it engaged.
    let evidence = || {
        hook.received()
            .into_iter()
            .filter(|r| r.json()["schema"] == "evidence-record.v1")
            .collect::<Vec<_>>()
    };
    until("the webhook never got the evidence record", || {
        !evidence().is_empty()
    })
    .await;
    until("the redirect was never given up", || {
        log.text()
            .contains("alert webhook not delivered: not tried again")
    })
    .await;
    let received = evidence();
    assert_eq!(received.len(), 1, "a redirect is not retried: {received:?}");
    let alert = &received[0];
    assert_eq!(
        (alert.method.as_str(), alert.path.as_str()),
        ("POST", "/hook")
    );
    assert_eq!(alert.header("content-type"), Some("application/json"));
    // `alert:s:cret`, percent-decoded from the URL, as reqwest sent it.
    assert_eq!(
        alert.header("authorization"),
        Some("Basic YWxlcnQ6czpjcmV0")
    );
    assert!(
        alert.header("host").is_some_and(|h| !h.contains('@')),
        "{alert:?}"
    );
    let record = alert.json();
    assert_eq!(record["schema"], "evidence-record.v1", "{record}");
    assert_eq!(record["agent"], "tripper", "{record}");
    assert_eq!(record["breaker"], "unauthorized_calls", "{record}");
    let latch = record["latch"]
        .as_str()
        .expect("the trip's latch")
        .to_string();
    assert!(
        ctx.store
            .load_view()
            .latches
            .iter()
            .any(|l| l.record.as_ref().is_some_and(|r| r.id == latch)),
        "the trip's latch is in force: {record}"
    );

    // The exchange ends with the 307 logged as not followed, and nothing reached elsewhere.
    until("the redirect was never reported", || {
        log.text().contains("answered a redirect, not followed")
    })
    .await;
    assert!(
        elsewhere.received().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.received()
    );
    assert!(
        !log.text().contains("s%3Acret") && !log.text().contains("s:cret"),
        "the webhook's credentials were logged: {}",
        log.text()
    );
    gateway.shutdown().await;
}
