//! The Anthropic Messages API proxy (`/v1/messages`, docs/reference.md §3) with the official `anthropic`
//! Python SDK against a loopback Messages API upstream that reports usage, cache tokens
//! included: calls, streams and token counts succeed; the upstream sees only the gateway's key;
//! budgets settle from usage with cache tokens priced; after a stop the next call raises
//! `PermissionDeniedError` and the upstream sees nothing; a running stream is cut at EMERGENCY;
//! 32 concurrent calls never overrun a spend budget.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{anthropic_config, Gateway, Upstream, UPSTREAM_KEY};
use serde_json::{json, Value};
use std::time::Duration;
use util::Home;

/// The stub's usage per message: 100 input, 30 cache-read, 20 cache-write, 10 output tokens.
const TOKENS_PER_CALL: f64 = 160.0;
/// Its price under [`anthropic_config`]: 100·1.0 + 30·0.5 + 20·4.0 + 10·2.0 per million.
const USD_PER_CALL: f64 = 215e-6;

fn model_ops(home: &Home, target: &str) -> Vec<Value> {
    let ops = home.run(&["ops", "list"]).json();
    ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == target)
        .cloned()
        .collect()
}

fn used(gateway: &Gateway, token: &str, kind: &str) -> f64 {
    let budgets = gateway.get("/v1/budgets", Some(token));
    assert_eq!(budgets.status, 200, "{}", budgets.body);
    let budgets = budgets.json();
    budgets["agents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["accounts"].as_array().unwrap().clone())
        .find_map(|account| account["budgets"][kind]["used"].as_f64())
        .unwrap_or_else(|| panic!("no {kind} account: {budgets}"))
}

#[test]
fn anthropic_sdk_works_until_a_stop_and_the_upstream_sees_only_the_gateways_key() {
    let home = Home::new();
    let upstream = Upstream::start_anthropic(&home);
    let gateway = Gateway::start(&home, &anthropic_config(&upstream));
    let token = home.token(&["--agent", "claude", "--budget", "tokens=100000"]);

    let message = gateway.anthropic(&token, "message", "claude-test");
    assert_eq!(message["ok"], true, "{message}");
    assert_eq!(message["content"], "hello from upstream");
    assert_eq!(message["usage"]["cache_read_input_tokens"], 30, "{message}");
    let stream = gateway.anthropic(&token, "stream", "claude-test");
    assert_eq!(stream["ok"], true, "{stream}");
    assert_eq!(stream["content"], "hello from upstream");
    assert_eq!(stream["usage"]["output_tokens"], 10, "{stream}");
    assert_eq!(stream["usage"]["cache_creation_input_tokens"], 20);
    for event in [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ] {
        assert!(
            stream["events"].as_array().unwrap().contains(&json!(event)),
            "{event} passed through: {stream}"
        );
    }
    let bearer = gateway.anthropic(&token, "bearer", "claude-test");
    assert_eq!(bearer["ok"], true, "the token as an auth token: {bearer}");
    let count = gateway.anthropic(&token, "count", "claude-test");
    assert_eq!(count, json!({"ok": true, "input_tokens": 100}));

    let executed = upstream.executed();
    assert_eq!(executed.len(), 4, "{executed:?}");
    for call in &executed {
        assert_eq!(
            call["x_api_key"], UPSTREAM_KEY,
            "the gateway's key goes upstream"
        );
        assert_eq!(
            call["authorization"],
            Value::Null,
            "the agent's token never goes upstream: {call}"
        );
        assert_eq!(call["anthropic_version"], "2023-06-01", "{call}");
        assert_eq!(call["anthropic_beta"], "stopline-test-beta", "{call}");
    }
    assert_eq!(
        executed.last().unwrap()["path"],
        "/v1/messages/count_tokens"
    );

    // Three model requests, three operations with outcomes; counting tokens is none. Each
    // settled at its reported usage, cache tokens included (the bound was ~600 tokens each).
    let ops = model_ops(&home, "model:claude-test");
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert!(ops.iter().all(|o| o["outcome"] == "committed"), "{ops:?}");
    let tokens = gw::within(Duration::from_secs(10), || {
        let used = used(&gateway, &token, "tokens");
        (used == 3.0 * TOKENS_PER_CALL).then_some(used)
    });
    assert_eq!(
        tokens,
        Some(3.0 * TOKENS_PER_CALL),
        "settled from usage with cache tokens: {}",
        used(&gateway, &token, "tokens")
    );

    let unauthenticated = gateway.anthropic("not-a-token", "message", "claude-test");
    assert_eq!(
        (
            &unauthenticated["exception"],
            &unauthenticated["status"],
            &unauthenticated["type"],
            &unauthenticated["code"]
        ),
        (
            &json!("AuthenticationError"),
            &json!(401),
            &json!("authentication_error"),
            &json!("token_invalid")
        ),
        "{unauthenticated}"
    );

    home.engage("agent:claude", "emergency");
    for mode in ["message", "stream"] {
        let refused = gateway.anthropic(&token, mode, "claude-test");
        assert_eq!(
            (&refused["exception"], &refused["status"], &refused["type"]),
            (
                &json!("PermissionDeniedError"),
                &json!(403),
                &json!("permission_error")
            ),
            "{mode}: {refused}"
        );
        assert_eq!(refused["code"], "stale_control_epoch", "{mode}: {refused}");
    }
    assert_eq!(
        upstream.executed().len(),
        4,
        "nothing reached the upstream after the stop"
    );
}

#[test]
fn an_emergency_answers_a_running_messages_stream_at_once_with_an_error_event() {
    let home = Home::new();
    let upstream = Upstream::start_anthropic(&home);
    let gateway = Gateway::start(&home, &anthropic_config(&upstream));
    let token = home.token(&["--agent", "streamer"]);
    let reply = std::thread::scope(|scope| {
        let stream = scope.spawn(|| gateway.anthropic(&token, "stream", "slow-stream"));
        let started = gw::within(Duration::from_secs(20), || {
            (!upstream.executed().is_empty()).then_some(())
        });
        assert!(started.is_some(), "the stream reached the upstream");
        std::thread::sleep(Duration::from_millis(300));
        home.engage("agent:streamer", "emergency");
        stream.join().unwrap()
    });
    assert_eq!(reply["ok"], false, "the stream was cut: {reply}");
    assert_eq!(
        (&reply["type"], &reply["code"]),
        (&json!("permission_error"), &json!("break_glass_contained")),
        "the SDK raised the gateway's error event: {reply}"
    );
    let text = reply["content"].as_str().unwrap();
    assert!(
        text.starts_with("tick") && text.len() < 500,
        "part of the stream arrived, not all of it: {reply}"
    );
    // The exchange went on detached after the agent was answered: when the upstream finished
    // its stream, the outcome was recorded — nothing is left in doubt (docs/reference.md §8).
    let recorded = gw::within(Duration::from_secs(30), || {
        model_ops(&home, "model:slow-stream")
            .into_iter()
            .find(|o| o["outcome"] == "committed")
    });
    assert!(
        recorded.is_some(),
        "the cut exchange's outcome is recorded: {}",
        home.run(&["ops", "list"]).stdout
    );
}

#[test]
fn an_emergency_answers_a_waiting_message_at_once_and_its_outcome_is_recorded_when_it_arrives() {
    let home = Home::new();
    let release = home.dir.path().join("release");
    let upstream = Upstream::start_anthropic_releasing(&home, &release);
    let gateway = Gateway::start(&home, &anthropic_config(&upstream));
    let token = home.token(&["--agent", "waiter"]);
    let reply = std::thread::scope(|scope| {
        let call = scope.spawn(|| gateway.anthropic(&token, "message", "held"));
        let held = gw::within(Duration::from_secs(20), || {
            upstream
                .executed()
                .iter()
                .any(|c| c["held"] == true)
                .then_some(())
        });
        assert!(
            held.is_some(),
            "the call reached the upstream, which holds it"
        );
        home.engage("agent:waiter", "emergency");
        // The upstream still holds the call: only the gateway can have answered it (else the
        // SDK times out after 30 s, an APITimeoutError).
        call.join().unwrap()
    });
    assert!(!release.exists());
    assert_eq!(
        (&reply["exception"], &reply["status"], &reply["type"]),
        (
            &json!("PermissionDeniedError"),
            &json!(403),
            &json!("permission_error")
        ),
        "answered at once, while the upstream still held the call: {reply}"
    );
    std::fs::write(&release, b"go").unwrap();
    let recorded = gw::within(Duration::from_secs(30), || {
        model_ops(&home, "model:held")
            .into_iter()
            .find(|o| o["outcome"] == "committed")
    });
    assert!(
        recorded.is_some(),
        "the detached exchange's outcome is recorded when the upstream answers: {}",
        home.run(&["ops", "list"]).stdout
    );
}

#[test]
fn concurrent_messages_never_overrun_a_spend_budget() {
    let home = Home::new();
    let upstream = Upstream::start_anthropic(&home);
    let gateway = Gateway::start(&home, &anthropic_config(&upstream));
    // 0.003 USD pays for 13 calls at their usage (215e-6 each); the reservation bound is far
    // larger (~600 body bytes at the dearest input price, 4.0, plus 10 output tokens).
    let budget = 0.003;
    let token = home.token(&["--agent", "spender", "--budget", "spend_usd=0.003"]);
    let results = gateway.anthropic(&token, "concurrent", "claude-test");
    let results = results.as_array().expect("one result per call");
    assert_eq!(results.len(), 32);
    let ok = results.iter().filter(|r| r["ok"] == true).count();
    let executed = upstream.executed().len();
    assert_eq!(
        ok, executed,
        "every success reached the upstream once: {results:?}"
    );
    assert!(
        executed >= 1 && executed as f64 * USD_PER_CALL <= budget,
        "at most the budget was spent upstream: {executed} calls"
    );
    for r in results.iter().filter(|r| r["ok"] != true) {
        assert!(
            matches!(
                (r["exception"].as_str(), r["code"].as_str()),
                (Some("RateLimitError"), Some("budget_exhausted"))
                    | (
                        Some("PermissionDeniedError"),
                        Some("break_glass_contained" | "breaker_open" | "stale_control_epoch")
                    )
            ),
            "{r}"
        );
    }
    assert!(
        results.iter().any(|r| r["exception"] == "RateLimitError"),
        "{results:?}"
    );
    let spent = used(&gateway, &token, "spend_usd");
    assert!(
        spent <= budget + 1e-12,
        "settled spend {spent} within {budget}"
    );
}

#[test]
fn a_messages_model_without_a_price_is_refused_for_a_spend_budget() {
    let home = Home::new();
    let upstream = Upstream::start_anthropic(&home);
    let gateway = Gateway::start(&home, &anthropic_config(&upstream));
    let token = home.token(&["--agent", "w", "--budget", "spend_usd=1"]);
    let refused = gateway.anthropic(&token, "message", "claude-unpriced");
    // Its own refusal, a 403 the SDK does not retry (a 429 it retried, as if money were spent).
    assert_eq!(
        (&refused["exception"], &refused["code"]),
        (&json!("PermissionDeniedError"), &json!("price_missing")),
        "{refused}"
    );
    assert!(upstream.executed().is_empty());
}
