//! A call in flight that an emergency answers at once is one warning in the gateway's log (the
//! cut event of `stopline_gateway::logs`, with agent, route and code), not two: at a stop every
//! covered call in flight is cut at once, and `stopline serve` logs at `info`, so each line more
//! per cut is written by the workers that are answering the other cut calls.

mod support;

use serde_json::json;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// Everything logged, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Answers every request; a `tools/call` only once the test releases it.
fn answer(request: &Received) -> Answer {
    let request = request.json();
    let held = request["method"] == "tools/call";
    let answer = Answer::json(
        json!({"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}}).to_string(),
    );
    if held {
        answer.held()
    } else {
        answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_at_an_emergency_is_one_warning() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let upstream = Upstream::start(answer);
    let config = format!(
        "ack_timeout_ms = 2000\ncut_outcome_wait_s = 30\n[mcp.held]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "work", "arguments": {}}});
    let waiting = tokio::spawn(
        client
            .post(world.mcp_url("held"))
            .bearer_auth(&world.token)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send(),
    );
    assert_eq!(upstream.next_held().await.json()["id"], 7);
    world.emergency("agent:caller", "cut it").await;
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered without the upstream")
        .unwrap()
        .unwrap();
    // The cut is the call's JSON-RPC error, carried with HTTP 200 (docs/reference.md §8).
    assert_eq!(answer.status().as_u16(), 200);
    upstream.release_one();
    world.shutdown().await;
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let cuts: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("break_glass_contained"))
        .collect();
    assert_eq!(cuts.len(), 1, "{text}");
    assert!(
        cuts[0].contains(r#"agent="caller""#) && cuts[0].contains(r#"route="/mcp/held""#),
        "the cut names the agent and the route: {text}"
    );
}
