//! docs/reference.md §4: a refusal caused by a latch names its scope, level, `by`, reason and age and says
//! not to retry, in text and in the JSON error's `latch` object — on `check` (text and --json),
//! the gateway's HTTP errors, an MCP `tools/call` error and the Claude Code hook. A refusal about
//! the token itself carries no mode label and prints its expiry in RFC 3339.

mod gw;
mod util;

use gw::{rpc_messages, Gateway, McpUpstream};
use serde_json::{json, Value};
use util::{Home, Run, CLOCK_OFFSET};

/// Run without `--json`: the text a person reads.
fn text(home: &Home, args: &[&str]) -> Run {
    home.command(args).output().expect("run stopline").into()
}

const REASON: &str = "runaway loop deleting files under /srv; investigating";

/// Engage the latch of the brief: `engage --scope agent:a --reason … --by safety` (emergency).
fn engage(home: &Home) -> String {
    let r = home.run(&[
        "engage", "--scope", "agent:a", "--reason", REASON, "--by", "safety",
    ]);
    r.assert_ok();
    r.json()["latch"]["id"].as_str().unwrap().to_string()
}

/// The message names who, why, scope, level, an age and says not to retry.
fn assert_explains(message: &str, latch: &str) {
    for part in [
        "stopped by safety",
        latch,
        "scope agent:a",
        "level emergency",
        REASON,
        "do not retry",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    let age = regex_like_age(message);
    assert!(age, "no age (\"engaged <n>s ago\") in {message:?}");
}

fn regex_like_age(message: &str) -> bool {
    message.split("engaged ").skip(1).any(|rest| {
        let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
        !number.is_empty() && rest[number.len()..].contains(" ago")
    })
}

/// `error.latch` is `{id, scope, level, by, reason}`.
fn assert_latch_object(error: &Value, latch: &str) {
    let l = &error["latch"];
    assert_eq!(l["id"], latch, "{error}");
    assert_eq!(l["scope"], "agent:a", "{error}");
    assert_eq!(l["level"], "emergency", "{error}");
    assert_eq!(l["by"], "safety", "{error}");
    assert_eq!(l["reason"], REASON, "{error}");
}

#[test]
fn check_text_and_json_name_the_latch_and_say_do_not_retry() {
    let home = Home::new();
    let token = home.token(&["--agent", "a"]);
    let latch = engage(&home);

    let r = text(
        &home,
        &["check", "--class", "noncritical", "--token", &token],
    );
    assert_eq!(r.code, 4, "{}", r.stdout);
    assert!(r.stdout.starts_with("block (EMERGENCY): "), "{}", r.stdout);
    assert_explains(&r.stdout, &latch);

    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &token]);
    assert_eq!(code, 4);
    // Every documented field stays as it was; `error` is added.
    assert_eq!(receipt["decision"], "block");
    assert_eq!(receipt["mode"], "EMERGENCY");
    assert_eq!(receipt["code"], "stale_control_epoch");
    assert_eq!(receipt["latches"], json!([latch]));
    assert_eq!(receipt["error"]["code"], "stale_control_epoch");
    assert_latch_object(&receipt["error"], &latch);
    assert_explains(receipt["error"]["message"].as_str().unwrap(), &latch);

    // A long reason is quoted to its first 200 characters.
    let long = "x".repeat(300);
    home.run(&[
        "engage", "--scope", "agent:b", "--reason", &long, "--by", "safety",
    ])
    .assert_ok();
    let (_, receipt) = home.check(&["--class", "noncritical", "--agent", "b"]);
    let quoted = receipt["error"]["latch"]["reason"].as_str().unwrap();
    assert_eq!(
        quoted.chars().filter(|c| *c == 'x').count(),
        200,
        "{quoted}"
    );
}

#[test]
fn token_refusals_carry_no_mode_label_and_an_rfc3339_expiry() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let r = text(
        &home,
        &["check", "--class", "noncritical", "--token", "garbage"],
    );
    assert_eq!(r.code, 4);
    assert!(
        r.stdout.starts_with("block: token_invalid: "),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("EMERGENCY"), "{}", r.stdout);

    let token = home.token(&["--agent", "a", "--ttl", "1"]);
    // Checked 2.1 s later by the store's clock (no sleep; needs --features stopline/failpoints).
    let r: Run = home
        .command(&["check", "--class", "noncritical", "--token", &token])
        .env(CLOCK_OFFSET, "2100")
        .output()
        .expect("run stopline")
        .into();
    assert_eq!(
        r.code, 4,
        "a build without stopline/failpoints ignores {CLOCK_OFFSET}: {}",
        r.stdout
    );
    assert!(
        r.stdout.starts_with("block: token_expired: "),
        "{}",
        r.stdout
    );
    let at = r
        .stdout
        .split("expired at ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(at).is_ok(),
        "expiry {at:?} is not RFC 3339: {}",
        r.stdout
    );
    assert!(!r.stdout.contains("unix seconds"), "{}", r.stdout);
}

#[test]
fn the_gateway_http_and_mcp_errors_and_the_hook_name_the_latch() {
    let home = Home::new();
    let upstream = McpUpstream::start(&home);
    let model = gw::Upstream::start(&home);
    let gateway = Gateway::start(
        &home,
        &format!(
            "{}\n[mcp.dest]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            gw::model_config(&model),
            upstream.port
        ),
    );
    let token = home.token(&["--agent", "a"]);
    let (_, session) = gw::mcp_initialize(&gateway.addr, &token);

    let latch = engage(&home);

    // /v1/check: the receipt's error carries the latch.
    let checked = gateway.post(
        "/v1/check",
        Some(&token),
        &json!({"class": "noncritical", "action": "tool_call"}),
    );
    let receipt = checked.json();
    assert_eq!(receipt["decision"], "block", "{receipt}");
    assert_latch_object(&receipt["error"], &latch);

    // An HTTP error of the gateway (a model request): `{"error":{code,message,latch}}`.
    let refused = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body("gpt-test"),
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    let body = refused.json();
    assert_latch_object(&body["error"], &latch);
    assert_explains(body["error"]["message"].as_str().unwrap(), &latch);

    // An MCP tools/call: the JSON-RPC error's data carries the latch (or the HTTP error does).
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write", "arguments": {"n": 1}}});
    let reply = gw::mcp_post(&gateway.addr, &token, session.as_deref(), &call);
    let error = rpc_messages(&reply)
        .into_iter()
        .find_map(|m| m.get("error").map(|e| e["data"].clone()))
        .unwrap_or_else(|| reply.json()["error"].clone());
    assert_latch_object(&error, &latch);
    assert_explains(error["message"].as_str().unwrap(), &latch);
    if let Some(text) = rpc_messages(&reply)
        .iter()
        .find_map(|m| m["error"]["message"].as_str().map(String::from))
    {
        assert_explains(&text, &latch);
    }
    assert!(
        upstream.executed().is_empty(),
        "nothing reached the upstream"
    );
    assert!(
        model.executed().is_empty(),
        "no model request reached the upstream"
    );

    // The Claude Code hook, local and through the gateway: stderr says who and why.
    let cwd = home.dir.path().canonicalize().unwrap();
    let event = json!({"session_id": "s1", "transcript_path": "/dev/null", "cwd": cwd,
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}});
    let event = serde_json::to_vec(&event).unwrap();
    let url = gateway.url();
    for env in [vec![], vec![("STOPLINE_URL", url.as_str())]] {
        let env = [env, vec![("STOPLINE_TOKEN", token.as_str())]].concat();
        let out = home.run_piped(&["hook", "claude-code"], &event, &env);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert_explains(&out.stderr, &latch);
    }
}
