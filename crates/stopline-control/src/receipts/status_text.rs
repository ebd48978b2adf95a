//! The text of `stopline status`: what `--json` and the status page show, in words a person
//! reads at a terminal. The phase explained and per scope (one stopped agent is not the whole
//! machine frozen), what `state` means, the latches with their age, workers and their
//! quiescence, gateways and what they acknowledged, unresolved operations with the command that
//! reconciles them, and budgets near their limit.

use super::status::WorkerView;
use super::status::{operation_text, StatusReceipt};
use crate::acks::GATEWAY_PROTOCOL;
use std::fmt::{self, Write as _};
use stopline_core::ack::ServerRecord;
use stopline_core::phase::Phase;
use stopline_core::text::inert;
use stopline_core::{ActiveLatch, ControlState, Level, Scope};

/// What a scope stops, in words.
fn scope_words(scope: &Scope) -> String {
    match scope {
        Scope::Machine => "everything on this machine".to_string(),
        Scope::Agent(name) => format!("the agent {name} and every sub-agent it delegated to"),
        Scope::Project(root) => format!("every agent working under {}", root.display()),
        Scope::Run(id) => format!("the evaluation run {id}"),
        Scope::Label(label) => format!("every agent whose token carries the label {label}"),
        Scope::Token {
            jti,
            delegates: false,
        } => format!("the token {jti}"),
        Scope::Token {
            jti,
            delegates: true,
        } => {
            format!("the token {jti} and every token delegated under it")
        }
    }
}

/// What a level does, in words.
fn level_words(level: Level) -> &'static str {
    match level {
        Level::HaltNoncritical => "paused: noncritical work is held, critical work continues",
        Level::HaltAll => "halted: noncritical work is refused, tokens stay valid",
        Level::Emergency => "emergency: everything is refused, tokens minted before it are revoked",
    }
}

/// How a latch at `level` of `scope` is lifted.
fn lifted_by(scope: &Scope, level: Level) -> String {
    match level {
        Level::Emergency => format!(
            "lifted only by recovery at the owner console: stopline recover plan --scope {scope} --reason … --by <operator>"
        ),
        _ => format!(
            "lifted by an operator or monitor: stopline disengage --scope {scope} --reason … --by <operator>"
        ),
    }
}

/// The phase in words, from what the receipt observed.
fn phase_words(receipt: &StatusReceipt) -> String {
    let unresolved = receipt.unresolved.entries().count();
    match receipt.phase {
        Phase::Running => "no stop is engaged: every gate admits work".to_string(),
        Phase::Draining => {
            let until = receipt
                .state_record
                .deadline
                .as_deref()
                .unwrap_or("its deadline");
            format!(
                "a machine drain lets work prepared before the stop finish until {until}; nothing new is admitted"
            )
        }
        Phase::RecoveryPending => "a machine recovery is being applied (or stopped midway): every gate is closed; re-run `stopline recover apply` with the same plan".to_string(),
        Phase::Killing => {
            let mut why = Vec::new();
            let stopping = receipt
                .workers
                .iter()
                .filter(|w| covered(w) && !quiescent(w))
                .count();
            if stopping > 0 {
                why.push(format!(
                    "{stopping} covered worker(s) not yet observed quiescent"
                ));
            }
            if !receipt.uncovered_servers.is_empty() {
                why.push(format!(
                    "{} live gateway(s) have not acknowledged every latch",
                    receipt.uncovered_servers.len()
                ));
            }
            if why.is_empty() {
                why.push("the worker census could not be taken whole".to_string());
            }
            format!("the stop is still taking effect: {}", why.join("; "))
        }
        Phase::Reconciling if unresolved > 0 => format!(
            "contained and quiescent, but {unresolved} operation(s) are unresolved: reconcile them (below)"
        ),
        Phase::Reconciling => "contained and quiescent, but an operation journal cannot be read (below)".to_string(),
        Phase::FrozenSafe => "every stop below is contained: its workers are quiescent, every live gateway acknowledged it, no operation is in doubt".to_string(),
    }
}

fn covered(worker: &WorkerView) -> bool {
    worker.covered
}

fn quiescent(worker: &WorkerView) -> bool {
    worker.registration.finished()
}

/// The scope and level a latch is enforced as, and whether its record could be trusted.
fn enforced(latch: &ActiveLatch) -> (&Scope, Level) {
    match &latch.record {
        Some(record) => (&record.scope, record.level),
        None => (&latch.scope, latch.level),
    }
}

/// Which scopes are stopped, in words: the whole machine only when a machine latch or a fault
/// says so, else each stopped scope and that everything outside them runs.
fn what_is_stopped(receipt: &StatusReceipt, out: &mut String) {
    if !receipt.faults.is_empty() {
        out.push_str(
            "\n  the control state cannot be trusted (faults below): EVERY gate on this machine is closed until it is repaired",
        );
        return;
    }
    if receipt.latches.is_empty() {
        match receipt.phase {
            Phase::Running => {}
            _ => out.push_str("\n  no latch is active; the machine-wide state decides (below)"),
        }
        return;
    }
    let machine = receipt
        .latches
        .iter()
        .map(enforced)
        .filter(|(scope, _)| **scope == Scope::Machine)
        .map(|(_, level)| level)
        .max();
    for latch in &receipt.latches {
        let (scope, level) = enforced(latch);
        let _ = write!(
            out,
            "\n  {scope} ({}): {} — {}",
            level.as_str(),
            scope_words(scope),
            level_words(level)
        );
    }
    match machine {
        Some(level) => {
            let _ = write!(
                out,
                "\n  the WHOLE MACHINE is stopped ({}): no agent on it works",
                level.as_str()
            );
        }
        None => out.push_str(
            "\n  the machine itself is not stopped: agents, projects and runs outside these scopes keep working",
        ),
    }
}

/// What `state` means.
fn state_words(state: &str) -> &'static str {
    match state {
        s if s == ControlState::Running.as_str() => {
            "no machine-wide drain or recovery is in progress (scoped stops are the latches, not this)"
        }
        s if s == ControlState::Draining.as_str() => {
            "a machine drain is open: only work prepared before it may dispatch, until the deadline"
        }
        s if s == ControlState::RecoveryPending.as_str() => {
            "a machine recovery started and has not finished: every gate is closed"
        }
        s if s == ControlState::FrozenSafe.as_str() => {
            "a machine drain ended: what it still held was refused and recorded"
        }
        _ => "unknown",
    }
}

fn latch_text(latch: &ActiveLatch, now_ms: i64, out: &mut String) {
    let summary = latch.summary();
    let age = match summary.age(now_ms) {
        Some(age) => format!("engaged {age} ago"),
        None => "engaged at an unknown time".to_string(),
    };
    let (scope, level) = enforced(latch);
    match &latch.record {
        Some(record) => {
            let _ = write!(
                out,
                "\n  {scope}  {}  by {}  {age} ({})  {}\n    reason: {:?}\n    {}",
                level.as_str(),
                inert(&record.by),
                inert(&record.ts),
                summary.id,
                record.reason,
                lifted_by(scope, level)
            );
        }
        None => {
            let _ = write!(
                out,
                "\n  {}: an entry that cannot be trusted ({}), enforced as a machine emergency\n    {}",
                latch.file,
                latch.problem.as_deref().unwrap_or("unreadable"),
                lifted_by(scope, level)
            );
        }
    }
}

/// One worker's line. Its run, agent and method are made inert for the terminal: they come
/// from whoever started it.
fn worker_text(worker: &WorkerView, out: &mut String) {
    let registration = &worker.registration;
    let state = registration.state.as_str();
    let observed = registration.observed.as_ref();
    let quiet = if worker.supervisor_gone {
        format!("registered {state}, its SUPERVISOR IS GONE (nothing enforces a stop on it but an engage)")
    } else if quiescent(worker) {
        match observed.and_then(|o| o.quiescent_observed_at.as_deref()) {
            Some(at) => format!("quiescent (observed {})", inert(at)),
            None => format!("{state} (quiescent)"),
        }
    } else if covered(worker) {
        format!("{state}: NOT yet observed quiescent")
    } else {
        state.to_string()
    };
    let _ = write!(
        out,
        "\n  run {} agent {} pid {}: {quiet}; {}; method {}",
        inert(&registration.run),
        inert(&registration.agent),
        registration
            .pid()
            .map_or("?".to_string(), |pid| pid.to_string()),
        if covered(worker) {
            "covered by a stop"
        } else {
            "not covered"
        },
        inert(observed.and_then(|o| o.method.as_deref()).unwrap_or("?")),
    );
}

fn gateway_text(gateway: &ServerRecord, latches: &[ActiveLatch], out: &mut String) {
    let missing: Vec<&str> = latches
        .iter()
        .map(|l| l.file.as_str())
        .filter(|f| !gateway.acknowledged.iter().any(|a| a == f))
        .collect();
    let acks = if latches.is_empty() {
        "no latch to acknowledge".to_string()
    } else if missing.is_empty() {
        format!("acknowledged every latch ({})", latches.len())
    } else {
        format!(
            "has NOT acknowledged {} of {} latch(es): {}",
            missing.len(),
            latches.len(),
            missing.join(", ")
        )
    };
    let _ = write!(out, "\n  {} at {}: {acks}", gateway.id, gateway.listen);
    if gateway.protocol < GATEWAY_PROTOCOL {
        let _ = write!(
            out,
            "; speaks the older protocol {} (counts as uncovered)",
            gateway.protocol
        );
    }
    if gateway.degraded {
        out.push_str(
            "; degraded: its change notification is lost, only periodic reloads refresh its view",
        );
    }
}

impl fmt::Display for StatusReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = write!(
            out,
            "phase: {} — {}",
            super::status::phase_name(self.phase),
            phase_words(self)
        );
        what_is_stopped(self, &mut out);
        let _ = write!(
            out,
            "\nstate: {} — the machine-wide control state: {}",
            self.state,
            state_words(&self.state)
        );
        let _ = write!(
            out,
            "\nepoch: {} (tokens minted before a scope's last emergency are revoked)",
            self.epoch.seq
        );
        for fault in &self.faults {
            let _ = write!(out, "\nfault {}: {}", fault.code, fault.message);
        }
        if !self.observe_only.is_empty() {
            let _ = write!(
                out,
                "\nobserve only (recorded and alerted, never stopped): {}",
                inert(&self.observe_only.join(", "))
            );
        }
        if self.latches.is_empty() {
            out.push_str("\nlatches: none");
        } else {
            let _ = write!(out, "\nlatches ({}):", self.latches.len());
            for latch in &self.latches {
                latch_text(latch, self.observed_ms, &mut out);
            }
        }
        if self.workers.is_empty() {
            out.push_str("\nworkers: none registered");
        } else {
            let _ = write!(out, "\nworkers ({}):", self.workers.len());
            for worker in &self.workers {
                worker_text(worker, &mut out);
            }
        }
        let _ = write!(
            out,
            "\nquiescence confirmed: {} ({})",
            if self.affected_worker_quiescence_confirmed {
                "yes"
            } else {
                "NO"
            },
            if self.affected_worker_quiescence_confirmed {
                "every covered worker observed quiescent, every live gateway acknowledged"
            } else {
                "a covered worker, the census or a gateway is not yet confirmed"
            }
        );
        if self.gateways.is_empty() {
            out.push_str("\ngateways: none live");
        } else {
            let _ = write!(out, "\ngateways ({} live):", self.gateways.len());
            for gateway in &self.gateways {
                gateway_text(gateway, &self.latches, &mut out);
            }
        }
        for note in &self.gateway_notes {
            let _ = write!(out, "\n  note: {note}");
        }
        let census = &self.unresolved;
        let entries: Vec<_> = census.entries().collect();
        if entries.is_empty() && census.errors.is_empty() {
            out.push_str("\nunresolved operations: none");
        } else {
            let _ = write!(out, "\nunresolved operations ({}):", entries.len());
            for entry in &entries {
                let _ = write!(
                    out,
                    "\n  {}\n    reconcile: stopline ops reconcile {} --outcome committed|failed|abandoned --reason … --by <operator>",
                    operation_text(&entry.operation, entry.in_flight, entry.doubt.as_deref()),
                    entry.operation.op
                );
            }
            for error in &census.errors {
                let _ = write!(out, "\n  journal unreadable: {error}");
            }
        }
        let near: Vec<_> = self
            .gateways
            .iter()
            .flat_map(|g| g.budgets_near_limit.iter().map(move |b| (g, b)))
            .collect();
        if self.gateways.is_empty() {
            out.push_str(
                "\nbudgets near their limit: unknown here (the live gateways hold the budgets; none is live)",
            );
        } else if near.is_empty() {
            out.push_str("\nbudgets near their limit: none (of those the live gateways hold)");
        } else {
            let _ = write!(out, "\nbudgets near their limit ({}):", near.len());
            for (gateway, budget) in near {
                let _ = write!(
                    out,
                    "\n  agent {} token {}…: {} used {} + reserved {} of {} ({:.0}%, at {})",
                    budget.agent,
                    budget.token,
                    budget.kind,
                    budget.used,
                    budget.reserved,
                    budget.limit,
                    if budget.limit > 0.0 {
                        (budget.used + budget.reserved) / budget.limit * 100.0
                    } else {
                        100.0
                    },
                    gateway.id
                );
            }
        }
        for warning in &self.warnings {
            let _ = write!(out, "\nwarning: {warning}");
        }
        f.write_str(&out)
    }
}
