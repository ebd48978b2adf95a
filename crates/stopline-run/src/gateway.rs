//! The gateway a run hands its agent: which URL (`--gateway`, else `STOPLINE_URL`, else the
//! config's `listen`), whether it answers (`GET /healthz` must be 200), and the hash of its
//! configuration for the run record.
//!
//! A plain HTTP/1.1 request over a `TcpStream` with short timeouts: the probe must never hang a
//! run's start. The configuration hash is the `/healthz` body's `config_sha256` when the gateway
//! reports one, else the `config_hash` of the live registration in `servers/` that `/healthz`
//! names (`server`), else `null` with the reason recorded. This module never sends a token.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;
use stopline_control::context::Context;
use stopline_core::run_record::GatewayRecord;
use stopline_core::{Refusal, RefusalCode};

/// How long connecting to, and reading from, the gateway may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A gateway that answered `/healthz` with 200.
#[derive(Debug, Clone, PartialEq)]
pub struct Gateway {
    /// The base URL as the supervisor reaches it (`http://host:port`).
    pub url: String,
    /// The address it resolved to.
    pub addr: SocketAddr,
    /// The configuration hash, when one could be learned.
    pub config_sha256: Option<String>,
    /// Where the hash came from (`healthz`, `registration`), or why there is none.
    pub config_hash_source: String,
}

impl Gateway {
    /// The run record's `gateway` object.
    pub fn record(&self) -> GatewayRecord {
        GatewayRecord {
            url: self.url.clone(),
            addr: self.addr.to_string(),
            config_sha256: self.config_sha256.clone(),
            config_hash_source: self.config_hash_source.clone(),
        }
    }
}

fn unreachable(url: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(
        RefusalCode::GatewayUnreachable,
        format!("the gateway {url} is not reachable: {why}"),
    )
}

/// The URL to hand the agent: `--gateway`, else `STOPLINE_URL`, else the config's `listen`.
pub fn choose_url(ctx: &Context, flag: Option<&str>, env_url: Option<&str>) -> String {
    let raw = flag
        .or(env_url)
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .unwrap_or(ctx.config.listen.as_str());
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    with_scheme.trim_end_matches('/').to_string()
}

/// `host:port` of an `http://` URL (no path beyond `/`).
pub fn authority(url: &str) -> Result<&str, Refusal> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| unreachable(url, "only http:// gateways are supported"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(unreachable(url, "no host"));
    }
    Ok(authority)
}

/// Probe the gateway at `url`: `/healthz` must answer 200.
pub fn probe(ctx: &Context, url: &str) -> Result<Gateway, Refusal> {
    let authority = authority(url)?;
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| unreachable(url, e))?
        .next()
        .ok_or_else(|| unreachable(url, "the host resolves to no address"))?;
    let (status, body) = get(addr, authority, "/healthz").map_err(|e| unreachable(url, e))?;
    if status != 200 {
        return Err(unreachable(url, format!("GET /healthz answered {status}")));
    }
    let health: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let (config_sha256, config_hash_source) = config_hash(ctx, &health);
    Ok(Gateway {
        url: url.to_string(),
        addr,
        config_sha256,
        config_hash_source,
    })
}

fn config_hash(ctx: &Context, health: &Value) -> (Option<String>, String) {
    if let Some(hash) = health.get("config_sha256").and_then(Value::as_str) {
        return (Some(hash.to_string()), "healthz".into());
    }
    let Some(server) = health.get("server").and_then(Value::as_str) else {
        return (
            None,
            "unknown: /healthz reports neither config_sha256 nor a server id".into(),
        );
    };
    let (live, _) = stopline_control::acks::live_servers(ctx);
    match live.into_iter().find(|record| record.id == server) {
        Some(record) if !record.config_hash.is_empty() => {
            (Some(record.config_hash), "registration".into())
        }
        Some(_) => (
            None,
            format!("unknown: the registration of {server} records no config hash"),
        ),
        None => (
            None,
            format!("unknown: {server} is not registered in this control directory"),
        ),
    }
}

/// One `GET path` over HTTP/1.1 with `Connection: close`: the status code and the body.
pub fn get(addr: SocketAddr, host: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.take(1 << 20).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, dechunk(&body)))
}

/// Undo `Transfer-Encoding: chunked` when the body looks chunked; otherwise return it as is.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size_line, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(size) = usize::from_str_radix(size_line.trim(), 16) else {
            return body.to_string();
        };
        if size == 0 {
            return out;
        }
        let Some(chunk) = after.get(..size) else {
            return body.to_string();
        };
        out.push_str(chunk);
        rest = after
            .get(size..)
            .unwrap_or_default()
            .trim_start_matches("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_a_scheme_and_lose_a_trailing_slash() {
        let ctx = Context::new(
            stopline_store::Store::open("/nonexistent-stopline-home"),
            stopline_control::config::Config::default(),
        );
        assert_eq!(choose_url(&ctx, None, None), "http://127.0.0.1:7077");
        assert_eq!(choose_url(&ctx, None, Some("http://h:1/")), "http://h:1");
        assert_eq!(
            choose_url(&ctx, Some("10.0.0.1:9"), Some("x")),
            "http://10.0.0.1:9"
        );
        assert_eq!(authority("http://h:1/v1").unwrap(), "h:1");
        assert!(authority("https://h:1").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined_and_plain_ones_kept() {
        assert_eq!(dechunk("4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"), "{\"a\":1}");
        assert_eq!(dechunk("{\"ok\":true}"), "{\"ok\":true}");
    }
}
