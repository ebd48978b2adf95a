//! `stopline bench gateway` and what it is made of: a tiny built-in JSON-RPC upstream
//! (`initialize`, `tools/list` with a read-only `echo` and a recorded `record`, `tools/call`), the
//! load generator (`latencies`: every path called in turn by each worker; `throughput`: one path
//! alone), the bare proxy (`bare.rs`), and the bench itself (`served.rs`: the real `stopline
//! serve`, the bare proxy and nginx each as its own process, rounds interleaved).
//!
//! [`calls`] is the in-process driver for instruction counts (callgrind): the upstream, an
//! in-process gateway and the bare proxy in one process, and only the calls of one path. Its
//! gateway route is the MCP proxy when one is mounted, else a built-in governed passthrough that
//! takes the same Governor path (authenticate, admit, dispatch, forward, finish) without MCP
//! session handling.

pub mod bare;
pub mod served;

pub use served::{gateway, GatewayReport};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;
use stopline_gateway::server::{start, MountFn, ServeOptions};
use stopline_gateway::{Governor, Outcome};

pub use crate::error::BenchError;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("bench gateway: {e}"))
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
        Err(refusal) => return stopline_gateway::error::refusal_response(&refusal),
    };
    let forwarded: Value = serde_json::from_slice(&body).unwrap_or_default();
    let tool = forwarded["params"]["name"].as_str().unwrap_or("echo");
    let mut admission = match gov
        .admit_tool_call(&caller, "bench", tool, tool == "echo", None)
        .await
    {
        Ok(admission) => admission,
        Err(refusal) => return stopline_gateway::error::refusal_response(&refusal),
    };
    if let Err(refusal) = admission.dispatch() {
        return stopline_gateway::error::refusal_response(&refusal);
    }
    // Sent as every upstream exchange is: the pooled client (`client.rs`), no redirect followed.
    let request = hyper::Request::post(url.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(http_body_util::Full::new(Bytes::from(
            serde_json::to_vec(&forwarded).unwrap_or_default(),
        )));
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            admission.finish(Outcome::UpstreamUnreachable);
            return (StatusCode::BAD_GATEWAY, error.to_string()).into_response();
        }
    };
    match gov.upstream_client().send(request).await {
        Ok(response) => {
            let status = response.status();
            let bytes = stopline_gateway::client::body_bytes(response.into_body())
                .await
                .unwrap_or_default();
            admission.finish(Outcome::Committed);
            (status, bytes).into_response()
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

/// An agent token (`bench`, one hour) minted in the gateway's own home, off the async workers.
pub async fn bench_token(governor: &Governor) -> Result<String, String> {
    let ctx = governor.context().clone();
    tokio::task::spawn_blocking(move || {
        stopline_control::tokens::issue(
            &ctx,
            &stopline_control::tokens::IssueArgs::new("bench", stopline_core::Role::Agent, 3600),
        )
    })
    .await
    .map_err(|e| e.to_string())?
    .map(|minted| minted.token)
    .map_err(|e| e.to_string())
}

#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) session: Option<String>,
    pub(crate) token: Option<String>,
}

/// Send `body` to `target`; the answer's text when it is a success: a 2xx status whose JSON-RPC
/// message (plain JSON or the `data:` lines of an SSE stream) carries no `error`. A refusal is
/// an error either way, whether the gateway answers it with an HTTP status or in the protocol.
pub(crate) async fn rpc_text(
    client: &reqwest::Client,
    target: &Target,
    body: &Value,
) -> Result<String, BenchError> {
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
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let messages = std::iter::once(text.as_str())
        .chain(text.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|m| serde_json::from_str::<Value>(m.trim()).ok());
    let protocol_error = messages.into_iter().any(|m| m.get("error").is_some());
    if !status.is_success() || protocol_error {
        return Err(BenchError::new(format!(
            "{} answered {status}: {text}",
            target.url
        )));
    }
    Ok(text)
}

/// [`rpc_text`] without the answer.
pub(crate) async fn rpc(
    client: &reqwest::Client,
    target: &Target,
    body: &Value,
) -> Result<(), BenchError> {
    rpc_text(client, target, body).await.map(drop)
}

pub(crate) async fn handshake(
    client: &reqwest::Client,
    target: &mut Target,
) -> Result<(), BenchError> {
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

pub(crate) fn call(tool: &str, worker: usize, i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {"name": tool, "arguments": {"text": format!("w{worker} c{i}")}}})
}

/// Latencies (µs) of the same calls made to every target in turn by `concurrency` workers; each
/// worker rotates which target goes first, so none always runs on a warmer path.
pub(crate) async fn latencies(
    client: &reqwest::Client,
    targets: &[Target],
    concurrency: usize,
    calls: usize,
) -> Result<Vec<Vec<u64>>, BenchError> {
    let per_worker = calls.div_ceil(concurrency).max(1);
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let client = client.clone();
        let targets = targets.to_vec();
        workers.push(tokio::spawn(async move {
            let mut times = vec![Vec::with_capacity(per_worker); targets.len()];
            for i in 0..per_worker {
                let body = call("echo", worker, i);
                for k in 0..targets.len() {
                    let which = (i + k) % targets.len();
                    let started = Instant::now();
                    rpc(&client, &targets[which], &body).await?;
                    times[which].push(started.elapsed().as_micros() as u64);
                }
            }
            Ok::<_, BenchError>(times)
        }));
    }
    let mut all = vec![Vec::new(); targets.len()];
    for worker in workers {
        for (into, times) in all.iter_mut().zip(worker.await.map_err(err)??) {
            into.extend(times);
        }
    }
    for times in &mut all {
        times.sort_unstable();
    }
    Ok(all)
}

/// Calls per second `concurrency` workers sustain against one target alone, calling `tool`.
pub(crate) async fn throughput(
    client: &reqwest::Client,
    target: &Target,
    tool: &str,
    concurrency: usize,
    calls: usize,
) -> Result<(f64, Vec<u64>), BenchError> {
    let per_worker = calls.div_ceil(concurrency).max(1);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let (client, target, tool) = (client.clone(), target.clone(), tool.to_string());
        workers.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_worker);
            for i in 0..per_worker {
                let one = Instant::now();
                rpc(&client, &target, &call(&tool, worker, i)).await?;
                times.push(one.elapsed().as_micros() as u64);
            }
            Ok::<_, BenchError>(times)
        }));
    }
    let mut times = Vec::new();
    for worker in workers {
        times.extend(worker.await.map_err(err)??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    times.sort_unstable();
    let rate = times.len() as f64 / elapsed.max(1e-9);
    Ok(((rate * 10.0).round() / 10.0, times))
}

pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// The three paths every figure compares, and the load generator's client.
struct Paths {
    client: reqwest::Client,
    direct: Target,
    bare: Target,
    gateway: Target,
}

/// Which path [`calls`] drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnePath {
    /// The upstream itself.
    Direct,
    /// Through the bare proxy (`bench/bare.rs`).
    Bare,
    /// Through the gateway.
    Gateway,
}

/// Set up as [`gateway`] does, then make `iterations` read-only calls (`echo`) at concurrency 1
/// through `path` alone, and nothing else: a driver for instruction counts (callgrind), where
/// the CPU each path costs per call is the difference between two runs with different
/// `iterations` (the setup, the same in both, cancels out).
pub fn calls(path: OnePath, iterations: usize, mount: Option<MountFn>) -> Result<(), BenchError> {
    let runtime = stopline_gateway::server::runtime("stopline-bench").map_err(err)?;
    let home = bench_home();
    let result = runtime.block_on(async {
        let bench = Bench::start(mount, home.clone()).await?;
        let target = match path {
            OnePath::Direct => &bench.paths.direct,
            OnePath::Bare => &bench.paths.bare,
            OnePath::Gateway => &bench.paths.gateway,
        };
        for i in 0..iterations {
            rpc(&bench.paths.client, target, &call("echo", 0, i)).await?;
        }
        bench.stop().await;
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&home);
    result
}

fn bench_home() -> PathBuf {
    std::env::temp_dir().join(format!(
        "stopline-bench-gw-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos())
    ))
}

/// The upstream, the gateway and the bare proxy, started, every path's handshake made.
struct Bench {
    paths: Paths,
    gateway: stopline_gateway::server::RunningGateway,
    bare_server: tokio::task::JoinHandle<()>,
    upstream_server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Bench {
    async fn start(mount: Option<MountFn>, home: PathBuf) -> Result<Bench, BenchError> {
        let upstream = crate::upstream::start_upstream().await?;
        let (upstream_url, upstream_server) = (upstream.url, upstream.server);
        std::fs::create_dir_all(&home).map_err(err)?;
        #[allow(clippy::disallowed_methods)] // the config of the benchmark's own throwaway home
        std::fs::write(
            home.join("config.toml"),
            format!("listen = \"127.0.0.1:0\"\n[mcp.bench]\nurl = \"{upstream_url}\"\ntrust_read_only_hints = true\n"),
        )
        .map_err(err)?;
        let mount: MountFn = match mount {
            Some(mount) => mount,
            None => {
                let url = upstream_url.clone();
                Box::new(move |gov: Governor| {
                    Router::new()
                        .route("/mcp/{server}", post(passthrough))
                        .with_state((gov, url))
                        .into()
                })
            }
        };
        let gateway = start(ServeOptions {
            home: home.clone(),
            config: None,
            listen: None,
            mount: Some(mount),
            access_log: false,
        })
        .await
        .map_err(err)?;
        let minted = bench_token(&gateway.governor).await.map_err(err)?;
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
            .build()
            .map_err(err)?;
        let mut direct = Target {
            url: upstream_url.clone(),
            session: None,
            token: None,
        };
        let mut through = Target {
            url: format!("http://{}/mcp/bench", gateway.addr),
            session: None,
            token: Some(minted),
        };
        let (bare_addr, bare_server) = bare::start(&upstream_url).await?;
        let mut bare = Target {
            url: format!("http://{bare_addr}/mcp"),
            session: None,
            token: None,
        };
        handshake(&client, &mut direct).await?;
        handshake(&client, &mut bare).await?;
        handshake(&client, &mut through).await?;
        let paths = Paths {
            client,
            direct,
            bare,
            gateway: through,
        };
        // Warm every path (connections, token cache, catalog).
        let all = [
            paths.direct.clone(),
            paths.bare.clone(),
            paths.gateway.clone(),
        ];
        latencies(&paths.client, &all, 4, 64).await?;
        Ok(Bench {
            paths,
            gateway,
            bare_server,
            upstream_server,
        })
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        self.bare_server.abort();
        self.upstream_server.abort();
    }
}

#[cfg(test)]
mod tests {
    /// Without an MCP proxy mounted the gateway route is the built-in passthrough: every call
    /// the callgrind driver makes through it (handshake, warm-up, the calls) must come back
    /// `2xx` through the pooled client.
    #[test]
    fn the_builtin_passthrough_forwards_through_the_pooled_client() {
        super::calls(super::OnePath::Gateway, 64, None).expect("every call came back 2xx");
    }
}
