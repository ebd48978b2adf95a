//! Drain (docs/reference.md §3 Drain): only on the owner console, only after a machine latch, only for a
//! deadline in 1..=3600 s, and it ends FROZEN_SAFE.

use super::{case, slow, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{refused, OPERATOR};
use crate::conformance::{ensure, Verdict};

pub const CASES: &[Case] = &[
    case(
        "drain_requires_machine_latch",
        "drain with no latch, or with only a scoped latch, is refused drain_requires_machine_latch",
        drain_requires_machine_latch,
    ),
    case(
        "drain_deadline_out_of_range",
        "drain deadlines 0, 3601 and -5 are refused drain_deadline_out_of_range and nothing drains",
        drain_deadline_out_of_range,
    ),
    slow(
        "drain_window_ends_frozen_safe",
        "a 2 s drain shows DRAINING, and after its deadline the state is FROZEN_SAFE with every gate closed",
        drain_window_ends_frozen_safe,
    ),
];

fn drain(
    s: &Sandbox,
    deadline: &str,
) -> Result<crate::conformance::sandbox::Out, crate::conformance::CaseError> {
    s.console(&[
        "drain",
        "--deadline",
        deadline,
        "--reason",
        "let prepared work finish",
        "--by",
        OPERATOR,
    ])
}

fn drain_requires_machine_latch(s: &Sandbox) -> Verdict {
    refused(&drain(s, "30")?, "drain_requires_machine_latch", "no latch")?;
    s.engage("agent:w", "emergency")?;
    refused(
        &drain(s, "30")?,
        "drain_requires_machine_latch",
        "only a scoped latch",
    )?;
    Ok("no latch, and agent:w emergency only: drain_requires_machine_latch".into())
}

fn drain_deadline_out_of_range(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    for bad in ["0", "3601", "-5"] {
        refused(
            &drain(s, bad)?,
            "drain_deadline_out_of_range",
            &format!("deadline {bad}"),
        )?;
    }
    let status = s.status()?;
    ensure(status["phase"] != "DRAINING", || {
        format!("a refused drain drains: {}", status["phase"])
    })?;
    Ok("deadlines 0, 3601, -5: drain_deadline_out_of_range; not draining".into())
}

fn drain_window_ends_frozen_safe(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = drain(s, "2")?;
    ensure(out.code == 0, || format!("drain 2: {}", out.brief()))?;
    let during = s.status()?;
    ensure(during["phase"] == "DRAINING", || {
        format!("during the window: {}", during["phase"])
    })?;
    std::thread::sleep(std::time::Duration::from_millis(2300));
    let after = s.status()?;
    ensure(
        after["state"] == "FROZEN_SAFE" && after["phase"] == "FROZEN_SAFE",
        || {
            format!(
                "after the deadline: state {} phase {}",
                after["state"], after["phase"]
            )
        },
    )?;
    let c = s.check(&["--class", "noncritical", "--agent", "a"])?;
    ensure(c.0 == 4, || {
        format!("a gate opened after the drain: {}", c.1)
    })?;
    Ok("DRAINING during the 2 s window; FROZEN_SAFE after; gates closed".into())
}
