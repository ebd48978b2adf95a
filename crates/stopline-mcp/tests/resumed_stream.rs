//! A tool call whose answer comes on a resumed stream (MCP 2025-11-25, SEP-1699) is recorded
//! with that answer (docs/reference.md §8): the server ends the `POST`'s event stream after a
//! priming event (one with an `id`), the client reconnects with `GET` and `Last-Event-ID`, and
//! the answer delivered there commits the operation, so the tool is not blocked as unresolved.
//! A call whose resumption never delivers is left in doubt once `cut_outcome_wait_s` passed,
//! and not before. Runs the real gateway (in process) and a recording upstream on loopback.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use stopline_control::Context;
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// A `tools/call` gets a stream with only a priming event; a `GET` resuming after it gets the
/// answer to request 9 (and nothing for any other).
fn answer(request: &Received) -> Answer {
    if request.method == "GET" {
        let answer = Answer::events();
        return match request.header("last-event-id") {
            Some("prime-1") => answer.event(
                json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "done"}]}})
                    .to_string(),
            ),
            _ => answer,
        };
    }
    let body = request.json();
    if body["method"] == "tools/call" {
        // `data:` empty, then the event's id: a priming event.
        return Answer::events().event("\nid: prime-1");
    }
    Answer::json(json!({"jsonrpc": "2.0", "id": body["id"], "result": {}}).to_string())
}

/// The operation of request `id`: its outcome, "in doubt", or "open".
fn state_of(ctx: &Context, id: &str) -> Option<String> {
    let (ops, _) = ctx.store.ops().all();
    let op = ops.values().find(|o| o.request_id.as_deref() == Some(id))?;
    Some(match (&op.outcome, op.in_doubt) {
        (Some(outcome), _) => outcome.clone(),
        (None, true) => "in doubt".into(),
        (None, false) => "open".into(),
    })
}

/// Wait (bounded) until request `id`'s operation is no longer open.
async fn settled(ctx: &Context, id: &str) -> Option<String> {
    for _ in 0..400 {
        match state_of(ctx, id) {
            Some(state) if state != "open" => return Some(state),
            _ => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    state_of(ctx, id)
}

async fn call(world: &World, id: u64, session: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "work", "arguments": {}}});
    let answer = world.post_rpc("rec", Some(session), &body).await;
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

async fn resume(world: &World, session: &str, last: &str) -> String {
    let answer = world.open_stream("rec", session, Some(last)).await;
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_on_a_resumed_stream_commits_its_operation() {
    let upstream = Upstream::start(answer);
    let config = format!(
        "cut_outcome_wait_s = 30\n[mcp.rec]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;

    // The POST's stream ends after its priming event, which reaches the client.
    let primed = call(&world, 9, "s-1").await;
    assert!(primed.contains("id: prime-1"), "{primed}");
    // Give the gateway time to see the stream's end before the client resumes (the outcome
    // must be the same whether it has or not).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        state_of(&world.ctx, "9").as_deref(),
        Some("open"),
        "a resumable call is not in doubt when its stream ends"
    );

    let resumed = resume(&world, "s-1", "prime-1").await;
    let answer: Value = resumed
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .and_then(|d| serde_json::from_str(d).ok())
        .expect("the answer on the resumed stream");
    assert_eq!(answer["id"], 9, "{resumed}");
    assert_eq!(
        settled(&world.ctx, "9").await.as_deref(),
        Some("committed"),
        "{:?}",
        world.ctx.store.ops().all()
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_that_never_delivers_leaves_the_call_in_doubt_after_the_wait() {
    let upstream = Upstream::start(answer);
    let config = format!(
        "cut_outcome_wait_s = 1\n[mcp.rec]\nurl = \"{}\"\n",
        upstream.url("/mcp")
    );
    let world = World::start(&config, "caller").await;
    let primed = call(&world, 4, "s-2").await;
    assert!(primed.contains("id: prime-1"), "{primed}");
    // A resumption after another event: the server has nothing for it.
    let _ = resume(&world, "s-2", "other").await;
    assert_eq!(
        settled(&world.ctx, "4").await.as_deref(),
        Some("in doubt"),
        "{:?}",
        world.ctx.store.ops().all()
    );
    world.shutdown().await;
}
