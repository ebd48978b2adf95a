//! `stopline bench gateway`: the same MCP tool call made directly, through a bare proxy
//! (`bench/bare.rs`: a minimal hyper forwarder, no admission) and through the gateway, side by
//! side in one run, at concurrency 1 and 32; p50/p99 of each, the latency each proxy adds, the
//! gateway's ratio to the direct call (`ratio_p50`) and to the bare proxy's added latency
//! (`ratio_vs_bare`). Then each path alone, for throughput: direct, bare, the gateway's read-only
//! tool and its recorded tool (a prepared record fsynced before dispatch, then an outcome).
//!
//! Everything is loopback and throwaway: a tiny built-in JSON-RPC upstream (`initialize`,
//! `tools/list` with a read-only `echo` and a recorded `record`, `tools/call`), a temporary control directory, and an
//! in-process gateway. The gateway route is the MCP proxy when one is mounted, else a built-in
//! governed passthrough that takes the same Governor path (authenticate, admit, dispatch,
//! forward, finish) without MCP session handling; the receipt says which.

mod bare;

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
    let forwarded: Value = serde_json::from_slice(&body).unwrap_or_default();
    let tool = forwarded["params"]["name"].as_str().unwrap_or("echo");
    let mut admission = match gov
        .admit_tool_call(&caller, "bench", tool, tool == "echo", None)
        .await
    {
        Ok(admission) => admission,
        Err(refusal) => return crate::error::refusal_response(&refusal),
    };
    if let Err(refusal) = admission.dispatch() {
        return crate::error::refusal_response(&refusal);
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
            let bytes = crate::client::body_bytes(response.into_body())
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

/// The `p`th percentile of `sorted`, 0 when empty: [`stopline_bench::quantile`], the one
/// definition (nearest rank) every figure uses.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    stopline_bench::quantile(sorted, p / 100.0).unwrap_or(0)
}

#[derive(Clone)]
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

fn call(tool: &str, worker: usize, i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {"name": tool, "arguments": {"text": format!("w{worker} c{i}")}}})
}

/// Latencies (µs) of the same calls made to every target in turn by `concurrency` workers; each
/// worker rotates which target goes first, so none always runs on a warmer path.
async fn latencies(
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
async fn throughput(
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

fn ratio(a: f64, b: f64) -> f64 {
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

/// One concurrency level: direct, the bare proxy and the gateway side by side.
async fn measure(paths: &Paths, concurrency: usize, calls: usize) -> Result<Value, BenchError> {
    let Paths {
        client,
        direct,
        bare,
        gateway,
    } = paths;
    let all = latencies(
        client,
        &[direct.clone(), bare.clone(), gateway.clone()],
        concurrency,
        calls,
    )
    .await?;
    let (direct_us, bare_us, gateway_us) = (&all[0], &all[1], &all[2]);
    let (d50, d99) = (percentile(direct_us, 50.0), percentile(direct_us, 99.0));
    let (b50, b99) = (percentile(bare_us, 50.0), percentile(bare_us, 99.0));
    let (g50, g99) = (percentile(gateway_us, 50.0), percentile(gateway_us, 99.0));
    let added_p50 = g50 as i64 - d50 as i64;
    let bare_added_p50 = b50 as i64 - d50 as i64;
    Ok(json!({
        "concurrency": concurrency,
        "calls": gateway_us.len(),
        "direct_p50_us": d50,
        "direct_p99_us": d99,
        "bare_p50_us": b50,
        "bare_p99_us": b99,
        "gateway_p50_us": g50,
        "gateway_p99_us": g99,
        "added_p50_us": added_p50,
        "added_p99_us": g99 as i64 - d99 as i64,
        "bare_added_p50_us": bare_added_p50,
        "bare_added_p99_us": b99 as i64 - d99 as i64,
        "ratio_p50": ratio(g50 as f64, d50 as f64),
        "ratio_p99": ratio(g99 as f64, d99 as f64),
        "ratio_vs_bare": ratio(added_p50 as f64, bare_added_p50.max(1) as f64),
    }))
}

/// Throughput of each path alone at one concurrency level: direct, bare, the gateway's
/// read-only tool and its recorded tool (a prepared and an outcome record, fsynced, per call).
async fn rates(paths: &Paths, concurrency: usize, calls: usize) -> Result<Value, BenchError> {
    let Paths {
        client,
        direct,
        bare,
        gateway,
    } = paths;
    let (direct_rps, _) = throughput(client, direct, "echo", concurrency, calls).await?;
    let (bare_rps, _) = throughput(client, bare, "echo", concurrency, calls).await?;
    let (read_only_rps, _) = throughput(client, gateway, "echo", concurrency, calls).await?;
    let (recorded_rps, recorded) =
        throughput(client, gateway, "record", concurrency, calls).await?;
    Ok(json!({
        "concurrency": concurrency,
        "calls": calls,
        "direct_rps": direct_rps,
        "bare_rps": bare_rps,
        "read_only_rps": read_only_rps,
        "recorded_rps": recorded_rps,
        "recorded_p50_us": percentile(&recorded, 50.0),
        "recorded_p99_us": percentile(&recorded, 99.0),
        "read_only_vs_bare": ratio(read_only_rps, bare_rps),
        "recorded_vs_read_only": ratio(recorded_rps, read_only_rps),
    }))
}

/// Run the benchmark with `iterations` calls per concurrency level (at least 64).
pub fn gateway(iterations: usize, mount: Option<MountFn>) -> Result<Value, BenchError> {
    // The runtime `serve` runs on: the bench measures its scheduler too.
    let runtime = crate::server::runtime("stopline-bench").map_err(err)?;
    let home = bench_home();
    let result = runtime.block_on(run(iterations.max(64), mount, home.clone()));
    let _ = std::fs::remove_dir_all(&home);
    result
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
    let runtime = crate::server::runtime("stopline-bench").map_err(err)?;
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
    route: &'static str,
    gateway: crate::server::RunningGateway,
    bare_server: tokio::task::JoinHandle<()>,
    upstream_server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Bench {
    async fn start(mount: Option<MountFn>, home: PathBuf) -> Result<Bench, BenchError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(err)?;
        let upstream_addr = listener.local_addr().map_err(err)?;
        let upstream_server = tokio::spawn(async move {
            axum::serve(listener, Router::new().route("/mcp", post(upstream))).await
        });
        let upstream_url = format!("http://{upstream_addr}/mcp");
        std::fs::create_dir_all(&home).map_err(err)?;
        #[allow(clippy::disallowed_methods)] // the config of the benchmark's own throwaway home
        std::fs::write(
            home.join("config.toml"),
            format!("listen = \"127.0.0.1:0\"\n[mcp.bench]\nurl = \"{upstream_url}\"\ntrust_read_only_hints = true\n"),
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
        measure(&paths, 4, 64).await?;
        Ok(Bench {
            paths,
            route,
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

async fn run(calls: usize, mount: Option<MountFn>, home: PathBuf) -> Result<Value, BenchError> {
    let bench = Bench::start(mount, home).await?;
    let mut runs = Vec::new();
    for concurrency in [1, 32] {
        runs.push(measure(&bench.paths, concurrency, calls.max(concurrency * 8)).await?);
    }
    let mut throughput = Vec::new();
    for concurrency in [1, 32] {
        throughput.push(rates(&bench.paths, concurrency, calls.max(concurrency * 8)).await?);
    }
    let route = bench.route;
    bench.stop().await;
    Ok(json!({
        "runs": runs,
        "throughput": throughput,
        "route": route,
        "tool": "echo (readOnlyHint: true on a server with trust_read_only_hints, so no operation record and no fsync per call)",
        "recorded_tool": "record (not read-only: a prepared record fsynced before dispatch and an outcome record, per call)",
        "bare": "a minimal hyper forwarder on the same runtime and listener settings, no admission, same upstream",
        "goal": {"added_p50_us_below": 200, "ratio_p50_below": 1.5, "ratio_vs_bare_at_most": 1.5, "recorded_vs_read_only_at_c32_at_least": 0.5},
    }))
}

#[cfg(test)]
mod tests {
    /// The gateway's percentiles are the drill's and the supervisor's (nearest rank): the
    /// p50 of 1..=100 is 50, where the rounded linear index this bench used gave 51.
    #[test]
    fn percentiles_are_nearest_rank_as_every_other_figure() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(super::percentile(&samples, 50.0), 50);
        assert_eq!(super::percentile(&samples, 99.0), 99);
        assert_eq!(super::percentile(&[], 50.0), 0);
    }

    /// Without an MCP proxy mounted the gateway route is the built-in passthrough: every call
    /// of the run (handshakes, latencies, throughput) must come back `2xx` through it.
    #[test]
    fn the_builtin_passthrough_forwards_through_the_pooled_client() {
        let report = super::gateway(64, None).expect("the benchmark ran");
        assert_eq!(report["route"], "builtin-passthrough", "{report}");
        assert_eq!(report["runs"].as_array().map(Vec::len), Some(2), "{report}");
        assert!(
            report["throughput"][1]["recorded_rps"].as_f64() > Some(0.0),
            "{report}"
        );
    }
}
