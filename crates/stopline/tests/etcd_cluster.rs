//! Losing one member of a three-member etcd cluster changes nothing users see: gates stay open
//! (no permit lapses), an engage still commits, is acknowledged by every gateway and stops all
//! of them, with no warning. Each client's connections start on the first member and spread
//! over the others, so killing the first forces gateways and the CLI to fail over.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::{ids, wait_until, Host};
use std::time::Duration;

#[test]
fn losing_one_member_of_three_changes_nothing_users_see() {
    let mut etcd = cluster::Cluster::start(3);
    let url = etcd.url("/quorum");
    let hosts: Vec<Host> = (0..3)
        .map(|_| Host::new(&url, "ack_timeout_ms = 3000\n"))
        .collect();
    let before = hosts[0].token("before", &[]);
    let after = hosts[0].token("after", &[]);
    let gateways: Vec<_> = hosts.iter().map(Host::serve).collect();
    let mut all: Vec<String> = gateways.iter().map(|g| g.id()).collect();
    all.sort();

    etcd.kill(0);
    // For well over a permit, every gateway keeps admitting as before.
    let lapsed = wait_until(Duration::from_secs(4), || {
        gateways.iter().any(|g| g.check(&before).0 != "allow")
    });
    assert!(
        lapsed.is_none(),
        "a gateway closed after losing one member of three"
    );

    let receipt = hosts[1].engage("agent:before", "emergency");
    assert!(
        receipt["warnings"].as_array().unwrap().is_empty(),
        "{receipt}"
    );
    assert_eq!(ids(&receipt["acknowledged_by"]), all, "{receipt}");
    for g in &gateways {
        assert_eq!(g.check(&before).0, "block");
        assert_eq!(g.check(&after).0, "allow");
    }
    let status = hosts[2].run(&["status"]).json();
    assert_eq!(status["faults"], serde_json::json!([]), "{status}");
    assert_eq!(
        status["uncovered_servers"],
        serde_json::json!([]),
        "{status}"
    );
}
