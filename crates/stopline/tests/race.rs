//! Stop wins every race: `engage` and `recover apply` started together, with real processes,
//! many times. Every run ends with the racing stop alive and the gates closed; a recovery that
//! saw the racing latch reports `recovered: false` and FROZEN_SAFE, and one that reports
//! `recovered: true` never names it among what it cleared.

mod util;
use std::sync::{Arc, Barrier};
use util::Home;

#[test]
fn engage_racing_recover_apply_never_yields_a_false_all_clear() {
    let (mut frozen, mut recovered) = (0, 0);
    for round in 0..25 {
        let home = Arc::new(Home::new());
        home.engage("machine", "emergency");
        let plan = home.run_on_pty(
            &[
                "recover", "plan", "--scope", "machine", "--reason", "race", "--by", "operator",
            ],
            &[],
        );
        plan.assert_ok();
        let plan_id = plan.json()["plan"].as_str().unwrap().to_string();
        let barrier = Arc::new(Barrier::new(2));
        let apply = {
            let (home, barrier, plan_id) = (home.clone(), barrier.clone(), plan_id.clone());
            std::thread::spawn(move || {
                barrier.wait();
                home.run_on_pty(
                    &["recover", "apply", "--plan", &plan_id, "--by", "operator"],
                    &[],
                )
            })
        };
        let engage = {
            let (home, barrier) = (home.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                if round % 2 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(300 * (round as u64 % 7)));
                }
                home.run(&[
                    "engage",
                    "--scope",
                    "machine",
                    "--level",
                    "halt-all",
                    "--reason",
                    "racing monitor",
                    "--by",
                    "monitor-race",
                ])
            })
        };
        let apply = apply.join().unwrap();
        let engage = engage.join().unwrap();
        engage.assert_ok();
        apply.assert_ok();
        let racing_file = engage.json()["latch"]["file"].as_str().unwrap().to_string();
        let receipt = apply.json();
        assert!(
            home.entries("latches").contains(&racing_file),
            "round {round}: the racing stop was lost: {receipt}"
        );
        assert!(
            !receipt["cleared"].to_string().contains(&racing_file),
            "round {round}: recovery cleared a latch it never planned"
        );
        assert_eq!(
            home.check(&["--class", "noncritical", "--agent", "probe"])
                .0,
            4,
            "round {round}: gates must be closed"
        );
        if receipt["recovered"] == false {
            frozen += 1;
            assert_eq!(receipt["state"], "FROZEN_SAFE");
            assert!(
                receipt["surviving"].to_string().contains(&racing_file),
                "{receipt}"
            );
            assert_eq!(home.status()["state"], "FROZEN_SAFE");
        } else {
            recovered += 1;
            assert_eq!(receipt["surviving"], serde_json::json!([]));
        }
    }
    eprintln!(
        "races: {frozen} ended FROZEN_SAFE, {recovered} recovered before the racing stop landed"
    );
}
