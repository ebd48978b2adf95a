//! The Streamable HTTP proxy as a faithful MCP endpoint (docs/reference.md §8): an `Origin` not
//! allowed is refused 403 before anything reaches the upstream, an allowed one gets its CORS
//! preflight and headers; a refused request is its JSON-RPC error with HTTP 200 (401 with
//! `WWW-Authenticate` only for a missing or bad token); an upstream's own credentials
//! (`[mcp.<name>] headers`) reach that upstream only, and the agent's token never does. Runs the
//! real gateway (in process) and a recording upstream on loopback sockets; the preflight test
//! also a real headless Chromium (`/usr/bin/chromium` driven by `playwright-core` from the
//! repository's `node_modules`, as the status page test; a missing one fails it).

mod support;

use serde_json::{json, Value};
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

fn answer(request: &Received) -> Answer {
    let request = request.json();
    Answer::json(
        json!({"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}}).to_string(),
    )
    .header("mcp-session-id", "s-1")
    .header("x-upstream-secret", "never-returned")
}

fn call(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "work", "arguments": {}}})
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_not_allowed_is_refused_before_anything_and_an_allowed_one_gets_cors() {
    let upstream = Upstream::start(answer);
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "caller").await;
    let url = world.mcp_url("rec");
    let post = |origin: Option<&str>| {
        let mut request = client()
            .post(&url)
            .bearer_auth(&world.token)
            .header("accept", "application/json, text/event-stream")
            .json(&call(1));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };

    // DNS rebinding: a page on another origin reaching the loopback gateway.
    for evil in [
        "http://evil.example.com",
        "null",
        "http://localhost.evil.example.com",
    ] {
        let refused = post(Some(evil)).await.unwrap();
        assert_eq!(refused.status(), 403, "{evil}");
        assert!(refused
            .headers()
            .get("access-control-allow-origin")
            .is_none());
        // Without a token too: the origin is judged before anything else.
        let anonymous = client()
            .get(&url)
            .header("origin", evil)
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 403, "{evil}");
        let delete = client()
            .delete(&url)
            .bearer_auth(&world.token)
            .header("origin", evil)
            .send()
            .await
            .unwrap();
        assert_eq!(delete.status(), 403, "{evil}");
    }
    assert!(
        upstream.received().is_empty(),
        "nothing reached the upstream"
    );

    // A loopback origin (the default) and no origin (not a browser) are served.
    let allowed = post(Some("http://localhost:6274")).await.unwrap();
    assert_eq!(allowed.status(), 200);
    let headers = allowed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://localhost:6274"
    );
    let exposed = headers["access-control-expose-headers"].to_str().unwrap();
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
    assert_eq!(headers["mcp-session-id"], "s-1");
    let plain = post(None).await.unwrap();
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("access-control-allow-origin").is_none());
    assert_eq!(upstream.received().len(), 2);
    for seen in upstream.received() {
        assert_eq!(
            seen.header("origin"),
            None,
            "the agent's Origin is not forwarded"
        );
    }

    // The preflight: answered for an allowed origin, refused for another.
    let preflight = |origin: &str| {
        client()
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type, mcp-session-id",
            )
            .send()
    };
    let ok = preflight("http://127.0.0.1:3000").await.unwrap();
    assert_eq!(ok.status(), 204);
    let headers = ok.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://127.0.0.1:3000"
    );
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    assert!(
        methods.contains("POST") && methods.contains("DELETE"),
        "{methods}"
    );
    let allowed_headers = headers["access-control-allow-headers"].to_str().unwrap();
    for needed in [
        "authorization",
        "content-type",
        "mcp-session-id",
        "last-event-id",
    ] {
        assert!(allowed_headers.contains(needed), "{allowed_headers}");
    }
    let refused = preflight("https://evil.example.com").await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    world.shutdown().await;

    // A configured list replaces the loopback default.
    let config = format!(
        "allowed_origins = [\"https://app.example.com\"]\n[mcp.rec]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;
    let url = world.mcp_url("rec");
    for (origin, status) in [
        ("https://app.example.com", 200),
        ("http://localhost:6274", 403),
    ] {
        let answer = client()
            .post(&url)
            .bearer_auth(&world.token)
            .header("origin", origin)
            .json(&call(2))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{origin}");
    }
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_its_json_rpc_error_and_only_a_bad_token_is_401() {
    let upstream = Upstream::start(answer);
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "caller").await;
    let url = world.mcp_url("rec");

    for token in [None, Some("not-a-token")] {
        let mut request = client().post(&url).json(&call(1));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 401, "{token:?}");
        let challenge = answer.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
    }

    world.emergency("agent:caller", "stop the caller").await;
    let answer = client()
        .post(&url)
        .bearer_auth(&world.token)
        .header("accept", "application/json, text/event-stream")
        .json(&call(5))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "a refusal travels in the protocol");
    assert!(answer.headers().get("www-authenticate").is_none());
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["id"], 5, "{body}");
    assert_eq!(body["error"]["code"], -32001, "{body}");
    // The token predates the emergency: its epoch was revoked.
    assert_eq!(
        body["error"]["data"]["code"], "stale_control_epoch",
        "{body}"
    );
    let text = body["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("stopped by tester")
            && text.contains("stop the caller")
            && text.contains("do not retry"),
        "the latch's text: {text}"
    );
    assert!(
        upstream.received().is_empty(),
        "nothing reached the upstream"
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_credentials_reach_the_upstream_only() {
    let upstream = Upstream::start(answer);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("upstream.key");
    #[allow(clippy::disallowed_methods)] // the test's own fixture
    std::fs::write(&key, "upstream-secret-7\n").unwrap();
    let config = format!(
        "[mcp.rec]\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer ${{file:{}}}\", X-Tenant = \"t1\" }}\n",
        upstream.url("/mcp"),
        key.display()
    );
    let world = World::start(&config, "caller").await;
    let url = world.mcp_url("rec");
    let answer = client()
        .post(&url)
        .bearer_auth(&world.token)
        .header("accept", "application/json, text/event-stream")
        .header("x-tenant", "agent-chosen")
        .json(&call(1))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let returned = format!("{:?}", answer.headers());
    let body = answer.text().await.unwrap();
    for shown in [&returned, &body] {
        assert!(!shown.contains("upstream-secret-7"), "{shown}");
        assert!(!shown.contains("never-returned"), "{shown}");
    }
    let _ = client()
        .delete(&url)
        .bearer_auth(&world.token)
        .header("mcp-session-id", "s-1")
        .send()
        .await
        .unwrap();
    let seen = upstream.received();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer upstream-secret-7"),
            "{} carries the upstream's own credentials",
            request.method
        );
        assert_eq!(request.header("x-tenant"), Some("t1"));
        assert!(
            !request.body.contains(&world.token)
                && request
                    .headers
                    .iter()
                    .all(|(_, v)| !v.contains(&world.token)),
            "the agent's token never goes upstream"
        );
    }
    world.shutdown().await;

    // A reference that cannot be resolved: the gateway does not start (config_invalid).
    let home = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // the test's own fixture
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[mcp.rec]\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer ${{env:STOPLINE_TEST_UNSET_9C2}}\" }}\n",
            upstream.url("/mcp")
        ),
    )
    .unwrap();
    let started = stopline_gateway::start(stopline_gateway::ServeOptions {
        home: home.path().to_path_buf(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: Some(Box::new(stopline_mcp::http::router)),
        access_log: false,
    })
    .await;
    let Err(error) = started else {
        panic!("a gateway whose upstream headers cannot be resolved started");
    };
    let error = error.to_string();
    assert!(
        error.contains("config_invalid") && error.contains("STOPLINE_TEST_UNSET_9C2"),
        "{error}"
    );
}

/// The browser toolchain the preflight test needs (never skipped: a missing piece fails it).
fn require_browser() -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: scripts/setup-test-deps.sh installs it"
    );
    assert!(
        repo.join("node_modules/playwright-core/package.json")
            .exists(),
        "node_modules/playwright-core is missing: run `npm ci` (scripts/setup-test-deps.sh does)"
    );
    repo
}

/// Chromium's own CORS: a page on an allowed origin (loopback, the default) gets its preflight
/// answered and reads `Mcp-Session-Id`; a page on another origin fails the preflight, and its
/// request never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_preflight_succeeds_from_an_allowed_origin_and_fails_from_another() {
    let repo = require_browser();
    let upstream = Upstream::start(answer);
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "caller").await;
    let script = repo.join("crates/stopline-mcp/tests/browser/mcp_cors.mjs");
    let mut seen = Vec::new();
    // 127.0.0.1 is a loopback origin; 127.0.0.2 is on this host too, but not allowed.
    for host in ["127.0.0.1", "127.0.0.2"] {
        let profile = tempfile::tempdir().unwrap();
        #[allow(clippy::disallowed_methods)] // the test starts the browser driver
        let output = tokio::process::Command::new("node")
            .arg(&script)
            .arg(world.mcp_url("rec"))
            .arg(&world.token)
            .arg(host)
            .arg(profile.path())
            .output()
            .await
            .expect("node");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        seen.push(result);
    }
    let (allowed, other) = (&seen[0], &seen[1]);
    assert_eq!(allowed["ok"], true, "{allowed}");
    assert_eq!(allowed["status"], 200, "{allowed}");
    assert_eq!(
        allowed["session"], "s-1",
        "the exposed Mcp-Session-Id: {allowed}"
    );
    assert_eq!(other["ok"], false, "{other}");
    assert!(
        other["error"]
            .as_str()
            .unwrap_or("")
            .contains("Failed to fetch"),
        "{other}"
    );
    assert_eq!(
        upstream.received().len(),
        1,
        "only the allowed origin's request reached the upstream"
    );
    world.shutdown().await;
}

/// An upstream that speaks enough MCP for an SDK client to connect: `initialize` answered,
/// notifications accepted, no server stream.
fn mcp_answer(request: &Received) -> Answer {
    if request.method == "GET" {
        return Answer::status(405, "");
    }
    let body = request.json();
    if body.get("id").is_none() {
        return Answer::status(202, "");
    }
    let result = if body["method"] == "initialize" {
        json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "rec", "version": "1"}})
    } else {
        json!({"content": []})
    };
    Answer::json(json!({"jsonrpc": "2.0", "id": body["id"], "result": result}).to_string())
}

/// The official TypeScript SDK client, halted: its protocol error class (`McpError`, code
/// -32001) with the latch's text, not `StreamableHTTPError` (a transport failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_gets_its_protocol_error_with_the_latchs_text() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        repo.join("node_modules/@modelcontextprotocol/sdk/package.json")
            .exists(),
        "node_modules/@modelcontextprotocol/sdk is missing: run `npm ci` (scripts/setup-test-deps.sh does)"
    );
    let upstream = Upstream::start(mcp_answer);
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "caller").await;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    #[allow(clippy::disallowed_methods)] // the test starts the SDK client
    let mut child = tokio::process::Command::new("node")
        .arg(repo.join("crates/stopline-mcp/tests/ts_client.mjs"))
        .arg(world.mcp_url("rec"))
        .arg(&world.token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(ready.contains("ready"), "the client connected: {ready}");
    // halt-all of this agent, engaged as an operator at the console would.
    let (ctx, caller) = (
        world.ctx.clone(),
        stopline_control::engage::Caller {
            token: None,
            by: Some("tester".into()),
            local: true,
        },
    );
    tokio::task::spawn_blocking(move || {
        stopline_control::engage::engage(
            &ctx,
            &caller,
            "agent:caller",
            Some("halt-all"),
            "halt the caller",
        )
    })
    .await
    .unwrap()
    .expect("engage");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let line = lines.next_line().await.unwrap().unwrap_or_default();
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{line}");
    let stdout = line;
    let out: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(out["class"], "McpError", "{out}");
    assert_eq!(out["code"], -32001, "{out}");
    assert_eq!(out["data"]["code"], "break_glass_contained", "{out}");
    let message = out["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("stopped by tester")
            && message.contains("halt the caller")
            && message.contains("do not retry"),
        "{out}"
    );
    world.shutdown().await;
}
