//! `stopline bench kill` reports, for N = 10, 100 and 500 processes, the time from a latch's
//! publication to the observed quiescence of the group through the `run` reaction loop, beside
//! the bare `cgroup.kill` time; the other measures likewise. Figures are printed, never asserted.

#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;

use util::Home;

#[test]
fn bench_kill_reports_percentiles_for_every_size() {
    let home = Home::new();
    let r = home.run(&["bench", "kill", "--iterations", "2"]);
    r.assert_ok();
    let report = r.json();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    let runs = report["runs"].as_array().unwrap();
    let sizes: Vec<u64> = runs.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![10, 100, 500]);
    for run in runs {
        for field in [
            "kill_issued_to_quiescent_p50_us",
            "engage_call_to_quiescent_p50_us",
            "bare_cgroup_kill_p50_us",
            "bare_cgroup_kill_p99_us",
        ] {
            assert!(
                run[field].as_u64().is_some_and(|v| v > 0),
                "{field} in {run}"
            );
        }
        // The supervisor may issue the kill, and see the group empty, before the latch's
        // directory fsync returns (the "contained" instant): those figures may be 0.
        for field in [
            "latch_to_kill_issued_p50_us",
            "latch_to_quiescent_p50_us",
            "latch_to_quiescent_p99_us",
        ] {
            assert!(run[field].as_u64().is_some(), "{field} in {run}");
        }
    }
    // The throwaway homes are gone and the real home was never touched.
    assert!(!home.path().exists());
    let leftovers: Vec<_> = std::fs::read_dir(home.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".stopline-bench-kill")
        })
        .collect();
    assert!(leftovers.is_empty());
}

/// `stopline bench sessions` opens sessions through a real gateway with a stdio server started
/// ahead and one started per session, and reports both; a server command that cannot start is
/// a failed bench (exit non-zero, the error named), never figures of nothing.
#[test]
fn bench_sessions_reports_warm_and_cold_session_starts() {
    let home = Home::new();
    let r = home.run(&["bench", "sessions", "--iterations", "5"]);
    r.assert_ok();
    let report = r.json();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    let sessions = &report["sessions"];
    assert_eq!(sessions["iterations"], 5, "{report}");
    for field in ["warm_p50_ms", "warm_p99_ms", "cold_p50_ms", "cold_p99_ms"] {
        assert!(
            sessions[field].as_f64().is_some_and(|v| v > 0.0),
            "{field} in {report}"
        );
    }
    assert!(sessions["warm_vs_cold"].as_f64().is_some(), "{report}");
    assert!(!home.path().exists(), "the real home was never touched");

    let broken = home.run(&[
        "bench",
        "sessions",
        "--iterations",
        "5",
        "--server-command",
        "/nonexistent/mcp-server",
    ]);
    assert_ne!(broken.code, 0, "{}", broken.stdout);
    assert!(broken.stderr.contains("initialize"), "{}", broken.stderr);
}

/// `stopline bench fleet` measures a budgeted call with its budget in etcd beside the same call
/// on a local home, through two real gateways and its own loopback etcd; every path is measured
/// in every round, and the budgets it gives its agents are spent exactly (one more call on each
/// budgeted path is refused), so no figure comes from a path that skipped its ledger. An etcd
/// binary that does not exist is a failed bench naming it, never figures of nothing.
#[test]
fn bench_fleet_measures_the_fleet_ledger_beside_the_local_one() {
    let home = Home::new();
    let r = home.run(&["bench", "fleet", "--iterations", "24", "--samples", "2"]);
    r.assert_ok();
    let report = r.json();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report["budget_enforced"], serde_json::json!([true, true]));
    let levels = report["levels"].as_array().unwrap();
    let concurrency: Vec<u64> = levels
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(concurrency, vec![1, 8]);
    for level in levels {
        let rounds = level["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{level}");
        for round in rounds {
            for path in ["direct", "local", "local_budgeted", "etcd", "etcd_budgeted"] {
                assert!(
                    round["p50_us"][path].as_i64().is_some_and(|v| v > 0),
                    "{path} in {round}"
                );
            }
        }
        assert!(level["median_ratio_etcd_vs_local_budgeted"]
            .as_f64()
            .is_some());
    }
    assert!(!home.path().exists(), "the real home was never touched");

    let missing = home.run(&["bench", "fleet", "--etcd", "/nonexistent/etcd"]);
    assert_ne!(missing.code, 0, "{}", missing.stdout);
    assert!(
        format!("{}{}", missing.stdout, missing.stderr).contains("/nonexistent/etcd"),
        "{}",
        missing.stdout
    );
}

/// `stopline bench gateway` measures the real `stopline serve`, the bare proxy and nginx, each
/// its own process, in every round: every figure of every path is there, the ratios are of the
/// same rounds, and nothing it started outlives it (nginx's workers included). An nginx that
/// does not exist is a failed bench naming it.
#[test]
fn bench_gateway_measures_the_served_gateway_beside_bare_and_nginx() {
    let home = Home::new();
    let r = home.run(&["bench", "gateway", "--iterations", "64", "--samples", "2"]);
    r.assert_ok();
    let report = r.json();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert!(
        report["nginx"]
            .as_str()
            .unwrap()
            .starts_with("nginx version"),
        "{report}"
    );
    let latency = report["latency"].as_array().unwrap();
    assert_eq!(latency.len(), 2, "{report}");
    for level in latency {
        let rounds = level["per_round"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{level}");
        for round in rounds {
            assert!(round["direct_p50_us"].as_u64() > Some(0), "{round}");
            for proxy in ["bare", "nginx", "gateway"] {
                assert!(
                    round["p50_us"][proxy].as_f64() > Some(0.0),
                    "{proxy}: {round}"
                );
                assert!(
                    round["p99_us"][proxy].as_f64() > Some(0.0),
                    "{proxy}: {round}"
                );
            }
        }
        assert!(level["ratio_vs_bare"].as_f64().is_some(), "{level}");
        assert!(level["ratio_vs_nginx"].as_f64().is_some(), "{level}");
    }
    let throughput = &report["throughput"];
    for round in throughput["per_round"].as_array().unwrap() {
        assert!(round["direct_rps"].as_f64() > Some(0.0), "{round}");
        assert!(round["recorded_rps"].as_f64() > Some(0.0), "{round}");
        for proxy in ["bare", "nginx", "gateway"] {
            assert!(round["rps"][proxy].as_f64() > Some(0.0), "{proxy}: {round}");
        }
    }
    assert!(
        throughput["gateway_vs_nginx"].as_f64().is_some(),
        "{report}"
    );
    assert!(!home.path().exists(), "the real home was never touched");
    // Nothing it started is left: no bare proxy, and no nginx worker without its master (an
    // nginx ended by SIGKILL leaves its workers behind; another nginx's workers have theirs).
    let orphans = orphaned_nginx_workers();
    assert!(orphans.is_empty(), "nginx workers left behind: {orphans:?}");
    let left = std::process::Command::new("pgrep")
        .args(["-f", "bench bare-proxy"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );

    let missing = home.run(&["bench", "gateway", "--nginx", "/nonexistent/nginx"]);
    assert_ne!(missing.code, 0, "{}", missing.stdout);
    assert!(
        format!("{}{}", missing.stdout, missing.stderr).contains("/nonexistent/nginx"),
        "{}",
        missing.stdout
    );
}

/// Pids of `nginx: worker process`es whose parent is not an nginx master.
fn orphaned_nginx_workers() -> Vec<u32> {
    let cmdline = |pid: &str| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || !cmdline(&pid).starts_with("nginx: worker") {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: state, then the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .unwrap_or("0")
            .to_string();
        if !cmdline(&ppid).starts_with("nginx: master") {
            orphans.push(pid.parse().unwrap());
        }
    }
    orphans
}
