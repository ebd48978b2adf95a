//! Revoking one token (docs/reference.md §5, "Revoking one token"): `token revoke ID` refuses
//! that token and no other of its agent's; `--with-delegates` refuses every token delegated under
//! it, and without it the delegates keep working; `token list` shows the live tokens minted here
//! (a gateway's `/v1/delegate` included) with the ids to revoke; a revocation is durable, so a
//! gateway started after it refuses the token too; and, as an engage waits for its latch,
//! `token revoke` answers only once every live gateway acknowledged the revocation, so a
//! gateway already running refuses the token from the first call after the answer.

mod gw;
mod util;

use gw::Gateway;
use serde_json::json;
use util::Home;

fn jti(token: &str) -> String {
    stopline_token::decode_unverified(token).unwrap().jti
}

fn allowed(home: &Home, token: &str) -> bool {
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", token]);
    match code {
        0 => true,
        _ => {
            assert_eq!(receipt["code"], "stale_control_epoch", "{receipt}");
            false
        }
    }
}

fn revoke(home: &Home, id: &str, extra: &[&str]) -> util::Run {
    let mut args = vec![
        "token", "revoke", id, "--reason", "leaked", "--by", "operator",
    ];
    args.extend_from_slice(extra);
    home.run(&args)
}

fn listed(home: &Home) -> Vec<String> {
    let r = home.run(&["token", "list"]);
    r.assert_ok();
    r.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["jti"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn one_token_revoked_while_its_agents_other_tokens_keep_working() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let leaked = home.token(&["--agent", "worker"]);
    let second = home.token(&["--agent", "worker"]);
    let other = home.token(&["--agent", "other"]);
    let child = home.delegate(&leaked, "helper");
    let ids = listed(&home);
    for token in [&leaked, &second, &other, &child] {
        assert!(ids.contains(&jti(token)), "{ids:?} lacks {token}");
        assert!(allowed(&home, token));
    }
    let r = revoke(&home, &jti(&leaked), &[]);
    r.assert_ok();
    assert_eq!(r.json()["scope"], format!("token:{}", jti(&leaked)));
    assert!(!allowed(&home, &leaked), "the revoked token is refused");
    for token in [&second, &other, &child] {
        assert!(
            allowed(&home, token),
            "without --with-delegates the rest live"
        );
    }
    // Its delegates keep working, and it can delegate no more (its authority is revoked).
    let r = home.run(&["token", "delegate", "--parent", &leaked, "--agent", "late"]);
    assert_eq!(r.code_str(), "stale_control_epoch", "{}", r.stdout);
    // A revoked token still shows in the list until it expires: it was minted here.
    assert!(listed(&home).contains(&jti(&leaked)));
}

#[test]
fn with_delegates_refuses_every_token_under_it_at_any_depth() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let root = home.token(&["--agent", "planner"]);
    let child = home.delegate(&root, "coder");
    let grandchild = home.delegate(&child, "tester");
    let sibling = home.token(&["--agent", "planner"]);
    let sibling_child = home.delegate(&sibling, "coder");
    revoke(&home, &jti(&child), &["--with-delegates"]).assert_ok();
    assert!(!allowed(&home, &child));
    assert!(!allowed(&home, &grandchild), "a grandchild is refused too");
    for token in [&root, &sibling, &sibling_child] {
        assert!(allowed(&home, token), "nothing above or beside it is");
    }
}

#[test]
fn an_unknown_id_or_a_non_operator_changes_nothing() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let token = home.token(&["--agent", "worker"]);
    let before = home.run(&["status"]).json()["epoch"]["seq"].clone();
    let r = revoke(&home, &"a".repeat(32), &[]);
    assert_eq!(r.code_str(), "bad_request", "{}", r.stdout);
    let r = revoke(&home, "not-an-id", &[]);
    assert_eq!(r.code_str(), "bad_request", "{}", r.stdout);
    let r = home.run(&[
        "token",
        "revoke",
        &jti(&token),
        "--reason",
        "x",
        "--by",
        "mallory",
    ]);
    assert_eq!(r.code_str(), "owner_control_required", "{}", r.stdout);
    // An agent's own token revokes nothing, not even another agent's token.
    let r = home.run(&[
        "token",
        "revoke",
        &jti(&token),
        "--reason",
        "x",
        "--token",
        &token,
    ]);
    assert_eq!(r.code_str(), "owner_control_required", "{}", r.stdout);
    assert_eq!(home.run(&["status"]).json()["epoch"]["seq"], before);
    assert!(allowed(&home, &token));
}

#[test]
fn a_gateway_delegate_is_listed_and_a_revoke_survives_a_gateway_restart() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let parent = home.token(&["--agent", "planner"]);
    let keeper = home.token(&["--agent", "planner"]);
    let gateway = Gateway::start(&home, "");
    let reply = gateway.post("/v1/delegate", Some(&parent), &json!({"agent": "scout"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let scout = reply.json()["token"].as_str().unwrap().to_string();
    assert!(
        listed(&home).contains(&jti(&scout)),
        "the gateway's delegate is listed"
    );
    revoke(&home, &jti(&parent), &["--with-delegates"]).assert_ok();
    let refused = |gateway: &Gateway, token: &str| {
        let check = gateway.post("/v1/check", Some(token), &json!({"class": "noncritical"}));
        check.json()["code"] == "stale_control_epoch"
    };
    // `token revoke` answers once the live gateway acknowledged the revocation: the gateway
    // already running refuses the token from the call made right after.
    assert!(refused(&gateway, &parent) && refused(&gateway, &scout));
    assert!(!refused(&gateway, &keeper));
    drop(gateway);
    let gateway = Gateway::start(&home, "");
    assert!(refused(&gateway, &parent) && refused(&gateway, &scout));
    assert!(!refused(&gateway, &keeper));
}

#[test]
fn the_human_list_names_ids_agents_and_labels() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let token = home.token(&["--agent", "worker", "--label", "task=ctf-17"]);
    let r = home.command(&["token", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains(&jti(&token)) && text.contains("worker") && text.contains("task=ctf-17"),
        "{text}"
    );
}

/// Twenty tokens revoked one after another while a gateway runs: each is refused by the call
/// made as soon as its `token revoke` answered (no waiting, no polling), the revoke names the
/// gateway that acknowledged, and the tokens not yet revoked keep working meanwhile.
#[test]
fn a_live_gateway_refuses_each_revoked_token_from_the_call_right_after_the_revoke() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let tokens: Vec<String> = (0..20)
        .map(|_| home.token(&["--agent", "worker"]))
        .collect();
    let gateway = Gateway::start(&home, "");
    let decision = |token: &str| {
        let check = gateway.post("/v1/check", Some(token), &json!({"class": "noncritical"}));
        (
            check.status,
            check.json()["code"].as_str().map(str::to_string),
        )
    };
    for (i, token) in tokens.iter().enumerate() {
        assert_eq!(decision(token).1, None, "token {i} works before its revoke");
        let r = revoke(&home, &jti(token), &[]);
        r.assert_ok();
        let receipt = r.json();
        assert_eq!(
            receipt["acknowledged_by"].as_array().map(Vec::len),
            Some(1),
            "{receipt}"
        );
        assert_eq!(receipt["unacknowledged"], json!([]), "{receipt}");
        assert_eq!(
            decision(token).1.as_deref(),
            Some("stale_control_epoch"),
            "token {i} is refused by the first call after its revoke answered"
        );
        if let Some(next) = tokens.get(i + 1) {
            assert_eq!(decision(next).1, None, "token {} still works", i + 1);
        }
    }
}

/// A live gateway that does not acknowledge within `ack_timeout_ms` is named, exactly as an
/// engage names it: the revocation stands (durable, exit 0), the receipt lists the gateway as
/// unacknowledged with a `gateways_unacknowledged` warning, never "revoked" silently.
#[test]
fn a_gateway_that_does_not_acknowledge_the_revocation_is_named() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let token = home.token(&["--agent", "worker"]);
    let gateway = Gateway::start(&home, "");
    // Stop the gateway's process (SIGSTOP) without letting it remove its registration: live by
    // pid and heartbeat for a few seconds, answering nothing.
    let pid = rustix::process::Pid::from_raw(gateway.proc.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let r = revoke(&home, &jti(&token), &[]);
    r.assert_ok();
    let receipt = r.json();
    assert_eq!(receipt["revoked"], true);
    assert_eq!(receipt["acknowledged_by"], json!([]), "{receipt}");
    assert_eq!(
        receipt["unacknowledged"].as_array().map(Vec::len),
        Some(1),
        "{receipt}"
    );
    assert!(
        receipt["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("gateways_unacknowledged: ")),
        "{receipt}"
    );
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    assert!(!allowed(&home, &token));
}

#[test]
fn a_bad_line_in_the_registry_refuses_the_list_until_the_owner_repairs_it() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let first = home.token(&["--agent", "worker"]);
    let second = home.token(&["--agent", "worker"]);
    let registry = home.file("keys/minted.jsonl");
    let bytes = std::fs::read(&registry).unwrap();
    // A torn last line (a crash mid-append) is listed without it.
    let mut torn = bytes.clone();
    torn.extend_from_slice(br#"{"jti":"00"#);
    util::write(&registry, &torn);
    assert_eq!(listed(&home), [jti(&first), jti(&second)]);
    // A bad line before the end is a fault: the list and a revoke refuse, a mint appends
    // after it and rewrites nothing.
    let first_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    let corrupt = [
        &bytes[..first_line],
        b"not a record\n",
        &bytes[first_line..],
    ]
    .concat();
    util::write(&registry, &corrupt);
    let r = home.run(&["token", "list"]);
    assert_eq!(r.code_str(), "control_state_corrupt", "{}", r.stdout);
    assert_eq!(
        revoke(&home, &jti(&first), &[]).code_str(),
        "control_state_corrupt"
    );
    let third = home.token(&["--agent", "worker"]);
    assert!(std::fs::read(&registry).unwrap().starts_with(&corrupt));
    assert!(allowed(&home, &first), "a corrupt registry revokes nothing");
    // `status` names it; the owner's repair cuts it out, keeping the old bytes.
    let status = home.run(&["status"]);
    assert!(
        status.stdout.contains("keys/minted.jsonl"),
        "{}",
        status.stdout
    );
    let r = home.run_on_pty(
        &[
            "recover",
            "repair",
            "--reason",
            "a bad line",
            "--by",
            "operator",
        ],
        &[],
    );
    r.assert_ok();
    let receipt = r.json();
    assert_eq!(
        receipt["journals_repaired"][0]["file"], "keys/minted.jsonl",
        "{receipt}"
    );
    assert_eq!(listed(&home), [jti(&first), jti(&second), jti(&third)]);
}
