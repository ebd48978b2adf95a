//! `stopline bench gateway`: the same MCP tool call made directly and through the gateway, side
//! by side in one run, at concurrency 1 and 32; p50/p99 of each, the added latency and the ratio.
//!
//! Everything is loopback and throwaway: a tiny built-in JSON-RPC upstream (`initialize`,
//! `tools/list` with a read-only `echo`, `tools/call`), a temporary control directory, and an
//! in-process gateway. The gateway route is the MCP proxy when one is mounted, else a built-in
//! governed passthrough that takes the same Governor path (authenticate, admit, dispatch,
//! forward, finish) without MCP session handling; the receipt says which.

use crate::server::{start, MountFn, ServeOptions};
use crate::{Governor, Outcome};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[error("bench gateway: {0}")]
pub struct BenchError(String);

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError(e.to_string())
}

async fn upstream(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let result = match request["method"].as_str() {
        Some("initialize") => {
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "bench", "version": "1"}})
        }
        Some("tools/list") => {
            json!({"tools": [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]})
        }
        Some("tools/call") => {
            json!({"content": [{"type": "text", "text": request["params"]["arguments"]["text"].clone()}]})
        }
        _ => return StatusCode::ACCEPTED.into_response(),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// The built-in governed passthrough (used when no MCP proxy is mounted).
async fn passthrough(
    State((gov, url)): State<(Governor, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
    let caller = match gov.authenticate(bearer) {
        Ok(caller) => caller,
        Err(refusal) => return crate::error::refusal_response(&refusal),
    };
    let mut admission = match gov
        .admit_tool_call(&caller, "bench", "echo", true, None)
        .await
    {
        Ok(admission) => admission,
        Err(refusal) => return crate::error::refusal_response(&refusal),
    };
    if let Err(refusal) = admission.dispatch() {
        return crate::error::refusal_response(&refusal);
    }
    let forwarded: Value = serde_json::from_slice(&body).unwrap_or_default();
    match gov
        .http_client()
        .post(&url)
        .json_body(&forwarded)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = response.bytes().await.unwrap_or_default();
            admission.finish(Outcome::Committed);
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
                bytes,
            )
                .into_response()
        }
        Err(error) => {
            admission.finish(Outcome::UpstreamUnreachable);
            (StatusCode::BAD_GATEWAY, error.to_string()).into_response()
        }
    }
}

trait JsonBody {
    fn json_body(self, value: &Value) -> Self;
}
impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, value: &Value) -> Self {
        self.header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(serde_json::to_vec(value).unwrap_or_default())
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

struct Target {
    url: String,
    session: Option<String>,
    token: Option<String>,
}

async fn rpc(client: &reqwest::Client, target: &Target, body: &Value) -> Result<(), BenchError> {
    let mut request = client.post(&target.url).json_body(body);
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = &target.session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.map_err(err)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(err)?;
    if !status.is_success() {
        return Err(BenchError(format!(
            "{} answered {status}: {}",
            target.url,
            String::from_utf8_lossy(&bytes)
        )));
    }
    Ok(())
}

async fn handshake(client: &reqwest::Client, target: &mut Target) -> Result<(), BenchError> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "stopline-bench", "version": "1"}}});
    let mut request = client.post(&target.url).json_body(&init);
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(err)?;
    target.session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    response.bytes().await.map_err(err)?;
    rpc(
        client,
        target,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await?;
    rpc(
        client,
        target,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await
}

async fn measure(
    client: &reqwest::Client,
    direct: &Target,
    gateway: &Target,
    concurrency: usize,
    calls: usize,
) -> Result<Value, BenchError> {
    let per_worker = calls.div_ceil(concurrency).max(1);
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let client = client.clone();
        let direct = Target {
            url: direct.url.clone(),
            session: direct.session.clone(),
            token: None,
        };
        let gateway = Target {
            url: gateway.url.clone(),
            session: gateway.session.clone(),
            token: gateway.token.clone(),
        };
        workers.push(tokio::spawn(async move {
            let mut times = (Vec::new(), Vec::new());
            for i in 0..per_worker {
                let body = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": format!("w{worker} c{i}")}}});
                // Alternate which goes first so neither side always runs on a warmer path.
                let order = if i % 2 == 0 { [false, true] } else { [true, false] };
                for through_gateway in order {
                    let started = Instant::now();
                    if through_gateway {
                        rpc(&client, &gateway, &body).await?;
                        times.1.push(started.elapsed().as_micros() as u64);
                    } else {
                        rpc(&client, &direct, &body).await?;
                        times.0.push(started.elapsed().as_micros() as u64);
                    }
                }
            }
            Ok::<_, BenchError>(times)
        }));
    }
    let (mut direct_us, mut gateway_us) = (Vec::new(), Vec::new());
    for worker in workers {
        let (d, g) = worker.await.map_err(err)??;
        direct_us.extend(d);
        gateway_us.extend(g);
    }
    direct_us.sort_unstable();
    gateway_us.sort_unstable();
    let (d50, d99) = (percentile(&direct_us, 50.0), percentile(&direct_us, 99.0));
    let (g50, g99) = (percentile(&gateway_us, 50.0), percentile(&gateway_us, 99.0));
    Ok(json!({
        "concurrency": concurrency,
        "calls": gateway_us.len(),
        "direct_p50_us": d50,
        "direct_p99_us": d99,
        "gateway_p50_us": g50,
        "gateway_p99_us": g99,
        "added_p50_us": g50 as i64 - d50 as i64,
        "added_p99_us": g99 as i64 - d99 as i64,
        "ratio_p50": if d50 > 0 { (g50 as f64 / d50 as f64 * 100.0).round() / 100.0 } else { 0.0 },
        "ratio_p99": if d99 > 0 { (g99 as f64 / d99 as f64 * 100.0).round() / 100.0 } else { 0.0 },
    }))
}

/// Run the benchmark with `iterations` calls per concurrency level (at least 64).
pub fn gateway(iterations: usize, mount: Option<MountFn>) -> Result<Value, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let home: PathBuf = std::env::temp_dir().join(format!(
        "stopline-bench-gw-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos())
    ));
    let result = runtime.block_on(run(iterations.max(64), mount, home.clone()));
    let _ = std::fs::remove_dir_all(&home);
    result
}

async fn run(calls: usize, mount: Option<MountFn>, home: PathBuf) -> Result<Value, BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(err)?;
    let upstream_addr = listener.local_addr().map_err(err)?;
    let upstream_server = tokio::spawn(async move {
        axum::serve(listener, Router::new().route("/mcp", post(upstream))).await
    });
    let upstream_url = format!("http://{upstream_addr}/mcp");
    std::fs::create_dir_all(&home).map_err(err)?;
    std::fs::write(
        home.join("config.toml"),
        format!("listen = \"127.0.0.1:0\"\n[mcp.bench]\nurl = \"{upstream_url}\"\n"),
    )
    .map_err(err)?;
    let route = if mount.is_some() {
        "mcp"
    } else {
        "builtin-passthrough"
    };
    let mount: MountFn = match mount {
        Some(mount) => mount,
        None => {
            let url = upstream_url.clone();
            Box::new(move |gov: Governor| {
                Router::new()
                    .route("/mcp/{server}", post(passthrough))
                    .with_state((gov, url))
            })
        }
    };
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: None,
        mount: Some(mount),
    })
    .await
    .map_err(err)?;
    let ctx = gateway.governor.context().clone();
    let minted = tokio::task::spawn_blocking(move || {
        stopline_control::tokens::issue(
            &ctx,
            &stopline_control::tokens::IssueArgs {
                agent: "bench".into(),
                role: stopline_core::Role::Agent,
                project: None,
                run: None,
                ttl_s: 3600,
                budgets: Default::default(),
            },
        )
    })
    .await
    .map_err(err)?
    .map_err(err)?;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(err)?;
    let mut direct = Target {
        url: upstream_url,
        session: None,
        token: None,
    };
    let mut through = Target {
        url: format!("http://{}/mcp/bench", gateway.addr),
        session: None,
        token: Some(minted.token),
    };
    handshake(&client, &mut direct).await?;
    handshake(&client, &mut through).await?;
    // Warm both paths (connections, token cache, catalog).
    measure(&client, &direct, &through, 4, 64).await?;
    let mut runs = Vec::new();
    for concurrency in [1, 32] {
        runs.push(
            measure(
                &client,
                &direct,
                &through,
                concurrency,
                calls.max(concurrency * 8),
            )
            .await?,
        );
    }
    gateway.shutdown().await;
    upstream_server.abort();
    Ok(json!({
        "runs": runs,
        "route": route,
        "tool": "echo (readOnlyHint: true, so no operation record and no fsync per call)",
        "goal": {"added_p50_us_below": 200, "ratio_p50_below": 1.5},
    }))
}
