//! Nothing leaves around the gateway through the model routes (docs/reference.md §6): a request that asks
//! the provider to act on the agent's behalf — an MCP server the agent names, web search, code
//! interpreter, web fetch, a background response — sent by the official `openai` and
//! `anthropic` SDKs is refused `hosted_tool_refused` naming the field, and the upstream sees
//! nothing; an allowed hosted tool is an operation of its own; a background response is served
//! only to its agent's chain and cancelled upstream at an EMERGENCY; a `previous_response_id`
//! of another chain is refused; and a 4 KiB model or tool name writes nothing.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{http_with, mcp_post, mcp_session, py_script, python, Gateway, McpUpstream, Upstream};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use util::Home;

/// `hosted_client.py`'s answer for `mode` (and `arg`) with `token`.
fn hosted(gateway: &Gateway, token: &str, mode: &str, arg: Option<&str>) -> Value {
    let mut command = Command::new(python());
    command
        .arg(py_script("hosted_client.py"))
        .arg(gateway.url())
        .arg(mode)
        .args(arg)
        .env_clear()
        .env("STOPLINE_TEST_TOKEN", token)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    let out = command.output().expect("run the hosted client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "hosted client output is not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The `[model]` section for `upstream`, allowing `allow` (no `allow_hosted_tools` line when
/// empty: the default), and a priced `gpt-test`.
fn model_config(upstream: &Upstream, allow: &[&str]) -> String {
    let allow = match allow {
        [] => String::new(),
        allow => format!(
            "allow_hosted_tools = {}\n",
            serde_json::to_string(allow).unwrap()
        ),
    };
    format!(
        "[model]\nbase_url = \"http://127.0.0.1:{}/v1\"\napi_key_env = \"UPSTREAM_API_KEY\"\n{allow}\n\
         [prices.\"gpt-test\"]\ninput = 1.0\noutput = 2.0\nmax_output_tokens = 64\n",
        upstream.port,
    )
}

fn operations(home: &Home) -> Vec<Value> {
    home.run(&["ops", "list"]).json()["operations"]
        .as_array()
        .unwrap()
        .clone()
}

fn ops_on(home: &Home, target: &str) -> Vec<Value> {
    operations(home)
        .into_iter()
        .filter(|o| o["target"] == target)
        .collect()
}

/// Every file under the home's `ops/` directory, with its bytes.
fn ops_bytes(home: &Home) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, into: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, into);
            } else {
                into.insert(
                    path.display().to_string(),
                    std::fs::read(&path).unwrap_or_default(),
                );
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(&home.file("ops"), &mut files);
    files
}

fn assert_refused(answer: &Value, status: u64, code: &str, field: &str) {
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["status"], status, "{answer}");
    assert_eq!(answer["code"], code, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(field),
        "the refusal names {field}: {answer}"
    );
}

#[test]
fn openai_sdk_hosted_tools_and_background_are_refused_and_the_upstream_sees_nothing() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream, &[]));
    let token = home.token(&["--agent", "agent-a"]);

    for (mode, field) in [
        ("openai_mcp", r#"tools[1].type = "mcp""#),
        ("openai_web_search", r#"tools[0].type = "web_search""#),
        (
            "openai_code_interpreter",
            r#"tools[0].type = "code_interpreter""#,
        ),
        ("openai_background", "background = true"),
        ("chat_web_search", "web_search_options"),
    ] {
        let answer = hosted(&gateway, &token, mode, None);
        assert_refused(&answer, 403, "hosted_tool_refused", field);
    }
    assert_eq!(
        upstream.executed(),
        Vec::<Value>::new(),
        "the upstream saw nothing"
    );
    assert_eq!(
        operations(&home),
        Vec::<Value>::new(),
        "nothing was recorded"
    );
    // The same client without the hosted tool goes through.
    let plain = hosted(&gateway, &token, "openai_plain", None);
    assert_eq!(plain["ok"], true, "{plain}");
    assert_eq!(upstream.executed().len(), 1);
}

#[test]
fn anthropic_sdk_mcp_servers_server_tools_and_betas_are_refused_and_the_upstream_sees_nothing() {
    let home = Home::new();
    let upstream = Upstream::start_anthropic(&home);
    let gateway = Gateway::start(&home, &gw::anthropic_config(&upstream));
    let token = home.token(&["--agent", "claude"]);

    let mcp = hosted(&gateway, &token, "anthropic_mcp", None);
    assert_refused(&mcp, 403, "hosted_tool_refused", "mcp_servers");
    let fetch = hosted(&gateway, &token, "anthropic_web_fetch", None);
    assert_refused(
        &fetch,
        403,
        "hosted_tool_refused",
        r#"tools[0].type = "web_fetch_20250910""#,
    );
    // The beta header alone, among others, is refused too: it is what turns the tools on.
    let body = json!({"model": "claude-test", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let beta = http_with(
        &gateway.addr,
        "POST",
        "/v1/messages",
        None,
        Some(&body),
        &[
            ("x-api-key", &token),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "fine-grained-tool-streaming-2025-05-14,code-execution-2025-05-22",
            ),
        ],
    );
    assert_eq!(beta.status, 403, "{}", beta.body);
    let error = &beta.json()["error"];
    assert_eq!(error["stopline_code"], "hosted_tool_refused", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("anthropic-beta = \"code-execution-2025-05-22\""),
        "{error}"
    );
    assert_eq!(
        upstream.executed(),
        Vec::<Value>::new(),
        "the upstream saw nothing"
    );
    assert_eq!(
        operations(&home),
        Vec::<Value>::new(),
        "nothing was recorded"
    );
}

#[test]
fn an_allowed_hosted_tool_is_an_operation_of_its_own() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream, &["web_search"]));
    let token = home.token(&["--agent", "searcher"]);

    let answer = hosted(&gateway, &token, "openai_web_search", None);
    assert_eq!(answer["ok"], true, "{answer}");
    let executed = upstream.executed();
    assert_eq!(executed.len(), 1, "{executed:?}");
    assert_eq!(executed[0]["tools"], json!(["web_search"]));
    let ops = gw::within(Duration::from_secs(10), || {
        let ops = ops_on(&home, "hosted:openai:web_search");
        (ops.len() == 1 && ops[0]["outcome"] == "committed").then_some(ops)
    })
    .unwrap_or_else(|| panic!("a committed hosted operation: {:?}", operations(&home)));
    assert_eq!(ops[0]["agent"], "searcher");
    assert_eq!(ops_on(&home, "model:gpt-test").len(), 1);
    // What is not allowed stays refused.
    let other = hosted(&gateway, &token, "openai_code_interpreter", None);
    assert_refused(&other, 403, "hosted_tool_refused", "code_interpreter");
    assert_eq!(upstream.executed().len(), 1);
}

/// The upstream's cancel lines, in order.
fn cancels(upstream: &Upstream) -> Vec<String> {
    upstream
        .log_lines()
        .iter()
        .filter_map(|l| l["cancel"].as_str().map(String::from))
        .collect()
}

#[test]
fn a_background_response_is_its_chains_alone_and_an_emergency_cancels_it_upstream() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream, &["background"]));
    let alice = home.token(&["--agent", "alice"]);
    let bob = home.token(&["--agent", "bob"]);

    let first = hosted(&gateway, &alice, "openai_background", None);
    assert_eq!(
        (&first["ok"], &first["status"]),
        (&json!(true), &json!("queued")),
        "{first}"
    );
    let first = first["id"].as_str().unwrap().to_string();
    let second = hosted(&gateway, &alice, "openai_background", None);
    let second = second["id"].as_str().unwrap().to_string();

    // Another agent: the same 404 as an id that does not exist, and the upstream sees nothing.
    for mode in ["openai_get", "openai_cancel", "openai_delete"] {
        let answer = hosted(&gateway, &bob, mode, Some(&first));
        assert_eq!(
            (&answer["ok"], &answer["status"]),
            (&json!(false), &json!(404)),
            "{mode}: {answer}"
        );
        let unknown = hosted(&gateway, &alice, mode, Some("resp_unknown"));
        assert_eq!(unknown["status"], 404, "{mode}: {unknown}");
    }
    assert!(
        upstream.log_lines().iter().all(|l| l.get("get").is_none()
            && l.get("cancel").is_none()
            && l.get("delete").is_none()),
        "{:?}",
        upstream.log_lines()
    );

    // Its own chain reads and cancels it.
    let read = hosted(&gateway, &alice, "openai_get", Some(&first));
    assert_eq!(
        (&read["ok"], &read["status"]),
        (&json!(true), &json!("queued")),
        "{read}"
    );
    let cancelled = hosted(&gateway, &alice, "openai_cancel", Some(&second));
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let outcomes = |home: &Home| -> Vec<Value> {
        let mut outcomes: Vec<Value> = ops_on(home, "hosted:openai:background")
            .into_iter()
            .map(|o| o["outcome"].clone())
            .collect();
        outcomes.sort_by_key(|o| o.to_string());
        outcomes
    };
    let open = gw::within(Duration::from_secs(10), || {
        let outcomes = outcomes(&home);
        (outcomes == [json!("cancelled"), Value::Null]).then_some(outcomes)
    });
    assert!(
        open.is_some(),
        "one cancelled, one open: {:?}",
        operations(&home)
    );
    assert_eq!(cancels(&upstream), std::slice::from_ref(&second));

    // An EMERGENCY on alice cancels the open one upstream, and the operation records it.
    home.engage("agent:alice", "emergency");
    let cancelled = gw::within(Duration::from_secs(20), || {
        let outcomes = outcomes(&home);
        (outcomes == [json!("cancelled"), json!("cancelled")]).then_some(outcomes)
    });
    assert!(cancelled.is_some(), "{:?}", operations(&home));
    assert_eq!(cancels(&upstream), [second, first]);
}

#[test]
fn a_background_response_whose_cancel_is_not_confirmed_is_left_unresolved() {
    let home = Home::new();
    let upstream = Upstream::start_script_with(
        &home,
        "fake_openai_upstream.py",
        &[("STUB_CANCEL_FAILS", "1")],
    );
    let gateway = Gateway::start(&home, &model_config(&upstream, &["background"]));
    let alice = home.token(&["--agent", "alice"]);
    let created = hosted(&gateway, &alice, "openai_background", None);
    let id = created["id"].as_str().unwrap().to_string();

    home.engage("agent:alice", "emergency");
    let op = gw::within(Duration::from_secs(20), || {
        let ops = ops_on(&home, "hosted:openai:background");
        (ops.len() == 1 && ops[0]["in_doubt"] == true).then(|| ops[0].clone())
    })
    .unwrap_or_else(|| panic!("an unresolved operation: {:?}", operations(&home)));
    assert_eq!(op["outcome"], Value::Null, "{op}");
    assert_eq!(cancels(&upstream), [id], "the cancel was tried once");
}

#[test]
fn a_previous_response_id_of_another_chain_is_refused() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let gateway = Gateway::start(&home, &model_config(&upstream, &[]));
    let alice = home.token(&["--agent", "alice"]);
    let bob = home.token(&["--agent", "bob"]);
    let alice_helper = home.delegate(&alice, "alice-helper");

    let created = hosted(&gateway, &alice, "openai_plain", None);
    let id = created["id"].as_str().unwrap().to_string();
    let foreign = hosted(&gateway, &bob, "openai_previous", Some(&id));
    assert_refused(&foreign, 400, "request_invalid", "previous_response_id");
    let unknown = hosted(&gateway, &alice, "openai_previous", Some("resp_elsewhere"));
    assert_refused(&unknown, 400, "request_invalid", "previous_response_id");
    let own = hosted(&gateway, &alice, "openai_previous", Some(&id));
    assert_eq!(own["ok"], true, "{own}");
    let sub_agent = hosted(&gateway, &alice_helper, "openai_previous", Some(&id));
    assert_eq!(sub_agent["ok"], true, "its chain's sub-agent: {sub_agent}");
    let sent: Vec<Value> = upstream
        .executed()
        .iter()
        .map(|l| l["previous_response_id"].clone())
        .collect();
    assert_eq!(sent, [Value::Null, json!(id), json!(id)]);
}

#[test]
fn a_4_kib_model_or_tool_name_is_refused_and_writes_nothing() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let mcp = McpUpstream::start(&home);
    let gateway = Gateway::start(
        &home,
        &format!(
            "{}\n[mcp.dest]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            model_config(&upstream, &[]),
            mcp.port
        ),
    );
    let token = home.token(&["--agent", "filler"]);
    // One recorded call first, so the journal exists and the comparison means something.
    let good = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body("gpt-test"),
    );
    assert_eq!(good.status, 200, "{}", good.body);
    let before = gw::within(Duration::from_secs(10), || {
        let ops = ops_on(&home, "model:gpt-test");
        (ops.len() == 1 && ops[0]["outcome"] == "committed").then(|| ops_bytes(&home))
    })
    .expect("the first call recorded");
    assert!(!before.is_empty());

    let long = "m".repeat(4096);
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let refused = gateway.post(path, Some(&token), &Gateway::chat_body(&long));
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        assert_eq!(refused.json()["error"]["code"], "request_invalid", "{path}");
        assert!(
            refused.body.contains("model is 4096 bytes"),
            "{}",
            refused.body
        );
    }
    let request_id = http_with(
        &gateway.addr,
        "POST",
        "/v1/chat/completions",
        Some(&token),
        Some(&Gateway::chat_body("gpt-test")),
        &[("x-request-id", &long)],
    );
    assert_eq!(request_id.status, 400, "{}", request_id.body);
    assert_eq!(request_id.json()["error"]["code"], "request_invalid");

    let session = mcp_session(&gateway.addr, &token);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": long, "arguments": {}}});
    let reply = mcp_post(&gateway.addr, &token, session.as_deref(), &call);
    assert!(reply.body.contains("request_invalid"), "{}", reply.body);

    let check = gateway.post(
        "/v1/check",
        Some(&token),
        &json!({"action": "write", "target": format!("mcp:dest:{long}")}),
    );
    assert_eq!(check.json()["decision"], "block", "{}", check.body);
    assert_eq!(check.json()["code"], "request_invalid", "{}", check.body);

    assert_eq!(
        upstream.executed().len(),
        1,
        "the upstream saw only the first call"
    );
    assert!(
        mcp.executed().iter().all(|c| c.to_string().len() < 4096),
        "the tool server saw no 4 KiB call: {:?}",
        mcp.executed()
    );
    assert_eq!(
        ops_bytes(&home),
        before,
        "the ops journal is byte for byte unchanged"
    );
}
