//! `POST /mcp/<server>` is dispatched before the gateway's router (`listener.rs`,
//! `mcp_post_server`): no request the router would not have governed may reach the upstream that
//! way, and every request the dispatch leaves to the router must be answered as before. Raw
//! HTTP/1.1 on a loopback socket (so the path is exactly the bytes written: no client normalizes
//! it), the real gateway in process, and an upstream that counts every request it receives.
//!
//! The paths tried: the plain one, a percent-encoded server name (the router decodes it, the
//! dispatch leaves it to the router: the same server, governed the same), a query string, an
//! absolute-form target, `/mcp//x`, a trailing slash, a second segment, `HEAD`, no token, a
//! header past hyper's limit, a body past the router's limit; then the same after a stop of the
//! agent: nothing more reaches the upstream, whichever way the request came.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{engage, tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn upstream(State(seen): State<Arc<AtomicUsize>>, body: Bytes) -> Response {
    seen.fetch_add(1, Ordering::SeqCst);
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let answer = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"content\":[]}}}}",
        request["id"]
    );
    ([("content-type", "application/json")], answer).into_response()
}

/// One request written as `head` (request line and headers, without the blank line) and
/// `body`; the status of the answer (0 when the gateway closed without one).
async fn raw(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "{head}\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    // A gateway that refuses early may close before it read everything: that is an answer too.
    let _ = stream.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_path_reaches_the_upstream_unadmitted() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/mcp", post(upstream))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    std::fs::write(
        home.join("config.toml"),
        format!("[mcp.rec]\nurl = \"http://{upstream_addr}/mcp\"\n"),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: Some(Box::new(stopline_mcp::http::router)),
        access_log: false,
    })
    .await
    .expect("gateway");
    let addr = gateway.addr;
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs {
        agent: "caller".into(),
        role: Role::Agent,
        project: None,
        run: None,
        ttl_s: 600,
        budgets: Default::default(),
        labels: Vec::new(),
    };
    let token = tokens::issue(&ctx, &args).expect("token").token;
    let auth = format!("authorization: Bearer {token}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream");
    let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;
    let seen_now = || seen.load(Ordering::SeqCst);

    // Governed and forwarded, whichever way the request is dispatched.
    for target in [
        "/mcp/rec".to_string(),
        "/mcp/r%65c".to_string(),
        "/mcp/rec?x=1".to_string(),
        format!("http://{addr}/mcp/rec"),
    ] {
        let before = seen_now();
        let status = raw(addr, &format!("POST {target} HTTP/1.1\r\n{auth}"), call).await;
        assert_eq!(status, 200, "{target}");
        assert_eq!(seen_now(), before + 1, "{target} is forwarded once");
    }

    // Not the route, or not admitted: nothing reaches the upstream.
    let before = seen_now();
    for (head, expected) in [
        (format!("POST /mcp//rec HTTP/1.1\r\n{auth}"), 404),
        (format!("POST /mcp/rec/ HTTP/1.1\r\n{auth}"), 404),
        (format!("POST /mcp/rec/x HTTP/1.1\r\n{auth}"), 404),
        (format!("POST /mcp/ HTTP/1.1\r\n{auth}"), 404),
        (
            "POST /mcp/rec HTTP/1.1\r\ncontent-type: application/json".to_string(),
            401,
        ),
        (
            "POST /mcp/r%65c HTTP/1.1\r\ncontent-type: application/json".to_string(),
            401,
        ),
        ("HEAD /mcp/rec HTTP/1.1".to_string(), 401),
        // Refused egress: the request's JSON-RPC error, with HTTP 200.
        (format!("POST /mcp/nope HTTP/1.1\r\n{auth}"), 200),
    ] {
        let status = raw(addr, &head, call).await;
        assert_eq!(status, expected, "{head}");
    }
    let huge = format!(
        "POST /mcp/rec HTTP/1.1\r\n{auth}\r\nx-pad: {}",
        "a".repeat(1 << 20)
    );
    let status = raw(addr, &huge, call).await;
    assert!(status == 431 || status == 0, "a 1 MiB header: {status}");
    let mut big = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 3 << 20));
    big.extend_from_slice(br#""}}}"#);
    for target in ["/mcp/rec", "/mcp/r%65c"] {
        let status = raw(addr, &format!("POST {target} HTTP/1.1\r\n{auth}"), &big).await;
        assert_eq!(status, 413, "a 3 MiB body to {target}");
    }
    assert_eq!(seen_now(), before, "nothing reached the upstream");

    // A stop of the agent: refused, whichever way the request comes.
    let stopper = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let caller = engage::Caller {
            token: None,
            by: Some("tester".into()),
            local: true,
        };
        engage::engage(&stopper, &caller, "agent:caller", Some("halt-all"), "stop")
    })
    .await
    .unwrap()
    .expect("engage");
    // Engage returned after this gateway acknowledged the latch: its view holds it.
    for target in ["/mcp/rec", "/mcp/r%65c", "/mcp/rec?x=1"] {
        let status = raw(addr, &format!("POST {target} HTTP/1.1\r\n{auth}"), call).await;
        // The refused request's JSON-RPC error, with HTTP 200 (docs/reference.md §8).
        assert_eq!(status, 200, "{target} after the stop");
    }
    let status = raw(addr, &format!("HEAD /mcp/rec HTTP/1.1\r\n{auth}"), b"").await;
    assert_eq!(status, 403, "HEAD after the stop");
    assert_eq!(
        seen_now(),
        before,
        "nothing reached the upstream after the stop"
    );
    gateway.shutdown().await;
}
