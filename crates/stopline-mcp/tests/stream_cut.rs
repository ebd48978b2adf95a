//! The proxy passes an upstream's SSE answer through event by event (not buffered), and an
//! emergency covering the agent answers the open call at once with a `break_glass_contained`
//! error and ends the agent's stream, while the exchange goes on detached (SPEC §12.2): a call
//! whose upstream answers within `cut_outcome_wait_s` gets its real outcome recorded; one whose
//! upstream never answers is left in doubt when the wait ends, blocking its target for its own
//! agent only. Runs the real gateway (in process) and a real upstream on loopback sockets.

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{engage, tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;

/// An upstream whose tools send one progress event and then: `slow` never finishes, `late`
/// answers a second later.
async fn upstream(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap();
    if request["method"] == "tools/list" {
        let tools = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": [{"name": "slow", "inputSchema": {"type": "object"}}]}});
        return (
            [(header::CONTENT_TYPE, "application/json")],
            tools.to_string(),
        )
            .into_response();
    }
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
    let first = futures::stream::once(async move {
        Ok::<_, std::io::Error>(Bytes::from(format!("event: message\ndata: {progress}\n\n")))
    });
    if request["params"]["name"] == "late" {
        let done = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}});
        let answer = futures::stream::once(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::io::Error>(Bytes::from(format!("event: message\ndata: {done}\n\n")))
        });
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(first.chain(answer)),
        )
            .into_response();
    }
    let stream = first.chain(futures::stream::pending());
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
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
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let upstream_task = tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().route("/mcp", post(upstream))).await
    });
    std::fs::write(
        home.join("config.toml"),
        format!("ack_timeout_ms = 2000\ncut_outcome_wait_s = 3\n[mcp.slow]\nurl = \"http://{upstream_addr}/mcp\"\n"),
    )
    .unwrap();
    let options = ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: Some(Box::new(stopline_mcp::http::router)),
    };
    let gateway = start(options).await.expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs {
        agent: "streamer".into(),
        role: Role::Agent,
        project: None,
        run: None,
        ttl_s: 600,
        budgets: Default::default(),
    };
    let token = tokens::issue(&ctx, &args).expect("token").token;

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let open = |id: u64, tool: &str| {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
        client
            .post(format!("http://{}/mcp/slow", gateway.addr))
            .bearer_auth(&token)
            .header(header::ACCEPT, "application/json, text/event-stream")
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
    let census = ctx.store.census();
    let op = census
        .destination
        .iter()
        .find(|e| e.operation.target == "mcp:slow:slow")
        .expect("a prepared operation");
    assert!(op.in_flight && op.operation.dispatched, "{op:?}");

    let stopper = ctx.clone();
    let receipt = tokio::task::spawn_blocking(move || {
        let caller = engage::Caller {
            token: None,
            by: Some("tester".into()),
            local: true,
        };
        engage::engage(
            &stopper,
            &caller,
            "agent:streamer",
            Some("emergency"),
            "cut the stream",
        )
    })
    .await
    .unwrap()
    .expect("engage");
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
        let (ops, _) = ctx.store.operations();
        if ops.values().any(|o| {
            o.request_id.as_deref() == Some("8") && o.outcome.as_deref() == Some("committed")
        }) {
            resolved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(resolved, "{:?}", ctx.store.operations());

    // The call whose upstream never answers is left in doubt once cut_outcome_wait_s (3 s)
    // ends: unresolved, not in flight, and it blocks its target for its own agent.
    let mut blocked = None;
    for _ in 0..200 {
        if let Some(blockers) = ctx.store.blocked_targets().get("mcp:slow:slow").cloned() {
            blocked = Some(blockers);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let blocked = blocked.unwrap_or_else(|| panic!("{:?}", ctx.store.census()));
    assert_eq!(
        blocked.iter().map(|b| b.blocks.clone()).collect::<Vec<_>>(),
        [stopline_core::ops::Blocks::Agent("streamer".into())]
    );
    let census = ctx.store.census();
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

    gateway.shutdown().await;
    upstream_task.abort();
}
