//! A blocking HTTP/1.1 client for loopback gateways, on `reqwest::blocking`, and the [`Reply`]
//! the battery and the tests judge.
//!
//! Every request is one connection (`Connection: close`, no pool), no proxy from the
//! environment, no redirect followed (a `303` is what the caller sees), and bodies are read
//! whole: a chunked or server-sent-events answer arrives de-chunked, as the client read it until
//! the gateway closed the stream. Like every real client, a request that names no `Accept` sends
//! `Accept: */*`.
//!
//! A request never panics and never hangs past its [`Client`]'s bounds: when no answer could be
//! read at all the reply has status `0`, the reason in its body and a [`Failure`]; when the
//! answer broke off midway the reply keeps the status, headers and every byte that arrived.

use reqwest::blocking::Client as Reqwest;
use reqwest::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE};
use serde_json::Value;
use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

/// Why a reply is incomplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// No connection was made (refused, or the connect bound passed): nothing was sent.
    Connect,
    /// The request could not be built (a method or header the protocol cannot carry).
    Request,
    /// Connected, but no answer's head was read (the peer closed, reset, or timed out).
    Exchange,
    /// The head was read, the body broke off (the reply holds what arrived).
    Body,
}

/// One HTTP reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code (0 when no answer's head could be read).
    pub status: u16,
    /// The response headers, names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked), or why there is none when `status` is 0.
    pub body: String,
    /// Set when the reply is incomplete.
    pub failure: Option<Failure>,
}

impl Reply {
    fn failed(failure: Failure, why: String) -> Reply {
        Reply {
            status: 0,
            headers: Vec::new(),
            body: why,
            failure: Some(failure),
        }
    }

    /// The body as JSON, if it is JSON.
    pub fn parsed(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// The body as JSON; panics naming the body when it is not (tests that expect JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The body as JSON, `Null` when it is not (the battery, which must never panic).
    pub fn json_or_null(&self) -> Value {
        self.parsed().unwrap_or(Value::Null)
    }

    /// `error.code` of a refusal body; panics when the body is not JSON.
    pub fn code(&self) -> String {
        error_code(&self.json())
    }

    /// `error.code` of a refusal body, empty when there is none or the body is not JSON.
    pub fn code_or_empty(&self) -> String {
        error_code(&self.json_or_null())
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// `status code` for observations and failure messages.
    pub fn brief(&self) -> String {
        format!("{} {}", self.status, self.code_or_empty())
    }

    /// The JSON-RPC messages of an MCP reply: a JSON body (one message or a batch) or every
    /// `data:` line of server-sent events that parses.
    pub fn rpc_messages(&self) -> Vec<Value> {
        let body = self.body.trim();
        if body.starts_with('{') || body.starts_with('[') {
            return match serde_json::from_str::<Value>(body) {
                Ok(Value::Array(items)) => items,
                Ok(value) => vec![value],
                Err(_) => Vec::new(),
            };
        }
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .collect()
    }
}

/// The value of header `name` (case-insensitive) in `headers`, the first when repeated.
pub(crate) fn header_in<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn error_code(body: &Value) -> String {
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A blocking client with fixed bounds. It keeps a runtime thread of its own: build one per
/// harness (a `static`) rather than one per request, and never use it from async code.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Reqwest,
}

impl Client {
    /// A client whose connects give up after `connect` (`None`: the system's bound) and whose
    /// every wait for bytes, the answer's head or a piece of its body, gives up after `read`.
    pub fn new(connect: Option<Duration>, read: Duration) -> Client {
        let mut builder = Reqwest::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(0)
            .timeout(read);
        if let Some(connect) = connect {
            builder = builder.connect_timeout(connect);
        }
        // Only a TLS backend or resolver that cannot start fails here; none is configured.
        let inner = builder.build().expect("build the test kit's HTTP client");
        Client { inner }
    }

    /// `METHOD path` to `addr` (`127.0.0.1:PORT`) with an optional bearer token, an optional
    /// JSON body (`Content-Type: application/json` is always sent) and `extra` headers.
    pub fn send(
        &self,
        addr: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        extra: &[(&str, &str)],
    ) -> Reply {
        let what = format!("{method} {path} at {addr}");
        let method = match reqwest::Method::from_bytes(method.as_bytes()) {
            Ok(method) => method,
            Err(e) => return Reply::failed(Failure::Request, format!("{what}: {e}")),
        };
        let mut request = self
            .inner
            .request(method, format!("http://{addr}{path}"))
            .header(CONNECTION, "close")
            .header(CONTENT_TYPE, "application/json")
            .body(body.map(Value::to_string).unwrap_or_default());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        for (name, value) in extra {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => request = request.header(name, value),
                _ => {
                    return Reply::failed(
                        Failure::Request,
                        format!("{what}: header {name}: {value:?} cannot be sent"),
                    )
                }
            }
        }
        let mut response = match request.send() {
            Ok(response) => response,
            Err(e) => {
                let failure = if e.is_connect() {
                    Failure::Connect
                } else if e.is_builder() {
                    Failure::Request
                } else {
                    Failure::Exchange
                };
                return Reply::failed(failure, format!("{what}: {}", chain(&e)));
            }
        };
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut raw = Vec::new();
        // On an error, what arrived before it is kept in `raw`.
        let failure = response.read_to_end(&mut raw).err().map(|_| Failure::Body);
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&raw).into_owned(),
            failure,
        }
    }
}

/// An error with its causes (`error sending request: connection refused`).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The lowest port [`free_port`] gives.
const LOWEST_PORT: u16 = 10_000;

/// A loopback port free now, for a server another process or a later call will bind: picked at
/// random *below* the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
///
/// A port from `bind(127.0.0.1:0)` is free only until it is released: before the server bound
/// it, another test's `bind(…:0)` or outgoing loopback connection could take it, and the server
/// failed to start (an etcd member, a document's `stopline serve`: clean-clone suite runs on
/// 2026-12-04 and 2026-12-05). Below the range the kernel hands out nothing by itself; only
/// another explicit choice like this one can take the port, at random among ≈ 20 000.
pub fn free_port() -> std::io::Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")?;
    let ephemeral_low = range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse::<u16>().ok())
        .filter(|low| *low > LOWEST_PORT + 1000)
        .ok_or_else(|| {
            std::io::Error::other(format!(
                "no room below the ephemeral port range {:?} (from {LOWEST_PORT})",
                range.trim()
            ))
        })?;
    // Random keys per call (the standard library seeds them from the OS); the attempt varies
    // the port when one is busy.
    let random = std::collections::hash_map::RandomState::new();
    for attempt in 0u32..4096 {
        let mut hasher = random.build_hasher();
        hasher.write_u32(attempt);
        let span = u64::from(ephemeral_low - LOWEST_PORT);
        let port = LOWEST_PORT + (hasher.finish() % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(format!(
        "no free loopback port in {LOWEST_PORT}..{ephemeral_low}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;

    /// One connection answered with `raw` bytes (after the request head), then closed.
    fn answer_once(raw: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                line.clear();
            }
            let mut stream: TcpStream = reader.into_inner();
            let _ = stream.write_all(raw);
        });
        addr
    }

    fn client() -> Client {
        Client::new(Some(Duration::from_secs(5)), Duration::from_secs(10))
    }

    #[test]
    fn a_chunked_event_stream_arrives_dechunked() {
        let addr = answer_once(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
              1f\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1}\n\r\n\
              1\r\n\n\r\n0\r\n\r\n",
        );
        let reply = client().send(&addr, "POST", "/mcp/x", Some("t"), None, &[]);
        assert_eq!((reply.status, &reply.failure), (200, &None), "{reply:?}");
        assert_eq!(reply.header("Content-Type"), Some("text/event-stream"));
        assert_eq!(reply.rpc_messages()[0]["id"], 1, "{reply:?}");
    }

    #[test]
    fn a_stream_that_breaks_off_keeps_what_arrived() {
        let addr = answer_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n8\r\nwor",
        );
        let reply = client().send(&addr, "GET", "/", None, None, &[]);
        assert_eq!(reply.status, 200);
        assert_eq!(reply.failure, Some(Failure::Body));
        assert!(reply.body.starts_with("hello"), "{reply:?}");
    }

    #[test]
    fn a_free_port_is_below_the_ephemeral_range_bindable_and_drawn_at_random() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
        let ports: std::collections::BTreeSet<u16> =
            (0..20).map(|_| free_port().unwrap()).collect();
        for port in &ports {
            assert!(
                (LOWEST_PORT..low).contains(port),
                "{port} against {range:?}"
            );
            TcpListener::bind(("127.0.0.1", *port)).unwrap();
        }
        assert!(ports.len() > 15, "20 draws gave {ports:?}");
    }

    #[test]
    fn no_answer_is_status_zero_with_the_reason() {
        let port = free_port().unwrap();
        let refused = client().send(&format!("127.0.0.1:{port}"), "GET", "/", None, None, &[]);
        assert_eq!(
            (refused.status, refused.failure),
            (0, Some(Failure::Connect))
        );
        assert!(
            refused.body.contains("GET / at 127.0.0.1"),
            "{}",
            refused.body
        );
        assert_eq!(refused.brief(), "0 ");
        let closed = client().send(&answer_once(b""), "GET", "/", None, None, &[]);
        assert_eq!(
            (closed.status, closed.failure),
            (0, Some(Failure::Exchange))
        );
    }

    #[test]
    fn a_redirect_is_the_answer() {
        let addr = answer_once(
            b"HTTP/1.1 303 See Other\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
        );
        let reply = client().send(&addr, "POST", "/", None, None, &[]);
        assert_eq!(reply.status, 303);
        assert_eq!(reply.header("location"), Some("/elsewhere"));
    }
}
