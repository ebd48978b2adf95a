//! Group commit in the gateway's operation journal (`stopline-store/src/group_commit.rs`):
//! concurrent `prepared` and outcome records share one append and one fsync, and a call is
//! dispatched only once its own `prepared` record is durable. A real gateway process, a real
//! upstream that logs what it executed, real files; crashes and faults through the named
//! failpoints (`--features stopline/failpoints`, like `crash.rs`; without it these fail).

mod gw;
mod util;

use gw::{mcp_post, mcp_session, rpc_messages, Gateway, McpUpstream};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use util::Home;

/// One `tools/call` of the upstream's `write` (a recorded operation); its refusal code, "" when
/// it executed, or `None` when the gateway did not answer at all.
fn write_call(gateway: &str, token: &str, session: Option<&str>, n: u64) -> Option<String> {
    let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": "write", "arguments": {"n": n}}});
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mcp_post(gateway, token, session, &call)
    }))
    .ok()?;
    if reply.status == 0 {
        return None;
    }
    Some(
        rpc_messages(&reply)
            .iter()
            .find_map(|m| m["error"]["data"]["code"].as_str().map(String::from))
            .unwrap_or_default(),
    )
}

/// How many outcome records the home's operation journals hold (written, fsynced or not).
fn outcome_lines(home: &Home) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(home.file("ops")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        count += text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["phase"] == "outcome")
            .count();
    }
    count
}

/// The request ids of every `prepared` record in the home's operation journals.
fn prepared_request_ids(home: &Home) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for entry in std::fs::read_dir(home.file("ops")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(line) = serde_json::from_str::<Value>(line) else {
                continue; // a torn last line is a crash's remnant
            };
            if line["phase"] == "prepared" {
                if let Some(id) = line["request_id"].as_str() {
                    ids.insert(id.to_string());
                }
            }
        }
    }
    ids
}

fn executed_ids(upstream: &McpUpstream) -> BTreeSet<String> {
    upstream
        .executed()
        .iter()
        .map(|e| e["id"].to_string())
        .collect()
}

fn setup(failpoints: &str) -> (Home, McpUpstream, Gateway, String, Option<String>) {
    let home = Home::new();
    let upstream = McpUpstream::start(&home);
    let config = format!(
        "[mcp.dest]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
        upstream.port
    );
    let token = home.token(&["--agent", "busy"]);
    let gateway = Gateway::start_with_env(&home, &config, &[("STOPLINE_FAILPOINTS", failpoints)]);
    let session = mcp_session(&gateway.addr, &token);
    (home, upstream, gateway, token, session)
}

/// 16 callers at once, until `stop` says so or 30 s pass; every answer, by caller.
fn burst(
    gateway: &str,
    token: &str,
    session: Option<&str>,
    first_id: u64,
    stop: &(dyn Fn() -> bool + Sync),
) -> Vec<Option<String>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    std::thread::scope(|scope| {
        let callers: Vec<_> = (0..16u64)
            .map(|c| {
                scope.spawn(move || {
                    let mut answers = Vec::new();
                    for i in 0.. {
                        if stop() || Instant::now() > deadline {
                            break;
                        }
                        let answer = write_call(gateway, token, session, first_id + c * 10_000 + i);
                        let gone = answer.is_none();
                        answers.push(answer);
                        if gone {
                            break;
                        }
                    }
                    answers
                })
            })
            .collect();
        callers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    })
}

/// The gateway crashes (abort: no destructor, no flush) as it starts to write the first batch
/// of several records. Every call the upstream executed — the ones made one at a time before
/// the burst, and any of the burst — has its `prepared` record in the journal: no caller was
/// released before its own record was written and fsynced.
#[test]
fn a_crash_inside_a_batch_loses_no_acknowledged_prepared_record() {
    let (home, upstream, mut gateway, token, session) = setup("ops.batch.write=crash");
    let addr = gateway.addr.clone();
    for n in 1..=5 {
        // A call's outcome is queued after its answer: the next call's `prepared` record would
        // share its batch (and crash) unless that outcome has been taken and written first.
        gw::within(Duration::from_secs(10), || {
            (outcome_lines(&home) >= n as usize - 1).then_some(())
        })
        .expect("the previous call's outcome is written");
        assert_eq!(
            write_call(&addr, &token, session.as_deref(), n).as_deref(),
            Some(""),
            "call {n}, alone in its batch, executes"
        );
    }
    let proc = std::sync::Mutex::new(&mut gateway.proc.0);
    let exited = || {
        proc.lock()
            .unwrap()
            .try_wait()
            .map(|s| s.is_some())
            .unwrap_or(true)
    };
    burst(&addr, &token, session.as_deref(), 100_000, &exited);
    let proc = proc.into_inner().unwrap();
    let status = gw::within(Duration::from_secs(10), || proc.try_wait().ok().flatten()).expect(
        "16 concurrent recorded calls form a batch of several records, whose write crashes",
    );
    assert!(!status.success(), "the gateway aborted: {status:?}");
    let executed = executed_ids(&upstream);
    assert!(executed.len() >= 5, "the calls before the burst executed");
    let prepared = prepared_request_ids(&home);
    let missing: Vec<_> = executed.difference(&prepared).collect();
    assert!(
        missing.is_empty(),
        "executed with no durable prepared record: {missing:?}"
    );
}

/// A batch whose fsync fails releases every caller in it with the error: each call is refused
/// `control_io` and none reaches the upstream, however the calls were batched.
#[test]
fn a_failed_batch_dispatches_none_of_its_calls() {
    let (_home, upstream, gateway, token, session) =
        setup("ops.batch.fsync=error;ops.prepare.fsync=error");
    let calls = std::sync::atomic::AtomicU64::new(0);
    let answers = burst(&gateway.addr, &token, session.as_deref(), 1_000, &|| {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 64
    });
    assert!(!answers.is_empty());
    for answer in &answers {
        assert_eq!(answer.as_deref(), Some("control_io"), "{answers:?}");
    }
    assert!(
        upstream.executed().is_empty(),
        "a call was dispatched on a prepared record that is not durable"
    );
}
