//! One budget across the fleet (docs/reference.md, "Many hosts: etcd"), against a real etcd with
//! TLS and auth on (the roles `stopline etcd roles --apply` sets up), through the real binary:
//! gateways on separate hosts reserve and settle an agent's budget in etcd.
//!
//! - Three gateways serving 64 concurrent tool calls of one agent whose budget is 24: exactly 24
//!   reach the destination.
//! - A gateway killed (SIGKILL) with reservations open: another gateway counts them as reserved
//!   while the dead gateway's lease lives, and as spent at their bound once it ended.
//! - etcd unreachable: a budgeted call is refused `control_io`, never spent locally.
//! - An agent breaker trips on the fleet's count: unauthorized calls spread over two gateways.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::secure::SecureEtcd;
use etcd_support::{wait_until, EtcdGateway, Host};
use gw::{http, mcp_post, mcp_session, rpc_messages, McpUpstream};
use serde_json::{json, Value};
use std::time::Duration;
use stopline_etcd::budget_record::FleetAccount;

/// A locked etcd, an operator host, an MCP destination, and `n` gateway hosts serving it.
struct Fleet {
    etcd: SecureEtcd,
    operator: Host,
    upstream: McpUpstream,
    gateways: Vec<(Host, EtcdGateway)>,
    /// Held until everything above is torn down (fields drop in order).
    _one_at_a_time: std::fs::File,
}

/// The tests of this file one at a time: each runs a TLS etcd with auth and up to three
/// gateways, and on two loaded cores three such fleets at once made the CLI's TLS and bcrypt
/// authentication miss its connect bound — what these tests are about is the ledger, not that.
fn one_at_a_time() -> std::fs::File {
    let lock =
        std::fs::File::create(std::env::temp_dir().join("stopline-etcd-budgets.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    lock
}

const PASSWORDS: [(&str, &str); 3] = [
    ("root", "root-pw-1"),
    ("stopline-operator", "operator-pw-2"),
    ("stopline-gateway", "gateway-pw-3"),
];

/// Run a set-up command until it succeeds: on two loaded cores a CLI's first TLS and bcrypt
/// authentication can miss its connect bound (`distributed_unavailable`); that is not what these
/// tests are about, so set-up tries again (three times at most).
fn set_up(host: &Host, args: &[&str]) -> serde_json::Value {
    for _ in 0..2 {
        let run = host.run(args);
        if run.code == 0 {
            return run.json();
        }
        assert!(
            run.stdout.contains("distributed_unavailable"),
            "{}",
            run.stdout
        );
    }
    let run = host.run(args);
    run.assert_ok();
    run.json()
}

/// A token minted by `host` (see [`set_up`]).
fn token(host: &Host, agent: &str, extra: &[&str]) -> String {
    let mut args = vec!["token", "issue", "--agent", agent];
    args.extend_from_slice(extra);
    set_up(host, &args)["token"].as_str().unwrap().to_string()
}

/// `top` is top-level configuration for the gateway hosts (before any table).
fn fleet(n: usize, top: &str) -> Fleet {
    let one_at_a_time = one_at_a_time();
    let etcd = SecureEtcd::start();
    let url = etcd.url("/fleet");
    let admin = Host::new(&url, &etcd.config(None));
    let files = PASSWORDS.map(|(user, pw)| etcd.password_file(user, pw).display().to_string());
    set_up(
        &admin,
        &[
            "etcd",
            "roles",
            "--prefix",
            "/fleet",
            "--apply",
            "--root-password-file",
            &files[0],
            "--operator-password-file",
            &files[1],
            "--gateway-password-file",
            &files[2],
        ],
    );
    let operator = Host::new(&url, &etcd.config(Some(PASSWORDS[1])));
    set_up(&operator, &["init"]);
    // The first token minted publishes the operator's key, which every gateway host pins.
    token(&operator, "first", &[]);
    let upstream = McpUpstream::start(&operator.home);
    let gateways = (0..n)
        .map(|_| {
            let config = format!(
                "{top}\n{}[mcp.dest]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
                etcd.config(Some(PASSWORDS[2])),
                upstream.port
            );
            let host = Host::new(&url, &config);
            set_up(&host, &["init"]);
            let serving = host.serve();
            (host, serving)
        })
        .collect();
    Fleet {
        etcd,
        operator,
        upstream,
        gateways,
        _one_at_a_time: one_at_a_time,
    }
}

/// One `tools/call` of the destination's `write` with `arguments`; the refusal code, "" when it
/// executed, or "no answer" when the gateway gave none (it was killed).
fn write_call(addr: &str, token: &str, session: Option<&str>, arguments: Value) -> String {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write", "arguments": arguments}});
    let reply = mcp_post(addr, token, session, &call);
    if reply.status == 0 {
        return "no answer".into();
    }
    rpc_messages(&reply)
        .iter()
        .find_map(|m| m["error"]["data"]["code"].as_str().map(String::from))
        .or_else(|| {
            reply
                .json()
                .get("error")
                .and_then(|e| e["code"].as_str().map(String::from))
        })
        .unwrap_or_default()
}

/// The `tool_calls` figures `/v1/budgets` shows for the token's account: (used, reserved).
fn tool_calls(gateway: &EtcdGateway, token: &str) -> (f64, f64) {
    let budgets = http(&gateway.addr, "GET", "/v1/budgets", Some(token), None).json();
    let account = budgets["agents"][0]["accounts"][0].clone();
    let kind = &account["budgets"]["tool_calls"];
    (
        kind["used"].as_f64().unwrap_or(-1.0),
        kind["reserved"].as_f64().unwrap_or(-1.0),
    )
}

/// The fleet's account at `key`, read as root.
fn account(root: &stopline_etcd::EtcdClient, key: &str) -> FleetAccount {
    let key = key.to_string();
    let bytes = root
        .call("test read", move |mut c| {
            let key = key.clone();
            async move {
                c.get(key, None)
                    .await
                    .map(|r| r.kvs().first().map(|kv| kv.value().to_vec()))
            }
        })
        .expect("a read as root");
    FleetAccount::parse(&bytes.unwrap_or_else(|| b"{}".to_vec())).unwrap()
}

#[test]
fn three_gateways_on_one_etcd_dispatch_exactly_the_budget() {
    let fleet = fleet(3, "queue_timeout_s = 60");
    let token = token(&fleet.operator, "spender", &["--budget", "tool_calls=24"]);
    let sessions: Vec<_> = fleet
        .gateways
        .iter()
        .map(|(_, g)| mcp_session(&g.addr, &token))
        .collect();
    let outcomes: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let at = i % 3;
                let (token, session, addr) =
                    (&token, sessions[at].clone(), &fleet.gateways[at].1.addr);
                scope.spawn(move || write_call(addr, token, session.as_deref(), json!({"n": i})))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let executed = fleet.upstream.executed().len();
    assert_eq!(
        executed, 24,
        "exactly the budget reached the destination across three gateways: {outcomes:?}"
    );
    let refused: Vec<_> = outcomes.iter().filter(|code| !code.is_empty()).collect();
    assert_eq!(refused.len(), 40, "{outcomes:?}");
    assert!(
        refused.iter().all(|code| matches!(
            code.as_str(),
            "budget_exhausted" | "break_glass_contained" | "breaker_open"
        )),
        "{outcomes:?}"
    );
    // The account in etcd: the 24 settled, nothing left open (settlements are queued, so they
    // may land a moment after the answers).
    let root = fleet.etcd.client(Some(PASSWORDS[0]));
    let claims = stopline_token::decode_unverified(&token).unwrap();
    let key = format!("/fleet/budgets/accounts/{}.json", claims.jti);
    let settled = wait_until(Duration::from_secs(10), || {
        let account = account(&root, &key);
        account.open.is_empty()
            && account
                .settled
                .get(&stopline_core::budget::BudgetKind::ToolCalls)
                == Some(&24.0)
    });
    assert!(settled.is_some(), "{:?}", account(&root, &key));
    assert_eq!(fleet.upstream.executed().len(), 24);
}

#[test]
fn a_killed_gateways_reservations_count_until_its_lease_ends_then_at_their_bound() {
    let mut fleet = fleet(2, "queue_timeout_s = 1");
    let token = token(&fleet.operator, "holder", &["--budget", "tool_calls=6"]);
    let (doomed, survivor) = (&fleet.gateways[0].1, &fleet.gateways[1].1);
    // Two calls spent through the survivor, four held open at the doomed gateway.
    let session = mcp_session(&survivor.addr, &token);
    for n in 0..2 {
        assert_eq!(
            write_call(&survivor.addr, &token, session.as_deref(), json!({"n": n})),
            ""
        );
    }
    let doomed_addr = doomed.addr.clone();
    let held: Vec<_> = (0..4)
        .map(|n| {
            let (addr, token) = (doomed_addr.clone(), token.clone());
            std::thread::spawn(move || {
                let session = mcp_session(&addr, &token);
                write_call(
                    &addr,
                    &token,
                    session.as_deref(),
                    json!({"n": 10 + n, "hold_s": 120}),
                )
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || fleet.upstream.executed().len()
            == 6)
        .is_some(),
        "the four held calls reached the destination"
    );
    let pid = fleet.gateways[0].1.proc.0.id();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    fleet.gateways[0].1.proc.0.wait().unwrap();
    for call in held {
        assert_eq!(call.join().unwrap(), "no answer");
    }
    let survivor = &fleet.gateways[1].1;
    // While the dead gateway's lease lives, its four reservations count: nothing fits.
    assert_eq!(
        write_call(&survivor.addr, &token, session.as_deref(), json!({"n": 20})),
        "budget_exhausted",
        "the dead gateway's open reservations were forgotten"
    );
    assert_eq!(tool_calls(survivor, &token), (2.0, 4.0));
    // Once the lease ended they are settled at their bound: spent, never released.
    let settled = wait_until(Duration::from_secs(30), || {
        write_call(&survivor.addr, &token, session.as_deref(), json!({"n": 21}));
        tool_calls(survivor, &token) == (6.0, 0.0)
    });
    assert!(
        settled.is_some(),
        "the dead gateway's reservations were not settled at their bound: {:?}",
        tool_calls(survivor, &token)
    );
    assert_eq!(
        fleet.upstream.executed().len(),
        6,
        "nothing past the budget"
    );
}

#[test]
fn a_gateway_that_cannot_reach_etcd_refuses_budgeted_calls() {
    // A long permit: the gate stays open to noncritical work, so what refuses is the ledger.
    let mut fleet = fleet(1, "permit_ttl_ms = 600000\nqueue_timeout_s = 5");
    let budgeted = token(&fleet.operator, "cut-off", &["--budget", "tool_calls=10"]);
    let unbudgeted = token(&fleet.operator, "free", &[]);
    let gateway = &fleet.gateways[0].1;
    let s1 = mcp_session(&gateway.addr, &budgeted);
    assert_eq!(
        write_call(&gateway.addr, &budgeted, s1.as_deref(), json!({"n": 1})),
        ""
    );
    fleet.etcd.kill();
    assert_eq!(
        write_call(&gateway.addr, &budgeted, s1.as_deref(), json!({"n": 2})),
        "control_io",
        "a budgeted call was spent without the fleet's ledger"
    );
    assert_eq!(
        gateway.check(&unbudgeted),
        ("allow".into(), String::new()),
        "the gate itself is open: what refuses is the ledger"
    );
    assert_eq!(fleet.upstream.executed().len(), 1);
}

#[test]
fn an_agent_breaker_trips_on_the_fleets_count_not_one_gateways() {
    let fleet = fleet(2, "[breakers]\nunauthorized_calls = 4\n");
    let token = token(&fleet.operator, "prober", &[]);
    // Two recovery attempts through each gateway: two each, four in the fleet.
    for (_, gateway) in &fleet.gateways {
        for _ in 0..2 {
            let reply = http(
                &gateway.addr,
                "POST",
                "/v1/recover",
                Some(&token),
                Some(&json!({})),
            );
            assert_eq!(reply.status, 403, "{}", reply.body);
        }
    }
    // The trip is engaged by the gateway that counted the fourth; under the gateway role it
    // lands in that host's control directory (an engage through a gateway contains its host).
    let tripped_at = |host: &Host| {
        set_up(host, &["status"])["latches"]
            .as_array()
            .is_some_and(|latches| {
                latches.iter().any(|l| {
                    l["by"] == "breaker:unauthorized_calls" && l["scope"] == "agent:prober"
                })
            })
    };
    let tripped = wait_until(Duration::from_secs(20), || {
        fleet.gateways.iter().any(|(host, _)| tripped_at(host))
    });
    assert!(
        tripped.is_some(),
        "four unauthorized calls across two gateways did not trip a breaker of four"
    );
    let (_, gateway) = fleet
        .gateways
        .iter()
        .find(|(host, _)| tripped_at(host))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || gateway.check(&token).0
            == "block")
        .is_some(),
        "{:?}",
        gateway.check(&token)
    );
}
