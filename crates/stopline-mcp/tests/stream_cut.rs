//! The proxy passes an upstream's SSE answer through event by event (not buffered), and an
//! emergency covering the agent answers the open call at once with a `break_glass_contained`
//! error and ends the agent's stream, while the exchange goes on detached (docs/reference.md §8): a call
//! whose upstream answers within `cut_outcome_wait_s` gets its real outcome recorded; one whose
//! upstream never answers is left in doubt when the wait ends, blocking its target for its own
//! agent only. Runs the real gateway (in process) and a real upstream on loopback sockets.

mod support;

use axum::body::Bytes;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// An upstream whose tools send one progress event and then: `slow` never finishes, `late`
/// answers a second later.
fn answer(request: &Received) -> Answer {
    let request = request.json();
    if request["method"] == "tools/list" {
        let tools = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": [{"name": "slow", "inputSchema": {"type": "object"}}]}});
        return Answer::json(tools.to_string());
    }
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
    let first = Answer::events().event(progress.to_string());
    if request["params"]["name"] == "late" {
        let done = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}});
        return first.event_after(Duration::from_secs(1), done.to_string());
    }
    first.then_hang()
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<Bytes>> + Unpin),
    buffer: &mut String,
) -> Option<String> {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            return Some(event);
        }
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the stream stalled")
        {
            Some(Ok(chunk)) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
            _ => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_pass_event_by_event_and_an_emergency_answers_them_at_once() {
    let upstream = Upstream::start(answer);
    let config = format!(
        "ack_timeout_ms = 2000\ncut_outcome_wait_s = 3\n[mcp.slow]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "streamer").await;
    let ctx = &world.ctx;
    let (url, token) = (world.mcp_url("slow"), &world.token);

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let open = |id: u64, tool: &str| {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
        client
            .post(&url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&call)
            .send()
    };
    let response = open(7, "slow").await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    // The first event arrives while the upstream is still working: nothing is buffered.
    let first = next_event(&mut stream, &mut buffer)
        .await
        .expect("first event");
    assert!(first.contains("notifications/progress"), "{first}");
    let late = open(8, "late").await.unwrap();
    let mut late_stream = late.bytes_stream();
    let mut late_buffer = String::new();
    let first = next_event(&mut late_stream, &mut late_buffer)
        .await
        .unwrap();
    assert!(first.contains("notifications/progress"), "{first}");
    let census = ctx.store.ops().census();
    let op = census
        .destination
        .iter()
        .find(|e| e.operation.target == "mcp:slow:slow")
        .expect("a prepared operation");
    assert!(op.in_flight && op.operation.dispatched, "{op:?}");

    let receipt = world.emergency("agent:streamer", "cut the stream").await;
    let receipt = stopline_control::receipts::Receipt::to_json(&receipt);
    assert_eq!(receipt["engaged"], true);

    let cut = next_event(&mut stream, &mut buffer)
        .await
        .expect("an answer for the open call");
    assert!(
        cut.contains("\"id\":7") && cut.contains("break_glass_contained"),
        "{cut}"
    );
    let end = tokio::time::timeout(Duration::from_secs(5), next_event(&mut stream, &mut buffer))
        .await
        .expect("the stream ended");
    assert_eq!(end, None, "nothing after the cut");
    let cut = next_event(&mut late_stream, &mut late_buffer)
        .await
        .unwrap();
    assert!(
        cut.contains("\"id\":8") && cut.contains("break_glass_contained"),
        "{cut}"
    );
    assert_eq!(
        next_event(&mut late_stream, &mut late_buffer).await,
        None,
        "the real answer, when it comes, is not shown to the stopped agent"
    );

    // The call whose upstream answered after the cut has that outcome recorded.
    let mut resolved = false;
    for _ in 0..100 {
        let (ops, _) = ctx.store.ops().all();
        if ops.values().any(|o| {
            o.request_id.as_deref() == Some("8") && o.outcome.as_deref() == Some("committed")
        }) {
            resolved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(resolved, "{:?}", ctx.store.ops().all());

    // The call whose upstream never answers is left in doubt once cut_outcome_wait_s (3 s)
    // ends: unresolved, not in flight, and it blocks its target for its own agent.
    let mut blocked = None;
    for _ in 0..200 {
        if let Some(blockers) = ctx
            .store
            .ops()
            .blocked_targets()
            .get("mcp:slow:slow")
            .cloned()
        {
            blocked = Some(blockers);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let blocked = blocked.unwrap_or_else(|| panic!("{:?}", ctx.store.ops().census()));
    assert_eq!(
        blocked.iter().map(|b| b.blocks.clone()).collect::<Vec<_>>(),
        [stopline_core::ops::Blocks::Agent("streamer".into())]
    );
    let census = ctx.store.ops().census();
    let op = census
        .destination
        .iter()
        .find(|e| {
            e.operation.target == "mcp:slow:slow" && e.operation.request_id.as_deref() == Some("7")
        })
        .unwrap();
    assert!(
        op.operation.in_doubt && op.operation.outcome.is_none(),
        "{op:?}"
    );

    world.shutdown().await;
}
