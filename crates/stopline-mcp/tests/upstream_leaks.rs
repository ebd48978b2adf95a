//! No upstream stream outlives its agent (docs/reference.md §8): an agent that opens the
//! server's `GET` stream and goes away leaves nothing open upstream — the gateway closes the
//! matching upstream stream within 5 s, even though the upstream never sends anything that
//! would show the agent is gone. Counts the gateway's connections to the upstream in
//! `/proc/net/tcp` (and `tcp6`).

mod support;

use serde_json::json;
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
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let stream = client
            .get(world.mcp_url("rec"))
            .bearer_auth(&world.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", format!("s-{session}"))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        drop(stream);
        drop(client);
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
