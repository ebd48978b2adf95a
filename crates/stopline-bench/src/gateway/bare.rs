//! The bare proxy `stopline bench gateway` measures the gateway against: a minimal hyper
//! forwarder with no admission at all, on the same runtime, with the same HTTP/1 server settings
//! as the gateway's listener (`listener.rs`) and a pooled hyper client to the same upstream.
//!
//! It reads the request body whole, forwards it with the headers an MCP upstream needs, reads
//! the answer whole and passes it back: the least any proxy that looks at a call before sending
//! it can do. Its added latency over the direct call is the floor the gateway's own added latency
//! is compared with (`ratio_vs_bare`). It must never grow features: it is a yardstick.

use super::{err, BenchError};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;

/// Request headers passed to the upstream, and response headers passed back.
const PASSED: [&str; 4] = [
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
];

type Forwarder = Client<HttpConnector, Full<Bytes>>;

async fn forward(
    client: Arc<Forwarder>,
    upstream: Arc<hyper::Uri>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut outgoing = Request::post(upstream.as_ref().clone());
    for name in PASSED {
        if let Some(value) = parts.headers.get(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let outgoing = outgoing
        .body(Full::new(body))
        .expect("a request built from valid parts");
    let answer = match client.request(outgoing).await {
        Ok(answer) => answer,
        Err(_) => {
            let mut refused = Response::new(Full::new(Bytes::new()));
            *refused.status_mut() = StatusCode::BAD_GATEWAY;
            return Ok(refused);
        }
    };
    let (parts, body) = answer.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut reply = Response::new(Full::new(body));
    *reply.status_mut() = parts.status;
    for name in PASSED {
        if let Some(value) = parts.headers.get(name) {
            reply.headers_mut().insert(name, value.clone());
        }
    }
    Ok(reply)
}

/// Start the bare proxy on a loopback port, forwarding every `POST` to `upstream`.
pub(super) async fn start(
    upstream: &str,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(err)?;
    start_on(listener, upstream)
}

/// Serve the bare proxy on `listen` until the process is ended, on the runtime `stopline serve`
/// runs on (`server::runtime`): the process `stopline bench gateway` measures it as (the
/// hidden `stopline bench bare-proxy`).
pub fn serve_forever(listen: &str, upstream: &str) -> Result<(), BenchError> {
    let runtime = stopline_gateway::server::runtime("stopline-bare").map_err(err)?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(err)?;
        let (_, server) = start_on(listener, upstream)?;
        server.await.map_err(err)
    })
}

fn start_on(
    listener: tokio::net::TcpListener,
    upstream: &str,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), BenchError> {
    let upstream: Arc<hyper::Uri> = Arc::new(upstream.parse().map_err(err)?);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Arc<Forwarder> = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector),
    );
    let addr = listener.local_addr().map_err(err)?;
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    forward(client.clone(), upstream.clone(), request)
                });
                // The gateway listener's settings (`listener.rs`), so only admission differs.
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(stopline_gateway::HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, server))
}
