//! Budgets and breakers at the gateway (docs/reference.md §8): concurrent calls never overrun a budget
//! signed into the token, an exhausted budget trips the agent's breaker into a latch with an
//! evidence record, unpriced models are refused under a spend budget, delegation cannot widen
//! a budget, repeated unauthorized calls trip the agent's breaker, and a failing upstream opens
//! its adapter breaker.

use super::{slow, Case};
use crate::conformance::gateway::{model_config, poll, Gateway};
use crate::conformance::http::{free_port, Reply, Upstream};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::{ensure, harness, CaseError, Verdict};
use serde_json::{json, Value};
use std::time::Duration;

pub const CASES: &[Case] = &[
    slow(
        "budget_steps_hold_under_concurrency",
        "16 concurrent model calls on a steps=4 token: at most 4 reach the upstream, the rest are 429 budget_exhausted or refused by the tripped breaker",
        steps_hold_under_concurrency,
    ),
    slow(
        "budget_spend_holds_under_concurrency_and_trips_the_breaker",
        "24 concurrent calls on a spend budget never overrun it; exhaustion engages an agent latch by breaker:budget_exhausted with an evidence-record.v1, and the agent's next call is refused",
        spend_holds_and_trips,
    ),
    slow(
        "budget_unpriced_model_refused",
        "a model without a price is refused 403 price_missing (not budget_exhausted: nothing was spent) naming the [prices] key to add, for a token carrying a spend budget, and nothing reaches the upstream",
        unpriced_model_refused,
    ),
    slow(
        "breaker_trips_on_unauthorized_calls",
        "an agent making unauthorized calls up to the threshold trips its breaker: an agent latch by breaker:unauthorized_calls, and its calls are refused",
        breaker_trips_on_unauthorized_calls,
    ),
    slow(
        "breaker_open_after_upstream_failures",
        "consecutive upstream failures open the adapter breaker: the next call is refused breaker_open (503) without being sent",
        breaker_open_after_upstream_failures,
    ),
];

/// `n` concurrent chat calls; their replies.
fn concurrent(gateway: &Gateway, token: &str, body: &Value, n: usize) -> Vec<Reply> {
    std::thread::scope(|scope| {
        let calls: Vec<_> = (0..n)
            .map(|_| scope.spawn(|| gateway.post("/v1/chat/completions", Some(token), body)))
            .collect();
        calls.into_iter().filter_map(|c| c.join().ok()).collect()
    })
}

/// A latch in status engaged by `by`, waited for.
fn latch_by(s: &Sandbox, by: &str) -> Result<Value, CaseError> {
    poll(s, Duration::from_secs(10), || {
        let status = s.status().ok()?;
        status["latches"]
            .as_array()?
            .iter()
            .find(|l| l["by"] == by)
            .cloned()
    })
    .ok_or_else(|| CaseError::Unexpected(format!("no latch engaged by {by}")))
}

fn statuses(replies: &[Reply]) -> String {
    let mut seen: Vec<String> = replies.iter().map(Reply::brief).collect();
    seen.sort();
    seen.dedup();
    seen.join(", ")
}

fn steps_hold_under_concurrency(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &model_config(&upstream.url()))?;
    let token = s.token(&["--agent", "stepper", "--budget", "steps=4"])?;
    let body = json!({"model": "gpt-test", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]});
    let replies = concurrent(&gateway, &token, &body, 16);
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let executed = upstream.executed();
    ensure(ok == executed && (1..=4).contains(&executed), || {
        format!(
            "{ok} successes, {executed} executed upstream (budget 4): {}",
            statuses(&replies)
        )
    })?;
    let refusals_ok = replies.iter().all(|r| {
        r.status == 200
            || (r.status == 429 && r.code_or_empty() == "budget_exhausted")
            || (r.status == 403
                && matches!(
                    r.code_or_empty().as_str(),
                    "breaker_open" | "break_glass_contained"
                ))
    });
    ensure(
        refusals_ok && replies.iter().any(|r| r.status == 429),
        || format!("unexpected replies: {}", statuses(&replies)),
    )?;
    Ok(format!(
        "{executed} of 16 executed (budget 4); replies: {}",
        statuses(&replies)
    ))
}

fn spend_holds_and_trips(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &model_config(&upstream.url()))?;
    // Each call settles 100 input + 10 output tokens = 120e-6 USD: 0.002 pays for 16 at most.
    let token = s.token(&["--agent", "spender", "--budget", "spend_usd=0.002"])?;
    let body = json!({"model": "gpt-test", "max_tokens": 10, "messages": [{"role": "user", "content": "x".repeat(400)}]});
    let replies = concurrent(&gateway, &token, &body, 24);
    let executed = upstream.executed();
    let ok = replies.iter().filter(|r| r.status == 200).count();
    ensure(ok == executed && (1..=16).contains(&executed), || {
        format!(
            "{ok} successes, {executed} executed (at most 16 fit): {}",
            statuses(&replies)
        )
    })?;
    ensure(
        replies
            .iter()
            .any(|r| r.status == 429 && r.code_or_empty() == "budget_exhausted"),
        || format!("no budget_exhausted: {}", statuses(&replies)),
    )?;
    let latch = latch_by(s, "breaker:budget_exhausted")?;
    ensure(
        latch["scope"] == "agent:spender" && latch["level"] == "halt-all",
        || format!("{latch}"),
    )?;
    let record = poll(s, Duration::from_secs(10), || {
        let log = std::fs::read_to_string(s.file("evidence/log.jsonl")).ok()?;
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["schema"] == "evidence-record.v1" && r["kind"] == "budget_exhausted")
    })
    .ok_or_else(|| CaseError::Unexpected("no evidence-record.v1 for the exhaustion".into()))?;
    ensure(
        record["agent"] == "spender" && record["latch"] == latch["id"],
        || format!("{record}"),
    )?;
    let before = upstream.executed();
    let next = gateway.chat(&token, "gpt-test");
    ensure(next.status == 403 || next.status == 429, || {
        format!("after the trip: {}", next.brief())
    })?;
    ensure(upstream.executed() == before, || {
        "a call reached the upstream after the trip".into()
    })?;
    Ok(format!(
        "{executed} of 24 executed within 0.002 USD; latch {} by breaker:budget_exhausted; evidence record names it; next call {}",
        latch["id"].as_str().unwrap_or("?"),
        next.brief()
    ))
}

fn unpriced_model_refused(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let gateway = Gateway::start(s, &model_config(&upstream.url()))?;
    let token = s.token(&["--agent", "w", "--budget", "spend_usd=1"])?;
    let r = gateway.chat(&token, "unpriced-model");
    let message = r.json_or_null()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure(
        r.status == 403
            && r.code_or_empty() == "price_missing"
            && message.contains("[prices.unpriced-model]"),
        || r.brief(),
    )?;
    ensure(upstream.executed() == 0, || {
        "the call reached the upstream".into()
    })?;
    Ok("unpriced model under spend_usd=1: 403 price_missing naming [prices.unpriced-model]; upstream untouched".into())
}

fn breaker_trips_on_unauthorized_calls(s: &Sandbox) -> Verdict {
    let upstream = Upstream::start().map_err(harness)?;
    let config = format!(
        "{}\n[breakers]\nunauthorized_calls = 2\n",
        model_config(&upstream.url())
    );
    let gateway = Gateway::start(s, &config)?;
    let token = s.token(&["--agent", "sneaky"])?;
    for _ in 0..2 {
        let r = gateway.post(
            "/v1/recover",
            Some(&token),
            &json!({"scope": "machine", "reason": "let me out"}),
        );
        ensure(r.status == 403, || format!("/v1/recover: {}", r.brief()))?;
    }
    let latch = latch_by(s, "breaker:unauthorized_calls")?;
    ensure(latch["scope"] == "agent:sneaky", || format!("{latch}"))?;
    let next = gateway.chat(&token, "gpt-test");
    ensure(
        next.status == 403
            && matches!(
                next.code_or_empty().as_str(),
                "breaker_open" | "break_glass_contained"
            ),
        || format!("the tripped agent's next call: {}", next.brief()),
    )?;
    ensure(upstream.executed() == 0, || {
        "the tripped agent reached the upstream".into()
    })?;
    Ok(format!("2 unauthorized calls: latch {} on agent:sneaky by breaker:unauthorized_calls; next call {}", latch["id"].as_str().unwrap_or("?"), next.brief()))
}

fn breaker_open_after_upstream_failures(s: &Sandbox) -> Verdict {
    // An upstream that refuses connections: every dispatched call fails.
    let dead = format!("http://127.0.0.1:{}", free_port().map_err(harness)?);
    let config = format!(
        "{}\n[breakers]\nadapter_failures = 2\nadapter_cooldown_ms = 60000\n",
        model_config(&dead)
    );
    let gateway = Gateway::start(s, &config)?;
    let token = s.token(&["--agent", "w"])?;
    for i in 0..2 {
        let r = gateway.chat(&token, "gpt-test");
        ensure(
            r.status >= 500 && r.code_or_empty() != "breaker_open",
            || format!("failure {i}: {}", r.brief()),
        )?;
    }
    let r = gateway.chat(&token, "gpt-test");
    ensure(
        r.status == 503 && r.code_or_empty() == "breaker_open",
        || format!("after 2 failures: {}", r.brief()),
    )?;
    Ok("2 failed dispatches to a dead upstream, then 503 breaker_open".into())
}
