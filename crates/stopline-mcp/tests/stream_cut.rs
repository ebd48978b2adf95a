//! The proxy passes an upstream's SSE answer through event by event (not buffered), and an
//! emergency covering the agent cuts the stream: the open call is answered with a
//! `break_glass_contained` error and its destination operation is left in doubt, blocking its
//! target. Runs the real gateway (in process) and a real upstream on loopback sockets.

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

/// An upstream whose only tool, `slow`, sends one progress event and then never finishes.
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
async fn sse_streams_pass_event_by_event_and_an_emergency_cuts_them_in_doubt() {
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
        format!("ack_timeout_ms = 2000\n[mcp.slow]\nurl = \"http://{upstream_addr}/mcp\"\n"),
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
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow", "arguments": {}}});
    let response = client
        .post(format!("http://{}/mcp/slow", gateway.addr))
        .bearer_auth(&token)
        .header(header::ACCEPT, "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    // The first event arrives while the upstream is still working: nothing is buffered.
    let first = next_event(&mut stream, &mut buffer)
        .await
        .expect("first event");
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

    // The operation is in doubt: unresolved, not in flight, and it blocks its target.
    let mut blocked = false;
    for _ in 0..50 {
        if ctx.store.blocked_targets().contains_key("mcp:slow:slow") {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(blocked, "{:?}", ctx.store.census());
    let census = ctx.store.census();
    let op = census
        .destination
        .iter()
        .find(|e| e.operation.target == "mcp:slow:slow")
        .unwrap();
    assert!(
        op.operation.in_doubt && op.operation.outcome.is_none(),
        "{op:?}"
    );

    gateway.shutdown().await;
    upstream_task.abort();
}
