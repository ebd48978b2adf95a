//! What the gateway holds and what it refuses to reach (docs/reference.md §8): a call held under
//! halt-noncritical times out `queued_timeout` (or fails at once on escalation) without reaching
//! the upstream, and a call to an MCP server the gateway does not know is refused
//! `egress_refused` and counts toward the agent's `refused_egress` breaker.

use super::{slow, Case};
use crate::conformance::gateway::{model_config, poll, Gateway};
use crate::conformance::http::Upstream;
use crate::conformance::sandbox::Sandbox;
use crate::conformance::{ensure, harness, Verdict};
use serde_json::json;
use std::time::Duration;

pub const CASES: &[Case] = &[
    slow(
        "queued_timeout",
        "under halt-noncritical a model call is held, then refused 503 queued_timeout with Retry-After; a held call fails at once when the halt escalates; nothing reaches the upstream",
        queued_timeout,
    ),
    slow(
        "egress_refused",
        "a call to an MCP server the gateway does not know is refused egress_refused (403) and repeated attempts trip the agent's breaker (breaker:refused_egress)",
        egress_refused,
    ),
];

fn queued_timeout(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let config = format!("queue_timeout_s = 2\n{}", model_config(&upstream.url()));
    let gateway = Gateway::start(s, &config)?;
    let token = s.token(&["--agent", "q"])?;
    s.engage("agent:q", "halt-noncritical")?;
    let started = std::time::Instant::now();
    let r = gateway.chat(&token, "gpt-test");
    let held = started.elapsed();
    ensure(
        r.status == 503
            && r.code_or_empty() == "queued_timeout"
            && r.header("retry-after").is_some(),
        || {
            format!(
                "a held call after the queue timeout: {} {:?}",
                r.brief(),
                r.headers
            )
        },
    )?;
    ensure(held >= Duration::from_millis(1900), || {
        format!("refused after only {held:?}")
    })?;
    let (engaged, held_call) = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            let started = std::time::Instant::now();
            (gateway.chat(&token, "gpt-test"), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(250));
        let engaged = s.engage("agent:q", "halt-all");
        (engaged, call.join())
    });
    engaged?;
    let (r, waited_for) = held_call.map_err(|_| harness("the held call panicked"))?;
    ensure(
        r.status == 403 && r.code_or_empty() == "break_glass_contained",
        || format!("the held call after the escalation: {}", r.brief()),
    )?;
    ensure(waited_for < Duration::from_millis(1500), || {
        format!("failed only after {waited_for:?}")
    })?;
    ensure(upstream.executed() == 0, || {
        "a held call reached the upstream".into()
    })?;
    Ok(format!(
        "held {} ms then 503 queued_timeout with Retry-After; escalated while held: 403 break_glass_contained after {} ms; upstream untouched",
        held.as_millis(),
        waited_for.as_millis()
    ))
}

fn egress_refused(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "[breakers]\nrefused_egress = 2\n")?;
    let token = s.token(&["--agent", "prober"])?;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "exfiltrate", "arguments": {}}});
    for i in 0..2 {
        let r = gateway.post("/mcp/nowhere", Some(&token), &call);
        // A refused JSON-RPC request is answered in the protocol (docs/reference.md §8): HTTP
        // 200 carrying the JSON-RPC error, so MCP clients raise it as the refusal it is.
        ensure(
            r.status == 200 && r.json_or_null()["error"]["data"]["code"] == "egress_refused",
            || format!("call {i} to an unknown server: {} {}", r.status, r.body),
        )?;
    }
    let latch = poll(s, Duration::from_secs(10), || {
        let status = s.status().ok()?;
        status["latches"]
            .as_array()?
            .iter()
            .find(|l| l["by"] == "breaker:refused_egress")
            .cloned()
    })
    .ok_or_else(|| {
        crate::conformance::CaseError::Unexpected("no breaker:refused_egress latch".into())
    })?;
    ensure(latch["scope"] == "agent:prober", || format!("{latch}"))?;
    Ok(format!(
        "/mcp/nowhere twice: egress_refused in the protocol (200); latch {} on agent:prober by breaker:refused_egress",
        latch["id"].as_str().unwrap_or("?")
    ))
}
