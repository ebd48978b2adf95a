//! `stopline model-check`: both checks, one report (docs/reference.md §11), as text or JSON (docs/reference.md §3).
//!
//! The binary calls [`run`] and prints [`Report::text`] or [`Report::json`]; it exits non-zero
//! when [`Report::ok`] is false. The text follows the paper's report: one `[PASS]`/`[FAIL]`
//! line per property, with the state counts it was established over, and every counterexample
//! printed as a trace of (process, step, result) lines.

use crate::fourmode::{check_machine, FourModeReport};
use crate::protocol::{self, Options, Property, ScenarioReport};
use serde_json::{json, Value};
use std::fmt::Write;

/// The whole result.
#[derive(Debug, Clone)]
pub struct Report {
    /// Part 1: the four-mode machine.
    pub four_mode: FourModeReport,
    /// Part 2: one report per protocol scenario.
    pub protocol: Vec<ScenarioReport>,
}

/// Run both checks.
pub fn run(options: &Options) -> Report {
    Report {
        four_mode: check_machine(),
        protocol: protocol::check(options),
    }
}

impl Report {
    /// True when every property holds and no search broke.
    pub fn ok(&self) -> bool {
        self.four_mode.ok() && self.protocol.iter().all(ScenarioReport::ok)
    }

    fn total(&self, f: impl Fn(&ScenarioReport) -> u64) -> u64 {
        self.protocol.iter().map(f).sum()
    }

    fn schedules(&self) -> u64 {
        let all = self
            .protocol
            .iter()
            .fold(0u128, |a, s| a.saturating_add(s.schedules));
        u64::try_from(all).unwrap_or(u64::MAX)
    }

    fn property(&self, p: Property) -> (bool, u64, Option<&protocol::Counterexample>) {
        let checks = self.total(|s| s.checked[p as usize]);
        let example = self.protocol.iter().find_map(|s| s.violations.get(&p));
        (example.is_none(), checks, example)
    }

    /// docs/reference.md §3's JSON (with more fields).
    pub fn json(&self) -> Value {
        let fm = &self.four_mode;
        let four: Vec<Value> = fm
            .checks
            .iter()
            .map(|c| json!({"name": c.name, "pass": c.pass, "detail": c.detail}))
            .collect();
        let properties: Vec<Value> = Property::ALL
            .iter()
            .map(|&p| {
                let (pass, checks, example) = self.property(p);
                let mut v = json!({"name": p.name(), "pass": pass, "checks": checks, "states": self.total(|s| s.states)});
                if let Some(c) = example {
                    v["counterexample"] =
                        json!({"scenario": c.scenario, "detail": c.detail, "trace": c.trace});
                }
                v
            })
            .collect();
        let scenarios: Vec<Value> = self
            .protocol
            .iter()
            .map(|s| {
                json!({
                    "name": s.name, "title": s.title, "processes": s.processes,
                    "states": s.states, "transitions": s.transitions, "terminal_states": s.terminals,
                    "schedules": u64::try_from(s.schedules).unwrap_or(u64::MAX),
                    "crash_points": s.crash_points, "crash_judgments": s.crash_judgments, "kills": s.kills, "restarts": s.restarts,
                    "closed_after_restart": s.closed_after_restart, "process_replays": s.replays,
                    "max_depth": s.max_depth, "violations": s.violation_count,
                    "broken": s.broken, "elapsed_ms": s.elapsed.as_millis() as u64,
                })
            })
            .collect();
        let findings: Vec<Value> = Property::FINDINGS
            .iter()
            .map(|&p| {
                let (holds, checks, example) = self.property(p);
                let mut v = json!({"name": p.name(), "holds": holds, "checks": checks});
                if let Some(c) = example {
                    v["counterexample"] =
                        json!({"scenario": c.scenario, "detail": c.detail, "trace": c.trace});
                }
                v
            })
            .collect();
        json!({
            "ok": self.ok(),
            "four_mode": {
                "pairs": fm.pairs, "accepted": fm.accepted, "rejected": fm.rejected,
                "reachable": fm.reachable, "max_depth": fm.max_depth, "properties": four,
            },
            "protocol": {
                "states": self.total(|s| s.states),
                "schedules": self.schedules(),
                "crash_points": self.total(|s| s.crash_points),
                "restarts": self.total(|s| s.restarts),
                "properties": properties,
                "findings": findings,
                "scenarios": scenarios,
            },
        })
    }

    /// The paper-style report.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let rule = "=".repeat(60);
        let mark = |pass: bool| if pass { "[PASS]" } else { "[FAIL]" };
        let _ = writeln!(
            out,
            "{rule}\nSTOPLINE MODEL CHECK - Exhaustive Verification\n{rule}"
        );
        let fm = &self.four_mode;
        let _ = writeln!(
            out,
            "Four-mode machine. States: 4  Inputs: 5  Transitions: {}\n",
            fm.pairs
        );
        for c in &fm.checks {
            let _ = writeln!(out, "  {} {}: {}", mark(c.pass), c.name, c.detail);
        }
        let _ = writeln!(
            out,
            "\nProtocol: the real store code, every interleaving, a crash at every step"
        );
        for s in &self.protocol {
            let _ = writeln!(
                out,
                "  {}: {} [{}]\n    {} states, {} schedules, {} crash points ({} judged), {} single-process kills, {} restarts ({} left closed), {:.1}s",
                s.name,
                s.title,
                s.processes.join(" | "),
                s.states,
                s.schedules,
                s.crash_points,
                s.crash_judgments,
                s.kills,
                s.restarts,
                s.closed_after_restart,
                s.elapsed.as_secs_f64()
            );
            if let Some(broken) = &s.broken {
                let _ = writeln!(out, "    [FAIL] search stopped: {broken}");
            }
        }
        let states = self.total(|s| s.states);
        let _ = writeln!(out);
        for p in Property::ALL {
            let (pass, checks, example) = self.property(p);
            let _ = writeln!(
                out,
                "  {} {}: {checks} obligations over {states} states",
                mark(pass),
                p.name()
            );
            if let Some(c) = example {
                let _ = writeln!(
                    out,
                    "         counterexample ({}): {}",
                    c.scenario, c.detail
                );
                for line in &c.trace {
                    let _ = writeln!(out, "           {line}");
                }
            }
        }
        for p in Property::FINDINGS {
            let (holds, checks, example) = self.property(p);
            let tag = if holds { "[PASS]" } else { "[NOTE]" };
            let _ = writeln!(
                out,
                "  {tag} {} (finding, stronger than docs/reference.md §11): {checks} obligations",
                p.name()
            );
            if let Some(c) = example {
                let _ = writeln!(out, "         example ({}): {}", c.scenario, c.detail);
                for line in &c.trace {
                    let _ = writeln!(out, "           {line}");
                }
            }
        }
        let failed = Property::ALL
            .iter()
            .filter(|&&p| !self.property(p).0)
            .count()
            + fm.checks.iter().filter(|c| !c.pass).count();
        if self.ok() {
            let _ = writeln!(out, "\nRESULT: ALL PROPERTIES VERIFIED");
        } else {
            let _ = writeln!(
                out,
                "\nRESULT: {failed} PROPERTIES VIOLATED (or a search broke)"
            );
        }
        let _ = writeln!(
            out,
            "Enumeration: 4 states x 5 inputs = 20 transition checks; protocol: {states} states, {} schedules, {} crash points.",
            self.schedules(),
            self.total(|s| s.crash_points)
        );
        out
    }
}
