//! A JSON (not streamed) MCP exchange runs in a task of its own and is never owned by the agent
//! (SPEC §12.2): an agent whose connection goes
//! away mid-call leaves the exchange running, and its outcome is recorded when the upstream
//! answers; an emergency answers a waiting call at once and the exchange goes on detached until
//! the upstream's answer, which is recorded, not shown. Runs the real gateway (in process) and an
//! upstream on loopback sockets that answers a `tools/call` only when the test releases it.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{engage, tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;
use tokio::sync::{mpsc, Notify};

#[derive(Clone)]
struct Upstream {
    /// Each `tools/call` id, as it arrives.
    arrived: mpsc::UnboundedSender<Value>,
    /// Releases one waiting `tools/call`.
    release: Arc<Notify>,
}

async fn upstream(State(up): State<Upstream>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap();
    let result = if request["method"] == "tools/call" {
        up.arrived.send(request["id"].clone()).unwrap();
        up.release.notified().await;
        json!({"content": [{"type": "text", "text": "done"}]})
    } else {
        json!({})
    };
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// Wait (bounded) until the operation of request `id` has `outcome`.
async fn outcome_of(ctx: &Context, id: &str) -> Option<String> {
    for _ in 0..200 {
        let (ops, _) = ctx.store.operations();
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
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (arrived, mut arrivals) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/mcp", post(upstream))
        .with_state(Upstream {
            arrived,
            release: release.clone(),
        });
    tokio::spawn(async move { axum::serve(listener, app).await });
    std::fs::write(
        home.join("config.toml"),
        format!("ack_timeout_ms = 2000\ncut_outcome_wait_s = 30\n[mcp.held]\nurl = \"http://{upstream_addr}/mcp\"\n"),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: Some(Box::new(stopline_mcp::http::router)),
    })
    .await
    .expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs {
        agent: "caller".into(),
        role: Role::Agent,
        project: None,
        run: None,
        ttl_s: 600,
        budgets: Default::default(),
    };
    let token = tokens::issue(&ctx, &args).expect("token").token;
    let url = format!("http://{}/mcp/held", gateway.addr);
    let call = move |id: u64| {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "work", "arguments": {}}});
        client
            .post(&url)
            .bearer_auth(&token)
            .header(header::ACCEPT, "application/json, text/event-stream")
            .json(&body)
            .send()
    };

    // The agent goes away while the upstream works: the exchange goes on and gets its outcome.
    let gone = tokio::spawn(call(1));
    assert_eq!(arrivals.recv().await.unwrap(), 1);
    gone.abort();
    let _ = gone.await;
    // Give the gateway time to see the connection close before the upstream answers (the
    // outcome must be the same whether it has or not).
    tokio::time::sleep(Duration::from_millis(200)).await;
    release.notify_one();
    assert_eq!(
        outcome_of(&ctx, "1").await.as_deref(),
        Some("committed"),
        "{:?}",
        ctx.store.operations()
    );

    // An emergency answers the waiting call at once; its real outcome is still recorded.
    let waiting = tokio::spawn(call(2));
    assert_eq!(arrivals.recv().await.unwrap(), 2);
    let stopper = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let caller = engage::Caller {
            token: None,
            by: Some("tester".into()),
            local: true,
        };
        engage::engage(
            &stopper,
            &caller,
            "agent:caller",
            Some("emergency"),
            "cut it",
        )
    })
    .await
    .unwrap()
    .expect("engage");
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
    let (ops, _) = ctx.store.operations();
    let open = ops
        .values()
        .find(|o| o.request_id.as_deref() == Some("2"))
        .expect("its operation");
    assert!(
        open.outcome.is_none() && !open.in_doubt,
        "the upstream has not answered yet: {open:?}"
    );
    release.notify_one();
    assert_eq!(
        outcome_of(&ctx, "2").await.as_deref(),
        Some("committed"),
        "{:?}",
        ctx.store.operations()
    );
    gateway.shutdown().await;
}
