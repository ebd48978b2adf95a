//! Loopback HTTP for the gateway cases: requests through the test kit's client (the one the
//! integration tests use), and a tiny in-process upstream that plays an OpenAI-compatible model
//! API (and answers `/healthz`).
//!
//! Both speak only to 127.0.0.1, with timeouts on every socket, so a gateway that hangs makes
//! the case fail on time instead of hanging the battery. The upstream counts what it executes:
//! an effect that reaches it after a stop is exactly what the gateway cases look for.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use stopline_testkit::http::Client;

pub use stopline_testkit::http::{free_port, Reply};

/// The battery's bounds: a connect gives up after 5 s, every wait for the answer after 20 s.
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(Some(Duration::from_secs(5)), Duration::from_secs(20)))
}

/// `METHOD path` with an optional bearer token and JSON body; `Connection: close`. Status 0
/// (the reason in the body) when no answer could be read.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    client().send(addr, method, path, token, body, &[])
}

/// The in-process OpenAI-compatible upstream: every POST is a chat completion reporting
/// `usage` of 100 prompt and 10 completion tokens; `GET /healthz` is 200.
pub struct Upstream {
    addr: SocketAddr,
    executed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Upstream {
    /// Bind 127.0.0.1:0 and serve on a thread (one short thread per connection).
    pub fn start() -> std::io::Result<Upstream> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let executed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (Arc::clone(&executed), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let count = Arc::clone(&count);
                std::thread::spawn(move || serve_one(stream, &count));
            }
        });
        Ok(Upstream {
            addr,
            executed,
            stop,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many model requests it executed.
    pub fn executed(&self) -> usize {
        self.executed.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn serve_one(stream: TcpStream, executed: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    let _ = reader.read_exact(&mut body);
    let reply = if line.starts_with("POST") {
        executed.fetch_add(1, Ordering::SeqCst);
        let model = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["model"].as_str().map(String::from))
            .unwrap_or_default();
        serde_json::json!({"id": "chatcmpl-conformance", "object": "chat.completion", "created": 0,
            "model": model, "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
        .to_string()
    } else {
        r#"{"ok":true}"#.to_string()
    };
    let mut stream = reader.into_inner();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}
