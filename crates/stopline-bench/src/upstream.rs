//! The in-process MCP upstream every gateway bench proxies to (`bench gateway`, `bench fleet`,
//! the in-process driver): `initialize`, `tools/list` (a read-only `echo` and a recorded
//! `record`) and `tools/call` echoing its `text`. A leaf: it depends on no other bench module.

use crate::error::BenchError;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("bench upstream: {e}"))
}

/// Answer one JSON-RPC request as the bench's MCP server.
pub(crate) async fn upstream(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let result = match request["method"].as_str() {
        Some("initialize") => {
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "bench", "version": "1"}})
        }
        Some("tools/list") => {
            json!({"tools": [
                {"name": "echo", "description": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                {"name": "record", "description": "echo, not read-only", "inputSchema": {"type": "object"}},
            ]})
        }
        Some("tools/call") => {
            json!({"content": [{"type": "text", "text": request["params"]["arguments"]["text"].clone()}]})
        }
        _ => return StatusCode::ACCEPTED.into_response(),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// The in-process MCP upstream of the gateway benches: where it listens, its `/mcp` URL and
/// its task (aborted by the caller when done).
pub(crate) struct Upstream {
    pub addr: std::net::SocketAddr,
    pub url: String,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The in-process MCP upstream every gateway bench proxies to ([`upstream`]),
/// on a free loopback port.
pub(crate) async fn start_upstream() -> Result<Upstream, BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            axum::Router::new().route("/mcp", axum::routing::post(upstream)),
        )
        .await
    });
    Ok(Upstream {
        addr,
        url: format!("http://{addr}/mcp"),
        server,
    })
}
