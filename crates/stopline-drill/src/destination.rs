//! The drill's destination: a loopback server that stands for everything an agent can reach
//! through the gateway, and that timestamps every effect it executes with the caller's request
//! id.
//!
//! `POST /mcp` is a small Streamable HTTP MCP server (JSON answers, no sessions) with two tools
//! that are not read-only, so every call is a governed destination operation: `lookup` (a tool
//! call) and `write` (a write to its storage). `POST /v1/chat/completions` is an
//! OpenAI-compatible model. The request id of a tool call is its JSON-RPC id, exactly as the
//! gateway records it; a model call carries its id in `metadata.stopline_request_id`, since the
//! gateway forwards the body and not the caller's headers. `POST /a2a` is a remote A2A agent
//! (`crate::remote_agent`): a message it receives is an effect by its JSON-RPC id, and it keeps
//! the cancels it received. Both write their effects into one log (`crate::effects`). The
//! destination only records; it never judges, and it records an effect *before* answering, so
//! nothing it executed is missed.

use crate::effects::{Effect, EffectKind, EffectLog};
use crate::remote_agent::{A2aCancel, RemoteAgent};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

/// A running destination.
#[derive(Debug)]
pub struct Destination {
    /// The bound address.
    pub addr: SocketAddr,
    effects: Arc<EffectLog>,
    remote: Arc<RemoteAgent>,
    server: tokio::task::JoinHandle<()>,
}

impl Destination {
    /// Start on `listen` (e.g. `127.0.0.1:0`) on the current runtime.
    pub async fn start(listen: &str) -> std::io::Result<Destination> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let effects = Arc::new(EffectLog::default());
        let remote = Arc::new(RemoteAgent::new(effects.clone()));
        let router = Router::new()
            .route("/mcp", post(mcp))
            .route("/v1/chat/completions", post(model))
            .with_state(effects.clone())
            .merge(
                Router::new()
                    .route("/a2a", post(crate::remote_agent::rpc))
                    .with_state(remote.clone()),
            );
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "the drill's destination stopped");
            }
        });
        Ok(Destination {
            addr,
            effects,
            remote,
            server,
        })
    }

    /// The MCP endpoint, for `[mcp.<server>] url`.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The model base URL, for `[model] base_url`.
    pub fn model_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The remote A2A agent's JSON-RPC endpoint, for `[a2a.<name>] url`.
    pub fn a2a_url(&self) -> String {
        format!("http://{}/a2a", self.addr)
    }

    /// Every effect executed so far.
    pub fn effects(&self) -> Vec<Effect> {
        self.effects.effects()
    }

    /// Every cancel the remote A2A agent received so far.
    pub fn a2a_cancels(&self) -> Vec<A2aCancel> {
        self.remote.cancels()
    }

    /// Stop serving.
    pub fn shutdown(self) {
        self.server.abort();
    }
}

const TOOLS: &str = r#"[
  {"name": "lookup", "description": "Look something up (a tool call).", "inputSchema": {"type": "object"}},
  {"name": "write", "description": "Write to the destination's storage.", "inputSchema": {"type": "object"}}
]"#;

async fn mcp(State(log): State<Arc<EffectLog>>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let Some(id) = request.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match request["method"].as_str() {
        Some("initialize") => json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "stopline-drill", "version": "1"}}),
        Some("tools/list") => {
            json!({"tools": serde_json::from_str::<Value>(TOOLS).unwrap_or_default()})
        }
        Some("tools/call") => {
            let kind = match request["params"]["name"].as_str() {
                Some("write") => EffectKind::Write,
                _ => EffectKind::ToolCall,
            };
            log.record(id.to_string(), kind);
            json!({"content": [{"type": "text", "text": "done"}]})
        }
        _ => {
            return Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}}))
            .into_response()
        }
    };
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

async fn model(State(log): State<Arc<EffectLog>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = request["metadata"]["stopline_request_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    log.record(id, EffectKind::Model);
    Json(json!({
        "id": "chatcmpl-drill", "object": "chat.completion", "created": 0,
        "model": request["model"].clone(),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
    }))
    .into_response()
}
