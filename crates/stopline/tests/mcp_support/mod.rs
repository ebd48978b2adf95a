//! Real third-party parts for the MCP tests: the Python `mcp` client (driven line by line), the
//! Node reference server `@modelcontextprotocol/server-everything`, a counting MCP server, and
//! the gateway (`stopline serve`). Everything listens on 127.0.0.1 only, and every process a
//! test starts is stopped by its pid when its handle drops. A missing venv or node_modules is a
//! failure, never a skip: the README's test command installs both.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code)]

use crate::util::Home;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use stopline_testkit::http::Client;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// The Python with `mcp` installed: `STOPLINE_TEST_PYTHON`, else `<repo>/.venv/bin/python`.
pub fn python() -> PathBuf {
    let python = std::env::var_os("STOPLINE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    assert!(python.exists(), "{} is missing: run ./scripts/setup-test-deps.sh (python3 -m venv .venv && .venv/bin/pip install -r requirements-test.txt)", python.display());
    python
}

/// A script of `crates/stopline-mcp/tests/py`.
pub fn script(name: &str) -> PathBuf {
    repo().join("crates/stopline-mcp/tests/py").join(name)
}

/// The Node reference server's entry point in `<repo>/node_modules`.
pub fn everything() -> PathBuf {
    let entry = repo().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "{} is missing: run npm ci at the repository root",
        entry.display()
    );
    entry
}

/// A child process stopped by pid (SIGKILL, then reaped) when dropped, and its descendants with
/// it: a stdio client's proxy and the server it wraps end on their own when the client goes
/// (the proxy ends its server), which took longer than the test itself, so they outlived it
/// holding its output (nextest's LEAK). They get 5 s to end, then SIGKILL by pid.
pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let mut descendants = Vec::new();
        let mut next = vec![self.child.id()];
        while let Some(pid) = next.pop() {
            let children = children_of(pid);
            descendants.extend(&children);
            next.extend(children);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eventually(Duration::from_secs(5), || {
            descendants.iter().all(|pid| !alive(*pid))
        });
        for pid in descendants.into_iter().filter(|pid| alive(*pid)) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A loopback port free now, below the ephemeral range (`stopline_testkit::http::free_port`).
pub fn free_port() -> u16 {
    stopline_testkit::http::free_port().expect("a free loopback port")
}

/// Wait until `port` accepts connections.
pub fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `server-everything streamableHttp` on a fresh port.
pub fn everything_http() -> (Proc, u16) {
    let port = free_port();
    let child = Command::new("node")
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node");
    let proc = Proc {
        child,
        name: "server-everything",
    };
    wait_port(port, "server-everything");
    (proc, port)
}

/// The counting server; returns it, its port and its count file.
pub fn counting_server(dir: &Path) -> (Proc, u16, PathBuf) {
    let port_file = dir.join("counting.port");
    let count_file = dir.join("counting.log");
    std::fs::write(&count_file, "").unwrap();
    let child = Command::new(python())
        .arg(script("counting_server.py"))
        .arg(&port_file)
        .arg(&count_file)
        .stdin(Stdio::null())
        .spawn()
        .expect("python");
    let proc = Proc {
        child,
        name: "counting server",
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let port = loop {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break port;
        }
        assert!(
            Instant::now() < deadline,
            "the counting server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    (proc, port, count_file)
}

/// `stopline serve` on a fresh port with `[mcp.*]` tables `mcp` (TOML); returns it and its URL.
pub fn gateway(home: &Home, mcp: &str) -> (Proc, String) {
    let port = free_port();
    std::fs::create_dir_all(home.path()).unwrap();
    let config = format!("listen = \"127.0.0.1:{port}\"\nack_timeout_ms = 1000\n{mcp}\n");
    std::fs::write(home.file("config.toml"), config).unwrap();
    let child = home
        .command(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("stopline serve");
    let proc = Proc {
        child,
        name: "gateway",
    };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    // The test kit's client (the battery's and the gateway tests'); status 0 until it listens.
    let client = Client::new(Some(Duration::from_secs(5)), Duration::from_secs(10));
    let addr = format!("127.0.0.1:{port}");
    loop {
        if client
            .send(&addr, "GET", "/healthz", None, None, &[])
            .status
            == 200
        {
            return (proc, url);
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The Python `mcp` client driving one session.
pub struct Driver {
    proc: Proc,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Driver {
    /// Start `mcp_driver.py` with `args` and `env`; waits for the session to be initialized.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Driver {
        let mut command = Command::new(python());
        command
            .arg(script("mcp_driver.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for key in [
            "STOPLINE_URL",
            "STOPLINE_TOKEN",
            "STOPLINE_SESSION",
            "STOPLINE_HOME",
        ] {
            command.env_remove(key);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("python driver");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut driver = Driver {
            proc: Proc {
                child,
                name: "mcp client",
            },
            stdin,
            lines,
        };
        let ready = driver.read(Duration::from_secs(60));
        assert_eq!(
            ready["ready"], true,
            "the MCP session did not initialize: {ready}"
        );
        driver
    }

    fn read(&mut self, timeout: Duration) -> Value {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("driver printed non-JSON ({e}): {line}")),
            Err(_) => panic!("the MCP client gave no answer within {timeout:?}"),
        }
    }

    /// Send one command and wait for its result.
    pub fn send(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("driver stdin");
        self.stdin.flush().unwrap();
        self.read(Duration::from_secs(90))
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.send(json!({"op": "call", "tool": tool, "args": args}))
    }

    pub fn list(&mut self) -> Value {
        self.send(json!({"op": "list"}))
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Send one command, then kill the client (SIGKILL) after `after`, mid-call.
    pub fn send_and_die(mut self, command: Value, after: Duration) {
        writeln!(self.stdin, "{command}").expect("driver stdin");
        self.stdin.flush().unwrap();
        std::thread::sleep(after);
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
    }
}

/// The stopline refusal code a failed call carries in `error.data.code`.
pub fn refusal_code(result: &Value) -> String {
    assert_eq!(result["ok"], false, "the call was not refused: {result}");
    assert_eq!(result["code"], -32001, "not a stopline refusal: {result}");
    result["data"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The pids whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
            && fields.first() != Some(&"Z")
        {
            children.push(child);
        }
    }
    children
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|i| stat[i + 2..].starts_with('Z')))
        == Some(false)
}

/// Wait up to `timeout` for `condition`.
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

/// Recover `scope` at the owner console (a pseudo-terminal): plan, then apply.
pub fn recover(home: &Home, scope: &str) {
    let plan = home.run_on_pty(
        &[
            "recover",
            "plan",
            "--scope",
            scope,
            "--reason",
            "test recovery",
            "--by",
            "operator",
        ],
        &[],
    );
    assert_eq!(plan.code, 0, "plan: {}\n{}", plan.stdout, plan.stderr);
    let plan_id = plan.json()["plan"].as_str().unwrap().to_string();
    let apply = home.run_on_pty(
        &["recover", "apply", "--plan", &plan_id, "--by", "operator"],
        &[],
    );
    assert_eq!(apply.code, 0, "apply: {}\n{}", apply.stdout, apply.stderr);
    assert_eq!(apply.json()["recovered"], true, "{}", apply.stdout);
}

/// Start the Python stdio client on `stopline [global…] mcp proxy --name everything` around
/// server-everything (stdio), with `token` in a token file.
pub fn stdio_proxy(home: &Home, global: &[&str], token: &str) -> Driver {
    stdio_proxy_env(home, global, token, &[])
}

/// As [`stdio_proxy`], with `env` set for the proxy (e.g. `STOPLINE_URL`).
pub fn stdio_proxy_env(home: &Home, global: &[&str], token: &str, env: &[(&str, &str)]) -> Driver {
    let token_file = home
        .dir
        .path()
        .join(format!("token-{}", crate::util::rand_suffix()));
    std::fs::write(&token_file, token).unwrap();
    let everything = everything();
    let home_path = home.path();
    let mut args = vec![
        "stdio",
        crate::util::bin(),
        "--home",
        home_path.to_str().unwrap(),
    ];
    args.extend_from_slice(global);
    args.extend_from_slice(&[
        "mcp",
        "proxy",
        "--name",
        "everything",
        "--token-file",
        token_file.to_str().unwrap(),
        "--",
        "node",
        everything.to_str().unwrap(),
        "stdio",
    ]);
    Driver::start(&args, env)
}
