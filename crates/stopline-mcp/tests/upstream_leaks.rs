//! No upstream stream or session outlives its agent (docs/reference.md §8): an agent that opens
//! the server's `GET` stream and goes away leaves nothing open upstream — the gateway closes the
//! matching upstream stream within 5 s, even though the upstream never sends anything that
//! would show the agent is gone (counted as the gateway's connections to the upstream in
//! `/proc/net/tcp` and `tcp6`); and a session its agent left without `DELETE` is ended upstream
//! with `DELETE` once idle for `session_idle_s`, never while its agent holds a stream of it.

mod support;

use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// `GET` opens a stream that never sends anything; anything else is answered.
fn answer(request: &Received) -> Answer {
    if request.method == "GET" {
        return Answer::events().then_hang();
    }
    Answer::json(json!({"jsonrpc": "2.0", "id": request.json()["id"], "result": {}}).to_string())
}

/// Established TCP connections to `port` on loopback (the client side of each).
fn connections_to(port: u16) -> usize {
    let hex = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, remote address, state (01: established)
            fields.len() > 3 && fields[2].ends_with(&hex) && fields[3] == "01"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_agents_that_vanish_leave_no_upstream_stream_open() {
    let upstream = Upstream::start(answer);
    let port = upstream.addr().port();
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "caller").await;
    let baseline = connections_to(port);

    for session in 0..20 {
        // Each agent its own client (its own connection), gone once it has its stream.
        let stream = world
            .open_stream("rec", &format!("s-{session}"), None)
            .await;
        assert_eq!(stream.status(), 200);
        drop(stream);
    }
    let gets = upstream
        .received()
        .iter()
        .filter(|r| r.method == "GET")
        .count();
    assert_eq!(gets, 20, "every stream reached the upstream");

    // Within 5 s of the last agent's departure, every upstream stream is closed (the bound
    // the reference gives; polled, so a quick close passes at once).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut open = connections_to(port);
    while open > baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = connections_to(port);
    }
    assert_eq!(
        open, baseline,
        "upstream connections back to their baseline after 20 vanished agents"
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_left_without_delete_are_ended_upstream_once_idle() {
    let opened = AtomicUsize::new(0);
    let upstream = Upstream::start(move |request: &Received| match request.method.as_str() {
        "GET" => Answer::events().then_hang(),
        "DELETE" => Answer::status(200, ""),
        _ => {
            let n = opened.fetch_add(1, Ordering::SeqCst);
            Answer::json(
                json!({"jsonrpc": "2.0", "id": request.json()["id"], "result": {"protocolVersion": "2025-11-25"}})
                    .to_string(),
            )
            .header("mcp-session-id", format!("s-{n}"))
        }
    });
    let config = format!(
        "[mcp.rec]\nurl = \"{}\"\nsession_idle_s = 1\nheaders = {{ X-Upstream-Key = \"k-1\" }}\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut sessions = Vec::new();
    for _ in 0..21 {
        let answer = world.post_rpc("rec", None, &initialize).await;
        assert_eq!(answer.status(), 200);
        sessions.push(
            answer.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    // The last agent keeps the server's stream of its session open (and is quiet otherwise).
    let held = sessions.pop().unwrap();
    let stream = world.open_stream("rec", &held, None).await;
    assert_eq!(stream.status(), 200);

    let deleted = || -> Vec<String> {
        upstream
            .received()
            .iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| {
                assert_eq!(r.header("x-upstream-key"), Some("k-1"), "its credentials");
                r.header("mcp-session-id").unwrap_or_default().to_string()
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while deleted().len() < sessions.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ended = deleted();
    ended.sort();
    sessions.sort();
    assert_eq!(
        ended, sessions,
        "every session its agent left is ended upstream"
    );
    assert!(
        !ended.contains(&held),
        "a session with an open stream is in use"
    );

    // Its agent goes away: the stream closes, and the session is ended once idle.
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !deleted().contains(&held) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(deleted().contains(&held), "{:?}", deleted());
    world.shutdown().await;
}
