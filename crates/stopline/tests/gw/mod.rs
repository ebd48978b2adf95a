//! Harness for the gateway tests: `stopline serve` as a child on a free loopback port, a
//! loopback OpenAI-compatible or Anthropic Messages upstream (Python, real sockets), the real
//! `openai` and `anthropic` clients, and the test kit's blocking HTTP/1.1 client (the one the
//! conformance battery uses). Children are killed by pid when dropped.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code)]

use crate::util::{bin, Home};
use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The Python with `openai` and `mcp` installed: `STOPLINE_TEST_PYTHON`, else `<repo>/.venv`.
/// A missing interpreter fails the test (never skips it).
pub fn python() -> PathBuf {
    let path = std::env::var_os("STOPLINE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: create it with `python3 -m venv .venv && .venv/bin/pip install openai mcp` \
         or set STOPLINE_TEST_PYTHON",
        path.display()
    );
    path
}

/// The Python with the agent frameworks installed (`requirements-frameworks.txt`):
/// `STOPLINE_FRAMEWORKS_PYTHON`, else `<repo>/.venv-frameworks`. A missing interpreter fails the
/// test (never skips it).
pub fn frameworks_python() -> PathBuf {
    let path = std::env::var_os("STOPLINE_FRAMEWORKS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-frameworks/bin/python")
        });
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/setup-test-deps.sh (python3 -m venv .venv-frameworks && \
         .venv-frameworks/bin/pip install -r requirements-frameworks.txt) or set \
         STOPLINE_FRAMEWORKS_PYTHON",
        path.display()
    );
    path
}

pub fn py_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

pub fn free_port() -> u16 {
    stopline_testkit::http::free_port().expect("a free loopback port")
}

pub use stopline_testkit::http::Reply;
use stopline_testkit::http::{Client, Failure};

/// The tests' bounds: the system's connect bound, every wait for the answer 60 s.
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(None, Duration::from_secs(60)))
}

/// A blocking HTTP/1.1 request with `Connection: close`.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    http_with(addr, method, path, token, body, &[])
}

/// [`http`] with extra request headers. Panics when no connection can be made (nothing was
/// sent); a gateway that connected and then gave no answer is status 0.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    extra: &[(&str, &str)],
) -> Reply {
    let reply = client().send(addr, method, path, token, body, extra);
    match reply.failure {
        Some(Failure::Connect) => panic!("connect to the gateway: {}", reply.body),
        Some(Failure::Request) => panic!("a request the test cannot send: {}", reply.body),
        _ => reply,
    }
}

/// A child process killed (by pid) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The loopback OpenAI-compatible upstream.
pub struct Upstream {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
}

impl Upstream {
    pub fn start(home: &Home) -> Upstream {
        Upstream::start_script(home, "fake_openai_upstream.py", &[])
    }

    /// [`Upstream::start`] whose models `held` and `held-stream` finish only once `release`
    /// exists.
    pub fn start_releasing(home: &Home, release: &Path) -> Upstream {
        let release = release.to_str().unwrap();
        Upstream::start_script(
            home,
            "fake_openai_upstream.py",
            &[("STUB_RELEASE", release)],
        )
    }

    /// The loopback Anthropic Messages API upstream (`fake_anthropic_upstream.py`).
    pub fn start_anthropic(home: &Home) -> Upstream {
        Upstream::start_script(home, "fake_anthropic_upstream.py", &[])
    }

    /// [`Upstream::start_anthropic`] holding the Bash-offering request that carries `hold_at`
    /// tool results until `release` exists.
    pub fn start_anthropic_holding(home: &Home, hold_at: u32, release: &Path) -> Upstream {
        let hold_at = hold_at.to_string();
        let release = release.to_str().unwrap();
        Upstream::start_script(
            home,
            "fake_anthropic_upstream.py",
            &[("STUB_HOLD_AT", &hold_at), ("STUB_RELEASE", release)],
        )
    }

    /// [`Upstream::start_anthropic`] holding every request for model `held` until `release`
    /// exists.
    pub fn start_anthropic_releasing(home: &Home, release: &Path) -> Upstream {
        let release = release.to_str().unwrap();
        Upstream::start_script(
            home,
            "fake_anthropic_upstream.py",
            &[("STUB_RELEASE", release)],
        )
    }

    /// The model that never stops calling the tool `echo` (`tool_loop_model.py`), holding its
    /// `hold_at`-th request: it writes `held` and answers once `release` exists.
    pub fn start_tool_loop(home: &Home, hold_at: u32, held: &Path, release: &Path) -> Upstream {
        let hold_at = hold_at.to_string();
        Upstream::start_script(
            home,
            "tool_loop_model.py",
            &[
                ("STUB_HOLD_AT", &hold_at),
                ("STUB_HELD", held.to_str().unwrap()),
                ("STUB_RELEASE", release.to_str().unwrap()),
            ],
        )
    }

    /// Every line of the upstream's log, as JSON.
    pub fn log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// `script` (in `tests/py`) as the upstream, with `env` added to its environment.
    pub fn start_script_with(home: &Home, script: &str, env: &[(&str, &str)]) -> Upstream {
        Upstream::start_script(home, script, env)
    }

    fn start_script(home: &Home, script: &str, env: &[(&str, &str)]) -> Upstream {
        let port_file = home.dir.path().join("upstream.port");
        let log = home.dir.path().join("upstream.log");
        let child = Command::new(python())
            .arg(py_script(script))
            .arg(&port_file)
            .arg(&log)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .expect("start the fake upstream");
        let proc = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                if let Ok(port) = text.trim().parse() {
                    return Upstream { proc, port, log };
                }
            }
            assert!(Instant::now() < deadline, "the fake upstream did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every request the upstream executed.
    pub fn executed(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("cut").is_none() && v.get("done").is_none())
            .collect()
    }

    /// When a slow or held model sent the last byte of its answer (unix seconds), if it has.
    pub fn done_at(&self, model: &str) -> Option<f64> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["done"] == true && v["model"] == model)
            .and_then(|v| v["t"].as_f64())
    }
}

/// `stopline serve` on a free loopback port.
pub struct Gateway {
    pub proc: Proc,
    pub addr: String,
}

pub const UPSTREAM_KEY: &str = "upstream-secret-key";

impl Gateway {
    /// Write `<home>/config.toml` (`extra` appended to a listen line) and start the gateway.
    pub fn start(home: &Home, extra: &str) -> Gateway {
        Gateway::start_with_env(home, extra, &[])
    }

    /// [`Gateway::start`] with extra environment (e.g. `STOPLINE_FAILPOINTS`).
    pub fn start_with_env(home: &Home, extra: &str, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_with_args(home, extra, env, &[])
    }

    /// [`Gateway::start_with_env`] with extra arguments to `serve` (e.g. `--access-log`).
    pub fn start_with_args(
        home: &Home,
        extra: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Gateway {
        let addr = format!("127.0.0.1:{}", free_port());
        std::fs::create_dir_all(home.path()).unwrap();
        std::fs::write(
            home.file("config.toml"),
            format!("listen = \"{addr}\"\n{extra}\n"),
        )
        .unwrap();
        let mut serve = vec!["serve"];
        serve.extend_from_slice(args);
        let child = home
            .command(&serve)
            .env("UPSTREAM_API_KEY", UPSTREAM_KEY)
            .env("STOPLINE_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(home.dir.path().join("gateway.log")).unwrap(),
            ))
            .spawn()
            .expect("start stopline serve");
        let gateway = Gateway {
            proc: Proc(child),
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(&gateway.addr).is_ok()
                && http(&gateway.addr, "GET", "/healthz", None, None).status == 200
            {
                return gateway;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        http(&self.addr, "GET", path, token, None)
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        http(&self.addr, "POST", path, token, Some(body))
    }

    /// The openai client's answer for `mode` with `token` as its API key.
    pub fn openai(&self, token: &str, mode: &str, model: &str) -> Value {
        let out = Command::new(python())
            .arg(py_script("openai_client.py"))
            .arg(format!("{}/v1", self.url()))
            .arg(mode)
            .arg(model)
            .env_clear()
            .env("OPENAI_API_KEY", token)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .expect("run the openai client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "openai client output is not JSON ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The official `anthropic` client's answer for `mode` with `token` as its API key (see
    /// `py/anthropic_client.py`).
    pub fn anthropic(&self, token: &str, mode: &str, model: &str) -> Value {
        let out = Command::new(python())
            .arg(py_script("anthropic_client.py"))
            .arg(self.url())
            .arg(mode)
            .arg(model)
            .env_clear()
            .env("STOPLINE_TEST_TOKEN", token)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .expect("run the anthropic client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "anthropic client output is not JSON ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    pub fn chat_body(model: &str) -> Value {
        serde_json::json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    }
}

/// The model config every model test uses (a priced `gpt-test`).
pub fn model_config(upstream: &Upstream) -> String {
    format!(
        "[model]\nbase_url = \"http://127.0.0.1:{}/v1\"\napi_key_env = \"UPSTREAM_API_KEY\"\n\n[prices.\"gpt-test\"]\ninput = 1.0\noutput = 2.0\nmax_output_tokens = 64\n",
        upstream.port
    )
}

/// The Anthropic config the Messages API tests use: a priced `claude-test` whose cache reads are
/// cheaper and cache writes dearer than plain input.
pub fn anthropic_config(upstream: &Upstream) -> String {
    format!(
        "[anthropic]\nbase_url = \"http://127.0.0.1:{}\"\napi_key_env = \"UPSTREAM_API_KEY\"\n\n[prices.\"claude-test\"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.5\ncache_write = 4.0\nmax_output_tokens = 64\n",
        upstream.port
    )
}

/// Poll `f` until it returns Some or `within` passes.
pub fn within<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn bin_path() -> &'static str {
    bin()
}

/// One JSON-RPC POST to the MCP route `/mcp/dest` of the gateway at `addr`, in `session` when
/// given, accepting JSON or SSE as a real client does.
pub fn mcp_post(addr: &str, token: &str, session: Option<&str>, body: &Value) -> Reply {
    let mut headers = vec![("Accept", "application/json, text/event-stream")];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    http_with(addr, "POST", "/mcp/dest", Some(token), Some(body), &headers)
}

/// `initialize` on `/mcp/dest` (asserted answered); the reply and the session id it gave.
pub fn mcp_initialize(addr: &str, token: &str) -> (Reply, Option<String>) {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let reply = mcp_post(addr, token, None, &init);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.header("mcp-session-id").map(String::from);
    (reply, session)
}

/// An MCP session on `/mcp/dest`: `initialize`, then `tools/list` (so the gateway has learned
/// the tools' hints); its session id.
pub fn mcp_session(addr: &str, token: &str) -> Option<String> {
    let (_, session) = mcp_initialize(addr, token);
    let listed = mcp_post(
        addr,
        token,
        session.as_deref(),
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(listed.status, 200, "{}", listed.body);
    session
}

/// The JSON-RPC messages of an MCP reply (a JSON body or server-sent events).
pub fn rpc_messages(reply: &Reply) -> Vec<Value> {
    reply.rpc_messages()
}

/// A loopback MCP upstream (Python) that records every tool call it executes.
pub struct McpUpstream {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
}

impl McpUpstream {
    pub fn start(home: &Home) -> McpUpstream {
        let port_file = home.dir.path().join("mcp.port");
        let log = home.dir.path().join("mcp.log");
        let child = Command::new(python())
            .arg(py_script("fake_mcp_upstream.py"))
            .arg(&port_file)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the fake MCP upstream");
        let proc = Proc(child);
        let port = within(Duration::from_secs(20), || {
            std::fs::read_to_string(&port_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("the fake MCP upstream did not start");
        McpUpstream { proc, port, log }
    }

    pub fn executed(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }
}

/// A loopback MCP upstream (Python) that records every frame it receives, before acting on it.
pub struct FrameUpstream {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
}

impl FrameUpstream {
    pub fn start(home: &Home) -> FrameUpstream {
        let port_file = home.dir.path().join("frames.port");
        let log = home.dir.path().join("frames.log");
        std::fs::write(&log, "").unwrap();
        let child = Command::new(python())
            .arg(py_script("frame_counting_upstream.py"))
            .arg(&port_file)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the frame-counting MCP upstream");
        let proc = Proc(child);
        let port = within(Duration::from_secs(20), || {
            std::fs::read_to_string(&port_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("the frame-counting upstream did not start");
        FrameUpstream { proc, port, log }
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// Every frame received, in order.
    pub fn frames(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter_map(|l| l.get("frame").cloned())
            .collect()
    }

    /// Every message received (batch members included) whose method is `method`.
    pub fn received(&self, method: &str) -> Vec<Value> {
        self.frames()
            .into_iter()
            .flat_map(|f| match f {
                Value::Array(items) => items,
                other => vec![other],
            })
            .filter(|m| m["method"] == method)
            .collect()
    }

    /// Request ids of `slow` calls that finished.
    pub fn done(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter_map(|l| l.get("done").cloned())
            .collect()
    }

    /// The `[mcp.frames]` table for this upstream, with `extra` lines.
    pub fn config(&self, extra: &str) -> String {
        format!(
            "[mcp.frames]\nurl = \"http://127.0.0.1:{}/mcp\"\n{extra}\n",
            self.port
        )
    }
}

/// What an agent stands up to fool the Claude Code hook: an HTTP server on loopback that
/// answers every `POST /v1/check` "allow". Its URL.
pub fn fake_allow_gateway() -> (Proc, String) {
    let port = free_port();
    let script = r#"
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class Allow(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        # A faithful allow, as a real gateway words it: a malformed one is refused by the hook.
        body = b'{"decision":"allow","mode":"DISENGAGED","code":null,"latches":[],"message":"allowed"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Allow).serve_forever()
"#;
    let child = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the fake gateway");
    let proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the fake gateway did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (proc, format!("http://127.0.0.1:{port}"))
}
