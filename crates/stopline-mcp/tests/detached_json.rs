//! A JSON (not streamed) MCP exchange runs in a task of its own and is never owned by the agent
//! (docs/reference.md §8): an agent whose connection goes
//! away mid-call leaves the exchange running, and its outcome is recorded when the upstream
//! answers; an emergency answers a waiting call at once and the exchange goes on detached until
//! the upstream's answer, which is recorded, not shown. Runs the real gateway (in process) and an
//! upstream on loopback sockets that answers a `tools/call` only when the test releases it.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use stopline_control::Context;
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// Answers every request; a `tools/call` only once the test releases it.
fn answer(request: &Received) -> Answer {
    let request = request.json();
    let held = request["method"] == "tools/call";
    let result = if held {
        json!({"content": [{"type": "text", "text": "done"}]})
    } else {
        json!({})
    };
    let answer =
        Answer::json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}).to_string());
    if held {
        answer.held()
    } else {
        answer
    }
}

/// Wait (bounded) until the operation of request `id` has `outcome`.
async fn outcome_of(ctx: &Context, id: &str) -> Option<String> {
    for _ in 0..200 {
        let (ops, _) = ctx.store.ops().all();
        if let Some(op) = ops.values().find(|o| o.request_id.as_deref() == Some(id)) {
            if op.outcome.is_some() || op.in_doubt {
                return Some(op.outcome.clone().unwrap_or_else(|| "in doubt".into()));
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_exchange_outlives_its_agent_and_a_cut_of_it() {
    let upstream = Upstream::start(answer);
    let config = format!(
        "ack_timeout_ms = 2000\ncut_outcome_wait_s = 30\n[mcp.held]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;
    let ctx = &world.ctx;
    let (url, token) = (world.mcp_url("held"), world.token.clone());
    let call = move |id: u64| {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "work", "arguments": {}}});
        client
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
    };

    // The agent goes away while the upstream works: the exchange goes on and gets its outcome.
    let gone = tokio::spawn(call(1));
    assert_eq!(upstream.next_held().await.json()["id"], 1);
    gone.abort();
    let _ = gone.await;
    // Give the gateway time to see the connection close before the upstream answers (the
    // outcome must be the same whether it has or not).
    tokio::time::sleep(Duration::from_millis(200)).await;
    upstream.release_one();
    assert_eq!(
        outcome_of(ctx, "1").await.as_deref(),
        Some("committed"),
        "{:?}",
        ctx.store.ops().all()
    );

    // An emergency answers the waiting call at once; its real outcome is still recorded.
    let waiting = tokio::spawn(call(2));
    assert_eq!(upstream.next_held().await.json()["id"], 2);
    world.emergency("agent:caller", "cut it").await;
    let answer: Value = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered without the upstream")
        .unwrap()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["error"]["data"]["code"], "break_glass_contained",
        "{answer}"
    );
    let (ops, _) = ctx.store.ops().all();
    let open = ops
        .values()
        .find(|o| o.request_id.as_deref() == Some("2"))
        .expect("its operation");
    assert!(
        open.outcome.is_none() && !open.in_doubt,
        "the upstream has not answered yet: {open:?}"
    );
    upstream.release_one();
    assert_eq!(
        outcome_of(ctx, "2").await.as_deref(),
        Some("committed"),
        "{:?}",
        ctx.store.ops().all()
    );
    world.shutdown().await;
}
