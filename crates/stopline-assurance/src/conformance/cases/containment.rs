//! Containment that holds against the agent (docs/reference.md §6): a supervised agent has no terminal,
//! no new privileges and a uid of its own; under the default `--net gateway-only` the host's
//! `/tmp` is out of its sight; on the API an agent token sees only the latches and epoch scopes
//! covering it, and a covered parent mints no sub-agent.

use super::{case, slow, Case};
use crate::conformance::gateway::Gateway;
use crate::conformance::http::Upstream;
use crate::conformance::sandbox::Sandbox;
use crate::conformance::{ensure, harness, Verdict};
use serde_json::json;

pub const CASES: &[Case] = &[
    case(
        "run_agent_has_no_terminal_no_new_privileges_and_its_own_uid",
        "a supervised agent run with the defaults has no controlling terminal (tty: not a tty, /dev/tty cannot be opened), NoNewPrivs 1, and a uid from the default [run] uid_range",
        run_agent_has_no_terminal,
    ),
    case(
        "run_gateway_only_hides_the_hosts_tmp",
        "under the default --net gateway-only a file on the host's /tmp does not exist for the agent; under --net host it does",
        run_gateway_only_hides_the_hosts_tmp,
    ),
    case(
        "run_gateway_only_sees_only_its_own_processes",
        "under the default --net gateway-only the agent is pid 1 of its own PID namespace and /proc lists none of the host's processes; under --net host it lists them (docs/reference.md §6)",
        run_gateway_only_sees_only_its_own_processes,
    ),
    slow(
        "agent_token_sees_only_its_latches_and_a_covered_parent_mints_nothing",
        "/v1/status for an agent token lists only the latches covering it (an operator token sees all), and /v1/delegate by a paused parent is refused break_glass_contained",
        agent_token_sees_only_its_latches,
    ),
    slow(
        "agent_token_sees_only_its_chains_epoch_scopes",
        "after an emergency on agent:bob, /v1/status for alice's token has no agent:bob in epoch.scopes; an operator token's has",
        agent_token_sees_only_its_epoch_scopes,
    ),
];

fn write_card(s: &Sandbox, id: &str) -> Result<String, crate::conformance::CaseError> {
    let path = s.dir().join(format!("card-{id}.json"));
    let card = super::run::card(&s.run_id(id), "agent-w");
    std::fs::write(&path, card.to_string()).map_err(harness)?;
    Ok(path.display().to_string())
}

fn run_agent_has_no_terminal(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    let card = write_card(s, "walls")?;
    let script = "tty; (: < /dev/tty) 2>/dev/null && echo TTY-$((1+1))-OPENED; grep NoNewPrivs /proc/self/status; echo uid=$(id -u)";
    let out = s.run(&[
        "run",
        "--policy",
        &card,
        "--gateway",
        &gateway.url(),
        "--",
        "/bin/sh",
        "-c",
        script,
    ])?;
    ensure(out.code == 0, || format!("the run failed: {}", out.brief()))?;
    ensure(out.stdout.contains("not a tty"), || {
        format!("the agent has a terminal: {}", out.stdout)
    })?;
    ensure(!out.stdout.contains("TTY-2-OPENED"), || {
        "the agent opened /dev/tty".into()
    })?;
    ensure(out.stdout.contains("NoNewPrivs:\t1"), || {
        format!("no PR_SET_NO_NEW_PRIVS: {}", out.stdout)
    })?;
    let uid: u32 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("uid="))
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or(0);
    ensure((61184..=65519).contains(&uid), || {
        format!("the agent ran as uid {uid}, not a fresh one")
    })?;
    Ok(format!(
        "not a tty, /dev/tty refused, NoNewPrivs 1, uid {uid}"
    ))
}

fn run_gateway_only_hides_the_hosts_tmp(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    let card = write_card(s, "tmp")?;
    let marker = std::path::PathBuf::from(format!(
        "/tmp/stopline-conformance-host-{}-{}",
        std::process::id(),
        s.dir()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("case")
    ));
    std::fs::write(&marker, b"host").map_err(harness)?;
    let script = format!("test -e '{}'", marker.display());
    let mut seen = Vec::new();
    for (net, wanted) in [("gateway-only", 1), ("host", 0)] {
        let out = s.run(&[
            "run",
            "--policy",
            &card,
            "--net",
            net,
            "--gateway",
            &gateway.url(),
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])?;
        ensure(out.code == wanted, || {
            format!(
                "--net {net}: the agent's test -e exited {} (wanted {wanted}): {}",
                out.code,
                out.brief()
            )
        })?;
        seen.push(format!("--net {net}: exit {}", out.code));
    }
    let _ = std::fs::remove_file(&marker);
    Ok(seen.join("; "))
}

fn run_gateway_only_sees_only_its_own_processes(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    let card = write_card(s, "pidns")?;
    // The harness's own pid: a host process every agent under the host's namespace can list.
    let host_pid = std::process::id();
    let script = format!("echo self=$$; test -e /proc/{host_pid} && echo HOST-$((1+1))-SEEN; true");
    let mut seen = Vec::new();
    for (net, isolated) in [("gateway-only", true), ("host", false)] {
        let out = s.run(&[
            "run",
            "--policy",
            &card,
            "--net",
            net,
            "--gateway",
            &gateway.url(),
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])?;
        ensure(out.code == 0, || {
            format!("--net {net}: the run failed: {}", out.brief())
        })?;
        // Its output, not the command the run record repeats.
        let saw_host = out.stdout.contains("HOST-2-SEEN");
        let is_init = out.stdout.contains("self=1\n");
        ensure(saw_host != isolated && is_init == isolated, || {
            format!(
                "--net {net}: the agent saw the host's pid {host_pid}: {saw_host}, was pid 1: {is_init} (wanted {})",
                !isolated
            )
        })?;
        seen.push(format!(
            "--net {net}: host process {}",
            if saw_host { "seen" } else { "not seen" }
        ));
    }
    Ok(seen.join("; "))
}

fn agent_token_sees_only_its_latches(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "")?;
    let alice = s.token(&["--agent", "alice"])?;
    let bob = s.token(&["--agent", "bob"])?;
    let operator = s.token(&["--agent", "ops", "--role", "operator"])?;
    s.engage("agent:bob", "halt-noncritical")?;
    let count = |token: &str| {
        gateway.get("/v1/status", Some(token)).json_or_null()["latches"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(usize::MAX)
    };
    let (for_alice, for_bob, for_operator) = (count(&alice), count(&bob), count(&operator));
    ensure((for_alice, for_bob, for_operator) == (0, 1, 1), || {
        format!("latches seen: alice {for_alice}, bob {for_bob}, operator {for_operator} (wanted 0, 1, 1)")
    })?;
    let refused = gateway.post("/v1/delegate", Some(&bob), &json!({"agent": "bob-sub"}));
    let code = refused.json_or_null()["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure(code == "break_glass_contained", || {
        format!(
            "a paused parent's delegate answered {}: {}",
            refused.status, refused.body
        )
    })?;
    Ok(
        "alice sees 0 latches, bob 1, operator 1; bob's delegate refused break_glass_contained"
            .into(),
    )
}

fn agent_token_sees_only_its_epoch_scopes(s: &Sandbox) -> Verdict {
    let gateway = Gateway::start(s, "")?;
    let alice = s.token(&["--agent", "alice"])?;
    let operator = s.token(&["--agent", "ops", "--role", "operator"])?;
    s.engage("agent:bob", "emergency")?;
    let sees_bob = |token: &str| {
        let status = gateway.get("/v1/status", Some(token)).json_or_null();
        status["epoch"]["scopes"]
            .as_object()
            .map(|scopes| scopes.keys().any(|k| k.contains("agent:bob")))
    };
    let (for_alice, for_operator) = (sees_bob(&alice), sees_bob(&operator));
    ensure(
        (for_alice, for_operator) == (Some(false), Some(true)),
        || {
            format!("agent:bob in epoch.scopes: alice {for_alice:?}, operator {for_operator:?} (wanted false, true)")
        },
    )?;
    Ok("alice's epoch.scopes has no agent:bob; the operator's has".into())
}
