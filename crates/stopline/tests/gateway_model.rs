//! The model proxy with the real `openai` Python client against a loopback upstream that
//! reports usage: calls succeed streamed and not, a stop refuses the very next call with the
//! right code, a pre-stop token stays dead after recovery, delegated tokens die with their
//! parent only, and concurrent calls never overrun a spend budget.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{model_config, Gateway, Upstream, UPSTREAM_KEY};
use serde_json::json;
use std::time::Duration;
use util::Home;

#[test]
fn openai_client_works_until_a_stop_and_pre_stop_tokens_stay_dead_after_recovery() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let token = home.token(&["--agent", "w"]);

    let chat = gateway.openai(&token, "chat", "gpt-test");
    assert_eq!(chat["ok"], true, "{chat}");
    assert_eq!(chat["content"], "hello from upstream");
    let stream = gateway.openai(&token, "stream", "gpt-test");
    assert_eq!(stream["ok"], true, "{stream}");
    assert_eq!(stream["content"], "hello from upstream");
    assert_eq!(
        stream["usage"]["total_tokens"], 110,
        "usage was asked for upstream: {stream}"
    );
    for mode in ["responses", "embeddings"] {
        let reply = gateway.openai(&token, mode, "gpt-test");
        assert_eq!(reply["ok"], true, "{mode}: {reply}");
    }
    let executed = upstream.executed();
    assert_eq!(executed.len(), 4, "{executed:?}");
    for call in &executed {
        assert_eq!(
            call["authorization"],
            format!("Bearer {UPSTREAM_KEY}"),
            "the agent's token never goes upstream"
        );
    }
    let streamed = executed.iter().find(|c| c["stream"] == true).unwrap();
    assert_eq!(streamed["stream_options"]["include_usage"], true);

    // Every model request is an operation with an outcome.
    let ops = home.run(&["ops", "list"]).json();
    let model_ops: Vec<_> = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == "model:gpt-test")
        .collect();
    assert_eq!(model_ops.len(), 4, "{ops}");
    assert!(
        model_ops
            .iter()
            .all(|o| o["outcome"] == "committed" || o["outcome"].is_null()),
        "{ops}"
    );

    let receipt = home.engage("agent:w", "emergency");
    assert_eq!(
        receipt["acknowledged_by"].as_array().unwrap().len(),
        1,
        "{receipt}"
    );
    assert_eq!(receipt["unacknowledged"], json!([]));
    let refused = gateway.openai(&token, "chat", "gpt-test");
    assert_eq!(
        (refused["ok"].clone(), refused["status"].clone()),
        (json!(false), json!(403)),
        "{refused}"
    );
    assert_eq!(refused["code"], "stale_control_epoch", "{refused}");
    let refused = gateway.openai(&token, "stream", "gpt-test");
    assert_eq!(refused["status"], 403, "{refused}");
    assert_eq!(
        upstream.executed().len(),
        4,
        "nothing reached the upstream after the stop"
    );

    // Recovery at the owner console (a pseudo-terminal).
    let plan = home.run_on_pty(
        &[
            "recover",
            "plan",
            "--scope",
            "agent:w",
            "--reason",
            "investigated",
            "--by",
            "operator",
        ],
        &[],
    );
    assert_eq!(plan.code, 0, "{} {}", plan.stdout, plan.stderr);
    let plan_id = plan.json()["plan"].as_str().unwrap().to_string();
    let apply = home.run_on_pty(
        &["recover", "apply", "--plan", &plan_id, "--by", "operator"],
        &[],
    );
    assert_eq!(apply.code, 0, "{} {}", apply.stdout, apply.stderr);
    assert_eq!(apply.json()["recovered"], true, "{}", apply.stdout);

    let dead = gw::within(Duration::from_secs(30), || {
        let r = gateway.openai(&token, "chat", "gpt-test");
        (r["code"] == "stale_control_epoch").then_some(r)
    });
    assert!(
        dead.is_some(),
        "a token minted before the stop stays dead after recovery"
    );
    let fresh = home.token(&["--agent", "w"]);
    let ok = gw::within(Duration::from_secs(30), || {
        let r = gateway.openai(&fresh, "chat", "gpt-test");
        (r["ok"] == true).then_some(r)
    });
    assert!(ok.is_some(), "a token minted after recovery works");
}

#[test]
fn a_delegated_token_dies_with_its_parent_and_survives_an_unrelated_stop() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let parent = home.token(&["--agent", "lead", "--budget", "steps=10"]);
    let delegated = gateway.post(
        "/v1/delegate",
        Some(&parent),
        &json!({"agent": "helper", "budgets": {"steps": 4}}),
    );
    assert_eq!(delegated.status, 200, "{}", delegated.body);
    let child = delegated.json()["token"].as_str().unwrap().to_string();
    assert_eq!(
        delegated.json()["subject"]["chain"],
        json!(["lead", "helper"])
    );
    let too_big = gateway.post(
        "/v1/delegate",
        Some(&parent),
        &json!({"agent": "greedy", "budgets": {"steps": 11}}),
    );
    assert_eq!(
        (too_big.status, too_big.code().as_str()),
        (429, "budget_exhausted"),
        "{}",
        too_big.body
    );

    assert_eq!(gateway.openai(&child, "chat", "gpt-test")["ok"], true);
    home.engage("agent:bystander", "emergency");
    let after_unrelated = gateway.openai(&child, "chat", "gpt-test");
    assert_eq!(
        after_unrelated["ok"], true,
        "an unrelated stop leaves the child working: {after_unrelated}"
    );

    home.engage("agent:lead", "emergency");
    let refused = gateway.openai(&child, "chat", "gpt-test");
    assert_eq!(refused["status"], 403, "{refused}");
    assert_eq!(refused["code"], "stale_control_epoch", "{refused}");
    let cli_child = home.delegate(&home.token(&["--agent", "other"]), "kid");
    assert_eq!(gateway.openai(&cli_child, "chat", "gpt-test")["ok"], true);
}

#[test]
fn concurrent_calls_never_overrun_a_spend_budget_and_the_breaker_trips_with_evidence() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    // Each call reports 100 prompt + 10 completion tokens: 120e-6 USD, so 0.002 USD pays for 16.
    // The reservation bound is larger (input ≤ body bytes, here ~500; output ≤ max_tokens 10).
    let token = home.token(&["--agent", "spender", "--budget", "spend_usd=0.002"]);
    let body = json!({"model": "gpt-test", "max_tokens": 10, "messages": [{"role": "user", "content": "x".repeat(400)}]});
    let statuses: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..32)
            .map(|_| {
                scope.spawn(|| {
                    let r = gateway.post("/v1/chat/completions", Some(&token), &body);
                    let code = if r.status == 200 {
                        String::new()
                    } else {
                        r.code()
                    };
                    (r.status, code)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let executed = upstream.executed().len();
    let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(
        ok, executed,
        "every success reached the destination once: {statuses:?}"
    );
    assert!(
        (1..=16).contains(&executed),
        "at most the budget executed at the destination: {executed} {statuses:?}"
    );
    for (status, code) in &statuses {
        assert!(
            matches!(
                (*status, code.as_str()),
                (200, _)
                    | (429, "budget_exhausted")
                    | (403, "break_glass_contained")
                    | (403, "breaker_open")
            ),
            "{status} {code}"
        );
    }
    assert!(statuses.iter().any(|(s, _)| *s == 429), "{statuses:?}");

    let latch = gw::within(Duration::from_secs(30), || {
        let status = home.status();
        status["latches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["by"] == "breaker:budget_exhausted")
            .cloned()
    })
    .expect("the budget breaker engaged an agent latch");
    assert_eq!(latch["scope"], "agent:spender");
    assert_eq!(latch["level"], "halt-all");
    let record = gw::within(Duration::from_secs(30), || {
        let evidence = std::fs::read_to_string(home.file("evidence/log.jsonl")).ok()?;
        evidence
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| r["schema"] == "evidence-record.v1")
    })
    .expect("an evidence record");
    assert_eq!(record["agent"], "spender");
    assert_eq!(record["kind"], "budget_exhausted");
    assert_eq!(record["trigger"], "spend_usd");
    assert_eq!(record["threshold"], 0.002);
    assert_eq!(record["latch"], latch["id"]);
    home.valid_evidence();
    let next = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body("gpt-test"),
    );
    assert_eq!(
        next.status, 403,
        "the tripped agent is stopped: {}",
        next.body
    );
}

/// A model the price table does not know, asked for with a spend budget, is its own refusal
/// (`price_missing`, not `budget_exhausted`: nothing was spent), names the `[prices]` key to add,
/// and is logged like every refusal; nothing reaches the model.
#[test]
fn a_model_without_a_price_is_refused_price_missing_naming_the_key_and_logged() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let token = home.token(&["--agent", "w", "--budget", "spend_usd=1"]);
    for (model, key) in [
        ("unpriced", "[prices.unpriced]"),
        ("gpt-4.1", "[prices.\"gpt-4.1\"]"),
    ] {
        let r = gateway.post(
            "/v1/chat/completions",
            Some(&token),
            &Gateway::chat_body(model),
        );
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "price_missing"),
            "{}",
            r.body
        );
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(message.contains(key), "names the key to add: {message}");
    }
    assert!(upstream.executed().is_empty());
    let log = home.dir.path().join("gateway.log");
    let logged = gw::within(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines()
            .find(|l| l.contains("price_missing") && l.contains("model:unpriced"))
            .map(String::from)
    });
    assert!(
        logged.is_some(),
        "the refusal is logged: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// `serve --access-log` logs one line per admitted call at its end (agent, route, operation,
/// status, latency), beside the refusals; a refused call gets no access line, and without the
/// flag no call does.
#[test]
fn the_access_log_has_one_line_per_admitted_call_only_when_asked() {
    let access_lines = |log: &std::path::Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["target"] == "stopline::access")
            .collect()
    };
    for asked in [true, false] {
        let home = Home::new();
        let upstream = Upstream::start(&home);
        let mut args = vec!["--log-format", "json"];
        if asked {
            args.push("--access-log");
        }
        let gateway = Gateway::start_with_args(&home, &model_config(&upstream), &[], &args);
        let token = home.token(&["--agent", "logged"]);
        let body = Gateway::chat_body("gpt-test");
        for _ in 0..2 {
            let ok = gateway.post("/v1/chat/completions", Some(&token), &body);
            assert_eq!(ok.status, 200, "{}", ok.body);
        }
        let refused = gateway.post("/v1/chat/completions", Some("not-a-token"), &body);
        assert_eq!(refused.status, 401);
        let log = home.dir.path().join("gateway.log");
        if !asked {
            // The refusal is logged whatever the flag: wait for it, then no access line.
            gw::within(Duration::from_secs(10), || {
                std::fs::read_to_string(&log)
                    .ok()?
                    .contains("token_invalid")
                    .then_some(())
            })
            .expect("the refusal is logged");
            assert!(access_lines(&log).is_empty(), "{:?}", access_lines(&log));
            continue;
        }
        let lines = gw::within(Duration::from_secs(10), || {
            let lines = access_lines(&log);
            (lines.len() >= 2).then_some(lines)
        })
        .unwrap_or_else(|| {
            panic!(
                "two access lines: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        assert_eq!(lines.len(), 2, "one line per admitted call: {lines:?}");
        for line in &lines {
            assert_eq!(line["agent"], "logged", "{line}");
            assert_eq!(line["route"], "/v1/chat/completions", "{line}");
            assert_eq!(line["operation"], "model:gpt-test", "{line}");
            assert_eq!(line["status"], "committed", "{line}");
            assert!(line["latency_ms"].as_f64().is_some(), "{line}");
        }
    }
}

/// Unix seconds now.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An emergency lands while `stopped`'s call to a model that has not answered is in flight
/// (`mode`: chat or stream): the stopped agent gets its refusal while the model is still held
/// (the test lets the model finish only after it saw the refusal, so a gateway that waited for
/// the model would leave the client to its 30 s timeout), its operation gets the model's
/// outcome afterwards, and a bystander's call to the same model goes through. Prints the time
/// from the engage receipt to the refusal.
fn emergency_during_a_held_call(mode: &str, model: &str) {
    let home = Home::new();
    let release = home.dir.path().join("release-model");
    let upstream = Upstream::start_releasing(&home, &release);
    let gateway = Gateway::start(&home, &model_config(&upstream));
    let stopped = home.token(&["--agent", "stopped"]);
    let bystander = home.token(&["--agent", "bystander"]);
    let (reply, engaging, engaged_at) = std::thread::scope(|scope| {
        let call = scope.spawn(|| gateway.openai(&stopped, mode, model));
        let started = gw::within(Duration::from_secs(30), || {
            (!upstream.executed().is_empty()).then_some(())
        });
        assert!(started.is_some(), "the call reached the model");
        let engaging = unix_now();
        home.engage("agent:stopped", "emergency");
        let engaged_at = unix_now();
        (call.join().unwrap(), engaging, engaged_at)
    });
    assert_eq!(
        upstream.done_at(model),
        None,
        "the model is held until the refusal was seen"
    );
    std::fs::write(&release, "").unwrap();
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["code"], "break_glass_contained", "{reply}");
    let other = gateway.openai(&bystander, mode, model);
    assert_eq!(
        other["ok"], true,
        "a bystander's call to the same model: {other}"
    );
    let answered_at = reply["t"].as_f64().unwrap();
    let done = gw::within(Duration::from_secs(30), || upstream.done_at(model))
        .expect("the model finished its answer");
    eprintln!(
        "{mode}: engage took {:.0} ms; the refusal arrived {:.0} ms after engage started ({:+.0} ms from its receipt); the model was released {:.0} ms after the receipt",
        (engaged_at - engaging) * 1000.0,
        (answered_at - engaging) * 1000.0,
        (answered_at - engaged_at) * 1000.0,
        (done - engaged_at) * 1000.0
    );
    let recorded = gw::within(Duration::from_secs(30), || {
        let ops = home.run(&["ops", "list"]).json();
        let stopped_op = ops["operations"]
            .as_array()?
            .iter()
            .find(|o| o["agent"] == "stopped" && o["target"] == format!("model:{model}"))?
            .clone();
        (stopped_op["outcome"] == "committed").then_some(stopped_op)
    });
    assert!(
        recorded.is_some(),
        "the detached exchange recorded the model's outcome: {}",
        home.run(&["ops", "list"]).stdout
    );
}

#[test]
fn an_emergency_during_a_slow_model_call_answers_at_once_and_spares_a_bystander() {
    emergency_during_a_held_call("chat", "held");
}

#[test]
fn an_emergency_during_a_slow_stream_answers_at_once_and_spares_a_bystander() {
    emergency_during_a_held_call("stream", "held-stream");
}

/// An emergency lands on a streaming call while the gateway's watcher is held (a failpoint
/// keeps it inside its wake-up for an unrelated halt), so the first view of the gateway that
/// holds the stop is the acknowledgement's own read: the latch and the epoch advance it made,
/// together. The cut still names the emergency, `break_glass_contained`, as it does when the
/// watcher puts the latch in the view before the advance is read; it said
/// `stale_control_epoch` when `must_cut` judged the token before the emergency, so the code an
/// agent saw depended on when its exchange task ran (the frameworks tests, under load).
#[test]
fn an_emergency_cut_names_the_emergency_even_when_its_epoch_advance_was_read_with_it() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let hold = home.dir.path().join("hold-watcher");
    let failpoints = format!("gateway.watch.appeared=hold_if:{}", hold.display());
    let gateway = Gateway::start_with_env(
        &home,
        &format!("reload_interval_ms = 60000\n{}", model_config(&upstream)),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    let stopped = home.token(&["--agent", "stopped"]);
    std::fs::write(&hold, "").unwrap();
    // The watcher puts this halt in the view and is then held.
    home.engage("agent:elsewhere", "halt-all");
    let reply = std::thread::scope(|scope| {
        let call = scope.spawn(|| gateway.openai(&stopped, "stream", "slow-stream"));
        let started = gw::within(Duration::from_secs(30), || {
            (!upstream.executed().is_empty()).then_some(())
        });
        assert!(started.is_some(), "the call reached the model");
        let receipt = home.engage("agent:stopped", "emergency");
        assert_eq!(
            receipt["acknowledged_by"].as_array().map(Vec::len),
            Some(1),
            "the acknowledgement read the stop while the watcher was held: {receipt}"
        );
        call.join().unwrap()
    });
    std::fs::remove_file(&hold).unwrap();
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["code"], "break_glass_contained", "{reply}");
}

/// A call's `dispatched` record is queued on the operation journal's writer thread,
/// never appended by the runtime's worker under the dispatch ticket that a stop's
/// acknowledgement waits for. With that append stalled — a failpoint parks the journal's writer
/// in it, as a disk that stops answering would — the call is still answered and a stop is still
/// acknowledged; the record is written once the disk answers again. On the old code the worker
/// itself parked in the append, inside the ticket: the call hung (never sent upstream) and the
/// engage's receipt named the gateway unacknowledged.
#[test]
fn a_stalled_dispatched_record_holds_up_neither_the_call_nor_a_stops_acknowledgement() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let hold = home.dir.path().join("hold-dispatched");
    // The record is written alone (`ops.dispatch`) when the journal's writer takes it at once,
    // or in one batch with the call's outcome (`ops.batch`) when the writer wakes after the
    // upstream answered (a loaded machine): the hold parks either write.
    let failpoints = format!(
        "ops.dispatch.write=hold_if:{0};ops.batch.write=hold_if:{0}",
        hold.display()
    );
    let gateway = Gateway::start_with_env(
        &home,
        &model_config(&upstream),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    let token = home.token(&["--agent", "w"]);
    let model_ops = |home: &Home| -> Vec<serde_json::Value> {
        let ops = home.run(&["ops", "list"]).json();
        ops["operations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["target"] == "model:gpt-test")
            .cloned()
            .collect()
    };
    std::fs::write(&hold, "").unwrap();
    let (answered, stalled, receipt, reply) = std::thread::scope(|scope| {
        let call = scope.spawn(|| gateway.openai(&token, "chat", "gpt-test"));
        let answered = gw::within(Duration::from_secs(20), || call.is_finished().then_some(()));
        // While the writer is parked: the operation is recorded as prepared, not dispatched.
        let stalled = model_ops(&home);
        let receipt = home.engage("agent:elsewhere", "emergency");
        std::fs::remove_file(&hold).unwrap();
        (answered.is_some(), stalled, receipt, call.join().unwrap())
    });
    assert!(
        answered,
        "the call was not answered while its dispatched record could not be written"
    );
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(
        receipt["acknowledged_by"].as_array().map(Vec::len),
        Some(1),
        "the stop was acknowledged while the record could not be written: {receipt}"
    );
    assert_eq!(receipt["unacknowledged"], json!([]), "{receipt}");
    assert!(
        stalled.len() == 1 && stalled[0]["dispatched"] == false,
        "the failpoint held the dispatched record back (else this test proves nothing): {stalled:?}"
    );
    let written = gw::within(Duration::from_secs(20), || {
        let ops = model_ops(&home);
        (ops.len() == 1 && ops[0]["dispatched"] == true && ops[0]["outcome"] == "committed")
            .then_some(ops)
    });
    assert!(
        written.is_some(),
        "once the disk answers, the record and the outcome are written: {:?}",
        model_ops(&home)
    );
}
