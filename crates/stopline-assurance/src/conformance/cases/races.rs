//! Stop wins every race (docs/reference.md §3 Recovery, §9): `engage` and `recover apply` started together
//! as real processes, a few rounds with varied offsets. Whatever the interleaving, the racing
//! stop is never lost, never cleared, and the gates stay closed; a recovery that saw it reports
//! `recovered: false` and FROZEN_SAFE.

use super::{slow, Case};
use crate::conformance::pty::Terminal;
use crate::conformance::sandbox::Sandbox;
use crate::conformance::{ensure, harness, Verdict};
use std::sync::Barrier;
use std::time::Duration;

pub const CASES: &[Case] = &[slow(
    "stop_racing_recovery_is_never_lost",
    "engage racing recover apply (real processes, 4 rounds): the racing latch always survives, is never cleared, gates stay closed, and recovered:false comes with FROZEN_SAFE",
    stop_racing_recovery_is_never_lost,
)];

const ROUNDS: u64 = 4;

fn stop_racing_recovery_is_never_lost(s: &Sandbox) -> Verdict {
    let (mut frozen, mut recovered) = (0, 0);
    for round in 0..ROUNDS {
        // A fresh control directory per round, inside the case's directory.
        let home = s.dir().join(format!("round-{round}"));
        let run = |args: &[&str]| s.output(s.command_in(&home, args), None, &args.join(" "));
        let engaged = run(&[
            "engage", "--scope", "machine", "--reason", "first", "--by", "m0",
        ])?;
        ensure(engaged.code == 0, || {
            format!("setup engage: {}", engaged.brief())
        })?;
        let plan = s.pty_home(
            &home,
            &[
                "recover", "plan", "--scope", "machine", "--reason", "race", "--by", "operator",
            ],
            &[],
            Terminal::Controlling,
        )?;
        let plan_id = plan.json()["plan"].as_str().unwrap_or_default().to_string();
        ensure(!plan_id.is_empty(), || format!("plan: {}", plan.brief()))?;
        let barrier = Barrier::new(2);
        let (apply, engage) = std::thread::scope(|scope| {
            let apply = scope.spawn(|| {
                barrier.wait();
                s.pty_home(
                    &home,
                    &["recover", "apply", "--plan", &plan_id, "--by", "operator"],
                    &[],
                    Terminal::Controlling,
                )
            });
            let engage = scope.spawn(|| {
                barrier.wait();
                std::thread::sleep(Duration::from_micros(700 * round));
                run(&[
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
            });
            (apply.join(), engage.join())
        });
        let panicked = |_| harness("a racing thread panicked");
        let (apply, engage) = (apply.map_err(panicked)??, engage.map_err(panicked)??);
        ensure(engage.code == 0 && apply.code == 0, || {
            format!(
                "round {round}: engage {}; apply {}",
                engage.brief(),
                apply.brief()
            )
        })?;
        let racing = engage.json()["latch"]["file"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let receipt = apply.json();
        let latches: Vec<String> = std::fs::read_dir(home.join("latches"))
            .map_err(harness)?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        ensure(latches.contains(&racing), || {
            format!("round {round}: the racing stop was lost: {receipt}")
        })?;
        ensure(!receipt["cleared"].to_string().contains(&racing), || {
            format!("round {round}: recovery cleared a latch it never planned: {receipt}")
        })?;
        let probe = run(&["check", "--class", "noncritical", "--agent", "probe"])?;
        ensure(probe.code == 4, || {
            format!("round {round}: a gate opened: {}", probe.brief())
        })?;
        if receipt["recovered"] == false {
            frozen += 1;
            ensure(
                receipt["state"] == "FROZEN_SAFE"
                    && receipt["surviving"].to_string().contains(&racing),
                || format!("round {round}: {receipt}"),
            )?;
        } else {
            recovered += 1;
            ensure(receipt["surviving"] == serde_json::json!([]), || {
                format!("round {round}: {receipt}")
            })?;
        }
    }
    Ok(format!(
        "{ROUNDS} rounds: racing latch always survived, gates closed; {frozen} ended FROZEN_SAFE, {recovered} recovered before the stop landed"
    ))
}
