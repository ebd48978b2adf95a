//! Many hosts, one stop: three `stopline --control etcd://… serve` gateways, each with its own
//! local home, sharing one etcd prefix. An engage through any one of them, or through the CLI
//! of any host, makes all three refuse the next call, and its receipt names all three as
//! acknowledged. Tokens minted on the issuing host verify on every host through the published
//! `keys/verify.pub`; a host that is not the issuer refuses to mint.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::{ids, Host};

const CONFIG: &str = "ack_timeout_ms = 3000\n";

#[test]
fn an_engage_through_any_gateway_or_the_cli_stops_all_three_and_all_three_acknowledge() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/three");
    let hosts: Vec<Host> = (0..3).map(|_| Host::new(&url, CONFIG)).collect();
    // The first host issues; the others verify with the key it published.
    let w1 = hosts[0].token("worker-one", &[]);
    let w2 = hosts[0].token("worker-two", &[]);
    let w3 = hosts[0].token("worker-three", &[]);
    let refused = hosts[1].run(&["token", "issue", "--agent", "intruder"]);
    assert_eq!(refused.code_str(), "token_invalid", "{}", refused.stderr);

    let gateways: Vec<_> = hosts.iter().map(Host::serve).collect();
    let mut all: Vec<String> = gateways.iter().map(|g| g.id()).collect();
    all.sort();
    for g in &gateways {
        assert_eq!(g.check(&w1).0, "allow");
    }

    // Through a gateway (any validly signed token may stop): the agent itself pulls the stop.
    let reply = gateways[1].engage(&w1, "agent:worker-one", "halt-all");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let receipt = reply.json();
    assert_eq!(ids(&receipt["acknowledged_by"]), all, "{receipt}");
    assert_eq!(receipt["unacknowledged"], serde_json::json!([]));
    for g in &gateways {
        assert_eq!(
            g.check(&w1),
            ("block".into(), "break_glass_contained".into())
        );
        assert_eq!(g.check(&w2).0, "allow", "an unrelated agent keeps working");
    }

    // Through the CLI of a host that runs no issuer: an emergency revokes by epoch too.
    let receipt = hosts[2].engage("agent:worker-two", "emergency");
    assert_eq!(ids(&receipt["acknowledged_by"]), all, "{receipt}");
    assert!(
        receipt["warnings"].as_array().unwrap().is_empty(),
        "{receipt}"
    );
    for g in &gateways {
        let (decision, code) = g.check(&w2);
        assert_eq!(decision, "block");
        assert!(
            ["break_glass_contained", "stale_control_epoch"].contains(&code.as_str()),
            "{code}"
        );
        assert_eq!(g.check(&w3).0, "allow");
    }

    // Every host's status shows both stops and no uncovered gateway.
    let status = hosts[1].run(&["status"]).json();
    assert_eq!(status["latches"].as_array().unwrap().len(), 2, "{status}");
    assert_eq!(
        status["uncovered_servers"],
        serde_json::json!([]),
        "{status}"
    );
    assert_eq!(status["faults"], serde_json::json!([]));
}
