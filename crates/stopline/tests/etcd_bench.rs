//! Figures: engage to acknowledgement from three gateways through etcd, p50/p99.
//!
//! Three `stopline --control etcd://… serve` gateways (separate homes, one etcd member on
//! loopback); a series of CLI engages, each of a fresh agent scope, alternating halt-all and
//! emergency (which also advances the epoch). The figure is the receipt's `last_ack_us`: from
//! the start of the engage call to the last of the three acknowledgements arriving through etcd
//! (the latch transaction, the watch reaching each gateway, each gateway's view refresh and
//! in-flight drain, its acknowledgement key, and the engaging side's watch). Printed, never
//! asserted beyond "every engage was acknowledged by all three".

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::{ids, percentile, Host};

const ENGAGES: usize = 40;

#[test]
fn engage_to_acknowledgement_from_three_gateways_through_etcd() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/bench");
    let hosts: Vec<Host> = (0..3)
        .map(|_| Host::new(&url, "ack_timeout_ms = 3000\n"))
        .collect();
    hosts[0].token("warmup", &[]);
    let gateways: Vec<_> = hosts.iter().map(Host::serve).collect();
    let mut all: Vec<String> = gateways.iter().map(|g| g.id()).collect();
    all.sort();
    hosts[0].engage("agent:warmup", "halt-all");

    let (mut acked_ms, mut contained_ms) = (Vec::new(), Vec::new());
    for i in 0..ENGAGES {
        let level = if i % 2 == 0 { "halt-all" } else { "emergency" };
        let receipt = hosts[i % 3].engage(&format!("agent:bench-{i}"), level);
        assert_eq!(ids(&receipt["acknowledged_by"]), all, "{receipt}");
        acked_ms.push(receipt["last_ack_us"].as_f64().expect("last_ack_us") / 1000.0);
        contained_ms.push(receipt["time_to_contained_us"].as_f64().unwrap() / 1000.0);
    }
    let line = |name: &str, samples: &[f64]| {
        format!(
            "{name}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={})",
            percentile(samples, 50.0),
            percentile(samples, 99.0),
            percentile(samples, 100.0),
            samples.len()
        )
    };
    println!("etcd bench, three gateways, one member on loopback:");
    println!(
        "  {}",
        line("engage start -> latch committed in etcd", &contained_ms)
    );
    println!(
        "  {}",
        line("engage start -> last of 3 acknowledgements", &acked_ms)
    );
}
