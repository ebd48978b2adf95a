//! The per-call rules every gate applies beside [`ControlView::decide`]: the `allowed_tools`
//! list, whether a stream already admitted must be cut, and when a view is too old to judge a
//! token by.
//!
//! The gateway (`stopline serve`) and the stdio governor (`stopline mcp proxy`) both call these,
//! so the two cannot drift apart again (they had: each cut on conditions the other ignored, and
//! nothing said why). Pure functions of their arguments: the caller passes the view and the time.

use crate::epoch::AuthorityStatus;
use crate::view::{Authority, ControlView};
use crate::{ControlState, Mode, Refusal, RefusalCode, Subject};

/// Whether `tool` of MCP server `server` may be called under its `allowed_tools` list (docs/reference.md §8;
/// no list allows every tool). The refusal is `tool_not_allowed`, which the caller also counts
/// toward the agent's `unauthorized_calls` breaker.
pub fn allowed_tool(allowed: Option<&[String]>, server: &str, tool: &str) -> Result<(), Refusal> {
    match allowed {
        Some(allowed) if !allowed.iter().any(|t| t == tool) => Err(Refusal::new(
            RefusalCode::ToolNotAllowed,
            format!("{tool:?} is not in {server}'s allowed_tools"),
        )),
        _ => Ok(()),
    }
}

impl Authority {
    /// True when a token of this authority was minted under an epoch `view` has not seen yet:
    /// a token minted a moment ago, after the view was read. Judged as it is, it would be
    /// refused as from the future; every gate reads the control plane once more first.
    pub fn minted_after(&self, view: &ControlView) -> bool {
        self.issue_epoch > view.epoch.seq
    }
}

/// Why a stream already admitted to `subject` under `authority` must be cut now, if it must.
///
/// It is cut by anything that means its admission no longer stands: a fault in the view (a
/// state that cannot be trusted), a machine state other than RUNNING (contained, draining), an
/// EMERGENCY covering the subject (`break_glass_contained`, whether or not the view has read
/// the epoch advance that emergency made), or an authority a stop has made stale. A halt does
/// not cut: it refuses new work and lets admitted work finish.
///
/// One fault does not cut: `distributed_unavailable`. An outage of the distributed plane is
/// not a stop. The stdio governor keeps no permit, so every read that fails to reach etcd shows
/// this fault at once; cutting on it would end every stream at the first network blip. A
/// gateway keeps its last view through an outage (its permit refuses new noncritical work
/// instead), so its view holds this fault only before its first read, when the gate is closed
/// and no stream exists to cut.
pub fn must_cut(
    view: &ControlView,
    subject: &Subject,
    authority: Authority,
    now_ms: i64,
) -> Option<Refusal> {
    let cause = cut_cause(view, subject, authority, now_ms)?;
    Some(match cause {
        CutCause::Fault(fault) => fault.clone(),
        CutCause::Contained => {
            Refusal::new(RefusalCode::BreakGlassContained, "the machine is contained")
        }
        CutCause::Emergency => {
            // Named like every refusal a latch causes (docs/reference.md §4): who, why, scope, level, age.
            let cause = view.cause_for(subject);
            let message = match &cause {
                Some(cause) => format!(
                    "an emergency stop covers this agent; the stream was cut: {}; {}",
                    cause.describe(now_ms),
                    cause.advice()
                ),
                None => "an emergency stop covers this agent; the stream was cut".to_string(),
            };
            Refusal::new(RefusalCode::BreakGlassContained, message).with_latch(cause)
        }
        CutCause::Stale => Refusal::new(
            RefusalCode::StaleControlEpoch,
            "the token was revoked by a stop",
        ),
    })
}

/// Why remote work `subject` started at another agent (an A2A task, docs/reference.md §8)
/// must be ended now, if it must: everything [`must_cut`] cuts for, and a HALT_ALL covering
/// the subject too. A halt lets the gateway's own calls finish, since they end by themselves;
/// a remote agent's task runs on for as long as the remote likes, so a halt that let it would
/// halt nothing. HALT_NONCRITICAL ends nothing (new sends queue).
pub fn must_end_remote(
    view: &ControlView,
    subject: &Subject,
    authority: Authority,
    now_ms: i64,
) -> Option<Refusal> {
    if let Some(refusal) = must_cut(view, subject, authority, now_ms) {
        return Some(refusal);
    }
    (view.mode_for(subject) == Mode::HaltAll).then(|| {
        view.decide(
            subject,
            crate::TaskClass::Noncritical,
            Some(authority),
            None,
            now_ms,
        )
        .to_refusal(Some("the remote task was cut"))
    })
}

/// True exactly when [`must_end_remote`] gives a refusal, without wording it.
pub fn ends_remote(
    view: &ControlView,
    subject: &Subject,
    authority: Authority,
    now_ms: i64,
) -> bool {
    cut_cause(view, subject, authority, now_ms).is_some() || view.mode_for(subject) == Mode::HaltAll
}

/// What [`must_cut`] cuts for, before it is put in words: whether a view change concerns a call
/// in flight is decided without building any message, so a gateway can ask it of every call it
/// holds at each change and wake only those it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutCause<'a> {
    /// A fault in the view (any but `distributed_unavailable`).
    Fault(&'a Refusal),
    /// A machine state other than RUNNING.
    Contained,
    /// An EMERGENCY covering the subject.
    Emergency,
    /// An authority a stop has made stale.
    Stale,
}

/// Why a stream already admitted must be cut now, if it must: exactly when [`must_cut`] gives
/// a refusal, and for the same reason.
pub fn cut_cause<'a>(
    view: &'a ControlView,
    subject: &Subject,
    authority: Authority,
    now_ms: i64,
) -> Option<CutCause<'a>> {
    if let Some(fault) = view
        .faults
        .iter()
        .find(|f| f.code != RefusalCode::DistributedUnavailable)
    {
        return Some(CutCause::Fault(fault));
    }
    if view.state.effective(now_ms) != ControlState::Running {
        return Some(CutCause::Contained);
    }
    // The emergency before the epoch: an agent emergency publishes its latch first and
    // advances the epoch after, and a gateway's watcher puts the latch in the view before it
    // reads the advance. A stream cut between the two views and one cut after both must say
    // the same thing, so a covering emergency names itself whether or not the advance has
    // been read; only a stale token no emergency covers (one a recovery left behind) is cut
    // as stale.
    if view.mode_for(subject) == Mode::Emergency {
        return Some(CutCause::Emergency);
    }
    let standing = view.epoch.authority_status(authority.issue_epoch, subject);
    matches!(
        standing,
        AuthorityStatus::Stale { .. } | AuthorityStatus::Folded { .. }
    )
    .then_some(CutCause::Stale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ActiveLatch, Level, Name, Scope, StateRecord};

    fn subject() -> Subject {
        Subject::proven(vec![Name::parse("worker").unwrap()], Vec::new(), Vec::new())
    }

    fn latch(scope: Scope, level: Level) -> ActiveLatch {
        ActiveLatch {
            file: format!("latch_{level}.json"),
            scope,
            level,
            record: None,
            problem: None,
        }
    }

    fn code(view: &ControlView, issue_epoch: u64) -> Option<RefusalCode> {
        must_cut(view, &subject(), Authority { issue_epoch }, 0).map(|r| r.code)
    }

    /// A cut an emergency causes names its latch like every other refusal a latch causes.
    #[test]
    fn an_emergency_cut_names_its_latch() {
        let mut view = ControlView::empty();
        view.latches.push(latch(
            Scope::Agent(Name::parse("worker").unwrap()),
            Level::Emergency,
        ));
        let cut = must_cut(&view, &subject(), Authority { issue_epoch: 0 }, 0).unwrap();
        let named = cut.latch.as_deref().expect("the cut carries its latch");
        assert_eq!(named.id, "latch_emergency");
        assert_eq!(
            (named.scope.as_str(), named.level.as_str()),
            ("agent:worker", "emergency")
        );
        assert!(cut.message.contains("latch_emergency"), "{}", cut.message);
        assert!(cut.message.contains("do not retry"), "{}", cut.message);
    }

    #[test]
    fn what_cuts_a_stream_and_what_does_not() {
        let mut view = ControlView::empty();
        assert_eq!(code(&view, 0), None, "a clear view");
        view.latches.push(latch(Scope::Machine, Level::HaltAll));
        assert_eq!(code(&view, 0), None, "a halt lets admitted work finish");
        view.latches.push(latch(
            Scope::Agent(Name::parse("worker").unwrap()),
            Level::Emergency,
        ));
        assert_eq!(code(&view, 0), Some(RefusalCode::BreakGlassContained));

        let mut stale = ControlView::empty();
        stale.epoch = stale.epoch.advanced(&Scope::Machine).unwrap().indexed();
        assert_eq!(code(&stale, 0), Some(RefusalCode::StaleControlEpoch));
        assert_eq!(code(&stale, 1), None, "minted after the advance");

        let mut contained = ControlView::empty();
        contained.state = StateRecord {
            state: ControlState::FrozenSafe,
            ..StateRecord::running()
        };
        assert_eq!(code(&contained, 0), Some(RefusalCode::BreakGlassContained));

        let outage = ControlView::closed(Refusal::new(RefusalCode::DistributedUnavailable, "x"));
        assert_eq!(code(&outage, 0), None, "an outage is not a stop");
        let corrupt = ControlView::closed(Refusal::new(RefusalCode::ControlWalCorrupt, "x"));
        assert_eq!(code(&corrupt, 0), Some(RefusalCode::ControlWalCorrupt));
    }

    /// An agent emergency is two steps a gateway can see apart: the latch (its watcher adds it
    /// at once) and the epoch advance (read a moment later). A stream cut in between and one
    /// cut after both get the same code, so what an agent sees does not depend on when its
    /// exchange task happened to run (it did: the frameworks tests saw `stale_control_epoch`
    /// under load where they expect `break_glass_contained`).
    #[test]
    fn an_emergency_cuts_with_one_code_before_and_after_its_epoch_advance_is_read() {
        let worker = Scope::Agent(Name::parse("worker").unwrap());
        let mut latch_only = ControlView::empty();
        latch_only
            .latches
            .push(latch(worker.clone(), Level::Emergency));
        let mut latch_and_epoch = latch_only.clone();
        latch_and_epoch.epoch = latch_and_epoch.epoch.advanced(&worker).unwrap().indexed();
        assert_eq!(code(&latch_only, 0), Some(RefusalCode::BreakGlassContained));
        assert_eq!(
            code(&latch_and_epoch, 0),
            Some(RefusalCode::BreakGlassContained)
        );
        // Once the emergency is recovered (the recovery advances the epoch again), the token
        // from before it is still cut, as stale.
        let mut recovered = ControlView::empty();
        recovered.epoch = latch_and_epoch.epoch.advanced(&worker).unwrap().indexed();
        assert_eq!(code(&recovered, 0), Some(RefusalCode::StaleControlEpoch));
    }

    /// Remote work ends at what cuts a stream and at a HALT_ALL too, never at HALT_NONCRITICAL.
    #[test]
    fn what_ends_remote_work_and_what_does_not() {
        let ends = |view: &ControlView| {
            let authority = Authority { issue_epoch: 0 };
            let worded = must_end_remote(view, &subject(), authority, 0);
            assert_eq!(
                worded.is_some(),
                ends_remote(view, &subject(), authority, 0)
            );
            worded
        };
        let mut view = ControlView::empty();
        assert!(ends(&view).is_none(), "a clear view");
        view.latches
            .push(latch(Scope::Machine, Level::HaltNoncritical));
        assert!(
            ends(&view).is_none(),
            "a noncritical halt queues sends, ends nothing"
        );
        view.latches.push(latch(Scope::Machine, Level::HaltAll));
        let halted = ends(&view).expect("a halt-all ends remote work");
        assert_eq!(halted.code, RefusalCode::BreakGlassContained);
        assert!(
            halted.message.contains("latch_halt-all"),
            "{}",
            halted.message
        );
        view.latches.push(latch(
            Scope::Agent(Name::parse("worker").unwrap()),
            Level::Emergency,
        ));
        assert_eq!(ends(&view).unwrap().code, RefusalCode::BreakGlassContained);
    }

    #[test]
    fn allowed_tools_lists_what_may_be_called() {
        let list = vec!["read".to_string()];
        assert!(allowed_tool(None, "s", "anything").is_ok());
        assert!(allowed_tool(Some(&list), "s", "read").is_ok());
        let refused = allowed_tool(Some(&list), "s", "write").unwrap_err();
        assert_eq!(refused.code, RefusalCode::ToolNotAllowed);
        assert_eq!(refused.message, "\"write\" is not in s's allowed_tools");
    }
}
