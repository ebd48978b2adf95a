//! The control view: everything a gate needs to decide, read once, judged purely.
//!
//! The store builds a view from fresh reads (failing closed into `faults`); the CLI's `check`,
//! the gateway's admission and the model checker's gate all call [`ControlView::decide`]. There
//! is exactly one admission path, so no surface can disagree with another about a stop.

use crate::admission::{admit, Decision, Mode, TaskClass};
use crate::epoch::IndexedEpochMap;
use crate::latch::{ActiveLatch, LatchRef};
use crate::ops::Blocks;
use crate::refusal::{Refusal, RefusalCode};
use crate::state::{ControlState, StateRecord};
use crate::subject::Subject;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A consistent snapshot of the control state.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlView {
    /// Every active latch, fail-closed entries included.
    pub latches: Vec<ActiveLatch>,
    /// The confirmed epoch map, indexed once for every decision made on this view.
    pub epoch: IndexedEpochMap,
    /// `state.json` (RUNNING when absent).
    pub state: StateRecord,
    /// Reasons the control state cannot be trusted. Any fault closes every gate.
    pub faults: Vec<Refusal>,
    /// Targets blocked by operations in doubt: target → who each one blocks. The key `*` (an
    /// unreadable registry) blocks every target for everyone.
    pub blocked_targets: BTreeMap<String, Vec<Blocker>>,
}

/// One operation in doubt that blocks new operations on its target (docs/reference.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Blocker {
    /// The operation id (for `*`: why the registry cannot be read).
    pub op: String,
    /// Whom it blocks.
    pub blocks: Blocks,
}

impl Blocker {
    /// The refusal message: the operation, whom it blocks, and the command that ends it.
    pub fn message(&self, target: &str) -> String {
        let whom = match &self.blocks {
            Blocks::Agent(root) => format!("agent {root} (and its sub-agents)"),
            Blocks::Everyone => "every agent".to_string(),
            Blocks::Nobody => "nobody".to_string(),
        };
        format!(
            "operation {} on {target} has no known outcome; it blocks {whom} on this target until the owner reconciles it at the console: stopline ops reconcile {} --outcome committed|failed|abandoned --reason TEXT --by NAME",
            self.op, self.op
        )
    }
}

/// The authority a caller presents: the epoch its token was minted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority {
    /// The token's issue epoch.
    pub issue_epoch: u64,
}

/// The receipt of one admission decision (docs/reference.md §3, check). Its JSON also carries, when the call
/// was not allowed, `error: {code, message, latch?}` (docs/reference.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReceipt {
    /// allow, queue or block.
    pub decision: Decision,
    /// The subject's mode.
    pub mode: Mode,
    /// Why it was not allowed (null when allowed).
    pub code: Option<RefusalCode>,
    /// Ids of the latches covering the subject.
    pub latches: Vec<String>,
    /// A human explanation.
    pub message: String,
    /// The latch that caused the refusal, when one did (docs/reference.md §4).
    pub latch: Option<LatchRef>,
}

impl Serialize for CheckReceipt {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            decision: Decision,
            mode: Mode,
            code: Option<RefusalCode>,
            latches: &'a [String],
            message: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<Refusal>,
        }
        Wire {
            decision: self.decision,
            mode: self.mode,
            code: self.code,
            latches: &self.latches,
            message: &self.message,
            error: self.refusal(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CheckReceipt {
    /// What [`Serialize`] writes (an `action` a route adds is ignored): `decision`, `mode`,
    /// `latches` and `message` must be there; the latch is the `error`'s when it names the
    /// receipt's code.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            decision: Decision,
            mode: Mode,
            code: Option<RefusalCode>,
            latches: Vec<String>,
            message: String,
            #[serde(default)]
            error: Option<Refusal>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let latch = wire
            .error
            .filter(|refusal| Some(refusal.code) == wire.code)
            .and_then(|refusal| refusal.latch)
            .map(|latch| *latch);
        Ok(CheckReceipt {
            decision: wire.decision,
            mode: wire.mode,
            code: wire.code,
            latches: wire.latches,
            message: wire.message,
            latch,
        })
    }
}

impl CheckReceipt {
    /// A block with `code` (used for token failures and internal errors as well).
    pub fn block(
        mode: Mode,
        code: RefusalCode,
        message: impl Into<String>,
        latches: Vec<String>,
    ) -> Self {
        CheckReceipt {
            decision: Decision::Block,
            mode,
            code: Some(code),
            latches,
            message: message.into(),
            latch: None,
        }
    }

    /// A block with `refusal`'s code, message and latch.
    pub fn refused(mode: Mode, refusal: Refusal, latches: Vec<String>) -> Self {
        CheckReceipt {
            latch: refusal.latch.map(|l| *l),
            ..CheckReceipt::block(mode, refusal.code, refusal.message, latches)
        }
    }

    /// The refusal of a call that was not allowed (its code, message and latch); `None` when
    /// it was allowed.
    pub fn refusal(&self) -> Option<Refusal> {
        let code = self.code?;
        Some(Refusal::new(code, self.message.clone()).with_latch(self.latch.clone()))
    }

    /// [`CheckReceipt::refusal`] of a receipt known not to allow, `break_glass_contained` when
    /// it carries no code, its message led by `context` when given.
    pub fn to_refusal(&self, context: Option<&str>) -> Refusal {
        let mut refusal = self.refusal().unwrap_or_else(|| {
            Refusal::new(RefusalCode::BreakGlassContained, self.message.clone())
        });
        if let Some(context) = context {
            refusal.message = format!("{context}: {}", refusal.message);
        }
        refusal
    }

    /// True when the text names the mode: not for a refusal about the token itself, nor for a
    /// refused authority while no latch covers the caller (docs/reference.md §4).
    pub fn shows_mode(&self) -> bool {
        shows_mode(self.code, self.mode)
    }
}

/// True when a refusal with `code` for a caller in `mode` is printed with the mode label: a
/// refusal about the token (`token_invalid`, `token_expired`) never is, a refused authority
/// (`stale_control_epoch`, `future_control_epoch`) only while a latch covers the caller — a mode
/// label must never name a latch that does not exist (docs/reference.md §4).
pub fn shows_mode(code: Option<RefusalCode>, mode: Mode) -> bool {
    match code {
        Some(RefusalCode::TokenInvalid | RefusalCode::TokenExpired) => false,
        Some(RefusalCode::StaleControlEpoch | RefusalCode::FutureControlEpoch) => {
            mode != Mode::Disengaged
        }
        _ => true,
    }
}

/// What `stopline check` prints for people: `allow (DISENGAGED)`, or `block (EMERGENCY):
/// <code>: <message>` when it was not allowed — without the mode when it is beside the point
/// (`block: token_invalid: …`).
impl std::fmt::Display for CheckReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.decision.as_str())?;
        if self.shows_mode() {
            write!(f, " ({})", self.mode)?;
        }
        if let Some(code) = self.code {
            write!(f, ": {code}: {}", self.message)?;
        }
        Ok(())
    }
}

impl CheckReceipt {
    /// The exit code `stopline check` ends with: 0 allow, 3 queue, 4 block.
    pub fn exit_code(&self) -> i32 {
        match self.decision {
            Decision::Allow => 0,
            Decision::Queue => 3,
            Decision::Block => 4,
        }
    }
}

impl ControlView {
    /// A view of an empty, healthy control directory.
    pub fn empty() -> ControlView {
        ControlView {
            latches: Vec::new(),
            epoch: IndexedEpochMap::default(),
            state: StateRecord::running(),
            faults: Vec::new(),
            blocked_targets: BTreeMap::new(),
        }
    }

    /// A view that closes every gate because of `fault`.
    pub fn closed(fault: Refusal) -> ControlView {
        ControlView {
            faults: vec![fault],
            ..ControlView::empty()
        }
    }

    /// The latches covering `subject`.
    pub fn covering<'a>(
        &'a self,
        subject: &'a Subject,
    ) -> impl Iterator<Item = &'a ActiveLatch> + 'a {
        self.latches.iter().filter(move |l| l.covers(subject))
    }

    /// The subject's mode from its covering latches.
    pub fn mode_for(&self, subject: &Subject) -> Mode {
        Mode::from_levels(self.covering(subject).map(|l| l.level))
    }

    /// The latch a refusal of `subject` names: the highest level covering it, the latest of
    /// those (docs/reference.md §4).
    pub fn cause_for(&self, subject: &Subject) -> Option<LatchRef> {
        self.covering(subject)
            .max_by(|a, b| {
                let ts = |l: &ActiveLatch| l.record.as_ref().map(|r| r.ts.clone());
                a.level.cmp(&b.level).then_with(|| ts(a).cmp(&ts(b)))
            })
            .map(ActiveLatch::summary)
    }

    /// True when any active latch has scope machine.
    pub fn has_machine_latch(&self) -> bool {
        self.latches
            .iter()
            .any(|l| l.scope == crate::scope::Scope::Machine)
    }

    /// Decide one call: `class` must already be derived from the caller's role (a claim of
    /// `critical` by anyone but a critical token is noncritical). `target`, when given, is
    /// checked against unresolved operations.
    pub fn decide(
        &self,
        subject: &Subject,
        class: TaskClass,
        authority: Option<Authority>,
        target: Option<&str>,
        now_unix_ms: i64,
    ) -> CheckReceipt {
        let latches: Vec<String> = self.covering(subject).map(ActiveLatch::id).collect();
        let mode = self.mode_for(subject);
        let cause = self.cause_for(subject);
        let others = latches.len().saturating_sub(1);
        let explain = |lead: &str, advice: bool| -> String {
            let Some(cause) = &cause else {
                return lead.to_string();
            };
            let mut text = format!("{lead}: {}", cause.describe(now_unix_ms));
            if others > 0 {
                text.push_str(&format!(
                    "; {others} more latch(es) cover this caller: {}",
                    latches
                        .iter()
                        .filter(|l| **l != cause.id)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if advice {
                text.push_str(&format!("; {}", cause.advice()));
            }
            text
        };
        if let Some(fault) = self.faults.first() {
            return CheckReceipt::block(
                Mode::Emergency,
                fault.code,
                fault.message.clone(),
                latches,
            );
        }
        if let Some(authority) = authority {
            let standing = self.epoch.authority_status(authority.issue_epoch, subject);
            if let Some(refusal) = standing.refusal(authority.issue_epoch) {
                let message = match &cause {
                    Some(_) => explain(&refusal.message, true),
                    None => format!(
                        "{}; do not retry: this token stays refused for good, ask an operator for a new one",
                        refusal.message
                    ),
                };
                return CheckReceipt {
                    latch: cause.clone(),
                    ..CheckReceipt::block(mode, refusal.code, message, latches)
                };
            }
        }
        match self.state.effective(now_unix_ms) {
            ControlState::Running => {}
            state @ (ControlState::RecoveryPending
            | ControlState::FrozenSafe
            | ControlState::Draining) => {
                return CheckReceipt {
                    latch: cause.clone(),
                    ..CheckReceipt::block(
                        Mode::Emergency,
                        RefusalCode::BreakGlassContained,
                        explain(&format!("the machine is {}", state.as_str()), true),
                        latches,
                    )
                }
            }
        }
        let decision = admit(mode, class);
        let (code, message) = match decision {
            Decision::Allow => (None, String::new()),
            Decision::Queue => (
                Some(RefusalCode::HaltedNoncritical),
                format!(
                    "{}; it resumes when the stop is lifted",
                    explain("noncritical work is held", false)
                ),
            ),
            Decision::Block => (
                Some(RefusalCode::BreakGlassContained),
                explain("the call was refused", true),
            ),
        };
        if decision == Decision::Allow && target.is_some() {
            // An operation registry that cannot be read (a journal torn in its middle,
            // docs/reference.md §5) closes every target, for every gate alike.
            if let Some(why) = self.blocked_targets.get("*").and_then(|b| b.first()) {
                return CheckReceipt::block(
                    mode,
                    RefusalCode::UnresolvedOperation,
                    format!("the operation registry cannot be read: {}", why.op),
                    latches,
                );
            }
        }
        if decision == Decision::Allow {
            if let Some((target, blocker)) = target.and_then(|t| {
                let blockers = self.blocked_targets.get(t)?;
                Some((t, blockers.iter().find(|b| b.blocks.covers(subject))?))
            }) {
                return CheckReceipt::block(
                    mode,
                    RefusalCode::UnresolvedOperation,
                    blocker.message(target),
                    latches,
                );
            }
        }
        CheckReceipt {
            decision,
            mode,
            code,
            latches,
            message,
            latch: if decision == Decision::Allow {
                None
            } else {
                cause
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Level;
    use crate::scope::{Name, Scope};

    fn latch(scope: Scope, level: Level) -> ActiveLatch {
        ActiveLatch {
            file: "latch_x.json".into(),
            scope,
            level,
            record: None,
            problem: None,
        }
    }

    fn worker() -> Subject {
        Subject::proven(vec![Name::parse("w").unwrap()], vec![], vec![])
    }

    #[test]
    fn a_fault_closes_the_gate_for_critical_work_too() {
        let view = ControlView::closed(Refusal::new(RefusalCode::ControlWalCorrupt, "x"));
        let r = view.decide(&worker(), TaskClass::Critical, None, None, 0);
        assert_eq!(
            (r.decision, r.code),
            (Decision::Block, Some(RefusalCode::ControlWalCorrupt))
        );
    }

    #[test]
    fn unprovable_identity_is_covered_by_every_agent_latch() {
        let mut view = ControlView::empty();
        view.latches.push(latch(
            Scope::Agent(Name::parse("other").unwrap()),
            Level::HaltAll,
        ));
        let proven = view.decide(&worker(), TaskClass::Noncritical, None, None, 0);
        assert_eq!(proven.decision, Decision::Allow);
        let claimed = Subject::unprovable(Some(Name::parse("w").unwrap()), vec![], vec![]);
        let r = view.decide(&claimed, TaskClass::Noncritical, None, None, 0);
        assert_eq!(r.decision, Decision::Block);
    }

    #[test]
    fn unresolved_target_blocks_only_that_target_and_only_its_agent() {
        let mut view = ControlView::empty();
        view.blocked_targets.insert(
            "mcp:s:t".into(),
            vec![Blocker {
                op: "op_1".into(),
                blocks: Blocks::Agent("w".into()),
            }],
        );
        let r = view.decide(&worker(), TaskClass::Noncritical, None, Some("mcp:s:t"), 0);
        assert_eq!(r.code, Some(RefusalCode::UnresolvedOperation));
        assert!(r.message.contains("op_1") && r.message.contains("stopline ops reconcile op_1"));
        assert!(r.message.contains("agent w"), "{}", r.message);
        let r = view.decide(&worker(), TaskClass::Noncritical, None, Some("mcp:s:u"), 0);
        assert_eq!(r.decision, Decision::Allow);
        let bystander = Subject::proven(vec![Name::parse("b").unwrap()], vec![], vec![]);
        let r = view.decide(&bystander, TaskClass::Noncritical, None, Some("mcp:s:t"), 0);
        assert_eq!(r.decision, Decision::Allow, "another agent is not blocked");
        view.blocked_targets
            .get_mut("mcp:s:t")
            .unwrap()
            .push(Blocker {
                op: "op_2".into(),
                blocks: Blocks::Everyone,
            });
        let r = view.decide(&bystander, TaskClass::Noncritical, None, Some("mcp:s:t"), 0);
        assert_eq!(r.code, Some(RefusalCode::UnresolvedOperation));
    }
}
