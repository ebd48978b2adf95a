//! `stopline bench gateway` as users run it: the real `stopline serve` of this binary, the bare
//! proxy (`bare.rs`, as its own process: the hidden `stopline bench bare-proxy`) and nginx (when
//! `--nginx PATH` is given or `/usr/sbin/nginx` exists; `proxy_pass` with upstream keepalive, a
//! configuration this bench writes), each its own process, in front of one MCP upstream, driven
//! by one load generator (this process).
//!
//! Every round measures every path: latency at concurrency 1 and 32 with each worker rotating
//! which path goes first, then throughput at concurrency 32 of each path alone, in an order
//! rotated from round to round (the gateway's read-only `echo` and its recorded `record`). The
//! report gives each round's figures and, per figure, the median over the rounds; a ratio is
//! the median of the per-round ratios, so both sides of it always come from the same round.
//! Figures are reported, never asserted.
#![allow(clippy::disallowed_methods)] // `bench gateway`: its own gateway, proxies and throwaway homes, never a real home

use super::{handshake, latencies, ratio, throughput, BenchError, Target};
use crate::procs::{free_port, serve, within, BenchHome, Children};
use crate::stats::{median, median_present, percentile};
use crate::upstream::start_upstream;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's nginx is.
pub const DEFAULT_NGINX: &str = "/usr/sbin/nginx";

/// The concurrency levels of the latency half.
pub const LEVELS: [usize; 2] = [1, 32];

/// The concurrency of the throughput half.
pub const THROUGHPUT_CONCURRENCY: usize = 32;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("bench gateway: {e}"))
}

/// One figure per proxy (nginx absent when it is not measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Proxies {
    /// The bare proxy.
    pub bare: f64,
    /// nginx.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nginx: Option<f64>,
    /// `stopline serve`.
    pub gateway: f64,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayReport {
    /// Rounds.
    pub rounds: usize,
    /// Calls per path at each latency level and in each throughput run.
    pub calls: usize,
    /// The nginx measured (`nginx -v`), or why none was.
    pub nginx: String,
    /// Latency, per level.
    pub latency: Vec<LatencyLevel>,
    /// Throughput at concurrency 32.
    pub throughput: ThroughputSummary,
    /// How it was measured.
    pub method: String,
}

/// Latency at one concurrency level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyLevel {
    /// Callers at once.
    pub concurrency: usize,
    /// Median over the rounds of the p50 each proxy adds over the direct call, µs.
    pub added_p50_us: Proxies,
    /// Median over the rounds of the p99 each proxy adds, µs.
    pub added_p99_us: Proxies,
    /// Median over the rounds of the gateway's added p50 ÷ the bare proxy's.
    pub ratio_vs_bare: f64,
    /// Median over the rounds of the gateway's added p50 ÷ nginx's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_vs_nginx: Option<f64>,
    /// Each round: p50 and p99 of the direct call and through each proxy, µs.
    pub per_round: Vec<LatencyRound>,
}

/// One round at one latency level, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyRound {
    /// Direct p50.
    pub direct_p50_us: u64,
    /// Direct p99.
    pub direct_p99_us: u64,
    /// p50 through each proxy.
    pub p50_us: Proxies,
    /// p99 through each proxy.
    pub p99_us: Proxies,
}

/// Throughput at concurrency 32, calls per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSummary {
    /// Callers at once.
    pub concurrency: usize,
    /// Median over the rounds of the direct call's rate.
    pub direct_rps: f64,
    /// Median over the rounds of each proxy's rate (the gateway's with the read-only tool).
    pub rps: Proxies,
    /// Median over the rounds of the gateway's rate with the recorded tool.
    pub recorded_rps: f64,
    /// Median over the rounds of the gateway's read-only rate ÷ nginx's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_vs_nginx: Option<f64>,
    /// Median over the rounds of the gateway's read-only rate ÷ the bare proxy's.
    pub gateway_vs_bare: f64,
    /// Median over the rounds of recorded ÷ read-only.
    pub recorded_vs_read_only: f64,
    /// Each round's rates.
    pub per_round: Vec<ThroughputRound>,
}

/// One round's rates, calls per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRound {
    /// Direct.
    pub direct_rps: f64,
    /// Through each proxy (the gateway's read-only tool).
    pub rps: Proxies,
    /// The gateway's recorded tool.
    pub recorded_rps: f64,
}

/// The nginx binary to measure: `--nginx PATH`, else Debian's when it exists.
fn nginx_binary(nginx: Option<&Path>) -> Result<Option<PathBuf>, BenchError> {
    match nginx {
        Some(path) if path.exists() => Ok(Some(path.to_path_buf())),
        Some(path) => Err(err(format!("{} not found", path.display()))),
        None => Ok(Path::new(DEFAULT_NGINX)
            .exists()
            .then(|| PathBuf::from(DEFAULT_NGINX))),
    }
}

/// nginx in front of `upstream` (`host:port`) on `port`, its files under `dir`.
fn start_nginx(
    nginx: &Path,
    dir: &Path,
    port: u16,
    upstream: &str,
    children: &mut Children,
) -> Result<String, BenchError> {
    for temp in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.join(temp)).map_err(err)?;
    }
    let d = dir.display();
    // As root the workers would drop to `nobody`, who cannot reach this directory.
    let user = if rustix::process::geteuid().is_root() {
        "user root;\n"
    } else {
        ""
    };
    let config = format!(
        "{user}worker_processes auto;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
         upstream mcp {{ server {upstream}; keepalive 64; }}\n  \
         server {{\n    listen 127.0.0.1:{port};\n    keepalive_requests 1000000;\n    \
         location / {{ proxy_pass http://mcp; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n  }}\n}}\n"
    );
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config).map_err(err)?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("cannot start {}: {e}", nginx.display())))?;
    children.0.push(child);
    let addr = format!("127.0.0.1:{port}");
    within(Duration::from_secs(10), || {
        std::net::TcpStream::connect(&addr).map(drop).map_err(err)
    })?;
    let version = Command::new(nginx)
        .arg("-v")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .unwrap_or_default();
    Ok(version)
}

/// The bare proxy as its own process (`stopline bench bare-proxy`, in a home of its own that it
/// never writes) on `port`.
fn start_bare(
    exe: &Path,
    home: &Path,
    port: u16,
    upstream_url: &str,
    children: &mut Children,
) -> Result<(), BenchError> {
    let child = Command::new(exe)
        .arg("--home")
        .arg(home)
        .args([
            "bench",
            "bare-proxy",
            "--bare-listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--bare-upstream", upstream_url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(err)?;
    children.0.push(child);
    within(Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(err)
    })
}

/// Run the bench: `calls` per path and figure, `rounds` rounds, `exe` the binary whose `serve`
/// and `bare-proxy` are measured.
pub fn gateway(
    exe: &Path,
    calls: usize,
    rounds: usize,
    nginx: Option<&Path>,
) -> Result<GatewayReport, BenchError> {
    let nginx = nginx_binary(nginx)?;
    let base = tempfile::Builder::new()
        .prefix("stopline-bench-gw-")
        .tempdir()
        .map_err(err)?;
    let runtime = stopline_gateway::server::runtime("stopline-bench").map_err(err)?;
    let mut children = Children::default();
    let (calls, rounds) = (calls.max(64), rounds.max(1));
    runtime.block_on(run(
        exe,
        nginx.as_deref(),
        base.path(),
        calls,
        rounds,
        &mut children,
    ))
}

/// The paths in the order of the targets: direct, bare, [nginx], gateway read-only.
struct Paths {
    client: reqwest::Client,
    targets: Vec<Target>,
    nginx: bool,
}

impl Paths {
    fn proxies(&self, figure: impl Fn(usize) -> f64) -> Proxies {
        let gateway = self.targets.len() - 1;
        Proxies {
            bare: figure(1),
            nginx: self.nginx.then(|| figure(2)),
            gateway: figure(gateway),
        }
    }
}

async fn run(
    exe: &Path,
    nginx: Option<&Path>,
    base: &Path,
    calls: usize,
    rounds: usize,
    children: &mut Children,
) -> Result<GatewayReport, BenchError> {
    let upstream = start_upstream().await?;
    let (upstream_addr, upstream_url, upstream_server) =
        (upstream.addr, upstream.url, upstream.server);
    let target = |url: String, token: Option<String>| Target {
        url,
        session: None,
        token,
    };
    let mut targets = vec![target(upstream_url.clone(), None)];
    let bare_port = free_port()?;
    start_bare(exe, &base.join("bare"), bare_port, &upstream_url, children)?;
    targets.push(target(format!("http://127.0.0.1:{bare_port}/mcp"), None));
    let nginx_version = match nginx {
        Some(nginx) => {
            let port = free_port()?;
            let version = start_nginx(
                nginx,
                &base.join("nginx"),
                port,
                &upstream_addr.to_string(),
                children,
            )?;
            targets.push(target(format!("http://127.0.0.1:{port}/mcp"), None));
            version
        }
        None => format!("not measured: {DEFAULT_NGINX} not found and no --nginx given"),
    };
    let home = BenchHome {
        dir: base.join("home"),
        control: None,
    };
    std::fs::create_dir_all(&home.dir).map_err(err)?;
    let port = free_port()?;
    std::fs::write(
        home.dir.join("config.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\n[mcp.bench]\nurl = \"{upstream_url}\"\ntrust_read_only_hints = true\n"
        ),
    )
    .map_err(err)?;
    home.cli(exe, &["init"])?;
    let token = home.token(exe, "bench", None)?;
    let addr = format!("127.0.0.1:{port}");
    serve(exe, &home, &addr, children)?;
    targets.push(target(format!("http://{addr}/mcp/bench"), Some(token)));
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(err)?;
    for target in &mut targets {
        handshake(&client, target).await?;
    }
    let paths = Paths {
        client,
        targets,
        nginx: nginx.is_some(),
    };
    // Warm every path (connections, token cache, catalog).
    latencies(&paths.client, &paths.targets, 4, 64).await?;
    let mut per_level: Vec<Vec<LatencyRound>> = vec![Vec::new(); LEVELS.len()];
    let mut per_round_rates = Vec::new();
    for round in 0..rounds {
        for (level, &concurrency) in LEVELS.iter().enumerate() {
            let calls = calls.max(concurrency * 8);
            let all = latencies(&paths.client, &paths.targets, concurrency, calls).await?;
            let at = |p: f64| paths.proxies(|i| percentile(&all[i], p) as f64);
            per_level[level].push(LatencyRound {
                direct_p50_us: percentile(&all[0], 50.0),
                direct_p99_us: percentile(&all[0], 99.0),
                p50_us: at(50.0),
                p99_us: at(99.0),
            });
        }
        per_round_rates.push(rates(&paths, round, calls).await?);
    }
    upstream_server.abort();
    let latency = LEVELS
        .iter()
        .zip(per_level)
        .map(|(&concurrency, rounds)| summarize_latency(concurrency, rounds))
        .collect();
    Ok(GatewayReport {
        rounds,
        calls,
        nginx: nginx_version,
        latency,
        throughput: summarize_rates(per_round_rates),
        method: "the real `stopline serve` (MCP proxy, read-only `echo` on a server with trust_read_only_hints; `record` fsyncs a prepared and an outcome record per call), the bare proxy and nginx each their own process before one in-process MCP upstream; one load generator; every path in every round, orders rotated; medians over rounds".into(),
    })
}

/// Each path alone at concurrency 32, in an order rotated by `round`.
async fn rates(paths: &Paths, round: usize, calls: usize) -> Result<ThroughputRound, BenchError> {
    let gateway = paths.targets.len() - 1;
    // Every target's read-only rate, then the gateway's recorded one (index `len`).
    let runs = paths.targets.len() + 1;
    let mut rps = vec![0.0; runs];
    let calls = calls.max(THROUGHPUT_CONCURRENCY * 8);
    for k in 0..runs {
        let which = (round + k) % runs;
        let (target, tool) = if which == paths.targets.len() {
            (&paths.targets[gateway], "record")
        } else {
            (&paths.targets[which], "echo")
        };
        let (rate, _) =
            throughput(&paths.client, target, tool, THROUGHPUT_CONCURRENCY, calls).await?;
        rps[which] = rate;
    }
    Ok(ThroughputRound {
        direct_rps: rps[0],
        rps: paths.proxies(|i| rps[i]),
        recorded_rps: rps[paths.targets.len()],
    })
}

fn summarize_latency(concurrency: usize, rounds: Vec<LatencyRound>) -> LatencyLevel {
    let added = |r: &LatencyRound, p50: bool| {
        let (direct, through) = if p50 {
            (r.direct_p50_us as f64, r.p50_us)
        } else {
            (r.direct_p99_us as f64, r.p99_us)
        };
        Proxies {
            bare: through.bare - direct,
            nginx: through.nginx.map(|n| n - direct),
            gateway: through.gateway - direct,
        }
    };
    let medians = |p50: bool| {
        let all: Vec<Proxies> = rounds.iter().map(|r| added(r, p50)).collect();
        Proxies {
            bare: median(all.iter().map(|a| a.bare)),
            nginx: median_present(all.iter().map(|a| a.nginx)),
            gateway: median(all.iter().map(|a| a.gateway)),
        }
    };
    let added_p50: Vec<Proxies> = rounds.iter().map(|r| added(r, true)).collect();
    LatencyLevel {
        concurrency,
        added_p50_us: medians(true),
        added_p99_us: medians(false),
        ratio_vs_bare: median(added_p50.iter().map(|a| ratio(a.gateway, a.bare.max(1.0)))),
        ratio_vs_nginx: median_present(
            added_p50
                .iter()
                .map(|a| a.nginx.map(|n| ratio(a.gateway, n.max(1.0)))),
        ),
        per_round: rounds,
    }
}

fn summarize_rates(rounds: Vec<ThroughputRound>) -> ThroughputSummary {
    let of = |f: &dyn Fn(&ThroughputRound) -> f64| median(rounds.iter().map(f));
    ThroughputSummary {
        concurrency: THROUGHPUT_CONCURRENCY,
        direct_rps: of(&|r| r.direct_rps),
        rps: Proxies {
            bare: of(&|r| r.rps.bare),
            nginx: median_present(rounds.iter().map(|r| r.rps.nginx)),
            gateway: of(&|r| r.rps.gateway),
        },
        recorded_rps: of(&|r| r.recorded_rps),
        gateway_vs_nginx: median_present(
            rounds
                .iter()
                .map(|r| r.rps.nginx.map(|n| ratio(r.rps.gateway, n))),
        ),
        gateway_vs_bare: of(&|r| ratio(r.rps.gateway, r.rps.bare)),
        recorded_vs_read_only: of(&|r| ratio(r.recorded_rps, r.rps.gateway)),
        per_round: rounds,
    }
}
