//! The gateway (docs/reference.md §8), a real `stopline serve` on loopback: no recovery over the network,
//! fixed refusal statuses, a stop refusing the very next call with nothing reaching the
//! upstream, engage open to stale tokens, a corrupt latch closing the gate, and the agent's own
//! attempts to lift its stop refused.

use super::{slow, Case};
use crate::conformance::gateway::{model_config, poll, Gateway};
use crate::conformance::http::Upstream;
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::altered_signature;
use crate::conformance::{ensure, harness, Verdict};
use serde_json::json;
use std::time::Duration;

pub const CASES: &[Case] = &[
    slow(
        "gateway_refuses_recovery",
        "POST /v1/recover and /v1/drain answer 403 owner_control_required with no token, an agent token and an operator token",
        gateway_refuses_recovery,
    ),
    slow(
        "gateway_token_refusals",
        "absent, garbage and forged tokens get 401 token_invalid; /v1/check answers a bad token with 200 and a block receipt",
        gateway_token_refusals,
    ),
    slow(
        "gateway_stop_refuses_the_next_model_call",
        "after an engage the gateway acknowledged, the stopped agent's next model call is 403 stale_control_epoch and never reaches the upstream",
        gateway_stop_refuses_the_next_model_call,
    ),
    slow(
        "gateway_engage_accepts_stale_tokens",
        "POST /v1/engage with a stale token engages (200); a blank reason is 400 reason_required; the stopped agent cannot disengage (403), a monitor can",
        gateway_engage_accepts_stale_tokens,
    ),
    slow(
        "gateway_mcp_frames_that_cannot_be_governed_are_refused",
        "at /mcp/<server>, a tools/call sent as a notification and a batch with a duplicate id are HTTP 400 and nothing reaches the upstream; notifications/* pass",
        gateway_mcp_frames_refused,
    ),
    slow(
        "gateway_provider_side_tools_are_refused",
        "POST /v1/responses with an mcp tool naming a server_url, or background: true, is 403 hosted_tool_refused naming the field; a 4 KiB model name is 400 request_invalid; nothing reaches the upstream",
        gateway_provider_side_tools_refused,
    ),
    slow(
        "gateway_corrupt_latch_closes_the_gate",
        "a corrupt file dropped into latches/ closes the gateway within one refresh interval (block break_glass_contained, EMERGENCY)",
        gateway_corrupt_latch_closes_the_gate,
    ),
];

fn gateway_mcp_frames_refused(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &format!("[mcp.up]\nurl = \"{}/mcp\"\n", upstream.url()))?;
    let token = s.token(&["--agent", "w", "--budget", "tool_calls=1"])?;
    let call = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "write"}});
    for (what, frame) in [
        (
            "a tools/call notification",
            json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "write"}}),
        ),
        ("a duplicate-id batch", json!([call(1), call(1)])),
    ] {
        let r = gateway.post("/mcp/up", Some(&token), &frame);
        ensure(r.status == 400, || format!("{what}: {}", r.brief()))?;
    }
    ensure(upstream.executed() == 0, || {
        format!("{} request(s) reached the upstream", upstream.executed())
    })?;
    let note = gateway.post(
        "/mcp/up",
        Some(&token),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    ensure(note.status != 400, || {
        format!("a real notification: {}", note.brief())
    })?;
    Ok("tools/call notification and duplicate-id batch: 400, nothing forwarded; notifications/initialized forwarded".into())
}

fn gateway_refuses_recovery(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "")?;
    let agent = s.token(&["--agent", "w"])?;
    let operator = s.token(&["--agent", "operator", "--role", "operator"])?;
    s.engage("machine", "emergency")?;
    for route in ["/v1/recover", "/v1/drain"] {
        for token in [None, Some(agent.as_str()), Some(operator.as_str())] {
            let r = gateway.post(
                route,
                token,
                &json!({"scope": "machine", "reason": "x", "deadline": 30}),
            );
            ensure(
                r.status == 403 && r.code_or_empty() == "owner_control_required",
                || {
                    format!(
                        "{route} with {}: {}",
                        if token.is_some() {
                            "a token"
                        } else {
                            "no token"
                        },
                        r.brief()
                    )
                },
            )?;
        }
    }
    ensure(s.entries("latches").len() == 1, || "a latch moved".into())?;
    Ok("/v1/recover and /v1/drain × {none, agent, operator}: 403 owner_control_required; latch kept".into())
}

fn gateway_token_refusals(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "")?;
    let token = s.token(&["--agent", "w"])?;
    let forged = altered_signature(&token);
    let body = json!({"model": "m", "messages": []});
    for (name, bad) in [
        ("none", None),
        ("garbage", Some("garbage")),
        ("forged", Some(forged.as_str())),
    ] {
        let r = gateway.post("/v1/chat/completions", bad, &body);
        ensure(
            r.status == 401 && r.code_or_empty() == "token_invalid",
            || format!("{name}: {}", r.brief()),
        )?;
    }
    let r = gateway.post(
        "/v1/check",
        Some("garbage"),
        &json!({"class": "noncritical", "action": "tool_call"}),
    );
    ensure(
        r.status == 200
            && r.json_or_null()["decision"] == "block"
            && r.json_or_null()["code"] == "token_invalid",
        || format!("/v1/check with garbage: {} {}", r.status, r.body),
    )?;
    let ok = gateway.get("/v1/status", Some(&token));
    ensure(ok.status == 200, || {
        format!("a valid token on /v1/status: {}", ok.brief())
    })?;
    Ok("none/garbage/forged: 401 token_invalid; /v1/check garbage: 200 block token_invalid; valid token: 200".into())
}

fn gateway_stop_refuses_the_next_model_call(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &model_config(&upstream.url()))?;
    let token = s.token(&["--agent", "w"])?;
    let first = gateway.chat(&token, "gpt-test");
    ensure(first.status == 200 && upstream.executed() == 1, || {
        format!("before the stop: {}", first.brief())
    })?;
    let receipt = s.engage("agent:w", "emergency")?;
    let acked = receipt["acknowledged_by"].as_array().map_or(0, Vec::len);
    ensure(acked == 1 && receipt["unacknowledged"] == json!([]), || {
        format!("the gateway did not acknowledge: {receipt}")
    })?;
    let next = gateway.chat(&token, "gpt-test");
    ensure(
        next.status == 403 && next.code_or_empty() == "stale_control_epoch",
        || format!("the next call: {}", next.brief()),
    )?;
    ensure(upstream.executed() == 1, || {
        format!("{} calls reached the upstream", upstream.executed())
    })?;
    Ok("call 1: 200; engage acknowledged by 1 gateway; call 2: 403 stale_control_epoch; upstream executed 1".into())
}

fn gateway_engage_accepts_stale_tokens(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "")?;
    let token = s.token(&["--agent", "w"])?;
    let monitor = s.token(&["--agent", "safety-monitor", "--role", "monitor"])?;
    s.engage("agent:w", "emergency")?;
    let r = gateway.post(
        "/v1/engage",
        Some(&token),
        &json!({"scope": "machine", "level": "halt-all", "reason": "stale but signed"}),
    );
    ensure(
        r.status == 200 && r.json_or_null()["engaged"] == true,
        || format!("engage with a stale token: {}", r.brief()),
    )?;
    let blank = gateway.post(
        "/v1/engage",
        Some(&token),
        &json!({"scope": "machine", "reason": "  "}),
    );
    ensure(
        blank.status == 400 && blank.code_or_empty() == "reason_required",
        || format!("blank reason: {}", blank.brief()),
    )?;
    let lift = gateway.post(
        "/v1/disengage",
        Some(&token),
        &json!({"scope": "machine", "reason": "mine"}),
    );
    ensure(lift.status == 403, || {
        format!(
            "the stopped agent lifting the machine halt: {}",
            lift.brief()
        )
    })?;
    let lift = gateway.post(
        "/v1/disengage",
        Some(&monitor),
        &json!({"scope": "machine", "reason": "checked"}),
    );
    ensure(lift.status == 200, || {
        format!("a monitor lifting the halt: {} {}", lift.status, lift.body)
    })?;
    Ok("stale engage 200; blank reason 400 reason_required; agent disengage 403; monitor disengage 200".into())
}

fn gateway_corrupt_latch_closes_the_gate(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "reload_interval_ms = 500")?;
    let token = s.token(&["--agent", "w"])?;
    let check = || {
        gateway
            .post(
                "/v1/check",
                Some(&token),
                &json!({"class": "noncritical", "action": "tool_call"}),
            )
            .json_or_null()
    };
    ensure(check()["decision"] == "allow", || {
        "the gate was closed before the damage".into()
    })?;
    let dropped = std::time::Instant::now();
    s.write("latches/latch_corrupt.json", b"{not a latch")?;
    let closed = poll(s, Duration::from_millis(1500), || {
        let r = check();
        (r["decision"] == "block").then_some(r)
    });
    let after = dropped.elapsed();
    let receipt = closed.ok_or_else(|| {
        crate::conformance::CaseError::Unexpected("the gate stayed open for 1.5 s".into())
    })?;
    ensure(
        receipt["code"] == "break_glass_contained" && receipt["mode"] == "EMERGENCY",
        || format!("{receipt}"),
    )?;
    ensure(after <= Duration::from_millis(1000), || {
        format!("closed only after {after:?}")
    })?;
    Ok(format!(
        "closed {} ms after the drop: block break_glass_contained (EMERGENCY)",
        after.as_millis()
    ))
}

fn gateway_provider_side_tools_refused(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &model_config(&upstream.url()))?;
    let token = s.token(&["--agent", "w"])?;
    let mcp =
        json!({"type": "mcp", "server_label": "x", "server_url": "https://attacker.example/mcp"});
    for (what, body, status, code, field) in [
        (
            "an mcp tool",
            json!({"model": "gpt-test", "input": "hi", "tools": [mcp]}),
            403,
            "hosted_tool_refused",
            r#"tools[0].type = "mcp""#,
        ),
        (
            "background",
            json!({"model": "gpt-test", "input": "hi", "background": true}),
            403,
            "hosted_tool_refused",
            "background = true",
        ),
        (
            "a 4 KiB model name",
            json!({"model": "m".repeat(4096), "input": "hi"}),
            400,
            "request_invalid",
            "model is 4096 bytes",
        ),
    ] {
        let r = gateway.post("/v1/responses", Some(&token), &body);
        let message = r.json_or_null()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        ensure(
            r.status == status && r.code_or_empty() == code && message.contains(field),
            || format!("{what}: {}", r.brief()),
        )?;
    }
    ensure(upstream.executed() == 0, || {
        format!("{} requests reached the upstream", upstream.executed())
    })?;
    Ok("mcp tool and background: 403 hosted_tool_refused naming the field; 4 KiB model: 400 request_invalid; upstream executed 0".into())
}
