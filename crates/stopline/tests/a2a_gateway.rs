//! Third-party agents stopped at the boundary (docs/reference.md §8 "A2A"): a remote agent served
//! by the official `a2a-sdk` (`tests/py/a2a_remote_agent.py`, which logs every message it
//! executes, every artifact of its long task and every cancel it receives) behind
//! `[a2a.remote]`, and the SDK's own client (`tests/py/a2a_client.py`) given only the gateway's
//! card URL. Send, stream, get and cancel go through; the card names only the gateway; a stop
//! mid-stream ends the agent's stream with the refusal, cancels the remote task, and lets no
//! new message reach the remote; a remote that does not confirm its cancel leaves the send
//! unresolved and says so; one chain's task is refused to another (`task_not_owned`); and the
//! task book outlives the gateway: one restarted on the same home still knows whose each task
//! is, and cancels the tasks left open at a stop. The JavaScript SDK's client (`@a2a-js/sdk`,
//! `tests/js/a2a_client.mjs`) is a second client: card, send and stream through the gateway,
//! cut at a stop with the refusal.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{http_with, py_script, python, Gateway, Proc, Upstream};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use util::Home;

const REMOTE_SECRET: &str = "remote-secret-credential";

/// The remote agent, and a gateway serving it as `[a2a.remote]` (with the remote's own
/// credential in `headers`, from the gateway's environment).
fn start(home: &Home, remote_env: &[(&str, &str)], top: &str) -> (Upstream, Gateway) {
    let remote = Upstream::start_script_with(home, "a2a_remote_agent.py", remote_env);
    let gateway = serve(home, &remote, top);
    (remote, gateway)
}

/// A gateway on `home` serving `remote` as `[a2a.remote]`.
fn serve(home: &Home, remote: &Upstream, top: &str) -> Gateway {
    let config = format!(
        "{top}\n[a2a.remote]\nurl = \"http://127.0.0.1:{}/rpc\"\n\
         headers = {{ Authorization = \"Bearer ${{env:REMOTE_SECRET}}\" }}\n",
        remote.port
    );
    Gateway::start_with_env(home, &config, &[("REMOTE_SECRET", REMOTE_SECRET)])
}

fn client(gateway: &Gateway, token: &str, mode: &str, arg: Option<&str>) -> Command {
    let mut command = Command::new(python());
    command
        .arg(py_script("a2a_client.py"))
        .arg(gateway.url())
        .arg("remote")
        .arg(mode)
        .args(arg)
        .env_clear()
        .env("STOPLINE_TEST_TOKEN", token)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

/// Every JSON line `a2a_client.py` printed for `mode`.
fn a2a(gateway: &Gateway, token: &str, mode: &str, arg: Option<&str>) -> Vec<Value> {
    let out = client(gateway, token, mode, arg)
        .output()
        .expect("run the A2A client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "A2A client output is not JSON ({e}): {l}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .collect();
    assert!(
        !lines.is_empty(),
        "the A2A client printed nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// The id of the task an event speaks of.
fn task_of(event: &Value) -> Option<String> {
    let event = &event["event"];
    event["task"]["id"]
        .as_str()
        .or(event["statusUpdate"]["taskId"].as_str())
        .or(event["artifactUpdate"]["taskId"].as_str())
        .map(String::from)
}

fn remote_lines(remote: &Upstream) -> Vec<Value> {
    remote.log_lines()
}

fn executed(remote: &Upstream) -> Vec<String> {
    remote_lines(remote)
        .iter()
        .filter_map(|l| l["executed"].as_str().map(String::from))
        .collect()
}

fn cancels(remote: &Upstream) -> Vec<String> {
    remote_lines(remote)
        .iter()
        .filter_map(|l| l["cancel"].as_str().map(String::from))
        .collect()
}

/// Requests the remote received on its JSON-RPC endpoint.
fn rpc_requests(remote: &Upstream) -> usize {
    remote_lines(remote)
        .iter()
        .filter(|l| l["path"] == "/rpc")
        .count()
}

fn ops_on(home: &Home, target: &str) -> Vec<Value> {
    home.run(&["ops", "list"]).json()["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == target)
        .cloned()
        .collect()
}

/// A streamed send running in the client: its events as they come.
/// The remote received exactly one cancel, of `task`, and the one send on `a2a:remote` was
/// finished `cancelled`.
fn assert_cancelled_once(home: &Home, remote: &Upstream, task: &str) {
    let cancelled = gw::within(Duration::from_secs(20), || {
        let ops = ops_on(home, "a2a:remote");
        (ops.len() == 1 && ops[0]["outcome"] == "cancelled").then_some(ops)
    });
    assert!(
        cancelled.is_some(),
        "{:?} {:?}",
        ops_on(home, "a2a:remote"),
        cancels(remote)
    );
    assert_eq!(cancels(remote), [task]);
}

struct Streaming {
    _proc: Proc,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Streaming {
    fn start(gateway: &Gateway, token: &str, text: &str) -> Streaming {
        Streaming::spawn(client(gateway, token, "stream", Some(text)))
    }

    /// `command` (a client in its `stream` mode) running, its lines read as they come.
    fn spawn(mut command: Command) -> Streaming {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the streaming client");
        let stdout = child.stdout.take().unwrap();
        Streaming {
            _proc: Proc(child),
            lines: BufReader::new(stdout).lines(),
        }
    }

    fn next(&mut self) -> Option<Value> {
        let line = self.lines.next()?.ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
    }

    /// Read until the first artifact of the long task: its task id.
    fn first_artifact(&mut self) -> String {
        loop {
            let event = self.next().expect("the stream ended before any artifact");
            assert!(event.get("end").is_none(), "{event}");
            if event["event"].get("artifactUpdate").is_some() {
                return task_of(&event).unwrap();
            }
        }
    }

    /// Read to the end: the last line.
    fn end(&mut self) -> Value {
        let mut last = Value::Null;
        while let Some(event) = self.next() {
            last = event;
        }
        last
    }
}

#[test]
fn the_sdk_client_sends_streams_gets_and_cancels_through_the_gateway_and_the_card_names_only_it() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "");
    let token = home.token(&["--agent", "alice"]);

    // The card, read through the gateway, points at the gateway only.
    let card = &a2a(&gateway, &token, "card", None)[0];
    assert_eq!(card["ok"], true, "{card}");
    let interfaces = card["card"]["supportedInterfaces"].as_array().unwrap();
    assert_eq!(
        interfaces,
        &vec![json!({"url": format!("{}/a2a/remote", gateway.url()),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"})],
        "{card}"
    );
    assert!(
        !card.to_string().contains(&format!(":{}", remote.port)),
        "{card}"
    );

    // A send: the remote executes it once; the send is an operation on a2a:remote.
    let sent = a2a(&gateway, &token, "send", Some("hello"));
    let task = &sent[0]["event"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent:?}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "echo: hello");
    let done = task["id"].as_str().unwrap().to_string();
    assert_eq!(executed(&remote), ["hello"]);
    let ops = ops_on(&home, "a2a:remote");
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0]["outcome"], "committed", "{ops:?}");

    // Its task, read back.
    let got = &a2a(&gateway, &token, "get", Some(&done))[0];
    assert_eq!(got["task"]["id"], json!(done), "{got}");

    // A stream of the long task, then the agent's own cancel of it.
    let mut stream = Streaming::start(&gateway, &token, "long task");
    let running = stream.first_artifact();
    let cancelled = &a2a(&gateway, &token, "cancel", Some(&running))[0];
    assert_eq!(
        cancelled["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    stream.end();
    assert_eq!(cancels(&remote), std::slice::from_ref(&running));
    let outcome = gw::within(Duration::from_secs(20), || {
        let ops = ops_on(&home, "a2a:remote");
        (ops.len() == 2 && ops.iter().all(|o| !o["outcome"].is_null())).then_some(ops)
    })
    .unwrap_or_else(|| panic!("both sends finished: {:?}", ops_on(&home, "a2a:remote")));
    let outcomes: Vec<&Value> = outcome.iter().map(|o| &o["outcome"]).collect();
    assert!(outcomes.contains(&&json!("cancelled")), "{outcome:?}");

    // The remote saw its own credential on every request, never the agent's token.
    let auths: Vec<Value> = remote_lines(&remote)
        .iter()
        .filter(|l| l.get("auth").is_some())
        .map(|l| l["auth"].clone())
        .collect();
    assert!(!auths.is_empty());
    assert!(
        auths
            .iter()
            .all(|a| a == &json!(format!("Bearer {REMOTE_SECRET}"))),
        "{auths:?}"
    );

    // 0.3 through the A2A-Version header: `message/send` reaches the same remote.
    let body = json!({"jsonrpc": "2.0", "id": "v03", "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m-03", "role": "user",
                    "parts": [{"kind": "text", "text": "old client"}]}}});
    let old = http_with(
        &gateway.addr,
        "POST",
        "/a2a/remote",
        Some(&token),
        Some(&body),
        &[("A2A-Version", "0.3")],
    );
    assert_eq!(old.status, 200, "{}", old.body);
    let old = old.json();
    assert_eq!(old["result"]["kind"], "task", "{old}");
    assert_eq!(old["result"]["status"]["state"], "completed", "{old}");
    assert_eq!(executed(&remote), ["hello", "long task", "old client"]);
}

#[test]
fn a_halt_mid_stream_ends_the_agents_stream_cancels_the_remote_task_and_nothing_new_reaches_it() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "");
    let token = home.token(&["--agent", "alice"]);
    let mut stream = Streaming::start(&gateway, &token, "long work");
    let task = stream.first_artifact();

    home.engage("agent:alice", "halt-all");
    let executed_at_engage = executed(&remote).len();

    // The agent's stream ends with the refusal (not with the remote's next artifact, and not
    // by running to the task's own end two minutes later).
    let end = stream.end();
    assert_eq!(end["end"], "error", "{end}");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("break_glass_contained") && error.contains("halt-all"),
        "{end}"
    );

    // The remote received the cancel of that task, and confirmed it: the send is cancelled.
    assert_cancelled_once(&home, &remote, &task);

    // A new send is refused, and reaches nothing.
    let refused = a2a(&gateway, &token, "send", Some("after the stop"));
    assert_eq!(refused[0]["ok"], false, "{refused:?}");
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap()
            .contains("break_glass_contained"),
        "{refused:?}"
    );
    assert_eq!(executed(&remote).len(), executed_at_engage);
    assert_eq!(executed(&remote), ["long work"]);
}

#[test]
fn a_remote_that_does_not_confirm_its_cancel_leaves_the_send_unresolved_and_says_so() {
    let home = Home::new();
    let (remote, gateway) = start(
        &home,
        &[("STUB_IGNORE_CANCEL", "1")],
        "cut_outcome_wait_s = 1",
    );
    let token = home.token(&["--agent", "alice"]);
    let mut stream = Streaming::start(&gateway, &token, "long stubborn");
    let task = stream.first_artifact();

    home.engage("agent:alice", "emergency");
    let end = stream.end();
    assert_eq!(end["end"], "error", "{end}");
    assert!(
        end["error"]
            .as_str()
            .unwrap()
            .contains("break_glass_contained"),
        "{end}"
    );

    let unresolved = gw::within(Duration::from_secs(20), || {
        let ops = ops_on(&home, "a2a:remote");
        (ops.len() == 1 && ops[0]["in_doubt"] == true).then(|| ops[0].clone())
    })
    .unwrap_or_else(|| panic!("an unresolved send: {:?}", ops_on(&home, "a2a:remote")));
    assert_eq!(unresolved["outcome"], Value::Null, "{unresolved}");
    assert!(
        unresolved["doubt"]
            .as_str()
            .unwrap_or_default()
            .starts_with("remote cancel not confirmed"),
        "{unresolved}\n{}",
        std::fs::read_dir(home.file("ops"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>()
    );
    assert_eq!(cancels(&remote), [task]);
    // The remote keeps working; the agent sees none of it.
    let text = home.run(&["status"]).stdout;
    assert!(text.contains("remote cancel not confirmed"), "{text}");
    let list = home.run(&["ops", "list"]).stdout;
    assert!(list.contains("remote cancel not confirmed"), "{list}");
}

#[test]
fn one_chains_task_is_refused_to_another_task_not_owned() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "");
    let alice = home.token(&["--agent", "alice"]);
    let helper = home.delegate(&alice, "alice-helper");
    let bob = home.token(&["--agent", "bob"]);
    let sent = a2a(&gateway, &alice, "send", Some("mine"));
    let task = sent[0]["event"]["task"]["id"].as_str().unwrap().to_string();
    let requests = rpc_requests(&remote);

    for mode in ["get", "cancel"] {
        let answer = &a2a(&gateway, &bob, mode, Some(&task))[0];
        assert_eq!(answer["ok"], false, "{mode}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("task_not_owned"),
            "{mode}: {answer}"
        );
    }
    let mut subscription = client(&gateway, &bob, "subscribe", Some(&task))
        .output()
        .expect("run the A2A client");
    let subscribed = String::from_utf8_lossy(&std::mem::take(&mut subscription.stdout)).to_string();
    assert!(subscribed.contains("task_not_owned"), "{subscribed}");
    // 0.3's name without the A2A-Version header is judged the same: the SDK's server serves it.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": task}});
    let raw = http_with(
        &gateway.addr,
        "POST",
        "/a2a/remote",
        Some(&bob),
        Some(&body),
        &[],
    );
    assert_eq!(raw.status, 200, "{}", raw.body);
    assert_eq!(
        raw.json()["error"]["data"]["code"],
        "task_not_owned",
        "{}",
        raw.body
    );
    let unknown_method = json!({"jsonrpc": "2.0", "id": 8, "method": "tasks/list", "params": {}});
    let raw = http_with(
        &gateway.addr,
        "POST",
        "/a2a/remote",
        Some(&bob),
        Some(&unknown_method),
        &[],
    );
    assert_eq!(
        raw.json()["error"]["data"]["code"],
        "bad_request",
        "{}",
        raw.body
    );
    // A task id the gateway never saw is refused the same way.
    let unknown = &a2a(&gateway, &alice, "get", Some("no-such-task"))[0];
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("task_not_owned"),
        "{unknown}"
    );
    assert_eq!(
        rpc_requests(&remote),
        requests,
        "nothing refused reached the remote"
    );

    // Its own chain's sub-agent reads it.
    let own = &a2a(&gateway, &helper, "get", Some(&task))[0];
    assert_eq!(own["task"]["id"], json!(task), "{own}");
}

#[test]
fn a_send_under_halt_noncritical_is_held_and_reaches_nothing() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "queue_timeout_s = 1");
    let token = home.token(&["--agent", "alice"]);
    home.engage("agent:alice", "halt-noncritical");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "held"}]}}});
    let held = http_with(
        &gateway.addr,
        "POST",
        "/a2a/remote",
        Some(&token),
        Some(&body),
        &[],
    );
    assert_eq!(held.status, 200, "{}", held.body);
    let error = &held.json()["error"];
    assert_eq!(error["data"]["code"], "queued_timeout", "{error}");
    assert_eq!(error["code"], -32000, "{error}");
    assert!(executed(&remote).is_empty());
}

/// The task book is durable: a gateway killed mid-stream and started again on the same home
/// still lets the agent read its own task, still refuses it to another chain, and at a
/// HALT_ALL of the agent sends the cancel of the task its predecessor saw opened (the remote
/// kept working meanwhile), recording the remote's answer on the send's operation.
/// `token`'s long streamed task opened through `gateway`, its `task` record written, then the
/// gateway killed (by its pid: `Proc`'s drop) and a new one started on the same home: the new
/// gateway, and the task (the remote keeps working on it meanwhile).
fn restart_with_an_open_task(
    home: &Home,
    remote: &Upstream,
    gateway: Gateway,
    token: &str,
) -> (Gateway, String) {
    let mut stream = Streaming::start(&gateway, token, "long before the restart");
    let task = stream.first_artifact();
    // The send's operation names its task in the journal (queued as the task was first seen,
    // not waited for).
    let recorded = gw::within(Duration::from_secs(20), || {
        std::fs::read_dir(home.file("ops"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .any(|text| {
                text.lines().any(|l| {
                    serde_json::from_str::<Value>(l)
                        .is_ok_and(|l| l["phase"] == "task" && l["task"] == json!(task))
                })
            })
            .then_some(())
    });
    assert!(recorded.is_some(), "the send's task record");
    drop(gateway);
    drop(stream);
    (serve(home, remote, ""), task)
}

/// The task book is durable: a gateway killed mid-stream and started again on the same home
/// still lets the agent read its own task, still refuses it to another chain, and at a
/// HALT_ALL of the agent sends the cancel of the task its predecessor saw opened (the remote
/// kept working meanwhile), recording the remote's answer on the send's operation.
#[test]
fn a_restarted_gateway_still_knows_whose_task_it_is_and_cancels_it_at_a_stop() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "");
    let alice = home.token(&["--agent", "alice"]);
    let bob = home.token(&["--agent", "bob"]);
    let (gateway, task) = restart_with_an_open_task(&home, &remote, gateway, &alice);
    let artifacts = |remote: &Upstream| {
        remote_lines(remote)
            .iter()
            .filter(|l| l["task"] == json!(task) && l.get("artifact").is_some())
            .count()
    };
    let before = artifacts(&remote);
    assert!(
        gw::within(Duration::from_secs(20), || (artifacts(&remote) > before)
            .then_some(()))
        .is_some(),
        "the remote task keeps running after the gateway is gone"
    );

    // Its owner still reads it; another chain is still refused it.
    let own = &a2a(&gateway, &alice, "get", Some(&task))[0];
    assert_eq!(own["task"]["id"], json!(task), "{own}");
    let theirs = &a2a(&gateway, &bob, "get", Some(&task))[0];
    assert_eq!(theirs["ok"], false, "{theirs}");
    assert!(
        theirs["error"].as_str().unwrap().contains("task_not_owned"),
        "{theirs}"
    );
    assert!(cancels(&remote).is_empty());

    // A HALT_ALL of the agent: the new gateway cancels the old task, and the send is cancelled.
    home.engage("agent:alice", "halt-all");
    assert_cancelled_once(&home, &remote, &task);
}

/// A stop by what the agent works in, not by its name, reaches a task rebuilt after a restart
/// too: the task's record keeps the whole subject whose send opened it (chain, projects, runs,
/// labels), so a HALT_ALL of the agent's project (or of its run) covers it as it covered the
/// live send.
#[test]
fn a_project_or_run_stop_reaches_a_task_rebuilt_after_a_restart() {
    for (scope_of, args) in [
        ("project", vec!["--project"]),
        ("run", vec!["--run", "eval-7"]),
    ] {
        let home = Home::new();
        let project = home.dir.path().join("work/repo");
        std::fs::create_dir_all(&project).unwrap();
        let project = project.to_str().unwrap().to_string();
        let (remote, gateway) = start(&home, &[], "");
        let mut token_args = vec!["--agent", "alice"];
        token_args.extend(&args);
        if scope_of == "project" {
            token_args.push(&project);
        }
        let alice = home.token(&token_args);
        let (_gateway, task) = restart_with_an_open_task(&home, &remote, gateway, &alice);
        assert!(cancels(&remote).is_empty());
        let scope = match scope_of {
            "project" => format!("project:{project}"),
            _ => "run:eval-7".to_string(),
        };
        home.engage(&scope, "halt-all");
        assert_cancelled_once(&home, &remote, &task);
    }
}

/// The JavaScript SDK's client (`tests/js/a2a_client.mjs`) as `token`, in `mode`.
fn js_client(gateway: &Gateway, token: &str, mode: &str, text: Option<&str>) -> Command {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        repo.join("node_modules/@a2a-js/sdk/package.json").exists(),
        "node_modules/@a2a-js/sdk is missing: run `npm ci` (scripts/setup-test-deps.sh does)"
    );
    let mut command = Command::new("node");
    command
        .arg(repo.join("crates/stopline/tests/js/a2a_client.mjs"))
        .arg(gateway.url())
        .arg("remote")
        .arg(mode)
        .args(text)
        .env_clear()
        .env("STOPLINE_TEST_TOKEN", token)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

/// The one JSON line the JS client printed for `mode`.
fn js(gateway: &Gateway, token: &str, mode: &str, text: Option<&str>) -> Value {
    let out = js_client(gateway, token, mode, text)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().next().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "the JS client printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The second client: `@a2a-js/sdk` reads the gateway's card (which names only the gateway),
/// sends, streams, and its stream is cut at a HALT_ALL with the refusal; the remote receives the
/// cancel of the streamed task, and nothing new reaches it.
#[test]
fn the_js_sdk_client_reads_the_card_sends_streams_and_is_cut_at_a_stop() {
    let home = Home::new();
    let (remote, gateway) = start(&home, &[], "");
    let token = home.token(&["--agent", "alice"]);

    let card = js(&gateway, &token, "card", None);
    assert_eq!(card["ok"], true, "{card}");
    assert_eq!(
        card["card"]["supportedInterfaces"],
        json!([{"url": format!("{}/a2a/remote", gateway.url()),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        "{card}"
    );
    assert!(
        !card.to_string().contains(&format!(":{}", remote.port)),
        "{card}"
    );

    let sent = js(&gateway, &token, "send", Some("hello from js"));
    assert!(
        sent.to_string().contains("echo: hello from js"),
        "the remote's answer came back: {sent}"
    );
    assert_eq!(executed(&remote), ["hello from js"]);

    let mut stream = Streaming::spawn(js_client(&gateway, &token, "stream", Some("long js")));
    let task = loop {
        let event = stream.next().expect("the stream ended before any artifact");
        assert!(event.get("end").is_none(), "{event}");
        let payload = &event["event"]["payload"];
        if payload["$case"] == "artifactUpdate" {
            break payload["value"]["taskId"].as_str().unwrap().to_string();
        }
    };

    home.engage("agent:alice", "halt-all");
    let end = stream.end();
    assert_eq!(end["end"], "error", "{end}");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("break_glass_contained") && error.contains("halt-all"),
        "{end}"
    );
    let cancelled = gw::within(Duration::from_secs(20), || {
        ops_on(&home, "a2a:remote")
            .iter()
            .any(|o| o["outcome"] == "cancelled")
            .then_some(())
    });
    assert!(
        cancelled.is_some(),
        "{:?} {:?}",
        ops_on(&home, "a2a:remote"),
        cancels(&remote)
    );
    assert_eq!(cancels(&remote), [task]);

    let refused = js(&gateway, &token, "send", Some("after the stop"));
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("break_glass_contained"),
        "{refused}"
    );
    assert_eq!(executed(&remote), ["hello from js", "long js"]);
}
